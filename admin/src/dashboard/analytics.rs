//! A site's Overview: the dashboard a site owner reads. Every figure comes from the Stats
//! API's engine (`crate::query`), asked what an API client would ask (`view::View::request`),
//! so what the page shows is what `POST /api/v2/query` answers. The page's whole state is
//! in its URL (`view`): the period, the comparison, the chart's metric and interval, the
//! filters, and each card's tab; every control is a link or a GET form, so it works
//! without JavaScript, and a view can be bookmarked and shared.

use super::layout::{self, SiteTab};
use super::respond::PageError;
use super::session::SessionCtx;
use super::view::{self, Compare, Filter, Interval, Period, Query, View, METRICS, OPERATORS};
use super::{chart, AppState};
use crate::error::AdminError;
use crate::query::Together;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use maud::{html, Markup};
use rivulet_common::registry::Site;
use rivulet_stats::response::ResultRow;
use rivulet_stats::Request;
use serde_json::{json, Value};

/// A card of breakdowns: its name, its URL key, and its tabs (dimension, label, the
/// column's heading, the metrics the tab shows beside visitors, and a filter it adds).
pub struct Card {
    pub key: &'static str,
    pub title: &'static str,
    pub tabs: &'static [Tab],
}

pub struct Tab {
    pub key: &'static str,
    pub label: &'static str,
    pub dimension: &'static str,
    pub heading: &'static str,
    /// The metrics shown beside visitors, each with its column's heading.
    pub more: &'static [(&'static str, &'static str)],
    /// Events of this type only (`event:type`).
    pub only_type: Option<&'static str>,
}

const fn tab(
    key: &'static str,
    label: &'static str,
    dimension: &'static str,
    heading: &'static str,
) -> Tab {
    Tab {
        key,
        label,
        dimension,
        heading,
        more: &[],
        only_type: None,
    }
}

pub const CARDS: [Card; 5] = [
    Card {
        key: "sources",
        title: "Sources",
        tabs: &[
            tab("channel", "Channels", "visit:channel", "Channel"),
            tab("source", "Referrers", "visit:source", "Source"),
            tab("utm_source", "UTM source", "visit:utm_source", "Source"),
            tab("utm_medium", "Medium", "visit:utm_medium", "Medium"),
            tab("utm_campaign", "Campaign", "visit:utm_campaign", "Campaign"),
            tab("utm_content", "Content", "visit:utm_content", "Content"),
            tab("utm_term", "Term", "visit:utm_term", "Term"),
        ],
    },
    Card {
        key: "pages",
        title: "Pages",
        tabs: &[
            Tab {
                more: &[("pageviews", "Pageviews")],
                only_type: Some("pageview"),
                ..tab("page", "Top pages", "event:page", "Page")
            },
            tab("entry", "Entry pages", "visit:entry_page", "Entry page"),
            tab("exit", "Exit pages", "visit:exit_page", "Exit page"),
        ],
    },
    Card {
        key: "places",
        title: "Places",
        tabs: &[
            tab("country", "Countries", "visit:country", "Country"),
            tab("region", "Regions", "visit:region", "Region"),
            tab("city", "Cities", "visit:city", "City"),
        ],
    },
    Card {
        key: "devices",
        title: "Devices",
        tabs: &[
            tab("browser", "Browsers", "visit:browser", "Browser"),
            tab(
                "browser_version",
                "Browser versions",
                "visit:browser_version",
                "Version",
            ),
            tab("os", "Operating systems", "visit:os", "System"),
            tab("os_version", "OS versions", "visit:os_version", "Version"),
            tab("device", "Device types", "visit:device", "Device"),
            tab("screen", "Screen sizes", "visit:screen", "Screen"),
        ],
    },
    Card {
        key: "events",
        title: "Events",
        tabs: &[
            Tab {
                more: &[("events", "Events")],
                only_type: Some("custom_event"),
                ..tab("name", "Custom events", "event:name", "Event")
            },
            Tab {
                more: &[("events", "Events")],
                ..tab("type", "Event types", "event:type", "Type")
            },
            // Per page, from the `performance` events: how many page loads were measured,
            // and the 75th percentile of each Core Web Vital.
            Tab {
                more: &[
                    ("events", "Page loads"),
                    ("lcp_p75", "LCP p75 (ms)"),
                    ("cls_p75", "CLS p75"),
                    ("inp_p75", "INP p75 (ms)"),
                ],
                only_type: Some("performance"),
                ..tab("vitals", "Web vitals", "event:page", "Page")
            },
        ],
    },
];

/// Every dimension a filter may name, with its label (the filter menu and the chips).
pub const FILTER_DIMENSIONS: [(&str, &str); 24] = [
    ("event:page", "Page"),
    ("event:name", "Event name"),
    ("event:type", "Event type"),
    ("event:hostname", "Hostname"),
    ("visit:entry_page", "Entry page"),
    ("visit:exit_page", "Exit page"),
    ("visit:source", "Source"),
    ("visit:referrer", "Referrer"),
    ("visit:channel", "Channel"),
    ("visit:utm_source", "UTM source"),
    ("visit:utm_medium", "UTM medium"),
    ("visit:utm_campaign", "UTM campaign"),
    ("visit:utm_content", "UTM content"),
    ("visit:utm_term", "UTM term"),
    ("visit:country", "Country"),
    ("visit:region", "Region"),
    ("visit:city", "City"),
    ("visit:browser", "Browser"),
    ("visit:browser_version", "Browser version"),
    ("visit:os", "Operating system"),
    ("visit:os_version", "OS version"),
    ("visit:device", "Device"),
    ("visit:screen", "Screen size"),
    ("event:props", "Property (name=value)"),
];

fn dimension_label(d: &str) -> String {
    if let Some(p) = d.strip_prefix("event:props:") {
        return format!("Property {p}");
    }
    FILTER_DIMENSIONS
        .iter()
        .find(|(k, _)| *k == d)
        .map_or(d.to_string(), |(_, l)| l.to_string())
}

/// The card and tab a view shows for `card` (its first tab unless chosen).
pub fn chosen_tab(view: &View, card: &Card) -> &'static Tab {
    let key = view.tab(card.key);
    card.tabs
        .iter()
        .find(|t| Some(t.key) == key)
        .unwrap_or(&card.tabs[0])
}

/// What one of the page's questions got: the engine's answer, or why there is none.
type Answer = Result<rivulet_stats::Response, AdminError>;

/// Asks the engine `request` for `site`.
pub async fn ask(st: &AppState, site: &Site, request: Value) -> Answer {
    ask_together(st, site, request, &Together::default()).await
}

/// [`ask`], as one of the page's questions asked at once.
async fn ask_together(st: &AppState, site: &Site, request: Value, together: &Together) -> Answer {
    let request = Request::from_value(request)?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    st.stats.query_together(&request, site, now, together).await
}

/// [`ask_together`] for several questions, which the engine may answer with one statement
/// (the cards by visit attributes: `Stats::query_shared`); an answer for each, in order.
async fn ask_shared(
    st: &AppState,
    site: &Site,
    requests: Vec<Value>,
    together: &Together,
) -> Vec<Answer> {
    let parsed: Vec<Result<Request, AdminError>> = requests
        .into_iter()
        .map(|r| Request::from_value(r).map_err(AdminError::from))
        .collect();
    let valid: Vec<Request> = parsed
        .iter()
        .filter_map(|r| r.as_ref().ok().cloned())
        .collect();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let mut answers = st
        .stats
        .query_shared(&valid, site, now, together)
        .await
        .into_iter();
    parsed
        .into_iter()
        .map(|r| match r {
            Ok(_) => answers
                .next()
                .unwrap_or_else(|| Err(AdminError::Usage("the question was not answered".into()))),
            Err(e) => Err(e),
        })
        .collect()
}

/// Which of a breakdown's rows a request asks for.
#[derive(Debug, Clone, Copy)]
pub enum Rows {
    /// The first `n` of a card, without their `percentage`: the card draws each row's bar
    /// against its first row. A percentage divides by the range's visitors, a statement
    /// of its own in each card's question; on a live site each reads today's events again
    /// (`scripts/bench query`: the Overview's five cards asked five such totals).
    Card(u64),
    /// The first `n` with their `percentage` (the CSV export).
    First(u64),
    /// `limit` rows from `offset`, and the number of all the rows, which numbers the pages
    /// (the details page). The count is a statement of its own, as heavy as grouping the
    /// range by the dimension: only a page that shows it asks for it.
    Page { limit: u64, offset: u64 },
}

/// The breakdown a card's tab asks for: visitors (and its second metric), by the tab's
/// dimension, most visitors first.
pub fn breakdown_request(
    view: &View,
    site: &Site,
    today: jiff::civil::Date,
    tab: &Tab,
    rows: Rows,
    search: Option<&str>,
    prop: Option<&str>,
) -> Value {
    let (page, counted, share) = match rows {
        Rows::Card(n) => ((n, 0), false, false),
        Rows::First(n) => ((n, 0), false, true),
        Rows::Page { limit, offset } => ((limit, offset), true, true),
    };
    let dimension = match prop {
        Some(p) => format!("event:props:{p}"),
        None => tab.dimension.to_string(),
    };
    let mut extra = Vec::new();
    if let Some(t) = tab.only_type {
        extra.push(json!(["is", "event:type", [t]]));
    }
    if let Some(s) = search.filter(|s| !s.is_empty()) {
        extra.push(json!(["contains", dimension, [s], {"case_sensitive": false}]));
    }
    let metrics: Vec<&str> = std::iter::once("visitors")
        .chain(tab.more.iter().map(|(m, _)| *m))
        .chain(share.then_some("percentage"))
        .collect();
    let dims = [dimension.as_str()];
    view.request(
        site,
        today,
        Query {
            metrics: &metrics,
            dimensions: &dims,
            extra_filters: &extra,
            order_by: Some(["visitors", "desc"]),
            total_rows: counted,
            page: Some(page),
            ..Query::default()
        },
    )
}

pub async fn page(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Extension(session): Extension<SessionCtx>,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    let site = st.ops.site(site_id).await?;
    let raw = query.as_deref().unwrap_or("");
    let view = View::parse(raw);
    let base = format!("/sites/{site_id}/overview");
    // The filter menu's form: the view with its filter, at a clean address.
    if let Some(f) = added_filter(raw) {
        let mut v = view.clone();
        v.filters.push(f);
        v.filters.truncate(view::MAX_FILTERS);
        return Ok(axum::response::Redirect::to(&v.href(&base, |_| {})).into_response());
    }
    let today = view::today_in(&site);
    let metrics: Vec<&str> = METRICS.iter().map(|(k, _)| *k).collect();
    let top = view.request(
        &site,
        today,
        Query {
            metrics: &metrics,
            compare: true,
            ..Query::default()
        },
    );
    let time_dim = format!("time:{}", view.interval().key());
    let chart_metric = [view.metric.as_str()];
    let chart_dims = [time_dim.as_str()];
    let series = view.request(
        &site,
        today,
        Query {
            metrics: &chart_metric,
            dimensions: &chart_dims,
            time_labels: true,
            compare: true,
            ..Query::default()
        },
    );
    let prop = view
        .tab("prop")
        .filter(|p| !p.is_empty())
        .map(str::to_string);
    let cards: Vec<(&Card, &Tab, Value)> = CARDS
        .iter()
        .map(|card| {
            let t = chosen_tab(&view, card);
            let p = (card.key == "events" && t.key == "name")
                .then_some(())
                .and(prop.as_deref());
            (
                card,
                t,
                breakdown_request(&view, &site, today, t, Rows::Card(10), None, p),
            )
        })
        .collect();
    // Every question at once: the engine's statements run concurrently on ClickHouse,
    // after the site's rollup state, read once for all of them; the cards' as few
    // statements as the engine can make of them.
    let together = Together::default();
    let (top, series, live, breakdowns) = tokio::join!(
        ask_together(&st, &site, top, &together),
        ask_together(&st, &site, series, &together),
        ask_together(&st, &site, live_request(&site), &together),
        ask_shared(
            &st,
            &site,
            cards.iter().map(|(_, _, r)| r.clone()).collect(),
            &together
        )
    );
    let empty = match &top {
        Ok(r) => r
            .results
            .first()
            .is_none_or(|row| row.metrics.iter().all(is_zero)),
        Err(_) => false,
    };
    let has_any = if empty {
        let all = json!({"site_id": site.site_id, "metrics": ["events"], "date_range": "all"});
        matches!(ask(&st, &site, all).await, Ok(r) if r.results.first().is_some_and(|row| !row.metrics.iter().all(is_zero)))
    } else {
        true
    };
    let body = html! {
        (layout::site_header(&site, SiteTab::Overview))
        div.dash-bar {
            (period_picker(&view, &base, &site))
            (compare_toggle(&view, &base))
            (live_badge(&site, &live))
        }
        (filter_bar(&view, &base))
        @if !has_any {
            section.card.empty-state #no-events {
                h2 { "No events yet" }
                p { "Put the tracking script in the site's pages, or send events with an API key:" }
                p { a.button href=(format!("/sites/{site_id}/settings/tracking")) { "Get the tracking code" } " "
                    a.button.secondary href=(format!("/sites/{site_id}/settings/api-key")) { "Get an API key" } }
            }
        }
        (top_figures(&view, &base, &top))
        (chart_section(&view, &base, &series))
        div.grid.breakdowns {
            @for ((card, t, _), answer) in cards.iter().zip(&breakdowns) {
                (card_markup(&view, &base, card, t, answer, prop.as_deref()))
            }
        }
        p.hint { "Times are in the site's time zone, " strong { (site.time_zone()) } " (Settings → General). Bots are not counted. The Stats API, "
            code { "POST /api/v2/query" } ", answers the same figures." }
    };
    Ok(layout::html(layout::page(
        &format!("{} · Overview", site.name),
        Some(&session),
        body,
    )))
}

fn is_zero(v: &Value) -> bool {
    v.as_f64().is_none_or(|n| n == 0.0)
}

/// Visitors in the last 5 minutes.
fn live_request(site: &Site) -> Value {
    let now = time::OffsetDateTime::now_utc();
    let fmt = |t: time::OffsetDateTime| {
        t.replace_nanosecond(0)
            .unwrap_or(t)
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default()
    };
    json!({"site_id": site.site_id, "metrics": ["visitors"],
           "date_range": [fmt(now - time::Duration::minutes(5)), fmt(now)]})
}

/// `GET /sites/{id}/overview/live`: visitors in the last 5 minutes, as JSON, for the
/// page's script to refresh its badge without reloading.
pub async fn live(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
) -> Result<Response, PageError> {
    let site = st.ops.site(site_id).await?;
    let visitors = ask(&st, &site, live_request(&site))
        .await
        .ok()
        .and_then(|r| {
            r.results
                .first()
                .and_then(|row| row.metrics.first().cloned())
        })
        .unwrap_or(json!(null));
    Ok(Json(json!({"visitors": visitors})).into_response())
}

fn live_badge(site: &Site, live: &Answer) -> Markup {
    let n = live
        .as_ref()
        .ok()
        .and_then(|r| {
            r.results
                .first()
                .and_then(|row| row.metrics.first().cloned())
        })
        .map_or("—".to_string(), |v| v.to_string());
    html! {
        p.live role="status" aria-live="polite" {
            span.live-dot aria-hidden="true" {}
            span #live-visitors data-live-url=(format!("/sites/{}/overview/live", site.site_id)) { (n) }
            " current visitors, the last 5 minutes"
        }
    }
}

fn period_picker(view: &View, base: &str, site: &Site) -> Markup {
    let (from, to) = match &view.period {
        Period::Custom(a, b) => (a.clone(), b.clone()),
        _ => (String::new(), String::new()),
    };
    html! {
        nav.periods aria-label="Date range" {
            @for p in &Period::PRESETS {
                @let on = &view.period == p;
                a.period.active[on] href=(view.href(base, |v| { v.period = p.clone(); v.interval = None; }))
                    aria-current=[on.then_some("true")] data-key=[p.shortcut()] {
                    (p.label())
                    @if let Some(k) = p.shortcut() { " " kbd.shortcut { (k.to_uppercase()) } }
                }
            }
        }
        form.custom-range method="get" action=(base) {
            @for (k, v) in hidden_fields(view, &["period", "from", "to", "interval"]) {
                input type="hidden" name=(k) value=(v);
            }
            input type="hidden" name="period" value="custom";
            label.inline for="range-from" { "From" }
            input #range-from type="date" name="from" value=(from) required;
            label.inline for="range-to" { "to" }
            input #range-to type="date" name="to" value=(to) required;
            button.secondary type="submit" { "Apply" }
            span.muted { " " (view.period.label()) ", " (site.time_zone()) }
        }
    }
}

/// The view's query parameters but `skip`, as hidden fields of a GET form.
fn hidden_fields(view: &View, skip: &[&str]) -> Vec<(String, String)> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(&view.query()).unwrap_or_default();
    pairs
        .into_iter()
        .filter(|(k, _)| !skip.contains(&k.as_str()))
        .collect()
}

fn compare_toggle(view: &View, base: &str) -> Markup {
    let choices = [
        None,
        Some(Compare::PreviousPeriod),
        Some(Compare::YearOverYear),
    ];
    html! {
        nav.compare aria-label="Comparison" {
            span.muted { "Compare: " }
            @for c in choices {
                @let on = view.compare == c;
                a.period.active[on] href=(view.href(base, |v| v.compare = c)) aria-current=[on.then_some("true")] {
                    (c.map_or("Off", |c| c.label()))
                }
            }
        }
    }
}

fn filter_bar(view: &View, base: &str) -> Markup {
    html! {
        div.filters {
            @if !view.filters.is_empty() {
                ul.chips #filter-chips aria-label="Filters" {
                    @for (i, f) in view.filters.iter().enumerate() {
                        li.chip data-dimension=(f.dimension) {
                            (dimension_label(&f.dimension)) " " em { (f.op_label()) } " " strong { (f.value) }
                            " "
                            a.remove href=(view.href(base, |v| { v.filters.remove(i); }))
                                aria-label=(format!("Remove the filter {} {} {}", dimension_label(&f.dimension), f.op_label(), f.value)) { "×" }
                        }
                    }
                    li { a href=(view.href(base, |v| v.filters.clear())) { "Clear all" } }
                }
            }
            details.filter-menu {
                summary { "Filter" }
                form method="get" action=(base) {
                    @for (k, v) in hidden_fields(view, &[]) {
                        input type="hidden" name=(k) value=(v);
                    }
                    label for="add-dimension" { "Where" }
                    select #add-dimension name="add_dimension" {
                        @for (k, l) in FILTER_DIMENSIONS { option value=(k) { (l) } }
                    }
                    label for="add-op" { "is" }
                    select #add-op name="add_op" {
                        @for (k, l) in OPERATORS { option value=(k) { (l) } }
                    }
                    label for="add-value" { "Value" }
                    input #add-value type="text" name="add_value" required;
                    button type="submit" { "Add filter" }
                }
            }
        }
    }
}

/// A metric's value as the page shows it.
fn show(metric: &str, v: &Value) -> String {
    // A web vital's percentile over no measurement.
    let Some(n) = v.as_f64() else {
        return "—".into();
    };
    match metric {
        "bounce_rate" => format!("{n:.0}%"),
        "visit_duration" => {
            let s = n.round() as u64;
            if s >= 60 {
                format!("{}m {:02}s", s / 60, s % 60)
            } else {
                format!("{s}s")
            }
        }
        "views_per_visit" => format!("{n:.2}"),
        "percentage" => format!("{n:.1}%"),
        "cls_p75" => format!("{n:.3}"),
        // Milliseconds, said in the column's heading: a unit in each cell would wrap in
        // a card's narrow table.
        _ => thousands(n as u64),
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn change_markup(metric: &str, change: Option<i64>) -> Markup {
    let Some(c) = change else {
        return html! {};
    };
    // A falling bounce rate is good news.
    let good = if metric == "bounce_rate" {
        c < 0
    } else {
        c > 0
    };
    let arrow = if c > 0 {
        "▲"
    } else if c < 0 {
        "▼"
    } else {
        ""
    };
    let unit = if metric == "bounce_rate" { " pt" } else { "%" };
    html! {
        span.change.up[good && c != 0].down[!good && c != 0] { (arrow) " " (c.abs()) (unit) }
    }
}

fn unavailable(e: &AdminError) -> Markup {
    let timeout = matches!(e, AdminError::QueryTimeout);
    let too_large = matches!(e, AdminError::QueryTooLarge);
    html! {
        p.error role="alert" {
            @if timeout {
                "This took longer than a query may: choose a shorter date range, or fewer filters."
            } @else if too_large {
                "This needs more memory than a query may use: choose a shorter date range, or fewer filters."
            } @else {
                "Not available: " (e.to_string())
            }
        }
    }
}

fn top_figures(view: &View, base: &str, top: &Answer) -> Markup {
    let row = match top {
        Ok(r) => r.results.first(),
        Err(e) => return unavailable(e),
    };
    html! {
        div.totals #top-figures {
            @for (i, (key, label)) in METRICS.iter().enumerate() {
                @let on = view.metric == *key;
                a.card.figure.active[on] href=(view.href(base, |v| v.metric = key.to_string()))
                    aria-pressed=(on) data-metric=(key) {
                    div.muted { (label) }
                    div.value id=(format!("total-{key}")) {
                        (row.and_then(|r| r.metrics.get(i)).map_or("—".into(), |v| show(key, v)))
                    }
                    @if let Some(c) = row.and_then(|r| r.comparison.as_ref()) {
                        div.compared {
                            (change_markup(key, c.change.get(i).copied().flatten()))
                            " " span.muted { "from " (c.metrics.get(i).map_or("—".into(), |v| show(key, v))) }
                        }
                    }
                }
            }
        }
    }
}

fn chart_section(view: &View, base: &str, series: &Answer) -> Markup {
    let label = METRICS
        .iter()
        .find(|(k, _)| *k == view.metric)
        .map_or("Visitors", |(_, l)| l);
    html! {
        section.chart-section {
            div.chart-head {
                h2 { (label) " by " (view.interval().key()) }
                nav.intervals aria-label="Interval" {
                    @for i in Interval::ALL {
                        @let on = view.interval() == i;
                        a.period.active[on] href=(view.href(base, |v| v.interval = Some(i))) aria-current=[on.then_some("true")] { (i.key()) }
                    }
                }
            }
            @match series {
                Ok(r) => {
                    @let points = chart_points(&view.metric, r);
                    (chart::series(label, &points, view.compare.is_some()))
                    details {
                        summary { "The numbers" }
                        (layout::scroll(html! { table #chart-table {
                            thead { tr { th { "Time" } th.num { (label) } @if view.compare.is_some() { th.num { "Compared" } } } }
                            tbody {
                                @for p in &points {
                                    tr { td.when { (p.label) } td.num { (show(&view.metric, &json!(p.value))) }
                                         @if view.compare.is_some() { td.num { (p.compared.map_or("—".into(), |c| show(&view.metric, &json!(c)))) } } }
                                }
                            }
                        } }))
                    }
                }
                Err(e) => (unavailable(e)),
            }
        }
    }
}

/// The chart's points: every time label of the range, its value (0 where no row), and
/// the comparison's value at the same position.
fn chart_points(metric: &str, r: &rivulet_stats::Response) -> Vec<chart::Point> {
    let labels = r.meta.time_labels.clone().unwrap_or_default();
    let _ = metric;
    labels
        .into_iter()
        .map(|label| {
            let row = r
                .results
                .iter()
                .find(|row| row.dimensions.first() == Some(&label));
            chart::Point {
                value: row
                    .and_then(|row| row.metrics.first())
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0),
                compared: row
                    .and_then(|row| row.comparison.as_ref())
                    .and_then(|c| c.metrics.first())
                    .and_then(Value::as_f64),
                label,
            }
        })
        .collect()
}

fn card_markup(
    view: &View,
    base: &str,
    card: &Card,
    t: &Tab,
    answer: &Answer,
    prop: Option<&str>,
) -> Markup {
    let details = view.href(&format!("{base}/details"), |v| {
        v.tabs.retain(|(k, _)| k != card.key);
        v.tabs.push((card.key.into(), t.key.into()));
    });
    let export = view.href(&format!("{base}/export.csv"), |v| {
        v.tabs.retain(|(k, _)| k != card.key);
        v.tabs.push((card.key.into(), t.key.into()));
    });
    html! {
        section.card.breakdown id=(format!("card-{}", card.key)) {
            h2 { (card.title) }
            nav.tabs.sub aria-label=(format!("{} tabs", card.title)) {
                @for other in card.tabs {
                    @let on = other.key == t.key;
                    a.tab.active[on] href=(view.href(base, |v| { v.tabs.retain(|(k, _)| k != card.key); v.tabs.push((card.key.into(), other.key.into())); }))
                        aria-current=[on.then_some("page")] { (other.label) }
                }
            }
            @if card.key == "events" && t.key == "name" {
                form.prop-form method="get" action=(base) {
                    @for (k, v) in hidden_fields(view, &["prop"]) { input type="hidden" name=(k) value=(v); }
                    label.inline for="prop-name" { "Break down by property" }
                    input #prop-name type="text" name="prop" value=(prop.unwrap_or("")) placeholder="plan";
                    button.secondary type="submit" { "Show" }
                }
            }
            (rows_table(view, base, t, answer, prop, card.key == "events" && t.key == "name"))
            p.card-links {
                a href=(details) { "Details" } " · "
                a href=(export) download { "Export CSV" }
            }
        }
    }
}

/// A row's bar, in percent: its `percentage` (of all the range's visitors) when the
/// request asked it (after the tab's metrics), else its visitors against the first row's
/// (a card's rows, most visitors first).
fn bar_width(t: &Tab, row: &ResultRow, rows: &[ResultRow]) -> f64 {
    let visitors = |r: &ResultRow| r.metrics.first().and_then(Value::as_f64);
    match row.metrics.get(1 + t.more.len()).and_then(Value::as_f64) {
        Some(percentage) => percentage,
        None => match (visitors(row), rows.first().and_then(visitors)) {
            (Some(v), Some(top)) if top > 0.0 => 100.0 * v / top,
            _ => 0.0,
        },
    }
}

/// A breakdown's rows: each label a link that filters the dashboard by it.
fn rows_table(
    view: &View,
    base: &str,
    t: &Tab,
    answer: &Answer,
    prop: Option<&str>,
    prop_applies: bool,
) -> Markup {
    let r = match answer {
        Ok(r) => r,
        Err(e) => return unavailable(e),
    };
    let dimension = match (prop, prop_applies) {
        (Some(p), true) => format!("event:props:{p}"),
        _ => t.dimension.to_string(),
    };
    let heading = if dimension.starts_with("event:props:") {
        dimension_label(&dimension)
    } else {
        t.heading.to_string()
    };
    html! {
        @if r.results.is_empty() {
            p.muted { "Nothing in this range." }
        } @else {
            (layout::scroll(html! { table.breakdown-rows {
                thead { tr { th { (heading) } th.num { "Visitors" } @for (_, l) in t.more { th.num { (l) } } } }
                tbody {
                    @for row in &r.results {
                        @let label = row.dimensions.first().cloned().unwrap_or_default();
                        @let pct = bar_width(t, row, &r.results);
                        tr {
                            td.text.bar-cell {
                                // The row's share as a bar behind its label: SVG, since the
                                // page's CSP allows no inline style.
                                svg.share viewBox="0 0 100 1" preserveAspectRatio="none" aria-hidden="true" {
                                    rect width=(format!("{:.1}", pct.clamp(0.0, 100.0))) height="1" {}
                                }
                                a.filter-link href=(view.with_filter(&dimension, &label).href(base, |_| {})) title=(format!("Filter by {label}")) { (label) }
                            }
                            td.num { (row.metrics.first().map_or("—".into(), |v| show("visitors", v))) }
                            @for (i, (m, _)) in t.more.iter().enumerate() {
                                td.num { (row.metrics.get(i + 1).map_or("—".into(), |v| show(m, v))) }
                            }
                        }
                    }
                }
            } }))
        }
    }
}

/// `GET /sites/{id}/overview/details?…&<card>=<tab>&page=N&q=search`: one breakdown,
/// all of its rows, 100 a page, with a search.
pub async fn details(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Extension(session): Extension<SessionCtx>,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    const PER_PAGE: u64 = 100;
    let site = st.ops.site(site_id).await?;
    let raw = query.unwrap_or_default();
    let view = View::parse(&raw);
    let extra: Vec<(String, String)> = serde_urlencoded::from_str(&raw).unwrap_or_default();
    let get = |k: &str| {
        extra
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    let page: u64 = get("page")
        .and_then(|p| p.parse().ok())
        .unwrap_or(1)
        .clamp(1, 10_000);
    let search = get("q").unwrap_or_default();
    let (card, t) = details_card(&view);
    let prop = view
        .tab("prop")
        .filter(|p| !p.is_empty() && card.key == "events" && t.key == "name");
    let request = breakdown_request(
        &view,
        &site,
        view::today_in(&site),
        t,
        Rows::Page {
            limit: PER_PAGE,
            offset: (page - 1) * PER_PAGE,
        },
        Some(&search),
        prop,
    );
    let answer = ask(&st, &site, request).await;
    let total = answer
        .as_ref()
        .ok()
        .and_then(|r| r.meta.total_rows)
        .unwrap_or(0);
    let pages = total.div_ceil(PER_PAGE).max(1);
    let base = format!("/sites/{site_id}/overview");
    let here = view.href(&format!("{base}/details"), |_| {});
    let at = |n: u64| {
        let sep = if here.contains('?') { '&' } else { '?' };
        let q = serde_urlencoded::to_string([("page", n.to_string()), ("q", search.clone())])
            .unwrap_or_default();
        format!("{here}{sep}{q}")
    };
    let body = html! {
        (layout::site_header(&site, SiteTab::Overview))
        p { a href=(view.href(&base, |_| {})) { "← Back to the overview" } }
        h2 { (card.title) ": " (t.label) " · " (view.period.label()) }
        (filter_bar(&view, &base))
        form.search method="get" action=(format!("{base}/details")) {
            @for (k, v) in hidden_fields(&view, &[]) { input type="hidden" name=(k) value=(v); }
            label.sr-only for="details-search" { "Search" }
            input #details-search type="search" name="q" value=(search) placeholder="Search";
            button.secondary type="submit" { "Search" }
        }
        (rows_table(&view, &base, t, &answer, prop, prop.is_some()))
        nav.pager aria-label="Pages" {
            @if page > 1 { a #prev-page href=(at(page - 1)) rel="prev" { "← Previous" } }
            span.muted #page-of { " Page " (page) " of " (pages) " (" (thousands(total)) " rows) " }
            @if page < pages { a #next-page href=(at(page + 1)) rel="next" { "Next →" } }
        }
        p { a href=(view.href(&format!("{base}/export.csv"), |_| {})) download { "Export CSV" } }
    };
    Ok(layout::html(layout::page(
        &format!("{} · {}", site.name, t.label),
        Some(&session),
        body,
    )))
}

/// The card a details page or an export is of: the last card key in the URL.
fn details_card(view: &View) -> (&'static Card, &'static Tab) {
    let card = view
        .tabs
        .iter()
        .rev()
        .find_map(|(k, _)| CARDS.iter().find(|c| c.key == k))
        .unwrap_or(&CARDS[1]);
    (card, chosen_tab(view, card))
}

/// `GET /sites/{id}/overview/export.csv?…`: a breakdown's rows (up to 10,000), with the
/// view's filters, as CSV.
pub async fn export_csv(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    let site = st.ops.site(site_id).await?;
    let view = View::parse(query.as_deref().unwrap_or(""));
    let (card, t) = details_card(&view);
    let prop = view
        .tab("prop")
        .filter(|p| !p.is_empty() && card.key == "events" && t.key == "name");
    let request = breakdown_request(
        &view,
        &site,
        view::today_in(&site),
        t,
        Rows::First(10_000),
        None,
        prop,
    );
    let r = ask(&st, &site, request).await?;
    let mut out = String::new();
    let heading = prop.map_or(t.heading.to_string(), |p| format!("property {p}"));
    let mut head = vec![heading.to_lowercase(), "visitors".to_string()];
    head.extend(t.more.iter().map(|(m, _)| m.to_string()));
    head.push("percentage".into());
    out.push_str(&head.join(","));
    out.push('\n');
    for row in &r.results {
        let mut cells = vec![crate::export::csv_text(
            row.dimensions.first().map_or("", |s| s.as_str()),
        )];
        // A percentile without a measurement is an empty cell, not the text "null".
        cells.extend(row.metrics.iter().map(|v| match v {
            Value::Null => String::new(),
            v => v.to_string(),
        }));
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    let name = format!("site-{site_id}-{}-{}.csv", card.key, t.key);
    let mut resp = out.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(resp)
}

/// The filter the filter menu adds, if its fields are in the query.
pub fn added_filter(query: &str) -> Option<Filter> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).ok()?;
    let get = |k: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.trim().to_string())
    };
    let (dimension, op, value) = (get("add_dimension")?, get("add_op")?, get("add_value")?);
    if value.is_empty() {
        return None;
    }
    // "Property (name=value)": event:props:<name> is <value>.
    let (dimension, value) = match dimension.as_str() {
        "event:props" => {
            let (k, v) = value.split_once('=')?;
            (format!("event:props:{}", k.trim()), v.trim().to_string())
        }
        d => (d.to_string(), value),
    };
    FILTER_DIMENSIONS
        .iter()
        .any(|(k, _)| *k == dimension || dimension.starts_with("event:props:"))
        .then_some(Filter {
            op,
            dimension,
            value,
        })
}
