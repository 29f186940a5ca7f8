//! Rivulet's ClickHouse schema and every SQL statement it sends, in one place:
//! - [`events`]: the `events` table's columns, once; the DDL, the enricher's row and its
//!   RowBinary encoding, and the insert's column list all come from them;
//! - [`migrations`]: the versioned DDL, for a single node or a cluster ([`Topology`]);
//! - [`queries`]: the statements of the registry, the dashboard and the health probes,
//!   listed by [`queries::all`] so that a test can run each one on every server version.
//!
//! The SQL runs on ClickHouse 18.16 and on current servers: no `DateTime64`, `Map`, `JSON`
//! type, no `JSONExtract*`, no `INSERT … SETTINGS`. One difference is chosen by the
//! server's version ([`SchemaVariant`]): a new `events` table on a server from 22.x has
//! `LowCardinality(String)` columns where values repeat (docs/clickhouse-versions.md has
//! the measurement); the product reads and writes both variants the same way.

pub mod events;
pub mod migrations;
pub mod people;
pub mod queries;

pub use crate::topology::Topology;

/// The column types a new table gets, chosen from the server's `SELECT version()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaVariant {
    /// Types every supported server knows (18.16 on).
    Portable,
    /// Servers from 22.x: `LowCardinality(String)` for [`events::LOW_CARDINALITY`].
    /// LowCardinality is only experimental in 18.16.
    LowCardinality,
}

impl SchemaVariant {
    /// For a server version such as `26.9.2.1`; anything unreadable is [`Self::Portable`].
    pub fn for_server(version: &str) -> Self {
        let major = version
            .split('.')
            .next()
            .and_then(|m| m.trim().parse::<u32>().ok());
        if major.is_some_and(|m| m >= 22) {
            SchemaVariant::LowCardinality
        } else {
            SchemaVariant::Portable
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::SchemaVariant;

    #[test]
    fn the_variant_follows_the_server_version() {
        use SchemaVariant::{LowCardinality, Portable};
        for (version, want) in [
            ("18.16.1", Portable),
            ("21.8.15.7", Portable),
            ("22.3.1", LowCardinality),
            ("26.9.2.1", LowCardinality),
            ("", Portable),
            ("garbage", Portable),
        ] {
            assert_eq!(SchemaVariant::for_server(version), want, "{version:?}");
        }
    }
}
