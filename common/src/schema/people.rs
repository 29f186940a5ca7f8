//! The people of a site (migration 5): which user each anonymous id belongs to, and each
//! user's traits. Written by the enricher from `POST /api/identify`; read at query time,
//! so an identify never rewrites stored events (docs/design.md, "Identity").

use clickhouse::Row;
use serde::{Deserialize, Serialize};

pub const ALIASES_TABLE: &str = "person_aliases";
pub const TRAITS_TABLE: &str = "person_traits";

/// `person_aliases`: an anonymous id claimed by a user. The first claim wins: `version`
/// falls as the claim's time grows, and ReplacingMergeTree keeps the highest; readers
/// take `argMin(user_id, (claimed_at_ms, user_id))`, which agrees before the merge too.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct AliasRow {
    pub site_id: u32,
    pub anonymous_id: String,
    pub user_id: String,
    pub claimed_at_ms: u64,
    pub version: u64,
}

impl AliasRow {
    pub fn new(site_id: u32, anonymous_id: &str, user_id: &str, claimed_at_ms: u64) -> Self {
        AliasRow {
            site_id,
            anonymous_id: anonymous_id.to_string(),
            user_id: user_id.to_string(),
            claimed_at_ms,
            version: u64::MAX - claimed_at_ms,
        }
    }
}

/// `person_traits`: one trait of a user, set (or removed, `removed = 1`) at `set_at_ms`;
/// the latest wins. `value` is the trait's JSON.
#[derive(Debug, Clone, PartialEq, Eq, Row, Serialize, Deserialize)]
pub struct TraitRow {
    pub site_id: u32,
    pub user_id: String,
    pub name: String,
    pub value: String,
    pub removed: u8,
    pub set_at_ms: u64,
}

/// The rows one identify call writes: an alias when it names an anonymous id, and a row
/// per trait (`traits_json` is a JSON object; a null value removes the trait). Traits
/// that are not an object are ignored (ingest has checked them).
pub fn identify_rows(
    site_id: u32,
    user_id: &str,
    anonymous_id: Option<&str>,
    traits_json: Option<&str>,
    at_ms: i64,
) -> (Option<AliasRow>, Vec<TraitRow>) {
    let at = u64::try_from(at_ms).unwrap_or(0);
    let alias = anonymous_id
        .filter(|a| !a.is_empty())
        .map(|a| AliasRow::new(site_id, a, user_id, at));
    let traits = traits_json
        .and_then(|t| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(t).ok())
        .map(|map| {
            map.into_iter()
                .map(|(name, value)| TraitRow {
                    site_id,
                    user_id: user_id.to_string(),
                    removed: u8::from(value.is_null()),
                    value: if value.is_null() {
                        String::new()
                    } else {
                        value.to_string()
                    },
                    name,
                    set_at_ms: at,
                })
                .collect()
        })
        .unwrap_or_default();
    (alias, traits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identify_makes_an_alias_and_a_row_per_trait() {
        let (alias, traits) = identify_rows(
            3,
            "u1",
            Some("dev-1"),
            Some(r#"{"plan":"pro","seats":5,"old":null}"#),
            1_000,
        );
        let alias = alias.unwrap();
        assert_eq!(
            (alias.anonymous_id.as_str(), alias.user_id.as_str()),
            ("dev-1", "u1")
        );
        assert!(
            AliasRow::new(3, "dev-1", "u2", 2_000).version < alias.version,
            "an earlier claim has the higher version"
        );
        let by_name: std::collections::BTreeMap<_, _> = traits
            .iter()
            .map(|t| (t.name.as_str(), (t.value.as_str(), t.removed)))
            .collect();
        assert_eq!(by_name["plan"], ("\"pro\"", 0));
        assert_eq!(by_name["seats"], ("5", 0));
        assert_eq!(by_name["old"], ("", 1));
        assert_eq!(identify_rows(3, "u1", None, None, 1).0, None);
        assert!(identify_rows(3, "u1", Some(""), Some("[1]"), 1)
            .1
            .is_empty());
    }
}
