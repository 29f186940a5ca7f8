//! The documents ingest serves from its binary, `GET /api/openapi.json` and
//! `GET /api/script.js` (docs/design.md, "GET /api/script.js", "Other routes"): `nosniff`,
//! an hour in caches, and a strong ETag per representation that `If-None-Match`
//! revalidates with a 304.

use axum::http::Method;
use rivulet_ingest::testing::{openapi, request, Reply, TestIngest};
use std::io::Read;

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .expect("a gzip body");
    out
}

async fn get(ingest: &TestIngest, path: &str, headers: &[(&str, &str)]) -> Reply {
    ingest.send(request(Method::GET, path, "", headers)).await
}

/// A strong entity tag: quoted, without `W/`, of 16 hex digits and an optional suffix.
#[track_caller]
fn assert_strong_etag(r: &Reply, suffix: &str) -> String {
    let etag = r.header("etag").expect("an ETag").to_string();
    let inner = etag
        .strip_prefix('"')
        .and_then(|e| e.strip_suffix('"'))
        .and_then(|e| e.strip_suffix(suffix))
        .unwrap_or_else(|| panic!("a strong ETag ending in {suffix:?}: {etag}"));
    assert!(
        inner.len() == 16 && inner.bytes().all(|b| b.is_ascii_hexdigit()),
        "{etag}"
    );
    etag
}

/// What every answer of a document carries, 200 and 304 alike.
#[track_caller]
fn assert_cached(r: &Reply) {
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("cache-control"), Some("public, max-age=3600"));
}

#[track_caller]
fn assert_not_modified(r: &Reply, etag: &str) {
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(r.header("etag"), Some(etag));
    assert_cached(r);
}

#[tokio::test]
async fn the_openapi_document_is_nosniff_cached_and_revalidated_by_its_etag() {
    let ingest = TestIngest::new();
    let doc = get(&ingest, "/api/openapi.json", &[]).await;
    assert_eq!(doc.status, 200);
    assert_eq!(doc.json(), openapi::document());
    assert_eq!(doc.header("content-type"), Some("application/json"));
    assert_cached(&doc);
    let etag = assert_strong_etag(&doc, "");
    // One representation: nothing to vary on.
    assert_eq!(doc.header("vary"), None);

    let weak = format!("W/{etag}");
    let listed = format!("\"0123456789abcdef\", {etag}");
    for matching in [etag.as_str(), &weak, &listed, "*"] {
        let r = get(&ingest, "/api/openapi.json", &[("if-none-match", matching)]).await;
        assert_not_modified(&r, &etag);
    }
    for other in ["\"0123456789abcdef\"", "\"\"", "garbage"] {
        let r = get(&ingest, "/api/openapi.json", &[("if-none-match", other)]).await;
        assert_eq!(r.status, 200, "{other}");
        assert_eq!(r.json(), openapi::document());
        assert_eq!(r.header("etag"), Some(etag.as_str()));
    }
    // The same answer to a second request: the ETag is the document's, not the request's.
    let again = get(&ingest, "/api/openapi.json", &[]).await;
    assert_eq!(again.header("etag"), Some(etag.as_str()));
    assert_eq!(again.body, doc.body);
}

#[tokio::test]
async fn the_script_has_a_strong_etag_per_representation() {
    let ingest = TestIngest::new();
    let gzip = [("accept-encoding", "gzip, deflate, br")];
    let plain = get(&ingest, "/api/script.js", &[]).await;
    let gz = get(&ingest, "/api/script.js", &gzip).await;
    for r in [&plain, &gz] {
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("content-type"),
            Some("application/javascript; charset=utf-8")
        );
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        assert_cached(r);
    }
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert_eq!(gunzip(&gz.body), plain.body.as_ref());
    assert_ne!(gz.body, plain.body);
    // Different bytes, different strong ETags: the same version, and `-gzip` for the
    // gzipped body.
    let plain_etag = assert_strong_etag(&plain, "");
    let gz_etag = assert_strong_etag(&gz, "-gzip");
    assert_eq!(
        gz_etag,
        format!("{}-gzip\"", plain_etag.trim_end_matches('"'))
    );

    // If-None-Match is compared with the ETag of the representation the request gets.
    // The request's headers, the representation it gets, and the ETag of a 304 if any.
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, Option<&'a str>);
    let cases: [Case; 6] = [
        (
            &[("if-none-match", &plain_etag)],
            "plain",
            Some(&plain_etag),
        ),
        (&[("if-none-match", &gz_etag)], "plain", None),
        (
            &[("if-none-match", &gz_etag), gzip[0]],
            "gzip",
            Some(&gz_etag),
        ),
        (&[("if-none-match", &plain_etag), gzip[0]], "gzip", None),
        (
            &[
                ("if-none-match", &format!("{plain_etag}, W/{gz_etag}")),
                gzip[0],
            ],
            "gzip",
            Some(&gz_etag),
        ),
        (
            &[("if-none-match", "*"), ("accept-encoding", "gzip;q=0")],
            "plain",
            Some(&plain_etag),
        ),
    ];
    for (headers, rep, not_modified) in cases {
        let r = get(&ingest, "/api/script.js", headers).await;
        let case = format!("{headers:?}");
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{case}");
        match not_modified {
            Some(etag) => assert_not_modified(&r, etag),
            None => {
                // The other representation's ETag does not stand for this one's bytes.
                assert_eq!(r.status, 200, "{case}");
                let (etag, encoding) = match rep {
                    "gzip" => (&gz_etag, Some("gzip")),
                    _ => (&plain_etag, None),
                };
                assert_eq!(r.header("etag"), Some(etag.as_str()), "{case}");
                assert_eq!(r.header("content-encoding"), encoding, "{case}");
            }
        }
    }
}
