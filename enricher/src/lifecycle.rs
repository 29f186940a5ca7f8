//! The data's lifecycle, run by one enricher of the group: the one that holds partition 0
//! of the raw topic (`Health::lifecycle_leader`; a rebalance moves the role with the
//! partition, and every step is safe to run twice). docs/privacy.md has the guarantees.
//!
//! **Erasure.** Every `ERASURE_CHECK_MS` the receipts not finished are read. Those
//! recorded at least `ERASURE_DELAY_MS` ago — by then every enricher's ledger holds them,
//! so no insert that starts later can bring their rows back — are taken as one batch, up
//! to `ERASURE_BATCH_MAX`, oldest first: one `ALTER … DELETE` per table for the whole
//! batch (on a cluster, on every shard's local table), whatever its size, since
//! ClickHouse rewrites the parts a mutation touches once per mutation. The runner then
//! waits until every server (`CLICKHOUSE_NODES`) has finished its mutations and counts
//! no row of the batch left; rows found (an insert that was under way) get the
//! mutations again. Only then are the receipts `done`, with each one's count.
//!
//! **Retention.** Every `RETENTION_CHECK_SECS`, the sites with `retention_days` lose what
//! is older than their cutoff (the start of the UTC day `retention_days` ago): when every
//! site has a retention, the months that end before the earliest cutoff are dropped
//! whole (`DROP PARTITION`, no rewrite), and the rest goes in one
//! `ALTER … DELETE` for all sites; people's claims and traits received before the cutoff too.
//! Each site's run is recorded in `retention_runs`.

use crate::config::LifecycleConfig;
use crate::health::Health;
use clickhouse::Row;
use rivulet_common::ch::{ChConfig, Db};
use rivulet_common::clickhouse_versions;
use rivulet_common::privacy::{self, IdKind, Receipt, RetentionRun, State};
use rivulet_common::registry::{Registry, Site};
use rivulet_common::schema::migrations::ROLLUP_TABLES;
use rivulet_common::schema::people::{CLAIMS_TABLE, TRAITS_TABLE};
use rivulet_common::schema::queries;
use rivulet_enrichment::rollup_job::{self, RollupJob};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Lifecycle {
    pub cfg: LifecycleConfig,
    pub db: Db,
    pub clickhouse: ChConfig,
    pub health: Arc<Health>,
}

/// How long the runner polls `system.mutations` for a batch's mutations to finish (it
/// polls on every version: `clickhouse_versions::mutations_sync`).
const MUTATION_WAIT: Duration = Duration::from_secs(1800);
/// How often the runner writes quorum markers where a mutation waits for one
/// (`release_last_quorum_parts`): late enough that a mutation has done the parts it can.
const MARKER_EVERY: Duration = Duration::from_secs(5);
/// Rounds of mutations before a batch is failed.
const ROUNDS: u32 = 3;
/// Days of the rollup computed per run of the runner at most.
const ROLLUP_DAYS_PER_RUN: usize = 92;

impl Lifecycle {
    /// Runs until the process ends.
    pub async fn run(self) {
        if !self.cfg.enabled {
            tracing::info!(
                "LIFECYCLE_RUNNER=false: erasures and retention are left to another enricher"
            );
            return;
        }
        let mut last_retention: Option<Instant> = None;
        let mut last_rollup: Option<Instant> = None;
        let mut marked = Instant::now();
        loop {
            tokio::time::sleep(self.cfg.erasure_check).await;
            if !self.health.lifecycle_leader.load(Ordering::Relaxed) {
                continue;
            }
            // Retention does not wait for its mutations, and a runner that stopped
            // mid-batch left its own: both still need markers where the server does.
            if marked.elapsed() >= MARKER_EVERY {
                self.release_last_quorum_parts().await;
                marked = Instant::now();
            }
            if let Err(e) = self.erase_due().await {
                tracing::warn!(error = %e, "erasures could not run; trying again");
            }
            if last_retention.is_none_or(|t| t.elapsed() >= self.cfg.retention_check) {
                match self.apply_retention().await {
                    Ok(()) => last_retention = Some(Instant::now()),
                    Err(e) => tracing::warn!(error = %e, "retention could not run; trying again"),
                }
            }
            let rollup_due = !self.cfg.rollup_interval.is_zero()
                && last_rollup.is_none_or(|t| t.elapsed() >= self.cfg.rollup_interval);
            if rollup_due {
                if let Err(e) = self.compute_rollup().await {
                    tracing::warn!(error = %e, "the rollup could not be computed; trying again");
                }
                last_rollup = Some(Instant::now());
            }
        }
    }

    /// Computes the Stats API's daily rollup for the days that need it, a quarter of a
    /// year at most per call, so that erasures are not kept waiting by a long backlog
    /// (an import of years).
    async fn compute_rollup(&self) -> Result<(), clickhouse::error::Error> {
        let sites: Vec<(u32, String)> = Registry::new(self.db.clone())
            .list_sites()
            .await
            .map_err(ch_error)?
            .iter()
            .map(|s| (s.site_id, s.time_zone().to_string()))
            .collect();
        let job = RollupJob {
            db: self.db.clone(),
            nodes: self.clickhouse.each_node(),
            margin: self.cfg.rollup_margin,
            max_days: Some(ROLLUP_DAYS_PER_RUN),
        };
        let started = Instant::now();
        let run = job
            .run(&sites, rivulet_common::epoch::now_ms() / 1000)
            .await?;
        if run.days > 0 {
            tracing::info!(
                days = run.days,
                rows = run.rows,
                waiting = run.waiting,
                seconds = started.elapsed().as_secs_f64(),
                "rollup computed"
            );
        }
        Ok(())
    }

    /// The `(site, UTC hour)`s of the batch's events: the rollup's days that read them
    /// are stamped stale before the deletes, and deleted with them.
    async fn erased_hours(
        &self,
        events_binds: &[u64],
    ) -> Result<Vec<(u32, u32)>, clickhouse::error::Error> {
        let sql = self.complete(
            &format!(
                "SELECT DISTINCT site_id, toUInt32(intDiv(toUInt32(timestamp), 3600) * 3600) AS hour \
                 FROM {{db}}.events WHERE {}",
                queries::ERASED_EVENTS
            ),
            "",
        );
        let mut q = self.db.client.query(&sql);
        for b in events_binds {
            q = q.bind(*b);
        }
        q.fetch_all::<(u32, u32)>().await
    }

    fn local_events(&self) -> &'static str {
        match self.db.topology.cluster() {
            Some(_) => rivulet_common::schema::events::LOCAL_TABLE,
            None => rivulet_common::schema::events::TABLE,
        }
    }

    /// `{db}` and `{table}` of a statement.
    fn complete(&self, sql: &str, table: &str) -> String {
        sql.replace("{db}", &self.db.database)
            .replace("{table}", table)
    }

    /// A delete mutation of `table`, once per replication group on a cluster ([`Db::alter`]).
    async fn mutate(
        &self,
        table: &str,
        condition: &str,
        binds: &[u64],
    ) -> Result<(), clickhouse::error::Error> {
        let action = self.complete(&format!("DELETE WHERE {condition}"), table);
        self.db
            .alter(table, &action, |q| binds.iter().fold(q, |q, b| q.bind(*b)))
            .await
            .map(|_| ())
    }

    /// Waits until no server has a mutation of Rivulet's tables left to finish.
    async fn mutations_finished(&self) -> Result<bool, clickhouse::error::Error> {
        let started = Instant::now();
        let mut marked = Instant::now();
        loop {
            let mut left = 0u64;
            for node in self.clickhouse.each_node() {
                left += node
                    .root
                    .query(queries::MUTATIONS_UNFINISHED)
                    .bind(&self.db.database)
                    .fetch_one::<u64>()
                    .await?;
            }
            if left == 0 {
                return Ok(true);
            }
            if started.elapsed() > MUTATION_WAIT {
                return Ok(false);
            }
            if marked.elapsed() >= MARKER_EVERY {
                self.release_last_quorum_parts().await;
                marked = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Where the server keeps a partition's last quorum part from mutations until the
    /// next insert (`clickhouse_versions::last_quorum_part_waits_for_an_insert`): writes a
    /// marker with the quorum into each partition of the mutated tables, on each server,
    /// that still has a part older than an unfinished mutation needs. The marker's part
    /// is newer than the mutation and needs none of it. Anything refused (another quorum
    /// insert under way, a replica down) is tried again on the next call.
    async fn release_last_quorum_parts(&self) {
        let needed = self.db.topology.cluster().is_some()
            && self.clickhouse.insert_quorum > 1
            && clickhouse_versions::last_quorum_part_waits_for_an_insert(&self.db.server_version);
        if !needed {
            return;
        }
        for node in self.clickhouse.each_node() {
            for table in [self.local_events(), CLAIMS_TABLE, TRAITS_TABLE] {
                if let Err(e) = self.mark_waiting_partitions(&node, table).await {
                    tracing::warn!(error = %e, table, "quorum markers not written; trying again");
                }
            }
        }
    }

    async fn mark_waiting_partitions(
        &self,
        node: &Db,
        table: &str,
    ) -> Result<(), clickhouse::error::Error> {
        let mutations: Vec<MutationBlocks> = node
            .root
            .query(queries::UNFINISHED_MUTATION_BLOCKS)
            .bind(&self.db.database)
            .bind(table)
            .fetch_all()
            .await?;
        if mutations.is_empty() {
            return Ok(());
        }
        let oldest: Vec<(String, i64)> = node
            .root
            .query(queries::OLDEST_PART_BY_PARTITION)
            .bind(&self.db.database)
            .bind(table)
            .fetch_all()
            .await?;
        for partition in partitions_waiting(&mutations_needs(&mutations), &oldest) {
            let insert = match table {
                CLAIMS_TABLE => node.events.query(queries::QUORUM_MARKER_CLAIMS),
                TRAITS_TABLE => node.events.query(queries::QUORUM_MARKER_TRAITS),
                _ => match month_start(&partition) {
                    Some(day) => node.events.query(queries::QUORUM_MARKER_EVENTS).bind(day),
                    None => continue,
                },
            };
            insert.execute().await?;
            metrics::counter!("enricher_quorum_markers_total").increment(1);
            tracing::debug!(table, partition, "quorum marker written");
        }
        Ok(())
    }

    /// Erases the requests that are due, as one batch.
    async fn erase_due(&self) -> Result<(), clickhouse::error::Error> {
        let due_before = (rivulet_common::epoch::now_ms() as u64)
            .saturating_sub(self.cfg.erasure_delay.as_millis() as u64);
        let batch: Vec<Receipt> = privacy::unfinished(&self.db)
            .await
            .map_err(ch_error)?
            .into_iter()
            .filter(|r| r.requested_at_ms <= due_before)
            .take(self.cfg.erasure_batch_max)
            .collect();
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
            return Ok(());
        };
        let (from, to) = (first.requested_at_ms, last.requested_at_ms);
        let started = Instant::now();
        tracing::info!(requests = batch.len(), "erasing a batch");
        let batch = self.with_linked_ids(batch, from, to).await?;
        let running: Vec<Receipt> = batch
            .iter()
            .filter(|r| r.state == State::Pending.as_str())
            .map(|r| r.with_state(State::Running, "", 0))
            .collect();
        write_receipts(&self.db, &running).await?;
        let counts = self.count_by_request(&batch, from, to).await?;
        let to_secs = to.div_ceil(1000);
        let events_binds = [from, to, from, to, to_secs, to_secs];
        let claims_binds = [from, to, from, to, to];
        let traits_binds = [from, to, to];
        // From now on the rollup's days with these events are read from `events`, where
        // the deletes are under way; the job computes none while they are; their
        // generations go with the events.
        let hours = self.erased_hours(&events_binds).await?;
        rollup_job::touch(&self.db, &hours).await?;
        let (rollup_days, rollup_binds) = rollup_job::days_of_hours(&hours);
        let mut rounds = 0;
        let outcome = loop {
            rounds += 1;
            self.mutate(self.local_events(), queries::ERASED_EVENTS, &events_binds)
                .await?;
            self.mutate(CLAIMS_TABLE, queries::ERASED_CLAIMS, &claims_binds)
                .await?;
            self.mutate(TRAITS_TABLE, queries::ERASED_TRAITS, &traits_binds)
                .await?;
            if !hours.is_empty() {
                for table in ROLLUP_TABLES {
                    self.mutate(table, &rollup_days, &rollup_binds).await?;
                }
            }
            metrics::counter!("enricher_erasure_mutations_total")
                .increment(3 + ROLLUP_TABLES.len() as u64 * u64::from(!hours.is_empty()));
            if !self.mutations_finished().await? {
                break Err(format!(
                    "the mutations did not finish within {} s",
                    MUTATION_WAIT.as_secs()
                ));
            }
            let left = self
                .rows_left(&events_binds, &claims_binds, &traits_binds)
                .await?;
            if left == 0 {
                break Ok(());
            }
            tracing::warn!(
                left,
                rounds,
                "rows of erased people remain on some replica; deleting again"
            );
            if rounds >= ROUNDS {
                break Err(format!(
                    "{left} rows remained after {ROUNDS} rounds of mutations"
                ));
            }
        };
        let finished: Vec<Receipt> = batch
            .iter()
            .map(|r| match &outcome {
                Ok(()) => r.with_state(
                    State::Done,
                    "",
                    counts.get(&r.request_id).copied().unwrap_or(0),
                ),
                Err(reason) => r.with_state(State::Failed, reason, 0),
            })
            .collect();
        write_receipts(&self.db, &finished).await?;
        tracing::info!(
            requests = batch.len(),
            rounds,
            seconds = started.elapsed().as_secs_f64(),
            ok = outcome.is_ok(),
            "erasure batch finished"
        );
        metrics::counter!("enricher_erasures_done_total").increment(batch.len() as u64);
        Ok(())
    }

    /// The batch's requests with the anonymous ids their users are linked to since they
    /// were recorded: claims made after the request (an identify still in Kafka then),
    /// lost claims included, and the anonymous ids their own events carry. Each new id
    /// is written to the ledger under its request, before anything is deleted, so the
    /// deletes and the readers of the ledger take it as they take the request's first ids.
    async fn with_linked_ids(
        &self,
        mut batch: Vec<Receipt>,
        from: u64,
        to: u64,
    ) -> Result<Vec<Receipt>, clickhouse::error::Error> {
        #[derive(Row, Deserialize)]
        struct Link {
            site_id: u32,
            user_id: String,
            anonymous_id: String,
        }
        let mut links: Vec<Link> = Vec::new();
        for sql in [
            queries::CLAIMS_OF_ERASED_USERS,
            queries::LINKED_ANONYMOUS_IDS,
        ] {
            let found: Vec<Link> = self
                .db
                .client
                .query(&self.complete(sql, ""))
                .bind(from)
                .bind(to)
                .fetch_all()
                .await?;
            links.extend(found);
        }
        let mut by_user: HashMap<(u32, &str), Vec<&str>> = HashMap::new();
        for l in &links {
            by_user
                .entry((l.site_id, &l.user_id))
                .or_default()
                .push(&l.anonymous_id);
        }
        let mut added: Vec<(usize, String)> = Vec::new();
        for (i, r) in batch.iter_mut().enumerate() {
            let mut ids: Vec<(String, String)> = serde_json::from_str(&r.ids).unwrap_or_default();
            let users: Vec<String> = ids
                .iter()
                .filter(|(k, _)| k == IdKind::UserId.as_str())
                .map(|(_, id)| id.clone())
                .collect();
            let mut known: HashSet<String> = ids
                .iter()
                .filter(|(k, _)| k == IdKind::AnonymousId.as_str())
                .map(|(_, id)| id.clone())
                .collect();
            for user in &users {
                for anon in by_user
                    .get(&(r.site_id, user.as_str()))
                    .into_iter()
                    .flatten()
                {
                    if known.insert(anon.to_string()) {
                        ids.push((IdKind::AnonymousId.as_str().into(), anon.to_string()));
                        added.push((i, anon.to_string()));
                    }
                }
            }
            if added.last().is_some_and(|(j, _)| *j == i) {
                r.ids = serde_json::to_string(&ids).unwrap_or_else(|_| r.ids.clone());
            }
        }
        if !added.is_empty() {
            let rows: Vec<(&Receipt, IdKind, String)> = added
                .into_iter()
                .map(|(i, anon)| (&batch[i], IdKind::AnonymousId, anon))
                .collect();
            tracing::info!(
                ids = rows.len(),
                "anonymous ids linked to erased users added to their requests"
            );
            privacy::extend_requests(&self.db, &rows)
                .await
                .map_err(ch_error)?;
        }
        Ok(batch)
    }

    /// The rows each request of the batch removes (its user id's and anonymous ids',
    /// each event once).
    async fn count_by_request(
        &self,
        batch: &[Receipt],
        from: u64,
        to: u64,
    ) -> Result<HashMap<String, u64>, clickhouse::error::Error> {
        #[derive(Row, Deserialize)]
        struct ByPerson {
            site_id: u32,
            user_id: String,
            anonymous_id: String,
            n: u64,
        }
        let to_secs = to.div_ceil(1000);
        let sql = self.complete(queries::ERASED_EVENTS_BY_PERSON, "");
        let groups: Vec<ByPerson> = self
            .db
            .client
            .query(&sql)
            .bind(from)
            .bind(to)
            .bind(from)
            .bind(to)
            .bind(to_secs)
            .bind(to_secs)
            .fetch_all()
            .await?;
        let mut owners: HashMap<(u32, IdKind, String), Vec<&str>> = HashMap::new();
        for r in batch {
            let ids: Vec<(String, String)> = serde_json::from_str(&r.ids).unwrap_or_default();
            for (kind, id) in ids {
                if let Some(kind) = IdKind::parse(&kind) {
                    owners
                        .entry((r.site_id, kind, id))
                        .or_default()
                        .push(&r.request_id);
                }
            }
        }
        let mut counts: HashMap<String, u64> = HashMap::new();
        for g in groups {
            let mut of: HashSet<&str> = HashSet::new();
            for key in [
                (g.site_id, IdKind::UserId, g.user_id),
                (g.site_id, IdKind::AnonymousId, g.anonymous_id),
            ] {
                of.extend(owners.get(&key).into_iter().flatten());
            }
            for request in of {
                *counts.entry(request.to_string()).or_insert(0) += g.n;
            }
        }
        Ok(counts)
    }

    /// Rows of the batch still on any server.
    async fn rows_left(
        &self,
        events_binds: &[u64],
        claims_binds: &[u64],
        traits_binds: &[u64],
    ) -> Result<u64, clickhouse::error::Error> {
        let mut left = 0;
        for node in self.clickhouse.each_node() {
            for (table, condition, binds) in [
                (self.local_events(), queries::ERASED_EVENTS, events_binds),
                (CLAIMS_TABLE, queries::ERASED_CLAIMS, claims_binds),
                (TRAITS_TABLE, queries::ERASED_TRAITS, traits_binds),
            ] {
                let sql = self.complete(
                    &format!("SELECT count() FROM {{db}}.{{table}} WHERE {condition}"),
                    table,
                );
                let mut q = node.root.query(&sql);
                for b in binds {
                    q = q.bind(*b);
                }
                left += q.fetch_one::<u64>().await?;
            }
        }
        Ok(left)
    }

    /// Removes what each site with a retention has kept longer.
    async fn apply_retention(&self) -> Result<(), clickhouse::error::Error> {
        let registry = Registry::new(self.db.clone());
        let sites: BTreeMap<u32, u32> = registry
            .list_sites()
            .await
            .map_err(ch_error)?
            .iter()
            .filter(|s| s.retention_days > 0)
            .map(|s| (s.site_id, s.retention_days))
            .collect();
        if sites.is_empty() {
            return Ok(());
        }
        let now = (rivulet_common::epoch::now_ms() as u64) / 1000;
        let today = now - now % 86_400;
        let cutoffs: BTreeMap<u32, u64> = sites
            .iter()
            .map(|(site, days)| (*site, today.saturating_sub(u64::from(*days) * 86_400)))
            .collect();
        let started = Instant::now();
        // Counted first: a mutation rewrites every part it touches, so none is sent for
        // nothing.
        let (condition, binds) = per_site(&cutoffs, "timestamp < toDateTime(?)", |c| c);
        #[derive(Row, Deserialize)]
        struct Expired {
            site_id: u32,
            n: u64,
        }
        let expired: Vec<Expired> = {
            let mut q = self.db.client.query(&format!(
                "SELECT site_id, uniqExact(event_id) AS n FROM events WHERE {condition} GROUP BY site_id"
            ));
            for b in &binds {
                q = q.bind(*b);
            }
            q.fetch_all().await?
        };
        let removed: HashMap<u32, u64> = expired.iter().map(|e| (e.site_id, e.n)).collect();
        if !expired.is_empty() {
            // Deleted sites too: their events stay (`sites delete`), and no retention of
            // theirs is applied by the deletes below, so a month they may have rows in
            // is dropped only if their own retention has expired it.
            let every_site = registry.list_sites_with_deleted().await.map_err(ch_error)?;
            let dropped = self.drop_expired_months(&every_site, today).await?;
            // What the dropped months did not take.
            let mut q = self
                .db
                .client
                .query(&format!("SELECT count() FROM events WHERE {condition}"));
            for b in &binds {
                q = q.bind(*b);
            }
            if q.fetch_one::<u64>().await? > 0 {
                self.mutate(self.local_events(), &condition, &binds).await?;
                metrics::counter!("enricher_retention_mutations_total").increment(1);
            }
            // The rollup: the counts of each site's local days wholly before its cutoff
            // go (in every zone: two days before the cutoff's UTC day; their markers
            // stay, those days now have nothing), and the days that read the last hours
            // before the cutoff are stamped, to be read from `events` and computed again.
            let hours: Vec<(u32, u32)> = expired
                .iter()
                .filter_map(|e| cutoffs.get(&e.site_id).map(|c| (e.site_id, *c)))
                .flat_map(|(site, cutoff)| {
                    (1..=24u64).map(move |h| (site, cutoff.saturating_sub(h * 3600) as u32))
                })
                .collect();
            rollup_job::touch(&self.db, &hours).await?;
            let (rollup, rollup_binds) =
                per_site(&cutoffs, "kind != 0 AND toUInt16(local_day) < ?", |c| {
                    (c / 86_400).saturating_sub(1)
                });
            for table in ROLLUP_TABLES {
                self.mutate(table, &rollup, &rollup_binds).await?;
            }
            tracing::info!(
                months_dropped = dropped,
                sites = expired.len(),
                "retention removed expired events"
            );
        }
        let (claims, claim_binds) = per_site(&cutoffs, "received_at_ms < ?", |c| c * 1000);
        let (traits, trait_binds) = per_site(&cutoffs, "received_at_ms < ?", |c| c * 1000);
        for (table, condition, binds) in [
            (CLAIMS_TABLE, claims, claim_binds),
            (TRAITS_TABLE, traits, trait_binds),
        ] {
            let mut q = self
                .db
                .client
                .query(&format!("SELECT count() FROM {table} WHERE {condition}"));
            for b in &binds {
                q = q.bind(*b);
            }
            if q.fetch_one::<u64>().await? > 0 {
                self.mutate(table, &condition, &binds).await?;
            }
        }
        let runs: Vec<RetentionRun> = cutoffs
            .iter()
            .map(|(site, cutoff)| RetentionRun {
                site_id: *site,
                ran_at: now as u32,
                cutoff: *cutoff as u32,
                rows_removed: removed.get(site).copied().unwrap_or(0),
            })
            .collect();
        let mut insert = self
            .db
            .events
            .insert::<RetentionRun>("retention_runs")
            .await?;
        for r in &runs {
            insert.write(r).await?;
        }
        insert.end().await?;
        tracing::debug!(
            seconds = started.elapsed().as_secs_f64(),
            "retention checked"
        );
        Ok(())
    }

    /// Drops the months of `events` that end before every site's cutoff, when every
    /// site — deleted ones included — has a retention. A month is judged by the
    /// registry, not by the rows in it: an import or a late event may bring a site's
    /// rows into an old month at any moment, and only a month every site has expired
    /// loses nothing it should keep.
    async fn drop_expired_months(
        &self,
        sites: &[Site],
        today: u64,
    ) -> Result<usize, clickhouse::error::Error> {
        let Some(limit) = droppable_before(sites, today) else {
            return Ok(0);
        };
        let months: Vec<u32> = self
            .db
            .client
            .query(queries::EVENTS_MONTHS)
            .fetch_all()
            .await?;
        let mut dropped = 0;
        for month in months.into_iter().filter(|m| month_end(*m) <= limit) {
            self.clickhouse
                .drop_partition(self.local_events(), month)
                .await?;
            metrics::counter!("enricher_retention_partitions_dropped_total").increment(1);
            dropped += 1;
        }
        Ok(dropped)
    }
}

/// An unfinished mutation's block number in each partition it applies to.
#[derive(Row, Deserialize)]
struct MutationBlocks {
    partitions: Vec<String>,
    numbers: Vec<i64>,
}

/// The newest block number any unfinished mutation needs, by partition: every part of
/// the partition with an older data version has yet to be mutated.
fn mutations_needs(mutations: &[MutationBlocks]) -> BTreeMap<String, i64> {
    let mut needs: BTreeMap<String, i64> = BTreeMap::new();
    for m in mutations {
        for (partition, number) in m.partitions.iter().zip(&m.numbers) {
            let n = needs.entry(partition.clone()).or_insert(*number);
            *n = (*n).max(*number);
        }
    }
    needs
}

/// The partitions whose oldest part (`(partition, oldest data version)`) a mutation
/// still needs.
fn partitions_waiting(needs: &BTreeMap<String, i64>, oldest: &[(String, i64)]) -> Vec<String> {
    oldest
        .iter()
        .filter(|(p, v)| needs.get(p).is_some_and(|n| v < n))
        .map(|(p, _)| p.clone())
        .collect()
}

/// `YYYY-MM-01` of a `toYYYYMM` partition id (`202503`); `None` for any other id.
fn month_start(partition: &str) -> Option<String> {
    let valid = partition.len() == 6 && partition.bytes().all(|b| b.is_ascii_digit());
    valid.then(|| format!("{}-{}-01", &partition[..4], &partition[4..]))
}

/// The time before which whole months may be dropped: the earliest cutoff (the start of
/// `today`, less each site's retention), when every site of `sites` has a retention (a
/// site that keeps everything keeps every month; a deleted site keeps its events).
fn droppable_before(sites: &[Site], today: u64) -> Option<u64> {
    if sites.is_empty() || sites.iter().any(|s| s.retention_days == 0) {
        return None;
    }
    sites
        .iter()
        .map(|s| today.saturating_sub(u64::from(s.retention_days) * 86_400))
        .min()
}

/// The start (UTC, seconds) of the month after `yyyymm`, as `toYYYYMM` numbers months.
fn month_end(yyyymm: u32) -> u64 {
    let (year, month) = (yyyymm / 100, yyyymm % 100);
    let (year, month) = if month >= 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    rivulet_common::epoch::days_from_civil(i64::from(year), i64::from(month), 1).max(0) as u64
        * 86_400
}

/// `(site_id = ? AND <rule>) OR …` for every site, and its binds (the rule's one bind is
/// `value(cutoff)`).
fn per_site(
    cutoffs: &BTreeMap<u32, u64>,
    rule: &str,
    value: impl Fn(u64) -> u64,
) -> (String, Vec<u64>) {
    let condition = vec![format!("(site_id = ? AND {rule})"); cutoffs.len()].join(" OR ");
    let binds = cutoffs
        .iter()
        .flat_map(|(site, cutoff)| [u64::from(*site), value(*cutoff)])
        .collect();
    (condition, binds)
}

async fn write_receipts(db: &Db, receipts: &[Receipt]) -> Result<(), clickhouse::error::Error> {
    if receipts.is_empty() {
        return Ok(());
    }
    let mut insert = db.events.insert::<Receipt>(privacy::REQUESTS_TABLE).await?;
    for r in receipts {
        insert.write(r).await?;
    }
    insert.end().await
}

fn ch_error(e: rivulet_common::CommonError) -> clickhouse::error::Error {
    clickhouse::error::Error::Custom(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_condition_names_every_site_with_its_own_cutoff() {
        let cutoffs = BTreeMap::from([(1, 100), (7, 700)]);
        let (c, b) = per_site(&cutoffs, "set_at_ms < ?", |c| c * 1000);
        assert_eq!(
            c,
            "(site_id = ? AND set_at_ms < ?) OR (site_id = ? AND set_at_ms < ?)"
        );
        assert_eq!(b, [1, 100_000, 7, 700_000]);
    }

    fn site(site_id: u32, retention_days: u32) -> Site {
        Site {
            site_id,
            domain: format!("s{site_id}.example"),
            name: String::new(),
            created_at: 0,
            deleted: 0,
            version: 1,
            domain_list: Vec::new(),
            retention_days,
            ..Site::default()
        }
    }

    #[test]
    fn months_are_dropped_only_when_every_site_has_expired_them() {
        let today = 100 * 86_400;
        let both = [site(1, 30), site(2, 10)];
        assert_eq!(droppable_before(&both, today), Some(70 * 86_400));
        // A site that keeps everything keeps every month, even one it has no rows in.
        let with_keeper = [site(1, 30), site(2, 10), site(3, 0)];
        assert_eq!(droppable_before(&with_keeper, today), None);
        assert_eq!(droppable_before(&[], today), None);
        // A deleted site's events stay: without a retention of its own it keeps every
        // month; with one, its cutoff counts like any other.
        let deleted = |id, days| Site {
            deleted: 1,
            ..site(id, days)
        };
        assert_eq!(droppable_before(&[site(1, 30), deleted(4, 0)], today), None);
        assert_eq!(
            droppable_before(&[site(1, 30), deleted(4, 60)], today),
            Some(40 * 86_400)
        );
    }

    #[test]
    fn a_partition_waits_while_its_oldest_part_is_older_than_a_mutation_needs() {
        let mutations = [
            MutationBlocks {
                partitions: vec!["202503".into(), "202611".into()],
                numbers: vec![1, 687],
            },
            MutationBlocks {
                partitions: vec!["202503".into(), "202611".into()],
                numbers: vec![4, 901],
            },
        ];
        let needs = mutations_needs(&mutations);
        assert_eq!(needs["202503"], 4);
        assert_eq!(needs["202611"], 901);
        let oldest = [
            ("202503".to_string(), 0),   // the month's only part, never mutated
            ("202611".to_string(), 901), // every part mutated (or newer)
            ("197001".to_string(), 0),   // no mutation names it
        ];
        assert_eq!(partitions_waiting(&needs, &oldest), vec!["202503"]);
        assert!(partitions_waiting(&BTreeMap::new(), &oldest).is_empty());
    }

    #[test]
    fn a_marker_is_dated_in_its_partitions_month() {
        assert_eq!(month_start("202503").as_deref(), Some("2025-03-01"));
        assert_eq!(month_start("all"), None);
        assert_eq!(month_start("2025031"), None);
    }

    #[test]
    fn a_month_ends_where_the_next_one_starts() {
        assert_eq!(month_end(197001), 31 * 86_400);
        assert_eq!(month_end(202402), 1_709_251_200); // 2024-03-01
        assert_eq!(month_end(202612), 1_798_761_600); // 2027-01-01
    }
}
