//! The erasure ledger as the enricher, `replay` and `import` hold it (docs/privacy.md): the
//! ids erased, each with when, so that an erased person's events that come back — a
//! Kafka redelivery, a replay of `events.raw`, an import, a message still in flight — are
//! never stored again.
//!
//! An event is dropped when its `user_id` or `anonymous_id` was erased on its site, and
//! it happened or arrived before the erasure (an event of a person who comes back later
//! is theirs to keep), or at any time if the erasure asked to suppress the id.
//!
//! Ids are held as 64-bit hashes: ~24 bytes an id, and a batch waiting to be inserted can
//! be checked again by its rows' hashes. The ledger follows the table as it grows
//! (`keep_fresh`); `fresh_within` tells whether it is recent enough for an insert.

use rivulet_common::ch::Db;
use rivulet_common::privacy::{IdKind, LedgerRow, LEDGER_TABLE};
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

/// How far back each refresh reads rows by the time they were written, so that a row
/// written late (a slow replica, a clock behind) is not missed.
const REREAD: Duration = Duration::from_secs(600);

/// The hash of an id, as the ledger keys it.
pub fn id_hash(id: &str) -> u64 {
    let mut h = DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Erasure {
    /// The latest erasure of the id (ms).
    erased_at_ms: u64,
    suppress: bool,
}

/// What identifies an event for the ledger, by hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventIds {
    pub site_id: u32,
    pub user: u64,
    /// `None` for an event without an anonymous id.
    pub anonymous: Option<u64>,
    pub timestamp_ms: u64,
    pub received_at_ms: u64,
}

impl EventIds {
    pub fn new(
        site_id: u32,
        user_id: &str,
        anonymous_id: &str,
        timestamp_ms: i64,
        received_at_ms: i64,
    ) -> Self {
        EventIds {
            site_id,
            user: id_hash(user_id),
            anonymous: (!anonymous_id.is_empty()).then(|| id_hash(anonymous_id)),
            timestamp_ms: u64::try_from(timestamp_ms).unwrap_or(0),
            received_at_ms: u64::try_from(received_at_ms).unwrap_or(0),
        }
    }
}

#[derive(Default)]
pub struct Ledger {
    ids: RwLock<HashMap<(u32, IdKind, u64), Erasure>>,
    /// Moves on whenever an id is added: a batch filtered at an older generation is
    /// checked again before it is inserted.
    generation: AtomicU64,
    /// The newest `added_at_ms` read.
    cursor_ms: AtomicU64,
    fresh_at: Mutex<Option<Instant>>,
}

impl Ledger {
    pub fn new() -> Self {
        Ledger::default()
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn len(&self) -> usize {
        self.ids
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the ledger was read from ClickHouse less than `age` ago.
    pub fn fresh_within(&self, age: Duration) -> bool {
        self.fresh_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|t| t.elapsed() < age)
    }

    /// Whether the event must not be stored.
    pub fn erases(&self, ev: &EventIds) -> bool {
        let ids = self.ids.read().unwrap_or_else(PoisonError::into_inner);
        if ids.is_empty() {
            return false;
        }
        let hit = |kind, hash| {
            ids.get(&(ev.site_id, kind, hash)).is_some_and(|e| {
                e.suppress || ev.timestamp_ms < e.erased_at_ms || ev.received_at_ms < e.erased_at_ms
            })
        };
        hit(IdKind::UserId, ev.user) || ev.anonymous.is_some_and(|a| hit(IdKind::AnonymousId, a))
    }

    /// Adds rows of the ledger table.
    pub fn add(&self, rows: &[LedgerRow]) {
        if rows.is_empty() {
            return;
        }
        let mut added = false;
        {
            let mut ids = self.ids.write().unwrap_or_else(PoisonError::into_inner);
            for r in rows {
                let Some(kind) = IdKind::parse(&r.id_kind) else {
                    continue;
                };
                let new = Erasure {
                    erased_at_ms: r.erased_at_ms,
                    suppress: r.suppress == 1,
                };
                let entry = ids
                    .entry((r.site_id, kind, id_hash(&r.id)))
                    .or_insert(Erasure {
                        erased_at_ms: 0,
                        suppress: false,
                    });
                let merged = Erasure {
                    erased_at_ms: entry.erased_at_ms.max(new.erased_at_ms),
                    suppress: entry.suppress || new.suppress,
                };
                if merged != *entry {
                    *entry = merged;
                    added = true;
                }
                self.cursor_ms.fetch_max(r.added_at_ms, Ordering::AcqRel);
            }
        }
        if added {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Reads the rows written since the last read (and a while before, for late ones).
    pub async fn refresh(&self, db: &Db) -> Result<(), clickhouse::error::Error> {
        let since = self
            .cursor_ms
            .load(Ordering::Acquire)
            .saturating_sub(REREAD.as_millis() as u64);
        let rows: Vec<LedgerRow> = db
            .client
            .query(rivulet_common::schema::queries::LEDGER_SINCE)
            .bind(since)
            .fetch_all()
            .await?;
        self.add_read(&rows);
        Ok(())
    }

    /// Adds rows just read from the table: the ledger is as fresh as that read.
    pub fn add_read(&self, rows: &[LedgerRow]) {
        self.add(rows);
        *self.fresh_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        metrics::gauge!("enricher_erasure_ledger_ids").set(self.len() as f64);
    }

    /// Keeps the ledger fresh until the process ends, reading it every `every`.
    pub async fn keep_fresh(self: std::sync::Arc<Self>, db: Db, every: Duration) {
        let mut failing = false;
        loop {
            match self.refresh(&db).await {
                Ok(()) if failing => {
                    tracing::info!(table = LEDGER_TABLE, "the erasure ledger is read again");
                    failing = false;
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    tracing::warn!(error = %e, "the erasure ledger could not be read; inserts wait until it is");
                    failing = true;
                }
                Err(_) => {}
            }
            tokio::time::sleep(every).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, id: &str, at: u64, suppress: u8) -> LedgerRow {
        LedgerRow {
            site_id: 1,
            id_kind: kind.into(),
            id: id.into(),
            erased_at_ms: at,
            request_id: "er_1".into(),
            suppress,
            added_at_ms: at,
        }
    }

    #[test]
    fn events_before_the_erasure_are_dropped_later_ones_kept_unless_suppressed() {
        let l = Ledger::new();
        assert!(!l.erases(&EventIds::new(1, "u", "", 1, 1)));
        let g = l.generation();
        l.add(&[
            row("user_id", "u", 1_000, 0),
            row("anonymous_id", "dev", 1_000, 0),
        ]);
        assert!(l.generation() > g);
        // Happened or arrived before the erasure: a redelivery, a replay, an import.
        assert!(l.erases(&EventIds::new(1, "u", "", 999, 5_000)));
        assert!(l.erases(&EventIds::new(1, "u", "", 5_000, 999)));
        // Under its anonymous id, whatever the user id.
        assert!(l.erases(&EventIds::new(1, "visitor-hash", "dev", 500, 500)));
        // The person came back: kept. Another site's same id: kept.
        assert!(!l.erases(&EventIds::new(1, "u", "", 2_000, 2_000)));
        assert!(!l.erases(&EventIds::new(2, "u", "", 500, 500)));
        l.add(&[row("user_id", "u", 1_000, 1)]);
        assert!(
            l.erases(&EventIds::new(1, "u", "", 9_000, 9_000)),
            "suppressed"
        );
        // The same rows again change nothing.
        let g = l.generation();
        l.add(&[row("user_id", "u", 1_000, 1)]);
        assert_eq!(l.generation(), g);
    }
}
