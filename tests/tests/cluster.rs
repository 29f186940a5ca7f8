//! Rivulet on a replicated Kafka and a sharded, replicated ClickHouse (`scripts/stack up
//! --cluster`): run by `scripts/test-cluster` with `RIVULET_STACK_DIR` pointing at the
//! cluster's stack, and never by a plain `cargo test` (the suite is `test = false` in
//! Cargo.toml): against a single node these tests fail, they do not skip.
//!
//! - the migrations make `events` a Distributed table over replicated local tables, and
//!   replicate the registry to every server;
//! - the Overview's statements give on the cluster exactly what they give on the single
//!   node for the same events (duplicates included), the single node being the stack in
//!   the repository's `.stack` (scripts/test runs both);
//! - an insert acknowledged by the cluster survives the loss of a replica of every shard
//!   right after the acknowledgement;
//! - ingest answers 200 while one broker of three is down, and 503, never 200, when two
//!   are (`min.insync.replicas=2`);
//! - the data's lifecycle (`rivulet_tests::lifecycle`, which tests/tests/privacy.rs runs on
//!   the single node): a person erased with events in flight is gone from every replica
//!   after a restart, a replay and a new consumer group; a burst of erasures takes a few
//!   mutations; retention removes a site's expired rows on every replica and, since this
//!   stack's registry is the suite's own, drops whole months once every site has a
//!   retention; an export equals the table in constant memory;
//! - the Stats API (`rivulet-admin serve`, `POST /api/v2/query`) over events written
//!   through the Distributed table answers as the figures computed from them
//!   (`rivulet_tests::stats`, which tests/tests/stats_api.rs runs in full on the single
//!   node).

use rivulet_common::ch::{ChConfig, Db};
use rivulet_common::schema::events::EventRow;
use rivulet_common::schema::queries;
use rivulet_tests::*;
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;
use uuid::Uuid;

/// The cluster's ClickHouse servers, in the stack's order (`CLICKHOUSE_NODES`).
fn nodes() -> Vec<(String, String)> {
    let urls = env("CLICKHOUSE_NODES");
    let names = env("RIVULET_CLICKHOUSE_NODE_NAMES");
    assert!(
        !env("CLICKHOUSE_CLUSTER").is_empty(),
        "this suite runs against `scripts/stack up --cluster` (RIVULET_STACK_DIR={}): \
         CLICKHOUSE_CLUSTER is not set there",
        env("RIVULET_STACK_DIR")
    );
    let nodes: Vec<(String, String)> = names
        .split(',')
        .map(str::to_string)
        .zip(urls.split(',').map(str::to_string))
        .collect();
    assert_eq!(nodes.len(), 4, "2 shards x 2 replicas: {nodes:?}");
    nodes
}

/// One statement on one server of the cluster over HTTP, answered as TSV, as the stack's
/// ClickHouse user (`CLICKHOUSE_USER`, `CLICKHOUSE_PASSWORD`: the `default` user of the
/// local stack reads nothing of Rivulet's).
async fn on_node(url: &str, sql: &str) -> String {
    on_node_as(
        url,
        &env("CLICKHOUSE_USER"),
        &env("CLICKHOUSE_PASSWORD"),
        sql,
    )
    .await
}

/// `on_node` with another stack's user (the single node's has a password of its own).
async fn on_node_as(url: &str, user: &str, password: &str, sql: &str) -> String {
    let resp = http()
        .post(format!("{url}/?database={}", env("CLICKHOUSE_DB")))
        .header("X-ClickHouse-User", user)
        .header("X-ClickHouse-Key", password)
        .body(sql.to_string())
        .timeout(Duration::from_secs(60))
        .fetch()
        .await;
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert!(status.is_success(), "{url}: {sql}: {text}");
    text
}

/// The single node's environment (`.stack/env` of the repository).
fn single_node() -> HashMap<String, String> {
    let path = repo_root().join(".stack/env");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: the single-node stack must run too (scripts/stack up)",
            path.display()
        )
    });
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// A statement with its `?` bound to these values, as the clickhouse crate sends it.
fn bound(sql: &str, values: &[u32]) -> String {
    let mut out = String::new();
    let mut values = values.iter();
    for c in sql.chars() {
        if c == '?' {
            out.push_str(&values.next().expect("a value per ?").to_string());
        } else {
            out.push(c);
        }
    }
    out
}

fn rows_of(site_id: u32, n: u32, hour: u32) -> Vec<EventRow> {
    let browsers = ["Chrome", "Firefox", "Safari", ""];
    let countries = ["GB", "JP", "US", "DE", "FR", ""];
    (0..n)
        .map(|i| EventRow {
            event_id: Uuid::new_v4(),
            site_id,
            timestamp: hour + (i * 37) % 7200,
            received_at: hour + (i * 37) % 7200,
            event_type: if i % 5 == 0 {
                "custom_event".into()
            } else {
                "pageview".into()
            },
            event_name: if i % 5 == 0 {
                format!("signup-{}", i % 3)
            } else {
                String::new()
            },
            pathname: format!("/page/{}", i % 13),
            user_id: format!("visitor-{}", i % 41),
            country: countries[i as usize % countries.len()].into(),
            browser: browsers[i as usize % browsers.len()].into(),
            device_type: ["Desktop", "Mobile", "Tablet"][i as usize % 3].into(),
            is_bot: u8::from(i % 17 == 0),
            // Some visitors from a search engine (the Overview's referrers and channels).
            referrer: if i % 4 == 0 {
                "https://www.google.com/".into()
            } else {
                String::new()
            },
            channel: if i % 4 == 0 {
                "Organic Search"
            } else {
                "Direct"
            }
            .into(),
            ..EventRow::default()
        })
        .collect()
}

/// Inserts rows as the enricher does: RowBinary through `insert_row_binary`.
async fn insert(db: &rivulet_common::ch::Db, rows: &[EventRow]) {
    let mut data = Vec::new();
    for r in rows {
        r.write_row_binary(&mut data);
    }
    rivulet_enrichment::insert::insert_row_binary(db, &[bytes::Bytes::from(data)])
        .await
        .expect("insert");
}

#[tokio::test]
async fn the_schema_is_distributed_over_replicated_tables_and_the_registry_is_everywhere() {
    let _ = db().await; // migrates
    for (name, url) in nodes() {
        let engines = on_node(
            &url,
            "SELECT name, engine FROM system.tables WHERE database = currentDatabase() ORDER BY name",
        )
        .await;
        for want in [
            "api_keys\tReplicatedReplacingMergeTree",
            "events\tDistributed",
            "events_local\tReplicatedReplacingMergeTree",
            "schema_migrations\tReplicatedReplacingMergeTree",
            "sites\tReplicatedReplacingMergeTree",
            "stats_breakdown_days\tReplicatedReplacingMergeTree",
            "stats_total_days\tReplicatedReplacingMergeTree",
            "stats_visit_days\tReplicatedReplacingMergeTree",
            "stats_touched\tDistributed",
            "stats_touched_local\tReplicatedReplacingMergeTree",
            "stats_touched_mv\tMaterializedView",
        ] {
            assert!(
                engines.lines().any(|l| l == want),
                "{name}: no {want} in\n{engines}"
            );
        }
        // Migration 12 carried the day rows over to stats_total_days and dropped this.
        assert!(
            !engines.lines().any(|l| l.starts_with("stats_days\t")),
            "{name}: stats_days is left in\n{engines}"
        );
    }
    // A site created through one server is read from every other one.
    let (site_id, _) = site_with_key().await;
    for (name, url) in nodes() {
        let sql = format!("SELECT count() FROM sites FINAL WHERE site_id = {site_id}");
        Pace::within(Duration::from_secs(30))
            .every(Duration::from_millis(200))
            .poll_until(&format!("{name} did not get site {site_id}"), || async {
                let n = on_node(&url, &sql).await;
                if n.trim() == "1" {
                    Ok(())
                } else {
                    Err(n)
                }
            })
            .await;
    }
}

/// Waits until every server answers `sql` with `want` (trimmed), for at most `within`
/// each.
async fn every_node_answers(sql: &str, want: &str, within: Duration) {
    for (name, url) in nodes() {
        Pace::within(within)
            .every(Duration::from_millis(200))
            .poll_until(&format!("{name}: {sql}"), || async {
                let got = on_node(&url, sql).await;
                if got.trim() == want {
                    Ok(())
                } else {
                    Err(got)
                }
            })
            .await;
    }
}

/// `Db::alter` (not `ON CLUSTER`, whose DDL worker 18.16 can stop for good): once per
/// replication group, reaching every server, and refused when CLICKHOUSE_NODES misses a
/// shard or no server answers.
#[tokio::test]
async fn an_alter_runs_once_per_replication_group_and_reaches_every_server() {
    let db = db().await;
    let column = "alter_check";
    let added = db
        .alter("events_local", &format!("ADD COLUMN {column} UInt8"), |q| q)
        .await
        .unwrap();
    assert_eq!(added, 2, "one server of each shard");
    let has_column = format!(
        "SELECT count() FROM system.columns WHERE database = currentDatabase() \
         AND table = 'events_local' AND name = '{column}'"
    );
    // A replica restarted by an earlier test may take the ALTER from the log a moment later.
    let on_every_node = |sql: String, want: &'static str| async move {
        every_node_answers(&sql, want, Duration::from_secs(60)).await
    };
    on_every_node(has_column.clone(), "1").await;
    // Again: the column is there, which counts as added.
    let add = format!("ADD COLUMN {column} UInt8");
    assert_eq!(db.alter("events_local", &add, |q| q).await.unwrap(), 2);
    db.alter("events_local", &format!("DROP COLUMN {column}"), |q| q)
        .await
        .unwrap();
    on_every_node(has_column, "0").await;

    // A table replicated to every server: one mutation, which every server holds once.
    let site = u32::MAX - (std::process::id() % 65_536);
    let deleted = db
        .alter("person_claims", "DELETE WHERE site_id = ?", |q| {
            q.bind(site)
        })
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    let mutations = format!(
        "SELECT count() FROM system.mutations WHERE database = currentDatabase() \
         AND table = 'person_claims' AND command LIKE '%site_id = {site}%'"
    );
    on_every_node(mutations, "1").await;

    // Servers of one shard only: the other shard would be left out.
    let first = nodes()[0].1.clone();
    let one_shard = Db {
        nodes: vec![first],
        ..db.clone()
    };
    let err = one_shard
        .alter("events_local", "DELETE WHERE site_id = ?", |q| q.bind(site))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("1 of its 2 replication groups"), "{err}");

    // No server that answers: nothing is run on the connected server alone.
    let unreachable = Db {
        nodes: vec!["http://127.0.0.1:9".into()],
        ..db.clone()
    };
    let err = unreachable
        .alter("events_local", "DELETE WHERE site_id = ?", |q| q.bind(site))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("1 did not answer (http://127.0.0.1:9: ") && err.contains("nothing was run"),
        "{err}"
    );
}

#[tokio::test]
async fn the_overview_answers_on_the_cluster_as_on_a_single_node() {
    let cluster = db().await;
    let single_env = single_node();
    let single_url = single_env["CLICKHOUSE_URL"].clone();
    let (single_user, single_password) = (
        single_env["CLICKHOUSE_USER"].clone(),
        single_env["CLICKHOUSE_PASSWORD"].clone(),
    );
    let single = ChConfig {
        url: single_url.clone(),
        user: single_user.clone(),
        password: single_password.clone(),
        topology: rivulet_common::topology::Topology::SingleNode,
        insert_quorum: 0,
        nodes: vec![single_url.clone()],
        ..ChConfig::from_env().unwrap()
    }
    .connect()
    .await
    .expect("the single-node ClickHouse");
    rivulet_common::schema::migrations::migrate(&single)
        .await
        .unwrap();

    // A site of our own; every event twice (a redelivery), some bots, over two hours.
    let site_id = 3_000_000 + (Uuid::new_v4().as_u128() % 1_000_000) as u32;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32;
    let since = now / 3600 * 3600 - 23 * 3600;
    let rows = rows_of(site_id, 600, now / 3600 * 3600 - 3600);
    for target in [&cluster, &single] {
        insert(target, &rows).await;
        insert(target, &rows).await;
    }
    let cluster_url = env("CLICKHOUSE_URL");
    for st in queries::ALL
        .iter()
        .filter(|s| s.name.starts_with("overview_"))
    {
        let sql = bound(st.sql, &[site_id, since]);
        let on_cluster = on_node(&cluster_url, &sql).await;
        let on_single = on_node_as(&single_url, &single_user, &single_password, &sql).await;
        assert!(!on_single.trim().is_empty(), "{}: no rows", st.name);
        assert_eq!(on_cluster, on_single, "{}", st.name);
    }
    // And the documented exact count.
    let exact = format!("SELECT count() FROM events FINAL WHERE site_id = {site_id}");
    assert_eq!(on_node(&cluster_url, &exact).await.trim(), "600");
    assert_eq!(
        on_node_as(&single_url, &single_user, &single_password, &exact)
            .await
            .trim(),
        "600"
    );
}

/// The replicas of each shard: `[(shard 1: r1, r2), (shard 2: r1, r2)]` by name and URL.
fn shards() -> [[(String, String); 2]; 2] {
    let n = nodes();
    [[n[0].clone(), n[1].clone()], [n[2].clone(), n[3].clone()]]
}

#[tokio::test]
async fn an_acknowledged_insert_survives_losing_a_replica_of_every_shard_right_after() {
    let db = db().await;
    let site_id = 4_000_000 + (Uuid::new_v4().as_u128() % 1_000_000) as u32;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32;
    let rows = rows_of(site_id, 2000, now - 600);
    insert(&db, &rows).await;
    // At once, before anything else happens, one replica of each shard is gone: the one
    // the insert entered through (clickhouse-s1r1, CLICKHOUSE_URL) and one of shard 2.
    let [[s1r1, s1r2], [s2r1, s2r2]] = shards();
    for (name, _) in [&s1r1, &s2r1] {
        stack(&["kill", name]);
    }
    // The survivors alone must hold every row (read locally: no replication to wait for).
    let local = format!("SELECT count() FROM events_local WHERE site_id = {site_id}");
    let mut survived = 0u64;
    for (name, url) in [&s1r2, &s2r2] {
        let n: u64 = on_node(url, &local).await.trim().parse().unwrap();
        eprintln!("{name} holds {n} of the rows");
        survived += n;
    }
    for (name, _) in [&s1r1, &s2r1] {
        stack(&["start", name]);
    }
    assert_eq!(survived, rows.len() as u64, "rows lost with a replica");
}

/// Posts one event; its status.
async fn post_event(url: &str, site_id: u32, key: &str) -> u16 {
    http()
        .post(format!("{url}/api/track"))
        .timeout(Duration::from_secs(15))
        .json(&json!({"api_key": key, "site_id": site_id, "pathname": "/isr"}))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test]
async fn ingest_answers_200_with_one_broker_down_and_never_200_with_two() {
    let (site_id, key) = site_with_key().await;
    let ingest = start_ingest(&[("KAFKA_ACK_TIMEOUT_MS", "5000")]).await;
    assert_eq!(post_event(&ingest.url, site_id, &key).await, 200);
    let brokers: Vec<String> = env("RIVULET_KAFKA_NODE_NAMES")
        .split(',')
        .map(str::to_string)
        .collect();
    assert_eq!(brokers.len(), 3, "{brokers:?}");

    stack(&["stop", &brokers[2]]);
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(post_event(&ingest.url, site_id, &key).await);
    }
    eprintln!("one broker down: {statuses:?}");
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");

    stack(&["stop", &brokers[1]]);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(post_event(&ingest.url, site_id, &key).await);
    }
    eprintln!("two brokers down: {statuses:?}");
    for b in [&brokers[1], &brokers[2]] {
        stack(&["start", b]);
    }
    assert!(
        statuses.iter().all(|s| *s == 503),
        "with one in-sync replica left, every answer must be 503: {statuses:?}"
    );
    // And it recovers by itself.
    Pace::within(Duration::from_secs(60))
        .every(Duration::from_millis(500))
        .poll_until("no 200 after the brokers returned", || async {
            match post_event(&ingest.url, site_id, &key).await {
                200 => Ok(()),
                other => Err(other),
            }
        })
        .await;
}

#[tokio::test]
async fn an_erased_person_is_gone_from_every_replica_and_stays_gone() {
    nodes();
    rivulet_tests::lifecycle::erasure_with_events_in_flight(1).await;
}

#[tokio::test]
async fn a_burst_of_erasures_takes_a_few_mutations_on_every_server() {
    nodes();
    // One server of each shard runs the mutations of its shard's tables, one server those
    // of the people tables every server holds (Db::alter); a round is one per table,
    // rounds repeat while a replica still has a row.
    rivulet_tests::lifecycle::erasure_burst(1000, 8).await;
}

#[tokio::test]
async fn retention_removes_a_sites_expired_rows_on_every_replica() {
    nodes();
    rivulet_tests::lifecycle::retention_by_site().await;
}

#[tokio::test]
async fn retention_drops_whole_months_once_every_site_has_expired_them() {
    nodes();
    rivulet_tests::lifecycle::retention_drops_whole_months().await;
}

#[tokio::test]
async fn an_export_from_the_cluster_equals_the_table_in_constant_memory() {
    nodes();
    rivulet_tests::lifecycle::export_rows(100_000, 100, Some("export-100k-cluster.json")).await;
}

#[tokio::test]
async fn the_stats_api_answers_on_the_cluster_as_computed_from_the_events_written() {
    nodes();
    let (site_id, _) = site_with_key().await;
    let key = rivulet_tests::stats::prepare_site(site_id).await;
    // A smaller dataset than the single node's, with its edges (DST, midnight, bots,
    // duplicates, claims), written as the enricher writes: through the Distributed table,
    // synchronously, with the quorum; every copy of an event on the same shard, a visit's
    // events spread over both.
    let ds = rivulet_tests::stats::generate(site_id, 20_251_026, 40, 8);
    rivulet_tests::stats::load(&db().await, &ds).await;
    let admin = start_admin(
        &format!("test-token-{}", Uuid::new_v4().simple()),
        &[("STATS_RATE_LIMIT_PER_MINUTE", "0")],
    )
    .await;
    // The rollup's totals and series, and its visits filtered (by an attribute, by page).
    let visits: Vec<_> = rivulet_tests::stats::rollup_queries(site_id)
        .into_iter()
        .filter(|(name, _)| {
            [
                "rollup visits: German Chrome, the main range by [\"visit:source\"]",
                "rollup visits: a tree, the main range by [\"time:week\"]",
                "rollup visits: German Chrome, the main range by event:page",
            ]
            .contains(&name.as_str())
        })
        .collect();
    assert_eq!(
        visits.len(),
        3,
        "the visits' queries are named as the matrix names them"
    );
    let queries = [
        rivulet_tests::stats::cluster_queries(site_id),
        rivulet_tests::stats::rollup_queries(site_id)[..4].to_vec(),
        visits,
    ]
    .concat();
    let failures = rivulet_tests::stats::mismatches(&admin.url, &key, &ds, &queries).await;
    assert!(
        failures.is_empty(),
        "{} of {} queries differ on the cluster:\n\n{}",
        failures.len(),
        queries.len(),
        failures.join("\n\n")
    );
    // The daily rollup, computed through one server, is on every server (replicated
    // like the registry), and answers the same.
    let run = rivulet_tests::stats::compute_rollup(site_id).await;
    assert!(run["days_computed"].as_u64().unwrap() > 0, "{run}");
    let markers = run["days_computed"].to_string();
    let sql =
        format!("SELECT count() FROM stats_total_days WHERE site_id = {site_id} AND kind = 0");
    every_node_answers(&sql, &markers, Duration::from_secs(30)).await;
    let sql =
        format!("SELECT count() FROM stats_visit_days WHERE site_id = {site_id} AND kind = 0");
    every_node_answers(&sql, &markers, Duration::from_secs(30)).await;
    let failures = rivulet_tests::stats::mismatches(&admin.url, &key, &ds, &queries).await;
    assert!(
        failures.is_empty(),
        "{} of {} queries differ on the cluster with the rollup:\n\n{}",
        failures.len(),
        queries.len(),
        failures.join("\n\n")
    );

    // Erasure reaches the rollup on every server: the person's hashed id rows go with
    // their events, and every figure is the one without them.
    let person = rivulet_tests::stats::ERASED_USER;
    assert!(ds.events_of_person(person) > 0, "{person} has events");
    let theirs = format!(
        "SELECT (SELECT count() FROM stats_total_days WHERE site_id = {site_id} AND id_hash = cityHash64('{person}')) \
         + (SELECT count() FROM stats_breakdown_days WHERE site_id = {site_id} AND id_hash = cityHash64('{person}')) \
         + (SELECT count() FROM stats_visit_days WHERE site_id = {site_id} AND has(visitors, cityHash64('{person}')))"
    );
    assert_ne!(on_node(&nodes()[0].1, &theirs).await.trim(), "0");
    let lane = rivulet_tests::lifecycle::Lane::new("cluster-rollup-erase").await;
    let enricher = lane
        .start_enricher(&format!("rivulet-tests-rollup-erase-{site_id}"), &[])
        .await;
    let receipt = rivulet_tests::data::run_admin_async(
        &[
            "erase",
            "--site",
            &site_id.to_string(),
            "--user-id",
            person,
            "--wait",
            "--timeout",
            "300",
        ],
        &[],
    )
    .await
    .json();
    assert_eq!(receipt["state"], "done", "{receipt}");
    drop(enricher);
    for (name, url) in nodes() {
        assert_eq!(
            on_node(&url, &theirs).await.trim(),
            "0",
            "{name} keeps {person}'s rollup rows"
        );
    }
    let after = ds.without_person(person);
    let failures = rivulet_tests::stats::mismatches(&admin.url, &key, &after, &queries).await;
    assert!(
        failures.is_empty(),
        "{} of {} queries differ on the cluster after an erasure:\n\n{}",
        failures.len(),
        queries.len(),
        failures.join("\n\n")
    );
    lane.delete().await;
}

// Identity and import on the cluster: an ingest and an enricher with topics and a group
// of their own (see `topics`), so that they read only what these tests send.
const CLUSTER_RAW: &str = "rivulet-tests.cluster.raw";
const CLUSTER_IMPORT: &str = "rivulet-tests.cluster.import";

async fn pipeline() -> (Service, Service) {
    ensure_topic(CLUSTER_RAW, 3).await;
    ensure_topic(CLUSTER_IMPORT, 3).await;
    let ingest = start_ingest(&[("KAFKA_TOPIC_RAW", CLUSTER_RAW)]).await;
    let enricher = start_enricher(&[
        ("KAFKA_TOPIC_RAW", CLUSTER_RAW),
        ("KAFKA_TOPIC_IMPORT", CLUSTER_IMPORT),
        ("KAFKA_GROUP_ID", "rivulet-tests-cluster"),
        ("LIFECYCLE_RUNNER", "false"),
    ])
    .await;
    wait_assigned(&enricher).await;
    (ingest, enricher)
}

/// `users show` through one node of the cluster (its `CLICKHOUSE_URL`).
fn users_show_on(url: &str, site_id: u32, user: &str) -> Option<serde_json::Value> {
    let run = admin_run(
        &[
            "users",
            "show",
            "--site",
            &site_id.to_string(),
            "--user-id",
            user,
        ],
        &[("CLICKHOUSE_URL", url)],
    );
    if !run.status.success() && run.stderr.contains("has no user") {
        return None;
    }
    Some(run.json())
}

#[tokio::test]
async fn identify_on_the_cluster_makes_anonymous_events_the_users_on_every_node() {
    let (ingest, _enricher) = pipeline().await;
    let (site_id, key) = site_with_key().await;
    let suffix = Uuid::new_v4().simple().to_string();
    let (user, late, device) = (
        format!("user-{suffix}"),
        format!("late-{suffix}"),
        format!("dev-{suffix}"),
    );
    let t = (now_ms() / 1000 - 3600) * 1000;
    let post = |path: &'static str, body: serde_json::Value| {
        let url = format!("{}{path}", ingest.url);
        async move {
            let r = http().post(url).json(&body).fetch().await;
            assert_eq!(r.status(), 200, "{body}");
        }
    };
    for i in 0..2 {
        post(
            "/api/track",
            json!({"api_key": key, "site_id": site_id, "anonymous_id": device,
            "pathname": format!("/before-{i}"), "timestamp": t + i * 1000}),
        )
        .await;
    }
    post(
        "/api/identify",
        json!({"api_key": key, "site_id": site_id, "user_id": user,
        "anonymous_id": device, "timestamp": t + 10_000, "traits": {"plan": "pro", "seats": 3}}),
    )
    .await;
    post(
        "/api/track",
        json!({"api_key": key, "site_id": site_id, "user_id": user,
        "pathname": "/after", "timestamp": t + 20_000}),
    )
    .await;
    // A later claim of the same device by someone else does not move it.
    post(
        "/api/identify",
        json!({"api_key": key, "site_id": site_id, "user_id": late,
        "anonymous_id": device, "timestamp": t + 30_000, "traits": {"plan": "free"}}),
    )
    .await;

    for (name, url) in nodes() {
        let p = Pace::within(Duration::from_secs(60))
            .every(Duration::from_millis(500))
            .poll_until(
                &format!("{name}: users show did not count the 3 events"),
                || async {
                    match users_show_on(&url, site_id, &user) {
                        Some(p) if p["events"] == 3 => Ok(p),
                        other => Err(format!("{other:?}")),
                    }
                },
            )
            .await;
        assert_eq!(p["aliases"], json!([device]), "{name}: {p}");
        assert_eq!(p["events_before_identify"], 2, "{name}: {p}");
        assert_eq!(
            p["traits"],
            json!({"plan": "pro", "seats": 3}),
            "{name}: {p}"
        );
        let other = Pace::within(Duration::from_secs(60))
            .every(Duration::from_millis(500))
            .poll_until(
                &format!("{name}: the late claimant's traits did not show"),
                || async {
                    match users_show_on(&url, site_id, &late) {
                        Some(p) if p["traits"]["plan"] == "free" => Ok(p),
                        other => Err(format!("{other:?}")),
                    }
                },
            )
            .await;
        assert_eq!(
            (&other["events"], &other["aliases"]),
            (&json!(0), &json!([])),
            "{name}: {other}"
        );
    }
}

#[tokio::test]
async fn an_import_on_the_cluster_run_twice_stores_each_event_once() {
    let (_ingest, _enricher) = pipeline().await;
    let (site_id, _) = site_with_key().await;
    let dir = scratch_dir("cluster-import");
    let file = import_example(&dir, "umami-website-events.csv");
    for run in ["first", "second"] {
        let out = admin_run(
            &[
                "import",
                "--site",
                &site_id.to_string(),
                "--format",
                "umami",
                file.to_str().unwrap(),
            ],
            &[("KAFKA_TOPIC_IMPORT", CLUSTER_IMPORT)],
        );
        let summary = out.json();
        assert_eq!(summary["imported"], 4, "{run} run: {summary}");
    }
    let sql = format!("SELECT uniqExact(event_id) FROM events WHERE site_id = {site_id}");
    assert_eq!(wait_count(&sql, 4, Duration::from_secs(60)).await, 4);
    // Both runs' events are stored (the second run's are the same events again); every
    // node reads each event once through the Distributed table, since every copy of an
    // event is on the same shard.
    wait_group_caught_up(
        "rivulet-tests-cluster-import",
        CLUSTER_IMPORT,
        Duration::from_secs(120),
    )
    .await;
    let exact = format!(
        "SELECT count(), uniqExact(event_id), toUnixTimestamp(min(timestamp)) \
         FROM events FINAL WHERE site_id = {site_id}"
    );
    for (name, url) in nodes() {
        assert_eq!(
            on_node(&url, &exact).await.trim(),
            "4\t4\t1740820502",
            "{name}: 4 events, each once, at their own time (2025-03-01 09:15:02)"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
