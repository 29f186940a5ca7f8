//! A document compiled into ingest and served as it is (the tracking script, the OpenAPI
//! document): with `X-Content-Type-Options: nosniff`, a `Cache-Control`, and a strong
//! `ETag` per representation, so that `If-None-Match` answers 304 without a body.
//!
//! A document offered gzipped has two representations, the bytes as built and the gzipped
//! bytes, and each has its own strong ETag (the version, and the version + `-gzip`): a
//! strong ETag promises the same bytes, and a cache that holds one must not be told that
//! the other is the same. Which one a request gets follows its `Accept-Encoding` (hence
//! `Vary: Accept-Encoding`), and its `If-None-Match` is compared with that one's ETag.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::io::Write;

/// The bytes of one representation and their ETag.
struct Representation {
    body: Bytes,
    etag: HeaderValue,
}

pub struct Asset {
    /// The first 16 hex digits of the document's SHA-256.
    version: String,
    plain: Representation,
    gzip: Option<Representation>,
    content_type: HeaderValue,
    cache_control: HeaderValue,
}

impl Asset {
    /// `body` served as `content_type` with `cache_control`; also gzipped (made once, here)
    /// to clients that accept it when `gzip` is set.
    pub fn new(
        body: &'static [u8],
        content_type: &'static str,
        cache_control: &'static str,
        gzip: bool,
    ) -> Asset {
        let version = hex::encode(&Sha256::digest(body)[..8]);
        let etag = |suffix: &str| {
            HeaderValue::from_str(&format!("\"{version}{suffix}\"")).expect("hex is a header value")
        };
        let gzip = gzip.then(|| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            gz.write_all(body).expect("gzip into memory");
            Representation {
                body: Bytes::from(gz.finish().expect("gzip into memory")),
                etag: etag("-gzip"),
            }
        });
        Asset {
            plain: Representation {
                body: Bytes::from_static(body),
                etag: etag(""),
            },
            gzip,
            version,
            content_type: HeaderValue::from_static(content_type),
            cache_control: HeaderValue::from_static(cache_control),
        }
    }

    /// The document's version: the plain representation's ETag, without quotes.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The representation `headers` ask for, or 304 when their `If-None-Match` names it.
    pub fn serve(&self, headers: &HeaderMap) -> Response {
        let (rep, gzipped) = match &self.gzip {
            Some(gz) if accepts_gzip(headers) => (gz, true),
            _ => (&self.plain, false),
        };
        let mut resp = if none_match(headers, &rep.etag) {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            let mut r = rep.body.clone().into_response();
            let h = r.headers_mut();
            h.insert(header::CONTENT_TYPE, self.content_type.clone());
            if gzipped {
                h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            }
            r
        };
        let h = resp.headers_mut();
        h.insert(header::CACHE_CONTROL, self.cache_control.clone());
        h.insert(header::ETAG, rep.etag.clone());
        if self.gzip.is_some() {
            h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        }
        h.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        resp
    }
}

/// Whether `Accept-Encoding` accepts gzip (listed, and not with `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            parts.next().is_some_and(|c| c.eq_ignore_ascii_case("gzip"))
                && !parts.any(|p| p.replace(' ', "") == "q=0")
        })
}

/// Whether `If-None-Match` (every line of it) holds `*` or an entity tag that matches
/// `etag` by the weak comparison RFC 9110 prescribes for it (a `W/` prefix is ignored).
fn none_match(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    let ours = etag.as_bytes();
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .any(|v| entity_tags(v.as_bytes()).any(|t| t == b"*" || t == ours))
}

/// The entity tags of one `If-None-Match` value, each with its quotes and without `W/`,
/// or `*`. An opaque tag may hold commas, so the list is read tag by tag rather than split;
/// reading stops at anything malformed.
fn entity_tags(mut s: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        s = s.trim_ascii_start();
        while let Some(rest) = s.strip_prefix(b",") {
            s = rest.trim_ascii_start();
        }
        if let Some(rest) = s.strip_prefix(b"*") {
            s = rest;
            return Some(&b"*"[..]);
        }
        let tag = s.strip_prefix(b"W/").unwrap_or(s);
        if tag.first() != Some(&b'"') {
            return None;
        }
        let end = 1 + tag[1..].iter().position(|&b| b == b'"')?;
        let (found, rest) = tag.split_at(end + 1);
        s = rest;
        Some(found)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_tags_are_read_one_by_one() {
        let tags = |s: &str| {
            entity_tags(s.as_bytes())
                .map(|t| String::from_utf8_lossy(t).into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(tags(r#""a""#), [r#""a""#]);
        assert_eq!(
            tags(r#" W/"a" , "b,c","d" "#),
            [r#""a""#, r#""b,c""#, r#""d""#]
        );
        assert_eq!(tags("*"), ["*"]);
        assert_eq!(tags(r#""a", junk, "b""#), [r#""a""#]);
        assert!(tags(r#""unterminated"#).is_empty());
        assert!(tags("").is_empty());
    }
}
