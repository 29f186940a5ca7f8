//! The example files of `testdata/import/` (see its README): every event they hold, and
//! every deliberately broken record with its line and reason.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use rivulet_import::{Format, ImportedEvent, Preset, Reader, RowError, SkipKind};

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/import")
        .join(name)
}

fn read(format: Format, name: &str) -> (String, Vec<Result<ImportedEvent, RowError>>) {
    let file = File::open(path(name)).unwrap();
    let reader = Reader::new(format, BufReader::new(file)).unwrap();
    let shape = reader.shape().to_owned();
    (shape, reader.collect())
}

fn error(line: u64, kind: SkipKind, message: &str) -> Result<ImportedEvent, RowError> {
    Err(RowError {
        line,
        kind,
        message: message.into(),
    })
}

fn s(v: &str) -> Option<String> {
    Some(v.into())
}

#[test]
fn rivulet_ndjson() {
    let (shape, rows) = read(Format::Rivulet, "rivulet.ndjson");
    assert_eq!(shape, "rivulet NDJSON");
    assert_eq!(rows.len(), 10, "{rows:#?}");

    let first = ImportedEvent {
        source_id: "0190a5a8-7c3e-7000-8000-000000000001".into(),
        timestamp_ms: 1_795_600_800_000,
        event_type: "pageview".into(),
        hostname: s("shop.example.com"),
        pathname: s("/pricing"),
        querystring: s("?utm_source=newsletter&utm_medium=email"),
        page_title: s("Pricing"),
        referrer: s("https://www.google.com/"),
        user_id: s("3f2a9c1e5b7d4a60918e2c4b6d8f0a13"),
        language: s("en-GB"),
        screen_width: Some(1920),
        screen_height: Some(1080),
        event_id: Some("0190a5a8-7c3e-7000-8000-000000000001".parse().unwrap()),
        preset: Preset {
            session_id: s("9d1c7e0f2b4a6c8e"),
            channel: s("Email"),
            country: s("GB"),
            region: s("GB-ENG"),
            city: s("London"),
            lat: Some(51.5),
            lon: Some(-0.09),
            browser: s("Chrome"),
            browser_version: s("120"),
            operating_system: s("Windows"),
            operating_system_version: s("10"),
            device_type: s("Desktop"),
            is_bot: Some(0),
            visitor_id: s("3f2a9c1e5b7d4a60918e2c4b6d8f0a13"),
            received_at_ms: Some(1_795_600_801_000),
            client_timestamp_ms: None,
            sent_at_ms: None,
        },
        ..Default::default()
    };
    assert_eq!(rows[0], Ok(first));

    // Line 2 is blank. Line 3: epoch milliseconds, a caller's user id (no visitor id).
    let signup = rows[1].as_ref().unwrap();
    assert_eq!(signup.timestamp_ms, 1_795_600_860_000);
    assert_eq!(signup.event_type, "custom_event");
    assert_eq!(signup.event_name.as_deref(), Some("signup"));
    assert_eq!(signup.properties.as_deref(), Some(r#"{"plan": "pro"}"#));
    assert_eq!(signup.user_id.as_deref(), Some("user-42"));
    assert_eq!(signup.preset.visitor_id, None);
    assert_eq!(signup.anonymous_id.as_deref(), Some("device-7"));
    assert_eq!(signup.tag.as_deref(), Some("spring"));
    assert_eq!(signup.app_version.as_deref(), Some("3.1.0"));
    assert_eq!(
        signup.feature_flags.as_deref(),
        Some(r#"{"new-checkout": "variant-b"}"#)
    );

    assert_eq!(
        rows[2],
        error(
            4,
            SkipKind::Malformed,
            "invalid JSON: EOF while parsing an object (column 124)"
        )
    );
    assert_eq!(
        rows[3],
        error(
            5,
            SkipKind::BadTimestamp,
            "timestamp \"2026-02-30T10:00:00Z\" is not a date and time: 2026-02 has no day 30"
        )
    );
    let perf = rows[4].as_ref().unwrap();
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
    // Line 7 holds only spaces.
    let err = rows[5].as_ref().unwrap();
    assert_eq!(err.event_type, "error");
    assert_eq!(err.event_name.as_deref(), Some("TypeError"));
    assert_eq!(rows[6], error(9, SkipKind::MissingField, "no event_id"));
    assert_eq!(
        rows[7],
        error(
            10,
            SkipKind::Malformed,
            "not a JSON object (each line holds one event as {…})"
        )
    );
    // Line 11 ends with CRLF; its IP is normalised.
    let outbound = rows[8].as_ref().unwrap();
    assert_eq!(outbound.event_type, "outbound");
    assert_eq!(outbound.ip.as_deref(), Some("2001:db8::1"));
    assert_eq!(
        rows[9],
        error(
            12,
            SkipKind::TooLong,
            "pathname is 2049 characters; the limit is 2048"
        )
    );
}

#[test]
fn umami_csv() {
    let (shape, rows) = read(Format::Umami, "umami-website-events.csv");
    assert_eq!(shape, "umami CSV");
    assert_eq!(rows.len(), 8, "{rows:#?}");
    let session = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d";
    let visit = "f0e1d2c3-b4a5-4968-8776-655443322110";
    let desktop = Preset {
        session_id: s(visit),
        country: s("GB"),
        region: s("GB-ENG"),
        city: s("London"),
        browser: s("Chrome"),
        operating_system: s("Windows"),
        operating_system_version: s("10"),
        device_type: s("Desktop"),
        ..Preset::default()
    };
    assert_eq!(
        rows[0],
        Ok(ImportedEvent {
            source_id: "c0a80001-0000-4000-8000-000000000001".into(),
            timestamp_ms: 1_740_820_502_000,
            event_type: "pageview".into(),
            hostname: s("www.example.com"),
            pathname: s("/pricing"),
            querystring: s("?utm_source=newsletter"),
            page_title: s("Pricing"),
            referrer: s("https://www.google.com/search?q=analytics"),
            anonymous_id: s(session),
            language: s("en-GB"),
            screen_width: Some(1920),
            screen_height: Some(1080),
            preset: desktop.clone(),
            ..Default::default()
        })
    );
    let click = rows[1].as_ref().unwrap();
    assert_eq!(click.event_type, "custom_event");
    assert_eq!(click.event_name.as_deref(), Some("signup-click"));
    assert_eq!(click.properties, None);
    // Lines 4 and 5: a title with a quoted comma and line break.
    let plans = rows[2].as_ref().unwrap();
    assert_eq!(plans.page_title.as_deref(), Some("Plans,\nand prices"));
    assert_eq!(
        rows[3],
        error(
            6,
            SkipKind::MissingField,
            "event_name is empty on a custom event (event_type 2)"
        )
    );
    assert_eq!(
        rows[4],
        error(
            7,
            SkipKind::BadTimestamp,
            "created_at \"2025-13-01 08:00:00\" is not a date and time: month 13 does not exist"
        )
    );
    assert_eq!(
        rows[5],
        error(
            8,
            SkipKind::Malformed,
            "the row has 6 fields where the header has 23 (a missing comma, or an unquoted comma or line break?)"
        )
    );
    assert_eq!(
        rows[6],
        error(
            9,
            SkipKind::UnsupportedEvent,
            "event_type 3 is an Umami link event, not a website's"
        )
    );
    let ios = rows[7].as_ref().unwrap();
    assert_eq!(ios.preset.browser.as_deref(), Some("Mobile Safari"));
    assert_eq!(ios.preset.operating_system.as_deref(), Some("iOS"));
    assert_eq!(ios.preset.device_type.as_deref(), Some("Mobile"));
    assert_eq!(ios.preset.region.as_deref(), Some("US-CA"));
    assert_eq!(
        (ios.screen_width, ios.screen_height),
        (Some(390), Some(844))
    );
    assert_eq!(ios.referrer, None);
}

#[test]
fn posthog_csv_from_the_sql_editor() {
    let (shape, rows) = read(Format::Posthog, "posthog-events.csv");
    assert_eq!(shape, "posthog CSV (properties column)");
    assert_eq!(rows.len(), 10, "{rows:#?}");
    let device = "018f2c1a-9b3e-7c4d-8e5f-6a7b8c9d0e1f";
    let session = "018f2c1a-9b40-7a11-b2c3-d4e5f6a7b8c9";
    let preset = Preset {
        session_id: s(session),
        country: s("GB"),
        region: s("GB-ENG"),
        city: s("London"),
        lat: Some(51.5142),
        lon: Some(-0.0931),
        browser: s("Chrome"),
        browser_version: s("120"),
        operating_system: s("Windows"),
        operating_system_version: s("10"),
        device_type: s("Desktop"),
        ..Preset::default()
    };
    assert_eq!(
        rows[0],
        Ok(ImportedEvent {
            source_id: "018f2c1a-a000-7000-8000-000000000001".into(),
            timestamp_ms: 1_723_871_998_284,
            event_type: "pageview".into(),
            hostname: s("www.example.com"),
            pathname: s("/pricing"),
            querystring: s("?utm_source=newsletter&plan=pro"),
            page_title: s("Pricing – Example"),
            referrer: s("https://www.google.com/"),
            anonymous_id: s(device),
            ip: s("81.2.69.142"),
            user_agent: s("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"),
            language: s("en-GB"),
            screen_width: Some(1920),
            screen_height: Some(1080),
            preset: preset.clone(),
            ..Default::default()
        })
    );
    let custom = rows[1].as_ref().unwrap();
    assert_eq!(custom.event_type, "custom_event");
    assert_eq!(custom.event_name.as_deref(), Some("plan_selected"));
    assert_eq!(
        custom.properties.as_deref(),
        Some(r#"{"plan":"pro","seats":3}"#)
    );
    assert_eq!(custom.user_id.as_deref(), Some("user-42@example.com"));
    assert_eq!(custom.anonymous_id.as_deref(), Some(device));
    assert_eq!(custom.page_title, None);
    assert_eq!(
        rows[2],
        error(
            4,
            SkipKind::UnsupportedEvent,
            "$pageleave is a PostHog event with no Rivulet equivalent"
        )
    );
    let outbound = rows[3].as_ref().unwrap();
    assert_eq!(outbound.event_type, "outbound");
    assert_eq!(
        outbound.properties.as_deref(),
        Some(r#"{"text":"Read the docs","url":"https://docs.partner.example.org/start"}"#)
    );
    let vitals = rows[4].as_ref().unwrap();
    assert_eq!(vitals.event_type, "performance");
    assert_eq!(
        (vitals.lcp, vitals.cls, vitals.inp, vitals.fcp, vitals.ttfb),
        (Some(1830.4), Some(0.021), Some(96.0), Some(912.7), None)
    );
    let exception = rows[5].as_ref().unwrap();
    assert_eq!(exception.event_type, "error");
    assert_eq!(exception.event_name.as_deref(), Some("TypeError"));
    assert_eq!(
        exception.properties.as_deref(),
        Some(
            r#"{"columnNumber":17,"fileName":"https://www.example.com/assets/app.js","lineNumber":88,"message":"Cannot read properties of undefined (reading 'price')"}"#
        )
    );
    assert_eq!(
        rows[6],
        error(
            8,
            SkipKind::InvalidValue,
            "properties is not JSON: EOF while parsing an object (column 38)"
        )
    );
    assert_eq!(
        rows[7],
        error(
            9,
            SkipKind::BadTimestamp,
            "timestamp \"17/08/2024 05:24\" is not a date and time: expected 4 digits of the year"
        )
    );
    // Lines 10 and 11: the button's text holds a line break.
    let button = rows[8].as_ref().unwrap();
    assert_eq!(button.event_type, "button_click");
    assert_eq!(
        button.properties.as_deref(),
        Some(r#"{"text":"Start\nfree trial"}"#)
    );
    assert_eq!(
        rows[9],
        error(
            12,
            SkipKind::UnsupportedEvent,
            "$autocapture click on <a>: only clicks on a <button> or on a link to another site are imported"
        )
    );
}

#[test]
fn posthog_csv_from_the_ui() {
    let (shape, rows) = read(Format::Posthog, "posthog-events-ui.csv");
    assert_eq!(shape, "posthog CSV (properties.* columns)");
    assert_eq!(rows.len(), 3, "{rows:#?}");
    let view = rows[0].as_ref().unwrap();
    assert_eq!(view.source_id, "018f2c1a-b000-7000-8000-000000000001");
    assert_eq!(view.event_type, "pageview");
    assert_eq!(view.querystring.as_deref(), Some("?ref=hn"));
    assert_eq!(
        view.anonymous_id.as_deref(),
        Some("018f2c1a-9b3e-7c4d-8e5f-6a7b8c9d0e1f")
    );
    assert_eq!(view.user_id, None);
    assert_eq!(
        (view.screen_width, view.screen_height),
        (Some(390), Some(844))
    );
    assert_eq!(view.preset.browser.as_deref(), Some("Mobile Safari"));
    assert_eq!(
        view.preset.session_id.as_deref(),
        Some("018f2c1a-9b40-7a11-b2c3-d4e5f6a7b8c9")
    );
    let custom = rows[1].as_ref().unwrap();
    assert_eq!(custom.user_id.as_deref(), Some("user-7"));
    // Flattened columns carry text: the values stay text.
    assert_eq!(
        custom.properties.as_deref(),
        Some(r#"{"plan":"team","seats":"10"}"#)
    );
    assert_eq!(
        rows[2],
        error(
            4,
            SkipKind::InvalidValue,
            "$screen_width is \"wide\", not a number"
        )
    );
}

#[test]
fn posthog_jsonl_from_a_batch_export() {
    let (shape, rows) = read(Format::Posthog, "posthog-events.jsonl");
    assert_eq!(shape, "posthog JSON lines");
    assert_eq!(rows.len(), 8, "{rows:#?}");
    let view = rows[0].as_ref().unwrap();
    assert_eq!(view.event_type, "pageview");
    assert_eq!(view.timestamp_ms, 1_724_061_600_123);
    assert_eq!(view.page_title.as_deref(), Some("Pricing"));
    assert_eq!(view.pathname.as_deref(), Some("/pricing"));
    // Line 3: properties as a string of JSON.
    let paid = rows[1].as_ref().unwrap();
    assert_eq!(paid.event_name.as_deref(), Some("invoice_paid"));
    assert_eq!(
        paid.properties.as_deref(),
        Some(r#"{"amount":49.5,"currency":"EUR"}"#)
    );
    assert_eq!(paid.user_id.as_deref(), Some("user-42@example.com"));
    assert_eq!(
        paid.preset.session_id.as_deref(),
        Some("018f2c1a-9b40-7a11-b2c3-d4e5f6a7b8c9")
    );
    assert_eq!(
        rows[2],
        error(
            4,
            SkipKind::UnsupportedEvent,
            "$identify is a PostHog event with no Rivulet equivalent"
        )
    );
    assert_eq!(
        rows[3],
        error(
            5,
            SkipKind::Malformed,
            "invalid JSON: EOF while parsing an object (column 129)"
        )
    );
    assert_eq!(rows[4], error(6, SkipKind::MissingField, "uuid is empty"));
    let button = rows[5].as_ref().unwrap();
    assert_eq!(button.event_type, "button_click");
    assert_eq!(button.properties.as_deref(), Some(r#"{"text":"Buy now"}"#));
    assert_eq!(
        rows[6],
        error(
            8,
            SkipKind::TooLong,
            "properties is 2114 characters; the limit is 2048"
        )
    );
    assert_eq!(
        rows[7],
        error(
            9,
            SkipKind::BadTimestamp,
            "timestamp is 1724061600; expected an ISO 8601 string"
        )
    );
}
