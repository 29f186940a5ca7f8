//! End-to-end latency for `scripts/bench enricher` and `import_bench`: from ingest's 200
//! to the row being queryable in ClickHouse. Posts a probe event every PROBE_MS (default
//! 100 ms; while `loadgen rate` supplies the steady background load), polls ClickHouse
//! every 25 ms for probes not yet seen, and prints p50/p99/max in ms.
//!
//!   e2e_latency INGEST_URL API_KEY SITE_ID SECONDS [PROBE_MS]

use std::collections::HashMap;
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() {
    let args = rivulet_bench::tool_args(
        "e2e_latency INGEST_URL API_KEY SITE_ID SECONDS [PROBE_MS]",
        4..=5,
    );
    let every = Duration::from_millis(args.get(5).map_or(100, |s| s.parse().unwrap()));
    let (url, key, site, secs) = (
        args[1].clone(),
        args[2].clone(),
        args[3].clone(),
        args[4].parse::<u64>().unwrap(),
    );
    let db = rivulet_bench::db().await;
    let client = reqwest::Client::new();
    let run = format!("/probe-{}", uuid::Uuid::new_v4().simple());
    let mut acked: HashMap<String, Instant> = HashMap::new();
    let mut latencies = Vec::new();
    let end = Instant::now() + Duration::from_secs(secs);
    let mut next_probe = Instant::now();
    let mut n = 0;
    while Instant::now() < end
        || (!acked.is_empty() && Instant::now() < end + Duration::from_secs(30))
    {
        if Instant::now() >= next_probe && Instant::now() < end {
            let path = format!("{run}/{n}");
            n += 1;
            let r = client
                .post(format!("{url}/api/track"))
                .json(&serde_json::json!({"api_key": key, "site_id": site, "pathname": path}))
                .send()
                .await;
            if r.map(|r| r.status().is_success()).unwrap_or(false) {
                acked.insert(path, Instant::now());
            }
            next_probe += every;
        }
        if !acked.is_empty() {
            let seen: Vec<String> = db
                .client
                .query("SELECT pathname FROM events WHERE site_id = ? AND pathname LIKE ?")
                .bind(site.parse::<u32>().unwrap())
                .bind(format!("{run}/%"))
                .fetch_all()
                .await
                .unwrap_or_default();
            let now = Instant::now();
            for p in seen {
                if let Some(t) = acked.remove(&p) {
                    latencies.push(now.duration_since(t).as_secs_f64() * 1000.0);
                }
            }
        }
        // The measurement's pace: ClickHouse is polled every 25 ms.
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    latencies.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN)
    };
    println!(
        "{{\"probes\":{},\"unseen\":{},\"p50_ms\":{:.0},\"p99_ms\":{:.0},\"max_ms\":{:.0}}}",
        latencies.len(),
        acked.len(),
        pct(0.5),
        pct(0.99),
        latencies.last().copied().unwrap_or(f64::NAN)
    );
}
