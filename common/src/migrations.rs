//! Versioned schema migrations, recorded in `schema_migrations`.
//!
//! ClickHouse has no transactions or locks, so safety under concurrent runs comes from
//! every statement being idempotent (`IF NOT EXISTS`), from tolerating the "already
//! exists" answer a racing process can get, and from a ReplacingMergeTree record table
//! in which a migration recorded twice is still one version. The SQL is written to run
//! on ClickHouse 18.16 and on current servers: no `DateTime64`, `Map`, `JSON` type or
//! `LowCardinality`.

use crate::ch::{is_server_error, Db};
use crate::CommonError;
use clickhouse::Row;
use serde::{Deserialize, Serialize};

pub struct Migration {
    pub version: u32,
    pub name: &'static str,
    /// Statements with `{db}` standing for the database name.
    pub statements: &'static [&'static str],
}

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "events",
        statements: &[r"CREATE TABLE IF NOT EXISTS {db}.events (
    event_id UUID,
    site_id UInt32,
    timestamp DateTime,
    received_at DateTime,
    type String,
    event_name String,
    properties String,
    hostname String,
    pathname String,
    querystring String,
    page_title String,
    referrer String,
    channel String,
    user_id String,
    session_id String,
    language String,
    screen_width UInt16,
    screen_height UInt16,
    country String,
    region String,
    city String,
    lat Float64,
    lon Float64,
    browser String,
    browser_version String,
    operating_system String,
    operating_system_version String,
    device_type String,
    is_bot UInt8,
    ip String
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(timestamp)
ORDER BY (site_id, timestamp, event_id)"],
    },
    Migration {
        version: 2,
        name: "sites and api_keys registry",
        statements: &[
            r"CREATE TABLE IF NOT EXISTS {db}.sites (
    site_id UInt32,
    domain String,
    name String,
    created_at DateTime,
    deleted UInt8,
    version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY site_id",
            r"CREATE TABLE IF NOT EXISTS {db}.api_keys (
    key_hash String,
    key_id String,
    key_prefix String,
    site_id UInt32,
    created_at DateTime,
    revoked_at DateTime,
    revoked UInt8,
    version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY key_hash",
        ],
    },
];

// 57 TABLE_ALREADY_EXISTS, 82 DATABASE_ALREADY_EXISTS: a concurrent run got there first.
const ALREADY_EXISTS: &[u32] = &[57, 82];

#[derive(Row, Serialize, Deserialize)]
struct Applied {
    version: u32,
    name: String,
    applied_at: u32,
}

/// Brings the schema up to date. Returns the versions this call applied.
pub async fn migrate(db: &Db) -> Result<Vec<u32>, CommonError> {
    let name = &db.database;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(CommonError::Config(format!(
            "CLICKHOUSE_DB={name:?}: use letters, digits and underscores"
        )));
    }
    run(db, &format!("CREATE DATABASE IF NOT EXISTS {name}")).await?;
    run(
        db,
        &format!(
            "CREATE TABLE IF NOT EXISTS {name}.schema_migrations (version UInt32, name String, applied_at DateTime) \
             ENGINE = ReplacingMergeTree ORDER BY version"
        ),
    )
    .await?;
    let done = applied_versions(db).await?;
    let mut applied_now = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| !done.contains(&m.version)) {
        for stmt in m.statements {
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
        tracing::info!(version = m.version, name = m.name, "migration applied");
        applied_now.push(m.version);
    }
    Ok(applied_now)
}

pub async fn applied_versions(db: &Db) -> Result<Vec<u32>, CommonError> {
    Ok(db
        .root
        .query(&format!(
            "SELECT DISTINCT version FROM {}.schema_migrations ORDER BY version",
            db.database
        ))
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
