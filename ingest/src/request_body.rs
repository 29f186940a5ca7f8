//! Reading a request's body, with bounds on everything a client controls: the body size
//! before and after gzip decoding, and the time to send the body.

use crate::api::IngestError;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use std::io::Read;
use std::time::Duration;
use tokio::time::{timeout_at, Instant};

/// A request body: hyper's, or one a test builds.
pub trait RequestBody:
    hyper::body::Body<Data = Bytes, Error: Into<axum::BoxError>> + Send + Unpin + 'static
{
}

impl<B> RequestBody for B where
    B: hyper::body::Body<Data = Bytes, Error: Into<axum::BoxError>> + Send + Unpin + 'static
{
}

/// How much of an oversized body is read and thrown away after its 413 has been sent.
///
/// A client that is still sending when the server answers and closes gets a TCP reset,
/// and many clients (Node's `fetch`, Python's `urllib`) then report EPIPE or ECONNRESET
/// instead of the 413 that was already on its way. So, as nginx's lingering close does,
/// the rest of the body is read and discarded, chunk by chunk (memory does not grow
/// with it), until it ends or one of these bounds is reached; only then is the
/// connection closed (or kept alive, if the body ended).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linger {
    /// `OVERSIZE_LINGER_BYTES`: the most bytes read after the 413.
    pub max_bytes: u64,
    /// `OVERSIZE_LINGER_MS`: the longest time spent reading them.
    pub max_time: Duration,
}

impl Linger {
    /// No lingering: for a client that waits for `100 Continue` before it sends its
    /// body, the 413 comes instead and it never sends one.
    pub const NONE: Linger = Linger {
        max_bytes: 0,
        max_time: Duration::ZERO,
    };

    /// Reads and discards the rest of `body` in a task of its own, within the bounds.
    fn discard(self, mut body: impl RequestBody) {
        if self == Linger::NONE {
            return;
        }
        tokio::spawn(async move {
            let end = Instant::now() + self.max_time;
            let mut read = 0u64;
            while read <= self.max_bytes {
                match timeout_at(end, body.frame()).await {
                    Ok(Some(Ok(frame))) => {
                        read += frame.data_ref().map_or(0, |d| d.len() as u64);
                    }
                    _ => break,
                }
            }
            tracing::debug!(bytes = read, "discarded the rest of an oversized body");
        });
    }
}

/// Reads the whole body, failing with 413 past `limit` bytes and 408 past `timeout`.
/// A `Content-Length` over the limit is refused before a byte of the body is read.
/// After a 413 the rest of the body is discarded within `linger`'s bounds.
pub async fn read_body(
    mut body: impl RequestBody,
    limit: usize,
    timeout: Duration,
    linger: Linger,
) -> Result<Bytes, IngestError> {
    if hyper::body::Body::size_hint(&body).lower() > limit as u64 {
        linger.discard(body);
        return Err(IngestError::TooLarge(limit));
    }
    let deadline = Instant::now() + timeout;
    let mut collected = Collected::default();
    loop {
        let frame = match timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(IngestError::BodyTimeout),
            Ok(None) => return Ok(collected.into_bytes()),
            Ok(Some(Ok(frame))) => frame,
            Ok(Some(Err(_))) => {
                return Err(IngestError::InvalidJson(
                    "the request body could not be read".into(),
                ))
            }
        };
        if let Ok(data) = frame.into_data() {
            if collected.len() + data.len() > limit {
                linger.discard(body);
                return Err(IngestError::TooLarge(limit));
            }
            collected.push(data);
        }
    }
}

/// A body's chunks: the first kept as it came (most bodies are one chunk, so no copy),
/// later ones appended to a copy.
#[derive(Default)]
struct Collected {
    first: Bytes,
    more: Option<BytesMut>,
}

impl Collected {
    fn len(&self) -> usize {
        self.more.as_ref().map_or(self.first.len(), BytesMut::len)
    }

    fn push(&mut self, data: Bytes) {
        match &mut self.more {
            Some(more) => more.extend_from_slice(&data),
            None if self.first.is_empty() => self.first = data,
            None => {
                let mut more = BytesMut::with_capacity(self.first.len() + data.len());
                more.extend_from_slice(&self.first);
                more.extend_from_slice(&data);
                self.more = Some(more);
            }
        }
    }

    fn into_bytes(self) -> Bytes {
        self.more.map_or(self.first, BytesMut::freeze)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::fields::EventFields;
    use axum::body::Body;
    use flate2::{write::GzEncoder, Compression};
    use std::io::Write;

    /// A body read as the handlers read it: 400 "Invalid JSON body" unless an object.
    fn parse_event(bytes: &[u8]) -> Result<EventFields<'_>, IngestError> {
        crate::event::fields::parse_event(bytes).map_err(IngestError::from)
    }

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
        assert!(parse_event(br#"{"a":1}"#).is_ok());
        for bad in [
            &b"[1]"[..],
            b"1",
            b"\"x\"",
            b"{",
            b"",
            b"\xff\xfe",
            b"{\"a\":\"\xff\"}",
        ] {
            assert!(matches!(parse_event(bad), Err(IngestError::InvalidJson(_))));
        }
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(parse_event(deep.as_bytes()).is_err());
    }

    mod props {
        use super::*;
        use axum::http::StatusCode;
        use proptest::prelude::*;
        use serde_json::{json, Value};

        const LIMIT: usize = 4096;

        /// The documented error shape: `{"success":false,"error":…}` with the status of
        /// its kind, and a decode error is only ever one of these kinds.
        fn assert_error_shape(e: &IngestError) -> Result<(), TestCaseError> {
            let body = e.body();
            prop_assert_eq!(&body["success"], &json!(false));
            let msg = body["error"].as_str().unwrap_or_default().to_string();
            match e {
                IngestError::InvalidJson(_) => {
                    prop_assert_eq!(e.status(), StatusCode::BAD_REQUEST);
                    prop_assert!(msg.starts_with("Invalid JSON body: "), "{}", msg);
                }
                IngestError::TooLarge(limit) => {
                    prop_assert_eq!(e.status(), StatusCode::PAYLOAD_TOO_LARGE);
                    prop_assert_eq!(*limit, LIMIT);
                }
                IngestError::UnsupportedEncoding(_) => {
                    prop_assert_eq!(e.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE)
                }
                IngestError::BodyTimeout => {
                    prop_assert_eq!(e.status(), StatusCode::REQUEST_TIMEOUT)
                }
                other => prop_assert!(false, "not a decode error: {:?}", other),
            }
            prop_assert!(body.get("details").is_none());
            Ok(())
        }

        fn json_value() -> impl Strategy<Value = Value> {
            crate::event::fields::arbitrary::json_value(any::<String>(), 6, 128, 8)
        }

        /// A gzip stream, then damaged: bytes overwritten, and possibly cut short.
        fn damaged_gzip() -> impl Strategy<Value = Vec<u8>> {
            (
                prop::collection::vec(any::<u8>(), 0..2048),
                prop::collection::vec((any::<usize>(), any::<u8>()), 0..4),
                any::<Option<usize>>(),
            )
                .prop_map(|(data, edits, cut)| {
                    let mut z = gzip(&data).to_vec();
                    for (at, b) in edits {
                        let i = at % z.len();
                        z[i] = b;
                    }
                    if let Some(c) = cut {
                        z.truncate(c % (z.len() + 1));
                    }
                    z
                })
        }

        fn read(body: Body) -> Result<Bytes, IngestError> {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap()
                .block_on(read_body(body, LIMIT, Duration::from_secs(5), Linger::NONE))
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            // Any bytes: an object, or 400 in the documented shape; never a panic.
            #[test]
            fn any_bytes_parse_or_400(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
                match parse_event(&bytes) {
                    Ok(_) => prop_assert!(std::str::from_utf8(&bytes).is_ok()),
                    Err(e) => {
                        prop_assert!(matches!(e, IngestError::InvalidJson(_)));
                        assert_error_shape(&e)?;
                    }
                }
            }

            // Any JSON value: accepted exactly when it is an object.
            #[test]
            fn any_json_value_objects_only(v in json_value()) {
                let text = serde_json::to_vec(&v).unwrap();
                match (parse_event(&text), &v) {
                    (Ok(_), Value::Object(_)) => {}
                    (Err(e), Value::Object(_)) => prop_assert!(false, "an object was refused: {}", e),
                    (Ok(_), _) => prop_assert!(false, "a non-object was accepted"),
                    (Err(e), _) => assert_error_shape(&e)?,
                }
            }

            // Any bytes declared as gzip: decoded within the limit, or 400/413.
            #[test]
            fn any_bytes_as_gzip(bytes in prop::collection::vec(any::<u8>(), 0..1024)) {
                match decode_content(Some("gzip"), Bytes::from(bytes), LIMIT) {
                    Ok(out) => prop_assert!(out.len() <= LIMIT),
                    Err(e) => assert_error_shape(&e)?,
                }
            }

            // Damaged gzip streams: never a panic, never more than the limit.
            #[test]
            fn damaged_gzip_streams(z in damaged_gzip()) {
                match decode_content(Some("gzip"), Bytes::from(z), LIMIT) {
                    Ok(out) => prop_assert!(out.len() <= LIMIT),
                    Err(e) => assert_error_shape(&e)?,
                }
            }

            // Valid gzip: the original back when it fits, else 413.
            #[test]
            fn gzip_round_trip_or_413(data in prop::collection::vec(any::<u8>(), 0..(2 * LIMIT))) {
                match decode_content(Some("gzip"), gzip(&data), LIMIT) {
                    Ok(out) => prop_assert_eq!(&out[..], &data[..]),
                    Err(e) => {
                        prop_assert!(data.len() > LIMIT);
                        prop_assert!(matches!(e, IngestError::TooLarge(_)));
                    }
                }
            }

            // Any Content-Encoding header: identity and gzip only, otherwise 415.
            #[test]
            fn any_encoding(enc in "\\PC{0,12}", data in prop::collection::vec(any::<u8>(), 0..64)) {
                let known = matches!(enc.trim().to_ascii_lowercase().as_str(), "" | "identity" | "gzip" | "x-gzip");
                match decode_content(Some(&enc), Bytes::from(data), LIMIT) {
                    Ok(_) => prop_assert!(known),
                    Err(e) => {
                        prop_assert!(known || matches!(e, IngestError::UnsupportedEncoding(_)));
                        assert_error_shape(&e)?;
                    }
                }
            }

            // A body in any chunks, with or without a length: whole when it fits, else 413.
            #[test]
            fn body_in_chunks(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..1500), 0..8)) {
                let total: usize = chunks.iter().map(Vec::len).sum();
                let whole: Vec<u8> = chunks.concat();
                let stream = futures::stream::iter(
                    chunks.into_iter().map(|c| Ok::<_, std::convert::Infallible>(Bytes::from(c))),
                );
                for body in [Body::from_stream(stream), Body::from(whole.clone())] {
                    match read(body) {
                        Ok(b) => prop_assert_eq!(&b[..], &whole[..]),
                        Err(e) => {
                            prop_assert!(total > LIMIT);
                            prop_assert!(matches!(e, IngestError::TooLarge(_)));
                        }
                    }
                }
            }
        }
    }
}
