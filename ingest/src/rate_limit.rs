//! Per-key rate limits, global across ingest replicas (docs/design.md, "Rate limiting"):
//! two token buckets per key in Redis, one of requests (`RATE_LIMIT_PER_SECOND`, the
//! tracking API's 20) and one of events (`EVENT_RATE_LIMIT_PER_SECOND`), which a batch
//! draws on once per event it carries. Each bucket holds one second's worth and refills
//! continuously, so no window boundary lets a key through twice its limit.
//!
//! A Lua script updates both buckets of a key in one round trip (Redis's own clock, so
//! replicas agree), for many requests at once:
//! - **Coalescing.** While one round trip for a key is in flight, its new requests queue,
//!   and the next round trip decides them all, in order.
//! - **Reserving ahead.** A key with a budget of 100 or more per second also takes, in
//!   the same call, tokens for requests it has not received yet: about 100 ms of its
//!   recent demand, never more than 1 % of its budget. The requests that follow spend
//!   them with no round trip. A reserved token unused after a second is lost, so a
//!   replica may leave up to ~1 % of a budget unused; the total accepted never exceeds
//!   what the buckets allow. Below 100 nothing is reserved and the limit is exact.
//! - **Known empty.** A key refused for want of a request token is refused without
//!   asking Redis until the bucket has had time to refill one.
//!
//! When Redis is unreachable the limiter fails open to the same buckets kept per
//! process, and says so in logs and metrics.

use crate::redis_link::RedisLink;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// Decides requests of one key. ARGV: request rate, event rate (per second, 0 = off),
/// requests to reserve ahead, events to reserve ahead, then the events of each queued
/// request, in order. Returns one verdict per request (1 allowed, 2 out of request
/// tokens, 3 out of event tokens), then the request and event tokens reserved ahead (none
/// when a request was refused: a key over a limit would only waste them).
/// Each bucket holds at most one second's worth; a missing bucket is full.
const TAKE_TOKENS: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rr, er = tonumber(ARGV[1]), tonumber(ARGV[2])
local st = redis.call('HMGET', KEYS[1], 'r', 'e', 't')
local r = tonumber(st[1]) or rr
local e = tonumber(st[2]) or er
local dt = math.max(0, now - (tonumber(st[3]) or now))
r = math.min(rr, r + dt * rr / 1000)
e = math.min(er, e + dt * er / 1000)
local out = {}
local all = true
for i = 5, #ARGV do
  local n = tonumber(ARGV[i])
  if rr > 0 and r < 1 then
    out[#out + 1] = 2
    all = false
  elseif er > 0 and e < n then
    out[#out + 1] = 3
    all = false
  else
    out[#out + 1] = 1
    if rr > 0 then r = r - 1 end
    if er > 0 then e = e - n end
  end
end
-- Ahead only while every request fits: a key over a limit would only waste tokens.
local ar, ae = 0, 0
if all and rr > 0 then ar = math.min(tonumber(ARGV[3]), math.floor(r)); r = r - ar end
if all and er > 0 then ae = math.min(tonumber(ARGV[4]), math.floor(e)); e = e - ae end
out[#out + 1] = ar
out[#out + 1] = ae
redis.call('HSET', KEYS[1], 'r', tostring(r), 'e', tostring(e), 't', now)
redis.call('PEXPIRE', KEYS[1], 2000)
return out";

/// Above this many tracked keys, idle entries are dropped.
const PRUNE_ABOVE: usize = 100_000;

/// Reserve ahead about 1/10 of a second of the key's demand.
const AHEAD_DEMAND_DIVISOR: u64 = 10;

/// Reserve ahead at most 1/100 of a budget (see the module's comment).
const AHEAD_BUDGET_DIVISOR: u64 = 100;

/// How long reserved tokens may be spent; later they are lost.
const RESERVED_FOR: Duration = Duration::from_secs(1);

/// Per-second budgets of one key; 0 turns one off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budgets {
    pub requests: u32,
    pub events: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    TooManyRequests,
    TooManyEvents,
}

impl Verdict {
    fn from_code(code: i64) -> Self {
        match code {
            2 => Verdict::TooManyRequests,
            3 => Verdict::TooManyEvents,
            _ => Verdict::Allowed,
        }
    }
}

struct Waiter {
    events: u32,
    tx: oneshot::Sender<Verdict>,
}

/// Tokens Redis counted for this process ahead of demand, not spent yet.
#[derive(Clone, Copy, Default)]
struct Reserved {
    requests: u64,
    events: u64,
    until: Option<Instant>,
}

impl Reserved {
    /// Spends tokens for one request of `events` events, if there are enough.
    fn spend(&mut self, budgets: Budgets, events: u32, now: Instant) -> bool {
        if self.until.is_none_or(|u| now >= u) {
            *self = Reserved::default();
            return false;
        }
        let req_ok = budgets.requests == 0 || self.requests >= 1;
        let ev_ok = budgets.events == 0 || self.events >= u64::from(events);
        if !(req_ok && ev_ok) {
            return false;
        }
        if budgets.requests > 0 {
            self.requests -= 1;
        }
        if budgets.events > 0 {
            self.events -= u64::from(events);
        }
        true
    }
}

#[derive(Default)]
struct KeyQueue {
    /// Requests waiting for the next round trip.
    waiters: Vec<Waiter>,
    /// A flush task is running for this key.
    flushing: bool,
    reserved: Reserved,
    /// Until then the key has no request token (refused without a round trip).
    requests_empty_until: Option<Instant>,
    demand: Demand,
}

/// Requests and events counted in the current second and in the one before it.
#[derive(Default)]
struct Demand {
    second: u64,
    this: (u64, u64),
    previous: (u64, u64),
}

impl Demand {
    fn note(&mut self, second: u64, events: u32) {
        if self.second != second {
            self.previous = if second == self.second + 1 {
                self.this
            } else {
                (0, 0)
            };
            self.second = second;
            self.this = (0, 0);
        }
        self.this.0 += 1;
        self.this.1 += u64::from(events);
    }

    /// (requests, events) per second: the last full second's count, or this second's so
    /// far if that is more (a key whose traffic starts now).
    fn per_second(&self, second: u64) -> (u64, u64) {
        match second.checked_sub(self.second) {
            Some(0) => (
                self.this.0.max(self.previous.0),
                self.this.1.max(self.previous.1),
            ),
            Some(1) => self.this,
            _ => (0, 0),
        }
    }
}

/// How many tokens of a bucket of `budget` per second to reserve ahead for a demand of
/// `demand` per second: none below a budget of 100.
fn reserve_ahead(budget: u32, demand: u64) -> u64 {
    if budget < 100 {
        return 0;
    }
    (demand / AHEAD_DEMAND_DIVISOR).min(u64::from(budget) / AHEAD_BUDGET_DIVISOR)
}

/// A process's own buckets of one key, for when Redis cannot be reached.
struct LocalBuckets {
    requests: f64,
    events: f64,
    at: Instant,
}

impl LocalBuckets {
    fn full(budgets: Budgets, now: Instant) -> Self {
        LocalBuckets {
            requests: f64::from(budgets.requests),
            events: f64::from(budgets.events),
            at: now,
        }
    }

    /// The same decision as the Lua script, on this process's counts.
    fn take(&mut self, budgets: Budgets, events: u32, now: Instant) -> Verdict {
        let dt = now.duration_since(self.at).as_secs_f64();
        self.at = now;
        let (rr, er) = (f64::from(budgets.requests), f64::from(budgets.events));
        self.requests = (self.requests + dt * rr).min(rr);
        self.events = (self.events + dt * er).min(er);
        if budgets.requests > 0 && self.requests < 1.0 {
            return Verdict::TooManyRequests;
        }
        if budgets.events > 0 && self.events < f64::from(events) {
            return Verdict::TooManyEvents;
        }
        if budgets.requests > 0 {
            self.requests -= 1.0;
        }
        if budgets.events > 0 {
            self.events -= f64::from(events);
        }
        Verdict::Allowed
    }
}

/// Budgets counted per process only, for keys of any kind: the browser path's limit per
/// client address and site (no Redis call on a public path).
pub struct LocalLimiter<K> {
    budgets: Budgets,
    buckets: Mutex<HashMap<K, LocalBuckets>>,
}

impl<K: std::hash::Hash + Eq> LocalLimiter<K> {
    pub fn new(budgets: Budgets) -> Self {
        LocalLimiter {
            budgets,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn budgets(&self) -> Budgets {
        self.budgets
    }

    /// Whether one more request of `key`, carrying `events` events, fits its budgets.
    pub fn take(&self, key: K, events: u32) -> Verdict {
        if self.budgets == Budgets::default() {
            return Verdict::Allowed;
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("local limiter lock");
        if buckets.len() > PRUNE_ABOVE {
            buckets.retain(|_, b| now.duration_since(b.at) < Duration::from_secs(2));
        }
        buckets
            .entry(key)
            .or_insert_with(|| LocalBuckets::full(self.budgets, now))
            .take(self.budgets, events, now)
    }
}

/// What the request path asks of the per-key rate limit (`handlers`): [`RateLimiter`] in
/// the service; a double in in-process tests (`rivulet_ingest::testing::Limits`).
pub trait Limiter: Send + Sync + 'static {
    /// The per-second budgets, as 429 answers state them.
    fn budgets(&self) -> Budgets;
    /// Whether one more request of this key, carrying `events` events, fits its budgets.
    fn allow(self: &Arc<Self>, key_id: &str, events: u32) -> impl Future<Output = Verdict> + Send;
}

impl Limiter for RateLimiter {
    fn budgets(&self) -> Budgets {
        RateLimiter::budgets(self)
    }
    fn allow(self: &Arc<Self>, key_id: &str, events: u32) -> impl Future<Output = Verdict> + Send {
        RateLimiter::allow(self, key_id, events)
    }
}

pub struct RateLimiter {
    budgets: Budgets,
    redis: Arc<RedisLink>,
    script: redis::Script,
    queues: Mutex<HashMap<String, KeyQueue>>,
    /// While Redis is down.
    local: LocalLimiter<String>,
}

/// Seconds since the Unix epoch (also the clock of `last_used`).
pub(crate) fn epoch_second() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl RateLimiter {
    pub fn new(budgets: Budgets, redis: Arc<RedisLink>) -> Arc<Self> {
        Arc::new(RateLimiter {
            budgets,
            redis,
            script: redis::Script::new(TAKE_TOKENS),
            queues: Mutex::new(HashMap::new()),
            local: LocalLimiter::new(budgets),
        })
    }

    pub fn budgets(&self) -> Budgets {
        self.budgets
    }

    /// Whether one more request of this key, carrying `events` events, fits its budgets.
    pub async fn allow(self: &Arc<Self>, key_id: &str, events: u32) -> Verdict {
        if self.budgets == Budgets::default() {
            return Verdict::Allowed;
        }
        let now = Instant::now();
        let rx = {
            let mut queues = self.queues.lock().expect("rate limiter lock");
            if queues.len() > PRUNE_ABOVE {
                queues.retain(|_, q| {
                    q.flushing
                        || q.reserved.until.is_some_and(|u| u > now)
                        || q.requests_empty_until.is_some_and(|u| u > now)
                });
            }
            let queue = match queues.get_mut(key_id) {
                Some(q) => q,
                None => queues.entry(key_id.to_string()).or_default(),
            };
            queue.demand.note(epoch_second(), events);
            // Before the known-empty check: reserved tokens were counted by Redis within
            // the budget, so they are this request's to spend.
            if queue.reserved.spend(self.budgets, events, now) {
                return Verdict::Allowed;
            }
            if queue.requests_empty_until.is_some_and(|u| now < u) {
                return Verdict::TooManyRequests;
            }
            // The channel is made only here: most requests of a busy key spend reserved
            // tokens, above, and need none.
            let (tx, rx) = oneshot::channel();
            queue.waiters.push(Waiter { events, tx });
            if !queue.flushing {
                queue.flushing = true;
                // A task of its own, so that a client hanging up cannot strand the queue.
                tokio::spawn(self.clone().flush(key_id.to_string()));
            }
            rx
        };
        // The flush task always answers; if it died, failing open matches Redis down.
        rx.await.unwrap_or(Verdict::Allowed)
    }

    /// Decides the queued requests of one key, a round trip at a time, until none wait.
    async fn flush(self: Arc<Self>, key_id: String) {
        loop {
            let (waiters, ahead) = {
                let mut queues = self.queues.lock().expect("rate limiter lock");
                let Some(queue) = queues.get_mut(&key_id) else {
                    return;
                };
                // Requests that queued while the last round trip reserved tokens spend them.
                let now = Instant::now();
                let budgets = self.budgets;
                let mut waiting = Vec::with_capacity(queue.waiters.len());
                for w in std::mem::take(&mut queue.waiters) {
                    if queue.reserved.spend(budgets, w.events, now) {
                        let _ = w.tx.send(Verdict::Allowed);
                    } else {
                        waiting.push(w);
                    }
                }
                if waiting.is_empty() {
                    queue.flushing = false;
                    return;
                }
                let (req_demand, ev_demand) = queue.demand.per_second(epoch_second());
                let ahead = (
                    reserve_ahead(budgets.requests, req_demand),
                    reserve_ahead(budgets.events, ev_demand),
                );
                (waiting, ahead)
            };
            let events: Vec<u32> = waiters.iter().map(|w| w.events).collect();
            let verdicts = match self.take_in_redis(&key_id, &events, ahead).await {
                Some((verdicts, reserved)) => {
                    let now = Instant::now();
                    let mut queues = self.queues.lock().expect("rate limiter lock");
                    if let Some(q) = queues.get_mut(&key_id) {
                        if reserved.0 + reserved.1 > 0 {
                            q.reserved = Reserved {
                                requests: q.reserved.requests + reserved.0,
                                events: q.reserved.events + reserved.1,
                                until: Some(now + RESERVED_FOR),
                            };
                        }
                        if verdicts.contains(&Verdict::TooManyRequests) {
                            let refill = 1.0 / f64::from(self.budgets.requests.max(1));
                            q.requests_empty_until = Some(now + Duration::from_secs_f64(refill));
                        }
                    }
                    verdicts
                }
                None => {
                    metrics::counter!("ingest_rate_limit_fail_open_total")
                        .increment(waiters.len() as u64);
                    events
                        .iter()
                        .map(|n| self.local.take(key_id.clone(), *n))
                        .collect()
                }
            };
            for (waiter, verdict) in waiters.into_iter().zip(verdicts) {
                let _ = waiter.tx.send(verdict);
            }
        }
    }

    /// One round trip: a verdict per request and the tokens reserved ahead, or `None`
    /// when Redis cannot say.
    async fn take_in_redis(
        &self,
        key_id: &str,
        events: &[u32],
        ahead: (u64, u64),
    ) -> Option<(Vec<Verdict>, (u64, u64))> {
        let mut conn = self.redis.conn()?;
        metrics::counter!("ingest_rate_limit_redis_calls_total").increment(1);
        let mut call = self
            .script
            .key(rivulet_common::cache::rate_limit_buckets(key_id));
        call.arg(self.budgets.requests)
            .arg(self.budgets.events)
            .arg(ahead.0)
            .arg(ahead.1);
        for n in events {
            call.arg(*n);
        }
        let r: Result<Vec<i64>, _> = call.invoke_async(&mut conn).await;
        self.redis.record(&r);
        let codes = r.ok()?;
        if codes.len() != events.len() + 2 {
            tracing::warn!(
                got = codes.len(),
                "rate-limit script answered an unexpected shape"
            );
            return None;
        }
        let reserved = (
            codes[events.len()].max(0) as u64,
            codes[events.len() + 1].max(0) as u64,
        );
        let verdicts = codes[..events.len()]
            .iter()
            .map(|c| Verdict::from_code(*c))
            .collect();
        Some((verdicts, reserved))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: Budgets = Budgets {
        requests: 20,
        events: 100,
    };

    #[test]
    fn nothing_is_reserved_ahead_below_a_budget_of_100() {
        assert_eq!(reserve_ahead(20, 1_000_000), 0);
        assert_eq!(reserve_ahead(99, 1_000_000), 0);
        assert_eq!(reserve_ahead(100, 1_000_000), 1);
        assert_eq!(reserve_ahead(1_000_000, 12_000), 1_200);
        assert_eq!(reserve_ahead(10_000, 12_000), 100);
        assert_eq!(reserve_ahead(10_000, 5), 0);
    }

    #[test]
    fn reserved_tokens_are_spent_once_within_their_second() {
        let t0 = Instant::now();
        let mut r = Reserved {
            requests: 2,
            events: 10,
            until: Some(t0 + RESERVED_FOR),
        };
        assert!(r.spend(BOTH, 4, t0));
        assert!(!r.spend(BOTH, 7, t0), "6 events left");
        assert!(r.spend(BOTH, 6, t0));
        assert!(!r.spend(BOTH, 0, t0), "no request token left");
        let mut late = Reserved {
            requests: 5,
            events: 5,
            until: Some(t0),
        };
        assert!(!late.spend(BOTH, 1, t0 + Duration::from_millis(1)));
        // A budget that is off needs no token of its own kind.
        let events_only = Budgets {
            requests: 0,
            events: 100,
        };
        let mut r = Reserved {
            requests: 0,
            events: 3,
            until: Some(t0 + RESERVED_FOR),
        };
        assert!(r.spend(events_only, 3, t0));
    }

    #[test]
    fn local_buckets_hold_one_second_and_refill_continuously() {
        let t0 = Instant::now();
        let mut b = LocalBuckets::full(BOTH, t0);
        for _ in 0..20 {
            assert_eq!(b.take(BOTH, 1, t0), Verdict::Allowed);
        }
        assert_eq!(b.take(BOTH, 1, t0), Verdict::TooManyRequests);
        // 50 ms later one request's token has come back: no second burst of 20.
        let t1 = t0 + Duration::from_millis(50);
        assert_eq!(b.take(BOTH, 1, t1), Verdict::Allowed);
        assert_eq!(b.take(BOTH, 1, t1), Verdict::TooManyRequests);
        // Events: 80 left; a batch of 81 is refused whole.
        let mut b = LocalBuckets::full(BOTH, t0);
        assert_eq!(b.take(BOTH, 20, t0), Verdict::Allowed);
        assert_eq!(b.take(BOTH, 81, t0), Verdict::TooManyEvents);
        assert_eq!(b.take(BOTH, 79, t0), Verdict::Allowed);
    }

    #[test]
    fn demand_is_the_last_full_second_or_this_one_if_busier() {
        let mut d = Demand::default();
        for _ in 0..50 {
            d.note(10, 2);
        }
        assert_eq!(d.per_second(10), (50, 100));
        d.note(11, 1);
        assert_eq!(d.per_second(11), (50, 100), "the previous second's");
        assert_eq!(d.per_second(12), (1, 1), "a second with no request yet");
        assert_eq!(d.per_second(13), (0, 0), "idle for a whole second");
    }
}
