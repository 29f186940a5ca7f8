//! Rivulet's enricher: a Kafka consumer group that turns raw events into `events`
//! rows in ClickHouse (`pipeline`), and the pure steps that turn a raw event into an `events` row
//! (geo, device, channel, visitor and session ids), each unit-tested on its own.

pub mod channel;
pub mod config;
pub mod decode;
pub mod device;
pub mod geo;
pub mod identity;
pub mod pipeline;
pub mod row;
pub mod server;
pub mod session;
