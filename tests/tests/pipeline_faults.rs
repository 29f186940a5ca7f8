//! The enricher under failures, on the real stack: two enrichers share the partitions
//! and one is killed with SIGKILL mid-stream; ClickHouse stops for 20 s under a stream.
//! Every acknowledged event ends up in ClickHouse, exactly once after dedup.

use rivulet_tests::*;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::const_new(());

/// The same batch again every 200 ms until it is acknowledged, each attempt with the
/// default client's 30 s time limit; a batch not acknowledged in two minutes fails the test.
const RETRY_EVERY_200_MS: RetryPolicy = RetryPolicy {
    first_pause: Duration::from_millis(200),
    max_pause: Duration::from_millis(200),
    attempt_timeout: Duration::from_secs(30),
    give_up_after: Duration::from_secs(120),
};

/// In a task of its own, posts `batches` batches of `per` events for the site to the
/// ingest, pausing `pause` after each; the task's result is the acknowledged event ids.
fn spawn_stream(
    ingest: &Service,
    key: &str,
    site: u32,
    (batches, per): (usize, usize),
    pause: Duration,
) -> tokio::task::JoinHandle<Vec<String>> {
    let client = RetryingClient::new(vec![ingest.url.clone()], RETRY_EVERY_200_MS);
    let key = key.to_string();
    tokio::spawn(async move {
        let mut acked = Vec::new();
        for b in 0..batches {
            let ids: Vec<String> = (0..per).map(|_| uuid::Uuid::new_v4().to_string()).collect();
            let events: Vec<_> = ids.iter().enumerate().map(|(i, id)| json!({"event_id": id, "pathname": format!("/b{b}/{i}"),
                "ip_address": format!("81.2.{}.{}", b % 250, i % 250), "user_agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0"})).collect();
            // Retry like the SDK: same event ids until the batch is stored.
            let body = json!({"api_key": key, "site_id": site, "events": events});
            let what = format!("batch {b}");
            assert!(
                client
                    .post_until_ok(&what, "/api/track/batch", &body, 0)
                    .await,
                "{what} was never acknowledged"
            );
            acked.extend(ids);
            // The scenario: the stream's pace.
            tokio::time::sleep(pause).await;
        }
        acked
    })
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
    let stored = stored_events(site).await;
    assert_eq!(stored.rows_after_dedup, n, "after dedup, each exactly once");
    assert!(
        acked.iter().all(|id| stored.ids.contains(id)),
        "the stored ids are the acknowledged ones"
    );
}

/// A fresh site and key, an ingest, and `n` enrichers, the last one holding partitions.
async fn pipeline(n: usize) -> (u32, String, Service, Vec<Service>) {
    let (site, key) = site_with_key().await;
    let ingest = start_ingest(&[]).await;
    let mut enrichers = Vec::new();
    for _ in 0..n {
        enrichers.push(start_enricher(&[]).await);
    }
    wait_assigned(enrichers.last().expect("an enricher")).await;
    (site, key, ingest, enrichers)
}

#[tokio::test]
async fn kill_9_one_of_two_enrichers_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let (site, key, ingest, mut enrichers) = pipeline(2).await;
    let producer = spawn_stream(&ingest, &key, site, (40, 100), Duration::from_millis(100));
    // The scenario: the kill comes 2 s into the stream.
    tokio::time::sleep(Duration::from_secs(2)).await;
    enrichers[0].kill9();
    let acked = producer.await.unwrap();
    assert_eq!(acked.len(), 4000);
    assert_exactly_once(site, &acked, Duration::from_secs(90)).await;
}

#[tokio::test]
async fn clickhouse_down_20s_under_a_stream_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let (site, key, ingest, mut enrichers) = pipeline(1).await;
    let enricher = &mut enrichers[0];
    // About 30 s of events; ClickHouse goes away for 20 s of it.
    let producer = spawn_stream(&ingest, &key, site, (60, 20), Duration::from_millis(500));
    // The scenario: ClickHouse stops 3 s into the stream, for 20 s.
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
    // The outage reached the enricher: an insert failed, or, when the erasure ledger's
    // refresh (a ClickHouse read, due before every insert) noticed first, inserts waited
    // for it. Either way the batch was held, not dropped.
    let logs = enricher.logs();
    assert!(
        logs.contains("ClickHouse insert failed")
            || logs.contains("the erasure ledger is stale: inserts wait"),
        "the enricher never noticed that ClickHouse was down"
    );
}
