//! Writing a batch into ClickHouse: its event rows (RowBinary), then the rows of its
//! identify calls, each retried with capped exponential backoff until stored (docs/
//! design.md, "Delivery: at least once"). Nothing is inserted while the erasure ledger is
//! stale, and a batch is checked against it again before every attempt.

use crate::batch::{Pending, People};
use crate::ledger::Ledger;
use crate::pipeline::Health;
use bytes::Bytes;
use rivulet_common::ch::Db;
use rivulet_common::clickhouse_versions;
use rivulet_common::schema::events;
use rivulet_common::schema::people::{self, ClaimRow, TraitRow};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What an insert task needs.
#[derive(Clone)]
pub struct Writer {
    pub db: Db,
    pub health: Arc<Health>,
    pub ledger: Arc<Ledger>,
    /// `INSERT_RETRY_MAX_MS`.
    pub retry_max: Duration,
    /// `LEDGER_MAX_AGE_MS`: the oldest ledger an insert may be checked against.
    pub ledger_max_age: Duration,
}

impl Writer {
    /// Stores a batch: its events, then its people.
    pub async fn store(&self, mut batch: Pending) {
        insert_events(self, &mut batch).await;
        if !batch.people.is_empty() {
            self.wait_for_a_fresh_ledger().await;
            batch.without_erased(&self.ledger);
            insert_people(self, &batch.people).await;
        }
    }

    /// Waits until the ledger has been read within `ledger_max_age`: an erasure recorded
    /// before then is in it.
    async fn wait_for_a_fresh_ledger(&self) {
        let mut waited = false;
        while !self.ledger.fresh_within(self.ledger_max_age) {
            if !waited {
                tracing::warn!("the erasure ledger is stale: inserts wait until it is read again");
                waited = true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Inserts a batch's event rows, retrying with capped backoff until they are in
/// ClickHouse (or the task is aborted, at shutdown). Before each attempt the rows are
/// checked again against the erasure ledger, which must be fresh: a row of a person
/// erased meanwhile is never inserted.
async fn insert_events(w: &Writer, batch: &mut Pending) {
    let (db, health, retry_max) = (&w.db, &w.health, w.retry_max);
    let started = Instant::now();
    let mut delay = Duration::from_millis(100);
    let mut failures = 0u32;
    let mut quorum_waits = 0u32;
    loop {
        w.wait_for_a_fresh_ledger().await;
        let cut = batch.without_erased(&w.ledger);
        if cut > 0 {
            metrics::counter!("enricher_erased_rows_dropped_total").increment(cut as u64);
        }
        let rows = batch.rows();
        if rows == 0 {
            return;
        }
        let t = Instant::now();
        match insert_row_binary(db, &batch.chunks).await {
            Ok(()) => {
                metrics::histogram!("enricher_insert_duration_seconds")
                    .record(t.elapsed().as_secs_f64());
                metrics::histogram!("enricher_batch_rows").record(rows as f64);
                metrics::counter!("enricher_inserted_rows_total").increment(rows as u64);
                health.clickhouse_ok.store(true, Ordering::Relaxed);
                if failures > 0 {
                    tracing::info!(
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
                metrics::counter!("enricher_insert_quorum_waits_total").increment(1);
                quorum_waits += 1;
                if quorum_waits.is_multiple_of(100) {
                    tracing::warn!(error = %e, quorum_waits, rows, "an insert keeps waiting for another quorum insert to finish");
                }
                tokio::time::sleep(Duration::from_millis(20 + rand_below(80))).await;
            }
            Err(e) => {
                metrics::counter!("enricher_insert_failures_total").increment(1);
                health.clickhouse_ok.store(false, Ordering::Relaxed);
                failures += 1;
                // Once per outage, not once per retry.
                if failures == 1 {
                    tracing::warn!(error = %e, rows, "ClickHouse insert failed; retrying with backoff, not consuming meanwhile");
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(retry_max);
            }
        }
    }
}

/// Inserts a batch's claim and trait rows, each table retried until it has them.
async fn insert_people(w: &Writer, people: &People) {
    let (db, health, retry_max) = (&w.db, &w.health, w.retry_max);
    let mut delay = Duration::from_millis(100);
    for table in [people::CLAIMS_TABLE, people::TRAITS_TABLE] {
        loop {
            let done = match table {
                people::CLAIMS_TABLE => insert_claims(db, &people.claims).await,
                _ => insert_traits(db, &people.traits).await,
            };
            match done {
                Ok(()) => break,
                Err(e) => {
                    metrics::counter!("enricher_insert_failures_total").increment(1);
                    health.clickhouse_ok.store(false, Ordering::Relaxed);
                    tracing::warn!(error = %e, table, "insert of identify rows failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(retry_max);
                }
            }
        }
    }
}

async fn insert_claims(db: &Db, rows: &[ClaimRow]) -> Result<(), clickhouse::error::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = db.client.insert::<ClaimRow>(people::CLAIMS_TABLE).await?;
    for row in rows {
        insert.write(row).await?;
    }
    insert.end().await
}

async fn insert_traits(db: &Db, rows: &[TraitRow]) -> Result<(), clickhouse::error::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = db.client.insert::<TraitRow>(people::TRAITS_TABLE).await?;
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

/// Inserts RowBinary rows (as written by `EventRow::write_row_binary`, in chunks that
/// may split a row) into `events`.
pub async fn insert_row_binary(db: &Db, chunks: &[Bytes]) -> Result<(), clickhouse::error::Error> {
    let mut insert = db
        .events
        .insert_formatted_with(events::insert_rowbinary())
        .with_timeouts(Some(Duration::from_secs(30)), Some(Duration::from_secs(60)));
    for chunk in chunks {
        // A cheap reference count: a retry sends the same chunks again.
        insert.send(chunk.clone()).await?;
    }
    insert.end().await
}
