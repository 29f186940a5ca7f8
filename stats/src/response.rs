//! The plan's rows ([`crate::rows`]) into the Plausible-shaped JSON ([`respond`]):
//!
//! ```json
//! {"results": [{"metrics": [12, 3.5], "dimensions": ["DE"],
//!               "comparison": {"dimensions": ["DE"], "metrics": [10, 3.0], "change": [20, 17]}}],
//!  "meta": {"time_labels": […], "total_rows": 40},
//!  "query": {"site_id": 1, "metrics": […], "date_range": ["2024-03-01T00:00:00+01:00", "2024-03-31T23:59:59+02:00"], …}}
//! ```

use crate::dimensions::Dimension;
use crate::error::StatsError;
use crate::metrics::{Metric, ValueKind};
use crate::planner::QueryPlan;
use crate::rows::{QueryRows, Row};
use crate::validate::OrderKey;
use serde::Serialize;
use serde_json::{Number, Value};
use std::collections::HashMap;

/// The response body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Response {
    pub results: Vec<ResultRow>,
    pub meta: Meta,
    pub query: QueryEcho,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultRow {
    pub metrics: Vec<Value>,
    pub dimensions: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<ComparisonResult>,
}

/// The same row in the comparison period: its dimensions (time as the comparison's own
/// bucket at the same position, `null` if that period has fewer buckets), its metrics
/// (where it has no such row, 0, or `null` for a nullable metric), and each metric's
/// change (`null` for a metric without a value in either period).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComparisonResult {
    pub dimensions: Vec<Option<String>>,
    pub metrics: Vec<Value>,
    pub change: Vec<Option<i64>>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Meta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_labels: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_rows: Option<u64>,
    /// The comparison's range, as `query.date_range` is given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison_date_range: Option<[String; 2]>,
}

/// The query as it was understood: the request's own values, with the range resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueryEcho {
    pub site_id: Value,
    pub metrics: Vec<String>,
    /// The range's first and last second, in the site's time zone with its offset.
    pub date_range: [String; 2],
    pub filters: Value,
    pub dimensions: Vec<String>,
    /// The order the rows are in, the default and tie-breakers included.
    pub order_by: Vec<[String; 2]>,
    pub include: IncludeEcho,
    pub pagination: PaginationEcho,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IncludeEcho {
    pub time_labels: bool,
    pub total_rows: bool,
    pub imports: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparisons: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PaginationEcho {
    pub limit: u64,
    pub offset: u64,
}

/// The response to a planned query from its statements' rows.
pub fn respond(plan: &QueryPlan, rows: &QueryRows) -> Result<Response, StatsError> {
    let q = &plan.query;
    let check = |rows: &[Row], statement: &'static str| -> Result<(), StatsError> {
        match rows.iter().find(|r| {
            r.dimensions.len() != plan.dimensions.len() || r.metrics.len() != q.metrics.len()
        }) {
            Some(r) => Err(StatsError::RowShape {
                statement,
                reason: format!(
                    "a row of {} dimensions and {} metrics",
                    r.dimensions.len(),
                    r.metrics.len()
                ),
            }),
            None => Ok(()),
        }
    };
    check(&rows.main, "stats_main")?;
    let comparison_rows = match (plan.comparison(&rows.main), &rows.comparison) {
        (None, _) => None,
        (Some(_), Some(c)) => {
            check(c, "stats_comparison")?;
            Some(c.as_slice())
        }
        (Some(_), None) => {
            return Err(StatsError::RowShape {
                statement: "stats_comparison",
                reason: "the plan has a comparison and no rows were given for it".into(),
            })
        }
    };
    let time_dim = plan.dimensions.iter().position(Dimension::is_time);
    let labels = plan.time_labels.as_deref().unwrap_or(&[]);
    let comparison_labels = plan
        .comparison
        .as_ref()
        .and_then(|c| c.labels.as_deref())
        .unwrap_or(&[]);
    // A row's key across periods: the time bucket's position and the other dimensions.
    let key = |row: &Row, labels: &[String]| -> (Option<usize>, Vec<String>) {
        let position = time_dim.and_then(|t| labels.iter().position(|l| *l == row.dimensions[t]));
        let others = row
            .dimensions
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != time_dim)
            .map(|(_, v)| v.clone())
            .collect();
        (position, others)
    };
    let by_key: HashMap<(Option<usize>, Vec<String>), &Row> = comparison_rows
        .unwrap_or(&[])
        .iter()
        .map(|r| (key(r, comparison_labels), r))
        .collect();

    let label = |i: usize, raw: &str| -> String {
        match plan.dimensions[i].empty_label() {
            Some(l) if raw.is_empty() => l.to_string(),
            _ => raw.to_string(),
        }
    };
    let metrics_of = |values: &[Option<f64>]| -> Vec<Value> {
        q.metrics
            .iter()
            .zip(values)
            .map(|(m, v)| v.map_or(Value::Null, |v| metric_value(*m, v)))
            .collect()
    };
    // A row the other period does not have: nothing counted, so counts are 0 and
    // percentiles have no value.
    let absent: Vec<Option<f64>> = q
        .metrics
        .iter()
        .map(|m| (!m.is_nullable()).then_some(0.0))
        .collect();
    let results = rows
        .main
        .iter()
        .map(|row| {
            let comparison = comparison_rows.map(|_| {
                let k = key(row, labels);
                let old = by_key
                    .get(&k)
                    .map(|r| r.metrics.as_slice())
                    .unwrap_or(&absent);
                let dimensions = row
                    .dimensions
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        if Some(i) == time_dim {
                            k.0.and_then(|p| comparison_labels.get(p)).cloned()
                        } else {
                            Some(label(i, v))
                        }
                    })
                    .collect();
                ComparisonResult {
                    dimensions,
                    metrics: metrics_of(old),
                    change: q
                        .metrics
                        .iter()
                        .zip(old.iter().zip(&row.metrics))
                        .map(|(m, (o, n))| match (o, n) {
                            (Some(o), Some(n)) => change(*m, rounded(*m, *o), rounded(*m, *n)),
                            _ => None,
                        })
                        .collect(),
                }
            });
            ResultRow {
                metrics: metrics_of(&row.metrics),
                dimensions: row
                    .dimensions
                    .iter()
                    .enumerate()
                    .map(|(i, v)| label(i, v))
                    .collect(),
                comparison,
            }
        })
        .collect();

    let meta = Meta {
        time_labels: q.include.time_labels.then(|| labels.to_vec()),
        total_rows: match (q.include.total_rows, rows.total_rows) {
            (false, _) => None,
            (true, Some(n)) => Some(n),
            (true, None) => {
                return Err(StatsError::RowShape {
                    statement: "stats_total_rows",
                    reason: "the plan counts rows and no count was given".into(),
                })
            }
        },
        comparison_date_range: plan.comparison.as_ref().map(|c| c.range.echo(&plan.zone)),
    };
    Ok(Response {
        results,
        meta,
        query: echo(plan),
    })
}

fn echo(plan: &QueryPlan) -> QueryEcho {
    let q = &plan.query;
    QueryEcho {
        site_id: plan.echo_site_id.clone(),
        metrics: q.metrics.iter().map(|m| m.name().to_string()).collect(),
        date_range: plan.range.echo(&plan.zone),
        filters: plan.echo_filters.clone(),
        dimensions: q.dimensions.iter().map(Dimension::name).collect(),
        order_by: plan
            .order
            .iter()
            .map(|(k, d)| {
                let name = match k {
                    OrderKey::Metric(m) => m.name().to_string(),
                    OrderKey::Dimension(i) => q.dimensions[*i].name(),
                };
                [name, d.name().to_string()]
            })
            .collect(),
        include: IncludeEcho {
            time_labels: q.include.time_labels,
            total_rows: q.include.total_rows,
            imports: q.include.imports,
            comparisons: q.include.comparisons.map(|c| {
                use crate::date_range::ComparisonMode::*;
                match c {
                    PreviousPeriod => serde_json::json!({"mode": "previous_period"}),
                    YearOverYear => serde_json::json!({"mode": "year_over_year"}),
                    Custom(_) => {
                        let r = plan.comparison.as_ref().map(|c| c.range.echo(&plan.zone));
                        serde_json::json!({"mode": "custom", "date_range": r})
                    }
                }
            }),
        },
        pagination: PaginationEcho {
            limit: q.pagination.limit,
            offset: q.pagination.offset,
        },
    }
}

/// A metric's value as the response shows it.
fn rounded(m: Metric, v: f64) -> f64 {
    match m.value_kind() {
        ValueKind::Integer => v.round(),
        ValueKind::Decimal(n) => {
            let scale = 10f64.powi(n as i32);
            (v * scale).round() / scale
        }
    }
}

fn metric_value(m: Metric, v: f64) -> Value {
    let v = rounded(m, v);
    match m.value_kind() {
        ValueKind::Integer => Value::Number(Number::from(v as i64)),
        ValueKind::Decimal(_) => Number::from_f64(v)
            .map(Value::Number)
            .unwrap_or(Value::Null),
    }
}

/// Plausible's change: for `bounce_rate` the difference in points (none when the old
/// rate is 0), otherwise the change in percent of the old value, rounded (100 from 0 to
/// anything, 0 from 0 to 0).
fn change(m: Metric, old: f64, new: f64) -> Option<i64> {
    if m.change_is_difference() {
        return (old > 0.0).then(|| (new - old).round() as i64);
    }
    if old == 0.0 {
        return Some(if new > 0.0 { 100 } else { 0 });
    }
    Some(((new - old) / old * 100.0).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::{decode_count, decode_rows};
    use crate::sql::Statement;

    fn statement(columns: &[&str]) -> Statement {
        Statement {
            name: "stats_main",
            sql: String::new(),
            binds: Vec::new(),
            settings: Vec::new(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
        }
    }

    #[test]
    fn decodes_json_each_row_with_quoted_or_plain_numbers() {
        let s = statement(&["d0", "d1", "visitors", "bounce_rate", "views_per_visit"]);
        let body = br#"{"d0":"DE","d1":"2024-03-31","visitors":"12","bounce_rate":33,"views_per_visit":1.5}
{"d0":"","d1":"2024-04-01","visitors":3,"bounce_rate":null,"views_per_visit":"2.25"}
"#;
        let rows = decode_rows(&s, body).unwrap();
        assert_eq!(
            rows,
            [
                Row {
                    dimensions: vec!["DE".into(), "2024-03-31".into()],
                    metrics: vec![Some(12.0), Some(33.0), Some(1.5)]
                },
                Row {
                    dimensions: vec!["".into(), "2024-04-01".into()],
                    metrics: vec![Some(3.0), Some(0.0), Some(2.25)]
                },
            ]
        );
        assert_eq!(decode_rows(&s, b"").unwrap(), []);
    }

    #[test]
    fn a_bad_answer_is_an_internal_error() {
        let s = statement(&["d0", "visitors"]);
        for body in [
            &b"{\"d0\":\"x\"}"[..],
            b"not json",
            b"{\"d0\":\"x\",\"visitors\":\"many\"}",
            b"{\"d0\":\"x\",\"visitors\":[1]}",
        ] {
            let e = decode_rows(&s, body).unwrap_err();
            assert_eq!(e.status(), 500, "{e}");
        }
        let count = statement(&["total_rows"]);
        assert_eq!(
            decode_count(&count, b"{\"total_rows\":\"42\"}\n").unwrap(),
            42
        );
        assert!(decode_count(&count, b"").is_err());
    }

    #[test]
    fn values_are_rounded_as_plausible_shows_them() {
        assert_eq!(metric_value(Metric::Visitors, 12.0), serde_json::json!(12));
        assert_eq!(
            metric_value(Metric::BounceRate, 33.4),
            serde_json::json!(33)
        );
        assert_eq!(
            metric_value(Metric::VisitDuration, 59.5),
            serde_json::json!(60)
        );
        assert_eq!(
            metric_value(Metric::ViewsPerVisit, 1.456),
            serde_json::json!(1.46)
        );
        assert_eq!(
            metric_value(Metric::Percentage, 33.333),
            serde_json::json!(33.3)
        );
    }

    #[test]
    fn changes() {
        assert_eq!(change(Metric::Visitors, 100.0, 150.0), Some(50));
        assert_eq!(change(Metric::Visitors, 3.0, 2.0), Some(-33));
        assert_eq!(change(Metric::Visitors, 0.0, 5.0), Some(100));
        assert_eq!(change(Metric::Visitors, 0.0, 0.0), Some(0));
        assert_eq!(change(Metric::ViewsPerVisit, 2.0, 2.5), Some(25));
        // Bounce rate: points, and none from 0.
        assert_eq!(change(Metric::BounceRate, 40.0, 45.0), Some(5));
        assert_eq!(change(Metric::BounceRate, 40.0, 30.0), Some(-10));
        assert_eq!(change(Metric::BounceRate, 0.0, 30.0), None);
    }

    use crate::test_support::planned;
    use serde_json::json;

    fn row(dims: &[&str], metrics: &[f64]) -> Row {
        Row {
            dimensions: dims.iter().map(|d| d.to_string()).collect(),
            metrics: metrics.iter().copied().map(Some).collect(),
        }
    }

    #[test]
    fn a_breakdown_with_labels_totals_and_the_echo() {
        let p = planned(
            json!({"site_id": "1", "metrics": ["visitors", "bounce_rate", "percentage"], "dimensions": ["visit:source"],
                   "filters": [["is", "visit:country", ["DE"]]],
                   "include": {"total_rows": true, "imports": true}, "pagination": {"limit": 2}}),
            "Europe/Berlin",
        );
        let rows = QueryRows {
            main: vec![
                row(&["google.com"], &[10.0, 40.4, 66.666]),
                row(&[""], &[5.0, 20.0, 33.333]),
            ],
            total_rows: Some(7),
            comparison: None,
        };
        let r = respond(&p, &rows).unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({
                "results": [
                    {"metrics": [10, 40, 66.7], "dimensions": ["google.com"]},
                    {"metrics": [5, 20, 33.3], "dimensions": ["Direct / None"]}
                ],
                "meta": {"total_rows": 7},
                "query": {
                    "site_id": "1",
                    "metrics": ["visitors", "bounce_rate", "percentage"],
                    "date_range": ["2024-03-01T00:00:00+01:00", "2024-03-31T23:59:59+02:00"],
                    "filters": [["is", "visit:country", ["DE"]]],
                    "dimensions": ["visit:source"],
                    "order_by": [["visitors", "desc"], ["visit:source", "asc"]],
                    "include": {"time_labels": false, "total_rows": true, "imports": true},
                    "pagination": {"limit": 2, "offset": 0}
                }
            })
        );
    }

    #[test]
    fn comparisons_match_rows_by_dimensions_and_time_by_position() {
        let p = planned(
            json!({"metrics": ["visitors", "bounce_rate"], "dimensions": ["time:day", "visit:country"],
                   "date_range": ["2024-03-01", "2024-03-02"],
                   "include": {"time_labels": true, "comparisons": {"mode": "previous_period"}}}),
            "UTC",
        );
        let main = vec![
            row(&["2024-03-01", "DE"], &[10.0, 50.0]),
            row(&["2024-03-02", "DE"], &[4.0, 25.0]),
            row(&["2024-03-02", ""], &[3.0, 0.0]),
        ];
        // The previous period is 2024-02-28 and 2024-02-29.
        let comparison = vec![
            row(&["2024-02-28", "DE"], &[5.0, 40.0]),
            row(&["2024-02-29", "DE"], &[8.0, 0.0]),
            row(&["2024-02-29", "FR"], &[9.0, 10.0]),
        ];
        assert!(p.comparison(&main).is_some());
        let r = respond(
            &p,
            &QueryRows {
                main,
                total_rows: None,
                comparison: Some(comparison),
            },
        )
        .unwrap();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v["results"],
            json!([
                {"metrics": [10, 50], "dimensions": ["2024-03-01", "DE"],
                 "comparison": {"dimensions": ["2024-02-28", "DE"], "metrics": [5, 40], "change": [100, 10]}},
                {"metrics": [4, 25], "dimensions": ["2024-03-02", "DE"],
                 "comparison": {"dimensions": ["2024-02-29", "DE"], "metrics": [8, 0], "change": [-50, null]}},
                {"metrics": [3, 0], "dimensions": ["2024-03-02", "(not set)"],
                 "comparison": {"dimensions": ["2024-02-29", "(not set)"], "metrics": [0, 0], "change": [100, null]}}
            ])
        );
        assert_eq!(
            v["meta"],
            json!({"time_labels": ["2024-03-01", "2024-03-02"],
                   "comparison_date_range": ["2024-02-28T00:00:00+00:00", "2024-02-29T23:59:59+00:00"]})
        );
        assert_eq!(
            v["query"]["include"]["comparisons"],
            json!({"mode": "previous_period"})
        );
    }

    #[test]
    fn a_comparison_period_with_fewer_buckets_has_no_time_for_the_last() {
        // Two days against a custom range of one.
        let p = planned(
            json!({"dimensions": ["time:day"], "date_range": ["2024-03-01", "2024-03-02"],
                   "include": {"comparisons": {"mode": "custom", "date_range": ["2024-01-01", "2024-01-01"]}}}),
            "UTC",
        );
        let main = vec![row(&["2024-03-01"], &[2.0]), row(&["2024-03-02"], &[4.0])];
        let comparison = vec![row(&["2024-01-01"], &[1.0])];
        let r = respond(
            &p,
            &QueryRows {
                main,
                total_rows: None,
                comparison: Some(comparison),
            },
        )
        .unwrap();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v["results"][0]["comparison"],
            json!({"dimensions": ["2024-01-01"], "metrics": [1], "change": [100]})
        );
        assert_eq!(
            v["results"][1]["comparison"],
            json!({"dimensions": [null], "metrics": [0], "change": [100]})
        );
        assert_eq!(
            v["query"]["include"]["comparisons"],
            json!({"mode": "custom", "date_range": ["2024-01-01T00:00:00+00:00", "2024-01-01T23:59:59+00:00"]})
        );
    }

    #[test]
    fn totals_without_dimensions_and_their_comparison() {
        let p = planned(
            json!({"metrics": ["visitors", "views_per_visit"], "include": {"comparisons": {"mode": "year_over_year"}}}),
            "UTC",
        );
        let r = respond(
            &p,
            &QueryRows {
                main: vec![row(&[], &[120.0, 2.5])],
                total_rows: None,
                comparison: Some(vec![row(&[], &[100.0, 2.0])]),
            },
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&r.results).unwrap(),
            json!([{"metrics": [120, 2.5], "dimensions": [],
                    "comparison": {"dimensions": [], "metrics": [100, 2.0], "change": [20, 25]}}])
        );
    }

    #[test]
    fn a_web_vital_without_measurements_is_null_and_has_no_change() {
        let p = planned(
            json!({"metrics": ["events", "lcp_p75", "cls_p75"], "dimensions": ["event:page"],
                   "include": {"comparisons": {"mode": "previous_period"}}}),
            "UTC",
        );
        let main = decode_rows(
            p.main(),
            br#"{"d0":"/","events":"4","lcp_p75":2512.5,"cls_p75":0.1234}
{"d0":"/a","events":"1","lcp_p75":null,"cls_p75":null}
{"d0":"/b","events":"2","lcp_p75":900,"cls_p75":0}"#,
        )
        .unwrap();
        assert_eq!(main[1].metrics, [Some(1.0), None, None]);
        let comparison = vec![row(&["/"], &[2.0, 2000.0, 0.1]), {
            let mut r = row(&["/a"], &[3.0, 0.0, 0.0]);
            r.metrics[1] = None;
            r
        }];
        let r = respond(
            &p,
            &QueryRows {
                main,
                total_rows: None,
                comparison: Some(comparison),
            },
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&r.results).unwrap(),
            json!([
                {"metrics": [4, 2513, 0.123], "dimensions": ["/"],
                 "comparison": {"dimensions": ["/"], "metrics": [2, 2000, 0.1], "change": [100, 26, 23]}},
                {"metrics": [1, null, null], "dimensions": ["/a"],
                 "comparison": {"dimensions": ["/a"], "metrics": [3, null, 0.0], "change": [-67, null, null]}},
                // No twin: nothing counted then, so no percentile either.
                {"metrics": [2, 900, 0.0], "dimensions": ["/b"],
                 "comparison": {"dimensions": ["/b"], "metrics": [0, null, null], "change": [100, null, null]}}
            ])
        );
    }

    #[test]
    fn missing_or_misshapen_rows_are_internal_errors() {
        let p = planned(json!({"include": {"total_rows": true}}), "UTC");
        let e = respond(
            &p,
            &QueryRows {
                main: vec![row(&[], &[1.0])],
                ..QueryRows::default()
            },
        )
        .unwrap_err();
        assert!(matches!(
            e,
            StatsError::RowShape {
                statement: "stats_total_rows",
                ..
            }
        ));
        let p = planned(
            json!({"include": {"comparisons": {"mode": "previous_period"}}}),
            "UTC",
        );
        let e = respond(
            &p,
            &QueryRows {
                main: vec![row(&[], &[1.0])],
                ..QueryRows::default()
            },
        )
        .unwrap_err();
        assert!(matches!(
            e,
            StatsError::RowShape {
                statement: "stats_comparison",
                ..
            }
        ));
        let p = planned(json!({}), "UTC");
        let e = respond(
            &p,
            &QueryRows {
                main: vec![row(&["x"], &[1.0])],
                ..QueryRows::default()
            },
        )
        .unwrap_err();
        assert_eq!(e.status(), 500);
        // No rows is a valid answer.
        let r = respond(&p, &QueryRows::default()).unwrap();
        assert!(r.results.is_empty());
    }

    #[test]
    fn the_plan_s_statements_decode_into_what_respond_takes() {
        let p = planned(
            json!({"metrics": ["visitors", "percentage"], "dimensions": ["event:page"]}),
            "UTC",
        );
        let rows = decode_rows(p.main(), br#"{"d0":"/","visitors":"3","percentage":75}"#).unwrap();
        let r = respond(
            &p,
            &QueryRows {
                main: rows,
                ..QueryRows::default()
            },
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&r.results).unwrap(),
            json!([{"metrics": [3, 75.0], "dimensions": ["/"]}])
        );
    }
}
