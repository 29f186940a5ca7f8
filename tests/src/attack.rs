//! The attacks on Rivulet's public edge, as measurements: each reproduces one way an
//! attacker on the internet could hurt a replica (docs/security.md) against the real
//! binaries on loopback, bounded in time and in connections, and returns what it saw.
//! `tests/tests/attack.rs` asserts the goals on them; the `attack` tool (`scripts/attack`)
//! prints them for RELIABILITY.md, also for an older build (`RIVULET_BIN_DIR`).

use crate::{env, http, Pace, Service};
use flate2::write::GzEncoder;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The peak resident memory of a process so far (`VmHWM`), in KiB.
pub fn peak_rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmHWM:")
}

/// The resident memory of a process now (`VmRSS`), in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmRSS:")
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("the process runs")
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// A well-formed API key that no registry holds.
pub fn random_key() -> String {
    format!("rb_{}", uuid::Uuid::new_v4().simple())
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// The largest body a batch may have once inflated (`MAX_BATCH_BYTES`' default).
pub const BATCH_LIMIT: usize = 1 << 20;

/// Batch bodies of the shapes that cost a parser the most per byte, each just under
/// [`BATCH_LIMIT`] inflated, gzipped; none carries a key.
pub fn worst_case_batches() -> Vec<(&'static str, Vec<u8>)> {
    let fill = |head: &str, item: &str, sep: &str, tail: &str| {
        let n = (BATCH_LIMIT - head.len() - tail.len()) / (item.len() + sep.len());
        let mut body = String::with_capacity(BATCH_LIMIT);
        body.push_str(head);
        body.push_str(&vec![item; n].join(sep));
        body.push_str(tail);
        body.into_bytes()
    };
    let shapes = vec![
        (
            "an array of zeros",
            fill(r#"{"site_id":1,"events":["#, "0", ",", "]}"),
        ),
        (
            "an array of empty objects",
            fill(r#"{"site_id":1,"events":["#, "{}", ",", "]}"),
        ),
        (
            "objects of many unknown fields",
            fill(r#"{"site_id":1,"events":[{"#, r#""f":[0]"#, ",", "}]}"),
        ),
        (
            "one string of escapes",
            fill(
                r#"{"site_id":1,"events":[{"pathname":""#,
                r"\u00e9",
                "",
                r#""}]}"#,
            ),
        ),
        ("500 events at their field limits", {
            let ev = format!(
                r#"{{"pathname":"/{}","page_title":"{}","properties":"{{\"k\":\"{}\"}}"}}"#,
                "p".repeat(1000),
                "t".repeat(500),
                "v".repeat(400)
            );
            format!(r#"{{"site_id":1,"events":[{}]}}"#, vec![ev; 500].join(",")).into_bytes()
        }),
    ];
    shapes
        .into_iter()
        .map(|(name, body)| {
            assert!(body.len() <= BATCH_LIMIT, "{name}: {} bytes", body.len());
            (name, gzip(&body))
        })
        .collect()
}

#[derive(Debug, Serialize)]
pub struct ShapeCost {
    pub shape: &'static str,
    pub gzipped_bytes: usize,
    /// Peak resident memory after this shape, over the peak before the attack.
    pub peak_growth_mib: f64,
    /// The slowest answer to one of the concurrent bodies.
    pub slowest_ms: f64,
    pub statuses: BTreeMap<u16, usize>,
}

#[derive(Debug, Serialize)]
pub struct MemoryFigures {
    pub concurrent: usize,
    pub peak_before_mib: f64,
    pub peak_after_mib: f64,
    pub shapes: Vec<ShapeCost>,
    /// A normal event's slowest answer while the bodies were sent.
    pub normal_slowest_ms: f64,
}

/// Finding 1: sends each worst-case shape `concurrent` times at once, a few rounds, to
/// `POST /api/track/batch` with no key, while a normal client keeps sending; the peak
/// resident memory of ingest before and after each shape.
pub async fn batch_memory(
    ingest: &Service,
    normal: &serde_json::Value,
    concurrent: usize,
) -> MemoryFigures {
    let url = format!("{}/api/track/batch", ingest.url);
    let client = http();
    // Warm: the allocator's and the runtime's first growth is not the attack's.
    for _ in 0..20 {
        let _ = client
            .post(format!("{}/api/track", ingest.url))
            .json(normal)
            .send()
            .await;
    }
    let before = peak_rss_kib(ingest.pid());
    let stop = Arc::new(AtomicBool::new(false));
    let normal_worst = Arc::new(AtomicU64::new(0));
    let prober = tokio::spawn(normal_client(
        format!("{}/api/track", ingest.url),
        normal.clone(),
        stop.clone(),
        normal_worst.clone(),
    ));
    let mut shapes = Vec::new();
    for (shape, body) in worst_case_batches() {
        let mut statuses = BTreeMap::new();
        let mut slowest = Duration::ZERO;
        for _round in 0..3 {
            let sends = (0..concurrent).map(|_| {
                let started = Instant::now();
                let req = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("content-encoding", "gzip")
                    .body(body.clone())
                    .send();
                async move {
                    (
                        req.await.map(|r| r.status().as_u16()).unwrap_or(0),
                        started.elapsed(),
                    )
                }
            });
            for (status, took) in futures::future::join_all(sends).await {
                *statuses.entry(status).or_insert(0) += 1;
                slowest = slowest.max(took);
            }
        }
        shapes.push(ShapeCost {
            shape,
            gzipped_bytes: body.len(),
            peak_growth_mib: (peak_rss_kib(ingest.pid()).saturating_sub(before)) as f64 / 1024.0,
            slowest_ms: ms(slowest),
            statuses,
        });
    }
    stop.store(true, Ordering::Relaxed);
    let _ = prober.await;
    MemoryFigures {
        concurrent,
        peak_before_mib: before as f64 / 1024.0,
        peak_after_mib: peak_rss_kib(ingest.pid()) as f64 / 1024.0,
        shapes,
        normal_slowest_ms: normal_worst.load(Ordering::Relaxed) as f64 / 1000.0,
    }
}

/// Sends `body` to `url` on a fresh connection every 100 ms until `stop`, keeping the
/// slowest answer (µs) in `worst`; a request with no answer in 10 s counts as 10 s.
async fn normal_client(
    url: String,
    body: serde_json::Value,
    stop: Arc<AtomicBool>,
    worst: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        let took = timed_fresh_post(&url, &body, Duration::from_secs(10))
            .await
            .1;
        worst.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
        // The scenario: a normal client's pace, one event every 100 ms.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// POSTs on a new client (so a new connection, as a new visitor would): the status (0
/// for none) and the time to the answer.
pub async fn timed_fresh_post(
    url: &str,
    body: &serde_json::Value,
    limit: Duration,
) -> (u16, Duration) {
    let client = reqwest::Client::builder().timeout(limit).build().unwrap();
    let started = Instant::now();
    let status = client
        .post(url)
        .json(body)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0);
    (status, started.elapsed())
}

/// POSTs `body` (JSON) to `path` of `addr` on a connection of its own, by hand: the
/// status (0 for none), the time the TCP connection took to open, and the time to the
/// answer's status line (connecting included). The two apart tell a slow handshake (the
/// kernel's) from a slow admission or answer (the server's).
pub async fn timed_raw_post(
    addr: &str,
    path: &str,
    body: &serde_json::Value,
    limit: Duration,
) -> (u16, Duration, Duration) {
    use tokio::io::AsyncReadExt;
    let started = Instant::now();
    let exchange = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let connected = started.elapsed();
        let body = body.to_string();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all((head + &body).as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 256];
        while !answer.windows(2).any(|w| w == b"\r\n") {
            let n = s.read(&mut buf).await.ok()?;
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
        }
        let status = String::from_utf8_lossy(&answer)
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        Some((status, connected))
    };
    match tokio::time::timeout(limit, exchange).await {
        Ok(Some((status, connected))) => (status, connected, started.elapsed()),
        _ => (0, started.elapsed(), started.elapsed()),
    }
}

#[derive(Debug, Serialize)]
pub struct ConnectionFigures {
    pub max_connections: usize,
    pub seconds: u64,
    /// Connections the attacker opened over the run (each kind re-opens what is closed).
    pub attacker_connections: BTreeMap<&'static str, u64>,
    /// A normal client's requests, on fresh connections, during the attack.
    pub normal_requests: usize,
    pub normal_failed: usize,
    pub normal_slowest_ms: f64,
    /// The longest a normal request's TCP connection took to open (part of the above).
    pub normal_slowest_connect_ms: f64,
}

/// Finding 2: `max_connections` connections from one host — a third pipelining
/// requests and never reading the answers, a third trickling a request head a byte at a
/// time, a third idle — kept open for `seconds` (a closed one is opened again), while a
/// normal client sends an event on a fresh connection every 250 ms.
pub async fn pinned_connections(
    ingest: &Service,
    normal: &serde_json::Value,
    max_connections: usize,
    seconds: u64,
) -> ConnectionFigures {
    let addr = ingest.url.trim_start_matches("http://").to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let kinds: [(&'static str, usize); 3] = [
        ("pipelining without reading", max_connections / 3),
        ("trickling a head", max_connections / 3),
        ("idle", max_connections - 2 * (max_connections / 3)),
    ];
    let mut attackers = Vec::new();
    let opened: BTreeMap<&'static str, Arc<AtomicU64>> = kinds
        .iter()
        .map(|(k, _)| (*k, Arc::new(AtomicU64::new(0))))
        .collect();
    for (kind, n) in kinds {
        for _ in 0..n {
            let (addr, stop, count) = (addr.clone(), stop.clone(), opened[kind].clone());
            attackers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(&addr).await else {
                        // The scenario: an attacker retrying a refused connection.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    count.fetch_add(1, Ordering::Relaxed);
                    hold(kind, &mut s, &addr, &stop).await;
                }
            }));
        }
    }
    // Let the attack fill the slots first: every attacker has connected.
    let total: u64 = kinds.iter().map(|(_, n)| *n as u64).sum();
    Pace::within(Duration::from_secs(10))
        .every(Duration::from_millis(20))
        .poll_until("the attackers did not all connect", || async {
            let n: u64 = opened.values().map(|c| c.load(Ordering::Relaxed)).sum();
            if n >= total {
                Ok(())
            } else {
                Err(format!("{n} of {total}"))
            }
        })
        .await;
    let (mut requests, mut failed) = (0, 0);
    let (mut slowest, mut slowest_connect) = (Duration::ZERO, Duration::ZERO);
    let end = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < end {
        let (status, connect, took) =
            timed_raw_post(&addr, "/api/track", normal, Duration::from_secs(10)).await;
        requests += 1;
        if status != 200 {
            failed += 1;
        }
        slowest = slowest.max(took);
        slowest_connect = slowest_connect.max(connect);
        // The scenario: a normal client's pace, one event every 250 ms.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.abort();
    }
    ConnectionFigures {
        max_connections,
        seconds,
        attacker_connections: opened
            .iter()
            .map(|(k, v)| (*k, v.load(Ordering::Relaxed)))
            .collect(),
        normal_requests: requests,
        normal_failed: failed,
        normal_slowest_ms: ms(slowest),
        normal_slowest_connect_ms: ms(slowest_connect),
    }
}

/// Keeps one attacking connection in its kind of stall until the server closes it. A
/// pipelining connection never reads: it learns of the close when a write fails.
async fn hold(kind: &str, s: &mut TcpStream, addr: &str, stop: &AtomicBool) {
    let head = format!("GET /_liveness HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    match kind {
        "pipelining without reading" => {
            let burst = head.repeat(200);
            while !stop.load(Ordering::Relaxed) {
                match tokio::time::timeout(
                    Duration::from_millis(500),
                    s.write_all(burst.as_bytes()),
                )
                .await
                {
                    Ok(Ok(())) | Err(_) => {}
                    Ok(Err(_)) => return,
                }
            }
        }
        "trickling a head" => {
            for b in head.as_bytes().iter().cycle() {
                if stop.load(Ordering::Relaxed)
                    || s.write_all(&[*b]).await.is_err()
                    || closed(s).await
                {
                    return;
                }
                // The scenario: a head trickled a byte every 500 ms.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        _ => {
            while !stop.load(Ordering::Relaxed) && !closed(s).await {
                // The scenario: holding a connection open, looking every 200 ms.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Whether the server closed a connection that has nothing to read.
async fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_millis(1), s.peek(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[derive(Debug, Serialize)]
pub struct LoginFigures {
    pub guesses: usize,
    /// Wrong guesses answered 401 (compared) and 429 (refused before comparing).
    pub compared: usize,
    pub refused_before_comparing: usize,
    pub burst_ms: f64,
    /// The owner's login from another address while the guessing goes on.
    pub owner_status: u16,
    pub owner_ms: f64,
}

/// A client bound to a source address (loopback has all of 127/8: another address is
/// another client, as far as a per-address limit can tell).
pub fn client_from(source: IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(source)
        .timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Finding 3: `guesses` wrong admin tokens at once from 127.0.0.1, then, while 50
/// connections keep guessing, the owner's login with the right token from 127.0.0.2.
pub async fn login_guessing(admin: &Service, token: &str, guesses: usize) -> LoginFigures {
    let attacker = client_from("127.0.0.1".parse().unwrap());
    let api = format!("{}/api/sites", admin.url);
    let started = Instant::now();
    let burst = (0..guesses).map(|i| {
        attacker
            .get(&api)
            .bearer_auth(format!("wrong-{i:032}"))
            .send()
    });
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for r in futures::future::join_all(burst).await {
        *statuses
            .entry(r.map(|r| r.status().as_u16()).unwrap_or(0))
            .or_insert(0) += 1;
    }
    let burst_ms = ms(started.elapsed());
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let guessers: Vec<_> = (0..50)
        .map(|i| {
            let (attacker, api, stop) = (attacker.clone(), api.clone(), stop.clone());
            let answered = answered.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let _ = attacker
                        .get(&api)
                        .bearer_auth(format!("guess-{i:032}"))
                        .send()
                        .await;
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // The owner logs in while the guessing is under way: once the guessers have had as
    // many answers as there are of them.
    Pace::within(Duration::from_secs(10))
        .every(Duration::from_millis(10))
        .poll_until("the guessers got no answers", || async {
            match answered.load(Ordering::Relaxed) {
                n if n >= 50 => Ok(()),
                n => Err(n),
            }
        })
        .await;
    let owner = client_from("127.0.0.2".parse().unwrap());
    let started = Instant::now();
    let owner_status = owner
        .get(&api)
        .bearer_auth(token)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0);
    let owner_ms = ms(started.elapsed());
    stop.store(true, Ordering::Relaxed);
    for g in guessers {
        g.abort();
    }
    LoginFigures {
        guesses,
        compared: statuses.get(&401).copied().unwrap_or(0),
        refused_before_comparing: statuses.get(&429).copied().unwrap_or(0),
        burst_ms,
        owner_status,
        owner_ms,
    }
}

#[derive(Debug, Serialize)]
pub struct LookupFigures {
    pub requests: usize,
    pub seconds: f64,
    pub statuses: BTreeMap<u16, usize>,
    /// Key lookups that reached the registry, as ingest counts them.
    pub registry_lookups: f64,
    /// Queries ClickHouse received meanwhile (its own counter), less those of the
    /// dashboard's Overviews timed meanwhile.
    pub clickhouse_queries: u64,
    /// The dashboard's Overview of a site, before and during the attack.
    pub dashboard_before_ms: f64,
    pub dashboard_during_ms: f64,
}

/// Queries a second that ClickHouse gets with no attack under way, measured over two
/// seconds: the services the harness keeps running poll it (the enricher's erasure
/// runner, ingest's site directory), and the attack's count is the server's.
async fn background_queries_per_second() -> f64 {
    let before = clickhouse_queries().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    (clickhouse_queries().await - before).saturating_sub(1) as f64 / 2.0
}

/// The number of queries the ClickHouse server has received since it started.
pub async fn clickhouse_queries() -> u64 {
    let db = crate::db().await;
    db.client
        .query("SELECT toUInt64(sum(value)) FROM system.events WHERE event = 'Query'")
        .fetch_one::<u64>()
        .await
        .expect("system.events")
}

/// The slowest of five Overviews of `site` through the admin API.
async fn overview_ms(admin: &Service, token: &str, site: u32) -> f64 {
    let client = http();
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let started = Instant::now();
        let st = client
            .get(format!("{}/api/sites/{site}/overview", admin.url))
            .bearer_auth(token)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        assert_eq!(st, 200, "the overview answers");
        slowest = slowest.max(started.elapsed());
    }
    ms(slowest)
}

/// Finding 4: `n` requests at full speed (64 at a time) with random keys and random site
/// ids — and, when `valid_key` is given, that key with random site ids — while the
/// dashboard's Overview of `site` is timed.
pub async fn negative_lookups(
    ingest: &Service,
    admin: &Service,
    token: &str,
    site: u32,
    valid_key: Option<&str>,
    n: usize,
) -> LookupFigures {
    let background = background_queries_per_second().await;
    let dashboard_before_ms = overview_ms(admin, token, site).await;
    let registry_before = registry_lookups(ingest).await;
    let queries_before = clickhouse_queries().await;
    let url = format!("{}/api/track", ingest.url);
    let client = http();
    let started = Instant::now();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    let sent = Arc::new(AtomicU64::new(0));
    let mut dashboard_during_ms = 0.0;
    // What the Overviews opened during the attack cost ClickHouse, to tell the attack's
    // queries from theirs: counted around them, as their number varies with the data
    // and with the dashboard's cache (the few queries of the attack in those
    // milliseconds are left out too; the registry lookups are counted exactly).
    let mut overview_queries = 0;
    let attack = async {
        let workers = (0..64).map(|_| {
            let (client, url, sent) = (client.clone(), url.clone(), sent.clone());
            let valid_key = valid_key.map(str::to_string);
            async move {
                let mut seen: BTreeMap<u16, usize> = BTreeMap::new();
                while (sent.fetch_add(1, Ordering::Relaxed) as usize) < n {
                    let key = valid_key.clone().unwrap_or_else(random_key);
                    let site_id =
                        1_000_000 + (uuid::Uuid::new_v4().as_u128() % 1_000_000_000) as u64;
                    let body = serde_json::json!({"api_key": key, "site_id": site_id});
                    let st = client
                        .post(&url)
                        .json(&body)
                        .send()
                        .await
                        .map(|r| r.status().as_u16())
                        .unwrap_or(0);
                    *seen.entry(st).or_insert(0) += 1;
                }
                seen
            }
        });
        futures::future::join_all(workers).await
    };
    let during = async {
        // The scenario: the dashboard is opened 200 ms into the attack, while it runs.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let queries_before_overview = clickhouse_queries().await;
        dashboard_during_ms = overview_ms(admin, token, site).await;
        overview_queries = clickhouse_queries().await - queries_before_overview;
    };
    let (per_worker, ()) = tokio::join!(attack, during);
    for seen in per_worker {
        for (st, c) in seen {
            *statuses.entry(st).or_insert(0) += c;
        }
    }
    LookupFigures {
        requests: n,
        seconds: started.elapsed().as_secs_f64(),
        statuses,
        registry_lookups: registry_lookups(ingest).await - registry_before,
        clickhouse_queries: (clickhouse_queries().await - queries_before).saturating_sub(
            overview_queries + 2 + (background * started.elapsed().as_secs_f64()).ceil() as u64,
        ),
        dashboard_before_ms,
        dashboard_during_ms,
    }
}

async fn registry_lookups(ingest: &Service) -> f64 {
    let text = ingest.metrics_text().await;
    text.lines()
        .filter(|l| l.starts_with("ingest_key_cache_total") && l.contains(r#"layer="registry""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[derive(Debug, Serialize)]
pub struct ForgeFigures {
    /// What a never-issued key got after its Redis entry was written by hand, in the old
    /// unsigned form and with a made-up MAC.
    pub unsigned_entry_status: u16,
    pub made_up_mac_status: u16,
    /// Whether Redis refuses a client without the password.
    pub redis_requires_a_password: bool,
}

/// Finding 5: writes cache entries for a key that was never issued, as whoever can
/// write to Redis could, and sends an event with that key.
pub async fn forged_cache_entries(ingest: &Service, site: u32) -> ForgeFigures {
    use sha2::{Digest, Sha256};
    let mut redis = redis::Client::open(env("REDIS_URL"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("Redis with the stack's password");
    let url = format!("{}/api/track", ingest.url);
    let mut try_entry = async |value: String| {
        let key = random_key();
        let entry = format!(
            "rivulet:key:{}",
            hex::encode(Sha256::digest(key.as_bytes()))
        );
        let _: () = redis::cmd("SET")
            .arg(&entry)
            .arg(value)
            .arg("EX")
            .arg(300)
            .query_async(&mut redis)
            .await
            .unwrap();
        http()
            .post(&url)
            .json(&serde_json::json!({"api_key": key, "site_id": site}))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    };
    let unsigned_entry_status = try_entry(format!("k:{site}:key_00112233445566ff")).await;
    let made_up_mac_status =
        try_entry(format!("k:{site}:key_00112233445566ff:{}", "ab".repeat(16))).await;
    let url = env("REDIS_URL");
    let no_password = match url.split_once('@') {
        Some((_, host)) => format!("redis://{host}"),
        None => url,
    };
    let redis_requires_a_password = match redis::Client::open(no_password.as_str()) {
        Ok(c) => match c.get_multiplexed_async_connection().await {
            Ok(mut conn) => redis::cmd("GET")
                .arg("x")
                .query_async::<Option<String>>(&mut conn)
                .await
                .is_err(),
            Err(_) => true,
        },
        Err(_) => true,
    };
    ForgeFigures {
        unsigned_entry_status,
        made_up_mac_status,
        redis_requires_a_password,
    }
}

#[derive(Debug, Serialize)]
pub struct InternalFigures {
    pub public_metrics_status: u16,
    pub public_readiness_status: u16,
    pub internal_metrics_status: u16,
}

/// Finding 6: where `/metrics` and `/_readiness` answer.
pub async fn internal_endpoints(ingest: &Service) -> InternalFigures {
    let status = async |url: String| {
        http()
            .get(url)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    };
    InternalFigures {
        public_metrics_status: status(format!("{}/metrics", ingest.url)).await,
        public_readiness_status: status(format!("{}/_readiness", ingest.url)).await,
        internal_metrics_status: status(format!("{}/metrics", ingest.ops_url)).await,
    }
}

#[derive(Debug, Serialize)]
pub struct BurstFigures {
    pub limit_per_second: u32,
    /// Requests sent in two bursts a few ms apart on either side of a second's boundary.
    pub sent: usize,
    pub accepted: usize,
    pub across_ms: f64,
    /// Events of full batches sent for `batch_seconds` as fast as one client can, and
    /// those accepted, against the events budget.
    pub events_budget_per_second: u32,
    pub batch_seconds: f64,
    pub batch_events_sent: usize,
    pub batch_events_accepted: usize,
}

/// Finding 8: 20 requests of one key just before a second's boundary and 20 just after;
/// then full batches for two seconds against the events budget.
pub async fn double_burst(
    ingest: &Service,
    key: &str,
    site: u32,
    limit: u32,
    events_budget: u32,
) -> BurstFigures {
    let url = format!("{}/api/track", ingest.url);
    let body = serde_json::json!({"api_key": key, "site_id": site});
    let client = http();
    // Connections ready, so the bursts are not slowed by connecting.
    let _ = futures::future::join_all(
        (0..20).map(|_| client.get(format!("{}/_liveness", ingest.url)).send()),
    )
    .await;
    crate::buckets_refilled().await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let to_boundary = Duration::from_millis(1000 - u64::from(now.subsec_millis()));
    // The scenario: the first burst 30 ms before a second's boundary, the next after it.
    tokio::time::sleep(to_boundary.saturating_sub(Duration::from_millis(30))).await;
    let started = Instant::now();
    let first = futures::future::join_all((0..20).map(|_| client.post(&url).json(&body).send()));
    let first = first.await;
    tokio::time::sleep(Duration::from_millis(30).saturating_sub(started.elapsed())).await;
    let second =
        futures::future::join_all((0..20).map(|_| client.post(&url).json(&body).send())).await;
    let across = started.elapsed();
    let accepted = first
        .iter()
        .chain(&second)
        .filter(|r| r.as_ref().is_ok_and(|r| r.status() == 200))
        .count();
    // The events budget: batches of 500 as fast as one client goes.
    let batch = serde_json::json!({"api_key": key, "site_id": site, "events": vec![serde_json::json!({"pathname": "/b"}); 500]});
    let batch_url = format!("{}/api/track/batch", ingest.url);
    crate::buckets_refilled().await;
    let (mut sent, mut ok) = (0usize, 0usize);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        let rounds =
            futures::future::join_all((0..4).map(|_| client.post(&batch_url).json(&batch).send()))
                .await;
        for r in rounds {
            sent += 500;
            if r.is_ok_and(|r| r.status() == 200) {
                ok += 500;
            }
        }
    }
    BurstFigures {
        limit_per_second: limit,
        sent: 40,
        accepted,
        across_ms: ms(across),
        events_budget_per_second: events_budget,
        batch_seconds: started.elapsed().as_secs_f64(),
        batch_events_sent: sent,
        batch_events_accepted: ok,
    }
}

#[derive(Debug, Serialize)]
pub struct NestingFigures {
    /// The status of `properties` nested 32 and 33 deep, and 1,000 deep.
    pub depth_32: u16,
    pub depth_33: u16,
    pub depth_1000: u16,
}

/// Finding 9: `properties` nested ever deeper.
pub async fn properties_nesting(ingest: &Service, key: &str, site: u32) -> NestingFigures {
    let url = format!("{}/api/track", ingest.url);
    let status = async |depth: usize| {
        let props = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let body = serde_json::json!({"api_key": key, "site_id": site, "type": "custom_event", "event_name": "deep", "properties": props});
        http()
            .post(&url)
            .json(&body)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    };
    NestingFigures {
        depth_32: status(32).await,
        depth_33: status(33).await,
        depth_1000: status(1000).await,
    }
}
