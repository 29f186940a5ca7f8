//! The reader through its public API: each format's mappings and error kinds, header
//! errors, CSV details (quoting, BOM, CRLF, records over several lines), I/O errors,
//! and that reading in tiny pieces gives the same results.

use std::io::{self, BufRead, BufReader, Read};

use rivulet_import::{
    Format, HeaderError, ImportedEvent, Reader, RowError, SkipKind, MAX_RECORD_BYTES,
};

fn read(format: Format, input: &str) -> Vec<Result<ImportedEvent, RowError>> {
    Reader::new(format, input.as_bytes()).unwrap().collect()
}

fn one(format: Format, input: &str) -> ImportedEvent {
    let rows = read(format, input);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    rows.into_iter().next().unwrap().unwrap()
}

fn fails(format: Format, input: &str) -> (u64, SkipKind, String) {
    let rows = read(format, input);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let e = rows.into_iter().next().unwrap().unwrap_err();
    (e.line, e.kind, e.message)
}

fn header_error(format: Format, input: &str) -> String {
    match Reader::new(format, input.as_bytes()) {
        Ok(_) => panic!("the header was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn formats_by_name() {
    for f in Format::ALL {
        assert_eq!(f.as_str().parse::<Format>(), Ok(f));
        assert_eq!(f.to_string(), f.as_str());
    }
    assert_eq!(
        "plausible".parse::<Format>().unwrap_err().to_string(),
        "unknown format \"plausible\": expected rivulet, umami or posthog"
    );
    let kinds: Vec<_> = SkipKind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "malformed",
            "missing_field",
            "invalid_value",
            "bad_timestamp",
            "unsupported_event",
            "too_long",
            "io"
        ]
    );
}

// ------------------------------------------------------------------ rivulet

const ID: &str = "0190a5a8-7c3e-7000-8000-000000000001";

fn rivulet(fields: &str) -> String {
    format!("{{\"event_id\":\"{ID}\",\"timestamp\":\"2026-11-25T10:00:00Z\",\"type\":\"pageview\"{fields}}}\n")
}

#[test]
fn rivulet_values_and_their_absence() {
    let ev = one(Format::Rivulet, &rivulet(""));
    assert_eq!(ev.source_id, ID);
    assert_eq!(ev.event_id, Some(ID.parse().unwrap()));
    assert_eq!(ev.pathname, None);
    // Empty strings and nulls are absent values; unknown fields are ignored.
    let ev = one(
        Format::Rivulet,
        &rivulet(
            r#","pathname":"","hostname":null,"future":{"x":[1]},"site_id":"7","screenWidth":1080.5,"feature_flags":{"beta":"on"},"ip_address":"81.2.69.142","user_agent":"curl/8""#,
        ),
    );
    assert_eq!((ev.pathname, ev.hostname), (None, None));
    assert_eq!(ev.screen_width, Some(1081));
    assert_eq!(ev.feature_flags.as_deref(), Some(r#"{"beta":"on"}"#));
    assert_eq!(ev.ip.as_deref(), Some("81.2.69.142"));
    assert_eq!(ev.user_agent.as_deref(), Some("curl/8"));
    // Epoch milliseconds as digits.
    let ev = one(
        Format::Rivulet,
        &format!("{{\"event_id\":\"{ID}\",\"timestamp\":\"1795600800000\",\"type\":\"pageview\"}}"),
    );
    assert_eq!(ev.timestamp_ms, 1_795_600_800_000);
}

#[test]
fn rivulet_errors() {
    let cases: &[(&str, SkipKind, &str)] = &[
        (
            r#"{"event_id":"nope","timestamp":"2026-11-25T10:00:00Z","type":"pageview"}"#,
            SkipKind::InvalidValue,
            "event_id \"nope\" is not a UUID (nor may it be the nil UUID)",
        ),
        (
            r#"{"event_id":"00000000-0000-0000-0000-000000000000","timestamp":"2026-11-25T10:00:00Z","type":"pageview"}"#,
            SkipKind::InvalidValue,
            "event_id \"00000000-0000-0000-0000-000000000000\" is not a UUID (nor may it be the nil UUID)",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","type":"pageview"}}"#),
            SkipKind::BadTimestamp,
            "no timestamp",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":1.5,"type":"pageview"}}"#),
            SkipKind::BadTimestamp,
            "timestamp 1.5 is not a whole number of epoch milliseconds",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":true,"type":"pageview"}}"#),
            SkipKind::InvalidValue,
            "timestamp is true, not an RFC 3339 string or epoch milliseconds",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":"2026-11-25T10:00:00Z","received_at":"soon","type":"pageview"}}"#),
            SkipKind::BadTimestamp,
            "received_at \"soon\" is not a date and time: expected 4 digits of the year",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":"2026-11-25T10:00:00Z"}}"#),
            SkipKind::MissingField,
            "no type",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":"2026-11-25T10:00:00Z","type":"click"}}"#),
            SkipKind::InvalidValue,
            "type \"click\" is not one of pageview, custom_event, performance, outbound, error, button_click, copy, form_submit, input_change",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":"2026-11-25T10:00:00Z","type":"pageview","screenWidth":"wide"}}"#),
            SkipKind::InvalidValue,
            "screenWidth is \"wide\", not a number",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":"2026-11-25T10:00:00Z","type":"pageview","is_bot":2}}"#),
            SkipKind::InvalidValue,
            "is_bot is 2, not 0 or 1",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":"2026-11-25T10:00:00Z","type":"pageview","is_bot":-1}}"#),
            SkipKind::InvalidValue,
            "is_bot is -1, not 0 or 1",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":"2026-11-25T10:00:00Z","type":"pageview","pathname":"/a","pathname":"/b"}}"#),
            SkipKind::InvalidValue,
            "duplicate field `pathname` (column 130)",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":"2026-11-25T10:00:00Z","type":"pageview","screenHeight":70000}}"#),
            SkipKind::InvalidValue,
            "screenHeight is 70000, outside 0–65535",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":"2026-11-25T10:00:00Z","type":"pageview","properties":"{{x"}}"#),
            SkipKind::InvalidValue,
            "properties is not JSON: key must be a string (column 2)",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":"2026-11-25T10:00:00Z","type":"custom_event","event_name":""}}"#),
            SkipKind::MissingField,
            "a custom_event needs an event_name",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":"2026-11-25T10:00:00Z","type":"pageview","feature_flags":[1]}}"#),
            SkipKind::InvalidValue,
            "feature_flags is [1], not a JSON object",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":"2026-11-25T10:00:00Z","type":"pageview","ip":"localhost"}}"#),
            SkipKind::InvalidValue,
            "ip \"localhost\" is not an IPv4 or IPv6 address",
        ),
        (
            &format!(r#"{{"event_id":"{ID}","timestamp":"2026-11-25T10:00:00Z","type":"pageview"}} x"#),
            SkipKind::Malformed,
            "invalid JSON: trailing characters (column 106)",
        ),
        ("\u{FEFF}{}", SkipKind::Malformed, "not a JSON object (each line holds one event as {…})"),
    ];
    for (line, kind, message) in cases {
        let (at, k, m) = fails(Format::Rivulet, &format!("\n{line}\n"));
        assert_eq!((at, k, m.as_str()), (2, *kind, *message), "{line}");
    }
    // Invalid UTF-8 in a line.
    let rows: Vec<_> = Reader::new(Format::Rivulet, &b"{\"event_id\":\"\xff\"}\n"[..])
        .unwrap()
        .collect();
    assert_eq!(
        rows[0],
        Err(RowError {
            line: 1,
            kind: SkipKind::Malformed,
            message: "not valid UTF-8 (byte 14 of the line)".into()
        })
    );
    for format in [Format::Rivulet, Format::Posthog] {
        let rows: Vec<_> = Reader::new(format, &b"{\"uuid\":\"ok\"}\n{\"\xc3(\"}\n"[..])
            .unwrap()
            .collect();
        let e = rows[1].as_ref().unwrap_err();
        assert_eq!(
            (e.line, e.kind, e.message.as_str()),
            (
                2,
                SkipKind::Malformed,
                "not valid UTF-8 (byte 3 of the line)"
            )
        );
    }
    // A byte order mark is taken at the start of the file only.
    let ev = one(Format::Rivulet, &format!("\u{FEFF}{}", rivulet("")));
    assert_eq!(ev.source_id, ID);
}

#[test]
fn rivulet_visitor_ids() {
    let ev = one(
        Format::Rivulet,
        &rivulet(r#","user_id":"0123456789abcdef0123456789abcdef""#),
    );
    assert_eq!(
        ev.preset.visitor_id.as_deref(),
        Some("0123456789abcdef0123456789abcdef")
    );
    assert_eq!(ev.user_id, ev.preset.visitor_id);
    for not_one in [
        "0123456789ABCDEF0123456789ABCDEF",
        "0123456789abcdef",
        "user-1",
    ] {
        let ev = one(
            Format::Rivulet,
            &rivulet(&format!(r#","user_id":"{not_one}""#)),
        );
        assert_eq!(ev.user_id.as_deref(), Some(not_one));
        assert_eq!(ev.preset.visitor_id, None);
    }
}

#[test]
fn rivulet_line_over_the_record_limit() {
    let mut input = rivulet("");
    input.push_str(&format!(
        "{{\"pathname\":\"{}\"}}\n",
        "a".repeat(MAX_RECORD_BYTES)
    ));
    input.push_str(&rivulet(""));
    let rows = read(Format::Rivulet, &input);
    assert_eq!(rows.len(), 3);
    assert!(rows[0].is_ok() && rows[2].is_ok());
    let e = rows[1].as_ref().unwrap_err();
    assert_eq!((e.line, e.kind), (2, SkipKind::TooLong));
    assert_eq!(
        e.message,
        "the record is longer than 16 MiB (is a quote never closed?)"
    );
}

// ------------------------------------------------------------------ umami

const UMAMI_HEADER: &str = "event_id,session_id,created_at,event_type,url_path";

#[test]
fn umami_header_errors() {
    for missing in [
        "event_id",
        "session_id",
        "created_at",
        "event_type",
        "url_path",
    ] {
        let header: Vec<_> = UMAMI_HEADER.split(',').filter(|c| *c != missing).collect();
        assert_eq!(
            header_error(Format::Umami, &format!("{}\n", header.join(","))),
            format!("the umami header has no `{missing}` column: the file must be Umami's website-event CSV, with its header line")
        );
    }
    assert_eq!(
        header_error(Format::Umami, "website_id,session_id,event_id,url_path,event_name,data_key,string_value,number_value,date_value,data_type,created_at\n"),
        "this is Umami's event-data CSV (it has data_key and no event_type): import the website-event CSV, whose rows are the events"
    );
    assert_eq!(
        header_error(Format::Umami, ""),
        "the input is empty: a umami CSV file starts with a header line"
    );
    assert_eq!(
        header_error(Format::Umami, "\u{FEFF}\r\n\n"),
        "the input is empty: a umami CSV file starts with a header line"
    );
    assert_eq!(
        header_error(Format::Umami, "\n\"event_id,session_id\n"),
        "line 2: the header is not valid CSV: the quoted field opened on line 2 is never closed: the file ends inside it"
    );
    assert!(matches!(
        Reader::new(Format::Umami, &b"event_id,\xff\n"[..]),
        Err(HeaderError::Malformed { line: 1, .. })
    ));
}

#[test]
fn umami_columns_by_name_with_bom_and_crlf() {
    // Another order, Umami's newer column names (region, distinct_id, tag), an unknown
    // column, a BOM and CRLF line ends; the visit id missing (the session stands in).
    let input = "\u{FEFF}\"extra\",tag,distinct_id,region,country,url_path,created_at,event_type,session_id,event_id,url_query,referrer_domain,referrer_path,device,os,browser\r\n\
                 x,promo,user-9,GB-SCT,GB,/a,2025-03-01T09:15:02Z,1,s-1,e-1,?b=2,t.co,,tablet,Windows 7,edge-chromium\r\n";
    let ev = one(Format::Umami, input);
    assert_eq!(ev.source_id, "e-1");
    assert_eq!(ev.tag.as_deref(), Some("promo"));
    assert_eq!(ev.user_id.as_deref(), Some("user-9"));
    assert_eq!(ev.anonymous_id.as_deref(), Some("s-1"));
    assert_eq!(ev.preset.session_id.as_deref(), Some("s-1"));
    assert_eq!(ev.preset.region.as_deref(), Some("GB-SCT"));
    assert_eq!(ev.querystring.as_deref(), Some("?b=2"));
    assert_eq!(ev.referrer.as_deref(), Some("https://t.co/"));
    assert_eq!(ev.preset.device_type.as_deref(), Some("Tablet"));
    assert_eq!(ev.preset.browser.as_deref(), Some("Edge"));
    assert_eq!(
        (
            ev.preset.operating_system.as_deref(),
            ev.preset.operating_system_version.as_deref()
        ),
        (Some("Windows"), Some("7"))
    );
    assert_eq!(ev.pathname.as_deref(), Some("/a"));
}

#[test]
fn umami_event_types() {
    let h = "event_id,session_id,visit_id,created_at,event_type,event_name,url_path,lcp,inp,cls,fcp,ttfb,browser,screen\n";
    let row = |rest: &str| format!("{h}e-1,s-1,v-1,2025-03-01 09:15:02,{rest}\n");
    let perf = one(Format::Umami, &row("5,,/p,2400.5,180,0.1234,800,,,"));
    assert_eq!(perf.event_type, "performance");
    assert_eq!(perf.preset.session_id.as_deref(), Some("v-1"));
    assert_eq!(
        (perf.lcp, perf.inp, perf.cls, perf.fcp, perf.ttfb),
        (Some(2400.5), Some(180.0), Some(0.1234), Some(800.0), None)
    );
    let bot = one(Format::Umami, &row("1,,/p,,,,,,searchbot,"));
    assert_eq!(
        (
            bot.preset.browser,
            bot.preset.device_type.as_deref(),
            bot.preset.is_bot
        ),
        (None, Some("Bot"), Some(1))
    );
    let cases: &[(&str, SkipKind, &str)] = &[
        (
            "4,,/p,,,,,,,",
            SkipKind::UnsupportedEvent,
            "event_type 4 is an Umami pixel event, not a website's",
        ),
        (
            "9,,/p,,,,,,,",
            SkipKind::InvalidValue,
            "event_type \"9\" is not 1 (pageview), 2 (custom event) or 5 (performance)",
        ),
        (",,/p,,,,,,,", SkipKind::MissingField, "event_type is empty"),
        (
            "5,,/p,fast,,,,,,",
            SkipKind::InvalidValue,
            "lcp is \"fast\", not a number",
        ),
        (
            "1,,/p,,,,,,,1920",
            SkipKind::InvalidValue,
            "screen \"1920\" is not WIDTHxHEIGHT (e.g. 1920x1080, each 0–65535)",
        ),
        (
            "1,,/p,,,,,,,1920x70000",
            SkipKind::InvalidValue,
            "screen \"1920x70000\" is not WIDTHxHEIGHT (e.g. 1920x1080, each 0–65535)",
        ),
    ];
    for (rest, kind, message) in cases {
        assert_eq!(
            fails(Format::Umami, &row(rest)),
            (2, *kind, message.to_string()),
            "{rest}"
        );
    }
    assert_eq!(
        fails(
            Format::Umami,
            &format!("{h},s-1,v-1,2025-03-01 09:15:02,1,,/p,,,,,,,\n")
        ),
        (2, SkipKind::MissingField, "event_id is empty".into())
    );
    assert_eq!(
        fails(
            Format::Umami,
            &format!("{h}e-1,,v-1,2025-03-01 09:15:02,1,,/p,,,,,,,\n")
        ),
        (2, SkipKind::MissingField, "session_id is empty".into())
    );
    assert_eq!(
        fails(Format::Umami, &format!("{h}e-1,s-1,v-1,,1,,/p,,,,,,,\n")),
        (2, SkipKind::BadTimestamp, "created_at is empty".into())
    );
}

#[test]
fn csv_quoting_errors_and_lines() {
    let input = format!(
        "{UMAMI_HEADER}\n\
         e-1,s-1,2025-03-01 09:15:02,1,\"/a,\"\"b\"\"\"\n\
         \n\
         e-2,s-1,\"2025-03-01 09:15:02\"x,1,/c\n\
         e-3,s-1,2025-03-01 09:15:02,1,\"/multi\n\
         line\n\
         path\"\n\
         e-4,s-1,2025-03-01 09:15:02,1,/d\n\
         e-5,s-1,2025-03-01 09:15:02,1,\"/never closed\n\
         e-6,s-1,2025-03-01 09:15:02,1,/e\n"
    );
    let rows = read(Format::Umami, &input);
    let summary: Vec<_> = rows
        .iter()
        .map(|r| match r {
            Ok(ev) => (0, ev.pathname.clone().unwrap_or_default()),
            Err(e) => (e.line, e.message.clone()),
        })
        .collect();
    assert_eq!(
        summary,
        [
            (0, "/a,\"b\"".to_string()),
            (4, "field 3 has text after its closing quote (a quote inside a quoted field is written \"\")".into()),
            (0, "/multi\nline\npath".into()),
            (0, "/d".into()),
            (9, "the quoted field opened on line 9 is never closed: the file ends inside it".into()),
        ]
    );
}

// ------------------------------------------------------------------ posthog

fn posthog(event: &str, distinct_id: &str, props: serde_json::Value) -> String {
    serde_json::json!({
        "uuid": "u-1",
        "event": event,
        "timestamp": "2024-08-19T10:00:00Z",
        "distinct_id": distinct_id,
        "properties": props,
    })
    .to_string()
}

#[test]
fn posthog_who_is_who() {
    use serde_json::json;
    let who = |distinct_id: &str, props| {
        let ev = one(Format::Posthog, &posthog("$pageview", distinct_id, props));
        (ev.user_id, ev.anonymous_id)
    };
    let s = |v: &str| Some(v.to_string());
    // posthog-js before identify: distinct_id is the device id.
    assert_eq!(
        who("d-1", json!({"$is_identified": false, "$device_id": "d-1"})),
        (None, s("d-1"))
    );
    // After identify.
    assert_eq!(
        who("u@x", json!({"$is_identified": true, "$device_id": "d-1"})),
        (s("u@x"), s("d-1"))
    );
    // Flattened CSV text, and identified with no device id.
    assert_eq!(
        who("u@x", json!({"$is_identified": "True"})),
        (s("u@x"), None)
    );
    // No $is_identified (older SDKs): a device id that differs means identified.
    assert_eq!(
        who("u@x", json!({"$device_id": "d-1"})),
        (s("u@x"), s("d-1"))
    );
    // A server-side SDK's event: nothing tells, so anonymous.
    assert_eq!(who("42", json!({})), (None, s("42")));
    // A number as distinct_id.
    let ev = one(
        Format::Posthog,
        r#"{"uuid":"u-1","event":"$pageview","timestamp":"2024-08-19T10:00:00Z","distinct_id":42}"#,
    );
    assert_eq!(ev.anonymous_id.as_deref(), Some("42"));
}

#[test]
fn posthog_pages_without_a_url() {
    use serde_json::json;
    let ev = one(
        Format::Posthog,
        &posthog(
            "$pageview",
            "d",
            json!({"$host": "app.example.com:8443", "$pathname": "/x", "$referrer": "$direct", "title": "X"}),
        ),
    );
    assert_eq!(ev.hostname.as_deref(), Some("app.example.com"));
    assert_eq!(ev.pathname.as_deref(), Some("/x"));
    assert_eq!(ev.querystring, None);
    assert_eq!(ev.referrer, None);
    assert_eq!(ev.page_title.as_deref(), Some("X"));
    assert_eq!(ev.properties, None);
}

#[test]
fn posthog_events_and_their_errors() {
    use serde_json::json;
    let cases = [
        (
            posthog("$screen", "d", json!({})),
            SkipKind::UnsupportedEvent,
            "$screen is a PostHog event with no Rivulet equivalent",
        ),
        (
            posthog("$feature_flag_called", "d", json!({})),
            SkipKind::UnsupportedEvent,
            "$feature_flag_called is a PostHog event with no Rivulet equivalent",
        ),
        (
            posthog("$autocapture", "d", json!({"$event_type": "submit"})),
            SkipKind::UnsupportedEvent,
            "$autocapture submit events are not imported (only clicks on a button or on a link to another site)",
        ),
        (
            posthog("$autocapture", "d", json!({"$event_type": "click"})),
            SkipKind::UnsupportedEvent,
            "$autocapture click without elements_chain: what was clicked is unknown",
        ),
        (
            posthog("$autocapture", "d", json!({})),
            SkipKind::UnsupportedEvent,
            "$autocapture without $event_type",
        ),
        (
            posthog("$autocapture", "d", json!({"$event_type": "click", "$external_click_url": "/docs"})),
            SkipKind::InvalidValue,
            "the outbound url \"/docs\" is not an absolute http(s) URL",
        ),
        (
            posthog("$web_vitals", "d", json!({"$web_vitals_LCP_event": {}})),
            SkipKind::MissingField,
            "a $web_vitals event with none of $web_vitals_LCP_value, _CLS_, _INP_, _FCP_, _TTFB_value",
        ),
        (
            posthog("$web_vitals", "d", json!({"$web_vitals_INP_value": -1})),
            SkipKind::InvalidValue,
            "inp is -1; a web vital is a number ≥ 0",
        ),
        (
            posthog("$exception", "d", json!({"$exception_list": [{"type": "Error"}]})),
            SkipKind::MissingField,
            "an $exception without a message ($exception_list[0].value or $exception_message)",
        ),
        (
            posthog("", "d", json!({})),
            SkipKind::MissingField,
            "event is empty",
        ),
        (
            posthog("signup", "", json!({})),
            SkipKind::MissingField,
            "distinct_id is empty",
        ),
        (
            posthog("signup", "d", json!({"$screen_width": -5})),
            SkipKind::InvalidValue,
            "$screen_width is -5, outside 0–65535",
        ),
        (
            posthog("signup", "d", json!({"$geoip_latitude": "north"})),
            SkipKind::InvalidValue,
            "$geoip_latitude is \"north\", not a number",
        ),
        (
            posthog("signup", "d", json!({"$raw_user_agent": "U".repeat(513)})),
            SkipKind::TooLong,
            "user_agent is 513 characters; the limit is 512",
        ),
        (
            posthog("e".repeat(257).as_str(), "d", json!({})),
            SkipKind::TooLong,
            "event_name is 257 characters; the limit is 256",
        ),
        (
            r#"{"uuid":"u-1","event":"signup","timestamp":"2024-08-19T10:00:00Z","distinct_id":"d","properties":[1]}"#.to_string(),
            SkipKind::InvalidValue,
            "properties is an array, not a JSON object",
        ),
        (
            r#"{"uuid":"u-1","event":"signup","timestamp":"2024-08-19T10:00:00Z","distinct_id":"d","properties":"[1]"}"#.to_string(),
            SkipKind::InvalidValue,
            "properties is an array, not a JSON object",
        ),
        (
            r#"{"uuid":"u-1","event":"signup","distinct_id":"d"}"#.to_string(),
            SkipKind::BadTimestamp,
            "timestamp is empty",
        ),
        (
            r#"{"uuid":"u-1","event":"signup","timestamp":"2024-08-19T10:00:00Z","distinct_id":{}}"#.to_string(),
            SkipKind::InvalidValue,
            "distinct_id is {}, not a string",
        ),
    ];
    for (line, kind, message) in cases {
        assert_eq!(
            fails(Format::Posthog, &line),
            (1, kind, message.to_string()),
            "{line}"
        );
    }
}

#[test]
fn posthog_legacy_exception_and_identified_custom_event() {
    use serde_json::json;
    let ev = one(
        Format::Posthog,
        &posthog(
            "$exception",
            "d",
            json!({"$exception_type": "RangeError", "$exception_message": "too far", "$current_url": "https://a.example/p?q=1"}),
        ),
    );
    assert_eq!(ev.event_type, "error");
    assert_eq!(ev.event_name.as_deref(), Some("RangeError"));
    assert_eq!(ev.properties.as_deref(), Some(r#"{"message":"too far"}"#));
    assert_eq!(
        (
            ev.hostname.as_deref(),
            ev.pathname.as_deref(),
            ev.querystring.as_deref()
        ),
        (Some("a.example"), Some("/p"), Some("?q=1"))
    );
    let ev = one(
        Format::Posthog,
        &posthog(
            "Order Completed",
            "d",
            json!({"total": 12.5, "items": [{"sku": "a"}], "$set": {"x": 1}, "utm_source": "x", "token": "t", "gclid": "g"}),
        ),
    );
    assert_eq!(ev.event_name.as_deref(), Some("Order Completed"));
    assert_eq!(
        ev.properties.as_deref(),
        Some(r#"{"items":[{"sku":"a"}],"total":12.5}"#)
    );
}

#[test]
fn posthog_header_errors() {
    assert_eq!(
        header_error(Format::Posthog, "event,timestamp,distinct_id,properties\n"),
        "the posthog header has no `uuid` column: add uuid to the export (the importer keys each event by it, so that importing a file again stores each event once)"
    );
    assert_eq!(
        header_error(Format::Posthog, "uuid,event,timestamp,distinct_id\n"),
        "the posthog header has no `properties` column (nor any properties.<name> column): export the events' properties"
    );
    assert_eq!(
        header_error(Format::Posthog, "uuid,event,distinct_id,properties\n"),
        "the posthog header has no `timestamp` column: export the events' uuid, event, timestamp, distinct_id and properties"
    );
    assert_eq!(
        header_error(Format::Posthog, "\u{FEFF}\n  \r\n"),
        "the input is empty: a posthog CSV file starts with a header line"
    );
    // `id` (the events API's name for uuid), a BOM, blank lines before the header.
    let input = "\u{FEFF}\r\n\r\nid,event,timestamp,distinct_id,properties.$pathname,person\r\n\
                 u-9,$pageview,2022-07-06T19:37:43.095295+00:00,2,/docs,\r\n";
    let rows = read(Format::Posthog, input);
    assert_eq!(rows.len(), 1);
    let ev = rows[0].as_ref().unwrap();
    assert_eq!(ev.source_id, "u-9");
    assert_eq!(ev.pathname.as_deref(), Some("/docs"));
    assert_eq!(ev.timestamp_ms, 1_657_136_263_095);
    // A bad row's line counts the blank lines before the header.
    let input = "\r\n\r\nid,event,timestamp,distinct_id,properties\r\nu-9,$pageview\r\n";
    let rows = read(Format::Posthog, input);
    assert_eq!(rows[0].as_ref().unwrap_err().line, 4);
}

#[test]
fn posthog_jsonl_after_blank_lines_keeps_line_numbers() {
    let input = format!(
        "\n\n{}\n\n{{broken\n",
        posthog("$pageview", "d", serde_json::json!({}))
    );
    let rows = read(Format::Posthog, &input);
    assert!(rows[0].is_ok());
    let e = rows[1].as_ref().unwrap_err();
    assert_eq!((e.line, e.kind), (5, SkipKind::Malformed));
}

// ------------------------------------------------------------------ input

/// Hands out `data`, then fails.
struct Failing<'a> {
    data: &'a [u8],
}

impl Read for Failing<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.data.is_empty() {
            return Err(io::Error::other("disk on fire"));
        }
        let n = self.data.len().min(out.len());
        out[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

#[test]
fn an_io_error_is_reported_once_and_ends_the_reading() {
    let data = rivulet("") + &rivulet("");
    let input = BufReader::with_capacity(
        16,
        Failing {
            data: data.as_bytes(),
        },
    );
    let mut reader = Reader::new(Format::Rivulet, input).unwrap();
    assert!(reader.next().unwrap().is_ok());
    assert!(reader.next().unwrap().is_ok());
    let e = reader.next().unwrap().unwrap_err();
    assert_eq!(
        (e.line, e.kind, e.message.as_str()),
        (3, SkipKind::Io, "cannot read the input: disk on fire")
    );
    assert!(reader.next().is_none());
    assert!(reader.next().is_none());
    // Before the header, the error is the header's.
    let err = Reader::new(Format::Umami, BufReader::new(Failing { data: b"" }))
        .err()
        .unwrap();
    assert_eq!(err.to_string(), "cannot read the input: disk on fire");
}

/// Reads `path` through a buffer of `capacity` bytes filled `step` bytes at a time.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.data.len().min(self.step).min(out.len());
        out[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fn read_all(format: Format, input: impl BufRead) -> Vec<Result<ImportedEvent, RowError>> {
    Reader::new(format, input).unwrap().collect()
}

#[test]
fn small_reads_give_the_same_results() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/import");
    for (format, name) in [
        (Format::Rivulet, "rivulet.ndjson"),
        (Format::Umami, "umami-website-events.csv"),
        (Format::Posthog, "posthog-events.csv"),
        (Format::Posthog, "posthog-events-ui.csv"),
        (Format::Posthog, "posthog-events.jsonl"),
    ] {
        let data = std::fs::read(dir.join(name)).unwrap();
        let whole = read_all(format, &data[..]);
        for step in [1, 2, 3, 7, 100] {
            let input = BufReader::with_capacity(step, Trickle { data: &data, step });
            assert_eq!(
                read_all(format, input),
                whole,
                "{name}, {step} bytes a read"
            );
        }
        let mut reader = Reader::new(format, &data[..]).unwrap();
        reader.by_ref().for_each(drop);
        assert_eq!(reader.bytes_read(), data.len() as u64, "{name}");
        assert_eq!(
            reader.lines_read(),
            data.iter().filter(|b| **b == b'\n').count() as u64,
            "{name}"
        );
    }
}
