//! The one error type of the query engine. Every variant a client can cause names the
//! field (as a path into the request: `filters[0][2][1]`) and says what is allowed, so
//! the message can be shown as it is; [`StatsError::status`] is the HTTP status each
//! maps to, in one place.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum StatsError {
    /// The body is not JSON, or not a JSON object.
    #[error("the request is not valid JSON: {0}")]
    InvalidJson(String),

    #[error("`{field}` is not a field of a query; the fields are {allowed}")]
    UnknownField {
        field: String,
        allowed: &'static str,
    },

    #[error("`{field}` is required")]
    Missing { field: String },

    /// A value of the wrong JSON type or shape.
    #[error("`{field}` must be {expected}")]
    Invalid { field: String, expected: String },

    #[error("`{field}`: unknown metric {value:?}; the metrics are {allowed}")]
    UnknownMetric {
        field: String,
        value: String,
        allowed: &'static str,
    },

    #[error("`{field}`: unknown dimension {value:?}; the dimensions are {allowed}")]
    UnknownDimension {
        field: String,
        value: String,
        allowed: &'static str,
    },

    #[error("`{field}`: {value:?} is listed twice")]
    Duplicate { field: String, value: String },

    /// Two parts of the query that cannot go together, and what to do instead.
    #[error("`{field}`: {reason}")]
    Incompatible { field: String, reason: String },

    #[error("`{field}`: invalid date range {value}; {allowed}")]
    InvalidDateRange {
        field: String,
        value: String,
        allowed: &'static str,
    },

    #[error("`{field}`: unknown filter operator {value:?}; the operators are {allowed}")]
    UnknownOperator {
        field: String,
        value: String,
        allowed: &'static str,
    },

    #[error("`{field}`: {pattern:?} is not a regular expression ClickHouse can use: {reason}")]
    InvalidPattern {
        field: String,
        pattern: String,
        reason: String,
    },

    /// A bound of docs/stats-api.md, "Limits".
    #[error("`{field}`: {what} is {actual}, more than the limit of {max}")]
    TooLarge {
        field: String,
        what: &'static str,
        actual: u64,
        max: u64,
    },

    /// The plan needs something of the site the caller did not give (a bug of the
    /// caller, not of the request): see [`crate::SiteContext`].
    #[error("internal error: {0}")]
    SiteContext(String),

    /// The rows ClickHouse answered do not have the plan's shape (a bug, or a source
    /// that does not keep the contract of [`crate::source::Source`]).
    #[error("internal error: the answer of `{statement}` does not fit the plan: {reason}")]
    RowShape {
        statement: &'static str,
        reason: String,
    },
}

impl StatsError {
    /// The HTTP status of the error: 400 for anything the request can fix, 500 for the
    /// rest. (A ClickHouse timeout is the server's to map, to 503: see
    /// [`crate::sql::TIMEOUT_EXCEEDED`].)
    pub fn status(&self) -> u16 {
        match self {
            StatsError::SiteContext(_) | StatsError::RowShape { .. } => 500,
            _ => 400,
        }
    }

    pub(crate) fn invalid(field: impl Into<String>, expected: impl Into<String>) -> Self {
        StatsError::Invalid {
            field: field.into(),
            expected: expected.into(),
        }
    }

    pub(crate) fn incompatible(field: impl Into<String>, reason: impl Into<String>) -> Self {
        StatsError::Incompatible {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn too_large(
        field: impl Into<String>,
        what: &'static str,
        actual: usize,
        max: usize,
    ) -> Self {
        StatsError::TooLarge {
            field: field.into(),
            what,
            actual: actual as u64,
            max: max as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_errors_are_400_and_internal_ones_500() {
        assert_eq!(
            StatsError::Missing {
                field: "metrics".into()
            }
            .status(),
            400
        );
        assert_eq!(StatsError::SiteContext("x".into()).status(), 500);
        assert_eq!(
            StatsError::RowShape {
                statement: "stats_main",
                reason: "x".into()
            }
            .status(),
            500
        );
    }

    #[test]
    fn messages_name_the_field_and_what_is_allowed() {
        let e = StatsError::UnknownMetric {
            field: "metrics[1]".into(),
            value: "conversion_rate".into(),
            allowed: "visitors, visits",
        };
        assert_eq!(
            e.to_string(),
            "`metrics[1]`: unknown metric \"conversion_rate\"; the metrics are visitors, visits"
        );
    }
}
