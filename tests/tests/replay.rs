//! `rivulet-admin replay` end to end on the real stack: events stored with older rules and
//! a country-only geo database are re-enriched from `events.raw` after newer ones are
//! installed. The browser and geo fields change where the new data says so, the stored
//! visitor and session ids stay, and no count changes (`count() FINAL`,
//! `uniqExact(event_id)`); another site's events are left alone.

use rivulet_tests::data::*;
use rivulet_tests::lifecycle::rfc3339;
use rivulet_tests::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;

const N: usize = 120;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Event `i` of the main site: Vivaldi or Chrome, from London or from a private address
/// (no geo in any database), some with a user id.
fn event(i: usize, t0: i64) -> Value {
    let (ua, ip) = match i % 4 {
        0 => (VIVALDI, "81.2.69.142"),
        1 => (CHROME, "81.2.69.142"),
        2 => (CHROME, "10.0.0.1"),
        _ => (VIVALDI, "10.0.0.1"),
    };
    let mut e = json!({"type": "pageview", "pathname": format!("/p/{i}"), "user_agent": ua, "ip_address": ip,
        "event_id": uuid::Uuid::new_v4().to_string(), "timestamp": t0 - 10_000 * (N - i) as i64});
    if i % 4 == 3 {
        e["user_id"] = json!(format!("user-{}", i % 3));
    }
    e
}

async fn post(ingest: &Service, site: u32, key: &str, events: &[Value]) {
    post_accepted_batch(&ingest.url, site, key, events).await;
}

#[derive(Debug, Clone, PartialEq, clickhouse::Row, serde::Deserialize)]
struct Stored {
    id: String,
    browser: String,
    browser_version: String,
    city: String,
    region: String,
    user_id: String,
    session_id: String,
}

async fn stored(site: u32) -> HashMap<String, Stored> {
    let rows: Vec<Stored> = db()
        .await
        .client
        .query(
            "SELECT toString(event_id) AS id, browser, browser_version, city, region, user_id, session_id \
             FROM events FINAL WHERE site_id = ?",
        )
        .bind(site)
        .fetch_all()
        .await
        .unwrap();
    rows.into_iter().map(|r| (r.id.clone(), r)).collect()
}

/// count() FINAL, uniqExact(event_id), uniqExact(user_id), uniqExact(session_id), and
/// count() without FINAL (every row version).
async fn counts(site: u32) -> (u64, u64, u64, u64, u64) {
    let db = db().await;
    let (a, b, c, d): (u64, u64, u64, u64) = db
        .client
        .query("SELECT count(), uniqExact(event_id), uniqExact(user_id), uniqExact(session_id) FROM events FINAL WHERE site_id = ?")
        .bind(site)
        .fetch_one()
        .await
        .unwrap();
    let raw: u64 = db
        .client
        .query("SELECT count() FROM events WHERE site_id = ?")
        .bind(site)
        .fetch_one()
        .await
        .unwrap();
    (a, b, c, d, raw)
}

#[tokio::test]
async fn replay_re_enriches_stored_events_and_counts_stay() {
    let dir = TempDir::new("replay");
    dir.replace("regexes.yaml", rules_without("Vivaldi"));
    dir.replace("REVISION", "test-old\n");
    let country_db = repo_root().join("testdata/geo/GeoLite2-Country-Test.mmdb");
    dir.replace("geo.mmdb", std::fs::read(&country_db).unwrap());
    let data_env = [
        ("UA_REGEXES", dir.str("regexes.yaml")),
        ("GEOIP_DB", dir.str("geo.mmdb")),
    ];
    let data_env: Vec<(&str, &str)> = data_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let ingest = start_ingest(&[]).await;
    let enricher = start_enricher(&data_env).await;
    wait_assigned(&enricher).await;

    // Stored with the older rules and the country database.
    let (site, key) = site_with_key().await;
    let (other, other_key) = site_with_key().await;
    // Two halves, received a moment apart: a replay from the second can only start its
    // sessions in the middle.
    let since = now_ms() - 2000;
    let t0 = now_ms();
    let events: Vec<Value> = (0..N).map(|i| event(i, t0)).collect();
    post(&ingest, site, &key, &events[..N / 2]).await;
    // The scenario: the second half is received 1.5 s after the first.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let second_half = now_ms() - 500;
    post(&ingest, site, &key, &events[N / 2..]).await;
    let others: Vec<Value> = (0..20).map(|_| event(0, now_ms())).collect();
    post(&ingest, other, &other_key, &others).await;
    for (s, n) in [(site, N), (other, 20)] {
        let sql = format!("SELECT count() FROM events FINAL WHERE site_id = {s}");
        assert_eq!(
            wait_count(&sql, n as u64, Duration::from_secs(60)).await,
            n as u64
        );
    }
    let before = stored(site).await;
    let counts_before = counts(site).await;
    assert_eq!(counts_before.0, N as u64);
    assert_eq!(
        counts_before.4, N as u64,
        "one row per event before the replay"
    );
    let id = |i: usize| events[i]["event_id"].as_str().unwrap().to_string();
    assert_eq!(before[&id(0)].browser, "Chrome");
    assert_eq!(before[&id(0)].city, "");

    // Newer rules and a city database.
    run_admin(
        &[
            "install",
            "ua-rules",
            shipped_rules().to_str().unwrap(),
            "--to",
            data_env[0].1,
        ],
        &[],
    )
    .json();
    let city_db = repo_root().join("testdata/geo/GeoLite2-City-Test.mmdb");
    run_admin(
        &[
            "install",
            "geo",
            city_db.to_str().unwrap(),
            "--to",
            data_env[1].1,
        ],
        &[],
    )
    .json();
    let replay = |extra: &[&str]| {
        let mut args = vec!["replay", "--site"];
        let site = site.to_string();
        let since = rfc3339(since);
        args.push(&site);
        args.push("--since");
        args.push(&since);
        args.extend_from_slice(extra);
        run_admin(&args, &data_env)
    };

    // Nothing received before --until.
    let none = replay(&["--until", &rfc3339(since)]);
    let err = none.error();
    assert!(err.contains("--until must be later than --since"), "{err}");
    let early = run_admin(
        &[
            "replay",
            "--site",
            &site.to_string(),
            "--since",
            "1h",
            "--until",
            &rfc3339(since),
        ],
        &data_env,
    )
    .json();
    assert_eq!(early["events_in_range"], 0, "{early}");

    // A dry run counts and writes nothing.
    let dry = replay(&["--dry-run"]).json();
    assert_eq!(dry["rows_rewritten"], 3 * N / 4, "{dry}");
    assert_eq!(counts(site).await, counts_before);

    // The second half only: its events' sessions started before it.
    let half = run_admin(
        &[
            "replay",
            "--site",
            &site.to_string(),
            "--since",
            &rfc3339(second_half),
        ],
        &data_env,
    )
    .json();
    assert_eq!(half["events_in_range"], N / 2, "{half}");
    assert_eq!(half["rows_rewritten"], 3 * N / 8, "{half}");
    let middle = stored(site).await;
    for i in 0..N {
        let (b, m) = (&before[&id(i)], &middle[&id(i)]);
        assert_eq!(
            (&m.user_id, &m.session_id),
            (&b.user_id, &b.session_id),
            "event {i}: ids kept"
        );
        let rewritten = i >= N / 2 && i % 4 != 2;
        assert_eq!(m != b, rewritten, "event {i}: {b:?} → {m:?}");
    }

    // All of them.
    let run = replay(&[]);
    let summary = run.json();
    println!("{summary}");
    assert_eq!(summary["events_in_range"], N, "{summary}");
    assert_eq!(summary["not_stored"], 0);
    assert_eq!(summary["timestamp_differs"], 0);
    assert_eq!(summary["rows_rewritten"], 3 * N / 8, "the first half");
    assert_eq!(summary["unchanged"], N - 3 * N / 8);
    assert_eq!(summary["changed"]["browser"], N / 4);
    assert_eq!(summary["changed"]["device"], N / 4);
    assert_eq!(summary["changed"]["device_type"], 0);
    assert_eq!(summary["changed"]["geo"], N / 4);
    assert_eq!(summary["changed"]["other"], 0);
    assert_eq!(
        summary["browser_changes"],
        json!([{"from": "Chrome 120", "to": "Vivaldi 6", "events": N / 4}])
    );
    assert_eq!(summary["ua_rules"]["revision"], shipped_revision().as_str());
    assert_eq!(summary["group"], "rivulet-replay");
    assert!(summary["messages_read"].as_u64().unwrap() >= (N + 20) as u64);
    assert!(run.stderr.contains("messages (100 %)"), "{}", run.stderr);

    // The fields follow the new data; ids and counts stay.
    let after = stored(site).await;
    assert_eq!(after.len(), N);
    for i in 0..N {
        let (b, a) = (&before[&id(i)], &after[&id(i)]);
        assert_eq!(
            (&a.user_id, &a.session_id),
            (&b.user_id, &b.session_id),
            "event {i}"
        );
        let vivaldi = i % 4 == 0 || i % 4 == 3;
        let london = i % 4 < 2;
        assert_eq!(
            (a.browser.as_str(), a.browser_version.as_str()),
            if vivaldi {
                ("Vivaldi", "6")
            } else {
                ("Chrome", "120")
            },
            "event {i}"
        );
        assert_eq!(
            (a.city.as_str(), a.region.as_str()),
            if london {
                ("London", "GB-ENG")
            } else {
                ("", "")
            },
            "event {i}"
        );
    }
    let counts_after = counts(site).await;
    assert_eq!(
        (
            counts_after.0,
            counts_after.1,
            counts_after.2,
            counts_after.3
        ),
        (
            counts_before.0,
            counts_before.1,
            counts_before.2,
            counts_before.3
        ),
        "count() FINAL, uniqExact of event_id, user_id, session_id"
    );
    // The replaced rows are there until ClickHouse merges them away.
    assert!(
        (N as u64..=(N + 3 * N / 4) as u64).contains(&counts_after.4),
        "{} row versions",
        counts_after.4
    );
    // The other site was not touched.
    assert_eq!(counts(other).await.4, 20);
    assert!(stored(other).await.values().all(|r| r.browser == "Chrome"));

    // Run again: nothing left to change.
    let again = replay(&[]).json();
    assert_eq!(
        (
            again["rows_rewritten"].as_u64(),
            again["unchanged"].as_u64()
        ),
        (Some(0), Some(N as u64)),
        "{again}"
    );

    // Back to the older rules, with --optimize: the replaced rows are merged away at once.
    dir.replace("regexes.yaml", rules_without("Vivaldi"));
    let back = replay(&["--optimize"]).json();
    assert_eq!(back["rows_rewritten"], N / 2, "{back}");
    assert!(
        !back["optimized_partitions"].as_array().unwrap().is_empty(),
        "{back}"
    );
    let counts_back = counts(site).await;
    assert_eq!(
        counts_back,
        (
            N as u64,
            N as u64,
            counts_before.2,
            counts_before.3,
            N as u64
        )
    );
    assert!(stored(site).await.values().all(|r| r.browser == "Chrome"));
    drop(enricher);
}
