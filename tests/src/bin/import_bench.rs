//! Import throughput, end to end: from the start of `rivulet-admin import` to the last of
//! EVENTS (default 1,000,000) rows being queryable in ClickHouse, through the real
//! historical lane (Kafka topic → the enricher's import lane → ClickHouse).
//!
//!   import_bench OUT.json [EVENTS] [WORK_DIR]
//!
//! - The data: EVENTS lines of Rivulet's NDJSON export (contracts §3, every field
//!   present, ~900 bytes a line), as `rivulet-admin export` writes them: a month of
//!   pageviews and custom events with their enriched columns (the import's presets), no
//!   user agent and no IP (an export has neither), so the enricher derives nothing again.
//!   Written to WORK_DIR (default: the temporary directory; /dev/shm keeps it off the
//!   disk) before the clock starts, and deleted at the end.
//! - The services: the `rivulet-admin` and `rivulet-enricher` of this build (build them
//!   with the tool, `--release`), the stack's Kafka and ClickHouse. A database of its own
//!   (`rivulet_bench_import`, dropped at the end), a fresh 6-partition import topic and an
//!   empty live topic (deleted at the end), a consumer group of its own, the enricher's
//!   default batching (`BATCH_MAX_AGE_MS` 1000).
//! - The clock: started when the import process is spawned; stopped when `count()` of
//!   the site's rows, polled every 200 ms, reaches EVENTS. Then every event must be there
//!   once (`uniqExact(event_id)`, `count() FINAL`), or the run fails.
//! - Where the time goes: CPU seconds of the importer, the enricher, ClickHouse and Kafka
//!   over the run (`/proc/PID/stat`), and of the whole machine (`/proc/stat`), so that
//!   what other work on the machine took is visible too.
//!
//! - Two imports: first alone (the throughput), then a second EVENTS with fresh ids, into
//!   a site of their own, while live events flow (reported as `with_live_load`).
//! - Live events: an ingest on the live topic, `loadgen rate` at 2,000 events/s and
//!   `e2e_latency` (a probe every 25 ms at most, from ingest's 200 to the row being
//!   queryable) for LATENCY_SECONDS (`IMPORT_BENCH_LATENCY_SECONDS`, default 10) twice:
//!   before the imports (idle) and from the start of the second import on, on a site of
//!   their own. The goal: the p99 during the import no more than 1.5 times the idle one
//!   (the import has a lane of its own, so that it never delays live events). Both tools
//!   come from `rivulet-bench` in the same target folder (`cargo build --release -p
//!   rivulet-bench`).
//!
//! Prints a line per phase and writes the figures as JSON to OUT.json.

use rivulet_tests::*;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const DB: &str = "rivulet_bench_import";
/// The machine's clock ticks a second, as `/proc` counts CPU time (`getconf CLK_TCK`).
const TICKS: f64 = 100.0;

/// CPU seconds (user + system) a process has used, from `/proc/PID/stat`.
fn cpu_of(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: the fields after it follow its closing ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    Some((f[11].parse::<f64>().ok()? + f[12].parse::<f64>().ok()?) / TICKS)
}

/// CPU seconds every core of the machine spent busy (not idle, not waiting on I/O).
fn machine_busy() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu: Vec<f64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    // user nice system idle iowait irq softirq steal …
    let total: f64 = cpu.iter().take(8).sum();
    (total - cpu[3] - cpu[4]) / TICKS
}

/// The pid a stack service runs as (`$RIVULET_STACK_DIR/run/NAME.pid`).
fn stack_pid(name: &str) -> Option<u32> {
    let dir = PathBuf::from(env("RIVULET_STACK_DIR"));
    std::fs::read_to_string(dir.join("run").join(format!("{name}.pid")))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// CPU seconds of the processes of interest, at one moment.
struct Cpu {
    at: Instant,
    machine: f64,
    by_pid: Vec<(&'static str, u32, f64)>,
}

impl Cpu {
    fn sample(pids: &[(&'static str, u32)]) -> Cpu {
        Cpu {
            at: Instant::now(),
            machine: machine_busy(),
            by_pid: pids
                .iter()
                .map(|(name, pid)| (*name, *pid, cpu_of(*pid).unwrap_or(0.0)))
                .collect(),
        }
    }
}

/// The line of one generated event: a pageview (or, one in ten, a custom event) of a
/// month of October 2025, every field of the export present; its id is `n` then `run`.
fn line(run: &str, n: u64, out: &mut Vec<u8>) {
    const COUNTRIES: [(&str, &str, &str, f64, f64); 4] = [
        ("GB", "GB-ENG", "London", 51.5142, -0.0931),
        ("DE", "DE-BE", "Berlin", 52.5244, 13.4105),
        ("US", "US-CA", "San Francisco", 37.7749, -122.4194),
        ("JP", "JP-13", "Tokyo", 35.6895, 139.6917),
    ];
    const BROWSERS: [(&str, &str, &str, &str, &str); 3] = [
        ("Chrome", "120", "Windows", "10", "Desktop"),
        ("Mobile Safari", "17", "iOS", "17.1", "Mobile"),
        ("Firefox", "121", "Ubuntu", "", "Desktop"),
    ];
    let (country, region, city, lat, lon) = COUNTRIES[(n % 4) as usize];
    let (browser, bv, os, osv, device) = BROWSERS[(n % 3) as usize];
    let ts = 1_759_276_800 + n * 2; // 2025-10-01T00:00:00Z, 2 s apart
    let t = |secs: u64| {
        time::OffsetDateTime::from_unix_timestamp(secs as i64)
            .unwrap()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    let custom = n % 10 == 9;
    let _ = writeln!(
        out,
        "{{\"event_id\":\"{n:08x}-{run}\",\"site_id\":1,\"timestamp\":\"{}\",\"received_at\":\"{}\",\
         \"type\":\"{}\",\"event_name\":\"{}\",\"properties\":\"{}\",\"hostname\":\"shop.example.com\",\
         \"pathname\":\"/products/{}\",\"querystring\":\"?utm_source=newsletter&utm_medium=email\",\
         \"page_title\":\"Product {} – Example Shop\",\"referrer\":\"https://www.google.com/\",\
         \"user_id\":\"{:032x}\",\"anonymous_id\":\"\",\"language\":\"en-GB\",\"screenWidth\":1920,\
         \"screenHeight\":1080,\"tag\":\"\",\"app_version\":\"\",\"device_model\":\"\",\"feature_flags\":\"\",\
         \"lcp\":null,\"cls\":null,\"inp\":null,\"fcp\":null,\"ttfb\":null,\"channel\":\"Email\",\
         \"session_id\":\"{:016x}\",\"country\":\"{country}\",\"region\":\"{region}\",\"city\":\"{city}\",\
         \"lat\":{lat},\"lon\":{lon},\"browser\":\"{browser}\",\"browser_version\":\"{bv}\",\
         \"operating_system\":\"{os}\",\"operating_system_version\":\"{osv}\",\"device_type\":\"{device}\",\
         \"is_bot\":0,\"ip\":\"\"}}",
        t(ts),
        t(ts + 1),
        if custom { "custom_event" } else { "pageview" },
        if custom { "add_to_cart" } else { "" },
        if custom {
            "{\\\"sku\\\":\\\"A-17\\\",\\\"qty\\\":2}"
        } else {
            ""
        },
        n % 500,
        n % 500,
        n % 50_000,
        n / 10,
    );
}

fn generate(path: &Path, n: u64) -> u64 {
    // The run's ids: the event's number, then the last four groups of a random UUID. The
    // number goes first: ClickHouse 18.16's `uniqExact` of a UUID hashes only its first
    // half, so ids that share it take it quadratic time (hours for a million).
    let u = uuid::Uuid::new_v4().simple().to_string();
    let run = format!("{}-{}-{}-{}", &u[8..12], &u[12..16], &u[16..20], &u[20..]);
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let mut buf = Vec::with_capacity(1024);
    for i in 0..n {
        buf.clear();
        line(&run, i, &mut buf);
        out.write_all(&buf).unwrap();
    }
    out.flush().unwrap();
    std::fs::metadata(path).unwrap().len()
}

async fn scalar(sql: &str, site: u32) -> u64 {
    db().await
        .client
        .query(sql)
        .bind(site)
        .fetch_one::<u64>()
        .await
        .unwrap()
}

/// A live load and its latency probe, running: `loadgen rate` at 2,000 events/s and
/// `e2e_latency`, both for `secs` seconds against `ingest_url`.
struct LiveLoad {
    loadgen: std::process::Child,
    probe: std::process::Child,
}

/// The live events' rate (events/s), as the goal states it.
const LIVE_RATE: &str = "2000";
/// A latency probe every 25 ms at most (a probe waits for its 200 and the poll between
/// them: 200 to 400 in 10 s), so that the p99 is a percentile, not the slowest probe.
const PROBE_MS: &str = "25";

fn start_live_load(ingest_url: &str, key: &str, site: u32, secs: u64, body: &Path) -> LiveLoad {
    let loadgen = std::process::Command::new(binary("loadgen"))
        .args(["rate", &format!("{ingest_url}/api/track")])
        .arg(body)
        .args([LIVE_RATE, &secs.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("loadgen (cargo build --release -p rivulet-bench)");
    let probe = std::process::Command::new(binary("e2e_latency"))
        .args([
            ingest_url,
            key,
            &site.to_string(),
            &secs.to_string(),
            PROBE_MS,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("e2e_latency (cargo build --release -p rivulet-bench)");
    LiveLoad { loadgen, probe }
}

/// Waits for both tools; the probe's figures (probes, unseen, p50_ms, p99_ms, max_ms).
fn finish_live_load(load: LiveLoad) -> serde_json::Value {
    let LiveLoad { loadgen, probe } = load;
    let out = probe.wait_with_output().expect("e2e_latency");
    assert!(out.status.success(), "e2e_latency failed: {}", out.status);
    let loadgen = loadgen.wait_with_output().expect("loadgen");
    assert!(
        loadgen.status.success(),
        "loadgen failed ({}): {}",
        loadgen.status,
        String::from_utf8_lossy(&loadgen.stdout)
    );
    let figures: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "e2e_latency's JSON line ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(
        figures["unseen"], 0,
        "every probe must be queryable: {figures}"
    );
    figures
}

/// Where the live events of a run go, and for how long.
struct Live<'a> {
    ingest_url: &'a str,
    key: &'a str,
    site: u32,
    secs: u64,
    body: &'a Path,
}

/// One import's figures, and the live events' latency when they flowed meanwhile.
struct ImportRun {
    figures: serde_json::Value,
    live: Option<serde_json::Value>,
}

/// Generates `n` events with fresh ids (the run's `tag`), imports them into a new site
/// through `import_topic`, and measures until every one is queryable, once. With `live`,
/// live events flow from the start of the import on and their latency is measured.
async fn import_run(
    work: &Path,
    tag: &str,
    n: u64,
    import_topic: &str,
    enricher: &Service,
    live: Option<Live<'_>>,
) -> ImportRun {
    let (site, _) = site_with_key().await;
    let file = work.join(format!("import-bench-{tag}.ndjson"));
    let t = Instant::now();
    let bytes = generate(&file, n);
    let generate_s = t.elapsed().as_secs_f64();
    println!(
        "generated {n} events, {:.0} MB, in {generate_s:.1} s: {}",
        bytes as f64 / 1e6,
        file.display()
    );
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let log = std::fs::File::create(work.join(format!("import-bench-{tag}.log"))).unwrap();
    let summary_path = work.join(format!("import-bench-{tag}.json"));
    let t0 = Instant::now();
    let mut importer = admin_command(
        &[
            "import",
            "--site",
            &site.to_string(),
            "--format",
            "rivulet",
            file.to_str().unwrap(),
        ],
        &[("KAFKA_TOPIC_IMPORT", import_topic)],
    )
    .stdout(Stdio::from(std::fs::File::create(&summary_path).unwrap()))
    .stderr(Stdio::from(log))
    .spawn()
    .expect("rivulet-admin import");
    let during = live.map(|l| start_live_load(l.ingest_url, l.key, l.site, l.secs, l.body));
    let mut pids = vec![("importer", importer.id()), ("enricher", enricher.pid())];
    for (name, svc) in [("clickhouse", "clickhouse"), ("kafka", "kafka")] {
        if let Some(pid) = stack_pid(svc) {
            pids.push((name, pid));
        }
    }
    let before = Cpu::sample(&pids);
    // The importer's CPU time is read just before it is reaped (its /proc entry goes then).
    let mut importer_cpu = None;
    let mut import_done: Option<Duration> = None;
    let mut first_row: Option<Duration> = None;
    let mut rows = 0;
    let deadline = Duration::from_secs(1800);
    while rows < n {
        assert!(
            t0.elapsed() < deadline,
            "only {rows} of {n} rows after {deadline:?}"
        );
        if import_done.is_none() {
            let cpu = cpu_of(importer.id());
            if let Some(status) = importer.try_wait().unwrap() {
                import_done = Some(t0.elapsed());
                importer_cpu = importer_cpu.or(cpu);
                assert!(
                    status.success(),
                    "the import failed ({status}): see the log in {}",
                    work.display()
                );
                println!("importer done after {:.1} s", t0.elapsed().as_secs_f64());
            } else {
                importer_cpu = cpu;
            }
        }
        rows = scalar("SELECT count() FROM events WHERE site_id = ?", site).await;
        if rows > 0 && first_row.is_none() {
            first_row = Some(t0.elapsed());
        }
        print!("\r{rows} rows after {:.1} s   ", t0.elapsed().as_secs_f64());
        let _ = std::io::stdout().flush();
        if rows < n {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let end_to_end = t0.elapsed();
    let after = Cpu::sample(&pids);
    println!();
    let live = during.map(finish_live_load);
    let import_done = match import_done {
        Some(d) => d,
        None => {
            let status = importer.wait().unwrap();
            assert!(status.success(), "the import failed ({status})");
            t0.elapsed()
        }
    };
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary_path).unwrap())
        .expect("the import's summary");
    let unique = scalar(
        "SELECT uniqExact(event_id) FROM events WHERE site_id = ?",
        site,
    )
    .await;
    let once = scalar("SELECT count() FROM events FINAL WHERE site_id = ?", site).await;
    assert_eq!(
        (unique, once),
        (n, n),
        "every event, once (distinct ids, rows after dedup)"
    );
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&summary_path);

    let wall = after.at.duration_since(before.at).as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let mut cpu = serde_json::Map::new();
    for ((name, _, b), (_, _, a)) in before.by_pid.iter().zip(&after.by_pid) {
        let used = if *name == "importer" {
            importer_cpu.unwrap_or(*a) - b
        } else {
            a - b
        };
        cpu.insert((*name).into(), json!((used * 10.0).round() / 10.0));
    }
    let ours: f64 = cpu.values().map(|v| v.as_f64().unwrap()).sum();
    let machine = after.machine - before.machine;
    let eps = n as f64 / end_to_end.as_secs_f64();
    println!(
        "{n} events imported and queryable in {:.1} s: {:.0} events/s end to end (importer: {:.1} s){}",
        end_to_end.as_secs_f64(),
        eps,
        import_done.as_secs_f64(),
        if live.is_some() { ", live events flowing" } else { "" }
    );
    ImportRun {
        figures: json!({
            "events": n,
            "file_bytes": bytes,
            "end_to_end_seconds": (end_to_end.as_secs_f64() * 100.0).round() / 100.0,
            "events_per_second": eps.round(),
            "importer_seconds": (import_done.as_secs_f64() * 100.0).round() / 100.0,
            "importer_events_per_second": summary["events_per_second"],
            "first_row_after_seconds": first_row.map(|d| (d.as_secs_f64() * 100.0).round() / 100.0),
            "cpu_seconds": cpu,
            "machine_busy_cpu_seconds": (machine * 10.0).round() / 10.0,
            "machine_other_cpu_seconds": ((machine - ours) * 10.0).round() / 10.0,
            "machine_cpu_capacity_seconds": (wall * cores * 10.0).round() / 10.0,
            "cores": cores,
            "load_average_before": load_before.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
            "generate_seconds": (generate_s * 10.0).round() / 10.0,
        }),
        live,
    }
}

#[tokio::main]
async fn main() {
    let args = tool_args("import_bench OUT.json [EVENTS] [WORK_DIR]", 1..=3);
    let out_path = PathBuf::from(&args[1]);
    let n: u64 = args
        .get(2)
        .map_or(1_000_000, |s| s.parse().expect("EVENTS"));
    let work = args.get(3).map_or_else(std::env::temp_dir, PathBuf::from);
    load_stack_env();
    // Everything this run writes goes to a database of its own (the children inherit it).
    std::env::set_var("CLICKHOUSE_DB", DB);
    let db = db().await;
    db.client
        .query("TRUNCATE TABLE events")
        .execute()
        .await
        .unwrap();
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let (live, import) = (
        format!("rivulet-bench.live.{run}"),
        format!("rivulet-bench.import.{run}"),
    );
    ensure_topic(&live, 1).await;
    ensure_topic(&import, 6).await;

    let group = format!("rivulet-bench-{run}");
    let enricher = start_enricher(&[
        ("KAFKA_TOPIC_RAW", &live),
        ("KAFKA_TOPIC_IMPORT", &import),
        ("KAFKA_GROUP_ID", &group),
        ("LIFECYCLE_RUNNER", "false"),
        ("BATCH_MAX_AGE_MS", "1000"),
        ("RUST_LOG", "warn"),
    ])
    .await;
    wait_assigned(&enricher).await;

    // Live events on a site of their own, through an ingest on the live topic.
    let ingest = start_ingest(&[("KAFKA_TOPIC_RAW", &live), ("RUST_LOG", "warn")]).await;
    let (live_site, live_key) = site_with_key().await;
    let body = work.join(format!("import-bench-{run}-live.json"));
    std::fs::write(
        &body,
        json!({"api_key": live_key, "site_id": live_site, "pathname": "/live",
               "user_agent": "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"})
        .to_string(),
    )
    .unwrap();
    let latency_secs: u64 = std::env::var("IMPORT_BENCH_LATENCY_SECONDS")
        .ok()
        .map_or(10, |s| s.parse().expect("IMPORT_BENCH_LATENCY_SECONDS"));
    let idle = finish_live_load(start_live_load(
        &ingest.url,
        &live_key,
        live_site,
        latency_secs,
        &body,
    ));
    println!("live events, no import: {idle}");

    // The import alone: the throughput goal.
    let alone = import_run(&work, &format!("{run}a"), n, &import, &enricher, None).await;
    // Again, with fresh ids on a site of its own, while live events flow: their latency.
    let loaded = import_run(
        &work,
        &format!("{run}b"),
        n,
        &import,
        &enricher,
        Some(Live {
            ingest_url: &ingest.url,
            key: &live_key,
            site: live_site,
            secs: latency_secs,
            body: &body,
        }),
    )
    .await;
    let during = loaded.live.clone().expect("the live figures");
    println!("live events, during the import: {during}");

    let ImportRun { mut figures, .. } = alone;
    let f = figures.as_object_mut().unwrap();
    f.insert("goal_events_per_second".into(), json!(100_000));
    f.insert("with_live_load".into(), loaded.figures);
    f.insert(
        "live".into(),
        json!({
            "events_per_second": LIVE_RATE.parse::<u32>().unwrap(),
            "seconds": latency_secs,
            "idle": idle,
            "during_import": during,
            "p99_ratio": (during["p99_ms"].as_f64().unwrap() / idle["p99_ms"].as_f64().unwrap().max(1.0) * 100.0).round() / 100.0,
            "goal_p99_ratio": 1.5,
        }),
    );
    println!("{}", serde_json::to_string_pretty(&figures).unwrap());
    std::fs::write(&out_path, serde_json::to_vec_pretty(&figures).unwrap()).unwrap();

    drop(ingest);
    drop(enricher);
    let _ = std::fs::remove_file(&body);
    delete_topic(&import).await;
    delete_topic(&live).await;
    db.client
        .query(&format!("DROP DATABASE IF EXISTS {DB}"))
        .execute()
        .await
        .unwrap();
}
