//! The fault suite: a steady stream of events through two ingests and two enrichers on
//! the real stack while, in turn, an enricher is killed with SIGKILL, the Kafka broker
//! restarts, ClickHouse and Redis stop for a while, and each ingest restarts on SIGTERM.
//! The client retries on 503 and connection errors with the same `event_id` (and
//! `timestamp`), failing over to the other ingest, as the SDK does.
//!
//! At the end, every event that got a 200 must be in ClickHouse exactly once after
//! dedup, and no event, acknowledged or not, may be counted twice. The summary gives
//! events sent, acknowledged, stored, lost, duplicates, and the time each fault took to
//! recover from (a fresh probe event sent after the fault, until it is queryable).
//!
//! `CHAOS_PROFILE=short` (default, run by `cargo test` in CI) uses short outages and one
//! of each fault; `CHAOS_PROFILE=full` (`scripts/chaos`) runs the whole sequence: SIGKILL
//! an enricher twice, restart Kafka, ClickHouse down 30 s, Redis down 20 s, SIGTERM each
//! ingest. `CHAOS_RATE` sets events per second (default 100 / 200).
//!
//! On a cluster stack (`scripts/stack up --cluster`; `scripts/chaos --cluster` and
//! `scripts/test-cluster` run it there) the faults are the cluster's, through two ingests
//! and three enrichers: SIGKILL the broker that leads a partition of `events.raw` (and
//! start it again), restart a broker, stop one ClickHouse replica for 30 s, stop
//! ZooKeeper for 20 s, SIGKILL an enricher (short: shorter outages). For each fault the
//! summary also gives the share of ingest answers that were not 200 from the fault until
//! its recovery: with one broker of three down, ingest keeps answering 200.
//!
//! The test stops and starts the stack's services: it runs alone in its test binary.

use rivulet_tests::*;
use serde_json::json;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
enum Fault {
    KillEnricher,
    RestartKafka,
    StopClickHouse(Duration),
    StopRedis(Duration),
    RestartIngest(usize),
    /// Cluster: SIGKILL the leader of partition 0 of `events.raw`; start it after this.
    KillPartitionLeader(Duration),
    /// Cluster: SIGTERM one broker and start it again.
    RestartBroker,
    /// Cluster: stop one replica of a shard for this long.
    StopClickHouseReplica(Duration),
    /// Cluster: stop ZooKeeper for this long.
    StopZooKeeper(Duration),
}

impl Fault {
    fn name(&self) -> String {
        match self {
            Fault::KillPartitionLeader(d) => {
                format!(
                    "SIGKILL a partition leader (broker), down {} s",
                    d.as_secs()
                )
            }
            Fault::RestartBroker => "restart a broker".into(),
            Fault::StopClickHouseReplica(d) => {
                format!("one ClickHouse replica down {} s", d.as_secs())
            }
            Fault::StopZooKeeper(d) => format!("ZooKeeper down {} s", d.as_secs()),
            Fault::KillEnricher => "SIGKILL an enricher".into(),
            Fault::RestartKafka => "restart the Kafka broker".into(),
            Fault::StopClickHouse(d) => format!("ClickHouse down {} s", d.as_secs()),
            Fault::StopRedis(d) => format!("Redis down {} s", d.as_secs()),
            Fault::RestartIngest(i) => format!("SIGTERM + restart ingest {}", i + 1),
        }
    }
}

struct Profile {
    rate: u64,
    faults: Vec<Fault>,
    /// Steady stream between faults.
    pause: Duration,
    enrichers: usize,
}

fn profile() -> Profile {
    let full = std::env::var("CHAOS_PROFILE").as_deref() == Ok("full");
    let rate = std::env::var("CHAOS_RATE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if full { 200 } else { 100 });
    let secs = Duration::from_secs;
    if !env("CLICKHOUSE_CLUSTER").is_empty() {
        let (down, pause) = if full { (1, 10) } else { (0, 3) };
        return Profile {
            rate,
            faults: vec![
                Fault::KillPartitionLeader(secs([10, 20][down])),
                Fault::RestartBroker,
                Fault::StopClickHouseReplica(secs([10, 30][down])),
                Fault::StopZooKeeper(secs([5, 20][down])),
                Fault::KillEnricher,
            ],
            pause: secs(pause),
            enrichers: 3,
        };
    }
    if full {
        Profile {
            rate,
            faults: vec![
                Fault::KillEnricher,
                Fault::KillEnricher,
                Fault::RestartKafka,
                Fault::StopClickHouse(secs(30)),
                Fault::StopRedis(secs(20)),
                Fault::RestartIngest(0),
                Fault::RestartIngest(1),
            ],
            pause: secs(10),
            enrichers: 2,
        }
    } else {
        Profile {
            rate,
            faults: vec![
                Fault::KillEnricher,
                Fault::RestartKafka,
                Fault::StopClickHouse(secs(10)),
                Fault::StopRedis(secs(5)),
                Fault::RestartIngest(0),
            ],
            pause: secs(3),
            enrichers: 2,
        }
    }
}

/// What the client saw.
#[derive(Default)]
struct Ledger {
    sent: u64,
    acked: HashSet<String>,
    gave_up: u64,
}

/// Pauses of 100 ms doubling to 1 s, 10 s an attempt, two minutes an event.
const RETRIES: RetryPolicy = RetryPolicy {
    first_pause: Duration::from_millis(100),
    max_pause: Duration::from_secs(1),
    attempt_timeout: Duration::from_secs(10),
    give_up_after: Duration::from_secs(120),
};

struct Client {
    ingests: RetryingClient,
    key: String,
    site: u32,
    ledger: Mutex<Ledger>,
    next: AtomicU64,
}

impl Client {
    /// Sends one event until an ingest answers 200 (or two minutes pass), alternating
    /// ingests; returns whether it was acknowledged.
    async fn send(&self, event_id: &str, path: &str) -> bool {
        let ts = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        let body = json!({"api_key": self.key, "site_id": self.site, "event_id": event_id,
            "timestamp": ts, "pathname": path,
            "ip_address": format!("81.2.69.{}", self.next.fetch_add(1, Ordering::Relaxed) % 250),
            "user_agent": "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"});
        let first = self.next.load(Ordering::Relaxed) as usize;
        let what = format!("event {event_id}");
        self.ingests
            .post_until_ok(&what, "/api/track", &body, first)
            .await
    }

    async fn send_and_record(self: Arc<Self>, event_id: String) {
        self.ledger.lock().unwrap().sent += 1;
        let ok = self.send(&event_id, "/chaos").await;
        let mut ledger = self.ledger.lock().unwrap();
        if ok {
            ledger.acked.insert(event_id);
        } else {
            ledger.gave_up += 1;
        }
    }
}

/// Time until probe events sent now are acknowledged and queryable in ClickHouse: twelve
/// visitors, so that (by their keys) every partition is very likely probed.
async fn probe(client: &Arc<Client>) -> Duration {
    let started = Instant::now();
    let ids: Vec<String> = (0..12).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let sends = ids.iter().map(|id| {
        let client = client.clone();
        let id = id.clone();
        async move {
            client.ledger.lock().unwrap().sent += 1;
            assert!(
                client.send(&id, "/probe").await,
                "a probe was never acknowledged"
            );
            client.ledger.lock().unwrap().acked.insert(id);
        }
    });
    futures::future::join_all(sends).await;
    let list = ids
        .iter()
        .map(|id| format!("'{id}'"))
        .collect::<Vec<_>>()
        .join(",");
    let sql = format!(
        "SELECT uniqExact(event_id) FROM events WHERE site_id = {} AND event_id IN ({list})",
        client.site
    );
    let n = wait_count(&sql, ids.len() as u64, Duration::from_secs(180)).await;
    assert_eq!(n, ids.len() as u64, "probe events never reached ClickHouse");
    started.elapsed()
}

fn report(
    recoveries: &mut Vec<(String, Duration)>,
    fault: &Fault,
    took: Duration,
    started: Instant,
) {
    eprintln!(
        "[chaos {:>4} s]   recovered in {took:.1?}",
        started.elapsed().as_secs()
    );
    recoveries.push((fault.name(), took));
}

fn blocking_stack(args: &'static [&'static str]) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_blocking(move || stack(args))
}

/// `scripts/stack ACTION NODE`, off the runtime's threads.
async fn on_node(action: &'static str, node: String) {
    tokio::task::spawn_blocking(move || stack(&[action, &node]))
        .await
        .unwrap();
}

/// The `scripts/stack` name of the broker that leads partition 0 of `events.raw` now.
fn partition_leader() -> String {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", env("KAFKA_BROKERS"))
        .create()
        .unwrap();
    let topic = env("KAFKA_TOPIC_RAW");
    let md = consumer
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .unwrap();
    let leader = md.topics()[0]
        .partitions()
        .iter()
        .find(|p| p.id() == 0)
        .expect("partition 0")
        .leader();
    // Broker `kafka-N` has node.id N (docs/cluster.md).
    format!("kafka-{leader}")
}

/// The ClickHouse replica a cluster fault stops: one not named by CLICKHOUSE_URL, since
/// every client enters through that one (docs/cluster.md).
fn a_replica() -> String {
    env("RIVULET_CLICKHOUSE_NODE_NAMES")
        .split(',')
        .next_back()
        .expect("node names")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_acknowledged_is_lost_under_faults() {
    let p = profile();
    let started = Instant::now();
    let (site, key) = site_with_key().await;
    let mut ingests = [start_ingest(&[]).await, start_ingest(&[]).await];
    let mut enrichers = Vec::new();
    for _ in 0..p.enrichers {
        enrichers.push(start_enricher(&[]).await);
    }
    for e in &enrichers {
        wait_assigned(e).await;
    }
    let client = Arc::new(Client {
        ingests: RetryingClient::new(ingests.iter().map(|s| s.url.clone()).collect(), RETRIES),
        key,
        site,
        ledger: Mutex::new(Ledger::default()),
        next: AtomicU64::new(0),
    });

    // The steady stream: one new event every 1/rate seconds, each retried on its own.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stream = {
        let (client, stop, rate) = (client.clone(), stop.clone(), p.rate);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
            let mut inflight = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let id = uuid::Uuid::new_v4().to_string();
                inflight.push(tokio::spawn(client.clone().send_and_record(id)));
            }
            futures::future::join_all(inflight).await;
        })
    };

    let mut recoveries: Vec<(String, Duration)> = Vec::new();
    let mut error_rates: Vec<(String, u64, u64)> = Vec::new();
    // The scenario, here and below: the stream runs `pause` between faults, and each
    // fault lasts its own time.
    tokio::time::sleep(p.pause).await;
    for fault in &p.faults {
        eprintln!(
            "[chaos {:>4} s] {}",
            started.elapsed().as_secs(),
            fault.name()
        );
        let (attempts0, retries0) = (client.ingests.attempts(), client.ingests.retries());
        match *fault {
            Fault::KillPartitionLeader(down) => {
                let leader = tokio::task::spawn_blocking(partition_leader).await.unwrap();
                eprintln!(
                    "[chaos {:>4} s]   {leader} leads partition 0",
                    started.elapsed().as_secs()
                );
                on_node("kill", leader.clone()).await;
                tokio::time::sleep(down).await;
                on_node("start", leader).await;
            }
            Fault::RestartBroker => {
                let broker = env("RIVULET_KAFKA_NODE_NAMES")
                    .split(',')
                    .nth(1)
                    .expect("three brokers")
                    .to_string();
                on_node("restart", broker).await;
            }
            Fault::StopClickHouseReplica(d) => {
                on_node("stop", a_replica()).await;
                tokio::time::sleep(d).await;
                on_node("start", a_replica()).await;
            }
            Fault::StopZooKeeper(d) => {
                on_node("stop", "zookeeper".into()).await;
                tokio::time::sleep(d).await;
                on_node("start", "zookeeper".into()).await;
            }
            Fault::KillEnricher => {
                // Recovery is the survivor taking over the dead one's partitions; the
                // replacement starts after the probe.
                enrichers.remove(0).kill9();
                let took = probe(&client).await;
                enrichers.push(start_enricher(&[]).await);
                report(&mut recoveries, fault, took, started);
                tokio::time::sleep(p.pause).await;
                continue;
            }
            Fault::RestartKafka => blocking_stack(&["restart", "kafka"]).await.unwrap(),
            Fault::StopClickHouse(d) => {
                blocking_stack(&["stop", "clickhouse"]).await.unwrap();
                tokio::time::sleep(d).await;
                blocking_stack(&["start", "clickhouse"]).await.unwrap();
            }
            Fault::StopRedis(d) => {
                blocking_stack(&["stop", "redis"]).await.unwrap();
                tokio::time::sleep(d).await;
                blocking_stack(&["start", "redis"]).await.unwrap();
            }
            Fault::RestartIngest(i) => {
                let mut old = std::mem::replace(&mut ingests[i], start_ingest(&[]).await);
                client.ingests.replace_ingest(i, ingests[i].url.clone());
                let clean =
                    tokio::task::spawn_blocking(move || old.terminate(Duration::from_secs(30)))
                        .await
                        .unwrap();
                assert!(clean, "ingest did not exit cleanly on SIGTERM");
            }
        }
        let took = probe(&client).await;
        report(&mut recoveries, fault, took, started);
        error_rates.push((
            fault.name(),
            client.ingests.retries() - retries0,
            client.ingests.attempts() - attempts0,
        ));
        tokio::time::sleep(p.pause).await;
    }
    stop.store(true, Ordering::Relaxed);
    stream.await.unwrap();

    // Everything acknowledged must arrive; then count what is stored.
    let (sent, acked, gave_up) = {
        let l = client.ledger.lock().unwrap();
        (l.sent, l.acked.clone(), l.gave_up)
    };
    let uniq = format!("SELECT uniqExact(event_id) FROM events WHERE site_id = {site}");
    wait_count(&uniq, acked.len() as u64, Duration::from_secs(180)).await;
    // Give redeliveries in flight a moment to land, so that duplicates would be seen: a
    // window for something that may or may not happen (no condition ends it), which the
    // figures below report.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Rows before dedup: redeliveries after a SIGKILL and client retries show up there.
    let StoredEvents {
        ids: stored,
        rows_after_dedup: rows_final,
        rows: rows_raw,
    } = stored_events(site).await;
    let lost = acked.difference(&stored).count();
    let duplicates = rows_final.saturating_sub(stored.len() as u64);
    let summary = json!({
        "profile": std::env::var("CHAOS_PROFILE").unwrap_or_else(|_| "short".into()),
        "rate_per_sec": p.rate,
        "events_sent": sent,
        "acknowledged": acked.len(),
        "never_acknowledged": gave_up,
        "stored": stored.len(),
        "lost": lost,
        "rows_before_dedup": rows_raw,
        "duplicates_after_dedup": duplicates,
        "client_retries": client.ingests.retries(),
        "topology": if env("CLICKHOUSE_CLUSTER").is_empty() { "single node" } else { "cluster" },
        "recovery_seconds": recoveries.iter().map(|(n, d)| json!({"fault": n, "seconds": (d.as_secs_f64() * 10.0).round() / 10.0})).collect::<Vec<_>>(),
        "ingest_answers_not_200": error_rates.iter().map(|(n, failed, all)| json!({"fault": n, "not_200": failed, "answers": all,
            "share": if *all > 0 { (*failed as f64 / *all as f64 * 10_000.0).round() / 10_000.0 } else { 0.0 }})).collect::<Vec<_>>(),
        "duration_seconds": started.elapsed().as_secs(),
    });
    let text = serde_json::to_string_pretty(&summary).unwrap();
    eprintln!("{text}");
    let out = repo_root().join("artifacts");
    std::fs::create_dir_all(&out).unwrap();
    let name = if env("CLICKHOUSE_CLUSTER").is_empty() {
        "chaos.json"
    } else {
        "chaos-cluster.json"
    };
    std::fs::write(out.join(name), &text).unwrap();
    assert_eq!(lost, 0, "acknowledged events were lost");
    assert_eq!(duplicates, 0, "events counted twice after dedup");
    assert_eq!(gave_up, 0, "events the client could never get acknowledged");
    assert!(acked.len() as u64 > p.rate, "the stream barely ran");
}
