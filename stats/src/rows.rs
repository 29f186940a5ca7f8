//! A statement's answer read back: ClickHouse's `JSONEachRow`, by the statement's
//! columns (`d0`, `d1`, … then the metrics by name), into [`Row`]s. The planner, the
//! rollup and the response read rows through it, and it needs none of them.

use crate::error::StatsError;
use crate::metrics::Metric;
use crate::sql::Statement;
use serde_json::{Map, Value};

/// One row of a statement's answer: each dimension's raw value (empty when unknown), each
/// metric's value (`None`: a metric that has none, such as a web vital's percentile over
/// no measurement).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub dimensions: Vec<String>,
    pub metrics: Vec<Option<f64>>,
}

/// What the plan's statements answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryRows {
    pub main: Vec<Row>,
    /// The answer of [`crate::QueryPlan::total_rows`], when the plan has one.
    pub total_rows: Option<u64>,
    /// The rows of [`crate::QueryPlan::comparison`], when the plan gave one.
    pub comparison: Option<Vec<Row>>,
}

/// Reads a statement's answer in `JSONEachRow` (one object a line, keyed by column).
/// 64-bit integers may come quoted (ClickHouse's default) or not. `null` is no value for a
/// [nullable](Metric::is_nullable) metric; for the others it is NaN or infinity, read as 0.
pub fn decode_rows(statement: &Statement, body: &[u8]) -> Result<Vec<Row>, StatsError> {
    let dims = statement
        .columns
        .iter()
        .take_while(|c| is_dimension_column(c))
        .count();
    let bad = |reason: String| StatsError::RowShape {
        statement: statement.name,
        reason,
    };
    let text = std::str::from_utf8(body).map_err(|e| bad(e.to_string()))?;
    let mut rows = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let object: Map<String, Value> =
            serde_json::from_str(line).map_err(|e| bad(format!("{e}: {line}")))?;
        let get = |c: &String| {
            object
                .get(c)
                .ok_or_else(|| bad(format!("no column {c} in {line}")))
        };
        let mut row = Row {
            dimensions: Vec::with_capacity(dims),
            metrics: Vec::with_capacity(statement.columns.len() - dims),
        };
        for c in &statement.columns[..dims] {
            row.dimensions.push(match get(c)? {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            });
        }
        for c in &statement.columns[dims..] {
            let nullable = Metric::parse(c).is_some_and(Metric::is_nullable);
            row.metrics.push(match get(c)? {
                Value::Number(n) => Some(n.as_f64().unwrap_or(0.0)),
                Value::String(s) => Some(
                    s.parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite())
                        .ok_or_else(|| bad(format!("{c} is not a number: {s:?}")))?,
                ),
                Value::Null if nullable => None,
                Value::Null => Some(0.0),
                other => return Err(bad(format!("{c} is not a number: {other}"))),
            });
        }
        rows.push(row);
    }
    Ok(rows)
}

/// Reads the answer of [`crate::QueryPlan::total_rows`].
pub fn decode_count(statement: &Statement, body: &[u8]) -> Result<u64, StatsError> {
    let rows = decode_rows(statement, body)?;
    match rows.as_slice() {
        [row] => Ok(row.metrics.first().copied().flatten().unwrap_or(0.0) as u64),
        _ => Err(StatsError::RowShape {
            statement: statement.name,
            reason: format!("{} rows, not one", rows.len()),
        }),
    }
}

fn is_dimension_column(c: &str) -> bool {
    c.strip_prefix('d')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}
