//! Enricher configuration from the environment (docs/configuration.md).

use crate::health::Lane;
use rivulet_common::ch::ChConfig;
use rivulet_common::{config, kafka, CommonError};
use rivulet_enrichment::EnrichmentConfig;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct EnricherConfig {
    /// `ENRICHER_ADDR`, default `127.0.0.1:3001`: health and metrics.
    pub addr: String,
    /// `KAFKA_BROKERS`, `KAFKA_TOPIC_RAW`, `KAFKA_TOPIC_DLQ`.
    pub brokers: String,
    pub topic: String,
    pub dlq_topic: String,
    /// `KAFKA_GROUP_ID`, default `rivulet-enricher`.
    pub group_id: String,
    /// `ENRICHER_MAX_POLL_INTERVAL_MS`, default 600000: how long a ClickHouse outage may
    /// stop polling before the consumer leaves its group (it rejoins when polling resumes).
    pub max_poll_interval: Duration,
    /// `ENRICHER_RELOAD_CHECK_MS`, default 5000: how often the rules and geo files are
    /// checked for a change (and reloaded). `None` (0): only on SIGHUP.
    pub reload_check: Option<Duration>,
    /// `UA_REGEXES`, `GEOIP_DB`, `VISITOR_ID_SECRET`, …: what enrichment reads, and
    /// `rivulet-admin install` and `replay` with it.
    pub enrichment: EnrichmentConfig,
    /// `BATCH_MAX_ROWS` (50000), `BATCH_MAX_BYTES` (8 MiB), `BATCH_MAX_AGE_MS` (1000).
    pub batch_max_rows: usize,
    pub batch_max_bytes: usize,
    pub batch_max_age: Duration,
    /// `INSERT_RETRY_MAX_MS`, default 5000: cap of the exponential backoff of inserts.
    pub insert_retry_max: Duration,
    /// `LEDGER_REFRESH_MS`, default 1000: how often the erasure ledger is read.
    pub ledger_refresh: Duration,
    /// `LEDGER_MAX_AGE_MS`, default 5000: inserts wait while the ledger was last read
    /// longer ago (an erasure is then known to every insert that follows it by this much).
    pub ledger_max_age: Duration,
    /// `CLICKHOUSE_*`: where rows go.
    pub clickhouse: ChConfig,
    /// `ENRICHER_IMPORT_LANE`, default true: also read `KAFKA_TOPIC_IMPORT` (the
    /// historical lane of `rivulet-admin import`), in group `<KAFKA_GROUP_ID>-import`,
    /// on a thread of its own.
    pub import_lane: bool,
    pub import_topic: String,
    /// `IMPORT_BATCH_MAX_ROWS` (200000), `IMPORT_BATCH_MAX_BYTES` (64 MiB): the import
    /// lane's batches. Larger than live ones: an import is a stream of full batches, and
    /// every insert is a part ClickHouse writes (a file per column) and merges again.
    pub import_batch_max_rows: usize,
    pub import_batch_max_bytes: usize,
    /// `IMPORT_LANE_NICE`, default 10: the import lane's thread runs at this nice value
    /// (0: as live events), so that on a busy machine live events get the CPU first.
    pub import_lane_nice: i32,
    /// `LIFECYCLE_RUNNER`, `ERASURE_*`, `RETENTION_CHECK_SECS`: erasures and retention.
    pub lifecycle: LifecycleConfig,
}

/// How the erasure and retention runner is paced.
#[derive(Clone, Debug)]
pub struct LifecycleConfig {
    /// `LIFECYCLE_RUNNER`, default true: this enricher may run erasures and retention
    /// (when it holds partition 0).
    pub enabled: bool,
    /// `ERASURE_CHECK_MS`, default 2000.
    pub erasure_check: Duration,
    /// `ERASURE_DELAY_MS`, default 10000: how old a request must be before its rows are
    /// deleted: more than the ledger's refresh and maximum age, and a batch's age.
    pub erasure_delay: Duration,
    /// `ERASURE_BATCH_MAX`, default 10000 requests in one set of mutations.
    pub erasure_batch_max: usize,
    /// `RETENTION_CHECK_SECS`, default 3600.
    pub retention_check: Duration,
    /// `STATS_ROLLUP_INTERVAL_SECS`, default 60: how often the Stats API's daily rollup
    /// computes the days that need it; 0 turns it off (queries then read `events`).
    pub rollup_interval: Duration,
    /// `STATS_ROLLUP_MARGIN_SECS`, default 300: how long the hours a day reads must have
    /// had no insert before it is computed; longer than any insert takes.
    pub rollup_margin: Duration,
}

/// When a batch is inserted: whichever limit it reaches first.
#[derive(Clone, Copy, Debug)]
pub struct BatchLimits {
    pub max_rows: usize,
    pub max_bytes: usize,
    pub max_age: Duration,
}

/// What sets one lane apart: its topic, its consumer group, its batches and its thread's
/// priority.
#[derive(Clone, Debug)]
pub struct LaneConfig {
    pub lane: Lane,
    pub topic: String,
    pub group_id: String,
    pub batch: BatchLimits,
    /// The nice value of the lane's thread (`rivulet_common::priority`).
    pub nice: i32,
}

impl EnricherConfig {
    /// The lanes to run: live events, and the historical lane unless turned off (the
    /// historical topic, a group of its own, larger batches, a lower priority).
    pub fn lanes(&self) -> Vec<LaneConfig> {
        let live = LaneConfig {
            lane: Lane::Live,
            topic: self.topic.clone(),
            group_id: self.group_id.clone(),
            batch: BatchLimits {
                max_rows: self.batch_max_rows,
                max_bytes: self.batch_max_bytes,
                max_age: self.batch_max_age,
            },
            nice: 0,
        };
        let import = LaneConfig {
            lane: Lane::Import,
            topic: self.import_topic.clone(),
            group_id: format!("{}-import", self.group_id),
            batch: BatchLimits {
                max_rows: self.import_batch_max_rows,
                max_bytes: self.import_batch_max_bytes,
                max_age: self.batch_max_age,
            },
            nice: self.import_lane_nice,
        };
        if self.import_lane {
            vec![live, import]
        } else {
            vec![live]
        }
    }

    pub fn from_env() -> Result<Self, CommonError> {
        Ok(EnricherConfig {
            addr: config::string("ENRICHER_ADDR", "127.0.0.1:3001"),
            brokers: kafka::brokers(),
            topic: kafka::topic_raw(),
            dlq_topic: kafka::topic_dlq(),
            group_id: config::string("KAFKA_GROUP_ID", "rivulet-enricher"),
            max_poll_interval: config::millis("ENRICHER_MAX_POLL_INTERVAL_MS", 600_000)?,
            reload_check: Some(config::millis("ENRICHER_RELOAD_CHECK_MS", 5000)?)
                .filter(|d| !d.is_zero()),
            enrichment: EnrichmentConfig::from_env()?,
            batch_max_rows: config::parse("BATCH_MAX_ROWS", 50_000)?,
            batch_max_bytes: config::parse("BATCH_MAX_BYTES", 8 * 1024 * 1024)?,
            batch_max_age: config::millis("BATCH_MAX_AGE_MS", 1000)?,
            ledger_refresh: config::millis("LEDGER_REFRESH_MS", 1000)?,
            ledger_max_age: config::millis("LEDGER_MAX_AGE_MS", 5000)?,
            insert_retry_max: config::millis("INSERT_RETRY_MAX_MS", 5000)?,
            clickhouse: ChConfig::from_env()?,
            import_lane: config::flag("ENRICHER_IMPORT_LANE", true)?,
            import_topic: kafka::topic_import(),
            import_batch_max_rows: config::parse("IMPORT_BATCH_MAX_ROWS", 200_000)?,
            import_batch_max_bytes: config::parse("IMPORT_BATCH_MAX_BYTES", 64 * 1024 * 1024)?,
            import_lane_nice: config::parse("IMPORT_LANE_NICE", 10)?,
            lifecycle: LifecycleConfig {
                enabled: config::flag("LIFECYCLE_RUNNER", true)?,
                erasure_check: config::millis("ERASURE_CHECK_MS", 2000)?,
                erasure_delay: config::millis("ERASURE_DELAY_MS", 10_000)?,
                erasure_batch_max: config::parse("ERASURE_BATCH_MAX", 10_000)?,
                retention_check: Duration::from_secs(config::parse("RETENTION_CHECK_SECS", 3600)?),
                rollup_interval: Duration::from_secs(config::parse(
                    "STATS_ROLLUP_INTERVAL_SECS",
                    60,
                )?),
                rollup_margin: Duration::from_secs(config::parse("STATS_ROLLUP_MARGIN_SECS", 300)?),
            },
        })
    }
}
