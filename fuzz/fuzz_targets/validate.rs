//! The body reader and the validator on any bytes: the reader accepts exactly what a full
//! parse into a `serde_json::Value` accepts as an object; the validator never panics, and
//! what it accepts respects the documented limits (the property tests' invariants, with
//! libFuzzer's coverage).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rivulet_common::event::EventType;
use rivulet_ingest::event::fields::{parse_event, BodyError};
use rivulet_ingest::event::validate::{validate_event, LIMITS};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let full = serde_json::from_slice::<Value>(data);
    let fields = match parse_event(data) {
        Ok(fields) => fields,
        Err(BodyError::NotAnObject) => return assert!(matches!(full, Ok(v) if !v.is_object())),
        Err(BodyError::Json(_)) => return assert!(full.is_err()),
    };
    assert!(matches!(full, Ok(Value::Object(_))));
    match validate_event(fields) {
        Ok(ev) => {
            assert!(ev.site_id > 0);
            let fields = [
                ("pathname", &ev.pathname),
                ("hostname", &ev.hostname),
                ("querystring", &ev.querystring),
                ("page_title", &ev.page_title),
                ("referrer", &ev.referrer),
                ("user_id", &ev.user_id),
                ("user_agent", &ev.user_agent),
                ("language", &ev.language),
                ("event_name", &ev.event_name),
                ("properties", &ev.properties),
            ];
            for (name, value) in fields {
                let max = LIMITS.iter().find(|(n, _)| *n == name).unwrap().1;
                assert!(
                    value.as_ref().is_none_or(|s| s.chars().count() <= max),
                    "{name}"
                );
            }
            if ev.event_type == EventType::CustomEvent {
                assert!(ev.event_name.is_some());
            }
            // Valid JSON by the grammar (RFC 8259 sets no number range): `1e400` is
            // accepted, though serde_json's `Value` cannot hold it (found by this target).
            if let Some(p) = &ev.properties {
                assert!(serde_json::from_str::<serde::de::IgnoredAny>(p).is_ok());
            }
        }
        Err(errs) => {
            assert!(!errs.is_empty());
            // The 400 body serializes.
            serde_json::to_string(&errs).unwrap();
        }
    }
});
