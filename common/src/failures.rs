//! A limit on the rejections one client address may cause: 401 (a key that is wrong),
//! 403 (a browser origin a site does not list) and 404 (no such site) at ingest; a Stats
//! API key that is wrong at the dashboard's server. Guessing keys or
//! site ids costs lookups and tells the guesser something each time; past the limit the
//! address is answered 429 before anything is looked up (docs/security.md).
//!
//! A key that ingest does not already hold in memory may cost a registry query, so its
//! check takes a token *before* the lookup (and gives it back if the key is good): an
//! address sending many unknown keys at once gets as many queries as it has tokens, not
//! as many as it has requests in flight.
//!
//! A token bucket per address: `AUTH_FAILURE_BURST` rejections at once, refilled at
//! `AUTH_FAILURES_PER_MINUTE`. Counted per ingest process (in memory: the point is to
//! cost an attacker time without costing Redis a call per rejection). IPv6 addresses are
//! counted per /64, which one host usually holds whole.

use crate::client_ip::counted_as;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Above this many addresses, those whose bucket is full again are forgotten.
const PRUNE_ABOVE: usize = 100_000;

#[derive(Clone, Copy, Debug)]
pub struct FailureLimit {
    /// Rejections an address may cause at once; 0 turns the limit off.
    pub burst: u32,
    /// How fast it may cause more.
    pub per_minute: u32,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

pub struct FailureLimiter {
    limit: FailureLimit,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

/// The address's bucket is empty: retry after this long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked(pub Duration);

impl FailureLimiter {
    pub fn new(limit: FailureLimit) -> Self {
        FailureLimiter {
            limit,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn refill(&self, b: &mut Bucket, now: Instant) {
        let per_sec = f64::from(self.limit.per_minute) / 60.0;
        let gained = now.duration_since(b.at).as_secs_f64() * per_sec;
        b.tokens = (b.tokens + gained).min(f64::from(self.limit.burst));
        b.at = now;
    }

    /// `Err` when `ip` has caused as many rejections as it may for now.
    pub fn check(&self, ip: IpAddr) -> Result<(), Blocked> {
        self.check_at(ip, Instant::now())
    }

    fn check_at(&self, ip: IpAddr, now: Instant) -> Result<(), Blocked> {
        if self.limit.burst == 0 {
            return Ok(());
        }
        let mut buckets = self.buckets.lock().expect("failure limiter lock");
        let Some(b) = buckets.get_mut(&counted_as(ip)) else {
            return Ok(());
        };
        self.refill(b, now);
        if b.tokens >= 1.0 {
            return Ok(());
        }
        let per_sec = f64::from(self.limit.per_minute.max(1)) / 60.0;
        Err(Blocked(Duration::from_secs_f64((1.0 - b.tokens) / per_sec)))
    }

    /// Counts one rejection against `ip`.
    pub fn record(&self, ip: IpAddr) {
        self.record_at(ip, Instant::now());
    }

    /// Takes a token of `ip` ahead of a lookup that may fail; `Err` when there is none.
    pub fn take(&self, ip: IpAddr) -> Result<(), Blocked> {
        self.check(ip)?;
        self.record(ip);
        Ok(())
    }

    /// Gives back a token taken ahead of a lookup that succeeded.
    pub fn refund(&self, ip: IpAddr) {
        if self.limit.burst == 0 {
            return;
        }
        let mut buckets = self.buckets.lock().expect("failure limiter lock");
        if let Some(b) = buckets.get_mut(&counted_as(ip)) {
            b.tokens = (b.tokens + 1.0).min(f64::from(self.limit.burst));
        }
    }

    fn record_at(&self, ip: IpAddr, now: Instant) {
        if self.limit.burst == 0 {
            return;
        }
        let mut buckets = self.buckets.lock().expect("failure limiter lock");
        if buckets.len() > PRUNE_ABOVE {
            let burst = f64::from(self.limit.burst);
            let per_sec = f64::from(self.limit.per_minute) / 60.0;
            buckets
                .retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * per_sec < burst);
        }
        let b = buckets.entry(counted_as(ip)).or_insert(Bucket {
            tokens: f64::from(self.limit.burst),
            at: now,
        });
        self.refill(b, now);
        b.tokens = (b.tokens - 1.0).max(0.0);
        metrics::counter!("ingest_rejections_counted_total").increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_refill_rate() {
        let l = FailureLimiter::new(FailureLimit {
            burst: 3,
            per_minute: 60,
        });
        let ip: IpAddr = "203.0.113.9".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(l.check_at(ip, t0).is_ok());
            l.record_at(ip, t0);
        }
        let Err(Blocked(wait)) = l.check_at(ip, t0) else {
            panic!("blocked after the burst")
        };
        assert!(wait <= Duration::from_secs(1) && wait > Duration::ZERO);
        assert!(l.check_at(ip, t0 + Duration::from_millis(1001)).is_ok());
        // Another address is not affected.
        assert!(l.check_at("203.0.113.10".parse().unwrap(), t0).is_ok());
    }

    #[test]
    fn a_token_taken_ahead_comes_back_when_the_lookup_succeeds() {
        let l = FailureLimiter::new(FailureLimit {
            burst: 2,
            per_minute: 1,
        });
        let ip: IpAddr = "203.0.113.9".parse().unwrap();
        assert!(l.take(ip).is_ok());
        assert!(l.take(ip).is_ok());
        assert!(
            l.take(ip).is_err(),
            "no token left for a third lookup at once"
        );
        l.refund(ip);
        assert!(l.take(ip).is_ok());
    }

    #[test]
    fn ipv6_counts_per_64_and_zero_turns_it_off() {
        let l = FailureLimiter::new(FailureLimit {
            burst: 1,
            per_minute: 1,
        });
        let t0 = Instant::now();
        l.record_at("2001:db8:1:2::1".parse().unwrap(), t0);
        assert!(l
            .check_at("2001:db8:1:2::ffff".parse().unwrap(), t0)
            .is_err());
        assert!(l.check_at("2001:db8:1:3::1".parse().unwrap(), t0).is_ok());
        let off = FailureLimiter::new(FailureLimit {
            burst: 0,
            per_minute: 0,
        });
        for _ in 0..10 {
            off.record_at("198.51.100.1".parse().unwrap(), t0);
        }
        assert!(off.check_at("198.51.100.1".parse().unwrap(), t0).is_ok());
    }
}
