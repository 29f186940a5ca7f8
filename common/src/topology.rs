//! Where Rivulet's data lives: one ClickHouse server, or a cluster of shards and
//! replicas. Decided here, once, from `CLICKHOUSE_CLUSTER`; the migrations, the
//! enricher's inserts, the stack scripts (through `.stack/env`) and the tests ask it.

use crate::{config, CommonError};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    /// `CLICKHOUSE_CLUSTER` unset: plain tables on one server.
    SingleNode,
    /// `CLICKHOUSE_CLUSTER=<name>`: the `remote_servers` cluster the DDL runs `ON CLUSTER`;
    /// `events` is a `Distributed` table over replicated local tables.
    Cluster { name: String },
}

impl Topology {
    pub fn from_env() -> Result<Self, CommonError> {
        match config::optional("CLICKHOUSE_CLUSTER") {
            None => Ok(Topology::SingleNode),
            Some(name)
                if name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
            {
                Ok(Topology::Cluster { name })
            }
            Some(name) => Err(CommonError::Config(format!(
                "CLICKHOUSE_CLUSTER={name:?}: give the name of a cluster in the servers' \
                 remote_servers (letters, digits, '_' and '-')"
            ))),
        }
    }

    /// The cluster's name, if any.
    pub fn cluster(&self) -> Option<&str> {
        match self {
            Topology::SingleNode => None,
            Topology::Cluster { name } => Some(name),
        }
    }

    /// ` ON CLUSTER <name>` for DDL, or nothing on a single node.
    pub fn on_cluster(&self) -> String {
        self.cluster()
            .map(|name| format!(" ON CLUSTER {name}"))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_cluster_clause() {
        assert_eq!(Topology::SingleNode.on_cluster(), "");
        let c = Topology::Cluster {
            name: "rivulet".into(),
        };
        assert_eq!(c.on_cluster(), " ON CLUSTER rivulet");
        assert_eq!(c.cluster(), Some("rivulet"));
    }
}
