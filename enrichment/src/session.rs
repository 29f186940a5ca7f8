//! Sessions: a visitor's events on a site with no gap longer than the timeout (30 minutes
//! by default), measured in event time.
//!
//! One tracker per Kafka partition (a visitor's events all land on one partition, in
//! order); `clear` it when the partition is revoked. Idle visitors are forgotten by
//! *processing* time (not seen for longer than the timeout), not by the partition's
//! newest event time: a partition mixes visitors whose clocks differ (a backfill, an
//! SDK queue flushed late), and one visitor's fresh event must not end another's session. Session ids are a hash of (site,
//! visitor, session start time), so replaying the same events from the start of a
//! session, e.g. after a crash, gives the same ids. A replay that starts in the middle of
//! a session cannot know its start and opens a new session at the first replayed event.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// The default inactivity timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Processing time between two automatic sweeps of idle visitors.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// An open session, kept small: a busy partition holds one per visitor of the last
/// timeout. With its 8-byte key an entry is 24 bytes, so a million visitors in 30
/// minutes take ~24–55 MB of tables (power-of-two capacity, 7/8 load), not the 64-byte
/// entries (~100–200 MB) of 128-bit keys and stored ids
/// (docs/decisions/005-enricher-throughput-and-memory.md). The session id is not stored:
/// it is a hash of (site, visitor, start), recomputed per event (its cost is the session
/// lookup of BENCHMARKS.md's micro-benchmarks).
struct Session {
    start_ms: i64,
    /// The last event's time, in milliseconds after `start_ms` (saturating: 49 days).
    last_after_start_ms: u32,
    /// Processing time (whole seconds since the tracker's origin) when last seen.
    seen_secs: u32,
}

impl Session {
    fn last_ms(&self) -> i64 {
        self.start_ms + i64::from(self.last_after_start_ms)
    }
    fn set_last_ms(&mut self, last_ms: i64) {
        let after = (last_ms - self.start_ms).clamp(0, i64::from(u32::MAX));
        self.last_after_start_ms = u32::try_from(after).unwrap_or(u32::MAX);
    }
}

/// A visitor as a 64-bit map key: visitor ids are 32 hex characters (a keyed hash) and
/// their first 64 bits are used as they are; other user ids are hashed (SHA-256,
/// truncated). Two visitors of one site and partition share a key with a chance of
/// ~n²/2⁶⁵ (3·10⁻⁸ for a million visitors within one timeout); they would then share a
/// session, which changes no event's stored user_id.
fn visitor_key(visitor: &str) -> u64 {
    // Only the exact form (lowercase, no sign): "ABC…" and "abc…" are different user ids.
    let lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if visitor.len() == 32 && visitor.bytes().all(lower_hex) {
        if let Ok(v) = u64::from_str_radix(&visitor[..16], 16) {
            return v;
        }
    }
    let digest = Sha256::digest(visitor.as_bytes());
    let mut k = [0u8; 8];
    k.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(k)
}

/// Open sessions per (site, visitor). Memory is bounded by the visitors seen within one
/// timeout of processing time.
pub struct SessionTracker {
    timeout_ms: i64,
    timeout: Duration,
    sites: HashMap<u32, HashMap<u64, Session>>,
    origin: Instant,
    last_sweep: Duration,
}

impl Default for SessionTracker {
    fn default() -> Self {
        Self::new(DEFAULT_TIMEOUT)
    }
}

impl SessionTracker {
    pub fn new(timeout: Duration) -> Self {
        SessionTracker {
            timeout_ms: i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX),
            timeout,
            sites: HashMap::new(),
            origin: Instant::now(),
            last_sweep: Duration::ZERO,
        }
    }

    /// The session id of an event of `visitor` on `site_id` at `event_ts_ms`. An event
    /// more than the timeout after the visitor's last one starts a new session; an event
    /// earlier than the last one (slightly out of order) stays in the current session,
    /// unless it is earlier than the session's start by more than the timeout, in which
    /// case it belongs to a session already forgotten and gets that session's id as if it
    /// started there, without disturbing the current one.
    pub fn observe(&mut self, site_id: u32, visitor: &str, event_ts_ms: i64) -> String {
        let now = self.origin.elapsed();
        self.observe_at(site_id, visitor, event_ts_ms, now)
    }

    /// `observe` with the processing time given (since the tracker's origin), for tests.
    pub fn observe_at(
        &mut self,
        site_id: u32,
        visitor: &str,
        event_ts_ms: i64,
        now: Duration,
    ) -> String {
        if now.saturating_sub(self.last_sweep) >= SWEEP_EVERY {
            self.evict_idle(now);
        }
        let timeout = self.timeout_ms;
        let seen_secs = u32::try_from(now.as_secs()).unwrap_or(u32::MAX);
        let visitors = self.sites.entry(site_id).or_default();
        let key = visitor_key(visitor);
        if let Some(session) = visitors.get_mut(&key) {
            session.seen_secs = seen_secs;
            let last_ms = session.last_ms();
            if event_ts_ms >= last_ms {
                if event_ts_ms - last_ms <= timeout {
                    session.set_last_ms(event_ts_ms);
                    return session_id(site_id, visitor, session.start_ms);
                }
            } else if event_ts_ms >= session.start_ms.saturating_sub(timeout) {
                return session_id(site_id, visitor, session.start_ms);
            } else {
                return session_id(site_id, visitor, event_ts_ms);
            }
        }
        visitors.insert(
            key,
            Session {
                start_ms: event_ts_ms,
                last_after_start_ms: 0,
                seen_secs,
            },
        );
        session_id(site_id, visitor, event_ts_ms)
    }

    /// Forgets visitors not seen for longer than the timeout before `now` (processing
    /// time since the tracker's origin). `observe` calls it once a minute.
    pub fn evict_idle(&mut self, now: Duration) {
        self.last_sweep = now;
        let (now, timeout) = (now.as_secs(), self.timeout.as_secs());
        self.sites.retain(|_, visitors| {
            visitors.retain(|_, s| now.saturating_sub(u64::from(s.seen_secs)) <= timeout);
            !visitors.is_empty()
        });
    }

    /// Forgets everything (the partition was revoked: another consumer owns it now).
    pub fn clear(&mut self) {
        self.sites.clear();
    }

    /// Number of visitors with an open session.
    pub fn len(&self) -> usize {
        self.sites.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }
}

/// The first 128 bits of SHA-256 over (site, visitor, session start), as 32 hex characters.
fn session_id(site_id: u32, visitor: &str, start_ms: i64) -> String {
    let mut h = Sha256::new();
    h.update(b"rivulet session\0");
    h.update(site_id.to_be_bytes());
    h.update(start_ms.to_be_bytes());
    h.update(visitor.as_bytes());
    hex::encode(&h.finalize()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;
    const T0: i64 = 1_700_000_000_000;

    #[test]
    fn events_within_the_timeout_share_one_session() {
        let mut t = SessionTracker::default();
        let first = t.observe(1, "v1", T0);
        for i in 1..=20 {
            // 20 events 29 minutes apart: ~9.5 hours, never a 30-minute gap.
            assert_eq!(t.observe(1, "v1", T0 + i * 29 * MIN), first, "event {i}");
        }
        assert_eq!(first.len(), 32);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_gap_longer_than_the_timeout_starts_a_new_session() {
        let mut t = SessionTracker::default();
        let first = t.observe(1, "v1", T0);
        assert_eq!(
            t.observe(1, "v1", T0 + 30 * MIN),
            first,
            "exactly 30 minutes is still the same"
        );
        let second = t.observe(1, "v1", T0 + 61 * MIN);
        assert_ne!(second, first);
        assert_eq!(t.observe(1, "v1", T0 + 62 * MIN), second);
    }

    #[test]
    fn sites_and_visitors_have_their_own_sessions() {
        let mut t = SessionTracker::default();
        let a = t.observe(1, "v1", T0);
        let b = t.observe(2, "v1", T0);
        let c = t.observe(1, "v2", T0);
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_ne!(b, c);
        assert_eq!(t.observe(1, "v1", T0 + MIN), a);
        assert_eq!(t.observe(2, "v1", T0 + MIN), b);
    }

    #[test]
    fn slightly_out_of_order_events_stay_in_the_session() {
        let mut t = SessionTracker::default();
        let first = t.observe(1, "v1", T0);
        assert_eq!(t.observe(1, "v1", T0 + 10 * MIN), first);
        assert_eq!(t.observe(1, "v1", T0 + 5 * MIN), first);
        assert_eq!(t.observe(1, "v1", T0 - 2 * MIN), first);
        // The late event did not move the session's end back: +39 min is 29 after +10.
        assert_eq!(t.observe(1, "v1", T0 + 39 * MIN), first);
    }

    #[test]
    fn a_very_late_event_gets_its_own_session_without_breaking_the_current_one() {
        let mut t = SessionTracker::default();
        let current = t.observe(1, "v1", T0);
        let late = t.observe(1, "v1", T0 - 3 * 60 * MIN);
        assert_ne!(late, current);
        assert_eq!(t.observe(1, "v1", T0 + MIN), current);
    }

    #[test]
    fn ids_are_deterministic_so_a_replay_gives_the_same_ids() {
        let events = [T0, T0 + MIN, T0 + 45 * MIN, T0 + 46 * MIN];
        let run = || {
            let mut t = SessionTracker::default();
            events
                .iter()
                .map(|ts| t.observe(7, "visitor", *ts))
                .collect::<Vec<_>>()
        };
        let first = run();
        assert_eq!(first, run());
        assert_eq!(first[0], session_id(7, "visitor", T0));
        assert_eq!(first[2], session_id(7, "visitor", T0 + 45 * MIN));
        assert_eq!(first[0].len(), 32);
    }

    #[test]
    fn idle_visitors_are_evicted_by_processing_time_and_clear_forgets_all() {
        let mut t = SessionTracker::default();
        let at = |m: u64| Duration::from_secs(m * 60);
        t.observe_at(1, "old", T0, at(0));
        t.observe_at(2, "recent", T0 + 20 * MIN, at(20));
        t.evict_idle(at(31));
        assert_eq!(t.len(), 1);
        assert_eq!(t.sites.len(), 1, "empty sites are dropped");

        // Automatic sweep as processing time advances.
        t.observe_at(3, "new", T0 + 120 * MIN, at(120));
        assert_eq!(t.len(), 1);

        t.clear();
        assert!(t.is_empty());
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_visitor_with_an_old_clock_keeps_its_session_beside_fresh_events() {
        // One partition: a backfilling visitor three hours behind, and a live one.
        let mut t = SessionTracker::default();
        let at = |s: u64| Duration::from_secs(s);
        let old = t.observe_at(1, "backfill", T0, at(0));
        t.observe_at(1, "live", T0 + 180 * MIN, at(1));
        t.observe_at(1, "live", T0 + 182 * MIN, at(70));
        assert_eq!(t.observe_at(1, "backfill", T0 + 5 * MIN, at(71)), old);
    }

    #[test]
    fn timeout_is_configurable() {
        let mut t = SessionTracker::new(Duration::from_secs(60));
        let first = t.observe(1, "v1", T0);
        assert_eq!(t.observe(1, "v1", T0 + 60_000), first);
        assert_ne!(t.observe(1, "v1", T0 + 120_001), first);
    }

    #[test]
    fn visitor_ids_and_user_ids_map_to_distinct_keys() {
        let vid = "0123456789abcdef0123456789abcdef";
        assert_eq!(visitor_key(vid), 0x0123456789abcdef);
        assert_ne!(visitor_key("user-1"), visitor_key("user-2"));
        assert_ne!(
            visitor_key(vid),
            visitor_key("0123456789ABCDEF0123456789ABCDEZ")
        );
        let mut t = SessionTracker::default();
        let a = t.observe(1, vid, T0);
        let b = t.observe(1, "user-1", T0);
        assert_ne!(a, b);
        assert_eq!(t.observe(1, vid, T0 + MIN), a);
        assert_eq!(t.observe(1, "user-1", T0 + MIN), b);
        assert_eq!(t.len(), 2);
    }
}
