//! `rivulet-ingest`: validates tracking events, authenticates their API keys through a
//! cache chain, rate-limits per key, and publishes them durably to Kafka.
//!
//! Always built: the wire contract (`api`), reading a request body (`request_body`) and
//! a tracking event's fields and validation (`event`). With the default `service`
//! feature: the server itself.

pub mod api;
#[cfg(feature = "service")]
pub mod asset;
#[cfg(feature = "service")]
pub mod auth;
#[cfg(feature = "service")]
pub mod clock;
#[cfg(feature = "service")]
pub mod config;
pub mod event;
#[cfg(feature = "service")]
pub use rivulet_common::failures;
#[cfg(feature = "service")]
pub mod handlers;
#[cfg(feature = "service")]
pub mod last_used;
#[cfg(feature = "service")]
pub mod producer;
#[cfg(feature = "service")]
pub mod profile_caps;
#[cfg(feature = "service")]
pub mod rate_limit;
#[cfg(feature = "service")]
pub mod redis_link;
pub mod request_body;
#[cfg(feature = "service")]
pub mod router;
#[cfg(feature = "service")]
pub mod script;
#[cfg(feature = "service")]
mod service;
#[cfg(feature = "service")]
pub mod sink;
#[cfg(feature = "service")]
pub mod sites;
#[cfg(feature = "service")]
pub mod state;
/// Ingest in-process with doubles, for tests (feature `testing`).
#[cfg(all(feature = "service", any(test, feature = "testing")))]
pub mod testing;

#[cfg(feature = "service")]
pub use rivulet_common::shutdown::signal as shutdown_signal;
#[cfg(feature = "service")]
pub use service::{prometheus, Ingest};
