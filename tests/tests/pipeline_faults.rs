//! The enricher under failures, on the real stack: two enrichers share the partitions
//! and one is killed with SIGKILL mid-stream; ClickHouse stops for 20 s under a stream.
//! Every acknowledged event ends up in ClickHouse, exactly once after dedup.

use rivulet_tests::*;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::const_new(());

/// Posts `n` batches of `per` events for the site; returns the acknowledged event ids.
async fn stream(
    url: &str,
    key: &str,
    site: u32,
    batches: usize,
    per: usize,
    pause: Duration,
) -> Vec<String> {
    let client = http();
    let mut acked = Vec::new();
    for b in 0..batches {
        let ids: Vec<String> = (0..per).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let events: Vec<_> = ids.iter().enumerate().map(|(i, id)| json!({"event_id": id, "pathname": format!("/b{b}/{i}"),
            "ip_address": format!("81.2.{}.{}", b % 250, i % 250), "user_agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0"})).collect();
        // Retry like the SDK: same event ids until the batch is stored.
        loop {
            let r = client
                .post(format!("{url}/api/track/batch"))
                .json(&json!({"api_key": key, "site_id": site, "events": events}))
                .send()
                .await;
            if let Ok(r) = r {
                if r.status() == 200 {
                    acked.extend(ids.iter().cloned());
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(pause).await;
    }
    acked
}

async fn assert_exactly_once(site: u32, acked: &[String], within: Duration) {
    let n = acked.len() as u64;
    let got = wait_count(
        &format!("SELECT uniqExact(event_id) FROM events WHERE site_id = {site}"),
        n,
        within,
    )
    .await;
    assert_eq!(got, n, "every acknowledged event is in ClickHouse");
    let db = db().await;
    let final_count: u64 = db
        .client
        .query(&format!(
            "SELECT count() FROM events FINAL WHERE site_id = {site}"
        ))
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(final_count, n, "after dedup, each exactly once");
    let listed: Vec<String> = db
        .client
        .query(&format!(
            "SELECT DISTINCT toString(event_id) FROM events WHERE site_id = {site}"
        ))
        .fetch_all()
        .await
        .unwrap();
    let listed: std::collections::HashSet<_> = listed.into_iter().collect();
    assert!(
        acked.iter().all(|id| listed.contains(id)),
        "the stored ids are the acknowledged ones"
    );
}

#[tokio::test]
async fn kill_9_one_of_two_enrichers_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let (site, key) = site_with_key().await;
    let ingest = start_ingest(&[]).await;
    let mut a = start_enricher(&[]).await;
    let b = start_enricher(&[]).await;
    wait_assigned(&b).await;
    let url = ingest.url.clone();
    let k = key.clone();
    let producer =
        tokio::spawn(
            async move { stream(&url, &k, site, 40, 100, Duration::from_millis(100)).await },
        );
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.kill9();
    let acked = producer.await.unwrap();
    assert_eq!(acked.len(), 4000);
    assert_exactly_once(site, &acked, Duration::from_secs(90)).await;
}

#[tokio::test]
async fn clickhouse_down_20s_under_a_stream_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let (site, key) = site_with_key().await;
    let ingest = start_ingest(&[]).await;
    let mut enricher = start_enricher(&[]).await;
    wait_assigned(&enricher).await;
    let url = ingest.url.clone();
    let k = key.clone();
    // About 30 s of events; ClickHouse goes away for 20 s of it.
    let producer =
        tokio::spawn(
            async move { stream(&url, &k, site, 60, 20, Duration::from_millis(500)).await },
        );
    tokio::time::sleep(Duration::from_secs(3)).await;
    stack(&["stop", "clickhouse"]);
    let down = Instant::now();
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(down.elapsed())).await;
    assert!(
        enricher.child.try_wait().unwrap().is_none(),
        "the enricher did not crash"
    );
    stack(&["start", "clickhouse"]);
    let acked = producer.await.unwrap();
    assert_exactly_once(site, &acked, Duration::from_secs(90)).await;
    assert!(
        enricher.child.try_wait().unwrap().is_none(),
        "still running"
    );
    assert!(enricher.logs().contains("ClickHouse insert failed"));
}
