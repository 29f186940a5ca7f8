//! Every read and probe Rivulet sends to ClickHouse, by name. `?` marks a bound value
//! (the `clickhouse` crate binds them in order), `{db}` the database. The registry's
//! writes are RowBinary inserts into [`INSERT_TABLES`], and the DDL is in `migrations`.
//! [`ALL`] lists them, so a compatibility test can run each statement on every server
//! version it checks: a statement not listed here is one no test sees.

/// The statements of the health probes and of startup.
pub const SELECT_ONE: &str = "SELECT 1";
pub const SERVER_VERSION: &str = "SELECT version()";
pub const APPLIED_MIGRATIONS: &str =
    "SELECT DISTINCT version FROM {db}.schema_migrations ORDER BY version";

// The registry. Both tables are ReplacingMergeTree(version): FINAL reads each row's
// latest version. Columns are listed in the order of `registry::Site` and `KeyRecord`.
pub const SITES_MAX_ID: &str = "SELECT max(site_id) FROM sites";
pub const SITES_ACTIVE: &str = "SELECT site_id, domain, name, created_at, deleted, version, \
     domains, allow_subdomains, retention_days, browser_path_off, browser_identify, timezone FROM sites FINAL WHERE deleted = 0 ORDER BY site_id";
/// Every site, deleted ones too (retention: a deleted site's events stay, so a month it
/// may have rows in is not dropped whole unless its own retention has expired it).
pub const SITES_ALL: &str = "SELECT site_id, domain, name, created_at, deleted, version, \
     domains, allow_subdomains, retention_days, browser_path_off, browser_identify, timezone FROM sites FINAL ORDER BY site_id";
pub const SITE_BY_ID: &str = "SELECT site_id, domain, name, created_at, deleted, version, \
     domains, allow_subdomains, retention_days, browser_path_off, browser_identify, timezone FROM sites FINAL WHERE site_id = ? AND deleted = 0";
pub const KEYS_OF_SITE: &str =
    "SELECT key_hash, key_id, key_prefix, site_id, created_at, revoked_at, revoked, version, scopes \
     FROM api_keys FINAL WHERE site_id = ? ORDER BY created_at, key_id";
pub const KEY_BY_HASH: &str =
    "SELECT key_hash, key_id, key_prefix, site_id, created_at, revoked_at, revoked, version, scopes \
     FROM api_keys FINAL WHERE key_hash = ?";
pub const KEY_BY_ID: &str =
    "SELECT key_hash, key_id, key_prefix, site_id, created_at, revoked_at, revoked, version, scopes \
     FROM api_keys FINAL WHERE key_id = ?";

/// A shared secret (`migrations::ensure_secret`): the smallest value of the name wins, so
/// that two made at once are read the same everywhere.
pub const SECRET_COUNT: &str = "SELECT count() FROM secrets WHERE name = ?";
pub const SECRET_VALUE: &str = "SELECT min(value) FROM secrets WHERE name = ?";

// Identity (schema::people): an anonymous id belongs to the user of its strongest claim
// (`people::claim_rank`: a keyed claim first, then the first received).
macro_rules! owned_by_user {
    () => {
        "SELECT anonymous_id FROM (SELECT anonymous_id, argMax(user_id, (rank, user_id)) AS owner \
         FROM person_claims WHERE site_id = ? AND anonymous_id IN (SELECT anonymous_id \
         FROM person_claims WHERE site_id = ? AND user_id = ?) GROUP BY anonymous_id) WHERE owner = ?"
    };
}

/// The most anonymous ids and traits a profile query returns: ingest refuses more than
/// `MAX_ANONYMOUS_IDS_PER_USER` and `MAX_TRAITS_PER_USER` (1,000 by default) anyway, and
/// one more tells a reader that the list was cut.
pub const PROFILE_LIST_LIMIT: usize = 1_001;

/// The anonymous ids a user owns (binds: site, site, user, user): claimed, and not lost
/// to a stronger claim of another user.
pub const ALIASES_OF_USER: &str = concat!(owned_by_user!(), " ORDER BY anonymous_id LIMIT 1001");

/// Every anonymous id a user ever claimed, won or lost (binds: site, user): what erasing
/// the user erases.
pub const CLAIMS_OF_USER: &str = "SELECT DISTINCT anonymous_id FROM person_claims \
     WHERE site_id = ? AND user_id = ? ORDER BY anonymous_id";

/// The same for several users (binds: site, then the users as an array):
/// `privacy::request_erasures` reads a burst's claims in a few queries, not one per
/// person. `IN (SELECT arrayJoin(?))`, since 18.16 takes no array on the right of `IN`.
/// Not in [`ALL`]: the compatibility test binds no arrays; tests/tests/privacy.rs runs it
/// on the stack's server.
pub const CLAIMS_OF_USERS: &str = "SELECT DISTINCT anonymous_id, user_id FROM person_claims \
     WHERE site_id = ? AND user_id IN (SELECT arrayJoin(?)) ORDER BY user_id, anonymous_id";

/// The anonymous ids that a batch of erasures' users sent events with, claimed or not
/// (`{db}` completed by the runner; binds: from, to in ms, as `ERASED_EVENTS`): a person
/// who sent both ids is linked to the anonymous one by their own events.
pub const LINKED_ANONYMOUS_IDS: &str = "SELECT DISTINCT site_id, user_id, anonymous_id \
     FROM {db}.events WHERE anonymous_id != '' AND (site_id, user_id) IN (SELECT site_id, id \
     FROM {db}.erasure_ledger WHERE id_kind = 'user_id' AND erased_at_ms >= ? AND erased_at_ms <= ?)";

/// The claims of a batch of erasures' users, won or lost (binds as
/// `LINKED_ANONYMOUS_IDS`): those made after the request was recorded too.
pub const CLAIMS_OF_ERASED_USERS: &str = "SELECT DISTINCT site_id, user_id, anonymous_id \
     FROM {db}.person_claims WHERE (site_id, user_id) IN (SELECT site_id, id \
     FROM {db}.erasure_ledger WHERE id_kind = 'user_id' AND erased_at_ms >= ? AND erased_at_ms <= ?)";

/// A user's traits (binds: site, user): each one's value from the strongest write (a
/// keyed write outranks any keyless one, then the latest received), whether that was a
/// removal, when it was received, and whether any keyed write set it.
pub const TRAITS_OF_USER: &str = "SELECT name, argMax(value, (trusted, received_at_ms)) AS latest, \
     argMax(removed, (trusted, received_at_ms)) AS is_removed, \
     max(received_at_ms) AS updated_ms, max(trusted) AS keyed \
     FROM person_trait_values WHERE site_id = ? AND user_id = ? GROUP BY name ORDER BY name LIMIT 1001";

/// A person's events: under their user id, or an anonymous id they own (binds: user,
/// site, user, then site, site, user, user). `GLOBAL IN`: on a cluster the claims
/// subquery runs once, on the server asked, in its database (sent to each shard as it
/// is, it would name a `person_claims` in the shard's default database). Columns:
/// events, those sent anonymously (before or without identify), first and last seen,
/// sessions.
pub const PERSON_EVENT_COUNTS: &str = concat!(
    "SELECT uniqExact(event_id) AS events, \
     uniqExactIf(event_id, user_id != ?) AS anonymous_events, \
     toUInt32(min(timestamp)) AS first_seen, toUInt32(max(timestamp)) AS last_seen, \
     uniqExact(session_id) AS sessions FROM events WHERE site_id = ? AND (user_id = ? OR \
     anonymous_id GLOBAL IN (",
    owned_by_user!(),
    "))"
);

/// A person's latest events (binds as `PERSON_EVENT_COUNTS`, less the first).
pub const PERSON_RECENT_EVENTS: &str = concat!(
    "SELECT toUInt32(timestamp) AS timestamp, type, event_name, \
     pathname, anonymous_id, country, browser, device_type FROM events FINAL \
     WHERE site_id = ? AND (user_id = ? OR anonymous_id GLOBAL IN (",
    owned_by_user!(),
    ")) ORDER BY timestamp DESC, event_id LIMIT 20"
);

// Privacy (crate::privacy): receipts are ReplacingMergeTree(version), read with FINAL.
macro_rules! receipts {
    ($where:literal, $order:literal) => {
        concat!(
            "SELECT request_id, site_id, subject_kind, subject, suppress, requested_at_ms, state, \
             reason, rows_removed, ids, updated_at_ms, version FROM erasure_requests FINAL ",
            $where,
            " ORDER BY requested_at_ms ",
            $order,
            ", request_id"
        )
    };
}
pub const RECEIPTS_ALL: &str = receipts!("", "DESC");
pub const RECEIPTS_OF_SITE: &str = receipts!("WHERE site_id = ?", "DESC");
pub const RECEIPT_BY_ID: &str = receipts!("WHERE request_id = ?", "DESC");
pub const RECEIPTS_UNFINISHED: &str = receipts!("WHERE state IN ('pending', 'running')", "ASC");

/// The ids whose erasure asked to drop their future events too (ingest's site directory).
pub const SUPPRESSED_IDS: &str =
    "SELECT DISTINCT site_id, id_kind, id FROM erasure_ledger WHERE suppress = 1";

/// The erasure ledger's rows written since a time (ms): how readers follow it.
pub const LEDGER_SINCE: &str = "SELECT site_id, id_kind, id, erased_at_ms, request_id, suppress, \
     added_at_ms FROM erasure_ledger WHERE added_at_ms >= ?";

// The lifecycle runner (the enricher's `lifecycle`): erasure and retention. Statements
// with `{db}`, `{table}` and `{on_cluster}` are completed by the runner: they name the
// local tables of a cluster.

/// Which rows of `events` (`{table}`: `events`, or a shard's `events_local`) a batch of
/// erasures removes: those of the ledger's ids erased in the batch's time range
/// (binds: from, to, from, to, in ms), that happened or arrived before its end (binds:
/// to, to, in seconds).
macro_rules! erased_ids {
    ($column:literal, $kind:literal) => {
        concat!(
            "(site_id, ",
            $column,
            ") IN (SELECT site_id, id FROM {db}.erasure_ledger WHERE id_kind = '",
            $kind,
            "' AND erased_at_ms >= ? AND erased_at_ms <= ?)"
        )
    };
}
pub const ERASED_EVENTS: &str = concat!(
    "(",
    erased_ids!("user_id", "user_id"),
    " OR ",
    erased_ids!("anonymous_id", "anonymous_id"),
    ") AND (timestamp <= toDateTime(?) OR received_at <= toDateTime(?))"
);
/// The same for `person_claims` (binds: from, to, from, to, then to in ms).
pub const ERASED_CLAIMS: &str = concat!(
    "(",
    erased_ids!("user_id", "user_id"),
    " OR ",
    erased_ids!("anonymous_id", "anonymous_id"),
    ") AND received_at_ms <= ?"
);
/// The same for `person_trait_values` (binds: from, to, then to in ms).
pub const ERASED_TRAITS: &str = concat!(
    erased_ids!("user_id", "user_id"),
    " AND received_at_ms <= ?"
);

/// A batch's rows, by person, before they are removed (for each receipt's count).
pub const ERASED_EVENTS_BY_PERSON: &str = concat!(
    "SELECT site_id, user_id, anonymous_id, uniqExact(event_id) AS n FROM {db}.events WHERE (",
    "(",
    erased_ids!("user_id", "user_id"),
    " OR ",
    erased_ids!("anonymous_id", "anonymous_id"),
    ") AND (timestamp <= toDateTime(?) OR received_at <= toDateTime(?))",
    ") GROUP BY site_id, user_id, anonymous_id"
);

/// Mutations of Rivulet's tables a server has not finished.
pub const MUTATIONS_UNFINISHED: &str = "SELECT count() FROM system.mutations \
     WHERE database = ? AND is_done = 0 AND table IN \
     ('events', 'events_local', 'person_claims', 'person_trait_values')";

/// The partitions of a table whose oldest active part is older than an unfinished
/// mutation needs, in two halves: each partition's oldest data version (binds: database,
/// table) …
pub const OLDEST_PART_BY_PARTITION: &str =
    "SELECT partition_id, toInt64(min(data_version)) AS oldest \
     FROM system.parts WHERE database = ? AND table = ? AND active GROUP BY partition_id";
/// … and the block numbers of the table's unfinished mutations (binds: database, table).
pub const UNFINISHED_MUTATION_BLOCKS: &str = "SELECT block_numbers.partition_id AS partitions, \
     block_numbers.number AS numbers FROM system.mutations \
     WHERE database = ? AND table = ? AND is_done = 0";

/// Marker rows written with the quorum into a partition, so that the part of its last
/// quorum insert can be mutated on a server that otherwise keeps it until the next insert
/// (`clickhouse_versions::last_quorum_part_waits_for_an_insert`). Site 0 is no site (ids
/// start at 1) and every query names its site; all of a table's markers in a partition
/// share a sorting key, so ReplacingMergeTree keeps one; `now()` makes each second's
/// marker a new block (a replicated table skips a block it has seen).
/// `events_local`, in the month of its one bind (`YYYY-MM-01`).
pub const QUORUM_MARKER_EVENTS: &str = "INSERT INTO events_local \
     (event_id, site_id, timestamp, received_at, type) \
     SELECT toUUID('00000000-0000-0000-0000-000000000000'), toUInt32(0), toDateTime(toDate(?)), \
     now(), 'quorum_marker'";
/// `person_claims` (one partition).
pub const QUORUM_MARKER_CLAIMS: &str = "INSERT INTO person_claims \
     (site_id, anonymous_id, user_id, trusted, claimed_at_ms, received_at_ms, rank) \
     SELECT toUInt32(0), '', '', toUInt8(0), toUInt64(0), toUInt64(0), toUInt64(now())";
/// `person_trait_values` (one partition).
pub const QUORUM_MARKER_TRAITS: &str = "INSERT INTO person_trait_values \
     (site_id, user_id, name, trusted, value, removed, set_at_ms, received_at_ms) \
     SELECT toUInt32(0), '', '', toUInt8(0), '', toUInt8(1), toUInt64(0), toUInt64(now()) * 1000";

/// The months `events` has rows in (retention drops a month whole when it ends before
/// every site's cutoff).
pub const EVENTS_MONTHS: &str = "SELECT DISTINCT toUInt32(toYYYYMM(timestamp)) AS month \
     FROM events ORDER BY month";

/// The latest retention run of every site.
pub const RETENTION_LAST_RUNS: &str = "SELECT site_id, ran_at, cutoff, rows_removed \
     FROM retention_runs FINAL ORDER BY site_id";
/// The latest retention run of one site (the dashboard's Privacy tab); no row when its
/// data was never pruned.
pub const RETENTION_LAST_RUN_OF_SITE: &str = "SELECT ran_at, cutoff, rows_removed \
     FROM retention_runs FINAL WHERE site_id = ? ORDER BY ran_at DESC LIMIT 1";

/// `rivulet-admin replay`: the stored rows (as `FINAL` shows them) of one site in a time
/// range, to compare with what re-enrichment makes of them. Columns in `EventRow`'s order.
pub const REPLAY_STORED_ROWS: &str =
    "SELECT event_id, site_id, timestamp, received_at, type, event_name, properties, hostname, \
     pathname, querystring, page_title, referrer, channel, user_id, session_id, language, \
     screen_width, screen_height, country, region, city, lat, lon, browser, browser_version, \
     operating_system, operating_system_version, device_type, is_bot, ip, anonymous_id, tag, \
     app_version, device_model, feature_flags, lcp, cls, inp, fcp, ttfb, client_timestamp, sent_at, \
     daily_visitor FROM events FINAL WHERE site_id = ? AND timestamp >= toDateTime(?) AND timestamp <= toDateTime(?)";

/// `rivulet-admin replay --optimize`, on a single server: merge one month (`{partition}`,
/// `YYYYMM`) of `events`, so that the rows a replay replaced are gone. Not in [`ALL`]: it
/// answers no rows and takes a partition, not a bound value.
pub const OPTIMIZE_EVENTS_PARTITION: &str = "OPTIMIZE TABLE events PARTITION {partition} FINAL";

// A site's Overview: the window's events of one site, bots left out of the counts. They
// read with FINAL: an event re-enriched by `rivulet-admin replay` has a newer row with
// the same key, and until a background merge removes the older one, only FINAL shows the
// event once, with its new fields, in a breakdown by such a field. Rows are counted with
// uniqExact(event_id) all the same. Each takes (site_id, since).
macro_rules! counted {
    () => {
        "site_id = ? AND timestamp >= toDateTime(?) AND is_bot = 0"
    };
}
macro_rules! breakdown {
    ($column:literal, $only:literal, $rank:literal) => {
        concat!(
            "SELECT ",
            $column,
            " AS label, uniqExact(event_id) AS events, uniqExact(user_id) AS visitors \
             FROM events FINAL WHERE ",
            counted!(),
            $only,
            " GROUP BY label ORDER BY ",
            $rank,
            " DESC, label LIMIT 10"
        )
    };
}
pub const OVERVIEW_TOTALS: &str = concat!(
    "SELECT uniqExactIf(event_id, type = 'pageview') AS pageviews, uniqExact(user_id) AS visitors, \
     uniqExactIf(event_id, type = 'custom_event') AS custom_events FROM events FINAL WHERE ",
    counted!()
);
/// Pageviews and visitors per UTC hour, for the hours that have events.
pub const OVERVIEW_HOURLY: &str = concat!(
    "SELECT toUInt32(intDiv(toUInt32(timestamp), 3600) * 3600) AS hour, \
     uniqExactIf(event_id, type = 'pageview') AS pageviews, uniqExact(user_id) AS visitors \
     FROM events FINAL WHERE ",
    counted!(),
    " GROUP BY hour ORDER BY hour"
);
pub const OVERVIEW_TOP_PAGES: &str = breakdown!("pathname", " AND type = 'pageview'", "events");
pub const OVERVIEW_COUNTRIES: &str = breakdown!("country", "", "visitors");
pub const OVERVIEW_BROWSERS: &str = breakdown!("browser", "", "visitors");
pub const OVERVIEW_DEVICES: &str = breakdown!("device_type", "", "visitors");
pub const OVERVIEW_CUSTOM_EVENTS: &str =
    breakdown!("event_name", " AND type = 'custom_event'", "events");
/// Events by type (pageview, custom_event, performance, outbound, error, …): whatever occurs.
pub const OVERVIEW_EVENT_TYPES: &str = breakdown!("type", "", "events");
/// Where visitors came from, as the enricher classified it (Direct, Organic Search, …).
pub const OVERVIEW_CHANNELS: &str = breakdown!("channel", "", "visitors");
/// The sites that sent visitors, by host (`www.` left out, so a site counts once); the
/// site's own pages (channel Internal) and events without a referrer are left out.
pub const OVERVIEW_REFERRERS: &str = breakdown!(
    "domainWithoutWWW(referrer)",
    " AND referrer != '' AND channel != 'Internal'",
    "visitors"
);
/// The newest events, bots included; `LIMIT 1 BY event_id` hides unmerged duplicates.
/// Every column keeps the name of the reader's field (`timestamp`, a DateTime read as
/// epoch seconds): with row validation (`clickhouse_versions::row_validation`) the rows
/// are matched to the struct by column name.
pub const OVERVIEW_LATEST: &str =
    "SELECT timestamp, type, event_name, hostname, pathname, country, city, \
     browser, operating_system, device_type, is_bot FROM events FINAL \
     WHERE site_id = ? AND timestamp >= toDateTime(?) \
     ORDER BY timestamp DESC, event_id LIMIT 1 BY event_id LIMIT 20";

/// The tables the product inserts RowBinary rows into (the enricher: `events`; the
/// registry and migrations: the others).
pub const INSERT_TABLES: &[&str] = &[
    "events",
    "sites",
    "api_keys",
    "schema_migrations",
    "secrets",
    "person_claims",
    "person_trait_values",
    "erasure_requests",
    "erasure_ledger",
    "retention_runs",
];

/// A named statement and how many values it binds.
#[derive(Clone, Copy, Debug)]
pub struct Statement {
    pub name: &'static str,
    pub sql: &'static str,
    pub binds: usize,
}

const fn st(name: &'static str, sql: &'static str) -> Statement {
    let bytes = sql.as_bytes();
    let (mut i, mut binds) = (0, 0);
    while i < bytes.len() {
        if bytes[i] == b'?' {
            binds += 1;
        }
        i += 1;
    }
    Statement { name, sql, binds }
}

/// Every statement above.
pub const ALL: &[Statement] = &[
    st("select_one", SELECT_ONE),
    st("server_version", SERVER_VERSION),
    st("applied_migrations", APPLIED_MIGRATIONS),
    st("sites_max_id", SITES_MAX_ID),
    st("sites_active", SITES_ACTIVE),
    st("sites_all", SITES_ALL),
    st("site_by_id", SITE_BY_ID),
    st("keys_of_site", KEYS_OF_SITE),
    st("key_by_hash", KEY_BY_HASH),
    st("key_by_id", KEY_BY_ID),
    st("secret_count", SECRET_COUNT),
    st("aliases_of_user", ALIASES_OF_USER),
    st("claims_of_user", CLAIMS_OF_USER),
    st("traits_of_user", TRAITS_OF_USER),
    st("person_event_counts", PERSON_EVENT_COUNTS),
    st("person_recent_events", PERSON_RECENT_EVENTS),
    st("receipts_all", RECEIPTS_ALL),
    st("receipts_of_site", RECEIPTS_OF_SITE),
    st("receipt_by_id", RECEIPT_BY_ID),
    st("receipts_unfinished", RECEIPTS_UNFINISHED),
    st("ledger_since", LEDGER_SINCE),
    st("suppressed_ids", SUPPRESSED_IDS),
    st("mutations_unfinished", MUTATIONS_UNFINISHED),
    st("events_months", EVENTS_MONTHS),
    st("retention_last_runs", RETENTION_LAST_RUNS),
    st("retention_last_run_of_site", RETENTION_LAST_RUN_OF_SITE),
    st("secret_value", SECRET_VALUE),
    st("overview_totals", OVERVIEW_TOTALS),
    st("overview_hourly", OVERVIEW_HOURLY),
    st("overview_top_pages", OVERVIEW_TOP_PAGES),
    st("overview_countries", OVERVIEW_COUNTRIES),
    st("overview_browsers", OVERVIEW_BROWSERS),
    st("overview_devices", OVERVIEW_DEVICES),
    st("overview_custom_events", OVERVIEW_CUSTOM_EVENTS),
    st("overview_event_types", OVERVIEW_EVENT_TYPES),
    st("overview_channels", OVERVIEW_CHANNELS),
    st("overview_referrers", OVERVIEW_REFERRERS),
    st("overview_latest", OVERVIEW_LATEST),
    st("replay_stored_rows", REPLAY_STORED_ROWS),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_the_overview_binds_site_and_window() {
        let mut names: Vec<&str> = ALL.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        for s in ALL.iter().filter(|s| s.name.starts_with("overview_")) {
            assert_eq!(s.binds, 2, "{}", s.name);
        }
        assert_eq!(
            OVERVIEW_TOP_PAGES,
            "SELECT pathname AS label, uniqExact(event_id) AS events, uniqExact(user_id) AS visitors \
             FROM events FINAL WHERE site_id = ? AND timestamp >= toDateTime(?) AND is_bot = 0 AND type = 'pageview' \
             GROUP BY label ORDER BY events DESC, label LIMIT 10"
        );
    }

    /// Replay reads stored rows into `EventRow`, whose fields are `COLUMNS` in order: a
    /// column missing from the select list shifts every value after it.
    #[test]
    fn replay_reads_every_column_of_events_in_order() {
        let list = REPLAY_STORED_ROWS
            .strip_prefix("SELECT ")
            .and_then(|s| s.split(" FROM ").next())
            .unwrap();
        let selected: Vec<&str> = list.split(',').map(str::trim).collect();
        let columns: Vec<&str> = crate::schema::events::COLUMNS
            .iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(selected, columns);
    }
}
