//! The trust boundary of keyless writes, as measurements: each function reproduces one
//! way a request without an API key (the browser path, whose only credential is an
//! `Origin` header any program can send) could do more than record a pageview, against
//! the real binaries and the stack, and returns what it saw (docs/security.md, "Keyless
//! requests"). `tests/tests/attack.rs` asserts the goals on them; the `attack` tool
//! (`scripts/attack`) prints them for RELIABILITY.md, also for an older build
//! (`RIVULET_BIN_DIR`, with a database of its own: `RIVULET_ATTACK_DB`).
//!
//! Everything a measurement sets up goes through `rivulet-admin` and the services, never
//! through this build's library, so that an older build is measured with its own code.

use crate::lifecycle::Lane;
use crate::{admin_run, env, http, now_ms, start_ingest, wait_assigned, Pace, Service};
use rivulet_common::ch::{ChConfig, Db};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Runs `rivulet-admin` off the async runtime.
async fn admin(args: Vec<String>, extra: Vec<(String, String)>) -> crate::AdminRun {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let extra: Vec<(&str, &str)> = extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        admin_run(&args, &extra)
    })
    .await
    .expect("rivulet-admin ran")
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// ClickHouse as the stack's environment names it, without running this build's
/// migrations (an older build is measured on its own schema).
pub async fn plain_db() -> Db {
    crate::load_stack_env();
    ChConfig::from_env()
        .expect("the stack's ClickHouse settings")
        .connect()
        .await
        .expect("ClickHouse answers")
}

async fn count(db: &Db, sql: &str) -> u64 {
    db.client.query(sql).fetch_one::<u64>().await.unwrap_or(0)
}

fn tag() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..10].to_string()
}

/// A site of its own (through `rivulet-admin`, as an operator makes one) and its key.
pub struct TrustSite {
    pub site: u32,
    pub key: String,
    pub origin: String,
}

impl TrustSite {
    pub async fn new() -> TrustSite {
        let domain = format!("trust-{}.example.com", tag());
        let created = admin(strings(&["sites", "create", "--domain", &domain]), vec![]).await;
        let site = created.json()["site_id"].as_u64().expect("a site id") as u32;
        let key = admin(
            strings(&["keys", "create", "--site", &site.to_string()]),
            vec![],
        )
        .await;
        TrustSite {
            site,
            key: key.json()["api_key"].as_str().expect("a key").to_string(),
            origin: format!("https://{domain}"),
        }
    }

    /// Waits until `ingest` has heard of the site (its directory rereads when admin
    /// announces a change): a preflight from its origin is answered 204 (writes nothing).
    pub async fn known_to(&self, ingest: &Service) {
        let url = format!("{}/api/track", ingest.url);
        let _ = Pace::within(Duration::from_secs(15))
            .every(Duration::from_millis(100))
            .poll(|| {
                let url = url.clone();
                async move {
                    let status = http()
                        .request(reqwest::Method::OPTIONS, url)
                        .header("origin", &self.origin)
                        .header("access-control-request-method", "POST")
                        .send()
                        .await
                        .map(|r| r.status().as_u16())
                        .unwrap_or(0);
                    if status == 204 {
                        Ok(())
                    } else {
                        Err(status)
                    }
                }
            })
            .await;
    }

    /// `rivulet-admin sites update N --FLAG VALUE`: whether the build has the setting.
    pub async fn set(&self, flag: &str, value: &str) -> bool {
        let run = admin(
            strings(&["sites", "update", &self.site.to_string(), flag, value]),
            vec![],
        )
        .await;
        run.status.success()
    }
}

/// An ingest and an enricher on a lane of their own (their own topics and group), the
/// enricher's lifecycle runner paced for a test.
pub struct TrustStack {
    pub lane: Lane,
    pub ingest: Service,
    pub enricher: Service,
}

impl TrustStack {
    pub async fn start() -> TrustStack {
        let lane = Lane::new("trust").await;
        let ingest = lane.start_ingest().await;
        let enricher = lane.start_enricher(&format!("trust-{}", tag()), &[]).await;
        wait_assigned(&enricher).await;
        TrustStack {
            lane,
            ingest,
            enricher,
        }
    }

    pub async fn stop(self) {
        drop(self.ingest);
        drop(self.enricher);
        self.lane.delete().await;
    }
}

/// POSTs `body` to `path`: with the site's key in the body, or, with `origin`, keyless
/// from that origin. Status and body.
pub async fn post(
    ingest: &Service,
    path: &str,
    body: &Value,
    origin: Option<&str>,
) -> (u16, Value) {
    let mut req = http()
        .post(format!("{}{path}", ingest.url))
        .header("content-type", "text/plain")
        .body(body.to_string());
    if let Some(origin) = origin {
        req = req.header("origin", origin);
    }
    match req.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.json().await.unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

fn keyed(site: &TrustSite, mut body: Value) -> Value {
    body["api_key"] = json!(site.key);
    body["site_id"] = json!(site.site);
    body
}

fn keyless(site: &TrustSite, mut body: Value) -> Value {
    body["site_id"] = json!(site.site);
    body
}

/// Waits until the site has `n` events under `FINAL` (at most 60 s); how many it has.
async fn events_stored(db: &Db, site: u32, n: u64) -> u64 {
    let sql = format!("SELECT count() FROM events FINAL WHERE site_id = {site}");
    let db = db.clone();
    Pace::within(Duration::from_secs(60))
        .every(Duration::from_millis(200))
        .poll(|| {
            let (db, sql) = (db.clone(), sql.clone());
            async move {
                let have = count(&db, &sql).await;
                if have >= n {
                    Ok(have)
                } else {
                    Err(have)
                }
            }
        })
        .await
        .unwrap_or_else(|have| have)
}

/// `users show` of a user, or `Null`.
async fn user(site: u32, user_id: &str) -> Value {
    let run = admin(
        strings(&[
            "users",
            "show",
            "--site",
            &site.to_string(),
            "--user-id",
            user_id,
        ]),
        vec![],
    )
    .await;
    if run.status.success() {
        serde_json::from_str(&run.stdout).unwrap_or(Value::Null)
    } else {
        Value::Null
    }
}

/// Waits until `users show` of `user_id` satisfies `ok` (at most 60 s); the last one.
async fn user_when(site: u32, user_id: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let p = user(site, user_id).await;
        if ok(&p) || started.elapsed() > Duration::from_secs(60) {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[derive(Debug, Serialize)]
pub struct TakeoverFigures {
    /// A keyless identify for a site that never turned identify from the browser on.
    pub keyless_identify_status: u16,
    /// Whether the build has the switch (`sites update --browser-identify on`).
    pub browser_identify_switch: bool,
    /// The keyless calls' statuses once the site takes them (where it can).
    pub keyless_statuses: Vec<u16>,
    /// `email` and `role` as `users show` gives them after the attack and the server's
    /// later update of `email`.
    pub email: String,
    pub role: String,
    /// Who owns the user's device (their anonymous id) after a keyless claim dated six
    /// days back.
    pub device_owner: String,
    /// `erase --user-id USER --wait`'s final state.
    pub erasure: String,
    /// The user's own events sent under their device id before login, left in
    /// `events FINAL` after the erasure said `done`.
    pub pre_login_events_left: u64,
}

/// Finding 1: a keyless identify rewrites a user's traits (dated 9 minutes ahead), a
/// keyless claim of the user's device (dated 6 days back) takes it, and the user's
/// erasure says `done` with their pre-login event still stored.
pub async fn identity_takeover(stack: &TrustStack, site: &TrustSite) -> TakeoverFigures {
    let db = plain_db().await;
    let t = tag();
    let (person, device) = (format!("user-{t}"), format!("device-{t}"));
    let (attacker, attacker_device) = (format!("attacker-{t}"), format!("attacker-device-{t}"));
    let now = now_ms();
    let ingest = &stack.ingest;
    site.known_to(ingest).await;
    // The user, before login: an event under their device id; then the server's identify.
    let pre_login = keyed(
        site,
        json!({"anonymous_id": device, "pathname": "/pre-login", "timestamp": now - 60_000}),
    );
    assert_eq!(post(ingest, "/api/track", &pre_login, None).await.0, 200);
    let server = keyed(
        site,
        json!({"user_id": person, "anonymous_id": device, "timestamp": now,
               "traits": {"email": "person@example.com", "role": "member"}}),
    );
    assert_eq!(post(ingest, "/api/identify", &server, None).await.0, 200);
    let origin = Some(site.origin.as_str());
    let forged_traits = keyless(
        site,
        json!({"user_id": person, "timestamp": now + 540_000,
               "traits": {"email": "attacker@example.com", "role": "admin"}}),
    );
    let keyless_identify_status = post(ingest, "/api/identify", &forged_traits, origin)
        .await
        .0;
    let browser_identify_switch = site.set("--browser-identify", "on").await;
    // The ingest hears of the change within a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let six_days_back = now - 6 * 86_400_000;
    let calls = [
        forged_traits,
        // The user's device claimed by someone else, first by its own clock.
        keyless(
            site,
            json!({"user_id": attacker, "anonymous_id": device, "timestamp": six_days_back}),
        ),
        // The attacker's own device claimed for the user.
        keyless(
            site,
            json!({"user_id": person, "anonymous_id": attacker_device, "timestamp": six_days_back}),
        ),
    ];
    let mut keyless_statuses = Vec::new();
    for call in &calls {
        keyless_statuses.push(post(ingest, "/api/identify", call, origin).await.0);
    }
    let attacker_event = keyless(
        site,
        json!({"anonymous_id": attacker_device, "pathname": "/attacker"}),
    );
    post(ingest, "/api/track", &attacker_event, origin).await;
    // The server updates the email later (by the server's clock).
    let update = keyed(
        site,
        json!({"user_id": person, "timestamp": now + 60_000, "traits": {"email": "new@example.com"}}),
    );
    assert_eq!(post(ingest, "/api/identify", &update, None).await.0, 200);
    let marker = keyed(site, json!({"user_id": person, "traits": {"marker": 1}}));
    assert_eq!(post(ingest, "/api/identify", &marker, None).await.0, 200);
    let p = user_when(site.site, &person, |p| p["traits"]["marker"] == 1).await;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let a = user(site.site, &attacker).await;
    let owns = |p: &Value| {
        p["aliases"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == &json!(device)))
    };
    let device_owner = if owns(&p) {
        "the user".to_string()
    } else if owns(&a) {
        "the attacker".to_string()
    } else {
        "no one".to_string()
    };
    events_stored(&db, site.site, 1).await;
    let erased = admin(
        strings(&[
            "erase",
            "--site",
            &site.site.to_string(),
            "--user-id",
            &person,
            "--wait",
            "--timeout",
            "120",
        ]),
        vec![],
    )
    .await;
    let erasure = serde_json::from_str::<Value>(&erased.stdout)
        .map(|r| text(&r["state"]))
        .unwrap_or_else(|_| format!("failed: {}", erased.stderr.trim()));
    let pre_login_events_left = count(
        &db,
        &format!(
            "SELECT count() FROM events FINAL WHERE site_id = {} AND anonymous_id = '{device}'",
            site.site
        ),
    )
    .await;
    TakeoverFigures {
        keyless_identify_status,
        browser_identify_switch,
        keyless_statuses,
        email: text(&p["traits"]["email"]),
        role: text(&p["traits"]["role"]),
        device_owner,
        erasure,
        pre_login_events_left,
    }
}

#[derive(Debug, Serialize)]
pub struct FloodFigures {
    pub calls: usize,
    pub statuses: BTreeMap<u16, usize>,
    pub seconds: f64,
    /// Distinct trait names and anonymous ids the user has in ClickHouse.
    pub traits_stored: u64,
    pub anonymous_ids_stored: u64,
    /// Bytes of `users show` for the user (what the People page shows).
    pub profile_bytes: usize,
    /// Ledger rows the user's erasure wrote.
    pub ledger_rows: u64,
}

/// Finding 2: identify calls (keyless, the site having turned identify from the browser
/// on where it can, no per-address limit) that each add 150 new traits, then as many
/// that each add an anonymous id, all to one user.
pub async fn profile_flood(site: &TrustSite, lane: &Lane, calls: usize) -> FloodFigures {
    let db = plain_db().await;
    site.set("--browser-identify", "on").await;
    let mut env = lane.topics();
    env.push(("BROWSER_RATE_LIMIT_PER_SECOND".into(), "0".into()));
    env.push(("BROWSER_EVENT_RATE_LIMIT_PER_SECOND".into(), "0".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let ingest = start_ingest(&env).await;
    site.known_to(&ingest).await;
    let person = format!("flooded-{}", tag());
    let origin = Some(site.origin.as_str());
    let started = Instant::now();
    let mut statuses = BTreeMap::new();
    let mut sent = 0;
    for round in 0..calls {
        let traits: serde_json::Map<String, Value> = (0..150)
            .map(|i| (format!("t{round}x{i}"), json!(1)))
            .collect();
        let body = keyless(site, json!({"user_id": person, "traits": traits}));
        *statuses
            .entry(post(&ingest, "/api/identify", &body, origin).await.0)
            .or_insert(0) += 1;
        let body = keyless(
            site,
            json!({"user_id": person, "anonymous_id": format!("a{round}")}),
        );
        *statuses
            .entry(post(&ingest, "/api/identify", &body, origin).await.0)
            .or_insert(0) += 1;
        sent += 2;
    }
    let seconds = started.elapsed().as_secs_f64();
    let marker = keyed(
        site,
        json!({"user_id": person, "traits": {"flood_marker": 1}}),
    );
    let marked = post(&ingest, "/api/identify", &marker, None).await.0 == 200;
    let traits_table = if count(&db, "SELECT count() FROM system.tables WHERE database = currentDatabase() AND name = 'person_trait_values'").await > 0 {
        "person_trait_values"
    } else {
        "person_traits"
    };
    let claims_table = if traits_table == "person_trait_values" {
        "person_claims"
    } else {
        "person_aliases"
    };
    let marker_sql = format!(
        "SELECT count() FROM {traits_table} WHERE site_id = {} AND user_id = '{person}' AND name = 'flood_marker'",
        site.site
    );
    if marked {
        let db = db.clone();
        let _ = Pace::within(Duration::from_secs(60))
            .every(Duration::from_millis(300))
            .poll(|| {
                let (db, sql) = (db.clone(), marker_sql.clone());
                async move {
                    if count(&db, &sql).await > 0 {
                        Ok(())
                    } else {
                        Err(())
                    }
                }
            })
            .await;
    }
    let traits_stored = count(
        &db,
        &format!("SELECT uniqExact(name) FROM {traits_table} WHERE site_id = {} AND user_id = '{person}' AND name != 'flood_marker'", site.site),
    )
    .await;
    let anonymous_ids_stored = count(
        &db,
        &format!("SELECT uniqExact(anonymous_id) FROM {claims_table} WHERE site_id = {} AND user_id = '{person}'", site.site),
    )
    .await;
    let profile_bytes = admin(
        strings(&[
            "users",
            "show",
            "--site",
            &site.site.to_string(),
            "--user-id",
            &person,
        ]),
        vec![],
    )
    .await
    .stdout
    .len();
    let erased = admin(
        strings(&[
            "erase",
            "--site",
            &site.site.to_string(),
            "--user-id",
            &person,
        ]),
        vec![],
    )
    .await;
    let request = serde_json::from_str::<Value>(&erased.stdout).unwrap_or(Value::Null);
    let ledger_rows = count(
        &db,
        &format!(
            "SELECT count() FROM erasure_ledger WHERE request_id = '{}'",
            request["request_id"].as_str().unwrap_or_default()
        ),
    )
    .await;
    FloodFigures {
        calls: sent,
        statuses,
        seconds: (seconds * 100.0).round() / 100.0,
        traits_stored,
        anonymous_ids_stored,
        profile_bytes,
        ledger_rows,
    }
}

#[derive(Debug, Serialize)]
pub struct Ipv6Figures {
    pub addresses: usize,
    pub accepted: usize,
    pub seconds: f64,
    /// The browser limit per client (`BROWSER_RATE_LIMIT_PER_SECOND`).
    pub limit_per_second: u32,
}

/// Finding 3: behind a trusted proxy, browser events from `n` addresses of one IPv6 /64.
pub async fn ipv6_browser_events(site: &TrustSite, lane: &Lane, n: usize) -> Ipv6Figures {
    let mut env = lane.topics();
    env.push(("TRUSTED_PROXIES".into(), "127.0.0.1".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let ingest = start_ingest(&env).await;
    site.known_to(&ingest).await;
    let client = http();
    let started = Instant::now();
    let mut accepted = 0;
    for i in 0..n {
        let body = keyless(site, json!({"pathname": "/v6"}));
        let status = client
            .post(format!("{}/api/track", ingest.url))
            .header("content-type", "text/plain")
            .header("origin", &site.origin)
            .header("x-forwarded-for", format!("2001:db8:ab:cd::{:x}", i + 1))
            .body(body.to_string())
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        accepted += usize::from(status == 200);
    }
    Ipv6Figures {
        addresses: n,
        accepted,
        seconds: (started.elapsed().as_secs_f64() * 100.0).round() / 100.0,
        limit_per_second: 20,
    }
}

/// The characters a spreadsheet reads as the start of a formula.
const FORMULA_STARTS: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// The cells of a CSV text (RFC 4180 quoting), row by row.
pub fn csv_cells(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let (mut row, mut cell) = (Vec::new(), String::new());
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cell.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => cell.push(c),
            (false, '"') if cell.is_empty() => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut cell)),
            (false, '\n') => {
                row.push(std::mem::take(&mut cell));
                rows.push(std::mem::take(&mut row));
            }
            (false, '\r') if chars.peek() == Some(&'\n') => {}
            (false, c) => cell.push(c),
        }
    }
    if !cell.is_empty() || !row.is_empty() {
        row.push(cell);
        rows.push(row);
    }
    rows
}

/// Whether a CSV cell would be read as a formula: it starts with a formula character and
/// is not a number.
pub fn is_formula_cell(cell: &str) -> bool {
    cell.starts_with(FORMULA_STARTS) && cell.parse::<f64>().is_err()
}

#[derive(Debug, Serialize)]
pub struct CsvFigures {
    pub events: usize,
    pub formula_cells: usize,
    /// The columns with a formula cell.
    pub columns: Vec<String>,
}

/// Finding 4: keyless events whose fields start with formula characters, then the
/// site's CSV export (`rivulet-admin export --format csv`).
pub async fn csv_formulas(stack: &TrustStack, site: &TrustSite) -> CsvFigures {
    let db = plain_db().await;
    site.known_to(&stack.ingest).await;
    let origin = Some(site.origin.as_str());
    let before = count(
        &db,
        &format!(
            "SELECT count() FROM events FINAL WHERE site_id = {}",
            site.site
        ),
    )
    .await;
    let payloads = [
        json!({"pathname": "/=cmd|' /C calc'!A0", "page_title": "=HYPERLINK(\"http://evil.example\",\"x\")",
               "querystring": "-2+3+cmd", "anonymous_id": "@SUM(1+1)", "tag": "+1+1", "language": "=1"}),
        json!({"type": "custom_event", "event_name": "=2*3", "properties": "{\"k\":\"v\"}",
               "app_version": "-1+1", "device_model": "@A1", "pathname": "\t=cmd", "page_title": "\r=cmd"}),
    ];
    for p in &payloads {
        let (status, body) = post(
            &stack.ingest,
            "/api/track",
            &keyless(site, p.clone()),
            origin,
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    events_stored(&db, site.site, before + payloads.len() as u64).await;
    let run = admin(
        strings(&[
            "export",
            "--site",
            &site.site.to_string(),
            "--format",
            "csv",
        ]),
        vec![],
    )
    .await;
    let rows = csv_cells(&run.stdout);
    let header = rows.first().cloned().unwrap_or_default();
    let mut columns = std::collections::BTreeSet::new();
    let mut formula_cells = 0;
    for row in rows.iter().skip(1) {
        for (i, cell) in row.iter().enumerate() {
            if is_formula_cell(cell) {
                formula_cells += 1;
                columns.insert(header.get(i).cloned().unwrap_or_default());
            }
        }
    }
    CsvFigures {
        events: rows.len().saturating_sub(1),
        formula_cells,
        columns: columns.into_iter().collect(),
    }
}

#[derive(Debug, Serialize)]
pub struct BrowserPathFigures {
    /// Whether the build has the switch (`sites update --browser-path off`).
    pub switch: bool,
    /// A keyless event, a keyless identify, and a preflight, after it was turned off.
    pub event_status: u16,
    pub identify_status: u16,
    pub preflight_status: u16,
    /// A keyed event for the same site.
    pub keyed_status: u16,
}

/// Finding 5: a site used only with server-side keys turns its browser path off.
pub async fn browser_path_off(stack: &TrustStack) -> BrowserPathFigures {
    let site = TrustSite::new().await;
    site.known_to(&stack.ingest).await;
    let switch = site.set("--browser-path", "off").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let origin = Some(site.origin.as_str());
    let ingest = &stack.ingest;
    let event_status = post(
        ingest,
        "/api/track",
        &keyless(&site, json!({"pathname": "/x"})),
        origin,
    )
    .await
    .0;
    let identify_status = post(
        ingest,
        "/api/identify",
        &keyless(&site, json!({"user_id": "u"})),
        origin,
    )
    .await
    .0;
    let preflight_status = http()
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/api/track", ingest.url),
        )
        .header("origin", &site.origin)
        .header("access-control-request-method", "POST")
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0);
    let keyed_status = post(
        ingest,
        "/api/track",
        &keyed(&site, json!({"pathname": "/k"})),
        None,
    )
    .await
    .0;
    BrowserPathFigures {
        switch,
        event_status,
        identify_status,
        preflight_status,
        keyed_status,
    }
}

#[derive(Debug, Serialize)]
pub struct CollisionFigures {
    /// The pathname `events FINAL` shows under the keyed event's id.
    pub stored_under_keyed_id: String,
    /// Rows the keyless event is stored as (under any id).
    pub keyless_rows: u64,
}

/// Finding 6: a keyless event sent with a keyed event's `event_id`.
pub async fn event_id_collision(stack: &TrustStack, site: &TrustSite) -> CollisionFigures {
    let db = plain_db().await;
    site.known_to(&stack.ingest).await;
    let id = uuid::Uuid::now_v7().to_string();
    let ts = now_ms() - 5_000;
    let k = keyed(
        site,
        json!({"event_id": id, "pathname": "/keyed", "timestamp": ts}),
    );
    assert_eq!(post(&stack.ingest, "/api/track", &k, None).await.0, 200);
    let b = keyless(
        site,
        json!({"event_id": id, "pathname": "/keyless", "timestamp": ts}),
    );
    let (status, body) = post(&stack.ingest, "/api/track", &b, Some(&site.origin)).await;
    assert_eq!(status, 200, "{body}");
    let keyless_sql = format!(
        "SELECT count() FROM events FINAL WHERE site_id = {} AND pathname = '/keyless'",
        site.site
    );
    let db2 = db.clone();
    let _ = Pace::within(Duration::from_secs(30))
        .every(Duration::from_millis(200))
        .poll(|| {
            let (db, keyless_sql, id) = (db2.clone(), keyless_sql.clone(), id.clone());
            let site = site.site;
            async move {
                let both = count(&db, &format!("SELECT count() FROM events WHERE site_id = {site} AND (event_id = toUUID('{id}') OR pathname = '/keyless')")).await;
                if both >= 2 || count(&db, &keyless_sql).await > 0 && both >= 1 { Ok(()) } else { Err(()) }
            }
        })
        .await;
    let stored: String = db
        .client
        .query(&format!(
            "SELECT pathname FROM events FINAL WHERE site_id = {} AND event_id = toUUID('{id}')",
            site.site
        ))
        .fetch_one()
        .await
        .unwrap_or_default();
    CollisionFigures {
        stored_under_keyed_id: stored,
        keyless_rows: count(&db, &keyless_sql).await,
    }
}

#[derive(Debug, Serialize)]
pub struct ImportFigures {
    pub records: usize,
    pub imported: u64,
    pub skipped: u64,
    /// The summary's first and last event times.
    pub from: Value,
    pub to: Value,
}

/// Finding 7: `rivulet-admin import --format rivulet` of records the track API refuses,
/// and one it takes.
pub async fn import_what_track_refuses(site: &TrustSite, lane: &Lane) -> ImportFigures {
    let topic = format!("{}.import", lane.topic);
    crate::ensure_topic(&topic, 1).await;
    let deep = format!("{}1{}", "{\"a\":".repeat(1000), "}".repeat(1000));
    let base = |i: u32| {
        json!({"event_id": uuid::Uuid::new_v4().to_string(), "site_id": site.site, "timestamp": "2025-06-01T10:00:00Z",
               "type": "pageview", "pathname": format!("/import/{i}")})
    };
    let mut bad = Vec::new();
    let mut nested = base(1);
    nested["properties"] = json!(deep);
    bad.push(nested);
    let mut long = base(2);
    long["city"] = json!("x".repeat(100_000));
    bad.push(long);
    let mut toaster = base(3);
    toaster["device_type"] = json!("Toaster");
    bad.push(toaster);
    let mut script = base(4);
    script["country"] = json!("<script>");
    bad.push(script);
    for (i, when) in [
        "9999-01-01T00:00:00Z",
        "2106-03-01T00:00:00Z",
        "1969-12-31T00:00:00Z",
        "0000-01-01T00:00:00Z",
    ]
    .iter()
    .enumerate()
    {
        let mut t = base(5 + i as u32);
        t["timestamp"] = json!(when);
        bad.push(t);
    }
    let mut lines: Vec<String> = bad.iter().map(Value::to_string).collect();
    lines.push(base(100).to_string());
    let dir = crate::data::TempDir::new("trust-import");
    let file = dir.path("records.ndjson");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let run = admin(
        strings(&[
            "import",
            "--site",
            &site.site.to_string(),
            "--format",
            "rivulet",
            file.to_str().unwrap(),
        ]),
        vec![("KAFKA_TOPIC_IMPORT".into(), topic.clone())],
    )
    .await;
    crate::delete_topic(&topic).await;
    let summary: Value = serde_json::from_str(&run.stdout).unwrap_or(Value::Null);
    ImportFigures {
        records: lines.len(),
        imported: summary["imported"].as_u64().unwrap_or(0),
        // A count, or counts by reason.
        skipped: match &summary["skipped"] {
            Value::Object(by_reason) => by_reason.values().filter_map(Value::as_u64).sum(),
            other => other.as_u64().unwrap_or(0),
        },
        from: summary["from"].clone(),
        to: summary["to"].clone(),
    }
}

#[derive(Debug, Serialize)]
pub struct ProbeFigures {
    pub preflights: usize,
    pub statuses: BTreeMap<u16, usize>,
    pub seconds: f64,
    /// After bad keys from the same address: a request with a valid key.
    pub valid_key_status: u16,
}

/// Findings 8 and 9: `n` CORS preflights of different origins from one address, with the
/// rejection limit at its defaults; then, from that address past its limit, a request
/// with a valid key (as behind a shared address).
pub async fn preflight_probes(site: &TrustSite, lane: &Lane, n: usize) -> ProbeFigures {
    let mut env = lane.topics();
    env.push(("AUTH_FAILURE_BURST".into(), "20".into()));
    env.push(("AUTH_FAILURES_PER_MINUTE".into(), "60".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let ingest = start_ingest(&env).await;
    // The key has been used: it is held as good, as on a busy ingest.
    let good = keyed(site, json!({"pathname": "/before"}));
    assert_eq!(post(&ingest, "/api/track", &good, None).await.0, 200);
    let client = http();
    let started = Instant::now();
    let mut statuses = BTreeMap::new();
    for i in 0..n {
        let status = client
            .request(
                reqwest::Method::OPTIONS,
                format!("{}/api/track", ingest.url),
            )
            .header("origin", format!("https://probe-{i}.example"))
            .header("access-control-request-method", "POST")
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        *statuses.entry(status).or_insert(0) += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    // Another client at the same address sends bad keys past the limit.
    for _ in 0..30 {
        let bad = json!({"api_key": crate::attack::random_key(), "site_id": site.site, "pathname": "/bad"});
        post(&ingest, "/api/track", &bad, None).await;
    }
    let valid_key_status = post(
        &ingest,
        "/api/track",
        &keyed(site, json!({"pathname": "/nat"})),
        None,
    )
    .await
    .0;
    ProbeFigures {
        preflights: n,
        statuses,
        seconds: (seconds * 100.0).round() / 100.0,
        valid_key_status,
    }
}

#[derive(Debug, Serialize)]
pub struct EdgeFigures {
    /// Of `com`, `localhost` and `127.0.0.1`, those `sites create --domain` took.
    pub domains_accepted: Vec<String>,
    /// Whether `rivulet-admin serve` started with an admin token of 32 × `a`.
    pub weak_token_started: bool,
    /// `X-Content-Type-Options` and `Cache-Control` of `GET /api/openapi.json`.
    pub openapi_nosniff: bool,
    pub openapi_cache_control: bool,
    /// Whether `script.js` sends different ETags for its gzip and plain bodies.
    pub script_etags_differ: bool,
}

/// Finding 10: what a site may be registered under, the admin token's quality, and the
/// headers of the OpenAPI document and the script.
pub async fn edge_details(stack: &TrustStack) -> EdgeFigures {
    let mut domains_accepted = Vec::new();
    for domain in ["com", "localhost", "127.0.0.1"] {
        if admin(strings(&["sites", "create", "--domain", domain]), vec![])
            .await
            .status
            .success()
        {
            domains_accepted.push(domain.to_string());
        }
    }
    let port = crate::free_port().to_string();
    let weak = tokio::task::spawn_blocking(move || {
        let mut child = crate::admin_command(&["serve"], &[])
            .env("ADMIN_TOKEN", "a".repeat(32))
            .env("ADMIN_ADDR", format!("127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("rivulet-admin serve");
        std::thread::sleep(Duration::from_secs(2));
        let running = child.try_wait().ok().flatten().is_none();
        let _ = child.kill();
        let _ = child.wait();
        running
    })
    .await
    .unwrap();
    let openapi = http()
        .get(format!("{}/api/openapi.json", stack.ingest.url))
        .send()
        .await
        .expect("openapi.json");
    let h = openapi.headers();
    let openapi_nosniff = h
        .get("x-content-type-options")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"nosniff"));
    let openapi_cache_control = h.contains_key("cache-control");
    let etag = |gzip: bool| {
        let url = format!("{}/api/script.js", stack.ingest.url);
        async move {
            // A client of its own: reqwest's gzip feature would otherwise ask for gzip.
            let client = reqwest::Client::builder().no_gzip().build().unwrap();
            let mut req = client.get(url);
            if gzip {
                req = req.header("accept-encoding", "gzip");
            }
            req.send()
                .await
                .ok()
                .and_then(|r| {
                    r.headers()
                        .get("etag")
                        .map(|v| v.to_str().unwrap_or("").to_string())
                })
                .unwrap_or_default()
        }
    };
    let (gz, plain) = (etag(true).await, etag(false).await);
    EdgeFigures {
        domains_accepted,
        weak_token_started: weak,
        openapi_nosniff,
        openapi_cache_control,
        script_etags_differ: !gz.is_empty() && gz != plain,
    }
}

/// Switches this process to the database `RIVULET_ATTACK_DB` names, when it names one,
/// and brings its schema up to date with the build under test's `rivulet-admin migrate`:
/// an older build is measured on a database of its own.
pub fn use_attack_database() {
    crate::load_stack_env();
    if let Some(db) = std::env::var("RIVULET_ATTACK_DB")
        .ok()
        .filter(|d| !d.is_empty())
    {
        std::env::set_var("CLICKHOUSE_DB", db);
    }
    let run = admin_run(&["migrate"], &[]);
    assert!(run.status.success(), "migrate: {}", run.stderr);
    let _ = env("CLICKHOUSE_DB");
}
