//! A [`Request`] read into a [`Query`]: every field checked, and the combinations that
//! have no meaning refused, each with an error that names the field and what to do.

use crate::date_range::{ComparisonMode, DateRangeInput};
use crate::dimensions::Dimension;
use crate::error::StatsError;
use crate::filters::{self, Filter};
use crate::limits::{MAX_DIMENSIONS, MAX_LIMIT, MAX_OFFSET};
use crate::metrics::{self, Metric};
use crate::request::Request;
use serde_json::Value;

/// A valid query.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub metrics: Vec<Metric>,
    /// As asked (`time` not yet resolved to a bucket: that needs the range).
    pub dimensions: Vec<Dimension>,
    /// The top-level list: all must hold.
    pub filters: Vec<Filter>,
    /// As asked; empty when not given (the planner adds the default and tie-breakers).
    pub order_by: Vec<(OrderKey, Direction)>,
    pub include: Include,
    pub pagination: Pagination,
    pub date_range: DateRangeInput,
}

/// What a row is ordered by: a metric, or a dimension by its index in `dimensions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderKey {
    Metric(Metric),
    Dimension(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Asc,
    Desc,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Asc => "asc",
            Direction::Desc => "desc",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Include {
    pub time_labels: bool,
    pub total_rows: bool,
    pub comparisons: Option<ComparisonMode>,
    /// Plausible's switch for imported data: accepted and ignored, since Rivulet's
    /// imports are events like any other and always counted.
    pub imports: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pagination {
    pub limit: u64,
    pub offset: u64,
}

impl Default for Pagination {
    fn default() -> Self {
        Pagination {
            limit: MAX_LIMIT,
            offset: 0,
        }
    }
}

pub fn validate(req: &Request) -> Result<Query, StatsError> {
    let metrics = parse_metrics(&req.metrics)?;
    let dimensions = match &req.dimensions {
        Some(v) => parse_dimensions(v)?,
        None => Vec::new(),
    };
    let filters = match &req.filters {
        Some(v) => filters::parse(v, "filters")?,
        None => Vec::new(),
    };
    let date_range = DateRangeInput::parse(&req.date_range, "date_range")?;
    let order_by = match &req.order_by {
        Some(v) => parse_order_by(v, &metrics, &dimensions)?,
        None => Vec::new(),
    };
    let include = match &req.include {
        Some(v) => parse_include(v)?,
        None => Include::default(),
    };
    let pagination = match &req.pagination {
        Some(v) => parse_pagination(v)?,
        None => Pagination::default(),
    };
    let query = Query {
        metrics,
        dimensions,
        filters,
        order_by,
        include,
        pagination,
        date_range,
    };
    check_combinations(&query)?;
    Ok(query)
}

fn strings<'a>(value: &'a Value, field: &str, what: &str) -> Result<Vec<&'a str>, StatsError> {
    let items = value
        .as_array()
        .ok_or_else(|| StatsError::invalid(field, format!("an array of {what}")))?;
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str().ok_or_else(|| {
                StatsError::invalid(
                    format!("{field}[{i}]"),
                    format!("one of the {what} (a string)"),
                )
            })
        })
        .collect()
}

fn parse_metrics(value: &Value) -> Result<Vec<Metric>, StatsError> {
    let names = strings(value, "metrics", "metrics")?;
    if names.is_empty() {
        return Err(StatsError::invalid(
            "metrics",
            format!("a non-empty array of metrics: {}", metrics::ALLOWED),
        ));
    }
    let mut out: Vec<Metric> = Vec::with_capacity(names.len());
    for (i, name) in names.into_iter().enumerate() {
        let field = format!("metrics[{i}]");
        let m = Metric::parse(name).ok_or_else(|| StatsError::UnknownMetric {
            field: field.clone(),
            value: name.to_string(),
            allowed: metrics::ALLOWED,
        })?;
        if out.contains(&m) {
            return Err(StatsError::Duplicate {
                field,
                value: name.to_string(),
            });
        }
        out.push(m);
    }
    Ok(out)
}

fn parse_dimensions(value: &Value) -> Result<Vec<Dimension>, StatsError> {
    let names = strings(value, "dimensions", "dimensions")?;
    if names.len() > MAX_DIMENSIONS {
        return Err(StatsError::too_large(
            "dimensions",
            "the number of dimensions",
            names.len(),
            MAX_DIMENSIONS,
        ));
    }
    let mut out: Vec<Dimension> = Vec::with_capacity(names.len());
    for (i, name) in names.into_iter().enumerate() {
        let field = format!("dimensions[{i}]");
        let d = Dimension::parse(name, &field)?;
        if out.contains(&d) {
            return Err(StatsError::Duplicate {
                field,
                value: name.to_string(),
            });
        }
        if d.is_time() && out.iter().any(Dimension::is_time) {
            return Err(StatsError::incompatible(
                field,
                "only one time dimension (time, time:hour, time:day, time:week or time:month) per query",
            ));
        }
        out.push(d);
    }
    Ok(out)
}

fn parse_order_by(
    value: &Value,
    metrics: &[Metric],
    dimensions: &[Dimension],
) -> Result<Vec<(OrderKey, Direction)>, StatsError> {
    let items = value.as_array().ok_or_else(|| {
        StatsError::invalid(
            "order_by",
            "an array of [metric or dimension, \"asc\" or \"desc\"]",
        )
    })?;
    let mut out: Vec<(OrderKey, Direction)> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = format!("order_by[{i}]");
        let pair = item.as_array().filter(|a| a.len() == 2).ok_or_else(|| {
            StatsError::invalid(&field, "[metric or dimension, \"asc\" or \"desc\"]")
        })?;
        let name = pair[0].as_str().ok_or_else(|| {
            StatsError::invalid(format!("{field}[0]"), "a metric or dimension of the query")
        })?;
        let key = if let Some(m) = Metric::parse(name).filter(|m| metrics.contains(m)) {
            OrderKey::Metric(m)
        } else if let Some(i) = dimensions.iter().position(|d| d.name() == name) {
            OrderKey::Dimension(i)
        } else {
            return Err(StatsError::incompatible(
                format!("{field}[0]"),
                format!("{name:?} is not one of the query's metrics or dimensions: order by one of those"),
            ));
        };
        let direction = match pair[1].as_str() {
            Some("asc") => Direction::Asc,
            Some("desc") => Direction::Desc,
            _ => {
                return Err(StatsError::invalid(
                    format!("{field}[1]"),
                    "\"asc\" or \"desc\"",
                ))
            }
        };
        if out.iter().any(|(k, _)| *k == key) {
            return Err(StatsError::Duplicate {
                field: format!("{field}[0]"),
                value: name.to_string(),
            });
        }
        out.push((key, direction));
    }
    Ok(out)
}

const INCLUDE_FIELDS: &str = "time_labels, total_rows, comparisons, imports";
const COMPARISON_FIELDS: &str = "mode, date_range";

fn parse_include(value: &Value) -> Result<Include, StatsError> {
    let map = value.as_object().ok_or_else(|| {
        StatsError::invalid("include", format!("an object with any of {INCLUDE_FIELDS}"))
    })?;
    let mut include = Include::default();
    for (k, v) in map {
        let field = format!("include.{k}");
        let flag = |v: &Value| {
            v.as_bool()
                .ok_or_else(|| StatsError::invalid(&field, "true or false"))
        };
        match k.as_str() {
            "time_labels" => include.time_labels = flag(v)?,
            "total_rows" => include.total_rows = flag(v)?,
            "imports" => include.imports = flag(v)?,
            "comparisons" if v.is_null() => {}
            "comparisons" => include.comparisons = Some(parse_comparison(v)?),
            _ => {
                return Err(StatsError::UnknownField {
                    field,
                    allowed: INCLUDE_FIELDS,
                })
            }
        }
    }
    Ok(include)
}

fn parse_comparison(value: &Value) -> Result<ComparisonMode, StatsError> {
    let field = "include.comparisons";
    let expected = "{\"mode\": \"previous_period\"}, {\"mode\": \"year_over_year\"} or \
                    {\"mode\": \"custom\", \"date_range\": [two dates or datetimes]}";
    let map = value
        .as_object()
        .ok_or_else(|| StatsError::invalid(field, expected))?;
    if let Some(k) = map
        .keys()
        .find(|k| !COMPARISON_FIELDS.split(", ").any(|f| f == *k))
    {
        return Err(StatsError::UnknownField {
            field: format!("{field}.{k}"),
            allowed: COMPARISON_FIELDS,
        });
    }
    let range = map.get("date_range").filter(|v| !v.is_null());
    let mode = map.get("mode").and_then(Value::as_str);
    match (mode, range) {
        (Some("previous_period"), None) => Ok(ComparisonMode::PreviousPeriod),
        (Some("year_over_year"), None) => Ok(ComparisonMode::YearOverYear),
        (Some("custom"), Some(r)) => {
            let input = DateRangeInput::parse(r, "include.comparisons.date_range")?;
            if matches!(
                input,
                DateRangeInput::Dates(..) | DateRangeInput::Instants(..)
            ) {
                Ok(ComparisonMode::Custom(input))
            } else {
                Err(StatsError::invalid(
                    "include.comparisons.date_range",
                    "two dates or two datetimes",
                ))
            }
        }
        (Some("previous_period" | "year_over_year"), Some(_)) => Err(StatsError::incompatible(
            "include.comparisons.date_range",
            "a date_range is only for the mode \"custom\"",
        )),
        _ => Err(StatsError::invalid(format!("{field}.mode"), expected)),
    }
}

fn parse_pagination(value: &Value) -> Result<Pagination, StatsError> {
    let map = value.as_object().ok_or_else(|| {
        StatsError::invalid("pagination", "an object: {\"limit\": 100, \"offset\": 0}")
    })?;
    let mut p = Pagination::default();
    for (k, v) in map {
        let field = format!("pagination.{k}");
        match k.as_str() {
            "limit" => {
                let n = v.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
                    StatsError::invalid(&field, format!("an integer from 1 to {MAX_LIMIT}"))
                })?;
                if n > MAX_LIMIT {
                    return Err(StatsError::TooLarge {
                        field,
                        what: "the limit",
                        actual: n,
                        max: MAX_LIMIT,
                    });
                }
                p.limit = n;
            }
            "offset" => {
                let n = v
                    .as_u64()
                    .ok_or_else(|| StatsError::invalid(&field, "an integer, 0 or more"))?;
                if n > MAX_OFFSET {
                    return Err(StatsError::TooLarge {
                        field,
                        what: "the offset",
                        actual: n,
                        max: MAX_OFFSET,
                    });
                }
                p.offset = n;
            }
            _ => {
                return Err(StatsError::UnknownField {
                    field,
                    allowed: "limit, offset",
                })
            }
        }
    }
    Ok(p)
}

fn check_combinations(q: &Query) -> Result<(), StatsError> {
    if q.metrics.contains(&Metric::Percentage) && q.dimensions.is_empty() {
        let i = q
            .metrics
            .iter()
            .position(|m| *m == Metric::Percentage)
            .unwrap_or(0);
        return Err(StatsError::incompatible(
            format!("metrics[{i}]"),
            "percentage is a row's share of all visitors: it needs at least one dimension",
        ));
    }
    // A visit's bounce, duration and pageviews belong to the visit, not to one of its
    // events: broken down by an event's page or name they would count a visit under
    // every page it saw. visit:entry_page and visit:exit_page are the visit's own.
    if let Some(m) = q.metrics.iter().find(|m| m.is_visit_measure()) {
        if let Some((i, d)) = q.dimensions.iter().enumerate().find(|(_, d)| d.is_event()) {
            return Err(StatsError::incompatible(
                format!("dimensions[{i}]"),
                format!(
                    "{} is a measure of whole visits and cannot be broken down by the event \
                     dimension {}; use visit:entry_page or visit:exit_page, or filter by {} instead",
                    m.name(),
                    d.name(),
                    d.name()
                ),
            ));
        }
    }
    if q.include.time_labels && !q.dimensions.iter().any(Dimension::is_time) {
        return Err(StatsError::incompatible(
            "include.time_labels",
            "time labels need a time dimension (time, time:hour, time:day, time:week or time:month)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dimensions::{Bucket, EventProperty, TimeGrain, VisitProperty};
    use serde_json::json;

    fn query(v: Value) -> Result<Query, StatsError> {
        let mut base = json!({"site_id": 1, "metrics": ["visitors"], "date_range": "7d"});
        for (k, val) in v.as_object().unwrap() {
            base[k] = val.clone();
        }
        validate(&Request::from_value(base)?)
    }

    fn field_of(e: &StatsError) -> &str {
        match e {
            StatsError::UnknownField { field, .. }
            | StatsError::Missing { field }
            | StatsError::Invalid { field, .. }
            | StatsError::UnknownMetric { field, .. }
            | StatsError::UnknownDimension { field, .. }
            | StatsError::Duplicate { field, .. }
            | StatsError::Incompatible { field, .. }
            | StatsError::InvalidDateRange { field, .. }
            | StatsError::UnknownOperator { field, .. }
            | StatsError::InvalidPattern { field, .. }
            | StatsError::TooLarge { field, .. } => field,
            other => panic!("no field: {other:?}"),
        }
    }

    #[track_caller]
    fn fails_at(v: Value, field: &str) -> StatsError {
        let e = query(v.clone()).unwrap_err();
        assert_eq!(field_of(&e), field, "{v}: {e}");
        assert_eq!(e.status(), 400);
        e
    }

    #[test]
    fn a_full_query() {
        let q = query(json!({
            "metrics": ["visitors", "bounce_rate", "percentage"],
            "dimensions": ["visit:country", "time:day"],
            "filters": [["is", "event:page", ["/"]]],
            "order_by": [["time:day", "asc"], ["visitors", "desc"]],
            "include": {"time_labels": true, "total_rows": true, "comparisons": {"mode": "year_over_year"}, "imports": true},
            "pagination": {"limit": 50, "offset": 100}
        }))
        .unwrap();
        assert_eq!(
            q.metrics,
            [Metric::Visitors, Metric::BounceRate, Metric::Percentage]
        );
        assert_eq!(
            q.dimensions,
            [
                Dimension::Visit(VisitProperty::Country),
                Dimension::Time(TimeGrain::Bucket(Bucket::Day))
            ]
        );
        assert_eq!(q.filters.len(), 1);
        assert_eq!(
            q.order_by,
            [
                (OrderKey::Dimension(1), Direction::Asc),
                (OrderKey::Metric(Metric::Visitors), Direction::Desc)
            ]
        );
        assert_eq!(
            q.include,
            Include {
                time_labels: true,
                total_rows: true,
                comparisons: Some(ComparisonMode::YearOverYear),
                imports: true
            }
        );
        assert_eq!(
            q.pagination,
            Pagination {
                limit: 50,
                offset: 100
            }
        );
        assert_eq!(q.date_range, DateRangeInput::LastDays(7));
    }

    #[test]
    fn defaults() {
        let q = query(json!({})).unwrap();
        assert!(q.dimensions.is_empty() && q.filters.is_empty() && q.order_by.is_empty());
        assert_eq!(q.include, Include::default());
        assert_eq!(
            q.pagination,
            Pagination {
                limit: 10_000,
                offset: 0
            }
        );
    }

    #[test]
    fn metric_errors() {
        fails_at(json!({"metrics": []}), "metrics");
        fails_at(json!({"metrics": "visitors"}), "metrics");
        fails_at(json!({"metrics": ["visitors", 3]}), "metrics[1]");
        let e = fails_at(
            json!({"metrics": ["visitors", "conversion_rate"]}),
            "metrics[1]",
        );
        assert!(e.to_string().contains("views_per_visit"), "{e}");
        fails_at(json!({"metrics": ["visits", "visits"]}), "metrics[1]");
    }

    #[test]
    fn dimension_errors() {
        fails_at(json!({"dimensions": "visit:country"}), "dimensions");
        fails_at(
            json!({"dimensions": ["visit:country", "event:goal"]}),
            "dimensions[1]",
        );
        fails_at(
            json!({"dimensions": ["event:page", "event:page"]}),
            "dimensions[1]",
        );
        fails_at(json!({"dimensions": ["time:day", "time"]}), "dimensions[1]");
        let e = fails_at(
            json!({"dimensions": ["event:page", "visit:country", "visit:city", "visit:os"]}),
            "dimensions",
        );
        assert!(matches!(e, StatsError::TooLarge { max: 3, .. }));
        assert_eq!(
            query(json!({"dimensions": ["event:page", "visit:country", "time"]}))
                .unwrap()
                .dimensions[0],
            Dimension::Event(EventProperty::Page)
        );
    }

    #[test]
    fn combinations_that_have_no_meaning() {
        fails_at(json!({"metrics": ["visitors", "percentage"]}), "metrics[1]");
        for m in ["bounce_rate", "visit_duration", "views_per_visit"] {
            let e = fails_at(
                json!({"metrics": [m], "dimensions": ["visit:os", "event:props:plan"]}),
                "dimensions[1]",
            );
            assert!(e.to_string().contains("visit:entry_page"), "{e}");
        }
        // visits by an event dimension is fine: the visits that had such an event.
        assert!(query(json!({"metrics": ["visits"], "dimensions": ["event:page"]})).is_ok());
        // Web vitals' percentiles are event metrics: by event or visit dimensions, beside
        // visit measures, filtered by anything.
        assert!(query(
            json!({"metrics": ["lcp_p75", "cls_p75", "inp_p75"], "dimensions": ["event:page"]})
        )
        .is_ok());
        assert!(query(
            json!({"metrics": ["bounce_rate", "lcp_p75"], "dimensions": ["visit:device"],
                             "filters": [["is", "event:page", ["/"]]]})
        )
        .is_ok());
        // Session measures filtered by an event dimension are fine too.
        assert!(query(
            json!({"metrics": ["bounce_rate"], "filters": [["is", "event:page", ["/"]]]})
        )
        .is_ok());
        fails_at(
            json!({"include": {"time_labels": true}}),
            "include.time_labels",
        );
    }

    #[test]
    fn order_by_errors() {
        fails_at(json!({"order_by": {"visitors": "desc"}}), "order_by");
        fails_at(json!({"order_by": [["visitors"]]}), "order_by[0]");
        fails_at(
            json!({"order_by": [["visitors", "down"]]}),
            "order_by[0][1]",
        );
        fails_at(json!({"order_by": [[1, "asc"]]}), "order_by[0][0]");
        let e = fails_at(
            json!({"order_by": [["pageviews", "desc"]]}),
            "order_by[0][0]",
        );
        assert!(
            e.to_string()
                .contains("not one of the query's metrics or dimensions"),
            "{e}"
        );
        fails_at(
            json!({"order_by": [["visitors", "desc"], ["visitors", "asc"]]}),
            "order_by[1][0]",
        );
        fails_at(
            json!({"dimensions": ["visit:os"], "order_by": [["visit:browser", "asc"]]}),
            "order_by[0][0]",
        );
    }

    #[test]
    fn include_errors() {
        fails_at(json!({"include": []}), "include");
        fails_at(
            json!({"include": {"total_rows": "yes"}}),
            "include.total_rows",
        );
        fails_at(json!({"include": {"drilldown": true}}), "include.drilldown");
        fails_at(
            json!({"include": {"comparisons": "previous_period"}}),
            "include.comparisons",
        );
        fails_at(
            json!({"include": {"comparisons": {"mode": "last_week"}}}),
            "include.comparisons.mode",
        );
        fails_at(
            json!({"include": {"comparisons": {}}}),
            "include.comparisons.mode",
        );
        fails_at(
            json!({"include": {"comparisons": {"mode": "previous_period", "match_day_of_week": true}}}),
            "include.comparisons.match_day_of_week",
        );
        fails_at(
            json!({"include": {"comparisons": {"mode": "custom"}}}),
            "include.comparisons.mode",
        );
        fails_at(
            json!({"include": {"comparisons": {"mode": "custom", "date_range": "7d"}}}),
            "include.comparisons.date_range",
        );
        fails_at(
            json!({"include": {"comparisons": {"mode": "custom", "date_range": ["2024-02-01", "2024-01-01"]}}}),
            "include.comparisons.date_range",
        );
        fails_at(
            json!({"include": {"comparisons": {"mode": "previous_period", "date_range": ["2024-01-01", "2024-01-02"]}}}),
            "include.comparisons.date_range",
        );
        let q = query(json!({"include": {"comparisons": {"mode": "custom", "date_range": ["2024-01-01", "2024-01-07"]}}})).unwrap();
        assert!(matches!(
            q.include.comparisons,
            Some(ComparisonMode::Custom(DateRangeInput::Dates(..)))
        ));
        assert_eq!(
            query(json!({"include": {"comparisons": null}}))
                .unwrap()
                .include
                .comparisons,
            None
        );
    }

    #[test]
    fn pagination_errors() {
        fails_at(json!({"pagination": 10}), "pagination");
        fails_at(json!({"pagination": {"limit": 0}}), "pagination.limit");
        fails_at(json!({"pagination": {"limit": -1}}), "pagination.limit");
        fails_at(json!({"pagination": {"limit": "10"}}), "pagination.limit");
        let e = fails_at(json!({"pagination": {"limit": 10_001}}), "pagination.limit");
        assert_eq!(
            e.to_string(),
            "`pagination.limit`: the limit is 10001, more than the limit of 10000"
        );
        fails_at(json!({"pagination": {"offset": 1.5}}), "pagination.offset");
        fails_at(
            json!({"pagination": {"offset": 1_000_001}}),
            "pagination.offset",
        );
        fails_at(json!({"pagination": {"page": 2}}), "pagination.page");
        assert_eq!(
            query(json!({"pagination": {"limit": 10_000, "offset": 1_000_000}}))
                .unwrap()
                .pagination,
            Pagination {
                limit: 10_000,
                offset: 1_000_000
            }
        );
    }

    #[test]
    fn date_range_and_filter_errors_surface_with_their_fields() {
        fails_at(json!({"date_range": "last_week"}), "date_range");
        fails_at(
            json!({"date_range": ["2024-01-01", "yesterday"]}),
            "date_range",
        );
        fails_at(
            json!({"filters": [["is", "visit:country", "DE"]]}),
            "filters[0][2]",
        );
        fails_at(
            json!({"filters": [["matches", "event:page", ["(unclosed"]]]}),
            "filters[0][2][0]",
        );
    }
}
