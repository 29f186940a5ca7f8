//! A client that retries as the SDK does: the same body (so the same event ids) again,
//! on 429, 5xx, time-outs and connection errors, moving to the next ingest on each retry,
//! until one answers 200. Any other status fails the test at once.

use crate::wait::Pace;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::RwLock;
use std::time::Duration;

/// How a `RetryingClient` paces its attempts.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// The pause after the first failed attempt; doubled after each, up to `max_pause`.
    pub first_pause: Duration,
    pub max_pause: Duration,
    /// The time limit of one attempt.
    pub attempt_timeout: Duration,
    /// How long to keep trying one request before giving up on it.
    pub give_up_after: Duration,
}

pub struct RetryingClient {
    http: reqwest::Client,
    ingests: RwLock<Vec<String>>,
    policy: RetryPolicy,
    attempts: AtomicU64,
    retries: AtomicU64,
}

impl RetryingClient {
    /// A client of these ingests (base URLs).
    pub fn new(ingests: Vec<String>, policy: RetryPolicy) -> Self {
        assert!(!ingests.is_empty(), "a RetryingClient needs an ingest");
        RetryingClient {
            http: crate::http(),
            ingests: RwLock::new(ingests),
            policy,
            attempts: AtomicU64::new(0),
            retries: AtomicU64::new(0),
        }
    }

    /// Points the client's `i`th ingest at a new URL (a restarted ingest).
    pub fn replace_ingest(&self, i: usize, url: String) {
        self.ingests.write().unwrap()[i] = url;
    }

    /// How many attempts were made, over all requests.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// How many attempts failed and were retried (or given up on), over all requests.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// POSTs `body` as JSON to `path`, first on ingest `first` (modulo their number), then
    /// on the next one at each retry, until one answers 200: whether one did before the
    /// policy gave up. `what` names the request when an unexpected status fails the test.
    pub async fn post_until_ok(
        &self,
        what: &str,
        path: &str,
        body: &serde_json::Value,
        first: usize,
    ) -> bool {
        let p = self.policy;
        let attempt = AtomicUsize::new(first);
        let pace = Pace::within(p.give_up_after).backoff(p.first_pause, p.max_pause);
        pace.poll(|| async {
            let url = {
                let ingests = self.ingests.read().unwrap();
                ingests[attempt.fetch_add(1, Ordering::Relaxed) % ingests.len()].clone()
            };
            self.attempts.fetch_add(1, Ordering::Relaxed);
            let r = self
                .http
                .post(format!("{url}{path}"))
                .timeout(p.attempt_timeout)
                .json(body)
                .send()
                .await;
            match r.map(|r| r.status().as_u16()) {
                Ok(200) => return Ok(()),
                // Retryable, as in the SDK: 429, 5xx, time-outs and connection errors.
                Ok(429) | Ok(500..=599) | Err(_) => {}
                Ok(s) => panic!("{what}: unexpected status {s}"),
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            Err(())
        })
        .await
        .is_ok()
    }
}
