//! `POST /api/identify`: its validation and answers, and the message it publishes.

use crate::{assert_field_error, assert_invalid_json, field_error};
use rivulet_ingest::testing::{key_id_of, key_of, openapi, TestIngest, SITE};
use serde_json::{json, Value};

fn identify(fields: Value) -> Value {
    let mut body = json!({"api_key": key_of(SITE), "site_id": SITE});
    for (k, v) in fields.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[tokio::test]
async fn an_identify_call_is_published_keyed_by_its_user() {
    let ingest = TestIngest::new();
    let event_id = uuid::Uuid::new_v4();
    let r = ingest
        .post_json(
            "/api/identify",
            &identify(json!({"user_id": "user-42", "anonymous_id": "anon-7",
                "traits": {"plan": "pro", "old": null}, "event_id": event_id})),
        )
        .await;
    assert_eq!((r.status, r.json()), (200, json!({"success": true})));
    let messages = ingest.sink().identifies();
    assert_eq!(messages.len(), 1);
    let m = &messages[0];
    assert_eq!(m["kind"], "identify");
    assert_eq!(m["event_id"], event_id.to_string());
    assert_eq!(m["site_id"], SITE);
    assert_eq!(m["key_id"], key_id_of(SITE));
    assert_eq!(m["user_id"], "user-42");
    assert_eq!(m["anonymous_id"], "anon-7");
    let traits: Value = serde_json::from_str(m["traits"].as_str().unwrap()).unwrap();
    assert_eq!(traits, json!({"plan": "pro", "old": null}));
    assert!(
        m.get("type").is_none(),
        "an identify never reads as an event: {m}"
    );
    assert!(ingest.sink().events().is_empty());
    // An identify is a request for the rate limit, of no events.
    assert_eq!(ingest.limits().asked(), [(key_id_of(SITE), 0)]);
    // Keyed as the user's events are: one partition per visitor.
    let key = &ingest.sink().messages()[0].key;
    assert!(!key.is_empty());
    let ev = identify(json!({"user_id": "user-42"}));
    let track = json!({"api_key": ev["api_key"], "site_id": SITE, "user_id": "user-42"});
    assert_eq!(ingest.post_json("/api/track", &track).await.status, 200);
    assert_eq!(&ingest.sink().messages()[1].key, key);
}

#[tokio::test]
async fn every_problem_of_an_identify_body_is_reported_at_once() {
    let ingest = TestIngest::new();
    let r = ingest
        .post_json(
            "/api/identify",
            &json!({"api_key": key_of(SITE), "anonymous_id": "a".repeat(256), "traits": "x", "event_id": "nope", "timestamp": "yesterday"}),
        )
        .await;
    for field in [
        "site_id",
        "user_id",
        "anonymous_id",
        "traits",
        "event_id",
        "timestamp",
    ] {
        assert_field_error(&r, field, field);
    }
    openapi::assert_documented(&openapi::document(), "/api/identify", 400, &r.json());
}

#[tokio::test]
async fn user_id_anonymous_id_and_traits_have_their_limits() {
    let ingest = TestIngest::new();
    for (fields, field) in [
        (json!({}), "user_id"),
        (json!({"user_id": ""}), "user_id"),
        (json!({"user_id": 42}), "user_id"),
        (json!({"user_id": "u".repeat(256)}), "user_id"),
        (
            json!({"user_id": "u", "anonymous_id": "a".repeat(256)}),
            "anonymous_id",
        ),
        (json!({"user_id": "u", "traits": ["plan"]}), "traits"),
        (
            json!({"user_id": "u", "traits": {"t".repeat(101): 1}}),
            "traits",
        ),
        (
            json!({"user_id": "u", "traits": {"bio": "b".repeat(2048)}}),
            "traits",
        ),
    ] {
        let r = ingest
            .post_json("/api/identify", &identify(fields.clone()))
            .await;
        assert_field_error(
            &r,
            field,
            &fields.to_string()[..60.min(fields.to_string().len())],
        );
    }
    assert!(field_error(
        &ingest
            .post_json("/api/identify", &identify(json!({})))
            .await,
        "user_id"
    )
    .contains("required"));
    // At the limits.
    for fields in [
        json!({"user_id": "u".repeat(255), "anonymous_id": "a".repeat(255)}),
        json!({"user_id": "u", "traits": {"t".repeat(100): "v"}}),
        json!({"user_id": "u", "anonymous_id": ""}),
        json!({"user_id": "u", "traits": null}),
    ] {
        let r = ingest
            .post_json("/api/identify", &identify(fields.clone()))
            .await;
        assert_eq!(r.status, 200, "{:?}", r.json());
    }
    assert_invalid_json(
        &ingest.post("/api/identify", "{\"user_id\":", &[]).await,
        "cut short",
    );
}

#[tokio::test]
async fn identify_is_authenticated_like_an_event() {
    let ingest = TestIngest::new();
    let r = ingest
        .post_json(
            "/api/identify",
            &json!({"api_key": "rb_nope", "site_id": SITE, "user_id": "u"}),
        )
        .await;
    assert_eq!(
        (r.status, r.json()),
        (401, json!({"success": false, "error": "Invalid API key"}))
    );
    let r = ingest
        .post_json(
            "/api/identify",
            &json!({"api_key": key_of(SITE), "site_id": 4_000_000_000u32, "user_id": "u"}),
        )
        .await;
    assert_eq!(
        (r.status, r.json()),
        (404, json!({"success": false, "error": "Site not found"}))
    );
    let bearer = format!("Bearer {}", key_of(SITE));
    let r = ingest
        .post(
            "/api/identify",
            json!({"site_id": SITE, "user_id": "u"}).to_string(),
            &[("authorization", &bearer)],
        )
        .await;
    assert_eq!(r.status, 200);
    ingest
        .limits()
        .refuse_next(1, rivulet_ingest::rate_limit::Verdict::TooManyRequests);
    let r = ingest
        .post_json("/api/identify", &identify(json!({"user_id": "u"})))
        .await;
    assert_eq!((r.status, r.header("retry-after")), (429, Some("1")));
    assert_eq!(ingest.sink().identifies().len(), 1);
}

#[tokio::test]
async fn identify_of_a_suppressed_person_is_200_and_dropped_and_kafka_down_is_503() {
    let ingest = TestIngest::builder().suppress(SITE, "erased").build();
    for fields in [
        json!({"user_id": "erased"}),
        json!({"user_id": "new", "anonymous_id": "erased"}),
    ] {
        let r = ingest.post_json("/api/identify", &identify(fields)).await;
        assert_eq!((r.status, r.json()), (200, json!({"success": true})));
    }
    assert!(ingest.sink().messages().is_empty());
    ingest.sink().set_down(true);
    let r = ingest
        .post_json("/api/identify", &identify(json!({"user_id": "u"})))
        .await;
    assert_eq!((r.status, r.header("retry-after")), (503, Some("1")));
    assert_eq!(
        r.error(),
        "Service temporarily unavailable: the identify call could not be stored. Retry later."
    );
    openapi::assert_documented(&openapi::document(), "/api/identify", 503, &r.json());
}

#[tokio::test]
async fn a_user_gets_at_most_the_capped_traits_and_anonymous_ids() {
    let ingest = TestIngest::builder()
        .config(|c| {
            c.profile_limits.traits = 3;
            c.profile_limits.anonymous_ids = 2;
        })
        .build();
    let call = |fields: Value| {
        let ingest = &ingest;
        async move { ingest.post_json("/api/identify", &identify(fields)).await }
    };
    let ok = call(json!({"user_id": "u", "traits": {"a": 1, "b": 2}})).await;
    assert_eq!(ok.status, 200);
    // Setting known traits again, or one more, is within the cap.
    assert_eq!(
        call(json!({"user_id": "u", "traits": {"a": 3, "c": 4}}))
            .await
            .status,
        200
    );
    let over = call(json!({"user_id": "u", "traits": {"d": 1}})).await;
    assert_eq!(over.status, 400, "{:?}", over.json());
    assert!(over.json()["details"]["fieldErrors"]["traits"][0]
        .as_str()
        .unwrap()
        .contains("more than 3 traits"));
    openapi::assert_documented(&openapi::document(), "/api/identify", 400, &over.json());
    // A refused call is not published at all, not even its known traits.
    let before = ingest.sink().identifies().len();
    assert_eq!(
        call(json!({"user_id": "u", "traits": {"a": 9, "e": 1}}))
            .await
            .status,
        400
    );
    assert_eq!(ingest.sink().identifies().len(), before);
    // Anonymous ids: two, then a third is refused; another user has their own.
    for (anon, status) in [("x", 200), ("y", 200), ("x", 200), ("z", 400)] {
        let r = call(json!({"user_id": "u", "anonymous_id": anon})).await;
        assert_eq!(r.status, status, "{anon}: {:?}", r.json());
    }
    assert_eq!(
        call(json!({"user_id": "v", "anonymous_id": "z", "traits": {"d": 1}}))
            .await
            .status,
        200
    );
}
