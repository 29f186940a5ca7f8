//! The enricher's errors: what stops it from starting, and what a running pipeline can
//! fail with. Each says what to fix.

use crate::device::DeviceError;
use crate::geo::GeoError;
use rivulet_common::CommonError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum EnricherError {
    #[error("{0}")]
    Common(#[from] CommonError),
    #[error("GEOIP_DB: {0}")]
    Geo(#[from] GeoError),
    #[error("UA_REGEXES: {0}")]
    UaRules(#[from] DeviceError),
    #[error("cannot listen on {addr} (ENRICHER_ADDR): {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("Kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("the enrichment thread: {0}")]
    Thread(String),
    #[error("cannot handle SIGHUP (the signal that reloads the rules and the geo database): {0}")]
    Signal(std::io::Error),
    #[error("cannot start the thread that reloads the rules and the geo database: {0}")]
    ReloadThread(std::io::Error),
}
