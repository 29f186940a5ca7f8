//! The enricher benchmark's baseline: reads a topic with the enricher's fetch settings
//! (`rivulet_enricher::pipeline::FETCH_SETTINGS`), and does nothing with the messages but
//! count their bytes. What the enricher reaches as a share of this is the cost of its own
//! work.
//!
//!   consume_baseline TOPIC COUNT [librdkafka.setting=value ...]   (extra settings win)
//!
//! Prints `{"messages":N,"seconds":S,"per_sec":R}`, timed from the first message.

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::Message;
use std::time::Instant;

#[tokio::main]
async fn main() {
    let args = rivulet_bench::tool_args("consume_baseline TOPIC COUNT [setting=value ...]", 2..);
    let (topic, count): (&str, u64) = (&args[1], args[2].parse().expect("COUNT"));
    let mut config = rivulet_common::kafka::base_config();
    config
        .set(
            "group.id",
            format!("consume-baseline-{}", std::process::id()),
        )
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky");
    for (key, value) in rivulet_enricher::pipeline::FETCH_SETTINGS {
        config.set(key, value);
    }
    for setting in &args[3..] {
        let (k, v) = setting.split_once('=').expect("setting=value");
        config.set(k, v);
    }
    let consumer: StreamConsumer = config.create().expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut bytes = 0usize;
    let first = consumer.recv().await.expect("first message");
    bytes += first.payload().map_or(0, <[u8]>::len);
    let started = Instant::now();
    for _ in 1..count {
        let m = consumer.recv().await.expect("message");
        bytes += m.payload().map_or(0, <[u8]>::len);
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{{\"messages\":{count},\"bytes\":{bytes},\"seconds\":{secs:.2},\"per_sec\":{:.0}}}",
        count as f64 / secs
    );
}
