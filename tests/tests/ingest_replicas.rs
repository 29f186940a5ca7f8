//! Two ingest processes share one Redis: the rate limit is global, and a revocation
//! reaches both within a second.
//!
//! The limit is a token bucket per key holding one second's worth and refilling
//! continuously: over a burst of `t` seconds that starts with a full bucket, a key may
//! be accepted at most `limit + limit × t` times.

use rivulet_tests::*;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// One test of this file at a time: each is timed to the second (a burst in one
/// window, a revocation seen within 1 s), and the bursts of one would slow another's
/// clock on a busy machine (a revocation took over 1 s while the burst tests ran).
static SERIAL: Mutex<()> = Mutex::const_new(());

#[tokio::test]
async fn two_ingests_share_the_rate_limit() {
    let _serial = SERIAL.lock().await;
    let (a, b, body) = two_warm_ingests("20").await;
    let client = http();
    // The warm-up took two tokens.
    buckets_refilled().await;
    let reqs = (0..60).map(|i| {
        let url = if i % 2 == 0 { &a.url } else { &b.url };
        client.post(format!("{url}/api/track")).json(&body).send()
    });
    let started = Instant::now();
    let statuses: Vec<u16> = futures::future::join_all(reqs)
        .await
        .into_iter()
        .map(|r| r.unwrap().status().as_u16())
        .collect();
    let elapsed = started.elapsed();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(ok + limited, 60, "only 200 or 429: {statuses:?}");
    assert!(
        (20..=bucket_allows(20, elapsed)).contains(&ok),
        "{ok} accepted in {elapsed:?} at 20 a second: {statuses:?}"
    );
}

/// A new site and key, two ingests with this rate limit, both warmed; and the event
/// body for the key.
async fn two_warm_ingests(limit: &str) -> (Service, Service, serde_json::Value) {
    let (site, key) = site_with_key().await;
    let a = start_ingest(&[("RATE_LIMIT_PER_SECOND", limit)]).await;
    let b = start_ingest(&[("RATE_LIMIT_PER_SECOND", limit)]).await;
    let body = json!({"api_key": key, "site_id": site});
    warm(&[&a, &b], &body).await;
    (a, b, body)
}

/// One accepted request to each ingest: it warms their key caches, so that a measured
/// second is not spent in lookups, and makes their first rate-limit round trip.
async fn warm(ingests: &[&Service], body: &serde_json::Value) {
    for s in ingests {
        let st = http()
            .post(format!("{}/api/track", s.url))
            .json(body)
            .fetch_status()
            .await;
        assert_eq!(st, 200, "{}", s.url);
    }
}

/// At a limit of 300, each replica reserves tokens ahead (up to 1 % of the budget): the
/// total accepted still never exceeds what the bucket allows, and falls short of it by
/// at most the 3 tokens each replica can hold unused.
#[tokio::test]
async fn tokens_reserved_ahead_keep_the_shared_limit() {
    let _serial = SERIAL.lock().await;
    let (a, b, body) = two_warm_ingests("300").await;
    let client = http();
    let calls_before = a.metric("ingest_rate_limit_redis_calls_total").await
        + b.metric("ingest_rate_limit_redis_calls_total").await;
    buckets_refilled().await;
    // 16 concurrent clients per replica, 25 requests each: 800 in all.
    let started = Instant::now();
    let clients = (0..32).map(|i| {
        let url = format!("{}/api/track", if i % 2 == 0 { &a.url } else { &b.url });
        let (client, body) = (client.clone(), body.clone());
        async move {
            let mut statuses = Vec::new();
            for _ in 0..25 {
                let r = client.post(&url).json(&body).fetch().await;
                statuses.push(r.status().as_u16());
            }
            statuses
        }
    });
    let statuses: Vec<u16> = futures::future::join_all(clients)
        .await
        .into_iter()
        .flatten()
        .collect();
    let elapsed = started.elapsed();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(ok + limited, 800, "only 200 or 429: {statuses:?}");
    assert!(
        (294..=bucket_allows(300, elapsed)).contains(&ok),
        "{ok} accepted in {elapsed:?} at 300 a second"
    );
    let calls = a.metric("ingest_rate_limit_redis_calls_total").await
        + b.metric("ingest_rate_limit_redis_calls_total").await
        - calls_before;
    assert!(calls >= 2.0, "both replicas asked Redis ({calls} calls)");
}

/// A busy key with a high limit costs a handful of Redis round trips a second, not one
/// per request: requests one at a time (so that none can be coalesced) take the places
/// reserved ahead by earlier round trips.
#[tokio::test]
async fn a_busy_key_reserves_ahead_instead_of_a_round_trip_per_request() {
    let _serial = SERIAL.lock().await;
    let (site, key) = site_with_key().await;
    let ingest = start_ingest(&[("RATE_LIMIT_PER_SECOND", "1000000")]).await;
    let client = http();
    let url = format!("{}/api/track", ingest.url);
    let body = json!({"api_key": key, "site_id": site});
    warm(&[&ingest], &body).await;
    let calls_before = ingest.metric("ingest_rate_limit_redis_calls_total").await;
    let requests = 600;
    for _ in 0..requests {
        let st = client.post(&url).json(&body).fetch_status().await;
        assert_eq!(st, 200);
    }
    let calls = ingest.metric("ingest_rate_limit_redis_calls_total").await - calls_before;
    assert!(
        calls <= f64::from(requests) / 5.0,
        "{calls} Redis calls for {requests} sequential requests"
    );
    assert!(calls >= 1.0, "the limiter still counts in Redis");
}

#[tokio::test]
async fn revocation_reaches_both_ingests_within_a_second() {
    let _serial = SERIAL.lock().await;
    let (site, key) = site_with_key().await;
    let a = start_ingest(&[]).await;
    let b = start_ingest(&[("KEY_CACHE_TTL_MS", "600000")]).await;
    let client = http();
    let body = json!({"api_key": key, "site_id": site});
    for s in [&a, &b] {
        assert_eq!(
            client
                .post(format!("{}/api/track", s.url))
                .json(&body)
                .fetch_status()
                .await,
            200
        );
    }
    // The clock starts when the revocation command starts, not when it returns.
    let revoked_at = Instant::now();
    let admin = std::process::Command::new(binary("rivulet-admin"))
        .args(["keys", "revoke", &key])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let within_a_second = Pace::within(Duration::from_secs(1))
        .every(Duration::from_millis(20))
        .counted_from(revoked_at);
    for s in [&a, &b] {
        let url = format!("{}/api/track", s.url);
        within_a_second
            .poll(|| async {
                match client.post(&url).json(&body).fetch_status().await.as_u16() {
                    401 => Ok(()),
                    st => Err(st),
                }
            })
            .await
            .unwrap_or_else(|st| panic!("{} still accepts a revoked key ({st})", s.url));
    }
    let out = admin.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
