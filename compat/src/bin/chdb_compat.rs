//! The Rust half of the ClickHouse compatibility test (`compat/chdb/compat.py` runs it;
//! `compat/README.md` explains the whole).
//!
//!   chdb_compat manifest NOW
//!       Prints, as JSON, every statement Rivulet sends, taken from `schema` itself: the
//!       DDL of a single node and of a cluster, in both variants
//!       (`migrations::all_statements_for`), every
//!       statement of `queries::ALL` with each set of values it is run with, bound by the
//!       `clickhouse` crate as the product binds them, the tables the product inserts
//!       into, the dataset's expected rows, and the Stats API's statements of a fixed
//!       list of requests (`rivulet_compat::stats`). NOW (epoch seconds): every event is
//!       before it, the Overview's statements are bound with its 24-hour window, and the
//!       Stats API's requests are planned at it.
//!
//!   chdb_compat load URL DATABASE NOW [CLUSTER]
//!       Through the product's own code paths and client settings for the server at URL
//!       (row validation as `CLICKHOUSE_VALIDATION=auto` decides; LZ4 off):
//!       runs the migrations (twice: the second run applies nothing), writes the
//!       dataset's registry rows with the crate's `insert::<Site>()` /
//!       `insert::<KeyRecord>()`, its events with the enricher's encoder and insert
//!       (`EventRow::write_row_binary`, `insert::insert_row_binary`), and the rows of
//!       people, erasures, retention runs and secrets through their row types, then
//!       reads everything back through the typed client, the registry and `privacy`
//!       and compares it field by field. Exits 1 on any difference.
//!
//!   chdb_compat events FILE COUNT DAYS
//!       Writes COUNT realistic events over DAYS days, RowBinary as the enricher encodes
//!       them, to FILE (for compat/chdb/measure.py).

use bytes::Bytes;
use clickhouse::Row;
use rivulet_common::ch::{ChConfig, Db};
use rivulet_common::clickhouse_versions::{self, ServerVersion};
use rivulet_common::privacy::RetentionRun;
use rivulet_common::privacy::{self, LedgerRow, Receipt};
use rivulet_common::registry::{KeyRecord, Registry, Site};
use rivulet_common::schema::events::{self, EventRow};
use rivulet_common::schema::migrations::SecretRow;
use rivulet_common::schema::people::{self, ClaimRow, TraitRow};
use rivulet_common::schema::{migrations, queries, SchemaVariant, Topology};
use rivulet_compat::{self as compat, BindValue, Dataset};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::process::ExitCode;

/// The cluster name the cluster DDL is printed with.
const CLUSTER: &str = "rivulet";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["manifest", now] => match now
            .parse()
            .map_err(|e| format!("NOW: {e}"))
            .and_then(manifest)
        {
            Ok(m) => {
                println!("{}", serde_json::to_string_pretty(&m).expect("json"));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("chdb_compat manifest: {e}");
                ExitCode::FAILURE
            }
        },
        ["load", url, database, now] => run_load(url, database, now, None),
        ["load", url, database, now, cluster] => run_load(url, database, now, Some(cluster)),
        ["events", file, count, days] => {
            let (Ok(count), Ok(days)) = (count.parse::<usize>(), days.parse::<u32>()) else {
                eprintln!("chdb_compat events FILE COUNT DAYS: COUNT and DAYS are numbers");
                return ExitCode::from(2);
            };
            let mut out = Vec::new();
            let rows = compat::events(1, count, days * 86_400, compat::FIXED_NOW);
            for row in &rows {
                row.write_row_binary(&mut out);
            }
            if let Err(e) = std::fs::write(file, &out) {
                eprintln!("{file}: {e}");
                return ExitCode::FAILURE;
            }
            println!("{} rows, {} bytes", rows.len(), out.len());
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: chdb_compat manifest NOW | load URL DATABASE NOW [CLUSTER] | events FILE COUNT DAYS");
            ExitCode::from(2)
        }
    }
}

fn manifest(now: u32) -> Result<Value, String> {
    let data = compat::dataset(now);
    let cluster = Topology::Cluster {
        name: CLUSTER.into(),
    };
    let mut statements = Vec::new();
    for st in queries::ALL {
        let columns = compat::bound_columns(st.sql).map_err(|e| format!("{}: {e}", st.name))?;
        assert_eq!(columns.len(), st.binds, "{}", st.name);
        // One list of values per independent `?`; a `?` of a column whose value is
        // shared (`compat::same_value`) takes that of its first `?`.
        let mut choices = Vec::new();
        let mut slots = Vec::new();
        let mut shared: BTreeMap<&str, usize> = BTreeMap::new();
        for c in &columns {
            if let Some(name) = compat::same_value(c) {
                if let Some(i) = shared.get(name) {
                    slots.push(*i);
                    continue;
                }
                shared.insert(name, choices.len());
            }
            slots.push(choices.len());
            choices.push(compat::bind_values(c, &data).ok_or_else(|| {
                format!(
                    "statement {} binds `{c}`, for which the compatibility test has no values: \
                     add them to compat/src/lib.rs, bind_values()",
                    st.name
                )
            })?);
        }
        let runs: Vec<Value> = combinations(&choices)
            .into_iter()
            .map(|combination| {
                slots
                    .iter()
                    .map(|i| combination[*i].clone())
                    .collect::<Vec<_>>()
            })
            .map(|binds| {
                // Bound by the crate, exactly as the product's `.bind()` calls do.
                let mut q = clickhouse::Client::default().query(st.sql);
                for b in &binds {
                    q = match b {
                        BindValue::U32(v) => q.bind(*v),
                        BindValue::U64(v) => q.bind(*v),
                        BindValue::Str(s) => q.bind(s.as_str()),
                    };
                }
                json!({
                    "binds": binds.iter().map(BindValue::to_json).collect::<Vec<_>>(),
                    "sql": q.sql_display().to_string(),
                })
            })
            .collect();
        statements.push(json!({
            "name": st.name,
            "sql": st.sql,
            "binds": st.binds,
            "bound_columns": columns,
            "runs": runs,
        }));
    }
    Ok(json!({
        "ddl": {
            "portable": {
                "single": migrations::all_statements_for(&Topology::SingleNode, SchemaVariant::Portable),
                "cluster": migrations::all_statements_for(&cluster, SchemaVariant::Portable),
            },
            "low_cardinality": {
                "single": migrations::all_statements_for(&Topology::SingleNode, SchemaVariant::LowCardinality),
                "cluster": migrations::all_statements_for(&cluster, SchemaVariant::LowCardinality),
            },
        },
        // The variant `migrate` picks for each server version the test runs.
        "variant_for": {
            "18.16.1": format!("{:?}", SchemaVariant::for_server(&ServerVersion::parse("18.16.1"))),
            "26.9.2.1": format!("{:?}", SchemaVariant::for_server(&ServerVersion::parse("26.9.2.1"))),
        },
        "cluster_name": CLUSTER,
        // The secret `migrate` makes with a random value: its row is checked alone.
        "key_cache_mac_secret": migrations::KEY_CACHE_MAC_SECRET,
        "now": now,
        "window_start": compat::window_start(now),
        "migrations": migrations::MIGRATIONS.iter()
            .map(|m| json!({"version": m.version, "name": m.name})).collect::<Vec<_>>(),
        "queries": statements,
        // The Stats API's statements (`rivulet_compat::stats`): planned by
        // `rivulet_stats::plan` for a fixed list of requests at NOW, inlined.
        "stats": compat::stats::statements(now)?,
        "insert_tables": queries::INSERT_TABLES,
        "events_columns": {
            "portable": column_list(SchemaVariant::Portable),
            "low_cardinality": column_list(SchemaVariant::LowCardinality),
        },
        "expected": expected_rows(&data),
    }))
}

fn column_list(variant: SchemaVariant) -> Value {
    events::columns(variant)
        .iter()
        .map(|c| json!({"name": c.name, "type": c.ch_type}))
        .collect()
}

/// Every combination of one value from each list, in order.
fn combinations(choices: &[Vec<BindValue>]) -> Vec<Vec<BindValue>> {
    let mut out = vec![Vec::new()];
    for list in choices {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                list.iter().map(move |v| {
                    let mut p = prefix.clone();
                    p.push(v.clone());
                    p
                })
            })
            .collect();
    }
    out
}

/// The rows of each insert table as the product writes them (JSON, one object per row,
/// field names = column names), for the Python side's own field-by-field comparison.
fn expected_rows(data: &Dataset) -> Value {
    let events: Vec<Value> = data
        .events
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e).expect("json");
            v["event_id"] = json!(e.event_id.to_string());
            v
        })
        .collect();
    json!({
        "events": events,
        "sites": data.sites,
        "api_keys": data.keys,
        "schema_migrations": migrations::MIGRATIONS.iter()
            .map(|m| json!({"version": m.version, "name": m.name})).collect::<Vec<_>>(),
        "secrets": data.secrets,
        "person_claims": data.claims(),
        "person_trait_values": data.traits(),
        "erasure_requests": data.receipts,
        "erasure_ledger": data.ledger_rows(),
        "retention_runs": data.retention_rows(),
    })
}

fn run_load(url: &str, database: &str, now: &str, cluster: Option<&str>) -> ExitCode {
    let Ok(now) = now.parse::<u32>() else {
        eprintln!("chdb_compat load: NOW is epoch seconds");
        return ExitCode::from(2);
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    match rt.block_on(load(url, database, now, cluster)) {
        Ok(failures) if failures.is_empty() => ExitCode::SUCCESS,
        Ok(failures) => {
            for f in failures {
                eprintln!("FAIL {f}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("FAIL load into {url} ({database}): {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, PartialEq, Row, Deserialize)]
struct Applied {
    version: u32,
    name: String,
    applied_at: u32,
}

struct Checks {
    failures: Vec<String>,
    label: String,
}

impl Checks {
    fn eq<T: PartialEq + Debug>(&mut self, what: &str, got: &T, want: &T) {
        if got == want {
            println!("  ok   {}: {what}", self.label);
        } else {
            self.failures.push(format!(
                "{}: {what}\n    got:  {got:?}\n    want: {want:?}",
                self.label
            ));
        }
    }
    /// Row lists, compared row by row and field by field (through their JSON form), so
    /// that a failure names the row and the field.
    fn rows<T: serde::Serialize + Debug>(&mut self, what: &str, got: &[T], want: &[T]) {
        let mut diffs = Vec::new();
        if got.len() != want.len() {
            diffs.push(format!("{} rows, want {}", got.len(), want.len()));
        }
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let (g, w) = (
                serde_json::to_value(g).unwrap(),
                serde_json::to_value(w).unwrap(),
            );
            if let (Value::Object(g), Value::Object(w)) = (&g, &w) {
                for (k, wv) in w {
                    if g.get(k) != Some(wv) {
                        diffs.push(format!("row {i} field {k}: got {:?}, want {wv}", g.get(k)));
                    }
                }
            } else if g != w {
                diffs.push(format!("row {i}: got {g}, want {w}"));
            }
            if diffs.len() > 10 {
                break;
            }
        }
        if diffs.is_empty() {
            println!(
                "  ok   {}: {what} ({} rows, field by field)",
                self.label,
                want.len()
            );
        } else {
            self.failures.push(format!(
                "{}: {what}\n    {}",
                self.label,
                diffs.join("\n    ")
            ));
        }
    }
}

async fn load(
    url: &str,
    database: &str,
    now: u32,
    cluster: Option<&str>,
) -> Result<Vec<String>, String> {
    let config = ChConfig {
        url: url.into(),
        database: database.into(),
        // The stack's ClickHouse user (.stack/env): 18.16's `default` reads nothing of
        // Rivulet's. The chDB adapter takes any user.
        user: std::env::var("CLICKHOUSE_USER").unwrap_or_else(|_| "default".into()),
        password: std::env::var("CLICKHOUSE_PASSWORD").unwrap_or_default(),
        // `auto`, as in production (`clickhouse_versions::row_validation`).
        validation: None,
        // LZ4 off: the chDB adapter does not speak ClickHouse's compressed HTTP framing.
        lz4: Some(false),
        topology: match cluster {
            None => Topology::SingleNode,
            Some(name) => Topology::Cluster { name: name.into() },
        },
        // The rewrite makes every table a plain one (compat/chdb/rewrite.py): no replicas
        // to wait for.
        insert_quorum: 0,
        insert_quorum_timeout_ms: 10_000,
        nodes: vec![url.into()],
    };
    let db = config.connect().await.map_err(|e| e.to_string())?;
    let validation = clickhouse_versions::row_validation(&db.server_version);
    let mut c = Checks {
        failures: Vec::new(),
        label: format!(
            "{} {database}{}",
            db.server_version,
            cluster
                .map(|c| format!(" (cluster {c})"))
                .unwrap_or_default()
        ),
    };
    println!(
        "load: ClickHouse {} at {url}, database {database}, {:?}, row validation {}",
        db.server_version,
        db.topology,
        if validation { "on" } else { "off" }
    );
    let data = compat::dataset(now);

    // The migrations, as `rivulet-admin migrate` runs them; a second run applies nothing.
    let applied = migrations::migrate(&db)
        .await
        .map_err(|e| format!("migrate: {e}"))?;
    let all: Vec<u32> = migrations::MIGRATIONS.iter().map(|m| m.version).collect();
    c.eq("migrate applies every migration", &applied, &all);
    let again = migrations::migrate(&db)
        .await
        .map_err(|e| format!("migrate again: {e}"))?;
    c.eq("a second migrate applies nothing", &again, &Vec::new());
    let recorded = migrations::applied_versions(&db)
        .await
        .map_err(|e| e.to_string())?;
    c.eq("applied_versions", &recorded, &all);

    // The registry's rows, one insert each, as `Registry` writes them.
    for site in &data.sites {
        let mut insert = db
            .client
            .insert::<Site>("sites")
            .await
            .map_err(|e| format!("insert sites: {e}"))?;
        insert
            .write(site)
            .await
            .map_err(|e| format!("write site: {e}"))?;
        insert
            .end()
            .await
            .map_err(|e| format!("insert sites: {e}"))?;
    }
    for key in &data.keys {
        let mut insert = db
            .client
            .insert::<KeyRecord>("api_keys")
            .await
            .map_err(|e| format!("insert api_keys: {e}"))?;
        insert
            .write(key)
            .await
            .map_err(|e| format!("write key: {e}"))?;
        insert
            .end()
            .await
            .map_err(|e| format!("insert api_keys: {e}"))?;
    }

    // Events: encoded as the enricher encodes them, in three inserts of chunks cut at
    // arbitrary offsets (inside rows too), sent by the enricher's own insert function.
    for batch in data.events.chunks(data.events.len() / 3 + 1) {
        let mut encoded = Vec::new();
        for row in batch {
            row.write_row_binary(&mut encoded);
        }
        let encoded = Bytes::from(encoded);
        let chunks: Vec<Bytes> = (0..encoded.len())
            .step_by(64 * 1024 + 7)
            .map(|start| encoded.slice(start..(start + 64 * 1024 + 7).min(encoded.len())))
            .collect();
        rivulet_enrichment::insert::insert_row_binary(&db, &chunks)
            .await
            .map_err(|e| format!("insert events: {e}"))?;
    }

    write_people_privacy_retention(&db, &data).await?;

    // Read back through the typed client (RowBinaryWithNamesAndTypes with validation on a
    // current server: every column's type is checked against the Rust field's).
    let mut back: Vec<EventRow> = db
        .client
        .query("SELECT ?fields FROM events")
        .fetch_all()
        .await
        .map_err(|e| format!("read events: {e}"))?;
    let mut want = data.events.clone();
    let key = |r: &EventRow| (r.site_id, r.timestamp, r.event_id);
    back.sort_by_key(key);
    want.sort_by_key(key);
    // A background merge may already have removed a redelivered duplicate.
    if back.len() < want.len() {
        back.dedup();
        want.dedup();
    }
    c.rows("events read back", &back, &want);

    // The registry: one insert per row, so a background merge may already have collapsed
    // older versions. Every row read must be one written, field by field; the latest
    // version of each must be there; FINAL must read exactly the latest versions.
    let sites: Vec<Site> = fetch(&db, "SELECT ?fields FROM sites").await?;
    versions(
        &mut c,
        "sites",
        &sites,
        &data.sites,
        |s| s.site_id,
        |s| s.version,
    );
    let final_sites: Vec<Site> =
        fetch(&db, "SELECT ?fields FROM sites FINAL ORDER BY site_id").await?;
    let latest_sites: Vec<Site> = latest(&data.sites, |s| s.site_id, |s| s.version)
        .into_values()
        .collect();
    c.rows(
        "sites FINAL: the latest versions",
        &final_sites,
        &latest_sites,
    );
    let keys: Vec<KeyRecord> = fetch(&db, "SELECT ?fields FROM api_keys").await?;
    versions(
        &mut c,
        "api_keys",
        &keys,
        &data.keys,
        |k| k.key_hash.clone(),
        |k| k.version,
    );
    let final_keys: Vec<KeyRecord> =
        fetch(&db, "SELECT ?fields FROM api_keys FINAL ORDER BY key_hash").await?;
    let latest_keys: Vec<KeyRecord> = latest(&data.keys, |k| k.key_hash.clone(), |k| k.version)
        .into_values()
        .collect();
    c.rows(
        "api_keys FINAL: the latest versions",
        &final_keys,
        &latest_keys,
    );
    let applied_rows: Vec<Applied> = fetch(
        &db,
        "SELECT ?fields FROM schema_migrations ORDER BY version",
    )
    .await?;
    let names: Vec<(u32, String)> = applied_rows
        .iter()
        .map(|a| (a.version, a.name.clone()))
        .collect();
    let want_names: Vec<(u32, String)> = migrations::MIGRATIONS
        .iter()
        .map(|m| (m.version, m.name.to_string()))
        .collect();
    c.eq("schema_migrations rows", &names, &want_names);

    // The registry's own reads (each a statement of queries::ALL), typed.
    registry_reads(&db, &data, &mut c).await?;
    read_people_privacy_retention(&db, &data, &mut c).await?;
    Ok(c.failures)
}

/// Inserts `rows` in one insert, as the product's writers of these tables do.
async fn insert_rows<T>(client: &clickhouse::Client, table: &str, rows: &[T]) -> Result<(), String>
where
    T: clickhouse::RowOwned + clickhouse::RowWrite,
{
    let mut insert = client
        .insert::<T>(table)
        .await
        .map_err(|e| format!("insert {table}: {e}"))?;
    for row in rows {
        insert
            .write(row)
            .await
            .map_err(|e| format!("write {table}: {e}"))?;
    }
    insert
        .end()
        .await
        .map_err(|e| format!("insert {table}: {e}"))
}

/// The rows of migrations 3, 6 and 7, each through the client and in the inserts the
/// product writes them with: identify's rows as the enricher's batches (claims, then
/// traits, `insert::insert_people`); an erasure's ledger rows in one insert and each
/// version of its receipt in one (`privacy::request_erasure`, `privacy::write_receipt`);
/// a retention run's rows in one (`lifecycle`); secrets as `migrations::ensure_secret`.
async fn write_people_privacy_retention(db: &Db, data: &Dataset) -> Result<(), String> {
    for (claim, traits) in &data.identifies {
        if let Some(claim) = claim {
            insert_rows(
                &db.client,
                people::CLAIMS_TABLE,
                std::slice::from_ref(claim),
            )
            .await?;
        }
        if !traits.is_empty() {
            insert_rows(&db.client, people::TRAITS_TABLE, traits).await?;
        }
    }
    let mut ledger = data.ledger.iter();
    for receipt in &data.receipts {
        // A request's ledger rows go in before its first (pending) receipt.
        if receipt.state == privacy::State::Pending.as_str() {
            let rows = ledger.next().ok_or("a receipt without ledger rows")?;
            insert_rows(&db.events, privacy::LEDGER_TABLE, rows).await?;
        }
        privacy::write_receipt(db, receipt)
            .await
            .map_err(|e| format!("write_receipt: {e}"))?;
    }
    for run in &data.retention_runs {
        insert_rows(&db.events, "retention_runs", run).await?;
    }
    insert_rows(&db.client, "secrets", &data.secrets).await
}

/// The rows of [`write_people_privacy_retention`] read back through the typed client
/// and compared field by field, and the product's typed reads of receipts.
async fn read_people_privacy_retention(
    db: &Db,
    data: &Dataset,
    c: &mut Checks,
) -> Result<(), String> {
    // ReplacingMergeTree tables: a merge may already have kept only the latest version
    // (a claim's strongest rank, a trait's latest value of each trust, a receipt's
    // latest state, a site's latest retention run).
    let claims: Vec<ClaimRow> = fetch(db, "SELECT ?fields FROM person_claims").await?;
    versions(
        c,
        "person_claims",
        &claims,
        &data.claims(),
        |a| (a.site_id, a.anonymous_id.clone(), a.user_id.clone()),
        |a| a.rank,
    );
    let traits: Vec<TraitRow> = fetch(db, "SELECT ?fields FROM person_trait_values").await?;
    versions(
        c,
        "person_trait_values",
        &traits,
        &data.traits(),
        |t| (t.site_id, t.user_id.clone(), t.name.clone(), t.trusted),
        |t| t.received_at_ms,
    );
    let receipts: Vec<Receipt> = fetch(db, "SELECT ?fields FROM erasure_requests").await?;
    versions(
        c,
        "erasure_requests",
        &receipts,
        &data.receipts,
        |r| r.request_id.clone(),
        |r| r.version,
    );
    let runs: Vec<RetentionRun> = fetch(db, "SELECT ?fields FROM retention_runs").await?;
    versions(
        c,
        "retention_runs",
        &runs,
        &data.retention_rows(),
        |r| r.site_id,
        |r| u64::from(r.ran_at),
    );
    // The ledger's rows are each one of a kind: all of them stay.
    let mut ledger: Vec<LedgerRow> = fetch(db, "SELECT ?fields FROM erasure_ledger").await?;
    let mut want = data.ledger_rows();
    let key = |r: &LedgerRow| {
        (
            r.site_id,
            r.id_kind.clone(),
            r.id.clone(),
            r.request_id.clone(),
        )
    };
    ledger.sort_by_key(key);
    want.sort_by_key(key);
    c.rows("erasure_ledger read back", &ledger, &want);
    // Secrets: the dataset's, and the one `migrate` made (random, so checked alone).
    let secrets: Vec<SecretRow> = fetch(db, "SELECT ?fields FROM secrets").await?;
    let (made, mut others): (Vec<SecretRow>, Vec<SecretRow>) = secrets
        .into_iter()
        .partition(|s| s.name == migrations::KEY_CACHE_MAC_SECRET);
    let made: Vec<bool> = made
        .iter()
        .map(|s| s.value.len() == 64 && s.value.bytes().all(|b| b.is_ascii_hexdigit()))
        .collect();
    c.eq(
        "migrate made one key cache MAC secret, 64 hex digits",
        &made,
        &vec![true],
    );
    let mut want = data.secrets.clone();
    others.sort_by(|a, b| a.value.cmp(&b.value));
    want.sort_by(|a, b| a.value.cmp(&b.value));
    c.rows("secrets read back", &others, &want);

    // The product's typed reads of receipts (each a statement of queries::ALL).
    let latest_receipts = latest(&data.receipts, |r| r.request_id.clone(), |r| r.version);
    let mut newest_first: Vec<Receipt> = latest_receipts.values().cloned().collect();
    newest_first.sort_by(|a, b| {
        (b.requested_at_ms, &a.request_id).cmp(&(a.requested_at_ms, &b.request_id))
    });
    let e = |e: rivulet_common::CommonError| e.to_string();
    c.rows(
        "privacy::receipts(all)",
        &privacy::receipts(db, None).await.map_err(e)?,
        &newest_first,
    );
    for site in compat::SITE_IDS.iter().chain([&compat::MISSING_SITE]) {
        let want: Vec<Receipt> = newest_first
            .iter()
            .filter(|r| r.site_id == *site)
            .cloned()
            .collect();
        c.rows(
            &format!("privacy::receipts({site})"),
            &privacy::receipts(db, Some(*site)).await.map_err(e)?,
            &want,
        );
    }
    for (id, want) in &latest_receipts {
        c.eq(
            &format!("privacy::receipt({id})"),
            &privacy::receipt(db, id).await.map_err(e)?.as_ref(),
            &Some(want),
        );
    }
    // Oldest first: what the runner has to do.
    let mut unfinished: Vec<Receipt> = newest_first
        .iter()
        .filter(|r| !r.is_finished())
        .cloned()
        .collect();
    unfinished.sort_by(|a, b| {
        (a.requested_at_ms, &a.request_id).cmp(&(b.requested_at_ms, &b.request_id))
    });
    c.rows(
        "privacy::unfinished",
        &privacy::unfinished(db).await.map_err(e)?,
        &unfinished,
    );
    Ok(())
}

async fn fetch<T>(db: &Db, sql: &str) -> Result<Vec<T>, String>
where
    T: clickhouse::RowOwned + clickhouse::RowRead,
{
    db.client
        .query(sql)
        .fetch_all()
        .await
        .map_err(|e| format!("{sql}: {e}"))
}

/// Rows of a ReplacingMergeTree(version) read back: each is a row that was written
/// (compared field by field), and the latest version of every id is among them.
fn versions<T, K>(
    c: &mut Checks,
    table: &str,
    got: &[T],
    written: &[T],
    id: impl Fn(&T) -> K,
    version: impl Fn(&T) -> u64,
) where
    T: Clone + serde::Serialize + Debug,
    K: Ord + Debug,
{
    let mut matched = Vec::new();
    for g in got {
        match written
            .iter()
            .find(|w| id(w) == id(g) && version(w) == version(g))
        {
            Some(w) => matched.push(w.clone()),
            None => {
                c.failures.push(format!(
                    "{}: {table}: a row that was never written: {g:?}",
                    c.label
                ));
                return;
            }
        }
    }
    c.rows(
        &format!("{table}: every row read is one written"),
        got,
        &matched,
    );
    let missing: Vec<K> = latest(written, &id, &version)
        .into_iter()
        .filter(|(k, l)| !got.iter().any(|g| id(g) == *k && version(g) == version(l)))
        .map(|(k, _)| k)
        .collect();
    c.eq(
        &format!("{table}: the latest version of every row is there"),
        &missing,
        &Vec::new(),
    );
}

/// The latest version of each row, as `FINAL` reads a ReplacingMergeTree(version).
fn latest<T: Clone, K: Ord>(
    rows: &[T],
    key: impl Fn(&T) -> K,
    version: impl Fn(&T) -> u64,
) -> BTreeMap<K, T> {
    let mut out: BTreeMap<K, T> = BTreeMap::new();
    for r in rows {
        let k = key(r);
        if out.get(&k).is_none_or(|have| version(have) < version(r)) {
            out.insert(k, r.clone());
        }
    }
    out
}

async fn registry_reads(db: &Db, data: &Dataset, c: &mut Checks) -> Result<(), String> {
    let reg = Registry::new(db.clone());
    let e = |e: rivulet_common::CommonError| e.to_string();
    let sites = latest(&data.sites, |s| s.site_id, |s| s.version);
    let active: Vec<Site> = sites.values().filter(|s| s.deleted == 0).cloned().collect();
    c.rows(
        "Registry::list_sites",
        &reg.list_sites().await.map_err(e)?,
        &active,
    );
    for id in compat::SITE_IDS.iter().chain([&compat::MISSING_SITE]) {
        let want = sites.get(id).filter(|s| s.deleted == 0).cloned();
        c.eq(
            &format!("Registry::get_site({id})"),
            &reg.get_site(*id).await.map_err(e)?,
            &want,
        );
    }
    let keys = latest(&data.keys, |k| k.key_hash.clone(), |k| k.version);
    for id in compat::SITE_IDS.iter().chain([&compat::MISSING_SITE]) {
        let mut want: Vec<KeyRecord> = keys
            .values()
            .filter(|k| k.site_id == *id)
            .cloned()
            .collect();
        want.sort_by(|a, b| (a.created_at, &a.key_id).cmp(&(b.created_at, &b.key_id)));
        c.rows(
            &format!("Registry::list_keys({id})"),
            &reg.list_keys(*id).await.map_err(e)?,
            &want,
        );
    }
    for k in keys.values() {
        let by_hash = reg
            .find_key_by_hash(&rivulet_common::keys::KeyHash(k.key_hash.clone()))
            .await
            .map_err(e)?;
        c.eq("Registry::find_key_by_hash", &by_hash.as_ref(), &Some(k));
        let by_id = reg.find_key_by_id(&k.key_id).await.map_err(e)?;
        c.eq("Registry::find_key_by_id", &by_id.as_ref(), &Some(k));
    }
    let max: u32 = db
        .client
        .query(queries::SITES_MAX_ID)
        .fetch_one()
        .await
        .map_err(|e| e.to_string())?;
    c.eq("sites_max_id", &max, &4);
    Ok(())
}
