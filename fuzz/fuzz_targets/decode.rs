//! The request decoder: body reading with a limit, Content-Encoding (identity, gzip,
//! anything else), then the JSON object. Never panics, never returns more than the
//! limit, and every error is one of the decoder's statuses (400, 413, 415).
//!
//! Input layout: byte 0 picks the encoding, byte 1 the limit; the rest is the body.
#![no_main]

use axum::body::Body;
use libfuzzer_sys::fuzz_target;
use rivulet_ingest::api::IngestError;
use rivulet_ingest::event::fields::parse_event;
use rivulet_ingest::request_body::{decode_content, read_body, Linger};
use std::sync::OnceLock;
use std::time::Duration;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    })
}

fn check(e: &IngestError) {
    assert!(
        matches!(
            e,
            IngestError::InvalidJson(_)
                | IngestError::TooLarge(_)
                | IngestError::UnsupportedEncoding(_)
        ),
        "unexpected decode error {e:?}"
    );
    assert!([400, 413, 415].contains(&e.status().as_u16()));
    assert_eq!(e.body()["success"], serde_json::json!(false));
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let encoding = match data[0] % 5 {
        0 => None,
        1 => Some("identity"),
        2 | 3 => Some("gzip"),
        _ => Some("br"),
    };
    let limit = 64 + usize::from(data[1]) * 256;
    let body = bytes::Bytes::copy_from_slice(&data[2..]);
    let read = runtime().block_on(read_body(Body::from(body), limit, Duration::from_secs(5), Linger::NONE));
    let raw = match read {
        Ok(raw) => raw,
        Err(e) => return check(&e),
    };
    assert!(raw.len() <= limit);
    let decoded = match decode_content(encoding, raw, limit) {
        Ok(d) => d,
        Err(e) => return check(&e),
    };
    assert!(decoded.len() <= limit);
    match parse_event(&decoded) {
        Ok(_) => assert!(std::str::from_utf8(&decoded).is_ok()),
        Err(e) => check(&IngestError::from(e)),
    }
});
