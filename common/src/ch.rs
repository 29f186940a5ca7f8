//! ClickHouse connection settings and a client with the settings the server's version
//! takes: `connect` reads `SELECT version()`, and row validation and LZ4 compression follow
//! [`clickhouse_versions::row_validation`] and [`clickhouse_versions::lz4`] unless
//! `CLICKHOUSE_VALIDATION` / `CLICKHOUSE_COMPRESSION` set them.

use crate::clickhouse_versions::{self, ServerVersion};
use crate::schema::queries;
use crate::topology::Topology;
use crate::{config, CommonError};
use clickhouse::{Client, Compression};

#[derive(Clone, Debug)]
pub struct ChConfig {
    pub url: String,
    pub database: String,
    pub user: String,
    pub password: String,
    /// `CLICKHOUSE_VALIDATION`: `auto` (default, `None`:
    /// [`clickhouse_versions::row_validation`]), `on`, `off`.
    pub validation: Option<bool>,
    /// `CLICKHOUSE_COMPRESSION`: `auto` (default, `None`: [`clickhouse_versions::lz4`]),
    /// `lz4`, `none`.
    pub lz4: Option<bool>,
    /// `CLICKHOUSE_CLUSTER`: a single server, or the cluster the schema spans.
    pub topology: Topology,
    /// `CLICKHOUSE_INSERT_QUORUM`: how many replicas of a shard must have an insert before
    /// it is acknowledged. Default 2 on a cluster (an acknowledged insert survives the loss
    /// of a replica), none on a single server. 0 or 1 turns the quorum off.
    pub insert_quorum: u32,
    /// `CLICKHOUSE_INSERT_QUORUM_TIMEOUT_MS`, default 10000: how long an insert waits for
    /// its quorum before it fails (and is retried).
    pub insert_quorum_timeout_ms: u64,
    /// `CLICKHOUSE_NODES`: every server's HTTP URL, comma-separated (default: `url` alone).
    /// Erasure asks each of them that a person's rows are gone from every replica.
    pub nodes: Vec<String>,
}

impl ChConfig {
    pub fn from_env() -> Result<Self, CommonError> {
        let tri = |name: &str, on: &str, off: &str| -> Result<Option<bool>, CommonError> {
            match config::string(name, "auto").to_ascii_lowercase().as_str() {
                "auto" => Ok(None),
                v if v == on => Ok(Some(true)),
                v if v == off => Ok(Some(false)),
                v => Err(CommonError::Config(format!(
                    "{name}={v:?}: expected auto, {on} or {off}"
                ))),
            }
        };
        let topology = Topology::from_env()?;
        Ok(ChConfig {
            url: config::string("CLICKHOUSE_URL", "http://127.0.0.1:18123"),
            database: config::string("CLICKHOUSE_DB", "rivulet"),
            user: config::string("CLICKHOUSE_USER", "default"),
            password: config::optional("CLICKHOUSE_PASSWORD").unwrap_or_default(),
            validation: tri("CLICKHOUSE_VALIDATION", "on", "off")?,
            lz4: tri("CLICKHOUSE_COMPRESSION", "lz4", "none")?,
            insert_quorum: config::parse(
                "CLICKHOUSE_INSERT_QUORUM",
                if topology.cluster().is_some() { 2 } else { 0 },
            )?,
            insert_quorum_timeout_ms: config::parse("CLICKHOUSE_INSERT_QUORUM_TIMEOUT_MS", 10_000)?,
            topology,
            nodes: Vec::new(),
        }
        .with_nodes(config::optional("CLICKHOUSE_NODES")))
    }

    fn with_nodes(mut self, nodes: Option<String>) -> Self {
        self.nodes = nodes
            .iter()
            .flat_map(|n| n.split(','))
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        if self.nodes.is_empty() {
            self.nodes.push(self.url.clone());
        }
        self
    }

    /// One client per server (`CLICKHOUSE_NODES`), with the safest settings.
    pub fn each_node(&self) -> Vec<Db> {
        self.nodes
            .iter()
            .map(|url| {
                ChConfig {
                    url: url.clone(),
                    ..self.clone()
                }
                .connect_lazy()
            })
            .collect()
    }

    /// `ALTER TABLE {database}.{table} DROP PARTITION {partition}` where it must run: on a
    /// single server, there; on a cluster (`table` a local table), on each shard's leader
    /// replica, which replicates the drop to the others — not `ON CLUSTER`, which 18.16
    /// cannot run on a server with passwords ([`clickhouse_versions::DROP_PARTITION_ON_LEADERS`]).
    /// Returns how many servers dropped it; a shard without a leader at that moment keeps
    /// the partition.
    pub async fn drop_partition(
        &self,
        table: &str,
        partition: u32,
    ) -> Result<usize, clickhouse::error::Error> {
        let sql = format!(
            "ALTER TABLE {}.{table} DROP PARTITION {partition}",
            self.database
        );
        if self.topology.cluster().is_none() {
            self.connect_lazy().root.query(&sql).execute().await?;
            return Ok(1);
        }
        let mut dropped = 0;
        for node in self.each_node() {
            let leader: Vec<u8> = node
                .root
                .query(clickhouse_versions::DROP_PARTITION_ON_LEADERS)
                .bind(&self.database)
                .bind(table)
                .fetch_all()
                .await?;
            if leader.first() == Some(&1) {
                node.root.query(&sql).execute().await?;
                dropped += 1;
            }
        }
        Ok(dropped)
    }

    /// A client with the safest settings, no database selected (for `CREATE DATABASE`).
    fn plain_client(&self) -> Client {
        Client::default()
            .with_url(&self.url)
            .with_user(&self.user)
            .with_password(&self.password)
            .with_compression(Compression::None)
            .with_validation(false)
    }

    /// `client` with the settings of the enricher's inserts into `events`. On a cluster an
    /// insert is acknowledged only once it is durable: the `Distributed` table writes each
    /// shard's rows synchronously (`insert_distributed_sync`), and each shard's part
    /// reaches `insert_quorum` replicas first. (Settings go as URL parameters, as
    /// [`clickhouse_versions`] explains.)
    fn events_client(&self, client: &Client) -> Client {
        let mut client = client.clone();
        if self.topology.cluster().is_some() {
            client = client.with_setting("insert_distributed_sync", "1");
        }
        if self.insert_quorum > 1 {
            client = client
                .with_setting("insert_quorum", self.insert_quorum.to_string())
                .with_setting(
                    "insert_quorum_timeout",
                    self.insert_quorum_timeout_ms.to_string(),
                );
        }
        client
    }

    /// A client with settings every server accepts (no validation, no compression),
    /// made without any I/O: for services that must start while ClickHouse is down and
    /// only run small queries (ingest's registry lookups).
    pub fn connect_lazy(&self) -> Db {
        let client = self.plain_client().with_database(&self.database);
        Db {
            events: self.events_client(&client),
            client,
            root: self.plain_client(),
            database: self.database.clone(),
            server_version: ServerVersion::unknown(),
            topology: self.topology.clone(),
            nodes: self.nodes.clone(),
        }
    }

    /// Connects, checks the server answers, and picks the settings that work with it.
    pub async fn connect(&self) -> Result<Db, CommonError> {
        let version: String = self
            .plain_client()
            .query(queries::SERVER_VERSION)
            .fetch_one()
            .await?;
        let version = ServerVersion::parse(&version);
        let validation = self
            .validation
            .unwrap_or_else(|| clickhouse_versions::row_validation(&version));
        let lz4 = self
            .lz4
            .unwrap_or_else(|| clickhouse_versions::lz4(&version));
        let client = self
            .plain_client()
            .with_database(&self.database)
            .with_validation(validation)
            .with_compression(if lz4 {
                Compression::Lz4
            } else {
                Compression::None
            });
        Ok(Db {
            events: self.events_client(&client),
            client,
            root: self.plain_client(),
            database: self.database.clone(),
            server_version: version,
            topology: self.topology.clone(),
            nodes: self.nodes.clone(),
        })
    }
}

/// A connected ClickHouse: `client` is bound to the Rivulet database.
#[derive(Clone)]
pub struct Db {
    pub client: Client,
    /// `client` with the durability settings of inserts into `events` (see `ChConfig`).
    pub events: Client,
    /// Without a database selected; used by migrations to create it.
    pub root: Client,
    pub database: String,
    /// From `SELECT version()`; [`ServerVersion::unknown`] for a lazy client.
    pub server_version: ServerVersion,
    pub topology: Topology,
    /// Every server's HTTP URL (`CLICKHOUSE_NODES`, or the one `CLICKHOUSE_URL`).
    pub nodes: Vec<String>,
}

/// How long [`Db::alter`] waits for a server to say which replication groups it holds.
const GROUP_LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Db {
    /// `ALTER TABLE {database}.{table} {action}`, with `bind` giving the action's `?`
    /// values, where it must run: on a single server, there; on a cluster, on one server
    /// of each replication group of `table` (one per shard for `events_local`, one in
    /// all for a table replicated to every server), which replicates it to the group's
    /// other servers. Returns how many groups ran it.
    ///
    /// Not `ON CLUSTER`: 18.16's DDL worker can run a replicated `ALTER` on two replicas
    /// of a shard (each checks that no replica has run it, then takes the shard's lock,
    /// and one can check just before the other releases it); the second then fails to
    /// mark it done ("Node exists") and the worker stops for good, so every later
    /// `ON CLUSTER` statement times out on that server (code 159). A table replicated to
    /// every server ran the `ALTER` once per shard, the second failing with "already
    /// exists". Fixed upstream in 20.12; this works on every version.
    ///
    /// A table no server has a replica of is altered on the connected server alone. A
    /// column that exists already counts as added (a concurrent `migrate`), and an
    /// `ALTER` that a replica not active now will run when it returns as run. Fails
    /// when `CLICKHOUSE_NODES` does not reach every group: a shard left out would keep
    /// the old schema, or a person's rows. A server that does not say which groups it
    /// holds within 10 s (cut off by the network) is left out, so its group must be
    /// reached through another of its replicas.
    pub async fn alter(
        &self,
        table: &str,
        action: &str,
        bind: impl Fn(clickhouse::query::Query) -> clickhouse::query::Query,
    ) -> Result<usize, clickhouse::error::Error> {
        let sql = format!("ALTER TABLE {}.{table} {action}", self.database);
        let Some(cluster) = self.topology.cluster() else {
            bind(self.root.query(&sql)).execute().await?;
            return Ok(1);
        };
        // One server of each group, all found before any runs it: a group left out is
        // refused before the others have changed.
        let mut groups: Vec<(String, Client)> = Vec::new();
        let mut unanswered = Vec::new();
        for url in &self.nodes {
            let node = self.root.clone().with_url(url);
            // A server cut off by the network never answers, and the client has no
            // time-out of its own: without one an erasure would wait for it forever.
            let paths = tokio::time::timeout(
                GROUP_LOOKUP_TIMEOUT,
                node.query(clickhouse_versions::REPLICATION_GROUP)
                    .bind(&self.database)
                    .bind(table)
                    .fetch_all::<String>(),
            )
            .await;
            match paths {
                Err(_) => unanswered.push(format!("{url}: no answer in {GROUP_LOOKUP_TIMEOUT:?}")),
                Ok(Err(e)) => unanswered.push(format!("{url}: {e}")),
                Ok(Ok(paths)) => {
                    if let Some(path) = paths.into_iter().next() {
                        if !groups.iter().any(|(p, _)| *p == path) {
                            groups.push((path, node));
                        }
                    }
                }
            }
        }
        if groups.is_empty() && !unanswered.is_empty() {
            // Some server might hold a replica, and none that answered does: running it on
            // the connected server alone could leave that server's group out unseen.
            return Err(clickhouse::error::Error::Other(
                format!(
                    "ALTER TABLE {table}: no server of CLICKHOUSE_NODES that answered holds a \
                     replica of it, and {} did not answer ({}); nothing was run",
                    unanswered.len(),
                    unanswered.join("; ")
                )
                .into(),
            ));
        }
        if groups.is_empty() {
            // No server holds a replica of it: a table that is not replicated (the
            // compatibility check runs the cluster's schema on one engine), or one that
            // does not exist, which the connected server then says.
            done_or_under_way(table, bind(self.root.query(&sql)).execute().await)?;
            return Ok(1);
        }
        let shards: u64 = self
            .root
            .query(clickhouse_versions::CLUSTER_SHARDS)
            .bind(cluster)
            .fetch_one()
            .await?;
        let everywhere = groups.iter().any(|(p, _)| p.contains("/tables/all/"));
        let expected = if everywhere { 1 } else { shards as usize };
        if groups.len() < expected {
            return Err(clickhouse::error::Error::Other(
                format!(
                    "ALTER TABLE {table}: the servers of CLICKHOUSE_NODES hold {} of its {expected} \
                     replication groups (one per shard); list every server there{}",
                    groups.len(),
                    if unanswered.is_empty() {
                        String::new()
                    } else {
                        format!(" (no answer from {})", unanswered.join("; "))
                    }
                )
                .into(),
            ));
        }
        for (_, node) in &groups {
            // Current servers wait for the replica that ran it alone unless told (their
            // `alter_sync`, of which this is the old name 18.16 knows too).
            let run = bind(node.query(&sql))
                .with_setting("replication_alter_partitions_sync", "2")
                .execute()
                .await;
            done_or_under_way(table, run)?;
        }
        Ok(groups.len())
    }
}

/// An `ALTER`'s answer, with a column that exists already taken as added and an `ALTER`
/// a replica not active now will run from the replication log as run.
fn done_or_under_way(
    table: &str,
    answer: Result<(), clickhouse::error::Error>,
) -> Result<(), clickhouse::error::Error> {
    match answer {
        Err(e) if clickhouse_versions::is_duplicate_column(&e) => Ok(()),
        Err(e) if clickhouse_versions::is_unfinished(&e) => {
            tracing::warn!(table, error = %e, "ALTER waits for a replica that is not active");
            Ok(())
        }
        other => other,
    }
}
