//! Rivulet's enricher: a Kafka consumer group that turns raw events into `events` rows in
//! ClickHouse, in two lanes (live events, imports), each a pipeline on a thread of its
//! own: a step per message (`pipeline`), a batch/insert state machine (`batcher`) that
//! stores an offset only once its rows are in ClickHouse, the writer (`insert`) and
//! Kafka (`kafka`) behind traits. `data` loads the user-agent rules and the geo database
//! and reloads them while the enricher runs; `checks` holds the known cases a file must
//! get right to be used (`rivulet-admin install` and `replay` use these too).

mod batch;
mod batcher;
pub mod channel;
pub mod checks;
pub mod config;
pub mod data;
pub mod device;
pub mod enrich;
mod error;
pub mod geo;
mod health;
pub mod identity;
pub mod insert;
mod kafka;
pub mod ledger;
pub mod lifecycle;
pub mod message;
pub mod pipeline;
mod server;
mod service;
pub mod session;

pub use error::EnricherError;
pub use service::run;
