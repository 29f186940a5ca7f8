//! Who an event counts for in `users`: the one place that reads the identity tables.
//!
//! An event's person is its `user_id` when that is a user id the caller sent; when it is
//! the enricher's visitor id (32 lowercase hex characters: docs/design.md, "Visitor id"),
//! the person is the user who owns the event's `anonymous_id` (the user of its strongest
//! claim: keyed before keyless, then the first received, as everywhere: docs/design.md,
//! "Identity"); otherwise the event has no person and
//! `users` does not count it. A caller's user id of exactly that form is read as a
//! visitor id: the stored row cannot tell them apart (the import's `rivulet` format makes
//! the same call).

use crate::sql::Sql;

/// The identity table read.
pub const CLAIMS_TABLE: &str = "person_claims";

/// The owner of each claimed anonymous id of a site: rows `(anonymous_id, owner)`.
pub fn owners(site_id: u32) -> Sql {
    let mut s = Sql::new();
    s.push(
        "SELECT anonymous_id, argMax(user_id, (rank, user_id)) AS owner \
         FROM person_claims WHERE site_id = ",
    )
    .bind_uint(u64::from(site_id))
    .push(" AND anonymous_id != '' GROUP BY anonymous_id");
    s
}

/// Whether an event's `user_id` is a visitor id (its person is its anonymous id's owner).
pub const VISITOR_FORM: &str = "match(user_id, '^[0-9a-f]{32}$')";

/// The person of an event, over its `user_id` and the `owner` joined from [`owners`]
/// (`''` when there is none).
pub const PERSON: &str = "if(match(user_id, '^[0-9a-f]{32}$'), owner, user_id)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alias_owners_of_one_site() {
        assert_eq!(
            owners(7).inline(),
            "SELECT anonymous_id, argMax(user_id, (rank, user_id)) AS owner \
             FROM person_claims WHERE site_id = 7 AND anonymous_id != '' GROUP BY anonymous_id"
        );
        assert!(owners(7).inline().contains(CLAIMS_TABLE));
    }

    #[test]
    fn the_person_tells_visitor_ids_by_the_same_pattern() {
        assert!(PERSON.starts_with(&format!("if({VISITOR_FORM}, ")));
    }
}
