//! The rollup's visits: one row per visit and local day it has events in, with the visit's
//! attributes, for the questions filtered by visit attributes (German Chrome visits by
//! source, …), which the day and breakdown tables cannot answer: a filter is any
//! combination of values, and a visit passes it or not as a whole.
//!
//! **Rows.** For each (site, time zone, local day) the job writes, with the day's
//! generation ([`crate::rollup`]), a marker (kind 0) and, from [`visit_rows`], a row per
//! visit with an event in the day (kind 1): its 19 attributes as [`EventsSource`] takes
//! them (its first event's; its first and last pageview's for the entry and exit page),
//! whether it *started* in the day, the day's events of it (`pageviews`, `events`, the
//! visitor ids as `cityHash64`, and each event once as `event_pages`, `event_pageviews`
//! and `event_visitors`), and its measures over all its events (`views`, `bounce`,
//! `duration`, read six hours around the days as the day table reads them). A bucket (the
//! range, a day, a week, a month) counts the visits started in its days plus those carried
//! into its first day: each visit once per bucket it has an event in, as the scan does.
//! By page, each event of the visits that pass counts under its own page.
//!
//! **Fresh and exact.** A day's rows are read only at its latest generation with a marker
//! here, and only for days before the first that is stale or has no visits yet
//! ([`crate::RollupState`]); the rest of the range is computed from `events` by the same
//! [`visit_rows`], in the same statement. The job writes a generation's visits before its
//! day table's marker, and fills in the visits of days computed before this table existed
//! at their valid generation.
//!
//! [`EventsSource`]: crate::events_source::EventsSource

use crate::date_range::Zone;
use crate::dimensions::{
    Bucket, Dimension, EventProperty, TimeGrain, VisitProperty, VISIT_PROPERTIES,
};
use crate::events_source::{engagement_list, visit_aggregate, EventsSource};
use crate::filters::{self, Filter, Leaf, Op};
use crate::limits::SESSION_LOOKAROUND_SECS;
use crate::metrics::Metric;
use crate::rollup::{date, of_one_dimension, restricted, Days, KIND_MARKER};
use crate::source::{Source, Spec};
use crate::sql::{quote, sql, Sql};
use jiff::civil::Date;

/// The rollup's visits (named with the rollup's other tables, whose freshness it shares).
pub const TABLE: &str = crate::rollup::VISIT_TABLE;
/// [`VisitSource`]'s name, as [`crate::QueryPlan::source`] gives it.
pub const SOURCE_NAME: &str = "rollup visits";
/// A visit's row of a day.
pub const KIND_VISIT: u8 = 1;

/// The table's column of a visit attribute: its name in the API without `visit:`.
pub fn attribute_column(p: VisitProperty) -> &'static str {
    let (_, name) = VISIT_PROPERTIES
        .iter()
        .find(|(q, _)| *q == p)
        .unwrap_or_else(|| unreachable!("every visit property is listed"));
    name.trim_start_matches("visit:")
}

/// The attributes' columns, in the table's order.
pub fn attribute_columns() -> impl Iterator<Item = &'static str> {
    VISIT_PROPERTIES.iter().map(|(p, _)| attribute_column(*p))
}

/// The columns of [`visit_rows`] after `local_day`, in the table's order after
/// `site_id`, `time_zone`, `local_day` and `generation`.
pub fn row_columns() -> Vec<&'static str> {
    let mut out = vec!["kind", "visit_hash", "started"];
    out.extend(attribute_columns());
    out.extend([
        "pageviews",
        "events",
        "views",
        "bounce",
        "duration",
        "visitors",
        "event_pages",
        "event_pageviews",
        "event_visitors",
    ]);
    out
}

/// The visits' rows of `days` (without their markers), computed from `events` (read with
/// `FINAL`, as the day table's): `local_day` and [`row_columns`]. The job inserts them;
/// a query reads its tail through them.
pub fn visit_rows(site_id: u32, zone: &Zone, days: &Days) -> Sql {
    let tz = quote(zone.name());
    let around = SESSION_LOOKAROUND_SECS as i64;
    let mut in_days = sql("timestamp >= ");
    in_days
        .append(&days.start)
        .push(" AND timestamp < ")
        .append(&days.end);
    let counted = |s: &mut Sql, what: &str, name: &str| {
        s.push(&format!(", groupArrayIf({what}, "))
            .append(&in_days)
            .push(&format!(") AS {name}"));
    };
    let attributes: Vec<String> = VISIT_PROPERTIES
        .iter()
        .map(|(p, _)| format!("a_{0} AS {0}", attribute_column(*p)))
        .collect();
    let mut s = sql(&format!(
        "SELECT local_day, toUInt8({KIND_VISIT}) AS kind, cityHash64(session_id) AS visit_hash, \
         toUInt8(local_day = start_day) AS started, {}, \
         toUInt64(arrayUniq(arrayFilter((e, d, p) -> d = local_day AND p = 1, c_ids, c_days, c_pageview))) AS pageviews, \
         toUInt64(arrayUniq(arrayFilter((e, d) -> d = local_day, c_ids, c_days))) AS events, \
         toUInt64(s_views) AS views, s_bounce AS bounce, toUInt64(s_duration) AS duration, \
         arrayReduce('groupUniqArray', arrayFilter((h, d) -> d = local_day, c_users, c_days)) AS visitors, \
         arrayFilter((x, d, f) -> d = local_day AND f = 1, c_pages, c_days, c_first) AS event_pages, \
         arrayFilter((x, d, f) -> d = local_day AND f = 1, c_pageview, c_days, c_first) AS event_pageviews, \
         arrayFilter((x, d, f) -> d = local_day AND f = 1, c_users, c_days, c_first) AS event_visitors \
         FROM (SELECT session_id, arrayEnumerateUniq(c_ids) AS c_first, arrayUniq(groupArrayIf(event_id, type = 'pageview')) AS s_views, \
         toUInt8(s_views = 1 AND countIf(type IN ({})) = 0) AS s_bounce, \
         toUInt32(max(timestamp)) - toUInt32(min(timestamp)) AS s_duration, \
         toDate(min(timestamp), {tz}) AS start_day",
        attributes.join(", "),
        engagement_list(),
    ));
    for (p, _) in VISIT_PROPERTIES {
        s.push(&format!(
            ", toString({}) AS a_{}",
            visit_aggregate(p),
            attribute_column(p)
        ));
    }
    counted(&mut s, &format!("toDate(timestamp, {tz})"), "c_days");
    counted(&mut s, "event_id", "c_ids");
    counted(&mut s, "toUInt8(type = 'pageview')", "c_pageview");
    counted(&mut s, "cityHash64(user_id)", "c_users");
    counted(&mut s, "pathname", "c_pages");
    s.push(" FROM events FINAL WHERE site_id = ")
        .bind_uint(u64::from(site_id))
        .push(" AND timestamp >= toDateTime(toUInt32(")
        .append(&days.start)
        .push(&format!(
            ") - {around}) AND timestamp < toDateTime(toUInt32("
        ))
        .append(&days.end)
        .push(&format!(
            ") + {around}) AND is_bot = 0 GROUP BY session_id HAVING notEmpty(c_days)) \
             ARRAY JOIN arrayReduce('groupUniqArray', c_days) AS local_day"
        ));
    s
}

/// The metrics [`VisitSource`] answers.
const METRICS: [Metric; 8] = [
    Metric::Visitors,
    Metric::Visits,
    Metric::Pageviews,
    Metric::Events,
    Metric::BounceRate,
    Metric::VisitDuration,
    Metric::ViewsPerVisit,
    Metric::Percentage,
];

/// The metrics [`VisitSource`] answers by page.
const PAGE_METRICS: [Metric; 4] = [
    Metric::Visitors,
    Metric::Pageviews,
    Metric::Events,
    Metric::Percentage,
];

/// The filter to pageviews the dashboard's Top pages adds (`event:type is pageview`,
/// case-sensitive, at the top level).
fn is_pageviews(f: &Filter) -> bool {
    matches!(f, Filter::Leaf(Leaf {
        op: Op::Is,
        dimension: Dimension::Event(EventProperty::Type),
        values,
        case_sensitive: true,
    }) if values == &["pageview"])
}

/// A spec's filters but the filter to pageviews, and whether it has that one.
fn split_filters(filters: &[Filter]) -> (Vec<&Filter>, bool) {
    let visit: Vec<&Filter> = filters.iter().filter(|f| !is_pageviews(f)).collect();
    let typed = visit.len() < filters.len();
    (visit, typed)
}

/// The rollup's visits as a [`Source`]: the metrics of [`METRICS`] over whole local days,
/// filtered by visit attributes only, in total, by day, week or month, or by one visit
/// attribute; and `visitors`, `pageviews`, `events` and `percentage` by `event:page`, of
/// every event or of pageviews only (the events of the visits that pass, each under its
/// own page). The unfiltered questions are [`crate::RollupSource`]'s; any other is
/// [`EventsSource`]'s.
#[derive(Debug, Default, Clone, Copy)]
pub struct VisitSource;

impl Source for VisitSource {
    fn name(&self) -> &'static str {
        SOURCE_NAME
    }

    fn covers(&self, spec: &Spec) -> bool {
        let by_page = spec.dimensions == [Dimension::Event(EventProperty::Page)];
        let (visit_filters, typed) = split_filters(spec.filters);
        // Visit filters, and only by page the filter to pageviews besides.
        let filters_ok = !visit_filters.is_empty()
            && visit_filters
                .iter()
                .all(|f| f.all_leaves(&|l| matches!(l.dimension, Dimension::Visit(_))))
            && (by_page || !typed);
        let dimensions_ok = by_page
            || matches!(
                spec.dimensions,
                [] | [Dimension::Visit(_)]
                    | [Dimension::Time(TimeGrain::Bucket(
                        Bucket::Day | Bucket::Week | Bucket::Month
                    ))]
            );
        // By page, the event metrics only: a visit has events of several pages.
        let metrics = if by_page {
            &PAGE_METRICS[..]
        } else {
            &METRICS[..]
        };
        // A comparison's restriction to the main rows' values: of the one dimension.
        let restriction_ok = match spec.restriction {
            None => true,
            Some(r) => {
                matches!(
                    spec.dimensions,
                    [Dimension::Visit(_) | Dimension::Event(EventProperty::Page)]
                ) && of_one_dimension(r)
            }
        };
        filters_ok
            && dimensions_ok
            && restriction_ok
            && spec.rollup_stale.is_some()
            && spec.range.whole_days
            && spec.metrics.iter().all(|m| metrics.contains(m))
    }

    fn select(&self, spec: &Spec) -> Sql {
        if !self.covers(spec) {
            return EventsSource.select(spec);
        }
        select(spec).unwrap_or_else(|| EventsSource.select(spec))
    }
}

/// The first day of a spec's range that the table cannot answer: stale, or without its
/// visits yet.
fn tail_day(spec: &Spec) -> Option<Date> {
    let in_range = |d: &&Date| **d >= spec.range.first_date && **d <= spec.range.last_date;
    let stale = spec.rollup_stale.unwrap_or_default().iter().find(in_range);
    let missing = spec.visits_missing.iter().find(in_range);
    match (stale, missing) {
        (Some(a), Some(b)) => Some(*a.min(b)),
        (a, b) => a.or(b).copied(),
    }
}

/// The filters' condition on a row's attribute columns (the filter to pageviews is the
/// page rows', [`select_pages`]).
fn filter_condition(filters: &[Filter]) -> Sql {
    let (refs, _) = split_filters(filters);
    filters::conjunction(&refs, &|d: &Dimension| match d {
        Dimension::Visit(p) => sql(attribute_column(*p)),
        other => unreachable!(
            "VisitSource covers visit filters only, not {}",
            other.name()
        ),
    })
}

/// The rows of a spec's range that pass its filters, with `columns`: those of the days
/// before the tail from the table (each day's latest generation with its marker), and the
/// tail's computed from `events`. `None` when the range's days cannot be resolved.
fn range_rows(spec: &Spec, columns: &str) -> Option<Sql> {
    let zone = spec.zone;
    let range = spec.range;
    let (first, last) = (date(range.first_date), date(range.last_date));
    // The table's days end where the tail's begin.
    let (end, tail_days) = match tail_day(spec) {
        Some(d) => (date(d), Some(Days::literal(zone, d, range.last_date).ok()?)),
        None => (date(range.last_date.tomorrow().ok()?), None),
    };
    let condition = filter_condition(spec.filters);
    let of_site = |s: &mut Sql| {
        s.bind_uint(u64::from(spec.site_id))
            .push(" AND time_zone = ")
            .bind_str(zone.name());
    };
    // The filters first: they read a column or two of every row of the range, the rest
    // only of the visits that pass (18.16 does not move a condition to `PREWHERE` itself).
    let mut s = sql(&format!("SELECT {columns} FROM {TABLE} PREWHERE "));
    s.append(&condition).push(" WHERE site_id = ");
    of_site(&mut s);
    s.push(&format!(" AND kind = {KIND_VISIT} AND local_day >= "))
        .append(&first)
        .push(" AND local_day < ")
        .append(&end)
        .push(
            " AND toUInt64(toUInt16(local_day)) * 4294967296 + generation IN (\
             SELECT toUInt64(toUInt16(local_day)) * 4294967296 + max(generation) FROM ",
        )
        .push(TABLE)
        .push(" WHERE site_id = ");
    of_site(&mut s);
    s.push(&format!(" AND kind = {KIND_MARKER} AND local_day >= "))
        .append(&first)
        .push(" AND local_day <= ")
        .append(&last)
        .push(" GROUP BY local_day)");
    if let Some(days) = &tail_days {
        s.push(&format!(" UNION ALL SELECT {columns} FROM ("))
            .append(&visit_rows(spec.site_id, zone, days))
            .push(") WHERE ")
            .append(&condition);
    }
    Some(s)
}

/// [`VisitSource::select`]: the rows grouped by the spec's bucket or attribute, each visit
/// counted in a bucket when it started in one of its days or was carried into its first.
fn select(spec: &Spec) -> Option<Sql> {
    if spec.dimensions == [Dimension::Event(EventProperty::Page)] {
        return select_pages(spec);
    }
    let first = date(spec.range.first_date);
    // The bucket's key, and its first day in the range.
    let (key, bucket_start): (Option<Sql>, Option<Sql>) = match spec.dimensions {
        [Dimension::Visit(p)] => (Some(sql(attribute_column(*p))), None),
        [Dimension::Time(TimeGrain::Bucket(b))] => match b {
            Bucket::Day => (Some(sql("toString(local_day)")), Some(sql("local_day"))),
            Bucket::Week => {
                let mut start = sql("greatest(toMonday(local_day), ");
                start.append(&first).push(")");
                let mut key = sql("toString(");
                key.append(&start).push(")");
                (Some(key), Some(start))
            }
            Bucket::Month => {
                let mut start = sql("greatest(toStartOfMonth(local_day), ");
                start.append(&first).push(")");
                (
                    Some(sql("toString(toStartOfMonth(local_day))")),
                    Some(start),
                )
            }
            // Not covered: a day's rows have no hours. (`events` answers.)
            Bucket::Hour => return None,
        },
        _ => (None, None),
    };
    let mut counted = sql("toUInt8(started = 1 OR local_day = ");
    counted
        .append(bucket_start.as_ref().unwrap_or(&first))
        .push(") AS counted");

    let mut inner = sql("SELECT ");
    if let Some(k) = &key {
        inner.append(k).push(" AS d0, ");
    }
    // (The visitor ids as `ids`: the metric is named `visitors`, and 18.16 would read an
    // alias where the column is meant.)
    inner
        .append(&counted)
        .push(", pageviews, events, views, bounce, duration, visitors AS ids FROM (");
    let mut columns = vec!["local_day", "started"];
    if let [Dimension::Visit(p)] = spec.dimensions {
        columns.push(attribute_column(*p));
    }
    columns.extend([
        "pageviews",
        "events",
        "views",
        "bounce",
        "duration",
        "visitors",
    ]);
    inner
        .append(&range_rows(spec, &columns.join(", "))?)
        .push(")");
    if key.is_some() {
        restricted(&mut inner, spec, "d0");
    }

    let visits = "sum(counted)";
    let mut out = sql("SELECT ");
    let mut metrics: Vec<Sql> = Vec::new();
    if key.is_some() {
        metrics.push(sql("d0"));
    }
    for m in spec.metrics {
        let mut s = match m {
            Metric::Visitors => sql("uniqExactArray(ids)"),
            Metric::Visits => sql(visits),
            Metric::Pageviews => sql("sum(pageviews)"),
            Metric::Events => sql("sum(events)"),
            Metric::BounceRate => sql(&format!(
                "100 * sumIf(bounce, counted = 1) / greatest({visits}, 1)"
            )),
            Metric::VisitDuration => sql(&format!(
                "sumIf(duration, counted = 1) / greatest({visits}, 1)"
            )),
            Metric::ViewsPerVisit => sql(&format!(
                "sumIf(views, counted = 1) / greatest({visits}, 1)"
            )),
            Metric::Percentage => {
                // Of the range's visitors with the same filters, as `EventsSource` divides.
                let total = Spec {
                    metrics: &[Metric::Visitors],
                    dimensions: &[],
                    restriction: None,
                    ..*spec
                };
                let mut s = sql("100 * uniqExactArray(ids) / greatest((SELECT visitors FROM (");
                s.append(&select(&total)?).push(")), 1)");
                s
            }
            other => unreachable!("VisitSource does not answer {}", other.name()),
        };
        s.push(&format!(" AS {}", m.name()));
        metrics.push(s);
    }
    out.join(&metrics, ", ")
        .push(" FROM (")
        .append(&inner)
        .push(")");
    if key.is_some() {
        out.push(" GROUP BY d0");
    }
    Some(out)
}

/// The counted events of the visits that pass a spec's visit filters, one row each
/// (`page`, `pageview`, `visitor`), of pageviews only with the filter to them.
fn page_rows(spec: &Spec) -> Option<Sql> {
    let (_, typed) = split_filters(spec.filters);
    let mut s = sql(
        "SELECT page, pageview, visitor FROM (SELECT event_pages, event_pageviews, event_visitors FROM (",
    );
    s.append(&range_rows(
        spec,
        "local_day, event_pages, event_pageviews, event_visitors",
    )?)
    .push(
        ")) ARRAY JOIN event_pages AS page, event_pageviews AS pageview, event_visitors AS visitor",
    );
    if typed {
        s.push(" WHERE pageview = 1");
    }
    Some(s)
}

/// [`VisitSource::select`] by `event:page`: each counted event of the visits that pass,
/// under its own page. `percentage` is of the visitors of those events (of pageviews
/// only with that filter), as `EventsSource` divides.
fn select_pages(spec: &Spec) -> Option<Sql> {
    let rows = page_rows(spec)?;
    let mut out = sql("SELECT page AS d0");
    for m in spec.metrics {
        let mut e = match m {
            Metric::Visitors => sql("uniqExact(visitor)"),
            Metric::Pageviews => sql("sum(pageview)"),
            Metric::Events => sql("count()"),
            Metric::Percentage => {
                let mut e =
                    sql("100 * uniqExact(visitor) / greatest((SELECT uniqExact(visitor) FROM (");
                e.append(&rows).push(")), 1)");
                e
            }
            other => unreachable!("VisitSource does not answer {} by page", other.name()),
        };
        e.push(&format!(" AS {}", m.name()));
        out.push(", ").append(&e);
    }
    out.push(" FROM (").append(&rows).push(")");
    restricted(&mut out, spec, "page");
    out.push(" GROUP BY d0");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollup::{state_statement, RollupSource, RollupState};
    use crate::test_support::{request, NOW};
    use crate::{FirstEvent, Planner, SiteContext};
    use serde_json::{json, Value};
    use std::sync::Arc;

    fn plan(fields: Value, rollup: RollupState) -> crate::QueryPlan {
        let site = SiteContext {
            site_id: 1,
            time_zone: "Europe/Berlin".into(),
            first_event: FirstEvent::At(1_704_067_200),
            rollup,
        };
        Planner::default()
            .with_source(Arc::new(RollupSource))
            .with_source(Arc::new(VisitSource))
            .plan(&request(fields), &site, NOW)
            .expect("a plan")
    }

    fn loaded(days: &[&str], visits_missing: &[&str]) -> RollupState {
        let parse = |ds: &[&str]| ds.iter().map(|d| d.parse().unwrap()).collect();
        RollupState::Stale {
            days: parse(days),
            visits_missing: parse(visits_missing),
        }
    }

    const GERMAN_CHROME: &str =
        r#"[["is", "visit:country", ["DE"]], ["is", "visit:browser", ["Chrome"]]]"#;

    #[test]
    fn questions_filtered_by_visit_attributes_alone_are_the_visits() {
        let f: Value = serde_json::from_str(GERMAN_CHROME).unwrap();
        for dims in [
            json!([]),
            json!(["time:day"]),
            json!(["time:week"]),
            json!(["time:month"]),
            json!(["visit:source"]),
            json!(["visit:entry_page"]),
        ] {
            let p = plan(
                json!({"metrics": ["visitors", "visits", "bounce_rate", "visit_duration"],
                       "dimensions": dims, "filters": f}),
                loaded(&[], &[]),
            );
            assert_eq!(p.source(), SOURCE_NAME, "{dims}");
            let sql = p.main().inline();
            assert!(sql.contains("FROM stats_visit_days PREWHERE"), "{sql}");
            assert!(!sql.contains("FROM events"), "no tail: {sql}");
        }
        // By page, of every event or of pageviews.
        let mut typed = f.as_array().unwrap().clone();
        typed.push(json!(["is", "event:type", ["pageview"]]));
        for (filters, only_pageviews) in [(f.clone(), false), (json!(typed), true)] {
            let p = plan(
                json!({"metrics": ["visitors", "pageviews", "percentage"],
                       "dimensions": ["event:page"], "filters": filters}),
                loaded(&[], &[]),
            );
            assert_eq!(p.source(), SOURCE_NAME);
            let sql = p.main().inline();
            assert!(sql.contains("ARRAY JOIN event_pages AS page"), "{sql}");
            assert_eq!(sql.contains("WHERE pageview = 1"), only_pageviews, "{sql}");
            assert!(!sql.contains("event:type"), "{sql}");
        }
    }

    #[test]
    fn other_questions_are_not_the_visits() {
        let f: Value = serde_json::from_str(GERMAN_CHROME).unwrap();
        for (why, fields, rollup) in [
            (
                "no filter",
                json!({"dimensions": ["visit:source"]}),
                loaded(&[], &[]),
            ),
            (
                "an event filter",
                json!({"filters": [["is", "event:page", ["/"]]]}),
                loaded(&[], &[]),
            ),
            (
                "a tree with an event leaf",
                json!({"filters": [["or", [["is", "visit:country", ["DE"]], ["is", "event:name", ["signup"]]]]]}),
                loaded(&[], &[]),
            ),
            (
                "users",
                json!({"metrics": ["users"], "filters": f}),
                loaded(&[], &[]),
            ),
            (
                "by hour",
                json!({"dimensions": ["time:hour"], "filters": f}),
                loaded(&[], &[]),
            ),
            (
                "visits by page",
                json!({"metrics": ["visits"], "dimensions": ["event:page"], "filters": f}),
                loaded(&[], &[]),
            ),
            (
                "by event name",
                json!({"dimensions": ["event:name"], "filters": f}),
                loaded(&[], &[]),
            ),
            (
                "a filter to pageviews without a page",
                json!({"filters": [["is", "visit:country", ["DE"]], ["is", "event:type", ["pageview"]]]}),
                loaded(&[], &[]),
            ),
            (
                "the state not read",
                json!({"filters": f}),
                RollupState::NotLoaded,
            ),
        ] {
            let p = plan(fields, rollup);
            assert_ne!(p.source(), SOURCE_NAME, "{why}");
        }
    }

    #[test]
    fn the_tail_starts_at_the_first_day_stale_or_without_visits() {
        let f: Value = serde_json::from_str(GERMAN_CHROME).unwrap();
        let fields = json!({"metrics": ["visitors", "visits"], "dimensions": ["visit:source"], "filters": f});
        // March 2024 in Berlin: the 20th starts at 2024-03-19T23:00Z, the 10th at
        // 2024-03-09T23:00Z.
        for (stale, missing, tail_start) in [
            (&["2024-03-20"][..], &[][..], 1_710_889_200),
            (&[][..], &["2024-03-20"][..], 1_710_889_200),
            (
                &["2024-03-20"][..],
                &["2024-03-10", "2024-03-25"][..],
                1_710_025_200,
            ),
            (&["2024-03-10"][..], &["2024-03-20"][..], 1_710_025_200),
        ] {
            let sql = plan(fields.clone(), loaded(stale, missing)).main().inline();
            let until = format!(
                "local_day < toDate('{}')",
                if tail_start == 1_710_889_200 {
                    "2024-03-20"
                } else {
                    "2024-03-10"
                }
            );
            assert!(sql.contains(&until), "{stale:?} {missing:?}: {sql}");
            assert!(
                sql.contains(&format!("timestamp >= toDateTime({tail_start})")),
                "{stale:?} {missing:?}: {sql}"
            );
        }
    }

    #[test]
    fn the_state_tells_stale_days_from_days_without_visits() {
        let site = SiteContext {
            site_id: 1,
            time_zone: "UTC".into(),
            first_event: FirstEvent::NotLoaded,
            rollup: RollupState::NotLoaded,
        };
        let st = state_statement(&site).unwrap();
        let body = b"{\"d0\":\"2024-03-02\",\"d1\":\"1\"}\n{\"d0\":\"2024-03-01\",\"d1\":\"0\"}\n";
        assert_eq!(
            RollupState::from_rows(&st, body).unwrap(),
            loaded(&["2024-03-01"], &["2024-03-02"])
        );
        let bad = b"{\"d0\":\"2024-03-02\",\"d1\":\"2\"}\n";
        assert!(RollupState::from_rows(&st, bad).is_err());
    }

    #[test]
    fn every_attribute_has_a_column_of_its_own() {
        let columns = row_columns();
        for (p, name) in VISIT_PROPERTIES {
            assert_eq!(format!("visit:{}", attribute_column(p)), name);
            assert_eq!(
                columns
                    .iter()
                    .filter(|c| **c == attribute_column(p))
                    .count(),
                1
            );
        }
    }
}
