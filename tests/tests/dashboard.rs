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
