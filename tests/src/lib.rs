//! Support for the cross-service integration tests. They run against the real Redis,
//! Kafka and ClickHouse that `scripts/stack up` starts (`scripts/test` does that first),
//! and against the real service binaries, started as processes.
//!
//! Nothing here skips a test when a service is missing: it fails, saying what to start.
//!
//! Every wait goes through `wait::Pace` (bounded polls, and checks that keep holding for
//! a while), HTTP exchanges through `client::Fetch`, reads of Kafka through
//! `kafka`, and a client that retries as the SDK does is a `retry::RetryingClient`.

pub mod admin_cli;
pub mod attack;
pub mod client;
pub mod data;
pub mod kafka;
pub mod lifecycle;
pub mod openapi;
pub mod partitions;
pub mod raw;
pub mod retry;
pub mod scratch;
pub mod stats;
pub mod topics;
pub mod trust;
pub mod wait;

pub use admin_cli::*;
pub use client::*;
pub use kafka::*;
pub use retry::*;
pub use scratch::*;
pub use topics::*;
pub use wait::*;

use rivulet_common::ch::{ChConfig, Db};
use rivulet_common::registry::Registry;
use std::cell::Cell;
use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// How every test that needs the stack fails without it: at once, in one line.
pub const STACK_NOT_RUNNING: &str =
    "the local stack is not running: start it with scripts/stack up (scripts/test does this)";

/// Loads `.stack/env` into this process's environment, once. Without it every test
/// that needs the stack fails at once with [`STACK_NOT_RUNNING`].
pub fn load_stack_env() {
    static ENV: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(missing) = ENV.get_or_init(read_stack_env) {
        panic!("{STACK_NOT_RUNNING} ({missing})");
    }
}

/// A service of the local stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackService {
    Redis,
    ClickHouse,
    Kafka,
}

/// Loads `.stack/env` and checks, once per service, that these services of the stack
/// accept connections: a test that needs one that does not answer fails at once with
/// [`STACK_NOT_RUNNING`] and which one, rather than after its own waits time out.
pub fn require_stack(services: &[StackService]) {
    static ANSWERS: [OnceLock<Result<(), String>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    load_stack_env();
    for s in services {
        if let Err(missing) = ANSWERS[*s as usize].get_or_init(|| answers(*s)) {
            panic!("{STACK_NOT_RUNNING} ({missing})");
        }
    }
}

/// Every service of the stack: what the services a test starts need.
pub const WHOLE_STACK: &[StackService] = &[
    StackService::Redis,
    StackService::ClickHouse,
    StackService::Kafka,
];

fn read_stack_env() -> Result<(), String> {
    let dir = std::env::var("RIVULET_STACK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join(".stack"));
    let path = dir.join("env");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        if let Some((k, v)) = line.split_once('=') {
            std::env::set_var(k.trim(), v.trim());
        }
    }
    Ok(())
}

/// Whether every node of `service` in `.stack/env` accepts a TCP connection within a
/// second.
fn answers(service: StackService) -> Result<(), String> {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let addrs: Vec<String> = match service {
        StackService::Redis => vec![host_port(&var("REDIS_URL"))],
        StackService::ClickHouse => match var("CLICKHOUSE_NODES") {
            n if n.is_empty() => vec![host_port(&var("CLICKHOUSE_URL"))],
            n => n.split(',').map(host_port).collect(),
        },
        StackService::Kafka => var("KAFKA_BROKERS")
            .split(',')
            .map(|b| b.trim().to_string())
            .collect(),
    };
    for addr in addrs {
        let up = std::net::ToSocketAddrs::to_socket_addrs(addr.as_str())
            .ok()
            .and_then(|mut a| a.next())
            .is_some_and(|a| {
                std::net::TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok()
            });
        if !up {
            return Err(format!("{service:?} at {addr:?} does not answer"));
        }
    }
    Ok(())
}

/// `host:port` of a URL (`redis://:secret@127.0.0.1:16379/` → `127.0.0.1:16379`).
fn host_port(url: &str) -> String {
    let rest = url.trim().split_once("://").map_or(url.trim(), |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, hp)| hp)
        .to_string()
}

pub fn env(name: &str) -> String {
    load_stack_env();
    std::env::var(name).unwrap_or_default()
}

/// A connected ClickHouse with the schema migrated (migrations run once per test binary).
/// A new client each call: tests run on separate tokio runtimes, and a client's
/// connection pool does not outlive the runtime that made it.
pub async fn db() -> Db {
    static MIGRATED: OnceCell<()> = OnceCell::const_new();
    require_stack(&[StackService::ClickHouse]);
    let db = ChConfig::from_env()
        .unwrap()
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{STACK_NOT_RUNNING} (ClickHouse: {e})"));
    MIGRATED
        .get_or_init(|| async {
            rivulet_common::schema::migrations::migrate(&db)
                .await
                .expect("migrations");
        })
        .await;
    db
}

pub async fn registry() -> Registry {
    Registry::new(db().await)
}

/// A fresh site and an API key for it: `(site_id, api_key)`.
pub async fn site_with_key() -> (u32, String) {
    require_stack(&[StackService::Redis, StackService::ClickHouse]);
    let reg = registry().await;
    let mut redis = redis::Client::open(env("REDIS_URL"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let site = reg
        .create_site(
            &mut redis,
            &format!("t{}.example.com", uuid::Uuid::new_v4().simple()),
            None,
        )
        .await
        .unwrap();
    let (key, _) = reg.create_key::<&str>(site.site_id, &[]).await.unwrap();
    (site.site_id, key.reveal().to_string())
}

/// Path of a workspace binary built by `cargo build` (scripts/test builds them first),
/// or of one in `RIVULET_BIN_DIR` (the attack tool measures other builds so).
pub fn binary(name: &str) -> PathBuf {
    let dir = match std::env::var_os("RIVULET_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        // target/<profile>/deps/<test> → target/<profile>/<name>
        None => {
            let exe = std::env::current_exe().unwrap();
            let deps = exe.parent().unwrap();
            // A tool of src/bin runs from target/<profile> itself.
            if deps.ends_with("deps") {
                deps.parent().unwrap().to_path_buf()
            } else {
                deps.to_path_buf()
            }
        }
    };
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (scripts/test does)",
        path.display()
    );
    path
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running service process, killed when dropped. Its stdout/stderr go to a log file
/// under `.stack/logs/tests/` so that tests can read them (e.g. to check no key is logged).
pub struct Service {
    pub child: Child,
    pub url: String,
    /// Where its readiness and metrics are served: ingest's internal address
    /// (`INGEST_INTERNAL_ADDR`), the same as `url` for the others.
    pub ops_url: String,
    pub log: PathBuf,
}

impl Service {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    /// The value of one series in the service's `/metrics`: a metric's name, with its
    /// labels as the exporter writes them if it has any (`name{label="value"}`).
    pub async fn metric(&self, name: &str) -> f64 {
        self.metrics_text()
            .await
            .lines()
            .find_map(|l| {
                l.strip_prefix(name)
                    .filter(|v| v.starts_with(' '))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or_else(|| panic!("{name} not in {}/metrics", self.url))
    }
    /// The service's `/metrics`, as text.
    pub async fn metrics_text(&self) -> String {
        http()
            .get(format!("{}/metrics", self.ops_url))
            .fetch_text()
            .await
    }
    /// Its `/_readiness` URL.
    pub fn readiness_url(&self) -> String {
        format!("{}/_readiness", self.ops_url)
    }
    /// Sends SIGTERM and returns at once.
    pub fn sigterm(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }
    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
    /// SIGTERM, then wait for exit; returns whether it exited cleanly in time.
    pub fn terminate(&mut self, within: Duration) -> bool {
        self.sigterm();
        self.wait_exit(within)
            .is_some_and(|status| status.success())
    }
    /// Waits up to `within` for the process to exit; its exit status if it did.
    fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        Pace::within(within)
            .every(Duration::from_millis(50))
            .poll_blocking(|| match self.child.try_wait() {
                Ok(Some(status)) => Ok(status),
                _ => Err(()),
            })
            .ok()
    }
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Service {
    /// Closing stdin (the lifeline) asks for a graceful shutdown, so a consumer leaves
    /// its group at once instead of holding partitions until its session times out.
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        if self.wait_exit(Duration::from_secs(15)).is_none() {
            self.kill9();
        }
    }
}

fn log_file(name: &str) -> PathBuf {
    let dir = PathBuf::from(env("RIVULET_STACK_DIR")).join("logs/tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}-{}.log", uuid::Uuid::new_v4().simple()))
}

/// The port of a `http://127.0.0.1:PORT` URL.
fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a URL with a port")
}

/// Whether process `pid` holds the socket listening on 127.0.0.1:`port` (Linux's
/// /proc/net/tcp and the process's file descriptors).
fn listens_on(pid: u32, port: u16) -> bool {
    let local = format!("0100007F:{port:04X}");
    let Some(inode) = std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // 0A: LISTEN.
            (f.len() > 9 && f[1] == local && f[3] == "0A").then(|| f[9].to_string())
        })
    else {
        return false;
    };
    let socket = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == &*socket))
    })
}

/// Spawns a service with `spawn` and waits until it holds its ports and answers
/// `ready` (a URL of it). `free_port` cannot reserve a port: another test's process may bind
/// it first, and then a readiness check would be answered by that process. A service
/// that exits because its address is taken is started again on new ports.
async fn start_service(
    spawn: impl Fn() -> Service,
    ready: impl Fn(&Service) -> String,
    within: Duration,
) -> Service {
    for _ in 0..5 {
        let mut svc = spawn();
        let deadline = Instant::now() + within;
        let ports = [port_of(&svc.url), port_of(&svc.ops_url)];
        loop {
            if !svc.running() {
                break;
            }
            if ports.iter().all(|p| listens_on(svc.pid(), *p)) {
                wait_for(&ready(&svc), "", within).await;
                return svc;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not listen within {within:?}: {}",
                svc.url,
                svc.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let logs = svc.logs();
        assert!(
            logs.contains("Address already in use"),
            "the service at {} exited at startup: {logs}",
            svc.url
        );
        eprintln!("a port was taken before the service bound it; starting it again");
    }
    panic!("five starts in a row found their ports taken")
}

/// Starts `rivulet-ingest` on a free port with the stack's environment plus `extra`,
/// and waits until it answers /_readiness.
pub async fn start_ingest(extra: &[(&str, &str)]) -> Service {
    start_service(
        || spawn_ingest(extra),
        Service::readiness_url,
        Duration::from_secs(30),
    )
    .await
}

/// Starts `rivulet-ingest` as `start_ingest` does, but waits only until it answers
/// /_liveness: for tests of what it does before it is ready.
pub async fn start_ingest_live(extra: &[(&str, &str)]) -> Service {
    start_service(
        || spawn_ingest(extra),
        |svc| format!("{}/_liveness", svc.url),
        Duration::from_secs(30),
    )
    .await
}

/// Starts `rivulet-ingest` with only the stack's environment and `extra`: its own
/// defaults, the rate limit of 20 among them (the other helpers turn it off).
pub async fn start_ingest_with_its_defaults(extra: &[(&str, &str)]) -> Service {
    start_service(
        || spawn_service("rivulet-ingest", &[], "INGEST_ADDR", &[], extra),
        Service::readiness_url,
        Duration::from_secs(30),
    )
    .await
}

/// Ingest with the limits a self-hosted install runs with: none per key. Rejections per
/// address are still counted (their own tests lower the limit).
fn spawn_ingest(extra: &[(&str, &str)]) -> Service {
    let defaults = [
        ("RATE_LIMIT_PER_SECOND", "0"),
        ("EVENT_RATE_LIMIT_PER_SECOND", "0"),
        ("AUTH_FAILURE_BURST", "0"),
    ];
    spawn_service("rivulet-ingest", &[], "INGEST_ADDR", &defaults, extra)
}

/// Starts a service binary with `args` on a free port (given in `addr_var`) with the
/// stack's environment, `defaults`, then `extra`; output goes to a log file under
/// `.stack/logs/tests/`; stdin is its lifeline.
fn spawn_service(
    name: &str,
    args: &[&str],
    addr_var: &str,
    defaults: &[(&str, &str)],
    extra: &[(&str, &str)],
) -> Service {
    require_stack(WHOLE_STACK);
    let port = free_port();
    // Ingest serves readiness and metrics on an address of their own (unless the binary
    // under test predates it: RIVULET_LEGACY_OPS, for the attack tool's "before").
    let legacy = std::env::var_os("RIVULET_LEGACY_OPS").is_some();
    let internal = (name == "rivulet-ingest" && !legacy).then(free_port);
    let log = log_file(name.trim_start_matches("rivulet-"));
    let out = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(binary(name));
    cmd.args(args)
        .env(addr_var, format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "info")
        .env("RIVULET_STDIN_LIFELINE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out));
    if let Some(internal) = internal {
        cmd.env("INGEST_INTERNAL_ADDR", format!("127.0.0.1:{internal}"));
    }
    for (k, v) in defaults.iter().chain(extra) {
        cmd.env(k, v);
    }
    Service {
        child: cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}")),
        url: format!("http://127.0.0.1:{port}"),
        ops_url: format!("http://127.0.0.1:{}", internal.unwrap_or(port)),
        log,
    }
}

/// Runs `scripts/stack <args>` (to stop or start a service in fault tests).
pub fn stack(args: &[&str]) {
    let status = Command::new(repo_root().join("scripts/stack"))
        .args(args)
        .status()
        .expect("scripts/stack");
    assert!(status.success(), "scripts/stack {args:?} failed");
}

/// MaxMind's test database (`testdata/geo`).
pub fn geo_test_db() -> PathBuf {
    let p = repo_root().join("testdata/geo/GeoLite2-City-Test.mmdb");
    assert!(p.exists(), "{} is missing", p.display());
    p
}

/// Starts `rivulet-enricher` with the stack's environment, the MaxMind test database, and
/// `extra`; waits until it is ready.
pub async fn start_enricher(extra: &[(&str, &str)]) -> Service {
    let geo = geo_test_db();
    let defaults = [
        ("GEOIP_DB", geo.to_str().unwrap()),
        ("BATCH_MAX_AGE_MS", "200"),
    ];
    start_service(
        || spawn_service("rivulet-enricher", &[], "ENRICHER_ADDR", &defaults, extra),
        Service::readiness_url,
        Duration::from_secs(60),
    )
    .await
}

/// Waits until the enricher holds partitions and the group has been stable for a second.
pub async fn wait_assigned(enricher: &Service) {
    let stable_since: Cell<Option<(u64, Instant)>> = Cell::new(None);
    Pace::within(Duration::from_secs(60))
        .every(Duration::from_millis(100))
        .poll_until(
            "the enricher got no partitions, stable for 1 s,",
            || async {
                let body: serde_json::Value = http()
                    .get(format!("{}/_readiness", enricher.url))
                    .fetch_json()
                    .await;
                let n = body["assigned_partitions"].as_u64().unwrap_or(0);
                match stable_since.get() {
                    Some((m, t)) if m == n && n > 0 && t.elapsed() >= Duration::from_secs(1) => {
                        return Ok(())
                    }
                    Some((m, _)) if m == n => {}
                    _ => stable_since.set(Some((n, Instant::now()))),
                }
                Err(format!("{n} partitions"))
            },
        )
        .await
}

/// Polls ClickHouse every 250 ms until `sql` (returning one UInt64) reaches `want`, or
/// `within` passes; returns the last value read.
pub async fn wait_count(sql: &str, want: u64, within: Duration) -> u64 {
    let db = db().await;
    let last = Cell::new(0);
    let reached = Pace::within(within)
        .every(Duration::from_millis(250))
        .poll(|| async {
            if let Ok(n) = db.client.query(sql).fetch_one::<u64>().await {
                last.set(n);
                if n >= want {
                    return Ok(n);
                }
            }
            Err(())
        })
        .await;
    reached.unwrap_or(last.get())
}

/// What ClickHouse holds for a site: its distinct event ids, its rows after dedup
/// (`FINAL`), and all its rows (redeliveries and client retries not merged yet).
pub struct StoredEvents {
    pub ids: HashSet<String>,
    pub rows_after_dedup: u64,
    pub rows: u64,
}

pub async fn stored_events(site: u32) -> StoredEvents {
    let db = db().await;
    let query = |sql: &str| db.client.query(sql);
    let ids = query("SELECT DISTINCT toString(event_id) FROM events WHERE site_id = ?")
        .bind(site)
        .fetch_all::<String>();
    let rows_after_dedup = query("SELECT count() FROM events FINAL WHERE site_id = ?")
        .bind(site)
        .fetch_one::<u64>();
    let rows = query("SELECT count() FROM events WHERE site_id = ?")
        .bind(site)
        .fetch_one::<u64>();
    StoredEvents {
        ids: ids.await.unwrap().into_iter().collect(),
        rows_after_dedup: rows_after_dedup.await.unwrap(),
        rows: rows.await.unwrap(),
    }
}

/// The command line of one of the tools in `src/bin` (its name first), failing with
/// `usage: {usage}` unless the number of arguments after the name is in `count`.
pub fn tool_args(usage: &str, count: impl std::ops::RangeBounds<usize>) -> Vec<String> {
    let args: Vec<String> = std::env::args().collect();
    assert!(count.contains(&(args.len() - 1)), "usage: {usage}");
    args
}

/// Milliseconds since the UNIX epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Starts `rivulet-admin serve` (the dashboard) on a free port with the stack's
/// environment and `ADMIN_TOKEN=token`, and waits until it is ready.
pub async fn start_admin(token: &str, extra: &[(&str, &str)]) -> Service {
    let defaults = [("ADMIN_TOKEN", token)];
    start_service(
        || spawn_service("rivulet-admin", &["serve"], "ADMIN_ADDR", &defaults, extra),
        Service::readiness_url,
        Duration::from_secs(30),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::host_port;

    #[test]
    fn a_listening_socket_is_found_on_its_process_only() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(super::listens_on(std::process::id(), port));
        assert!(!super::listens_on(1, port), "not another process's");
        drop(listener);
        assert!(!super::listens_on(std::process::id(), port));
        assert_eq!(super::port_of(&format!("http://127.0.0.1:{port}")), port);
    }

    #[test]
    fn host_and_port_of_the_stacks_urls() {
        assert_eq!(
            host_port("redis://:0123abcd@127.0.0.1:16379/"),
            "127.0.0.1:16379"
        );
        assert_eq!(host_port("http://127.0.0.1:18123"), "127.0.0.1:18123");
        assert_eq!(host_port(" http://127.0.0.1:17121/ "), "127.0.0.1:17121");
    }
}
