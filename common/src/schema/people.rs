//! The people of a site (migration 7): every claim of an anonymous id by a user, and each
//! user's traits, each write marked with whether it came with an API key. Written by the
//! enricher from `POST /api/identify`; read at query time, so an identify never rewrites
//! stored events (docs/design.md, "Identity").
//!
//! Which write wins is decided by trust and server time, never by a client's clock: a
//! write made with a key (`trusted = 1`) outranks any made without one (the browser
//! path, whose only credential is an `Origin` header anyone can send), and among writes
//! of equal trust the server's `received_at` orders them.

use clickhouse::Row;
use serde::{Deserialize, Serialize};

pub const CLAIMS_TABLE: &str = "person_claims";
pub const TRAITS_TABLE: &str = "person_trait_values";

pub use crate::event::KEYLESS_KEY_ID;

/// Bit of a claim's rank that a keyed claim sets: above every time a rank can hold.
const TRUSTED_RANK: u64 = 1 << 62;

/// `person_claims`: user `user_id` claimed `anonymous_id`. One row per (anonymous id,
/// user), so a claim that lost is kept: erasing a user erases every anonymous id they
/// claimed, won or lost. The anonymous id's owner is the user of its highest `rank`: a
/// keyed claim beats any keyless one, and among claims of equal trust the first received
/// wins (a shared device keeps its first owner). ReplacingMergeTree(rank) keeps the
/// strongest claim of each pair.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct ClaimRow {
    pub site_id: u32,
    pub anonymous_id: String,
    pub user_id: String,
    /// 1 when the identify call came with an API key.
    pub trusted: u8,
    /// When the client says identify was called (shown, never compared).
    pub claimed_at_ms: u64,
    /// When ingest received it.
    pub received_at_ms: u64,
    pub rank: u64,
}

/// A claim's rank: trust first, then the earlier receipt.
pub fn claim_rank(trusted: bool, received_at_ms: u64) -> u64 {
    let time = TRUSTED_RANK - 1 - received_at_ms.min(TRUSTED_RANK - 1);
    if trusted {
        TRUSTED_RANK | time
    } else {
        time
    }
}

/// `person_trait_values`: one trait of a user as set (or removed, `removed = 1`) by the
/// latest write of one trust level; one row per (user, name, trust), the latest received
/// kept. Readers take the keyed value when there is one: a keyless write never changes a
/// trait a keyed call set.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct TraitRow {
    pub site_id: u32,
    pub user_id: String,
    pub name: String,
    pub trusted: u8,
    /// The trait's JSON.
    pub value: String,
    pub removed: u8,
    /// When the client says identify was called (shown, never compared).
    pub set_at_ms: u64,
    pub received_at_ms: u64,
}

/// One identify call as the enricher stores it.
#[derive(Debug, Clone, Copy)]
pub struct Identify<'a> {
    pub site_id: u32,
    pub user_id: &'a str,
    pub anonymous_id: Option<&'a str>,
    /// A JSON object; a null value removes the trait.
    pub traits_json: Option<&'a str>,
    /// Whether it came with an API key.
    pub trusted: bool,
    /// The client's time of the call, epoch ms.
    pub at_ms: i64,
    /// The server's, epoch ms.
    pub received_at_ms: i64,
}

/// The rows one identify call writes: a claim when it names an anonymous id, and a row
/// per trait. Traits that are not an object are ignored (ingest has checked them).
pub fn identify_rows(id: &Identify<'_>) -> (Option<ClaimRow>, Vec<TraitRow>) {
    let at = u64::try_from(id.at_ms).unwrap_or(0);
    let received = u64::try_from(id.received_at_ms).unwrap_or(0);
    let trusted = u8::from(id.trusted);
    let claim = id.anonymous_id.filter(|a| !a.is_empty()).map(|a| ClaimRow {
        site_id: id.site_id,
        anonymous_id: a.to_string(),
        user_id: id.user_id.to_string(),
        trusted,
        claimed_at_ms: at,
        received_at_ms: received,
        rank: claim_rank(id.trusted, received),
    });
    let traits = id
        .traits_json
        .and_then(|t| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(t).ok())
        .map(|map| {
            map.into_iter()
                .map(|(name, value)| TraitRow {
                    site_id: id.site_id,
                    user_id: id.user_id.to_string(),
                    trusted,
                    removed: u8::from(value.is_null()),
                    value: if value.is_null() {
                        String::new()
                    } else {
                        value.to_string()
                    },
                    name,
                    set_at_ms: at,
                    received_at_ms: received,
                })
                .collect()
        })
        .unwrap_or_default();
    (claim, traits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call<'a>(anon: Option<&'a str>, traits: Option<&'a str>, trusted: bool) -> Identify<'a> {
        Identify {
            site_id: 3,
            user_id: "u1",
            anonymous_id: anon,
            traits_json: traits,
            trusted,
            at_ms: 1_000,
            received_at_ms: 5_000,
        }
    }

    #[test]
    fn an_identify_makes_a_claim_and_a_row_per_trait() {
        let (claim, traits) = identify_rows(&call(
            Some("dev-1"),
            Some(r#"{"plan":"pro","seats":5,"old":null}"#),
            true,
        ));
        let claim = claim.unwrap();
        assert_eq!(
            (claim.anonymous_id.as_str(), claim.user_id.as_str()),
            ("dev-1", "u1")
        );
        assert_eq!(
            (claim.trusted, claim.claimed_at_ms, claim.received_at_ms),
            (1, 1_000, 5_000)
        );
        let by_name: std::collections::BTreeMap<_, _> = traits
            .iter()
            .map(|t| (t.name.as_str(), (t.value.as_str(), t.removed, t.trusted)))
            .collect();
        assert_eq!(by_name["plan"], ("\"pro\"", 0, 1));
        assert_eq!(by_name["seats"], ("5", 0, 1));
        assert_eq!(by_name["old"], ("", 1, 1));
        assert_eq!(identify_rows(&call(None, None, false)).0, None);
        assert!(identify_rows(&call(Some(""), Some("[1]"), false))
            .1
            .is_empty());
    }

    #[test]
    fn a_keyed_claim_outranks_every_keyless_one_and_then_the_first_received_wins() {
        let keyed_late = claim_rank(true, 9_000_000_000_000);
        let keyless_early = claim_rank(false, 0);
        assert!(keyed_late > keyless_early);
        assert!(claim_rank(true, 1_000) > claim_rank(true, 2_000));
        assert!(claim_rank(false, 1_000) > claim_rank(false, 2_000));
        // A time beyond what a rank holds cannot reach the trust bit.
        assert!(claim_rank(false, u64::MAX) < claim_rank(true, u64::MAX));
    }
}
