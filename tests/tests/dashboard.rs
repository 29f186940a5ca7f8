//! `rivulet-admin serve` by real HTTP against the real stack: login, CSRF, escaping of
//! event data, the JSON API's auth and numbers, and revocation from the dashboard taking
//! effect at a running ingest at once. (The same flow in a real browser:
//! tests/browser/dashboard.test.mjs.)

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Client, Response, StatusCode};
use rivulet_tests::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn token() -> String {
    format!("test-token-{}", uuid::Uuid::new_v4().simple())
}

/// A client that does not follow redirects (they are part of what is tested) and keeps
/// the dashboard's cookies itself.
fn client() -> Client {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// `name=value` of the Set-Cookie header for `name`, and the whole header.
fn set_cookie(resp: &Response, name: &str) -> Option<(String, String)> {
    resp.headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| (v.split(';').next().unwrap().to_string(), v.to_string()))
}

/// The value of the hidden `csrf` field of a page.
fn csrf_of(html: &str) -> String {
    let start = html.find(r#"name="csrf" value=""#).expect("a CSRF field") + 19;
    html[start..start + 64].to_string()
}

struct Dash {
    url: String,
    http: Client,
    cookie: String,
    csrf: String,
}

impl Dash {
    /// GET /login: the login cookie and the form's token.
    async fn login_form(url: &str) -> (String, String) {
        let r = client().get(format!("{url}/login")).fetch().await;
        assert_eq!(r.status(), StatusCode::OK);
        let (cookie, _) = set_cookie(&r, "rivulet_admin_login").expect("login cookie");
        (cookie, csrf_of(&r.text().await.unwrap()))
    }

    async fn post_login(url: &str, cookie: &str, csrf: &str, token: &str) -> Response {
        client()
            .post(format!("{url}/login"))
            .header(COOKIE, cookie)
            .form(&[("csrf", csrf), ("token", token)])
            .fetch()
            .await
    }

    async fn log_in(url: &str, token: &str) -> Dash {
        let (cookie, csrf) = Self::login_form(url).await;
        let r = Self::post_login(url, &cookie, &csrf, token).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let (cookie, _) = set_cookie(&r, "rivulet_admin_session").expect("session cookie");
        let mut d = Dash {
            url: url.to_string(),
            http: client(),
            cookie,
            csrf: String::new(),
        };
        let (_, page) = d.get("/sites").await;
        d.csrf = csrf_of(&page);
        d
    }

    async fn get(&self, path: &str) -> (StatusCode, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.url))
            .header(COOKIE, &self.cookie)
            .fetch()
            .await;
        (r.status(), r.text().await.unwrap())
    }

    async fn post(&self, path: &str, form: &[(&str, &str)]) -> Response {
        self.http
            .post(format!("{}{path}", self.url))
            .header(COOKIE, &self.cookie)
            .form(form)
            .fetch()
            .await
    }

    /// Creates a site through the form; returns its id.
    async fn create_site(&self, domain: &str, name: &str) -> u32 {
        let r = self
            .post(
                "/sites",
                &[("csrf", &self.csrf), ("domain", domain), ("name", name)],
            )
            .await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let loc = r.headers()[LOCATION].to_str().unwrap();
        loc.trim_start_matches("/sites/")
            .trim_end_matches("/settings")
            .parse()
            .unwrap()
    }
}

fn domain() -> String {
    format!("dash-{}.example.com", uuid::Uuid::new_v4().simple())
}

#[tokio::test]
async fn login_with_a_wrong_token_fails_slowly_and_the_right_one_gets_a_strict_cookie() {
    let token = token();
    let admin = start_admin(&token, &[]).await;
    let (cookie, csrf) = Dash::login_form(&admin.url).await;

    let started = Instant::now();
    let r = Dash::post_login(&admin.url, &cookie, &csrf, "wrong-token-0123456789").await;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "a wrong token is answered after a delay"
    );
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(set_cookie(&r, "rivulet_admin_session").is_none());
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("That admin token is wrong"));

    let r = Dash::post_login(&admin.url, &cookie, &csrf, &token).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], "/sites");
    let (_, header) = set_cookie(&r, "rivulet_admin_session").unwrap();
    assert!(header.contains("HttpOnly"), "{header}");
    assert!(header.contains("SameSite=Strict"), "{header}");

    // Without a session, pages send you to the login form.
    let r = client().get(format!("{}/sites", admin.url)).fetch().await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], "/login");
}

#[tokio::test]
async fn posts_without_the_csrf_token_are_refused() {
    let token = token();
    let admin = start_admin(&token, &[]).await;

    // The login form itself: without its token (or with another one) nothing happens.
    let (cookie, _) = Dash::login_form(&admin.url).await;
    let r = Dash::post_login(&admin.url, &cookie, "", &token).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(set_cookie(&r, "rivulet_admin_session").is_none());

    let d = Dash::log_in(&admin.url, &token).await;
    let domain = domain();
    for form in [
        vec![("domain", domain.as_str())],
        vec![
            ("csrf", "0".repeat(64).as_str()),
            ("domain", domain.as_str()),
        ],
    ] {
        let r = d.post("/sites", &form).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert!(r.text().await.unwrap().contains("CSRF"));
    }
    let sites = registry().await.list_sites().await.unwrap();
    assert!(
        sites.iter().all(|s| s.domain != domain),
        "no site was created"
    );

    // With the token the same form works; a key is not made without it either.
    let site_id = d.create_site(&domain, "Csrf").await;
    let r = d.post(&format!("/sites/{site_id}/keys"), &[]).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(registry()
        .await
        .list_keys(site_id)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn event_data_and_names_render_as_text() {
    let token = token();
    let admin = start_admin(&token, &[]).await;
    let d = Dash::log_in(&admin.url, &token).await;
    let xss = "<script>alert(1)</script>";
    let site_id = d
        .create_site(&domain(), "<img src=x onerror=alert(2)>")
        .await;
    let db = db().await;
    for (id, kind, name) in [
        (uuid::Uuid::new_v4(), "pageview", ""),
        (uuid::Uuid::new_v4(), "custom_event", "<b>signup</b>"),
    ] {
        db.client
            .query(&format!(
                "INSERT INTO events (event_id, site_id, timestamp, received_at, type, event_name, pathname, browser, user_id) \
                 VALUES ('{id}', {site_id}, now(), now(), '{kind}', '{name}', '{xss}', '\"><svg onload=alert(3)>', 'u1')"
            ))
            .execute()
            .await
            .unwrap();
    }
    let (status, page) = d.get(&format!("/sites/{site_id}/overview")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.contains("&lt;b&gt;signup&lt;/b&gt;"));
    assert!(page.contains("&lt;img src=x onerror=alert(2)&gt;"));
    for raw in [xss, "<b>signup", "<img src=x", "<svg onload"] {
        assert!(!page.contains(raw), "{raw} reached the page unescaped");
    }
    let (_, sites) = d.get("/sites").await;
    assert!(sites.contains("&lt;img src=x onerror=alert(2)&gt;") && !sites.contains("<img src=x"));
}

#[tokio::test]
async fn the_json_api_needs_the_admin_token_and_counts_each_event_once() {
    let token = token();
    let admin = start_admin(&token, &[]).await;
    let http = client();
    let api = |path: &str| format!("{}/api{path}", admin.url);

    let r = http.get(api("/sites")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.json::<Value>().await.unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("Authorization: Bearer"));
    let started = Instant::now();
    let r = http
        .get(api("/sites"))
        .bearer_auth("wrong-token-0123456789")
        .fetch()
        .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(started.elapsed() >= Duration::from_millis(900));
    let r = http
        .post(api("/sites"))
        .json(&json!({"domain": domain()}))
        .fetch()
        .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // With the token: a site, a key (shown once), the key list without the secret.
    let domain = domain();
    let r = http
        .post(api("/sites"))
        .bearer_auth(&token)
        .json(&json!({"domain": domain, "name": "Api"}))
        .fetch()
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let site_id = r.json::<Value>().await.unwrap()["site_id"]
        .as_u64()
        .unwrap() as u32;
    let created: Value = http
        .post(api(&format!("/sites/{site_id}/keys")))
        .bearer_auth(&token)
        .fetch_json()
        .await;
    let secret = created["api_key"].as_str().unwrap();
    assert!(secret.starts_with("rb_"));
    let keys: Value = http
        .get(api(&format!("/sites/{site_id}/keys")))
        .bearer_auth(&token)
        .fetch_json()
        .await;
    assert_eq!(keys.as_array().unwrap().len(), 1);
    assert!(!keys.to_string().contains(&secret[3..]));

    // The session cookie works for reading; changes also need X-CSRF-Token.
    let d = Dash::log_in(&admin.url, &token).await;
    let in_session = |req: reqwest::RequestBuilder| req.header(COOKIE, &d.cookie).fetch_status();
    let site_url = api(&format!("/sites/{site_id}"));
    let keys_url = api(&format!("/sites/{site_id}/keys"));
    assert_eq!(in_session(http.get(&site_url)).await, StatusCode::OK);
    assert_eq!(
        in_session(http.post(&keys_url)).await,
        StatusCode::FORBIDDEN
    );
    let with_csrf = http.post(&keys_url).header("x-csrf-token", &d.csrf);
    assert_eq!(in_session(with_csrf).await, StatusCode::CREATED);

    // Overview: a redelivered event (same event_id, not merged yet) counts once; bots
    // are not counted.
    let db = db().await;
    let dup = uuid::Uuid::new_v4();
    for (id, kind, user, bot) in [
        (dup, "pageview", "a", 0),
        (dup, "pageview", "a", 0),
        (uuid::Uuid::new_v4(), "pageview", "b", 0),
        (uuid::Uuid::new_v4(), "custom_event", "b", 0),
        (uuid::Uuid::new_v4(), "pageview", "bot", 1),
    ] {
        db.client
            .query(&format!(
                "INSERT INTO events (event_id, site_id, timestamp, received_at, type, event_name, pathname, user_id, country, is_bot) \
                 VALUES ('{id}', {site_id}, now(), now(), '{kind}', 'signup', '/p', '{user}', 'GB', {bot})"
            ))
            .execute()
            .await
            .unwrap();
    }
    let o: Value = http
        .get(api(&format!("/sites/{site_id}/overview")))
        .bearer_auth(&token)
        .fetch_json()
        .await;
    assert_eq!(
        o["totals"],
        json!({"pageviews": 2, "visitors": 2, "custom_events": 1})
    );
    assert_eq!(o["hourly"].as_array().unwrap().len(), 24);
    assert_eq!(o["hourly"][23]["pageviews"], 2);
    assert_eq!(
        o["top_pages"],
        json!([{"label": "/p", "events": 2, "visitors": 2}])
    );
    assert_eq!(o["countries"][0]["label"], "GB");
    assert_eq!(
        o["custom_events"],
        json!([{"label": "signup", "events": 1, "visitors": 1}])
    );
    assert_eq!(
        o["latest_events"].as_array().unwrap().len(),
        4,
        "the duplicate shows once, the bot shows"
    );

    let r = http
        .get(api("/sites/4000000000/overview"))
        .bearer_auth(&token)
        .fetch()
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_key_revoked_in_the_dashboard_is_rejected_by_a_running_ingest_at_once() {
    let token = token();
    let admin = start_admin(&token, &[]).await;
    let ingest = start_ingest(&[]).await;
    let d = Dash::log_in(&admin.url, &token).await;
    let site_id = d.create_site(&domain(), "Revoke").await;

    let r = d
        .post(&format!("/sites/{site_id}/keys"), &[("csrf", &d.csrf)])
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (_, page) = d.get(&format!("/sites/{site_id}/settings/api-key")).await;
    let at = page.find("value=\"rb_").expect("the new key is shown") + 7;
    let secret = page[at..at + 35].to_string();
    assert!(page.contains("never in client-side code"));
    let (_, again) = d.get(&format!("/sites/{site_id}/settings/api-key")).await;
    assert!(!again.contains(&secret), "the key is shown only once");

    let track = || async {
        http()
            .post(format!("{}/api/track", ingest.url))
            .json(&json!({"api_key": secret, "site_id": site_id, "pathname": "/"}))
            .fetch_status()
            .await
    };
    assert!(again.contains("never</span>"), "a new key was never used");
    assert_eq!(track().await, StatusCode::OK);
    // Last used: written by the ingest in the background, shown to the minute.
    Pace::within(Duration::from_secs(5))
        .every(Duration::from_millis(100))
        .poll_until("the key's last use did not show", || async {
            let (_, page) = d.get(&format!("/sites/{site_id}/settings/api-key")).await;
            if page.contains("never</span>") {
                Err("never used")
            } else {
                Ok(())
            }
        })
        .await;

    let key_id = registry().await.list_keys(site_id).await.unwrap()[0]
        .key_id
        .clone();
    let r = d
        .post(
            &format!("/sites/{site_id}/keys/{key_id}/revoke"),
            &[("csrf", &d.csrf)],
        )
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(track().await, StatusCode::UNAUTHORIZED);
    let (_, page) = d.get(&format!("/sites/{site_id}/settings/api-key")).await;
    assert!(page.contains("Revoked"));
}

// The pages and API of erasure, retention, domains, the tracking code, people and export.

impl Dash {
    /// A request to the admin API with the admin token.
    fn api(&self, method: reqwest::Method, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}/api{path}", self.url))
            .bearer_auth(token)
    }
}

#[tokio::test]
async fn the_events_card_shows_web_vitals_per_page_in_its_tab_details_and_csv() {
    let token = token();
    let admin = start_admin(&token, &[]).await;
    let d = Dash::log_in(&admin.url, &token).await;
    let site_id = d.create_site(&domain(), "Vitals").await;
    // "/": three page loads, LCP 1200, 2500.5, 4000 (p75: the sorted values' element
    // ⌊3 × 3 / 4⌋ = 2, 4000), CLS 0.05, 0.1, 0.25, INP 80, not measured, 300 (of two: the
    // second). "/docs": one, LCP 900 and nothing else. A pageview with an LCP is no
    // measurement, and not a page load.
    let now = (now_ms() / 1000) as u32;
    let mut data = Vec::new();
    for (user, kind, path, lcp, cls, inp) in [
        (
            "u1",
            "performance",
            "/",
            Some(1200.0),
            Some(0.05),
            Some(80.0),
        ),
        ("u1", "performance", "/", Some(2500.5), Some(0.1), None),
        (
            "u1",
            "performance",
            "/",
            Some(4000.0),
            Some(0.25),
            Some(300.0),
        ),
        ("u2", "performance", "/docs", Some(900.0), None, None),
        ("u2", "pageview", "/docs", Some(99_999.0), None, None),
    ] {
        rivulet_common::schema::events::EventRow {
            event_id: uuid::Uuid::new_v4(),
            site_id,
            timestamp: now,
            received_at: now,
            event_type: kind.into(),
            pathname: path.into(),
            user_id: user.into(),
            session_id: user.into(),
            lcp,
            cls,
            inp,
            ..Default::default()
        }
        .write_row_binary(&mut data);
    }
    rivulet_enrichment::insert::insert_row_binary(&db().await, &[bytes::Bytes::from(data)])
        .await
        .expect("insert");

    let (status, page) = d
        .get(&format!("/sites/{site_id}/overview?events=vitals"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let card = &page[page.find(r#"id="card-events""#).expect("the Events card")..];
    let card = &card[..card.find("</section>").unwrap()];
    // The tabs that were there keep their place; Web vitals is the one shown.
    let custom = card.find(">Custom events<").unwrap();
    let types = card.find(">Event types<").unwrap();
    let vitals = card
        .find(r#"aria-current="page">Web vitals<"#)
        .expect("the tab, chosen");
    assert!(custom < types && types < vitals, "{card}");
    for heading in ["Page loads", "LCP p75 (ms)", "CLS p75", "INP p75 (ms)"] {
        assert!(card.contains(&format!(">{heading}<")), "{heading}: {card}");
    }
    let row = |page: &str, label: &str| {
        let at = page
            .find(&format!(">{label}</a>"))
            .unwrap_or_else(|| panic!("no row {label}: {page}"));
        let row = &page[at..];
        row[..row.find("</tr>").unwrap()].to_string()
    };
    let cells = |row: &str| -> Vec<String> {
        row.split(r#"<td class="num">"#)
            .skip(1)
            .map(|c| c[..c.find("</td>").unwrap()].to_string())
            .collect()
    };
    assert_eq!(cells(&row(card, "/")), ["1", "3", "4,000", "0.250", "300"]);
    assert_eq!(cells(&row(card, "/docs")), ["1", "1", "900", "—", "—"]);

    // Details, with a search; the CSV, as the Stats API answers.
    let (status, details) = d
        .get(&format!(
            "/sites/{site_id}/overview/details?events=vitals&q=doc"
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cells(&row(&details, "/docs")), ["1", "1", "900", "—", "—"]);
    assert!(!details.contains(">/</a>"), "the search leaves / out");
    let (status, csv) = d
        .get(&format!(
            "/sites/{site_id}/overview/export.csv?events=vitals"
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        csv,
        "page,visitors,events,lcp_p75,cls_p75,inp_p75,percentage\n\
         /,1,3,4000,0.25,300,50.0\n\
         /docs,1,1,900,,,50.0\n"
    );
}

/// Inserts events as the enricher would have stored them: `(user_id, anonymous_id,
/// pathname)` each, now.
async fn insert_events(site_id: u32, events: &[(&str, &str, &str)]) {
    insert_events_at(site_id, (now_ms() / 1000) as u32, events).await
}

/// `insert_events`, at `now` (epoch seconds).
async fn insert_events_at(site_id: u32, now: u32, events: &[(&str, &str, &str)]) {
    let mut data = Vec::new();
    for (user, anon, path) in events {
        rivulet_common::schema::events::EventRow {
            event_id: uuid::Uuid::new_v4(),
            site_id,
            timestamp: now,
            received_at: now,
            event_type: "pageview".into(),
            pathname: path.to_string(),
            user_id: user.to_string(),
            anonymous_id: anon.to_string(),
            session_id: "s1".into(),
            ..Default::default()
        }
        .write_row_binary(&mut data);
    }
    rivulet_enrichment::insert::insert_row_binary(&db().await, &[bytes::Bytes::from(data)])
        .await
        .expect("insert");
}

/// The test whose enricher runs erasures soon after they are asked for (of every site:
/// `ERASURE_DELAY_MS=1000`) waits for the one that checks its requests are shown pending.
static ERASURES_RUN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn erasures_are_requested_listed_and_shown_pending_through_the_api_and_the_privacy_tab() {
    let _turn = ERASURES_RUN.lock().await;
    let token = token();
    let admin = start_admin(&token, &[]).await;
    let d = Dash::log_in(&admin.url, &token).await;
    let (site_id, _) = site_with_key().await;
    let xss = "<script>alert(1)</script>";
    use reqwest::Method;

    // POST → the receipt, pending; GET lists it, and finds it by id.
    let r = d
        .api(Method::POST, &format!("/sites/{site_id}/erasures"), &token)
        .json(&json!({"user_id": xss, "suppress": true}))
        .fetch()
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let receipt: Value = r.json().await.unwrap();
    assert_eq!(receipt["state"], "pending");
    assert_eq!(receipt["subject"], json!({"kind": "user_id", "id": xss}));
    assert_eq!(receipt["suppress"], true);
    assert_eq!(receipt["ids"], json!([["user_id", xss]]));
    let request_id = receipt["request_id"].as_str().unwrap().to_string();
    assert!(request_id.starts_with("er_"), "{request_id}");
    let list: Value = d
        .api(Method::GET, &format!("/sites/{site_id}/erasures"), &token)
        .fetch_json()
        .await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["request_id"], request_id.as_str());
    let one: Value = d
        .api(Method::GET, &format!("/erasures/{request_id}"), &token)
        .fetch_json()
        .await;
    assert_eq!(one["request_id"], request_id.as_str());
    assert_eq!(one["state"], "pending");

    // Refusals, in the API's error shape.
    for (path, body, status) in [
        (
            format!("/sites/{site_id}/erasures"),
            json!({"user_id": "a", "visitor_id": "b"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("/sites/{site_id}/erasures"),
            json!({}),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("/sites/{site_id}/erasures"),
            json!({"user_id": ""}),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("/sites/{site_id}/erasures"),
            json!({"userId": "a"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            "/sites/4000000000/erasures".into(),
            json!({"user_id": "a"}),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let r = d.api(Method::POST, &path, &token).json(&body).fetch().await;
        assert_eq!(r.status(), status, "{body}");
        let e: Value = r.json().await.unwrap();
        assert!(e["error"].as_str().is_some_and(|e| !e.is_empty()), "{e}");
    }
    let r = d
        .api(Method::POST, &format!("/sites/{site_id}/erasures"), &token)
        .header("content-type", "application/json")
        .body("{not json")
        .fetch()
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.json::<Value>().await.unwrap()["error"].is_string());
    let r = d
        .api(
            Method::GET,
            "/erasures/er_00000000000000000000000000000000",
            &token,
        )
        .fetch()
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // With the session cookie, a change needs the CSRF header.
    let r = d
        .http
        .post(format!("{}/api/sites/{site_id}/erasures", d.url))
        .header(COOKIE, &d.cookie)
        .json(&json!({"visitor_id": "v"}))
        .fetch_status()
        .await;
    assert_eq!(r, StatusCode::FORBIDDEN);

    // The form: a visitor id, suppressed; back to the tab, which announces the request.
    let r = d
        .post(
            &format!("/sites/{site_id}/erasures"),
            &[
                ("csrf", &d.csrf),
                ("kind", "visitor_id"),
                ("subject", "visitor-7"),
                ("suppress", "1"),
            ],
        )
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let location = r.headers()[LOCATION].to_str().unwrap().to_string();
    assert!(
        location.starts_with(&format!("/sites/{site_id}/settings/privacy?requested=er_")),
        "{location}"
    );
    let (status, page) = d.get(&location).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("recorded (pending)"), "the notice");
    assert_eq!(
        page.matches("badge pending").count(),
        2,
        "both requests, pending"
    );
    assert!(page.contains("visitor-7") && page.contains(&request_id));
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(
        !page.contains(xss),
        "the erased id reached the page unescaped"
    );
    assert!(page.contains("Last pruned: <span class=\"muted\">never</span>"));

    // A form with no id is refused, and says why.
    let r = d
        .post(
            &format!("/sites/{site_id}/erasures"),
            &[("csrf", &d.csrf), ("kind", "user_id"), ("subject", " ")],
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("must be 1 to 255 characters"));
}

#[tokio::test]
async fn domains_and_retention_change_through_patch_and_the_forms() {
    let token = token();
    let ingest_url = "https://stats.example.test";
    let admin = start_admin(&token, &[("ADMIN_INGEST_URL", ingest_url)]).await;
    let d = Dash::log_in(&admin.url, &token).await;
    let (site_id, _) = site_with_key().await;
    use reqwest::Method;
    let patch = |body: Value| {
        d.api(Method::PATCH, &format!("/sites/{site_id}"), &token)
            .json(&body)
            .fetch()
    };

    let r = patch(json!({"domains": ["A.example.com", "b.example.com"], "allow_subdomains": true, "retention_days": 30})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let site: Value = r.json().await.unwrap();
    assert_eq!(site["domains"], json!(["a.example.com", "b.example.com"]));
    assert_eq!(site["domain"], "a.example.com");
    assert_eq!(site["allow_subdomains"], true);
    assert_eq!(site["retention_days"], 30);
    let stored = registry().await.get_site(site_id).await.unwrap().unwrap();
    assert_eq!(stored.domains(), ["a.example.com", "b.example.com"]);
    assert_eq!((stored.allow_subdomains, stored.retention_days), (1, 30));
    // Only what is given changes.
    let site: Value = patch(json!({"retention_days": 0}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            site["retention_days"].as_u64(),
            site["allow_subdomains"].as_bool()
        ),
        (Some(0), Some(true))
    );
    for bad in [
        json!({"domains": ["not a domain"]}),
        json!({"domains": []}),
        json!({"retention_days": 36_501}),
        json!({"retention_days": -1}),
        json!({"retention": 3}),
    ] {
        let r = patch(bad.clone()).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
        assert!(
            r.json::<Value>().await.unwrap()["error"].is_string(),
            "{bad}"
        );
    }
    let r = d
        .api(Method::PATCH, "/sites/4000000000", &token)
        .json(&json!({"retention_days": 1}))
        .fetch_status()
        .await;
    assert_eq!(r, StatusCode::NOT_FOUND);

    // The Domains form: every bad line named, escaped, with the list as typed; nothing saved.
    let hostile = "<img src=x onerror=alert(1)>.example.com";
    let typed = format!("ok.example.com\n{hostile}\nhttps://x.example.com/");
    let r = d
        .post(
            &format!("/sites/{site_id}/settings/domains"),
            &[("csrf", &d.csrf), ("domains", &typed)],
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let page = r.text().await.unwrap();
    assert!(page.contains("Line 2: &quot;&lt;img src=x onerror=alert(1)&gt;.example.com&quot; is not a domain name"), "{page}");
    assert!(page.contains("Line 3: &quot;https://x.example.com/&quot;"));
    assert!(
        !page.contains("<img src=x"),
        "the typed list reached the page unescaped"
    );
    let stored = registry().await.get_site(site_id).await.unwrap().unwrap();
    assert_eq!(
        stored.domains(),
        ["a.example.com", "b.example.com"],
        "nothing saved"
    );
    let r = d
        .post(
            &format!("/sites/{site_id}/settings/domains"),
            &[
                ("csrf", &d.csrf),
                ("domains", "Shop.example.org\n\nwww.example.org\n"),
                ("browser_path", "1"),
            ],
        )
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let stored = registry().await.get_site(site_id).await.unwrap().unwrap();
    assert_eq!(stored.domains(), ["shop.example.org", "www.example.org"]);
    assert_eq!(stored.allow_subdomains, 0, "the box was not ticked");
    assert!(stored.browser_path(), "the browser path stays on");
    assert_eq!(
        stored.browser_identify, 0,
        "identify from the browser stays off"
    );
    // Both switches of the browser path, and back.
    for (path, identify) in [(false, false), (true, true), (true, false)] {
        let mut form = vec![("csrf", d.csrf.as_str()), ("domains", "shop.example.org")];
        if path {
            form.push(("browser_path", "1"));
        }
        if identify {
            form.push(("browser_identify", "1"));
        }
        let r = d
            .post(&format!("/sites/{site_id}/settings/domains"), &form)
            .await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let stored = registry().await.get_site(site_id).await.unwrap().unwrap();
        assert_eq!(
            (stored.browser_path(), stored.browser_identify == 1),
            (path, identify)
        );
    }
    let (_, page) = d
        .get(&format!("/sites/{site_id}/settings/domains?saved=1"))
        .await;
    assert!(page.contains("shop.example.org</textarea>"));

    // The retention form, and its last run (written by the enricher; here by hand).
    let r = d
        .post(
            &format!("/sites/{site_id}/retention"),
            &[("csrf", &d.csrf), ("retention_days", "90")],
        )
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        registry()
            .await
            .get_site(site_id)
            .await
            .unwrap()
            .unwrap()
            .retention_days,
        90
    );
    let r = d
        .post(
            &format!("/sites/{site_id}/retention"),
            &[("csrf", &d.csrf), ("retention_days", "ninety")],
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // The page shows the latest run. The other tests' enrichers may prune this site
    // (its retention is now 90 days) at any moment, so the run written here is dated
    // after any of theirs.
    db().await
        .client
        .query(&format!(
            "INSERT INTO retention_runs (site_id, ran_at, cutoff, rows_removed) VALUES \
             ({site_id}, toDateTime(4000000000), toDateTime(3992198400), 12)"
        ))
        .execute()
        .await
        .unwrap();
    let (_, page) = d.get(&format!("/sites/{site_id}/settings/privacy")).await;
    assert!(page.contains("Events are kept for 90 days."));
    assert!(page.contains(
        "Last pruned: 2096-10-02 07:06 UTC, events before 2096-07-04 00:00 UTC (12 rows removed)"
    ), "{page}");

    // The tracking code names ADMIN_INGEST_URL and the site, and lists its domains.
    let (status, page) = d.get(&format!("/sites/{site_id}/settings/tracking")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(&format!(
        "&lt;script src=&quot;{ingest_url}/api/script.js&quot; data-site-id=&quot;{site_id}&quot; defer&gt;&lt;/script&gt;</textarea>"
    )), "{page}");
    assert!(page.contains("data-copy=\"tracking-snippet\""));
    assert!(page.contains("<code>shop.example.org</code>"));
    assert!(page.contains("sdk/browser/README.md"));
}

#[tokio::test]
async fn the_new_forms_refuse_posts_without_the_csrf_token() {
    let token = token();
    let admin = start_admin(&token, &[]).await;
    let d = Dash::log_in(&admin.url, &token).await;
    let (site_id, _) = site_with_key().await;
    let before = registry().await.get_site(site_id).await.unwrap().unwrap();
    let stale = "0".repeat(64);
    for (path, form) in [
        ("erasures", vec![("kind", "user_id"), ("subject", "u1")]),
        ("retention", vec![("retention_days", "7")]),
        ("settings/domains", vec![("domains", "csrf.example.com")]),
    ] {
        for csrf in [None, Some(stale.as_str())] {
            let mut form = form.clone();
            form.extend(csrf.map(|c| ("csrf", c)));
            let r = d.post(&format!("/sites/{site_id}/{path}"), &form).await;
            assert_eq!(r.status(), StatusCode::FORBIDDEN, "{path}");
            assert!(r.text().await.unwrap().contains("CSRF"), "{path}");
        }
    }
    let after = registry().await.get_site(site_id).await.unwrap().unwrap();
    assert_eq!(before, after, "the site did not change");
    let receipts = rivulet_common::privacy::receipts(&db().await, Some(site_id))
        .await
        .unwrap();
    assert!(receipts.is_empty(), "no erasure was requested");
}

#[tokio::test]
async fn a_user_has_a_profile_page_and_an_unknown_one_a_friendly_404() {
    let token = token();
    let admin = start_admin(&token, &[]).await;
    let d = Dash::log_in(&admin.url, &token).await;
    let (site_id, _) = site_with_key().await;
    use reqwest::Method;

    let r = d
        .api(
            Method::GET,
            &format!("/sites/{site_id}/users/nobody-{site_id}"),
            &token,
        )
        .fetch()
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.json::<Value>().await.unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("has no user"));
    let (status, page) = d
        .get(&format!("/sites/{site_id}/users/%3Cb%3Enobody"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(page.contains("No such user") && page.contains("&lt;b&gt;nobody"));
    assert!(!page.contains("<b>nobody"));

    // A user with a hostile trait, an anonymous id they claimed, and events under both.
    let user = "user-42";
    let db = db().await;
    db.client
        .query(&format!(
            "INSERT INTO person_trait_values (site_id, user_id, name, trusted, value, removed, set_at_ms, received_at_ms) VALUES \
             ({site_id}, '{user}', 'plan', 1, '\"<script>alert(1)</script>\"', 0, {now}, {now}), \
             ({site_id}, '{user}', 'seats', 1, '5', 0, {now}, {now})",
            now = now_ms()
        ))
        .execute()
        .await
        .unwrap();
    db.client
        .query(&format!(
            "INSERT INTO person_claims (site_id, anonymous_id, user_id, trusted, claimed_at_ms, received_at_ms, rank) VALUES \
             ({site_id}, 'anon-1', '{user}', 1, {now}, {now}, {rank})",
            now = now_ms(),
            rank = rivulet_common::schema::people::claim_rank(true, now_ms() as u64)
        ))
        .execute()
        .await
        .unwrap();
    insert_events(
        site_id,
        &[("anon-1", "anon-1", "/before"), (user, "anon-1", "/after")],
    )
    .await;

    let p: Value = d
        .api(
            Method::GET,
            &format!("/sites/{site_id}/users/{user}"),
            &token,
        )
        .fetch_json()
        .await;
    assert_eq!(
        p["traits"],
        json!({"plan": "<script>alert(1)</script>", "seats": 5})
    );
    assert_eq!(p["aliases"], json!(["anon-1"]));
    assert_eq!(
        (p["events"].as_u64(), p["events_before_identify"].as_u64()),
        (Some(2), Some(1))
    );
    for path in [
        format!("/sites/{site_id}/users/{user}"),
        format!("/sites/{site_id}/users?user_id={user}"),
    ] {
        let (status, page) = d.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{path}"
        );
        assert!(
            !page.contains("<script>alert"),
            "a trait reached the page unescaped"
        );
        assert!(page.contains("<dd id=\"profile-events\">2</dd>"));
        assert!(page.contains("<dd id=\"profile-anonymous-events\">1</dd>"));
        assert!(page.contains("anon-1") && page.contains("/before") && page.contains("/after"));
    }
    let (status, page) = d.get(&format!("/sites/{site_id}/users")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("id=\"user-search\""));
}

/// The peak resident memory of a process since the last reset (kB), and the reset.
fn peak_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

fn reset_peak_rss(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("clear_refs");
}

#[tokio::test]
async fn the_export_streams_ndjson_and_csv_in_constant_memory() {
    let token = token();
    let admin = start_admin(&token, &[]).await;
    let d = Dash::log_in(&admin.url, &token).await;
    let (site_id, _) = site_with_key().await;
    use reqwest::Method;
    insert_events(
        site_id,
        &[
            ("u1", "", "/a"),
            ("u1", "", "/b,\"quoted\""),
            ("u2", "", "/c"),
        ],
    )
    .await;

    let r = d
        .api(
            Method::GET,
            &format!("/sites/{site_id}/export?format=ndjson"),
            &token,
        )
        .fetch()
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()["content-type"],
        "application/x-ndjson; charset=utf-8"
    );
    assert!(r.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .starts_with("attachment;"));
    let text = r.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert!(lines
        .iter()
        .all(|l| l["site_id"] == site_id && l["event_id"].is_string()));
    assert!(lines.iter().any(|l| l["pathname"] == "/b,\"quoted\""));

    let csv = d
        .api(
            Method::GET,
            &format!("/sites/{site_id}/export?format=csv&user_id=u1"),
            &token,
        )
        .fetch_text()
        .await;
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 3, "the header and u1's two events: {csv}");
    assert!(rows[0].starts_with("event_id,site_id,timestamp,"));
    assert!(csv.contains(",\"/b,\"\"quoted\"\"\","));
    // The page's link, with the session.
    let (status, body) = d
        .get(&format!("/sites/{site_id}/export?format=ndjson&from=1d"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body.lines().count(), 3);
    for bad in ["format=xml", "from=yesterday"] {
        let r = d
            .api(
                Method::GET,
                &format!("/sites/{site_id}/export?{bad}"),
                &token,
            )
            .fetch()
            .await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
        assert!(r.json::<Value>().await.unwrap()["error"].is_string());
    }

    // 60 000 events (about 50 MB of NDJSON) pass through without the dashboard holding
    // them: its peak memory grows by far less than the export's size.
    let (big_site, _) = site_with_key().await;
    let rows: Vec<(String, String)> = (0..60_000)
        .map(|i| {
            (
                format!("visitor-{}", i % 500),
                format!("/page/{i}/{}", "x".repeat(200)),
            )
        })
        .collect();
    for chunk in rows.chunks(20_000) {
        let events: Vec<(&str, &str, &str)> = chunk
            .iter()
            .map(|(u, p)| (u.as_str(), "", p.as_str()))
            .collect();
        insert_events(big_site, &events).await;
    }
    reset_peak_rss(admin.pid());
    let before = peak_rss_kb(admin.pid());
    let mut r = d
        .api(Method::GET, &format!("/sites/{big_site}/export"), &token)
        .fetch()
        .await;
    let (mut bytes, mut lines) = (0usize, 0usize);
    while let Some(chunk) = r.chunk().await.unwrap() {
        bytes += chunk.len();
        lines += chunk.iter().filter(|b| **b == b'\n').count();
    }
    let grew_kb = peak_rss_kb(admin.pid()).saturating_sub(before);
    eprintln!("export of {bytes} bytes: the dashboard's peak memory grew by {grew_kb} kB");
    assert_eq!(lines, 60_000);
    assert!(bytes > 40_000_000, "{bytes} bytes");
    assert!(
        grew_kb < 24 * 1024,
        "the dashboard's peak memory grew by {grew_kb} kB for a {bytes}-byte export"
    );
}

#[tokio::test]
async fn an_enricher_carries_out_the_erasure_and_retention_set_in_the_privacy_tab() {
    // Dropped last, once the enricher has stopped.
    let _turn = ERASURES_RUN.lock().await;
    let token = token();
    let admin = start_admin(&token, &[]).await;
    let d = Dash::log_in(&admin.url, &token).await;
    let (site_id, _) = site_with_key().await;
    use reqwest::Method;
    insert_events(
        site_id,
        &[
            ("gone-user", "", "/x"),
            ("gone-user", "", "/y"),
            ("stays", "", "/z"),
        ],
    )
    .await;
    let three_days_ago = (now_ms() / 1000) as u32 - 3 * 86_400;
    insert_events_at(site_id, three_days_ago, &[("old-visitor", "", "/old")]).await;

    for (path, form) in [
        ("retention", vec![("retention_days", "1")]),
        (
            "erasures",
            vec![("kind", "user_id"), ("subject", "gone-user")],
        ),
    ] {
        let mut form = form;
        form.push(("csrf", &d.csrf));
        let r = d.post(&format!("/sites/{site_id}/{path}"), &form).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{path}");
    }
    let (_, page) = d.get(&format!("/sites/{site_id}/settings/privacy")).await;
    assert!(page.contains("badge pending"));

    // The enricher that holds partition 0 runs erasures (after ERASURE_DELAY_MS) and
    // retention (at once, then every RETENTION_CHECK_SECS).
    let _enricher =
        start_enricher(&[("ERASURE_DELAY_MS", "1000"), ("ERASURE_CHECK_MS", "500")]).await;
    let receipt = Pace::within(Duration::from_secs(120))
        .every(Duration::from_millis(500))
        .poll_until("the erasure was not done", || async {
            let list: Value = d
                .api(Method::GET, &format!("/sites/{site_id}/erasures"), &token)
                .fetch_json()
                .await;
            match list[0]["state"].as_str() {
                Some("done") => Ok(list[0].clone()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    assert_eq!(receipt["rows_removed"], 2);
    Pace::within(Duration::from_secs(60))
        .every(Duration::from_millis(500))
        .poll_until("the retention run did not show", || async {
            let (_, page) = d.get(&format!("/sites/{site_id}/settings/privacy")).await;
            if page.contains("badge done")
                && !page.contains("Last pruned: <span class=\"muted\">never")
            {
                Ok(())
            } else {
                Err("pending, or never pruned")
            }
        })
        .await;
    let export = d
        .api(Method::GET, &format!("/sites/{site_id}/export"), &token)
        .fetch_text()
        .await;
    assert!(!export.contains("gone-user"), "{export}");
    assert!(export.contains("\"stays\""));
}
