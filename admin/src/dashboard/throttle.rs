//! Slows down guessing the admin token, per client address and *before* the token is
//! compared: an address may try once, then waits `ADMIN_LOGIN_DELAY_MS` (doubling after
//! five failures in a row, up to a minute) before its next try counts. Tries made while
//! it waits are answered 429 without being compared, so parallel guesses gain nothing,
//! and the owner, at another address, is never made to wait by someone else's guessing.

use rivulet_common::client_ip::counted_as;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures in a row after which the wait doubles with each further failure.
const DOUBLE_AFTER: u32 = 5;
const MAX_WAIT: Duration = Duration::from_secs(60);
/// Above this many addresses, those free to try again are forgotten.
const PRUNE_ABOVE: usize = 100_000;

struct Attempts {
    failures: u32,
    next_try: Instant,
}

pub struct LoginThrottle {
    delay: Duration,
    by_address: Mutex<HashMap<IpAddr, Attempts>>,
}

impl LoginThrottle {
    pub fn new(delay: Duration) -> Self {
        LoginThrottle {
            delay,
            by_address: Mutex::new(HashMap::new()),
        }
    }

    fn wait_after(&self, failures: u32) -> Duration {
        match failures.checked_sub(DOUBLE_AFTER) {
            None | Some(0) => self.delay,
            Some(n) => self.delay.saturating_mul(1u32 << n.min(16)).min(MAX_WAIT),
        }
    }

    /// Takes `ip`'s next try: `Err(wait)` while it must wait. A try taken holds the
    /// address until it is answered ([`failed`](Self::failed) or
    /// [`succeeded`](Self::succeeded)), so tries sent at once are not compared at once.
    pub fn take_try(&self, ip: IpAddr) -> Result<(), Duration> {
        self.take_try_at(counted_as(ip), Instant::now())
    }

    fn take_try_at(&self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut by = self.by_address.lock().unwrap_or_else(|e| e.into_inner());
        if by.len() > PRUNE_ABOVE {
            by.retain(|_, a| a.next_try > now);
        }
        let a = by.entry(ip).or_insert(Attempts {
            failures: 0,
            next_try: now,
        });
        if now < a.next_try {
            return Err(a.next_try - now);
        }
        a.next_try = now + self.wait_after(a.failures + 1);
        Ok(())
    }

    /// The try was a wrong token.
    pub fn failed(&self, ip: IpAddr) {
        self.failed_at(counted_as(ip), Instant::now());
    }

    fn failed_at(&self, ip: IpAddr, now: Instant) {
        let mut by = self.by_address.lock().unwrap_or_else(|e| e.into_inner());
        let a = by.entry(ip).or_insert(Attempts {
            failures: 0,
            next_try: now,
        });
        a.failures += 1;
        a.next_try = a.next_try.max(now + self.wait_after(a.failures));
    }

    /// The try was the right token: the address starts afresh.
    pub fn succeeded(&self, ip: IpAddr) {
        self.by_address
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&counted_as(ip));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn tries_at_once_get_one_comparison_and_others_are_not_held_up() {
        let t = LoginThrottle::new(Duration::from_secs(1));
        let now = Instant::now();
        let attacker = ip("203.0.113.5");
        assert!(t.take_try_at(attacker, now).is_ok());
        for _ in 0..499 {
            assert!(
                t.take_try_at(attacker, now).is_err(),
                "a parallel guess is compared"
            );
        }
        t.failed_at(attacker, now);
        // The owner, elsewhere, tries at once.
        assert!(t.take_try_at(ip("198.51.100.7"), now).is_ok());
        // The attacker's next try counts a second later.
        assert!(t
            .take_try_at(attacker, now + Duration::from_millis(999))
            .is_err());
        assert!(t
            .take_try_at(attacker, now + Duration::from_secs(1))
            .is_ok());
    }

    #[test]
    fn the_wait_doubles_after_five_failures_and_success_clears_it() {
        let t = LoginThrottle::new(Duration::from_secs(1));
        assert_eq!(t.wait_after(5), Duration::from_secs(1));
        assert_eq!(t.wait_after(6), Duration::from_secs(2));
        assert_eq!(t.wait_after(8), Duration::from_secs(8));
        assert_eq!(t.wait_after(40), MAX_WAIT);
        let a = ip("203.0.113.5");
        let mut now = Instant::now();
        for _ in 0..7 {
            t.take_try_at(a, now).unwrap();
            t.failed_at(a, now);
            now += Duration::from_secs(10);
        }
        t.succeeded(a);
        assert!(t.take_try_at(a, now).is_ok());
    }
}
