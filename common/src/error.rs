use thiserror::Error;

/// Errors of the shared layer. Services map these onto their own error enums.
#[derive(Debug, Error)]
pub enum CommonError {
    #[error("configuration: {0}")]
    Config(String),
    #[cfg(feature = "clickhouse")]
    #[error("ClickHouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
    #[cfg(feature = "redis")]
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[cfg(feature = "kafka")]
    #[error("Kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
}
