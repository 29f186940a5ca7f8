//! The enricher's errors: what stops it from starting, and what a running pipeline can
//! fail with. Each says what to fix.

use rivulet_common::CommonError;
use rivulet_enrichment::EnrichmentError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum EnricherError {
    #[error("{0}")]
    Common(#[from] CommonError),
    /// The user-agent rules or the geo database cannot be loaded at start.
    #[error("{0}")]
    Enrichment(#[from] EnrichmentError),
    #[error("cannot listen on {addr} (ENRICHER_ADDR): {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("Kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("cannot subscribe to {topic}: {source}")]
    Subscribe {
        topic: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// An insert task ended without storing its batch (it retries until it does, so
    /// only a bug ends it): the lane stops rather than store offsets past its events.
    #[error("an insert task ended without storing its batch ({0}); stopping so that its events are redelivered")]
    InsertTask(#[source] tokio::task::JoinError),
    #[error("cannot start a lane's runtime: {0}")]
    LaneRuntime(#[source] std::io::Error),
    #[error("cannot start a lane's thread: {0}")]
    LaneThread(#[source] std::io::Error),
    #[error("a lane's thread panicked")]
    LanePanicked,
    #[error("waiting for a lane's thread: {0}")]
    LaneJoin(String),
    #[error("cannot handle SIGHUP (the signal that reloads the rules and the geo database): {0}")]
    Signal(std::io::Error),
    #[error("cannot start the thread that reloads the rules and the geo database: {0}")]
    ReloadThread(std::io::Error),
}
