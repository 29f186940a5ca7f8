//! What ingest puts in Kafka: read back from `events.raw` with a real consumer.

use rivulet_tests::*;
use serde_json::json;
use std::time::Duration;

/// A fresh site and key, an ingest started with `env`, and a reader of what reaches
/// `events.raw` from now on.
async fn ingest_and_reader(env: &[(&str, &str)]) -> (u32, String, Service, RawTopicReader) {
    let (site, key) = site_with_key().await;
    let ingest = start_ingest(env).await;
    (site, key, ingest, RawTopicReader::new())
}

#[tokio::test]
async fn posted_event_is_in_events_raw_with_server_fields() {
    // 127.0.0.1 is trusted here, so X-Forwarded-For decides the IP when ip_address is absent.
    let (site, key, ingest, mut reader) =
        ingest_and_reader(&[("TRUSTED_PROXIES", "127.0.0.1")]).await;
    let client = http();
    let id = uuid::Uuid::new_v4().to_string();
    let before = now_ms();
    // An hour ago, whole seconds, as RFC 3339: inside the accepted window whenever this runs.
    let ts_ms = (before / 1000 - 3600) * 1000;
    let ts = time::OffsetDateTime::from_unix_timestamp(ts_ms / 1000)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let full = json!({
        "api_key": key, "site_id": site.to_string(), "type": "custom_event", "event_name": "signup",
        "properties": "{\"plan\":\"pro\",\"seats\":3,\"tags\":[\"a\",true]}", "pathname": "/pricing",
        "hostname": "example.com", "querystring": "?utm_source=x", "page_title": "Pricing",
        "referrer": "https://www.google.com/", "user_id": "user-42", "user_agent": "UA-from-body/1.0",
        "ip_address": "81.2.69.142", "language": "en", "screenWidth": 1920, "screenHeight": 1080,
        "event_id": id, "timestamp": ts
    });
    let r = client
        .post(format!("{}/api/track", ingest.url))
        .header("user-agent", "UA-from-header")
        .header("x-forwarded-for", "203.0.113.7")
        .json(&full)
        .fetch()
        .await;
    assert_eq!(r.status(), 200);
    let after = now_ms();
    let (msg_key, ev) = reader
        .find(&id, Duration::from_secs(15))
        .expect("the event is in events.raw");
    assert_eq!(msg_key, format!("{site}:u:user-42"));
    assert_eq!(ev.v, 1);
    assert_eq!(ev.site_id, site);
    assert_eq!(ev.event_type.as_str(), "custom_event");
    assert_eq!(ev.event_name.as_deref(), Some("signup"));
    assert_eq!(
        ev.properties.as_deref(),
        Some("{\"plan\":\"pro\",\"seats\":3,\"tags\":[\"a\",true]}")
    );
    assert_eq!(ev.pathname.as_deref(), Some("/pricing"));
    assert_eq!(ev.hostname.as_deref(), Some("example.com"));
    assert_eq!(ev.querystring.as_deref(), Some("?utm_source=x"));
    assert_eq!(ev.page_title.as_deref(), Some("Pricing"));
    assert_eq!(ev.referrer.as_deref(), Some("https://www.google.com/"));
    assert_eq!(ev.user_id.as_deref(), Some("user-42"));
    assert_eq!(ev.language.as_deref(), Some("en"));
    assert_eq!(
        (ev.screen_width, ev.screen_height),
        (Some(1920), Some(1080))
    );
    assert_eq!(ev.ip, "81.2.69.142", "ip_address wins");
    assert_eq!(
        ev.user_agent, "UA-from-body/1.0",
        "user_agent wins over the header"
    );
    assert!(ev.key_id.starts_with("key_"));
    assert!(ev.received_at >= before && ev.received_at <= after);
    assert_eq!(
        ev.timestamp, ts_ms,
        "a client timestamp inside the window is kept"
    );

    // No ip_address / user_agent: trusted proxy's X-Forwarded-For and the header decide.
    let r = client
        .post(format!("{}/api/track", ingest.url))
        .header("user-agent", "UA-from-header")
        .header("x-forwarded-for", "198.51.100.1, 203.0.113.7")
        .json(&json!({"api_key": key, "site_id": site, "pathname": "/", "timestamp": 1000}))
        .fetch()
        .await;
    assert_eq!(r.status(), 200);
    let seen = reader.drain(Duration::from_secs(3));
    let (k, ev) = seen
        .values()
        .find(|(_, e)| e.site_id == site && e.event_id.to_string() != id)
        .expect("second event")
        .clone();
    assert_eq!(ev.ip, "203.0.113.7", "rightmost untrusted hop");
    assert_eq!(ev.user_agent, "UA-from-header");
    assert_eq!(ev.event_type.as_str(), "pageview");
    assert_eq!(ev.get_version(), 7, "server-made ids are UUIDv7");
    assert_eq!(
        ev.timestamp, ev.received_at,
        "a timestamp outside the window falls back to the receive time"
    );
    assert_eq!(k, format!("{site}:v:203.0.113.7|UA-from-header"));
}

/// The IP ingest records for an event from 127.0.0.1 that carries these
/// `X-Forwarded-For` lines, with `TRUSTED_PROXIES` set to `trusted`.
async fn recorded_ip(trusted: &str, forwarded_for: &[&str]) -> String {
    let (site, key, ingest, mut reader) = ingest_and_reader(&[("TRUSTED_PROXIES", trusted)]).await;
    let id = uuid::Uuid::new_v4().to_string();
    let mut req = http().post(format!("{}/api/track", ingest.url));
    for line in forwarded_for {
        req = req.header("x-forwarded-for", *line);
    }
    let r = req
        .json(&json!({"api_key": key, "site_id": site, "event_id": id}))
        .fetch()
        .await;
    assert_eq!(r.status(), 200);
    reader.find(&id, Duration::from_secs(15)).unwrap().1.ip
}

#[tokio::test]
async fn untrusted_peer_cannot_spoof_its_ip() {
    assert_eq!(recorded_ip("", &["6.6.6.6"]).await, "127.0.0.1");
}

/// A proxy may add its hop to `X-Forwarded-For` as a line of its own: the lines are one
/// list, so a client's forged first line does not decide the IP.
#[tokio::test]
async fn forwarded_for_on_several_lines_is_one_list() {
    assert_eq!(
        recorded_ip("127.0.0.1", &["6.6.6.6", "203.0.113.9"]).await,
        "203.0.113.9"
    );
}

trait V7 {
    fn get_version(&self) -> usize;
}
impl V7 for rivulet_common::event::RawEvent {
    fn get_version(&self) -> usize {
        self.event_id.get_version_num()
    }
}

/// Acks reach the waiting request as soon as librdkafka has them: its report queue
/// signals the runtime. Were that signal lost, each request would wait for the 100 ms
/// fallback poll instead, and the median below would be tens of milliseconds.
#[tokio::test]
async fn acks_are_answered_without_waiting_for_the_fallback_poll() {
    let (site, key) = site_with_key().await;
    let ingest = start_ingest(&[]).await;
    let client = http();
    let body = json!({"api_key": key, "site_id": site, "pathname": "/ack-latency"});
    let post = || {
        client
            .post(format!("{}/api/track", ingest.url))
            .json(&body)
            .fetch_status()
    };
    assert_eq!(post().await, 200, "warm-up");
    let mut ms = Vec::new();
    for _ in 0..40 {
        let start = std::time::Instant::now();
        assert_eq!(post().await, 200);
        ms.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    let median = ms[ms.len() / 2];
    assert!(
        median < 25.0,
        "median {median:.1} ms over 40 sequential requests: {ms:?}"
    );
}

/// A full producer queue makes requests wait for room (backpressure), not fail or grow
/// memory: with room for one message, 60 concurrent requests all get their 200, the
/// waits are counted, and every event is in `events.raw`.
#[tokio::test]
async fn a_full_producer_queue_makes_requests_wait_not_fail() {
    let (site, key, ingest, mut reader) =
        ingest_and_reader(&[("KAFKA_QUEUE_MAX_MESSAGES", "1")]).await;
    let client = http();
    let ids: Vec<String> = (0..60).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let reqs = ids.iter().map(|id| {
        client
            .post(format!("{}/api/track", ingest.url))
            .json(&json!({"api_key": key, "site_id": site, "event_id": id}))
            .fetch_status()
    });
    for st in futures::future::join_all(reqs).await {
        assert_eq!(st, 200);
    }
    assert!(ingest.metric("ingest_kafka_queue_full_waits_total").await > 0.0);
    for id in &ids {
        assert!(
            reader.find(id, Duration::from_secs(15)).is_some(),
            "event {id} acknowledged but not in events.raw"
        );
    }
}
