//! The Stats API (`POST /api/v2/query`, docs/stats-api.md) served by `rivulet-admin serve`
//! on the real stack, every answer compared with the figures the test computes itself
//! from the events it wrote (`rivulet_tests::stats`: a deterministic dataset in the
//! enricher's row format, duplicates and bots included, and an evaluator of the docs'
//! semantics in plain Rust):
//!
//! - every metric, every dimension (event, custom property, visit, time) with every metric
//!   it takes, and two and three dimensions at once;
//! - local time buckets in Europe/Berlin across the change back from summer time
//!   (2025-10-26: the repeated hour one bucket, a 25-hour day), weeks, months, `time`;
//! - every filter operator, case-sensitive and not, empty labels, nested and/or/not;
//! - comparisons with the previous period and the year before (metrics and change);
//! - the default and asked-for orders, pages that neither overlap nor skip, total_rows;
//! - events sent through rivulet-ingest and the enricher (a Kafka topic of their own)
//!   show up in the answers;
//! - the daily rollup (`stats_total_days`) answers as the events do: before it is computed,
//!   after, and with a day in the middle stamped stale (read from `events` from there);
//! - an erased person (`rivulet-admin erase --wait`) is gone from every figure, and from
//!   the rollup's rows;
//! - a replay (`rivulet-admin replay`) of days already in the rollup is answered as
//!   replayed at once (the days are stale) and once they are computed again;
//! - the errors and the auth: 401 without a key, 403 for a key without `stats:read` or
//!   for another site, 400 naming the field, 429 with Retry-After past the per-key limit.

use rivulet_tests::lifecycle::Lane;
use rivulet_tests::stats::{self, Dataset, Named, DST_DAY, ERASED_USER, MAIN_RANGE};
use rivulet_tests::*;
use serde_json::{json, Value};
use std::time::Duration;

/// The dataset's seed: the same events on every run.
const SEED: u64 = 20_251_026;

/// One dashboard server, a site with the dataset, and a key that reads it, for the whole
/// binary.
struct Fixture {
    admin: Service,
    site: u32,
    ingest_key: String,
    key: String,
    ds: Dataset,
}

async fn fx() -> &'static Fixture {
    static FX: tokio::sync::OnceCell<Fixture> = tokio::sync::OnceCell::const_new();
    FX.get_or_init(|| async {
        let (site, ingest_key) = site_with_key().await;
        let key = stats::prepare_site(site).await;
        let ds = stats::generate(site, SEED, 120, 24);
        stats::load(&db().await, &ds).await;
        let admin = start_admin(
            &format!("test-token-{}", uuid::Uuid::new_v4().simple()),
            &[("STATS_RATE_LIMIT_PER_MINUTE", "0")],
        )
        .await;
        Fixture {
            admin,
            site,
            ingest_key,
            key,
            ds,
        }
    })
    .await
}

/// An ingest and an enricher on a Kafka topic of their own; the enricher's lifecycle
/// runner paced for a test (it runs the erasure).
struct Pipeline {
    ingest: Service,
    _enricher: Service,
    lane: Lane,
}

async fn pipeline() -> &'static Pipeline {
    static P: tokio::sync::OnceCell<Pipeline> = tokio::sync::OnceCell::const_new();
    P.get_or_init(|| async {
        // Topics and a group of the suite's own, the same on every run (as identity.rs's).
        let lane = Lane {
            topic: "rivulet-tests.stats.raw".into(),
            dlq: "rivulet-tests.stats.dlq".into(),
        };
        ensure_topic(&lane.topic, 3).await;
        ensure_topic(&lane.dlq, 1).await;
        let ingest = lane.start_ingest().await;
        let enricher = lane.start_enricher("rivulet-tests-stats", &[]).await;
        Pipeline {
            ingest,
            _enricher: enricher,
            lane,
        }
    })
    .await
}

/// Runs queries against the fixture's server and fails with every one that differs from
/// the evaluator.
async fn check(ds: &Dataset, key: &str, queries: &[Named]) {
    let f = fx().await;
    let failures = stats::mismatches(&f.admin.url, key, ds, queries).await;
    assert!(
        failures.is_empty(),
        "{} of {} queries differ from the figures computed from the events written:\n\n{}",
        failures.len(),
        queries.len(),
        failures.join("\n\n")
    );
}

fn rows(v: &Value) -> &Vec<Value> {
    v["results"].as_array().expect("results")
}

#[tokio::test]
async fn every_metric_and_dimension_matches_the_figures_computed_from_the_events() {
    let f = fx().await;
    let queries = stats::metric_and_dimension_queries(f.site);
    // The dataset gives every dimension several values, so a breakdown says something.
    for (name, q) in &queries {
        let want = f.ds.expected(q);
        let n = rows(&want).len();
        if q["dimensions"].is_array() {
            assert!(n >= 2, "{name}: the dataset gives only {n} row(s)");
        }
    }
    let totals = f.ds.expected(&queries[0].1);
    let m = &rows(&totals)[0]["metrics"];
    assert!(m[0].as_u64().unwrap() > 20, "visitors: {m}");
    assert!(
        (1..100).contains(&m[4].as_u64().unwrap()),
        "bounce_rate: {m}"
    );
    assert_eq!(m[7], 3, "users: alice, bob and carol: {m}");
    check(&f.ds, &f.key, &queries).await;
}

#[tokio::test]
async fn time_buckets_are_local_days_and_hours_across_the_dst_change() {
    let f = fx().await;
    let queries = stats::time_queries(f.site);

    // What the docs say of 2025-10-26 in Berlin, read from the API itself.
    let (status, _, day) = stats::ask(&f.admin.url, Some(&f.key), &queries[0].1).await;
    assert_eq!(status, 200, "{day}");
    assert_eq!(
        day["query"]["date_range"],
        json!(["2025-10-26T00:00:00+02:00", "2025-10-26T23:59:59+01:00"]),
        "a day of 25 hours"
    );
    let labels: Vec<&str> = day["meta"]["time_labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(labels.len(), 24, "25 hours, 02:00 once: {labels:?}");
    assert_eq!(
        labels[1..4],
        [
            "2025-10-26 01:00:00",
            "2025-10-26 02:00:00",
            "2025-10-26 03:00:00"
        ]
    );
    let (_, _, week) = stats::ask(&f.admin.url, Some(&f.key), &queries[4].1).await;
    assert_eq!(
        week["meta"]["time_labels"],
        json!([
            "2025-10-20",
            "2025-10-21",
            "2025-10-22",
            "2025-10-23",
            "2025-10-24",
            "2025-10-25",
            "2025-10-26"
        ])
    );
    assert_eq!(
        week["query"]["date_range"],
        json!(["2025-10-20T00:00:00+02:00", "2025-10-26T23:59:59+01:00"])
    );
    // Three fixed visits have events in the repeated hour, in summer time and in winter
    // time (one of them in both): "the hour summer time gives back is one bucket", one row.
    let flat = json!({"site_id": f.site, "metrics": ["visitors", "visits", "pageviews"],
                      "date_range": [DST_DAY, DST_DAY], "dimensions": ["time:hour"]});
    let (_, _, hours) = stats::ask(&f.admin.url, Some(&f.key), &flat).await;
    let repeated: Vec<&Value> = rows(&hours)
        .iter()
        .filter(|r| r["dimensions"][0] == "2025-10-26 02:00:00")
        .collect();
    assert_eq!(
        repeated.len(),
        1,
        "one row for the repeated hour 02:00 (02:00-03:00 CEST and 02:00-03:00 CET): {repeated:?}"
    );
    assert!(
        repeated[0]["metrics"][1].as_u64().unwrap() >= 3,
        "visits at 02:00: {}",
        repeated[0]
    );

    check(&f.ds, &f.key, &queries).await;
}

#[tokio::test]
async fn every_filter_operator_matches_the_figures_computed_from_the_events() {
    let f = fx().await;
    let queries = stats::filter_queries(f.site);
    let unfiltered =
        f.ds.expected(&json!({"site_id": f.site, "date_range": MAIN_RANGE,
                                           "metrics": stats::OVERVIEW}));
    let all_events = rows(&unfiltered)[0]["metrics"][6].as_u64().unwrap();
    // Each filter keeps some events and not all (but the case-sensitive one that finds
    // nothing on purpose).
    for (name, q) in queries.iter().filter(|(_, q)| q["dimensions"].is_null()) {
        let events = rows(&f.ds.expected(q))[0]["metrics"][6].as_u64().unwrap();
        if name.ends_with("case sensitive") {
            assert_eq!(events, 0, "{name}");
        } else {
            assert!(
                events > 0 && events < all_events,
                "{name}: {events} of {all_events} events"
            );
        }
    }
    check(&f.ds, &f.key, &queries).await;
}

#[tokio::test]
async fn comparisons_with_the_previous_period_and_the_year_before() {
    let f = fx().await;
    let queries = stats::comparison_queries(f.site);
    for (name, q) in &queries {
        let want = f.ds.expected(q);
        let compared = rows(&want)
            .iter()
            .filter(|r| r["comparison"]["metrics"][0].as_f64().unwrap_or(0.0) > 0.0)
            .count();
        assert!(
            compared > 0,
            "{name}: nothing to compare with in the dataset"
        );
    }
    check(&f.ds, &f.key, &queries).await;
}

#[tokio::test]
async fn web_vitals_p75_match_the_percentiles_computed_from_the_events() {
    let f = fx().await;
    let queries = stats::vital_queries(f.site);
    // The dataset says something: percentiles that differ by page, pages and types
    // without a measurement, and vitals on events that are not measurements.
    let by_page = f.ds.expected(&queries[1].1);
    let lcp: Vec<&Value> = rows(&by_page).iter().map(|r| &r["metrics"][2]).collect();
    assert!(lcp.len() >= 4, "{by_page}");
    assert!(
        lcp.iter().any(|v| **v != *lcp[0]),
        "the same LCP everywhere: {lcp:?}"
    );
    let by_type = f.ds.expected(&queries[2].1);
    let types = rows(&by_type);
    assert!(types.len() >= 5, "{by_type}");
    assert!(types.last().unwrap()["metrics"][0].is_null(), "{by_type}");
    let stray =
        f.ds.rows
            .iter()
            .filter(|r| r.event_type != "performance" && r.lcp.is_some() && r.is_bot == 0)
            .count();
    assert!(stray > 0, "no vital on another event type");
    // The totals by hand, each event once: the sorted LCPs' element at ⌊3n / 4⌋.
    let mut seen = std::collections::HashSet::new();
    // MAIN_RANGE in Berlin: from 2025-10-20 00:00 CEST to 2025-11-03 00:00 CET.
    let (first, last) = (
        stats::at("2025-10-19T22:00:00Z"),
        stats::at("2025-11-02T23:00:00Z"),
    );
    let mut values: Vec<f64> =
        f.ds.rows
            .iter()
            .filter(|r| r.is_bot == 0 && r.event_type == "performance")
            .filter(|r| (first..last).contains(&i64::from(r.timestamp)))
            .filter(|r| seen.insert(r.event_id))
            .filter_map(|r| r.lcp)
            .collect();
    values.sort_by(f64::total_cmp);
    let totals = f.ds.expected(&queries[0].1);
    assert_eq!(
        rows(&totals)[0]["metrics"][1],
        json!(values[values.len() * 3 / 4].round() as u64),
        "{totals}"
    );
    check(&f.ds, &f.key, &queries).await;
}

#[tokio::test]
async fn pages_follow_the_order_and_neither_overlap_nor_skip() {
    let f = fx().await;
    check(&f.ds, &f.key, &stats::page_queries(f.site)).await;

    // Page by page through a breakdown with ties (the default order, then the
    // dimension), against the same query in one page.
    let q = |pagination: Value| {
        json!({"site_id": f.site, "date_range": MAIN_RANGE, "metrics": ["visits"],
               "dimensions": ["visit:browser_version", "visit:device"], "pagination": pagination,
               "include": {"total_rows": true}})
    };
    let (_, _, whole) = stats::ask(&f.admin.url, Some(&f.key), &q(json!({}))).await;
    let total = whole["meta"]["total_rows"].as_u64().unwrap() as usize;
    assert_eq!(total, rows(&whole).len());
    assert!(total > 6, "{whole}");
    let mut paged = Vec::new();
    for offset in (0..total + 2).step_by(2) {
        let (status, _, page) = stats::ask(
            &f.admin.url,
            Some(&f.key),
            &q(json!({"limit": 2, "offset": offset})),
        )
        .await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["meta"]["total_rows"], total, "offset {offset}");
        paged.extend(rows(&page).iter().cloned());
    }
    assert_eq!(&paged, rows(&whole), "pages of 2 and one page");
}

#[tokio::test]
async fn a_query_past_the_memory_limit_is_503_and_says_what_to_narrow() {
    let f = fx().await;
    // A server of its own whose statements may use 16 KiB: any query of the dataset needs
    // more. ClickHouse stops it (MEMORY_LIMIT_EXCEEDED), and the client learns what to do,
    // not that ClickHouse is down.
    let tight = start_admin(
        &format!("test-token-{}", uuid::Uuid::new_v4().simple()),
        &[
            ("STATS_RATE_LIMIT_PER_MINUTE", "0"),
            ("STATS_MAX_MEMORY_BYTES", "16384"),
        ],
    )
    .await;
    let q =
        json!({"site_id": f.site, "metrics": stats::OVERVIEW_BUT_USERS, "date_range": MAIN_RANGE});
    let (status, _, body) = stats::ask(&tight.url, Some(&f.key), &q).await;
    assert_eq!(status, 503, "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("more memory") && error.contains("narrow"),
        "{body}"
    );
    assert!(!error.contains("unreachable"), "{body}");
    // The same query within the default limits answers.
    let (status, _, body) = stats::ask(&f.admin.url, Some(&f.key), &q).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn keys_sites_and_malformed_queries_are_refused_with_what_to_fix() {
    let f = fx().await;
    let url = &f.admin.url;
    let q = json!({"site_id": f.site, "metrics": ["visitors"], "date_range": MAIN_RANGE});
    let error = |body: &Value| body["error"].as_str().unwrap_or_default().to_string();

    let (status, _, body) = stats::ask(url, None, &q).await;
    assert_eq!(status, 401, "no key: {body}");
    assert!(error(&body).contains("stats:read"), "{body}");
    let (status, _, body) = stats::ask(url, Some("rb_0123456789abcdef"), &q).await;
    assert_eq!(status, 401, "an unknown key: {body}");
    let (status, _, body) = stats::ask(url, Some(&f.ingest_key), &q).await;
    assert_eq!(status, 403, "a key of scope ingest:write only: {body}");
    assert!(error(&body).contains("ingest:write"), "{body}");
    let (other, _) = site_with_key().await;
    let mut elsewhere = q.clone();
    elsewhere["site_id"] = json!(other);
    let (status, _, body) = stats::ask(url, Some(&f.key), &elsewhere).await;
    assert_eq!(status, 403, "another site's id: {body}");
    assert!(error(&body).contains(&f.site.to_string()), "{body}");

    // The site by its id as a string, echoed as sent.
    let mut as_string = q.clone();
    as_string["site_id"] = json!(f.site.to_string());
    let (status, _, body) = stats::ask(url, Some(&f.key), &as_string).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["query"]["site_id"], json!(f.site.to_string()));

    let with = |field: &str, value: Value| {
        let mut b = q.clone();
        b[field] = value;
        b
    };
    for (what, body, field) in [
        (
            "an unknown metric",
            with("metrics", json!(["visitors", "conversion_rate"])),
            "`metrics[1]`",
        ),
        (
            "a malformed date range",
            with("date_range", json!(["2025-10-31", "2025-10-01"])),
            "`date_range`",
        ),
        (
            "a date that is not one",
            with("date_range", json!(["2025-02-30", "2025-03-01"])),
            "`date_range`",
        ),
        (
            "an unknown dimension",
            with("dimensions", json!(["event:goal"])),
            "`dimensions[0]`",
        ),
        (
            "bounce_rate by an event dimension",
            json!({"site_id": f.site, "metrics": ["bounce_rate"], "date_range": MAIN_RANGE,
                   "dimensions": ["event:page"]}),
            "`dimensions[0]`",
        ),
        (
            "an unknown operator",
            with("filters", json!([["equals", "event:page", ["/"]]])),
            "`filters[0][0]`",
        ),
        (
            "a pattern ClickHouse cannot use",
            with("filters", json!([["matches", "event:page", ["(unclosed"]]])),
            "`filters[0][2][0]`",
        ),
        (
            "a limit too large",
            with("pagination", json!({"limit": 10_001})),
            "`pagination.limit`",
        ),
        ("an unknown field", with("period", json!("7d")), "`period`"),
    ] {
        let (status, _, answer) = stats::ask(url, Some(&f.key), &body).await;
        assert_eq!(status, 400, "{what}: {answer}");
        assert!(
            error(&answer).contains(field),
            "{what}: the error names {field}: {answer}"
        );
    }
    let (status, _, body) = post_bytes(
        &format!("{url}/api/v2/query"),
        b"{not json".to_vec(),
        &[("authorization", &format!("Bearer {}", f.key))],
    )
    .await;
    assert_eq!(status, 400, "not JSON: {body}");
}

#[tokio::test]
async fn a_key_past_its_queries_per_minute_gets_429_with_retry_after() {
    let (site, _) = site_with_key().await;
    let key = stats::prepare_site(site).await;
    let admin = start_admin(
        &format!("test-token-{}", uuid::Uuid::new_v4().simple()),
        &[("STATS_RATE_LIMIT_PER_MINUTE", "5")],
    )
    .await;
    let q = json!({"site_id": site, "metrics": ["visitors"], "date_range": MAIN_RANGE});
    for i in 1..=5 {
        let (status, _, body) = stats::ask(&admin.url, Some(&key), &q).await;
        assert_eq!(status, 200, "query {i} of 5: {body}");
    }
    let (status, headers, body) = stats::ask(&admin.url, Some(&key), &q).await;
    assert_eq!(status, 429, "the 6th query: {body}");
    let retry: u64 = headers
        .get("retry-after")
        .expect("a Retry-After header")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "Retry-After: {retry}");
}

#[tokio::test]
async fn events_sent_through_ingest_and_the_enricher_show_up_in_the_answers() {
    let p = pipeline().await;
    let f = fx().await;
    let (site, ingest_key) = site_with_key().await;
    let key = stats::prepare_site(site).await;
    // Ten to twenty minutes ago; three senders: two users and an anonymous device.
    let t0 = (now_ms() / 1000 - 20 * 60) * 1000;
    let sent = [
        ("wire-ann", "", 0, "pageview", "", "", "/"),
        ("wire-ann", "", 60, "pageview", "", "", "/pricing"),
        (
            "wire-ann",
            "",
            120,
            "custom_event",
            "signup",
            r#"{"plan":"pro"}"#,
            "/pricing",
        ),
        ("wire-ben", "", 30, "pageview", "", "", "/docs"),
        ("", "wire-device", 90, "pageview", "", "", "/"),
        ("", "wire-device", 150, "pageview", "", "", "/blog"),
    ];
    let mut events = Vec::new();
    let mut rows = Vec::new();
    for (user, anon, secs, kind, name, props, page) in sent {
        let id = uuid::Uuid::new_v4();
        let ts = t0 + secs * 1000;
        let mut e = json!({"event_id": id.to_string(), "type": kind, "pathname": page,
                           "hostname": "wire.example.com", "timestamp": ts, "screenWidth": 1280,
                           "ip_address": "81.2.69.142", "user_agent": rivulet_tests::data::CHROME});
        if !user.is_empty() {
            e["user_id"] = json!(user);
        }
        if !anon.is_empty() {
            e["anonymous_id"] = json!(anon);
        }
        if !name.is_empty() {
            e["event_name"] = json!(name);
            e["properties"] = json!(props);
        }
        events.push(e);
        // What the enricher stores, as far as the queries below read it: the visitor id
        // of the anonymous sender is some 32 hex characters, each sender's events one
        // visit (minutes apart), the place and browser of the address and user agent.
        rows.push(rivulet_common::schema::events::EventRow {
            event_id: id,
            site_id: site,
            timestamp: (ts / 1000) as u32,
            event_type: kind.into(),
            event_name: name.into(),
            properties: props.into(),
            hostname: "wire.example.com".into(),
            pathname: page.into(),
            user_id: if user.is_empty() {
                "0".repeat(32)
            } else {
                user.into()
            },
            session_id: format!("{user}{anon}"),
            anonymous_id: anon.into(),
            screen_width: 1280,
            country: "GB".into(),
            region: "GB-ENG".into(),
            city: "London".into(),
            browser: "Chrome".into(),
            browser_version: "120".into(),
            operating_system: "Windows".into(),
            operating_system_version: "10".into(),
            device_type: "Desktop".into(),
            ..Default::default()
        });
    }
    post_accepted_batch(&p.ingest.url, site, &ingest_key, &events).await;
    let sql = format!("SELECT uniqExact(event_id) FROM events WHERE site_id = {site}");
    assert_eq!(
        wait_count(&sql, events.len() as u64, Duration::from_secs(60)).await,
        events.len() as u64,
        "the events reached ClickHouse"
    );
    let ds = Dataset {
        site_id: site,
        time_zone: stats::TIME_ZONE.into(),
        rows,
        claims: Vec::new(),
    };
    // Yesterday to tomorrow in Berlin, whatever the hour.
    let today = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::get(stats::TIME_ZONE).unwrap())
        .date();
    let range = json!([
        today.yesterday().unwrap().to_string(),
        today.tomorrow().unwrap().to_string()
    ]);
    let q = |metrics: Value, dims: Value| json!({"site_id": site, "date_range": range, "metrics": metrics, "dimensions": dims});
    let queries: Vec<Named> = vec![
        ("totals".into(), q(json!(stats::OVERVIEW), json!([]))),
        (
            "event:page".into(),
            q(
                json!(["visitors", "pageviews", "percentage"]),
                json!(["event:page"]),
            ),
        ),
        (
            "event:name × event:props:plan".into(),
            q(
                json!(["events", "users"]),
                json!(["event:name", "event:props:plan"]),
            ),
        ),
        (
            "visit:entry_page".into(),
            q(
                json!(["visits", "bounce_rate", "visit_duration", "views_per_visit"]),
                json!(["visit:entry_page", "visit:exit_page"]),
            ),
        ),
        (
            "the place and the device".into(),
            q(
                json!(["visitors", "visits"]),
                json!(["visit:country", "visit:browser", "visit:screen"]),
            ),
        ),
        (
            "time:hour".into(),
            q(json!(["pageviews"]), json!(["time:hour"])),
        ),
    ];
    let failures = stats::mismatches(&f.admin.url, &key, &ds, &queries).await;
    assert!(
        failures.is_empty(),
        "the events sent through ingest and the enricher:\n\n{}",
        failures.join("\n\n")
    );
}

#[tokio::test]
async fn the_daily_rollup_answers_as_the_events_do_before_and_after_it_is_computed() {
    // A site of its own: its rollup is computed here, and stamped stale.
    let (site, _) = site_with_key().await;
    let key = stats::prepare_site(site).await;
    let ds = stats::generate(site, SEED + 1, 80, 16);
    let db = db().await;
    stats::load(&db, &ds).await;
    let queries = stats::rollup_queries(site);
    // Nothing computed: every day is read from `events`, in the rollup's shape.
    check(&ds, &key, &queries).await;

    let run = stats::compute_rollup(site).await;
    assert!(
        run["days_computed"].as_u64().unwrap() >= 40,
        "the dataset's days (2024 and 2025) are computed: {run}"
    );
    assert_eq!(run["days_waiting"], 0, "{run}");
    assert!(stats::rollup_rows(&db, site, "kind = 1").await > 0);
    let countries: u64 = db
        .client
        .query("SELECT count() FROM stats_breakdown_days WHERE site_id = ? AND dimension = 'visit:country' AND kind = 1")
        .bind(site)
        .fetch_one()
        .await
        .expect("count the breakdown's rows");
    assert!(countries > 0, "the breakdowns are computed with the days");
    assert!(
        stats::visit_rows(&db, site, "kind = 1").await > 0,
        "the visits are computed with the days"
    );
    assert!(
        stats::rollup_rows(&db, site, "kind = 2").await > 0,
        "the users' ids recur from day to day: kept as ids"
    );
    check(&ds, &key, &queries).await;

    // `users` resolves the anonymous ids' owners when it is read: a claim made after the
    // days were computed counts on them at once.
    let mut ds = ds;
    let later = rivulet_common::schema::people::ClaimRow {
        site_id: site,
        anonymous_id: "dev-x".into(),
        user_id: "dave".into(),
        trusted: 1,
        claimed_at_ms: 1_764_000_000_000,
        received_at_ms: 1_764_000_000_500,
        rank: rivulet_common::schema::people::claim_rank(true, 1_764_000_000_500),
    };
    let mut insert = db
        .client
        .insert::<rivulet_common::schema::people::ClaimRow>("person_claims")
        .await
        .expect("insert a claim");
    insert.write(&later).await.expect("write a claim");
    insert.end().await.expect("insert a claim");
    let users = |ds: &Dataset| rows(&ds.expected(&queries[0].1))[0]["metrics"][7].clone();
    let before = users(&ds);
    ds.claims.push(later);
    assert_eq!(
        users(&ds).as_u64(),
        before.as_u64().map(|n| n + 1),
        "the dataset's dev-x has events in the main range, and no owner before"
    );
    check(&ds, &key, &queries).await;

    // The answers are the rollup's: a forged newer generation of a day is what the API
    // answers for it, until an hour of the day is stamped after it.
    let now = u64::try_from(rivulet_common::epoch::now_ms() / 1000).unwrap();
    // Its persons: one user id, and an anonymous id bob owns.
    db.client
        .query(
            "INSERT INTO stats_total_days (site_id, time_zone, local_day, generation, kind, utc_day, pageviews, id_hash) \
             VALUES (?, 'Europe/Berlin', toDate('2025-10-22'), ?, 0, toDate('2025-10-22'), 0, 0), \
             (?, 'Europe/Berlin', toDate('2025-10-22'), ?, 1, toDate('2025-10-22'), 1000000, 0), \
             (?, 'Europe/Berlin', toDate('2025-10-22'), ?, 3, toDate('2025-10-22'), 0, cityHash64('forged')), \
             (?, 'Europe/Berlin', toDate('2025-10-22'), ?, 4, toDate('2025-10-22'), 0, cityHash64('dev-bob'))",
        )
        .bind(site)
        .bind(now + 100)
        .bind(site)
        .bind(now + 100)
        .bind(site)
        .bind(now + 100)
        .bind(site)
        .bind(now + 100)
        .execute()
        .await
        .expect("forge a generation");
    // (A generation counts once the breakdowns have its marker too; a breakdown by a
    // visit attribute reads the breakdowns' rows.)
    db.client
        .query(
            "INSERT INTO stats_breakdown_days (site_id, time_zone, dimension, local_day, generation, kind, value, utc_day, pageviews) \
             VALUES (?, 'Europe/Berlin', '', toDate('2025-10-22'), ?, 0, ?, toDate('2025-10-22'), 0), \
             (?, 'Europe/Berlin', 'visit:country', toDate('2025-10-22'), ?, 1, 'ZZ', toDate('2025-10-22'), 2000000), \
             (?, 'Europe/Berlin', 'event:page|event:type=pageview', toDate('2025-10-22'), ?, 1, '/zz', toDate('2025-10-22'), 3000000)",
        )
        .bind(site)
        .bind(now + 100)
        .bind(rivulet_stats::rollup::LAYOUT)
        .bind(site)
        .bind(now + 100)
        .bind(site)
        .bind(now + 100)
        .execute()
        .await
        .expect("forge a generation's breakdowns");
    // (And its visits: one visit from nowhere, with a million pageviews.)
    db.client
        .query(
            "INSERT INTO stats_visit_days (site_id, time_zone, local_day, generation, kind, visit_hash, started, country, pageviews, visitors) \
             VALUES (?, 'Europe/Berlin', toDate('2025-10-22'), ?, 0, 0, 0, '', 0, []), \
             (?, 'Europe/Berlin', toDate('2025-10-22'), ?, 1, 1, 1, 'ZZ', 4000000, [cityHash64('forged')])",
        )
        .bind(site)
        .bind(now + 100)
        .bind(site)
        .bind(now + 100)
        .execute()
        .await
        .expect("forge a generation's visits");
    let day = json!({"site_id": site, "metrics": ["pageviews"], "date_range": ["2025-10-22", "2025-10-22"]});
    let answer = |v: Value| v["results"][0]["metrics"][0].clone();
    let f = fx().await;
    let (_, _, forged) = stats::ask(&f.admin.url, Some(&key), &day).await;
    assert_eq!(answer(forged), 1_000_000);
    let mut persons = day.clone();
    persons["metrics"] = json!(["users"]);
    let (_, _, forged) = stats::ask(&f.admin.url, Some(&key), &persons).await;
    assert_eq!(answer(forged), 2, "the forged user id and dev-bob's owner");
    let mut by_country = day.clone();
    by_country["dimensions"] = json!(["visit:country"]);
    let (_, _, forged) = stats::ask(&f.admin.url, Some(&key), &by_country).await;
    assert_eq!(
        forged["results"],
        json!([{"dimensions": ["ZZ"], "metrics": [2_000_000]}]),
        "{forged}"
    );
    let mut pageview_pages = day.clone();
    pageview_pages["dimensions"] = json!(["event:page"]);
    pageview_pages["filters"] = json!([["is", "event:type", ["pageview"]]]);
    let (_, _, forged) = stats::ask(&f.admin.url, Some(&key), &pageview_pages).await;
    assert_eq!(
        forged["results"],
        json!([{"dimensions": ["/zz"], "metrics": [3_000_000]}]),
        "{forged}"
    );
    let mut from_nowhere = day.clone();
    from_nowhere["metrics"] = json!(["visitors", "visits", "pageviews"]);
    from_nowhere["filters"] = json!([["is", "visit:country", ["ZZ"]]]);
    let (_, _, forged) = stats::ask(&f.admin.url, Some(&key), &from_nowhere).await;
    assert_eq!(
        forged["results"],
        json!([{"dimensions": [], "metrics": [1, 1, 4_000_000]}]),
        "{forged}"
    );
    db.client
        .query("INSERT INTO stats_touched (site_id, hour, touched_at) VALUES (?, toDateTime(?), toDateTime(?))")
        .bind(site)
        .bind(stats::at("2025-10-22T10:00:00Z"))
        .bind(now + 200)
        .execute()
        .await
        .expect("stamp an hour");
    let (_, _, exact) = stats::ask(&f.admin.url, Some(&key), &day).await;
    assert_eq!(answer(exact), answer(ds.expected(&day)));

    // A late insert stamps an hour of the DST day: that day and those after it in a
    // range are read from `events` until computed again.
    db.client
        .query("INSERT INTO stats_touched (site_id, hour, touched_at) VALUES (?, toDateTime(?), now())")
        .bind(site)
        .bind(stats::at("2025-10-26T11:00:00Z"))
        .execute()
        .await
        .expect("stamp an hour");
    check(&ds, &key, &queries).await;
    // The Overview's cards by visit attributes as one statement: the days before the DST
    // day from the rollup, the rest from `events`, each card as it alone answers.
    let cards = stats::shared_card_mismatches(&db, &ds, site).await;
    assert!(cards.is_empty(), "{}", cards.join("\n\n"));
    // (The forged day's stamp is in the future: it waits; the DST day's days do not.)
    let again = stats::compute_rollup(site).await;
    let days = again["days_computed"].as_u64().unwrap();
    assert!(
        (1..=3).contains(&days),
        "the days that read the hour are computed again: {again}"
    );
    check(&ds, &key, &queries).await;
    let cards = stats::shared_card_mismatches(&db, &ds, site).await;
    assert!(cards.is_empty(), "{}", cards.join("\n\n"));

    // Days computed before the visits' table existed: valid, but without visits. The
    // filtered questions read them from `events` until the job fills their visits in at
    // their generation, computing nothing else again. (A running enricher's lifecycle
    // runner may fill them before this test's run of the job: either is the job.) The
    // forged day and the days its future stamp makes stale wait, and are left out: a stale
    // day is computed again whole, not filled in.
    let latest = |table: &'static str| {
        let db = db.clone();
        async move {
            db.client
                .query(&format!(
                    "SELECT toString(arraySort(groupArray((local_day, g)))) FROM (SELECT local_day, \
                     max(generation) AS g FROM {table} WHERE site_id = ? AND kind = 0 \
                     AND (local_day < toDate('2025-10-21') OR local_day > toDate('2025-10-23')) \
                     GROUP BY local_day)"
                ))
                .bind(site)
                .fetch_one::<String>()
                .await
                .expect("the latest generations")
        }
    };
    let days_before = latest("stats_total_days").await;
    assert_eq!(latest("stats_visit_days").await, days_before);
    db.client
        .query("ALTER TABLE stats_visit_days DELETE WHERE site_id = ?")
        .bind(site)
        .execute()
        .await
        .expect("delete the site's visits");
    rivulet_tests::lifecycle::mutations_done().await;
    check(&ds, &key, &queries).await;
    let filled = stats::compute_rollup(site).await;
    assert_eq!(filled["days_computed"], 0, "{filled}");
    assert_eq!(
        latest("stats_visit_days").await,
        days_before,
        "every day's visits are back at its generation: {filled}"
    );
    assert_eq!(
        latest("stats_total_days").await,
        days_before,
        "nothing computed again"
    );
    check(&ds, &key, &queries).await;
}

#[tokio::test]
async fn a_replay_of_days_in_the_rollup_is_answered_as_replayed() {
    let p = pipeline().await;
    let f = fx().await;
    let (site, ingest_key) = site_with_key().await;
    let key = stats::prepare_site(site).await;
    // Three days ago, so that the rollup computes the day: four visitors on Vivaldi and
    // four on Chrome, a pageview each, from private addresses (no geo to change).
    let day_start = (now_ms() / 86_400_000 - 3) * 86_400_000;
    let day = time::OffsetDateTime::from_unix_timestamp(day_start / 1000)
        .unwrap()
        .date()
        .to_string();
    let events: Vec<Value> = (0..8)
        .map(|i| {
            let ua = if i % 2 == 0 {
                rivulet_tests::data::VIVALDI
            } else {
                rivulet_tests::data::CHROME
            };
            json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "pageview",
                   "pathname": "/", "ip_address": format!("10.0.0.{}", 10 + i), "user_agent": ua,
                   "timestamp": day_start + 10 * 3_600_000 + i * 60_000})
        })
        .collect();
    let since = rivulet_common::epoch::now_ms() - 2000;
    post_accepted_batch(&p.ingest.url, site, &ingest_key, &events).await;
    let sql = format!("SELECT count() FROM events WHERE site_id = {site}");
    assert_eq!(wait_count(&sql, 8, Duration::from_secs(60)).await, 8);
    let by_browser = json!({"site_id": site, "metrics": ["visitors", "pageviews"],
        "dimensions": ["visit:browser"], "date_range": [day, day],
        "order_by": [["visit:browser", "asc"]]});
    let answer = || async {
        let (status, _, body) = stats::ask(&f.admin.url, Some(&key), &by_browser).await;
        assert_eq!(status, 200, "{body}");
        body["results"].clone()
    };
    let as_sent = json!([{"dimensions": ["Chrome"], "metrics": [4, 4]},
                         {"dimensions": ["Vivaldi"], "metrics": [4, 4]}]);
    assert_eq!(answer().await, as_sent);
    let run = stats::compute_rollup(site).await;
    assert!(run["days_computed"].as_u64().unwrap() >= 1, "{run}");
    let db = db().await;
    let in_rollup = |value: &'static str| {
        let db = db.clone();
        async move {
            db.client
                .query(
                    "SELECT count() FROM stats_breakdown_days \
                     WHERE site_id = ? AND dimension = 'visit:browser' AND kind = 1 AND value = ?",
                )
                .bind(site)
                .bind(value)
                .fetch_one::<u64>()
                .await
                .expect("count the breakdown's rows")
        }
    };
    assert!(in_rollup("Vivaldi").await > 0, "the day is in the rollup");
    assert_eq!(answer().await, as_sent);

    // Rules that do not know Vivaldi: the replay makes its events Chrome's.
    let dir = rivulet_tests::data::TempDir::new("stats-replay");
    dir.replace(
        "regexes.yaml",
        rivulet_tests::data::rules_without("Vivaldi"),
    );
    dir.replace("REVISION", "test-old\n");
    let rules = dir.str("regexes.yaml");
    let since = rivulet_tests::lifecycle::rfc3339(since);
    let replayed = rivulet_tests::data::run_admin_async(
        &["replay", "--site", &site.to_string(), "--since", &since],
        &[("UA_REGEXES", &rules), ("KAFKA_TOPIC_RAW", &p.lane.topic)],
    )
    .await
    .json();
    assert_eq!(replayed["rows_rewritten"], 4, "{replayed}");
    let as_replayed = json!([{"dimensions": ["Chrome"], "metrics": [8, 8]}]);
    // The replay's rows stamped their hours: the day is read from `events` at once.
    assert_eq!(answer().await, as_replayed);
    // And computed again from the replayed rows.
    let again = stats::compute_rollup(site).await;
    assert!(again["days_computed"].as_u64().unwrap() >= 1, "{again}");
    assert_eq!(answer().await, as_replayed);
    // The older generation is deleted by a mutation after the new one is in place.
    Pace::within(Duration::from_secs(60))
        .every(Duration::from_millis(250))
        .poll_until("the older generation's Vivaldi rows deleted", || async {
            match in_rollup("Vivaldi").await {
                0 => Ok(()),
                n => Err(n),
            }
        })
        .await;
    assert!(in_rollup("Chrome").await > 0, "the new generation");
}

#[tokio::test]
async fn an_erased_person_disappears_from_every_figure() {
    let _pipeline = pipeline().await;
    // A site of its own: the other tests read theirs meanwhile.
    let (site, _) = site_with_key().await;
    let key = stats::prepare_site(site).await;
    let ds = stats::generate(site, SEED, 120, 24);
    stats::load(&db().await, &ds).await;
    let queries = [stats::all_queries(site), stats::rollup_queries(site)].concat();
    check(&ds, &key, &queries[..1]).await;
    // The rollup holds the person too: their user id, hashed, on the days they came.
    stats::compute_rollup(site).await;
    let db = db().await;
    let their_rows = format!("id_hash = cityHash64('{ERASED_USER}')");
    assert!(stats::rollup_rows(&db, site, &their_rows).await > 0);
    // And in their visits' visitor ids.
    let their_visits = format!("has(visitors, cityHash64('{ERASED_USER}'))");
    assert!(stats::visit_rows(&db, site, &their_visits).await > 0);
    // And their anonymous ids (claimed, won or lost), kept for `users`.
    let their_anonymous_rows = format!(
        "kind = {} AND id_hash IN (cityHash64('dev-alice-1'), cityHash64('dev-alice-2'), cityHash64('dev-shared'))",
        rivulet_stats::rollup::KIND_ANONYMOUS
    );
    assert!(stats::rollup_rows(&db, site, &their_anonymous_rows).await > 0);

    let erased = ds.events_of_person(ERASED_USER);
    assert!(erased > 20, "the person has {erased} events");
    let receipt = rivulet_tests::data::run_admin_async(
        &[
            "erase",
            "--site",
            &site.to_string(),
            "--user-id",
            ERASED_USER,
            "--wait",
            "--timeout",
            "600",
        ],
        &[],
    )
    .await
    .json();
    assert_eq!(receipt["state"], "done", "{receipt}");
    assert_eq!(
        receipt["rows_removed"], erased,
        "the receipt counts the person's events: {receipt}"
    );
    let after = ds.without_person(ERASED_USER);
    let before_users = rows(&ds.expected(&queries[0].1))[0]["metrics"][7].clone();
    let after_users = rows(&after.expected(&queries[0].1))[0]["metrics"][7].clone();
    assert_eq!((before_users, after_users), (json!(3), json!(2)));
    assert_eq!(
        stats::rollup_rows(&db, site, &their_rows).await,
        0,
        "the rollup's rows of the person's days went with their events"
    );
    assert_eq!(
        stats::rollup_rows(&db, site, &their_anonymous_rows).await,
        0,
        "and the rows of their anonymous ids"
    );
    assert_eq!(
        stats::visit_rows(&db, site, &their_visits).await,
        0,
        "and their visits"
    );
    check(&after, &key, &queries).await;
    // Computed again without them.
    stats::compute_rollup(site).await;
    assert_eq!(stats::rollup_rows(&db, site, &their_rows).await, 0);
    assert_eq!(stats::visit_rows(&db, site, &their_visits).await, 0);
    assert_eq!(
        stats::rollup_rows(&db, site, &their_anonymous_rows).await,
        0
    );
    check(&after, &key, &queries).await;
}
