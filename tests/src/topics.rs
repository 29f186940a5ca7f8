//! Kafka topics of a suite's own. A suite that starts an enricher in a consumer group of
//! its own must not read the stack's `events.raw` or `events.import`: a new group starts
//! from the earliest offset (the enricher's `auto.offset.reset`), so it would enrich and
//! store again every event anyone sent in the last 7 days. It gets topics of its own
//! instead, made here (the stack turns `auto.create.topics.enable` off).

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use std::time::Duration;

use crate::wait::Pace;

/// What every topic of events keeps at most (7 days), as the stack's own topics.
const RETENTION_MS: &str = "604800000";

/// Makes `name` with `partitions` partitions unless it exists, replicated to up to 3
/// brokers of the stack (`KAFKA_BROKERS`), and waits until every partition has a leader.
pub async fn ensure_topic(name: &str, partitions: i32) {
    crate::load_stack_env();
    let brokers = crate::env("KAFKA_BROKERS").split(',').count().clamp(1, 3) as i32;
    let admin: AdminClient<DefaultClientContext> = rivulet_common::kafka::base_config()
        .create()
        .expect("a Kafka admin client");
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(brokers))
        .set("retention.ms", RETENTION_MS);
    if brokers >= 3 {
        // As the cluster's own topics: an acknowledged write is on two brokers.
        topic = topic.set("min.insync.replicas", "2");
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin
        .create_topics([&topic], &opts)
        .await
        .unwrap_or_else(|e| panic!("creating Kafka topic {name}: {e} (is the stack up?)"));
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => panic!("creating Kafka topic {t}: {e}"),
        }
    }
    let consumer: BaseConsumer = rivulet_common::kafka::base_config().create().unwrap();
    Pace::within(Duration::from_secs(30))
        .every(Duration::from_millis(200))
        .poll_until(
            &format!("topic {name} did not get a leader for each partition"),
            || async {
                let md = consumer
                    .fetch_metadata(Some(name), Duration::from_secs(5))
                    .map_err(|e| e.to_string())?;
                let t = &md.topics()[0];
                let led = t.partitions().iter().filter(|p| p.leader() >= 0).count();
                if t.error().is_none() && led == partitions as usize {
                    Ok(())
                } else {
                    Err(format!(
                        "{led} of {partitions} partitions led, {:?}",
                        t.error()
                    ))
                }
            },
        )
        .await;
}
