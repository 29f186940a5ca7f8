//! The validator on any JSON object: never panics, and what it accepts respects the
//! documented limits (the property test's invariants, with libFuzzer's coverage).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rivulet_common::event::EventType;
use rivulet_common::validate::{validate_event, LIMITS};
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    let Ok(mut obj) = serde_json::from_slice::<Map<String, Value>>(data) else {
        return;
    };
    match validate_event(&mut obj) {
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
            if ev.event_type == Some(EventType::CustomEvent) {
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
