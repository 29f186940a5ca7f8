//! Kafka settings shared by producer and consumers.

use crate::config;
#[cfg(feature = "kafka")]
use rdkafka::ClientConfig;

pub const DEFAULT_TOPIC_RAW: &str = "events.raw";
pub const DEFAULT_TOPIC_DLQ: &str = "events.dlq";
pub const DEFAULT_TOPIC_IMPORT: &str = "events.import";

pub fn brokers() -> String {
    config::string("KAFKA_BROKERS", "127.0.0.1:19092")
}

pub fn topic_raw() -> String {
    config::string("KAFKA_TOPIC_RAW", DEFAULT_TOPIC_RAW)
}

/// `KAFKA_TOPIC_IMPORT`, default `events.import`: the historical lane, where
/// `rivulet-admin import` publishes and the enrichers' import lane reads.
pub fn topic_import() -> String {
    config::string("KAFKA_TOPIC_IMPORT", DEFAULT_TOPIC_IMPORT)
}

pub fn topic_dlq() -> String {
    config::string("KAFKA_TOPIC_DLQ", DEFAULT_TOPIC_DLQ)
}

/// A client configuration with the brokers set and librdkafka's own logs quietened,
/// unless `KAFKA_DEBUG` names librdkafka debug contexts (`eos`, `broker`, `protocol`, …)
/// to log at debug level, for diagnosing a client that does not recover.
#[cfg(feature = "kafka")]
pub fn base_config() -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers())
        .set("client.id", "rivulet")
        .set("log_level", "4");
    let debug = config::string("KAFKA_DEBUG", "");
    if !debug.trim().is_empty() {
        c.set("debug", debug.trim());
    }
    c
}

/// The partition key of an event: one visitor's events keep their order on one partition.
pub fn message_key(site_id: u32, user_id: Option<&str>, ip: &str, user_agent: &str) -> String {
    let mut key = Vec::new();
    write_message_key(&mut key, site_id, user_id, ip, user_agent);
    String::from_utf8(key).expect("a key is made of strings")
}

/// `message_key`, appended to `out`.
pub fn write_message_key(
    out: &mut Vec<u8>,
    site_id: u32,
    user_id: Option<&str>,
    ip: &str,
    user_agent: &str,
) {
    use std::io::Write;
    // Writing to a Vec cannot fail.
    let _ = match user_id {
        Some(u) => write!(out, "{site_id}:u:{u}"),
        None => write!(out, "{site_id}:v:{ip}|{user_agent}"),
    };
}
