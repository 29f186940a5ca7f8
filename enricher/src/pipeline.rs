//! The consumer loop: `events.raw` → enrich → batch → ClickHouse, at least once.
//!
//! Rows are encoded (RowBinary) as they are enriched. A full batch is inserted by a task
//! while the next one fills, one insert at a time: if the next batch is due before the
//! insert finished, the loop waits for it and does not poll. Offsets are stored only
//! after the rows they carry are in ClickHouse (auto-commit then commits stored offsets;
//! shutdown commits synchronously). While ClickHouse is down the insert is retried with
//! capped exponential backoff and the loop stops polling as soon as the next batch is
//! due, so nothing is dropped and nothing is committed. Messages that cannot be decoded go
//! to `events.dlq` with the reason in a header; their offsets advance once the DLQ has
//! acknowledged them.
//!
//! An event or identify call of a person erased before it happened or arrived is dropped
//! here (its offset still moves), and a batch is checked against the erasure ledger again
//! before its insert (`batch`, `insert`).
//!
//! Sessions live with partitions: a visitor's events all land on one partition (the
//! message key), and a revoked partition's session state is dropped. After a rebalance
//! the new owner starts a fresh session for a visitor at its next event, so a rebalance
//! splits an ongoing session in two at most.

use crate::batch::{Batch, Pending};
use crate::config::EnricherConfig;
use crate::data::EnrichmentData;
use crate::insert::Writer;
use crate::ledger::{EventIds, Ledger};
use crate::message::{self, decode, Poison};
use crate::session::SessionTracker;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use rivulet_common::ch::Db;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};

/// Shared between the loop, the probe and the HTTP server.
#[derive(Default)]
pub struct Health {
    pub kafka_ok: AtomicBool,
    pub clickhouse_ok: AtomicBool,
    pub shutting_down: AtomicBool,
    pub assigned_partitions: AtomicUsize,
    /// This enricher holds partition 0 of the raw topic: it runs erasures and retention
    /// (`lifecycle`), so that one process of the group does, whatever its size.
    pub lifecycle_leader: AtomicBool,
}

/// Records rebalances for the loop, which owns the session state.
#[derive(Default)]
pub struct RebalanceContext {
    revoked: Mutex<Vec<i32>>,
    health: Arc<Health>,
    /// The live lane's consumer: holding partition 0 makes this enricher the one that
    /// runs erasures and retention.
    leads_lifecycle: bool,
}

impl RebalanceContext {
    pub fn new(health: Arc<Health>, leads_lifecycle: bool) -> Self {
        RebalanceContext {
            revoked: Mutex::new(Vec::new()),
            health,
            leads_lifecycle,
        }
    }
}

impl ClientContext for RebalanceContext {}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let parts: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
            tracing::info!(partitions = ?parts, "partitions revoked");
            self.revoked.lock().expect("revoked lock").extend(parts);
        }
    }
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let parts: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
            tracing::info!(partitions = ?parts, "partitions assigned");
        }
        let assignment = consumer.assignment().ok();
        let n = assignment.as_ref().map_or(0, |a| a.count());
        let leader = self.leads_lifecycle
            && assignment.is_some_and(|a| a.elements().iter().any(|e| e.partition() == 0));
        if self.health.lifecycle_leader.swap(leader, Ordering::Relaxed) != leader {
            tracing::info!(leader, "erasures and retention are run here: {leader}");
        }
        self.health.assigned_partitions.store(n, Ordering::Relaxed);
        metrics::gauge!("enricher_assigned_partitions").set(n as f64);
    }
}

pub type RawConsumer = StreamConsumer<RebalanceContext>;

/// The consumer of a lane: `cfg.topic` in group `cfg.group_id`; only the live lane's
/// leads the lifecycle.
pub fn consumer(
    cfg: &EnricherConfig,
    health: Arc<Health>,
    leads_lifecycle: bool,
) -> Result<RawConsumer, rdkafka::error::KafkaError> {
    let mut c = rivulet_common::kafka::base_config();
    c.set("bootstrap.servers", &cfg.brokers)
        .set("client.id", "rivulet-enricher")
        .set("group.id", &cfg.group_id)
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        // Offsets are stored by hand, after the insert: never by librdkafka on delivery.
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000")
        .set(
            "max.poll.interval.ms",
            cfg.max_poll_interval.as_millis().to_string(),
        );
    for (key, value) in FETCH_SETTINGS {
        c.set(key, value);
    }
    c.create_with_context(RebalanceContext::new(health, leads_lifecycle))
}

/// How the consumer fetches; the enricher benchmark's baseline consumer reads with the
/// same settings (`bench/src/bin/consume_baseline.rs`).
pub const FETCH_SETTINGS: [(&str, &str); 3] = [
    ("fetch.min.bytes", "1"),
    // Prefetch bounded to 8 MB: enough to keep a batch filling, and it counts in RSS.
    ("queued.max.messages.kbytes", "8192"),
    // Once the prefetch queue is full, librdkafka waits this long before fetching again
    // (default 1 s). The enricher drains its queue in a fraction of that, so with the
    // default it sat idle for most of every second
    // (docs/decisions/005-enricher-throughput-and-memory.md). A short backoff refetches
    // as soon as there is room.
    ("fetch.queue.backoff.ms", "20"),
];

pub fn dlq_producer(cfg: &EnricherConfig) -> Result<FutureProducer, rdkafka::error::KafkaError> {
    let mut c = rivulet_common::kafka::base_config();
    c.set("bootstrap.servers", &cfg.brokers)
        .set("client.id", "rivulet-enricher-dlq")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", "10000");
    c.create()
}

/// A batch whose insert is under way (or done: `handle` finished); its offsets are
/// stored when the insert succeeded.
struct InFlight {
    handle: JoinHandle<()>,
    next_offsets: HashMap<i32, i64>,
}

pub struct Pipeline {
    /// Where inserts run: the main runtime, while `run` has a thread of its own.
    pub io: tokio::runtime::Handle,
    pub cfg: EnricherConfig,
    /// The rules and databases; a reload swaps them between two events.
    pub data: Arc<EnrichmentData>,
    pub db: Db,
    pub consumer: Arc<RawConsumer>,
    pub dlq: FutureProducer,
    pub health: Arc<Health>,
    /// The erasure ledger, kept fresh by a task of its own.
    pub ledger: Arc<Ledger>,
}

/// How long shutdown waits for each insert before leaving its events uncommitted.
const SHUTDOWN_INSERT_WAIT: Duration = Duration::from_secs(30);

/// Whether a batch is due: `BATCH_MAX_ROWS`, `BATCH_MAX_BYTES` or `BATCH_MAX_AGE_MS`.
fn due(batch: &Batch, cfg: &EnricherConfig) -> bool {
    batch.rows() >= cfg.batch_max_rows
        || batch.encoded_bytes() >= cfg.batch_max_bytes
        || batch
            .started()
            .is_some_and(|t| t.elapsed() >= cfg.batch_max_age)
}

impl Pipeline {
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        self.consumer
            .subscribe(&[&self.cfg.topic])
            .expect("subscribe to the raw topic");
        tracing::info!(topic = %self.cfg.topic, group = %self.cfg.group_id, "consuming");
        let mut batch = Batch::new(&self.ledger);
        let mut in_flight: Option<InFlight> = None;
        let mut sessions: HashMap<i32, SessionTracker> = HashMap::new();
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        let mut generation = self.data.generation();
        let mut enrichers = self.data.current();
        'consume: loop {
            if in_flight.as_ref().is_some_and(|f| f.handle.is_finished()) {
                let mut f = in_flight.take().expect("in flight");
                let joined = (&mut f.handle).await;
                self.finish_or_stop(joined, &f.next_offsets);
            }
            if due(&batch, &self.cfg) {
                // One insert at a time: wait for the previous one (not polling meanwhile:
                // this is what stops consumption while ClickHouse is down).
                if let Some(mut f) = in_flight.take() {
                    tokio::select! {
                        biased;
                        _ = shutdown.changed() => {
                            in_flight = Some(f);
                            break 'consume;
                        }
                        joined = &mut f.handle => self.finish_or_stop(joined, &f.next_offsets),
                    }
                }
                let full = std::mem::replace(&mut batch, Batch::new(&self.ledger));
                in_flight = Some(self.start_insert(full));
            }
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                msg = self.consumer.recv() => match msg {
                    Err(e) => {
                        tracing::warn!(error = %e, "Kafka consumer error");
                        metrics::counter!("enricher_consumer_errors_total").increment(1);
                    }
                    Ok(m) => {
                        metrics::counter!("enricher_consumed_total").increment(1);
                        let (partition, offset) = (m.partition(), m.offset());
                        match decode(m.payload()) {
                            Ok(message::Message::Event(raw)) => {
                                if self.data.generation() != generation {
                                    generation = self.data.generation();
                                    enrichers = self.data.current();
                                }
                                let (ts, received) = (raw.timestamp, raw.received_at);
                                let tracker = sessions.entry(partition).or_insert_with(|| SessionTracker::new(self.cfg.session_timeout));
                                let row = enrichers.enrich(raw, tracker);
                                let ids = EventIds::new(row.site_id, &row.user_id, &row.anonymous_id, ts, received);
                                if self.ledger.erases(&ids) {
                                    metrics::counter!("enricher_erased_events_dropped_total").increment(1);
                                    batch.note(partition, offset);
                                } else {
                                    batch.push(&row, ids, partition, offset);
                                }
                            }
                            Ok(message::Message::Identify(id)) => {
                                let anonymous = id.anonymous_id.as_deref().unwrap_or_default();
                                let ids = EventIds::new(id.site_id, &id.user_id, anonymous, id.timestamp, id.received_at);
                                if self.ledger.erases(&ids) {
                                    metrics::counter!("enricher_erased_events_dropped_total").increment(1);
                                    batch.note(partition, offset);
                                } else {
                                    batch.push_identify(&id, partition, offset);
                                }
                            }
                            Err(poison) => {
                                let owned = m.detach();
                                if !self.to_dlq(&owned, &poison, &mut shutdown).await {
                                    break;
                                }
                                batch.note(partition, offset);
                            }
                        }
                    }
                },
                _ = tick.tick() => {}
            }
            self.apply_revocations(&mut batch, in_flight.as_mut(), &mut sessions);
        }
        self.health.shutting_down.store(true, Ordering::Relaxed);
        tracing::info!(
            rows = batch.rows(),
            "shutting down: flushing the current batch"
        );
        let mut stored = match in_flight.take() {
            Some(f) => self.finish_within(f, SHUTDOWN_INSERT_WAIT).await,
            None => true,
        };
        if stored && !batch.is_empty() {
            let f = self.start_insert(batch);
            stored = self.finish_within(f, SHUTDOWN_INSERT_WAIT).await;
        }
        if stored {
            match self.consumer.commit_consumer_state(CommitMode::Sync) {
                // Nothing stored since the last auto-commit: nothing to do.
                Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "final commit failed; uncommitted events will be redelivered")
                }
            }
        } else {
            tracing::warn!("ClickHouse unavailable at shutdown; the batch's events stay uncommitted and will be redelivered");
        }
        self.consumer.unsubscribe();
        tracing::info!("left the consumer group");
    }

    fn apply_revocations(
        &self,
        batch: &mut Batch,
        mut in_flight: Option<&mut InFlight>,
        sessions: &mut HashMap<i32, SessionTracker>,
    ) {
        let revoked: Vec<i32> = std::mem::take(
            &mut *self
                .consumer
                .context()
                .revoked
                .lock()
                .expect("revoked lock"),
        );
        if revoked.is_empty() {
            return;
        }
        for p in revoked {
            sessions.remove(&p);
            // Rows still get inserted (the new owner's copies collapse on event_id), but
            // we must not move the offset of a partition we no longer own.
            batch.next_offsets.remove(&p);
            if let Some(f) = in_flight.as_deref_mut() {
                f.next_offsets.remove(&p);
            }
        }
    }

    /// Starts inserting `batch` in a task that retries with capped backoff until the
    /// rows are in ClickHouse (or it is aborted, at shutdown).
    fn start_insert(&self, batch: Batch) -> InFlight {
        let (pending, next_offsets): (Pending, _) = batch.into_parts();
        let writer = Writer {
            db: self.db.clone(),
            health: self.health.clone(),
            ledger: self.ledger.clone(),
            retry_max: self.cfg.insert_retry_max,
            ledger_max_age: self.cfg.ledger_max_age,
        };
        let handle = self.io.spawn(async move { writer.store(pending).await });
        InFlight {
            handle,
            next_offsets,
        }
    }

    /// `finish` while consuming. An insert task retries until its rows are stored, so it
    /// ends otherwise only through a bug (a panic): then stop, rather than let the next
    /// batch store offsets past these events. The process exits non-zero and its
    /// uncommitted events are redelivered.
    fn finish_or_stop(&self, joined: Result<(), JoinError>, next_offsets: &HashMap<i32, i64>) {
        assert!(
            self.finish(joined, next_offsets),
            "an insert task ended without storing its batch; stopping so that its events are redelivered"
        );
    }

    /// Waits up to `give_up` for an insert and stores its offsets; an insert still
    /// retrying then is aborted (its events stay uncommitted). Returns whether it stored.
    async fn finish_within(&self, mut f: InFlight, give_up: Duration) -> bool {
        match tokio::time::timeout(give_up, &mut f.handle).await {
            Ok(joined) => self.finish(joined, &f.next_offsets),
            Err(_) => {
                f.handle.abort();
                false
            }
        }
    }

    /// After a batch's insert task ended (`joined`: its outcome, taken from its handle
    /// exactly once): stores its offsets if its rows are in ClickHouse. Returns whether
    /// they are.
    fn finish(&self, joined: Result<(), JoinError>, next_offsets: &HashMap<i32, i64>) -> bool {
        if let Err(e) = joined {
            // Aborted or panicked: its events stay uncommitted and are redelivered.
            tracing::error!(error = %e, "insert task failed; its events will be redelivered");
            return false;
        }
        let mut tpl = TopicPartitionList::new();
        for (p, next) in next_offsets {
            // store_offsets takes the literal next offset to read (no +1 applied by it).
            let _ = tpl.add_partition_offset(&self.cfg.topic, *p, Offset::Offset(*next));
        }
        if tpl.count() > 0 {
            if let Err(e) = self.consumer.store_offsets(&tpl) {
                tracing::warn!(error = %e, "storing offsets failed (partition revoked?); events may be redelivered");
            }
        }
        true
    }

    /// Publishes a poison message to the DLQ; retries until acknowledged. Returns false
    /// if shutdown was requested first (the message then stays uncommitted).
    async fn to_dlq(
        &self,
        m: &rdkafka::message::OwnedMessage,
        poison: &Poison,
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        let reason = poison.reason();
        tracing::warn!(partition = m.partition(), offset = m.offset(), %reason, "message sent to the DLQ");
        let (p, o) = (m.partition().to_string(), m.offset().to_string());
        loop {
            let headers = OwnedHeaders::new()
                .insert(Header {
                    key: "reason",
                    value: Some(reason.as_str()),
                })
                .insert(Header {
                    key: "source-topic",
                    value: Some(self.cfg.topic.as_str()),
                })
                .insert(Header {
                    key: "source-partition",
                    value: Some(p.as_str()),
                })
                .insert(Header {
                    key: "source-offset",
                    value: Some(o.as_str()),
                });
            let mut rec: FutureRecord<'_, [u8], [u8]> =
                FutureRecord::to(&self.cfg.dlq_topic).headers(headers);
            if let Some(k) = m.key() {
                rec = rec.key(k);
            }
            if let Some(v) = m.payload() {
                rec = rec.payload(v);
            }
            match self.dlq.send(rec, Duration::from_secs(5)).await {
                Ok(_) => {
                    metrics::counter!("enricher_dlq_total").increment(1);
                    return true;
                }
                Err((e, _)) => {
                    tracing::warn!(error = %e, "DLQ publish failed; retrying");
                    tokio::select! {
                        _ = shutdown.changed() => return false,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                }
            }
        }
    }
}
