//! Identity on the real stack: `POST /api/identify` through rivulet-ingest, Kafka and
//! rivulet-enricher into `person_claims` and `person_trait_values`, read back as an
//! operator reads it, with `rivulet-admin users show` and `rivulet-admin export --user-id`.
//!
//! - events sent under an anonymous id before or after `identify(user, anonymous_id)`
//!   count as the user's, with first and last seen over all of them;
//! - several anonymous ids merge into one user; an anonymous id claimed by two users
//!   stays with the first (contracts: the first claim wins);
//! - traits merge, the latest identify received wins name by name (never by the client's
//!   timestamp), and a trait set to null is removed;
//! - a keyed write outranks every keyless one (the browser path, on for the site): a
//!   keyless identify cannot change a trait a server set or take an anonymous id a
//!   server claimed, however it dates itself;
//! - the key in the body or as `Authorization: Bearer` on /api/identify, /api/track and
//!   /api/track/batch; 401 for a bad key; the 400 shapes of a bad identify;
//! - an identify retried with the same event_id is stored once;
//! - a person's export holds the anonymous events that became theirs.
//!
//! The suite has a Kafka topic and a consumer group of its own (see `topics`), so its
//! enricher reads only what its ingest sends.

use rivulet_tests::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;
use uuid::Uuid;

const TOPIC: &str = "rivulet-tests.identity.raw";
const GROUP: &str = "rivulet-tests-identity";

/// One ingest and one enricher for the whole suite (several enrichers joining one group
/// at once would rebalance mid-test).
struct Fixture {
    ingest: Service,
    _enricher: Service,
}

async fn fx() -> &'static Fixture {
    static FX: tokio::sync::OnceCell<Fixture> = tokio::sync::OnceCell::const_new();
    FX.get_or_init(|| async {
        ensure_topic(TOPIC, 3).await;
        let ingest = start_ingest(&[("KAFKA_TOPIC_RAW", TOPIC)]).await;
        // No import lane (it would read the stack's events.import in a group of its own)
        // and no lifecycle runner (erasures and retention are not this suite's business).
        let enricher = start_enricher(&[
            ("KAFKA_TOPIC_RAW", TOPIC),
            ("KAFKA_GROUP_ID", GROUP),
            ("ENRICHER_IMPORT_LANE", "false"),
            ("LIFECYCLE_RUNNER", "false"),
        ])
        .await;
        wait_assigned(&enricher).await;
        Fixture {
            ingest,
            _enricher: enricher,
        }
    })
    .await
}

/// A time three hours ago, on a whole second (the table stores seconds), in ms.
fn base_ms() -> i64 {
    (now_ms() / 1000 - 3 * 3600) * 1000
}

/// RFC 3339 of epoch milliseconds, as `users show` prints times.
fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(ms / 1000)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", Uuid::new_v4().simple())
}

/// POSTs `body` to `path` on the suite's ingest with `headers`: status and JSON body.
async fn post(path: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, Value) {
    let url = format!("{}{path}", fx().await.ingest.url);
    let (status, _, body) = post_bytes(&url, serde_json::to_vec(body).unwrap(), headers).await;
    (status, body)
}

/// An event, accepted; returns its event_id.
async fn track(key: &str, site: u32, fields: Value) -> String {
    let id = Uuid::new_v4().to_string();
    let mut body = json!({"api_key": key, "site_id": site, "event_id": id});
    body.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    let (status, answer) = post("/api/track", &body, &[]).await;
    assert_eq!(status, 200, "{answer}");
    id
}

/// An identify call, accepted.
async fn identify(key: &str, site: u32, fields: Value) {
    let mut body = json!({"api_key": key, "site_id": site});
    body.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    let (status, answer) = post("/api/identify", &body, &[]).await;
    assert_eq!(
        (status, &answer),
        (200, &json!({"success": true})),
        "{body}"
    );
}

/// Waits until the site has `n` distinct events in ClickHouse.
async fn stored(site: u32, n: u64) {
    let sql = format!("SELECT uniqExact(event_id) FROM events WHERE site_id = {site}");
    assert_eq!(
        wait_count(&sql, n, Duration::from_secs(60)).await,
        n,
        "site {site}'s events in ClickHouse"
    );
}

/// Waits until the enricher has written the claim of `anonymous_id` by `user`: the
/// identify call that makes it has been processed.
async fn claimed(site: u32, anonymous_id: &str, user: &str) {
    let sql = format!(
        "SELECT count() FROM person_claims WHERE site_id = {site} \
         AND anonymous_id = '{anonymous_id}' AND user_id = '{user}'"
    );
    assert!(
        wait_count(&sql, 1, Duration::from_secs(60)).await >= 1,
        "the claim of {anonymous_id} by {user} did not reach person_claims"
    );
}

/// Polls `users show` until `ok` holds for the person; returns them.
async fn person_when(site: u32, user: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    Pace::within(Duration::from_secs(60))
        .every(Duration::from_millis(300))
        .poll_until(
            &format!("users show --site {site} --user-id {user}: {what} did not show"),
            || async {
                match users_show(site, user) {
                    Some(p) if ok(&p) => Ok(p),
                    Some(p) => Err(p.to_string()),
                    None => Err("no such user".to_string()),
                }
            },
        )
        .await
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn anonymous_events_before_identify_become_the_users_and_later_ones_under_either_id_count() {
    let (site, key) = site_with_key().await;
    let (user, device, stranger) = (unique("user"), unique("dev"), unique("dev"));
    let t = base_ms();
    let mut anonymous = Vec::new();
    for (i, path) in ["/", "/pricing", "/signup"].iter().enumerate() {
        anonymous.push(
            track(
                &key,
                site,
                json!({"anonymous_id": device, "pathname": path, "timestamp": t + i as i64 * 60_000}),
            )
            .await,
        );
    }
    // Someone else's anonymous event, in the middle of it all: never the user's.
    track(
        &key,
        site,
        json!({"anonymous_id": stranger, "pathname": "/", "timestamp": t + 90_000}),
    )
    .await;
    stored(site, 4).await;
    assert!(
        users_show(site, &user).is_none(),
        "before identify, Rivulet knows nothing of {user}"
    );

    identify(
        &key,
        site,
        json!({"user_id": user, "anonymous_id": device, "timestamp": t + 180_000}),
    )
    .await;
    let p = person_when(site, &user, "3 events", |p| p["events"] == 3).await;
    assert_eq!(strings(&p["aliases"]), [device.as_str()]);
    assert_eq!(
        p["events_before_identify"], 3,
        "all three were sent anonymously: {p}"
    );
    assert_eq!(p["first_seen"], rfc3339(t), "{p}");
    assert_eq!(p["last_seen"], rfc3339(t + 120_000), "{p}");
    let recent = p["recent_events"].as_array().unwrap();
    assert_eq!(recent.len(), 3, "{p}");
    assert!(recent.iter().all(|e| e["anonymous_id"] == device), "{p}");
    assert_eq!(recent[0]["pathname"], "/signup", "newest first: {p}");

    // After identify: under the user id, under both, and under the anonymous id alone.
    track(
        &key,
        site,
        json!({"user_id": user, "pathname": "/app", "timestamp": t + 240_000}),
    )
    .await;
    track(&key, site, json!({"user_id": user, "anonymous_id": device, "pathname": "/app/settings", "timestamp": t + 270_000})).await;
    track(
        &key,
        site,
        json!({"anonymous_id": device, "pathname": "/blog", "timestamp": t + 300_000}),
    )
    .await;
    stored(site, 7).await;
    let p = person_when(site, &user, "6 events", |p| p["events"] == 6).await;
    assert_eq!(p["first_seen"], rfc3339(t), "{p}");
    assert_eq!(p["last_seen"], rfc3339(t + 300_000), "{p}");
    assert_eq!(strings(&p["aliases"]), [device.as_str()]);
    let paths: BTreeSet<String> = p["recent_events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pathname"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        paths,
        BTreeSet::from(
            ["/", "/pricing", "/signup", "/app", "/app/settings", "/blog"].map(String::from)
        ),
        "the stranger's event is not among the user's"
    );
}

#[tokio::test]
async fn identify_before_any_event_claims_the_events_that_follow() {
    let (site, key) = site_with_key().await;
    let (user, device) = (unique("user"), unique("dev"));
    let t = base_ms();
    identify(
        &key,
        site,
        json!({"user_id": user, "anonymous_id": device, "timestamp": t}),
    )
    .await;
    claimed(site, &device, &user).await;
    let p = users_show(site, &user).expect("a user known by identify alone");
    assert_eq!(
        (&p["events"], &p["first_seen"], &p["last_seen"]),
        (&json!(0), &Value::Null, &Value::Null),
        "no events yet: {p}"
    );
    assert_eq!(strings(&p["aliases"]), [device.as_str()]);

    for (i, path) in ["/a", "/b"].iter().enumerate() {
        track(
            &key,
            site,
            json!({"anonymous_id": device, "pathname": path, "timestamp": t + 60_000 * (i as i64 + 1)}),
        )
        .await;
    }
    track(
        &key,
        site,
        json!({"user_id": user, "pathname": "/c", "timestamp": t + 600_000}),
    )
    .await;
    stored(site, 3).await;
    let p = person_when(site, &user, "3 events", |p| p["events"] == 3).await;
    assert_eq!(p["first_seen"], rfc3339(t + 60_000), "{p}");
    assert_eq!(p["last_seen"], rfc3339(t + 600_000), "{p}");
}

#[tokio::test]
async fn two_anonymous_ids_merge_into_one_user() {
    let (site, key) = site_with_key().await;
    let (user, phone, laptop) = (unique("user"), unique("phone"), unique("laptop"));
    let t = base_ms();
    track(
        &key,
        site,
        json!({"anonymous_id": phone, "pathname": "/m", "timestamp": t}),
    )
    .await;
    track(
        &key,
        site,
        json!({"anonymous_id": phone, "pathname": "/m/2", "timestamp": t + 1000}),
    )
    .await;
    track(
        &key,
        site,
        json!({"anonymous_id": laptop, "pathname": "/d", "timestamp": t + 2000}),
    )
    .await;
    identify(
        &key,
        site,
        json!({"user_id": user, "anonymous_id": phone, "timestamp": t + 10_000}),
    )
    .await;
    identify(
        &key,
        site,
        json!({"user_id": user, "anonymous_id": laptop, "timestamp": t + 20_000}),
    )
    .await;
    stored(site, 3).await;
    let p = person_when(site, &user, "both devices' 3 events", |p| {
        p["events"] == 3 && p["aliases"].as_array().is_some_and(|a| a.len() == 2)
    })
    .await;
    let mut want = vec![phone, laptop];
    want.sort();
    assert_eq!(strings(&p["aliases"]), want, "sorted: {p}");
    assert_eq!(
        (&p["first_seen"], &p["last_seen"]),
        (&json!(rfc3339(t)), &json!(rfc3339(t + 2000)))
    );
}

#[tokio::test]
async fn an_anonymous_id_claimed_by_two_users_stays_with_the_first() {
    let (site, key) = site_with_key().await;
    let (first, second, shared) = (unique("first"), unique("second"), unique("shared"));
    let t = base_ms();
    let shared_events = [
        track(
            &key,
            site,
            json!({"anonymous_id": shared, "pathname": "/s1", "timestamp": t}),
        )
        .await,
        track(
            &key,
            site,
            json!({"anonymous_id": shared, "pathname": "/s2", "timestamp": t + 1000}),
        )
        .await,
    ];
    let first_own = track(
        &key,
        site,
        json!({"user_id": first, "pathname": "/f", "timestamp": t + 2000}),
    )
    .await;
    let second_own = track(
        &key,
        site,
        json!({"user_id": second, "pathname": "/x", "timestamp": t + 3000}),
    )
    .await;
    identify(
        &key,
        site,
        json!({"user_id": first, "anonymous_id": shared, "timestamp": t + 100_000}),
    )
    .await;
    claimed(site, &shared, &first).await;
    identify(
        &key,
        site,
        json!({"user_id": second, "anonymous_id": shared, "timestamp": t + 200_000}),
    )
    .await;
    // The second claim is stored too (readers decide): wait until it is, then read.
    claimed(site, &shared, &second).await;
    stored(site, 4).await;

    let a = person_when(site, &first, "3 events", |p| p["events"] == 3).await;
    assert_eq!(strings(&a["aliases"]), [shared.as_str()]);
    let b = users_show(site, &second).expect("the second user has an event of their own");
    assert_eq!(b["events"], 1, "only their own event: {b}");
    assert_eq!(strings(&b["aliases"]), Vec::<String>::new(), "{b}");
    assert!(
        b["recent_events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["anonymous_id"] != shared),
        "{b}"
    );

    // Exports agree with users show.
    let ids = |rows: Vec<Value>| -> BTreeSet<String> {
        rows.iter()
            .map(|r| r["event_id"].as_str().unwrap().to_string())
            .collect()
    };
    let mut want_first: BTreeSet<String> = shared_events.iter().cloned().collect();
    want_first.insert(first_own);
    assert_eq!(ids(export_ndjson(site, Some(&first))), want_first);
    assert_eq!(
        ids(export_ndjson(site, Some(&second))),
        BTreeSet::from([second_own])
    );
}

/// Waits until a marker trait sent after the calls before it is stored: one user's calls
/// go to one partition, so once it is, so are they.
async fn traits_stored(site: u32, user: &str, key: &str, marker: &str) {
    identify(
        key,
        site,
        json!({"user_id": user, "traits": {marker: null}}),
    )
    .await;
    let sql = format!(
        "SELECT count() FROM person_trait_values WHERE site_id = {site} AND user_id = '{user}' \
         AND name = '{marker}'"
    );
    assert_eq!(
        wait_count(&sql, 1, Duration::from_secs(60)).await,
        1,
        "the identify sent last reached person_trait_values"
    );
}

#[tokio::test]
async fn traits_merge_the_latest_received_wins_and_null_removes_a_trait() {
    let (site, key) = site_with_key().await;
    let user = unique("user");
    let t = base_ms();
    let sent = now_ms();
    identify(
        &key,
        site,
        json!({"user_id": user, "timestamp": t + 10_000,
        "traits": {"plan": "free", "seats": 1, "color": "red"}}),
    )
    .await;
    identify(
        &key,
        site,
        json!({"user_id": user, "timestamp": t + 20_000,
        "traits": {"plan": "pro", "color": null, "company": {"name": "Acme", "size": 12}}}),
    )
    .await;
    // Sent last but dated earlier (a client with a wrong clock, or an offline queue): the
    // server's time decides, so it wins.
    identify(
        &key,
        site,
        json!({"user_id": user, "timestamp": t, "traits": {"plan": "late", "seats": null}}),
    )
    .await;
    traits_stored(site, &user, &key, "marker").await;
    let p = users_show(site, &user).expect("a user with traits");
    assert_eq!(
        p["traits"],
        json!({"plan": "late", "company": {"name": "Acme", "size": 12}}),
        "{p}"
    );
    let updated = time::OffsetDateTime::parse(
        p["traits_updated_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap()
    .unix_timestamp();
    assert!(
        updated >= sent / 1000 - 1 && updated <= now_ms() / 1000 + 1,
        "traits_updated_at is when the server received them: {p}"
    );
    assert_eq!(
        (&p["events"], &p["aliases"], &p["keyless_traits"]),
        (&json!(0), &json!([]), &json!([])),
        "{p}"
    );

    // A removed trait can be set again later.
    identify(
        &key,
        site,
        json!({"user_id": user, "timestamp": t + 30_000, "traits": {"color": "blue"}}),
    )
    .await;
    let p = person_when(site, &user, "color blue", |p| {
        p["traits"]["color"] == "blue"
    })
    .await;
    assert_eq!(p["traits"]["plan"], "late");
    assert_eq!(p["traits"].as_object().unwrap().len(), 3, "{p}");
}

/// Turns the browser path's identify on for a site, as an operator does, and waits until
/// the suite's ingest takes a keyless identify for it.
async fn browser_identify_on(site: u32) -> String {
    let run = admin_run(
        &[
            "sites",
            "update",
            &site.to_string(),
            "--browser-identify",
            "on",
        ],
        &[],
    );
    assert_eq!(run.json()["browser_identify"], true, "{}", run.stdout);
    let domain = run.json()["domain"].as_str().unwrap().to_string();
    let origin = format!("https://{domain}");
    let probe = json!({"site_id": site, "user_id": unique("probe")});
    Pace::within(Duration::from_secs(10))
        .every(Duration::from_millis(200))
        .poll_until("the ingest took a keyless identify", || async {
            match post("/api/identify", &probe, &[("origin", origin.as_str())]).await {
                (200, _) => Ok(()),
                (status, body) => Err(format!("{status} {body}")),
            }
        })
        .await;
    origin
}

#[tokio::test]
async fn a_keyless_identify_never_changes_what_a_keyed_one_set() {
    let (site, key) = site_with_key().await;
    let (user, device, attacker) = (unique("user"), unique("dev"), unique("attacker"));
    // Identify from the browser is off until the site turns it on.
    let (status, body) = post(
        "/api/identify",
        &json!({"site_id": site, "user_id": user, "traits": {"role": "admin"}}),
        &[(
            "origin",
            &format!(
                "https://{}",
                registry()
                    .await
                    .get_site(site)
                    .await
                    .unwrap()
                    .unwrap()
                    .domain
            ),
        )],
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let origin = browser_identify_on(site).await;
    let browser = [("origin", origin.as_str())];
    let t = now_ms();
    identify(
        &key,
        site,
        json!({"user_id": user, "anonymous_id": device, "timestamp": t,
        "traits": {"email": "user@example.com", "role": "member"}}),
    )
    .await;
    claimed(site, &device, &user).await;
    // Keyless, dated 9 minutes ahead and 6 days back: a new email and role, a trait of
    // its own, and a claim of the user's device by someone else.
    for (who, when, anon) in [
        (&user, t + 540_000, None),
        (&attacker, t - 6 * 86_400_000, Some(&device)),
    ] {
        let mut body = json!({"site_id": site, "user_id": who, "timestamp": when,
            "traits": {"email": "attacker@example.com", "role": "admin", "nickname": "x"}});
        if let Some(anon) = anon {
            body["anonymous_id"] = json!(anon);
        }
        let (status, answer) = post("/api/identify", &body, &browser).await;
        assert_eq!(status, 200, "{answer}");
    }
    claimed(site, &device, &attacker).await;
    traits_stored(site, &user, &key, "marker").await;
    let p = users_show(site, &user).unwrap();
    assert_eq!(
        (
            &p["traits"]["email"],
            &p["traits"]["role"],
            &p["traits"]["nickname"]
        ),
        (&json!("user@example.com"), &json!("member"), &json!("x")),
        "only the trait no server set is the keyless one's: {p}"
    );
    assert_eq!(p["keyless_traits"], json!(["nickname"]), "{p}");
    assert_eq!(
        strings(&p["aliases"]),
        [device.as_str()],
        "the device stays the user's: {p}"
    );
    let a = users_show(site, &attacker).unwrap();
    assert_eq!(a["aliases"], json!([]), "{a}");
    // A later keyed update still wins over the keyless email.
    identify(
        &key,
        site,
        json!({"user_id": user, "timestamp": t - 1000, "traits": {"email": "new@example.com"}}),
    )
    .await;
    let p = person_when(site, &user, "the keyed email", |p| {
        p["traits"]["email"] == "new@example.com"
    })
    .await;
    assert_eq!(p["traits"]["role"], "member", "{p}");
}

#[tokio::test]
async fn the_key_in_the_body_or_as_a_bearer_token_is_accepted_everywhere_and_a_bad_one_is_401() {
    let (site, key) = site_with_key().await;
    let bearer = format!("Bearer {key}");
    let auth = [("authorization", bearer.as_str())];
    let t = base_ms();
    let event = |path: &str| json!({"pathname": path, "timestamp": t, "event_id": Uuid::new_v4().to_string()});

    // /api/track
    let mut body_key = event("/body");
    body_key["api_key"] = json!(key);
    body_key["site_id"] = json!(site);
    assert_eq!(post("/api/track", &body_key, &[]).await.0, 200);
    let mut no_key = event("/bearer");
    no_key["site_id"] = json!(site);
    assert_eq!(post("/api/track", &no_key, &auth).await.0, 200);
    // /api/track/batch
    let batch_body = json!({"api_key": key, "site_id": site, "events": [event("/batch-body-1"), event("/batch-body-2")]});
    let (status, answer) = post("/api/track/batch", &batch_body, &[]).await;
    assert_eq!((status, &answer["accepted"]), (200, &json!(2)), "{answer}");
    let batch_bearer =
        json!({"site_id": site, "events": [event("/batch-bearer-1"), event("/batch-bearer-2")]});
    let (status, answer) = post("/api/track/batch", &batch_bearer, &auth).await;
    assert_eq!((status, &answer["accepted"]), (200, &json!(2)), "{answer}");
    // /api/identify, the key in the body, as a Bearer token, and with a body key of null
    // (which counts as none) beside the token.
    let (u1, u2, u3) = (unique("body"), unique("bearer"), unique("null-key"));
    let (status, answer) = post(
        "/api/identify",
        &json!({"api_key": key, "site_id": site, "user_id": u1, "anonymous_id": format!("{u1}-dev")}),
        &[],
    )
    .await;
    assert_eq!(
        (status, answer),
        (200, json!({"success": true})),
        "body key"
    );
    let (status, answer) = post(
        "/api/identify",
        &json!({"site_id": site, "user_id": u2, "anonymous_id": format!("{u2}-dev")}),
        &auth,
    )
    .await;
    assert_eq!(
        (status, answer),
        (200, json!({"success": true})),
        "Bearer key"
    );
    let (status, answer) = post(
        "/api/identify",
        &json!({"api_key": null, "site_id": site, "user_id": u3, "anonymous_id": format!("{u3}-dev")}),
        &auth,
    )
    .await;
    assert_eq!(
        (status, answer),
        (200, json!({"success": true})),
        "null body key + Bearer"
    );
    stored(site, 6).await;
    for u in [&u1, &u2, &u3] {
        claimed(site, &format!("{u}-dev"), u).await;
    }

    // A well-formed key that is no one's, and one that is not even well-formed, in
    // either place: 401, and nothing is sent.
    let unknown = format!("rb_{}", "0".repeat(32));
    for bad in [unknown.as_str(), "rb_not-a-key"] {
        let bad_bearer = format!("Bearer {bad}");
        let bad_auth = [("authorization", bad_bearer.as_str())];
        let track_body = json!({"api_key": bad, "site_id": site, "pathname": "/x"});
        let batch = json!({"api_key": bad, "site_id": site, "events": [event("/x")]});
        let ident = json!({"api_key": bad, "site_id": site, "user_id": "u"});
        let bearer_track = json!({"site_id": site, "pathname": "/x"});
        let bearer_batch = json!({"site_id": site, "events": [event("/x")]});
        let bearer_ident = json!({"site_id": site, "user_id": "u"});
        for (path, body, headers) in [
            ("/api/track", &track_body, &[][..]),
            ("/api/track/batch", &batch, &[][..]),
            ("/api/identify", &ident, &[][..]),
            ("/api/track", &bearer_track, &bad_auth[..]),
            ("/api/track/batch", &bearer_batch, &bad_auth[..]),
            ("/api/identify", &bearer_ident, &bad_auth[..]),
        ] {
            let (status, answer) = post(path, body, headers).await;
            assert_eq!(
                (status, answer),
                (401, json!({"success": false, "error": "Invalid API key"})),
                "{path} with {bad} ({})",
                if headers.is_empty() { "body" } else { "Bearer" }
            );
        }
    }
}

#[tokio::test]
async fn a_bad_identify_is_400_with_the_fields_named() {
    let (site, key) = site_with_key().await;
    let ident = |extra: Value| {
        let mut b = json!({"api_key": key, "site_id": site});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    let field_error = |answer: &Value, field: &str| -> Vec<String> {
        assert_eq!(answer["success"], false, "{answer}");
        assert_eq!(answer["error"], "Invalid payload", "{answer}");
        assert!(answer["details"]["formErrors"].is_array(), "{answer}");
        strings(&answer["details"]["fieldErrors"][field])
    };

    // Not JSON at all.
    let url = format!("{}/api/identify", fx().await.ingest.url);
    let (status, _, answer) = post_bytes(&url, b"{\"user_id\": ".to_vec(), &[]).await;
    assert_eq!(status, 400);
    assert_eq!(answer["success"], false);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .starts_with("Invalid JSON body"),
        "{answer}"
    );

    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({}), "user_id", "user_id is required"),
        (json!({"user_id": ""}), "user_id", "user_id is required"),
        (json!({"user_id": null}), "user_id", "user_id is required"),
        (
            json!({"user_id": "u".repeat(256)}),
            "user_id",
            "user_id must be at most 255 characters",
        ),
        (
            json!({"user_id": 42}),
            "user_id",
            "user_id must be a string",
        ),
        (
            json!({"user_id": "u", "anonymous_id": "a".repeat(256)}),
            "anonymous_id",
            "anonymous_id must be at most 255 characters",
        ),
        (
            json!({"user_id": "u", "traits": {"bio": "x".repeat(2040)}}),
            "traits",
            "traits must be at most 2048 characters as JSON",
        ),
        (
            json!({"user_id": "u", "traits": [1, 2]}),
            "traits",
            "traits must be a JSON object",
        ),
        (
            json!({"user_id": "u", "traits": "{\"plan\":\"pro\"}"}),
            "traits",
            "traits must be a JSON object",
        ),
        (
            json!({"user_id": "u", "traits": 5}),
            "traits",
            "traits must be a JSON object",
        ),
        (
            json!({"user_id": "u", "event_id": "not-a-uuid"}),
            "event_id",
            "event_id must be a UUID",
        ),
    ];
    for (extra, field, message) in cases {
        let (status, answer) = post("/api/identify", &ident(extra.clone()), &[]).await;
        assert_eq!(status, 400, "{extra}: {answer}");
        assert_eq!(field_error(&answer, field), [message], "{extra}: {answer}");
    }

    // Every problem at once.
    let (status, answer) = post(
        "/api/identify",
        &ident(json!({"user_id": "", "traits": [1], "event_id": "x"})),
        &[],
    )
    .await;
    assert_eq!(status, 400);
    let fields: BTreeSet<String> = answer["details"]["fieldErrors"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        fields,
        BTreeSet::from(["event_id", "traits", "user_id"].map(String::from)),
        "{answer}"
    );

    // At the limits: accepted. `{"bio":"…"}` is 10 characters around the value.
    let at_limit = json!({"user_id": "u".repeat(255), "anonymous_id": "a".repeat(255),
        "traits": {"bio": "x".repeat(2048 - 10)}});
    assert_eq!(
        serde_json::to_string(&at_limit["traits"]).unwrap().len(),
        2048
    );
    let (status, answer) = post("/api/identify", &ident(at_limit), &[]).await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn an_identify_retried_with_the_same_event_id_is_stored_once() {
    fx().await;
    let (site, key) = site_with_key().await;
    let (user, device, marker) = (unique("user"), unique("dev"), unique("marker"));
    let t = base_ms();
    let event_id = Uuid::new_v4().to_string();
    let topic = TopicReader::from_end(TOPIC);
    let call = json!({"user_id": user, "anonymous_id": device, "event_id": event_id,
        "timestamp": t, "traits": {"plan": "pro"}});
    identify(&key, site, call.clone()).await;
    identify(&key, site, call).await;
    // Then another call of the same user (the same partition, so processed after both).
    identify(
        &key,
        site,
        json!({"user_id": user, "anonymous_id": marker, "timestamp": t + 1000}),
    )
    .await;

    // Both copies went through Kafka: what follows is the storage's doing.
    let mut copies = 0;
    let _ = Pace::within(Duration::from_secs(20)).poll_blocking(|| {
        if let Some(m) = topic.next(Duration::from_millis(200)) {
            use rdkafka::message::Message;
            let payload = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
            if payload.contains(&event_id) {
                copies += 1;
            }
        }
        if copies < 2 {
            Err(())
        } else {
            Ok(())
        }
    });
    assert_eq!(copies, 2, "the retry reached Kafka");

    claimed(site, &marker, &user).await;
    let db = db().await;
    let final_count = |table: &str| {
        let sql = format!("SELECT count() FROM {table} FINAL WHERE site_id = {site}");
        let db = db.client.clone();
        async move { db.query(&sql).fetch_one::<u64>().await.unwrap() }
    };
    assert_eq!(
        final_count("person_claims").await,
        2,
        "the retried claim and the marker"
    );
    assert_eq!(
        final_count("person_trait_values").await,
        1,
        "one trait, once"
    );
    let p = users_show(site, &user).expect("the user");
    let mut want = vec![device, marker];
    want.sort();
    assert_eq!(strings(&p["aliases"]), want, "{p}");
    assert_eq!(p["traits"], json!({"plan": "pro"}), "{p}");
}

#[tokio::test]
async fn a_persons_export_holds_the_anonymous_events_that_became_theirs() {
    let (site, key) = site_with_key().await;
    let (user, device, stranger) = (unique("user"), unique("dev"), unique("dev"));
    let t = base_ms();
    let mut theirs = BTreeSet::new();
    theirs.insert(
        track(
            &key,
            site,
            json!({"anonymous_id": device, "pathname": "/before-1", "timestamp": t}),
        )
        .await,
    );
    theirs.insert(
        track(
            &key,
            site,
            json!({"anonymous_id": device, "pathname": "/before-2", "timestamp": t + 1000}),
        )
        .await,
    );
    let strangers = track(
        &key,
        site,
        json!({"anonymous_id": stranger, "pathname": "/other", "timestamp": t + 1500}),
    )
    .await;
    identify(
        &key,
        site,
        json!({"user_id": user, "anonymous_id": device, "timestamp": t + 2000}),
    )
    .await;
    theirs.insert(
        track(
            &key,
            site,
            json!({"user_id": user, "pathname": "/after", "timestamp": t + 3000}),
        )
        .await,
    );
    stored(site, 4).await;
    claimed(site, &device, &user).await;

    let rows = export_ndjson(site, Some(&user));
    let ids: BTreeSet<String> = rows
        .iter()
        .map(|r| r["event_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, theirs, "{rows:#?}");
    for r in &rows {
        assert_eq!(r["person_id"], user.as_str(), "{r}");
        assert_eq!(r["site_id"], site);
        if r["pathname"] != "/after" {
            assert_eq!(r["anonymous_id"], device.as_str(), "{r}");
            let visitor = r["user_id"].as_str().unwrap();
            assert!(
                visitor.len() == 32 && visitor.bytes().all(|b| b.is_ascii_hexdigit()),
                "an anonymous event keeps its visitor id as user_id: {r}"
            );
        }
    }
    // Oldest first.
    let paths: Vec<&str> = rows
        .iter()
        .map(|r| r["pathname"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/before-1", "/before-2", "/after"]);
    // The whole site's export has the stranger's event too, as their own person.
    let all = export_ndjson(site, None);
    assert_eq!(all.len(), 4);
    let other = all
        .iter()
        .find(|r| r["event_id"] == strangers.as_str())
        .unwrap();
    assert_eq!(other["person_id"], other["user_id"], "{other}");
}
