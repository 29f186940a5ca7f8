//! `properties`: a string that holds JSON, with what each event type requires of it
//! (docs/design.md, "Event types"), and the reading of other small JSON values
//! (`feature_flags`, identify's `traits`) without building them.

use crate::event::errors::ValidationErrors;
use crate::event::fields::{present, Field};
use rivulet_common::contract;
use rivulet_common::event::EventType;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

// The rules are the wire contract's (`rivulet_common::contract`), which the importer
// applies too.
pub use rivulet_common::contract::{depth, MAX_DEPTH};

/// Checks `properties` for an event of type `kind`: a string of valid JSON within the
/// type's limit and [`MAX_DEPTH`], holding what the type requires. Problems go to
/// `fieldErrors.properties`; the valid string is returned.
pub fn check<'a>(
    kind: EventType,
    v: Option<Field<'a>>,
    errs: &mut ValidationErrors,
) -> Option<Cow<'a, str>> {
    let required = contract::properties_required(kind);
    let text = match present(v) {
        None if required => {
            errs.field(
                "properties",
                format!("{} events require properties", kind.as_str()),
            );
            return None;
        }
        None => return None,
        Some(Field::Str(s)) => s,
        Some(_) => {
            errs.field("properties", "properties must be a string");
            return None;
        }
    };
    let max = contract::properties_limit(kind);
    if contract::longer_than(&text, max) {
        errs.field(
            "properties",
            format!("properties must be at most {max} characters"),
        );
        return None;
    }
    if serde_json::from_str::<IgnoredAny>(&text).is_err() {
        errs.field("properties", "properties must be a string of valid JSON");
        return None;
    }
    if depth(&text) > MAX_DEPTH {
        errs.field(
            "properties",
            format!("properties must not nest objects or arrays deeper than {MAX_DEPTH} levels"),
        );
        return None;
    }
    let problems = contract::property_problems(kind, &text);
    if problems.is_empty() {
        return Some(text);
    }
    for p in problems {
        errs.field("properties", format!("{} events: {p}", kind.as_str()));
    }
    None
}

/// Checks that `json` is an object of at most `max_entries` entries whose keys have at
/// most `key_limit` characters and whose values are strings of at most `value_limit`
/// characters (`null` values allowed when `nulls`), reading it without building it.
/// The error is a phrase to follow the field's name.
pub fn check_string_map(
    json: &str,
    max_entries: usize,
    key_limit: usize,
    value_limit: usize,
) -> Result<(), String> {
    read_map(json, max_entries, key_limit, |value| match value {
        Field::Str(s) if !contract::longer_than(&s, value_limit) => Ok(()),
        Field::Str(_) => Err(format!("values must be at most {value_limit} characters")),
        _ => Err("values must be strings".into()),
    })
}

/// Reads a JSON object entry by entry, checking its size, its keys' length and each value
/// with `value`, without building it. Nested values reach `value` as
/// [`Field::Composite`].
pub fn read_map(
    json: &str,
    max_entries: usize,
    key_limit: usize,
    value: impl FnMut(Field<'_>) -> Result<(), String>,
) -> Result<(), String> {
    struct V<F> {
        max_entries: usize,
        key_limit: usize,
        value: F,
    }
    impl<'de, F: FnMut(Field<'_>) -> Result<(), String>> Visitor<'de> for V<F> {
        type Value = Result<(), String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut n = 0;
            let mut problem = None;
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                let v: Field<'de> = map.next_value()?;
                n += 1;
                if problem.is_some() {
                    continue;
                }
                if n > self.max_entries {
                    problem = Some(format!("must have at most {} entries", self.max_entries));
                } else if contract::longer_than(&key, self.key_limit) {
                    problem = Some(format!(
                        "keys must be at most {} characters",
                        self.key_limit
                    ));
                } else if let Err(p) = (self.value)(v) {
                    problem = Some(p);
                }
            }
            Ok(problem.map_or(Ok(()), Err))
        }
    }
    let mut de = serde_json::Deserializer::from_str(json);
    let visitor = V {
        max_entries,
        key_limit,
        value,
    };
    match de.deserialize_map(visitor) {
        Ok(result) => result,
        Err(_) => Err("must be a JSON object".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kind: EventType, text: &str) -> Result<(), Vec<String>> {
        let mut errs = ValidationErrors::default();
        match check(kind, Some(Field::Str(text.into())), &mut errs) {
            Some(_) => Ok(()),
            None => Err(errs.field_errors.remove("properties").unwrap_or_default()),
        }
    }

    #[test]
    fn nesting_deeper_than_the_contract_allows_is_refused() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(props(EventType::CustomEvent, &deep(MAX_DEPTH)).is_ok());
        let e = props(EventType::CustomEvent, &deep(MAX_DEPTH + 1)).unwrap_err();
        assert!(e[0].contains("deeper than 32"), "{e:?}");
    }

    #[test]
    fn outbound_needs_an_absolute_web_url() {
        assert!(props(
            EventType::Outbound,
            r#"{"url":"https://other.example/x","text":"go","target":"_blank"}"#
        )
        .is_ok());
        for bad in [
            r#"{}"#,
            r#"{"url":"/relative"}"#,
            r#"{"url":"javascript:alert(1)"}"#,
            r#"{"url":7}"#,
            "[]",
        ] {
            assert!(props(EventType::Outbound, bad).is_err(), "{bad}");
        }
        assert!(props(
            EventType::Outbound,
            r#"{"url":"https://x.example","text":5}"#
        )
        .is_err());
        let mut errs = ValidationErrors::default();
        assert!(check(EventType::Outbound, None, &mut errs).is_none());
        assert!(errs.field_errors.contains_key("properties"));
    }

    #[test]
    fn error_events_need_a_message_and_may_be_4096_long() {
        assert!(props(EventType::Error, r#"{"message":"x is undefined","lineNumber":3,"columnNumber":9,"fileName":"a.js","stack":"at a"}"#).is_ok());
        assert!(props(EventType::Error, r#"{"stack":"at a"}"#).is_err());
        assert!(props(EventType::Error, r#"{"message":"m","lineNumber":"3"}"#).is_err());
        let at = format!(r#"{{"message":"{}"}}"#, "é".repeat(4096 - 14));
        assert_eq!(at.chars().count(), 4096);
        assert!(props(EventType::Error, &at).is_ok());
        let over = format!(r#"{{"message":"{}"}}"#, "é".repeat(4096 - 13));
        assert!(props(EventType::Error, &over).is_err());
        // Other types keep the API's 2048.
        let custom = format!(r#"{{"m":"{}"}}"#, "é".repeat(2048 - 8));
        assert!(props(EventType::CustomEvent, &custom).is_ok());
        let custom = format!(r#"{{"m":"{}"}}"#, "é".repeat(2048 - 7));
        assert!(props(EventType::CustomEvent, &custom).is_err());
    }

    #[test]
    fn copy_form_and_input_shapes() {
        assert!(props(
            EventType::Copy,
            r#"{"sourceElement":"p","text":"hi","textLength":2}"#
        )
        .is_ok());
        assert!(props(EventType::Copy, r#"{"text":"hi"}"#).is_err());
        assert!(props(
            EventType::FormSubmit,
            r#"{"formId":"f","formName":"n","formAction":"/s","method":"POST","fieldCount":3}"#
        )
        .is_ok());
        assert!(props(EventType::FormSubmit, r#"{"fieldCount":"3"}"#).is_err());
        assert!(props(EventType::FormSubmit, "{}").is_ok());
        assert!(props(
            EventType::InputChange,
            r#"{"element":"input","inputName":"email"}"#
        )
        .is_ok());
        assert!(props(EventType::InputChange, r#"{"element":1}"#).is_err());
        assert!(props(EventType::ButtonClick, r#"[1,"any",{"json":true}]"#).is_ok());
    }

    #[test]
    fn string_maps_are_checked_without_building_them() {
        assert!(check_string_map(r#"{"a":"on","b":"off"}"#, 100, 100, 2048).is_ok());
        assert!(check_string_map("{}", 100, 100, 2048).is_ok());
        assert_eq!(
            check_string_map(r#"{"a":1}"#, 100, 100, 2048).unwrap_err(),
            "values must be strings"
        );
        assert!(check_string_map(r#"{"a":{"b":"c"}}"#, 100, 100, 2048).is_err());
        assert!(check_string_map(r#"["a"]"#, 100, 100, 2048).is_err());
        let key = format!(r#"{{"{}":"v"}}"#, "k".repeat(101));
        assert!(check_string_map(&key, 100, 100, 2048).is_err());
        let key = format!(r#"{{"{}":"v"}}"#, "k".repeat(100));
        assert!(check_string_map(&key, 100, 100, 2048).is_ok());
        let many: Vec<String> = (0..101).map(|i| format!(r#""k{i}":"v""#)).collect();
        let many = format!("{{{}}}", many.join(","));
        assert!(check_string_map(&many, 100, 100, 2048)
            .unwrap_err()
            .contains("at most 100"));
    }
}
