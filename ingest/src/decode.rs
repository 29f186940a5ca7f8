//! From request bytes to a JSON object, with bounds on everything a client controls:
//! the body size before and after gzip decoding, and the time to send the body.

use crate::api::IngestError;
use axum::body::Body;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use serde_json::{Map, Value};
use std::io::Read;
use std::time::Duration;

/// Reads the whole body, failing with 413 past `limit` bytes and 408 past `timeout`.
pub async fn read_body(body: Body, limit: usize, timeout: Duration) -> Result<Bytes, IngestError> {
    match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Err(_) => Err(IngestError::BodyTimeout),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(IngestError::TooLarge(limit))
        }
        Ok(Err(_)) => Err(IngestError::InvalidJson(
            "the request body could not be read".into(),
        )),
    }
}

/// Undoes `Content-Encoding` (identity or gzip); the decoded size is bounded by `limit`
/// too, so a small gzip bomb is refused as 413 without being inflated in memory.
pub fn decode_content(
    encoding: Option<&str>,
    raw: Bytes,
    limit: usize,
) -> Result<Bytes, IngestError> {
    match encoding.map(|e| e.trim().to_ascii_lowercase()) {
        None => Ok(raw),
        Some(e) if e.is_empty() || e == "identity" => Ok(raw),
        Some(e) if e == "gzip" || e == "x-gzip" => {
            let mut out = Vec::with_capacity(raw.len().saturating_mul(4).min(limit));
            let mut decoder = flate2::read::GzDecoder::new(&raw[..]).take(limit as u64 + 1);
            decoder
                .read_to_end(&mut out)
                .map_err(|_| IngestError::InvalidJson("the gzip body is corrupt".into()))?;
            if out.len() > limit {
                return Err(IngestError::TooLarge(limit));
            }
            Ok(Bytes::from(out))
        }
        Some(e) => Err(IngestError::UnsupportedEncoding(e)),
    }
}

/// Parses a JSON object. serde_json rejects invalid UTF-8, and its recursion limit
/// (128) turns deeply nested input into an error rather than a stack overflow.
pub fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, IngestError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(IngestError::InvalidJson(
            "the body must be a JSON object".into(),
        )),
        Err(e) => Err(IngestError::InvalidJson(describe(&e))),
    }
}

fn describe(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Eof => "the JSON body ended early".into(),
        _ => format!("{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{write::GzEncoder, Compression};
    use std::io::Write;

    fn gzip(data: &[u8]) -> Bytes {
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(data).unwrap();
        Bytes::from(enc.finish().unwrap())
    }

    #[test]
    fn gzip_round_trip_and_bomb() {
        let body = br#"{"site_id":1}"#;
        assert_eq!(
            &decode_content(Some("gzip"), gzip(body), 1000).unwrap()[..],
            body
        );
        let bomb = gzip(&vec![b' '; 10 * 1024 * 1024]);
        assert!(bomb.len() < 20_000);
        assert!(matches!(
            decode_content(Some("gzip"), bomb, 65536),
            Err(IngestError::TooLarge(_))
        ));
        assert!(matches!(
            decode_content(Some("br"), Bytes::new(), 10),
            Err(IngestError::UnsupportedEncoding(_))
        ));
        assert!(matches!(
            decode_content(Some("gzip"), Bytes::from_static(b"junk"), 10),
            Err(IngestError::InvalidJson(_))
        ));
    }

    #[test]
    fn objects_only() {
        assert!(parse_object(br#"{"a":1}"#).is_ok());
        for bad in [
            &b"[1]"[..],
            b"1",
            b"\"x\"",
            b"{",
            b"",
            b"\xff\xfe",
            b"{\"a\":\"\xff\"}",
        ] {
            assert!(matches!(
                parse_object(bad),
                Err(IngestError::InvalidJson(_))
            ));
        }
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(parse_object(deep.as_bytes()).is_err());
    }
}
