//! The enricher reloads its user-agent rules and geo database while it runs, on the real
//! stack: a steady stream of events through rivulet-ingest and rivulet-enricher while
//! `rivulet-admin install` replaces the files, a broken file is put in place, and (with
//! the periodic check off) SIGHUP asks for a reload. Every event must be stored exactly
//! once, events sent after a reload must follow the new file, a broken file must leave
//! the loaded one in use (and say so in the log, the metrics and /_readiness), and rows
//! must keep arriving while the new rules compile.

use rivulet_tests::data::*;
use rivulet_tests::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How many times the newer rules repeat the shipped ones (see `rules_repeated`).
const REPEAT: usize = 8;

async fn readiness(svc: &Service) -> Value {
    http()
        .get(svc.readiness_url())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Polls /_readiness until `done` holds; returns the time it was first seen.
async fn until_ready(svc: &Service, what: &str, done: impl Fn(&Value) -> bool) -> i64 {
    Pace::within(Duration::from_secs(30))
        .every(Duration::from_millis(20))
        .poll_until(&format!("{what} not seen"), || async {
            let body = readiness(svc).await;
            if done(&body) {
                Ok(now_ms())
            } else {
                Err(body)
            }
        })
        .await
}

/// Posts batches of `size` events (Vivaldi, from London) until `stop`; records each
/// event's id and when its request was sent. The send time, not the acknowledgement's,
/// is what a reload can be compared with: an event can reach Kafka and be enriched
/// before a reload while its response is still on its way back to this test.
async fn stream(
    ingest_url: String,
    site: u32,
    key: String,
    size: usize,
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<Vec<(String, i64)>>>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let ids: Vec<String> = (0..size)
            .map(|_| uuid::Uuid::new_v4().to_string())
            .collect();
        let events: Vec<Value> = ids
            .iter()
            .map(|id| {
                n += 1;
                json!({"type": "pageview", "pathname": format!("/n/{n}"), "event_id": id,
                       "timestamp": now_ms(), "user_agent": VIVALDI, "ip_address": "81.2.69.142"})
            })
            .collect();
        let sending = now_ms();
        post_accepted_batch(&ingest_url, site, &key, &events).await;
        sent.lock()
            .unwrap()
            .extend(ids.into_iter().map(|id| (id, sending)));
        // The scenario: the stream's pace (about 1000 events a second).
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn count(site: u32) -> u64 {
    db().await
        .client
        .query("SELECT count() FROM events WHERE site_id = ?")
        .bind(site)
        .fetch_one()
        .await
        .unwrap()
}

#[tokio::test]
async fn rules_and_geo_reload_under_load_and_on_sighup() {
    let dir = TempDir::new("reload");
    dir.replace("regexes.yaml", rules_without("Vivaldi"));
    dir.replace("REVISION", "test-old\n");
    dir.replace("city.mmdb", std::fs::read(geo_test_db()).unwrap());
    let (site, key) = site_with_key().await;
    let ingest = start_ingest(&[]).await;
    let rules = dir.str("regexes.yaml");
    let city = dir.str("city.mmdb");
    let enricher = start_enricher(&[
        ("UA_REGEXES", &rules),
        ("GEOIP_DB", &city),
        ("ENRICHER_RELOAD_CHECK_MS", "200"),
    ])
    .await;
    wait_assigned(&enricher).await;
    let ready = readiness(&enricher).await;
    assert_eq!(ready["ua_rules"]["revision"], "test-old", "{ready}");
    assert_eq!(
        ready["geo_db"]["files"][0]["type"], "GeoLite2-City",
        "{ready}"
    );

    // ~1000 events a second, and how many rows ClickHouse has every 100 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Mutex::new(Vec::new()));
    let streaming = tokio::spawn(stream(
        ingest.url.clone(),
        site,
        key.clone(),
        25,
        stop.clone(),
        sent.clone(),
    ));
    let samples = Arc::new(Mutex::new(Vec::<(i64, u64)>::new()));
    let sampling = {
        let (stop, samples) = (stop.clone(), samples.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let n = count(site).await;
                samples.lock().unwrap().push((now_ms(), n));
                // The scenario: a sample every 100 ms.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    // Rows enriched with the older rules are stored before they change.
    until_rows(site, "", 200).await;

    // 1. Newer rules, installed with the admin command: the periodic check loads them.
    // They are the shipped rules repeated, so that compiling them takes a few seconds:
    // long enough to see that rows keep coming meanwhile.
    let newer = TempDir::new("newer");
    newer.replace("regexes.yaml", rules_repeated(REPEAT));
    newer.replace("REVISION", format!("{}\n", shipped_revision()));
    let rules_swapped = now_ms();
    let out = run_admin_async(
        &[
            "install",
            "ua-rules",
            &newer.str("regexes.yaml"),
            "--to",
            &rules,
        ],
        &[],
    )
    .await
    .json();
    assert_eq!(out["installed"], true);
    let revision = shipped_revision();
    let rules_reloaded = until_ready(&enricher, "the new rules", |r| {
        r["ua_rules"]["revision"] == revision.as_str()
    })
    .await;
    // Rows enriched with the new rules are stored before the next change.
    until_rows(site, "browser = 'Vivaldi'", 100).await;

    // 2. A broken file put in place by hand: refused, the loaded rules stay.
    let text = std::fs::read_to_string(shipped_rules()).unwrap();
    let cut = text[text.len() / 2..].find("regex: '").unwrap() + text.len() / 2 + 12;
    dir.replace("regexes.yaml", &text[..cut]);
    until_ready(&enricher, "the reload failure", |r| {
        r["ua_rules"]["reload_failures"] == 1
    })
    .await;
    let ready = readiness(&enricher).await;
    assert_eq!(
        ready["ready"], true,
        "a failed reload does not make the enricher unready"
    );
    assert_eq!(ready["ua_rules"]["revision"], revision.as_str());
    let why = ready["ua_rules"]["last_error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        why.contains("are not a valid uap-core regexes.yaml"),
        "{why}"
    );
    // The scenario: the stream goes on for a while with the broken file in place.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 3. A country database instead of the city one.
    // The country database goes in now; the reload is seen below.
    run_admin_async(
        &[
            "install",
            "geo",
            repo_root()
                .join("testdata/geo/GeoLite2-Country-Test.mmdb")
                .to_str()
                .unwrap(),
            "--to",
            &city,
        ],
        &[],
    )
    .await
    .json();
    let geo_reloaded = until_ready(&enricher, "the country database", |r| {
        r["geo_db"]["files"][0]["type"] == "GeoLite2-Country"
    })
    .await;
    // Rows enriched with the country database are stored before the stream stops.
    until_rows(site, "city = ''", 100).await;
    stop.store(true, Ordering::Relaxed);
    streaming.await.unwrap();
    sampling.await.unwrap();
    let stream_ended = now_ms();

    // Every event stored exactly once: as many rows as events, without FINAL, and still
    // so a moment later.
    let sent: HashMap<String, i64> = sent.lock().unwrap().iter().cloned().collect();
    let n = sent.len() as u64;
    let sql = format!("SELECT count() FROM events WHERE site_id = {site}");
    assert_eq!(wait_count(&sql, n, Duration::from_secs(60)).await, n);
    let all_in = now_ms();
    Pace::within(Duration::from_secs(2))
        .every(Duration::from_millis(250))
        .repeat(|_| async { assert_eq!(count(site).await, n, "no event stored twice") })
        .await;
    let rows: Vec<(String, String, String, String)> = db()
        .await
        .client
        .query("SELECT toString(event_id), browser, country, city FROM events WHERE site_id = ?")
        .bind(site)
        .fetch_all()
        .await
        .unwrap();
    let mut seen = std::collections::HashSet::new();
    let (mut old_rules, mut new_rules, mut city_rows, mut country_rows) = (0, 0, 0, 0);
    for (id, browser, country, city) in &rows {
        let sending = *sent.get(id).unwrap_or_else(|| panic!("{id} was not sent"));
        assert!(seen.insert(id.clone()), "{id} stored twice");
        assert_eq!(country, "GB");
        match browser.as_str() {
            "Chrome" => {
                old_rules += 1;
                assert!(
                    sending < rules_reloaded,
                    "{id}, sent after the reload, has the old rules"
                );
            }
            // An event sent before the swap may still be enriched after it (the enricher
            // runs behind ingest), so only the other direction is certain: the readiness
            // shows a revision only once the enrich threads take it for the next event.
            "Vivaldi" => new_rules += 1,
            other => panic!("{id}: browser {other:?}"),
        }
        match city.as_str() {
            "London" => {
                city_rows += 1;
                assert!(
                    sending < geo_reloaded,
                    "{id}, sent after the geo reload, has a city"
                );
            }
            "" => country_rows += 1,
            other => panic!("{id}: city {other:?}"),
        }
    }
    assert_eq!(seen.len() as u64, n);
    assert!(
        old_rules > 0 && new_rules > 0,
        "{old_rules} old, {new_rules} new"
    );
    assert!(
        city_rows > 0 && country_rows > 0,
        "{city_rows} city, {country_rows} country"
    );

    // Rows kept arriving while the new rules were read, compiled and checked (the reload
    // logs when it ended and how long it took): the longest time without a new row is
    // far shorter than the reload, and rows grew several times during it.
    let samples = samples.lock().unwrap().clone();
    let mut longest = 0;
    let mut last_growth = None;
    for pair in samples.windows(2) {
        if pair[1].1 > pair[0].1 {
            if let Some(t) = last_growth {
                longest = longest.max(pair[1].0 - t);
            }
            last_growth = Some(pair[1].0);
        }
    }
    let reloaded: Value = enricher
        .logs()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["message"] == "user-agent rules reloaded")
        .expect("the reload's log line");
    let reload_ms = reloaded["took_ms"].as_i64().unwrap();
    let reload_end = time::OffsetDateTime::parse(
        reloaded["timestamp"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let reload_end = (reload_end.unix_timestamp_nanos() / 1_000_000) as i64;
    let during = samples
        .windows(2)
        .filter(|w| w[0].0 >= reload_end - reload_ms && w[1].0 <= reload_end && w[1].1 > w[0].1)
        .count();
    println!(
        "{n} events in {:.1} s; rules reloaded {} ms after the install, {reload_ms} ms to read, \
         compile and check them, rows grew {during} times meanwhile; longest wait for a new row \
         {longest} ms; all rows in {} ms after the stream ended",
        (stream_ended - samples[0].0) as f64 / 1000.0,
        rules_reloaded - rules_swapped,
        all_in - stream_ended
    );
    assert!(
        reload_ms >= 800,
        "the repeated rules compiled in {reload_ms} ms: too fast to tell a stall, repeat them more (REPEAT)"
    );
    assert!(
        longest < reload_ms / 2 && during >= 3,
        "no new row for {longest} ms, {during} inserts during the {reload_ms} ms reload"
    );

    // The metrics and the log say what happened.
    assert_eq!(
        enricher
            .metric("enricher_data_reloads_total{data=\"ua_rules\"}")
            .await,
        1.0
    );
    assert_eq!(
        enricher
            .metric("enricher_data_reload_failures_total{data=\"ua_rules\"}")
            .await,
        1.0
    );
    assert_eq!(
        enricher
            .metric("enricher_data_reload_failing{data=\"ua_rules\"}")
            .await,
        1.0
    );
    assert_eq!(
        enricher
            .metric("enricher_data_reloads_total{data=\"geo_db\"}")
            .await,
        1.0
    );
    assert_eq!(
        enricher
            .metric("enricher_data_reload_failing{data=\"geo_db\"}")
            .await,
        0.0
    );
    assert_eq!(
        enricher
            .metric(&format!(
                "enricher_ua_rules_info{{revision=\"{revision}\"}}"
            ))
            .await,
        1.0
    );
    assert_eq!(
        enricher
            .metric("enricher_ua_rules_info{revision=\"test-old\"}")
            .await,
        0.0
    );
    let metrics = enricher.metrics_text().await;
    assert!(
        metrics.contains("enricher_geo_db_info{type=\"GeoLite2-Country\",build_epoch=\"")
            && metrics.contains("enricher_geo_db_info{type=\"GeoLite2-City\","),
        "{metrics}"
    );
    let logs = enricher.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("reloading the user-agent rules failed")
                && l.contains("are not a valid uap-core regexes.yaml")),
        "{logs}"
    );
    drop(enricher);

    // 4. Periodic checks off: a new file is used only after SIGHUP.
    dir.replace("regexes.yaml", rules_without("Vivaldi"));
    dir.replace("REVISION", "test-old\n");
    let enricher = start_enricher(&[
        ("UA_REGEXES", &rules),
        ("GEOIP_DB", &city),
        ("ENRICHER_RELOAD_CHECK_MS", "0"),
    ])
    .await;
    wait_assigned(&enricher).await;
    run_admin_async(
        &[
            "install",
            "ua-rules",
            shipped_rules().to_str().unwrap(),
            "--to",
            &rules,
        ],
        &[],
    )
    .await
    .json();
    // Nothing reloads them until SIGHUP: the old rules stay for a while.
    Pace::within(Duration::from_millis(1500))
        .every(Duration::from_millis(100))
        .repeat(|_| async {
            assert_eq!(
                readiness(&enricher).await["ua_rules"]["revision"],
                "test-old"
            )
        })
        .await;
    let before_hup = post_and_read_browsers(&ingest.url, site, &key).await;
    assert!(before_hup.iter().all(|b| b == "Chrome"), "{before_hup:?}");
    assert_eq!(
        readiness(&enricher).await["ua_rules"]["revision"],
        "test-old"
    );
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &enricher.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    until_ready(&enricher, "the rules after SIGHUP", |r| {
        r["ua_rules"]["revision"] == revision.as_str() && r["ua_rules"]["reloads"] == 1
    })
    .await;
    let after_hup = post_and_read_browsers(&ingest.url, site, &key).await;
    assert!(after_hup.iter().all(|b| b == "Vivaldi"), "{after_hup:?}");
    assert!(enricher.logs().contains("SIGHUP: reloading"));
}

/// Waits until the site has `at_least` rows matching `filter` (SQL; none when empty).
async fn until_rows(site: u32, filter: &str, at_least: u64) {
    let and = if filter.is_empty() {
        String::new()
    } else {
        format!(" AND {filter}")
    };
    let sql = format!("SELECT count() FROM events WHERE site_id = {site}{and}");
    let got = wait_count(&sql, at_least, Duration::from_secs(30)).await;
    assert!(
        got >= at_least,
        "{got} rows ({sql}), not {at_least}, within 30 s"
    );
}

/// Posts 10 Vivaldi events and returns the browser of each once stored.
async fn post_and_read_browsers(ingest_url: &str, site: u32, key: &str) -> Vec<String> {
    let ids: Vec<String> = (0..10).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let events: Vec<Value> = ids
        .iter()
        .map(|id| json!({"type": "pageview", "event_id": id, "timestamp": now_ms(), "user_agent": VIVALDI}))
        .collect();
    let r = http()
        .post(format!("{ingest_url}/api/track/batch"))
        .json(&json!({"api_key": key, "site_id": site, "events": events}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let list = ids
        .iter()
        .map(|i| format!("'{i}'"))
        .collect::<Vec<_>>()
        .join(",");
    let sql = format!("SELECT count() FROM events WHERE toString(event_id) IN ({list})");
    assert_eq!(wait_count(&sql, 10, Duration::from_secs(30)).await, 10);
    db().await
        .client
        .query(&format!(
            "SELECT browser FROM events WHERE toString(event_id) IN ({list})"
        ))
        .fetch_all()
        .await
        .unwrap()
}
