//! Rivulet's ClickHouse schema and every SQL statement it sends, in one place:
//! - [`events`]: the `events` table's columns, once; the DDL, the enricher's row and its
//!   RowBinary encoding, and the insert's column list all come from them;
//! - [`migrations`]: the versioned DDL, for a single node or a cluster ([`Topology`]);
//! - [`queries`]: the statements of the registry, the dashboard and the health probes,
//!   listed by [`queries::all`] so that a test can run each one on every server version.
//!
//! The SQL runs on ClickHouse 18.16 and on current servers: no `DateTime64`, `Map`, `JSON`
//! type or `LowCardinality`, no `JSONExtract*`, no `INSERT … SETTINGS`.

pub mod events;
pub mod migrations;
pub mod queries;

pub use crate::topology::Topology;

/// A column: its name and ClickHouse type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub ch_type: &'static str,
}

/// `(name Type, …)` of a CREATE TABLE.
pub fn column_definitions(columns: &[Column]) -> String {
    let defs: Vec<String> = columns
        .iter()
        .map(|c| format!("    {} {}", c.name, c.ch_type))
        .collect();
    format!("(\n{}\n)", defs.join(",\n"))
}

/// `a, b, c`: the names, in order.
pub fn column_names(columns: &[Column]) -> String {
    columns
        .iter()
        .map(|c| c.name)
        .collect::<Vec<_>>()
        .join(", ")
}
