//! The public edge under attack (docs/security.md): each test runs one attack of
//! `rivulet_tests::attack` against the real binaries on loopback and asserts the goal.
//! `scripts/attack` runs the same attacks, longer, and records the figures.

use rivulet_tests::attack::*;
use rivulet_tests::*;
use serde_json::json;
use std::time::Duration;
use tokio::sync::Mutex;

/// One attack at a time: each measures memory, time or ClickHouse's query counter, which
/// another running at once would disturb.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// A site, a key, and a valid event of theirs.
async fn normal_event() -> (u32, String, serde_json::Value) {
    let (site, key) = site_with_key().await;
    let body = json!({"api_key": key, "site_id": site, "pathname": "/normal"});
    (site, key, body)
}

#[tokio::test]
async fn a_1_mib_body_of_any_shape_costs_memory_bounded_by_the_limits() {
    let _serial = SERIAL.lock().await;
    let (_, _, normal) = normal_event().await;
    let ingest = start_ingest(&[]).await;
    let f = batch_memory(&ingest, &normal, 4).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    for shape in &f.shapes {
        assert!(
            shape.statuses.keys().all(|s| (400..500).contains(s)),
            "{}: every body is refused as a client error: {:?}",
            shape.shape,
            shape.statuses
        );
    }
    let growth = f.peak_after_mib - f.peak_before_mib;
    assert!(
        growth <= 32.0,
        "four concurrent worst-case bodies raised the peak RSS by {growth:.1} MiB (at most 32)"
    );
    assert!(
        f.normal_slowest_ms < 1000.0,
        "a normal event took {} ms during the attack",
        f.normal_slowest_ms
    );
}

#[tokio::test]
async fn connections_that_stall_never_keep_a_normal_client_out() {
    let _serial = SERIAL.lock().await;
    let (_, _, normal) = normal_event().await;
    let ingest = start_ingest(&[("MAX_CONNECTIONS", "50")]).await;
    let f = pinned_connections(&ingest, &normal, 50, 8).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    assert!(f.normal_requests >= 10, "{f:?}");
    assert_eq!(f.normal_failed, 0, "{f:?}");
    assert!(
        f.normal_slowest_ms < 1000.0,
        "a normal client waited {} ms while 50 connections stalled (its slowest TCP connect: {} ms)",
        f.normal_slowest_ms,
        f.normal_slowest_connect_ms
    );
    ingest.metric("ingest_connections_evicted_total").await;
}

#[tokio::test]
async fn guessing_the_admin_token_is_slowed_per_address_before_comparing() {
    let _serial = SERIAL.lock().await;
    let token =
        uuid::Uuid::new_v4().simple().to_string() + &uuid::Uuid::new_v4().simple().to_string();
    let admin = start_admin(&token, &[]).await;
    let f = login_guessing(&admin, &token, 500).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    // One try counts per second per address (ADMIN_LOGIN_DELAY_MS); tries meanwhile are
    // refused before the token is compared.
    let allowed = 1 + (f.burst_ms / 1000.0).ceil() as usize;
    assert!(
        f.compared <= allowed,
        "{} of 500 parallel guesses were compared",
        f.compared
    );
    assert_eq!(f.compared + f.refused_before_comparing, 500, "{f:?}");
    assert_eq!(f.owner_status, 200, "the owner, elsewhere, gets in: {f:?}");
    assert!(f.owner_ms < 1000.0, "the owner waited {} ms", f.owner_ms);
}

#[tokio::test]
async fn an_admin_token_shorter_than_32_characters_is_refused_at_start() {
    let out = std::process::Command::new(binary("rivulet-admin"))
        .arg("serve")
        .env("ADMIN_TOKEN", "a".repeat(31))
        .env("ADMIN_ADDR", format!("127.0.0.1:{}", free_port()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("at least 32") && err.contains("openssl rand -hex 32"),
        "{err}"
    );
}

#[tokio::test]
async fn unknown_keys_and_sites_cost_a_bounded_number_of_queries() {
    let _serial = SERIAL.lock().await;
    let (site, key, _) = normal_event().await;
    let token =
        uuid::Uuid::new_v4().simple().to_string() + &uuid::Uuid::new_v4().simple().to_string();
    let admin = start_admin(&token, &[]).await;
    // The documented defaults of the rejection limit (the harness turns it off).
    let ingest = start_ingest(&[
        ("AUTH_FAILURE_BURST", "20"),
        ("AUTH_FAILURES_PER_MINUTE", "60"),
    ])
    .await;
    let f = negative_lookups(&ingest, &admin, &token, site, None, 10_000).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    // 20 at once, then one a second; a few more may be in flight when the limit bites.
    let bound = 20.0 + f.seconds + 8.0;
    assert!(
        f.registry_lookups <= bound,
        "{} registry lookups (at most {bound:.0})",
        f.registry_lookups
    );
    assert!(
        (f.clickhouse_queries as f64) <= bound + 8.0,
        "ClickHouse got {} queries during the attack",
        f.clickhouse_queries
    );
    assert!(
        f.statuses.get(&429).copied().unwrap_or(0) >= 9_900,
        "{:?}",
        f.statuses
    );
    assert!(
        f.dashboard_during_ms <= (2.0 * f.dashboard_before_ms).max(f.dashboard_before_ms + 250.0),
        "the dashboard went from {} to {} ms",
        f.dashboard_before_ms,
        f.dashboard_during_ms
    );
    // A valid key with random site ids, to an ingest that has not seen this address: no
    // site is ever looked up, and the address is soon refused.
    drop(ingest);
    // ClickHouse's query counter is the server's: a burst of the enricher's lifecycle
    // runner (the rollup job, once a minute) can land in the attack's quarter second,
    // unseen by the two seconds of background sampling. A query per request shows in
    // every attempt, so the fewer of two attempts, each on a fresh ingest, is checked.
    let mut fewest_queries = u64::MAX;
    for _ in 0..2 {
        let ingest = start_ingest(&[
            ("AUTH_FAILURE_BURST", "20"),
            ("AUTH_FAILURES_PER_MINUTE", "60"),
        ])
        .await;
        let g = negative_lookups(&ingest, &admin, &token, site, Some(&key), 3_000).await;
        eprintln!("{}", serde_json::to_string_pretty(&g).unwrap());
        assert!(
            g.registry_lookups <= 1.0,
            "the key alone is looked up: {g:?}"
        );
        assert!(
            g.statuses.get(&404).copied().unwrap_or(0) > 0,
            "{:?}",
            g.statuses
        );
        assert!(
            g.statuses.get(&429).copied().unwrap_or(0) >= 2_900,
            "{:?}",
            g.statuses
        );
        fewest_queries = fewest_queries.min(g.clickhouse_queries);
        if fewest_queries <= 2 {
            break;
        }
    }
    assert!(
        fewest_queries <= 2,
        "ClickHouse got {fewest_queries} queries in the better of two attempts"
    );
}

#[tokio::test]
async fn hand_written_cache_entries_mint_no_key() {
    let _serial = SERIAL.lock().await;
    let (site, _, _) = normal_event().await;
    let ingest = start_ingest(&[]).await;
    // Ingest reads the MAC secret at start; an accepted event proves it has.
    let (_, key, normal) = normal_event().await;
    let _ = key;
    assert_eq!(
        http()
            .post(format!("{}/api/track", ingest.url))
            .json(&normal)
            .fetch_status()
            .await,
        200
    );
    let f = forged_cache_entries(&ingest, site).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    assert_eq!((f.unsigned_entry_status, f.made_up_mac_status), (401, 401));
    assert!(f.redis_requires_a_password);
}

#[tokio::test]
async fn readiness_and_metrics_are_not_served_on_the_public_port() {
    let ingest = start_ingest(&[]).await;
    let f = internal_endpoints(&ingest).await;
    assert_eq!(
        (
            f.public_metrics_status,
            f.public_readiness_status,
            f.internal_metrics_status
        ),
        (404, 404, 200)
    );
}

#[tokio::test]
async fn a_key_gets_no_double_burst_and_batches_draw_on_an_events_budget() {
    let _serial = SERIAL.lock().await;
    let (site, key, _) = normal_event().await;
    let ingest = start_ingest(&[
        ("RATE_LIMIT_PER_SECOND", "20"),
        ("EVENT_RATE_LIMIT_PER_SECOND", "10000"),
    ])
    .await;
    let f = double_burst(&ingest, &key, site, 20, 10_000).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    let most = bucket_allows(20, Duration::from_secs_f64(f.across_ms / 1000.0));
    assert!(
        f.accepted <= most,
        "{} of 40 accepted across a second's boundary in {} ms (at most {most})",
        f.accepted,
        f.across_ms
    );
    let events_most = (10_000.0 * (1.0 + f.batch_seconds)) as usize + 500;
    assert!(
        f.batch_events_accepted <= events_most,
        "{} events accepted in {:.1} s (at most {events_most})",
        f.batch_events_accepted,
        f.batch_seconds
    );
    assert!(
        f.batch_events_accepted >= 10_000,
        "the budget itself is available: {f:?}"
    );
    // The answer past the events budget says which limit it is.
    let batch = json!({"api_key": key, "site_id": site, "events": vec![json!({}); 500]});
    let url = format!("{}/api/track/batch", ingest.url);
    let mut message = None;
    for _ in 0..40 {
        let r = http().post(&url).json(&batch).fetch().await;
        if r.status() == 429 {
            message = r.json::<serde_json::Value>().await.unwrap()["error"]
                .as_str()
                .map(String::from);
            break;
        }
    }
    assert_eq!(
        message.as_deref(),
        Some("Rate limit exceeded. Maximum 10000 events per second per API key.")
    );
}

#[tokio::test]
async fn properties_nest_at_most_32_deep() {
    let (site, key, _) = normal_event().await;
    let ingest = start_ingest(&[]).await;
    let f = properties_nesting(&ingest, &key, site).await;
    assert_eq!((f.depth_32, f.depth_33, f.depth_1000), (200, 400, 400));
}

// ---------------------------------------------------------------------------------------
// Keyless writes (rivulet_tests::trust): what a request without a key, from any program
// that sends an `Origin` header, may and may not do.

use rivulet_tests::trust::{self, TrustSite, TrustStack};

/// One ingest and enricher on a lane of their own, and a site, for the trust attacks.
async fn trust_fixture() -> &'static (TrustStack, TrustSite) {
    static FX: tokio::sync::OnceCell<(TrustStack, TrustSite)> = tokio::sync::OnceCell::const_new();
    FX.get_or_init(|| async {
        trust::use_attack_database();
        (TrustStack::start().await, TrustSite::new().await)
    })
    .await
}

#[tokio::test]
async fn keyless_identify_never_outranks_a_key_and_erasure_takes_every_claim() {
    let (stack, _) = trust_fixture().await;
    let site = TrustSite::new().await;
    let f = trust::identity_takeover(stack, &site).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    assert_eq!(
        f.keyless_identify_status, 403,
        "identify from the browser is off by default: {f:?}"
    );
    assert!(f.browser_identify_switch, "{f:?}");
    assert_eq!(f.keyless_statuses, [200, 200, 200], "{f:?}");
    assert_eq!(
        (f.email.as_str(), f.role.as_str()),
        ("new@example.com", "member"),
        "{f:?}"
    );
    assert_eq!(f.device_owner, "the user", "{f:?}");
    assert_eq!(f.erasure, "done", "{f:?}");
    assert_eq!(f.pre_login_events_left, 0, "{f:?}");
}

#[tokio::test]
async fn a_profile_holds_at_most_the_capped_traits_and_anonymous_ids() {
    let (stack, _) = trust_fixture().await;
    let site = TrustSite::new().await;
    // 2,200 calls: 1,100 of 150 new traits each, 1,100 of a new anonymous id each.
    let f = trust::profile_flood(&site, &stack.lane, 1_100).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    assert!(f.traits_stored <= 1_000, "{f:?}");
    assert_eq!(f.anonymous_ids_stored, 1_000, "{f:?}");
    assert!(
        f.statuses.get(&400).copied().unwrap_or(0) > 0,
        "past the caps: 400: {f:?}"
    );
    assert!(f.ledger_rows <= 1_001, "{f:?}");
}

#[tokio::test]
async fn the_browser_limit_counts_an_ipv6_64_as_one_client() {
    let _serial = SERIAL.lock().await;
    let (stack, site) = trust_fixture().await;
    let f = trust::ipv6_browser_events(site, &stack.lane, 300).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    let bound = 20.0 + 20.0 * f.seconds + 2.0;
    assert!(
        (f.accepted as f64) <= bound,
        "{} of 300 accepted (at most {bound:.0}): {f:?}",
        f.accepted
    );
}

#[tokio::test]
async fn csv_exports_carry_no_formula_cells() {
    let (stack, _) = trust_fixture().await;
    let site = TrustSite::new().await;
    let f = trust::csv_formulas(stack, &site).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    assert!(f.events >= 2, "{f:?}");
    assert_eq!(f.formula_cells, 0, "{f:?}");
}

#[tokio::test]
async fn a_site_can_turn_its_browser_path_off() {
    let (stack, _) = trust_fixture().await;
    let f = trust::browser_path_off(stack).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    assert!(f.switch, "{f:?}");
    assert_eq!(
        (
            f.event_status,
            f.identify_status,
            f.preflight_status,
            f.keyed_status
        ),
        (403, 403, 403, 200),
        "{f:?}"
    );
}

#[tokio::test]
async fn a_keyless_event_cannot_replace_a_keyed_one() {
    let (stack, site) = trust_fixture().await;
    let f = trust::event_id_collision(stack, site).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    assert_eq!(f.stored_under_keyed_id, "/keyed", "{f:?}");
    assert_eq!(f.keyless_rows, 1, "stored under an id of its own: {f:?}");
}

#[tokio::test]
async fn import_skips_what_the_track_api_refuses() {
    let (stack, site) = trust_fixture().await;
    let f = trust::import_what_track_refuses(site, &stack.lane).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    assert_eq!((f.imported, f.skipped), (1, 8), "{f:?}");
}

#[tokio::test]
async fn preflights_count_toward_the_rejection_limit_and_a_valid_key_still_gets_in() {
    let _serial = SERIAL.lock().await;
    let (stack, site) = trust_fixture().await;
    let f = trust::preflight_probes(site, &stack.lane, 300).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    let answered = 300 - f.statuses.get(&429).copied().unwrap_or(0);
    let bound = 20.0 + f.seconds + 2.0;
    assert!(
        (answered as f64) <= bound,
        "{answered} preflights answered (at most {bound:.0}): {f:?}"
    );
    assert_eq!(f.valid_key_status, 200, "{f:?}");
}

#[tokio::test]
async fn no_public_suffix_or_weak_token_and_the_documents_have_their_headers() {
    let (stack, _) = trust_fixture().await;
    let f = trust::edge_details(stack).await;
    eprintln!("{}", serde_json::to_string_pretty(&f).unwrap());
    assert!(f.domains_accepted.is_empty(), "{f:?}");
    assert!(!f.weak_token_started, "{f:?}");
    assert!(f.openapi_nosniff && f.openapi_cache_control, "{f:?}");
    assert!(f.script_etags_differ, "{f:?}");
}
