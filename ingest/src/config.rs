//! Ingest configuration, read once from the environment (docs/configuration.md).

use crate::profile_caps::ProfileLimits;
use crate::request_body::Linger;
use rivulet_common::ch::ChConfig;
use rivulet_common::client_ip::TrustedProxies;
use rivulet_common::{config, kafka, CommonError};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct IngestConfig {
    /// `INGEST_ADDR`, default `127.0.0.1:3000`: the public port (tracking, the script,
    /// the OpenAPI document, liveness).
    pub addr: String,
    /// `INGEST_INTERNAL_ADDR`, default `127.0.0.1:3003`: `/metrics`, `/_readiness` and
    /// `/_liveness`, for the operator's monitoring only; keep it off the public network.
    pub internal_addr: String,
    /// `REDIS_URL`.
    pub redis_url: String,
    /// `KAFKA_BROKERS`, `KAFKA_TOPIC_RAW`.
    pub kafka_brokers: String,
    pub topic: String,
    /// `RATE_LIMIT_PER_SECOND`, default 20 requests per second per key (a token bucket
    /// holding one second's worth); 0 disables (a self-hosted install).
    pub rate_limit_per_second: u32,
    /// `EVENT_RATE_LIMIT_PER_SECOND`, default 10000 events per second per key, which
    /// batches draw on (one per event); 0 disables.
    pub event_rate_limit_per_second: u32,
    /// `BROWSER_RATE_LIMIT_PER_SECOND`, default 20 requests, and
    /// `BROWSER_EVENT_RATE_LIMIT_PER_SECOND`, default 500 events, per second per client
    /// address and site on the browser path, counted per ingest process; 0 disables.
    pub browser_rate_limit_per_second: u32,
    pub browser_event_rate_limit_per_second: u32,
    /// `AUTH_FAILURE_BURST`, default 20, and `AUTH_FAILURES_PER_MINUTE`, default 60: the
    /// rejections (401, 403, 404) one client address may cause before it gets 429;
    /// `AUTH_FAILURE_BURST=0` disables.
    pub auth_failure_burst: u32,
    pub auth_failures_per_minute: u32,
    /// `MAX_TRAITS_PER_USER` and `MAX_ANONYMOUS_IDS_PER_USER`, default 1000 each: the
    /// distinct trait names and anonymous ids identify calls may give one user, counted
    /// in Redis; past them 400. 0 turns one off.
    pub profile_limits: ProfileLimits,
    /// `REGISTRY_MAX_CONCURRENT_LOOKUPS`, default 4: registry queries for unknown keys one
    /// ingest runs at once.
    pub registry_max_lookups: usize,
    /// `SITE_DIRECTORY_REFRESH_MS`, default 30000: how often the site directory is reread
    /// even when no change was announced.
    pub site_refresh: Duration,
    /// `KAFKA_ACK_TIMEOUT_MS`, default 5000: longest wait for the broker's ack before 503.
    pub kafka_ack_timeout: Duration,
    /// `KAFKA_LINGER_MS`, default 1: each request waits for its ack, so linger is latency;
    /// under load batches fill while earlier requests are in flight anyway.
    pub kafka_linger_ms: u32,
    /// `KAFKA_QUEUE_MAX_MESSAGES`, default 100000: producer queue; full → callers wait.
    pub kafka_queue_max_messages: u32,
    /// `KAFKA_COMPRESSION`, default `lz4`: the producer's codec (`none`, `gzip`, `snappy`,
    /// `lz4`; this librdkafka build has no zstd).
    pub kafka_compression: String,
    /// `MAX_BODY_BYTES`, default 65536: single event, before and after gzip decoding.
    pub max_body_bytes: usize,
    /// `MAX_BATCH_BYTES`, default 1048576; `MAX_BATCH_EVENTS`, default 500.
    pub max_batch_bytes: usize,
    pub max_batch_events: usize,
    /// `OVERSIZE_LINGER_BYTES`, default 268435456 (256 MiB), and `OVERSIZE_LINGER_MS`,
    /// default 10000: after a 413, how much of the rest of the body is read and discarded
    /// before the connection closes, so that a client still sending reads the 413.
    pub oversize_linger: Linger,
    /// `REQUEST_BODY_TIMEOUT_MS`, default 10000: a client that does not finish its body in time gets 408.
    pub body_timeout: Duration,
    /// `HEADER_READ_TIMEOUT_MS`, default 10000: a request head not complete this long after
    /// its first byte closes the connection (slowloris).
    pub header_read_timeout: Duration,
    /// `KEEP_ALIVE_TIMEOUT_MS`, default 75000: a connection with no request in progress is
    /// closed after this; longer than common load balancers' idle timeout (60 s), so they
    /// never reuse a connection ingest is closing.
    pub keep_alive_timeout: Duration,
    /// `WRITE_TIMEOUT_MS`, default 10000: a response that makes no progress for this
    /// long (a client that does not read its answers) closes the connection.
    pub write_timeout: Duration,
    /// `MAX_PIPELINED_REQUESTS`, default 32: requests one connection may have answered
    /// back to back without the server once waiting for it; past them it is closed.
    pub max_pipelined: u32,
    /// `MAX_CONNECTIONS`, default 20000: open client connections. At the cap, the
    /// connection that has waited longest on its client (idle, a slow head, unread
    /// answers) is closed to make room for a new one; if none is, the new one waits.
    /// Lowered at startup to fit RLIMIT_NOFILE (less a reserve).
    pub max_connections: usize,
    /// `TRUSTED_PROXIES`: comma-separated IPs/CIDRs whose X-Forwarded-For is believed.
    pub trusted_proxies: TrustedProxies,
    /// `KEY_CACHE_TTL_MS` (L1, default 5000), `KEY_CACHE_REDIS_TTL_SECS` (default 300),
    /// `KEY_CACHE_NEGATIVE_TTL_SECS` (default 10).
    pub l1_ttl: Duration,
    pub redis_ttl_secs: u64,
    pub negative_ttl_secs: u64,
    /// `SHUTDOWN_DRAIN_MS`, default 0: time between readiness turning 503 and closing the listener.
    pub shutdown_drain: Duration,
    /// `CLICKHOUSE_*`: the registry of sites and keys, read on a cache miss.
    pub clickhouse: ChConfig,
}

impl IngestConfig {
    pub fn from_env() -> Result<Self, CommonError> {
        let trusted = config::string("TRUSTED_PROXIES", "");
        Ok(IngestConfig {
            addr: config::string("INGEST_ADDR", "127.0.0.1:3000"),
            internal_addr: config::string("INGEST_INTERNAL_ADDR", "127.0.0.1:3003"),
            redis_url: config::string("REDIS_URL", "redis://127.0.0.1:16379/"),
            kafka_brokers: kafka::brokers(),
            topic: kafka::topic_raw(),
            rate_limit_per_second: config::parse("RATE_LIMIT_PER_SECOND", 20)?,
            event_rate_limit_per_second: config::parse("EVENT_RATE_LIMIT_PER_SECOND", 10_000)?,
            browser_rate_limit_per_second: config::parse("BROWSER_RATE_LIMIT_PER_SECOND", 20)?,
            browser_event_rate_limit_per_second: config::parse(
                "BROWSER_EVENT_RATE_LIMIT_PER_SECOND",
                500,
            )?,
            auth_failure_burst: config::parse("AUTH_FAILURE_BURST", 20)?,
            auth_failures_per_minute: config::parse("AUTH_FAILURES_PER_MINUTE", 60)?,
            profile_limits: ProfileLimits {
                traits: config::parse("MAX_TRAITS_PER_USER", 1_000)?,
                anonymous_ids: config::parse("MAX_ANONYMOUS_IDS_PER_USER", 1_000)?,
            },
            registry_max_lookups: config::parse("REGISTRY_MAX_CONCURRENT_LOOKUPS", 4)?,
            site_refresh: config::millis("SITE_DIRECTORY_REFRESH_MS", 30_000)?,
            kafka_ack_timeout: config::millis("KAFKA_ACK_TIMEOUT_MS", 5000)?,
            kafka_linger_ms: config::parse("KAFKA_LINGER_MS", 1)?,
            kafka_queue_max_messages: config::parse("KAFKA_QUEUE_MAX_MESSAGES", 100_000)?,
            kafka_compression: kafka_compression()?,
            max_body_bytes: config::parse("MAX_BODY_BYTES", 64 * 1024)?,
            max_batch_bytes: config::parse("MAX_BATCH_BYTES", 1024 * 1024)?,
            max_batch_events: config::parse("MAX_BATCH_EVENTS", 500)?,
            oversize_linger: Linger {
                max_bytes: config::parse("OVERSIZE_LINGER_BYTES", 256 << 20)?,
                max_time: config::millis("OVERSIZE_LINGER_MS", 10_000)?,
            },
            body_timeout: config::millis("REQUEST_BODY_TIMEOUT_MS", 10_000)?,
            header_read_timeout: config::millis("HEADER_READ_TIMEOUT_MS", 10_000)?,
            keep_alive_timeout: config::millis("KEEP_ALIVE_TIMEOUT_MS", 75_000)?,
            write_timeout: config::millis("WRITE_TIMEOUT_MS", 10_000)?,
            max_pipelined: config::parse("MAX_PIPELINED_REQUESTS", 32)?,
            max_connections: config::parse("MAX_CONNECTIONS", 20_000)?,
            trusted_proxies: TrustedProxies::parse(&trusted)
                .map_err(|e| CommonError::Config(format!("TRUSTED_PROXIES={trusted:?}: {e}")))?,
            l1_ttl: config::millis("KEY_CACHE_TTL_MS", 5000)?,
            redis_ttl_secs: config::parse("KEY_CACHE_REDIS_TTL_SECS", 300)?,
            negative_ttl_secs: config::parse("KEY_CACHE_NEGATIVE_TTL_SECS", 10)?,
            shutdown_drain: config::millis("SHUTDOWN_DRAIN_MS", 0)?,
            clickhouse: ChConfig::from_env()?,
        })
    }
}

fn kafka_compression() -> Result<String, CommonError> {
    // The codecs this librdkafka build has (rdkafka is built without its `zstd` feature).
    const CODECS: [&str; 4] = ["none", "gzip", "snappy", "lz4"];
    let codec = config::string("KAFKA_COMPRESSION", "lz4").to_ascii_lowercase();
    if CODECS.contains(&codec.as_str()) {
        Ok(codec)
    } else {
        Err(CommonError::Config(format!(
            "KAFKA_COMPRESSION={codec:?}: expected one of {}",
            CODECS.join(", ")
        )))
    }
}
