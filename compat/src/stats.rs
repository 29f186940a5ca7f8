//! The Stats API's statements in the compatibility test: a fixed list of v2 requests
//! (`POST /api/v2/query`), planned by the product's own engine (`rivulet_stats::plan`)
//! for the dataset's sites at the manifest's `now`, each of their statements inlined as
//! the server receives it (`Statement::inline`, checked to be the text the `clickhouse`
//! crate's `query.bind()` makes, as rivulet-admin binds them).
//!
//! The requests cover every shape of `stats/src/events_source.rs`: flat (event metrics
//! and dimensions, a custom property, time buckets, `percentage`), users (joined to
//! `person_claims`), joined (a visit dimension or filter next to event metrics), per
//! visit (`bounce_rate` by time, a filter mixing visit and event), by visit (visit
//! dimensions only, with visit and event filters), web vitals' p75, every filter
//! operator, `and`/`or`/`not`, order_by, pagination, total_rows and comparisons (without
//! dimensions and restricted to given rows), in UTC and in Europe/Berlin. The dataset's
//! events are the 36 hours before `now`: every range here holds some of them.

use jiff::tz::TimeZone;
use jiff::Timestamp;
use rivulet_stats::{FirstEvent, Request, Row, SiteContext, Statement};
use serde_json::{json, Value};

/// One request of the list.
pub struct StatsCase {
    pub name: &'static str,
    pub site_id: u32,
    /// The site's time zone (site 2 of the dataset has Europe/Berlin, site 1 none: UTC).
    pub time_zone: &'static str,
    pub request: Value,
    /// For a request with comparisons and dimensions: the main rows the comparison is
    /// restricted to (the values of its dimensions that are not time). With no
    /// dimensions, the comparison is planned for no main rows.
    pub comparison_rows: Vec<Vec<&'static str>>,
}

/// `[local date of now - 3 days, local date of now]`: every event of the dataset, in
/// the site's zone.
fn days(now: u32, zone: &str) -> Value {
    let tz = TimeZone::get(zone).expect("a time zone");
    let date = |t: u32| {
        Timestamp::from_second(i64::from(t))
            .expect("a time")
            .to_zoned(tz.clone())
            .date()
            .to_string()
    };
    json!([date(now - 3 * 86_400), date(now)])
}

/// The 12 hours before `now` (to its last second), as two instants: its previous period
/// (the 12 hours before) has events too.
fn last_12_hours(now: u32) -> Value {
    let iso = |t: u32| {
        Timestamp::from_second(i64::from(t))
            .expect("a time")
            .to_string()
    };
    json!([iso(now - 12 * 3600), iso(now - 1)])
}

/// The requests, for the dataset made at `now`.
pub fn cases(now: u32) -> Vec<StatsCase> {
    const UTC: &str = "UTC";
    const BERLIN: &str = "Europe/Berlin";
    let case = |name, site_id, time_zone: &'static str, mut request: Value| {
        request["site_id"] = json!(site_id);
        if request.get("date_range").is_none() {
            request["date_range"] = days(now, time_zone);
        }
        StatsCase {
            name,
            site_id,
            time_zone,
            request,
            comparison_rows: Vec::new(),
        }
    };
    let compared = |mut c: StatsCase, rows: &[&[&'static str]]| {
        c.request["date_range"] = last_12_hours(now);
        c.request["include"] = json!({"comparisons": {"mode": "previous_period"}});
        c.comparison_rows = rows.iter().map(|r| r.to_vec()).collect();
        c
    };
    vec![
        // flat: event metrics, no join.
        case(
            "flat_totals",
            1,
            UTC,
            json!({"metrics": ["visitors", "visits", "pageviews", "events"]}),
        ),
        case(
            "flat_page_ordered_paged",
            1,
            UTC,
            json!({"metrics": ["visitors", "pageviews", "events"], "dimensions": ["event:page"],
                   "order_by": [["pageviews", "desc"]], "pagination": {"limit": 5, "offset": 2},
                   "include": {"total_rows": true}}),
        ),
        case(
            "flat_name_percentage",
            1,
            UTC,
            json!({"metrics": ["events", "visitors", "percentage"], "dimensions": ["event:name"],
                   "order_by": [["event:name", "asc"]]}),
        ),
        case(
            "flat_hostname_type_day",
            1,
            UTC,
            json!({"metrics": ["visits", "events"],
                   "dimensions": ["event:hostname", "event:type", "time:day"]}),
        ),
        case(
            "flat_week",
            1,
            UTC,
            json!({"metrics": ["visitors", "pageviews"], "dimensions": ["time:week"]}),
        ),
        case(
            "flat_month_berlin",
            2,
            BERLIN,
            json!({"metrics": ["visitors", "events"], "dimensions": ["time:month"]}),
        ),
        case(
            "flat_hour_berlin",
            2,
            BERLIN,
            json!({"metrics": ["visitors", "pageviews", "events"], "dimensions": ["time:hour"]}),
        ),
        // A custom property: strings, and a number and a string of one event.
        case(
            "prop_text",
            1,
            UTC,
            json!({"metrics": ["events", "visitors"], "dimensions": ["event:props:text"]}),
        ),
        case(
            "prop_amount_currency",
            1,
            UTC,
            json!({"metrics": ["events"], "dimensions": ["event:props:amount", "event:props:currency"],
                   "filters": [["is", "event:name", ["purchase", "signup"]]]}),
        ),
        // Filters of every operator, on the event.
        case(
            "filters_is_matches_not",
            1,
            UTC,
            json!({"metrics": ["visitors", "pageviews"], "dimensions": ["event:page"],
                   "filters": [["is", "event:page", ["/", "/pricing", "/blog", "/blog/über-uns"]],
                               ["matches_not", "event:page", ["^/blog$"]]]}),
        ),
        case(
            "filters_contains_ci_is_not",
            1,
            UTC,
            json!({"metrics": ["events"], "dimensions": ["event:page"],
                   "filters": [["contains", "event:page", ["PRODUCTS", "Cart"], {"case_sensitive": false}],
                               ["is_not", "event:name", ["download"]]]}),
        ),
        case(
            "filters_matches_contains_not",
            1,
            UTC,
            json!({"metrics": ["visitors", "events"], "dimensions": ["event:name"],
                   "filters": [["matches", "event:page", ["^/(docs|blog)/"]],
                               ["contains_not", "event:page", ["api"]]]}),
        ),
        // users: events joined to their person.
        case(
            "users_by_day",
            1,
            UTC,
            json!({"metrics": ["users", "visitors"], "dimensions": ["time:day"]}),
        ),
        case(
            "users_by_country",
            1,
            UTC,
            json!({"metrics": ["users", "visits"], "dimensions": ["visit:country"]}),
        ),
        // joined: a visit filter and dimension next to event metrics.
        case(
            "joined_page_visit_filters",
            1,
            UTC,
            json!({"metrics": ["visitors", "pageviews"], "dimensions": ["event:page"],
                   "filters": [["is_not", "visit:country", ["(not set)"]],
                               ["is", "visit:device", ["Desktop", "Mobile"]]]}),
        ),
        case(
            "joined_time_screen_berlin",
            2,
            BERLIN,
            json!({"metrics": ["visits", "visitors"], "dimensions": ["time", "visit:screen"]}),
        ),
        // per visit, joined: visit measures by time, and a filter mixing visit and event.
        case(
            "per_visit_by_day",
            1,
            UTC,
            json!({"metrics": ["visitors", "bounce_rate", "visit_duration", "views_per_visit"],
                   "dimensions": ["time:day"]}),
        ),
        case(
            "per_visit_by_day_berlin",
            2,
            BERLIN,
            json!({"metrics": ["visits", "bounce_rate"], "dimensions": ["time:day"]}),
        ),
        case(
            "per_visit_mixed_or_not",
            1,
            UTC,
            json!({"metrics": ["visitors", "visit_duration"], "dimensions": ["visit:channel"],
                   "filters": [["or", [["contains", "visit:source", ["google"]],
                                       ["not", ["matches", "event:page", ["^/blog"]]]]]]}),
        ),
        // by visit: visit dimensions only, one GROUP BY session_id.
        case(
            "by_visit_entry_page",
            1,
            UTC,
            json!({"metrics": ["visitors", "visits", "bounce_rate", "visit_duration", "views_per_visit"],
                   "dimensions": ["visit:entry_page"], "include": {"total_rows": true},
                   "pagination": {"limit": 10, "offset": 0}}),
        ),
        case(
            "by_visit_source",
            1,
            UTC,
            json!({"metrics": ["visits", "pageviews", "events", "bounce_rate"],
                   "dimensions": ["visit:source"], "order_by": [["visits", "desc"]]}),
        ),
        case(
            "by_visit_country_percentage",
            1,
            UTC,
            json!({"metrics": ["visitors", "percentage", "bounce_rate", "visit_duration"],
                   "dimensions": ["visit:country"]}),
        ),
        case(
            "by_visit_browser_filters",
            1,
            UTC,
            json!({"metrics": ["visits", "bounce_rate", "visit_duration"], "dimensions": ["visit:browser"],
                   "filters": [["is", "visit:browser", ["Chrome", "Firefox", "Safari"]],
                               ["matches", "event:page", ["^/(pricing|products)"]]]}),
        ),
        case(
            "by_visit_exit_page_berlin",
            2,
            BERLIN,
            json!({"metrics": ["visits", "views_per_visit"], "dimensions": ["visit:exit_page"],
                   "filters": [["contains_not", "visit:referrer", ["bing"]]]}),
        ),
        // Web vitals' p75.
        case(
            "vitals_totals",
            1,
            UTC,
            json!({"metrics": ["lcp_p75", "cls_p75", "inp_p75", "fcp_p75", "ttfb_p75"]}),
        ),
        case(
            "vitals_by_page",
            1,
            UTC,
            json!({"metrics": ["lcp_p75", "visitors"], "dimensions": ["event:page"],
                   "order_by": [["lcp_p75", "desc"]]}),
        ),
        case(
            "vitals_per_visit_device",
            1,
            UTC,
            json!({"metrics": ["bounce_rate", "lcp_p75"], "dimensions": ["visit:device"]}),
        ),
        // Comparisons (the previous 12 hours).
        compared(
            case(
                "compare_overview",
                1,
                UTC,
                json!({"metrics": ["visitors", "visits", "pageviews", "views_per_visit",
                                   "bounce_rate", "visit_duration"]}),
            ),
            &[],
        ),
        compared(
            case(
                "compare_country",
                1,
                UTC,
                json!({"metrics": ["visitors", "bounce_rate"], "dimensions": ["visit:country"]}),
            ),
            &[&["DE"], &["US"], &["GB"], &[""]],
        ),
        compared(
            case(
                "compare_page_berlin",
                2,
                BERLIN,
                json!({"metrics": ["visitors", "pageviews"], "dimensions": ["event:page"]}),
            ),
            &[&["/"], &["/pricing"], &["/blog/über-uns"]],
        ),
    ]
}

fn statement_json(case: &StatsCase, st: &Statement) -> Result<Value, String> {
    // What rivulet-admin sends (admin/src/query.rs binds each value through the crate) is
    // the text run here.
    let mut bound = clickhouse::Client::default().query(&st.sql);
    for b in &st.binds {
        bound = bound.bind(b);
    }
    let sql = st.inline();
    if bound.sql_display().to_string() != sql {
        return Err(format!(
            "stats case {} {}: the crate's binding gives other text than Statement::inline:\n{}\n{sql}",
            case.name,
            st.name,
            bound.sql_display()
        ));
    }
    Ok(json!({
        "name": format!("{} {}", case.name, st.name),
        "case": case.name,
        "statement": st.name,
        "site_id": case.site_id,
        "time_zone": case.time_zone,
        "request": case.request,
        "sql": sql,
        "settings": st.settings.iter().map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<serde_json::Map<_, _>>(),
        "columns": st.columns,
        // The main statement orders its rows totally (every dimension is a key), and so
        // does the cards' shared one; the others' rows come in no defined order (or are
        // one row).
        "ordered": st.name == "stats_main" || st.name == "stats_shared",
    }))
}

/// Every statement of every case, planned at `now`, as the manifest's JSON.
pub fn statements(now: u32) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for case in cases(now) {
        let request = Request::from_value(case.request.clone())
            .map_err(|e| format!("stats case {}: {e}", case.name))?;
        let site = SiteContext {
            site_id: case.site_id,
            time_zone: case.time_zone.into(),
            first_event: FirstEvent::NotLoaded,
            rollup: rivulet_stats::RollupState::NotLoaded,
        };
        let plan = rivulet_stats::plan(&request, &site, i64::from(now))
            .map_err(|e| format!("stats case {}: {e}", case.name))?;
        out.push(statement_json(&case, plan.main())?);
        if let Some(st) = plan.total_rows() {
            out.push(statement_json(&case, st)?);
        }
        if plan.wants_comparison() {
            let rows: Vec<Row> = case
                .comparison_rows
                .iter()
                .map(|dims| Row {
                    dimensions: dims.iter().map(|d| d.to_string()).collect(),
                    metrics: Vec::new(),
                })
                .collect();
            let st = plan
                .comparison(&rows)
                .ok_or_else(|| format!("stats case {}: no comparison statement", case.name))?;
            out.push(statement_json(&case, &st)?);
        }
    }
    out.extend(rollup_statements(now)?);
    // The statement `date_range: "all"` needs first (`Request::needs_first_event`).
    for (site_id, time_zone) in [(1, "UTC"), (2, "Europe/Berlin")] {
        let case = StatsCase {
            name: "first_event",
            site_id,
            time_zone,
            request: json!({"site_id": site_id, "metrics": ["visitors"], "date_range": "all"}),
            comparison_rows: Vec::new(),
        };
        let mut st = statement_json(&case, &rivulet_stats::first_event_statement(site_id))?;
        st["name"] = json!(format!("first_event stats_first_event (site {site_id})"));
        out.push(st);
    }
    Ok(out)
}

/// The daily rollup's statements (`stats/src/rollup.rs`), for both sites: the stale days
/// a query reads first; the totals and series planned with every day stale (all read
/// from `events` through the rollup's own SQL) and with none (all read from
/// `stats_total_days`); and what the job computes for the days.
fn rollup_statements(now: u32) -> Result<Vec<Value>, String> {
    use rivulet_stats::rollup::{self, Days, RollupSource, RollupState};
    use rivulet_stats::visits::{self, VisitSource};
    let mut out = Vec::new();
    let planner = rivulet_stats::Planner::default()
        .with_source(std::sync::Arc::new(RollupSource))
        .with_source(std::sync::Arc::new(VisitSource));
    for (site_id, time_zone) in [(1u32, "UTC"), (2, "Europe/Berlin")] {
        let range = days(now, time_zone);
        let dates: Vec<jiff::civil::Date> = {
            let first: jiff::civil::Date = range[0]
                .as_str()
                .unwrap_or_default()
                .parse()
                .map_err(|e| format!("{e}"))?;
            (0..4).map(|i| first + jiff::Span::new().days(i)).collect()
        };
        let metrics = json!([
            "visitors",
            "visits",
            "pageviews",
            "views_per_visit",
            "bounce_rate",
            "visit_duration",
            "events"
        ]);
        // The statements of the site rather than of one request.
        let site_case = StatsCase {
            name: "rollup",
            site_id,
            time_zone,
            request: json!({"site_id": site_id}),
            comparison_rows: Vec::new(),
        };
        // Every day stale; or only the last (the others read from `stats_total_days`, which
        // this dataset leaves empty: the statement's shape is what is checked there).
        for (label, stale) in [
            ("stale", dates.clone()),
            ("last day stale", dates[3..].to_vec()),
        ] {
            for (name, extra) in [
                ("totals", json!({})),
                ("by day", json!({"dimensions": ["time:day"]})),
                (
                    "by week, previous period",
                    json!({"dimensions": ["time:week"], "include": {"comparisons": {"mode": "previous_period"}}}),
                ),
                ("by month", json!({"dimensions": ["time:month"]})),
                (
                    "by source",
                    json!({"dimensions": ["visit:source"], "include": {"total_rows": true}}),
                ),
                (
                    "by entry page, previous period",
                    json!({"dimensions": ["visit:entry_page"], "include": {"comparisons": {"mode": "previous_period"}}}),
                ),
                (
                    "pageview pages, previous period",
                    json!({"metrics": ["visitors", "pageviews", "percentage"], "dimensions": ["event:page"],
                           "filters": [["is", "event:type", ["pageview"]]],
                           "include": {"comparisons": {"mode": "previous_period"}}}),
                ),
                (
                    "custom event names",
                    json!({"metrics": ["visitors", "events", "percentage"], "dimensions": ["event:name"],
                           "filters": [["is", "event:type", ["custom_event"]]],
                           "include": {"total_rows": true}}),
                ),
                (
                    "countries, visitors and percentage",
                    json!({"metrics": ["visitors", "percentage"], "dimensions": ["visit:country"]}),
                ),
                (
                    "totals with users",
                    json!({"metrics": ["visitors", "users", "bounce_rate"]}),
                ),
                (
                    "users by day, previous period",
                    json!({"metrics": ["users", "visitors"], "dimensions": ["time:day"],
                           "include": {"comparisons": {"mode": "previous_period"}}}),
                ),
            ] {
                let mut request =
                    json!({"site_id": site_id, "metrics": metrics, "date_range": range});
                request
                    .as_object_mut()
                    .unwrap()
                    .extend(extra.as_object().unwrap().clone());
                let case = StatsCase {
                    name: "rollup",
                    site_id,
                    time_zone,
                    request: request.clone(),
                    comparison_rows: Vec::new(),
                };
                let site = SiteContext {
                    site_id,
                    time_zone: time_zone.into(),
                    first_event: FirstEvent::NotLoaded,
                    rollup: RollupState::Stale {
                        days: stale.clone(),
                        visits_missing: Vec::new(),
                    },
                };
                let req =
                    Request::from_value(request).map_err(|e| format!("rollup {name}: {e}"))?;
                let plan = planner
                    .plan(&req, &site, i64::from(now))
                    .map_err(|e| format!("rollup {name}: {e}"))?;
                if plan.source() != rollup::SOURCE_NAME {
                    return Err(format!("rollup {name}: planned on {}", plan.source()));
                }
                let mut st = statement_json(&case, plan.main())?;
                st["name"] = json!(format!("rollup {label} {name} (site {site_id})"));
                out.push(st);
                if let Some(t) = plan.total_rows() {
                    let mut st = statement_json(&case, t)?;
                    st["name"] =
                        json!(format!("rollup {label} {name} total_rows (site {site_id})"));
                    out.push(st);
                }
                if let Some(c) = plan.comparison(&[]) {
                    let mut st = statement_json(&case, &c)?;
                    st["name"] =
                        json!(format!("rollup {label} {name} comparison (site {site_id})"));
                    out.push(st);
                }
            }
            // Filtered by visit attributes: the rollup's visits, the days stale or only
            // without their visits.
            let german_chrome = json!([["is", "visit:country", ["DE"]], ["is", "visit:browser", ["Chrome"], {"case_sensitive": false}]]);
            for (name, extra) in [
                ("visits: totals", json!({"filters": german_chrome})),
                (
                    "visits: by week, a tree",
                    json!({"dimensions": ["time:week"], "filters": [["or", [["is", "visit:device", ["Desktop"]], ["not", ["matches", "visit:entry_page", ["^/blog"]]]]]]}),
                ),
                (
                    "visits: pageview pages, percentage, previous period",
                    json!({"metrics": ["visitors", "pageviews", "percentage"], "dimensions": ["event:page"],
                           "filters": [["is", "visit:country", ["DE"]], ["is", "event:type", ["pageview"]]],
                           "include": {"comparisons": {"mode": "previous_period"}, "total_rows": true}}),
                ),
                (
                    "visits: pages",
                    json!({"metrics": ["visitors", "pageviews", "events"], "dimensions": ["event:page"],
                           "filters": german_chrome}),
                ),
                (
                    "visits: by source, percentage, previous period",
                    json!({"metrics": ["visitors", "visits", "bounce_rate", "visit_duration", "percentage"],
                           "dimensions": ["visit:source"], "filters": german_chrome,
                           "include": {"comparisons": {"mode": "previous_period"}, "total_rows": true}}),
                ),
            ] {
                let mut request =
                    json!({"site_id": site_id, "metrics": metrics, "date_range": range});
                request
                    .as_object_mut()
                    .unwrap()
                    .extend(extra.as_object().unwrap().clone());
                let case = StatsCase {
                    name: "rollup",
                    site_id,
                    time_zone,
                    request: request.clone(),
                    comparison_rows: Vec::new(),
                };
                for (missing_label, (stale, missing)) in [
                    ("", (stale.clone(), Vec::new())),
                    (" visits missing", (Vec::new(), stale.clone())),
                ] {
                    let site = SiteContext {
                        site_id,
                        time_zone: time_zone.into(),
                        first_event: FirstEvent::NotLoaded,
                        rollup: RollupState::Stale {
                            days: stale,
                            visits_missing: missing,
                        },
                    };
                    let req = Request::from_value(request.clone())
                        .map_err(|e| format!("rollup {name}: {e}"))?;
                    let plan = planner
                        .plan(&req, &site, i64::from(now))
                        .map_err(|e| format!("rollup {name}: {e}"))?;
                    if plan.source() != visits::SOURCE_NAME {
                        return Err(format!("rollup {name}: planned on {}", plan.source()));
                    }
                    let label = format!("{label}{missing_label}");
                    let mut st = statement_json(&case, plan.main())?;
                    st["name"] = json!(format!("rollup {label} {name} (site {site_id})"));
                    out.push(st);
                    if let Some(t) = plan.total_rows() {
                        let mut st = statement_json(&case, t)?;
                        st["name"] =
                            json!(format!("rollup {label} {name} total_rows (site {site_id})"));
                        out.push(st);
                    }
                    if let Some(c) = plan.comparison(&[]) {
                        let mut st = statement_json(&case, &c)?;
                        st["name"] =
                            json!(format!("rollup {label} {name} comparison (site {site_id})"));
                        out.push(st);
                    }
                }
            }
            // The dashboard's cards by visit attributes, as the one statement they share.
            let site = SiteContext {
                site_id,
                time_zone: time_zone.into(),
                first_event: FirstEvent::NotLoaded,
                rollup: RollupState::Stale {
                    days: stale.clone(),
                    visits_missing: Vec::new(),
                },
            };
            let cards: Vec<rivulet_stats::QueryPlan> = ["visit:channel", "visit:country", "visit:browser"]
                .iter()
                .map(|d| {
                    let request = json!({"site_id": site_id, "metrics": ["visitors"], "date_range": range,
                                         "dimensions": [d], "pagination": {"limit": 10}});
                    let req = Request::from_value(request).map_err(|e| format!("cards: {e}"))?;
                    planner
                        .plan(&req, &site, i64::from(now))
                        .map_err(|e| format!("cards: {e}"))
                })
                .collect::<Result<_, String>>()?;
            let refs: Vec<&rivulet_stats::QueryPlan> = cards.iter().collect();
            let shared = rivulet_stats::share_main(&refs)
                .ok_or_else(|| "the cards by visit attributes share no statement".to_string())?;
            let mut st = statement_json(&site_case, shared.statement())?;
            st["name"] = json!(format!("rollup {label} shared cards (site {site_id})"));
            out.push(st);
        }
        let case = site_case;
        let site = SiteContext {
            site_id,
            time_zone: time_zone.into(),
            first_event: FirstEvent::NotLoaded,
            rollup: RollupState::NotLoaded,
        };
        let state = rollup::state_statement(&site).map_err(|e| e.to_string())?;
        let mut st = statement_json(&case, &state)?;
        st["name"] = json!(format!("rollup state (site {site_id})"));
        out.push(st);
        let zone = rivulet_stats::date_range::Zone::new(time_zone).map_err(|e| e.to_string())?;
        let span = Days::literal(&zone, dates[0], dates[3]).map_err(|e| e.to_string())?;
        // Dates and the hash as the dimensions the check compares as text, the counts as
        // its numbers.
        let counts = &rollup::ROW_COLUMNS[2..15];
        let mut rows = rivulet_stats::sql::sql(
            "SELECT toString(local_day) AS d0, toString(utc_day) AS d1, toString(kind) AS d2, \
             toString(id_hash) AS d3",
        );
        for c in counts {
            rows.push(&format!(", {c}"));
        }
        rows.push(" FROM (")
            .append(&rollup::rows(
                site_id,
                &zone,
                &span,
                true,
                rollup::VisitMeasures::Computed,
            ))
            .push(")");
        let job = Statement {
            name: "stats_rollup_rows",
            sql: rows.text().to_string(),
            binds: rows.binds().to_vec(),
            settings: Vec::new(),
            columns: ["d0", "d1", "d2", "d3"]
                .iter()
                .map(|c| c.to_string())
                .chain(counts.iter().map(|c| c.to_string()))
                .collect(),
        };
        let mut st = statement_json(&case, &job)?;
        st["name"] = json!(format!("rollup job rows (site {site_id})"));
        out.push(st);
        let mut rows = rivulet_stats::sql::sql(
            "SELECT toString(local_day) AS d0, toString(utc_day) AS d1, toString(kind) AS d2, \
             toString(id_hash) AS d3, dimension AS d4, value AS d5",
        );
        for c in counts {
            rows.push(&format!(", {c}"));
        }
        rows.push(" FROM (")
            .append(&rollup::breakdown_rows(
                site_id,
                &zone,
                &span,
                &rollup::breakdown_dimensions(),
                rollup::VisitMeasures::Computed,
            ))
            .push(")");
        let job = Statement {
            name: "stats_rollup_breakdown_rows",
            sql: rows.text().to_string(),
            binds: rows.binds().to_vec(),
            settings: Vec::new(),
            columns: ["d0", "d1", "d2", "d3", "d4", "d5"]
                .iter()
                .map(|c| c.to_string())
                .chain(counts.iter().map(|c| c.to_string()))
                .collect(),
        };
        let mut st = statement_json(&case, &job)?;
        st["name"] = json!(format!("rollup job breakdown rows (site {site_id})"));
        out.push(st);
        // The visits' rows: the day, the visit, whether it started, its attributes and
        // its visitor ids as text; its counts and measures as numbers.
        let texts: Vec<String> = [
            "toString(local_day)",
            "toString(visit_hash)",
            "toString(started)",
        ]
        .iter()
        .map(|c| c.to_string())
        .chain(visits::attribute_columns().map(String::from))
        .chain([
            "toString(arraySort(visitors))".to_string(),
            "toString(arraySort(event_pages))".to_string(),
            "toString(arraySort(event_visitors))".to_string(),
        ])
        .collect();
        let counts = [
            "pageviews",
            "events",
            "views",
            "bounce",
            "duration",
            "arraySum(event_pageviews)",
        ];
        let mut rows = rivulet_stats::sql::Sql::new();
        rows.push("SELECT ");
        for (i, t) in texts.iter().enumerate() {
            rows.push(&format!("{t} AS d{i}, "));
        }
        for (i, c) in counts.iter().enumerate() {
            let sep = if i > 0 { ", " } else { "" };
            rows.push(&format!("{sep}{c} AS n{i}"));
        }
        rows.push(" FROM (")
            .append(&visits::visit_rows(site_id, &zone, &span))
            .push(")");
        let job = Statement {
            name: "stats_rollup_visit_rows",
            sql: rows.text().to_string(),
            binds: rows.binds().to_vec(),
            settings: Vec::new(),
            columns: (0..texts.len())
                .map(|i| format!("d{i}"))
                .chain((0..counts.len()).map(|i| format!("n{i}")))
                .collect(),
        };
        let mut st = statement_json(&case, &job)?;
        st["name"] = json!(format!("rollup job visit rows (site {site_id})"));
        out.push(st);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_plans_and_the_list_covers_every_statement_kind() {
        let all = statements(crate::FIXED_NOW).expect("every case plans");
        for kind in [
            "stats_main",
            "stats_total_rows",
            "stats_comparison",
            "stats_first_event",
        ] {
            assert!(all.iter().any(|s| s["statement"] == kind), "{kind}");
        }
        let sql: Vec<&str> = all.iter().map(|s| s["sql"].as_str().unwrap()).collect();
        // The shapes of events_source.rs: by visit (HAVING on the visit), joined,
        // users (person_claims), p75, a restricted comparison.
        for shape in [
            "GROUP BY session_id HAVING g_counted > 0",
            "ANY LEFT JOIN",
            "person_claims",
            "arraySort(arrayMap(",
            " IN ('DE', 'US', 'GB', '')",
            "Europe/Berlin",
            "positionCaseInsensitiveUTF8(",
            "NOT (match(",
        ] {
            assert!(sql.iter().any(|s| s.contains(shape)), "{shape}");
        }
    }
}
