//! `GET /api/script.js`: the browser tracking script (built from `sdk/browser/`, committed
//! as `ingest/assets/script.js`), with caching headers and a gzipped copy made once for
//! clients that accept it; each of the two has its own ETag, from the script's version
//! (`asset`).

use crate::asset::Asset;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use std::sync::LazyLock;

/// The script, as built.
pub const SCRIPT: &[u8] = include_bytes!("../assets/script.js");

/// How long browsers and caches may keep it without asking again.
const CACHE_CONTROL: &str = "public, max-age=3600";

static SERVED: LazyLock<Asset> = LazyLock::new(|| {
    Asset::new(
        SCRIPT,
        "application/javascript; charset=utf-8",
        CACHE_CONTROL,
        true,
    )
});

/// The script's version: the first 16 hex digits of its SHA-256, what the ETags hold.
pub fn version() -> &'static str {
    SERVED.version()
}

pub fn serve(headers: &HeaderMap) -> Response {
    let mut resp = SERVED.serve(headers);
    // Pages that isolate themselves (COEP) may still load it from another origin.
    resp.headers_mut().insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("cross-origin"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{header, StatusCode};

    #[test]
    fn gzip_is_served_to_clients_that_accept_it_each_with_its_own_etag() {
        let mut h = HeaderMap::new();
        let plain = serve(&h);
        assert_eq!(plain.status(), StatusCode::OK);
        assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
        assert_eq!(plain.headers()[header::ETAG], format!("\"{}\"", version()));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("br, gzip;q=0.8"),
        );
        let gz = serve(&h);
        assert_eq!(gz.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(
            gz.headers()[header::ETAG],
            format!("\"{}-gzip\"", version())
        );
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip;q=0"),
        );
        assert!(serve(&h).headers().get(header::CONTENT_ENCODING).is_none());
        h.insert(header::IF_NONE_MATCH, plain.headers()[header::ETAG].clone());
        assert_eq!(serve(&h).status(), StatusCode::NOT_MODIFIED);
    }
}
