//! Ingest under dependency failures, on the real stack: Kafka stopped → 503 and never
//! a 200, then 200 again without a restart; Redis stopped → cached keys keep working
//! and the rate limiter fails open (and says so). Tests here stop shared services, so
//! they hold one lock and restore what they stopped.

use rivulet_tests::*;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::const_new(());

/// Restarts a stopped service even when the test fails.
struct Restore(&'static str);
impl Drop for Restore {
    fn drop(&mut self) {
        stack(&["start", self.0]);
    }
}

/// A fresh site and key, an ingest started with `env`, and a client; `post` sends the
/// site's event with it. The first event is accepted.
struct Fx {
    site: u32,
    key: String,
    ingest: Service,
    client: reqwest::Client,
    url: String,
    body: serde_json::Value,
}

async fn fixture(env: &[(&str, &str)]) -> Fx {
    let (site, key) = site_with_key().await;
    let ingest = start_ingest(env).await;
    let url = format!("{}/api/track", ingest.url);
    let body = json!({"api_key": key, "site_id": site});
    let fx = Fx {
        site,
        key,
        ingest,
        client: http(),
        url,
        body,
    };
    assert_eq!(fx.post().await.status(), 200);
    fx
}

impl Fx {
    async fn post(&self) -> reqwest::Response {
        self.client.post(&self.url).json(&self.body).fetch().await
    }
    async fn readiness(&self) -> reqwest::Response {
        let url = self.ingest.readiness_url();
        self.client.get(url).fetch().await
    }
}

#[tokio::test]
async fn kafka_down_gives_503_never_200_and_recovers_without_restart() {
    let _serial = SERIAL.lock().await;
    let fx = &fixture(&[("KAFKA_ACK_TIMEOUT_MS", "5000")]).await;
    let (site, key, ingest) = (fx.site, &fx.key, &fx.ingest);

    let doc = &openapi::document(&ingest.url).await;

    let restore = Restore("kafka");
    stack(&["stop", "kafka"]);
    let outage = Pace::within(Duration::from_secs(8));
    let n = outage
        .repeat(|n| async move {
            let t = Instant::now();
            let r = fx.post().await;
            assert_eq!(
                r.status(),
                503,
                "an event that cannot reach Kafka must not get 200"
            );
            assert!(r.headers().contains_key("retry-after"));
            if n == 0 {
                let b = r.json().await.unwrap();
                openapi::assert_documented(doc, "/api/track", 503, &b);
            }
            // The ack timeout (5 s) bounds the answer; the margin is for the client's side.
            assert!(
                t.elapsed() <= Duration::from_millis(5250),
                "503 within the ack timeout, took {:?}",
                t.elapsed()
            );
        })
        .await;
    assert!(n >= 2);

    // A batch in the outage: 503, each valid event "failed" with its event_id (to retry
    // with), an invalid one still "invalid".
    let ids = [
        uuid::Uuid::new_v4().to_string(),
        uuid::Uuid::new_v4().to_string(),
    ];
    let batch = json!({"api_key": key, "site_id": site, "events": [
        {"event_id": ids[0]}, {"type": "custom_event"}, {"event_id": ids[1]}
    ]});
    let r = fx
        .client
        .post(format!("{}/api/track/batch", ingest.url))
        .json(&batch)
        .fetch()
        .await;
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let b: serde_json::Value = r.json().await.unwrap();
    openapi::assert_documented(doc, "/api/track/batch", 503, &b);
    assert_eq!(
        (&b["success"], &b["accepted"], &b["rejected"], &b["failed"]),
        (&json!(false), &json!(0), &json!(1), &json!(2)),
        "{b}"
    );
    for (i, id) in [(0, &ids[0]), (2, &ids[1])] {
        assert_eq!(b["results"][i]["status"], "failed", "{b}");
        assert_eq!(b["results"][i]["event_id"], json!(id), "{b}");
    }
    assert_eq!(b["results"][1]["status"], "invalid", "{b}");

    assert_eq!(fx.readiness().await.status(), 503);

    drop(restore); // starts Kafka again
    Pace::within(Duration::from_secs(60))
        .every(Duration::from_millis(250))
        .poll_until("ingest did not recover after Kafka returned", || async {
            match fx.post().await.status().as_u16() {
                200 => Ok(()),
                st => {
                    assert_eq!(st, 503);
                    Err(st)
                }
            }
        })
        .await;
    wait_ready(&ingest.ops_url, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn redis_down_keeps_cached_keys_working_and_fails_open() {
    let _serial = SERIAL.lock().await;
    let fx = fixture(&[("RATE_LIMIT_PER_SECOND", "5")]).await;
    let ingest = &fx.ingest;

    let restore = Restore("redis");
    stack(&["stop", "redis"]);
    // Longer than the L1 TTL (5 s): after it, the registry in ClickHouse answers. At most
    // 4 requests a second, under the limit of 5.
    Pace::within(Duration::from_secs(7))
        .every(Duration::from_millis(300))
        .repeat(|_| async {
            let t = Instant::now();
            assert_eq!(fx.post().await.status(), 200);
            assert!(
                t.elapsed() < Duration::from_secs(2),
                "a down Redis must not stall requests"
            );
        })
        .await;
    assert!(ingest.metric("ingest_rate_limit_fail_open_total").await > 0.0);

    // Failing open is to the same limit, per process: of 12 requests at once, 5 pass
    // (and what refills while they are answered).
    buckets_refilled().await;
    let started = Instant::now();
    let statuses = statuses_of_concurrent_posts(&fx.url, &fx.body, 12).await;
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(ok + statuses.iter().filter(|s| **s == 429).count(), 12);
    assert!(
        (5..=bucket_allows(5, started.elapsed())).contains(&ok),
        "{statuses:?}"
    );
    assert_eq!(ingest.metric("ingest_redis_up").await, 0.0);
    assert_eq!(fx.readiness().await.status(), 503);
    assert!(ingest.logs().contains("Redis is unreachable"));

    drop(restore);
    wait_ready(&ingest.ops_url, Duration::from_secs(15)).await;
    assert_eq!(fx.post().await.status(), 200);
}

/// With Redis and the registry (ClickHouse) both down, a key this ingest knows keeps
/// working from its in-process cache past that entry's TTL; a key it has never seen
/// cannot be checked, and gets 503 (retry), not 401.
#[tokio::test]
async fn known_keys_keep_working_from_the_in_process_cache_when_redis_and_the_registry_are_down() {
    let _serial = SERIAL.lock().await;
    let (other_site, other_key) = site_with_key().await;
    let fx = fixture(&[("KEY_CACHE_TTL_MS", "1000")]).await;

    let restore_redis = Restore("redis");
    let restore_clickhouse = Restore("clickhouse");
    stack(&["stop", "redis"]);
    stack(&["stop", "clickhouse"]);
    // Three times the entry's TTL.
    Pace::within(Duration::from_secs(3))
        .every(Duration::from_millis(250))
        .repeat(|_| async {
            let st = fx.post().await.status();
            assert_eq!(st, 200, "a known key must keep working");
        })
        .await;
    let post_other = || {
        fx.client
            .post(&fx.url)
            .json(&json!({"api_key": other_key, "site_id": other_site}))
            .fetch()
    };
    let r = post_other().await;
    assert_eq!(
        r.status(),
        503,
        "an unchecked key is neither accepted nor called invalid"
    );
    assert!(r.headers().contains_key("retry-after"));

    drop(restore_clickhouse);
    drop(restore_redis);
    wait_ready(&fx.ingest.ops_url, Duration::from_secs(15)).await;
    assert_eq!(post_other().await.status(), 200);
}

/// Deterministic: the request is known to be in flight (its headers parsed, its body
/// being read, shown by the server's `100 Continue`) when SIGTERM arrives, and its body
/// is sent only after; it must still get its 200, and new connections are refused.
#[tokio::test]
async fn sigterm_finishes_in_flight_requests_and_exits_cleanly() {
    let _serial = SERIAL.lock().await;
    let (site, key) = site_with_key().await;
    let mut ingest = start_ingest(&[]).await;
    let addr = ingest.url.trim_start_matches("http://").to_string();
    let body = json!({"api_key": key, "site_id": site}).to_string();
    let conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /api/track HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        body.len()
    );
    raw::write_all(&conn, head.as_bytes()).await.unwrap();
    let cont = raw::read_head(&conn, Duration::from_secs(10)).await;
    assert!(
        cont.as_deref()
            .is_some_and(|h| h.starts_with("HTTP/1.1 100")),
        "expected 100 Continue, got {cont:?}"
    );

    ingest.sigterm();
    Pace::within(Duration::from_secs(5))
        .every(Duration::from_millis(20))
        .poll_until("the listener was not closed after SIGTERM", || async {
            match tokio::net::TcpStream::connect(&addr).await {
                Err(_) => Ok(()),
                Ok(_) => Err("a new connection was accepted"),
            }
        })
        .await;
    assert!(ingest.running(), "ingest exited with a request in flight");

    raw::write_all(&conn, body.as_bytes()).await.unwrap();
    let resp = raw::read_to_close(&conn, Duration::from_secs(10))
        .await
        .expect("the response, then the connection closed, within 10 s");
    let resp = String::from_utf8_lossy(&resp);
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains(r#""success":true"#), "{resp}");
    assert!(
        ingest.terminate(Duration::from_secs(15)),
        "ingest did not exit 0 after SIGTERM"
    );
    assert!(ingest.logs().contains("shutdown complete"));
}

/// Readiness is what a load balancer acts on, so it must not claim more than is known: a
/// fresh ingest whose broker does not answer is not ready, from its first answer on (the
/// first probe takes up to 1.5 s to fail).
#[tokio::test]
async fn readiness_is_503_until_kafka_has_answered() {
    let unreachable = format!("127.0.0.1:{}", free_port());
    let ingest = start_ingest_live(&[("KAFKA_BROKERS", unreachable.as_str())]).await;
    let client = http();
    let ready = ingest.readiness_url();
    Pace::within(Duration::from_secs(3))
        .every(Duration::from_millis(50))
        .repeat(|_| async {
            let r = client.get(&ready).fetch().await;
            assert_eq!(r.status(), 503);
            let b: serde_json::Value = r.json().await.unwrap();
            assert_eq!((&b["ready"], &b["kafka"]), (&json!(false), &json!(false)));
        })
        .await;
}

/// With a drain period (`SHUTDOWN_DRAIN_MS`), SIGTERM turns readiness to 503 at once, so
/// that a load balancer stops sending, while new requests are still served until the
/// drain ends; then the process exits cleanly.
#[tokio::test]
async fn readiness_turns_503_at_sigterm_while_the_drain_still_serves() {
    let _serial = SERIAL.lock().await;
    let (site, key) = site_with_key().await;
    let mut ingest = start_ingest(&[("SHUTDOWN_DRAIN_MS", "3000")]).await;
    let ready = ingest.readiness_url();
    assert_eq!(http().get(&ready).fetch_status().await, 200);

    ingest.sigterm();
    // Fresh clients: new connections, which the listener still accepts while draining.
    // Well within the drain (3 s), readiness says so.
    let b: serde_json::Value = Pace::within(Duration::from_secs(2))
        .every(Duration::from_millis(20))
        .poll_until("readiness did not turn 503 after SIGTERM", || async {
            let r = http().get(&ready).fetch().await;
            match r.status().as_u16() {
                503 => Ok(r.json().await.unwrap()),
                status => Err(status),
            }
        })
        .await;
    assert_eq!(b["shutting_down"], true);
    let st = http()
        .post(format!("{}/api/track", ingest.url))
        .json(&json!({"api_key": key, "site_id": site}))
        .fetch_status()
        .await;
    assert_eq!(st, 200, "requests are served during the drain");
    assert!(
        ingest.terminate(Duration::from_secs(15)),
        "ingest did not exit 0 after the drain"
    );
}
