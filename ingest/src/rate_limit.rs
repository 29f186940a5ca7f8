//! Per-key rate limit, global across ingest replicas: a Redis counter per key and
//! one-second window, incremented atomically by a Lua script. When Redis is unreachable
//! the limiter fails open to the same limit counted per process, and says so in logs
//! and metrics.
//!
//! Two things keep a busy key from costing a Redis round trip per request:
//! - **Coalescing.** While one `INCRBY` for the key is in flight, the requests that
//!   arrive queue up and the next round trip counts them all at once. The returned total
//!   tells every queued request its place in the window, so the count stays exact.
//! - **Reserving ahead.** A key with a high limit reserves places for requests it has
//!   not received yet in the same `INCRBY`: about 100 ms of its recent demand, and never
//!   more than 1 % of what is left of the window's limit. The requests that follow take
//!   those places with no round trip. The accepted total still never exceeds the limit,
//!   since every accepted request holds a place Redis counted. A place reserved but not
//!   used by the end of its second is lost, so when a window does fill up, each replica
//!   may have accepted up to ~1 % of the limit fewer than it could have. At low limits
//!   (below 100 per second, the default being 20) nothing is reserved ahead, and the
//!   limit is exact.
//!
//! A key whose window is known to be full is rejected without asking Redis until the
//! second changes.

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

/// Reserve ahead about 1/10 of a second of the key's demand: ~10 round trips a second
/// for a busy key, whatever its rate.
const AHEAD_DEMAND_DIVISOR: u64 = 10;

/// Reserve ahead at most 1/100 of the window's remaining places, which bounds what a
/// replica can leave unused when the window fills (see the module's comment).
const AHEAD_HEADROOM_DIVISOR: u64 = 100;

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
    /// Places of a window (second, count) that Redis counted for this process ahead of
    /// demand and that no request has taken yet.
    reserved: (u64, u64),
    /// The window's total as Redis last reported it: (second, total).
    last_total: (u64, u64),
    /// This key's requests per second, for how much to reserve ahead.
    demand: Demand,
}

impl KeyQueue {
    fn reserved_in(&self, second: u64) -> u64 {
        if self.reserved.0 == second {
            self.reserved.1
        } else {
            0
        }
    }

    /// Takes up to `wanted` reserved places of `second`'s window; returns how many.
    fn take_reserved(&mut self, second: u64, wanted: u64) -> u64 {
        let taken = self.reserved_in(second).min(wanted);
        self.reserved.1 -= taken;
        taken
    }
}

/// Requests counted in the current second and in the one before it.
#[derive(Default)]
struct Demand {
    second: u64,
    this: u64,
    previous: u64,
}

impl Demand {
    fn note(&mut self, second: u64) {
        if self.second != second {
            self.previous = if second == self.second + 1 {
                self.this
            } else {
                0
            };
            self.second = second;
            self.this = 0;
        }
        self.this += 1;
    }

    /// Requests per second: the last full second's count, or this second's so far if
    /// that is more (a key whose traffic starts now).
    fn per_second(&self, second: u64) -> u64 {
        match second.checked_sub(self.second) {
            Some(0) => self.this.max(self.previous),
            Some(1) => self.this,
            _ => 0,
        }
    }
}

/// How many places to reserve ahead of demand in one `INCRBY`, given the window's last
/// known total: none below a limit of 100 per second.
fn reserve_ahead(limit: u64, known_total: u64, demand_per_second: u64) -> u64 {
    let headroom = limit.saturating_sub(known_total);
    (demand_per_second / AHEAD_DEMAND_DIVISOR).min(headroom / AHEAD_HEADROOM_DIVISOR)
}

/// Assigns the places `total - asked + 1 ..= total` of a window that one `INCRBY asked`
/// returned: the first `waiting` go to the queued requests, in order (allowed when the
/// place is within the limit); the rest within the limit are reserved ahead.
fn assign(total: u64, asked: u64, waiting: u64, limit: u64) -> (Vec<bool>, u64) {
    let first = total.saturating_sub(asked) + 1;
    let verdicts = (first..first + waiting)
        .map(|place| place <= limit)
        .collect();
    let reserved = total.min(limit).saturating_sub(first + waiting - 1);
    (verdicts, reserved)
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
        let rx = {
            let mut queues = self.queues.lock().expect("rate limiter lock");
            if queues.len() > PRUNE_ABOVE {
                queues.retain(|_, q| {
                    q.flushing || q.full_second == Some(second) || q.reserved_in(second) > 0
                });
            }
            let queue = match queues.get_mut(key_id) {
                Some(q) => q,
                None => queues.entry(key_id.to_string()).or_default(),
            };
            queue.demand.note(second);
            // Before the full-window check: a place reserved ahead was counted by Redis
            // within the limit, so it is this request's to take.
            if queue.take_reserved(second, 1) == 1 {
                return true;
            }
            if queue.full_second == Some(second) {
                return false;
            }
            // The channel is made only here: most requests of a busy key take a place
            // reserved ahead, above, and need none.
            let (tx, rx) = oneshot::channel();
            queue.waiters.push(tx);
            if !queue.flushing {
                queue.flushing = true;
                // A task of its own, so that a client hanging up cannot strand the queue.
                tokio::spawn(self.clone().flush(key_id.to_string()));
            }
            rx
        };
        // The flush task always answers; if it died, failing open matches Redis down.
        rx.await.unwrap_or(true)
    }

    /// Counts the queued requests of one key, a round trip at a time, until none wait.
    async fn flush(self: Arc<Self>, key_id: String) {
        let limit = u64::from(self.limit);
        loop {
            let (waiters, asked, second) = {
                let mut queues = self.queues.lock().expect("rate limiter lock");
                let Some(queue) = queues.get_mut(&key_id) else {
                    return;
                };
                let second = epoch_second();
                // Requests that queued while the last round trip reserved places take them.
                let served = queue.take_reserved(second, queue.waiters.len() as u64);
                for waiter in queue.waiters.drain(..served as usize) {
                    let _ = waiter.send(true);
                }
                if queue.waiters.is_empty() {
                    queue.flushing = false;
                    return;
                }
                let known_total = if queue.last_total.0 == second {
                    queue.last_total.1
                } else {
                    0
                };
                let ahead = reserve_ahead(limit, known_total, queue.demand.per_second(second));
                let waiters = std::mem::take(&mut queue.waiters);
                let asked = waiters.len() as u64 + ahead;
                (waiters, asked, second)
            };
            let waiting = waiters.len() as u64;
            let verdicts: Vec<bool> = match self.count_in_redis(&key_id, second, asked).await {
                Some(total) => {
                    let (verdicts, reserved) = assign(total, asked, waiting, limit);
                    let mut queues = self.queues.lock().expect("rate limiter lock");
                    if let Some(q) = queues.get_mut(&key_id) {
                        q.last_total = (second, total);
                        if total >= limit {
                            q.full_second = Some(second);
                        }
                        q.reserved = (second, q.reserved_in(second) + reserved);
                    }
                    verdicts
                }
                None => {
                    metrics::counter!("ingest_rate_limit_fail_open_total").increment(waiting);
                    (0..waiting)
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
        metrics::counter!("ingest_rate_limit_redis_calls_total").increment(1);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_reserved_ahead_below_a_limit_of_100() {
        assert_eq!(reserve_ahead(20, 0, 1_000_000), 0);
        assert_eq!(reserve_ahead(99, 0, 1_000_000), 0);
        assert_eq!(reserve_ahead(100, 0, 1_000_000), 1);
    }

    #[test]
    fn reserving_ahead_follows_demand_and_shrinks_near_the_limit() {
        // A tenth of a second of demand, when the window has room.
        assert_eq!(reserve_ahead(1_000_000_000, 0, 12_000), 1_200);
        assert_eq!(reserve_ahead(1_000_000_000, 0, 5), 0);
        // At most 1 % of what is left of the window.
        assert_eq!(reserve_ahead(10_000, 0, 12_000), 100);
        assert_eq!(reserve_ahead(10_000, 9_500, 12_000), 5);
        assert_eq!(reserve_ahead(10_000, 9_950, 12_000), 0);
        assert_eq!(reserve_ahead(10_000, 12_000, 12_000), 0);
    }

    #[test]
    fn places_go_to_the_queued_requests_first_then_ahead() {
        // 3 waiting, 5 asked, window total now 5 of a limit of 100.
        assert_eq!(assign(5, 5, 3, 100), (vec![true; 3], 2));
        // Total 103 of 100: places 99..=103; two waiters get 99 and 100, nothing is left.
        assert_eq!(assign(103, 5, 2, 100), (vec![true, true], 0));
        // Places 97..=101: three waiters (97, 98, 99), one of the two ahead is within.
        assert_eq!(assign(101, 5, 3, 100), (vec![true; 3], 1));
        // Places 100..=104: the first waiter gets the last place.
        assert_eq!(assign(104, 5, 3, 100), (vec![true, false, false], 0));
        // Exactly at the limit, nothing asked ahead.
        assert_eq!(assign(20, 1, 1, 20), (vec![true], 0));
        assert_eq!(assign(21, 1, 1, 20), (vec![false], 0));
    }

    #[test]
    fn demand_is_the_last_full_second_or_this_one_if_busier() {
        let mut d = Demand::default();
        for _ in 0..50 {
            d.note(10);
        }
        assert_eq!(d.per_second(10), 50);
        d.note(11);
        assert_eq!(d.per_second(11), 50, "the previous second's 50");
        for _ in 0..99 {
            d.note(11);
        }
        assert_eq!(d.per_second(11), 100);
        assert_eq!(d.per_second(12), 100, "a second with no request yet");
        assert_eq!(d.per_second(13), 0, "idle for a whole second");
        d.note(20);
        assert_eq!(d.per_second(20), 1, "after a gap, no previous second");
    }

    #[test]
    fn a_reserved_place_is_taken_once_and_only_in_its_second() {
        let mut q = KeyQueue {
            reserved: (7, 2),
            ..KeyQueue::default()
        };
        assert_eq!(q.take_reserved(8, 1), 0);
        assert_eq!(q.take_reserved(7, 1), 1);
        assert_eq!(q.take_reserved(7, 1), 1);
        assert_eq!(q.take_reserved(7, 1), 0);
        q.reserved = (9, 3);
        assert_eq!(q.take_reserved(9, 5), 3, "no more than are left");
        assert_eq!(q.take_reserved(9, 5), 0);
    }
}
