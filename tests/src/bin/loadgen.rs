//! A small HTTP load generator for `scripts/bench` (loopback only).
//!
//!   loadgen max  URL BODY_FILE CONNECTIONS SECONDS       closed loop: as fast as possible
//!   loadgen rate URL BODY_FILE RATE SECONDS              open loop: RATE requests/s
//!
//! Prints one JSON line: requests, ok, errors, requests_per_sec, p50/p90/p99/max in ms.
//! In open-loop mode latency is measured from each request's scheduled start, so a
//! stalled server shows up in the percentiles (no coordinated omission).

use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 6 {
        eprintln!("usage: loadgen max|rate URL BODY_FILE CONNECTIONS|RATE SECONDS");
        std::process::exit(2);
    }
    let (mode, url, body_file) = (args[1].clone(), args[2].clone(), &args[3]);
    let n: u64 = args[4].parse().expect("a number");
    let secs: u64 = args[5].parse().expect("seconds");
    assert!(
        url.starts_with("http://127.") || url.starts_with("http://localhost"),
        "loopback targets only"
    );
    let body = bytes::Bytes::from(std::fs::read(body_file).expect("body file"));
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let results: Vec<(bool, f64)> = match mode.as_str() {
        "max" => {
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let (client, url, body) = (client.clone(), url.clone(), body.clone());
                    tokio::spawn(async move {
                        let mut out = Vec::new();
                        while Instant::now() < deadline {
                            let t = Instant::now();
                            let ok = send(&client, &url, body.clone()).await;
                            out.push((ok, t.elapsed().as_secs_f64() * 1000.0));
                        }
                        out
                    })
                })
                .collect();
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await.unwrap());
            }
            all
        }
        "rate" => {
            let interval = Duration::from_secs_f64(1.0 / n as f64);
            let out = Arc::new(std::sync::Mutex::new(Vec::new()));
            let mut handles = Vec::new();
            let mut next = Instant::now();
            while next < deadline {
                let scheduled = next;
                let (client, url, body, out) =
                    (client.clone(), url.clone(), body.clone(), out.clone());
                handles.push(tokio::spawn(async move {
                    let ok = send(&client, &url, body).await;
                    out.lock()
                        .unwrap()
                        .push((ok, scheduled.elapsed().as_secs_f64() * 1000.0));
                }));
                next += interval;
                tokio::time::sleep_until(next.into()).await;
            }
            for h in handles {
                let _ = h.await;
            }
            let v = out.lock().unwrap().clone();
            v
        }
        _ => panic!("mode is max or rate"),
    };
    let elapsed = started.elapsed().as_secs_f64();
    let mut lat: Vec<f64> = results.iter().map(|r| r.1).collect();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    let ok = results.iter().filter(|r| r.0).count();
    println!(
        "{{\"mode\":\"{mode}\",\"requests\":{},\"ok\":{ok},\"errors\":{},\"requests_per_sec\":{:.0},\"p50_ms\":{:.3},\"p90_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3}}}",
        results.len(),
        results.len() - ok,
        results.len() as f64 / elapsed,
        pct(0.5),
        pct(0.9),
        pct(0.99),
        lat.last().copied().unwrap_or(0.0)
    );
}

async fn send(client: &reqwest::Client, url: &str, body: bytes::Bytes) -> bool {
    match client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
    {
        Ok(r) => {
            let ok = r.status().is_success();
            let _ = r.bytes().await;
            ok
        }
        Err(_) => false,
    }
}
