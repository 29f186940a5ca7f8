//! Enrichment as a library: what turns a raw event into an `events` row, shared by the
//! enricher service and `rivulet-admin` (`install` checks files with it, `replay`
//! enriches and inserts with it, `import` drops erased people with its ledger).
//!
//! Each rule is a module, unit-tested on its own: `device` (user agent), `geo` (IP),
//! `channel` (referrer and campaign), `identity` (visitor ids), `session`; `enrich`
//! applies them to one event. `data` loads the user-agent rules and the geo database
//! and reloads them while a process runs; `checks` holds the known cases a file must get
//! right to be used. `ledger` is the erasure ledger, `message` the decoder of a Kafka
//! message, `insert` the insert of encoded rows into `events`. Its settings are its own
//! (`config`), so that a tool using it reads no service's configuration.

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
pub mod message;
pub mod rollup_job;
pub mod session;

pub use config::EnrichmentConfig;
pub use error::EnrichmentError;
