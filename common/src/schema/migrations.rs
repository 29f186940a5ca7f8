//! Versioned schema migrations, recorded in `schema_migrations`.
//!
//! ClickHouse has no transactions or locks, so safety under concurrent runs comes from
//! every statement being idempotent (`IF NOT EXISTS`), from tolerating the "already
//! exists" answer a racing process can get, and from a ReplacingMergeTree record table
//! in which a migration recorded twice is still one version.
//!
//! On a cluster ([`Topology::Cluster`]) every statement runs `ON CLUSTER`: `events` is a
//! `Distributed` table over each shard's `ReplicatedReplacingMergeTree`, and the registry
//! (`sites`, `api_keys`) and `schema_migrations` are replicated to every server (one
//! replication group spanning all shards), so each server answers registry reads alone.

use super::{events, SchemaVariant, Topology};
use crate::ch::{is_server_error, Db};
use crate::CommonError;
use clickhouse::Row;
use serde::{Deserialize, Serialize};

pub struct Migration {
    pub version: u32,
    pub name: &'static str,
}

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "events",
    },
    Migration {
        version: 2,
        name: "sites and api_keys registry",
    },
];

const SITES_COLUMNS: &str = "(
    site_id UInt32,
    domain String,
    name String,
    created_at DateTime,
    deleted UInt8,
    version UInt64
)";

const API_KEYS_COLUMNS: &str = "(
    key_hash String,
    key_id String,
    key_prefix String,
    site_id UInt32,
    created_at DateTime,
    revoked_at DateTime,
    revoked UInt8,
    version UInt64
)";

/// A table of the registry: plain on one server; on a cluster replicated to every server.
/// The replica name joins the shard and replica macros, since the replication group
/// spans all shards and its replicas' names must differ.
fn registry_table(
    topology: &Topology,
    table: &str,
    columns: &str,
    version: Option<&str>,
    order_by: &str,
) -> String {
    match topology {
        Topology::SingleNode => {
            let args = version.map(|v| format!("({v})")).unwrap_or_default();
            format!(
                "CREATE TABLE IF NOT EXISTS {{db}}.{table} {columns} ENGINE = ReplacingMergeTree{args} ORDER BY {order_by}"
            )
        }
        Topology::Cluster { name } => {
            let args = version.map(|v| format!(", {v}")).unwrap_or_default();
            format!(
                "CREATE TABLE IF NOT EXISTS {{db}}.{table} ON CLUSTER {name} {columns} \
                 ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all/{{db}}/{table}', '{{shard}}-{{replica}}'{args}) \
                 ORDER BY {order_by}"
            )
        }
    }
}

/// The statements of one migration with the portable types, `{db}` standing for the
/// database.
pub fn statements(version: u32, topology: &Topology) -> Vec<String> {
    statements_for(version, topology, SchemaVariant::Portable)
}

/// The statements of one migration for a variant, `{db}` standing for the database.
pub fn statements_for(version: u32, topology: &Topology, variant: SchemaVariant) -> Vec<String> {
    match version {
        1 => events::create_statements_for(topology, variant),
        2 => vec![
            registry_table(topology, "sites", SITES_COLUMNS, Some("version"), "site_id"),
            registry_table(
                topology,
                "api_keys",
                API_KEYS_COLUMNS,
                Some("version"),
                "key_hash",
            ),
        ],
        other => panic!("no migration {other}"),
    }
}

/// What runs before any migration: the database and the record table.
pub fn bootstrap_statements(topology: &Topology) -> Vec<String> {
    vec![
        format!(
            "CREATE DATABASE IF NOT EXISTS {{db}}{}",
            topology.on_cluster()
        ),
        registry_table(
            topology,
            "schema_migrations",
            "(version UInt32, name String, applied_at DateTime)",
            None,
            "version",
        ),
    ]
}

/// Every DDL statement for a topology with the portable types, in the order a fresh
/// database runs them.
pub fn all_statements(topology: &Topology) -> Vec<String> {
    all_statements_for(topology, SchemaVariant::Portable)
}

/// Every DDL statement for a topology and variant, in the order a fresh database runs them.
pub fn all_statements_for(topology: &Topology, variant: SchemaVariant) -> Vec<String> {
    let mut all = bootstrap_statements(topology);
    for m in MIGRATIONS {
        all.extend(statements_for(m.version, topology, variant));
    }
    all
}

// 57 TABLE_ALREADY_EXISTS, 82 DATABASE_ALREADY_EXISTS: a concurrent run got there first.
const ALREADY_EXISTS: &[u32] = &[57, 82];

#[derive(Row, Serialize, Deserialize)]
struct Applied {
    version: u32,
    name: String,
    applied_at: u32,
}

/// Brings the schema up to date. Returns the versions this call applied. New tables get
/// the types of the server's [`SchemaVariant`]; tables that exist are left as they are.
pub async fn migrate(db: &Db) -> Result<Vec<u32>, CommonError> {
    let name = &db.database;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(CommonError::Config(format!(
            "CLICKHOUSE_DB={name:?}: use letters, digits and underscores"
        )));
    }
    for stmt in bootstrap_statements(&db.topology) {
        run(db, &stmt.replace("{db}", name)).await?;
    }
    let variant = SchemaVariant::for_server(&db.server_version);
    let done = applied_versions(db).await?;
    let mut applied_now = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| !done.contains(&m.version)) {
        for stmt in statements_for(m.version, &db.topology, variant) {
            run(db, &stmt.replace("{db}", name)).await?;
        }
        // The crate quotes the table as one identifier, so insert through the client bound
        // to the database (it exists by now) rather than with a qualified name.
        let mut insert = db.client.insert::<Applied>("schema_migrations").await?;
        insert
            .write(&Applied {
                version: m.version,
                name: m.name.to_string(),
                applied_at: now_secs(),
            })
            .await?;
        insert.end().await?;
        tracing::info!(
            version = m.version,
            name = m.name,
            ?variant,
            "migration applied"
        );
        applied_now.push(m.version);
    }
    Ok(applied_now)
}

pub async fn applied_versions(db: &Db) -> Result<Vec<u32>, CommonError> {
    Ok(db
        .root
        .query(&super::queries::APPLIED_MIGRATIONS.replace("{db}", &db.database))
        .fetch_all::<u32>()
        .await?)
}

async fn run(db: &Db, sql: &str) -> Result<(), CommonError> {
    match db.root.query(sql).execute().await {
        Err(e) if is_server_error(&e, ALREADY_EXISTS) => Ok(()),
        other => Ok(other?),
    }
}

pub(crate) fn now_secs() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_node_has_no_cluster_clauses_and_a_cluster_has_them_everywhere() {
        let single = all_statements(&Topology::SingleNode);
        assert!(single
            .iter()
            .all(|s| !s.contains("ON CLUSTER") && !s.contains("Replicated")));
        let cluster = all_statements(&Topology::Cluster {
            name: "rivulet".into(),
        });
        assert_eq!(
            single.len(),
            cluster.len() - 1,
            "events adds its local table"
        );
        assert!(cluster.iter().all(|s| s.contains(" ON CLUSTER rivulet")));
        assert!(cluster.iter().any(|s| s.contains(
            "ENGINE = Distributed(rivulet, {db}, events_local, cityHash64(toString(event_id)))"
        )));
    }
}
