//! The bounds of a query (docs/stats-api.md, "Limits"). Each keeps one request from
//! costing ClickHouse or the server more than a dashboard's worst case; a request past
//! one is a 400 that names the bound.

/// Dimensions of one query (Plausible's dashboards use at most 2).
pub const MAX_DIMENSIONS: usize = 3;
/// Leaf filters (`[op, dimension, values]`) in the whole filter tree.
pub const MAX_FILTER_LEAVES: usize = 20;
/// How deep `and`/`or`/`not` may nest: a leaf inside four of them is the deepest.
pub const MAX_FILTER_DEPTH: usize = 4;
/// Values of one leaf filter.
pub const MAX_FILTER_VALUES: usize = 100;
/// Characters of one filter value (a page path is at most 2048 at ingest).
pub const MAX_VALUE_CHARS: usize = 2048;
/// Characters of a `matches` pattern: RE2 compiles each once per query, but a long
/// pattern is a slow one.
pub const MAX_PATTERN_CHARS: usize = 256;
/// How deep a pattern's groups and repetitions may nest.
pub const MAX_PATTERN_NESTING: u32 = 32;
/// Characters of a custom property's name (`event:props:<name>`).
pub const MAX_PROPERTY_CHARS: usize = 256;
/// Rows of one page of results (Plausible's limit too) and its default.
pub const MAX_LIMIT: u64 = 10_000;
/// How far pagination may skip: ClickHouse sorts offset + limit rows to answer.
pub const MAX_OFFSET: u64 = 1_000_000;
/// Time buckets of one query (`meta.time_labels`): an hour over 416 days, a day over 27
/// years.
pub const MAX_TIME_BUCKETS: usize = 10_000;
/// Characters of the whole request body the server should accept (not checked here: the
/// server reads the body).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// ClickHouse's `max_execution_time` of every statement (seconds): a query over it fails
/// with [`crate::sql::TIMEOUT_EXCEEDED`], which the server answers 503.
pub const MAX_EXECUTION_TIME_SECS: u64 = 30;
/// How far before and after the range the events of its visits are read (seconds), so that
/// a visit's duration, entry and exit page, pageviews and bounce take in its events
/// outside the range: exact for every visit shorter than this on either side of the range
/// (docs/stats-api.md, "Visits").
pub const SESSION_LOOKAROUND_SECS: u64 = 6 * 3600;
