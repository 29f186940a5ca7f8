//! The parts of ingest's wire contract that need the real stack (docs/design.md, "Wire
//! contract"), by real HTTP to a running rivulet-ingest: keys checked against the
//! registry through the cache chain (401, 404, revocation), rate limits counted in
//! Redis, the process's logs and metrics. The rest of the contract (bodies, validation,
//! field limits, error shapes, batches, the browser path, identify) is tested in-process
//! in ingest/tests/router/.

use rivulet_tests::*;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::OnceCell;

struct Fixture {
    ingest: Service,
    site_id: u32,
    key: String,
}

async fn fx() -> &'static Fixture {
    static FX: OnceCell<Fixture> = OnceCell::const_new();
    FX.get_or_init(|| async {
        let (site_id, key) = site_with_key().await;
        Fixture {
            ingest: start_ingest(&[]).await,
            site_id,
            key,
        }
    })
    .await
}

async fn post_raw(
    path: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Value) {
    post_bytes(&format!("{}{path}", fx().await.ingest.url), body, headers).await
}

async fn post(body: Value) -> (u16, Value) {
    let (s, _, b) = post_raw("/api/track", serde_json::to_vec(&body).unwrap(), &[]).await;
    (s, b)
}

#[tokio::test]
async fn invalid_api_key_is_401() {
    let f = fx().await;
    let (other_site, other_key) = site_with_key().await;
    let unknown = format!("rb_{}", "0".repeat(32));
    let upper = f.key.to_uppercase();
    let spaced = format!(" {}", f.key);
    let cases: Vec<Value> = vec![
        json!({"api_key": 42, "site_id": f.site_id}),
        json!({"api_key": "rb_short", "site_id": f.site_id}),
        json!({"api_key": unknown, "site_id": f.site_id}),
        json!({"api_key": upper, "site_id": f.site_id}),
        json!({"api_key": spaced, "site_id": f.site_id}),
        // a valid key of another (existing) site
        json!({"api_key": other_key, "site_id": f.site_id}),
    ];
    for c in cases {
        let (status, b) = post(c.clone()).await;
        assert_eq!(
            (status, b),
            (401, json!({"success": false, "error": "Invalid API key"})),
            "{c}"
        );
    }
    let (status, _) = post(json!({"api_key": other_key, "site_id": other_site})).await;
    assert_eq!(status, 200);
    // No key and no Origin is a server that forgot its key, not a browser: a 400 that
    // names the missing key. With an Origin the site does not list, it is the browser
    // path's 403.
    let (status, b) = post(json!({"site_id": f.site_id})).await;
    assert_eq!(status, 400, "{b}");
    assert_eq!(b["success"], json!(false));
    assert!(b["details"]["fieldErrors"]["api_key"].is_array(), "{b}");
    let body = serde_json::to_vec(&json!({"site_id": f.site_id})).unwrap();
    let (status, _, b) = post_raw(
        "/api/track",
        body,
        &[("origin", "https://not-the-site.example")],
    )
    .await;
    assert_eq!(status, 403, "{b}");
    assert_eq!(b["success"], json!(false));
}

#[tokio::test]
async fn revoked_key_is_401() {
    let (site, key) = site_with_key().await;
    let (status, _) = post(json!({"api_key": key, "site_id": site})).await;
    assert_eq!(status, 200);
    let status = std::process::Command::new(binary("rivulet-admin"))
        .args(["keys", "revoke", &key])
        .output()
        .unwrap()
        .status;
    assert!(status.success());
    // The revocation reaches the running ingest on the invalidation channel: within about
    // a second (docs/design.md, "Keys and sites"), so it is polled for, not waited for.
    Pace::within(Duration::from_secs(5))
        .every(Duration::from_millis(50))
        .poll_until("the revoked key was not refused", || async {
            match post(json!({"api_key": key, "site_id": site})).await {
                (401, b) if b["error"] == "Invalid API key" => Ok(()),
                (status, b) => Err(format!("{status} {b}")),
            }
        })
        .await;
}

#[tokio::test]
async fn unknown_site_is_404_after_a_valid_key() {
    let f = fx().await;
    let (status, b) = post(json!({"api_key": f.key, "site_id": 4_000_000_000u32})).await;
    assert_eq!(
        (status, b),
        (404, json!({"success": false, "error": "Site not found"}))
    );
    // An invalid key is rejected before the site is looked at.
    let (status, _) =
        post(json!({"api_key": format!("rb_{}", "1".repeat(32)), "site_id": 4_000_000_000u32}))
            .await;
    assert_eq!(status, 401);
}

/// With RATE_LIMIT_PER_SECOND unset, the limit is the documented 20.
#[tokio::test]
async fn the_default_rate_limit_is_20_per_second() {
    let (site, key) = site_with_key().await;
    let ingest = start_ingest_with_its_defaults(&[]).await;
    let url = format!("{}/api/track", ingest.url);
    let started = std::time::Instant::now();
    let resps = post_concurrently(&url, &json!({"api_key": key, "site_id": site}), 25).await;
    let elapsed = started.elapsed();
    let mut statuses = Vec::new();
    let mut message = None;
    for r in resps {
        statuses.push(r.status().as_u16());
        if r.status() == 429 {
            message = r.json::<Value>().await.unwrap()["error"]
                .as_str()
                .map(String::from);
        }
    }
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(ok + statuses.iter().filter(|s| **s == 429).count(), 25);
    assert!(
        (20..=bucket_allows(20, elapsed)).contains(&ok),
        "{statuses:?} in {elapsed:?}"
    );
    assert_eq!(
        message.as_deref(),
        Some("Rate limit exceeded. Maximum 20 requests per second per API key.")
    );
}

#[tokio::test]
async fn rate_limit_is_429_with_retry_after_and_the_configured_number() {
    let (site, key) = site_with_key().await;
    let limited = start_ingest(&[("RATE_LIMIT_PER_SECOND", "5")]).await;
    let url = format!("{}/api/track", limited.url);
    let started = std::time::Instant::now();
    let resps = post_concurrently(&url, &json!({"api_key": key, "site_id": site}), 12).await;
    let elapsed = started.elapsed();
    let doc = openapi::document(&limited.url).await;
    let mut ok = 0;
    let mut limited_count = 0;
    for r in resps {
        match r.status().as_u16() {
            200 => ok += 1,
            429 => {
                limited_count += 1;
                assert_eq!(r.headers()["retry-after"], "1");
                let b: Value = r.json().await.unwrap();
                openapi::assert_documented(&doc, "/api/track", 429, &b);
                assert_eq!(
                    b,
                    json!({"success": false, "error": "Rate limit exceeded. Maximum 5 requests per second per API key."})
                );
            }
            s => panic!("unexpected {s}"),
        }
    }
    assert_eq!(ok + limited_count, 12);
    assert!(
        (5..=bucket_allows(5, elapsed)).contains(&ok),
        "{ok} in {elapsed:?}"
    );
    assert_eq!(
        limited.metric("ingest_rate_limited_total").await,
        limited_count as f64
    );
    assert_eq!(
        limited.metric("ingest_events_accepted_total").await,
        ok as f64
    );
}

#[tokio::test]
async fn api_keys_never_appear_in_the_logs() {
    let (site, key) = site_with_key().await;
    let mut ingest = start_ingest(&[("RUST_LOG", "debug"), ("RATE_LIMIT_PER_SECOND", "2")]).await;
    let client = http();
    let url = format!("{}/api/track", ingest.url);
    let bodies = [
        json!({"api_key": key, "site_id": site}),
        json!({"api_key": key, "site_id": site, "type": "custom_event"}),
        json!({"api_key": key, "site_id": 4_000_000_000u32}),
        json!({"api_key": key.to_uppercase(), "site_id": site}),
        json!({"api_key": key, "site_id": site, "properties": "{bad"}),
    ];
    for _ in 0..2 {
        for b in &bodies {
            client.post(&url).json(b).fetch().await;
        }
    }
    client
        .post(&url)
        .body(format!("{{\"api_key\":\"{key}\", broken"))
        .fetch()
        .await;
    let request_id = format!("log-check-{}", uuid::Uuid::new_v4().simple());
    let r = client
        .post(&url)
        .header("x-request-id", &request_id)
        .json(&json!({"api_key": key, "site_id": site, "pathname": "/logged"}))
        .fetch()
        .await;
    assert_eq!(r.headers()["x-request-id"], request_id.as_str());
    let status = r.status().as_u16();
    assert!(ingest.terminate(Duration::from_secs(15)));
    let logs = ingest.logs();
    assert!(
        logs.contains("rivulet-ingest listening"),
        "the log was captured"
    );
    assert!(
        !logs.to_lowercase().contains(&key[3..]),
        "an API key appeared in the logs"
    );
    // JSON lines (the default format), each request's under its request id.
    let lines: Vec<Value> = logs
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    let line = lines
        .iter()
        .find(|l| l["span"]["request_id"] == request_id.as_str())
        .unwrap_or_else(|| panic!("no log line carries request_id {request_id}"));
    assert_eq!(line["status"], status, "{line}");
    assert_eq!(line["span"]["route"], "/api/track", "{line}");
}

/// Concurrent first requests for one key make one registry lookup (not a stampede),
/// and an unknown key's answer is cached too: in-process, and in Redis for the others.
#[tokio::test]
async fn a_key_is_looked_up_once_however_many_ask_and_unknown_keys_are_cached() {
    let (site, key) = site_with_key().await;
    let unknown = format!("rb_{}", uuid::Uuid::new_v4().simple());
    let ingest = start_ingest(&[]).await;
    let url = format!("{}/api/track", ingest.url);
    let client = http();
    let burst = |api_key: &str| {
        let body = json!({"api_key": api_key, "site_id": site});
        let url = url.clone();
        async move { statuses_of_concurrent_posts(&url, &body, 50).await }
    };
    assert_eq!(burst(&key).await, vec![200; 50]);
    let registry =
        |result: &str| format!(r#"ingest_key_cache_total{{layer="registry",result="{result}"}}"#);
    assert_eq!(ingest.metric(&registry("hit")).await, 1.0);

    assert_eq!(burst(&unknown).await, vec![401; 50]);
    assert_eq!(burst(&unknown).await, vec![401; 50]);
    assert_eq!(
        ingest.metric(&registry("miss")).await,
        1.0,
        "one lookup for 100 requests"
    );

    // Another ingest finds the negative answer in Redis, not in the registry.
    let other = start_ingest(&[]).await;
    let r = client
        .post(format!("{}/api/track", other.url))
        .json(&json!({"api_key": unknown, "site_id": site}))
        .fetch()
        .await;
    assert_eq!(r.status(), 401);
    assert_eq!(
        other
            .metric(r#"ingest_key_cache_total{layer="redis",result="hit"}"#)
            .await,
        1.0
    );
    for result in ["hit", "miss"] {
        assert_eq!(other.metric(&registry(result)).await, 0.0);
    }
}

/// `/metrics` counts requests by route and status, times them per route, and counts
/// key-cache lookups by layer: exact counts, from an ingest of the test's own.
#[tokio::test]
async fn metrics_count_requests_by_route_status_and_cache_layer() {
    let (site, key) = site_with_key().await;
    let ingest = start_ingest(&[]).await;
    let client = http();
    let track = format!("{}/api/track", ingest.url);
    for _ in 0..3 {
        let st = client
            .post(&track)
            .json(&json!({"api_key": key, "site_id": site}))
            .fetch_status()
            .await;
        assert_eq!(st, 200);
    }
    let st = client
        .post(&track)
        .json(&json!({"api_key": key, "site_id": site, "type": "nope"}))
        .fetch_status()
        .await;
    assert_eq!(st, 400);
    let st = client
        .get(format!("{}/nowhere", ingest.url))
        .fetch_status()
        .await;
    assert_eq!(st, 404);
    let expected = [
        (
            r#"ingest_http_requests_total{route="/api/track",status="200"}"#,
            3.0,
        ),
        (
            r#"ingest_http_requests_total{route="/api/track",status="400"}"#,
            1.0,
        ),
        (
            r#"ingest_http_requests_total{route="unmatched",status="404"}"#,
            1.0,
        ),
        (
            r#"ingest_http_request_duration_seconds_count{route="/api/track"}"#,
            4.0,
        ),
        // The first request misses the in-process cache; the next two hit it.
        (r#"ingest_key_cache_total{layer="l1",result="miss"}"#, 1.0),
        (r#"ingest_key_cache_total{layer="l1",result="hit"}"#, 2.0),
        ("ingest_events_accepted_total", 3.0),
    ];
    for (series, value) in expected {
        assert_eq!(ingest.metric(series).await, value, "{series}");
    }
}
