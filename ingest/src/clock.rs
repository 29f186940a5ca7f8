//! The time an event is stored at, from the client's clock (`timestamp`, `sent_at`) and
//! the receive time, by the wire contract's rule (`contract::event_time`); and what the
//! clients' clocks look like (docs/operations.md, "Health and metrics"):
//!
//! - `ingest_client_clock_skew_seconds{sign}`: a histogram of |sent_at − received_at| of
//!   every event that has a `sent_at`; `sign` is `ahead` when the client's clock is ahead
//!   of ingest's (sent_at > received_at), else `behind`. The time the request was in
//!   flight counts as "behind": a few milliseconds on a right clock.
//! - `ingest_client_timestamps_clamped_total{bound}`: events whose (corrected) timestamp
//!   lay outside the accepted window and were stored at the receive time instead:
//!   `future` (more than 23 hours ahead when corrected, 10 minutes when not), `past`
//!   (more than 7 days old).

use metrics::{Counter, Histogram};
use rivulet_common::contract::{self, Bound};
use std::sync::LazyLock;

/// The histogram's name, and its buckets (seconds: a second to a year).
pub const SKEW_METRIC: &str = "ingest_client_clock_skew_seconds";
pub const SKEW_BUCKETS: &[f64] = &[
    1.0,
    5.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    21600.0,
    86400.0,
    604800.0,
    2_592_000.0,
    31_536_000.0,
];

// Registered once: `histogram!` and `counter!` look their series up on every call.
static SKEW_AHEAD: LazyLock<Histogram> =
    LazyLock::new(|| metrics::histogram!(SKEW_METRIC, "sign" => "ahead"));
static SKEW_BEHIND: LazyLock<Histogram> =
    LazyLock::new(|| metrics::histogram!(SKEW_METRIC, "sign" => "behind"));
static CLAMPED_PAST: LazyLock<Counter> = LazyLock::new(
    || metrics::counter!("ingest_client_timestamps_clamped_total", "bound" => Bound::Past.as_str()),
);
static CLAMPED_FUTURE: LazyLock<Counter> = LazyLock::new(
    || metrics::counter!("ingest_client_timestamps_clamped_total", "bound" => Bound::Future.as_str()),
);

/// The time to store an event at (epoch ms), counted in the metrics above.
pub fn event_time(timestamp: Option<i64>, sent_at: Option<i64>, received: i64) -> i64 {
    if let Some(sent) = sent_at {
        let skew = i128::from(sent) - i128::from(received);
        let seconds = skew.unsigned_abs() as f64 / 1000.0;
        if skew > 0 {
            SKEW_AHEAD.record(seconds);
        } else {
            SKEW_BEHIND.record(seconds);
        }
    }
    let t = contract::event_time(timestamp, sent_at, received);
    match t.clamped {
        Some(Bound::Past) => CLAMPED_PAST.increment(1),
        Some(Bound::Future) => CLAMPED_FUTURE.increment(1),
        None => {}
    }
    t.ms
}
