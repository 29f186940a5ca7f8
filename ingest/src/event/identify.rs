//! `POST /api/identify`: who an anonymous visitor turned out to be (docs/design.md,
//! "Identify"). Its body is read like an event's (`fields::parse_identify`) and checked
//! here, reporting every problem at once in the same shape.

use crate::event::errors::ValidationErrors;
use crate::event::fields::{IdentifyFields, RawJson};
use crate::event::properties::read_map;
use crate::event::validate::{event_id, longer_than, site_id, string_field, timestamp};
use std::borrow::Cow;
use uuid::Uuid;

/// `traits`, as JSON text, may be at most this many characters (the wire contract's).
pub use rivulet_common::contract::TRAITS_LIMIT;
/// A trait's name may be at most this many characters.
pub const TRAIT_NAME_LIMIT: usize = 100;

/// A valid identify call.
#[derive(Debug, Clone, PartialEq)]
pub struct Identify<'a> {
    pub site_id: u32,
    pub user_id: Cow<'a, str>,
    pub anonymous_id: Option<Cow<'a, str>>,
    /// A JSON object, as text; a trait whose value is `null` is to be removed.
    pub traits: Option<Cow<'a, str>>,
    pub event_id: Option<Uuid>,
    pub timestamp_ms: Option<i64>,
}

/// Checks an identify body. `api_key` is not looked at: the caller takes it first.
pub fn validate_identify(f: IdentifyFields<'_>) -> Result<Identify<'_>, ValidationErrors> {
    let mut errs = ValidationErrors::default();
    let site_id = site_id(f.site_id, &mut errs).unwrap_or(0);
    let user_id = string_field("user_id", f.user_id, &mut errs).filter(|u| !u.is_empty());
    if user_id.is_none() && !errs.field_errors.contains_key("user_id") {
        errs.field("user_id", "user_id is required");
    }
    let anonymous_id =
        string_field("anonymous_id", f.anonymous_id, &mut errs).filter(|a| !a.is_empty());
    let traits = traits(f.traits, &mut errs);
    let event_id = event_id(f.event_id, &mut errs);
    let timestamp_ms = timestamp(crate::event::fields::present(f.timestamp), &mut errs);
    match user_id {
        Some(user_id) if errs.is_empty() => Ok(Identify {
            site_id,
            user_id,
            anonymous_id,
            traits,
            event_id,
            timestamp_ms,
        }),
        _ => Err(errs),
    }
}

fn traits<'a>(raw: Option<RawJson<'a>>, errs: &mut ValidationErrors) -> Option<Cow<'a, str>> {
    let text = raw.and_then(RawJson::text)?;
    if longer_than(text, TRAITS_LIMIT) {
        errs.field(
            "traits",
            format!("traits must be at most {TRAITS_LIMIT} characters as JSON"),
        );
        return None;
    }
    match read_map(text, usize::MAX, TRAIT_NAME_LIMIT, |_| Ok(())) {
        Ok(()) => Some(Cow::Borrowed(text)),
        Err(problem) => {
            errs.field("traits", format!("traits {problem}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::fields::parse_identify;

    fn check(body: &'static str) -> Result<Identify<'static>, ValidationErrors> {
        validate_identify(parse_identify(body.as_bytes()).unwrap())
    }

    #[test]
    fn a_full_identify() {
        let i = check(
            r#"{"site_id":"4","user_id":"u-1","anonymous_id":"dev-9","traits":{"plan":"pro","old":null},
                "event_id":"0190d6a0-0000-7000-8000-000000000001","timestamp":1767323045678}"#,
        )
        .unwrap();
        assert_eq!(i.site_id, 4);
        assert_eq!(i.user_id, "u-1");
        assert_eq!(i.anonymous_id.as_deref(), Some("dev-9"));
        assert_eq!(i.traits.as_deref(), Some(r#"{"plan":"pro","old":null}"#));
        assert_eq!(i.timestamp_ms, Some(1_767_323_045_678));
        assert!(i.event_id.is_some());
    }

    #[test]
    fn user_id_is_required_and_every_problem_is_reported() {
        let e = check(r#"{"site_id":1}"#).unwrap_err();
        assert_eq!(e.field_errors["user_id"], ["user_id is required"]);
        let e = check(r#"{"site_id":1,"user_id":""}"#).unwrap_err();
        assert!(e.field_errors.contains_key("user_id"));
        let e =
            check(r#"{"user_id":5,"traits":[1],"anonymous_id":{},"event_id":"x"}"#).unwrap_err();
        for f in ["site_id", "user_id", "traits", "anonymous_id", "event_id"] {
            assert!(e.field_errors.contains_key(f), "{f}: {e:?}");
        }
    }

    #[test]
    fn traits_limits() {
        let at = format!(r#"{{"t":"{}"}}"#, "x".repeat(TRAITS_LIMIT - 8));
        let body =
            Box::leak(format!(r#"{{"site_id":1,"user_id":"u","traits":{at}}}"#).into_boxed_str());
        assert!(check(body).is_ok());
        let over = format!(r#"{{"t":"{}"}}"#, "x".repeat(TRAITS_LIMIT - 7));
        let body =
            Box::leak(format!(r#"{{"site_id":1,"user_id":"u","traits":{over}}}"#).into_boxed_str());
        assert!(check(body).unwrap_err().field_errors.contains_key("traits"));
        let long_name = Box::leak(
            format!(
                r#"{{"site_id":1,"user_id":"u","traits":{{"{}":1}}}}"#,
                "k".repeat(101)
            )
            .into_boxed_str(),
        );
        assert!(check(long_name).is_err());
        assert!(check(r#"{"site_id":1,"user_id":"u","traits":null}"#)
            .unwrap()
            .traits
            .is_none());
        assert!(check(r#"{"site_id":1,"user_id":"u","traits":{"nested":{"a":[1,2]}}}"#).is_ok());
    }
}
