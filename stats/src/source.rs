//! What a source of rows is asked and must answer. A [`Source`] produces one relation for
//! a [`Spec`]: a `SELECT` whose columns are `d0`, `d1`, … (each dimension's raw value, a
//! string) and then each metric under its name, one row per group (one row in all when
//! there are no dimensions). The planner ([`crate::planner`]) picks the source, and wraps
//! its relation for ordering, pages, `total_rows` and the comparison.

use crate::date_range::{TimeRange, Zone};
use crate::dimensions::Dimension;
use crate::filters::Filter;
use crate::metrics::Metric;
use crate::sql::Sql;
use std::fmt::Debug;

/// What a source answers: one range of one site, grouped by resolved dimensions (no
/// `time` left: each time dimension has its bucket).
#[derive(Debug, Clone, Copy)]
pub struct Spec<'a> {
    pub site_id: u32,
    pub zone: &'a Zone,
    pub range: &'a TimeRange,
    pub metrics: &'a [Metric],
    pub dimensions: &'a [Dimension],
    /// All must hold.
    pub filters: &'a [Filter],
    /// Only the rows whose dimensions are among these values (a comparison reads the
    /// rows of the main result only).
    pub restriction: Option<&'a Restriction>,
    /// The site's local days the daily rollup cannot answer yet
    /// ([`crate::RollupState::Stale`]); `None` when not loaded.
    pub rollup_stale: Option<&'a [jiff::civil::Date]>,
    /// The days the rollup's visits do not hold yet, though the day table is valid
    /// ([`crate::RollupState::Stale`]); empty when not loaded.
    pub visits_missing: &'a [jiff::civil::Date],
}

/// Rows whose dimensions `dimensions` (indexes into [`Spec::dimensions`]) take one of
/// `values` (each as many strings as `dimensions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restriction {
    pub dimensions: Vec<usize>,
    pub values: Vec<Vec<String>>,
}

/// Where rows come from. See the module's comment for the contract of [`Source::select`].
pub trait Source: Send + Sync + Debug {
    /// For logs and the plan's [`crate::QueryPlan::source`].
    fn name(&self) -> &'static str;
    /// Whether it can answer this spec exactly.
    fn covers(&self, spec: &Spec) -> bool;
    /// The relation: columns `d0`… then the metrics by name, one row per group, with no
    /// `ORDER BY`, `LIMIT`, `FORMAT` or `SETTINGS`.
    fn select(&self, spec: &Spec) -> Sql;
    /// How many rows [`Self::select`] has (`include.total_rows`), as one row of one
    /// column, `total_rows`, when the source can count them for less than the relation
    /// costs; `None` (the default): the relation's rows are counted.
    fn count_rows(&self, _spec: &Spec) -> Option<Sql> {
        None
    }
}
