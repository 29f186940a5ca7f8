//! Shared by `rivulet-ingest`, `rivulet-enricher` and `rivulet-admin`: the raw event and
//! its validation, API keys, the sites/keys registry in ClickHouse, schema migrations,
//! cache naming in Redis, Kafka settings and configuration from the environment.

pub mod cache;
pub mod ch;
pub mod config;
pub mod error;
pub mod event;
pub mod kafka;
pub mod keys;
pub mod migrations;
pub mod registry;
pub mod shutdown;
pub mod telemetry;

pub use error::CommonError;
