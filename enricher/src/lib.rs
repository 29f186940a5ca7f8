//! Rivulet's enricher: a Kafka consumer group that turns raw events into `events` rows in
//! ClickHouse, in two lanes (live events, imports), each a pipeline on a thread of its
//! own: a step per message (`pipeline`), a batch/insert state machine (`batcher`) that
//! stores an offset only once its rows are in ClickHouse, the writer (`writer`) and
//! Kafka (`kafka`) behind traits. The enrichment itself (rules, data, ledger) is the
//! `rivulet-enrichment` library's.
//!
//! What it exports: its configuration and `run` (for its binary), and the consumers'
//! fetch settings (`pipeline::FETCH_SETTINGS`, for the benchmark's baseline consumer).

mod batch;
mod batcher;
pub mod config;
mod error;
mod health;
mod kafka;
mod lifecycle;
pub mod pipeline;
mod server;
mod service;
mod writer;

pub use error::EnricherError;
pub use service::run;
