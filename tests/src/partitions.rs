//! Network partitions between the cluster's nodes: the harness of
//! `tests/tests/partitions.rs`, on `scripts/stack up --netns` (docs/cluster.md, "Nodes
//! with their own network"), where Redis, ZooKeeper, each broker and each ClickHouse
//! server run in a network namespace of their own, and so do the ingests and enrichers
//! started here, and the test itself (the client namespace).
//!
//! - [`Net`]: the namespaces and their addresses, and the faults: iptables rules in a
//!   namespace's `RIVULET-PARTITION` chain that drop (or reject) what goes to and comes
//!   from other members, and the heal that flushes them.
//! - [`start_ingest_in`], [`start_enricher_in`]: the services, each in its namespace.
//! - [`Load`]: the load generator. A steady stream of single events, each retried on any
//!   answer but 200 (and on time-outs and connection errors) with the same `event_id`,
//!   alternating ingests, as the SDK does; it records every event sent and acknowledged
//!   and every attempt (when, how long the client waited, what it got).
//! - [`Load::probe_partitions`]: one event per partition of `events.raw`, sent and waited
//!   for in ClickHouse: once each is stored, everything acknowledged before it on its
//!   partition has been consumed, which is how "recovered" is measured.
//! - the checker's reads: each server's rows, replication caught up, the consumer
//!   group's lag.

use crate::client::wait_for;
use crate::wait::Pace;
use crate::{binary, env, load_stack_env, Service};
use serde_json::json;
use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Runs `program args…`; its stdout, failing the test when it fails.
fn run(program: &str, args: &[&str], stdin: Option<&str>) -> String {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// How a cut behaves: `Drop` is silence (a peer's packets vanish: connections hang until
/// their time-outs), `Reject` a fast failure (TCP resets: connections fail at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    Drop,
    Reject,
}

/// The stack's network namespaces (`RIVULET_NETNS_PREFIX`-MEMBER) and their addresses
/// (`RIVULET_NETNS_ADDRS`), from the stack's env.
pub struct Net {
    prefix: String,
    addrs: Vec<(String, String)>,
}

/// The chain `scripts/stack up --netns` hooks first into each namespace's INPUT and OUTPUT.
const CHAIN: &str = "RIVULET-PARTITION";

impl Net {
    /// The namespaces of the stack in `RIVULET_STACK_DIR`. Fails unless that stack runs
    /// with `--netns` and this process runs in its client namespace (where
    /// `scripts/chaos --partitions` starts it): from anywhere else its addresses are
    /// not the stack's.
    pub fn of_stack() -> Net {
        load_stack_env();
        let prefix = env("RIVULET_NETNS_PREFIX");
        assert!(
            !prefix.is_empty(),
            "this suite runs on `scripts/stack up --netns` (RIVULET_STACK_DIR={}), whose env \
             names its network namespaces; `scripts/chaos --partitions` starts it",
            env("RIVULET_STACK_DIR")
        );
        let addrs = env("RIVULET_NETNS_ADDRS")
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let net = Net { prefix, addrs };
        let here = run(
            "ip",
            &["netns", "identify", &std::process::id().to_string()],
            None,
        );
        assert_eq!(
            here.trim(),
            net.ns("client"),
            "the suite runs inside the stack's client namespace (`ip netns exec {} …`, as \
             scripts/chaos --partitions does): only there are the nodes' addresses theirs",
            net.ns("client")
        );
        net
    }

    /// A member's address (`kafka-1`, `clickhouse-s2r2`, `ingest-1`, `enricher-3`, …).
    pub fn addr(&self, member: &str) -> &str {
        self.addrs
            .iter()
            .find(|(m, _)| m == member)
            .map(|(_, a)| a.as_str())
            .unwrap_or_else(|| panic!("no member {member} in RIVULET_NETNS_ADDRS"))
    }

    /// The member whose address this is.
    pub fn member_at(&self, addr: &str) -> Option<&str> {
        self.addrs
            .iter()
            .find(|(_, a)| a == addr)
            .map(|(m, _)| m.as_str())
    }

    /// A member's namespace.
    pub fn ns(&self, member: &str) -> String {
        format!("{}-{member}", self.prefix)
    }

    /// Every member's name.
    pub fn members(&self) -> Vec<&str> {
        self.addrs.iter().map(|(m, _)| m.as_str()).collect()
    }

    /// Cuts `member` off from each of `others`, both ways: rules in `member`'s namespace
    /// that drop (or reject) every packet to and from their addresses.
    pub fn cut(&self, member: &str, others: &[&str], how: Cut) {
        let mut rules = String::from("*filter\n");
        for other in others {
            let a = self.addr(other);
            if how == Cut::Reject {
                for dir in ["-s", "-d"] {
                    rules +=
                        &format!("-A {CHAIN} {dir} {a} -p tcp -j REJECT --reject-with tcp-reset\n");
                }
            }
            rules += &format!("-A {CHAIN} -s {a} -j DROP\n-A {CHAIN} -d {a} -j DROP\n");
        }
        rules += "COMMIT\n";
        run(
            "ip",
            &[
                "netns",
                "exec",
                &self.ns(member),
                "iptables-restore",
                "-w",
                "--noflush",
            ],
            Some(&rules),
        );
    }

    /// Each of `a` cut off from each of `b` (rules on `a`'s side).
    pub fn cut_between(&self, a: &[&str], b: &[&str], how: Cut) {
        for m in a {
            self.cut(m, b, how);
        }
    }

    /// Removes every rule of these members.
    pub fn heal(&self, members: &[&str]) {
        for m in members {
            run(
                "ip",
                &["netns", "exec", &self.ns(m), "iptables", "-w", "-F", CHAIN],
                None,
            );
        }
    }

    /// Removes every rule of every member.
    pub fn heal_all(&self) {
        let all = self.members();
        self.heal(&all);
    }

    /// The rules in a member's chain now (`iptables -S`), for a failure's message.
    pub fn rules(&self, member: &str) -> String {
        run(
            "ip",
            &["netns", "exec", &self.ns(member), "iptables", "-S", CHAIN],
            None,
        )
    }

    /// Members whose namespace routes anywhere but the stack's own subnet (none may: no
    /// address outside the namespaces can then be reached from them).
    pub fn members_with_a_route_out(&self) -> Vec<String> {
        self.members()
            .into_iter()
            .filter(|m| {
                let routes = run("ip", &["-n", &self.ns(m), "-4", "route", "show"], None);
                let subnet = {
                    let a = self.addr(m);
                    format!("{}.0/24", &a[..a.rfind('.').expect("an IPv4 address")])
                };
                routes
                    .lines()
                    .any(|l| !l.trim().is_empty() && !l.starts_with(&subnet))
            })
            .map(str::to_string)
            .collect()
    }

    /// PIDs of the processes in a member's namespace.
    pub fn pids(&self, member: &str) -> Vec<u32> {
        run("ip", &["netns", "pids", &self.ns(member)], None)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}

/// A log file for a service under the stack's `logs/tests/`.
fn log_file(name: &str) -> PathBuf {
    let dir = PathBuf::from(env("RIVULET_STACK_DIR")).join("logs/tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}-{}.log", uuid::Uuid::new_v4().simple()))
}

/// Starts a service binary in `member`'s namespace with the stack's environment, then
/// `vars`; stdin is its lifeline. A process left in that namespace (by a test binary that
/// was killed) is stopped first: the namespace is this stack's, and its ports are fixed.
fn spawn_in(net: &Net, member: &str, bin: &str, args: &[&str], vars: &[(&str, String)]) -> Service {
    for pid in net.pids(member) {
        eprintln!("stopping pid {pid}, left in {}", net.ns(member));
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    let log = log_file(member);
    let out = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &net.ns(member)])
        .arg(binary(bin))
        .args(args)
        .env("RUST_LOG", "info")
        .env("RIVULET_STDIN_LIFELINE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out));
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let url = vars
        .first()
        .map(|(_, addr)| format!("http://{addr}"))
        .expect("the listen address first");
    let ops_url = vars
        .iter()
        .find(|(k, _)| *k == "INGEST_INTERNAL_ADDR")
        .map_or(url.clone(), |(_, a)| format!("http://{a}"));
    Service {
        child: cmd.spawn().unwrap_or_else(|e| panic!("spawn {bin}: {e}")),
        url,
        ops_url,
        log,
    }
}

/// `KAFKA_ACK_TIMEOUT_MS` of the ingests started here (ingest's default): the longest
/// ingest waits for Kafka before it answers 503.
pub const KAFKA_ACK_TIMEOUT: Duration = Duration::from_millis(5000);

/// Starts `rivulet-ingest` in `member`'s namespace (public port 3000, internal 3003) and
/// waits until it is ready. Its rate limits are on and high (10,000 requests and 100,000
/// events a second per key), so that each request goes through the limiter in Redis.
pub async fn start_ingest_in(net: &Net, member: &str, extra: &[(&str, &str)]) -> Service {
    let addr = net.addr(member).to_string();
    let mut vars = vec![
        ("INGEST_ADDR", format!("{addr}:3000")),
        ("INGEST_INTERNAL_ADDR", format!("{addr}:3003")),
        ("RATE_LIMIT_PER_SECOND", "10000".into()),
        ("EVENT_RATE_LIMIT_PER_SECOND", "100000".into()),
        ("AUTH_FAILURE_BURST", "0".into()),
        // The idempotent producer's states (drain, epoch bump, producer id) in its log:
        // what a failure report shows when an ingest does not recover.
        ("KAFKA_DEBUG", "eos".into()),
        ("RUST_LOG", "info,librdkafka=debug".into()),
        (
            "KAFKA_ACK_TIMEOUT_MS",
            KAFKA_ACK_TIMEOUT.as_millis().to_string(),
        ),
    ];
    vars.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    let svc = spawn_in(net, member, "rivulet-ingest", &[], &vars);
    wait_for(&svc.ops_url, "/_readiness", Duration::from_secs(60)).await;
    svc
}

/// Starts `rivulet-enricher` in `member`'s namespace (port 3001) in consumer group
/// `group`, with MaxMind's test database and 200 ms batches, and waits until it is ready.
pub async fn start_enricher_in(
    net: &Net,
    member: &str,
    group: &str,
    extra: &[(&str, &str)],
) -> Service {
    let addr = net.addr(member).to_string();
    let mut vars = vec![
        ("ENRICHER_ADDR", format!("{addr}:3001")),
        ("KAFKA_GROUP_ID", group.to_string()),
        ("GEOIP_DB", crate::geo_test_db().display().to_string()),
        ("BATCH_MAX_AGE_MS", "200".into()),
    ];
    vars.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    let svc = spawn_in(net, member, "rivulet-enricher", &[], &vars);
    wait_for(&svc.url, "/_readiness", Duration::from_secs(90)).await;
    svc
}

/// Partitions an enricher holds now (its readiness), 0 if it does not answer.
pub async fn assigned_partitions(enricher: &Service) -> u64 {
    let r = crate::http()
        .get(format!("{}/_readiness", enricher.url))
        .timeout(Duration::from_secs(2))
        .send()
        .await;
    match r {
        Ok(r) => r
            .json::<serde_json::Value>()
            .await
            .ok()
            .and_then(|v| v["assigned_partitions"].as_u64())
            .unwrap_or(0),
        Err(_) => 0,
    }
}

/// Makes consumer group `group` start at the end of `topic`: a new group of a run reads
/// only that run's events, not every earlier run's.
pub fn start_group_at_end(group: &str, topic: &str) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::{Offset, TopicPartitionList};
    let consumer: BaseConsumer = rivulet_common::kafka::base_config()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let t = Duration::from_secs(10);
    let md = consumer.fetch_metadata(Some(topic), t).unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in md.topics()[0].partitions() {
        let (_, high) = consumer.fetch_watermarks(topic, p.id(), t).unwrap();
        tpl.add_partition_offset(topic, p.id(), Offset::Offset(high))
            .unwrap();
    }
    consumer.commit(&tpl, CommitMode::Sync).unwrap();
}

/// The partitions of `topic` and the broker (`kafka-N`, node id N) that leads each, as
/// the metadata of the brokers this process reaches says.
pub fn leaders(topic: &str) -> Vec<(i32, String)> {
    partition_states(topic)
        .into_iter()
        .map(|(p, leader, _, _)| (p, format!("kafka-{leader}")))
        .collect()
}

/// Each partition of `topic` as the brokers' metadata has it: its id, leader, replicas
/// and in-sync replicas (broker ids).
///
/// Blocks; asks again for up to 60 s while the brokers answer with an error (a partition
/// whose leader is moving answers "not leader" for a while, which is no failure).
pub fn partition_states(topic: &str) -> Vec<(i32, i32, Vec<i32>, Vec<i32>)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rivulet_common::kafka::base_config().create().unwrap();
    Pace::within(Duration::from_secs(60))
        .every(Duration::from_millis(500))
        .poll_blocking(|| consumer.fetch_metadata(Some(topic), Duration::from_secs(10)))
        .map(|md| {
            md.topics()[0]
                .partitions()
                .iter()
                .map(|p| (p.id(), p.leader(), p.replicas().to_vec(), p.isr().to_vec()))
                .collect()
        })
        .unwrap_or_else(|e| panic!("the metadata of {topic}: {e}, for 60 s"))
}

/// [`partition_states`] as one line for a log or a failure's message.
pub fn describe_partitions(states: &[(i32, i32, Vec<i32>, Vec<i32>)]) -> String {
    states
        .iter()
        .map(|(p, leader, replicas, isr)| {
            format!("{p}: leader {leader}, replicas {replicas:?}, in sync {isr:?}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The PID of a stack node from its PID file (`RIVULET_STACK_DIR/run/NODE.pid`).
pub fn node_pid(node: &str) -> u32 {
    let f = PathBuf::from(env("RIVULET_STACK_DIR")).join(format!("run/{node}.pid"));
    std::fs::read_to_string(&f)
        .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        .trim()
        .parse()
        .unwrap()
}

/// Sends `signal` (`STOP`, `CONT`) to a process.
pub fn signal(pid: u32, signal: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{signal} {pid} failed");
}

/// One statement on one ClickHouse server (its HTTP URL) as the stack's user: the answer
/// as text, or the error. Not retried.
pub async fn node_sql(url: &str, sql: &str, within: Duration) -> Result<String, String> {
    let r = crate::http()
        .post(format!("{url}/?database={}", env("CLICKHOUSE_DB")))
        .header("X-ClickHouse-User", env("CLICKHOUSE_USER"))
        .header("X-ClickHouse-Key", env("CLICKHOUSE_PASSWORD"))
        .body(sql.to_string())
        .timeout(within)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let ok = r.status().is_success();
    let text = r.text().await.map_err(|e| e.to_string())?;
    if ok {
        Ok(text)
    } else {
        Err(text)
    }
}

/// The cluster's servers: (name, HTTP URL), in the stack's order.
pub fn ch_nodes() -> Vec<(String, String)> {
    env("RIVULET_CLICKHOUSE_NODE_NAMES")
        .split(',')
        .map(str::to_string)
        .zip(env("CLICKHOUSE_NODES").split(',').map(str::to_string))
        .collect()
}

/// Waits until every server has fetched every part queued for it (`SYSTEM SYNC REPLICA`
/// of `events_local`), each within `within`.
pub async fn sync_replicas(within: Duration) {
    for (name, url) in ch_nodes() {
        Pace::within(within)
            .every(Duration::from_secs(1))
            .poll_until(&format!("{name} did not catch up"), || async {
                node_sql(
                    &url,
                    &format!("SYSTEM SYNC REPLICA {}.events_local", env("CLICKHOUSE_DB")),
                    Duration::from_secs(60),
                )
                .await
            })
            .await;
    }
}

/// The first number of one server's answer to `sql`.
pub async fn node_count(url: &str, sql: &str) -> u64 {
    node_sql(url, sql, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{url}: {sql}: {e}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{url}: {sql}: not a number ({e})"))
}

/// CRC-32 (IEEE), as librdkafka's default partitioner (`consistent_random`) hashes keys.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in bytes {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// What happened to one attempt of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// Any other HTTP status.
    Status(u16),
    /// No answer within the client's attempt time-out.
    TimedOut,
    /// No connection, or it broke.
    Failed,
}

/// One attempt: when it started (since the load began), how long the client waited.
#[derive(Clone, Copy, Debug)]
pub struct Attempt {
    pub at: Duration,
    pub took: Duration,
    pub outcome: Outcome,
}

/// What the client saw.
#[derive(Default)]
pub struct Ledger {
    pub sent: HashSet<String>,
    pub acked: HashSet<String>,
    /// Events never acknowledged within `GIVE_UP_AFTER`.
    pub gave_up: u64,
    /// Answers that are neither 200 nor retryable (4xx but 429): a bug.
    pub unexpected: Vec<u16>,
    pub attempts: Vec<Attempt>,
}

/// Figures of the attempts made in a window of time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    pub attempts: u64,
    pub not_200: u64,
    pub longest_wait: Duration,
}

impl Window {
    pub fn share_not_200(&self) -> f64 {
        if self.attempts == 0 {
            0.0
        } else {
            self.not_200 as f64 / self.attempts as f64
        }
    }
}

/// The load generator (see the module's documentation).
pub struct Load {
    http: reqwest::Client,
    ingests: Vec<String>,
    pub site: u32,
    key: String,
    pub started: Instant,
    /// The longest an attempt may take before the client gives up on it: above ingest's
    /// deadline, so that an ingest that keeps a client waiting too long is seen.
    pub attempt_timeout: Duration,
    ledger: Mutex<Ledger>,
    next: AtomicU64,
    /// The `pathname` of the events sent now: the phase of the run.
    tag: Mutex<String>,
    partitions: u32,
}

/// Pauses between attempts of one event: 100 ms, doubling to 1 s.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// How long one event is retried before the client gives up on it.
const GIVE_UP_AFTER: Duration = Duration::from_secs(180);

impl Load {
    pub fn new(ingests: Vec<String>, site: u32, key: String, partitions: u32) -> Arc<Load> {
        Arc::new(Load {
            // No proxy, whatever the environment says: every address is the stack's.
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            ingests,
            site,
            key,
            started: Instant::now(),
            attempt_timeout: Duration::from_secs(20),
            ledger: Mutex::new(Ledger::default()),
            next: AtomicU64::new(0),
            tag: Mutex::new("/start".into()),
            partitions,
        })
    }

    pub fn set_tag(&self, tag: &str) {
        *self.tag.lock().unwrap() = tag.to_string();
    }

    /// Time since the load began.
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// POSTs one event until an ingest answers 200 (alternating ingests, pausing between
    /// attempts), recording each attempt; whether it was acknowledged.
    async fn send(&self, event_id: &str, body: &serde_json::Value, record: bool) -> bool {
        self.send_or_why(event_id, body, record).await.is_ok()
    }

    /// [`Self::send`], and when the event is not acknowledged, why: the attempts made and
    /// the last answer of each ingest, so that a failure names what the services said.
    async fn send_or_why(
        &self,
        event_id: &str,
        body: &serde_json::Value,
        record: bool,
    ) -> Result<(), String> {
        let started = Instant::now();
        let first = self.next.fetch_add(1, Ordering::Relaxed) as usize;
        let give_up = Instant::now() + GIVE_UP_AFTER;
        let mut pause = FIRST_PAUSE;
        let mut last: Vec<Option<Outcome>> = vec![None; self.ingests.len()];
        let mut tries = 0;
        for i in 0.. {
            let slot = (first + i) % self.ingests.len();
            let url = &self.ingests[slot];
            let at = self.now();
            let t = Instant::now();
            let r = self
                .http
                .post(format!("{url}/api/track"))
                .timeout(self.attempt_timeout)
                .json(body)
                .send()
                .await;
            let outcome = match r {
                Ok(r) => match r.status().as_u16() {
                    200 => Outcome::Ok,
                    s => Outcome::Status(s),
                },
                Err(e) if e.is_timeout() => Outcome::TimedOut,
                Err(_) => Outcome::Failed,
            };
            let took = t.elapsed();
            tries += 1;
            last[slot] = Some(outcome);
            {
                let mut l = self.ledger.lock().unwrap();
                if record {
                    l.attempts.push(Attempt { at, took, outcome });
                }
                match outcome {
                    Outcome::Ok => {
                        l.acked.insert(event_id.to_string());
                        return Ok(());
                    }
                    Outcome::Status(s) if s != 429 && s < 500 => {
                        l.unexpected.push(s);
                        return Err(format!("answered {s} by {url}, which is not retried"));
                    }
                    _ => {}
                }
            }
            if Instant::now() + pause > give_up {
                break;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
        self.ledger.lock().unwrap().gave_up += 1;
        let answers = self
            .ingests
            .iter()
            .zip(&last)
            .map(|(u, o)| format!("{u}: {o:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        Err(format!(
            "not acknowledged after {tries} attempts in {:.1?}; the last answers: {answers}",
            started.elapsed()
        ))
    }

    fn body(&self, event_id: &str, user_id: Option<&str>) -> serde_json::Value {
        let ts = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        let n = self.next.load(Ordering::Relaxed);
        let mut body = json!({"api_key": self.key, "site_id": self.site, "event_id": event_id,
            "timestamp": ts, "pathname": *self.tag.lock().unwrap(),
            "ip_address": format!("81.2.69.{}", n % 250),
            "user_agent": "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"});
        if let Some(u) = user_id {
            body["user_id"] = json!(u);
        }
        body
    }

    /// Sends a new event (recorded in the ledger); whether it was acknowledged.
    pub async fn send_new(self: Arc<Self>) -> bool {
        let id = uuid::Uuid::new_v4().to_string();
        self.ledger.lock().unwrap().sent.insert(id.clone());
        let body = self.body(&id, None);
        self.send(&id, &body, true).await
    }

    /// The steady stream: a new event every 1/`rate` s, each retried on its own, until
    /// `stop`; the task ends when every event sent has been answered or given up on.
    pub fn stream(
        self: &Arc<Self>,
        rate: u64,
        stop: Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        let load = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut inflight = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                inflight.push(tokio::spawn(load.clone().send_new()));
                inflight.retain(|t: &tokio::task::JoinHandle<bool>| !t.is_finished());
            }
            futures::future::join_all(inflight).await;
        })
    }

    /// Sends one event per partition of `events.raw` (a user id whose message key the
    /// partitioner puts there) until each is acknowledged, then waits until all are in
    /// ClickHouse, up to `within`: the time it took. Each partition's consumer has then
    /// stored everything acknowledged before its probe. Probes are not counted as
    /// attempts of the stream.
    pub async fn probe_partitions(self: &Arc<Self>, within: Duration) -> Result<Duration, String> {
        let started = Instant::now();
        let mut ids = Vec::new();
        let mut sends = Vec::new();
        for p in 0..self.partitions {
            let user = (0..)
                .map(|i| format!("probe-{}-{i}", uuid::Uuid::new_v4().simple()))
                .find(|u| crc32(format!("{}:u:{u}", self.site).as_bytes()) % self.partitions == p)
                .unwrap();
            let id = uuid::Uuid::new_v4().to_string();
            self.ledger.lock().unwrap().sent.insert(id.clone());
            let body = self.body(&id, Some(&user));
            let load = self.clone();
            let event = id.clone();
            sends.push(tokio::spawn(async move {
                load.send_or_why(&event, &body, false).await
            }));
            ids.push(id);
        }
        let failed: Vec<String> = futures::future::join_all(sends)
            .await
            .into_iter()
            .enumerate()
            .filter_map(|(p, s)| s.unwrap().err().map(|why| format!("partition {p}: {why}")))
            .collect();
        if !failed.is_empty() {
            return Err(format!(
                "{} of {} probes never acknowledged: {}",
                failed.len(),
                self.partitions,
                failed.join("; ")
            ));
        }
        let acked_after = started.elapsed();
        let list = ids
            .iter()
            .map(|id| format!("'{id}'"))
            .collect::<Vec<_>>()
            .join(",");
        let sql = format!(
            "SELECT uniqExact(event_id) FROM events WHERE site_id = {} AND event_id IN ({list})",
            self.site
        );
        let left = within.saturating_sub(started.elapsed());
        let n = crate::wait_count(&sql, ids.len() as u64, left).await;
        if n < ids.len() as u64 {
            return Err(format!(
                "{n} of {} probes in ClickHouse after {within:?} (all acknowledged after {acked_after:.1?})",
                ids.len()
            ));
        }
        eprintln!(
            "probes acknowledged after {acked_after:.1?}, in ClickHouse after {:.1?}",
            started.elapsed()
        );
        Ok(started.elapsed())
    }

    /// Sends one event of `user` until it is acknowledged (recorded as sent and
    /// acknowledged, not as attempts of the stream); whether it was.
    pub async fn send_as(self: &Arc<Self>, user: &str) -> bool {
        let id = uuid::Uuid::new_v4().to_string();
        self.ledger.lock().unwrap().sent.insert(id.clone());
        let body = self.body(&id, Some(user));
        self.send(&id, &body, false).await
    }

    /// Figures of the stream's attempts that started in `[from, to)` (times since the load
    /// began).
    pub fn window(&self, from: Duration, to: Duration) -> Window {
        let l = self.ledger.lock().unwrap();
        let mut w = Window::default();
        for a in l.attempts.iter().filter(|a| a.at >= from && a.at < to) {
            w.attempts += 1;
            if a.outcome != Outcome::Ok {
                w.not_200 += 1;
            }
            w.longest_wait = w.longest_wait.max(a.took);
        }
        w
    }

    /// The ledger, as it is now.
    pub fn ledger<T>(&self, read: impl FnOnce(&Ledger) -> T) -> T {
        read(&self.ledger.lock().unwrap())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn crc32_is_the_ieee_checksum() {
        assert_eq!(super::crc32(b""), 0);
        assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(
            super::crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414F_A339
        );
    }
}
