//! Client time on the real stack (docs/design.md, "The client's clock"): an event sent
//! with `sent_at` goes through rivulet-ingest, Kafka and rivulet-enricher into ClickHouse
//! with its `timestamp` corrected for the client's clock and the client's own `timestamp`
//! and `sent_at` kept in `client_timestamp` and `sent_at`; one corrected to more than 23
//! hours ahead is stored at the receive time; ingest's metrics count both.
//!
//! The suite has a Kafka topic and a consumer group of its own (see `topics`), so its
//! enricher reads only what its ingest sends.

use clickhouse::Row;
use rivulet_tests::lifecycle::rfc3339;
use rivulet_tests::*;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;
use uuid::Uuid;

const TOPIC: &str = "rivulet-tests.client-time.raw";
const GROUP: &str = "rivulet-tests-client-time";
const HOUR: i64 = 3600 * 1000;

#[derive(Debug, Row, Deserialize)]
struct Stored {
    #[serde(with = "clickhouse::serde::uuid")]
    event_id: Uuid,
    timestamp: u32,
    received_at: u32,
    client_timestamp: Option<u32>,
    sent_at: Option<u32>,
}

async fn post(url: String, body: Value) -> Value {
    let r = http().post(url).json(&body).fetch().await;
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

/// The rows of `ids` once all are in ClickHouse, by id.
async fn stored(site: u32, ids: &[Uuid]) -> Vec<Stored> {
    let sql = format!("SELECT count() FROM events FINAL WHERE site_id = {site}");
    assert_eq!(
        wait_count(&sql, ids.len() as u64, Duration::from_secs(60)).await,
        ids.len() as u64,
        "the events reached ClickHouse"
    );
    let mut rows: Vec<Stored> = db()
        .await
        .client
        .query("SELECT ?fields FROM events FINAL WHERE site_id = ?")
        .bind(site)
        .fetch_all()
        .await
        .unwrap();
    rows.sort_by_key(|r| ids.iter().position(|id| *id == r.event_id));
    assert_eq!(
        rows.iter().map(|r| r.event_id).collect::<Vec<_>>(),
        ids,
        "one row per event"
    );
    rows
}

#[tokio::test]
async fn a_corrected_event_lands_with_its_corrected_time_and_the_clients_own() {
    ensure_topic(TOPIC, 3).await;
    let ingest = start_ingest(&[("KAFKA_TOPIC_RAW", TOPIC)]).await;
    let enricher = start_enricher(&[
        ("KAFKA_TOPIC_RAW", TOPIC),
        ("KAFKA_GROUP_ID", GROUP),
        ("ENRICHER_IMPORT_LANE", "false"),
        ("LIFECYCLE_RUNNER", "false"),
    ])
    .await;
    wait_assigned(&enricher).await;
    let (site, key) = site_with_key().await;
    let ids: Vec<Uuid> = (0..4).map(|_| Uuid::now_v7()).collect();
    let now = now_ms();

    // 1. A client whose clock is 1 h slow sends an event it queued 2 h ago: its clock read
    //    now − 3 h when the event happened and now − 1 h when it sent it.
    let (ts1, sent1) = (now - 3 * HOUR, now - HOUR);
    post(
        format!("{}/api/track", ingest.url),
        json!({"api_key": key, "site_id": site, "pathname": "/offline", "event_id": ids[0],
            "timestamp": ts1, "sent_at": rfc3339(sent1)}),
    )
    .await;
    // 2. A corrected time 24 h ahead (the timestamp a day after the same clock's sent_at):
    //    clamped to the receive time.
    let (ts2, sent2) = (now + 24 * HOUR, now);
    post(
        format!("{}/api/track", ingest.url),
        json!({"api_key": key, "site_id": site, "pathname": "/ahead", "event_id": ids[1],
            "timestamp": ts2, "sent_at": sent2}),
    )
    .await;
    // 3, 4. A batch whose envelope's clock is 5 h fast: an event 10 s old by it; and one
    //    with its own sent_at (a clock 1 h slow), 30 min old.
    let sent3 = now + 5 * HOUR;
    let (ts4, sent4) = (now - HOUR - 30 * 60_000, now - HOUR);
    let batch = post(
        format!("{}/api/track/batch", ingest.url),
        json!({"api_key": key, "site_id": site, "sent_at": sent3, "events": [
            {"pathname": "/fast", "event_id": ids[2], "timestamp": sent3 - 10_000},
            {"pathname": "/own", "event_id": ids[3], "timestamp": ts4, "sent_at": sent4},
        ]}),
    )
    .await;
    assert_eq!(batch["accepted"], 2, "{batch}");

    let rows = stored(site, &ids).await;
    let secs = |ms: i64| (ms / 1000) as u32;
    // received_at − (sent_at − timestamp) = received_at − ((now − 1 h) − (now − 3 h))
    //                                      = received_at − 2 h, to the second (the
    // correction is whole milliseconds of whole hours: the seconds are received_at's).
    assert_eq!(
        rows[0].timestamp,
        rows[0].received_at - 2 * 3600,
        "{:?}",
        rows[0]
    );
    assert_eq!(
        (rows[0].client_timestamp, rows[0].sent_at),
        (Some(secs(ts1)), Some(secs(sent1)))
    );
    assert!((i64::from(rows[0].received_at) - now / 1000).abs() < 60);
    // Clamped: the receive time; the client's values kept as sent.
    assert_eq!(rows[1].timestamp, rows[1].received_at, "{:?}", rows[1]);
    assert_eq!(
        (rows[1].client_timestamp, rows[1].sent_at),
        (Some(secs(ts2)), Some(secs(sent2)))
    );
    // received_at − 10 s, give or take the second the milliseconds fall in.
    let age = i64::from(rows[2].received_at) - i64::from(rows[2].timestamp);
    assert!((10..=11).contains(&age), "{:?}", rows[2]);
    assert_eq!(
        (rows[2].client_timestamp, rows[2].sent_at),
        (Some(secs(sent3 - 10_000)), Some(secs(sent3)))
    );
    let age = i64::from(rows[3].received_at) - i64::from(rows[3].timestamp);
    assert!((30 * 60..=30 * 60 + 1).contains(&age), "{:?}", rows[3]);
    assert_eq!(rows[3].sent_at, Some(secs(sent4)));

    // What ingest counted: the clamped event, and each event's skew (two clocks behind by
    // about an hour, two ahead: 5 h and a second's worth of the same-clock event).
    assert_eq!(
        ingest
            .metric("ingest_client_timestamps_clamped_total{bound=\"future\"}")
            .await,
        1.0
    );
    let count = |sign: &str| format!("ingest_client_clock_skew_seconds_count{{sign=\"{sign}\"}}");
    assert_eq!(ingest.metric(&count("behind")).await, 3.0);
    assert_eq!(ingest.metric(&count("ahead")).await, 1.0);
    // The skew's own buckets (seconds to a year), not the request latencies'.
    let bucket =
        |le: &str| format!("ingest_client_clock_skew_seconds_bucket{{sign=\"ahead\",le=\"{le}\"}}");
    assert_eq!(ingest.metric(&bucket("3600")).await, 0.0);
    assert_eq!(ingest.metric(&bucket("21600")).await, 1.0);
}
