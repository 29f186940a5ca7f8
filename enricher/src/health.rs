//! What the enricher knows about its own state, written by the lanes, the probe and the
//! lifecycle runner, read by `/_readiness` and `/metrics` (`server`).
//!
//! Each lane (live events, imports) reports on its own: a stalled import must show as
//! the import lane's, and must not hide behind a healthy live lane, nor the other way.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The two lanes: live events (`KAFKA_TOPIC_RAW`) and the historical lane of
/// `rivulet-admin import` (`KAFKA_TOPIC_IMPORT`), each with its own consumer group and
/// thread. Every metric a lane writes carries its name as the `lane` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    Live,
    Import,
}

impl Lane {
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Live => "live",
            Lane::Import => "import",
        }
    }
}

/// A lane that has had messages waiting this long without storing an offset is stuck:
/// far longer than a batch takes (`BATCH_MAX_AGE_MS`, one insert), short enough to be
/// seen before its backlog matters.
pub const STUCK_AFTER: Duration = Duration::from_secs(120);

/// One lane's state.
pub struct LaneHealth {
    pub lane: Lane,
    /// Its consumer reached Kafka at the last probe.
    pub kafka_ok: AtomicBool,
    /// Its last insert failed (set until one succeeds).
    pub inserts_failing: AtomicBool,
    pub assigned_partitions: AtomicUsize,
    /// Messages waiting on its partitions, at the last probe.
    pub lag: AtomicU64,
    /// Milliseconds after `origin` when it last stored offsets, or last had nothing waiting.
    progressed_ms: AtomicU64,
    /// Its thread has ended (at shutdown, or because it failed).
    pub stopped: AtomicBool,
    origin: Instant,
}

/// Why a lane is stuck.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stuck {
    Stopped,
    KafkaUnreachable,
    InsertsFailing,
    NoProgress,
}

impl Stuck {
    pub fn as_str(self) -> &'static str {
        match self {
            Stuck::Stopped => "its thread has stopped",
            Stuck::KafkaUnreachable => "its consumer cannot reach Kafka",
            Stuck::InsertsFailing => "ClickHouse refuses its inserts",
            Stuck::NoProgress => "messages wait and it has stored no offset for 120 s",
        }
    }
}

impl LaneHealth {
    pub fn new(lane: Lane) -> Self {
        LaneHealth {
            lane,
            kafka_ok: AtomicBool::new(false),
            inserts_failing: AtomicBool::new(false),
            assigned_partitions: AtomicUsize::new(0),
            lag: AtomicU64::new(0),
            progressed_ms: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            origin: Instant::now(),
        }
    }

    /// Offsets were stored, or nothing waits: the lane is keeping up.
    pub fn progressed(&self) {
        self.progressed_ms
            .store(self.origin.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// How long since the lane last kept up.
    pub fn since_progress(&self) -> Duration {
        self.origin.elapsed().saturating_sub(Duration::from_millis(
            self.progressed_ms.load(Ordering::Relaxed),
        ))
    }

    /// Why the lane cannot move on, if it cannot. Until the first probe its consumer's
    /// reach is unknown, which counts as unreachable (as the `kafka` check does).
    pub fn stuck(&self) -> Option<Stuck> {
        if self.stopped.load(Ordering::Relaxed) {
            Some(Stuck::Stopped)
        } else if !self.kafka_ok.load(Ordering::Relaxed) {
            Some(Stuck::KafkaUnreachable)
        } else if self.inserts_failing.load(Ordering::Relaxed) {
            Some(Stuck::InsertsFailing)
        } else if self.lag.load(Ordering::Relaxed) > 0 && self.since_progress() > STUCK_AFTER {
            Some(Stuck::NoProgress)
        } else {
            None
        }
    }
}

/// The process's state: its lanes' and what belongs to no lane.
pub struct Health {
    /// ClickHouse answered the last probe.
    pub clickhouse_reachable: AtomicBool,
    pub shutting_down: AtomicBool,
    /// This enricher holds partition 0 of the raw topic: it runs erasures and retention
    /// (`lifecycle`), so that one process of the group does, whatever its size.
    pub lifecycle_leader: AtomicBool,
    /// The live lane first.
    pub lanes: Vec<Arc<LaneHealth>>,
}

impl Health {
    pub fn new(lanes: &[Lane]) -> Self {
        Health {
            clickhouse_reachable: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            lifecycle_leader: AtomicBool::new(false),
            lanes: lanes
                .iter()
                .map(|l| Arc::new(LaneHealth::new(*l)))
                .collect(),
        }
    }

    pub fn lane(&self, lane: Lane) -> Option<&Arc<LaneHealth>> {
        self.lanes.iter().find(|h| h.lane == lane)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lane_is_stuck_when_it_stopped_cannot_insert_or_stands_still_with_work_waiting() {
        let h = LaneHealth::new(Lane::Import);
        assert_eq!(h.stuck(), Some(Stuck::KafkaUnreachable), "not probed yet");
        h.kafka_ok.store(true, Ordering::Relaxed);
        assert_eq!(h.stuck(), None);
        h.inserts_failing.store(true, Ordering::Relaxed);
        assert_eq!(h.stuck(), Some(Stuck::InsertsFailing));
        h.inserts_failing.store(false, Ordering::Relaxed);
        // Work waiting: stuck only once it has stood still for longer than a batch takes.
        h.lag.store(10, Ordering::Relaxed);
        h.progressed();
        assert_eq!(h.stuck(), None);
        h.progressed_ms.store(0, Ordering::Relaxed);
        let h = LaneHealth {
            origin: Instant::now() - STUCK_AFTER - Duration::from_secs(1),
            ..h
        };
        assert_eq!(h.stuck(), Some(Stuck::NoProgress));
        h.lag.store(0, Ordering::Relaxed);
        assert_eq!(h.stuck(), None, "nothing waits");
        h.stopped.store(true, Ordering::Relaxed);
        assert_eq!(h.stuck(), Some(Stuck::Stopped));
    }
}
