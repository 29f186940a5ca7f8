//! Validation of a tracking event (docs/design.md, "Wire contract": the fields, their
//! limits and the error shape).
//!
//! Input is the event's known fields as read from the body (`fields`); every field is
//! checked and *all* problems are reported at once, in the tracking API's shape:
//! `fieldErrors` keyed by field name and `formErrors` for rules that span fields. Unknown fields never
//! reach it: they are ignored.

use crate::event::errors::ValidationErrors;
use crate::event::fields::{present, EventFields, Field, RawJson};
use crate::event::properties;
use crate::event::TrackEvent;
use rivulet_common::contract;
use rivulet_common::event::{EventType, Vitals};
use std::borrow::Cow;
use std::net::IpAddr;
use uuid::Uuid;

// The limits are the wire contract's, defined once in `rivulet_common::contract` (which
// the importer applies too); re-exported here for ingest's tests and the fuzz targets.
pub use rivulet_common::contract::{
    ERROR_PROPERTIES_LIMIT, FEATURE_FLAG_KEY_LIMIT, FEATURE_FLAG_VALUE_LIMIT, LIMITS,
    MAX_FEATURE_FLAGS,
};

pub const CUSTOM_EVENT_NEEDS_NAME: &str = "Custom events require event_name";
pub const ERROR_EVENT_NEEDS_NAME: &str = "Error events require event_name (the error's type)";

/// How far a client `timestamp` may lie from the receive time and still be used, and how
/// far one corrected by `sent_at` may lie ahead: the wire contract's.
pub use rivulet_common::contract::{
    CORRECTED_MAX_FUTURE_MS, TIMESTAMP_MAX_FUTURE_MS, TIMESTAMP_MAX_PAST_MS,
};

/// Checks one event. On success the returned event holds only known, valid fields,
/// its strings still borrowed from the request body where they were. `api_key` is not
/// looked at: the key check comes after validation, and the caller takes it first.
pub fn validate_event<'a>(f: EventFields<'a>) -> Result<TrackEvent<'a>, ValidationErrors> {
    let mut errs = ValidationErrors::default();
    let site_id = site_id(f.site_id, &mut errs).unwrap_or(0);

    let event_type = match present(f.event_type) {
        None => Some(EventType::Pageview),
        Some(Field::Str(s)) => EventType::parse(&s),
        Some(_) => None,
    };
    if event_type.is_none() {
        errs.field("type", type_message());
    }

    let mut text = |name: &str, v: Option<Field<'a>>| string_field(name, v, &mut errs);
    let mut ev = TrackEvent {
        site_id,
        event_type: event_type.unwrap_or(EventType::Pageview),
        pathname: text("pathname", f.pathname),
        hostname: text("hostname", f.hostname),
        querystring: text("querystring", f.querystring),
        page_title: text("page_title", f.page_title),
        referrer: text("referrer", f.referrer),
        user_id: text("user_id", f.user_id),
        user_agent: text("user_agent", f.user_agent),
        language: text("language", f.language),
        event_name: text("event_name", f.event_name).filter(|s| !s.is_empty()),
        properties: None,
        anonymous_id: text("anonymous_id", f.anonymous_id),
        tag: text("tag", f.tag),
        app_version: text("app_version", f.app_version),
        device_model: text("device_model", f.device_model),
        feature_flags: None,
        vitals: Vitals::default(),
        ip_address: None,
        screen_width: None,
        screen_height: None,
        event_id: None,
        timestamp_ms: None,
        sent_at_ms: None,
    };
    let ip = text("ip_address", f.ip_address);
    let kind = event_type.unwrap_or(EventType::Pageview);
    ev.properties = properties::check(kind, f.properties, &mut errs);
    ev.feature_flags = feature_flags(f.feature_flags, &mut errs);
    ev.vitals = Vitals {
        lcp: vital("lcp", f.lcp, &mut errs),
        cls: vital("cls", f.cls, &mut errs),
        inp: vital("inp", f.inp, &mut errs),
        fcp: vital("fcp", f.fcp, &mut errs),
        ttfb: vital("ttfb", f.ttfb, &mut errs),
    };
    if let Some(ip) = ip {
        match ip.parse::<IpAddr>() {
            Ok(addr) => ev.ip_address = Some(addr.to_string()),
            Err(_) => errs.field("ip_address", "ip_address must be an IPv4 or IPv6 address"),
        }
    }
    ev.screen_width = screen("screenWidth", f.screen_width, &mut errs);
    ev.screen_height = screen("screenHeight", f.screen_height, &mut errs);

    ev.event_id = event_id(f.event_id, &mut errs);
    ev.timestamp_ms = timestamp(present(f.timestamp), &mut errs);
    ev.sent_at_ms = sent_at(present(f.sent_at), &mut errs);

    if ev.event_name.is_none() {
        match event_type {
            Some(EventType::CustomEvent) => errs.form_errors.push(CUSTOM_EVENT_NEEDS_NAME.into()),
            Some(EventType::Error) => errs.form_errors.push(ERROR_EVENT_NEEDS_NAME.into()),
            _ => {}
        }
    }
    if errs.is_empty() {
        Ok(ev)
    } else {
        Err(errs)
    }
}

/// What `type` may be: each of the contract's event types, quoted.
fn type_message() -> String {
    let names: Vec<String> = contract::EVENT_TYPES
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect();
    format!("type must be one of {}", names.join(", "))
}

/// The limit of a string field, by its JSON name.
pub(crate) fn limit_of(name: &str) -> usize {
    contract::limit_of(name)
}

/// True when `s` has more than `max` characters (Unicode scalar values): the limits are
/// in characters, as the tracking API states them.
pub(crate) fn longer_than(s: &str, max: usize) -> bool {
    contract::longer_than(s, max)
}

/// A web vital: a number ≥ 0, or null.
fn vital(name: &str, v: Option<Field<'_>>, errs: &mut ValidationErrors) -> Option<f64> {
    let v = present(v)?;
    match v.as_f64() {
        Some(f) if f >= 0.0 => Some(f),
        _ => {
            errs.field(name, format!("{name} must be a number ≥ 0, or null"));
            None
        }
    }
}

/// `feature_flags`: an object of strings, read entry by entry from its JSON text without
/// building it. Kept as that text.
fn feature_flags<'a>(
    raw: Option<RawJson<'a>>,
    errs: &mut ValidationErrors,
) -> Option<Cow<'a, str>> {
    let text = raw.and_then(RawJson::text)?;
    match properties::check_string_map(
        text,
        MAX_FEATURE_FLAGS,
        FEATURE_FLAG_KEY_LIMIT,
        FEATURE_FLAG_VALUE_LIMIT,
    ) {
        Ok(()) => Some(Cow::Borrowed(text)),
        Err(problem) => {
            errs.field("feature_flags", format!("feature_flags {problem}"));
            None
        }
    }
}

/// A valid string field.
pub(crate) fn string_field<'a>(
    name: &str,
    v: Option<Field<'a>>,
    errs: &mut ValidationErrors,
) -> Option<Cow<'a, str>> {
    let Field::Str(s) = present(v)? else {
        errs.field(name, format!("{name} must be a string"));
        return None;
    };
    let max = limit_of(name);
    if longer_than(&s, max) {
        errs.field(name, format!("{name} must be at most {max} characters"));
        return None;
    }
    Some(s)
}

/// `event_id`: a UUID string, not nil.
pub(crate) fn event_id(v: Option<Field<'_>>, errs: &mut ValidationErrors) -> Option<Uuid> {
    match present(v)? {
        Field::Str(s) => match Uuid::parse_str(&s) {
            Ok(u) if !u.is_nil() => Some(u),
            _ => {
                errs.field("event_id", "event_id must be a UUID");
                None
            }
        },
        _ => {
            errs.field("event_id", "event_id must be a UUID string");
            None
        }
    }
}

pub(crate) fn site_id(v: Option<Field<'_>>, errs: &mut ValidationErrors) -> Option<u32> {
    const MSG: &str = "site_id must be a positive integer (as a number or a string)";
    let parsed = match present(v) {
        None => {
            errs.field("site_id", "site_id is required");
            return None;
        }
        Some(Field::Unsigned(n)) => Some(n),
        Some(Field::Str(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse::<u64>().ok()
        }
        Some(_) => None,
    };
    match parsed
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n > 0)
    {
        Some(id) => Some(id),
        None => {
            errs.field("site_id", MSG);
            None
        }
    }
}

fn screen(name: &str, v: Option<Field<'_>>, errs: &mut ValidationErrors) -> Option<u16> {
    let v = present(v)?;
    match v.as_f64().and_then(contract::screen) {
        Some(px) => Some(px),
        None => {
            errs.field(
                name,
                format!("{name} must be a number from 0 to {}", contract::SCREEN_MAX),
            );
            None
        }
    }
}

pub(crate) fn timestamp(v: Option<Field<'_>>, errs: &mut ValidationErrors) -> Option<i64> {
    time_field("timestamp", v, errs)
}

/// `sent_at`: when the client sent the event, by its clock (on a batch, the event's own or
/// the envelope's).
pub(crate) fn sent_at(v: Option<Field<'_>>, errs: &mut ValidationErrors) -> Option<i64> {
    time_field("sent_at", v, errs)
}

/// A time field of the contract (`contract::TIME_FIELDS`): RFC 3339, or a positive
/// integer of epoch milliseconds.
fn time_field(name: &str, v: Option<Field<'_>>, errs: &mut ValidationErrors) -> Option<i64> {
    let ms = match v? {
        Field::Unsigned(n) => i64::try_from(n).ok().filter(|ms| *ms > 0),
        Field::Str(s) => {
            time::OffsetDateTime::parse(&s, &time::format_description::well_known::Rfc3339)
                .ok()
                .and_then(|t| i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok())
        }
        _ => None,
    };
    if ms.is_none() {
        errs.field(name, format!("{name} {}", contract::TIME_MESSAGE));
    }
    ms
}

/// The time to record for a client's `timestamp` sent without `sent_at` (an identify
/// call's): itself when it lies inside the accepted window around the receive time, else
/// the receive time itself (`contract::event_time`).
pub fn effective_timestamp(client_ms: Option<i64>, received_ms: i64) -> i64 {
    contract::event_time(client_ms, None, received_ms).ms
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::fields::parse_event;
    use serde_json::{json, Value};

    /// Validates an object given as a JSON value, as a request body would carry it.
    fn check(v: Value) -> Result<TrackEvent<'static>, ValidationErrors> {
        let body: &'static [u8] = Vec::leak(serde_json::to_vec(&v).unwrap());
        validate_event(parse_event(body).unwrap())
    }

    #[test]
    fn minimal_pageview_defaults_type() {
        let ev = check(json!({"api_key": "rb_x", "site_id": "7"})).unwrap();
        assert_eq!(ev.site_id, 7);
        assert_eq!(ev.event_type, EventType::Pageview);
    }

    #[test]
    fn site_id_as_number_or_string() {
        assert_eq!(check(json!({"site_id": 3})).unwrap().site_id, 3);
        for bad in [
            json!(0),
            json!(-1),
            json!("x"),
            json!(" 1"),
            json!(1.5),
            json!(true),
            json!("4294967296"),
        ] {
            let e = check(json!({ "site_id": bad })).unwrap_err();
            assert!(e.field_errors.contains_key("site_id"), "{bad}");
        }
        assert!(check(json!({}))
            .unwrap_err()
            .field_errors
            .contains_key("site_id"));
    }

    #[test]
    fn custom_event_requires_name_as_form_error() {
        let e = check(json!({"site_id": 1, "type": "custom_event"})).unwrap_err();
        assert_eq!(e.form_errors, vec![CUSTOM_EVENT_NEEDS_NAME]);
        assert!(e.field_errors.is_empty());
        let e = check(json!({"site_id": 1, "type": "custom_event", "event_name": ""})).unwrap_err();
        assert_eq!(e.form_errors, vec![CUSTOM_EVENT_NEEDS_NAME]);
        assert!(
            check(json!({"site_id": 1, "type": "custom_event", "event_name": "signup"})).is_ok()
        );
    }

    #[test]
    fn every_limit_at_and_over() {
        for (field, max) in LIMITS {
            let fill = if *field == "properties" {
                format!("\"{}\"", "é".repeat(max - 2))
            } else {
                "é".repeat(*max)
            };
            let mut obj = json!({"site_id": 1, "type": "custom_event", "event_name": "e"});
            obj[*field] = json!(fill);
            assert!(check(obj.clone()).is_ok(), "{field} at its limit");
            let over = if *field == "properties" {
                format!("\"{}\"", "é".repeat(max - 1))
            } else {
                "é".repeat(max + 1)
            };
            obj[*field] = json!(over);
            let e = check(obj).unwrap_err();
            assert!(
                e.field_errors.contains_key(*field),
                "{field} over its limit"
            );
        }
    }

    #[test]
    fn properties_must_be_json_string() {
        let e = check(json!({"site_id": 1, "properties": "{not json"})).unwrap_err();
        assert!(e.field_errors["properties"][0].contains("valid JSON"));
        let e = check(json!({"site_id": 1, "properties": {"a": 1}})).unwrap_err();
        assert!(e.field_errors.contains_key("properties"));
        assert!(check(json!({"site_id": 1, "properties": "{\"a\":[1,true,\"x\"]}"})).is_ok());
    }

    #[test]
    fn wrong_types_are_field_errors() {
        let e = check(
            json!({"site_id": 1, "type": "click", "pathname": 5, "screenWidth": "wide",
            "ip_address": "999.1.1.1", "event_id": "nope", "timestamp": "yesterday"}),
        )
        .unwrap_err();
        for f in [
            "type",
            "pathname",
            "screenWidth",
            "ip_address",
            "event_id",
            "timestamp",
        ] {
            assert!(e.field_errors.contains_key(f), "{f}");
        }
    }

    #[test]
    fn the_type_error_lists_the_contracts_types() {
        let e = check(json!({"site_id": 1, "type": "click"})).unwrap_err();
        assert_eq!(
            e.field_errors["type"],
            [
                "type must be one of \"pageview\", \"custom_event\", \"performance\", \
              \"outbound\", \"error\", \"button_click\", \"copy\", \"form_submit\", \
              \"input_change\""
            ]
        );
    }

    #[test]
    fn nulls_are_absent_and_unknown_fields_ignored() {
        let ev = check(json!({"site_id": 1, "pathname": null, "future_field": {"x": 1}})).unwrap();
        assert_eq!(ev.pathname, None);
    }

    #[test]
    fn timestamps() {
        let ev = check(json!({"site_id": 1, "timestamp": "2026-01-02T03:04:05.678Z"})).unwrap();
        assert_eq!(ev.timestamp_ms, Some(1_767_323_045_678));
        let ev = check(json!({"site_id": 1, "timestamp": 1_767_323_045_678i64})).unwrap();
        assert_eq!(ev.timestamp_ms, Some(1_767_323_045_678));
        let now = 1_767_323_045_678;
        assert_eq!(effective_timestamp(Some(now - 1000), now), now - 1000);
        assert_eq!(
            effective_timestamp(Some(now - TIMESTAMP_MAX_PAST_MS - 1), now),
            now
        );
        assert_eq!(
            effective_timestamp(Some(now + TIMESTAMP_MAX_FUTURE_MS + 1), now),
            now
        );
        assert_eq!(effective_timestamp(None, now), now);
    }

    #[test]
    fn sent_at_is_read_as_timestamp_is() {
        let ev = check(json!({"site_id": 1, "sent_at": "2026-01-02T03:04:05.678+01:00"})).unwrap();
        assert_eq!(ev.sent_at_ms, Some(1_767_323_045_678 - 3_600_000));
        let ev =
            check(json!({"site_id": 1, "sent_at": 1_767_323_045_678i64, "timestamp": 5})).unwrap();
        assert_eq!(
            (ev.sent_at_ms, ev.timestamp_ms),
            (Some(1_767_323_045_678), Some(5))
        );
        assert_eq!(
            check(json!({"site_id": 1, "sent_at": null}))
                .unwrap()
                .sent_at_ms,
            None
        );
        for bad in [
            json!("yesterday"),
            json!(0),
            json!(-1),
            json!(1.5),
            json!(true),
            json!(""),
            json!({"ms": 1}),
            json!("2026-01-02 03:04:05"),
        ] {
            let e = check(json!({"site_id": 1, "sent_at": bad})).unwrap_err();
            assert_eq!(
                e.field_errors["sent_at"],
                ["sent_at must be an RFC 3339 date-time or epoch milliseconds"],
                "{bad}"
            );
            assert_eq!(e.field_errors.len(), 1, "{bad}");
        }
    }

    #[test]
    fn ip_is_normalised() {
        let ev = check(json!({"site_id": 1, "ip_address": "2001:0db8::0001"})).unwrap();
        assert_eq!(ev.ip_address.as_deref(), Some("2001:db8::1"));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;
        use serde_json::Map;

        fn json_value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(|n| json!(n)),
                any::<f64>()
                    .prop_filter("finite", |f| f.is_finite())
                    .prop_map(|f| json!(f)),
                ".{0,40}".prop_map(Value::String),
            ];
            leaf.prop_recursive(4, 64, 8, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                    prop::collection::btree_map(".{0,12}", inner, 0..8)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        const FIELDS: [&str; 28] = crate::event::fields::EventFields::NAMES;

        proptest! {
            // Any object: validation never panics, and an accepted event respects every limit.
            #[test]
            fn never_panics_and_accepted_events_respect_limits(
                vals in prop::collection::vec((0..FIELDS.len(), json_value()), 0..12)
            ) {
                let mut obj = Map::new();
                for (i, v) in vals { obj.insert(FIELDS[i].to_string(), v); }
                if let Ok(ev) = check(Value::Object(obj)) {
                    prop_assert!(ev.site_id > 0);
                    for (s, max) in [(&ev.page_title, 512), (&ev.referrer, 2048), (&ev.user_id, 255),
                        (&ev.user_agent, 512), (&ev.event_name, 256), (&ev.properties, 2048)] {
                        prop_assert!(s.as_ref().is_none_or(|s| s.chars().count() <= max));
                    }
                    if ev.event_type == EventType::CustomEvent { prop_assert!(ev.event_name.is_some()); }
                }
            }
        }
    }
}
