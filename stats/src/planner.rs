//! From a valid query to the statements that answer it.
//!
//! The planner resolves what depends on the site and the clock (the range, `time`'s
//! bucket, the comparison's range, the time labels, the order), then asks a [`Source`]
//! for the relation of a [`Spec`] ([`crate::source`] has the contract). It wraps the
//! relation for ordering and pages, for `total_rows`, and runs it again over the
//! comparison range; parsing and the response never see the SQL. So a faster source (a
//! rollup, a sessions table) plugs in with [`Planner::with_source`] and answers the
//! queries it [`Source::covers`]; the exact [`EventsSource`] answers the rest.

use crate::date_range::{self, TimeRange, Zone};
use crate::dimensions::{Dimension, TimeGrain};
use crate::error::StatsError;
use crate::events_source::EventsSource;
use crate::limits::MAX_EXECUTION_TIME_SECS;
use crate::metrics::Metric;
use crate::request::Request;
use crate::rows::Row;
use crate::source::{Restriction, Source, Spec};
use crate::sql::{Sql, Statement};
use crate::validate::{self, Direction, OrderKey, Query};
use crate::{RollupState, SiteContext};
use serde_json::Value;
use std::fmt::Debug;
use std::sync::Arc;

/// Picks a source for each query and builds its statements.
#[derive(Debug, Clone)]
pub struct Planner {
    sources: Vec<Arc<dyn Source>>,
    max_execution_time_secs: u64,
    /// 0: none set (the server's own limit applies).
    max_memory_usage_bytes: u64,
}

impl Default for Planner {
    fn default() -> Self {
        Planner {
            sources: vec![Arc::new(EventsSource)],
            max_execution_time_secs: MAX_EXECUTION_TIME_SECS,
            max_memory_usage_bytes: 0,
        }
    }
}

impl Planner {
    /// A source tried before the ones already there (the exact one stays last).
    pub fn with_source(mut self, source: Arc<dyn Source>) -> Self {
        self.sources.insert(0, source);
        self
    }

    /// ClickHouse's `max_execution_time` for every statement.
    pub fn with_max_execution_time(mut self, secs: u64) -> Self {
        self.max_execution_time_secs = secs;
        self
    }

    /// ClickHouse's `max_memory_usage` for every statement; 0 sets none. A statement past
    /// it fails with [`crate::sql::MEMORY_LIMIT_EXCEEDED`], which the server answers 503.
    pub fn with_max_memory_usage(mut self, bytes: u64) -> Self {
        self.max_memory_usage_bytes = bytes;
        self
    }

    /// Whether the plan of this request would read the daily rollup once the site's
    /// [`RollupState`] is loaded ([`crate::rollup::state_statement`]): only then is it
    /// worth reading.
    pub fn needs_rollup_state(&self, req: &Request, site: &SiteContext, now: i64) -> bool {
        if site.rollup != RollupState::NotLoaded {
            return false;
        }
        let assumed = SiteContext {
            rollup: RollupState::Stale {
                days: Vec::new(),
                visits_missing: Vec::new(),
            },
            ..site.clone()
        };
        self.plan(req, &assumed, now).is_ok_and(|p| {
            [crate::rollup::SOURCE_NAME, crate::visits::SOURCE_NAME].contains(&p.source())
        })
    }

    /// Validates the request and plans it for a site at `now` (epoch seconds).
    pub fn plan(
        &self,
        req: &Request,
        site: &SiteContext,
        now: i64,
    ) -> Result<QueryPlan, StatsError> {
        let query = validate::validate(req)?;
        let zone = Zone::new(&site.time_zone)?;
        let range = date_range::resolve(&query.date_range, &zone, now, site.first_event)?;
        let dimensions: Vec<Dimension> = query
            .dimensions
            .iter()
            .map(|d| match d {
                Dimension::Time(TimeGrain::Auto) => {
                    Dimension::Time(TimeGrain::Bucket(date_range::auto_bucket(&range)))
                }
                d => d.clone(),
            })
            .collect();
        let bucket = dimensions.iter().find_map(|d| match d {
            Dimension::Time(TimeGrain::Bucket(b)) => Some(*b),
            _ => None,
        });
        let time_labels = bucket
            .map(|b| date_range::labels(&range, b, &zone))
            .transpose()?;
        let comparison = match query.include.comparisons {
            Some(mode) => {
                let r = date_range::comparison_range(&range, mode, &zone, now)?;
                let labels = bucket
                    .map(|b| date_range::labels(&r, b, &zone))
                    .transpose()?;
                Some(Comparison { range: r, labels })
            }
            None => None,
        };
        let order = resolve_order(&query, &dimensions);
        let mut settings = vec![(
            "max_execution_time",
            self.max_execution_time_secs.to_string(),
        )];
        if self.max_memory_usage_bytes > 0 {
            settings.push(("max_memory_usage", self.max_memory_usage_bytes.to_string()));
        }
        let spec = Spec {
            site_id: site.site_id,
            zone: &zone,
            range: &range,
            metrics: &query.metrics,
            dimensions: &dimensions,
            filters: &query.filters,
            restriction: None,
            rollup_stale: site.rollup.stale(),
            visits_missing: site.rollup.visits_missing(),
        };
        let source = self
            .sources
            .iter()
            .find(|s| s.covers(&spec))
            .cloned()
            .unwrap_or_else(|| Arc::new(EventsSource));
        let relation = source.select(&spec);
        let columns = columns(&query.metrics, dimensions.len());

        let mut main = Sql::new();
        main.push("SELECT * FROM (").append(&relation).push(")");
        main.push(&format!(
            " ORDER BY {} LIMIT {}, {}",
            order_keys(&order, 0).join(", "),
            query.pagination.offset,
            query.pagination.limit
        ));
        let main = Statement::new("stats_main", main, columns.clone(), settings.clone());

        let total_rows = query.include.total_rows.then(|| {
            let s = source.count_rows(&spec).unwrap_or_else(|| {
                let mut s = Sql::new();
                s.push("SELECT count() AS total_rows FROM (")
                    .append(&relation)
                    .push(")");
                s
            });
            Statement::new(
                "stats_total_rows",
                s,
                vec!["total_rows".into()],
                settings.clone(),
            )
        });

        Ok(QueryPlan {
            site_id: site.site_id,
            echo_site_id: req.site_id.clone(),
            echo_filters: req.filters.clone().unwrap_or(Value::Array(Vec::new())),
            zone,
            query,
            dimensions,
            range,
            time_labels,
            comparison,
            order,
            source,
            rollup: site.rollup.clone(),
            settings,
            main,
            total_rows,
        })
    }
}

/// The columns of every statement's rows.
fn columns(metrics: &[Metric], dimensions: usize) -> Vec<String> {
    (0..dimensions)
        .map(|i| format!("d{i}"))
        .chain(metrics.iter().map(|m| m.name().to_string()))
        .collect()
}

/// `ORDER BY`'s keys for `order`, the dimensions' columns `shift` places on (`d{i +
/// shift}`).
fn order_keys(order: &[(OrderKey, Direction)], shift: usize) -> Vec<String> {
    order
        .iter()
        .map(|(k, d)| {
            let dir = if *d == Direction::Asc { "ASC" } else { "DESC" };
            // A metric without a value (no measurement) comes last either way; said
            // rather than left to the server's default.
            let (column, nulls) = match k {
                OrderKey::Metric(m) if m.is_nullable() => (m.name().to_string(), " NULLS LAST"),
                OrderKey::Metric(m) => (m.name().to_string(), ""),
                OrderKey::Dimension(i) => (format!("d{}", i + shift), ""),
            };
            format!("{column} {dir}{nulls}")
        })
        .collect()
}

/// The order asked for, else time ascending or the first metric descending (Plausible's
/// default), then every dimension not yet in it, ascending: rows never tie, so pages do
/// not overlap or skip.
fn resolve_order(query: &Query, dimensions: &[Dimension]) -> Vec<(OrderKey, Direction)> {
    let mut order = query.order_by.clone();
    if order.is_empty() {
        match dimensions.iter().position(Dimension::is_time) {
            Some(i) => order.push((OrderKey::Dimension(i), Direction::Asc)),
            None => order.push((OrderKey::Metric(query.metrics[0]), Direction::Desc)),
        }
    }
    for i in 0..dimensions.len() {
        if !order.iter().any(|(k, _)| *k == OrderKey::Dimension(i)) {
            order.push((OrderKey::Dimension(i), Direction::Asc));
        }
    }
    order
}

#[derive(Debug, Clone)]
pub(crate) struct Comparison {
    pub(crate) range: TimeRange,
    pub(crate) labels: Option<Vec<String>>,
}

/// A planned query: the statements to run, and what [`crate::respond`] needs to turn
/// their rows into the response.
///
/// Run [`QueryPlan::main`], then [`QueryPlan::total_rows`] if there is one, then, with
/// the main rows, [`QueryPlan::comparison`] if there is one.
#[derive(Debug, Clone)]
pub struct QueryPlan {
    pub(crate) site_id: u32,
    pub(crate) echo_site_id: Value,
    pub(crate) echo_filters: Value,
    pub(crate) zone: Zone,
    pub(crate) query: Query,
    /// `time` resolved to its bucket.
    pub(crate) dimensions: Vec<Dimension>,
    pub(crate) range: TimeRange,
    pub(crate) time_labels: Option<Vec<String>>,
    pub(crate) comparison: Option<Comparison>,
    pub(crate) order: Vec<(OrderKey, Direction)>,
    source: Arc<dyn Source>,
    rollup: RollupState,
    settings: Vec<(&'static str, String)>,
    main: Statement,
    total_rows: Option<Statement>,
}

/// Past this many bytes of SQL a statement raises ClickHouse's `max_query_size` (256 KiB
/// by default) for itself: a comparison restricted to 10,000 long rows is large.
const DEFAULT_MAX_QUERY_SIZE: usize = 256 * 1024;

impl QueryPlan {
    /// The page of rows.
    pub fn main(&self) -> &Statement {
        &self.main
    }

    /// How many rows the query has in all (`include.total_rows`): one row, one column.
    pub fn total_rows(&self) -> Option<&Statement> {
        self.total_rows.as_ref()
    }

    /// Whether the query asked for comparisons (then [`Self::comparison`] gives the
    /// statement once the main rows are known).
    pub fn wants_comparison(&self) -> bool {
        self.comparison.is_some()
    }

    /// The comparison's rows: the same query over the comparison range, restricted to the
    /// main rows' values of the dimensions that are not time (time buckets are matched by
    /// their position). `None` when no comparison was asked for, or when there is nothing
    /// to compare (dimensions and no main row).
    pub fn comparison(&self, main_rows: &[Row]) -> Option<Statement> {
        let keyed: Vec<usize> = (0..self.dimensions.len())
            .filter(|i| !self.dimensions[*i].is_time())
            .collect();
        if !self.dimensions.is_empty() && main_rows.is_empty() {
            return None;
        }
        let restriction = (!keyed.is_empty()).then(|| {
            let mut values: Vec<Vec<String>> = Vec::new();
            for row in main_rows {
                let v: Vec<String> = keyed.iter().map(|i| row.dimensions[*i].clone()).collect();
                if !values.contains(&v) {
                    values.push(v);
                }
            }
            Restriction {
                dimensions: keyed,
                values,
            }
        });
        self.comparison_restricted(restriction.as_ref())
    }

    /// [`Self::comparison`] when it does not depend on the main rows, so that it can run
    /// beside them: the totals and time series (nothing to restrict to the main rows'
    /// values). Given rows [`crate::respond`] uses them as [`Self::comparison`] says: not
    /// at all for a series without a main row. The 12-month overview with its previous
    /// period waited for its main rows before (`scripts/bench query`, `overview_12m`).
    pub fn comparison_beside_main(&self) -> Option<Statement> {
        if !self.dimensions.iter().all(Dimension::is_time) {
            return None;
        }
        self.comparison_restricted(None)
    }

    /// What the plan asks of a source over `range`, restricted to `restriction`.
    fn spec<'a>(&'a self, range: &'a TimeRange, restriction: Option<&'a Restriction>) -> Spec<'a> {
        Spec {
            site_id: self.site_id,
            zone: &self.zone,
            range,
            metrics: &self.query.metrics,
            dimensions: &self.dimensions,
            filters: &self.query.filters,
            restriction,
            rollup_stale: self.rollup.stale(),
            visits_missing: self.rollup.visits_missing(),
        }
    }

    /// The comparison's statement, restricted to `restriction`'s values.
    fn comparison_restricted(&self, restriction: Option<&Restriction>) -> Option<Statement> {
        let comparison = self.comparison.as_ref()?;
        let spec = self.spec(&comparison.range, restriction);
        let relation = self.source.select(&spec);
        let mut settings = self.settings.clone();
        let size = relation.text().len()
            + relation
                .binds()
                .iter()
                .map(|b| b.literal().len())
                .sum::<usize>();
        if size > DEFAULT_MAX_QUERY_SIZE / 2 {
            settings.push(("max_query_size", (size * 2).to_string()));
        }
        Some(Statement::new(
            "stats_comparison",
            relation,
            columns(&self.query.metrics, self.dimensions.len()),
            settings,
        ))
    }

    /// The name of the source that answers the query.
    pub fn source(&self) -> &'static str {
        self.source.name()
    }

    /// The validated query.
    pub fn query(&self) -> &Query {
        &self.query
    }

    /// The resolved range, `[start, end)` in epoch seconds.
    pub fn range(&self) -> &TimeRange {
        &self.range
    }

    /// The comparison's range, when one was asked for.
    pub fn comparison_range(&self) -> Option<&TimeRange> {
        self.comparison.as_ref().map(|c| &c.range)
    }

    /// The time buckets' labels, with a time dimension.
    pub fn time_labels(&self) -> Option<&[String]> {
        self.time_labels.as_deref()
    }
}

/// The main statements of several plans as one ([`share_main`]): the dashboard's cards.
#[derive(Debug, Clone)]
pub struct SharedMain {
    statement: Statement,
    /// The plans it answers, as indexes into those [`share_main`] was given.
    members: Vec<usize>,
    /// Each member's breakdown as the statement's `d0` names it, in the same order.
    names: Vec<String>,
}

impl SharedMain {
    /// The one statement to run.
    pub fn statement(&self) -> &Statement {
        &self.statement
    }

    /// The plans it answers, as indexes into those [`share_main`] was given, in order.
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// Its rows, as each member's main rows would be, in the order of [`Self::members`].
    pub fn split(&self, rows: Vec<Row>) -> Vec<Vec<Row>> {
        let mut out = vec![Vec::new(); self.names.len()];
        for mut row in rows {
            let Some(name) = row.dimensions.first() else {
                continue;
            };
            if let Some(i) = self.names.iter().position(|n| n == name) {
                row.dimensions.remove(0);
                out[i].push(row);
            }
        }
        out
    }
}

/// The main statements of those of `plans` that differ only in the visit attribute they
/// break down by, answered by the rollup, as one: no filter, no `percentage` or
/// `total_rows`, their first page, alike to the first such plan (each attribute once).
/// A live site's day is read from `events`, and each of the dashboard's cards read it
/// again, with the visits of its events: asked as one, the three cards' statements took
/// 274–309 ms against 364–392 ms run at once, and the whole page's 860 against 1,010 ms
/// (`scripts/bench query`'s 10M site, its last day read from `events`, warm, the
/// statements alone). `None` when fewer than two plans can share (the answers are the
/// same either way: the others run on their own).
pub fn share_main(plans: &[&QueryPlan]) -> Option<SharedMain> {
    let card = |p: &QueryPlan| {
        p.source.name() == crate::rollup::SOURCE_NAME
            && matches!(p.dimensions.as_slice(), [Dimension::Visit(_)])
            && p.query.filters.is_empty()
            && p.total_rows.is_none()
            && p.query.pagination.offset == 0
            && !p.query.metrics.contains(&Metric::Percentage)
    };
    let first = *plans.iter().find(|p| card(p))?;
    let alike = |p: &QueryPlan| {
        card(p)
            && p.site_id == first.site_id
            && p.zone.name() == first.zone.name()
            && p.range == first.range
            && p.query.metrics == first.query.metrics
            && p.query.pagination.limit == first.query.pagination.limit
            && p.order == first.order
            && p.rollup == first.rollup
            && p.settings == first.settings
    };
    let mut members: Vec<usize> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        let name = p.dimensions.first().map(Dimension::name);
        if let Some(name) = name.filter(|n| alike(p) && !names.contains(n)) {
            members.push(i);
            names.push(name);
        }
    }
    if members.len() < 2 {
        return None;
    }
    let plans: Vec<&QueryPlan> = members.iter().map(|i| plans[*i]).collect();
    let breakdowns: Vec<crate::rollup::Breakdown> = plans
        .iter()
        .map(|p| crate::rollup::Breakdown {
            dimension: p.dimensions[0].clone(),
            of_type: None,
        })
        .collect();
    let relation = crate::rollup::shared_select(&first.spec(&first.range, None), &breakdowns)?;
    let mut main = Sql::new();
    main.push("SELECT * FROM (")
        .append(&relation)
        .push(&format!(
            ") ORDER BY d0 ASC, {} LIMIT {} BY d0",
            order_keys(&first.order, 1).join(", "),
            first.query.pagination.limit
        ));
    Some(SharedMain {
        statement: Statement::new(
            "stats_shared",
            main,
            columns(&first.query.metrics, 2),
            first.settings.clone(),
        ),
        members,
        names,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::sql;
    use crate::test_support::{planned, request, NOW};
    use serde_json::json;

    fn row(dims: &[&str], metrics: &[f64]) -> Row {
        Row {
            dimensions: dims.iter().map(|d| d.to_string()).collect(),
            metrics: metrics.iter().copied().map(Some).collect(),
        }
    }

    fn order_of(p: &QueryPlan) -> String {
        let sql = &p.main().sql;
        sql[sql.rfind(" ORDER BY ").unwrap() + 10..].to_string()
    }

    #[test]
    fn default_order_is_time_or_the_first_metric_then_every_dimension() {
        let p = planned(
            json!({"metrics": ["pageviews", "visitors"], "dimensions": ["event:page", "visit:country"]}),
            "UTC",
        );
        assert_eq!(
            order_of(&p),
            "pageviews DESC, d0 ASC, d1 ASC LIMIT 0, 10000"
        );
        let p = planned(json!({"dimensions": ["visit:country", "time:day"]}), "UTC");
        assert_eq!(order_of(&p), "d1 ASC, d0 ASC LIMIT 0, 10000");
        let p = planned(
            json!({"dimensions": ["visit:country", "time"], "order_by": [["visitors", "asc"], ["time", "desc"]],
                   "pagination": {"limit": 5, "offset": 15}}),
            "UTC",
        );
        assert_eq!(order_of(&p), "visitors ASC, d1 DESC, d0 ASC LIMIT 15, 5");
        let p = planned(json!({}), "UTC");
        assert_eq!(order_of(&p), "visitors DESC LIMIT 0, 10000");
    }

    #[test]
    fn total_rows_counts_the_groups_without_the_page() {
        let p = planned(
            json!({"dimensions": ["event:page"], "include": {"total_rows": true}, "pagination": {"limit": 1}}),
            "UTC",
        );
        let total = p.total_rows().unwrap();
        assert_eq!(total.name, "stats_total_rows");
        assert_eq!(total.columns, ["total_rows"]);
        let relation = p.main().sql.strip_prefix("SELECT * FROM (").unwrap();
        let relation = &relation[..relation.rfind(") ORDER BY").unwrap()];
        assert_eq!(
            total.sql,
            format!("SELECT count() AS total_rows FROM ({relation})")
        );
        assert_eq!(total.binds, p.main().binds);
        assert!(planned(json!({}), "UTC").total_rows().is_none());
    }

    #[test]
    fn a_comparison_reads_the_main_rows_values_over_its_own_range() {
        let p = planned(
            json!({"dimensions": ["visit:country", "time:day", "event:page"], "include": {"comparisons": {"mode": "previous_period"}}}),
            "UTC",
        );
        assert!(p.wants_comparison());
        // March 2024 against the 31 days before: 2024-01-30 … 2024-02-29.
        let r = p.comparison_range().unwrap();
        assert_eq!((r.start, r.end), (1_706_572_800, 1_709_251_200));
        let main = [
            row(&["DE", "2024-03-01", "/"], &[3.0]),
            row(&["DE", "2024-03-02", "/"], &[1.0]),
            row(&["", "2024-03-02", "/a"], &[1.0]),
        ];
        let st = p.comparison(&main).unwrap();
        assert_eq!(st.name, "stats_comparison");
        assert_eq!(st.columns, ["d0", "d1", "d2", "visitors"]);
        let sql = st.inline();
        assert!(
            sql.contains(
                "timestamp >= toDateTime(1706572800) AND timestamp < toDateTime(1709251200)"
            ),
            "{sql}"
        );
        // The non-time dimensions' distinct values, once each; time is matched by position.
        assert!(
            sql.contains(
                "WHERE (s_country, pathname) IN (('DE', '/'), ('', '/a')) GROUP BY d0, d1, d2"
            ),
            "{sql}"
        );
        assert!(!sql.contains("ORDER BY") && !sql.contains("LIMIT"), "{sql}");
        // With dimensions and no main row there is nothing to compare.
        assert!(p.comparison(&[]).is_none());
        assert!(planned(json!({"dimensions": ["event:page"]}), "UTC")
            .comparison(&main)
            .is_none());
    }

    #[test]
    fn a_comparison_by_time_only_or_without_dimensions_is_unrestricted() {
        let p = planned(
            json!({"dimensions": ["time"], "include": {"comparisons": {"mode": "year_over_year"}}}),
            "UTC",
        );
        let st = p.comparison(&[row(&["2024-03-01"], &[1.0])]).unwrap();
        assert!(!st.sql.contains(" IN ("), "{}", st.sql);
        assert!(
            st.inline().contains("timestamp >= toDateTime(1677628800)"),
            "2023-03-01"
        );
        let p = planned(
            json!({"metrics": ["visits"], "include": {"comparisons": {"mode": "previous_period"}}}),
            "UTC",
        );
        let st = p.comparison(&[]).unwrap();
        assert_eq!(st.columns, ["visits"]);
        // Neither needs the main rows: each runs beside them, the same statement.
        assert_eq!(
            p.comparison_beside_main().map(|s| s.inline()),
            Some(st.inline())
        );
        let p = planned(
            json!({"dimensions": ["time"], "include": {"comparisons": {"mode": "year_over_year"}}}),
            "UTC",
        );
        let after = p.comparison(&[row(&["2024-03-01"], &[1.0])]).unwrap();
        assert_eq!(
            p.comparison_beside_main().map(|s| s.inline()),
            Some(after.inline())
        );
        // A breakdown's is restricted to its main rows' values: it waits for them.
        let p = planned(
            json!({"dimensions": ["visit:country"], "include": {"comparisons": {"mode": "previous_period"}}}),
            "UTC",
        );
        assert!(p.comparison_beside_main().is_none());
        // Without a comparison, none.
        assert!(planned(json!({}), "UTC").comparison_beside_main().is_none());
    }

    #[test]
    fn a_long_comparison_raises_max_query_size_for_itself() {
        let p = planned(
            json!({"dimensions": ["event:page"], "include": {"comparisons": {"mode": "previous_period"}}}),
            "UTC",
        );
        let long: Vec<Row> = (0..200)
            .map(|i| row(&[&format!("/{i}/{}", "x".repeat(2000))], &[1.0]))
            .collect();
        let st = p.comparison(&long).unwrap();
        let size: usize = st
            .settings
            .iter()
            .find(|(k, _)| *k == "max_query_size")
            .unwrap()
            .1
            .parse()
            .unwrap();
        assert!(size > st.inline().len(), "{size}");
        let short = p.comparison(&long[..1]).unwrap();
        assert!(short.settings.iter().all(|(k, _)| *k != "max_query_size"));
    }

    /// A source that answers only queries without dimensions, as a rollup of totals might.
    #[derive(Debug)]
    struct Totals;

    impl Source for Totals {
        fn name(&self) -> &'static str {
            "totals"
        }
        fn covers(&self, spec: &Spec) -> bool {
            spec.dimensions.is_empty() && spec.filters.is_empty()
        }
        fn select(&self, spec: &Spec) -> Sql {
            let mut s = sql("SELECT sum(v) AS visitors FROM rollup WHERE site_id = ");
            s.bind_uint(u64::from(spec.site_id));
            s
        }
    }

    #[test]
    fn a_source_answers_what_it_covers_and_the_exact_one_the_rest() {
        let planner = Planner::default()
            .with_source(Arc::new(Totals))
            .with_max_execution_time(5);
        let site = SiteContext::utc(1);
        let p = planner.plan(&request(json!({})), &site, NOW).unwrap();
        assert_eq!(p.source(), "totals");
        assert_eq!(
            p.main().inline(),
            "SELECT * FROM (SELECT sum(v) AS visitors FROM rollup WHERE site_id = 1) ORDER BY visitors DESC LIMIT 0, 10000"
        );
        assert_eq!(p.main().settings, [("max_execution_time", "5".to_string())]);
        let p = planner
            .plan(&request(json!({"dimensions": ["event:page"]})), &site, NOW)
            .unwrap();
        assert_eq!(p.source(), "events");
    }

    #[test]
    fn the_plan_exposes_what_it_resolved() {
        let p = planned(
            json!({"dimensions": ["time"], "include": {"time_labels": true}}),
            "Europe/Berlin",
        );
        assert_eq!(p.time_labels().unwrap().len(), 31);
        assert_eq!(p.range().first_date.to_string(), "2024-03-01");
        assert_eq!(p.query().metrics, [Metric::Visitors]);
        assert!(p.comparison_range().is_none());
    }
}
