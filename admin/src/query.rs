//! Runs the Stats API's query engine (`rivulet-stats`) against ClickHouse: a request, for
//! a site, becomes the engine's plan, its statements are sent, and their rows become the
//! answer. The JSON API (`POST /api/v2/query`) and the dashboard both read through it, so
//! a figure the dashboard shows is the one the API answers.

use crate::error::AdminError;
use rivulet_common::ch::Db;
use rivulet_common::registry::Site;
use rivulet_stats::rollup;
use rivulet_stats::{
    decode_count, decode_rows, first_event_statement, FirstEvent, Planner, QueryRows, Request,
    Response, RollupSource, RollupState, SiteContext, Statement,
};
use std::sync::Arc;

/// The engine and the database it reads.
#[derive(Clone)]
pub struct Stats {
    db: Db,
    planner: Planner,
}

impl Stats {
    /// `max_memory_bytes` 0 leaves ClickHouse's own `max_memory_usage` in force.
    pub fn new(db: Db, max_execution_secs: u64, max_memory_bytes: u64) -> Self {
        Stats {
            db,
            // The daily rollup answers the top figures and time series of whole days;
            // everything else reads `events`.
            planner: Planner::default()
                .with_source(Arc::new(RollupSource))
                .with_max_execution_time(max_execution_secs)
                .with_max_memory_usage(max_memory_bytes),
        }
    }

    /// The answer to `request` for `site`, as of `now` (epoch seconds).
    pub async fn query(
        &self,
        request: &Request,
        site: &Site,
        now: i64,
    ) -> Result<Response, AdminError> {
        self.query_together(request, site, now, &Together::default())
            .await
    }

    /// [`Self::query`], as one of several questions about `site` asked at once (a
    /// dashboard page): the site's rollup state is read once for all of them, by the
    /// first that needs it.
    pub async fn query_together(
        &self,
        request: &Request,
        site: &Site,
        now: i64,
        together: &Together,
    ) -> Result<Response, AdminError> {
        let first_event = if request.needs_first_event() {
            let body = self.run(&first_event_statement(site.site_id)).await?;
            let first = decode_count(&first_event_statement(site.site_id), &body)?;
            FirstEvent::from_epoch(first)
        } else {
            FirstEvent::NotLoaded
        };
        let mut context = SiteContext {
            site_id: site.site_id,
            time_zone: site.time_zone().to_string(),
            first_event,
            rollup: RollupState::NotLoaded,
        };
        if self.planner.needs_rollup_state(request, &context, now) {
            let state = together
                .rollup
                .get_or_try_init(|| async {
                    let st = rollup::state_statement(&context)?;
                    RollupState::from_rows(&st, &self.run(&st).await?).map_err(AdminError::from)
                })
                .await?;
            context.rollup = state.clone();
        }
        let plan = self.planner.plan(request, &context, now)?;
        // The page and its count at once: neither needs the other.
        let total_rows = async {
            match plan.total_rows() {
                Some(s) => Ok::<_, AdminError>(Some(decode_count(s, &self.run(s).await?)?)),
                None => Ok(None),
            }
        };
        let main =
            async { Ok::<_, AdminError>(decode_rows(plan.main(), &self.run(plan.main()).await?)?) };
        let (main, total_rows) = tokio::join!(main, total_rows);
        let (main, total_rows) = (main?, total_rows?);
        let comparison = match plan.comparison(&main) {
            Some(s) => Some(decode_rows(&s, &self.run(&s).await?)?),
            None => None,
        };
        Ok(rivulet_stats::respond(
            &plan,
            &QueryRows {
                main,
                total_rows,
                comparison,
            },
        )?)
    }

    /// One statement's rows, as `JSONEachRow`.
    async fn run(&self, statement: &Statement) -> Result<bytes::Bytes, AdminError> {
        let mut q = self.db.client.query(&statement.sql);
        for b in &statement.binds {
            q = q.bind(b);
        }
        for (name, value) in &statement.settings {
            q = q.with_setting(*name, value.clone());
        }
        let started = std::time::Instant::now();
        let result = async { q.fetch_bytes("JSONEachRow")?.collect().await }.await;
        tracing::debug!(
            statement = statement.name,
            ms = started.elapsed().as_millis() as u64,
            "stats statement"
        );
        result.map_err(|e| {
            if is_timeout(&e) {
                AdminError::QueryTimeout
            } else if is_memory_limit(&e) {
                tracing::warn!(error = %e, statement = statement.name, "a Stats API statement hit the memory limit");
                AdminError::QueryTooLarge
            } else {
                tracing::warn!(error = %e, statement = statement.name, "a Stats API statement failed");
                AdminError::Unavailable(format!("ClickHouse ({e})"))
            }
        })
    }
}

/// What questions about one site asked at once share: its rollup state, read once.
#[derive(Default)]
pub struct Together {
    rollup: tokio::sync::OnceCell<RollupState>,
}

/// ClickHouse stopped the statement at its memory limit (MEMORY_LIMIT_EXCEEDED).
fn is_memory_limit(e: &clickhouse::error::Error) -> bool {
    let text = e.to_string();
    text.contains(&format!(
        "Code: {}",
        rivulet_stats::sql::MEMORY_LIMIT_EXCEEDED
    )) || text.contains("MEMORY_LIMIT_EXCEEDED")
}

/// ClickHouse stopped the statement at its `max_execution_time`.
fn is_timeout(e: &clickhouse::error::Error) -> bool {
    let text = e.to_string();
    text.contains(&format!("Code: {}", rivulet_stats::sql::TIMEOUT_EXCEEDED))
        || text.contains("TIMEOUT_EXCEEDED")
}
