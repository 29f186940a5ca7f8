//! Waiting, with a bound: every integration test that waits for something to happen, or
//! checks that something keeps holding for a while, does it through a `Pace`, so that
//! each wait states for how long, how often it looks, and (when it fails) what it waited
//! for:
//!
//! ```ignore
//! Pace::within(Duration::from_secs(5))
//!     .every(Duration::from_millis(100))
//!     .poll_until("the key's last use did not show", || async { ... })
//!     .await;
//! ```
//!
//! An attempt returns `Ok` when what it waits for has happened, and `Err` with what it saw
//! otherwise (a status, a count), which a wait that runs out reports. The first attempt is
//! always made; after it, no attempt starts at or after the deadline (a wait gives up as
//! soon as the next attempt could not start before it). An attempt that started in time
//! and succeeds counts.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

/// How a wait is paced: how long it lasts from when (by default, from now), and the pause
/// between attempts (none by default: for attempts that wait themselves, like a Kafka
/// poll; a fixed one with `every`; or one that doubles with `backoff`).
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    start: Instant,
    within: Duration,
    pause: Duration,
    max_pause: Duration,
}

impl Pace {
    /// For `within` from now.
    pub fn within(within: Duration) -> Pace {
        Pace {
            start: Instant::now(),
            within,
            pause: Duration::ZERO,
            max_pause: Duration::ZERO,
        }
    }

    /// Pausing `pause` between attempts.
    pub fn every(self, pause: Duration) -> Pace {
        self.backoff(pause, pause)
    }

    /// Pausing `first` after the first attempt, then twice as long after each, up to `max`.
    pub fn backoff(self, first: Duration, max: Duration) -> Pace {
        Pace {
            pause: first,
            max_pause: max,
            ..self
        }
    }

    /// With the clock started at `since` instead (e.g. when a command was sent).
    pub fn counted_from(self, since: Instant) -> Pace {
        Pace {
            start: since,
            ..self
        }
    }

    fn end(&self) -> Instant {
        self.start + self.within
    }

    /// The pause before the next attempt, or `None` when that attempt could not start
    /// before the deadline.
    fn next_pause(&mut self) -> Option<Duration> {
        let pause = (Instant::now() + self.pause < self.end()).then_some(self.pause);
        self.pause = (self.pause * 2).min(self.max_pause);
        pause
    }

    /// Sleeps `pause`; whether the deadline is still ahead after it.
    async fn sleep(&self, pause: Duration) -> bool {
        tokio::time::sleep(pause).await;
        Instant::now() < self.end()
    }

    /// `sleep`, with the thread asleep.
    fn sleep_blocking(&self, pause: Duration) -> bool {
        std::thread::sleep(pause);
        Instant::now() < self.end()
    }

    /// Calls `attempt` until it returns `Ok`; after the deadline, the last attempt's `Err`.
    pub async fn poll<T, E, F, Fut>(mut self, mut attempt: F) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        loop {
            let seen = match attempt().await {
                Ok(done) => return Ok(done),
                Err(seen) => seen,
            };
            match self.next_pause() {
                Some(pause) if self.sleep(pause).await => {}
                _ => return Err(seen),
            }
        }
    }

    /// `poll`, failing the test at the deadline: the panic says `what` did not happen
    /// (phrase it so: "the enricher got no partitions"), within how long, and what the
    /// last attempt saw.
    pub async fn poll_until<T, E, F, Fut>(self, what: &str, attempt: F) -> T
    where
        E: Display,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let within = self.within;
        self.poll(attempt)
            .await
            .unwrap_or_else(|seen| panic!("{what} within {within:?} (last seen: {seen})"))
    }

    /// `poll` for code that blocks the thread while it waits (a Kafka consumer's poll, a
    /// child process), with the thread asleep between attempts.
    pub fn poll_blocking<T, E>(
        mut self,
        mut attempt: impl FnMut() -> Result<T, E>,
    ) -> Result<T, E> {
        loop {
            let seen = match attempt() {
                Ok(done) => return Ok(done),
                Err(seen) => seen,
            };
            match self.next_pause() {
                Some(pause) if self.sleep_blocking(pause) => {}
                _ => return Err(seen),
            }
        }
    }

    /// Runs `round` (which asserts what must keep holding) again and again while the
    /// deadline is ahead, with the pace's first pause after each round (cut short at the
    /// deadline); the rounds are numbered from 0. Returns how many ran.
    pub async fn repeat<F, Fut>(self, mut round: F) -> u32
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut n = 0;
        while Instant::now() < self.end() {
            round(n).await;
            n += 1;
            let pause = self
                .pause
                .min(self.end().saturating_duration_since(Instant::now()));
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test]
    async fn poll_returns_the_first_success() {
        let calls = Cell::new(0);
        let got = Pace::within(ms(5000))
            .every(ms(1))
            .poll(|| async {
                calls.set(calls.get() + 1);
                if calls.get() == 3 {
                    Ok("done")
                } else {
                    Err(calls.get())
                }
            })
            .await;
        assert_eq!((got, calls.get()), (Ok("done"), 3));
    }

    #[tokio::test]
    async fn poll_gives_the_last_seen_value_and_starts_no_attempt_after_the_deadline() {
        let started = Instant::now();
        let last_start = Cell::new(started);
        let got: Result<(), u32> = Pace::within(ms(1000))
            .every(ms(600))
            .poll(|| async {
                last_start.set(Instant::now());
                Err(7)
            })
            .await;
        assert_eq!(got, Err(7));
        // Attempts at 0 and 600 ms; the next would start at 1200 ms, past the deadline.
        let at = last_start.get() - started;
        assert!(at >= ms(600) && at < ms(1000), "{at:?}");
    }

    #[tokio::test]
    async fn a_pace_counted_from_an_earlier_start_can_be_late_already() {
        let since = Instant::now() - Duration::from_secs(10);
        let calls = Cell::new(0);
        let got: Result<(), ()> = Pace::within(ms(1000))
            .counted_from(since)
            .poll(|| async {
                calls.set(calls.get() + 1);
                Err(())
            })
            .await;
        assert_eq!(
            (got, calls.get()),
            (Err(()), 1),
            "one attempt, already late"
        );
    }

    #[test]
    fn backoff_doubles_up_to_its_maximum() {
        let mut pace = Pace::within(Duration::from_secs(60)).backoff(ms(100), ms(1000));
        let pauses: Vec<u128> = (0..6)
            .map(|_| pace.next_pause().unwrap().as_millis())
            .collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1000, 1000]);
    }

    #[tokio::test]
    #[should_panic(expected = "the thing did not happen within 50ms (last seen: 42)")]
    async fn poll_until_says_what_did_not_happen() {
        Pace::within(ms(50))
            .every(ms(10))
            .poll_until("the thing did not happen", || async { Err::<(), _>(42) })
            .await;
    }

    #[test]
    fn poll_blocking_has_the_same_bounds() {
        let mut calls = 0;
        let got = Pace::within(ms(5000)).every(ms(1)).poll_blocking(|| {
            calls += 1;
            if calls == 2 {
                Ok(calls)
            } else {
                Err(calls)
            }
        });
        assert_eq!(got, Ok(2));
        let started = Instant::now();
        let mut starts = Vec::new();
        let got: Result<(), ()> = Pace::within(ms(100)).every(ms(30)).poll_blocking(|| {
            starts.push(started.elapsed());
            Err(())
        });
        assert_eq!(got, Err(()));
        assert!(starts.iter().all(|at| *at < ms(100)), "{starts:?}");
    }

    #[tokio::test]
    async fn repeat_runs_numbered_rounds_until_the_deadline() {
        let started = Instant::now();
        let seen = RefCell::new(Vec::new());
        let n = Pace::within(ms(200))
            .every(ms(40))
            .repeat(|i| {
                seen.borrow_mut().push(i);
                async {}
            })
            .await;
        assert!(started.elapsed() >= ms(200));
        assert!((1..=6).contains(&n), "{n} rounds");
        assert_eq!(*seen.borrow(), (0..n).collect::<Vec<_>>());
    }
}
