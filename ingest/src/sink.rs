//! Where accepted events go: Kafka's `events.raw`. A 200 is only sent once the broker
//! has acknowledged the message (idempotent producer, acks=all).
//!
//! Messages are enqueued without blocking and their acks awaited concurrently; a full
//! producer queue makes the caller wait (backpressure) up to the ack timeout. A
//! background probe tracks whether the broker answers, so that while Kafka is down
//! requests fail fast with 503 instead of each waiting for the timeout, and recover by
//! themselves when it returns. The acks themselves are served on the runtime
//! (`serve_reports`, see `producer`).

use crate::producer::AckProducer;
use futures::future::BoxFuture;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::util::Timeout;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("Kafka is unavailable")]
    Unavailable,
    #[error("Kafka did not acknowledge in time")]
    Timeout,
    #[error("Kafka rejected the message: {0}")]
    Rejected(String),
}

/// One message for `events.raw`.
pub struct Record {
    pub key: String,
    pub payload: Vec<u8>,
}

/// A destination for events. Behind a trait so router tests can run without Kafka.
pub trait EventSink: Send + Sync {
    /// Publishes the records and waits for their acks: one result per record, in order.
    fn publish_all<'a>(
        &'a self,
        records: &'a [Record],
    ) -> BoxFuture<'a, Vec<Result<(), SinkError>>>;
    fn is_ready(&self) -> bool;
    fn queue_depth(&self) -> usize;
    fn flush(&self, timeout: Duration);
}

pub struct KafkaSettings {
    pub brokers: String,
    pub topic: String,
    pub ack_timeout: Duration,
    pub linger_ms: u32,
    pub queue_max_messages: u32,
    pub compression: String,
}

pub struct KafkaSink {
    producer: RwLock<Arc<AckProducer>>,
    settings: KafkaSettings,
    up: AtomicBool,
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
            let ok = tokio::task::spawn_blocking(move || {
                p.client()
                    .fetch_metadata(Some(&topic), Timeout::After(Duration::from_millis(1500)))
                    .map(|md| {
                        md.topics()
                            .iter()
                            .any(|t| t.error().is_none() && !t.partitions().is_empty())
                    })
                    .unwrap_or(false)
            })
            .await
            .unwrap_or(false);
            if self.up.swap(ok, Ordering::Relaxed) != ok {
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

impl EventSink for KafkaSink {
    fn publish_all<'a>(
        &'a self,
        records: &'a [Record],
    ) -> BoxFuture<'a, Vec<Result<(), SinkError>>> {
        Box::pin(async move {
            if !self.up.load(Ordering::Relaxed) {
                return records
                    .iter()
                    .map(|_| Err(SinkError::Unavailable))
                    .collect();
            }
            let deadline = Instant::now() + self.settings.ack_timeout;
            let producer = self.producer();
            // Enqueue everything first, so that one batch's messages share produce requests.
            let mut deliveries = Vec::with_capacity(records.len());
            for r in records {
                let (tx, rx) = oneshot::channel();
                let mut record = BaseRecord::with_opaque_to(&self.settings.topic, Box::new(tx))
                    .key(&r.key)
                    .payload(&r.payload);
                let enqueued = loop {
                    match producer.send(record) {
                        Ok(()) => break Ok(rx),
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                            // Backpressure: wait for the queue to drain rather than grow memory.
                            if Instant::now() >= deadline {
                                break Err(SinkError::Timeout);
                            }
                            record = back;
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        Err((e, _)) => break Err(SinkError::Rejected(e.to_string())),
                    }
                };
                deliveries.push(enqueued);
            }
            let acks = futures::future::join_all(deliveries.into_iter().map(|d| async move {
                match d?.await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(SinkError::Rejected(e.to_string())),
                    Err(_) => Err(SinkError::Timeout),
                }
            }));
            // librdkafka fails a message itself at message.timeout.ms; the extra second
            // only guards against a lost callback. One timer for the whole batch.
            let results =
                match tokio::time::timeout_at(deadline + Duration::from_secs(1), acks).await {
                    Ok(results) => results,
                    Err(_) => records.iter().map(|_| Err(SinkError::Timeout)).collect(),
                };
            if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
                let failed = results.iter().filter(|r| r.is_err()).count();
                tracing::warn!(error = %e, failed, of = records.len(), "Kafka delivery failed");
            }
            results
        })
    }

    fn is_ready(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    fn queue_depth(&self) -> usize {
        self.producer().in_flight_count().max(0) as usize
    }

    fn flush(&self, timeout: Duration) {
        if let Err(e) = self.producer().flush(Timeout::After(timeout)) {
            tracing::warn!(error = %e, "producer flush did not finish");
        }
    }
}
