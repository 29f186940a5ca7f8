//! The batch/insert state machine of a lane: the batch being filled, the insert under
//! way, and the rule that makes Rivulet lossless — a message's offset is stored only
//! once the rows it carried are in ClickHouse.
//!
//! A full batch is inserted by a task while the next one fills, one insert at a time: if
//! the next batch is due before the insert finished, [`Batcher::make_room`] waits for it,
//! and the lane does not poll meanwhile (this is what stops consumption while ClickHouse
//! is down; the insert retries with capped backoff). A revoked partition's offsets are
//! never stored, whether its rows are still filling or already on their way. At
//! shutdown the insert under way and what is left are inserted, within a limit, and
//! committed.

use crate::batch::Batch;
use crate::config::BatchLimits;
use crate::error::EnricherError;
use crate::health::LaneHealth;
use crate::writer::{Sink, Writer};
use rivulet_enrichment::ledger::Ledger;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};

/// The consumer's side of the group, as a lane sees it: where offsets go once their rows
/// are stored, and which partitions a rebalance took away. Kafka's consumer in the
/// service (`kafka::KafkaOffsets`), a fake in tests.
pub trait OffsetStore {
    /// Stores these next offsets to read, by partition, for the next commit.
    fn store(&self, next: &HashMap<i32, i64>);
    /// The partitions revoked since the last call.
    fn take_revoked(&self) -> Vec<i32>;
    /// Commits what is stored, now (at shutdown).
    fn commit(&self);
}

/// A batch whose insert is under way (or done: `handle` finished); its offsets are
/// stored when the insert succeeded.
struct InFlight {
    handle: JoinHandle<()>,
    next_offsets: HashMap<i32, i64>,
}

pub struct Batcher<S, O> {
    /// Where inserts run: the main runtime, while the lane has a thread of its own.
    io: tokio::runtime::Handle,
    limits: BatchLimits,
    writer: Writer<S>,
    offsets: O,
    ledger: Arc<Ledger>,
    health: Arc<LaneHealth>,
    batch: Batch,
    in_flight: Option<InFlight>,
}

impl<S: Sink, O: OffsetStore> Batcher<S, O> {
    pub fn new(
        io: tokio::runtime::Handle,
        limits: BatchLimits,
        writer: Writer<S>,
        offsets: O,
    ) -> Self {
        let ledger = writer.ledger.clone();
        let health = writer.health.clone();
        Batcher {
            io,
            limits,
            batch: Batch::new(&ledger),
            writer,
            offsets,
            ledger,
            health,
            in_flight: None,
        }
    }

    /// The batch being filled.
    pub fn batch(&mut self) -> &mut Batch {
        &mut self.batch
    }

    pub fn offsets(&self) -> &O {
        &self.offsets
    }

    /// Whether the batch is due: `BATCH_MAX_ROWS`, `BATCH_MAX_BYTES` or `BATCH_MAX_AGE_MS`.
    fn due(&self) -> bool {
        let b = &self.batch;
        b.rows() >= self.limits.max_rows
            || b.encoded_bytes() >= self.limits.max_bytes
            || b.started()
                .is_some_and(|t| t.elapsed() >= self.limits.max_age)
    }

    /// Before the next poll: stores the offsets of an insert that finished, and, when the
    /// batch is due, starts its insert, after waiting for the one under way (one insert at
    /// a time). `Ok(false)`: shutdown came while it waited. Dropping the future while it
    /// waits loses nothing (the insert stays in flight).
    pub async fn make_room(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<bool, EnricherError> {
        if self
            .in_flight
            .as_ref()
            .is_some_and(|f| f.handle.is_finished())
        {
            if let Some(mut f) = self.in_flight.take() {
                let joined = (&mut f.handle).await;
                self.stored_or_stop(joined, &f.next_offsets)?;
            }
        }
        if !self.due() {
            return Ok(true);
        }
        if let Some(f) = self.in_flight.as_mut() {
            let joined = tokio::select! {
                biased;
                _ = shutdown.changed() => return Ok(false),
                joined = &mut f.handle => joined,
            };
            if let Some(f) = self.in_flight.take() {
                self.stored_or_stop(joined, &f.next_offsets)?;
            }
        }
        let full = std::mem::replace(&mut self.batch, Batch::new(&self.ledger));
        self.in_flight = Some(self.start(full));
        Ok(true)
    }

    /// Forgets the offsets of partitions this consumer no longer owns. Their rows are
    /// still inserted (the new owner's copies collapse on `event_id`), but storing their
    /// offsets could skip messages of the new owner's.
    pub fn revoke(&mut self, partitions: &[i32]) {
        for p in partitions {
            self.batch.next_offsets.remove(p);
            if let Some(f) = self.in_flight.as_mut() {
                f.next_offsets.remove(p);
            }
        }
    }

    /// At shutdown: waits up to `give_up` for the insert under way, inserts the batch
    /// that is left, and commits. An insert still retrying then is abandoned, and its
    /// events and those after it stay uncommitted (they are redelivered). Returns whether
    /// everything was stored.
    pub async fn flush(mut self, give_up: Duration) -> bool {
        tracing::info!(
            lane = self.health.lane.as_str(),
            rows = self.batch.rows(),
            "shutting down: flushing the current batch"
        );
        let mut stored = match self.in_flight.take() {
            Some(f) => self.finish_within(f, give_up).await,
            None => true,
        };
        if stored && !self.batch.is_empty() {
            let last = std::mem::take(&mut self.batch);
            let f = self.start(last);
            stored = self.finish_within(f, give_up).await;
        }
        if stored {
            self.offsets.commit();
        } else {
            tracing::warn!(
                lane = self.health.lane.as_str(),
                "ClickHouse unavailable at shutdown; the batch's events stay uncommitted and will be redelivered"
            );
        }
        stored
    }

    /// Starts inserting `batch` in a task that retries with capped backoff until the
    /// rows are in ClickHouse (or it is aborted, at shutdown).
    fn start(&self, batch: Batch) -> InFlight {
        let (pending, next_offsets) = batch.into_parts();
        let writer = self.writer.clone();
        let handle = self.io.spawn(async move { writer.store(pending).await });
        InFlight {
            handle,
            next_offsets,
        }
    }

    /// `stored` while consuming. An insert task retries until its rows are stored, so it
    /// ends otherwise only through a bug (a panic): then the lane stops, rather than let
    /// the next batch store offsets past these events; its uncommitted events are
    /// redelivered.
    fn stored_or_stop(
        &self,
        joined: Result<(), JoinError>,
        next_offsets: &HashMap<i32, i64>,
    ) -> Result<(), EnricherError> {
        match joined {
            Ok(()) => {
                self.store_offsets(next_offsets);
                Ok(())
            }
            Err(e) => Err(EnricherError::InsertTask(e)),
        }
    }

    /// Waits up to `give_up` for an insert and stores its offsets; an insert still
    /// retrying then is aborted (its events stay uncommitted). Returns whether it stored.
    async fn finish_within(&self, mut f: InFlight, give_up: Duration) -> bool {
        match tokio::time::timeout(give_up, &mut f.handle).await {
            Ok(Ok(())) => {
                self.store_offsets(&f.next_offsets);
                true
            }
            Ok(Err(e)) => {
                // Panicked: its events stay uncommitted and are redelivered.
                tracing::error!(error = %e, "insert task failed; its events will be redelivered");
                false
            }
            Err(_) => {
                f.handle.abort();
                false
            }
        }
    }

    fn store_offsets(&self, next_offsets: &HashMap<i32, i64>) {
        if !next_offsets.is_empty() {
            self.offsets.store(next_offsets);
        }
        self.health.progressed();
    }
}
