//! A lane's step: one message of its topic, decoded, checked against the erasure
//! ledger, enriched and added to the batch, at least once (the batch and its insert:
//! `batcher`).
//!
//! Rows are encoded (RowBinary) as they are enriched. Messages that cannot be decoded go
//! to `events.dlq` with the reason in a header; their offsets advance once the DLQ has
//! acknowledged them. An event or identify call of a person erased before it happened or
//! arrived is dropped here (its offset still moves), and a batch is checked against the
//! erasure ledger again before its insert (`batch`, `insert`).
//!
//! Sessions live with partitions: a visitor's events all land on one partition (the
//! message key), and a revoked partition's session state is dropped. After a rebalance
//! the new owner starts a fresh session for a visitor at its next event, so a rebalance
//! splits an ongoing session in two at most.
//!
//! The writer, the offset store and the DLQ are traits (`writer::Sink`,
//! `batcher::OffsetStore`, [`DeadLetters`]): the service plugs in ClickHouse and Kafka
//! (`kafka`), the tests below fakes.

use crate::batcher::{Batcher, OffsetStore};
use crate::error::EnricherError;
use crate::health::Lane;
use crate::writer::Sink;
use rivulet_enrichment::data::EnrichmentData;
use rivulet_enrichment::enrich::Enrichers;
use rivulet_enrichment::ledger::{EventIds, Ledger};
use rivulet_enrichment::message::{self, decode};
use rivulet_enrichment::session::SessionTracker;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How the lanes' consumers fetch; the enricher benchmark's baseline consumer reads with
/// the same settings (`bench/src/bin/consume_baseline.rs`), hence public.
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

/// How long shutdown waits for each insert before leaving its events uncommitted.
pub(crate) const SHUTDOWN_INSERT_WAIT: Duration = Duration::from_secs(30);

/// A message as the step reads it.
pub(crate) struct Polled<'a> {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub payload: Option<&'a [u8]>,
}

/// Where messages that cannot be decoded go: Kafka's `events.dlq` in the service, a fake
/// in tests.
pub(crate) trait DeadLetters {
    /// Publishes the message with the reason; `Ok` once it is acknowledged.
    fn send(&self, m: &Polled<'_>, reason: &str) -> impl Future<Output = Result<(), String>>;
}

/// The step's state: the enrichment data in use and the sessions of each partition.
pub(crate) struct Pipeline<S, O, D> {
    lane: Lane,
    data: Arc<EnrichmentData>,
    /// The data's generation when `enrichers` was taken: a reload swaps them between two
    /// events.
    generation: u64,
    enrichers: Arc<Enrichers>,
    session_timeout: Duration,
    sessions: HashMap<i32, SessionTracker>,
    /// The erasure ledger, kept fresh by a task of its own.
    ledger: Arc<Ledger>,
    batcher: Batcher<S, O>,
    dlq: D,
}

impl<S: Sink, O: OffsetStore, D: DeadLetters> Pipeline<S, O, D> {
    pub fn new(
        lane: Lane,
        data: Arc<EnrichmentData>,
        ledger: Arc<Ledger>,
        session_timeout: Duration,
        batcher: Batcher<S, O>,
        dlq: D,
    ) -> Self {
        Pipeline {
            lane,
            generation: data.generation(),
            enrichers: data.current(),
            data,
            session_timeout,
            sessions: HashMap::new(),
            ledger,
            batcher,
            dlq,
        }
    }

    pub fn lane(&self) -> Lane {
        self.lane
    }

    pub fn offsets(&self) -> &O {
        self.batcher.offsets()
    }

    /// See [`Batcher::make_room`]: call before each poll.
    pub async fn make_room(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<bool, EnricherError> {
        self.batcher.make_room(shutdown).await
    }

    /// The step: one message into the batch (a row, the rows of an identify call, or only
    /// its offset when it is erased or dead-lettered). Returns false when shutdown came
    /// while the DLQ did not acknowledge a message (which then stays uncommitted).
    pub async fn take(&mut self, m: Polled<'_>, shutdown: &mut watch::Receiver<bool>) -> bool {
        let lane = self.lane.as_str();
        metrics::counter!("enricher_consumed_total", "lane" => lane).increment(1);
        let (partition, offset) = (m.partition, m.offset);
        match decode(m.payload) {
            Ok(message::Message::Event(raw)) => {
                if self.data.generation() != self.generation {
                    self.generation = self.data.generation();
                    self.enrichers = self.data.current();
                }
                let (ts, received) = (raw.timestamp, raw.received_at);
                let timeout = self.session_timeout;
                let tracker = self
                    .sessions
                    .entry(partition)
                    .or_insert_with(|| SessionTracker::new(timeout));
                let row = self.enrichers.enrich(raw, tracker);
                let ids = EventIds::new(row.site_id, &row.user_id, &row.anonymous_id, ts, received);
                if self.erased(&ids) {
                    self.batcher.batch().note(partition, offset);
                } else {
                    self.batcher.batch().push(&row, ids, partition, offset);
                }
            }
            Ok(message::Message::Identify(id)) => {
                let anonymous = id.anonymous_id.as_deref().unwrap_or_default();
                let ids = EventIds::new(
                    id.site_id,
                    &id.user_id,
                    anonymous,
                    id.timestamp,
                    id.received_at,
                );
                if self.erased(&ids) {
                    self.batcher.batch().note(partition, offset);
                } else {
                    self.batcher.batch().push_identify(&id, partition, offset);
                }
            }
            Err(poison) => {
                if !self.dead_letter(&m, &poison.reason(), shutdown).await {
                    return false;
                }
                self.batcher.batch().note(partition, offset);
            }
        }
        true
    }

    fn erased(&self, ids: &EventIds) -> bool {
        let erased = self.ledger.erases(ids);
        if erased {
            metrics::counter!("enricher_erased_events_dropped_total", "lane" => self.lane.as_str())
                .increment(1);
        }
        erased
    }

    /// Publishes a poison message to the DLQ; retries until acknowledged. Returns false
    /// if shutdown was requested first.
    async fn dead_letter(
        &self,
        m: &Polled<'_>,
        reason: &str,
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        let lane = self.lane.as_str();
        tracing::warn!(lane, partition = m.partition, offset = m.offset, %reason, "message sent to the DLQ");
        loop {
            match self.dlq.send(m, reason).await {
                Ok(()) => {
                    metrics::counter!("enricher_dlq_total", "lane" => lane).increment(1);
                    return true;
                }
                Err(e) => {
                    tracing::warn!(lane, error = %e, "DLQ publish failed; retrying");
                    tokio::select! {
                        _ = shutdown.changed() => return false,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                }
            }
        }
    }

    /// Drops what belongs to the partitions a rebalance took away: their sessions, and
    /// the offsets not yet stored.
    pub fn apply_revocations(&mut self) {
        let revoked = self.batcher.offsets().take_revoked();
        if revoked.is_empty() {
            return;
        }
        for p in &revoked {
            self.sessions.remove(p);
        }
        self.batcher.revoke(&revoked);
    }

    /// At shutdown: the batches inserted and committed (see [`Batcher::flush`]).
    pub async fn flush(self) -> bool {
        self.batcher.flush(SHUTDOWN_INSERT_WAIT).await
    }
}

#[cfg(test)]
mod tests {
    //! The lane's rules with ClickHouse, Kafka's offsets and the DLQ played by fakes: no
    //! stack needed.

    use super::*;
    use crate::config::BatchLimits;
    use crate::health::LaneHealth;
    use crate::writer::Writer;
    use bytes::Bytes;
    use rivulet_common::privacy::LedgerRow;
    use rivulet_common::schema::people::{ClaimRow, TraitRow};
    use rivulet_enrichment::EnrichmentConfig;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// ClickHouse as a test plays it: it refuses every insert while `down`, and keeps the
    /// size of each batch of event rows it took.
    #[derive(Default)]
    struct FakeClickHouse {
        down: AtomicBool,
        attempts: AtomicUsize,
        inserted: Mutex<Vec<usize>>,
        people: AtomicUsize,
    }

    impl FakeClickHouse {
        fn attempt(&self) -> Result<(), clickhouse::error::Error> {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(clickhouse::error::Error::Custom(
                    "ClickHouse is down".into(),
                ));
            }
            Ok(())
        }
        fn inserted(&self) -> Vec<usize> {
            self.inserted.lock().unwrap().clone()
        }
        async fn wait_for_attempts(&self, n: usize) {
            while self.attempts.load(Ordering::SeqCst) < n {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }

    impl Sink for FakeClickHouse {
        async fn events(&self, chunks: &[Bytes]) -> Result<(), clickhouse::error::Error> {
            self.attempt()?;
            let bytes = chunks.iter().map(Bytes::len).sum();
            self.inserted.lock().unwrap().push(bytes);
            Ok(())
        }
        async fn claims(&self, rows: &[ClaimRow]) -> Result<(), clickhouse::error::Error> {
            self.attempt()?;
            self.people.fetch_add(rows.len(), Ordering::SeqCst);
            Ok(())
        }
        async fn traits(&self, rows: &[TraitRow]) -> Result<(), clickhouse::error::Error> {
            self.attempt()?;
            self.people.fetch_add(rows.len(), Ordering::SeqCst);
            Ok(())
        }
    }

    /// What the lane told the consumer: offsets stored, commits, and the partitions a
    /// rebalance is about to take away.
    #[derive(Default)]
    struct OffsetLog {
        stored: Mutex<Vec<HashMap<i32, i64>>>,
        revoked: Mutex<Vec<i32>>,
        commits: AtomicUsize,
    }

    impl OffsetLog {
        fn stored(&self) -> Vec<HashMap<i32, i64>> {
            self.stored.lock().unwrap().clone()
        }
        /// Every offset stored, the latest of each partition.
        fn latest(&self) -> HashMap<i32, i64> {
            self.stored().into_iter().flatten().collect()
        }
    }

    struct FakeOffsets(Arc<OffsetLog>);

    impl OffsetStore for FakeOffsets {
        fn store(&self, next: &HashMap<i32, i64>) {
            self.0.stored.lock().unwrap().push(next.clone());
        }
        fn take_revoked(&self) -> Vec<i32> {
            std::mem::take(&mut *self.0.revoked.lock().unwrap())
        }
        fn commit(&self) {
            self.0.commits.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The DLQ: what it acknowledged, as (partition, offset, reason).
    struct FakeDlq(Arc<Mutex<Vec<(i32, i64, String)>>>);

    impl DeadLetters for FakeDlq {
        async fn send(&self, m: &Polled<'_>, reason: &str) -> Result<(), String> {
            self.0
                .lock()
                .unwrap()
                .push((m.partition, m.offset, reason.to_string()));
            Ok(())
        }
    }

    /// Rules that parse nothing, in a folder of their own: enrichment without uap-core.
    struct Rules(PathBuf);
    impl Rules {
        fn new() -> Rules {
            let dir =
                std::env::temp_dir().join(format!("rivulet-pipeline-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("regexes.yaml");
            std::fs::write(
                &path,
                "user_agent_parsers: []\nos_parsers: []\ndevice_parsers: []\n",
            )
            .unwrap();
            Rules(path)
        }
    }
    impl Drop for Rules {
        fn drop(&mut self) {
            if let Some(dir) = self.0.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    struct Lane {
        p: Pipeline<FakeClickHouse, FakeOffsets, FakeDlq>,
        clickhouse: Arc<FakeClickHouse>,
        offsets: Arc<OffsetLog>,
        dlq: Arc<Mutex<Vec<(i32, i64, String)>>>,
        ledger: Arc<Ledger>,
        health: Arc<LaneHealth>,
        shutdown: watch::Receiver<bool>,
        _stop: watch::Sender<bool>,
        _rules: Rules,
    }

    /// A live lane whose batch is due at `max_rows` rows (and never by age or size).
    fn lane(max_rows: usize) -> Lane {
        let rules = Rules::new();
        let data = Arc::new(
            EnrichmentData::load(EnrichmentConfig {
                ua_regexes: rules.0.clone(),
                ua_cache_size: 16,
                geoip: Vec::new(),
                visitor_secret: b"test secret".to_vec(),
                visitor_secret_is_default: false,
                store_ip: false,
                session_timeout: Duration::from_secs(1800),
            })
            .unwrap(),
        );
        let ledger = Arc::new(Ledger::new());
        ledger.add_read(&[]);
        let clickhouse = Arc::new(FakeClickHouse::default());
        let offsets = Arc::new(OffsetLog::default());
        let dlq = Arc::new(Mutex::new(Vec::new()));
        let health = Arc::new(LaneHealth::new(crate::health::Lane::Live));
        let writer = Writer {
            sink: clickhouse.clone(),
            health: health.clone(),
            ledger: ledger.clone(),
            retry_max: Duration::from_millis(5),
            ledger_max_age: Duration::from_secs(3600),
        };
        let limits = BatchLimits {
            max_rows,
            max_bytes: usize::MAX,
            max_age: Duration::from_secs(3600),
        };
        let batcher = Batcher::new(
            tokio::runtime::Handle::current(),
            limits,
            writer,
            FakeOffsets(offsets.clone()),
        );
        let (stop, shutdown) = watch::channel(false);
        Lane {
            p: Pipeline::new(
                crate::health::Lane::Live,
                data,
                ledger.clone(),
                Duration::from_secs(1800),
                batcher,
                FakeDlq(dlq.clone()),
            ),
            clickhouse,
            offsets,
            dlq,
            ledger,
            health,
            shutdown,
            _stop: stop,
            _rules: rules,
        }
    }

    const NOW_MS: i64 = 1_795_600_800_000;

    fn event(user: &str) -> Vec<u8> {
        serde_json::json!({
            "v": 1, "event_id": uuid::Uuid::new_v4(), "site_id": 1, "key_id": "key_1",
            "type": "pageview", "timestamp": NOW_MS, "received_at": NOW_MS,
            "ip": "203.0.113.7", "user_agent": "curl/8.0", "user_id": user, "pathname": "/"
        })
        .to_string()
        .into_bytes()
    }

    fn identify(user: &str, anonymous: &str) -> Vec<u8> {
        serde_json::json!({
            "v": 1, "kind": "identify", "event_id": uuid::Uuid::new_v4(), "site_id": 1,
            "key_id": "key_1", "timestamp": NOW_MS, "received_at": NOW_MS,
            "user_id": user, "anonymous_id": anonymous
        })
        .to_string()
        .into_bytes()
    }

    impl Lane {
        async fn take(&mut self, partition: i32, offset: i64, payload: &[u8]) {
            let m = Polled {
                partition,
                offset,
                key: Some(b"1:u:key"),
                payload: Some(payload),
            };
            assert!(self.p.take(m, &mut self.shutdown).await, "taken");
        }
        async fn make_room(&mut self) {
            assert!(self.p.make_room(&mut self.shutdown).await.unwrap());
        }
    }

    #[tokio::test]
    async fn an_insert_that_fails_is_retried_and_stores_no_offset_until_it_succeeds() {
        let mut l = lane(1);
        l.clickhouse.down.store(true, Ordering::SeqCst);
        l.take(0, 5, &event("u1")).await;
        l.make_room().await; // the batch is due: its insert starts, and fails
        l.clickhouse.wait_for_attempts(3).await;
        assert!(
            l.offsets.stored().is_empty(),
            "no offset while the rows are not stored"
        );
        assert!(l.health.inserts_failing.load(Ordering::SeqCst));

        // The next batch is due while the first is still retrying: the lane waits for
        // it (and does not poll) rather than start a second insert.
        l.take(0, 6, &event("u2")).await;
        let waited =
            tokio::time::timeout(Duration::from_millis(100), l.p.make_room(&mut l.shutdown)).await;
        assert!(waited.is_err(), "make_room waits while the insert retries");
        assert!(l.offsets.stored().is_empty());
        assert!(l.clickhouse.inserted().is_empty());

        l.clickhouse.down.store(false, Ordering::SeqCst);
        l.make_room().await; // the first insert went through: its offset, then the next
        assert_eq!(l.offsets.stored(), [HashMap::from([(0, 6)])]);
        assert!(!l.health.inserts_failing.load(Ordering::SeqCst));
        assert!(l.p.flush().await);
        assert_eq!(l.offsets.latest(), HashMap::from([(0, 7)]));
        assert_eq!(l.clickhouse.inserted().len(), 2, "each batch once");
        assert_eq!(l.offsets.commits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_revoked_partitions_rows_are_inserted_but_its_offsets_never_stored() {
        let mut l = lane(1000);
        l.take(1, 10, &event("u1")).await;
        l.take(2, 20, &event("u2")).await;
        // Revoked while its rows are in the batch being filled.
        l.offsets.revoked.lock().unwrap().push(1);
        l.p.apply_revocations();
        assert!(l.p.flush().await);
        assert_eq!(l.clickhouse.inserted().len(), 1, "both rows inserted");
        assert_eq!(l.offsets.latest(), HashMap::from([(2, 21)]));

        // Revoked while its rows are on their way to ClickHouse.
        let mut l = lane(1);
        l.clickhouse.down.store(true, Ordering::SeqCst);
        l.take(3, 30, &event("u3")).await;
        l.make_room().await;
        l.clickhouse.wait_for_attempts(1).await;
        l.offsets.revoked.lock().unwrap().push(3);
        l.p.apply_revocations();
        l.clickhouse.down.store(false, Ordering::SeqCst);
        assert!(l.p.flush().await);
        assert_eq!(l.clickhouse.inserted().len(), 1);
        assert!(l.offsets.latest().is_empty(), "{:?}", l.offsets.stored());
    }

    #[tokio::test]
    async fn an_erased_persons_events_and_identify_calls_are_dropped_and_their_offsets_stored() {
        let mut l = lane(1000);
        l.ledger.add_read(&[LedgerRow {
            site_id: 1,
            id_kind: "user_id".into(),
            id: "erased".into(),
            erased_at_ms: NOW_MS as u64 + 1,
            request_id: "er_1".into(),
            suppress: 0,
            added_at_ms: NOW_MS as u64 + 1,
        }]);
        l.take(0, 3, &event("erased")).await;
        l.take(0, 4, &identify("erased", "device-1")).await;
        assert!(l.p.flush().await);
        assert_eq!(
            l.clickhouse.attempts.load(Ordering::SeqCst),
            0,
            "nothing to insert"
        );
        assert_eq!(l.offsets.latest(), HashMap::from([(0, 5)]));

        // Someone else's events and identify calls go through.
        let mut l = lane(1000);
        l.take(0, 3, &event("kept")).await;
        l.take(0, 4, &identify("kept", "device-2")).await;
        assert!(l.p.flush().await);
        assert_eq!(l.clickhouse.inserted().len(), 1);
        assert_eq!(l.clickhouse.people.load(Ordering::SeqCst), 1, "the claim");
        assert_eq!(l.offsets.latest(), HashMap::from([(0, 5)]));
    }

    #[tokio::test]
    async fn a_poison_message_goes_to_the_dlq_and_its_offset_is_stored() {
        let mut l = lane(1000);
        l.take(0, 7, b"{not json").await;
        l.take(0, 8, br#"{"v":9,"site_id":1}"#).await;
        let sent = l.dlq.lock().unwrap().clone();
        assert_eq!(sent.len(), 2);
        assert_eq!((sent[0].0, sent[0].1), (0, 7));
        assert!(sent[0].2.starts_with("not JSON"), "{}", sent[0].2);
        assert!(
            sent[1].2.contains("unknown message version 9"),
            "{}",
            sent[1].2
        );
        assert!(l.p.flush().await);
        assert!(l.clickhouse.inserted().is_empty());
        assert_eq!(l.offsets.latest(), HashMap::from([(0, 9)]));
    }

    #[tokio::test]
    async fn shutdown_inserts_the_batch_being_filled_and_commits() {
        let mut l = lane(1000);
        for offset in 0..3 {
            l.take(0, offset, &event("u1")).await;
            l.make_room().await;
        }
        assert!(l.clickhouse.inserted().is_empty(), "not due yet");
        assert!(l.p.flush().await);
        assert_eq!(l.clickhouse.inserted().len(), 1);
        assert_eq!(l.offsets.stored(), [HashMap::from([(0, 3)])]);
        assert_eq!(l.offsets.commits.load(Ordering::SeqCst), 1);
    }
}
