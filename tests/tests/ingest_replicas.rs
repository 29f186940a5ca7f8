//! Two ingest processes share one Redis: the rate limit is global, and a revocation
//! reaches both within a second.

use rivulet_tests::*;
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn two_ingests_share_the_rate_limit() {
    let (site, key) = site_with_key().await;
    let a = start_ingest(&[("RATE_LIMIT_PER_SECOND", "20")]).await;
    let b = start_ingest(&[("RATE_LIMIT_PER_SECOND", "20")]).await;
    let client = http();
    let body = json!({"api_key": key, "site_id": site});
    // Warm both key caches so the measured second is not spent in lookups.
    for s in [&a, &b] {
        client
            .post(format!("{}/api/track", s.url))
            .json(&body)
            .send()
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_millis();
    tokio::time::sleep(Duration::from_millis(u64::from(1000 - ms) + 20)).await;
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
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "the burst must fit in one window"
    );
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!((ok, limited), (20, 40), "{statuses:?}");
}

#[tokio::test]
async fn revocation_reaches_both_ingests_within_a_second() {
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
                .send()
                .await
                .unwrap()
                .status(),
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
    for s in [&a, &b] {
        loop {
            let st = client
                .post(format!("{}/api/track", s.url))
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16();
            if st == 401 {
                break;
            }
            assert!(
                revoked_at.elapsed() < Duration::from_secs(1),
                "{} still accepts a revoked key",
                s.url
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let out = admin.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
