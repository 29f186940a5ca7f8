//! "Last used" of each API key, for the dashboard: the time of an accepted request,
//! written to Redis at most once a minute per key per process, in the background, so it
//! adds no latency and almost no Redis traffic. Best effort: while Redis is down it is
//! simply not updated.

use crate::rate_limit::epoch_second;
use crate::redis_link::RedisLink;
use rivulet_common::cache::{key_last_used, LAST_USED_RESOLUTION_SECS};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Kept for about a year and a month after the last use.
const KEEP_SECS: u64 = 400 * 86_400;

pub struct LastUsed {
    /// `None`: records nothing (in-process tests, which have no Redis).
    redis: Option<Arc<RedisLink>>,
    /// key id → epoch second of this process's last write.
    written: Mutex<HashMap<String, u64>>,
}

impl LastUsed {
    pub fn new(redis: Arc<RedisLink>) -> Self {
        LastUsed {
            redis: Some(redis),
            written: Mutex::new(HashMap::new()),
        }
    }

    /// One that records nothing, for in-process tests.
    pub fn off() -> Self {
        LastUsed {
            redis: None,
            written: Mutex::new(HashMap::new()),
        }
    }

    /// Records that `key_id` was just used, if this process has not done so lately.
    pub fn touch(&self, key_id: &str) {
        let now = epoch_second();
        {
            let mut written = self.written.lock().expect("last-used lock");
            if let Some(at) = written.get(key_id) {
                if now < at + LAST_USED_RESOLUTION_SECS {
                    return;
                }
            }
            if written.len() > 100_000 {
                written.retain(|_, at| now < *at + LAST_USED_RESOLUTION_SECS);
            }
            written.insert(key_id.to_string(), now);
        }
        let Some(mut conn) = self.redis.as_deref().and_then(RedisLink::conn) else {
            return;
        };
        let name = key_last_used(key_id);
        tokio::spawn(async move {
            let r: Result<(), redis::RedisError> = redis::cmd("SET")
                .arg(name)
                .arg(now)
                .arg("EX")
                .arg(KEEP_SECS)
                .query_async(&mut conn)
                .await;
            if let Err(e) = r {
                tracing::debug!(error = %e, "could not record a key's last use");
            }
        });
    }
}
