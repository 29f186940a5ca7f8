//! `rivulet-admin import` on the real stack: the importer publishes to the historical
//! lane (`KAFKA_TOPIC_IMPORT`), the enricher's import lane enriches and stores, and the
//! rows are read back from ClickHouse.
//!
//! - the example files of every format (testdata/import): the rows, their types and
//!   their own (past) timestamps; geography from an IP and the device from a user agent
//!   when the source has them, the source's own values otherwise;
//! - a file imported twice: every event stored once;
//! - an import killed mid-way and run again: it resumes from its state file, and every
//!   event is there, once;
//! - export → import into another site: the same rows;
//! - malformed records: reported with their lines and skipped; `--strict` stops at the
//!   first;
//! - imported events travel the import topic, never the live one.
//!
//! The suite has Kafka topics and a consumer group of its own (see `topics`): its
//! enricher reads only what its ingest and its imports send.

use rdkafka::message::Message;
use rivulet_common::schema::events::EventRow;
use rivulet_tests::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use uuid::Uuid;

const LIVE: &str = "rivulet-tests.import.raw";
const IMPORT: &str = "rivulet-tests.import.import";
const GROUP: &str = "rivulet-tests-import";
/// The group the enricher's import lane reads `IMPORT` in (`<KAFKA_GROUP_ID>-import`).
const IMPORT_GROUP: &str = "rivulet-tests-import-import";

struct Fixture {
    ingest: Service,
    _enricher: Service,
}

/// One ingest (for events to export) and one enricher with both lanes, on the suite's
/// topics.
async fn fx() -> &'static Fixture {
    static FX: tokio::sync::OnceCell<Fixture> = tokio::sync::OnceCell::const_new();
    FX.get_or_init(|| async {
        ensure_topic(LIVE, 3).await;
        ensure_topic(IMPORT, 3).await;
        let ingest = start_ingest(&[("KAFKA_TOPIC_RAW", LIVE)]).await;
        let enricher = start_enricher(&[
            ("KAFKA_TOPIC_RAW", LIVE),
            ("KAFKA_TOPIC_IMPORT", IMPORT),
            ("KAFKA_GROUP_ID", GROUP),
            ("ENRICHER_IMPORT_LANE", "true"),
            ("LIFECYCLE_RUNNER", "false"),
        ])
        .await;
        wait_assigned(&enricher).await;
        Fixture {
            ingest,
            _enricher: enricher,
        }
    })
    .await
}

fn import_args<'a>(
    site: &'a str,
    format: &'a str,
    input: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec!["import", "--site", site, "--format", format, input];
    args.extend(extra);
    args
}

/// `rivulet-admin import --site S --format F INPUT EXTRA…` onto the suite's import topic.
fn import(site: u32, format: &str, input: &Path, extra: &[&str]) -> AdminRun {
    let site = site.to_string();
    let input = input.to_str().unwrap();
    admin_run(
        &import_args(&site, format, input, extra),
        &[("KAFKA_TOPIC_IMPORT", IMPORT)],
    )
}

/// The summary a failed import prints to stderr (between a line `{` and a line `}`).
fn summary_in(stderr: &str) -> Value {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines.iter().position(|l| *l == "{").expect("a summary");
    let end = start
        + lines[start..]
            .iter()
            .position(|l| *l == "}")
            .expect("its end");
    serde_json::from_str(&lines[start..=end].join("\n")).unwrap()
}

/// Waits until the site has `n` distinct events; returns how many it has.
async fn stored(site: u32, n: u64, within: Duration) -> u64 {
    let sql = format!("SELECT uniqExact(event_id) FROM events WHERE site_id = {site}");
    wait_count(&sql, n, within).await
}

/// The site's rows, each once (`FINAL`), by event id.
async fn rows_of(site: u32) -> BTreeMap<Uuid, EventRow> {
    let rows: Vec<EventRow> = db()
        .await
        .client
        .query("SELECT ?fields FROM events FINAL WHERE site_id = ?")
        .bind(site)
        .fetch_all()
        .await
        .unwrap();
    rows.into_iter().map(|r| (r.event_id, r)).collect()
}

async fn scalar(sql: &str) -> u64 {
    db().await
        .client
        .query(sql)
        .fetch_one::<u64>()
        .await
        .unwrap()
}

/// Waits until the enricher's import lane has committed every message of `IMPORT`: all
/// that was imported so far is stored.
async fn import_lane_caught_up() {
    wait_group_caught_up(IMPORT_GROUP, IMPORT, Duration::from_secs(300)).await;
}

/// The messages of `reader` for `site`, decoded as `T`: read until `expect` of them
/// came, then until none has come for 3 s (the import was acknowledged before: all it
/// sent is in the topic already, and more would show up at once), at most two minutes.
fn site_messages<T: serde::de::DeserializeOwned>(
    reader: &TopicReader,
    site: u32,
    expect: usize,
) -> Vec<T> {
    #[derive(serde::Deserialize)]
    struct Site {
        site_id: u32,
    }
    let mut found = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut quiet_since = std::time::Instant::now();
    while std::time::Instant::now() < deadline
        && (found.len() < expect || quiet_since.elapsed() < Duration::from_secs(3))
    {
        let Some(m) = reader.next(Duration::from_millis(200)) else {
            continue;
        };
        let payload = m.payload().unwrap_or_default();
        if serde_json::from_slice::<Site>(payload).is_ok_and(|s| s.site_id == site) {
            found.push(serde_json::from_slice(payload).unwrap());
            quiet_since = std::time::Instant::now();
        }
    }
    found
}

/// `site_messages` as JSON.
fn messages_for_site(reader: &TopicReader, site: u32, expect: usize) -> Vec<Value> {
    site_messages(reader, site, expect)
}

/// The event ids of `site_messages`.
fn event_ids_for_site(reader: &TopicReader, site: u32, expect: usize) -> Vec<Uuid> {
    #[derive(serde::Deserialize)]
    struct Id {
        event_id: Uuid,
    }
    site_messages::<Id>(reader, site, expect)
        .into_iter()
        .map(|m| m.event_id)
        .collect()
}

fn secs(rfc3339: &str) -> u32 {
    time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339)
        .unwrap()
        .unix_timestamp() as u32
}

fn id(s: &str) -> Uuid {
    s.parse().unwrap()
}

/// The event id the importer gives an event of a source without Rivulet ids: UUIDv5 of
/// `format:source_id` in the importer's namespace. Checked exactly, because it must not
/// change between versions of the importer: a file imported again after an upgrade must
/// land on the same ids, or every event would be stored twice.
fn derived_id(format: &str, source_id: &str) -> Uuid {
    const NAMESPACE: Uuid = Uuid::from_u128(0x6f1c_1b3e_9d2a_4c5e_8b7f_2a3d_4e5f_6a7b);
    Uuid::new_v5(&NAMESPACE, format!("{format}:{source_id}").as_bytes())
}

fn is_visitor_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[tokio::test]
async fn rivulet_format_rows_are_stored_as_exported_and_bad_lines_are_reported_by_line() {
    fx().await;
    let (site, _) = site_with_key().await;
    let dir = scratch_dir("import-rivulet");
    let file = import_example(&dir, "rivulet.ndjson");
    let run = import(site, "rivulet", &file, &[]);
    let summary = run.json();
    assert_eq!(summary["read"], 10, "{summary}");
    assert_eq!(summary["imported"], 5, "{summary}");
    assert_eq!(
        summary["skipped"],
        json!({"malformed": 2, "bad_timestamp": 1, "missing_field": 1, "too_long": 1}),
        "{summary}"
    );
    assert_eq!(summary["resumed_after"], 0);
    assert_eq!(summary["topic"], IMPORT);
    assert_eq!(
        (&summary["from"], &summary["to"]),
        (
            &json!("2026-11-25T10:00:00Z"),
            &json!("2026-11-25T10:06:00Z")
        )
    );
    for (line, reason) in [
        (4, "malformed"),
        (5, "bad_timestamp"),
        (9, "missing_field"),
        (10, "malformed"),
        (12, "too_long"),
    ] {
        let want = format!("import: skipped line {line}: {reason}: ");
        assert!(
            run.stderr.contains(&want),
            "no `{want}` in:\n{}",
            run.stderr
        );
    }
    assert!(
        !file.with_extension("ndjson.import-state.json").exists(),
        "a finished import leaves no state file"
    );

    assert_eq!(stored(site, 5, Duration::from_secs(60)).await, 5);
    let rows = rows_of(site).await;
    let first = &rows[&id("0190a5a8-7c3e-7000-8000-000000000001")];
    let want = EventRow {
        event_id: first.event_id,
        site_id: site,
        timestamp: secs("2026-11-25T10:00:00Z"),
        received_at: secs("2026-11-25T10:00:01Z"),
        event_type: "pageview".into(),
        hostname: "shop.example.com".into(),
        pathname: "/pricing".into(),
        querystring: "?utm_source=newsletter&utm_medium=email".into(),
        page_title: "Pricing".into(),
        referrer: "https://www.google.com/".into(),
        channel: "Email".into(),
        user_id: "3f2a9c1e5b7d4a60918e2c4b6d8f0a13".into(),
        session_id: "9d1c7e0f2b4a6c8e".into(),
        language: "en-GB".into(),
        screen_width: 1920,
        screen_height: 1080,
        country: "GB".into(),
        region: "GB-ENG".into(),
        city: "London".into(),
        lat: 51.5,
        lon: -0.09,
        browser: "Chrome".into(),
        browser_version: "120".into(),
        operating_system: "Windows".into(),
        operating_system_version: "10".into(),
        device_type: "Desktop".into(),
        ..EventRow::default()
    };
    assert_eq!(first, &want);
    let signup = &rows[&id("0190a5a8-7c3e-7000-8000-000000000002")];
    assert_eq!(
        (
            signup.event_type.as_str(),
            signup.event_name.as_str(),
            signup.properties.as_str()
        ),
        ("custom_event", "signup", r#"{"plan": "pro"}"#)
    );
    assert_eq!(
        signup.timestamp,
        secs("2026-11-25T10:01:00Z"),
        "epoch ms read"
    );
    assert_eq!(
        (signup.user_id.as_str(), signup.anonymous_id.as_str()),
        ("user-42", "device-7")
    );
    assert_eq!(
        (
            signup.tag.as_str(),
            signup.app_version.as_str(),
            signup.feature_flags.as_str()
        ),
        ("spring", "3.1.0", r#"{"new-checkout": "variant-b"}"#)
    );
    assert_eq!(
        (
            signup.browser.as_str(),
            signup.country.as_str(),
            signup.session_id.as_str()
        ),
        ("Firefox", "GB", "9d1c7e0f2b4a6c8e")
    );
    let perf = &rows[&id("0190a5a8-7c3e-7000-8000-000000000005")];
    assert_eq!(perf.event_type, "performance");
    assert_eq!(
        (perf.lcp, perf.cls, perf.inp, perf.fcp, perf.ttfb),
        (
            Some(1830.5),
            Some(0.02),
            Some(120.0),
            Some(900.0),
            Some(180.25)
        )
    );
    assert!(
        is_visitor_id(&perf.user_id),
        "no user id: a visitor id stands in: {perf:?}"
    );
    let error = &rows[&id("0190a5a8-7c3e-7000-8000-000000000006")];
    assert_eq!(
        (error.event_type.as_str(), error.event_name.as_str()),
        ("error", "TypeError")
    );
    let outbound = &rows[&id("0190a5a8-7c3e-7000-8000-000000000007")];
    assert_eq!(outbound.event_type, "outbound");
    assert_eq!(
        outbound.properties,
        r#"{"url": "https://partner.example.org/", "text": "Partner"}"#
    );
    assert_eq!(outbound.ip, "", "the IP is not stored (STORE_IP is off)");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn umami_rows_keep_their_old_timestamps_and_the_sources_geo_and_device() {
    fx().await;
    let (site, _) = site_with_key().await;
    let dir = scratch_dir("import-umami");
    let file = import_example(&dir, "umami-website-events.csv");
    let run = import(site, "umami", &file, &[]);
    let summary = run.json();
    assert_eq!(
        (&summary["read"], &summary["imported"]),
        (&json!(8), &json!(4)),
        "{summary}"
    );
    assert_eq!(
        summary["skipped"],
        json!({"missing_field": 1, "bad_timestamp": 1, "malformed": 1, "unsupported_event": 1})
    );
    for (line, reason) in [
        (6, "missing_field"),
        (7, "bad_timestamp"),
        (8, "malformed"),
        (9, "unsupported_event"),
    ] {
        let want = format!("import: skipped line {line}: {reason}: ");
        assert!(
            run.stderr.contains(&want),
            "no `{want}` in:\n{}",
            run.stderr
        );
    }

    assert_eq!(stored(site, 4, Duration::from_secs(60)).await, 4);
    let rows = rows_of(site).await;
    let ids: BTreeSet<Uuid> = rows.keys().copied().collect();
    let want_ids: BTreeSet<Uuid> = [1, 2, 3, 7]
        .map(|n| derived_id("umami", &format!("c0a80001-0000-4000-8000-00000000000{n}")))
        .into();
    assert_eq!(ids, want_ids, "ids derived from Umami's event ids");
    assert!(rows.keys().all(|id| id.get_version_num() == 5));

    let (visit, session) = (
        "f0e1d2c3-b4a5-4968-8776-655443322110",
        "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d",
    );
    let pricing = &rows[&derived_id("umami", "c0a80001-0000-4000-8000-000000000001")];
    // Twenty months old: far outside the live API's window of 7 days, kept as it is.
    assert_eq!(pricing.timestamp, secs("2025-03-01T09:15:02Z"));
    let want = EventRow {
        event_id: pricing.event_id,
        site_id: site,
        timestamp: pricing.timestamp,
        received_at: pricing.received_at,
        event_type: "pageview".into(),
        hostname: "www.example.com".into(),
        pathname: "/pricing".into(),
        querystring: "?utm_source=newsletter".into(),
        page_title: "Pricing".into(),
        referrer: "https://www.google.com/search?q=analytics".into(),
        channel: pricing.channel.clone(),
        user_id: pricing.user_id.clone(),
        session_id: visit.into(),
        language: "en-GB".into(),
        screen_width: 1920,
        screen_height: 1080,
        country: "GB".into(),
        region: "GB-ENG".into(),
        city: "London".into(),
        browser: "Chrome".into(),
        operating_system: "Windows".into(),
        operating_system_version: "10".into(),
        device_type: "Desktop".into(),
        anonymous_id: session.into(),
        // The enricher derived the visitor id, of the event's day.
        daily_visitor: 1,
        ..EventRow::default()
    };
    assert_eq!(pricing, &want);
    assert!(is_visitor_id(&pricing.user_id), "{pricing:?}");
    let click = &rows[&derived_id("umami", "c0a80001-0000-4000-8000-000000000002")];
    assert_eq!(
        (
            click.event_type.as_str(),
            click.event_name.as_str(),
            click.timestamp
        ),
        ("custom_event", "signup-click", secs("2025-03-01T09:15:40Z"))
    );
    let plans = &rows[&derived_id("umami", "c0a80001-0000-4000-8000-000000000003")];
    assert_eq!(plans.page_title, "Plans,\nand prices");
    let ios = &rows[&derived_id("umami", "c0a80001-0000-4000-8000-000000000007")];
    assert_eq!(
        (
            ios.browser.as_str(),
            ios.operating_system.as_str(),
            ios.device_type.as_str()
        ),
        ("Mobile Safari", "iOS", "Mobile")
    );
    assert_eq!(
        (ios.country.as_str(), ios.region.as_str(), ios.city.as_str()),
        ("US", "US-CA", "San Francisco")
    );
    assert_eq!(ios.timestamp, secs("2025-03-02T17:45:00Z"));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn posthog_rows_get_geo_from_the_ip_and_the_device_from_the_user_agent() {
    fx().await;
    let (site, _) = site_with_key().await;
    let dir = scratch_dir("import-posthog");
    let mut imported = 0;
    for (name, read, events) in [
        ("posthog-events.csv", 10, 6),
        ("posthog-events.jsonl", 8, 3),
        ("posthog-events-ui.csv", 3, 2),
    ] {
        let summary = import(site, "posthog", &import_example(&dir, name), &[]).json();
        assert_eq!(
            (&summary["read"], &summary["imported"]),
            (&json!(read), &json!(events)),
            "{name}: {summary}"
        );
        imported += events;
    }
    // Events of our own: an IP and a user agent that contradict PostHog's own geo and
    // browser (they win), and an IP and a user agent with no such properties at all.
    let ours = dir.join("ours.jsonl");
    let iphone = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1";
    let chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
    let (contradicted, bare) = (Uuid::new_v4().to_string(), Uuid::new_v4().to_string());
    let lines = [
        json!({"uuid": contradicted, "event": "$pageview", "distinct_id": "d-1", "timestamp": "2023-05-01T12:00:00Z",
            "properties": {"$current_url": "https://www.example.com/a", "$ip": "2001:218::1", "$raw_user_agent": iphone,
                "$geoip_country_code": "GB", "$geoip_city_name": "London", "$browser": "Chrome", "$os": "Windows", "$device_type": "Desktop"}}),
        json!({"uuid": bare, "event": "$pageview", "distinct_id": "d-2", "timestamp": "2023-05-01T12:01:00Z",
            "properties": {"$current_url": "https://www.example.com/b", "$ip": "81.2.69.142", "$raw_user_agent": chrome}}),
    ];
    std::fs::write(
        &ours,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    let summary = import(site, "posthog", &ours, &[]).json();
    assert_eq!(summary["imported"], 2, "{summary}");
    imported += 2;

    assert_eq!(
        stored(site, imported, Duration::from_secs(60)).await,
        imported
    );
    let rows = rows_of(site).await;
    let types: BTreeSet<&str> = rows.values().map(|r| r.event_type.as_str()).collect();
    assert_eq!(
        types,
        BTreeSet::from([
            "pageview",
            "custom_event",
            "outbound",
            "performance",
            "error",
            "button_click"
        ])
    );
    let view = &rows[&derived_id("posthog", "018f2c1a-a000-7000-8000-000000000001")];
    assert_eq!(view.timestamp, secs("2024-08-17T05:19:58Z"), "{view:?}");
    assert_eq!(
        (view.country.as_str(), view.city.as_str()),
        ("GB", "London")
    );
    assert!(
        (view.lat - 51.5142).abs() < 1e-3 && (view.lon + 0.0931).abs() < 1e-3,
        "{view:?}"
    );
    assert_eq!(
        (
            view.browser.as_str(),
            view.browser_version.as_str(),
            view.operating_system.as_str(),
            view.device_type.as_str()
        ),
        ("Chrome", "120", "Windows", "Desktop")
    );
    assert_eq!(
        view.anonymous_id, "018f2c1a-9b3e-7c4d-8e5f-6a7b8c9d0e1f",
        "{view:?}"
    );
    let plan = &rows[&derived_id("posthog", "018f2c1a-a000-7000-8000-000000000002")];
    assert_eq!(
        (plan.user_id.as_str(), plan.properties.as_str()),
        ("user-42@example.com", r#"{"plan":"pro","seats":3}"#)
    );

    let c = &rows[&derived_id("posthog", &contradicted)];
    assert_eq!(c.country, "JP", "the IP's country, not PostHog's GB: {c:?}");
    assert_ne!(c.city, "London", "{c:?}");
    assert_eq!(
        (
            c.browser.as_str(),
            c.operating_system.as_str(),
            c.device_type.as_str()
        ),
        ("Mobile Safari", "iOS", "Mobile"),
        "the user agent's device, not PostHog's: {c:?}"
    );
    assert_eq!(c.timestamp, secs("2023-05-01T12:00:00Z"));
    let b = &rows[&derived_id("posthog", &bare)];
    assert_eq!(
        (b.country.as_str(), b.region.as_str(), b.city.as_str()),
        ("GB", "GB-ENG", "London"),
        "{b:?}"
    );
    assert_eq!(
        (
            b.browser.as_str(),
            b.browser_version.as_str(),
            b.device_type.as_str()
        ),
        ("Chrome", "120", "Desktop")
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_file_imported_twice_is_stored_once() {
    fx().await;
    let (site, _) = site_with_key().await;
    let dir = scratch_dir("import-twice");
    let file = import_example(&dir, "umami-website-events.csv");
    let reader = TopicReader::from_end(IMPORT);
    let first = import(site, "umami", &file, &[]).json();
    let second = import(site, "umami", &file, &[]).json();
    assert_eq!(
        (&first["imported"], &second["imported"]),
        (&json!(4), &json!(4)),
        "both runs send every event"
    );
    assert_eq!(
        second["resumed_after"], 0,
        "a finished import is not resumed"
    );
    let sent = messages_for_site(&reader, site, 8);
    let ids: BTreeSet<&str> = sent
        .iter()
        .map(|m| m["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        (sent.len(), ids.len()),
        (8, 4),
        "Kafka got each event twice, with the same id"
    );

    import_lane_caught_up().await;
    assert_eq!(stored(site, 4, Duration::from_secs(60)).await, 4);
    assert_eq!(
        scalar(&format!(
            "SELECT count() FROM events FINAL WHERE site_id = {site}"
        ))
        .await,
        4
    );
    assert_eq!(
        scalar(&format!(
            "SELECT uniqExact(event_id) FROM events WHERE site_id = {site}"
        ))
        .await,
        4
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// One generated event of the rivulet format: `n`'s id under `run`, one second apart
/// from 2025-06-01 (well over 7 days ago, all in one month).
///
/// `n` goes into the first half of the id: ClickHouse 18.16's `uniqExact` of a UUID
/// hashes one half of it, the first, so ids that share it (the same 8 bytes and a count
/// in the rest) take it quadratic time: 5 s for 40,000 of them, hours for a million.
fn generated_line(run: Uuid, n: u64) -> String {
    let id = Uuid::from_u128(run.as_u128() ^ (u128::from(n) << 64));
    let ts = 1_748_736_000_000_u64 + n * 1000;
    format!(
        "{{\"event_id\":\"{id}\",\"timestamp\":{ts},\"type\":\"pageview\",\"hostname\":\"gen.example.com\",\
         \"pathname\":\"/p/{}\",\"user_id\":\"{:032x}\",\"session_id\":\"s-{}\",\"channel\":\"Direct\",\
         \"country\":\"DE\",\"browser\":\"Firefox\",\"device_type\":\"Desktop\",\"is_bot\":0}}\n",
        n % 100,
        n % 5000,
        n % 20_000
    )
}

fn read_state(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

#[tokio::test]
async fn an_import_killed_mid_way_resumes_from_its_state_file_and_stores_every_event_once() {
    const TOTAL: u64 = 200_000;
    fx().await;
    let (site, _) = site_with_key().await;
    let dir = scratch_dir("import-resume");
    let file = dir.join("big.ndjson");
    let run = Uuid::new_v4();
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
        for n in 0..TOTAL {
            out.write_all(generated_line(run, n).as_bytes()).unwrap();
        }
        out.flush().unwrap();
    }
    let state = dir.join("big.state.json");
    let topic = TopicReader::from_end(IMPORT);

    // The first run reads the file from a pipe that this test fills at about 20,000
    // lines a second, so that it is surely killed mid-way: once its state file says
    // 20,000 records are done, it gets SIGKILL.
    let site_arg = site.to_string();
    let state_arg = state.to_str().unwrap().to_string();
    let log = std::fs::File::create(dir.join("first.log")).unwrap();
    let mut child = admin_command(
        &import_args(&site_arg, "rivulet", "-", &["--state", &state_arg]),
        &[("KAFKA_TOPIC_IMPORT", IMPORT)],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::from(log.try_clone().unwrap()))
    .stderr(Stdio::from(log))
    .spawn()
    .unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut pipe = child.stdin.take().unwrap();
    let mut written = 0usize;
    // Once the state says 20,000 are done, half a second more (less than the second
    // between two saves), so that events acknowledged after the last save are in Kafka
    // when the import dies: those are the ones the second run sends again.
    let mut saved_at = None;
    let saved_at_kill = loop {
        let saved = read_state(&state).and_then(|s| s["records_done"].as_u64());
        if let Some(done) = saved.filter(|d| *d >= 20_000) {
            let since = *saved_at.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() >= Duration::from_millis(500) {
                break done;
            }
        }
        assert!(
            written < lines.len(),
            "the whole file went in before the state said 20,000 were done ({saved:?})"
        );
        let chunk = lines[written..(written + 2000).min(lines.len())].concat();
        pipe.write_all(chunk.as_bytes())
            .expect("the import reads its input");
        written += 2000;
        std::thread::sleep(Duration::from_millis(100));
    };
    child.kill().unwrap();
    let status = child.wait().unwrap();
    drop(pipe);
    assert!(!status.success(), "killed: {status}");
    let saved = read_state(&state).unwrap();
    assert_eq!(
        (&saved["site_id"], &saved["format"]),
        (&json!(site), &json!("rivulet"))
    );
    let saved = saved["records_done"].as_u64().unwrap();
    assert!(saved >= saved_at_kill);
    assert!(
        (saved as usize) <= written && (written as u64) < TOTAL,
        "killed mid-way: {saved} saved, {written} of {TOTAL} written"
    );
    eprintln!("killed after {written} lines written, {saved} records saved as done");

    // What the first run got into Kafka: every record it saved as done, and maybe some
    // after (acknowledged, not saved yet).
    let mut sent = event_ids_for_site(&topic, site, saved as usize);
    let first_run = sent.len() as u64;
    assert!(
        first_run >= saved,
        "{first_run} sent, {saved} saved as done"
    );

    // The second run, on the whole file with the same state: it goes on from there.
    let summary = import(site, "rivulet", &file, &["--state", &state_arg]).json();
    assert_eq!(summary["resumed_after"], saved, "{summary}");
    assert_eq!(summary["read"], TOTAL - saved, "{summary}");
    assert_eq!(summary["imported"], TOTAL - saved, "{summary}");
    assert!(!state.exists(), "a finished import removes its state file");

    let second_run = event_ids_for_site(&topic, site, (TOTAL - saved) as usize);
    assert_eq!(
        second_run.len() as u64,
        TOTAL - saved,
        "the second run sends what was not saved as done, once"
    );
    sent.extend(second_run);
    let distinct: std::collections::HashSet<&Uuid> = sent.iter().collect();
    assert_eq!(
        distinct.len() as u64,
        TOTAL,
        "every event of the file went through Kafka"
    );
    eprintln!(
        "{} events sent by both runs (acknowledged after the first run's last save)",
        first_run - saved
    );

    let n = stored(site, TOTAL, Duration::from_secs(300)).await;
    assert_eq!(n, TOTAL, "every event of the file is stored");
    let final_rows = scalar(&format!(
        "SELECT count() FROM events FINAL WHERE site_id = {site}"
    ))
    .await;
    assert_eq!(final_rows, TOTAL, "and each once");
    let outside = scalar(&format!(
        "SELECT count() FROM events WHERE site_id = {site} AND \
         (timestamp < toDateTime(1748736000) OR timestamp >= toDateTime({}))",
        1_748_736_000 + TOTAL
    ))
    .await;
    assert_eq!(outside, 0, "only the file's events, at their own times");
    let raw = scalar(&format!(
        "SELECT count() FROM events WHERE site_id = {site}"
    ))
    .await;
    eprintln!(
        "{raw} rows before ClickHouse's merges for {TOTAL} events: {} duplicates not merged yet",
        raw - TOTAL
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Posts events of every kind through ingest; their ids.
async fn live_events(site: u32, key: &str) -> Vec<String> {
    const CHROME_WIN: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
    const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1";
    const GOOGLEBOT: &str =
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
    let t = (now_ms() / 1000 - 7200) * 1000;
    let events = [
        json!({"pathname": "/pricing", "hostname": "shop.example.com", "querystring": "?utm_source=newsletter&utm_medium=email",
            "page_title": "Pricing, \"quoted\"", "language": "en-GB", "screenWidth": 1920, "screenHeight": 1080,
            "ip_address": "81.2.69.142", "user_agent": CHROME_WIN}),
        json!({"type": "custom_event", "event_name": "signup", "properties": "{\"plan\":\"pro\",\"seats\":3,\"emoji\":\"\u{e9}\u{1f680}\"}",
            "user_id": "rt-user", "anonymous_id": "rt-device", "tag": "spring", "app_version": "3.1.0", "device_model": "Pixel 8",
            "feature_flags": {"new-checkout": "variant-b"}, "ip_address": "81.2.69.142", "user_agent": CHROME_WIN}),
        json!({"type": "performance", "lcp": 1830.5, "cls": 0.021, "inp": 96, "fcp": 912.7, "ttfb": null, "pathname": "/"}),
        json!({"type": "outbound", "properties": "{\"url\":\"https://partner.example.org/\",\"text\":\"Partner\"}"}),
        json!({"type": "error", "event_name": "TypeError", "properties": "{\"message\":\"x is undefined\",\"lineNumber\":12}"}),
        json!({"pathname": "/m", "ip_address": "2001:218::1", "user_agent": IPHONE, "referrer": "https://www.google.com/search?q=x"}),
        json!({"pathname": "/robots", "ip_address": "66.249.66.1", "user_agent": GOOGLEBOT}),
        json!({"type": "button_click", "properties": "{\"text\":\"Buy\"}"}),
        json!({"type": "copy", "properties": "{\"sourceElement\":\"p\",\"textLength\":12}"}),
        json!({"type": "form_submit", "properties": "{\"formId\":\"signup\",\"fieldCount\":3}"}),
        json!({"type": "input_change", "properties": "{\"element\":\"input\",\"inputName\":\"email\"}"}),
        // Text a spreadsheet would run: the CSV export neutralises it, the import undoes that.
        json!({"type": "custom_event", "event_name": "=HYPERLINK(\"https://evil.example\",\"x\")",
            "page_title": "-1 offer", "tag": "@team", "user_id": "+u", "anonymous_id": "'quoted",
            "pathname": "/f"}),
    ];
    let mut ids = Vec::new();
    for (i, fields) in events.iter().enumerate() {
        let id = Uuid::new_v4().to_string();
        let mut body = json!({"api_key": key, "site_id": site, "event_id": id, "timestamp": t + i as i64 * 61_000});
        body.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        let r = http()
            .post(format!("{}/api/track", fx().await.ingest.url))
            .json(&body)
            .fetch()
            .await;
        assert_eq!(r.status(), 200, "{body}");
        ids.push(id);
    }
    ids
}

#[tokio::test]
async fn an_export_imported_into_another_site_gives_the_same_rows() {
    fx().await;
    let (from, key) = site_with_key().await;
    let (to, _) = site_with_key().await;
    let dir = scratch_dir("import-roundtrip");
    // Live events of every kind, and old ones brought by an import.
    let live = live_events(from, &key).await;
    let old = dir.join("old.ndjson");
    let run = Uuid::new_v4();
    std::fs::write(
        &old,
        (0..5).map(|n| generated_line(run, n)).collect::<String>(),
    )
    .unwrap();
    assert_eq!(import(from, "rivulet", &old, &[]).json()["imported"], 5);
    let total = live.len() as u64 + 5;
    assert_eq!(stored(from, total, Duration::from_secs(60)).await, total);

    let export = dir.join("export.ndjson");
    let out = admin_run(
        &[
            "export",
            "--site",
            &from.to_string(),
            "--output",
            export.to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("{total} events exported")),
        "{}",
        out.stderr
    );
    let summary = import(to, "rivulet", &export, &[]).json();
    assert_eq!(summary["imported"], total, "{summary}");
    assert_eq!(summary["skipped"], json!({}), "{summary}");
    assert_eq!(stored(to, total, Duration::from_secs(60)).await, total);

    // The same rows, column by column. Only site_id differs: the event ids are kept
    // (the rivulet format carries them), and so are the enriched columns and
    // received_at (the import's preset), the visitor and session ids included. The
    // export has no user agent and (without STORE_IP) no IP, so nothing is derived
    // again: the stored results are taken as they were.
    let a = rows_of(from).await;
    let b = rows_of(to).await;
    assert_eq!(a.len() as u64, total);
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "the same event ids"
    );
    // And `daily_visitor`: an imported visitor id is never taken for a day's own (the
    // Stats API's rollup then counts it as an id that may recur: exact either way).
    for (id, row) in &a {
        let mut copy = b[id].clone();
        assert_eq!(copy.site_id, to);
        assert_eq!(copy.daily_visitor, 0, "event {id}");
        copy.site_id = from;
        copy.daily_visitor = row.daily_visitor;
        assert_eq!(&copy, row, "event {id}");
    }
    assert!(
        a.values().any(|r| r.daily_visitor == 1),
        "the live events without a user id carry the enricher's visitor ids"
    );
    // What the live rows hold is not trivially empty: the comparison above covers it.
    let view = &a[&id(&live[0])];
    assert_eq!(
        (
            view.country.as_str(),
            view.browser.as_str(),
            view.channel.as_str()
        ),
        ("GB", "Chrome", "Email")
    );
    let signup = &a[&id(&live[1])];
    assert_eq!(signup.feature_flags, r#"{"new-checkout":"variant-b"}"#);

    // The CSV export into a third site: the same rows again. Its text cells that a
    // spreadsheet would run carry a leading `'`, which the import takes off.
    let (third, _) = site_with_key().await;
    let csv = dir.join("export.csv");
    let out = admin_run(
        &[
            "export",
            "--site",
            &from.to_string(),
            "--format",
            "csv",
            "--output",
            csv.to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", out.stderr);
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(
        text.contains(",\"'=HYPERLINK(\"\"https://evil.example\"\",\"\"x\"\")\","),
        "{text}"
    );
    assert!(text.contains(",'-1 offer,"), "{text}");
    let summary = import(third, "rivulet", &csv, &[]).json();
    assert_eq!(summary["imported"], total, "{summary}");
    assert_eq!(summary["skipped"], json!({}), "{summary}");
    assert_eq!(stored(third, total, Duration::from_secs(60)).await, total);
    let c = rows_of(third).await;
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        c.keys().collect::<Vec<_>>(),
        "the same event ids"
    );
    for (id, row) in &a {
        let mut copy = c[id].clone();
        copy.site_id = from;
        copy.daily_visitor = row.daily_visitor;
        assert_eq!(&copy, row, "event {id}, through CSV");
    }
    let formula = &c[&id(live.last().unwrap())];
    assert_eq!(
        (formula.event_name.as_str(), formula.page_title.as_str()),
        ("=HYPERLINK(\"https://evil.example\",\"x\")", "-1 offer")
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn strict_stops_at_the_first_bad_record_and_a_second_run_goes_on_from_there() {
    fx().await;
    let (site, _) = site_with_key().await;
    let dir = scratch_dir("import-strict");
    let file = import_example(&dir, "rivulet.ndjson");
    let reader = TopicReader::from_end(IMPORT);
    let run = import(site, "rivulet", &file, &["--strict"]);
    assert!(!run.status.success(), "--strict fails on line 4");
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(
        run.stderr
            .contains("import: skipped line 4: malformed: invalid JSON"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("error: import stopped at line 4: malformed: "),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("line 5:"),
        "nothing read after the first bad record: {}",
        run.stderr
    );
    let summary = summary_in(&run.stderr);
    assert_eq!(
        (&summary["read"], &summary["imported"]),
        (&json!(3), &json!(2)),
        "{summary}"
    );
    let sent = messages_for_site(&reader, site, 2);
    assert_eq!(
        sent.len(),
        2,
        "only the records before the bad one were sent"
    );
    let state = file.with_extension("ndjson.import-state.json");
    assert_eq!(
        read_state(&state).expect("the state of the stopped import")["records_done"],
        2
    );

    // Without --strict it goes on after the two events, and skips the rest's bad lines.
    let summary = import(site, "rivulet", &file, &[]).json();
    assert_eq!(summary["resumed_after"], 2, "{summary}");
    assert_eq!(summary["imported"], 3, "{summary}");
    assert_eq!(summary["skipped"]["malformed"], 2, "{summary}");
    assert_eq!(stored(site, 5, Duration::from_secs(60)).await, 5);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn imported_events_travel_the_import_topic_never_the_live_one() {
    fx().await;
    let (site, _) = site_with_key().await;
    let dir = scratch_dir("import-lane");
    let file = import_example(&dir, "umami-website-events.csv");
    let live = TopicReader::from_end(LIVE);
    let historical = TopicReader::from_end(IMPORT);
    let summary = import(site, "umami", &file, &[]).json();
    assert_eq!(summary["topic"], IMPORT);
    let on_import = messages_for_site(&historical, site, 4);
    assert_eq!(on_import.len(), 4, "{on_import:?}");
    assert!(
        on_import.iter().all(|m| m["key_id"] == "import:umami"),
        "{on_import:?}"
    );
    assert!(
        messages_for_site(&live, site, 0).is_empty(),
        "no imported event on the live topic"
    );
    // And the enricher's import lane stored them.
    assert_eq!(stored(site, 4, Duration::from_secs(60)).await, 4);
    let _ = std::fs::remove_dir_all(dir);
}
