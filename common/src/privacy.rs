//! Erasing a person (docs/privacy.md): the request and its receipt, and the erasure
//! ledger that keeps an erased person's events from coming back.
//!
//! A request is recorded in two tables before it is acknowledged: the **ledger**
//! (`erasure_ledger`), one row per id to erase — the user id and every anonymous id it
//! claimed, or a visitor id — and the **receipt** (`erasure_requests`), whose state
//! moves from `pending` to `running` to `done` (or `failed`, with the reason) as new
//! versions of its row. The enricher, `replay` and `import` consult the ledger for every
//! event; the lifecycle runner (in the enricher) deletes what is stored and writes the
//! receipt's states.

use crate::ch::Db;
use crate::schema::queries;
use crate::CommonError;
use clickhouse::Row;
use serde::{Deserialize, Serialize};

pub const REQUESTS_TABLE: &str = "erasure_requests";
pub const LEDGER_TABLE: &str = "erasure_ledger";

/// What an erasure request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubjectKind {
    /// The caller's own user id, with the anonymous ids it claimed and its profile.
    UserId,
    /// A visitor id, as stored in `user_id` for events sent without one.
    VisitorId,
}

impl SubjectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SubjectKind::UserId => "user_id",
            SubjectKind::VisitorId => "visitor_id",
        }
    }
}

/// Which column of `events` a ledger id is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdKind {
    UserId,
    AnonymousId,
}

impl IdKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IdKind::UserId => "user_id",
            IdKind::AnonymousId => "anonymous_id",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user_id" => Some(IdKind::UserId),
            "anonymous_id" => Some(IdKind::AnonymousId),
            _ => None,
        }
    }
}

/// A receipt's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Pending,
    Running,
    Done,
    Failed,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Running => "running",
            State::Done => "done",
            State::Failed => "failed",
        }
    }
}

/// One version of a receipt (`erasure_requests`).
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct Receipt {
    pub request_id: String,
    pub site_id: u32,
    pub subject_kind: String,
    pub subject: String,
    pub suppress: u8,
    pub requested_at_ms: u64,
    pub state: String,
    pub reason: String,
    pub rows_removed: u64,
    /// The ids erased, as a JSON array of `["user_id"|"anonymous_id", id]`.
    pub ids: String,
    pub updated_at_ms: u64,
    pub version: u64,
}

impl Receipt {
    pub fn is_finished(&self) -> bool {
        self.state == State::Done.as_str() || self.state == State::Failed.as_str()
    }

    /// The receipt in `state`, as a newer version.
    pub fn with_state(&self, state: State, reason: &str, rows_removed: u64) -> Receipt {
        let now = crate::epoch::now_ms() as u64;
        Receipt {
            state: state.as_str().to_string(),
            reason: reason.to_string(),
            rows_removed,
            updated_at_ms: now,
            version: (self.version + 1).max(now * 1000),
            ..self.clone()
        }
    }
}

/// One id of the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct LedgerRow {
    pub site_id: u32,
    pub id_kind: String,
    pub id: String,
    pub erased_at_ms: u64,
    pub request_id: String,
    pub suppress: u8,
    pub added_at_ms: u64,
}

/// One row of `retention_runs`: when retention pruned a site, up to when, and how many
/// rows it removed.
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct RetentionRun {
    pub site_id: u32,
    pub ran_at: u32,
    pub cutoff: u32,
    pub rows_removed: u64,
}

/// The most characters an id to erase may have (the longest id Rivulet stores).
const MAX_ID_CHARS: usize = 255;

/// Records a request to erase `subject` of `site_id`: its ledger rows, then its receipt,
/// `pending`. Returns the receipt. With `suppress`, ingest and the enricher drop the ids'
/// events from then on too, instead of storing a person who comes back.
pub async fn request_erasure(
    db: &Db,
    site_id: u32,
    kind: SubjectKind,
    subject: &str,
    suppress: bool,
) -> Result<Receipt, CommonError> {
    check_subject(kind, subject)?;
    let mut ids = vec![(IdKind::UserId, subject.to_string())];
    if kind == SubjectKind::UserId {
        // The person as a whole: every anonymous id they claimed (identify), whether
        // their claim won or lost. The runner adds those claimed later and those their
        // own events link to them (the enricher's lifecycle).
        let aliases: Vec<String> = db
            .client
            .query(queries::CLAIMS_OF_USER)
            .bind(site_id)
            .bind(subject)
            .fetch_all()
            .await?;
        ids.extend(aliases.into_iter().map(|a| (IdKind::AnonymousId, a)));
    }
    let (ledger, receipt) = new_request(
        site_id,
        kind,
        subject,
        &ids,
        suppress,
        crate::epoch::now_ms() as u64,
    );
    write_ledger(db, &ledger).await?;
    write_receipt(db, &receipt).await?;
    Ok(receipt)
}

/// How many bytes of user ids one read of their aliases names (ClickHouse parses at
/// most `max_query_size`, 256 KiB by default, of a statement).
const ALIAS_LOOKUP_BYTES: usize = 64 * 1024;

/// Records the erasure of many people of one site at once, as `request_erasure` does for
/// one: their aliases read in a few queries, then every ledger row in one insert and
/// every receipt, `pending`, in another. A subject named twice is recorded once. Returns
/// the receipts, in the order of `subjects`. The lifecycle runner erases them together
/// (one set of mutations per batch of up to `ERASURE_BATCH_MAX` requests).
pub async fn request_erasures(
    db: &Db,
    site_id: u32,
    kind: SubjectKind,
    subjects: &[String],
    suppress: bool,
) -> Result<Vec<Receipt>, CommonError> {
    let mut seen = std::collections::HashSet::new();
    let subjects: Vec<&str> = subjects
        .iter()
        .map(String::as_str)
        .filter(|s| seen.insert(*s))
        .collect();
    for subject in &subjects {
        check_subject(kind, subject)?;
    }
    let mut aliases: std::collections::HashMap<String, Vec<String>> =
        std::collections::HashMap::new();
    if kind == SubjectKind::UserId {
        let mut rest = subjects.as_slice();
        while !rest.is_empty() {
            let mut bytes = 0;
            let n = rest
                .iter()
                .take_while(|s| {
                    bytes += s.len() + 4;
                    bytes <= ALIAS_LOOKUP_BYTES
                })
                .count()
                .max(1);
            let (chunk, tail) = rest.split_at(n);
            rest = tail;
            let rows: Vec<(String, String)> = db
                .client
                .query(queries::CLAIMS_OF_USERS)
                .bind(site_id)
                .bind(chunk)
                .fetch_all()
                .await?;
            for (anonymous_id, owner) in rows {
                aliases.entry(owner).or_default().push(anonymous_id);
            }
        }
    }
    let now = crate::epoch::now_ms() as u64;
    let mut ledger = Vec::new();
    let mut receipts = Vec::with_capacity(subjects.len());
    for subject in subjects {
        let mut ids = vec![(IdKind::UserId, subject.to_string())];
        if let Some(claimed) = aliases.remove(subject) {
            ids.extend(claimed.into_iter().map(|a| (IdKind::AnonymousId, a)));
        }
        let (rows, receipt) = new_request(site_id, kind, subject, &ids, suppress, now);
        ledger.extend(rows);
        receipts.push(receipt);
    }
    if receipts.is_empty() {
        return Ok(receipts);
    }
    write_ledger(db, &ledger).await?;
    write_receipts(db, &receipts).await?;
    Ok(receipts)
}

fn check_subject(kind: SubjectKind, subject: &str) -> Result<(), CommonError> {
    if subject.is_empty() || subject.chars().count() > MAX_ID_CHARS {
        return Err(CommonError::Invalid(format!(
            "the {} to erase must be 1 to {MAX_ID_CHARS} characters",
            kind.as_str()
        )));
    }
    Ok(())
}

/// The ledger rows and the `pending` receipt of a request to erase `ids`.
fn new_request(
    site_id: u32,
    kind: SubjectKind,
    subject: &str,
    ids: &[(IdKind, String)],
    suppress: bool,
    now: u64,
) -> (Vec<LedgerRow>, Receipt) {
    let request_id = format!("er_{}", uuid::Uuid::now_v7().simple());
    let ledger: Vec<LedgerRow> = ids
        .iter()
        .map(|(k, id)| LedgerRow {
            site_id,
            id_kind: k.as_str().to_string(),
            id: id.clone(),
            erased_at_ms: now,
            request_id: request_id.clone(),
            suppress: u8::from(suppress),
            added_at_ms: now,
        })
        .collect();
    let receipt = Receipt {
        request_id,
        site_id,
        subject_kind: kind.as_str().to_string(),
        subject: subject.to_string(),
        suppress: u8::from(suppress),
        requested_at_ms: now,
        state: State::Pending.as_str().to_string(),
        reason: String::new(),
        rows_removed: 0,
        ids: serde_json::to_string(
            &ids.iter()
                .map(|(k, id)| (k.as_str(), id.as_str()))
                .collect::<Vec<_>>(),
        )
        .expect("ids as JSON"),
        updated_at_ms: now,
        version: now * 1000,
    };
    (ledger, receipt)
}

/// Adds ids to requests already recorded (the runner: claims made since, and anonymous
/// ids a person's events link to them): ledger rows under each request's id and time,
/// so that every reader drops their events as it does the request's first ids.
pub async fn extend_requests(
    db: &Db,
    added: &[(&Receipt, IdKind, String)],
) -> Result<(), CommonError> {
    if added.is_empty() {
        return Ok(());
    }
    let now = crate::epoch::now_ms() as u64;
    let rows: Vec<LedgerRow> = added
        .iter()
        .map(|(r, kind, id)| LedgerRow {
            site_id: r.site_id,
            id_kind: kind.as_str().to_string(),
            id: id.clone(),
            erased_at_ms: r.requested_at_ms,
            request_id: r.request_id.clone(),
            suppress: r.suppress,
            added_at_ms: now,
        })
        .collect();
    write_ledger(db, &rows).await
}

/// Writes a version of a receipt. Receipts and the ledger are written with the events'
/// durability settings (on a cluster, a quorum of replicas).
pub async fn write_receipt(db: &Db, receipt: &Receipt) -> Result<(), CommonError> {
    let mut insert = db.events.insert::<Receipt>(REQUESTS_TABLE).await?;
    insert.write(receipt).await?;
    insert.end().await?;
    Ok(())
}

/// Writes receipts in one insert.
async fn write_receipts(db: &Db, receipts: &[Receipt]) -> Result<(), CommonError> {
    let mut insert = db.events.insert::<Receipt>(REQUESTS_TABLE).await?;
    for receipt in receipts {
        insert.write(receipt).await?;
    }
    insert.end().await?;
    Ok(())
}

async fn write_ledger(db: &Db, rows: &[LedgerRow]) -> Result<(), CommonError> {
    let mut insert = db.events.insert::<LedgerRow>(LEDGER_TABLE).await?;
    for row in rows {
        insert.write(row).await?;
    }
    insert.end().await?;
    Ok(())
}

/// The latest version of every receipt, of one site or all, newest first.
pub async fn receipts(db: &Db, site_id: Option<u32>) -> Result<Vec<Receipt>, CommonError> {
    let rows = match site_id {
        Some(site) => db.client.query(queries::RECEIPTS_OF_SITE).bind(site),
        None => db.client.query(queries::RECEIPTS_ALL),
    };
    Ok(rows.fetch_all().await?)
}

/// The latest version of one receipt.
pub async fn receipt(db: &Db, request_id: &str) -> Result<Option<Receipt>, CommonError> {
    Ok(db
        .client
        .query(queries::RECEIPT_BY_ID)
        .bind(request_id)
        .fetch_optional()
        .await?)
}

/// Receipts not finished, oldest first: what the runner has to do.
pub async fn unfinished(db: &Db) -> Result<Vec<Receipt>, CommonError> {
    Ok(db
        .client
        .query(queries::RECEIPTS_UNFINISHED)
        .fetch_all()
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_state_is_a_newer_version() {
        let r = Receipt {
            request_id: "er_1".into(),
            site_id: 1,
            subject_kind: "user_id".into(),
            subject: "u".into(),
            suppress: 0,
            requested_at_ms: 1,
            state: "pending".into(),
            reason: String::new(),
            rows_removed: 0,
            ids: "[]".into(),
            updated_at_ms: 1,
            version: u64::MAX - 5,
        };
        let done = r.with_state(State::Done, "", 7);
        assert!(done.version > r.version);
        assert!(done.is_finished() && !r.is_finished());
        assert_eq!((done.state.as_str(), done.rows_removed), ("done", 7));
        assert_eq!(IdKind::parse("anonymous_id"), Some(IdKind::AnonymousId));
    }
}
