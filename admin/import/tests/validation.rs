//! What the track API refuses, the import refuses too, through the reader of every
//! format: properties nested too deep, over-long or out-of-set preset values, times
//! before 2000 or more than a day ahead. Each such record is skipped with its line and a
//! reason, never stored cut short, clamped or wrapped. And Rivulet's own CSV export,
//! read back as the NDJSON export is.

use rivulet_import::{Format, ImportedEvent, Reader, RowError, SkipKind};

/// The tests' import starts at 2026-11-25T10:00:00Z.
const NOW: i64 = 1_795_600_800_000;

fn read(format: Format, input: &str) -> Vec<Result<ImportedEvent, RowError>> {
    Reader::new(format, input.as_bytes())
        .unwrap()
        .with_now(NOW)
        .collect()
}

/// `(line, kind)` of each result, `None` for an event.
fn outcomes(rows: &[Result<ImportedEvent, RowError>]) -> Vec<Option<(u64, SkipKind)>> {
    rows.iter()
        .map(|r| r.as_ref().err().map(|e| (e.line, e.kind)))
        .collect()
}

fn line(n: u64, fields: &str) -> String {
    typed_line(n, "pageview", fields)
}

fn typed_line(n: u64, event_type: &str, fields: &str) -> String {
    format!(
        "{{\"event_id\":\"0190a5a8-7c3e-7000-8000-{n:012}\",\"type\":\"{event_type}\",\"pathname\":\"/\"{fields}}}\n"
    )
}

const OK: &str = r#","timestamp":"2026-11-25T09:00:00Z""#;

#[test]
fn times_outside_2000_to_a_day_from_now_are_skipped_with_their_lines() {
    let mut file = line(1, OK);
    for (n, ts) in [
        (2, "\"9999-12-31T23:59:59Z\""),
        (3, "\"2106-02-07T06:28:16Z\""),
        (4, "\"1969-12-31T23:59:59Z\""),
        (5, "\"0000-01-01T00:00:00Z\""),
        (6, "\"1999-12-31T23:59:59Z\""),
        (7, "\"2026-11-26T10:00:01Z\""),
        (8, "-1"),
        (9, "\"0\""),
        (10, "\"2000-01-01T00:00:00Z\""),
        (11, "\"2026-11-26T10:00:00Z\""),
    ] {
        file += &line(n, &format!(",\"timestamp\":{ts}"));
    }
    let rows = read(Format::Rivulet, &file);
    let bad = Some(SkipKind::BadTimestamp);
    assert_eq!(
        outcomes(&rows),
        [
            None,
            bad.map(|k| (2, k)),
            bad.map(|k| (3, k)),
            bad.map(|k| (4, k)),
            bad.map(|k| (5, k)),
            bad.map(|k| (6, k)),
            bad.map(|k| (7, k)),
            bad.map(|k| (8, k)),
            bad.map(|k| (9, k)),
            None,
            None,
        ]
    );
    let message = |i: usize| rows[i].as_ref().unwrap_err().message.clone();
    let window = "from 2000-01-01T00:00:00Z to a day from now (2026-11-26T10:00:00Z)";
    for (i, shown) in [
        (1, "9999-12-31T23:59:59Z"),
        (2, "2106-02-07T06:28:16Z"),
        (3, "1969-12-31T23:59:59Z"),
        (4, "0000-01-01T00:00:00Z"),
    ] {
        assert_eq!(
            message(i),
            format!("timestamp {shown} is outside the times an event may have: {window}")
        );
    }
    assert_eq!(
        rows[1].as_ref().unwrap_err().to_string(),
        format!("line 2: bad_timestamp: timestamp 9999-12-31T23:59:59Z is outside the times an event may have: {window}")
    );
    // The kept ones have their own times, unchanged.
    assert_eq!(rows[0].as_ref().unwrap().timestamp_ms, NOW - 3_600_000);
    assert_eq!(rows[9].as_ref().unwrap().timestamp_ms, 946_684_800_000);

    // A received_at outside them too (the export's other time).
    let rows = read(
        Format::Rivulet,
        &line(1, &format!("{OK},\"received_at\":\"1969-12-31T23:59:59Z\"")),
    );
    assert_eq!(outcomes(&rows), [Some((1, SkipKind::BadTimestamp))]);
}

#[test]
fn every_format_skips_times_outside_them() {
    let umami = "event_id,session_id,created_at,event_type,url_path\n\
                 e1,s1,2025-03-01 09:15:02,1,/\n\
                 e2,s1,1969-12-31 23:59:59,1,/\n\
                 e3,s1,9999-01-01 00:00:00,1,/\n";
    assert_eq!(
        outcomes(&read(Format::Umami, umami)),
        [
            None,
            Some((3, SkipKind::BadTimestamp)),
            Some((4, SkipKind::BadTimestamp))
        ]
    );
    let posthog = "{\"uuid\":\"u1\",\"event\":\"$pageview\",\"distinct_id\":\"d\",\"timestamp\":\"2024-08-17T05:19:58Z\",\"properties\":{}}\n\
                   {\"uuid\":\"u2\",\"event\":\"$pageview\",\"distinct_id\":\"d\",\"timestamp\":\"2106-02-07T06:28:16Z\",\"properties\":{}}\n";
    assert_eq!(
        outcomes(&read(Format::Posthog, posthog)),
        [None, Some((2, SkipKind::BadTimestamp))]
    );
}

#[test]
fn what_ingest_refuses_is_skipped_with_its_line() {
    let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
    let file = [
        line(1, OK),
        typed_line(
            2,
            "button_click",
            &format!("{OK},\"properties\":{}", serde_json::json!(deep)),
        ),
        line(3, &format!("{OK},\"city\":\"{}\"", "x".repeat(100_000))),
        line(4, &format!("{OK},\"browser\":\"{}\"", "x".repeat(100_000))),
        line(5, &format!("{OK},\"device_type\":\"Toaster\"")),
        line(6, &format!("{OK},\"country\":\"<script>\"")),
        line(7, &format!("{OK},\"channel\":\"<img src=x>\"")),
        line(8, &format!("{OK},\"country\":\"GB\",\"region\":\"<b>\"")),
        line(
            9,
            &format!("{OK},\"country\":\"GB\",\"device_type\":\"Mobile\""),
        ),
    ]
    .concat();
    let rows = read(Format::Rivulet, &file);
    assert_eq!(
        outcomes(&rows),
        [
            None,
            Some((2, SkipKind::InvalidValue)),
            Some((3, SkipKind::TooLong)),
            Some((4, SkipKind::TooLong)),
            Some((5, SkipKind::InvalidValue)),
            Some((6, SkipKind::InvalidValue)),
            Some((7, SkipKind::InvalidValue)),
            Some((8, SkipKind::InvalidValue)),
            None,
        ]
    );
    let messages: Vec<String> = rows
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .collect();
    assert_eq!(
        messages,
        [
            "line 2: invalid_value: properties nest objects or arrays 1000 levels deep; the limit is 32",
            "line 3: too_long: city is 100000 characters; the limit is 200",
            "line 4: too_long: browser is 100000 characters; the limit is 100",
            "line 5: invalid_value: device_type \"Toaster\" is not one of Desktop, Mobile, Tablet, Bot",
            "line 6: invalid_value: country \"<script>\" is not an ISO 3166-1 alpha-2 code (two upper-case letters)",
            "line 7: invalid_value: channel \"<img src=x>\" is not one of Direct, Organic Search, Paid Search, Organic Social, Paid Social, Email, Referral, Internal",
            "line 8: invalid_value: region \"<b>\" is not a region of country GB (`GB-` and a subdivision's code or name)",
        ]
    );
    let kept = rows[8].as_ref().unwrap();
    assert_eq!(kept.preset.country.as_deref(), Some("GB"));
    assert_eq!(kept.preset.device_type.as_deref(), Some("Mobile"));
}

#[test]
fn a_posthog_preset_out_of_shape_is_skipped() {
    let event = |uuid: &str, props: &str| {
        format!("{{\"uuid\":\"{uuid}\",\"event\":\"$pageview\",\"distinct_id\":\"d\",\"timestamp\":\"2024-08-17T05:19:58Z\",\"properties\":{props}}}\n")
    };
    let file = [
        event(
            "u1",
            r#"{"$geoip_country_code":"GB","$geoip_subdivision_1_code":"ENG"}"#,
        ),
        event("u2", r#"{"$geoip_country_code":"<script>"}"#),
        event(
            "u3",
            &format!(r#"{{"$geoip_city_name":"{}"}}"#, "x".repeat(100_000)),
        ),
    ]
    .concat();
    assert_eq!(
        outcomes(&read(Format::Posthog, &file)),
        [
            None,
            Some((2, SkipKind::InvalidValue)),
            Some((3, SkipKind::TooLong))
        ]
    );
}

// ------------------------------------------------------------------ rivulet CSV

const HEADER: &str = "event_id,site_id,timestamp,received_at,type,event_name,properties,hostname,pathname,querystring,page_title,referrer,user_id,anonymous_id,language,screenWidth,screenHeight,tag,app_version,device_model,feature_flags,lcp,cls,inp,fcp,ttfb,channel,session_id,country,region,city,lat,lon,browser,browser_version,operating_system,operating_system_version,device_type,is_bot,ip,person_id";

#[test]
fn the_csv_export_is_read_by_its_header() {
    let file = format!(
        "\u{FEFF}{HEADER}\r\n\
         0190a5a8-7c3e-7000-8000-000000000001,1,2026-11-25T09:00:00Z,2026-11-25T09:00:01Z,custom_event,'=SUM(A1),\"{{\"\"plan\"\":\"\"pro\"\"}}\",shop.example.com,'-x,,'''quoted,,u-1,,en-GB,1920,1080,,,,\"{{\"\"beta\"\":\"\"on\"\"}}\",,,,,,Direct,,GB,GB-ENG,London,51.5,-0.09,Chrome,120,Windows,10,Desktop,0,,u-1\r\n"
    );
    let mut reader = Reader::new(Format::Rivulet, file.as_bytes())
        .unwrap()
        .with_now(NOW);
    assert_eq!(reader.shape(), "rivulet CSV");
    let ev = reader.next().unwrap().unwrap();
    assert!(reader.next().is_none());
    assert_eq!(ev.source_id, "0190a5a8-7c3e-7000-8000-000000000001");
    assert_eq!(ev.timestamp_ms, NOW - 3_600_000);
    assert_eq!(ev.preset.received_at_ms, Some(NOW - 3_599_000));
    assert_eq!(ev.event_type, "custom_event");
    // One leading `'` taken off each text cell, and only one.
    assert_eq!(ev.event_name.as_deref(), Some("=SUM(A1)"));
    assert_eq!(ev.pathname.as_deref(), Some("-x"));
    assert_eq!(ev.page_title.as_deref(), Some("''quoted"));
    assert_eq!(ev.properties.as_deref(), Some(r#"{"plan":"pro"}"#));
    assert_eq!(ev.feature_flags.as_deref(), Some(r#"{"beta":"on"}"#));
    // Empty cells are absent values; numbers are numbers, negative ones too.
    assert_eq!(ev.querystring, None);
    assert_eq!(ev.lcp, None);
    assert_eq!(
        (ev.screen_width, ev.screen_height),
        (Some(1920), Some(1080))
    );
    assert_eq!((ev.preset.lat, ev.preset.lon), (Some(51.5), Some(-0.09)));
    assert_eq!(ev.preset.country.as_deref(), Some("GB"));
    assert_eq!(ev.preset.is_bot, Some(0));
}

#[test]
fn csv_rows_are_checked_as_lines_are() {
    let row = |id: u64, rest: &str| {
        format!("0190a5a8-7c3e-7000-8000-{id:012},2026-11-25T09:00:00Z,pageview{rest}\n")
    };
    let file = [
        "event_id,timestamp,type,screenWidth,device_type,pathname\n".to_owned(),
        row(1, ",1920,Desktop,/"),
        row(2, ",wide,,/"),
        row(3, ",,Toaster,/"),
        row(4, ",,"),
        "0190a5a8-7c3e-7000-8000-000000000005,1969-12-31T23:59:59Z,pageview,,,/\n".to_owned(),
    ]
    .concat();
    let rows = read(Format::Rivulet, &file);
    let errors: Vec<String> = rows
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .collect();
    assert!(rows[0].is_ok(), "{rows:?}");
    assert_eq!(
        errors,
        [
            "line 3: invalid_value: screenWidth is \"wide\", not a number",
            "line 4: invalid_value: device_type \"Toaster\" is not one of Desktop, Mobile, Tablet, Bot",
            "line 5: malformed: the row has 5 fields where the header has 6 (a missing comma, or an unquoted comma or line break?)",
            "line 6: bad_timestamp: timestamp 1969-12-31T23:59:59Z is outside the times an event may have: from 2000-01-01T00:00:00Z to a day from now (2026-11-26T10:00:00Z)",
        ]
    );
}

#[test]
fn a_csv_header_without_an_events_columns_is_refused() {
    let error = |input: &str| match Reader::new(Format::Rivulet, input.as_bytes()) {
        Ok(_) => panic!("accepted: {input}"),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        error("event_id,site_id,type\n"),
        "the rivulet header has no `timestamp` column: a Rivulet CSV export starts with its header line (`event_id,site_id,timestamp,…`), and an NDJSON export has one JSON object a line"
    );
    assert_eq!(
        error("event_id,timestamp,type,city,city\n"),
        "the rivulet CSV header names `city` twice (column 5): an export writes each column once"
    );
    // Not a header: lines, each reported as a line is.
    let rows = read(Format::Rivulet, "[1]\n");
    assert_eq!(outcomes(&rows), [Some((1, SkipKind::Malformed))]);
    assert!(read(Format::Rivulet, "").is_empty());
}
