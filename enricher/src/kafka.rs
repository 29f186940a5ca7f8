//! A lane's side of Kafka: its consumer (with the rebalance hooks that keep the lane's
//! health and the lifecycle runner's role), the offset store and the DLQ the pipeline
//! writes through, and the poll loop that feeds the pipeline its messages.

use crate::batcher::OffsetStore;
use crate::config::{EnricherConfig, LaneConfig};
use crate::error::EnricherError;
use crate::health::{Health, LaneHealth};
use crate::pipeline::{DeadLetters, Pipeline, Polled, FETCH_SETTINGS};
use crate::writer::Sink;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;

/// Records rebalances for the lane, which owns the session state.
pub struct RebalanceContext {
    revoked: Mutex<Vec<i32>>,
    health: Arc<LaneHealth>,
    /// The live lane's: holding partition 0 makes this enricher the one that runs
    /// erasures and retention.
    lifecycle: Option<Arc<Health>>,
}

impl ClientContext for RebalanceContext {}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let parts: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
            tracing::info!(lane = self.health.lane.as_str(), partitions = ?parts, "partitions revoked");
            self.revoked
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(parts);
        }
    }
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let lane = self.health.lane.as_str();
        if let Rebalance::Assign(tpl) = rebalance {
            let parts: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
            tracing::info!(lane, partitions = ?parts, "partitions assigned");
        }
        let assignment = consumer.assignment().ok();
        let n = assignment.as_ref().map_or(0, |a| a.count());
        if let Some(health) = &self.lifecycle {
            let leader =
                assignment.is_some_and(|a| a.elements().iter().any(|e| e.partition() == 0));
            if health.lifecycle_leader.swap(leader, Ordering::Relaxed) != leader {
                tracing::info!(leader, "erasures and retention are run here: {leader}");
            }
        }
        self.health.assigned_partitions.store(n, Ordering::Relaxed);
        metrics::gauge!("enricher_assigned_partitions", "lane" => lane).set(n as f64);
    }
}

pub type RawConsumer = StreamConsumer<RebalanceContext>;

/// The consumer of a lane: its topic in its group; `lifecycle` for the live lane's,
/// whose partition 0 decides which enricher runs erasures and retention.
pub fn consumer(
    cfg: &EnricherConfig,
    lane: &LaneConfig,
    health: Arc<LaneHealth>,
    lifecycle: Option<Arc<Health>>,
) -> Result<RawConsumer, KafkaError> {
    let mut c = rivulet_common::kafka::base_config();
    c.set("bootstrap.servers", &cfg.brokers)
        .set("client.id", "rivulet-enricher")
        .set("group.id", &lane.group_id)
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
    c.create_with_context(RebalanceContext {
        revoked: Mutex::new(Vec::new()),
        health,
        lifecycle,
    })
}

pub fn dlq_producer(cfg: &EnricherConfig) -> Result<FutureProducer, KafkaError> {
    let mut c = rivulet_common::kafka::base_config();
    c.set("bootstrap.servers", &cfg.brokers)
        .set("client.id", "rivulet-enricher-dlq")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", "10000");
    c.create()
}

/// A lane's consumer as the pipeline's offset store.
pub struct KafkaOffsets {
    pub consumer: Arc<RawConsumer>,
    pub topic: String,
}

impl OffsetStore for KafkaOffsets {
    fn store(&self, next: &HashMap<i32, i64>) {
        let mut tpl = TopicPartitionList::new();
        for (p, next) in next {
            // store_offsets takes the literal next offset to read (no +1 applied by it).
            let _ = tpl.add_partition_offset(&self.topic, *p, Offset::Offset(*next));
        }
        if let Err(e) = self.consumer.store_offsets(&tpl) {
            tracing::warn!(error = %e, "storing offsets failed (partition revoked?); events may be redelivered");
        }
    }

    fn take_revoked(&self) -> Vec<i32> {
        std::mem::take(
            &mut *self
                .consumer
                .context()
                .revoked
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    fn commit(&self) {
        match self.consumer.commit_consumer_state(CommitMode::Sync) {
            // Nothing stored since the last auto-commit: nothing to do.
            Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(e) => {
                tracing::warn!(error = %e, "final commit failed; uncommitted events will be redelivered")
            }
        }
    }
}

/// `events.dlq`, with the reason and where the message came from in headers.
pub struct KafkaDeadLetters {
    pub producer: FutureProducer,
    pub topic: String,
    pub dlq_topic: String,
}

impl DeadLetters for KafkaDeadLetters {
    async fn send(&self, m: &Polled<'_>, reason: &str) -> Result<(), String> {
        let (p, o) = (m.partition.to_string(), m.offset.to_string());
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "reason",
                value: Some(reason),
            })
            .insert(Header {
                key: "source-topic",
                value: Some(self.topic.as_str()),
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
            FutureRecord::to(&self.dlq_topic).headers(headers);
        if let Some(k) = m.key {
            rec = rec.key(k);
        }
        if let Some(v) = m.payload {
            rec = rec.payload(v);
        }
        self.producer
            .send(rec, Duration::from_secs(5))
            .await
            .map(drop)
            .map_err(|(e, _)| e.to_string())
    }
}

/// A lane's poll loop: every message of its consumer through the pipeline, until
/// shutdown; then the last batch is inserted and committed, and the consumer leaves its
/// group.
pub async fn consume<S: Sink, D: DeadLetters>(
    mut pipeline: Pipeline<S, KafkaOffsets, D>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), EnricherError> {
    let lane = pipeline.lane().as_str();
    let consumer = pipeline.offsets().consumer.clone();
    let topic = pipeline.offsets().topic.clone();
    consumer
        .subscribe(&[&topic])
        .map_err(|source| EnricherError::Subscribe {
            topic: topic.clone(),
            source,
        })?;
    tracing::info!(lane, %topic, "consuming");
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let outcome = loop {
        match pipeline.make_room(&mut shutdown).await {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(e),
        }
        tokio::select! {
            biased;
            _ = shutdown.changed() => break Ok(()),
            msg = consumer.recv() => match msg {
                Err(e) => {
                    tracing::warn!(lane, error = %e, "Kafka consumer error");
                    metrics::counter!("enricher_consumer_errors_total", "lane" => lane).increment(1);
                }
                Ok(m) => {
                    let polled = Polled {
                        partition: m.partition(),
                        offset: m.offset(),
                        key: m.key(),
                        payload: m.payload(),
                    };
                    if !pipeline.take(polled, &mut shutdown).await {
                        break Ok(());
                    }
                }
            },
            _ = tick.tick() => {}
        }
        pipeline.apply_revocations();
    };
    // A lane that failed stores nothing more: its uncommitted events are redelivered.
    if outcome.is_ok() {
        pipeline.flush().await;
    }
    consumer.unsubscribe();
    tracing::info!(lane, "left the consumer group");
    outcome
}
