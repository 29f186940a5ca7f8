//! The answers of POST /api/track and /api/track/batch (docs/design.md, "Wire
//! contract": its tables and the field limits), in-process. Moved from
//! tests/tests/ingest_api.rs, which keeps what needs the real key cache, Redis's rate
//! limits and the process's logs and metrics.

use crate::{assert_field_error, assert_invalid_json, field_error};
use axum::http::Method;
use rivulet_ingest::rate_limit::Verdict;
use rivulet_ingest::testing::{
    key_id_of, key_of, openapi, request, TestIngest, OTHER_SITE, PEER, SITE,
};
use serde_json::{json, Value};

#[tokio::test]
async fn accepted_pageview_is_200_and_published_with_the_server_fields() {
    let ingest = TestIngest::new();
    let r = ingest
        .post(
            "/api/track",
            ingest
                .event(json!({"pathname": "/", "hostname": "example.com"}))
                .to_string(),
            &[(
                "user-agent",
                "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0",
            )],
        )
        .await;
    assert_eq!((r.status, r.json()), (200, json!({"success": true})));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let ev = &ingest.sink().events()[0];
    assert_eq!(ev.site_id, SITE);
    assert_eq!(ev.key_id, key_id_of(SITE));
    assert_eq!(ev.pathname.as_deref(), Some("/"));
    assert_eq!(ev.hostname.as_deref(), Some("example.com"));
    assert_eq!(ev.ip, PEER.split(':').next().unwrap());
    assert_eq!(
        ev.user_agent,
        "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0"
    );
    assert_eq!(ev.timestamp, ev.received_at, "no client timestamp");
    // The key itself is never in the message.
    let text = String::from_utf8(ingest.sink().messages()[0].payload.clone()).unwrap();
    assert!(!text.contains(&key_of(SITE)[3..]), "{text}");
    assert_eq!(ingest.limits().asked(), [(key_id_of(SITE), 1)]);
}

#[tokio::test]
async fn site_id_as_number_or_string_type_default_and_unknown_fields_ignored() {
    let ingest = TestIngest::new();
    for site_id in [json!(SITE), json!(SITE.to_string())] {
        let body = json!({"api_key": key_of(SITE), "site_id": site_id, "some_future_field": [1, {"x": 2}]});
        assert_eq!(ingest.post_json("/api/track", &body).await.status, 200);
    }
    let events = ingest.sink().events();
    assert_eq!(events.len(), 2);
    assert!(events
        .iter()
        .all(|e| e.event_type == rivulet_common::event::EventType::Pageview));
}

#[tokio::test]
async fn body_not_json_not_object_or_bad_utf8_is_400() {
    let ingest = TestIngest::new();
    for path in ["/api/track", "/api/track/batch", "/api/identify"] {
        for body in [
            b"not json".to_vec(),
            b"[1,2]".to_vec(),
            b"\"x\"".to_vec(),
            b"{\"a\":\"\xff\"}".to_vec(),
            Vec::new(),
            b"{\"site_id\":1".to_vec(),
        ] {
            let r = ingest.post(path, body.clone(), &[]).await;
            assert_invalid_json(&r, &format!("{path} {body:?}"));
        }
    }
}

#[tokio::test]
async fn schema_violation_is_400_with_every_field_error_at_once() {
    let ingest = TestIngest::new();
    let r = ingest
        .post_json(
            "/api/track",
            &json!({"api_key": key_of(SITE), "type": "click", "screenWidth": "wide", "ip_address": "300.1.1.1", "event_id": "not-a-uuid"}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.error(), "Invalid payload");
    for field in ["site_id", "type", "screenWidth", "ip_address", "event_id"] {
        assert_field_error(&r, field, field);
    }
    assert!(r.json()["details"]["formErrors"].is_array());
}

#[tokio::test]
async fn checks_run_in_order_payload_key_site_rate_limit() {
    let ingest = TestIngest::new();
    // An invalid payload with a bad key is a 400, not a 401.
    let r = ingest
        .post_json("/api/track", &json!({"api_key": "rb_nope", "site_id": "x"}))
        .await;
    assert_field_error(&r, "site_id", "a bad payload and a bad key");
    // A bad key for a site that does not exist is a 401, not a 404.
    let r = ingest
        .post_json(
            "/api/track",
            &json!({"api_key": "rb_nope", "site_id": 4_000_000_000u32}),
        )
        .await;
    assert_eq!(r.status, 401);
    // A good key for a site that does not exist: 404.
    let r = ingest
        .post_json(
            "/api/track",
            &json!({"api_key": key_of(SITE), "site_id": 4_000_000_000u32}),
        )
        .await;
    assert_eq!(
        (r.status, r.json()),
        (404, json!({"success": false, "error": "Site not found"}))
    );
    // None of these reached the rate limit or the sink.
    assert!(ingest.limits().asked().is_empty());
    assert!(ingest.sink().messages().is_empty());
}

#[tokio::test]
async fn the_key_comes_from_the_body_or_a_bearer_header() {
    let ingest = TestIngest::new();
    let bearer = format!("Bearer {}", key_of(SITE));
    let no_key = json!({"site_id": SITE}).to_string();
    let r = ingest
        .post("/api/track", no_key.clone(), &[("authorization", &bearer)])
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    // `null` in the body counts as no key: the header's is used.
    let null_key = json!({"api_key": null, "site_id": SITE}).to_string();
    let r = ingest
        .post("/api/track", null_key, &[("authorization", &bearer)])
        .await;
    assert_eq!(r.status, 200);
    // A key in the body wins over the header's.
    let body_key = json!({"api_key": key_of(OTHER_SITE), "site_id": SITE}).to_string();
    let r = ingest
        .post("/api/track", body_key, &[("authorization", &bearer)])
        .await;
    assert_eq!(r.status, 401);
    let r = ingest
        .post(
            "/api/track",
            no_key,
            &[("authorization", "Bearer rb_short")],
        )
        .await;
    assert_eq!(r.status, 401);
    assert!(ingest
        .sink()
        .events()
        .iter()
        .all(|e| e.key_id == key_id_of(SITE)));
}

#[tokio::test]
async fn invalid_keys_are_401_in_one_shape() {
    let ingest = TestIngest::new();
    let key = key_of(SITE);
    let cases = [
        json!({"api_key": 42, "site_id": SITE}),
        json!({"api_key": "rb_short", "site_id": SITE}),
        json!({"api_key": format!("rb_{}", "0".repeat(32)), "site_id": SITE}),
        json!({"api_key": key.to_uppercase(), "site_id": SITE}),
        json!({"api_key": format!(" {key}"), "site_id": SITE}),
        // a valid key of another (existing) site
        json!({"api_key": key_of(OTHER_SITE), "site_id": SITE}),
    ];
    let doc = openapi::document();
    for c in cases {
        let r = ingest.post_json("/api/track", &c).await;
        assert_eq!(
            (r.status, r.json()),
            (401, json!({"success": false, "error": "Invalid API key"})),
            "{c}"
        );
        openapi::assert_documented(&doc, "/api/track", 401, &r.json());
    }
    // No key with an Origin is a browser event, and from an origin the site does not
    // list it is 403; no key and no Origin is a server without its key: a 400 saying so.
    let r = ingest
        .post(
            "/api/track",
            json!({"site_id": SITE}).to_string(),
            &[("origin", "https://attacker.example")],
        )
        .await;
    assert_eq!(r.status, 403, "{:?}", r.json());
    assert_eq!(r.json()["success"], false);
    let r = ingest
        .post_json("/api/track", &json!({"site_id": SITE}))
        .await;
    assert_eq!(r.status, 400, "{:?}", r.json());
    assert!(r.json()["details"]["fieldErrors"]["api_key"].is_array());
}

#[tokio::test]
async fn rejections_per_address_past_their_burst_are_429() {
    let ingest = TestIngest::builder()
        .config(|c| {
            c.auth_failure_burst = 2;
            c.auth_failures_per_minute = 1;
        })
        .build();
    let bad = json!({"api_key": format!("rb_{}", "0".repeat(32)), "site_id": SITE});
    for _ in 0..2 {
        assert_eq!(ingest.post_json("/api/track", &bad).await.status, 401);
    }
    let r = ingest.post_json("/api/track", &bad).await;
    assert_eq!(r.status, 429);
    assert_eq!(
        r.error(),
        "Too many rejected requests from this address. Retry later."
    );
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "Retry-After: {wait}");
    // A good key the process already holds is served: one client's bad keys behind a
    // shared address (NAT) do not lock out another's.
    let good = ingest.event(json!({}));
    assert_eq!(ingest.post_json("/api/track", &good).await.status, 200);
    // Unknown keys still wait, however many.
    assert_eq!(ingest.post_json("/api/track", &bad).await.status, 429);
}

#[tokio::test]
async fn custom_event_without_event_name_is_a_form_error() {
    let ingest = TestIngest::new();
    for name in [None, Some("")] {
        let mut ev = ingest.event(json!({"type": "custom_event"}));
        if let Some(name) = name {
            ev["event_name"] = json!(name);
        }
        let r = ingest.post_json("/api/track", &ev).await;
        assert_eq!(r.status, 400);
        assert_eq!(
            r.json()["details"]["formErrors"],
            json!(["Custom events require event_name"]),
            "{name:?}"
        );
    }
    let r = ingest
        .post_json(
            "/api/track",
            &ingest.event(json!({"type": "custom_event", "event_name": "signup"})),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        ingest.sink().events()[0].event_name.as_deref(),
        Some("signup")
    );
}

#[tokio::test]
async fn properties_must_be_a_string_of_json() {
    let ingest = TestIngest::new();
    let custom = |properties: Value| {
        ingest.event(json!({"type": "custom_event", "event_name": "e", "properties": properties}))
    };
    for (properties, problem) in [
        (json!("{oops"), "valid JSON"),
        (json!({"plan": "pro"}), "must be a string"),
        (
            json!(format!("{}1{}", "[".repeat(33), "]".repeat(33))),
            "deeper than 32",
        ),
    ] {
        let r = ingest
            .post_json("/api/track", &custom(properties.clone()))
            .await;
        assert_eq!(r.status, 400, "{properties}");
        assert!(
            field_error(&r, "properties").contains(problem),
            "{:?}",
            r.json()
        );
    }
    let r = ingest
        .post_json("/api/track", &custom(json!("{\"plan\":\"pro\"}")))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        ingest.sink().events()[0].properties.as_deref(),
        Some("{\"plan\":\"pro\"}")
    );
}

#[tokio::test]
async fn every_field_limit_at_and_one_over() {
    let ingest = TestIngest::new();
    for (field, max) in rivulet_ingest::event::validate::LIMITS {
        // `properties` holds JSON: a JSON string of that many characters, quotes included.
        let (at, over) = if *field == "properties" {
            (
                format!("\"{}\"", "a".repeat(max - 2)),
                format!("\"{}\"", "a".repeat(max - 1)),
            )
        } else {
            ("a".repeat(*max), "a".repeat(max + 1))
        };
        // Limits count characters, not bytes.
        let wide = if *field == "properties" {
            format!("\"{}\"", "é".repeat(max - 2))
        } else {
            "é".repeat(*max)
        };
        let base = json!({"type": "custom_event", "event_name": "limit-test"});
        for value in [&at, &wide] {
            let mut ok = ingest.event(base.clone());
            ok[*field] = json!(value);
            let r = ingest.post_json("/api/track", &ok).await;
            assert_eq!(
                r.status,
                200,
                "{field} at its limit of {max}: {:?}",
                r.json()
            );
        }
        let mut bad = ingest.event(base);
        bad[*field] = json!(over);
        let r = ingest.post_json("/api/track", &bad).await;
        assert_field_error(&r, field, &format!("{field} one over its limit of {max}"));
    }
    // The values at the limits were published whole.
    let events = ingest.sink().events();
    assert_eq!(
        events.len(),
        2 * rivulet_ingest::event::validate::LIMITS.len()
    );
    assert_eq!(events[0].pathname.as_deref().map(str::len), Some(2048));
}

#[tokio::test]
async fn wrong_method_is_405() {
    let ingest = TestIngest::new();
    let doc = openapi::document();
    for path in ["/api/track", "/api/track/batch", "/api/identify"] {
        for method in [Method::GET, Method::PUT, Method::DELETE, Method::PATCH] {
            let r = ingest.send(request(method.clone(), path, "", &[])).await;
            assert_eq!(r.status, 405, "{method} {path}");
            assert_eq!(r.header("allow"), Some("POST"));
            // A wrong method has no operation of its own: its answer is the one documented for POST.
            openapi::assert_documented(&doc, path, 405, &r.json());
            assert_eq!(r.error(), "Method not allowed: use POST");
        }
    }
    // The read-only routes: 405 with no body and `Allow: GET,HEAD`.
    for path in ["/api/openapi.json", "/_liveness", "/api/script.js"] {
        let r = ingest.send(request(Method::POST, path, "", &[])).await;
        assert_eq!(
            (r.status, r.header("allow")),
            (405, Some("GET,HEAD")),
            "{path}"
        );
        assert!(r.body.is_empty());
    }
}

#[tokio::test]
async fn unknown_routes_and_the_internal_ones_are_404_on_the_public_listener() {
    let ingest = TestIngest::new();
    for path in [
        "/nowhere",
        "/api/track/",
        "/API/track",
        "/_readiness",
        "/metrics",
        "/",
    ] {
        for method in [Method::GET, Method::POST] {
            let r = ingest.send(request(method.clone(), path, "", &[])).await;
            assert_eq!(
                (r.status, r.json()),
                (404, json!({"success": false, "error": "Not found"})),
                "{method} {path}"
            );
        }
    }
    // The public read-only routes.
    let get = |path: &str| request(Method::GET, path, "", &[]);
    assert_eq!(ingest.send(get("/_liveness")).await.status, 200);
    let doc = ingest.send(get("/api/openapi.json")).await;
    assert_eq!(doc.json(), openapi::document());
    assert_eq!(ingest.send(get("/api/script.js")).await.status, 200);
    // The internal listener serves liveness, readiness and metrics, and nothing else.
    assert_eq!(ingest.send_internal(get("/_liveness")).await.status, 200);
    assert_eq!(ingest.send_internal(get("/metrics")).await.status, 200);
    let ready = ingest.send_internal(get("/_readiness")).await;
    assert_eq!(ready.json()["kafka"], true, "{:?}", ready.json());
    for path in ["/api/track", "/api/openapi.json"] {
        let r = ingest
            .send_internal(request(Method::POST, path, "", &[]))
            .await;
        assert_eq!(r.status, 404, "{path}");
    }
}

#[tokio::test]
async fn request_ids_are_echoed_when_sane_and_made_otherwise() {
    let ingest = TestIngest::new();
    let body = ingest.event(json!({})).to_string();
    let r = ingest
        .post(
            "/api/track",
            body.clone(),
            &[("x-request-id", "abc-DEF_123")],
        )
        .await;
    assert_eq!(r.header("x-request-id"), Some("abc-DEF_123"));
    for bad in ["a b", "a/b", &"x".repeat(65)] {
        let r = ingest
            .post("/api/track", body.clone(), &[("x-request-id", bad)])
            .await;
        let id = r.header("x-request-id").unwrap();
        assert_ne!(id, bad);
        assert_eq!(id.len(), 32);
    }
    // Error answers carry one too.
    let r = ingest.post("/api/track", "nope", &[]).await;
    assert_eq!(r.header("x-request-id").map(str::len), Some(32));
}

#[tokio::test]
async fn over_the_rate_limit_is_429_with_retry_after_and_the_configured_number() {
    let ingest = TestIngest::builder().budgets(5, 50).build();
    let doc = openapi::document();
    let ev = ingest.event(json!({}));
    ingest.limits().refuse_next(1, Verdict::TooManyRequests);
    let r = ingest.post_json("/api/track", &ev).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        r.json(),
        json!({"success": false, "error": "Rate limit exceeded. Maximum 5 requests per second per API key."})
    );
    openapi::assert_documented(&doc, "/api/track", 429, &r.json());
    // A batch over the events budget.
    ingest.limits().refuse_next(1, Verdict::TooManyEvents);
    let batch = json!({"api_key": key_of(SITE), "site_id": SITE, "events": [{}, {}]});
    let r = ingest.post_json("/api/track/batch", &batch).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        r.error(),
        "Rate limit exceeded. Maximum 50 events per second per API key."
    );
    openapi::assert_documented(&doc, "/api/track/batch", 429, &r.json());
    assert!(ingest.sink().messages().is_empty());
    // Then allowed again.
    assert_eq!(ingest.post_json("/api/track", &ev).await.status, 200);
}

#[tokio::test]
async fn kafka_unavailable_is_503_with_retry_after() {
    let ingest = TestIngest::new();
    let doc = openapi::document();
    ingest.sink().set_down(true);
    let r = ingest
        .post_json("/api/track", &ingest.event(json!({})))
        .await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        r.error(),
        "Service temporarily unavailable: the event could not be stored. Retry later."
    );
    openapi::assert_documented(&doc, "/api/track", 503, &r.json());
    let ready = ingest
        .send_internal(request(Method::GET, "/_readiness", "", &[]))
        .await;
    assert_eq!(ready.status, 503);
    assert_eq!(ready.json()["kafka"], false);
    ingest.sink().set_down(false);
    assert_eq!(
        ingest
            .post_json("/api/track", &ingest.event(json!({})))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn batch_reports_each_event_and_is_one_request_of_its_valid_events() {
    let ingest = TestIngest::new();
    let id = uuid::Uuid::new_v4().to_string();
    let body = json!({"api_key": key_of(SITE), "site_id": SITE, "events": [
        {"pathname": "/a", "event_id": id},
        {"type": "custom_event"},
        "not an object",
        {"type": "custom_event", "event_name": "buy", "properties": "{\"sku\":\"x\"}", "api_key": "rb_ignored"},
        {"site_id": 999, "pathname": "/other-site"},
        {"site_id": SITE.to_string(), "pathname": "/same-site-as-a-string"}
    ]});
    let r = ingest.post_json("/api/track/batch", &body).await;
    let b = r.json();
    assert_eq!(r.status, 200, "{b}");
    assert_eq!(b["success"], false, "some events were rejected: {b}");
    assert_eq!(
        (
            b["accepted"].as_u64(),
            b["rejected"].as_u64(),
            b["failed"].as_u64()
        ),
        (Some(3), Some(3), Some(0))
    );
    let res = b["results"].as_array().unwrap();
    assert_eq!(res[0], json!({"status": "accepted", "event_id": id}));
    assert_eq!(res[1]["status"], "invalid");
    assert_eq!(res[1]["error"], "Invalid payload");
    assert!(res[1]["details"]["formErrors"][0]
        .as_str()
        .unwrap()
        .contains("event_name"));
    assert_eq!(res[2]["status"], "invalid");
    assert_eq!(res[3]["status"], "accepted");
    assert!(res[4]["details"]["fieldErrors"]["site_id"].is_array());
    assert_eq!(res[5]["status"], "accepted");
    openapi::assert_documented(&openapi::document(), "/api/track/batch", 200, &b);
    // One request for the request limit, its valid events for the events budget.
    assert_eq!(ingest.limits().asked(), [(key_id_of(SITE), 3)]);
    let stored: Vec<_> = ingest
        .sink()
        .events()
        .into_iter()
        .map(|e| e.event_id.to_string())
        .collect();
    assert_eq!(stored.len(), 3);
    assert_eq!(stored[0], id);
    for (i, r) in [(1, &res[3]), (2, &res[5])] {
        assert_eq!(r["event_id"], stored[i]);
    }

    // All valid: success.
    let ok = json!({"api_key": key_of(SITE), "site_id": SITE, "events": [{}, {"pathname": "/x"}]});
    let b = ingest.post_json("/api/track/batch", &ok).await.json();
    assert_eq!(
        (b["success"].as_bool(), b["accepted"].as_u64()),
        (Some(true), Some(2))
    );

    let too_many =
        json!({"api_key": key_of(SITE), "site_id": SITE, "events": vec![json!({}); 501]});
    let r = ingest.post_json("/api/track/batch", &too_many).await;
    assert_field_error(&r, "events", "501 events");
    for events in [json!({}), json!("x"), json!(null)] {
        let r = ingest
            .post_json(
                "/api/track/batch",
                &json!({"api_key": key_of(SITE), "site_id": SITE, "events": events}),
            )
            .await;
        assert_field_error(&r, "events", &events.to_string());
    }
    let r = ingest
        .post_json(
            "/api/track/batch",
            &json!({"api_key": "rb_x", "site_id": SITE, "events": []}),
        )
        .await;
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn a_batch_whose_events_kafka_refuses_is_503_naming_them() {
    let ingest = TestIngest::new();
    ingest.sink().refuse("/refused");
    let body = json!({"api_key": key_of(SITE), "site_id": SITE, "events": [
        {"pathname": "/a"}, {"pathname": "/refused"}, {"type": "nope"}
    ]});
    let r = ingest.post_json("/api/track/batch", &body).await;
    let b = r.json();
    assert_eq!(r.status, 503, "{b}");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        (
            b["accepted"].as_u64(),
            b["rejected"].as_u64(),
            b["failed"].as_u64()
        ),
        (Some(1), Some(1), Some(1))
    );
    assert_eq!(b["results"][1]["status"], "failed");
    assert!(b["results"][1]["event_id"].is_string());
    openapi::assert_documented(&openapi::document(), "/api/track/batch", 503, &b);
}

#[tokio::test]
async fn events_of_a_suppressed_person_are_answered_200_and_dropped() {
    let ingest = TestIngest::builder().suppress(SITE, "erased-user").build();
    for ids in [
        json!({"user_id": "erased-user"}),
        json!({"anonymous_id": "erased-user"}),
    ] {
        let r = ingest
            .post_json("/api/track", &ingest.event(ids.clone()))
            .await;
        assert_eq!(
            (r.status, r.json()),
            (200, json!({"success": true})),
            "{ids}"
        );
    }
    let batch = json!({"api_key": key_of(SITE), "site_id": SITE, "events": [
        {"user_id": "erased-user"}, {"user_id": "someone-else"}
    ]});
    let b = ingest.post_json("/api/track/batch", &batch).await.json();
    assert_eq!(
        (b["success"].as_bool(), b["accepted"].as_u64()),
        (Some(true), Some(2))
    );
    // Only someone else's event was published; the same id on another site is not suppressed.
    let other =
        json!({"api_key": key_of(OTHER_SITE), "site_id": OTHER_SITE, "user_id": "erased-user"});
    assert_eq!(ingest.post_json("/api/track", &other).await.status, 200);
    let users: Vec<_> = ingest
        .sink()
        .events()
        .into_iter()
        .map(|e| (e.site_id, e.user_id.unwrap_or_default()))
        .collect();
    assert_eq!(
        users,
        [
            (SITE, "someone-else".into()),
            (OTHER_SITE, "erased-user".into())
        ]
    );
}

#[tokio::test]
async fn responses_match_the_openapi_document() {
    let ingest = TestIngest::new();
    let doc = openapi::document();
    assert_eq!(
        doc["openapi"].as_str().map(|v| v.starts_with("3.")),
        Some(true)
    );
    let batch = |events: Value| {
        json!({"api_key": key_of(SITE), "site_id": SITE, "events": events}).to_string()
    };
    // (path, body, extra headers)
    type Case<'a> = (&'a str, String, &'a [(&'a str, &'a str)]);
    let cases: Vec<Case> = vec![
        ("/api/track", ingest.event(json!({})).to_string(), &[]),
        ("/api/track", "nope".into(), &[]),
        (
            "/api/track",
            ingest.event(json!({"type": "custom_event"})).to_string(),
            &[],
        ),
        (
            "/api/track",
            json!({"api_key": "rb_x", "site_id": 1}).to_string(),
            &[],
        ),
        (
            "/api/track",
            json!({"api_key": key_of(SITE), "site_id": 4_000_000_000u32}).to_string(),
            &[],
        ),
        ("/api/track", " ".repeat(70_000), &[]),
        ("/api/track", "{}".into(), &[("content-encoding", "br")]),
        ("/api/track", json!({"site_id": SITE}).to_string(), &[]),
        (
            "/api/track",
            json!({"site_id": SITE}).to_string(),
            &[("origin", "https://attacker.example")],
        ),
        ("/api/track/batch", batch(json!([{}, {"type": 1}])), &[]),
        ("/api/track/batch", batch(json!([{}])), &[]),
        ("/api/track/batch", batch(json!({})), &[]),
        (
            "/api/track/batch",
            "{}".into(),
            &[("content-encoding", "br")],
        ),
        (
            "/api/identify",
            json!({"api_key": key_of(SITE), "site_id": SITE, "user_id": "u"}).to_string(),
            &[],
        ),
        (
            "/api/identify",
            json!({"api_key": key_of(SITE), "site_id": SITE}).to_string(),
            &[],
        ),
    ];
    let mut statuses = Vec::new();
    for (path, body, headers) in cases {
        let r = ingest.post(path, body, headers).await;
        openapi::assert_documented(&doc, path, r.status, &r.json());
        statuses.push(r.status);
    }
    assert_eq!(
        statuses,
        [200, 400, 400, 401, 404, 413, 415, 400, 403, 200, 200, 400, 415, 200, 400]
    );
}

#[tokio::test]
async fn a_key_that_may_only_read_statistics_cannot_send_events() {
    let ingest = TestIngest::new();
    let doc = openapi::document();
    let key = rivulet_ingest::testing::stats_key_of(SITE);
    for (path, body) in [
        (
            "/api/track",
            json!({"api_key": key, "site_id": SITE, "pathname": "/x"}),
        ),
        (
            "/api/track/batch",
            json!({"api_key": key, "site_id": SITE, "events": [{"pathname": "/x"}]}),
        ),
        (
            "/api/identify",
            json!({"api_key": key, "site_id": SITE, "user_id": "u"}),
        ),
    ] {
        let r = ingest.post_json(path, &body).await;
        assert_eq!(r.status, 403, "{path}: {:?}", r.json());
        assert!(r.error().contains("stats:read"), "{}", r.error());
        openapi::assert_documented(&doc, path, 403, &r.json());
    }
    assert!(ingest.sink().events().is_empty() && ingest.sink().identifies().is_empty());
}
