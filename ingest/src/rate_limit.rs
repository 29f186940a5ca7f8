//! Per-key rate limit, global across ingest replicas: a Redis counter per key and
//! one-second window, incremented by a Lua script in one round trip. When Redis is
//! unreachable the limiter fails open to the same limit counted per process, and says
//! so in logs and metrics.

use crate::redis_link::RedisLink;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

const INCR_WITH_EXPIRY: &str = r"
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], 2000) end
return n";

pub struct RateLimiter {
    limit: u32,
    redis: Arc<RedisLink>,
    script: redis::Script,
    /// Fallback counters: key id → (epoch second, count).
    local: Mutex<HashMap<String, (u64, u32)>>,
}

impl RateLimiter {
    pub fn new(limit: u32, redis: Arc<RedisLink>) -> Self {
        RateLimiter {
            limit,
            redis,
            script: redis::Script::new(INCR_WITH_EXPIRY),
            local: Mutex::new(HashMap::new()),
        }
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// True when one more request of this key fits in the current second.
    pub async fn allow(&self, key_id: &str) -> bool {
        if self.limit == 0 {
            return true;
        }
        let second = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if let Some(mut conn) = self.redis.conn() {
            let counter = rivulet_common::cache::rate_limit_counter(key_id, second);
            let r: Result<u64, _> = self.script.key(counter).invoke_async(&mut conn).await;
            self.redis.record(&r);
            if let Ok(n) = r {
                return n <= u64::from(self.limit);
            }
        }
        metrics::counter!("ingest_rate_limit_fail_open_total").increment(1);
        self.allow_locally(key_id, second)
    }

    fn allow_locally(&self, key_id: &str, second: u64) -> bool {
        let mut local = self.local.lock().expect("rate limiter lock");
        if local.len() > 100_000 {
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
