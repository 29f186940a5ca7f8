//! Reading what services put in Kafka, from the offsets a topic had when the reader was
//! made: so a test sees its own messages, not earlier ones.

use crate::wait::Pace;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use rivulet_common::event::RawEvent;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Every partition of one topic, read from where each ended when the reader was made.
pub struct TopicReader {
    consumer: BaseConsumer,
}

impl TopicReader {
    pub fn from_end(topic: &str) -> Self {
        crate::require_stack(&[crate::StackService::Kafka]);
        let consumer: BaseConsumer = rivulet_common::kafka::base_config()
            .set("group.id", format!("test-{}", uuid::Uuid::new_v4()))
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let md = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .expect("Kafka metadata");
        let mut tpl = TopicPartitionList::new();
        for p in md.topics()[0].partitions() {
            let (_, high) = consumer
                .fetch_watermarks(topic, p.id(), Duration::from_secs(10))
                .unwrap();
            tpl.add_partition_offset(topic, p.id(), Offset::Offset(high))
                .unwrap();
        }
        consumer.assign(&tpl).unwrap();
        TopicReader { consumer }
    }

    /// The next message, waiting up to `wait` for one.
    pub fn next(&self, wait: Duration) -> Option<BorrowedMessage<'_>> {
        self.consumer.poll(wait).and_then(Result::ok)
    }
}

/// Reads `events.raw` to find what a test posted.
pub struct RawTopicReader {
    reader: TopicReader,
    seen: HashMap<String, (String, RawEvent)>,
}

impl RawTopicReader {
    pub fn new() -> Self {
        crate::load_stack_env();
        RawTopicReader {
            reader: TopicReader::from_end(&rivulet_common::kafka::topic_raw()),
            seen: HashMap::new(),
        }
    }

    /// Reads one message (waiting up to `wait`) into `seen`.
    fn read_one(&mut self, wait: Duration) {
        if let Some(m) = self.reader.next(wait) {
            let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
            if let Ok(ev) = serde_json::from_slice::<RawEvent>(m.payload().unwrap_or_default()) {
                self.seen.insert(ev.event_id.to_string(), (key, ev));
            }
        }
    }

    /// The message key and event with this `event_id`, waiting up to `within`.
    pub fn find(&mut self, event_id: &str, within: Duration) -> Option<(String, RawEvent)> {
        Pace::within(within)
            .poll_blocking(|| {
                if !self.seen.contains_key(event_id) {
                    self.read_one(Duration::from_millis(200));
                }
                self.seen.get(event_id).cloned().ok_or(())
            })
            .ok()
    }

    /// Every message that arrived within `within`, keyed by event id.
    pub fn drain(&mut self, within: Duration) -> &HashMap<String, (String, RawEvent)> {
        let end = Instant::now() + within;
        while Instant::now() < end {
            self.read_one(Duration::from_millis(100));
        }
        &self.seen
    }
}

impl Default for RawTopicReader {
    fn default() -> Self {
        Self::new()
    }
}

fn admin_client() -> AdminClient<DefaultClientContext> {
    crate::load_stack_env();
    rivulet_common::kafka::base_config()
        .create()
        .expect("a Kafka admin client")
}

/// Deletes a test's topic (at its end: what it wrote is no one else's).
pub async fn delete_topic(name: &str) {
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin_client()
        .delete_topics(&[name], &options)
        .await
        .unwrap_or_else(|e| panic!("deleting topic {name}: {e}"));
    for r in results {
        r.unwrap_or_else(|(t, e)| panic!("deleting topic {t}: {e}"));
    }
}

/// How many messages of `topic` the consumer group `group` has not committed: 0 once
/// every message it read is stored (an enricher commits only after its insert). Blocks.
/// An error is the brokers' answer of the moment (a partition whose leader is moving
/// answers "not leader" for a while): callers that poll ask again.
pub fn group_lag(group: &str, topic: &str) -> Result<i64, String> {
    crate::load_stack_env();
    let consumer: BaseConsumer = rivulet_common::kafka::base_config()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| format!("a consumer: {e}"))?;
    let timeout = Duration::from_secs(10);
    let md = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| format!("Kafka metadata: {e}"))?;
    let mut tpl = TopicPartitionList::new();
    for p in md.topics()[0].partitions() {
        tpl.add_partition(topic, p.id());
    }
    let committed = consumer
        .committed_offsets(tpl, timeout)
        .map_err(|e| format!("the group's committed offsets: {e}"))?;
    let mut lag = 0;
    for e in committed.elements() {
        let (low, high) = consumer
            .fetch_watermarks(topic, e.partition(), timeout)
            .map_err(|err| format!("the watermarks of partition {}: {err}", e.partition()))?;
        let at = match e.offset() {
            Offset::Offset(o) => o,
            _ => low,
        };
        lag += high - at;
    }
    Ok(lag)
}

/// Waits until `group` has committed every message of `topic`.
pub async fn wait_group_caught_up(group: &str, topic: &str, within: Duration) {
    Pace::within(within)
        .every(Duration::from_millis(250))
        .poll_until(
            &format!("group {group} did not commit every message of {topic}"),
            || async {
                let (g, t) = (group.to_string(), topic.to_string());
                match tokio::task::spawn_blocking(move || group_lag(&g, &t))
                    .await
                    .unwrap()
                {
                    Ok(0) => Ok(()),
                    Ok(lag) => Err(format!("{lag} messages not committed")),
                    Err(e) => Err(e),
                }
            },
        )
        .await
}
