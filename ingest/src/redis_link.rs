//! The shared Redis connection, with a short circuit breaker: after a failure, Redis is
//! skipped for one second so that a down Redis costs requests nothing, and callers fall
//! back (registry for keys, a per-process limiter for rate limits).

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const BREAK_FOR: Duration = Duration::from_secs(1);

pub struct RedisLink {
    conn: ConnectionManager,
    started: Instant,
    /// Milliseconds since `started` until which Redis is not tried.
    broken_until_ms: AtomicU64,
    up: AtomicBool,
    /// Redis has answered or failed at least once: until then `up` is only a guess.
    checked: AtomicBool,
}

impl RedisLink {
    pub fn new(url: &str) -> Result<Self, redis::RedisError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(250)))
            .set_response_timeout(Some(Duration::from_millis(250)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        Ok(RedisLink {
            conn: ConnectionManager::new_lazy_with_config(client, config)?,
            started: Instant::now(),
            broken_until_ms: AtomicU64::new(0),
            up: AtomicBool::new(true),
            checked: AtomicBool::new(false),
        })
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A connection handle, or `None` while the breaker is open.
    pub fn conn(&self) -> Option<ConnectionManager> {
        (self.now_ms() >= self.broken_until_ms.load(Ordering::Relaxed)).then(|| self.conn.clone())
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Redis answered its last call (and there has been one): for readiness.
    pub fn is_ready(&self) -> bool {
        self.checked.load(Ordering::Relaxed) && self.is_up()
    }

    pub fn record<T>(&self, result: &Result<T, redis::RedisError>) {
        self.checked.store(true, Ordering::Relaxed);
        match result {
            Ok(_) => {
                if !self.up.swap(true, Ordering::Relaxed) {
                    tracing::info!("Redis is reachable again");
                    metrics::gauge!("ingest_redis_up").set(1.0);
                }
            }
            Err(e) => {
                self.broken_until_ms.store(
                    self.now_ms() + BREAK_FOR.as_millis() as u64,
                    Ordering::Relaxed,
                );
                if self.up.swap(false, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "Redis is unreachable: rate limits fall back to per-process counters, key lookups to the registry");
                    metrics::gauge!("ingest_redis_up").set(0.0);
                }
            }
        }
    }

    /// PING, for readiness.
    pub async fn ping(&self) -> bool {
        let mut conn = self.conn.clone();
        let r: Result<String, _> = redis::cmd("PING").query_async(&mut conn).await;
        self.record(&r);
        r.is_ok()
    }
}
