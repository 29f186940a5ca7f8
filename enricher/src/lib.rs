//! Rivulet's enricher: a Kafka consumer group that turns raw events into `events` rows in
//! ClickHouse (`pipeline`), and the steps that make a row of a raw event (`enrich`: geo,
//! device, channel, visitor and session ids), each unit-tested on its own. `data` loads
//! the user-agent rules and the geo database and reloads them while the enricher runs;
//! `checks` holds the known cases a file must get right to be used (`rivulet-admin
//! install` and `replay` use these too).

pub mod batch;
pub mod channel;
pub mod checks;
pub mod config;
pub mod data;
pub mod device;
pub mod enrich;
pub mod error;
pub mod geo;
pub mod identity;
pub mod insert;
pub mod ledger;
pub mod lifecycle;
pub mod message;
pub mod pipeline;
pub mod server;
mod service;
pub mod session;

pub use error::EnricherError;
pub use service::run;
