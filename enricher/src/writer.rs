//! Writing a batch into ClickHouse: its event rows (RowBinary), then the rows of its
//! identify calls, each retried with capped exponential backoff until stored (docs/
//! design.md, "Delivery: at least once"). Nothing is inserted while the erasure ledger is
//! stale, and a batch is checked against it again before every attempt.

use crate::batch::{Pending, People};
use crate::health::LaneHealth;
use bytes::Bytes;
use rivulet_common::ch::Db;
use rivulet_common::clickhouse_versions;
use rivulet_common::schema::people::{self, ClaimRow, TraitRow};
use rivulet_enrichment::ledger::Ledger;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a batch's rows are written: ClickHouse ([`ClickHouse`]), or a fake in the
/// pipeline's tests. One attempt per call; the [`Writer`] retries.
pub trait Sink: Send + Sync + 'static {
    /// The batch's event rows, RowBinary-encoded, into `events`.
    fn events(
        &self,
        chunks: &[Bytes],
    ) -> impl Future<Output = Result<(), clickhouse::error::Error>> + Send;
    /// Rows of `person_claims`.
    fn claims(
        &self,
        rows: &[ClaimRow],
    ) -> impl Future<Output = Result<(), clickhouse::error::Error>> + Send;
    /// Rows of `person_trait_values`.
    fn traits(
        &self,
        rows: &[TraitRow],
    ) -> impl Future<Output = Result<(), clickhouse::error::Error>> + Send;
}

/// The sink of a running enricher.
pub struct ClickHouse(pub Db);

impl Sink for ClickHouse {
    async fn events(&self, chunks: &[Bytes]) -> Result<(), clickhouse::error::Error> {
        rivulet_enrichment::insert::insert_row_binary(&self.0, chunks).await
    }
    async fn claims(&self, rows: &[ClaimRow]) -> Result<(), clickhouse::error::Error> {
        insert_rows(&self.0, people::CLAIMS_TABLE, rows).await
    }
    async fn traits(&self, rows: &[TraitRow]) -> Result<(), clickhouse::error::Error> {
        insert_rows(&self.0, people::TRAITS_TABLE, rows).await
    }
}

/// What an insert task needs.
pub struct Writer<S> {
    pub sink: Arc<S>,
    pub health: Arc<LaneHealth>,
    pub ledger: Arc<Ledger>,
    /// `INSERT_RETRY_MAX_MS`.
    pub retry_max: Duration,
    /// `LEDGER_MAX_AGE_MS`: the oldest ledger an insert may be checked against.
    pub ledger_max_age: Duration,
}

// Not derived: that would ask for `S: Clone`, and the sink is shared, not copied.
impl<S> Clone for Writer<S> {
    fn clone(&self) -> Self {
        Writer {
            sink: self.sink.clone(),
            health: self.health.clone(),
            ledger: self.ledger.clone(),
            retry_max: self.retry_max,
            ledger_max_age: self.ledger_max_age,
        }
    }
}

impl<S: Sink> Writer<S> {
    fn lane(&self) -> &'static str {
        self.health.lane.as_str()
    }

    /// Stores a batch: its events, then its people.
    pub async fn store(&self, mut batch: Pending) {
        self.insert_events(&mut batch).await;
        if !batch.people.is_empty() {
            self.wait_for_a_fresh_ledger().await;
            batch.without_erased(&self.ledger);
            self.insert_people(&batch.people).await;
        }
    }

    /// Waits until the ledger has been read within `ledger_max_age`: an erasure recorded
    /// before then is in it.
    async fn wait_for_a_fresh_ledger(&self) {
        let mut waited = false;
        while !self.ledger.fresh_within(self.ledger_max_age) {
            if !waited {
                tracing::warn!(
                    lane = self.lane(),
                    "the erasure ledger is stale: inserts wait until it is read again"
                );
                waited = true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// An insert failed: retried after `delay`, which doubles up to `retry_max`.
    async fn failed(&self, delay: &mut Duration) {
        metrics::counter!("enricher_insert_failures_total", "lane" => self.lane()).increment(1);
        self.health.inserts_failing.store(true, Ordering::Relaxed);
        tokio::time::sleep(*delay).await;
        *delay = (*delay * 2).min(self.retry_max);
    }

    /// Inserts a batch's event rows, retrying with capped backoff until they are in
    /// ClickHouse (or the task is aborted, at shutdown). Before each attempt the rows are
    /// checked again against the erasure ledger, which must be fresh: a row of a person
    /// erased meanwhile is never inserted.
    async fn insert_events(&self, batch: &mut Pending) {
        let lane = self.lane();
        let started = Instant::now();
        let mut delay = Duration::from_millis(100);
        let mut failures = 0u32;
        let mut quorum_waits = 0u32;
        loop {
            self.wait_for_a_fresh_ledger().await;
            let cut = batch.without_erased(&self.ledger);
            if cut > 0 {
                metrics::counter!("enricher_erased_rows_dropped_total", "lane" => lane)
                    .increment(cut as u64);
            }
            let rows = batch.rows();
            if rows == 0 {
                return;
            }
            let t = Instant::now();
            match self.sink.events(&batch.chunks).await {
                Ok(()) => {
                    metrics::histogram!("enricher_insert_duration_seconds", "lane" => lane)
                        .record(t.elapsed().as_secs_f64());
                    metrics::histogram!("enricher_batch_rows", "lane" => lane).record(rows as f64);
                    metrics::counter!("enricher_inserted_rows_total", "lane" => lane)
                        .increment(rows as u64);
                    self.health.inserts_failing.store(false, Ordering::Relaxed);
                    if failures > 0 {
                        tracing::info!(
                            lane,
                            failures,
                            outage_ms = started.elapsed().as_millis() as u64,
                            "ClickHouse accepts inserts again"
                        );
                    }
                    return;
                }
                // Another quorum insert into the table is waiting for its quorum
                // (`clickhouse_versions::is_quorum_busy`): contention, not an outage. Try
                // again soon, at a random moment so that enrichers do not collide again.
                Err(e) if clickhouse_versions::is_quorum_busy(&e) => {
                    metrics::counter!("enricher_insert_quorum_waits_total", "lane" => lane)
                        .increment(1);
                    quorum_waits += 1;
                    if quorum_waits.is_multiple_of(100) {
                        tracing::warn!(lane, error = %e, quorum_waits, rows, "an insert keeps waiting for another quorum insert to finish");
                    }
                    tokio::time::sleep(Duration::from_millis(20 + rand_below(80))).await;
                }
                Err(e) => {
                    failures += 1;
                    // Once per outage, not once per retry.
                    if failures == 1 {
                        tracing::warn!(lane, error = %e, rows, "ClickHouse insert failed; retrying with backoff, not consuming meanwhile");
                    }
                    self.failed(&mut delay).await;
                }
            }
        }
    }

    /// Inserts a batch's claim and trait rows, each table retried until it has them.
    async fn insert_people(&self, people: &People) {
        let mut delay = Duration::from_millis(100);
        for table in [people::CLAIMS_TABLE, people::TRAITS_TABLE] {
            loop {
                let done = match table {
                    people::CLAIMS_TABLE => self.sink.claims(&people.claims).await,
                    _ => self.sink.traits(&people.traits).await,
                };
                match done {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(lane = self.lane(), error = %e, table, "insert of identify rows failed; retrying");
                        self.failed(&mut delay).await;
                    }
                }
            }
        }
    }
}

/// Rows of a people table; nothing to send is no insert.
async fn insert_rows<R: clickhouse::RowOwned + clickhouse::RowWrite>(
    db: &Db,
    table: &str,
    rows: &[R],
) -> Result<(), clickhouse::error::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = db.client.insert::<R>(table).await?;
    for row in rows {
        insert.write(row).await?;
    }
    insert.end().await
}

/// A number in `0..n`, from the clock's nanoseconds: jitter needs no better randomness.
fn rand_below(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u64::from(nanos) % n
}
