//! What two or more of Rivulet's crates use: the wire contract's rules (`contract`), the
//! raw event message, API keys and their registry, the ClickHouse schema, client settings
//! and server versions, the topology, Redis names, Kafka settings, configuration from the
//! environment, logs, metrics and health endpoints.
//!
//! Client libraries are behind features, so that a crate links only what it uses:
//! `clickhouse` (the client, the schema, the registry), `kafka` (rdkafka settings),
//! `redis` (site ids from a Redis counter) and `server` (the bounded HTTP/1 listener).

pub mod cache;
#[cfg(feature = "clickhouse")]
pub mod ch;
#[cfg(feature = "clickhouse")]
pub mod clickhouse_versions;
pub mod client_ip;
pub mod config;
pub mod contract;
#[cfg(feature = "clickhouse")]
pub mod domain;
pub mod epoch;
pub mod error;
pub mod event;
#[cfg(feature = "server")]
pub mod failures;
pub mod health;
pub mod kafka;
pub mod keys;
#[cfg(feature = "server")]
pub mod listener;
pub mod priority;
#[cfg(feature = "clickhouse")]
pub mod privacy;
#[cfg(feature = "clickhouse")]
pub mod registry;
#[cfg(feature = "clickhouse")]
pub mod schema;
pub mod shutdown;
pub mod telemetry;
pub mod topology;

pub use error::CommonError;
