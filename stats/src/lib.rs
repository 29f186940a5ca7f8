//! The Stats API's query engine (`POST /api/v2/query`, Plausible's Stats API v2 shape):
//! a request becomes a validated plan of ClickHouse statements, and their rows become the
//! response. No I/O here: the server runs the statements (docs/stats-api.md has the API;
//! this comment, how to drive the engine).
//!
//! ```text
//! let req = Request::from_json(body)?;                    // 400 on error: StatsError::status
//! // resolve req.site() to a site the caller may read; if req.needs_first_event(), read it
//! let mut site = SiteContext { site_id, time_zone: "Europe/Berlin".into(), first_event,
//!                              rollup: RollupState::NotLoaded };
//! // with the rollup (Planner::default().with_source(Arc::new(RollupSource))): if
//! // planner.needs_rollup_state(&req, &site, now_secs), read rollup::state_statement's rows
//! // into site.rollup (RollupState::from_rows)
//! let plan = planner.plan(&req, &site, now_secs)?;
//! let main = decode_rows(plan.main(), &run(plan.main()))?;          // FORMAT JSONEachRow
//! let total_rows = plan.total_rows().map(|s| decode_count(s, &run(s))).transpose()?;
//! let comparison = plan.comparison(&main).map(|s| decode_rows(&s, &run(&s))).transpose()?;
//! let response = respond(&plan, &QueryRows { main, total_rows, comparison })?;  // Serialize
//! ```
//!
//! where `run` sends a [`Statement`]: its SQL, each of its binds in order
//! (`query.bind(b)`), each of its settings (`with_option`), read with
//! `fetch_bytes("JSONEachRow")`. A ClickHouse error [`sql::TIMEOUT_EXCEEDED`] is the
//! server's 503.
//!
//! Modules: [`request`] (the wire), [`validate`] (the checks), [`date_range`] (ranges,
//! time zones, comparisons, buckets), [`filters`], [`metrics`], [`dimensions`],
//! [`planner`] (sources and plans), [`events_source`] (the exact SQL over `events`),
//! [`identity`] (who `users` counts), [`sql`] (binds and statements), [`response`].

pub mod date_range;
pub mod dimensions;
pub mod error;
pub mod events_source;
pub mod filters;
pub mod identity;
pub mod limits;
pub mod metrics;
pub mod planner;
pub mod request;
pub mod response;
pub mod rollup;
pub mod rows;
pub mod source;
pub mod sql;
#[cfg(test)]
mod test_support;
pub mod validate;
pub mod visits;

pub use date_range::FirstEvent;
pub use error::StatsError;
pub use planner::{share_main, Planner, QueryPlan, SharedMain};
pub use request::{Request, SiteRef};
pub use response::{respond, Response};
pub use rollup::{RollupSource, RollupState};
pub use rows::{decode_count, decode_rows, QueryRows, Row};
pub use source::{Restriction, Source, Spec};
pub use sql::{Bind, Statement};
pub use visits::VisitSource;

/// What the engine needs to know of the site a request reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteContext {
    pub site_id: u32,
    /// IANA time zone name; `UTC` when the site has none.
    pub time_zone: String,
    /// For `date_range: "all"` (see [`Request::needs_first_event`] and
    /// [`first_event_statement`]); [`FirstEvent::NotLoaded`] otherwise.
    pub first_event: FirstEvent,
    /// For the daily rollup (see [`Planner::needs_rollup_state`] and
    /// [`rollup::state_statement`]); without it every query reads `events`.
    pub rollup: RollupState,
}

impl SiteContext {
    /// A site in UTC, first event not loaded.
    pub fn utc(site_id: u32) -> Self {
        SiteContext {
            site_id,
            time_zone: "UTC".into(),
            first_event: FirstEvent::NotLoaded,
            rollup: RollupState::NotLoaded,
        }
    }
}

/// Plans a request with the exact source only ([`Planner::default`]).
pub fn plan(request: &Request, site: &SiteContext, now: i64) -> Result<QueryPlan, StatsError> {
    Planner::default().plan(request, site, now)
}

/// The statement that finds a site's first event (bots left out), for
/// `date_range: "all"`: one row, `first_event` in epoch seconds, 0 when the site has none
/// (then pass [`FirstEvent::NoEvents`]).
pub fn first_event_statement(site_id: u32) -> Statement {
    let mut s = sql::Sql::new();
    s.push("SELECT toUInt32(min(timestamp)) AS first_event FROM events WHERE site_id = ")
        .bind_uint(u64::from(site_id))
        .push(" AND is_bot = 0");
    Statement::new(
        "stats_first_event",
        s,
        vec!["first_event".into()],
        vec![(
            "max_execution_time",
            limits::MAX_EXECUTION_TIME_SECS.to_string(),
        )],
    )
}

impl FirstEvent {
    /// From [`first_event_statement`]'s answer.
    pub fn from_epoch(first_event: u64) -> FirstEvent {
        if first_event == 0 {
            FirstEvent::NoEvents
        } else {
            FirstEvent::At(first_event as i64)
        }
    }
}
