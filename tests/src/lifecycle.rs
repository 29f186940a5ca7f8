//! The data's lifecycle on the real services — erasure, retention, export — as scenarios
//! that tests/tests/privacy.rs runs on the single node and the cluster suite
//! (tests/tests/cluster.rs) runs, smaller, on `scripts/stack up --cluster`.
//!
//! Every scenario has a site of its own and, for the enrichers it starts, Kafka topics of
//! its own (a [`Lane`]): an enricher in a new consumer group on the shared `events.raw`
//! would store every other test's events again, and on the shared topic another test's
//! enricher could consume the events a scenario keeps in flight. The lifecycle runner is
//! the enricher that holds partition 0 of its raw topic in its group; every running
//! enricher of the stack has one, and each runs whatever erasure is due, whoever asked
//! (every step is safe to run twice): the scenarios expect that.

use crate::data::{run_admin_async, CHROME};
use crate::kafka::{delete_topic, wait_group_caught_up};
use crate::topics::ensure_topic;
use crate::*;
use rivulet_common::ch::{ChConfig, Db};
use rivulet_common::schema::events::EventRow;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Whether the stack is a cluster (`CLICKHOUSE_CLUSTER` set by `scripts/stack up --cluster`).
pub fn is_cluster() -> bool {
    !env("CLICKHOUSE_CLUSTER").is_empty()
}

/// The table each server holds `events` in: `events_local` on a cluster.
fn local_events() -> &'static str {
    if is_cluster() {
        rivulet_common::schema::events::LOCAL_TABLE
    } else {
        rivulet_common::schema::events::TABLE
    }
}

/// A client per server (`CLICKHOUSE_NODES`).
fn each_node() -> Vec<Db> {
    load_stack_env();
    ChConfig::from_env().unwrap().each_node()
}

fn short_tag() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..10].to_string()
}

pub fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

fn rfc3339_secs(secs: u32) -> String {
    rfc3339(i64::from(secs) * 1000)
}

/// One number a statement answers (binds in order: JSON numbers and strings, bound as
/// the SQL literals of their type).
async fn number(db: &Db, sql: &str, binds: &[Value]) -> u64 {
    let mut q = db.client.query(sql);
    for b in binds {
        q = q.bind(b);
    }
    q.fetch_one::<u64>()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The rows a statement answers, as lines of TSV (binds in order).
async fn tsv(db: &Db, sql: &str, binds: &[Value]) -> Vec<String> {
    let mut q = db.client.query(sql);
    for b in binds {
        q = q.bind(b);
    }
    let bytes = q
        .fetch_bytes("TabSeparated")
        .unwrap()
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Runs a statement that answers nothing, with the events' insert settings (on a
/// cluster: synchronous distributed inserts, the quorum).
async fn execute(db: &Db, sql: &str) {
    db.events
        .query(sql)
        .execute()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Waits until a number reaches `want` exactly, failing with `what` otherwise.
async fn wait_number(db: &Db, what: &str, sql: &str, binds: &[Value], want: u64, within: Duration) {
    Pace::within(within)
        .every(Duration::from_millis(250))
        .poll_until(what, || async {
            let n = number(db, sql, binds).await;
            if n == want {
                Ok(())
            } else {
                Err(format!("{n}, want {want}"))
            }
        })
        .await
}

/// Writes a result file into `$RIVULET_STACK_DIR/artifacts` (the docs are made from them).
pub fn write_artifact(name: &str, value: &Value) -> PathBuf {
    let dir = PathBuf::from(env("RIVULET_STACK_DIR")).join("artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(value).unwrap() + "\n").unwrap();
    path
}

/// A value of an enricher's `/metrics`, summed over its labels (a lane's metric has one
/// series per lane), 0 when no series is there (a counter never incremented is not
/// exported).
pub async fn metric_or_zero(svc: &Service, name: &str) -> f64 {
    svc.metrics_text()
        .await
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once("} ")?.1,
                None => rest.strip_prefix(' ')?,
            };
            value.trim().parse::<f64>().ok()
        })
        .sum()
}

/// The events and identify calls an enricher dropped as erased: when it read them, or,
/// when its ledger learnt of the erasure only later, just before their insert.
async fn erased_dropped(svc: &Service) -> f64 {
    metric_or_zero(svc, "enricher_erased_events_dropped_total").await
        + metric_or_zero(svc, "enricher_erased_rows_dropped_total").await
}

/// Checks what an enricher dropped as erased: each of `events` once, and each identify
/// call either as one message (dropped when read) or as its rows (`identify_rows`: an
/// alias and a row per trait, cut just before their insert when the ledger learnt of the
/// erasure only then, as it does when a fresh enricher reads before its first ledger
/// load). Which one happens depends on timing, so either is right for each call.
fn assert_dropped(dropped: f64, events: usize, identify_rows: &[usize], what: &str) {
    let mut allowed = BTreeSet::from([events]);
    for rows in identify_rows {
        allowed = allowed.iter().flat_map(|n| [n + 1, n + rows]).collect();
    }
    assert!(
        allowed.contains(&(dropped as usize)),
        "{what}: {dropped} dropped, expected one of {allowed:?}"
    );
}

/// A raw topic and a DLQ of a scenario's own, and how its services are started on them.
pub struct Lane {
    pub topic: String,
    pub dlq: String,
}

impl Lane {
    pub async fn new(name: &str) -> Lane {
        let tag = short_tag();
        let lane = Lane {
            topic: format!("test.{name}.{tag}.raw"),
            dlq: format!("test.{name}.{tag}.dlq"),
        };
        ensure_topic(&lane.topic, 3).await;
        ensure_topic(&lane.dlq, 1).await;
        lane
    }

    /// The topics, for every binary that reads them (ingest, the enricher, replay).
    pub fn topics(&self) -> Vec<(String, String)> {
        vec![
            ("KAFKA_TOPIC_RAW".into(), self.topic.clone()),
            ("KAFKA_TOPIC_DLQ".into(), self.dlq.clone()),
        ]
    }

    /// Starts an enricher of group `group` on this lane, its lifecycle runner paced for a
    /// test (a request is due 2 s after it is recorded, the ledger is read every 200 ms),
    /// its import lane off (it would read the shared `events.import` in a new group);
    /// waits until it holds every partition (so it runs the lifecycle).
    pub async fn start_enricher(&self, group: &str, extra: &[(&str, &str)]) -> Service {
        let mut env: Vec<(String, String)> = self.topics();
        for (k, v) in [
            ("KAFKA_GROUP_ID", group),
            ("ENRICHER_IMPORT_LANE", "false"),
            ("ERASURE_CHECK_MS", "200"),
            ("ERASURE_DELAY_MS", "2000"),
            ("LEDGER_REFRESH_MS", "200"),
            ("LEDGER_MAX_AGE_MS", "1000"),
        ]
        .iter()
        .chain(extra)
        {
            env.push((k.to_string(), v.to_string()));
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let svc = start_enricher(&env).await;
        wait_assigned(&svc).await;
        svc
    }

    pub async fn start_ingest(&self) -> Service {
        let env = self.topics();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        start_ingest(&env).await
    }

    pub async fn delete(&self) {
        delete_topic(&self.topic).await;
        delete_topic(&self.dlq).await;
    }
}

// ---------------------------------------------------------------------------------------
// Erasure of a person whose events are still in Kafka, across a restart, a replay and a
// new consumer group.

/// Who sends events: a user id, an anonymous id (`identify` links it to a user), or
/// neither (a visitor, known by the hash of its address and browser).
struct Sender {
    user_id: Option<String>,
    anonymous_id: Option<String>,
    ip: String,
    user_agent: String,
}

impl Sender {
    fn new(user_id: Option<&str>, anonymous_id: Option<&str>, ip: &str, agent: &str) -> Sender {
        Sender {
            user_id: user_id.map(str::to_string),
            anonymous_id: anonymous_id.map(str::to_string),
            ip: ip.to_string(),
            user_agent: agent.to_string(),
        }
    }

    /// `n` pageviews, a second apart from `from_ms`.
    fn events(&self, n: usize, from_ms: i64, path: &str) -> Vec<Value> {
        (0..n)
            .map(|i| {
                let mut e = json!({
                    "type": "pageview",
                    "pathname": format!("{path}/{i}"),
                    "event_id": uuid::Uuid::new_v4().to_string(),
                    "timestamp": from_ms + 1000 * i as i64,
                    "ip_address": self.ip,
                    "user_agent": self.user_agent,
                });
                if let Some(u) = &self.user_id {
                    e["user_id"] = json!(u);
                }
                if let Some(a) = &self.anonymous_id {
                    e["anonymous_id"] = json!(a);
                }
                e
            })
            .collect()
    }
}

async fn identify(ingest: &Service, site: u32, key: &str, body: Value) {
    let mut body = body;
    body["api_key"] = json!(key);
    body["site_id"] = json!(site);
    body["event_id"] = json!(uuid::Uuid::new_v4().to_string());
    let status = http()
        .post(format!("{}/api/identify", ingest.url))
        .json(&body)
        .fetch_status()
        .await;
    assert_eq!(status, 200, "identify {body}");
}

/// The ids of the person erased: their user id, the anonymous id they claimed, and the
/// visitor id their anonymous events were stored under.
struct Erased {
    user: String,
    anonymous: String,
    visitor: String,
}

/// The rows of everyone but the erased person, as `FINAL` shows them, in a fixed order.
#[derive(Debug, PartialEq)]
struct Others {
    events: Vec<String>,
    aliases: Vec<String>,
    traits: Vec<String>,
}

async fn others(db: &Db, site: u32, a: &Erased) -> Others {
    let (site, user, anonymous) = (json!(site), json!(a.user), json!(a.anonymous));
    Others {
        events: tsv(
            db,
            "SELECT * FROM events FINAL WHERE site_id = ? AND user_id NOT IN (?, ?) \
             AND anonymous_id != ? ORDER BY event_id",
            &[
                site.clone(),
                user.clone(),
                json!(a.visitor),
                anonymous.clone(),
            ],
        )
        .await,
        aliases: tsv(
            db,
            "SELECT * FROM person_claims FINAL WHERE site_id = ? AND user_id != ? \
             AND anonymous_id != ? ORDER BY anonymous_id, user_id",
            &[site.clone(), user.clone(), anonymous],
        )
        .await,
        traits: tsv(
            db,
            "SELECT * FROM person_trait_values FINAL WHERE site_id = ? AND user_id != ? \
             ORDER BY user_id, name, trusted",
            &[site, user],
        )
        .await,
    }
}

/// The erased person's rows on every server, in its own tables (on a cluster each
/// replica's `events_local` and its copy of the people tables), none merged away: each
/// table's count, which must all be 0.
async fn rows_of_erased(site: u32, a: &Erased) -> Vec<(String, u64)> {
    let (site, user, anonymous) = (json!(site), json!(a.user), json!(a.anonymous));
    let events = format!(
        "SELECT count() FROM {} WHERE site_id = ? AND (user_id IN (?, ?) OR anonymous_id = ?)",
        local_events()
    );
    let checks = [
        (
            events.as_str(),
            vec![site.clone(), user.clone(), json!(a.visitor), anonymous.clone()],
        ),
        (
            "SELECT count() FROM person_claims WHERE site_id = ? AND (user_id = ? OR anonymous_id = ?)",
            vec![site.clone(), user.clone(), anonymous],
        ),
        (
            "SELECT count() FROM person_trait_values WHERE site_id = ? AND user_id = ?",
            vec![site, user],
        ),
    ];
    let mut found = Vec::new();
    for (i, node) in each_node().iter().enumerate() {
        for (sql, binds) in &checks {
            let table = sql
                .split("FROM ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap();
            found.push((format!("node {i} {table}"), number(node, sql, binds).await));
        }
    }
    found
}

async fn assert_erased_everywhere(site: u32, a: &Erased, when: &str) {
    let found = rows_of_erased(site, a).await;
    assert!(
        found.iter().all(|(_, n)| *n == 0),
        "{when}: rows of the erased person remain: {found:?}"
    );
}

/// Events counted per `FINAL` for the site, and the site's aliases and traits.
async fn wait_stored(db: &Db, site: u32, events: usize, aliases: usize, traits: usize) {
    for (what, sql, want) in [
        (
            "events",
            "SELECT count() FROM events FINAL WHERE site_id = ?",
            events,
        ),
        (
            "aliases",
            "SELECT count() FROM person_claims FINAL WHERE site_id = ?",
            aliases,
        ),
        (
            "traits",
            "SELECT count() FROM person_trait_values FINAL WHERE site_id = ?",
            traits,
        ),
    ] {
        wait_number(
            db,
            &format!("site {site} did not get its {want} {what}"),
            sql,
            &[json!(site)],
            want as u64,
            Duration::from_secs(90),
        )
        .await;
    }
}

/// A person (user id A, who claimed anonymous id `dev-A` through identify) is erased while
/// some of their events are stored and others wait in Kafka with the enricher down:
///
/// 1. A, B (user id and an anonymous id of their own), C, a person known only by an
///    anonymous id, and visitors send events; they are stored and committed;
/// 2. the enricher is SIGKILLed; A and the others send more (in flight in Kafka), A calls
///    identify again;
/// 3. `rivulet-admin erase --site S --user-id A` records the request; the enricher is
///    started again and the receipt reaches `done`;
/// 4. `rivulet-admin replay` reads the whole topic again;
/// 5. an enricher in a new consumer group reads the whole topic from its beginning.
///
/// After 3, 4 and 5: no row of A anywhere (events by user id, by the anonymous id, by the
/// visitor id their anonymous events had; aliases; traits), on every server; everyone
/// else's rows — events, aliases, traits, whole rows as `FINAL` shows them — exactly as
/// they were. `scale` multiplies the number of events each sender sends.
pub async fn erasure_with_events_in_flight(scale: usize) {
    let started_ms = now_ms();
    let lane = Lane::new("erase").await;
    let (site, key) = site_with_key().await;
    let db = db().await;
    let tag = short_tag();
    let (user_a, anon_a) = (format!("alice-{tag}"), format!("dev-alice-{tag}"));
    let (user_b, anon_b) = (format!("bob-{tag}"), format!("dev-bob-{tag}"));
    let (user_c, anon_d) = (format!("carol-{tag}"), format!("dev-dan-{tag}"));
    let user_e = format!("erin-{tag}");
    let a_ip = "81.2.69.142";
    let a_user = Sender::new(Some(&user_a), None, a_ip, CHROME);
    let a_device = Sender::new(None, Some(&anon_a), a_ip, CHROME);
    let a_both = Sender::new(Some(&user_a), Some(&anon_a), a_ip, CHROME);
    let b_user = Sender::new(Some(&user_b), None, "81.2.69.160", "TestAgent/B");
    let b_device = Sender::new(None, Some(&anon_b), "81.2.69.160", "TestAgent/B");
    let c_user = Sender::new(Some(&user_c), None, "10.1.0.3", "TestAgent/C");
    let d_device = Sender::new(None, Some(&anon_d), "10.1.0.4", "TestAgent/D");
    let visitors: Vec<Sender> = (0..4)
        .map(|i| {
            Sender::new(
                None,
                None,
                &format!("10.2.0.{i}"),
                &format!("TestAgent/V{i}"),
            )
        })
        .collect();
    let e_user = Sender::new(Some(&user_e), None, "10.1.0.5", "TestAgent/E");

    let ingest = lane.start_ingest().await;
    let group = format!("test-erase-{tag}");
    let enricher = lane.start_enricher(&group, &[]).await;

    // 1. Two hours ago: far enough from the in-flight events (now) that every sender's
    // session ends between the two, whichever enricher opens the next one.
    let p1 = now_ms() - 2 * 3_600_000;
    identify(
        &ingest,
        site,
        &key,
        json!({"user_id": user_a, "anonymous_id": anon_a, "timestamp": p1 - 10_000,
               "traits": {"plan": "pro", "email": "alice@example.com"}}),
    )
    .await;
    identify(
        &ingest,
        site,
        &key,
        json!({"user_id": user_b, "anonymous_id": anon_b, "timestamp": p1 - 10_000,
               "traits": {"plan": "free"}}),
    )
    .await;
    let a_events_1 = [
        a_user.events(4 * scale, p1, "/a/user"),
        a_device.events(3 * scale, p1 + 100_000, "/a/device"),
        a_both.events(scale, p1 + 200_000, "/a/both"),
    ]
    .concat();
    let mut others_1 = [
        b_user.events(4 * scale, p1, "/b/user"),
        b_device.events(2 * scale, p1 + 100_000, "/b/device"),
        c_user.events(4 * scale, p1, "/c"),
        d_device.events(3 * scale, p1, "/d"),
    ]
    .concat();
    for (i, v) in visitors[..3].iter().enumerate() {
        others_1.extend(v.events(3 * scale, p1 + 1000 * i as i64, "/v"));
    }
    post_accepted_batch(&ingest.url, site, &key, &a_events_1).await;
    post_accepted_batch(&ingest.url, site, &key, &others_1).await;
    // Aliases: A's and B's; traits: A's two and B's one.
    wait_stored(&db, site, a_events_1.len() + others_1.len(), 2, 3).await;
    wait_group_caught_up(&group, &lane.topic, Duration::from_secs(60)).await;
    let visitor_a: Vec<String> = db
        .client
        .query("SELECT DISTINCT user_id FROM events WHERE site_id = ? AND anonymous_id = ? AND user_id != ?")
        .bind(site)
        .bind(&anon_a)
        .bind(&user_a)
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(
        visitor_a.len(),
        1,
        "A's anonymous events have one visitor id: {visitor_a:?}"
    );
    let a = Erased {
        user: user_a.clone(),
        anonymous: anon_a.clone(),
        visitor: visitor_a[0].clone(),
    };
    let before = others(&db, site, &a).await;
    assert_eq!(before.events.len(), others_1.len());
    assert_eq!(
        (before.aliases.len(), before.traits.len()),
        (1, 1),
        "{before:?}"
    );

    // 2. The enricher dies; events and an identify call wait in Kafka.
    let mut enricher = enricher;
    enricher.kill9();
    let p2 = now_ms() - 60_000;
    identify(
        &ingest,
        site,
        &key,
        json!({"user_id": user_a, "anonymous_id": anon_a, "timestamp": p2,
               "traits": {"plan": "enterprise"}}),
    )
    .await;
    identify(
        &ingest,
        site,
        &key,
        json!({"user_id": user_e, "anonymous_id": format!("dev-erin-{tag}"), "timestamp": p2,
               "traits": {"plan": "trial"}}),
    )
    .await;
    let a_events_2 = [
        a_user.events(2 * scale, p2, "/a/user/2"),
        a_device.events(2 * scale, p2 + 10_000, "/a/device/2"),
    ]
    .concat();
    let mut others_2 = [
        b_user.events(2 * scale, p2, "/b/user/2"),
        c_user.events(2 * scale, p2, "/c/2"),
        e_user.events(2 * scale, p2, "/e"),
    ]
    .concat();
    others_2.extend(visitors[3].events(2 * scale, p2, "/v/2"));
    post_accepted_batch(&ingest.url, site, &key, &a_events_2).await;
    post_accepted_batch(&ingest.url, site, &key, &others_2).await;

    // 3. The erasure, recorded while the enricher is down; then it comes back.
    let requested = run_admin_async(
        &["erase", "--site", &site.to_string(), "--user-id", &user_a],
        &[],
    )
    .await
    .json();
    assert_eq!(requested["state"], "pending", "{requested}");
    assert_eq!(
        requested["ids"],
        json!([["user_id", user_a], ["anonymous_id", anon_a]]),
        "the request names A and the anonymous id A claimed"
    );
    let request_id = requested["request_id"].as_str().unwrap().to_string();
    let enricher = lane.start_enricher(&group, &[]).await;
    let done = run_admin_async(
        &[
            "erase",
            "--status",
            &request_id,
            "--wait",
            "--timeout",
            "180",
        ],
        &[],
    )
    .await
    .json();
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(
        done["rows_removed"],
        a_events_1.len(),
        "the receipt counts A's stored events: {done}"
    );
    let others_total = others_1.len() + others_2.len();
    // B's and E's aliases; B's and E's traits.
    wait_stored(&db, site, others_total, 2, 2).await;
    wait_group_caught_up(&group, &lane.topic, Duration::from_secs(60)).await;
    // The identify in flight set one trait and an alias: 2 rows.
    assert_dropped(
        erased_dropped(&enricher).await,
        a_events_2.len(),
        &[2],
        "the restarted enricher dropped A's events and identify call that were in flight",
    );
    assert_erased_everywhere(site, &a, "after the erasure").await;
    let shown = run_admin_async(
        &[
            "users",
            "show",
            "--site",
            &site.to_string(),
            "--user-id",
            &user_a,
        ],
        &[],
    )
    .await;
    assert!(shown.error().contains("has no user"), "{}", shown.stderr);
    let after = others(&db, site, &a).await;
    for (what, was, now) in [
        ("events", &before.events, &after.events),
        ("aliases", &before.aliases, &after.aliases),
        ("traits", &before.traits, &after.traits),
    ] {
        let now: HashSet<&String> = now.iter().collect();
        let changed: Vec<&String> = was.iter().filter(|r| !now.contains(r)).collect();
        assert!(
            changed.is_empty(),
            "{what} of others changed or gone: {changed:#?}"
        );
    }
    assert_eq!(
        (after.events.len(), after.aliases.len(), after.traits.len()),
        (others_total, 2, 2),
        "the others' in-flight rows are stored"
    );

    // 4. A replay of the whole topic.
    let mut replay_env = lane.topics();
    replay_env.push((
        "GEOIP_DB".into(),
        geo_test_db().to_str().unwrap().to_string(),
    ));
    let replay_env: Vec<(&str, &str)> = replay_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let replay = run_admin_async(
        &["replay", "--since", &rfc3339(started_ms - 60_000)],
        &replay_env,
    )
    .await
    .json();
    let a_events = a_events_1.len() + a_events_2.len();
    assert_eq!(
        replay["events_in_range"],
        a_events + others_total,
        "{replay}"
    );
    assert_eq!(replay["erased"], a_events, "{replay}");
    assert_eq!(replay["unchanged"], others_total, "{replay}");
    for zero in [
        "rows_rewritten",
        "not_stored",
        "timestamp_differs",
        "undecodable",
    ] {
        assert_eq!(replay[zero], 0, "{zero}: {replay}");
    }
    assert_erased_everywhere(site, &a, "after the replay").await;
    assert_eq!(
        others(&db, site, &a).await,
        after,
        "the replay changed the others' rows"
    );

    // 5. A new consumer group reads the topic from its beginning.
    drop(enricher);
    let fresh = format!("test-erase-fresh-{tag}");
    let enricher = lane.start_enricher(&fresh, &[]).await;
    wait_group_caught_up(&fresh, &lane.topic, Duration::from_secs(120)).await;
    // A's two identify calls: 2 traits and an alias, then 1 trait and an alias.
    assert_dropped(
        erased_dropped(&enricher).await,
        a_events,
        &[3, 2],
        "the new group dropped every event and identify call of A",
    );
    assert_erased_everywhere(site, &a, "after a new consumer group read the topic").await;
    assert_eq!(
        others(&db, site, &a).await,
        after,
        "the new consumer group changed the others' rows"
    );
    drop(enricher);
    drop(ingest);
    lane.delete().await;
}

// ---------------------------------------------------------------------------------------
// A burst of erasures.

/// The mutations of Rivulet's tables each server has, by id.
async fn erasure_mutations(nodes: &[Db]) -> Vec<BTreeSet<(String, String)>> {
    #[derive(clickhouse::Row, serde::Deserialize)]
    struct Mutation {
        table: String,
        mutation_id: String,
    }
    let mut out = Vec::new();
    for node in nodes {
        let rows: Vec<Mutation> = node
            .client
            .query(
                "SELECT table, mutation_id FROM system.mutations WHERE database = currentDatabase() \
                 AND table IN ('events', 'events_local', 'person_claims', 'person_trait_values') \
                 AND position(command, 'erasure_ledger') > 0",
            )
            .fetch_all()
            .await
            .unwrap();
        out.push(rows.into_iter().map(|m| (m.table, m.mutation_id)).collect());
    }
    out
}

/// What a burst of erasures took.
#[derive(Debug)]
pub struct Burst {
    pub people: u64,
    /// Per table: the most erasure mutations any one server got during the burst.
    pub mutations: BTreeMap<String, u64>,
    pub seconds: f64,
}

/// `people` people of a site are erased in one call of `privacy::request_erasures`; each
/// has 4 events (3 under their user id, one of them with an anonymous id they claimed,
/// and one under a visitor id with that anonymous id), the alias and a trait; a fifth as
/// many people are kept. Waits until every receipt is `done`, then checks that nothing of
/// the erased is left on any server, that the kept rows are intact, and that the burst
/// took at most `max_mutations` mutations per table on any server. Writes the figures to
/// `artifacts/erasure-burst.json`.
pub async fn erasure_burst(people: u64, max_mutations: u64) -> Burst {
    let lane = Lane::new("burst").await;
    let (site, _) = site_with_key().await;
    let db = db().await;
    let tag = short_tag();
    let kept = people / 5;
    let ts = (now_ms() / 1000 - 3600) as u64;
    let claimed_ms = ts * 1000;
    for (prefix, n) in [("", people), ("k", kept)] {
        execute(
            &db,
            &format!(
                "INSERT INTO events (event_id, site_id, timestamp, received_at, type, pathname, \
                 user_id, session_id, anonymous_id) \
                 SELECT generateUUIDv4(), {site}, toDateTime({ts} + number % 3600), \
                 toDateTime({ts} + number % 3600), 'pageview', concat('/burst/', toString(number)), \
                 if(intDiv(number, {n}) = 3, concat('{prefix}visitor-{tag}-', toString(number % {n})), \
                    concat('{prefix}user-{tag}-', toString(number % {n}))), \
                 concat('session-', toString(number % {n})), \
                 if(intDiv(number, {n}) >= 2, concat('{prefix}anon-{tag}-', toString(number % {n})), '') \
                 FROM numbers({})",
                4 * n
            ),
        )
        .await;
        execute(
            &db,
            &format!(
                "INSERT INTO person_claims (site_id, anonymous_id, user_id, trusted, claimed_at_ms, received_at_ms, rank) \
                 SELECT {site}, concat('{prefix}anon-{tag}-', toString(number)), \
                 concat('{prefix}user-{tag}-', toString(number)), 1, {claimed_ms}, {claimed_ms}, {} FROM numbers({n})",
                rivulet_common::schema::people::claim_rank(true, claimed_ms)
            ),
        )
        .await;
        execute(
            &db,
            &format!(
                "INSERT INTO person_trait_values (site_id, user_id, name, trusted, value, removed, set_at_ms, received_at_ms) \
                 SELECT {site}, concat('{prefix}user-{tag}-', toString(number)), 'plan', 1, '\"pro\"', 0, \
                 {claimed_ms}, {claimed_ms} FROM numbers({n})"
            ),
        )
        .await;
    }
    let s = [json!(site)];
    let erased_events = format!(
        "SELECT count() FROM {} WHERE site_id = ? AND (user_id LIKE 'user-%' OR user_id LIKE 'visitor-%' OR anonymous_id LIKE 'anon-%')",
        local_events()
    );
    let kept_events =
        "SELECT count(), sum(cityHash64(toString(event_id), user_id, anonymous_id, pathname)) \
         FROM events FINAL WHERE site_id = ? AND user_id LIKE 'k%'";
    let people_tables = [
        ("person_claims", "user_id"),
        ("person_trait_values", "user_id"),
    ];
    let kept_before = tsv(&db, kept_events, &s).await;
    assert_eq!(
        number(&db, "SELECT count() FROM events WHERE site_id = ?", &s).await,
        4 * (people + kept)
    );

    let enricher = lane.start_enricher(&format!("test-burst-{tag}"), &[]).await;
    let nodes = each_node();
    let mutations_before = erasure_mutations(&nodes).await;
    let ids: Vec<String> = (0..people).map(|i| format!("user-{tag}-{i}")).collect();
    let started = Instant::now();
    let receipts = rivulet_common::privacy::request_erasures(
        &db,
        site,
        rivulet_common::privacy::SubjectKind::UserId,
        &ids,
        false,
    )
    .await
    .unwrap();
    let recorded = started.elapsed();
    assert_eq!(receipts.len() as u64, people);
    for (i, r) in receipts.iter().enumerate().step_by(997) {
        let want = json!([
            ["user_id", format!("user-{tag}-{i}")],
            ["anonymous_id", format!("anon-{tag}-{i}")]
        ]);
        assert_eq!(
            serde_json::from_str::<Value>(&r.ids).unwrap(),
            want,
            "receipt {i}"
        );
    }
    Pace::within(Duration::from_secs(900))
        .every(Duration::from_millis(250))
        .poll_until("the burst's receipts did not all reach done", || async {
            let (done, failed): (u64, u64) = db
                .client
                .query(
                    "SELECT countIf(state = 'done'), countIf(state = 'failed') \
                     FROM erasure_requests FINAL WHERE site_id = ?",
                )
                .bind(site)
                .fetch_one()
                .await
                .unwrap();
            assert_eq!(failed, 0, "receipts failed");
            if done == people {
                Ok(())
            } else {
                Err(format!("{done} of {people} done"))
            }
        })
        .await;
    let seconds = started.elapsed().as_secs_f64();
    let mutations_after = erasure_mutations(&nodes).await;
    let mut mutations: BTreeMap<String, u64> = BTreeMap::new();
    for (before, after) in mutations_before.iter().zip(&mutations_after) {
        let mut on_node: BTreeMap<String, u64> = BTreeMap::new();
        for (table, _) in after.difference(before) {
            *on_node.entry(table.clone()).or_default() += 1;
        }
        for (table, n) in on_node {
            let most = mutations.entry(table).or_default();
            *most = (*most).max(n);
        }
    }

    // Nothing of the erased, anywhere; the kept as they were.
    for (i, node) in nodes.iter().enumerate() {
        assert_eq!(
            number(node, &erased_events, &s).await,
            0,
            "node {i}: events of the erased"
        );
        for (table, column) in people_tables {
            let sql =
                format!("SELECT count() FROM {table} WHERE site_id = ? AND {column} LIKE 'user-%'");
            assert_eq!(
                number(node, &sql, &s).await,
                0,
                "node {i}: {table} of the erased"
            );
            let sql = format!(
                "SELECT count() FROM {table} FINAL WHERE site_id = ? AND {column} LIKE 'kuser-%'"
            );
            assert_eq!(
                number(node, &sql, &s).await,
                kept,
                "node {i}: {table} of the kept"
            );
        }
    }
    assert_eq!(
        tsv(&db, kept_events, &s).await,
        kept_before,
        "the kept events changed"
    );
    let (total, least, most): (u64, u64, u64) = db
        .client
        .query("SELECT sum(rows_removed), min(rows_removed), max(rows_removed) FROM erasure_requests FINAL WHERE site_id = ?")
        .bind(site)
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(
        (total, least, most),
        (4 * people, 4, 4),
        "each receipt counts its person's 4 events"
    );

    let per_table: Vec<String> = mutations.iter().map(|(t, n)| format!("{t} {n}")).collect();
    let all: u64 = mutations.values().sum();
    println!(
        "erasure burst: {people} people, {all} mutations (per table: {}), {seconds:.1} s to done \
         ({:.2} s to record the requests)",
        per_table.join(", "),
        recorded.as_secs_f64()
    );
    let path = write_artifact(
        "erasure-burst.json",
        &json!({
            "people": people,
            "kept_people": kept,
            "rows_per_person": 4,
            "mutations_total": all,
            "mutations_per_table": mutations,
            "seconds_to_done": (seconds * 100.0).round() / 100.0,
            "seconds_to_record": (recorded.as_secs_f64() * 100.0).round() / 100.0,
            "topology": if is_cluster() { "cluster" } else { "single" },
            "clickhouse": db.server_version.to_string(),
        }),
    );
    println!("figures written to {}", path.display());
    for table in [local_events(), "person_claims", "person_trait_values"] {
        let n = mutations.get(table).copied().unwrap_or(0);
        assert!(
            (1..=max_mutations).contains(&n),
            "{table}: {n} mutations for {people} erasures (at most {max_mutations}): {mutations:?}"
        );
    }
    drop(enricher);
    lane.delete().await;
    Burst {
        people,
        mutations,
        seconds,
    }
}

// ---------------------------------------------------------------------------------------
// Retention.

/// The start of the UTC day `days` days before today, in epoch seconds (a site's cutoff).
pub fn cutoff(days: u32) -> u32 {
    let now = (now_ms() / 1000) as u32;
    now - now % 86_400 - days * 86_400
}

/// For each day from today back to `days` days ago, `per_day` events at noon (today's at
/// the start of the day) and an alias and a trait set then.
async fn fill_days(db: &Db, site: u32, days: u32, per_day: u32) {
    let today = cutoff(0);
    // Day d: noon of the day d days ago (today: its first second, never in the future).
    let at = |d: &str| format!("({today} - {d} * 86400 + if({d} = 0, 0, 43200))");
    let day = format!("intDiv(number, {per_day})");
    let ts = at(&day);
    execute(
        db,
        &format!(
            "INSERT INTO events (event_id, site_id, timestamp, received_at, type, pathname, user_id, session_id) \
             SELECT generateUUIDv4(), {site}, toDateTime({ts} + number % {per_day}), \
             toDateTime({ts} + number % {per_day}), 'pageview', concat('/day/', toString({day})), \
             concat('visitor-', toString(number % 7)), 'session' FROM numbers({})",
            (days + 1) * per_day
        ),
    )
    .await;
    let ms = format!("toUInt64({}) * 1000", at("number"));
    execute(
        db,
        &format!(
            "INSERT INTO person_claims (site_id, anonymous_id, user_id, trusted, claimed_at_ms, received_at_ms, rank) \
             SELECT {site}, concat('anon-day-', toString(number)), concat('user-day-', toString(number)), \
             1, {ms}, {ms}, bitOr(toUInt64(4611686018427387904), toUInt64(4611686018427387903) - {ms}) FROM numbers({})",
            days + 1
        ),
    )
    .await;
    execute(
        db,
        &format!(
            "INSERT INTO person_trait_values (site_id, user_id, name, trusted, value, removed, set_at_ms, received_at_ms) \
             SELECT {site}, concat('user-day-', toString(number)), 'plan', 1, '\"pro\"', 0, {ms}, {ms} \
             FROM numbers({})",
            days + 1
        ),
    )
    .await;
}

/// What a site holds: its events (count FINAL, a digest of them, the oldest), its
/// aliases and traits (count, the oldest).
#[derive(Debug, PartialEq)]
struct Holdings {
    events: u64,
    digest: u64,
    oldest_event: u32,
    aliases: u64,
    oldest_alias_ms: u64,
    traits: u64,
    oldest_trait_ms: u64,
}

async fn holdings(db: &Db, site: u32) -> Holdings {
    // Three statements: 18.16 joins two tables at most.
    let (events, digest, oldest_event): (u64, u64, u32) = db
        .client
        .query(
            "SELECT count(), sum(cityHash64(toString(event_id), toString(timestamp), pathname)), \
             toUInt32(min(timestamp)) FROM events FINAL WHERE site_id = ?",
        )
        .bind(site)
        .fetch_one()
        .await
        .unwrap();
    let (aliases, oldest_alias_ms): (u64, u64) = db
        .client
        .query("SELECT count(), min(received_at_ms) FROM person_claims FINAL WHERE site_id = ?")
        .bind(site)
        .fetch_one()
        .await
        .unwrap();
    let (traits, oldest_trait_ms): (u64, u64) = db
        .client
        .query(
            "SELECT count(), min(received_at_ms) FROM person_trait_values FINAL WHERE site_id = ?",
        )
        .bind(site)
        .fetch_one()
        .await
        .unwrap();
    Holdings {
        events,
        digest,
        oldest_event,
        aliases,
        oldest_alias_ms,
        traits,
        oldest_trait_ms,
    }
}

/// Sets a site's retention with `rivulet-admin sites update`.
async fn set_retention(site: u32, days: u32) {
    let out = run_admin_async(
        &[
            "sites",
            "update",
            &site.to_string(),
            "--retention-days",
            &days.to_string(),
        ],
        &[],
    )
    .await
    .json();
    assert_eq!(out["retention_days"], days, "{out}");
}

/// Waits for a retention run of `site` after `since` (epoch seconds) by `runner`; its
/// cutoff and rows removed.
async fn retention_run(db: &Db, site: u32, since: u32, runner: &Service) -> (u32, u64) {
    Pace::within(Duration::from_secs(60))
        .every(Duration::from_millis(100))
        .poll_until(
            &format!(
                "no retention run of site {site} was recorded (the runner's log: {})",
                runner.log.display()
            ),
            || async {
                // The first run after `since`: later ones find nothing left to count.
                let runs: Vec<(u32, u32, u64)> = db
                .client
                .query(
                    "SELECT toUInt32(ran_at), toUInt32(cutoff), rows_removed FROM retention_runs \
                     WHERE site_id = ? AND ran_at >= toDateTime(?) ORDER BY ran_at LIMIT 1",
                )
                .bind(site)
                .bind(since)
                .fetch_all()
                .await
                .unwrap();
                match runs.first() {
                    Some((_, cutoff, removed)) => Ok((*cutoff, *removed)),
                    None => Err("none yet"),
                }
            },
        )
        .await
}

/// Waits until no server has a mutation of Rivulet's tables left to finish.
pub async fn mutations_done() {
    let nodes = each_node();
    Pace::within(Duration::from_secs(300))
        .every(Duration::from_millis(250))
        .poll_until("mutations did not finish", || async {
            let mut left = 0;
            for node in &nodes {
                left += number(
                    node,
                    "SELECT count() FROM system.mutations WHERE database = currentDatabase() AND is_done = 0",
                    &[],
                )
                .await;
            }
            if left == 0 {
                Ok(())
            } else {
                Err(format!("{left} unfinished"))
            }
        })
        .await
}

/// A site with 90 days of events (a row per day's noon, ten a day, from three or four
/// months), aliases and traits, gets `rivulet-admin sites update --retention-days 45`;
/// another site with the same rows keeps everything (retention 0). An enricher checking
/// retention every second removes exactly the first site's rows from before the start of
/// the UTC day 45 days ago — events, aliases, traits — records the run, and leaves the
/// other site alone. With a site that keeps everything in the registry, no month is
/// dropped whole.
pub async fn retention_by_site() {
    const DAYS: u32 = 90;
    const KEEP: u32 = 45;
    const PER_DAY: u32 = 10;
    let lane = Lane::new("retention").await;
    let db = db().await;
    let (pruned, _) = site_with_key().await;
    let (keeper, _) = site_with_key().await;
    for site in [pruned, keeper] {
        fill_days(&db, site, DAYS, PER_DAY).await;
    }
    let keeper_before = holdings(&db, keeper).await;
    let expected_cutoff = cutoff(KEEP);
    let p = json!(pruned);
    let expired = number(
        &db,
        "SELECT count() FROM events FINAL WHERE site_id = ? AND timestamp < toDateTime(?)",
        &[p.clone(), json!(expected_cutoff)],
    )
    .await;
    assert_eq!(expired, u64::from((DAYS - KEEP) * PER_DAY));
    let months: Vec<String> = tsv(
        &db,
        "SELECT DISTINCT toYYYYMM(timestamp) AS m FROM events WHERE site_id = ? ORDER BY m",
        std::slice::from_ref(&p),
    )
    .await;
    println!(
        "retention: site {pruned} has events in months {months:?}; cutoff {} ({KEEP} days)",
        rfc3339_secs(expected_cutoff)
    );

    // The Stats API's daily rollup of the days, computed now: retention must reach it.
    crate::stats::compute_rollup(pruned).await;
    let expired_rollup = format!(
        "SELECT (SELECT count() FROM stats_total_days WHERE site_id = ? AND kind != 0 AND toUInt16(local_day) < {0}) \
         + (SELECT count() FROM stats_breakdown_days WHERE site_id = ? AND kind != 0 AND toUInt16(local_day) < {0}) \
         + (SELECT count() FROM stats_visit_days WHERE site_id = ? AND kind != 0 AND toUInt16(local_day) < {0})",
        expected_cutoff / 86_400 - 1
    );
    let twice = [p.clone(), p.clone(), p.clone()];
    assert!(number(&db, &expired_rollup, &twice).await > 0);
    let expired_visits = format!(
        "SELECT count() FROM stats_visit_days WHERE site_id = ? AND kind != 0 AND toUInt16(local_day) < {}",
        expected_cutoff / 86_400 - 1
    );
    assert!(
        number(&db, &expired_visits, std::slice::from_ref(&p)).await > 0,
        "the rollup's visits of the expired days"
    );

    let since = (now_ms() / 1000) as u32;
    set_retention(pruned, KEEP).await;
    let enricher = lane
        .start_enricher(
            &format!("test-retention-{}", short_tag()),
            &[("RETENTION_CHECK_SECS", "1")],
        )
        .await;
    let (cutoff_recorded, removed) = retention_run(&db, pruned, since, &enricher).await;
    assert_eq!(
        cutoff_recorded, expected_cutoff,
        "the run's cutoff: the start of the UTC day {KEEP} days ago"
    );
    assert_eq!(removed, expired, "the run counts the site's expired events");
    wait_number(
        &db,
        "the pruned site's expired events are still there",
        &format!(
            "SELECT count() FROM {} WHERE site_id = ? AND timestamp < toDateTime(?)",
            local_events()
        ),
        &[p.clone(), json!(expected_cutoff)],
        0,
        Duration::from_secs(120),
    )
    .await;
    mutations_done().await;
    assert_eq!(
        number(&db, &expired_rollup, &twice).await,
        0,
        "the rollup's counts of the days before the cutoff went with the events"
    );
    let (cut, cut_ms) = (
        json!(expected_cutoff),
        json!(u64::from(expected_cutoff) * 1000),
    );
    for (i, node) in each_node().iter().enumerate() {
        for (sql, bound) in [
            (
                format!(
                    "SELECT count() FROM {} WHERE site_id = ? AND timestamp < toDateTime(?)",
                    local_events()
                ),
                &cut,
            ),
            (
                "SELECT count() FROM person_claims WHERE site_id = ? AND received_at_ms < ?".into(),
                &cut_ms,
            ),
            (
                "SELECT count() FROM person_trait_values WHERE site_id = ? AND received_at_ms < ?"
                    .into(),
                &cut_ms,
            ),
        ] {
            assert_eq!(
                number(node, &sql, &[p.clone(), bound.clone()]).await,
                0,
                "node {i}: {sql}"
            );
        }
    }
    // What is left: the days from the cutoff's on, whole.
    let kept_days = u64::from(KEEP + 1);
    let oldest = expected_cutoff + 43_200;
    let left = holdings(&db, pruned).await;
    let digest = number(
        &db,
        "SELECT sum(cityHash64(toString(event_id), toString(timestamp), pathname)) FROM events \
         FINAL WHERE site_id = ? AND timestamp >= toDateTime(?)",
        &[p.clone(), cut.clone()],
    )
    .await;
    assert_eq!(
        left,
        Holdings {
            events: kept_days * u64::from(PER_DAY),
            digest,
            oldest_event: oldest,
            aliases: kept_days,
            oldest_alias_ms: u64::from(oldest) * 1000,
            traits: kept_days,
            oldest_trait_ms: u64::from(oldest) * 1000,
        },
        "the pruned site keeps its last {KEEP} days and today"
    );
    assert_eq!(
        holdings(&db, keeper).await,
        keeper_before,
        "the site with no retention lost rows"
    );
    assert_eq!(
        metric_or_zero(&enricher, "enricher_retention_partitions_dropped_total").await,
        0.0,
        "a site keeps everything: no month may be dropped whole"
    );
    assert!(metric_or_zero(&enricher, "enricher_retention_mutations_total").await >= 1.0);
    drop(enricher);
    // Deleted sites leave the runners' lists (their remaining rows stay). A deleted site
    // without a retention would keep every month of the registry from being dropped
    // whole (`retention_drops_whole_months`, which runs on the same registry): the
    // keeper gets one first.
    set_retention(keeper, 1).await;
    for site in [pruned, keeper] {
        run_admin_async(&["sites", "delete", &site.to_string()], &[])
            .await
            .json();
    }
    lane.delete().await;
}

/// Whole months dropped (`DROP PARTITION`): only when every site of the registry has a
/// retention, so only on a stack whose registry a test may change (the cluster suite's,
/// which runs one test at a time). Every active site gets a retention of `KEEP` days for
/// the run (their own is put back after); a site with 150 days of events loses the months
/// that end before the earliest cutoff whole, and the rest of what is older than its
/// cutoff by a delete.
pub async fn retention_drops_whole_months() {
    const DAYS: u32 = 150;
    const KEEP: u32 = 60;
    const PER_DAY: u32 = 10;
    let lane = Lane::new("months").await;
    let db = db().await;
    let reg = registry().await;
    let (site, _) = site_with_key().await;
    fill_days(&db, site, DAYS, PER_DAY).await;
    let others: Vec<(u32, u32)> = reg
        .list_sites()
        .await
        .unwrap()
        .iter()
        .filter(|s| s.site_id != site)
        .map(|s| (s.site_id, s.retention_days))
        .collect();
    let keep_all: Vec<u32> = reg
        .list_sites_with_deleted()
        .await
        .unwrap()
        .iter()
        .filter(|s| s.deleted != 0 && s.retention_days == 0)
        .map(|s| s.site_id)
        .collect();
    assert!(
        keep_all.is_empty(),
        "deleted sites {keep_all:?} have no retention, so no month can be dropped whole on \
         this registry: run the test on a new stack"
    );
    for (other, _) in &others {
        set_retention(*other, KEEP).await;
    }
    set_retention(site, KEEP).await;
    let limit = cutoff(KEEP);
    // The months every site has expired: those that end by the earliest cutoff.
    let months: Vec<u32> = db
        .client
        .query(rivulet_common::schema::queries::EVENTS_MONTHS)
        .fetch_all()
        .await
        .unwrap();
    let whole: Vec<u32> = months
        .iter()
        .copied()
        .filter(|m| month_end(*m) <= limit)
        .collect();
    assert!(
        whole.len() >= 2,
        "150 days back cover at least two months before the cutoff: {months:?}"
    );
    println!(
        "retention: months {whole:?} end before the cutoff {}",
        rfc3339_secs(limit)
    );
    let enricher = lane
        .start_enricher(
            &format!("test-months-{}", short_tag()),
            &[("RETENTION_CHECK_SECS", "1")],
        )
        .await;
    Pace::within(Duration::from_secs(120))
        .every(Duration::from_millis(250))
        .poll_until("no month was dropped", || async {
            let n = metric_or_zero(&enricher, "enricher_retention_partitions_dropped_total").await;
            if n >= whole.len() as f64 {
                Ok(())
            } else {
                Err(n)
            }
        })
        .await;
    mutations_done().await;
    let s = json!(site);
    wait_number(
        &db,
        "the site's expired events are still there",
        "SELECT count() FROM events WHERE site_id = ? AND timestamp < toDateTime(?)",
        &[s.clone(), json!(limit)],
        0,
        Duration::from_secs(120),
    )
    .await;
    for (i, node) in each_node().iter().enumerate() {
        let parts = number(
            node,
            &format!(
                "SELECT count() FROM system.parts WHERE database = currentDatabase() AND table = '{}' \
                 AND active AND toUInt32(partition) IN ({})",
                local_events(),
                whole.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            ),
            &[],
        )
        .await;
        assert_eq!(parts, 0, "node {i} still has parts of the dropped months");
    }
    assert_eq!(
        number(
            &db,
            "SELECT count() FROM events FINAL WHERE site_id = ?",
            &[s]
        )
        .await,
        u64::from((KEEP + 1) * PER_DAY),
        "the site keeps its last {KEEP} days and today"
    );
    drop(enricher);
    for (other, days) in others {
        set_retention(other, days).await;
    }
    set_retention(site, 0).await;
    lane.delete().await;
}

/// The start (UTC, seconds) of the month after `yyyymm`.
fn month_end(yyyymm: u32) -> u32 {
    let (y, m) = (yyyymm / 100, yyyymm % 100);
    let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    let date = time::Date::from_calendar_date(y as i32, time::Month::try_from(m as u8).unwrap(), 1)
        .unwrap();
    date.midnight().assume_utc().unix_timestamp() as u32
}

// ---------------------------------------------------------------------------------------
// Export.

/// The month the export scenario fills: no other test writes there, and the scenario drops
/// it before and after (a million rows would otherwise be rewritten by every mutation).
const EXPORT_MONTH: u32 = 200_101;
const EXPORT_START: u32 = 978_307_200; // 2001-01-01T00:00:00Z

async fn drop_export_month() {
    load_stack_env();
    let config = ChConfig::from_env().unwrap();
    config
        .drop_partition(local_events(), EXPORT_MONTH)
        .await
        .unwrap_or_else(|e| panic!("DROP PARTITION {EXPORT_MONTH}: {e}"));
}

/// An export's run: how long, how much memory at most, what it wrote.
#[derive(Debug)]
pub struct ExportRun {
    pub seconds: f64,
    pub peak_rss_kb: u64,
    pub bytes: u64,
}

/// Runs `argv[2:]` with stdin, stdout and stderr inherited, writes its peak RSS in KiB
/// (`ru_maxrss`) to `argv[1]` and exits with its status.
const PEAK_RSS_WRAPPER: &str = "import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
open(sys.argv[1], 'w').write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status) & 255)
";

/// Runs `rivulet-admin export` with stdout to `out` (or to a pipe counted by `read`), and
/// its peak RSS from the kernel's accounting of the process.
fn run_export(
    args: &[&str],
    dir: &Path,
    stdout: Option<&Path>,
    read: impl FnOnce(&mut dyn Read) -> u64,
) -> ExportRun {
    load_stack_env();
    let rss_file = dir.join(format!("rss-{}", short_tag()));
    // Python's `os.wait4` gives the child's own peak RSS (its rusage), as GNU time would;
    // python3 is on every machine the tests run on, GNU time is not.
    let mut cmd = std::process::Command::new("python3");
    cmd.arg("-c")
        .arg(PEAK_RSS_WRAPPER)
        .arg(&rss_file)
        .arg(binary("rivulet-admin"))
        .args(args);
    cmd.stderr(std::process::Stdio::piped());
    match stdout {
        Some(path) => cmd.stdout(std::fs::File::create(path).unwrap()),
        None => cmd.stdout(std::process::Stdio::piped()),
    };
    let started = Instant::now();
    let mut child = cmd.spawn().expect("python3 runs rivulet-admin");
    let bytes = match child.stdout.take() {
        Some(mut pipe) => read(&mut pipe),
        None => 0,
    };
    let out = child.wait_with_output().unwrap();
    let seconds = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "rivulet-admin {args:?} failed: {stderr}"
    );
    let rss = std::fs::read_to_string(&rss_file).unwrap();
    let peak_rss_kb = rss
        .trim()
        .lines()
        .last()
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{rss}"));
    let _ = std::fs::remove_file(&rss_file);
    let bytes = match stdout {
        Some(path) => std::fs::metadata(path).unwrap().len(),
        None => bytes,
    };
    ExportRun {
        seconds,
        peak_rss_kb,
        bytes,
    }
}

/// An NDJSON line of the export (the contract's names), read as typed fields: a missing
/// field, or one of another type, fails its line.
#[derive(Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    event_id: String,
    site_id: u32,
    timestamp: String,
    received_at: String,
    client_timestamp: Option<String>,
    sent_at: Option<String>,
    #[serde(rename = "type")]
    event_type: String,
    event_name: String,
    properties: String,
    hostname: String,
    pathname: String,
    querystring: String,
    page_title: String,
    referrer: String,
    user_id: String,
    anonymous_id: String,
    language: String,
    #[serde(rename = "screenWidth")]
    screen_width: u16,
    #[serde(rename = "screenHeight")]
    screen_height: u16,
    tag: String,
    app_version: String,
    device_model: String,
    feature_flags: String,
    lcp: Option<f64>,
    cls: Option<f64>,
    inp: Option<f64>,
    fcp: Option<f64>,
    ttfb: Option<f64>,
    channel: String,
    session_id: String,
    country: String,
    region: String,
    city: String,
    lat: f64,
    lon: f64,
    browser: String,
    browser_version: String,
    operating_system: String,
    operating_system_version: String,
    device_type: String,
    is_bot: u8,
    ip: String,
    person_id: String,
}

/// Every field of a line, in the contract's order (`Option` fields must be there too,
/// as `null`: checked on the first line, where serde would take a missing one as null).
const LINE_FIELDS: &[&str] = &[
    "event_id",
    "site_id",
    "timestamp",
    "received_at",
    "client_timestamp",
    "sent_at",
    "type",
    "event_name",
    "properties",
    "hostname",
    "pathname",
    "querystring",
    "page_title",
    "referrer",
    "user_id",
    "anonymous_id",
    "language",
    "screenWidth",
    "screenHeight",
    "tag",
    "app_version",
    "device_model",
    "feature_flags",
    "lcp",
    "cls",
    "inp",
    "fcp",
    "ttfb",
    "channel",
    "session_id",
    "country",
    "region",
    "city",
    "lat",
    "lon",
    "browser",
    "browser_version",
    "operating_system",
    "operating_system_version",
    "device_type",
    "is_bot",
    "ip",
    "person_id",
];

/// The line the export must write for a stored row, with its person.
fn expected_line(r: EventRow, person_id: String) -> Line {
    Line {
        event_id: r.event_id.to_string(),
        site_id: r.site_id,
        timestamp: rfc3339_secs(r.timestamp),
        received_at: rfc3339_secs(r.received_at),
        client_timestamp: r.client_timestamp.map(rfc3339_secs),
        sent_at: r.sent_at.map(rfc3339_secs),
        event_type: r.event_type,
        event_name: r.event_name,
        properties: r.properties,
        hostname: r.hostname,
        pathname: r.pathname,
        querystring: r.querystring,
        page_title: r.page_title,
        referrer: r.referrer,
        user_id: r.user_id,
        anonymous_id: r.anonymous_id,
        language: r.language,
        screen_width: r.screen_width,
        screen_height: r.screen_height,
        tag: r.tag,
        app_version: r.app_version,
        device_model: r.device_model,
        feature_flags: r.feature_flags,
        lcp: r.lcp,
        cls: r.cls,
        inp: r.inp,
        fcp: r.fcp,
        ttfb: r.ttfb,
        channel: r.channel,
        session_id: r.session_id,
        country: r.country,
        region: r.region,
        city: r.city,
        lat: r.lat,
        lon: r.lon,
        browser: r.browser,
        browser_version: r.browser_version,
        operating_system: r.operating_system,
        operating_system_version: r.operating_system_version,
        device_type: r.device_type,
        is_bot: r.is_bot,
        ip: r.ip,
        person_id,
    }
}

/// Checks the NDJSON export `file` against the site's rows, read from ClickHouse in the
/// export's order: every line equals its row, field by field, with its person (the
/// owner of its anonymous id, for `anon-0` … `anon-999`). Returns how many lines.
async fn check_ndjson(db: &Db, site: u32, file: &Path) -> u64 {
    let mut cursor = db
        .client
        .query(&format!(
            "SELECT {} FROM events FINAL WHERE site_id = ? ORDER BY timestamp, event_id",
            rivulet_common::schema::column_names(rivulet_common::schema::events::COLUMNS)
        ))
        .bind(site)
        .fetch::<EventRow>()
        .unwrap();
    let mut lines =
        std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(file).unwrap()).lines();
    let mut n = 0u64;
    while let Some(row) = cursor.next().await.unwrap() {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the export ends after {n} lines"))
            .unwrap();
        if n == 0 {
            let first: serde_json::Map<String, Value> = serde_json::from_str(&line).unwrap();
            let keys: Vec<&str> = first.keys().map(String::as_str).collect();
            let mut want = LINE_FIELDS.to_vec();
            want.sort_unstable();
            assert_eq!(keys, want, "the fields of a line: {line}");
        }
        let got: Line =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("line {n}: {e}: {line}"));
        let person = match row.anonymous_id.strip_prefix("anon-") {
            Some(k) if k.parse::<u32>().unwrap() < 1000 => format!("owner-{k}"),
            _ => row.user_id.clone(),
        };
        let want = expected_line(row, person);
        assert_eq!(got, want, "line {n}");
        n += 1;
    }
    assert!(
        lines.next().is_none(),
        "the export has more lines than the table has rows"
    );
    n
}

/// Counts the records of a CSV stream (RFC 4180: a line break inside quotes is part of
/// the field) and returns its first record; never holds more than a buffer of it.
fn csv_records(input: &mut dyn Read) -> (u64, String, u64) {
    let mut reader = std::io::BufReader::with_capacity(1 << 16, input);
    let (mut records, mut quoted, mut bytes) = (0u64, false, 0u64);
    let mut header = Vec::new();
    loop {
        let buf = reader.fill_buf().unwrap();
        if buf.is_empty() {
            break;
        }
        for &b in buf {
            let record_ends = b == b'\n' && !quoted;
            if records == 0 && !record_ends {
                header.push(b);
            }
            if b == b'"' {
                quoted = !quoted;
            }
            if record_ends {
                records += 1;
            }
        }
        let n = buf.len();
        bytes += n as u64;
        reader.consume(n);
    }
    (records, String::from_utf8(header).unwrap(), bytes)
}

/// A site with `rows` events (filled by `INSERT … SELECT` from `numbers()`, with fields
/// that need escaping in JSON and quoting in CSV, nulls, and anonymous ids some users
/// claimed) is exported as NDJSON to a file and as CSV to a pipe. The exporter's peak
/// RSS must stay under `max_rss_mb`; every line of the file must equal the stored row
/// (read back from ClickHouse in the export's order) field by field, with its person; the
/// CSV has the header and one record per event. Writes the figures to
/// `artifacts/export-<rows>.json` when `artifact` is given.
pub async fn export_rows(rows: u64, max_rss_mb: u64, artifact: Option<&str>) {
    let db = db().await;
    drop_export_month().await;
    let (site, _) = site_with_key().await;
    let started = Instant::now();
    // (`??` is a `?` to the clickhouse crate, which binds values at `?`.)
    execute(
        &db,
        &format!(
            r#"INSERT INTO events (event_id, site_id, timestamp, received_at, type, event_name, properties,
               hostname, pathname, querystring, page_title, referrer, channel, user_id, session_id,
               language, screen_width, screen_height, country, region, city, lat, lon, browser,
               browser_version, operating_system, operating_system_version, device_type, is_bot, ip,
               anonymous_id, tag, app_version, device_model, feature_flags, lcp, cls, inp, fcp, ttfb)
            SELECT generateUUIDv4(), {site}, toDateTime({EXPORT_START} + intDiv(number, 2)),
              toDateTime({EXPORT_START} + intDiv(number, 2) + 1),
              if(number % 10 = 0, 'custom_event', 'pageview'),
              if(number % 10 = 0, concat('signup-', toString(number % 7)), ''),
              if(number % 10 = 0, concat('{{"plan":"pro","n":', toString(number), ',"note":"a, \"quoted\" value"}}'), ''),
              'example.com', concat('/p/', toString(number % 1000), '/é'), if(number % 3 = 0, '??q=1&r=2', ''),
              if(number % 5 = 0, 'Title, with "quotes"\nand a second line', 'Title'),
              if(number % 4 = 0, 'https://search.example/??q=a,b', ''), 'Direct',
              concat('visitor-', toString(number % 5000)), concat('session-', toString(number % 20000)),
              'en-GB', 1920, 1080, 'GB', 'GB-ENG', 'London', 51.5142 + (number % 7) / 1000, -0.0931,
              'Chrome', '120', 'Windows', '10', 'Desktop', toUInt8(number % 50 = 0), '',
              if(number % 4 = 0, concat('anon-', toString(number % 3000)), ''),
              if(number % 6 = 0, 'campaign-a', ''), '1.2.3', '', if(number % 8 = 0, '{{"beta":"on"}}', ''),
              if(number % 2 = 0, 1000 + (number % 100) / 8, NULL), if(number % 3 = 0, 0.125, NULL),
              NULL, NULL, if(number % 2 = 0, 12.5, NULL)
            FROM numbers({rows})"#
        ),
    )
    .await;
    // A thousand of the anonymous ids belong to users (identify).
    execute(
        &db,
        &format!(
            "INSERT INTO person_claims (site_id, anonymous_id, user_id, trusted, claimed_at_ms, received_at_ms, rank) \
             SELECT {site}, concat('anon-', toString(number)), concat('owner-', toString(number)), \
             1, 1000, 1000, {} FROM numbers(1000)",
            rivulet_common::schema::people::claim_rank(true, 1000)
        ),
    )
    .await;
    let s = site.to_string();
    assert_eq!(
        number(
            &db,
            "SELECT count() FROM events FINAL WHERE site_id = ?",
            &[json!(site)]
        )
        .await,
        rows
    );
    let filled = started.elapsed().as_secs_f64();

    let dir = crate::data::TempDir::new("export");
    let file = dir.path("events.ndjson");
    // Both exports run at once, and the NDJSON file is checked while the CSV export (the
    // slower) still runs: the test's wall time. Their seconds are taken so; their peak
    // RSS is each process's own.
    let ndjson = tokio::task::spawn_blocking({
        let (dir, file, s) = (dir.0.clone(), file.clone(), s.clone());
        move || {
            let args = ["export", "--site", &s, "--format", "ndjson"];
            run_export(&args, &dir, Some(&file), |_| 0)
        }
    });
    let csv = tokio::task::spawn_blocking({
        let (dir, s) = (dir.0.clone(), s.clone());
        move || {
            let args = ["export", "--site", &s, "--format", "csv"];
            let mut counted = (0, String::new(), 0);
            let run = run_export(&args, &dir, None, |pipe| {
                counted = csv_records(pipe);
                counted.2
            });
            (run, counted)
        }
    });
    let ndjson = ndjson.await.unwrap();
    let verify = Instant::now();
    let checked = check_ndjson(&db, site, &file).await;
    let verified = verify.elapsed().as_secs_f64();
    assert_eq!(checked, rows);
    let (csv, (records, header, _)) = csv.await.unwrap();
    assert_eq!(
        records,
        rows + 1,
        "the CSV: a header and a record per event"
    );
    assert!(
        header.starts_with("event_id,site_id,timestamp,received_at,client_timestamp,sent_at,type,"),
        "{header}"
    );
    assert!(header.ends_with(",ip,person_id"), "{header}");

    let mb = |kb: u64| kb as f64 / 1024.0;
    println!(
        "export: {rows} rows; ndjson {:.0} MB in {:.1} s, peak RSS {:.1} MB; csv {:.0} MB in {:.1} s, \
         peak RSS {:.1} MB; fill {filled:.1} s, check {verified:.1} s",
        ndjson.bytes as f64 / 1e6,
        ndjson.seconds,
        mb(ndjson.peak_rss_kb),
        csv.bytes as f64 / 1e6,
        csv.seconds,
        mb(csv.peak_rss_kb),
    );
    if let Some(name) = artifact {
        let figures = |r: &ExportRun| {
            json!({"bytes": r.bytes, "seconds": (r.seconds * 100.0).round() / 100.0,
                   "peak_rss_mb": (mb(r.peak_rss_kb) * 10.0).round() / 10.0})
        };
        let path = write_artifact(
            name,
            &json!({
                "rows": rows,
                "ndjson": figures(&ndjson),
                "csv": figures(&csv),
                "exports_ran_at_once": true,
                "build": if cfg!(debug_assertions) { "debug" } else { "release" },
                "topology": if is_cluster() { "cluster" } else { "single" },
                "clickhouse": db.server_version.to_string(),
            }),
        );
        println!("figures written to {}", path.display());
    }
    for (format, run) in [("ndjson", &ndjson), ("csv", &csv)] {
        assert!(
            run.peak_rss_kb < max_rss_mb * 1024,
            "{format}: the exporter's peak RSS was {:.1} MB for {rows} rows (at most {max_rss_mb} MB)",
            mb(run.peak_rss_kb)
        );
    }
    drop(dir);
    drop_export_month().await;
}
