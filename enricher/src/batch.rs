//! A batch of rows waiting to be inserted, RowBinary-encoded, with the next offset to
//! store per partition once they are in ClickHouse.
//!
//! The rows are kept in chunks of ~1 MiB rather than one buffer of the whole batch: the
//! allocator recycles chunks freed by the last insert for the next batch, where a fresh
//! 16 MB buffer per batch (allocated on the enrich thread, freed on an I/O thread) was
//! held back by the allocator (docs/decisions/005-enricher-throughput-and-memory.md). A
//! row never spans two chunks.
//!
//! Each row also keeps what identifies its person for the erasure ledger (`RowRef`), so
//! that a batch built before an erasure reached the ledger is checked again, and its
//! erased rows cut out, before it is inserted (`Pending::without_erased`).

use bytes::Bytes;
use rivulet_common::event::IdentifyMessage;
use rivulet_common::schema::events::EventRow;
use rivulet_common::schema::people::{self, ClaimRow, TraitRow};
use rivulet_enrichment::ledger::{EventIds, Ledger};
use std::collections::HashMap;
use std::time::Instant;

/// Size at which a chunk is closed and a new one started.
const CHUNK_BYTES: usize = 1 << 20;
/// An upper bound of one encoded row: the validated fields' limits add up to ~20 KB.
const MAX_ROW_BYTES: usize = 64 * 1024;

/// Where one encoded row is, and whose it is.
#[derive(Clone, Copy, Debug)]
pub struct RowRef {
    pub ids: EventIds,
    chunk: usize,
    start: usize,
    end: usize,
}

/// The rows of `person_claims` and `person_trait_values` a batch's identify calls make.
#[derive(Default)]
pub struct People {
    pub claims: Vec<ClaimRow>,
    pub traits: Vec<TraitRow>,
}

impl People {
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.traits.is_empty()
    }

    /// The rows of ids the ledger erases.
    fn drop_erased(&mut self, ledger: &Ledger) -> usize {
        let before = self.claims.len() + self.traits.len();
        let at = |site, user: &str, anonymous: &str, at_ms: u64, received_ms: u64| {
            EventIds::new(site, user, anonymous, at_ms as i64, received_ms as i64)
        };
        self.claims.retain(|c| {
            !ledger.erases(&at(
                c.site_id,
                &c.user_id,
                &c.anonymous_id,
                c.claimed_at_ms,
                c.received_at_ms,
            ))
        });
        self.traits.retain(|t| {
            !ledger.erases(&at(
                t.site_id,
                &t.user_id,
                "",
                t.set_at_ms,
                t.received_at_ms,
            ))
        });
        before - self.claims.len() - self.traits.len()
    }
}

#[derive(Default)]
pub struct Batch {
    chunks: Vec<Bytes>,
    current: Vec<u8>,
    index: Vec<RowRef>,
    /// What identify calls write: few, so kept as rows.
    people: People,
    started: Option<Instant>,
    pub next_offsets: HashMap<i32, i64>,
    /// The ledger's generation when the batch began: its rows were checked against at
    /// least that much of the ledger.
    generation: Option<u64>,
}

impl Batch {
    /// Starts a batch whose rows are checked against `ledger` as it is now.
    pub fn new(ledger: &Ledger) -> Self {
        Batch {
            generation: Some(ledger.generation()),
            ..Batch::default()
        }
    }

    /// A message that adds no row (a DLQ message, an erased event) still moves its
    /// partition's offset once the batch is in.
    pub fn note(&mut self, partition: i32, offset: i64) {
        self.started.get_or_insert_with(Instant::now);
        let next = self.next_offsets.entry(partition).or_insert(offset + 1);
        *next = (*next).max(offset + 1);
    }

    pub fn push(&mut self, row: &EventRow, ids: EventIds, partition: i32, offset: i64) {
        if self.current.capacity() == 0 {
            // Room for a full chunk and one more row: a chunk is allocated once.
            self.current.reserve_exact(CHUNK_BYTES + MAX_ROW_BYTES);
        }
        let start = self.current.len();
        row.write_row_binary(&mut self.current);
        self.index.push(RowRef {
            ids,
            chunk: self.chunks.len(),
            start,
            end: self.current.len(),
        });
        if self.current.len() >= CHUNK_BYTES {
            self.chunks
                .push(Bytes::from(std::mem::take(&mut self.current)));
        }
        self.note(partition, offset);
    }

    /// An identify call: its claim and trait rows, ranked by whether it came with a key.
    pub fn push_identify(&mut self, id: &IdentifyMessage, partition: i32, offset: i64) {
        let (claim, traits) = people::identify_rows(&people::Identify {
            site_id: id.site_id,
            user_id: &id.user_id,
            anonymous_id: id.anonymous_id.as_deref(),
            traits_json: id.traits.as_deref(),
            trusted: id.key_id != people::KEYLESS_KEY_ID,
            at_ms: id.timestamp,
            received_at_ms: id.received_at,
        });
        self.people.claims.extend(claim);
        self.people.traits.extend(traits);
        self.note(partition, offset);
    }

    pub fn rows(&self) -> usize {
        self.index.len()
    }

    /// Size of the encoded rows: at most ~9 chunks to add up for an 8 MiB batch.
    pub fn encoded_bytes(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum::<usize>() + self.current.len()
    }

    pub fn started(&self) -> Option<Instant> {
        self.started
    }

    pub fn is_empty(&self) -> bool {
        self.started.is_none()
    }

    /// What the insert needs, and the offsets to store once it is done.
    pub fn into_parts(mut self) -> (Pending, HashMap<i32, i64>) {
        if !self.current.is_empty() {
            self.chunks.push(Bytes::from(self.current));
        }
        let pending = Pending {
            chunks: self.chunks,
            index: self.index,
            people: self.people,
            generation: self.generation.unwrap_or(0),
        };
        (pending, self.next_offsets)
    }
}

/// A batch on its way to ClickHouse.
pub struct Pending {
    pub chunks: Vec<Bytes>,
    index: Vec<RowRef>,
    pub people: People,
    /// The ledger generation its rows were last checked against.
    generation: u64,
}

impl Pending {
    pub fn rows(&self) -> usize {
        self.index.len()
    }

    /// Checks the rows again if the ledger has grown since they were, and cuts out those
    /// it now erases. Returns how many were cut.
    pub fn without_erased(&mut self, ledger: &Ledger) -> usize {
        let now = ledger.generation();
        if now == self.generation {
            return 0;
        }
        self.generation = now;
        let mut cut = self.people.drop_erased(ledger);
        if !self.index.iter().any(|r| ledger.erases(&r.ids)) {
            return cut;
        }
        let mut chunks = Vec::with_capacity(self.chunks.len());
        let mut index = Vec::with_capacity(self.index.len());
        let mut rows = self.index.iter().peekable();
        for (c, chunk) in self.chunks.iter().enumerate() {
            let mut kept = Vec::with_capacity(chunk.len());
            while let Some(r) = rows.next_if(|r| r.chunk == c) {
                if ledger.erases(&r.ids) {
                    cut += 1;
                    continue;
                }
                let start = kept.len();
                kept.extend_from_slice(&chunk[r.start..r.end]);
                index.push(RowRef {
                    chunk: chunks.len(),
                    start,
                    end: kept.len(),
                    ..*r
                });
            }
            if !kept.is_empty() {
                chunks.push(Bytes::from(kept));
            }
        }
        self.chunks = chunks;
        self.index = index;
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rivulet_common::privacy::LedgerRow;

    fn row(user: &str, path_len: usize) -> EventRow {
        EventRow {
            site_id: 1,
            user_id: user.into(),
            pathname: "p".repeat(path_len),
            ..EventRow::default()
        }
    }

    fn ids(user: &str) -> EventIds {
        EventIds::new(1, user, "", 10, 10)
    }

    #[test]
    fn encoded_bytes_count_every_row_across_chunks() {
        let ledger = Ledger::new();
        let mut batch = Batch::new(&ledger);
        let mut expected = 0;
        // ~3 KB rows: a 1 MiB chunk closes after ~350 of them.
        for i in 0..1000 {
            let r = row("u", 3000 + i % 7);
            let mut one = Vec::new();
            r.write_row_binary(&mut one);
            expected += one.len();
            batch.push(&r, ids("u"), 0, i as i64);
        }
        assert!(batch.chunks.len() >= 2, "the rows span several chunks");
        assert_eq!(batch.encoded_bytes(), expected);
        let (pending, next) = batch.into_parts();
        assert_eq!(
            pending.chunks.iter().map(Bytes::len).sum::<usize>(),
            expected
        );
        assert_eq!(next[&0], 1000);
    }

    #[test]
    fn rows_erased_after_the_batch_began_are_cut_out_before_the_insert() {
        let ledger = Ledger::new();
        let mut batch = Batch::new(&ledger);
        let mut kept_bytes = Vec::new();
        for i in 0..900 {
            let user = if i % 3 == 0 { "erased" } else { "kept" };
            let r = row(user, 3000);
            if user == "kept" {
                r.write_row_binary(&mut kept_bytes);
            }
            batch.push(&r, ids(user), 0, i);
        }
        let (mut pending, _) = batch.into_parts();
        assert_eq!(
            pending.without_erased(&ledger),
            0,
            "nothing new in the ledger"
        );
        ledger.add(&[LedgerRow {
            site_id: 1,
            id_kind: "user_id".into(),
            id: "erased".into(),
            erased_at_ms: 1_000,
            request_id: "er_1".into(),
            suppress: 0,
            added_at_ms: 1_000,
        }]);
        assert_eq!(pending.without_erased(&ledger), 300);
        assert_eq!(pending.rows(), 600);
        let all: Vec<u8> = pending
            .chunks
            .iter()
            .flat_map(|c| c.iter().copied())
            .collect();
        assert_eq!(all, kept_bytes, "the kept rows, in order, byte for byte");
        assert_eq!(
            pending.without_erased(&ledger),
            0,
            "checked once per generation"
        );
    }
}
