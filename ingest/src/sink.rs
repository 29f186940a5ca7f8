//! Where accepted events go: Kafka's `events.raw`. A 200 is only sent once the broker
//! has acknowledged the message (idempotent producer, acks=all).
//!
//! Messages are enqueued without blocking and their acks awaited concurrently; a full
//! producer queue makes the caller wait (backpressure) up to the ack timeout. A
//! background probe tracks whether the brokers answer, so that while Kafka is down
//! requests fail fast with 503 instead of each waiting for the timeout, and recover by
//! themselves when it returns ([`Reachability`]: one broker cut off, or a partition
//! whose leader is moving, is not Kafka down). The acks themselves are served on the
//! runtime (`serve_reports`, see `producer`).

use crate::producer::{AckProducer, Delivery};
use metrics::Counter;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::util::Timeout;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, RwLock};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Waits of 2 ms for room in a full producer queue (backpressure).
static QUEUE_FULL_WAITS: LazyLock<Counter> =
    LazyLock::new(|| metrics::counter!("ingest_kafka_queue_full_waits_total"));

/// Where the handlers hand accepted events: `Ok` only once an event is durable. The
/// service uses [`KafkaSink`]; unit tests use a sink in memory.
pub trait Sink: Send + Sync + 'static {
    /// Publishes one record and waits until it is durable, or until `deadline`: then
    /// [`SinkError::Timeout`].
    fn publish(
        &self,
        record: &Record,
        deadline: Instant,
    ) -> impl Future<Output = Result<(), SinkError>> + Send;
    /// Publishes the records: one result per record, in order, all by `deadline`.
    fn publish_all(
        &self,
        records: &[Record],
        deadline: Instant,
    ) -> impl Future<Output = Vec<Result<(), SinkError>>> + Send;
    /// Whether the sink can take records now (readiness).
    fn is_ready(&self) -> bool;
    /// Records handed over and not yet acknowledged.
    fn queue_depth(&self) -> usize;
}

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("the event could not be encoded: {0}")]
    Encode(String),
    #[error("Kafka is unavailable")]
    Unavailable,
    #[error("Kafka did not acknowledge in time")]
    Timeout,
    #[error("Kafka rejected the message: {0}")]
    Rejected(String),
}

/// One message for `events.raw`: its key and its payload, in one buffer.
pub struct Record {
    buf: Vec<u8>,
    key_len: usize,
}

impl Record {
    /// A record whose key `write_key` writes, then whose payload `write_payload` appends.
    pub fn build<E>(
        write_key: impl FnOnce(&mut Vec<u8>),
        write_payload: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<Self, E> {
        // A pageview's key and payload fit in ~0.7 KiB: one allocation, not a few doublings.
        let mut buf = Vec::with_capacity(1024);
        write_key(&mut buf);
        let key_len = buf.len();
        write_payload(&mut buf)?;
        Ok(Record { buf, key_len })
    }

    pub fn key(&self) -> &[u8] {
        &self.buf[..self.key_len]
    }

    pub fn payload(&self) -> &[u8] {
        &self.buf[self.key_len..]
    }
}

pub struct KafkaSettings {
    pub brokers: String,
    pub topic: String,
    pub ack_timeout: Duration,
    pub linger_ms: u32,
    pub queue_max_messages: u32,
    pub compression: String,
}

/// Whether Kafka counts as reachable, from the metadata probes' answers.
///
/// A probe is one metadata request, which librdkafka sends to one broker: with one broker
/// cut off it can time out while the others take every write, and while a partition's
/// leader moves the brokers answer it with that partition's error. Counting either as
/// "Kafka down" made an ingest answer every request 503 for a second or more, over and
/// over, during a single broker's partition (the partition suite saw it). So an answer
/// with a broker's error code counts as reachable, and once Kafka has answered, it counts
/// as down only after [`PROBES_TO_GO_DOWN`] probes in a row got no answer. Before the
/// first answer one is enough: a fresh ingest claims nothing it does not know.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reachability {
    answered_once: bool,
    unanswered_in_a_row: u32,
}

/// Probes in a row without an answer that make Kafka count as down (the probe runs every
/// second and waits up to 1.5 s: 2 to 5 s).
pub const PROBES_TO_GO_DOWN: u32 = 2;

/// What one probe got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeAnswer {
    /// The brokers answered with the topic and its partitions.
    Topic,
    /// The brokers answered, with an error of theirs (a partition's leader moving): they
    /// are there, and the producer finds the partitions' leaders by itself.
    BrokerError,
    /// The topic is not there: nothing can be written.
    NoTopic,
    /// No broker answered in time (librdkafka's own error: timed out, transport).
    NoAnswer,
}

impl ProbeAnswer {
    /// From `fetch_metadata`'s result: whether the topic had partitions, or the error.
    pub fn of(result: Result<bool, RDKafkaErrorCode>) -> ProbeAnswer {
        match result {
            Ok(true) => ProbeAnswer::Topic,
            Ok(false) | Err(RDKafkaErrorCode::UnknownTopicOrPartition) => ProbeAnswer::NoTopic,
            // librdkafka's own errors are negative; the brokers' are positive.
            Err(code) if (code as i32) < 0 => ProbeAnswer::NoAnswer,
            Err(_) => ProbeAnswer::BrokerError,
        }
    }
}

impl Reachability {
    /// Takes one probe's answer; whether Kafka counts as up now.
    pub fn observe(&mut self, answer: ProbeAnswer) -> bool {
        match answer {
            ProbeAnswer::Topic | ProbeAnswer::BrokerError => {
                self.answered_once = true;
                self.unanswered_in_a_row = 0;
                true
            }
            // Nothing can be written: no reason to wait for a second probe.
            ProbeAnswer::NoTopic => {
                self.unanswered_in_a_row = PROBES_TO_GO_DOWN;
                false
            }
            ProbeAnswer::NoAnswer => {
                self.unanswered_in_a_row = self.unanswered_in_a_row.saturating_add(1);
                self.answered_once && self.unanswered_in_a_row < PROBES_TO_GO_DOWN
            }
        }
    }
}

pub struct KafkaSink {
    producer: RwLock<Arc<AckProducer>>,
    settings: KafkaSettings,
    up: AtomicBool,
    /// The first probe has finished: until then `up` is only a guess.
    probed: AtomicBool,
    /// Signalled by librdkafka when delivery reports are waiting (see `producer`).
    reports: Arc<Notify>,
}

impl KafkaSink {
    pub fn new(settings: KafkaSettings) -> Result<Arc<Self>, KafkaError> {
        let reports = Arc::new(Notify::new());
        let producer = build_producer(&settings, reports.clone())?;
        Ok(Arc::new(KafkaSink {
            producer: RwLock::new(Arc::new(producer)),
            settings,
            // Optimistic until the first probe: the producer itself times out if not.
            up: AtomicBool::new(true),
            probed: AtomicBool::new(false),
            reports,
        }))
    }

    fn producer(&self) -> Arc<AckProducer> {
        self.producer.read().expect("producer lock").clone()
    }

    /// Serves delivery reports until the process ends: whenever librdkafka signals that
    /// some are waiting, and every 100 ms regardless (reports queued before the signal
    /// was hooked, or any signal missed, are then served late rather than never).
    pub async fn serve_reports(self: Arc<Self>) {
        loop {
            let _ = tokio::time::timeout(Duration::from_millis(100), self.reports.notified()).await;
            let producer = self.producer();
            while !producer.serve_reports() {
                tokio::task::yield_now().await;
            }
        }
    }

    /// Probes the broker every second until the process ends; rebuilds the producer if
    /// librdkafka reports a fatal error (it cannot be used after one).
    pub async fn watch(self: Arc<Self>) {
        let mut reachability = Reachability::default();
        loop {
            let producer = self.producer();
            if let Some((code, reason)) = producer.client().fatal_error() {
                tracing::error!(?code, %reason, "Kafka producer hit a fatal error; rebuilding it");
                match build_producer(&self.settings, self.reports.clone()) {
                    Ok(p) => *self.producer.write().expect("producer lock") = Arc::new(p),
                    Err(e) => tracing::error!(error = %e, "could not rebuild the Kafka producer"),
                }
            }
            let topic = self.settings.topic.clone();
            let p = self.producer();
            let answer = tokio::task::spawn_blocking(move || {
                let result = p
                    .client()
                    .fetch_metadata(Some(&topic), Timeout::After(Duration::from_millis(1500)))
                    .map(|md| md.topics().iter().any(|t| !t.partitions().is_empty()))
                    .map_err(|e| e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail));
                ProbeAnswer::of(result)
            })
            .await
            .unwrap_or(ProbeAnswer::NoAnswer);
            let ok = reachability.observe(answer);
            let was_up = self.up.swap(ok, Ordering::Relaxed);
            self.probed.store(true, Ordering::Relaxed);
            if was_up != ok {
                if ok {
                    tracing::info!("Kafka is reachable again");
                } else {
                    tracing::warn!("Kafka is unreachable: answering 503 until it returns");
                }
            }
            metrics::gauge!("ingest_kafka_up").set(if ok { 1.0 } else { 0.0 });
            metrics::gauge!("ingest_kafka_queue_depth").set(self.queue_depth() as f64);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

fn build_producer(s: &KafkaSettings, reports: Arc<Notify>) -> Result<AckProducer, KafkaError> {
    let mut c = rivulet_common::kafka::base_config();
    c.set("bootstrap.servers", &s.brokers)
        .set("client.id", "rivulet-ingest")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", s.linger_ms.to_string())
        .set("compression.type", &s.compression)
        .set("message.timeout.ms", s.ack_timeout.as_millis().to_string())
        .set(
            "queue.buffering.max.messages",
            s.queue_max_messages.to_string(),
        )
        .set("queue.buffering.max.kbytes", "262144")
        .set("batch.num.messages", "10000")
        // Small produce requests on a fast network: Nagle would hold them back.
        .set("socket.nagle.disable", "true")
        .set("socket.keepalive.enable", "true")
        .set("reconnect.backoff.max.ms", "1000");
    AckProducer::create(&c, reports)
}

impl Sink for KafkaSink {
    fn publish(
        &self,
        record: &Record,
        deadline: Instant,
    ) -> impl Future<Output = Result<(), SinkError>> + Send {
        KafkaSink::publish(self, record, deadline)
    }

    fn publish_all(
        &self,
        records: &[Record],
        deadline: Instant,
    ) -> impl Future<Output = Vec<Result<(), SinkError>>> + Send {
        KafkaSink::publish_all(self, records, deadline)
    }

    fn is_ready(&self) -> bool {
        KafkaSink::is_ready(self)
    }

    fn queue_depth(&self) -> usize {
        KafkaSink::queue_depth(self)
    }
}

impl KafkaSink {
    /// Publishes one record and waits for the broker's ack until `deadline` (the
    /// handler's: the ack time-out counted from the request's arrival, so that the
    /// checks before publishing do not lengthen a client's wait).
    pub async fn publish(&self, record: &Record, deadline: Instant) -> Result<(), SinkError> {
        if !self.up.load(Ordering::Relaxed) {
            return Err(SinkError::Unavailable);
        }
        let delivery = self.enqueue(&self.producer(), record, deadline).await?;
        let result = await_ack(delivery, deadline).await;
        if let Err(e) = &result {
            tracing::warn!(error = %e, failed = 1, of = 1, "Kafka delivery failed");
        }
        result
    }

    /// Publishes the records and waits for their acks: one result per record, in order.
    /// All are enqueued before any ack is awaited, so that they share produce requests.
    pub async fn publish_all(
        &self,
        records: &[Record],
        deadline: Instant,
    ) -> Vec<Result<(), SinkError>> {
        if !self.up.load(Ordering::Relaxed) {
            return records
                .iter()
                .map(|_| Err(SinkError::Unavailable))
                .collect();
        }
        let producer = self.producer();
        let mut deliveries = Vec::with_capacity(records.len());
        for r in records {
            deliveries.push(self.enqueue(&producer, r, deadline).await);
        }
        let acks = futures::future::join_all(deliveries.into_iter().map(|d| async move {
            match d {
                Ok(delivery) => ack_result(delivery.ack().await),
                Err(e) => Err(e),
            }
        }));
        // One timer for the whole batch, not one per event.
        let results = match tokio::time::timeout_at(deadline, acks).await {
            Ok(results) => results,
            Err(_) => records.iter().map(|_| Err(SinkError::Timeout)).collect(),
        };
        if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
            let failed = results.iter().filter(|r| r.is_err()).count();
            tracing::warn!(error = %e, failed, of = records.len(), "Kafka delivery failed");
        }
        results
    }

    /// Hands one record to the producer. A full producer queue makes the caller wait for
    /// it to drain (backpressure) rather than grow memory, until `deadline`.
    async fn enqueue(
        &self,
        producer: &AckProducer,
        r: &Record,
        deadline: Instant,
    ) -> Result<Arc<Delivery>, SinkError> {
        let delivery = Arc::new(Delivery::default());
        let mut record = BaseRecord::with_opaque_to(&self.settings.topic, delivery.clone())
            .key(r.key())
            .payload(r.payload());
        loop {
            match producer.send(record) {
                Ok(()) => return Ok(delivery),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    QUEUE_FULL_WAITS.increment(1);
                    if Instant::now() >= deadline {
                        return Err(SinkError::Timeout);
                    }
                    record = back;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err((e, _)) => return Err(SinkError::Rejected(e.to_string())),
            }
        }
    }

    /// The broker answered the last probe (and there has been one).
    pub fn is_ready(&self) -> bool {
        self.probed.load(Ordering::Relaxed) && self.up.load(Ordering::Relaxed)
    }

    pub fn queue_depth(&self) -> usize {
        self.producer().in_flight_count().max(0) as usize
    }

    pub fn flush(&self, timeout: Duration) {
        if let Err(e) = self.producer().flush(Timeout::After(timeout)) {
            tracing::warn!(error = %e, "producer flush did not finish");
        }
    }
}

/// The broker's answer for one enqueued message, or a timeout at `deadline`: the ack
/// timeout bounds the answer, not only librdkafka's `message.timeout.ms`, which it checks
/// about once a second (so its own failure can come up to a second late), and which never
/// fires for a producer replaced after a fatal error. A message still queued may yet be
/// delivered after its 503: the client's retry with the same event_id collapses on it.
async fn await_ack(delivery: Arc<Delivery>, deadline: Instant) -> Result<(), SinkError> {
    match tokio::time::timeout_at(deadline, delivery.ack()).await {
        Ok(ack) => ack_result(ack),
        Err(_) => Err(SinkError::Timeout),
    }
}

fn ack_result(ack: crate::producer::Ack) -> Result<(), SinkError> {
    ack.map_err(|e| SinkError::Rejected(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::{ProbeAnswer, Reachability, PROBES_TO_GO_DOWN};
    use rdkafka::error::RDKafkaErrorCode;

    #[test]
    fn a_brokers_error_is_an_answer_and_librdkafkas_own_is_none() {
        use ProbeAnswer::*;
        assert_eq!(ProbeAnswer::of(Ok(true)), Topic);
        assert_eq!(ProbeAnswer::of(Ok(false)), NoTopic);
        assert_eq!(
            ProbeAnswer::of(Err(RDKafkaErrorCode::UnknownTopicOrPartition)),
            NoTopic
        );
        for code in [
            RDKafkaErrorCode::NotLeaderForPartition,
            RDKafkaErrorCode::LeaderNotAvailable,
            RDKafkaErrorCode::NotEnoughReplicas,
        ] {
            assert_eq!(ProbeAnswer::of(Err(code)), BrokerError, "{code:?}");
        }
        for code in [
            RDKafkaErrorCode::OperationTimedOut,
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::Fail,
        ] {
            assert_eq!(ProbeAnswer::of(Err(code)), NoAnswer, "{code:?}");
        }
    }

    #[test]
    fn kafka_is_down_after_probes_in_a_row_without_an_answer_once_it_has_answered() {
        let mut r = Reachability::default();
        assert!(r.observe(ProbeAnswer::Topic));
        for _ in 1..PROBES_TO_GO_DOWN {
            assert!(
                r.observe(ProbeAnswer::NoAnswer),
                "one broker cut off is not Kafka down"
            );
        }
        assert!(!r.observe(ProbeAnswer::NoAnswer));
        assert!(!r.observe(ProbeAnswer::NoAnswer));
        assert!(
            r.observe(ProbeAnswer::BrokerError),
            "the first answer is enough to be up"
        );
        assert!(r.observe(ProbeAnswer::NoAnswer));
        assert!(
            r.observe(ProbeAnswer::Topic),
            "an answer starts the count again"
        );
        assert!(r.observe(ProbeAnswer::NoAnswer));
    }

    #[test]
    fn before_its_first_answer_and_without_the_topic_kafka_is_down_at_once() {
        let mut fresh = Reachability::default();
        assert!(!fresh.observe(ProbeAnswer::NoAnswer));
        let mut r = Reachability::default();
        assert!(r.observe(ProbeAnswer::Topic));
        assert!(!r.observe(ProbeAnswer::NoTopic));
        assert!(r.observe(ProbeAnswer::Topic));
    }
}
