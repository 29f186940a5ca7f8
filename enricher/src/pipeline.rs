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
//! Sessions live with partitions: a visitor's events all land on one partition (the
//! message key), and a revoked partition's session state is dropped. After a rebalance
//! the new owner starts a fresh session for a visitor at its next event, so a rebalance
//! splits an ongoing session in two at most.

use crate::config::EnricherConfig;
use crate::data::EnrichmentData;
use crate::message::{self, decode, Poison};
use crate::session::SessionTracker;
use bytes::Bytes;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use rivulet_common::ch::{is_server_error, Db};
use rivulet_common::event::IdentifyMessage;
use rivulet_common::schema::events::{self, EventRow};
use rivulet_common::schema::people::{self, AliasRow, TraitRow};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};

/// Shared between the loop, the probe and the HTTP server.
#[derive(Default)]
pub struct Health {
    pub kafka_ok: AtomicBool,
    pub clickhouse_ok: AtomicBool,
    pub shutting_down: AtomicBool,
    pub assigned_partitions: AtomicUsize,
}

/// Records rebalances for the loop, which owns the session state.
#[derive(Default)]
pub struct RebalanceContext {
    revoked: Mutex<Vec<i32>>,
    health: Arc<Health>,
}

impl RebalanceContext {
    pub fn new(health: Arc<Health>) -> Self {
        RebalanceContext {
            revoked: Mutex::new(Vec::new()),
            health,
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
        let n = consumer.assignment().map(|a| a.count()).unwrap_or(0);
        self.health.assigned_partitions.store(n, Ordering::Relaxed);
        metrics::gauge!("enricher_assigned_partitions").set(n as f64);
    }
}

pub type RawConsumer = StreamConsumer<RebalanceContext>;

pub fn consumer(
    cfg: &EnricherConfig,
    health: Arc<Health>,
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
    c.create_with_context(RebalanceContext::new(health))
}

/// How the consumer fetches; the enricher benchmark's baseline consumer reads with the
/// same settings (`tests/src/bin/consume_baseline.rs`).
pub const FETCH_SETTINGS: [(&str, &str); 3] = [
    ("fetch.min.bytes", "1"),
    // Prefetch bounded to 8 MB: enough to keep a batch filling, and it counts in RSS.
    ("queued.max.messages.kbytes", "8192"),
    // Once the prefetch queue is full, librdkafka waits this long before fetching again
    // (default 1 s). The enricher drains its queue in a fraction of that, so with the
    // default it sat idle for most of every second (measured: ~44k events/s with the CPU
    // 70 % idle). A short backoff refetches as soon as there is room.
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

/// Rows waiting to be inserted, RowBinary-encoded, and the next offset to store per
/// partition once they are.
///
/// The rows are kept in chunks of ~1 MiB rather than one buffer of the whole batch: the
/// allocator recycles chunks freed by the last insert for the next batch, where a fresh
/// 16 MB buffer per batch (allocated on the enrich thread, freed on an I/O thread) was
/// held back by the allocator (measured: ~20–30 MB more RSS).
#[derive(Default)]
pub struct Batch {
    chunks: Vec<Bytes>,
    current: Vec<u8>,
    rows: usize,
    /// What identify calls write: few, so kept as rows.
    people: People,
    started: Option<Instant>,
    next_offsets: HashMap<i32, i64>,
}

/// The rows of `person_aliases` and `person_traits` a batch's identify calls make.
#[derive(Default)]
pub struct People {
    pub aliases: Vec<AliasRow>,
    pub traits: Vec<TraitRow>,
}

impl People {
    fn is_empty(&self) -> bool {
        self.aliases.is_empty() && self.traits.is_empty()
    }
}

/// How long shutdown waits for each insert before leaving its events uncommitted.
const SHUTDOWN_INSERT_WAIT: Duration = Duration::from_secs(30);

/// Size at which a chunk is closed and a new one started.
const CHUNK_BYTES: usize = 1 << 20;
/// An upper bound of one encoded row: the validated fields' limits add up to ~12 KB.
const MAX_ROW_BYTES: usize = 64 * 1024;

impl Batch {
    fn note(&mut self, partition: i32, offset: i64) {
        self.started.get_or_insert_with(Instant::now);
        let next = self.next_offsets.entry(partition).or_insert(offset + 1);
        *next = (*next).max(offset + 1);
    }
    pub fn push(&mut self, row: &EventRow, partition: i32, offset: i64) {
        if self.current.capacity() == 0 {
            // Room for a full chunk and one more row: a chunk is allocated once.
            self.current.reserve_exact(CHUNK_BYTES + MAX_ROW_BYTES);
        }
        row.write_row_binary(&mut self.current);
        self.rows += 1;
        if self.current.len() >= CHUNK_BYTES {
            self.chunks
                .push(Bytes::from(std::mem::take(&mut self.current)));
        }
        self.note(partition, offset);
    }
    /// An identify call: its alias and trait rows.
    pub fn push_identify(&mut self, id: &IdentifyMessage, partition: i32, offset: i64) {
        let (alias, traits) = people::identify_rows(
            id.site_id,
            &id.user_id,
            id.anonymous_id.as_deref(),
            id.traits.as_deref(),
            id.timestamp,
        );
        self.people.aliases.extend(alias);
        self.people.traits.extend(traits);
        self.note(partition, offset);
    }
    /// Size of the encoded rows: at most ~9 chunks to add up for an 8 MiB batch.
    fn encoded_bytes(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum::<usize>() + self.current.len()
    }
    /// The encoded rows, in order, the people rows, and the offsets to store.
    fn into_parts(mut self) -> (Vec<Bytes>, People, HashMap<i32, i64>) {
        if !self.current.is_empty() {
            self.chunks.push(Bytes::from(self.current));
        }
        (self.chunks, self.people, self.next_offsets)
    }
    fn due(&self, cfg: &EnricherConfig) -> bool {
        self.rows >= cfg.batch_max_rows
            || self.encoded_bytes() >= cfg.batch_max_bytes
            || self
                .started
                .is_some_and(|t| t.elapsed() >= cfg.batch_max_age)
    }
    fn is_empty(&self) -> bool {
        self.started.is_none()
    }
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
}

impl Pipeline {
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        self.consumer
            .subscribe(&[&self.cfg.topic])
            .expect("subscribe to the raw topic");
        tracing::info!(topic = %self.cfg.topic, group = %self.cfg.group_id, "consuming");
        let mut batch = Batch::default();
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
            if batch.due(&self.cfg) {
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
                in_flight = Some(self.start_insert(std::mem::take(&mut batch)));
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
                                let tracker = sessions.entry(partition).or_insert_with(|| SessionTracker::new(self.cfg.session_timeout));
                                batch.push(&enrichers.enrich(raw, tracker), partition, offset);
                            }
                            Ok(message::Message::Identify(id)) => batch.push_identify(&id, partition, offset),
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
            rows = batch.rows,
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
        let rows = batch.rows;
        let (chunks, people, next_offsets) = batch.into_parts();
        let (db, health) = (self.db.clone(), self.health.clone());
        let retry_max = self.cfg.insert_retry_max;
        let handle = self.io.spawn(async move {
            if rows > 0 {
                insert_events(&db, &health, &chunks, rows, retry_max).await;
            }
            if !people.is_empty() {
                insert_people(&db, &health, &people, retry_max).await;
            }
        });
        InFlight {
            handle,
            next_offsets,
        }
    }
}

/// Inserts a batch's event rows, retrying with capped backoff until they are in
/// ClickHouse (or the task is aborted, at shutdown).
async fn insert_events(
    db: &Db,
    health: &Health,
    chunks: &[Bytes],
    rows: usize,
    retry_max: Duration,
) {
    let started = Instant::now();
    let mut delay = Duration::from_millis(100);
    let mut failures = 0u32;
    let mut quorum_waits = 0u32;
    loop {
        let t = Instant::now();
        match insert_row_binary(db, chunks).await {
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
            // ClickHouse 18.16 runs one quorum insert per table at a time and
            // refuses the others at once: contention, not an outage. Try again
            // soon, at a random moment so that enrichers do not collide again.
            Err(e) if is_server_error(&e, QUORUM_BUSY) => {
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

/// Inserts a batch's alias and trait rows, each table retried until it has them.
async fn insert_people(db: &Db, health: &Health, people: &People, retry_max: Duration) {
    let mut delay = Duration::from_millis(100);
    for table in [people::ALIASES_TABLE, people::TRAITS_TABLE] {
        loop {
            let done = match table {
                people::ALIASES_TABLE => insert_aliases(db, &people.aliases).await,
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

async fn insert_aliases(db: &Db, rows: &[AliasRow]) -> Result<(), clickhouse::error::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = db.client.insert::<AliasRow>(people::ALIASES_TABLE).await?;
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

impl Pipeline {
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

/// 286 UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE: another quorum insert into the table is
/// still waiting for its quorum.
const QUORUM_BUSY: &[u32] = &[286];

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_bytes_count_every_row_across_chunks() {
        let mut batch = Batch::default();
        let mut expected = 0;
        // ~3 KB rows: a 1 MiB chunk closes after ~350 of them.
        for i in 0..1000 {
            let row = EventRow {
                pathname: "p".repeat(3000 + i % 7),
                ..EventRow::default()
            };
            let mut one = Vec::new();
            row.write_row_binary(&mut one);
            expected += one.len();
            batch.push(&row, 0, i as i64);
        }
        assert!(batch.chunks.len() >= 2, "the rows span several chunks");
        assert_eq!(batch.encoded_bytes(), expected);
        let (chunks, _, next) = batch.into_parts();
        assert_eq!(chunks.iter().map(Bytes::len).sum::<usize>(), expected);
        assert_eq!(next[&0], 1000);
    }
}
