//! `attack`: runs every attack of `rivulet_tests::attack` against the real binaries on
//! the local stack and prints the figures as JSON (`scripts/attack` writes them to
//! results/ for RELIABILITY.md).
//!
//!     attack SECONDS
//!     attack keyless
//!
//! `keyless` runs the attacks on the trust boundary of keyless writes instead
//! (`rivulet_tests::trust`), on the database `RIVULET_ATTACK_DB` when set (an older
//! build, on a schema of its own).
//!
//! SECONDS: how long the connection attack lasts. The binaries are those of this build,
//! or of `RIVULET_BIN_DIR`; set `RIVULET_LEGACY_OPS=1` for builds from before ingest
//! served readiness on an internal address (to measure what an attack did to them).

use rivulet_tests::attack::*;
use rivulet_tests::*;
use serde_json::json;

#[tokio::main]
async fn main() {
    let args = tool_args("attack SECONDS | attack keyless", 1..=1);
    if args[1] == "keyless" {
        return keyless().await;
    }
    let seconds: u64 = args[1].parse().expect("SECONDS is a number");
    let (site, key) = site_with_key().await;
    let normal = json!({"api_key": key, "site_id": site, "pathname": "/normal"});
    let mut figures = serde_json::Map::new();

    let ingest = start_ingest(&[]).await;
    eprintln!("attack: 1 MiB bodies");
    figures.insert(
        "memory".into(),
        json!(batch_memory(&ingest, &normal, 4).await),
    );
    eprintln!("attack: properties nesting");
    figures.insert(
        "nesting".into(),
        json!(properties_nesting(&ingest, &key, site).await),
    );
    eprintln!("attack: internal endpoints");
    figures.insert("internal".into(), json!(internal_endpoints(&ingest).await));
    eprintln!("attack: forged cache entries");
    figures.insert(
        "forged_cache".into(),
        json!(forged_cache_entries(&ingest, site).await),
    );
    drop(ingest);

    let ingest = start_ingest(&[("MAX_CONNECTIONS", "50")]).await;
    eprintln!("attack: stalled connections for {seconds} s");
    figures.insert(
        "connections".into(),
        json!(pinned_connections(&ingest, &normal, 50, seconds).await),
    );
    drop(ingest);

    // A random token: `rivulet-admin serve` refuses one with too little variety.
    let token =
        uuid::Uuid::new_v4().simple().to_string() + &uuid::Uuid::new_v4().simple().to_string();
    let admin = start_admin(&token, &[]).await;
    eprintln!("attack: guessing the admin token");
    figures.insert(
        "login".into(),
        json!(login_guessing(&admin, &token, 500).await),
    );
    // A dashboard that has not seen this address guess (it would make it wait).
    drop(admin);
    let admin = start_admin(&token, &[]).await;

    let limits = [
        ("AUTH_FAILURE_BURST", "20"),
        ("AUTH_FAILURES_PER_MINUTE", "60"),
    ];
    let ingest = start_ingest(&limits).await;
    eprintln!("attack: 10,000 unknown keys and sites");
    figures.insert(
        "unknown_keys".into(),
        json!(negative_lookups(&ingest, &admin, &token, site, None, 10_000).await),
    );
    drop(ingest);
    let ingest = start_ingest(&limits).await;
    eprintln!("attack: a valid key with 3,000 random sites");
    figures.insert(
        "unknown_sites".into(),
        json!(negative_lookups(&ingest, &admin, &token, site, Some(&key), 3_000).await),
    );
    drop(ingest);

    let ingest = start_ingest(&[
        ("RATE_LIMIT_PER_SECOND", "20"),
        ("EVENT_RATE_LIMIT_PER_SECOND", "10000"),
    ])
    .await;
    eprintln!("attack: bursts across a second's boundary, and batches");
    figures.insert(
        "bursts".into(),
        json!(double_burst(&ingest, &key, site, 20, 10_000).await),
    );
    println!("{}", serde_json::to_string_pretty(&figures).unwrap());
}

/// The attacks on keyless writes, in the order of RELIABILITY.md's table.
async fn keyless() {
    use rivulet_tests::trust::{self, TrustSite, TrustStack};
    trust::use_attack_database();
    let stack = TrustStack::start().await;
    let site = TrustSite::new().await;
    let mut figures = serde_json::Map::new();
    eprintln!("attack: keyless identify against a keyed one, then erasure");
    let fresh = TrustSite::new().await;
    figures.insert(
        "takeover".into(),
        json!(trust::identity_takeover(&stack, &fresh).await),
    );
    eprintln!("attack: a profile flooded with traits and anonymous ids");
    let fresh = TrustSite::new().await;
    figures.insert(
        "flood".into(),
        json!(trust::profile_flood(&fresh, &stack.lane, 1_200).await),
    );
    eprintln!("attack: 500 addresses of one IPv6 /64");
    figures.insert(
        "ipv6".into(),
        json!(trust::ipv6_browser_events(&site, &stack.lane, 500).await),
    );
    eprintln!("attack: formula cells in a CSV export");
    let fresh = TrustSite::new().await;
    figures.insert(
        "csv".into(),
        json!(trust::csv_formulas(&stack, &fresh).await),
    );
    eprintln!("attack: a site without a browser path");
    figures.insert(
        "browser_path".into(),
        json!(trust::browser_path_off(&stack).await),
    );
    eprintln!("attack: a keyless event with a keyed event's id");
    figures.insert(
        "collision".into(),
        json!(trust::event_id_collision(&stack, &site).await),
    );
    eprintln!("attack: importing what the track API refuses");
    figures.insert(
        "import".into(),
        json!(trust::import_what_track_refuses(&site, &stack.lane).await),
    );
    eprintln!("attack: 300 preflights of different origins, then a valid key");
    figures.insert(
        "probes".into(),
        json!(trust::preflight_probes(&site, &stack.lane, 300).await),
    );
    eprintln!("attack: domains, the admin token, the documents' headers");
    figures.insert("edge".into(), json!(trust::edge_details(&stack).await));
    stack.stop().await;
    println!("{}", serde_json::to_string_pretty(&figures).unwrap());
}
