//! Versioned schema migrations, recorded in `schema_migrations`.
//!
//! ClickHouse has no transactions or locks, so safety under concurrent runs comes from
//! every statement being idempotent (`IF NOT EXISTS`), from tolerating the "already
//! exists" answers a racing process can get, in every version's words
//! ([`clickhouse_versions::is_already_exists`], [`clickhouse_versions::is_duplicate_column`]),
//! and from a ReplacingMergeTree record table in which a migration recorded twice is still
//! one version.
//!
//! On a cluster ([`Topology::Cluster`]) every `CREATE` and `DROP` runs `ON CLUSTER`:
//! `events` is a `Distributed` table over each shard's `ReplicatedReplacingMergeTree`,
//! and the registry (`sites`, `api_keys`) and `schema_migrations` are replicated to every
//! server (one replication group spanning all shards), so each server answers registry
//! reads alone. An `ALTER` runs once per replication group instead ([`Db::alter`]).

use super::{events, SchemaVariant, Topology};
use crate::ch::Db;
use crate::clickhouse_versions;
use crate::CommonError;
use clickhouse::Row;
use serde::{Deserialize, Serialize};

pub struct Migration {
    pub version: u32,
    pub name: &'static str,
}

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "events",
    },
    Migration {
        version: 2,
        name: "sites and api_keys registry",
    },
    Migration {
        version: 3,
        name: "site domains and retention; secrets",
    },
    Migration {
        version: 4,
        name: "events: anonymous id, browser fields, web vitals",
    },
    Migration {
        version: 5,
        name: "identity: person_aliases and person_traits",
    },
    Migration {
        version: 6,
        name: "privacy: erasure requests and ledger; retention runs",
    },
    Migration {
        version: 7,
        name: "trust: the browser path's switches; claims and traits ranked by trust",
    },
    Migration {
        version: 8,
        name: "read the data: a site's time zone; API key scopes",
    },
    Migration {
        version: 9,
        name: "events: the client's timestamp and sent_at",
    },
    Migration {
        version: 10,
        name: "stats rollup: events.daily_visitor; stats_days and stats_touched",
    },
    Migration {
        version: 11,
        name: "stats rollup: stats_breakdown_days",
    },
    Migration {
        version: 12,
        name: "stats rollup: stats_days carried over to stats_total_days, ordered by kind first",
    },
    Migration {
        version: 13,
        name: "stats rollup: stats_visit_days",
    },
];

const SITES_COLUMNS: &str = "(
    site_id UInt32,
    domain String,
    name String,
    created_at DateTime,
    deleted UInt8,
    version UInt64
)";

const API_KEYS_COLUMNS: &str = "(
    key_hash String,
    key_id String,
    key_prefix String,
    site_id UInt32,
    created_at DateTime,
    revoked_at DateTime,
    revoked UInt8,
    version UInt64
)";

/// Migration 3: what a site says about itself beyond its name. `domains` is the full list
/// the browser path accepts (empty in rows written before it: the primary `domain` then),
/// `allow_subdomains` whether they cover their subdomains, `retention_days` how long its
/// events are kept (0: for ever).
const SITES_ADDED_COLUMNS: &[(&str, &str)] = &[
    ("domains", "Array(String)"),
    ("allow_subdomains", "UInt8"),
    ("retention_days", "UInt32"),
];

/// Server-side secrets that every process reading the registry shares (the MAC key of
/// ingest's cached key entries): made once by `migrate`, never shown.
const SECRETS_COLUMNS: &str = "(
    name String,
    value String,
    created_at DateTime
)";

/// Migration 5. An anonymous id's owner: the first user to claim it keeps it, so `version`
/// falls with the claim's time (ReplacingMergeTree keeps the highest).
const PERSON_ALIASES_COLUMNS: &str = "(
    site_id UInt32,
    anonymous_id String,
    user_id String,
    claimed_at_ms UInt64,
    version UInt64
)";

/// A user's traits, one row per trait; the latest `set_at_ms` wins, and `removed` is a
/// trait set to null.
const PERSON_TRAITS_COLUMNS: &str = "(
    site_id UInt32,
    user_id String,
    name String,
    value String,
    removed UInt8,
    set_at_ms UInt64
)";

/// Migration 7: whether a site takes keyless requests at all (`browser_path_off`, 0 in
/// rows written before it: on) and keyless identify calls (`browser_identify`, off until
/// turned on).
const SITES_TRUST_COLUMNS: &[(&str, &str)] =
    &[("browser_path_off", "UInt8"), ("browser_identify", "UInt8")];

/// Migration 8: a site's IANA time zone (empty: UTC), and what a key may do (empty: the
/// one scope of keys before scopes, `ingest:write`).
const SITES_TIME_ZONE_COLUMNS: &[(&str, &str)] = &[("timezone", "String")];
const API_KEYS_SCOPE_COLUMNS: &[(&str, &str)] = &[("scopes", "Array(String)")];

/// Migration 7. Every claim of an anonymous id, one row per (anonymous id, user), the
/// strongest claim of each pair kept (`people::claim_rank`).
const PERSON_CLAIMS_COLUMNS: &str = "(
    site_id UInt32,
    anonymous_id String,
    user_id String,
    trusted UInt8,
    claimed_at_ms UInt64,
    received_at_ms UInt64,
    rank UInt64
)";

/// A user's traits, one row per (trait, trust), the latest received of each kept.
const PERSON_TRAIT_VALUES_COLUMNS: &str = "(
    site_id UInt32,
    user_id String,
    name String,
    trusted UInt8,
    value String,
    removed UInt8,
    set_at_ms UInt64,
    received_at_ms UInt64
)";

/// Migration 7 carries the rows of migration 5's tables over, as keyed writes (which way
/// they were made was not recorded; counting them as keyed means no keyless write can
/// change what a server may have set), timed by the client's time they kept; then drops
/// those tables, so that no copy of a person's data is left where erasure does not look.
/// Run again after the drop, the copies find no table: [`is_copy_from_dropped`].
const CLAIMS_FROM_ALIASES: &str = "INSERT INTO {db}.person_claims \
     (site_id, anonymous_id, user_id, trusted, claimed_at_ms, received_at_ms, rank) \
     SELECT site_id, anonymous_id, user_id, toUInt8(1), claimed_at_ms, claimed_at_ms, \
     bitOr(toUInt64(4611686018427387904), toUInt64(4611686018427387903) - least(claimed_at_ms, toUInt64(4611686018427387903))) \
     FROM {db}.person_aliases";
const TRAIT_VALUES_FROM_TRAITS: &str = "INSERT INTO {db}.person_trait_values \
     (site_id, user_id, name, trusted, value, removed, set_at_ms, received_at_ms) \
     SELECT site_id, user_id, name, toUInt8(1), value, removed, set_at_ms, set_at_ms \
     FROM {db}.person_traits";

/// Whether `sql` is one of the copies of migrations 7 and 12, whose source a finished
/// earlier run dropped.
fn is_copy_from_dropped(sql: &str) -> bool {
    sql == CLAIMS_FROM_ALIASES || sql == TRAIT_VALUES_FROM_TRAITS || sql == TOTALS_FROM_DAYS
}

/// Migration 6. One row per state of an erasure request (its receipt); the highest
/// `version` is the current state.
const ERASURE_REQUESTS_COLUMNS: &str = "(
    request_id String,
    site_id UInt32,
    subject_kind String,
    subject String,
    suppress UInt8,
    requested_at_ms UInt64,
    state String,
    reason String,
    rows_removed UInt64,
    ids String,
    updated_at_ms UInt64,
    version UInt64
)";

/// The ids erased, which the enricher, replay and import consult: an event of one of them
/// received or dated before `erased_at_ms` is never stored again (and, with `suppress`,
/// none after it either). `added_at_ms` is when the row was written, for readers that
/// follow the ledger as it grows.
const ERASURE_LEDGER_COLUMNS: &str = "(
    site_id UInt32,
    id_kind String,
    id String,
    erased_at_ms UInt64,
    request_id String,
    suppress UInt8,
    added_at_ms UInt64
)";

/// When retention last pruned a site, up to when, and how many rows it removed (the
/// latest run of each site is kept).
const RETENTION_RUNS_COLUMNS: &str = "(
    site_id UInt32,
    ran_at DateTime,
    cutoff DateTime,
    rows_removed UInt64
)";

/// The Stats API's daily rollup (docs/decisions/015-stats-rollup.md): per site, time
/// zone, local day and generation, a marker row (kind 0: the generation is complete),
/// the day's pieces (kind 1: one per UTC day the local day overlaps, with its counts),
/// the recurring visitor ids of each piece (kind 2: 64-bit hashes of the ids that are
/// not a day's visitor id) and its persons (kinds 3 and 4: hashes of the user ids, and
/// of the anonymous ids whose owner a query reads). Written by the rollup job, read by
/// the Stats API; erasure and retention delete from it. On a cluster it is replicated to
/// every server, like the registry: it is small (a few rows a day, and a few a day per
/// identified person), and each server then answers its part of a query alone.
pub const ROLLUP_TABLE: &str = "stats_total_days";
const ROLLUP_COLUMNS: &str = "(
    site_id UInt32,
    time_zone String,
    local_day Date,
    generation UInt32,
    kind UInt8,
    utc_day Date,
    day_pieces UInt8,
    pageviews UInt64,
    events UInt64,
    visits_started UInt64,
    visits_carried UInt64,
    bounces_started UInt64,
    bounces_carried UInt64,
    duration_started UInt64,
    duration_carried UInt64,
    views_started UInt64,
    views_carried UInt64,
    daily_visitors UInt64,
    daily_visitors_utc_day UInt64,
    id_hash UInt64
)";
/// Every row's identity: a retried insert of a generation collapses into one copy. The
/// kind comes first: a query reads the markers, the pieces and the ids apart, and a
/// year's pieces (two rows a day) are then a few granules, not every granule of the
/// year's ids (the 12-month overview at 100 million events: 300 against 110 ms, read
/// apart in both orders).
const ROLLUP_ORDER_BY: &str = "(site_id, time_zone, kind, local_day, generation, utc_day, id_hash)";

/// Migration 10's table, which migration 12 carries over to [`ROLLUP_TABLE`] (the same
/// columns; its rows ordered by day, then kind) and drops.
const ROLLUP_TABLE_BY_DAY: &str = "stats_days";
const ROLLUP_ORDER_BY_DAY: &str =
    "(site_id, time_zone, local_day, generation, kind, utc_day, id_hash)";

/// Migration 12's copy of the rows: only into an empty table, so that a run again after
/// it (before the drop) does not write them twice; after the drop it finds no table
/// ([`is_copy_from_dropped`]).
const TOTALS_FROM_DAYS: &str = "INSERT INTO {db}.stats_total_days \
     (site_id, time_zone, local_day, generation, kind, utc_day, day_pieces, pageviews, events, \
     visits_started, visits_carried, bounces_started, bounces_carried, duration_started, \
     duration_carried, views_started, views_carried, daily_visitors, daily_visitors_utc_day, id_hash) \
     SELECT site_id, time_zone, local_day, generation, kind, utc_day, day_pieces, pageviews, events, \
     visits_started, visits_carried, bounces_started, bounces_carried, duration_started, \
     duration_carried, views_started, views_carried, daily_visitors, daily_visitors_utc_day, id_hash \
     FROM {db}.stats_days WHERE (SELECT count() FROM {db}.stats_total_days) = 0";

/// The daily rollup's breakdowns by visit attribute (the source, the country, the entry
/// page…): [`ROLLUP_TABLE`]'s rows for each value of each attribute, with `dimension` (the
/// attribute's name in the Stats API) and `value`; a generation's markers (kind 0) have
/// neither. Written by the rollup job before the generation's [`ROLLUP_TABLE`] rows, read
/// by the Stats API; erasure and retention delete from it as from [`ROLLUP_TABLE`], and on
/// a cluster it is replicated to every server as that is.
pub const ROLLUP_BREAKDOWN_TABLE: &str = "stats_breakdown_days";
const ROLLUP_BREAKDOWN_COLUMNS: &str = "(
    site_id UInt32,
    time_zone String,
    dimension String,
    local_day Date,
    generation UInt32,
    kind UInt8,
    value String,
    utc_day Date,
    day_pieces UInt8,
    pageviews UInt64,
    events UInt64,
    visits_started UInt64,
    visits_carried UInt64,
    bounces_started UInt64,
    bounces_carried UInt64,
    duration_started UInt64,
    duration_carried UInt64,
    views_started UInt64,
    views_carried UInt64,
    daily_visitors UInt64,
    daily_visitors_utc_day UInt64,
    id_hash UInt64
)";
/// A query reads one attribute's days: the dimension comes before the day.
const ROLLUP_BREAKDOWN_ORDER_BY: &str =
    "(site_id, time_zone, dimension, local_day, generation, kind, value, utc_day, id_hash)";

/// The daily rollup's visits: per (site, zone, local day, generation) a marker (kind 0)
/// and one row per visit with an event in the day (kind 1), with the visit's attributes
/// (the Stats API's `visit:` dimensions, without `visit:`), whether it started in the day,
/// the day's pageviews, events and visitor ids (`cityHash64`) of it, its measures over
/// all its events, and the day's events of it (`event_*`: each one's page, whether it is
/// a pageview, and its visitor id's hash). The Stats API reads it for questions filtered
/// by visit attributes.
/// Written by the rollup job with the generation, before [`ROLLUP_TABLE`]'s marker;
/// erasure and retention delete from it as from [`ROLLUP_TABLE`], and on a cluster it is
/// replicated to every server as that is.
pub const ROLLUP_VISIT_TABLE: &str = "stats_visit_days";
const ROLLUP_VISIT_COLUMNS: &str = "(
    site_id UInt32,
    time_zone String,
    local_day Date,
    generation UInt32,
    kind UInt8,
    visit_hash UInt64,
    started UInt8,
    entry_page String,
    exit_page String,
    source String,
    referrer String,
    channel String,
    utm_source String,
    utm_medium String,
    utm_campaign String,
    utm_content String,
    utm_term String,
    device String,
    browser String,
    browser_version String,
    os String,
    os_version String,
    country String,
    region String,
    city String,
    screen String,
    pageviews UInt64,
    events UInt64,
    views UInt64,
    bounce UInt8,
    duration UInt64,
    visitors Array(UInt64),
    event_pages Array(String),
    event_pageviews Array(UInt8),
    event_visitors Array(UInt64)
)";
/// A query reads the visits of a range of days (the markers apart); a retried insert of a
/// generation collapses into one copy.
const ROLLUP_VISIT_ORDER_BY: &str = "(site_id, time_zone, kind, local_day, generation, visit_hash)";

/// Every table of the daily rollup: what erasure and retention delete from, and what a
/// generation is written to.
pub const ROLLUP_TABLES: [&str; 3] = [ROLLUP_TABLE, ROLLUP_BREAKDOWN_TABLE, ROLLUP_VISIT_TABLE];

/// When events of a (site, UTC hour) were last inserted: the rollup's days that read
/// that hour are stale from then until computed again. Fed by [`touched_view`] on every
/// insert into `events`; erasure and retention write it too. On a cluster it is laid out
/// as `events` is, a `Distributed` table over each shard's replicated
/// [`TOUCHED_LOCAL_TABLE`]: the view writes where the shard's insert lands, with that
/// insert's quorum (one table replicated to every server would make the two shards'
/// quorum inserts wait on each other).
pub const TOUCHED_TABLE: &str = "stats_touched";
pub const TOUCHED_LOCAL_TABLE: &str = "stats_touched_local";
const TOUCHED_COLUMNS: &str = "(site_id UInt32, hour DateTime, touched_at DateTime)";
/// The hour of an event, in UTC whatever the server's time zone.
const TOUCHED_HOUR: &str = "toDateTime(intDiv(toUInt32(timestamp), 3600) * 3600)";

fn touched_tables(topology: &Topology) -> Vec<String> {
    match topology {
        Topology::SingleNode => vec![format!(
            "CREATE TABLE IF NOT EXISTS {{db}}.{TOUCHED_TABLE} {TOUCHED_COLUMNS} \
             ENGINE = ReplacingMergeTree(touched_at) ORDER BY (site_id, hour)"
        )],
        Topology::Cluster { name } => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {{db}}.{TOUCHED_LOCAL_TABLE} ON CLUSTER {name} {TOUCHED_COLUMNS} \
                 ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{{shard}}/{{db}}/{TOUCHED_LOCAL_TABLE}', '{{replica}}', touched_at) \
                 ORDER BY (site_id, hour)"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {{db}}.{TOUCHED_TABLE} ON CLUSTER {name} AS {{db}}.{TOUCHED_LOCAL_TABLE} \
                 ENGINE = Distributed({name}, {{db}}, {TOUCHED_LOCAL_TABLE}, site_id)"
            ),
        ],
    }
}

/// The view that stamps each insert's (site, hour)s: a row or two per inserted block. On
/// a cluster it watches each shard's local table, where the `Distributed` table's
/// inserts land (a view fires on the replica that takes the insert).
fn touched_view(topology: &Topology) -> String {
    let (source, target) = match topology {
        Topology::SingleNode => (events::TABLE, TOUCHED_TABLE),
        Topology::Cluster { .. } => (events::LOCAL_TABLE, TOUCHED_LOCAL_TABLE),
    };
    format!(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.stats_touched_mv{} TO {{db}}.{target} \
         AS SELECT site_id, {TOUCHED_HOUR} AS hour, max(now()) AS touched_at \
         FROM {{db}}.{source} GROUP BY site_id, hour",
        topology.on_cluster()
    )
}

/// The hours that already have events when the view is made: all stale, so the rollup
/// job computes every day once.
const TOUCHED_FROM_EVENTS: &str = "INSERT INTO {db}.stats_touched (site_id, hour, touched_at) \
     SELECT site_id, toDateTime(intDiv(toUInt32(timestamp), 3600) * 3600) AS hour, max(now()) \
     FROM {db}.events GROUP BY site_id, hour";

/// `ALTER TABLE … ADD COLUMN` for each column; on a cluster the runner sends each to one
/// server of the table's replication group ([`Db::alter`]).
fn add_columns(table: &str, columns: &[(&str, &str)]) -> Vec<String> {
    columns
        .iter()
        .map(|(name, ch_type)| format!("ALTER TABLE {{db}}.{table} ADD COLUMN {name} {ch_type}"))
        .collect()
}

/// A table of the registry: plain on one server; on a cluster replicated to every server.
/// The replica name joins the shard and replica macros, since the replication group
/// spans all shards and its replicas' names must differ.
fn registry_table(
    topology: &Topology,
    table: &str,
    columns: &str,
    version: Option<&str>,
    order_by: &str,
) -> String {
    match topology {
        Topology::SingleNode => {
            let args = version.map(|v| format!("({v})")).unwrap_or_default();
            format!(
                "CREATE TABLE IF NOT EXISTS {{db}}.{table} {columns} ENGINE = ReplacingMergeTree{args} ORDER BY {order_by}"
            )
        }
        Topology::Cluster { name } => {
            let args = version.map(|v| format!(", {v}")).unwrap_or_default();
            format!(
                "CREATE TABLE IF NOT EXISTS {{db}}.{table} ON CLUSTER {name} {columns} \
                 ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all/{{db}}/{table}', '{{shard}}-{{replica}}'{args}) \
                 ORDER BY {order_by}"
            )
        }
    }
}

/// The statements of one migration with the portable types, `{db}` standing for the
/// database.
pub fn statements(version: u32, topology: &Topology) -> Vec<String> {
    statements_for(version, topology, SchemaVariant::Portable)
}

/// The statements of one migration for a variant, `{db}` standing for the database.
pub fn statements_for(version: u32, topology: &Topology, variant: SchemaVariant) -> Vec<String> {
    match version {
        1 => events::create_statements_for(topology, variant),
        2 => vec![
            registry_table(topology, "sites", SITES_COLUMNS, Some("version"), "site_id"),
            registry_table(
                topology,
                "api_keys",
                API_KEYS_COLUMNS,
                Some("version"),
                "key_hash",
            ),
        ],
        3 => {
            let mut all = add_columns("sites", SITES_ADDED_COLUMNS);
            all.push(registry_table(
                topology,
                "secrets",
                SECRETS_COLUMNS,
                None,
                "(name, value)",
            ));
            all
        }
        4 => events::add_column_statements(4, topology, variant),
        5 => vec![
            registry_table(
                topology,
                "person_aliases",
                PERSON_ALIASES_COLUMNS,
                Some("version"),
                "(site_id, anonymous_id)",
            ),
            registry_table(
                topology,
                "person_traits",
                PERSON_TRAITS_COLUMNS,
                Some("set_at_ms"),
                "(site_id, user_id, name)",
            ),
        ],
        6 => vec![
            registry_table(
                topology,
                "erasure_requests",
                ERASURE_REQUESTS_COLUMNS,
                Some("version"),
                "request_id",
            ),
            registry_table(
                topology,
                "erasure_ledger",
                ERASURE_LEDGER_COLUMNS,
                None,
                "(site_id, id_kind, id, request_id)",
            ),
            registry_table(
                topology,
                "retention_runs",
                RETENTION_RUNS_COLUMNS,
                Some("ran_at"),
                "site_id",
            ),
        ],
        7 => {
            let mut all = add_columns("sites", SITES_TRUST_COLUMNS);
            all.push(registry_table(
                topology,
                "person_claims",
                PERSON_CLAIMS_COLUMNS,
                Some("rank"),
                "(site_id, anonymous_id, user_id)",
            ));
            all.push(registry_table(
                topology,
                "person_trait_values",
                PERSON_TRAIT_VALUES_COLUMNS,
                Some("received_at_ms"),
                "(site_id, user_id, name, trusted)",
            ));
            all.push(CLAIMS_FROM_ALIASES.to_string());
            all.push(TRAIT_VALUES_FROM_TRAITS.to_string());
            for old in ["person_aliases", "person_traits"] {
                all.push(format!(
                    "DROP TABLE IF EXISTS {{db}}.{old}{}",
                    topology.on_cluster()
                ));
            }
            all
        }
        8 => {
            let mut all = add_columns("sites", SITES_TIME_ZONE_COLUMNS);
            all.extend(add_columns("api_keys", API_KEYS_SCOPE_COLUMNS));
            all
        }
        9 => events::add_column_statements(9, topology, variant),
        10 => {
            let mut all = events::add_column_statements(10, topology, variant);
            all.push(registry_table(
                topology,
                ROLLUP_TABLE_BY_DAY,
                ROLLUP_COLUMNS,
                None,
                ROLLUP_ORDER_BY_DAY,
            ));
            all.extend(touched_tables(topology));
            all.push(touched_view(topology));
            all.push(TOUCHED_FROM_EVENTS.to_string());
            all
        }
        11 => vec![registry_table(
            topology,
            ROLLUP_BREAKDOWN_TABLE,
            ROLLUP_BREAKDOWN_COLUMNS,
            None,
            ROLLUP_BREAKDOWN_ORDER_BY,
        )],
        12 => vec![
            registry_table(
                topology,
                ROLLUP_TABLE,
                ROLLUP_COLUMNS,
                None,
                ROLLUP_ORDER_BY,
            ),
            TOTALS_FROM_DAYS.to_string(),
            format!(
                "DROP TABLE IF EXISTS {{db}}.{ROLLUP_TABLE_BY_DAY}{}",
                topology.on_cluster()
            ),
        ],
        13 => vec![registry_table(
            topology,
            ROLLUP_VISIT_TABLE,
            ROLLUP_VISIT_COLUMNS,
            None,
            ROLLUP_VISIT_ORDER_BY,
        )],
        other => panic!("no migration {other}"),
    }
}

/// What runs before any migration: the database and the record table.
pub fn bootstrap_statements(topology: &Topology) -> Vec<String> {
    vec![
        format!(
            "CREATE DATABASE IF NOT EXISTS {{db}}{}",
            topology.on_cluster()
        ),
        registry_table(
            topology,
            "schema_migrations",
            "(version UInt32, name String, applied_at DateTime)",
            None,
            "version",
        ),
    ]
}

/// Every DDL statement for a topology with the portable types, in the order a fresh
/// database runs them.
pub fn all_statements(topology: &Topology) -> Vec<String> {
    all_statements_for(topology, SchemaVariant::Portable)
}

/// Every DDL statement for a topology and variant, in the order a fresh database runs them.
pub fn all_statements_for(topology: &Topology, variant: SchemaVariant) -> Vec<String> {
    let mut all = bootstrap_statements(topology);
    for m in MIGRATIONS {
        all.extend(statements_for(m.version, topology, variant));
    }
    all
}

#[derive(Row, Serialize, Deserialize)]
struct Applied {
    version: u32,
    name: String,
    applied_at: u32,
}

/// Brings the schema up to date. Returns the versions this call applied. New tables get
/// the types of the server's [`SchemaVariant`]; tables that exist are left as they are.
pub async fn migrate(db: &Db) -> Result<Vec<u32>, CommonError> {
    let name = &db.database;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(CommonError::Config(format!(
            "CLICKHOUSE_DB={name:?}: use letters, digits and underscores"
        )));
    }
    for stmt in bootstrap_statements(&db.topology) {
        run(db, &stmt.replace("{db}", name)).await?;
    }
    let variant = SchemaVariant::for_server(&db.server_version);
    let done = applied_versions(db).await?;
    let mut applied_now = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| !done.contains(&m.version)) {
        for stmt in statements_for(m.version, &db.topology, variant) {
            match run(db, &stmt.replace("{db}", name)).await {
                Err(CommonError::ClickHouse(e))
                    if is_copy_from_dropped(&stmt) && clickhouse_versions::is_unknown_table(&e) => {
                }
                other => other?,
            }
        }
        // The crate quotes the table as one identifier, so insert through the client bound
        // to the database (it exists by now) rather than with a qualified name.
        let mut insert = db.client.insert::<Applied>("schema_migrations").await?;
        insert
            .write(&Applied {
                version: m.version,
                name: m.name.to_string(),
                applied_at: now_secs(),
            })
            .await?;
        insert.end().await?;
        tracing::info!(
            version = m.version,
            name = m.name,
            ?variant,
            "migration applied"
        );
        applied_now.push(m.version);
    }
    ensure_secret(db, KEY_CACHE_MAC_SECRET).await?;
    Ok(applied_now)
}

/// The name, in `secrets`, of the key under which ingest signs its cached key entries.
pub const KEY_CACHE_MAC_SECRET: &str = "key_cache_mac";

/// One row of `secrets`.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct SecretRow {
    pub name: String,
    pub value: String,
    pub created_at: u32,
}

/// Makes the secret `name` (32 random bytes, hex) unless it exists. Two runs at once may
/// both make one: readers take the smallest value, so they agree once both are written.
async fn ensure_secret(db: &Db, name: &str) -> Result<(), CommonError> {
    let count: u64 = db
        .client
        .query(super::queries::SECRET_COUNT)
        .bind(name)
        .fetch_one()
        .await?;
    if count > 0 {
        return Ok(());
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    let mut insert = db.client.insert::<SecretRow>("secrets").await?;
    insert
        .write(&SecretRow {
            name: name.to_string(),
            value: hex::encode(bytes),
            created_at: now_secs(),
        })
        .await?;
    insert.end().await?;
    Ok(())
}

pub async fn applied_versions(db: &Db) -> Result<Vec<u32>, CommonError> {
    Ok(db
        .root
        .query(&super::queries::APPLIED_MIGRATIONS.replace("{db}", &db.database))
        .fetch_all::<u32>()
        .await?)
}

/// Runs one statement; what a concurrent run made first counts as done. On a cluster an
/// `ALTER` goes to one server of each of its table's replication groups ([`Db::alter`]).
async fn run(db: &Db, sql: &str) -> Result<(), CommonError> {
    if db.topology.cluster().is_some() {
        if let Some((table, action)) = alter_parts(sql, &db.database) {
            db.alter(table, action, |q| q).await?;
            return Ok(());
        }
    }
    match db.root.query(sql).execute().await {
        Err(e) if clickhouse_versions::is_already_exists(&e) => Ok(()),
        Err(e) if clickhouse_versions::is_duplicate_column(&e) => Ok(()),
        other => Ok(other?),
    }
}

/// The table and the action of `ALTER TABLE {database}.<table> <action>`.
fn alter_parts<'a>(sql: &'a str, database: &str) -> Option<(&'a str, &'a str)> {
    sql.strip_prefix("ALTER TABLE ")?
        .strip_prefix(database)?
        .strip_prefix('.')?
        .split_once(' ')
}

pub(crate) fn now_secs() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_node_has_no_cluster_clauses_and_a_cluster_has_them_everywhere() {
        let single = all_statements(&Topology::SingleNode);
        assert!(single
            .iter()
            .all(|s| !s.contains("ON CLUSTER") && !s.contains("Replicated")));
        let cluster = all_statements(&Topology::Cluster {
            name: "rivulet".into(),
        });
        assert_eq!(
            single.len() + 1 + 2 + 2 + 2 + 1,
            cluster.len(),
            "events adds its local table; migrations 4, 9 and 10 alter the local tables and \
             make the Distributed table again (a DROP and a CREATE each); stats_touched is \
             a Distributed table over a local one"
        );
        // The copies of migrations 7 and 12 insert into tables replicated to every server
        // (one insert reaches them all), migration 10's first stamps through a Distributed table; an
        // ALTER goes to each replication group by itself (Db::alter).
        let (alters, others): (Vec<&String>, Vec<&String>) = cluster
            .iter()
            .filter(|s| !is_copy_from_dropped(s) && *s != TOUCHED_FROM_EVENTS)
            .partition(|s| s.starts_with("ALTER TABLE "));
        assert!(others.iter().all(|s| s.contains(" ON CLUSTER rivulet")));
        assert!(!alters.is_empty());
        assert!(alters.iter().all(|s| !s.contains("ON CLUSTER")
            && alter_parts(&s.replace("{db}", "rivulet"), "rivulet").is_some_and(
                |(table, action)| table != "events" && action.starts_with("ADD COLUMN ")
            )));
        assert!(cluster.iter().any(|s| s
            .contains("stats_touched_mv ON CLUSTER rivulet TO {db}.stats_touched_local")
            && s.contains("FROM {db}.events_local")));
        assert_eq!(
            cluster.iter().filter(|s| is_copy_from_dropped(s)).count(),
            3
        );
        assert!(cluster.iter().any(|s| s.contains(
            "ENGINE = Distributed(rivulet, {db}, events_local, cityHash64(toString(event_id)))"
        )));
    }
}
