//! Runs the Stats API's query engine (`rivulet-stats`) against ClickHouse: a request, for
//! a site, becomes the engine's plan, its statements are sent, and their rows become the
//! answer. The JSON API (`POST /api/v2/query`) and the dashboard both read through it, so
//! a figure the dashboard shows is the one the API answers.

use crate::error::AdminError;
use rivulet_common::ch::Db;
use rivulet_common::registry::Site;
use rivulet_stats::rollup;
use rivulet_stats::{
    decode_count, decode_rows, first_event_statement, share_main, FirstEvent, Planner, QueryPlan,
    QueryRows, Request, Response, RollupSource, RollupState, Row, SiteContext, Statement,
    VisitSource,
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
            // The daily rollup answers the top figures, time series and breakdowns of
            // whole days, and its visits the same filtered by visit attributes;
            // everything else reads `events`.
            planner: Planner::default()
                .with_source(Arc::new(RollupSource))
                .with_source(Arc::new(VisitSource))
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
        let plan = self.plan(request, site, now, together).await?;
        self.answer(&plan).await
    }

    /// [`Self::query_together`] for several requests at once, each answered as it alone
    /// would be: those [`share_main`] can make one statement of (the dashboard's cards by
    /// visit attributes) are read with it, the others on their own, all concurrently.
    pub async fn query_shared(
        &self,
        requests: &[Request],
        site: &Site,
        now: i64,
        together: &Together,
    ) -> Vec<Result<Response, AdminError>> {
        let plans =
            futures::future::join_all(requests.iter().map(|r| self.plan(r, site, now, together)))
                .await;
        let mut answers: Vec<Option<Result<Response, AdminError>>> =
            plans.iter().map(|_| None).collect();
        // The plans, each with its request's place.
        let mut planned: Vec<(usize, QueryPlan)> = Vec::new();
        for (i, p) in plans.into_iter().enumerate() {
            match p {
                Ok(plan) => planned.push((i, plan)),
                Err(e) => answers[i] = Some(Err(e)),
            }
        }
        let refs: Vec<&QueryPlan> = planned.iter().map(|(_, p)| p).collect();
        let shared = share_main(&refs);
        let members = shared.as_ref().map(|s| s.members()).unwrap_or_default();
        let shared_rows = async {
            let s = shared.as_ref()?;
            let rows = async {
                let body = self.run(s.statement()).await?;
                Ok::<_, AdminError>(s.split(decode_rows(s.statement(), &body)?))
            };
            Some(rows.await)
        };
        let alone = futures::future::join_all(
            planned
                .iter()
                .enumerate()
                .filter(|(k, _)| !members.contains(k))
                .map(|(_, (i, plan))| async move { (*i, self.answer(plan).await) }),
        );
        let (shared_rows, alone) = tokio::join!(shared_rows, alone);
        for (i, answer) in alone {
            answers[i] = Some(answer);
        }
        match shared_rows {
            None => {}
            Some(Ok(rows)) => {
                let finished =
                    futures::future::join_all(members.iter().zip(rows).map(|(k, main)| {
                        let (i, plan) = &planned[*k];
                        async move { (*i, self.finish(plan, main, None, None).await) }
                    }))
                    .await;
                for (i, answer) in finished {
                    answers[i] = Some(answer);
                }
            }
            Some(Err(e)) => {
                for k in members {
                    answers[planned[*k].0] = Some(Err(same_failure(&e)));
                }
            }
        }
        answers
            .into_iter()
            .map(|a| {
                a.unwrap_or_else(|| Err(AdminError::Usage("a question was not answered".into())))
            })
            .collect()
    }

    /// The plan of `request` for `site`: its first event and the site's rollup state read
    /// first when it needs them.
    async fn plan(
        &self,
        request: &Request,
        site: &Site,
        now: i64,
        together: &Together,
    ) -> Result<QueryPlan, AdminError> {
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
        Ok(self.planner.plan(request, &context, now)?)
    }

    /// The answer of a plan: its statements run, their rows its response.
    async fn answer(&self, plan: &QueryPlan) -> Result<Response, AdminError> {
        // The page and its count at once: neither needs the other.
        let total_rows = async {
            match plan.total_rows() {
                Some(s) => Ok::<_, AdminError>(Some(decode_count(s, &self.run(s).await?)?)),
                None => Ok(None),
            }
        };
        let main =
            async { Ok::<_, AdminError>(decode_rows(plan.main(), &self.run(plan.main()).await?)?) };
        // A comparison of totals or of a series needs nothing of the main rows.
        let comparison = async {
            match plan.comparison_beside_main() {
                Some(s) => Ok::<_, AdminError>(Some(decode_rows(&s, &self.run(&s).await?)?)),
                None => Ok(None),
            }
        };
        let (main, total_rows, comparison) = tokio::join!(main, total_rows, comparison);
        self.finish(plan, main?, total_rows?, comparison?).await
    }

    /// A plan's response from its main rows (and its count): its comparison, if it asks
    /// for one, read with them unless it was read beside them (`compared`).
    async fn finish(
        &self,
        plan: &QueryPlan,
        main: Vec<Row>,
        total_rows: Option<u64>,
        compared: Option<Vec<Row>>,
    ) -> Result<Response, AdminError> {
        let comparison = match (compared, plan.comparison(&main)) {
            (Some(rows), _) => Some(rows),
            (None, Some(s)) => Some(decode_rows(&s, &self.run(&s).await?)?),
            (None, None) => None,
        };
        Ok(rivulet_stats::respond(
            plan,
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

/// The failure of a statement several answers shared, for each of them: the same variant
/// where it carries no cause, else what it says.
fn same_failure(e: &AdminError) -> AdminError {
    match e {
        AdminError::QueryTimeout => AdminError::QueryTimeout,
        AdminError::QueryTooLarge => AdminError::QueryTooLarge,
        AdminError::Unavailable(what) => AdminError::Unavailable(what.clone()),
        other => AdminError::Unavailable(format!("ClickHouse ({other})")),
    }
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
