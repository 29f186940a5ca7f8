//! `GET /api/script.js`: the browser tracking script (built from `sdk/browser/`, committed
//! as `ingest/assets/script.js`), with caching headers, its version as the ETag, and a
//! gzipped copy made once for clients that accept it.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::sync::LazyLock;

/// The script, as built.
pub const SCRIPT: &[u8] = include_bytes!("../assets/script.js");

/// How long browsers and caches may keep it without asking again.
const CACHE_CONTROL: &str = "public, max-age=3600";

struct Served {
    /// The first 16 hex digits of the script's SHA-256: its version.
    version: String,
    etag: HeaderValue,
    gzipped: Vec<u8>,
}

static SERVED: LazyLock<Served> = LazyLock::new(|| {
    let version = hex::encode(&Sha256::digest(SCRIPT)[..8]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(SCRIPT).expect("gzip into memory");
    Served {
        etag: HeaderValue::from_str(&format!("\"{version}\"")).expect("hex is a header value"),
        version,
        gzipped: gz.finish().expect("gzip into memory"),
    }
});

/// The script's version (what the ETag holds).
pub fn version() -> &'static str {
    &SERVED.version
}

pub fn serve(headers: &HeaderMap) -> Response {
    let served = &*SERVED;
    let mut resp = if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == served.etag.as_bytes())
    {
        StatusCode::NOT_MODIFIED.into_response()
    } else if accepts_gzip(headers) {
        let mut r = served.gzipped.clone().into_response();
        r.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        r
    } else {
        SCRIPT.into_response()
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/javascript; charset=utf-8"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    h.insert(header::ETAG, served.etag.clone());
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Pages that isolate themselves (COEP) may still load it from another origin.
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("cross-origin"),
    );
    resp
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_served_to_clients_that_accept_it_and_the_etag_revalidates() {
        let mut h = HeaderMap::new();
        let plain = serve(&h);
        assert_eq!(plain.status(), StatusCode::OK);
        assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("br, gzip;q=0.8"),
        );
        let gz = serve(&h);
        assert_eq!(gz.headers()[header::CONTENT_ENCODING], "gzip");
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip;q=0"),
        );
        assert!(serve(&h).headers().get(header::CONTENT_ENCODING).is_none());
        let etag = plain.headers()[header::ETAG].clone();
        assert_eq!(etag.to_str().unwrap(), format!("\"{}\"", version()));
        h.insert(header::IF_NONE_MATCH, etag);
        assert_eq!(serve(&h).status(), StatusCode::NOT_MODIFIED);
    }
}
