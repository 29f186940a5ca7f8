//! The event types and fields added for Rybbit's tracker (docs/design.md, "Event
//! types"): what each type requires, and what is published.

use crate::{assert_field_error, field_error};
use rivulet_common::event::EventType;
use rivulet_ingest::testing::TestIngest;
use serde_json::{json, Value};

/// Posts an event of `kind` with `fields`; the reply.
async fn post(ingest: &TestIngest, kind: &str, fields: Value) -> rivulet_ingest::testing::Reply {
    let mut ev = ingest.event(fields);
    ev["type"] = json!(kind);
    ingest.post_json("/api/track", &ev).await
}

#[tokio::test]
async fn every_type_is_accepted_with_what_it_requires() {
    let ingest = TestIngest::new();
    let props = |v: Value| json!({ "properties": v.to_string() });
    let cases: Vec<(&str, Value)> = vec![
        ("pageview", json!({"pathname": "/"})),
        ("custom_event", json!({"event_name": "signup"})),
        (
            "performance",
            json!({"lcp": 1200.5, "cls": 0.02, "inp": 80, "fcp": 900, "ttfb": null}),
        ),
        (
            "outbound",
            props(json!({"url": "https://elsewhere.example/a", "text": "go", "target": "_blank"})),
        ),
        (
            "error",
            json!({"event_name": "TypeError", "properties": json!({"message": "x is undefined", "lineNumber": 3}).to_string()}),
        ),
        ("button_click", props(json!({"anything": [1, 2]}))),
        (
            "copy",
            props(json!({"sourceElement": "p", "textLength": 12})),
        ),
        (
            "form_submit",
            props(json!({"formId": "f", "fieldCount": 3})),
        ),
        ("form_submit", json!({})),
        (
            "input_change",
            props(json!({"element": "input", "inputName": "q"})),
        ),
    ];
    for (kind, fields) in &cases {
        let r = post(&ingest, kind, fields.clone()).await;
        assert_eq!(r.status, 200, "{kind} {fields}: {:?}", r.json());
    }
    let events = ingest.sink().events();
    let kinds: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(kinds, cases.iter().map(|(k, _)| *k).collect::<Vec<_>>());
    let perf = &events[2];
    assert_eq!(perf.event_type, EventType::Performance);
    assert_eq!(
        (
            perf.vitals.lcp,
            perf.vitals.cls,
            perf.vitals.inp,
            perf.vitals.ttfb
        ),
        (Some(1200.5), Some(0.02), Some(80.0), None)
    );
    assert_eq!(events[4].event_name.as_deref(), Some("TypeError"));
}

#[tokio::test]
async fn what_each_type_requires_is_a_400_otherwise() {
    let ingest = TestIngest::new();
    let props = |v: Value| json!({ "properties": v.to_string() });
    for (kind, fields, problem) in [
        ("outbound", json!({}), "outbound events require properties"),
        ("outbound", props(json!({"text": "go"})), "url is required"),
        (
            "outbound",
            props(json!({"url": "/relative"})),
            "absolute http(s) URL",
        ),
        (
            "outbound",
            props(json!({"url": "javascript:alert(1)"})),
            "absolute http(s) URL",
        ),
        (
            "outbound",
            json!({"properties": "[1]"}),
            "must be a JSON object",
        ),
        (
            "error",
            json!({"event_name": "TypeError"}),
            "error events require properties",
        ),
        (
            "error",
            json!({"event_name": "E", "properties": "{}"}),
            "message is required",
        ),
        (
            "error",
            json!({"event_name": "E", "properties": json!({"message": "m", "lineNumber": "3"}).to_string()}),
            "lineNumber must be a number",
        ),
        (
            "copy",
            props(json!({"text": "t"})),
            "sourceElement is required",
        ),
        (
            "form_submit",
            props(json!({"fieldCount": "3"})),
            "fieldCount must be a number",
        ),
        (
            "input_change",
            props(json!({"element": 1})),
            "element must be a string",
        ),
    ] {
        let r = post(&ingest, kind, fields.clone()).await;
        assert_eq!(r.status, 400, "{kind} {fields}");
        let msg = field_error(&r, "properties");
        assert!(msg.contains(problem), "{kind} {fields}: {:?}", r.json());
    }
    // An error event needs its type as event_name: a form error, as custom events.
    let r = post(
        &ingest,
        "error",
        json!({"properties": "{\"message\":\"m\"}"}),
    )
    .await;
    assert_eq!(
        r.json()["details"]["formErrors"],
        json!(["Error events require event_name (the error's type)"])
    );
    for (vital, value) in [
        ("lcp", json!(-1)),
        ("cls", json!("fast")),
        ("ttfb", json!([])),
    ] {
        let r = post(&ingest, "performance", json!({ vital: value })).await;
        assert_field_error(&r, vital, &format!("{vital}: {value}"));
    }
    let r = post(&ingest, "click", json!({})).await;
    assert!(
        field_error(&r, "type").contains("input_change"),
        "{:?}",
        r.json()
    );
    assert!(ingest.sink().messages().is_empty());
}

#[tokio::test]
async fn an_error_events_properties_may_be_4096_long() {
    let ingest = TestIngest::new();
    let with_stack = |n: usize| {
        let base = json!({"message": "m", "stack": ""}).to_string().len();
        json!({"message": "m", "stack": "s".repeat(n - base)}).to_string()
    };
    let r = post(
        &ingest,
        "error",
        json!({"event_name": "E", "properties": with_stack(4096)}),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    let r = post(
        &ingest,
        "error",
        json!({"event_name": "E", "properties": with_stack(4097)}),
    )
    .await;
    assert!(
        field_error(&r, "properties").contains("4096"),
        "{:?}",
        r.json()
    );
    // Other types keep 2048.
    let r = post(
        &ingest,
        "button_click",
        json!({"properties": with_stack(2049)}),
    )
    .await;
    assert!(
        field_error(&r, "properties").contains("2048"),
        "{:?}",
        r.json()
    );
}

#[tokio::test]
async fn the_new_fields_are_published() {
    let ingest = TestIngest::new();
    let r = ingest
        .post_json(
            "/api/track",
            &ingest.event(json!({
                "anonymous_id": "anon-1", "tag": "spring", "app_version": "2.1.0",
                "device_model": "Pixel 8", "feature_flags": {"new_checkout": "on", "beta": "b"}
            })),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    let ev = &ingest.sink().events()[0];
    assert_eq!(ev.anonymous_id.as_deref(), Some("anon-1"));
    assert_eq!(ev.tag.as_deref(), Some("spring"));
    assert_eq!(ev.app_version.as_deref(), Some("2.1.0"));
    assert_eq!(ev.device_model.as_deref(), Some("Pixel 8"));
    let flags: Value = serde_json::from_str(ev.feature_flags.as_deref().unwrap()).unwrap();
    assert_eq!(flags, json!({"new_checkout": "on", "beta": "b"}));
    for flags in [
        json!("on"),
        json!({"f": 1}),
        json!({ "k".repeat(101): "v" }),
        json!({"f": "v".repeat(2049)}),
    ] {
        let r = ingest
            .post_json(
                "/api/track",
                &ingest.event(json!({ "feature_flags": flags })),
            )
            .await;
        assert_field_error(
            &r,
            "feature_flags",
            &flags.to_string()[..40.min(flags.to_string().len())],
        );
    }
}

#[tokio::test]
async fn a_client_timestamp_is_used_within_its_window() {
    let ingest = TestIngest::new();
    let now = time::OffsetDateTime::now_utc();
    let hour_ago = now - time::Duration::hours(1);
    let rfc3339 = hour_ago
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let ms = (hour_ago.unix_timestamp_nanos() / 1_000_000) as i64;
    let long_ago = ms - 8 * 24 * 3600 * 1000;
    for ts in [json!(rfc3339), json!(ms), json!(long_ago)] {
        let r = ingest
            .post_json("/api/track", &ingest.event(json!({ "timestamp": ts })))
            .await;
        assert_eq!(r.status, 200, "{ts}");
    }
    let events = ingest.sink().events();
    // Milliseconds as sent; RFC 3339 to the millisecond.
    assert_eq!(events[1].timestamp, ms);
    assert!(
        (events[0].timestamp - ms).abs() < 1000,
        "{}",
        events[0].timestamp
    );
    // Over 7 days old: the receive time instead.
    assert_eq!(events[2].timestamp, events[2].received_at);
}
