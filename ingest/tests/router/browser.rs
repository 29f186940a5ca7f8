//! The browser path (docs/security.md, "The browser path"): a request with no key and an
//! `Origin` is accepted only from an origin its site lists, answered with CORS for that exact
//! origin, limited per client address and site, and may not name its own IP or user
//! agent; CORS preflights are answered for any listed origin.

use axum::http::Method;
use rivulet_ingest::handlers::BROWSER_KEY_ID;
use rivulet_ingest::testing::{
    key_of, openapi, request, Reply, TestIngest, OTHER_SITE, PEER, SITE,
};
use serde_json::json;

const SHOP: &str = "https://shop.example";

/// A browser event of `site` sent from `origin` (none when `None`), as `sendBeacon` sends
/// it: `text/plain`, with credentials.
async fn beacon(ingest: &TestIngest, path: &str, site: u32, origin: Option<&str>) -> Reply {
    let body = match path {
        "/api/track/batch" => {
            json!({"site_id": site, "events": [{"pathname": "/b1"}, {"pathname": "/b2"}]})
        }
        "/api/identify" => json!({"site_id": site, "user_id": "u-1", "anonymous_id": "a-1"}),
        _ => json!({"site_id": site, "pathname": "/from-the-browser"}),
    };
    let mut headers = vec![
        ("content-type", "text/plain;charset=UTF-8"),
        ("user-agent", "Mozilla/5.0 Browser"),
    ];
    if let Some(origin) = origin {
        headers.push(("origin", origin));
    }
    ingest
        .send(request(Method::POST, path, body.to_string(), &headers))
        .await
}

#[track_caller]
fn assert_cors_for(r: &Reply, origin: &str) {
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some(origin),
        "{:?}",
        r.headers
    );
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(r.header("vary"), Some("Origin"));
}

#[track_caller]
fn assert_no_cors(r: &Reply) {
    assert!(
        r.header("access-control-allow-origin").is_none(),
        "{:?}",
        r.headers
    );
    assert!(r.header("access-control-allow-credentials").is_none());
}

#[tokio::test]
async fn an_event_from_a_listed_origin_is_accepted_with_cors_for_that_origin() {
    let ingest = TestIngest::builder().browser(SITE, true, true).build();
    for path in ["/api/track", "/api/track/batch", "/api/identify"] {
        let r = beacon(&ingest, path, SITE, Some(SHOP)).await;
        assert_eq!(r.status, 200, "{path}: {:?}", r.json());
        assert_cors_for(&r, SHOP);
    }
    let events = ingest.sink().events();
    assert_eq!(events.len(), 3);
    for ev in &events {
        assert_eq!(ev.key_id, BROWSER_KEY_ID);
        assert_eq!(ev.user_agent, "Mozilla/5.0 Browser");
    }
    assert_eq!(ingest.sink().identifies()[0]["key_id"], BROWSER_KEY_ID);
    // The key path's rate limit is not asked: the browser path has its own.
    assert!(ingest.limits().asked().is_empty());
}

#[tokio::test]
async fn subdomains_only_where_the_site_allows_them_and_hosts_match_exactly() {
    let ingest = TestIngest::new();
    for (site, origin, status) in [
        (SITE, "https://www.shop.example", 200),
        (SITE, "http://a.b.shop.example:8080", 200),
        (SITE, "https://SHOP.example", 200),
        (SITE, "https://evilshop.example", 403),
        (SITE, "https://shop.example.evil.test", 403),
        (OTHER_SITE, "https://other.example", 200),
        (OTHER_SITE, "https://www.other.example", 403),
        // A listed origin of another site.
        (OTHER_SITE, SHOP, 403),
        (SITE, "null", 403),
        (SITE, "shop.example", 403),
    ] {
        let r = beacon(&ingest, "/api/track", site, Some(origin)).await;
        assert_eq!(
            r.status,
            status,
            "site {site} from {origin}: {:?}",
            r.json()
        );
        match status {
            200 => assert_cors_for(&r, origin),
            _ => assert_no_cors(&r),
        }
    }
}

#[tokio::test]
async fn an_unlisted_or_null_origin_is_403_without_cors() {
    let ingest = TestIngest::new();
    let doc = openapi::document();
    for path in ["/api/track", "/api/track/batch", "/api/identify"] {
        for origin in [Some("https://attacker.example"), Some("null")] {
            let r = beacon(&ingest, path, SITE, origin).await;
            assert_eq!(r.status, 403, "{path} from {origin:?}");
            assert_eq!(
                r.error(),
                "Origin not allowed: send browser events from one of the site's domains, or send an API key"
            );
            openapi::assert_documented(&doc, path, 403, &r.json());
            assert_no_cors(&r);
        }
    }
    // A site that does not exist: the same 403 (the browser path does not tell which).
    let r = beacon(&ingest, "/api/track", 4_000_000_000, Some(SHOP)).await;
    assert_eq!(r.status, 403);
    assert!(ingest.sink().messages().is_empty());
}

/// Browsers send `Origin` with every POST: a request with neither a key nor an origin
/// is a server that forgot its key, and hears so as a validation error, not about origins.
#[tokio::test]
async fn no_key_and_no_origin_is_a_400_that_names_the_missing_key() {
    let ingest = TestIngest::builder()
        .config(|c| {
            c.auth_failure_burst = 1;
            c.auth_failures_per_minute = 1;
        })
        .build();
    let doc = openapi::document();
    for path in ["/api/track", "/api/track/batch", "/api/identify"] {
        for _ in 0..3 {
            let r = beacon(&ingest, path, SITE, None).await;
            assert_eq!(r.status, 400, "{path}: {:?}", r.json());
            assert_eq!(r.error(), "Invalid payload");
            let api_key = &r.json()["details"]["fieldErrors"]["api_key"];
            assert!(
                api_key[0]
                    .as_str()
                    .is_some_and(|m| m.contains("api_key is required")),
                "{path}: {api_key}"
            );
            openapi::assert_documented(&doc, path, 400, &r.json());
            assert_no_cors(&r);
        }
    }
    // Every problem of the payload in one answer, the missing key among them.
    let r = ingest
        .post_json("/api/track", &json!({"site_id": "x", "pathname": "/a"}))
        .await;
    assert_eq!(r.status, 400);
    let fields = &r.json()["details"]["fieldErrors"];
    assert!(
        fields["api_key"].is_array() && fields["site_id"].is_array(),
        "{fields}"
    );
    // A validation error costs the address no rejection token: a browser still gets in.
    assert_eq!(
        beacon(&ingest, "/api/track", SITE, Some(SHOP)).await.status,
        200
    );
    // A key in the header is a key: the same request with it is taken.
    let bearer = format!("Bearer {}", key_of(SITE));
    let r = ingest
        .post(
            "/api/track",
            json!({"site_id": SITE, "pathname": "/a"}).to_string(),
            &[("authorization", bearer.as_str())],
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    assert_eq!(ingest.sink().events().len(), 2);
}

#[tokio::test]
async fn a_browser_event_cannot_name_its_ip_or_user_agent() {
    let ingest = TestIngest::new();
    let body = json!({"site_id": SITE, "ip_address": "81.2.69.142", "user_agent": "Googlebot/2.1"});
    let r = ingest
        .send(request(
            Method::POST,
            "/api/track",
            body.to_string(),
            &[("origin", SHOP), ("user-agent", "Mozilla/5.0 Real")],
        ))
        .await;
    assert_eq!(r.status, 200);
    let ev = &ingest.sink().events()[0];
    assert_eq!(ev.ip, PEER.split(':').next().unwrap());
    assert_eq!(ev.user_agent, "Mozilla/5.0 Real");
    // With a key the caller is trusted to say.
    let keyed = json!({"api_key": key_of(SITE), "site_id": SITE, "ip_address": "81.2.69.142", "user_agent": "Googlebot/2.1"});
    assert_eq!(ingest.post_json("/api/track", &keyed).await.status, 200);
    let ev = &ingest.sink().events()[1];
    assert_eq!(
        (ev.ip.as_str(), ev.user_agent.as_str()),
        ("81.2.69.142", "Googlebot/2.1")
    );
}

#[tokio::test]
async fn a_request_with_a_key_is_on_the_key_path_whatever_its_origin() {
    let ingest = TestIngest::new();
    let r = ingest
        .send(request(
            Method::POST,
            "/api/track",
            json!({"api_key": key_of(SITE), "site_id": SITE}).to_string(),
            &[("origin", "https://attacker.example")],
        ))
        .await;
    assert_eq!(r.status, 200);
    assert_no_cors(&r);
    assert_eq!(
        ingest.sink().events()[0].key_id,
        rivulet_ingest::testing::key_id_of(SITE)
    );
}

#[tokio::test]
async fn the_browser_limit_is_per_address_and_site_and_its_429_carries_cors() {
    let ingest = TestIngest::builder()
        .config(|c| {
            c.browser_rate_limit_per_second = 2;
            c.browser_event_rate_limit_per_second = 0;
        })
        .build();
    for _ in 0..2 {
        assert_eq!(
            beacon(&ingest, "/api/track", SITE, Some(SHOP)).await.status,
            200
        );
    }
    let r = beacon(&ingest, "/api/track", SITE, Some(SHOP)).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        r.error(),
        "Rate limit exceeded. Maximum 2 requests per second per visitor."
    );
    // The page can read it.
    assert_cors_for(&r, SHOP);
    // Another site, or another address, has its own bucket.
    assert_eq!(
        beacon(
            &ingest,
            "/api/track",
            OTHER_SITE,
            Some("https://other.example")
        )
        .await
        .status,
        200
    );
    let mut elsewhere = TestIngest::new();
    elsewhere.state = ingest.state.clone();
    elsewhere.peer = "198.51.100.4:5000".parse().unwrap();
    assert_eq!(
        beacon(&elsewhere, "/api/track", SITE, Some(SHOP))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn a_preflight_is_answered_for_any_listed_origin() {
    let ingest = TestIngest::new();
    let doc = openapi::document();
    for path in ["/api/track", "/api/track/batch", "/api/identify"] {
        for origin in [SHOP, "https://www.shop.example", "https://other.example"] {
            let r = ingest
                .send(request(
                    Method::OPTIONS,
                    path,
                    "",
                    &[
                        ("origin", origin),
                        ("access-control-request-method", "POST"),
                    ],
                ))
                .await;
            assert_eq!(r.status, 204, "{path} from {origin}");
            assert!(r.body.is_empty());
            assert_cors_for(&r, origin);
            assert_eq!(
                r.header("access-control-allow-methods"),
                Some("POST, OPTIONS")
            );
            assert_eq!(
                r.header("access-control-allow-headers"),
                Some("Content-Type, Content-Encoding, X-Request-Id")
            );
            assert_eq!(r.header("access-control-max-age"), Some("7200"));
        }
        for origin in [
            Some("https://www.other.example"),
            Some("https://attacker.example"),
            Some("null"),
            None,
        ] {
            let mut headers = vec![("access-control-request-method", "POST")];
            if let Some(origin) = origin {
                headers.push(("origin", origin));
            }
            let r = ingest
                .send(request(Method::OPTIONS, path, "", &headers))
                .await;
            assert_eq!(r.status, 403, "{path} from {origin:?}");
            assert_no_cors(&r);
            let op = &doc["paths"][path]["options"]["responses"]["403"];
            assert!(op.is_object(), "OPTIONS {path} 403 is not documented");
        }
    }
    // Other routes have no preflight.
    let r = ingest
        .send(request(
            Method::OPTIONS,
            "/api/openapi.json",
            "",
            &[("origin", SHOP)],
        ))
        .await;
    assert_eq!(r.status, 405);
}

#[tokio::test]
async fn identify_from_the_browser_is_refused_unless_the_site_turned_it_on() {
    let ingest = TestIngest::new();
    let r = beacon(&ingest, "/api/identify", SITE, Some(SHOP)).await;
    assert_eq!(r.status, 403, "{:?}", r.json());
    assert!(r.error().contains("--browser-identify on"), "{}", r.error());
    openapi::assert_documented(&openapi::document(), "/api/identify", 403, &r.json());
    // The page can read why.
    assert_cors_for(&r, SHOP);
    assert!(ingest.sink().identifies().is_empty());
    // With the site's key it is taken as ever.
    let keyed =
        json!({"api_key": key_of(SITE), "site_id": SITE, "user_id": "u-1", "anonymous_id": "a-1"});
    assert_eq!(ingest.post_json("/api/identify", &keyed).await.status, 200);
    // A refused identify is a setting, not a guess: it costs the address nothing.
    let ingest = TestIngest::builder()
        .config(|c| {
            c.auth_failure_burst = 1;
            c.auth_failures_per_minute = 1;
        })
        .build();
    for _ in 0..3 {
        let r = beacon(&ingest, "/api/identify", SITE, Some(SHOP)).await;
        assert_eq!(r.status, 403);
    }
    assert_eq!(
        beacon(&ingest, "/api/track", SITE, Some(SHOP)).await.status,
        200
    );
}

#[tokio::test]
async fn a_site_with_its_browser_path_off_takes_keyed_requests_only() {
    let ingest = TestIngest::builder().browser(SITE, false, true).build();
    for path in ["/api/track", "/api/track/batch", "/api/identify"] {
        let r = beacon(&ingest, path, SITE, Some(SHOP)).await;
        assert_eq!(r.status, 403, "{path}: {:?}", r.json());
        assert!(r.error().contains("only with an API key"), "{}", r.error());
        assert_no_cors(&r);
    }
    assert!(ingest.sink().events().is_empty() && ingest.sink().identifies().is_empty());
    // Its domains answer no preflight either.
    let r = ingest
        .send(request(
            Method::OPTIONS,
            "/api/track",
            "",
            &[("origin", SHOP), ("access-control-request-method", "POST")],
        ))
        .await;
    assert_eq!(r.status, 403);
    let keyed = json!({"api_key": key_of(SITE), "site_id": SITE, "pathname": "/server"});
    assert_eq!(ingest.post_json("/api/track", &keyed).await.status, 200);
    // Another site keeps its own.
    let r = beacon(
        &ingest,
        "/api/track",
        OTHER_SITE,
        Some("https://other.example"),
    )
    .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn a_browser_event_id_is_stored_in_a_namespace_of_its_own() {
    let ingest = TestIngest::builder().browser(SITE, true, true).build();
    let id = "0190d6a0-0000-7000-8000-00000000abcd";
    let keyed = json!({"api_key": key_of(SITE), "site_id": SITE, "pathname": "/k", "event_id": id});
    assert_eq!(ingest.post_json("/api/track", &keyed).await.status, 200);
    let browser = |path: &'static str| {
        let ingest = &ingest;
        async move {
            let body = json!({"site_id": SITE, "pathname": path, "event_id": id});
            ingest
                .send(request(
                    Method::POST,
                    "/api/track",
                    body.to_string(),
                    &[("content-type", "text/plain"), ("origin", SHOP)],
                ))
                .await
        }
    };
    assert_eq!(browser("/b").await.status, 200);
    assert_eq!(browser("/b").await.status, 200);
    let ids: Vec<String> = ingest
        .sink()
        .events()
        .iter()
        .map(|e| e.event_id.to_string())
        .collect();
    assert_eq!(ids[0], id, "a keyed event keeps its id");
    assert_ne!(ids[1], id, "a keyless event cannot take a keyed event's id");
    assert_eq!(ids[1], ids[2], "a browser's retry of one event is one id");
    // Another site's browser event with the same id is another event.
    let other = json!({"site_id": OTHER_SITE, "pathname": "/o", "event_id": id});
    let r = ingest
        .send(request(
            Method::POST,
            "/api/track",
            other.to_string(),
            &[
                ("content-type", "text/plain"),
                ("origin", "https://other.example"),
            ],
        ))
        .await;
    assert_eq!(r.status, 200);
    assert_ne!(ingest.sink().events()[3].event_id.to_string(), ids[1]);
}

#[tokio::test]
async fn the_browser_limit_counts_an_ipv6_64_as_one_client() {
    let ingest = TestIngest::builder()
        .config(|c| {
            c.browser_rate_limit_per_second = 3;
            c.browser_event_rate_limit_per_second = 0;
        })
        .build();
    let mut statuses = Vec::new();
    for i in 0..6 {
        let mut from = TestIngest::new();
        from.state = ingest.state.clone();
        from.peer = format!("[2001:db8:1:2::{:x}]:5000", i + 1).parse().unwrap();
        statuses.push(beacon(&from, "/api/track", SITE, Some(SHOP)).await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    // Another /64 is another client.
    let mut other = TestIngest::new();
    other.state = ingest.state.clone();
    other.peer = "[2001:db8:1:3::1]:5000".parse().unwrap();
    assert_eq!(
        beacon(&other, "/api/track", SITE, Some(SHOP)).await.status,
        200
    );
}

#[tokio::test]
async fn refused_preflights_count_against_the_address() {
    let ingest = TestIngest::builder()
        .config(|c| {
            c.auth_failure_burst = 3;
            c.auth_failures_per_minute = 1;
        })
        .build();
    let mut statuses = Vec::new();
    for i in 0..6 {
        let origin = format!("https://probe-{i}.example");
        let r = ingest
            .send(request(
                Method::OPTIONS,
                "/api/track",
                "",
                &[
                    ("origin", origin.as_str()),
                    ("access-control-request-method", "POST"),
                ],
            ))
            .await;
        statuses.push(r.status);
    }
    assert_eq!(statuses, [403, 403, 403, 429, 429, 429]);
    // Past the limit even a listed origin waits: the prober learns nothing more.
    let r = ingest
        .send(request(
            Method::OPTIONS,
            "/api/track",
            "",
            &[("origin", SHOP), ("access-control-request-method", "POST")],
        ))
        .await;
    assert_eq!(r.status, 429);
}
