"""The one rewrite the compatibility test applies to Rivulet's SQL: cluster DDL for one engine.

chDB is a single in-process engine: it has no cluster (`remote_servers`), no ZooKeeper or
Keeper, and no server another replica could reach. The cluster DDL
(`migrations::all_statements(&Topology::Cluster{..})`) is therefore run with exactly these
changes, and no others:

1. ` ON CLUSTER <name>` is removed.
2. `Replicated<X>MergeTree('<zookeeper path>', '<replica name>'[, args])` becomes
   `<X>MergeTree[(args)]`: the same engine and arguments without replication, which is
   what each replica runs locally (e.g. `ReplicatedReplacingMergeTree('…', '…', version)`
   becomes `ReplacingMergeTree(version)`).
3. `ENGINE = Distributed(<cluster>, <db>, <local table>[, <sharding key>])` becomes
   `ENGINE = Buffer(<db>, <local table>, 1, 0, 0, 0, 0, 0, 0)`: a table that passes every
   insert straight through to the local table (its max_rows and max_bytes are 0, so no
   insert is ever held back) and reads the local table: what a Distributed table over a
   cluster of one shard does. The columns stay those of `AS <db>.<local table>`.

Everything else — column types, ORDER BY, PARTITION BY, version columns, the table names
the product reads and writes — runs as written. After the rewrite no `ON CLUSTER`,
`Replicated`, `Distributed` or `{shard}`/`{replica}` macro may remain: a new cluster
construct makes the test fail until this function handles it (and its docstring says how).

What this does not test: replication, ZooKeeper paths and macros, distributed DDL, and
sharding; those run only on a real cluster.
"""

import re

_ON_CLUSTER = re.compile(r"\s+ON\s+CLUSTER\s+[A-Za-z0-9_\-]+", re.I)
_REPLICATED = re.compile(
    r"\bReplicated(\w*MergeTree)\s*\(\s*'[^']*'\s*,\s*'[^']*'\s*(?:,\s*([^)]*?))?\s*\)"
)
_DISTRIBUTED = re.compile(
    r"\bENGINE\s*=\s*Distributed\s*\(\s*[^,]+,\s*([^,\s]+)\s*,\s*([^,\s)]+)\s*(?:,[^\n]*)?\)", re.I
)
_LEFT_OVER = re.compile(r"ON\s+CLUSTER|Replicated|Distributed|\{shard\}|\{replica\}", re.I)


class RewriteError(Exception):
    pass


def single_engine(sql: str) -> str:
    """Cluster DDL → DDL for one engine (see the module's docstring); other SQL unchanged."""
    out = _ON_CLUSTER.sub("", sql)
    out = _REPLICATED.sub(lambda m: m.group(1) + (f"({m.group(2)})" if m.group(2) else ""), out)
    out = _DISTRIBUTED.sub(
        lambda m: f"ENGINE = Buffer({m.group(1)}, {m.group(2)}, 1, 0, 0, 0, 0, 0, 0)", out
    )
    if _is_ddl(sql) and _LEFT_OVER.search(out):
        raise RewriteError(
            "a cluster construct the chDB rewrite does not handle is left in:\n"
            f"{out}\nextend compat/chdb/rewrite.py, single_engine()"
        )
    return out


def _is_ddl(sql: str) -> bool:
    return re.match(r"^\s*(CREATE|ALTER|DROP|RENAME)\b", sql, re.I) is not None


def _self_test():
    cluster = (
        "CREATE TABLE IF NOT EXISTS {db}.sites ON CLUSTER rivulet (site_id UInt32) "
        "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all/{db}/sites', "
        "'{shard}-{replica}', version) ORDER BY site_id"
    )
    assert single_engine(cluster) == (
        "CREATE TABLE IF NOT EXISTS {db}.sites (site_id UInt32) "
        "ENGINE = ReplacingMergeTree(version) ORDER BY site_id"
    ), single_engine(cluster)
    plain = "ENGINE = ReplicatedReplacingMergeTree('/p/{shard}', '{replica}')\nORDER BY x"
    assert single_engine(plain) == "ENGINE = ReplacingMergeTree\nORDER BY x"
    dist = (
        "CREATE TABLE IF NOT EXISTS {db}.events ON CLUSTER c AS {db}.events_local\n"
        "ENGINE = Distributed(c, {db}, events_local, cityHash64(toString(event_id)))"
    )
    assert single_engine(dist) == (
        "CREATE TABLE IF NOT EXISTS {db}.events AS {db}.events_local\n"
        "ENGINE = Buffer({db}, events_local, 1, 0, 0, 0, 0, 0, 0)"
    ), single_engine(dist)
    assert single_engine("SELECT 1 FROM sites FINAL") == "SELECT 1 FROM sites FINAL"
    try:
        single_engine("CREATE TABLE t ON CLUSTER c ENGINE = ReplicatedSomethingNew('a')")
    except RewriteError:
        pass
    else:
        raise AssertionError("an unhandled construct must fail")


_self_test()
