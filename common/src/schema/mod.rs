//! Rivulet's ClickHouse schema and every SQL statement it sends, in one place:
//! - [`events`]: the `events` table's columns, once; the DDL, the enricher's row and its
//!   RowBinary encoding, and the insert's column list all come from them;
//! - [`migrations`]: the versioned DDL, for a single node or a cluster ([`Topology`]);
//! - [`queries`]: the statements of the registry, the dashboard and the health probes,
//!   listed by [`queries::all`] so that a test can run each one on every server version.
//!
//! The SQL runs on ClickHouse 18.16 and on current servers: it avoids what
//! [`crate::clickhouse_versions`] lists. One difference is chosen by the server's version
//! ([`SchemaVariant`], by [`clickhouse_versions::low_cardinality`]): the column types of a
//! new `events` table; the product reads and writes both variants the same way.

pub mod events;
pub mod migrations;
pub mod people;
pub mod queries;

use crate::clickhouse_versions::{self, ServerVersion};
pub use crate::topology::Topology;

/// The column types a new table gets, chosen from the server's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaVariant {
    /// Types every supported server knows.
    Portable,
    /// `LowCardinality(String)` for [`events::LOW_CARDINALITY`]
    /// ([`clickhouse_versions::low_cardinality`]).
    LowCardinality,
}

impl SchemaVariant {
    /// The variant `migrate` creates tables with on a server of this version.
    pub fn for_server(version: &ServerVersion) -> Self {
        if clickhouse_versions::low_cardinality(version) {
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
    use super::{SchemaVariant, ServerVersion};

    /// The boundary itself is tested with the rule (`clickhouse_versions`).
    #[test]
    fn the_variant_follows_the_low_cardinality_rule() {
        use SchemaVariant::{LowCardinality, Portable};
        for (version, want) in [("18.16.1", Portable), ("26.9.2.1", LowCardinality)] {
            let v = ServerVersion::parse(version);
            assert_eq!(SchemaVariant::for_server(&v), want, "{version:?}");
        }
        assert_eq!(
            SchemaVariant::for_server(&ServerVersion::unknown()),
            Portable
        );
    }
}
