//! Client time (docs/design.md, "Wire contract", `timestamp` and `sent_at`): an event's
//! `timestamp` is corrected by the client's `sent_at` for the client's clock,
//! `received_at − (sent_at − timestamp)`, clamped to the receive time when that lies more
//! than 23 hours ahead (or more than 7 days back); a batch's envelope `sent_at` is its
//! events' unless they give their own; the client's values go to Kafka as sent.

use crate::{assert_field_error, field_error};
use rivulet_common::event::RawEvent;
use rivulet_ingest::testing::{key_of, openapi, TestIngest, SITE};
use serde_json::{json, Value};

const HOUR: i64 = 3600 * 1000;

fn now_ms() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// Posts one event with `fields`; asserts 200 and returns what went to Kafka.
async fn track(ingest: &TestIngest, fields: Value) -> RawEvent {
    let before = ingest.sink().events().len();
    let r = ingest.post_json("/api/track", &ingest.event(fields)).await;
    assert_eq!(r.status, 200, "{}", r.json());
    let events = ingest.sink().events();
    assert_eq!(events.len(), before + 1);
    events.into_iter().last().unwrap()
}

#[tokio::test]
async fn an_offline_events_time_is_corrected_for_a_slow_clock() {
    let ingest = TestIngest::new();
    // A client whose clock is 1 h slow sends, now, an event it queued 2 h ago. Its clock
    // read now − 1 h when it sent the event, and now − 3 h when the event happened.
    let now = now_ms();
    let sent_at = now - HOUR;
    let timestamp = now - 3 * HOUR;
    for (ts, sent) in [
        (json!(timestamp), json!(sent_at)),
        (json!(rfc3339(timestamp)), json!(rfc3339(sent_at))),
    ] {
        let ev = track(&ingest, json!({"timestamp": ts, "sent_at": sent})).await;
        // received_at − (sent_at − timestamp) = received_at − ((now − 1 h) − (now − 3 h))
        //                                      = received_at − 2 h
        assert_eq!(ev.timestamp, ev.received_at - 2 * HOUR, "{ts} {sent}");
        assert!((ev.received_at - now).abs() < 60_000);
        // The client's own values, as sent, for audit.
        assert_eq!(ev.client_timestamp, Some(timestamp));
        assert_eq!(ev.sent_at, Some(sent_at));
    }
    // Without sent_at the same timestamp is used as it is (within 7 days): an hour late.
    let ev = track(&ingest, json!({ "timestamp": timestamp })).await;
    assert_eq!(
        (ev.timestamp, ev.client_timestamp, ev.sent_at),
        (timestamp, Some(timestamp), None)
    );
}

#[tokio::test]
async fn a_fast_clock_is_corrected_too_where_its_timestamp_alone_would_be_refused() {
    let ingest = TestIngest::new();
    // A clock 5 h fast, an event 10 s old: its timestamp alone lies 5 h ahead, beyond
    // the 10 minutes a timestamp may lie ahead, and would give the receive time.
    let now = now_ms();
    let (timestamp, sent_at) = (now + 5 * HOUR - 10_000, now + 5 * HOUR);
    let ev = track(&ingest, json!({"timestamp": timestamp, "sent_at": sent_at})).await;
    // received_at − (sent_at − timestamp) = received_at − 10 s
    assert_eq!(ev.timestamp, ev.received_at - 10_000);
    let ev = track(&ingest, json!({ "timestamp": timestamp })).await;
    assert_eq!(ev.timestamp, ev.received_at);
}

#[tokio::test]
async fn a_corrected_time_more_than_23_hours_ahead_is_clamped_to_the_receive_time() {
    let ingest = TestIngest::new();
    let now = now_ms();
    // A timestamp 24 h after the same client's sent_at: received_at + 24 h. Clamped.
    let ev = track(
        &ingest,
        json!({"timestamp": now + 24 * HOUR, "sent_at": now}),
    )
    .await;
    assert_eq!(ev.timestamp, ev.received_at);
    assert_eq!(
        (ev.client_timestamp, ev.sent_at),
        (Some(now + 24 * HOUR), Some(now))
    );
    // 22 h after it: received_at + 22 h, kept.
    let ev = track(
        &ingest,
        json!({"timestamp": now + 22 * HOUR, "sent_at": now}),
    )
    .await;
    assert_eq!(ev.timestamp, ev.received_at + 22 * HOUR);
    // And, as without sent_at, more than 7 days old once corrected: the receive time.
    let ev = track(
        &ingest,
        json!({"timestamp": now - 8 * 24 * HOUR, "sent_at": now}),
    )
    .await;
    assert_eq!(ev.timestamp, ev.received_at);
}

#[tokio::test]
async fn sent_at_without_a_timestamp_is_kept_and_the_receive_time_used() {
    let ingest = TestIngest::new();
    let sent_at = now_ms() - 30 * 60_000;
    let ev = track(&ingest, json!({ "sent_at": sent_at })).await;
    assert_eq!(ev.timestamp, ev.received_at);
    assert_eq!((ev.client_timestamp, ev.sent_at), (None, Some(sent_at)));
    // And an event with neither carries neither: the message is as before.
    let ev = track(&ingest, json!({})).await;
    assert_eq!((ev.client_timestamp, ev.sent_at), (None, None));
    let text = serde_json::to_string(&ev).unwrap();
    assert!(
        !text.contains("client_timestamp") && !text.contains("sent_at"),
        "{text}"
    );
}

#[tokio::test]
async fn a_batchs_sent_at_is_its_events_unless_they_give_their_own() {
    let ingest = TestIngest::new();
    let now = now_ms();
    // The envelope's clock is 1 h slow; the third event's own sent_at says 3 h slow.
    let envelope_sent = now - HOUR;
    let ts = now - 4 * HOUR;
    let batch = json!({"api_key": key_of(SITE), "site_id": SITE, "sent_at": rfc3339(envelope_sent),
    "events": [
        {"pathname": "/a", "timestamp": ts},
        {"pathname": "/b", "timestamp": ts, "sent_at": null},
        {"pathname": "/c", "timestamp": ts, "sent_at": now - 3 * HOUR},
        {"pathname": "/d"},
    ]});
    let r = ingest.post_json("/api/track/batch", &batch).await;
    assert_eq!(r.status, 200, "{}", r.json());
    assert_eq!(r.json()["accepted"], 4);
    let events = ingest.sink().events();
    let by_path = |p: &str| {
        events
            .iter()
            .find(|e| e.pathname.as_deref() == Some(p))
            .unwrap()
            .clone()
    };
    // The envelope's: received_at − ((now − 1 h) − (now − 4 h)) = received_at − 3 h.
    for p in ["/a", "/b"] {
        let ev = by_path(p);
        assert_eq!(ev.timestamp, ev.received_at - 3 * HOUR, "{p}");
        assert_eq!(ev.sent_at, Some(envelope_sent), "{p}");
        assert_eq!(ev.client_timestamp, Some(ts), "{p}");
    }
    // Its own: received_at − ((now − 3 h) − (now − 4 h)) = received_at − 1 h.
    let c = by_path("/c");
    assert_eq!(c.timestamp, c.received_at - HOUR);
    assert_eq!(c.sent_at, Some(now - 3 * HOUR));
    // No timestamp: the receive time, with the envelope's sent_at kept.
    let d = by_path("/d");
    assert_eq!(
        (d.timestamp, d.client_timestamp, d.sent_at),
        (d.received_at, None, Some(envelope_sent))
    );
}

#[tokio::test]
async fn an_invalid_sent_at_is_a_400_naming_it() {
    let ingest = TestIngest::new();
    let doc = openapi::document();
    let message = "sent_at must be an RFC 3339 date-time or epoch milliseconds";
    for bad in [
        json!("yesterday"),
        json!(0),
        json!(-5),
        json!(1.5),
        json!(true),
        json!([1]),
    ] {
        // On one event.
        let r = ingest
            .post_json("/api/track", &ingest.event(json!({ "sent_at": bad })))
            .await;
        assert_field_error(&r, "sent_at", &bad.to_string());
        assert_eq!(field_error(&r, "sent_at"), message);
        openapi::assert_documented(&doc, "/api/track", 400, &r.json());

        // On a batch's envelope: the whole batch, as a bad site_id.
        let batch = json!({"api_key": key_of(SITE), "site_id": SITE, "sent_at": bad,
            "events": [{"pathname": "/x"}]});
        let r = ingest.post_json("/api/track/batch", &batch).await;
        assert_field_error(&r, "sent_at", &bad.to_string());
        assert_eq!(field_error(&r, "sent_at"), message);
        openapi::assert_documented(&doc, "/api/track/batch", 400, &r.json());

        // On one event of a batch: that event, the others accepted.
        let batch = json!({"api_key": key_of(SITE), "site_id": SITE, "sent_at": now_ms(),
            "events": [{"pathname": "/ok"}, {"pathname": "/bad", "sent_at": bad}]});
        let r = ingest.post_json("/api/track/batch", &batch).await;
        assert_eq!(r.status, 200, "{}", r.json());
        let b = r.json();
        assert_eq!(
            (b["accepted"].as_u64(), b["rejected"].as_u64()),
            (Some(1), Some(1))
        );
        assert_eq!(
            b["results"][1]["details"]["fieldErrors"]["sent_at"][0], message,
            "{b}"
        );
        openapi::assert_documented(&doc, "/api/track/batch", 200, &b);
    }
    assert!(ingest
        .sink()
        .events()
        .iter()
        .all(|e| e.pathname.as_deref() == Some("/ok")));
}
