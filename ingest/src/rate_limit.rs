//! Per-key rate limit, global across ingest replicas: a Redis counter per key and
//! one-second window, incremented atomically by a Lua script. When Redis is unreachable
//! the limiter fails open to the same limit counted per process, and says so in logs
//! and metrics.
//!
//! Requests of one key are coalesced: while one `INCRBY` for the key is in flight, the
//! requests that arrive queue up and the next round trip counts them all at once. The
//! counter stays exact (each `INCRBY` is atomic, and the returned total tells every
//! queued request its place in the window), but a busy key costs one Redis round trip
//! per round trip time instead of one per request. A key whose window is known to be
//! full is rejected without asking Redis until the second changes.

use crate::redis_link::RedisLink;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// Adds ARGV[1] to the window's counter and returns the new total; the first add of a
/// window sets its expiry.
const INCRBY_WITH_EXPIRY: &str = r"
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if n == tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], 2000) end
return n";

/// Above this many tracked keys, idle entries are dropped.
const PRUNE_ABOVE: usize = 100_000;

pub struct RateLimiter {
    limit: u32,
    redis: Arc<RedisLink>,
    script: redis::Script,
    queues: Mutex<HashMap<String, KeyQueue>>,
    /// Fallback counters: key id → (epoch second, count).
    local: Mutex<HashMap<String, (u64, u32)>>,
}

#[derive(Default)]
struct KeyQueue {
    /// Requests waiting for the next round trip.
    waiters: Vec<oneshot::Sender<bool>>,
    /// A flush task is running for this key.
    flushing: bool,
    /// The second whose window Redis reported full.
    full_second: Option<u64>,
}

/// Seconds since the Unix epoch (also the clock of `last_used`).
pub(crate) fn epoch_second() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl RateLimiter {
    pub fn new(limit: u32, redis: Arc<RedisLink>) -> Arc<Self> {
        Arc::new(RateLimiter {
            limit,
            redis,
            script: redis::Script::new(INCRBY_WITH_EXPIRY),
            queues: Mutex::new(HashMap::new()),
            local: Mutex::new(HashMap::new()),
        })
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// True when one more request of this key fits in the current second.
    pub async fn allow(self: &Arc<Self>, key_id: &str) -> bool {
        if self.limit == 0 {
            return true;
        }
        let second = epoch_second();
        let (tx, rx) = oneshot::channel();
        {
            let mut queues = self.queues.lock().expect("rate limiter lock");
            if queues.len() > PRUNE_ABOVE {
                queues.retain(|_, q| q.flushing || q.full_second == Some(second));
            }
            let queue = match queues.get_mut(key_id) {
                Some(q) => q,
                None => queues.entry(key_id.to_string()).or_default(),
            };
            if queue.full_second == Some(second) {
                return false;
            }
            queue.waiters.push(tx);
            if !queue.flushing {
                queue.flushing = true;
                // A task of its own, so that a client hanging up cannot strand the queue.
                tokio::spawn(self.clone().flush(key_id.to_string()));
            }
        }
        // The flush task always answers; if it died, failing open matches Redis down.
        rx.await.unwrap_or(true)
    }

    /// Counts the queued requests of one key, a round trip at a time, until none wait.
    async fn flush(self: Arc<Self>, key_id: String) {
        loop {
            let waiters = {
                let mut queues = self.queues.lock().expect("rate limiter lock");
                let Some(queue) = queues.get_mut(&key_id) else {
                    return;
                };
                if queue.waiters.is_empty() {
                    queue.flushing = false;
                    return;
                }
                std::mem::take(&mut queue.waiters)
            };
            let second = epoch_second();
            let n = waiters.len() as u64;
            let verdicts: Vec<bool> = match self.count_in_redis(&key_id, second, n).await {
                Some(total) => {
                    if total >= u64::from(self.limit) {
                        let mut queues = self.queues.lock().expect("rate limiter lock");
                        if let Some(q) = queues.get_mut(&key_id) {
                            q.full_second = Some(second);
                        }
                    }
                    // This batch holds places total-n+1 ..= total of the window.
                    (total + 1 - n..=total)
                        .map(|place| place <= u64::from(self.limit))
                        .collect()
                }
                None => {
                    metrics::counter!("ingest_rate_limit_fail_open_total").increment(n);
                    (0..n)
                        .map(|_| self.allow_locally(&key_id, second))
                        .collect()
                }
            };
            for (waiter, verdict) in waiters.into_iter().zip(verdicts) {
                let _ = waiter.send(verdict);
            }
        }
    }

    /// The window's total after adding `n`, or `None` when Redis cannot say.
    async fn count_in_redis(&self, key_id: &str, second: u64, n: u64) -> Option<u64> {
        let mut conn = self.redis.conn()?;
        let counter = rivulet_common::cache::rate_limit_counter(key_id, second);
        let r: Result<u64, _> = self
            .script
            .key(counter)
            .arg(n)
            .invoke_async(&mut conn)
            .await;
        self.redis.record(&r);
        r.ok()
    }

    fn allow_locally(&self, key_id: &str, second: u64) -> bool {
        let mut local = self.local.lock().expect("rate limiter lock");
        if local.len() > PRUNE_ABOVE {
            local.retain(|_, (s, _)| *s == second);
        }
        let entry = local.entry(key_id.to_string()).or_insert((second, 0));
        if entry.0 != second {
            *entry = (second, 0);
        }
        entry.1 += 1;
        entry.1 <= self.limit
    }
}
