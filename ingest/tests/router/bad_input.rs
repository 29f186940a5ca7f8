//! Malformed bodies get their documented 4xx (issue 7, "Bad input"), and a valid event
//! is accepted after each. Moved from tests/tests/ingest_bad_input.rs, which keeps what
//! needs a real process: its memory, its sockets and the listener's timeouts.

use crate::{assert_field_error, assert_invalid_json, gzip};
use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use rivulet_ingest::testing::{key_of, TestIngest, SITE};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// The JSON text of SITE's key with `site_id` written as given.
fn with_site_id(site_id: &str) -> String {
    format!(r#"{{"api_key":"{}","site_id":{site_id}}}"#, key_of(SITE))
}

/// The JSON text of an event of SITE with `fields` (JSON members) added.
fn body_with(fields: &str) -> String {
    format!(
        r#"{{"api_key":"{}","site_id":{SITE},{fields}}}"#,
        key_of(SITE)
    )
}

async fn post_text(ingest: &TestIngest, body: &str) -> rivulet_ingest::testing::Reply {
    ingest.post("/api/track", body.to_string(), &[]).await
}

/// The check after every case: a valid event is still accepted.
async fn still_serves(ingest: &TestIngest) {
    let r = ingest
        .post_json("/api/track", &ingest.event(json!({"pathname": "/ok"})))
        .await;
    assert_eq!(
        r.status,
        200,
        "a valid event after the bad input: {:?}",
        r.json()
    );
}

#[tokio::test]
async fn invalid_utf8_is_400() {
    let ingest = TestIngest::new();
    let key = key_of(SITE);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("bare bytes", b"\xff\xfe\xfd".to_vec()),
        (
            "in a string value",
            [&br#"{"site_id":1,"pathname":"/a"#[..], b"\xc3\x28", b"\"}"].concat(),
        ),
        (
            "in a key",
            [&b"{\"site_id\":1,\""[..], b"\xed\xa0\x80", b"\":1}"].concat(),
        ),
        (
            "a lone surrogate escape is allowed by JSON but not by UTF-8",
            [
                &b"{\"api_key\":\""[..],
                key.as_bytes(),
                format!("\",\"site_id\":{SITE},\"pathname\":\"\\ud800\"}}").as_bytes(),
            ]
            .concat(),
        ),
        (
            "overlong encoding",
            b"{\"site_id\":1,\"a\":\"\xc0\xaf\"}".to_vec(),
        ),
    ];
    for (case, body) in cases {
        let r = ingest.post("/api/track", body.clone(), &[]).await;
        assert_invalid_json(&r, case);
        let r = ingest
            .post("/api/track", gzip(&body), &[("content-encoding", "gzip")])
            .await;
        assert_invalid_json(&r, &format!("{case}, gzipped"));
    }
    assert!(ingest.sink().messages().is_empty());
    still_serves(&ingest).await;
}

#[tokio::test]
async fn deeply_nested_json_is_400_not_a_crash() {
    // Room for 100,000 levels in one body (the default limit would answer 413 first).
    let ingest = TestIngest::builder()
        .config(|c| c.max_body_bytes = 1 << 20)
        .build();
    let levels = 100_000;
    let arrays = format!(
        r#"{{"site_id":{SITE},"x":{}{}}}"#,
        "[".repeat(levels),
        "]".repeat(levels)
    );
    let objects = format!(
        r#"{{"site_id":{SITE},"x":{}1{}}}"#,
        r#"{"a":"#.repeat(levels),
        "}".repeat(levels)
    );
    let unclosed = "[".repeat(levels);
    for (case, body) in [
        ("100k nested arrays", arrays),
        ("100k nested objects", objects),
        ("100k unclosed arrays", unclosed),
    ] {
        let r = ingest.post("/api/track", body, &[]).await;
        assert_invalid_json(&r, case);
        assert!(
            r.error().contains("recursion limit"),
            "{case}: {}",
            r.error()
        );
    }
    let batch = format!(
        r#"{{"site_id":{SITE},"events":[{}{}]}}"#,
        "[".repeat(levels),
        "]".repeat(levels)
    );
    let r = ingest.post("/api/track/batch", batch, &[]).await;
    assert_invalid_json(&r, "100k levels in a batch");
    // Nesting within serde_json's limit (128) is fine in an ignored field.
    let nested: Value =
        serde_json::from_str(&format!("{}{}", "[".repeat(100), "]".repeat(100))).unwrap();
    let ok = ingest.event(json!({ "x": nested }));
    assert_eq!(ingest.post_json("/api/track", &ok).await.status, 200);
    still_serves(&ingest).await;
}

#[tokio::test]
async fn huge_numbers_are_400() {
    let ingest = TestIngest::new();
    // Out of f64's range: serde_json refuses the number itself.
    for body in [
        with_site_id("1e400"),
        body_with(r#""screenWidth":1e400"#),
        body_with(r#""screenHeight":-1e400"#),
        body_with(r#""timestamp":1e999999"#),
    ] {
        let r = post_text(&ingest, &body).await;
        assert_invalid_json(&r, &body);
        assert!(
            r.error().contains("number out of range"),
            "{body}: {}",
            r.error()
        );
    }
    // Valid JSON numbers outside each field's range: field errors.
    for (body, field) in [
        (with_site_id("18446744073709551617"), "site_id"),
        (with_site_id("4294967296"), "site_id"),
        (with_site_id(r#""18446744073709551617""#), "site_id"),
        (with_site_id("-9223372036854775809"), "site_id"),
        (with_site_id("1e300"), "site_id"),
        (
            body_with(r#""screenWidth":18446744073709551617"#),
            "screenWidth",
        ),
        (body_with(r#""screenWidth":65536"#), "screenWidth"),
        (body_with(r#""screenHeight":-1"#), "screenHeight"),
        (
            body_with(r#""timestamp":18446744073709551617"#),
            "timestamp",
        ),
        (body_with(r#""timestamp":1e300"#), "timestamp"),
    ] {
        let r = post_text(&ingest, &body).await;
        assert_field_error(&r, field, &body);
    }
    // A 100,000-digit number is over the body limit; 50,000 digits are a number out of
    // f64's range.
    let digits = body_with(&format!(r#""screenWidth":{}"#, "9".repeat(100_000)));
    assert_eq!(post_text(&ingest, &digits).await.status, 413);
    let digits = body_with(&format!(r#""screenWidth":{}"#, "9".repeat(50_000)));
    assert_invalid_json(&post_text(&ingest, &digits).await, "50,000 digits");
    still_serves(&ingest).await;
}

#[tokio::test]
async fn nan_like_values_are_400() {
    let ingest = TestIngest::new();
    // Not JSON at all: JSON has no NaN or Infinity literals.
    for body in [
        with_site_id("NaN"),
        with_site_id("Infinity"),
        body_with(r#""screenWidth":-Infinity"#),
        body_with(r#""screenWidth":nan"#),
        body_with(r#""timestamp":+1"#),
        body_with(r#""screenWidth":0x10"#),
    ] {
        assert_invalid_json(&post_text(&ingest, &body).await, &body);
    }
    // As strings they are strings, which these fields do not accept.
    for (fields, field) in [
        (r#""screenWidth":"NaN""#, "screenWidth"),
        (r#""screenHeight":"Infinity""#, "screenHeight"),
        (r#""timestamp":"NaN""#, "timestamp"),
        (r#""timestamp":"-Infinity""#, "timestamp"),
    ] {
        let body = body_with(fields);
        assert_field_error(&post_text(&ingest, &body).await, field, &body);
    }
    for site_id in ["NaN", "Infinity", "-Infinity", "1e3", "0x1"] {
        let body = json!({"api_key": key_of(SITE), "site_id": site_id});
        let r = ingest.post_json("/api/track", &body).await;
        assert_field_error(&r, "site_id", &body.to_string());
    }
    // In a free-text field they are just text.
    let r = ingest
        .post_json(
            "/api/track",
            &ingest.event(json!({"page_title": "NaN", "properties": "{\"x\":\"Infinity\"}"})),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    still_serves(&ingest).await;
}

#[tokio::test]
async fn duplicate_keys_last_one_wins() {
    // Decided: like JSON.parse (what browsers and the Node SDK use), the last
    // occurrence of a key wins. Validation, the key check and the stored event all read
    // the one parsed object, so no two parts of ingest can see different values.
    let ingest = TestIngest::new();
    let key = key_of(SITE);
    let other_site = SITE + 1_000_000;
    let event_id = uuid::Uuid::new_v4();
    let body = format!(
        r#"{{"site_id":{other_site},"api_key":"rb_00000000000000000000000000000000","pathname":"/first","api_key":"{key}","site_id":{SITE},"pathname":"/last","event_id":"{event_id}"}}"#
    );
    let r = post_text(&ingest, &body).await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    let stored = ingest.sink().events();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].event_id, event_id);
    assert_eq!(stored[0].site_id, SITE);
    assert_eq!(stored[0].pathname.as_deref(), Some("/last"));

    // The other way round the last values are invalid, and so is the request.
    let body = format!(r#"{{"api_key":"{key}","site_id":{SITE},"site_id":"NaN"}}"#);
    assert_field_error(
        &post_text(&ingest, &body).await,
        "site_id",
        "a bad last site_id",
    );
    let body = format!(r#"{{"api_key":"{key}","site_id":{SITE},"api_key":"rb_nope"}}"#);
    assert_eq!(post_text(&ingest, &body).await.status, 401);
    assert_eq!(ingest.sink().events().len(), 1);
    still_serves(&ingest).await;
}

/// 64 MiB of spaces, gzipped: under 64 KiB.
static BOMB: LazyLock<Vec<u8>> = LazyLock::new(|| gzip(&vec![b' '; 64 << 20]));

#[tokio::test]
async fn gzip_bomb_is_413_quickly() {
    // Over both endpoints' limits once inflated (64 KiB and 1 MiB), under them before.
    // The process's memory through a 1 GiB bomb is measured on the real service
    // (tests/tests/ingest_bad_input.rs).
    assert!(BOMB.len() < 64 << 10, "the bomb is {} bytes", BOMB.len());
    let ingest = TestIngest::new();
    for path in ["/api/track/batch", "/api/track"] {
        for encoding in ["gzip", "x-gzip", " GZIP "] {
            let start = Instant::now();
            let r = ingest
                .post(path, BOMB.clone(), &[("content-encoding", encoding)])
                .await;
            assert_eq!(r.status, 413, "{path} {encoding:?}: {:?}", r.json());
            assert!(r.error().contains("too large"), "{}", r.error());
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "{path}: the bomb took {:?}",
                start.elapsed()
            );
        }
    }
    assert!(ingest.sink().messages().is_empty());
    still_serves(&ingest).await;
}

#[tokio::test]
async fn corrupt_gzip_is_400() {
    let ingest = TestIngest::new();
    let good = gzip(ingest.event(json!({})).to_string().as_bytes());
    let truncated = good[..good.len() / 2].to_vec();
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0xff;
    for (case, body) in [
        ("not gzip at all", b"{\"site_id\":1}".to_vec()),
        ("truncated", truncated),
        ("a byte flipped", flipped),
    ] {
        for path in ["/api/track", "/api/track/batch"] {
            let r = ingest
                .post(path, body.clone(), &[("content-encoding", "gzip")])
                .await;
            assert_invalid_json(&r, &format!("{case} to {path}"));
            assert_eq!(r.error(), "Invalid JSON body: the gzip body is corrupt");
        }
    }
    still_serves(&ingest).await;
}

fn over(limit: usize) -> String {
    serde_json::to_string(
        &json!({"api_key": key_of(SITE), "site_id": SITE, "padding": "x".repeat(limit)}),
    )
    .unwrap()
}

/// A body of `chunks` sent as it comes, with no length known beforehand (chunked).
fn streamed(
    chunks: Vec<Vec<u8>>,
) -> StreamBody<impl futures::Stream<Item = Result<Frame<Bytes>, Infallible>> + Unpin> {
    StreamBody::new(futures::stream::iter(
        chunks.into_iter().map(|c| Ok(Frame::data(Bytes::from(c)))),
    ))
}

#[tokio::test]
async fn too_large_is_413_before_and_after_gzip() {
    let ingest = TestIngest::new();
    let message = "Request body too large: the limit is 65536 bytes";
    // A known length over the limit.
    let big = over(70_000);
    let r = ingest.post("/api/track", big.clone(), &[]).await;
    assert_eq!(
        (r.status, r.json()),
        (413, json!({"success": false, "error": message}))
    );
    // No length known: cut off at the limit.
    let chunks = big.as_bytes().chunks(8192).map(<[u8]>::to_vec).collect();
    let r = ingest
        .send(
            axum::http::Request::post("/api/track")
                .body(streamed(chunks))
                .unwrap(),
        )
        .await;
    assert_eq!(r.status, 413, "streamed: {:?}", r.json());
    // Under the limit gzipped, over it once inflated.
    let gz = gzip(big.as_bytes());
    assert!(gz.len() < 65536);
    let r = ingest
        .post("/api/track", gz, &[("content-encoding", "gzip")])
        .await;
    assert_eq!(
        (r.status, r.json()),
        (413, json!({"success": false, "error": message}))
    );
    // The batch endpoint's limit is its own (1 MiB), before and after gzip.
    let batch = |padding: usize| {
        json!({"api_key": key_of(SITE), "site_id": SITE, "events": [{"padding": "x".repeat(padding)}]})
            .to_string()
    };
    assert_eq!(
        ingest
            .post("/api/track/batch", batch(70_000), &[])
            .await
            .status,
        200
    );
    let r = ingest.post("/api/track/batch", batch(1 << 20), &[]).await;
    assert_eq!(
        r.error(),
        "Request body too large: the limit is 1048576 bytes"
    );
    let r = ingest
        .post(
            "/api/track/batch",
            gzip(batch(1 << 20).as_bytes()),
            &[("content-encoding", "gzip")],
        )
        .await;
    assert_eq!(r.status, 413);
    // At the limit exactly is fine.
    let at = over(0);
    let pad = 65536 - at.len();
    let at = over(pad);
    assert_eq!(at.len(), 65536);
    assert_eq!(ingest.post("/api/track", at, &[]).await.status, 200);
    still_serves(&ingest).await;
}

#[tokio::test]
async fn gzip_and_identity_are_accepted_and_other_encodings_are_415() {
    let ingest = TestIngest::new();
    let ev = ingest.event(json!({"pathname": "/gz"})).to_string();
    for (encoding, body) in [
        ("gzip", gzip(ev.as_bytes())),
        ("x-gzip", gzip(ev.as_bytes())),
        ("identity", ev.clone().into_bytes()),
        ("", ev.clone().into_bytes()),
    ] {
        let r = ingest
            .post("/api/track", body, &[("content-encoding", encoding)])
            .await;
        assert_eq!(
            (r.status, r.json()),
            (200, json!({"success": true})),
            "{encoding:?}"
        );
    }
    for path in ["/api/track", "/api/track/batch", "/api/identify"] {
        for encoding in ["br", "deflate", "gzip, br"] {
            let r = ingest
                .post(path, ev.clone(), &[("content-encoding", encoding)])
                .await;
            assert_eq!(r.status, 415, "{path} {encoding}");
            assert_eq!(
                r.error(),
                format!("Unsupported Content-Encoding {encoding:?}: send identity or gzip")
            );
        }
    }
}

#[tokio::test]
async fn a_body_not_sent_in_time_is_408() {
    let ingest = TestIngest::builder()
        .config(|c| c.body_timeout = Duration::from_millis(300))
        .build();
    // Ten bytes, then nothing: the client never finishes its body.
    let stalled = StreamBody::new(futures::StreamExt::chain(
        futures::stream::iter([Ok::<_, Infallible>(Frame::data(Bytes::from_static(
            b"{\"site_id\"",
        )))]),
        futures::stream::pending(),
    ));
    let start = Instant::now();
    let r = ingest
        .send(
            axum::http::Request::post("/api/track")
                .body(stalled)
                .unwrap(),
        )
        .await;
    let after = start.elapsed();
    assert_eq!(
        (r.status, r.json()),
        (
            408,
            json!({"success": false, "error": "Request body not received in time"})
        )
    );
    assert!(
        after >= Duration::from_millis(250) && after < Duration::from_secs(3),
        "408 after {after:?}"
    );
    still_serves(&ingest).await;
}
