//! Network partitions: nothing acknowledged is lost or doubled when the cluster's nodes
//! cannot reach each other. On `scripts/stack up --netns` (every node in a network
//! namespace of its own; `scripts/chaos --partitions` starts it and runs this test in its
//! client namespace), two ingests and three enrichers, each in its own namespace, carry a
//! steady stream of single events (the load generator of `rivulet_tests::partitions`,
//! which records every event sent and acknowledged and every attempt) while, one after
//! the other, with a steady stream between them:
//!
//! 1. the leader of partition 0 of `events.raw` is cut off from the other brokers and
//!    from the ingests, then healed;
//! 2. the brokers are split into a majority and a minority (the leader of partition 0),
//!    with an ingest and an enricher on each side;
//! 3. the ClickHouse replica the services write to is cut off from ZooKeeper and from its
//!    peer, for longer than its ZooKeeper session;
//! 4. an enricher is cut off from ClickHouse while one of its inserts is under way;
//! 5. an enricher is cut off from Kafka while it holds uncommitted offsets;
//! 6. the ingests are cut off from Redis (the key cache and the rate limiter);
//! 7. the link between the ingests and the brokers flaps, on and off every 2-5 s for a
//!    minute (the cuts alternate between dropping packets and resetting connections);
//! 8. a broker (the leader of partition 0) is paused with SIGSTOP past its session
//!    timeout, then resumed;
//! 9. a person is erased while a replica (of the other shard) is partitioned from every
//!    other node: the receipt must not say `done` until the replica has healed, and then
//!    no replica holds any of the person's rows.
//!
//! Cuts drop packets unless said otherwise. After each, one event per partition is sent
//! and waited for in ClickHouse: the time from the heal until then is the recovery.
//! After the last one and a quiet period, the checker: every acknowledged event is
//! stored exactly once (after `FINAL`), on both replicas of its shard; nothing is stored
//! that was never sent; the consumer group's lag returns to zero; no client waited longer
//! than ingest's deadline (`KAFKA_ACK_TIMEOUT_MS` and a second for the key and limit
//! checks): each got an answer, a 503 it could retry at worst. Per fault it reports the
//! share of attempts answered other than 200 during the fault, the longest a client
//! waited, and the time from the heal to recovery, in `artifacts/chaos-partitions.json`.
//!
//! `CHAOS_PROFILE=full` runs all nine (`scripts/chaos --partitions`); the short profile
//! (`scripts/test-partitions`, which `scripts/test` and so CI run) runs 1, 3 and 6 with shorter faults. `CHAOS_NEMESES`
//! picks some by name; `CHAOS_RATE` sets the events per second (default 100).

use rivulet_tests::partitions::*;
use rivulet_tests::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nemesis {
    LeaderIsolated,
    MajorityMinority,
    ReplicaCutOff,
    EnricherMidInsert,
    EnricherUncommitted,
    IngestRedis,
    FlappingLink,
    BrokerPaused,
    ErasureReplicaPartitioned,
}

use Nemesis::*;

const ALL: [Nemesis; 9] = [
    LeaderIsolated,
    MajorityMinority,
    ReplicaCutOff,
    EnricherMidInsert,
    EnricherUncommitted,
    IngestRedis,
    FlappingLink,
    BrokerPaused,
    ErasureReplicaPartitioned,
];

impl Nemesis {
    fn slug(self) -> &'static str {
        match self {
            LeaderIsolated => "leader-isolated",
            MajorityMinority => "majority-minority",
            ReplicaCutOff => "replica-cut-off",
            EnricherMidInsert => "enricher-clickhouse-mid-insert",
            EnricherUncommitted => "enricher-kafka-uncommitted",
            IngestRedis => "ingest-redis",
            FlappingLink => "flapping-link",
            BrokerPaused => "broker-paused",
            ErasureReplicaPartitioned => "erasure-replica-partitioned",
        }
    }

    fn title(self, d: Duration) -> String {
        let s = d.as_secs();
        match self {
            LeaderIsolated => format!(
                "the leader of a partition cut off from the other brokers and the ingests, {s} s"
            ),
            MajorityMinority => format!(
                "the brokers split 2 | 1 (the minority leads partition 0), an ingest and an enricher on each side, {s} s"
            ),
            ReplicaCutOff => format!(
                "the ClickHouse replica the services write to cut off from ZooKeeper and its peer, {s} s"
            ),
            EnricherMidInsert => {
                format!("an enricher cut off from ClickHouse in the middle of an insert, {s} s")
            }
            EnricherUncommitted => {
                format!("an enricher cut off from Kafka while it holds uncommitted offsets, {s} s")
            }
            IngestRedis => format!("the ingests cut off from Redis, {s} s"),
            FlappingLink => format!(
                "the link between the ingests and the brokers flapping (2-5 s on, 2-5 s off), {s} s"
            ),
            BrokerPaused => {
                format!("the leader of a partition paused (SIGSTOP), {s} s, then resumed")
            }
            ErasureReplicaPartitioned => format!(
                "an erasure requested while a replica is partitioned from every node, {s} s"
            ),
        }
    }

    /// How long the fault lasts.
    fn duration(self, full: bool) -> Duration {
        let (full_s, short_s) = match self {
            LeaderIsolated => (30, 15),
            MajorityMinority => (30, 15),
            // Past the replica's ZooKeeper session (30 s) in the full profile.
            ReplicaCutOff => (45, 15),
            EnricherMidInsert => (20, 10),
            // Past the consumer's session timeout (10 s): its partitions move.
            EnricherUncommitted => (20, 15),
            IngestRedis => (30, 10),
            FlappingLink => (60, 30),
            // Past the brokers' session timeout (3 s) and the consumers' (10 s).
            BrokerPaused => (15, 12),
            ErasureReplicaPartitioned => (60, 30),
        };
        Duration::from_secs(if full { full_s } else { short_s })
    }
}

struct Profile {
    full: bool,
    rate: u64,
    nemeses: Vec<Nemesis>,
    pause: Duration,
}

fn profile() -> Profile {
    let full = std::env::var("CHAOS_PROFILE").as_deref() == Ok("full");
    let rate = std::env::var("CHAOS_RATE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(100);
    let nemeses = match std::env::var("CHAOS_NEMESES") {
        Ok(list) if !list.trim().is_empty() => list
            .split(',')
            .map(|n| {
                *ALL.iter()
                    .find(|x| x.slug() == n.trim())
                    .unwrap_or_else(|| panic!("CHAOS_NEMESES: no nemesis {n:?}"))
            })
            .collect(),
        _ if full => ALL.to_vec(),
        _ => vec![LeaderIsolated, ReplicaCutOff, IngestRedis],
    };
    Profile {
        full,
        rate,
        nemeses,
        pause: Duration::from_secs(if full { 10 } else { 3 }),
    }
}

/// The longest a client may wait for an answer: ingest's ack time-out (which counts from
/// the request's body and includes the key and rate-limit checks), and a second for the
/// request to travel and for scheduling on a loaded host.
const DEADLINE: Duration = Duration::from_millis(KAFKA_ACK_TIMEOUT.as_millis() as u64 + 1000);

/// Heals every cut and resumes a paused broker, also when the test fails midway.
struct Healer {
    net: Arc<Net>,
    paused: std::sync::Mutex<Option<u32>>,
}

impl Drop for Healer {
    fn drop(&mut self) {
        if let Some(pid) = self.paused.lock().unwrap().take() {
            signal(pid, "CONT");
        }
        self.net.heal_all();
    }
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}

struct Run {
    net: Arc<Net>,
    load: Arc<Load>,
    ingests: Vec<Service>,
    enrichers: Vec<(String, Service)>,
    group: String,
    topic: String,
    healer: Healer,
    full: bool,
}

impl Run {
    fn log(&self, what: &str) {
        eprintln!(
            "[partitions {:>5.1} s] {what}",
            self.load.now().as_secs_f64()
        );
    }

    /// The last lines of each ingest's log but the ones each failed request writes:
    /// what a failure report needs to say why the services did not acknowledge.
    fn ingest_log_tails(&self) -> String {
        const PER_REQUEST: [&str; 4] = [
            "\"message\":\"request failed\"",
            "\"message\":\"Kafka delivery failed\"",
            "\"message\":\"event not acknowledged by Kafka\"",
            "Timed out ProduceRequest in flight",
        ];
        self.ingests
            .iter()
            .map(|s| {
                let logs = s.logs();
                let lines: Vec<&str> = logs
                    .lines()
                    .filter(|l| !PER_REQUEST.iter().any(|p| l.contains(p)))
                    .collect();
                let tail = lines[lines.len().saturating_sub(60)..].join("\n");
                format!("--- {} ({}):\n{tail}", s.url, s.log.display())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits until every replica of every partition of the topic is in sync again, up
    /// to `within`: a fault is applied to a whole cluster, not to one still catching up
    /// from the last (where a partition can have fewer in-sync replicas than
    /// `min.insync.replicas` allows to write, whatever Rivulet does). Panics with the
    /// partitions' state when they do not.
    async fn wait_replicas_in_sync(&self, within: Duration) -> Duration {
        let started = Instant::now();
        Pace::within(within)
            .every(Duration::from_millis(500))
            .poll_until("every replica of the topic in sync", || async {
                let topic = self.topic.clone();
                let states = Self::blocking(move || partition_states(&topic)).await;
                if states.iter().all(|(_, _, r, isr)| isr.len() == r.len()) {
                    Ok(())
                } else {
                    Err(describe_partitions(&states))
                }
            })
            .await;
        started.elapsed()
    }

    /// Polls the metadata until partition 0 is led by another broker than `old`: when.
    async fn wait_leader_moved(&self, old: &str, within: Duration) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < within {
            let topic = self.topic.clone();
            let now = tokio::task::spawn_blocking(move || leaders(&topic))
                .await
                .unwrap();
            if now.iter().any(|(p, l)| *p == 0 && l != old) {
                return Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        None
    }

    async fn leader_of_partition_0(&self) -> String {
        let topic = self.topic.clone();
        tokio::task::spawn_blocking(move || leaders(&topic))
            .await
            .unwrap()
            .into_iter()
            .find(|(p, _)| *p == 0)
            .map(|(_, l)| l)
            .expect("partition 0")
    }

    async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        tokio::task::spawn_blocking(f).await.unwrap()
    }

    /// Applies `nemesis` for `d`; returns when the fault is healed, with its details.
    async fn apply(&self, nemesis: Nemesis, d: Duration) -> Value {
        let net = self.net.clone();
        let brokers = ["kafka-1", "kafka-2", "kafka-3"];
        let ingests = ["ingest-1", "ingest-2"];
        match nemesis {
            LeaderIsolated => {
                let leader = self.leader_of_partition_0().await;
                let others: Vec<&str> = brokers
                    .iter()
                    .copied()
                    .filter(|b| *b != leader)
                    .chain(ingests)
                    .collect();
                self.log(&format!(
                    "{leader} leads partition 0: cutting it off from {others:?}"
                ));
                net.cut(&leader, &others, Cut::Drop);
                let moved = self.wait_leader_moved(&leader, d).await;
                tokio::time::sleep(d.saturating_sub(moved.unwrap_or(d))).await;
                net.heal(&[&leader]);
                json!({"broker": leader, "new_leader_after_seconds": moved.map(secs)})
            }
            MajorityMinority => {
                let minority = self.leader_of_partition_0().await;
                let majority: Vec<&str> =
                    brokers.iter().copied().filter(|b| *b != minority).collect();
                // Clients: ingest-1, enricher-1 and enricher-3 with the majority;
                // ingest-2 and enricher-2 with the minority.
                let mut minority_cut: Vec<&str> = majority.clone();
                minority_cut.extend(["ingest-1", "enricher-1", "enricher-3"]);
                self.log(&format!(
                    "{minority} (leads partition 0) with ingest-2 and enricher-2 | {majority:?} with ingest-1, enricher-1, enricher-3"
                ));
                net.cut(&minority, &minority_cut, Cut::Drop);
                net.cut_between(&["ingest-2", "enricher-2"], &majority, Cut::Drop);
                let moved = self.wait_leader_moved(&minority, d).await;
                tokio::time::sleep(d.saturating_sub(moved.unwrap_or(d))).await;
                net.heal(&[&minority, "ingest-2", "enricher-2"]);
                json!({"minority": minority, "majority": majority,
                    "minority_clients": ["ingest-2", "enricher-2"],
                    "majority_clients": ["ingest-1", "enricher-1", "enricher-3"],
                    "partition_0_moved_to_the_majority_after_seconds": moved.map(secs)})
            }
            ReplicaCutOff => {
                let (replica, url) = ch_nodes()[0].clone();
                self.log(&format!(
                    "{replica} (CLICKHOUSE_URL) cut off from ZooKeeper and clickhouse-s1r2"
                ));
                net.cut(&replica, &["zookeeper", "clickhouse-s1r2"], Cut::Drop);
                let end = Instant::now() + d;
                let (mut reads, mut answered, mut readonly_seen) = (0, 0, false);
                while Instant::now() < end {
                    reads += 1;
                    if node_sql(
                        &url,
                        "SELECT count() FROM events_local",
                        Duration::from_secs(2),
                    )
                    .await
                    .is_ok()
                    {
                        answered += 1;
                    }
                    if node_sql(
                        &url,
                        "SELECT count() FROM system.replicas WHERE is_readonly",
                        Duration::from_secs(2),
                    )
                    .await
                    .is_ok_and(|n| n.trim() != "0")
                    {
                        readonly_seen = true;
                    }
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                net.heal(&[&replica]);
                json!({"replica": replica, "reads_answered_during_the_cut": format!("{answered} of {reads}"),
                    "tables_read_only_during_the_cut": readonly_seen})
            }
            EnricherMidInsert => {
                let (s1r1, url) = ch_nodes()[0].clone();
                let all_ch: Vec<String> = ch_nodes().into_iter().map(|(n, _)| n).collect();
                let all_ch: Vec<&str> = all_ch.iter().map(String::as_str).collect();
                // Find an INSERT into events from an enricher on the server that takes
                // them, cut that enricher off from every server, and check the insert was
                // still under way; if it had finished, heal and try again.
                let mut tries = 0;
                let (member, query) = loop {
                    tries += 1;
                    assert!(tries <= 50, "never caught an enricher's insert under way");
                    let found = Pace::within(Duration::from_secs(60))
                        .every(Duration::from_millis(5))
                        .poll_until("no insert of an enricher under way", || async {
                            let rows = node_sql(
                                &url,
                                "SELECT address, query_id FROM system.processes WHERE is_initial_query \
                                 AND query LIKE 'INSERT INTO events %' FORMAT TSV",
                                Duration::from_secs(2),
                            )
                            .await
                            .map_err(|e| e.to_string())?;
                            rows.lines()
                                .find_map(|l| {
                                    let (addr, qid) = l.split_once('\t')?;
                                    let addr = addr.trim_start_matches("::ffff:");
                                    let m = net.member_at(addr)?;
                                    m.starts_with("enricher").then(|| (m.to_string(), qid.to_string()))
                                })
                                .ok_or_else(|| "none".to_string())
                        })
                        .await;
                    net.cut(&found.0, &all_ch, Cut::Drop);
                    let still = node_sql(
                        &url,
                        &format!(
                            "SELECT count() FROM system.processes WHERE query_id = '{}'",
                            found.1
                        ),
                        Duration::from_secs(2),
                    )
                    .await
                    .is_ok_and(|n| n.trim() == "1");
                    if still {
                        break found;
                    }
                    net.heal(&[&found.0]);
                };
                self.log(&format!(
                    "{member} cut off from ClickHouse while its insert {query} was under way on {s1r1} (try {tries})"
                ));
                tokio::time::sleep(d).await;
                net.heal(&[&member]);
                json!({"enricher": member, "insert_under_way_at_the_cut": true, "tries": tries})
            }
            EnricherUncommitted => {
                // The enricher that holds the most partitions.
                let mut best = (0, String::new());
                for (m, e) in &self.enrichers {
                    let n = assigned_partitions(e).await;
                    if n > best.0 {
                        best = (n, m.clone());
                    }
                }
                let (held, member) = best;
                assert!(held > 0, "no enricher holds a partition");
                let (g, t) = (self.group.clone(), self.topic.clone());
                // Asked before the cut, on a whole cluster: an error here is a failure.
                let lag = Self::blocking(move || rivulet_tests::group_lag(&g, &t))
                    .await
                    .unwrap_or_else(|e| panic!("the group's lag before the cut: {e}"));
                self.log(&format!(
                    "{member} (holds {held} partitions; {lag} messages of the group uncommitted) cut off from Kafka"
                ));
                net.cut(&member, &brokers, Cut::Drop);
                tokio::time::sleep(d).await;
                net.heal(&[&member]);
                json!({"enricher": member, "partitions_held": held, "group_messages_uncommitted_at_the_cut": lag})
            }
            IngestRedis => {
                net.cut_between(&ingests, &["redis"], Cut::Drop);
                tokio::time::sleep(d.saturating_sub(Duration::from_secs(2))).await;
                let mut redis_up = Vec::new();
                for i in &self.ingests {
                    redis_up.push(i.metric("ingest_redis_up").await);
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
                net.heal(&ingests);
                json!({"ingest_redis_up_during_the_cut": redis_up})
            }
            FlappingLink => {
                let end = Instant::now() + d;
                let mut flips = Vec::new();
                let mut n = 0u32;
                while Instant::now() < end {
                    let how = if n % 2 == 0 { Cut::Drop } else { Cut::Reject };
                    n += 1;
                    let down = Duration::from_millis(2000 + rand_below(3000));
                    let up = Duration::from_millis(2000 + rand_below(3000));
                    net.cut_between(&ingests, &brokers, how);
                    tokio::time::sleep(down.min(end.saturating_duration_since(Instant::now())))
                        .await;
                    net.heal(&ingests);
                    flips.push(
                        json!({"cut": format!("{how:?}").to_lowercase(), "seconds": secs(down)}),
                    );
                    if Instant::now() >= end {
                        break;
                    }
                    tokio::time::sleep(up.min(end.saturating_duration_since(Instant::now()))).await;
                }
                json!({"cuts": flips.len(), "each": flips})
            }
            BrokerPaused => {
                let leader = self.leader_of_partition_0().await;
                let pid = node_pid(&leader);
                self.log(&format!(
                    "SIGSTOP {leader} (pid {pid}), which leads partition 0"
                ));
                *self.healer.paused.lock().unwrap() = Some(pid);
                signal(pid, "STOP");
                let moved = self.wait_leader_moved(&leader, d).await;
                tokio::time::sleep(d.saturating_sub(moved.unwrap_or(d))).await;
                signal(pid, "CONT");
                *self.healer.paused.lock().unwrap() = None;
                json!({"broker": leader, "new_leader_after_seconds": moved.map(secs)})
            }
            ErasureReplicaPartitioned => self.erasure_while_partitioned(d).await,
        }
    }

    /// A person with events stored on both shards; `clickhouse-s2r2` (a replica of the
    /// other shard than `CLICKHOUSE_URL`'s) cut off from every other member; the erasure
    /// requested; its receipt read every second until the heal: never `done`. Returns
    /// after the heal, with the receipt's states seen.
    async fn erasure_while_partitioned(&self, d: Duration) -> Value {
        let (site, key) = site_with_key().await;
        let ingests = self.ingests.iter().map(|s| s.url.clone()).collect();
        let person = Load::new(ingests, site, key, 1);
        let user = format!("erase-{}", uuid::Uuid::new_v4().simple());
        const EVENTS: u64 = 40;
        for _ in 0..EVENTS {
            assert!(
                person.send_as(&user).await,
                "an event of the person was never acknowledged"
            );
        }
        let by_user = format!("site_id = {site} AND user_id = '{user}'");
        let n = wait_count(
            &format!("SELECT count() FROM events WHERE {by_user}"),
            EVENTS,
            Duration::from_secs(120),
        )
        .await;
        assert_eq!(n, EVENTS, "the person's events were not stored");
        sync_replicas(Duration::from_secs(120)).await;
        let mut before = Vec::new();
        for (name, url) in ch_nodes() {
            let n = node_count(
                &url,
                &format!("SELECT count() FROM events_local WHERE {by_user}"),
            )
            .await;
            before.push(json!({"replica": name, "rows": n}));
        }
        let replica = "clickhouse-s2r2";
        let others: Vec<&str> = self
            .net
            .members()
            .into_iter()
            .filter(|m| *m != replica)
            .collect();
        self.log(&format!(
            "{replica} cut off from every other member; erasing {user} of site {site}"
        ));
        self.net.cut(replica, &others, Cut::Drop);
        let cut_at = Instant::now();
        let args = ["erase", "--site", &site.to_string(), "--user-id", &user].map(String::from);
        let requested = Self::blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            admin_run(&args, &[]).json()
        })
        .await;
        let request_id = requested["request_id"]
            .as_str()
            .expect("a request id")
            .to_string();
        let db = db().await;
        let mut states = BTreeSet::new();
        while cut_at.elapsed() < d {
            if let Ok(Some(r)) = rivulet_common::privacy::receipt(&db, &request_id).await {
                assert_ne!(
                    r.state, "done",
                    "the receipt says done while {replica} is partitioned: {r:?}"
                );
                states.insert(r.state);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        self.net.heal(&[replica]);
        let healed = Instant::now();
        self.log(&format!("{replica} healed; waiting for the receipt"));
        let receipt = Pace::within(Duration::from_secs(600))
            .every(Duration::from_secs(1))
            .poll_until("the receipt did not reach done after the heal", || async {
                match rivulet_common::privacy::receipt(&db, &request_id).await {
                    Ok(Some(r)) if r.state == "done" => Ok(r),
                    Ok(Some(r)) => {
                        assert_ne!(r.state, "failed", "the erasure failed: {r:?}");
                        Err(r.state)
                    }
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
        let done_after = healed.elapsed();
        sync_replicas(Duration::from_secs(180)).await;
        let mut left = Vec::new();
        for (name, url) in ch_nodes() {
            let n = node_count(
                &url,
                &format!("SELECT count() FROM events_local WHERE {by_user}"),
            )
            .await;
            left.push(json!({"replica": name, "rows": n}));
            assert_eq!(n, 0, "{name} still holds {n} rows of the erased person");
        }
        assert_eq!(
            receipt.rows_removed, EVENTS,
            "the receipt counts the person's events"
        );
        json!({"replica": replica, "events_of_the_person": EVENTS, "rows_before": before,
            "receipt_states_while_partitioned": states, "done_after_the_heal_seconds": secs(done_after),
            "rows_removed": receipt.rows_removed, "rows_left": left})
    }
}

/// A number in `0..n` from the clock: jitter needs no better randomness.
fn rand_below(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u64::from(nanos) % n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_acknowledged_is_lost_or_doubled_under_partitions() {
    let p = profile();
    let net = Arc::new(Net::of_stack());
    stack(&["status"]);
    let topic = env("KAFKA_TOPIC_RAW");
    let group = format!("partitions-{}", uuid::Uuid::new_v4().simple());
    let partitions = {
        let t = topic.clone();
        tokio::task::spawn_blocking(move || leaders(&t))
            .await
            .unwrap()
            .len() as u32
    };
    {
        let (g, t) = (group.clone(), topic.clone());
        tokio::task::spawn_blocking(move || start_group_at_end(&g, &t))
            .await
            .unwrap();
    }
    let (site, key) = site_with_key().await;
    let mut ingests = Vec::new();
    for m in ["ingest-1", "ingest-2"] {
        ingests.push(start_ingest_in(&net, m, &[]).await);
    }
    let mut enrichers = Vec::new();
    for m in ["enricher-1", "enricher-2", "enricher-3"] {
        enrichers.push((m.to_string(), start_enricher_in(&net, m, &group, &[]).await));
    }
    for (_, e) in &enrichers {
        wait_assigned(e).await;
    }
    let load = Load::new(
        ingests.iter().map(|s| s.url.clone()).collect(),
        site,
        key,
        partitions,
    );
    let run = Run {
        net: net.clone(),
        load: load.clone(),
        ingests,
        enrichers,
        group: group.clone(),
        topic: topic.clone(),
        healer: Healer {
            net: net.clone(),
            paused: std::sync::Mutex::new(None),
        },
        full: p.full,
    };
    run.log(&format!(
        "{} enrichers in group {group}, 2 ingests, {} events/s; nemeses: {:?}",
        run.enrichers.len(),
        p.rate,
        p.nemeses.iter().map(|n| n.slug()).collect::<Vec<_>>()
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let stream = load.stream(p.rate, stop.clone());
    tokio::time::sleep(p.pause).await;

    let mut nemeses = Vec::new();
    for nemesis in &p.nemeses {
        let d = nemesis.duration(run.full);
        let title = nemesis.title(d);
        let in_sync_after = run.wait_replicas_in_sync(Duration::from_secs(180)).await;
        if in_sync_after > Duration::from_secs(1) {
            run.log(&format!("every replica in sync after {in_sync_after:.1?}"));
        }
        run.log(&title);
        load.set_tag(&format!("/{}", nemesis.slug()));
        let from = load.now();
        let details = run.apply(*nemesis, d).await;
        let healed = load.now();
        let recovery = load
            .probe_partitions(Duration::from_secs(600))
            .await
            .unwrap_or_else(|e| {
                let topic = run.topic.clone();
                let states =
                    std::thread::spawn(move || describe_partitions(&partition_states(&topic)))
                        .join()
                        .unwrap_or_default();
                panic!(
                    "{title}: no recovery: {e}\n{}: {states}\nthe ingests' logs end with:\n{}",
                    run.topic,
                    run.ingest_log_tails()
                )
            });
        let fault = load.window(from, healed);
        let after = load.window(healed, load.now());
        run.log(&format!(
            "healed; recovered in {recovery:.1?}; {} of {} attempts not 200 during the fault, longest wait {:?}",
            fault.not_200, fault.attempts, fault.longest_wait.max(after.longest_wait)
        ));
        nemeses.push(json!({
            "nemesis": nemesis.slug(),
            "title": title,
            "fault_seconds": secs(healed - from),
            "attempts_during_fault": fault.attempts,
            "not_200_during_fault": fault.not_200,
            "share_not_200": (fault.share_not_200() * 10_000.0).round() / 10_000.0,
            "longest_wait_ms": millis(fault.longest_wait.max(after.longest_wait)),
            "recovery_seconds": secs(recovery),
            "replicas_in_sync_before_after_seconds": secs(in_sync_after),
            "details": details,
        }));
        load.set_tag("/steady");
        tokio::time::sleep(p.pause).await;
    }
    stop.store(true, Ordering::Relaxed);
    stream.await.unwrap();
    run.log("stream stopped; quiet period, then the checker");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let quiet = Instant::now();

    // The checker.
    let (sent, acked, gave_up, unexpected, attempts) = load.ledger(|l| {
        (
            l.sent.clone(),
            l.acked.clone(),
            l.gave_up,
            l.unexpected.clone(),
            l.attempts.clone(),
        )
    });
    let uniq = format!("SELECT uniqExact(event_id) FROM events WHERE site_id = {site}");
    wait_count(&uniq, acked.len() as u64, Duration::from_secs(300)).await;
    {
        let (g, t) = (group.clone(), topic.clone());
        wait_group_caught_up(&g, &t, Duration::from_secs(300)).await;
    }
    let lag_zero_after = quiet.elapsed();
    sync_replicas(Duration::from_secs(180)).await;
    let StoredEvents {
        ids: stored,
        rows_after_dedup,
        rows,
    } = stored_events(site).await;
    let lost = acked.difference(&stored).count();
    let never_sent = stored.difference(&sent).count();
    let duplicates = rows_after_dedup.saturating_sub(stored.len() as u64);
    let mut replicas = Vec::new();
    let mut by_shard: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for (name, url) in ch_nodes() {
        let n = node_count(
            &url,
            &format!("SELECT count() FROM events_local FINAL WHERE site_id = {site}"),
        )
        .await;
        let shard = name.trim_start_matches("clickhouse-")[..2].to_string();
        by_shard.entry(shard).or_default().push(n);
        replicas.push(json!({"replica": name, "rows_after_dedup": n}));
    }
    let replicas_agree = by_shard
        .values()
        .all(|v| v.windows(2).all(|w| w[0] == w[1]));
    let across_shards: u64 = by_shard.values().map(|v| v[0]).sum();
    let longest = attempts.iter().map(|a| a.took).max().unwrap_or_default();
    let timed_out = attempts
        .iter()
        .filter(|a| a.outcome == Outcome::TimedOut)
        .count();
    let retried = attempts.iter().filter(|a| a.outcome != Outcome::Ok).count();
    let route_out = net.members_with_a_route_out();
    let summary = json!({
        "profile": if p.full { "full" } else { "short" },
        "rate_per_sec": p.rate,
        "topology": "cluster: 3 brokers, ZooKeeper, 2 x 2 ClickHouse, Redis, 2 ingests, 3 enrichers, each in a network namespace of its own",
        "events_sent": sent.len(),
        "acknowledged": acked.len(),
        "never_acknowledged": gave_up,
        "stored": stored.len(),
        "lost": lost,
        "stored_never_sent": never_sent,
        "rows_before_dedup": rows,
        "duplicates_after_dedup": duplicates,
        "replicas": replicas,
        "replicas_of_each_shard_agree": replicas_agree,
        "client_attempts": attempts.len(),
        "client_attempts_not_200": retried,
        "client_timeouts": timed_out,
        "deadline_ms": millis(DEADLINE),
        "longest_wait_ms": millis(longest),
        "lag_zero_after_quiet_seconds": secs(lag_zero_after),
        "members_with_a_route_out": route_out,
        "nemeses": nemeses,
        "duration_seconds": load.now().as_secs(),
    });
    let text = serde_json::to_string_pretty(&summary).unwrap();
    eprintln!("{text}");
    let out = repo_root().join("artifacts");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("chaos-partitions.json"), &text).unwrap();

    assert_eq!(lost, 0, "acknowledged events were lost");
    assert_eq!(duplicates, 0, "events counted twice after dedup");
    assert_eq!(never_sent, 0, "events stored that were never sent");
    assert_eq!(gave_up, 0, "events the client could never get acknowledged");
    assert!(
        unexpected.is_empty(),
        "answers a client cannot retry: {unexpected:?}"
    );
    assert!(
        replicas_agree && across_shards == stored.len() as u64,
        "the replicas of a shard disagree, or the shards do not add up: {summary}"
    );
    assert_eq!(
        timed_out, 0,
        "clients got no answer within {:?}",
        load.attempt_timeout
    );
    assert!(
        longest <= DEADLINE,
        "a client waited {longest:?}, longer than ingest's deadline {DEADLINE:?}"
    );
    assert!(
        route_out.is_empty(),
        "namespaces that route outside the stack: {route_out:?}"
    );
    assert!(acked.len() as u64 > p.rate, "the stream barely ran");
}
