//! Ingest's wire contract in-process (docs/design.md, "Wire contract"): requests go
//! through the real router and handlers, with doubles for Kafka, keys and the per-key
//! rate limit (`rivulet_ingest::testing`). Nothing here needs the local stack; what
//! does (Kafka's acks, the key cache over Redis and the registry, Redis's shared rate
//! limits, the listener's timeouts and connection caps, the process's memory) is in
//! `tests/tests/ingest_*.rs`.

mod bad_input;
mod browser;
mod client_time;
mod contract;
mod documents;
mod identify;
mod kinds;

use flate2::{write::GzEncoder, Compression};
use rivulet_ingest::testing::Reply;
use std::io::Write;

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::best());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// 400 "Invalid JSON body: …", with no details.
#[track_caller]
pub fn assert_invalid_json(r: &Reply, case: &str) {
    let body = r.json();
    assert_eq!(r.status, 400, "{case}: {body}");
    assert_eq!(body["success"], false, "{case}");
    assert!(r.error().starts_with("Invalid JSON body"), "{case}: {body}");
    assert!(body.get("details").is_none(), "{case}: {body}");
}

/// 400 "Invalid payload" with a `fieldErrors.<field>`.
#[track_caller]
pub fn assert_field_error(r: &Reply, field: &str, case: &str) {
    let body = r.json();
    assert_eq!(r.status, 400, "{case}: {body}");
    assert_eq!(r.error(), "Invalid payload", "{case}: {body}");
    assert!(
        body["details"]["fieldErrors"][field].is_array(),
        "{case}: expected a fieldErrors.{field}: {body}"
    );
}

/// The first message of `fieldErrors.<field>`.
pub fn field_error(r: &Reply, field: &str) -> String {
    r.json()["details"]["fieldErrors"][field][0]
        .as_str()
        .unwrap_or_default()
        .to_string()
}
