//! The ClickHouse server versions Rivulet runs on, and every way its behaviour depends on
//! the version, in one place. No other code of the product decides by a version number or
//! explains a version's quirk: it calls or cites an item here. docs/clickhouse-versions.md has the
//! table of these differences and what is tested where.
//!
//! Rivulet knows two generations of servers:
//! - **18.16** (Debian's `clickhouse-server`): the local stack, every integration test;
//! - **current** servers, major version [`CURRENT_SINCE_MAJOR`] (22) and later: tested on
//!   26.9 through chDB (`scripts/test-chdb`).
//!
//! A server between the two (19.x–21.x), or one whose version cannot be read, is treated
//! like 18.16: the settings 18.16 needs work there too. None of those is tested. Each rule
//! below answers by that one boundary, even where ClickHouse gained the feature earlier
//! (the doc comment says when, where it is known).
//!
//! The differences are of three kinds:
//! - **chosen from the version** ([`ServerVersion`], read with `SELECT version()` when
//!   connecting): the client's [`row_validation`] and [`lz4`] compression, and the
//!   [`low_cardinality`] column types of a new `events` table;
//! - **handled one way on every version**, the way 18.16 needs, so that there is one code
//!   path: the shard of an event ([`EVENT_ID_HASH`]), the answers that mean a concurrent
//!   `migrate` got there first ([`is_already_exists`], [`is_duplicate_column`]), a quorum
//!   insert refused while another waits for its quorum ([`is_quorum_busy`];
//!   [`parallel_quorum_inserts`]), and waiting for a mutation by polling
//!   ([`mutations_sync`]), and `DROP PARTITION` sent to each shard's leader replica
//!   ([`DROP_PARTITION_ON_LEADERS`]);
//! - **worked around where the version needs it**: the last quorum part that 18.16 keeps
//!   from mutations ([`last_quorum_part_waits_for_an_insert`]).
//!
//! And what the SQL avoids, because 18.16 does not have it: `DateTime64`, `Map`, the `JSON`
//! type, `JSONExtract*`, and `INSERT … SETTINGS` (an insert's settings go as URL
//! parameters, `Client::with_setting`).

/// The first major version Rivulet treats as a current server.
pub const CURRENT_SINCE_MAJOR: u32 = 22;

/// A server's version, as `SELECT version()` answers it (`18.16.1`, `26.9.2.1`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerVersion {
    text: String,
    major: Option<u32>,
}

impl ServerVersion {
    /// Reads `SELECT version()`'s answer. Only the major version decides anything; an
    /// answer without a readable one is kept as it is and treated like 18.16.
    pub fn parse(text: &str) -> Self {
        let major = text
            .trim()
            .split('.')
            .next()
            .and_then(|m| m.parse::<u32>().ok());
        ServerVersion {
            text: text.to_string(),
            major,
        }
    }

    /// Not asked (a client made without I/O): treated like 18.16.
    pub fn unknown() -> Self {
        ServerVersion::default()
    }

    /// The text the server gave (empty when [`Self::unknown`]).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// A current server: major version [`CURRENT_SINCE_MAJOR`] or later. Private, like the
    /// major version itself: every decision by version is a rule of this module, with its
    /// reason.
    fn is_current(&self) -> bool {
        self.major.is_some_and(|m| m >= CURRENT_SINCE_MAJOR)
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// The `clickhouse` crate's row validation (`Client::with_validation`), the default of
/// `CLICKHOUSE_VALIDATION=auto`: on for current servers, off for 18.16.
///
/// With it, the crate reads rows as `RowBinaryWithNamesAndTypes` and describes a table
/// (`DESCRIBE TABLE`, with the setting `describe_include_subcolumns`) before inserting
/// into it, and so checks every column's name and type against the Rust struct: a query
/// or a table that drifts from its struct fails loudly instead of being misread. 18.16
/// knows neither (`Unknown format RowBinaryWithNamesAndTypes`, `Unknown setting
/// describe_include_subcolumns`); without validation the crate reads columns by position.
pub fn row_validation(v: &ServerVersion) -> bool {
    v.is_current()
}

/// LZ4 compression of requests and responses (`Compression::Lz4`), the default of
/// `CLICKHOUSE_COMPRESSION=auto`: on for current servers, off for 18.16.
///
/// It shrinks what goes over the network (the enricher's batches, the dashboard's
/// answers); 18.16 answers the crate's LZ4-framed requests with empty results. Not covered by the compatibility test (its
/// chDB adapter does not speak the compressed framing).
pub fn lz4(v: &ServerVersion) -> bool {
    v.is_current()
}

/// `LowCardinality(String)` for the `events` columns whose values repeat
/// (`schema::events::LOW_CARDINALITY`), in a new table: current servers only
/// (`schema::SchemaVariant::LowCardinality`).
///
/// A dictionary per part instead of every repeated string: 26 % less on disk with LZ4 and
/// 40 % fewer bytes read, measured on a million events (docs/clickhouse-versions.md). In
/// 18.16 the type is experimental: a `CREATE TABLE` with it fails unless
/// `allow_experimental_low_cardinality_type = 1`. On the wire (RowBinary) the column is a
/// String, so the product reads and writes both variants alike.
pub fn low_cardinality(v: &ServerVersion) -> bool {
    v.is_current()
}

/// Whether the server can wait for a mutation itself (the setting `mutations_sync`):
/// current servers (26.9 has it; the release that added it is not pinned here). 18.16
/// cannot (`Unknown setting mutations_sync`): an `ALTER … DELETE` returns at once and
/// rewrites the parts in the background.
///
/// Rivulet does not use it on any version: the erasure runner polls `system.mutations`
/// on every server (`schema::queries::MUTATIONS_UNFINISHED`) until none is left, then
/// counts on every server that no row of the batch remains, so the one path covers 18.16,
/// current servers and every replica of a cluster alike.
pub fn mutations_sync(v: &ServerVersion) -> bool {
    v.is_current()
}

/// Whether quorum inserts into one table run in parallel (`insert_quorum_parallel`,
/// on by default from 21.1 by ClickHouse's settings history; on in 26.9): current
/// servers. 18.16 has no such setting and runs one
/// quorum insert per table and shard at a time, refusing the others at once
/// ([`is_quorum_busy`]), which caps a shard's inserts (README, "Sizing for more").
///
/// Rivulet sets nothing for it: the default is what it wants, and the enricher retries a
/// refused quorum insert on every version (a current server answers the same when the
/// setting is turned off).
pub fn parallel_quorum_inserts(v: &ServerVersion) -> bool {
    v.is_current()
}

/// Whether the part of a partition's last quorum insert (`insert_quorum` ≥ 2) stays out
/// of every mutation until the next quorum insert into that partition: 18.16, which keeps
/// "the most recent part with a satisfied quorum" of each partition (ZooKeeper's
/// `quorum/last_part`) from merges and mutations, so a mutation submitted after a
/// partition's last insert waits at `parts_to_do` 1, with nothing in the replication
/// queue, until another insert comes — for an imported month, perhaps never (seen on the
/// stack's cluster: an erasure never finished). Current servers hold back only a part
/// whose quorum is not reached yet.
///
/// Where it does, the lifecycle runner writes a marker row with the quorum into each
/// partition that a waiting mutation still needs (`schema::queries::QUORUM_MARKER_EVENTS`
/// and the others).
pub fn last_quorum_part_waits_for_an_insert(v: &ServerVersion) -> bool {
    !v.is_current()
}

/// The hash of an event's id that picks its shard on a cluster (the `Distributed`
/// table's sharding key): `cityHash64` of the id as text, on every version.
///
/// 18.16 does not hash a UUID (`Unexpected type UUID of argument of function
/// cityHash64`); current servers do, but to another value (26.9: 2733496387931208560 for
/// the UUID whose text hashes to 11436670949570265678 on both), and the expression must
/// stay the same on every server and across upgrades: every copy of an event (a
/// redelivery, a client's retry) must land on the shard that holds the first, where
/// ReplacingMergeTree removes it.
pub const EVENT_ID_HASH: &str = "cityHash64(toString(event_id))";

/// Whether a replica leads its table's replication (`system.replicas.is_leader`), the
/// query by which `ALTER … DROP PARTITION` of a replicated table is sent to each shard's
/// leader, on every version (`ChConfig::drop_partition`).
///
/// 18.16 runs a replicated table's `DROP PARTITION` on the leader replica only: any other
/// replica forwards the query to the leader over a native connection as the `default`
/// user with no password, which a server whose users have passwords refuses — the
/// stack's cluster answered `ON CLUSTER … DROP PARTITION` with code 32 (`Attempt to read
/// after eof`) from every non-leader. Sent to the leaders, it needs no forwarding. Current
/// servers let every replica lead (each runs it; the second finds the partition gone).
pub const DROP_PARTITION_ON_LEADERS: &str =
    "SELECT toUInt8(is_leader) FROM system.replicas WHERE database = ? AND table = ?";

/// A replicated table's replication group on one server (its ZooKeeper path; none for a
/// table the server does not have), by which [`crate::ch::Db::alter`] runs an `ALTER`
/// once per group, on every version.
pub const REPLICATION_GROUP: &str =
    "SELECT zookeeper_path FROM system.replicas WHERE database = ? AND table = ?";

/// How many shards a cluster of `remote_servers` has, on every version.
pub const CLUSTER_SHARDS: &str =
    "SELECT count(DISTINCT shard_num) FROM system.clusters WHERE cluster = ?";

/// 57 TABLE_ALREADY_EXISTS, 82 DATABASE_ALREADY_EXISTS, on every version.
const ALREADY_EXISTS: &[u32] = &[57, 82];
/// 15 DUPLICATE_COLUMN on current servers; 44 ILLEGAL_COLUMN on 18.16, which also
/// means other things, hence the message ("column with this name already exists").
const DUPLICATE_COLUMN: &[u32] = &[15, 44];
/// 286 UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE, on every version.
const QUORUM_BUSY: &[u32] = &[286];
/// 60 UNKNOWN_TABLE, on every version.
const UNKNOWN_TABLE: &[u32] = &[60];

/// A `CREATE TABLE` or `CREATE DATABASE` answered "already exists": a concurrent
/// `migrate` made it between this one's `IF NOT EXISTS` check and its create.
pub fn is_already_exists(err: &clickhouse::error::Error) -> bool {
    is_server_error(err, ALREADY_EXISTS)
}

/// An `ALTER TABLE … ADD COLUMN` answered that the column exists (a concurrent `migrate`
/// added it first), in either version's words: code 15 on current servers, 44 with
/// "already exists" on 18.16.
pub fn is_duplicate_column(err: &clickhouse::error::Error) -> bool {
    is_server_error(err, DUPLICATE_COLUMN) && err.to_string().contains("already exists")
}

/// A statement named a table that does not exist.
pub fn is_unknown_table(err: &clickhouse::error::Error) -> bool {
    is_server_error(err, UNKNOWN_TABLE)
}

/// A quorum insert refused because another one into the table is still waiting for its
/// quorum: what 18.16 answers to a second quorum insert at once (see
/// [`parallel_quorum_inserts`]; six concurrent quorum inserts into one table on the
/// stack's cluster: one succeeded, five were refused). Contention, not an outage: the
/// insert is retried soon.
pub fn is_quorum_busy(err: &clickhouse::error::Error) -> bool {
    is_server_error(err, QUORUM_BUSY)
}

/// 341 UNFINISHED, on every version.
const UNFINISHED: &[u32] = &[341];

/// A replicated `ALTER` that every active replica has run while some replica is not
/// active: "Alter is not finished because some replicas are inactive right now … Alter
/// will be done asynchronously" (18.16, seen on the stack's cluster right after a
/// replica restarted; current servers after `replication_wait_for_inactive_replica_timeout`).
/// It is in the replication log: the replica runs it when it returns.
pub fn is_unfinished(err: &clickhouse::error::Error) -> bool {
    is_server_error(err, UNFINISHED)
}

/// The server's exception with one of these codes, in the words of every version
/// ("Code: 60." on current servers, "Code: 60," on 18.16).
fn is_server_error(err: &clickhouse::error::Error, codes: &[u32]) -> bool {
    let text = err.to_string();
    codes
        .iter()
        .any(|c| text.contains(&format!("Code: {c}.")) || text.contains(&format!("Code: {c},")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clickhouse::error::Error;

    #[test]
    fn versions_are_read_from_select_version() {
        for (text, major) in [
            ("18.16.1", Some(18)),
            ("26.9.2.1", Some(26)),
            ("22.3.1", Some(22)),
            ("22", Some(22)),
            ("23.8.16.40\n", Some(23)),
            ("", None),
            ("garbage", None),
            ("v22.3", None),
            (".22", None),
        ] {
            let v = ServerVersion::parse(text);
            assert_eq!(v.major, major, "{text:?}");
            assert_eq!(v.text(), text, "the text is kept as given");
            assert_eq!(v.to_string(), text);
        }
        assert_eq!(ServerVersion::unknown(), ServerVersion::parse(""));
    }

    /// Every rule chosen by version, at its boundary: 21.x and older, an unreadable
    /// version and no version at all get 18.16's way; 22.x and later the current one.
    #[test]
    fn each_rule_turns_on_at_22() {
        type Rule = fn(&ServerVersion) -> bool;
        let rules: [(&str, Rule); 5] = [
            ("row_validation", row_validation),
            ("lz4", lz4),
            ("low_cardinality", low_cardinality),
            ("mutations_sync", mutations_sync),
            ("parallel_quorum_inserts", parallel_quorum_inserts),
        ];
        for (name, rule) in rules {
            for (text, want) in [
                ("18.16.1", false),
                ("21.12.4.1", false),
                ("22.1.1.1", true),
                ("22", true),
                ("26.9.2.1", true),
                ("garbage", false),
                ("", false),
            ] {
                assert_eq!(rule(&ServerVersion::parse(text)), want, "{name} {text:?}");
            }
            assert!(!rule(&ServerVersion::unknown()), "{name} of no version");
        }
    }

    fn server_error(message: &str) -> Error {
        Error::BadResponse(message.to_string())
    }

    /// The answers of 18.16 (checked on the stack) and of current servers.
    #[test]
    fn concurrent_migrations_are_recognized_in_both_versions_words() {
        let table_18 = server_error("Code: 57, e.displayText() = DB::Exception: Table db.t already exists., e.what() = DB::Exception");
        let database_18 = server_error("Code: 82, e.displayText() = DB::Exception: Database db already exists., e.what() = DB::Exception");
        let table_26 = server_error(
            "Code: 57. DB::Exception: Table db.t already exists. (TABLE_ALREADY_EXISTS)",
        );
        let column_18 = server_error("Code: 44, e.displayText() = DB::Exception: Cannot add column b: column with this name already exists, e.what() = DB::Exception");
        let column_26 = server_error("Code: 15. DB::Exception: Cannot add column `b`: column with this name already exists. (DUPLICATE_COLUMN)");
        for e in [&table_18, &database_18, &table_26] {
            assert!(is_already_exists(e), "{e}");
            assert!(!is_duplicate_column(e), "{e}");
        }
        for e in [&column_18, &column_26] {
            assert!(is_duplicate_column(e), "{e}");
            assert!(!is_already_exists(e), "{e}");
        }
        // 18.16's 44 for another column error is a real failure.
        let low_cardinality_18 = server_error("Code: 44, e.displayText() = DB::Exception: Cannot create table with column 'a' which type is 'LowCardinality(String)' because LowCardinality type is not allowed., e.what() = DB::Exception");
        assert!(!is_duplicate_column(&low_cardinality_18));
        assert!(!is_already_exists(&server_error(
            "Code: 570. DB::Exception: something else"
        )));
    }

    #[test]
    fn a_busy_quorum_is_recognized() {
        assert!(is_quorum_busy(&server_error(
            "Code: 286, e.displayText() = DB::Exception: Another quorum insert has been already started, e.what() = DB::Exception"
        )));
        assert!(!is_quorum_busy(&server_error(
            "Code: 159. DB::Exception: Timeout exceeded"
        )));
        assert!(!is_quorum_busy(&Error::TimedOut));
    }
}
