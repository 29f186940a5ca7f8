//! The `events` table: its columns, once. The DDL (single node and cluster), the column
//! list of the enricher's insert, and the row it writes all follow [`COLUMNS`]; a test
//! decodes an encoded row by the columns' types, so the two cannot drift apart.

use super::{column_definitions, column_names, Column, SchemaVariant, Topology};
use crate::clickhouse_versions;
use clickhouse::Row;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

const fn col(name: &'static str, ch_type: &'static str) -> Column {
    Column { name, ch_type }
}

/// Every column of `events`, in the order of the table and of [`EventRow`].
pub const COLUMNS: &[Column] = &[
    col("event_id", "UUID"),
    col("site_id", "UInt32"),
    col("timestamp", "DateTime"),
    col("received_at", "DateTime"),
    col("type", "String"),
    col("event_name", "String"),
    col("properties", "String"),
    col("hostname", "String"),
    col("pathname", "String"),
    col("querystring", "String"),
    col("page_title", "String"),
    col("referrer", "String"),
    col("channel", "String"),
    col("user_id", "String"),
    col("session_id", "String"),
    col("language", "String"),
    col("screen_width", "UInt16"),
    col("screen_height", "UInt16"),
    col("country", "String"),
    col("region", "String"),
    col("city", "String"),
    col("lat", "Float64"),
    col("lon", "Float64"),
    col("browser", "String"),
    col("browser_version", "String"),
    col("operating_system", "String"),
    col("operating_system_version", "String"),
    col("device_type", "String"),
    col("is_bot", "UInt8"),
    col("ip", "String"),
    // Migration 4: the identity and browser fields, and web vitals.
    col("anonymous_id", "String"),
    col("tag", "String"),
    col("app_version", "String"),
    col("device_model", "String"),
    col("feature_flags", "String"),
    col("lcp", "Nullable(Float64)"),
    col("cls", "Nullable(Float64)"),
    col("inp", "Nullable(Float64)"),
    col("fcp", "Nullable(Float64)"),
    col("ttfb", "Nullable(Float64)"),
    // Migration 9: the client's own times, as it sent them (NULL: not sent).
    col("client_timestamp", "Nullable(DateTime)"),
    col("sent_at", "Nullable(DateTime)"),
    // Migration 10: whether `user_id` is the enricher's visitor id of the event's UTC day.
    col("daily_visitor", "UInt8"),
];

/// How many of [`COLUMNS`] the table had when migration 1 created it; migrations 4, 9
/// and 10 add the rest ([`added_columns`]).
pub const V1_COLUMNS: usize = 30;
/// How many it had after migration 4.
pub const V4_COLUMNS: usize = 40;
/// How many it had after migration 9.
pub const V9_COLUMNS: usize = 42;

/// The migrations that add columns to `events`, each with the range of [`COLUMNS`] it
/// adds.
pub const ADDING_MIGRATIONS: [(u32, std::ops::Range<usize>); 3] = [
    (4, V1_COLUMNS..V4_COLUMNS),
    (9, V4_COLUMNS..V9_COLUMNS),
    (10, V9_COLUMNS..COLUMNS.len()),
];

/// The columns migration `migration` (4, 9 or 10) adds, as a variant types them.
pub fn added_columns(migration: u32, variant: SchemaVariant) -> Vec<Column> {
    let (_, range) = ADDING_MIGRATIONS
        .iter()
        .find(|(m, _)| *m == migration)
        .unwrap_or_else(|| panic!("migration {migration} adds no column to events"));
    columns(variant)[range.clone()].to_vec()
}

/// The `String` columns whose values repeat (a few dozen to a few thousand distinct
/// values): `LowCardinality(String)` in [`SchemaVariant::LowCardinality`]. Not `city`
/// (a full geo database has well over 100,000), nor free text (paths, titles, referrers),
/// ids or IPs. On the wire (RowBinary) a LowCardinality(String) is a String: the
/// enricher's row and every reader are the same for both variants.
pub const LOW_CARDINALITY: &[&str] = &[
    "type",
    "event_name",
    "hostname",
    "channel",
    "language",
    "country",
    "region",
    "browser",
    "browser_version",
    "operating_system",
    "operating_system_version",
    "device_type",
];

/// The columns of `events` as a variant creates them: [`COLUMNS`], with
/// [`LOW_CARDINALITY`]'s types changed in [`SchemaVariant::LowCardinality`].
pub fn columns(variant: SchemaVariant) -> Vec<Column> {
    COLUMNS
        .iter()
        .map(|c| match variant {
            SchemaVariant::LowCardinality if LOW_CARDINALITY.contains(&c.name) => Column {
                name: c.name,
                ch_type: "LowCardinality(String)",
            },
            _ => *c,
        })
        .collect()
}

/// The table the product reads and the enricher inserts into: on a cluster, the
/// `Distributed` table over [`LOCAL_TABLE`].
pub const TABLE: &str = "events";
/// On a cluster, each shard's replicated table.
pub const LOCAL_TABLE: &str = "events_local";

/// Duplicates (a redelivery, a client's retry) share `event_id`, and so this whole key:
/// ReplacingMergeTree keeps one of them.
const ORDER_BY: &str = "(site_id, timestamp, event_id)";
const PARTITION_BY: &str = "toYYYYMM(timestamp)";
/// Which shard an event goes to: a hash of its id, so every copy of an event lands on
/// the same shard and deduplicates there ([`clickhouse_versions::EVENT_ID_HASH`], the
/// same expression on every version).
pub const SHARDING_KEY: &str = clickhouse_versions::EVENT_ID_HASH;

/// `INSERT INTO events (…) FORMAT RowBinary`: the enricher's insert.
pub fn insert_rowbinary() -> String {
    format!(
        "INSERT INTO {TABLE} ({}) FORMAT RowBinary",
        column_names(COLUMNS)
    )
}

/// The DDL of `events` with the portable types, `{db}` standing for the database.
pub fn create_statements(topology: &Topology) -> Vec<String> {
    create_statements_for(topology, SchemaVariant::Portable)
}

/// The DDL of `events` for a variant, `{db}` standing for the database.
pub fn create_statements_for(topology: &Topology, variant: SchemaVariant) -> Vec<String> {
    let columns = column_definitions(&columns(variant)[..V1_COLUMNS]);
    match topology {
        Topology::SingleNode => vec![format!(
            "CREATE TABLE IF NOT EXISTS {{db}}.{TABLE} {columns}\n\
             ENGINE = ReplacingMergeTree\nPARTITION BY {PARTITION_BY}\nORDER BY {ORDER_BY}"
        )],
        Topology::Cluster { name } => vec![
            // `{shard}` and `{replica}` are each server's macros.
            format!(
                "CREATE TABLE IF NOT EXISTS {{db}}.{LOCAL_TABLE} ON CLUSTER {name} {columns}\n\
                 ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{{shard}}/{{db}}/{LOCAL_TABLE}', '{{replica}}')\n\
                 PARTITION BY {PARTITION_BY}\nORDER BY {ORDER_BY}"
            ),
            distributed_statement(name),
        ],
    }
}

/// The `Distributed` table `events` over the cluster's local tables, with their columns.
fn distributed_statement(cluster: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {{db}}.{TABLE} ON CLUSTER {cluster} AS {{db}}.{LOCAL_TABLE}\n\
         ENGINE = Distributed({cluster}, {{db}}, {LOCAL_TABLE}, {SHARDING_KEY})"
    )
}

/// Migrations 4, 9 and 10: the columns they add to `events` ([`ADDING_MIGRATIONS`]), one
/// `ALTER` per column so that a column another run added first is only an "already
/// exists" to skip. On a cluster the local tables get them by an `ALTER` the migration
/// runner sends to one server of each shard ([`crate::ch::Db::alter`] says why not
/// `ON CLUSTER`); the `Distributed` table is made again from them instead (it holds no
/// rows: inserts through it are synchronous), since ClickHouse refuses an `ALTER` of a
/// table that is not replicated when the cluster's shards replicate internally (code
/// 371, "Table events isn't replicated, but shard #2 is replicated according to its
/// cluster definition").
pub fn add_column_statements(
    migration: u32,
    topology: &Topology,
    variant: SchemaVariant,
) -> Vec<String> {
    let alters = |table: &str| -> Vec<String> {
        added_columns(migration, variant)
            .into_iter()
            .map(|c| {
                format!(
                    "ALTER TABLE {{db}}.{table} ADD COLUMN {} {}",
                    c.name, c.ch_type
                )
            })
            .collect()
    };
    match topology {
        Topology::SingleNode => alters(TABLE),
        Topology::Cluster { name } => {
            let mut out = alters(LOCAL_TABLE);
            out.push(format!(
                "DROP TABLE IF EXISTS {{db}}.{TABLE} ON CLUSTER {name}"
            ));
            out.push(distributed_statement(name));
            out
        }
    }
}

/// One row of `events`: what the enricher writes. Field names and order are [`COLUMNS`]'.
#[derive(Debug, Clone, Default, PartialEq, Row, Serialize, Deserialize)]
pub struct EventRow {
    #[serde(with = "clickhouse::serde::uuid")]
    pub event_id: Uuid,
    pub site_id: u32,
    /// Epoch seconds (DateTime).
    pub timestamp: u32,
    pub received_at: u32,
    #[serde(rename = "type")]
    pub event_type: String,
    pub event_name: String,
    pub properties: String,
    pub hostname: String,
    pub pathname: String,
    pub querystring: String,
    pub page_title: String,
    pub referrer: String,
    pub channel: String,
    pub user_id: String,
    pub session_id: String,
    pub language: String,
    pub screen_width: u16,
    pub screen_height: u16,
    pub country: String,
    pub region: String,
    pub city: String,
    pub lat: f64,
    pub lon: f64,
    pub browser: String,
    pub browser_version: String,
    pub operating_system: String,
    pub operating_system_version: String,
    pub device_type: String,
    pub is_bot: u8,
    pub ip: String,
    pub anonymous_id: String,
    pub tag: String,
    pub app_version: String,
    pub device_model: String,
    pub feature_flags: String,
    pub lcp: Option<f64>,
    pub cls: Option<f64>,
    pub inp: Option<f64>,
    pub fcp: Option<f64>,
    pub ttfb: Option<f64>,
    /// The client's `timestamp` as sent, epoch seconds (Nullable(DateTime)).
    pub client_timestamp: Option<u32>,
    /// The client's `sent_at`, epoch seconds (Nullable(DateTime)).
    pub sent_at: Option<u32>,
    /// 1 when `user_id` is the visitor id the enricher derived for the event's UTC day
    /// (no user id sent, none preset by an import): such an id is never seen on another
    /// UTC day, which lets the Stats API's daily rollup add up visitors day by day.
    pub daily_visitor: u8,
}

impl EventRow {
    /// Appends the row in ClickHouse's RowBinary format, columns as in [`COLUMNS`]
    /// (the test below decodes it by their types).
    ///
    /// A batch keeps its rows encoded (about a third of the memory of the structs, and
    /// ready to resend unchanged when an insert is retried).
    pub fn write_row_binary(&self, out: &mut Vec<u8>) {
        // UUID: the high then the low 64 bits, each little-endian (as the clickhouse crate).
        let (high, low) = self.event_id.as_u64_pair();
        out.extend_from_slice(&high.to_le_bytes());
        out.extend_from_slice(&low.to_le_bytes());
        out.extend_from_slice(&self.site_id.to_le_bytes());
        out.extend_from_slice(&self.timestamp.to_le_bytes());
        out.extend_from_slice(&self.received_at.to_le_bytes());
        for s in [
            &self.event_type,
            &self.event_name,
            &self.properties,
            &self.hostname,
            &self.pathname,
            &self.querystring,
            &self.page_title,
            &self.referrer,
            &self.channel,
            &self.user_id,
            &self.session_id,
            &self.language,
        ] {
            put_string(out, s);
        }
        out.extend_from_slice(&self.screen_width.to_le_bytes());
        out.extend_from_slice(&self.screen_height.to_le_bytes());
        put_string(out, &self.country);
        put_string(out, &self.region);
        put_string(out, &self.city);
        out.extend_from_slice(&self.lat.to_le_bytes());
        out.extend_from_slice(&self.lon.to_le_bytes());
        for s in [
            &self.browser,
            &self.browser_version,
            &self.operating_system,
            &self.operating_system_version,
            &self.device_type,
        ] {
            put_string(out, s);
        }
        out.push(self.is_bot);
        put_string(out, &self.ip);
        for s in [
            &self.anonymous_id,
            &self.tag,
            &self.app_version,
            &self.device_model,
            &self.feature_flags,
        ] {
            put_string(out, s);
        }
        for v in [self.lcp, self.cls, self.inp, self.fcp, self.ttfb] {
            put_nullable_f64(out, v);
        }
        put_nullable_u32(out, self.client_timestamp);
        put_nullable_u32(out, self.sent_at);
        out.push(self.daily_visitor);
    }
}

/// Epoch milliseconds as a `DateTime` holds them: whole seconds, saturated to its range
/// (1970 to 2106): a client's clock may say anything.
pub fn datetime_secs(ms: i64) -> u32 {
    ms.div_euclid(1000).clamp(0, i64::from(u32::MAX)) as u32
}

/// RowBinary `Nullable(DateTime)`: 1 for null, else 0 and the epoch seconds.
fn put_nullable_u32(out: &mut Vec<u8>, v: Option<u32>) {
    match v {
        None => out.push(1),
        Some(n) => {
            out.push(0);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// RowBinary `Nullable(Float64)`: 1 for null, else 0 and the value.
fn put_nullable_f64(out: &mut Vec<u8>, v: Option<f64>) {
    match v {
        None => out.push(1),
        Some(f) => {
            out.push(0);
            out.extend_from_slice(&f.to_le_bytes());
        }
    }
}

/// RowBinary `String`: the length as unsigned LEB128, then the bytes.
fn put_string(out: &mut Vec<u8>, s: &str) {
    let mut n = s.len() as u64;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_lengths_are_leb128() {
        let mut out = Vec::new();
        put_string(&mut out, "");
        assert_eq!(out, [0]);
        out.clear();
        put_string(&mut out, &"a".repeat(127));
        assert_eq!(out[0], 127);
        assert_eq!(out.len(), 128);
        out.clear();
        put_string(&mut out, &"a".repeat(300));
        // 300 = 0b10_0101100: low seven bits with the continuation bit, then 2.
        assert_eq!(&out[..2], &[0xac, 0x02]);
        assert_eq!(out.len(), 302);
    }

    /// Reads one RowBinary value of a column's type, as ClickHouse would.
    fn read_value(ch_type: &str, bytes: &mut &[u8]) -> serde_json::Value {
        fn take<'a>(bytes: &mut &'a [u8], n: usize) -> &'a [u8] {
            let (head, rest) = bytes.split_at(n);
            *bytes = rest;
            head
        }
        match ch_type {
            "UUID" => {
                let high = u64::from_le_bytes(take(bytes, 8).try_into().unwrap());
                let low = u64::from_le_bytes(take(bytes, 8).try_into().unwrap());
                serde_json::json!(Uuid::from_u64_pair(high, low).to_string())
            }
            "UInt8" => serde_json::json!(take(bytes, 1)[0]),
            "UInt16" => serde_json::json!(u16::from_le_bytes(take(bytes, 2).try_into().unwrap())),
            "UInt32" | "DateTime" => {
                serde_json::json!(u32::from_le_bytes(take(bytes, 4).try_into().unwrap()))
            }
            "Float64" => serde_json::json!(f64::from_le_bytes(take(bytes, 8).try_into().unwrap())),
            "Nullable(Float64)" | "Nullable(DateTime)" => match take(bytes, 1)[0] {
                1 => serde_json::Value::Null,
                _ => read_value(&ch_type["Nullable(".len()..ch_type.len() - 1], bytes),
            },
            "String" => {
                let (mut len, mut shift) = (0usize, 0);
                loop {
                    let b = take(bytes, 1)[0];
                    len |= usize::from(b & 0x7f) << shift;
                    shift += 7;
                    if b & 0x80 == 0 {
                        break;
                    }
                }
                serde_json::json!(std::str::from_utf8(take(bytes, len)).unwrap())
            }
            other => panic!("no RowBinary reader for {other}: add one here"),
        }
    }

    /// A row whose every field differs from every other, so a swap shows.
    fn distinct_row() -> EventRow {
        let mut n = 0u8;
        let mut s = || {
            n += 1;
            format!("value {n} ✓")
        };
        EventRow {
            event_id: Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210),
            site_id: 70_001,
            timestamp: 1_700_000_001,
            received_at: 1_700_000_002,
            event_type: s(),
            event_name: s(),
            properties: s(),
            hostname: s(),
            pathname: s(),
            querystring: s(),
            page_title: s(),
            referrer: s(),
            channel: s(),
            user_id: s(),
            session_id: s(),
            language: s(),
            screen_width: 1441,
            screen_height: 901,
            country: s(),
            region: s(),
            city: s(),
            lat: 51.5,
            lon: -0.25,
            browser: s(),
            browser_version: s(),
            operating_system: s(),
            operating_system_version: s(),
            device_type: s(),
            is_bot: 1,
            ip: s().repeat(40),
            anonymous_id: s(),
            tag: s(),
            app_version: s(),
            device_model: s(),
            feature_flags: s(),
            lcp: Some(2500.5),
            cls: Some(0.125),
            inp: None,
            fcp: Some(900.0),
            ttfb: Some(0.0),
            client_timestamp: Some(1_699_990_000),
            sent_at: Some(1_699_996_400),
            daily_visitor: 1,
        }
    }

    /// The DDL's columns and the row's encoding agree: decoding an encoded row by the
    /// columns' names and types, in order, gives back every field of the row.
    #[test]
    fn the_row_encodes_exactly_the_columns() {
        let row = distinct_row();
        let mut out = Vec::new();
        row.write_row_binary(&mut out);
        let mut bytes = &out[..];
        let decoded: serde_json::Map<String, serde_json::Value> = COLUMNS
            .iter()
            .map(|c| (c.name.to_string(), read_value(c.ch_type, &mut bytes)))
            .collect();
        assert!(bytes.is_empty(), "{} bytes left over", bytes.len());
        let mut expected = serde_json::to_value(&row).unwrap();
        expected["event_id"] = serde_json::json!(row.event_id.to_string());
        assert_eq!(serde_json::Value::Object(decoded), expected);
    }

    /// ClickHouse refuses an `ALTER` of the `Distributed` table when the shards
    /// replicate internally (code 371): migrations 4, 9 and 10 make it again instead.
    #[test]
    fn on_a_cluster_only_the_local_tables_are_altered() {
        let cluster = Topology::Cluster { name: "c".into() };
        for (migration, _) in ADDING_MIGRATIONS {
            let ddl = add_column_statements(migration, &cluster, SchemaVariant::Portable);
            assert!(ddl
                .iter()
                .filter(|s| s.starts_with("ALTER"))
                .all(|s| s.starts_with(&format!("ALTER TABLE {{db}}.{LOCAL_TABLE} ADD "))));
            let n = ddl.len();
            assert_eq!(
                ddl[n - 2],
                format!("DROP TABLE IF EXISTS {{db}}.{TABLE} ON CLUSTER c")
            );
            assert_eq!(
                ddl[n - 1],
                create_statements_for(&cluster, SchemaVariant::Portable)[1]
            );
        }
    }

    /// Each column is created once: by migration 1, 4, 9 or 10, in the order of [`COLUMNS`].
    #[test]
    fn the_migrations_add_every_column_once_in_order() {
        let mut names: Vec<&str> = COLUMNS[..V1_COLUMNS].iter().map(|c| c.name).collect();
        for (migration, _) in ADDING_MIGRATIONS {
            names.extend(
                added_columns(migration, SchemaVariant::Portable)
                    .iter()
                    .map(|c| c.name),
            );
        }
        assert_eq!(names, COLUMNS.iter().map(|c| c.name).collect::<Vec<_>>());
        assert_eq!(
            added_columns(9, SchemaVariant::Portable),
            [
                col("client_timestamp", "Nullable(DateTime)"),
                col("sent_at", "Nullable(DateTime)")
            ]
        );
        assert_eq!(
            add_column_statements(9, &Topology::SingleNode, SchemaVariant::LowCardinality),
            [
                "ALTER TABLE {db}.events ADD COLUMN client_timestamp Nullable(DateTime)",
                "ALTER TABLE {db}.events ADD COLUMN sent_at Nullable(DateTime)"
            ]
        );
    }

    #[test]
    fn datetimes_are_whole_seconds_within_their_range() {
        assert_eq!(datetime_secs(1_700_000_000_999), 1_700_000_000);
        assert_eq!(datetime_secs(-1), 0);
        assert_eq!(datetime_secs(i64::MIN), 0);
        assert_eq!(datetime_secs(i64::MAX), u32::MAX);
        assert_eq!(datetime_secs(4_294_967_295_999), u32::MAX);
    }

    #[test]
    fn the_ddl_and_the_insert_name_every_column() {
        for variant in [SchemaVariant::Portable, SchemaVariant::LowCardinality] {
            for topology in [Topology::SingleNode, Topology::Cluster { name: "c".into() }] {
                let mut ddl = create_statements_for(&topology, variant);
                for (migration, _) in ADDING_MIGRATIONS {
                    ddl.extend(add_column_statements(migration, &topology, variant));
                }
                let ddl = ddl.join("\n");
                for c in columns(variant) {
                    assert!(
                        ddl.contains(&format!("    {} {},", c.name, c.ch_type))
                            || ddl.contains(&format!("    {} {}\n)", c.name, c.ch_type))
                            || ddl.contains(&format!("ADD COLUMN {} {}", c.name, c.ch_type)),
                        "{}",
                        c.name
                    );
                }
            }
        }
        assert_eq!(
            create_statements(&Topology::SingleNode),
            create_statements_for(&Topology::SingleNode, SchemaVariant::Portable)
        );
        assert!(insert_rowbinary().contains(&column_names(COLUMNS)));
    }

    #[test]
    fn the_low_cardinality_variant_changes_only_its_string_columns() {
        let lc = columns(SchemaVariant::LowCardinality);
        assert_eq!(lc.len(), COLUMNS.len());
        for (l, c) in lc.iter().zip(COLUMNS) {
            assert_eq!(l.name, c.name);
            if LOW_CARDINALITY.contains(&c.name) {
                assert_eq!(c.ch_type, "String", "{}", c.name);
                assert_eq!(l.ch_type, "LowCardinality(String)");
            } else {
                assert_eq!(l, c);
            }
        }
        assert_eq!(
            LOW_CARDINALITY.len(),
            lc.iter()
                .filter(|c| c.ch_type.starts_with("LowCardinality"))
                .count(),
            "every name in LOW_CARDINALITY is a column"
        );
        assert_eq!(columns(SchemaVariant::Portable), COLUMNS);
    }
}
