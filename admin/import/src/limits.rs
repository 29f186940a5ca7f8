//! The track API's rules, applied to every event whatever its source: field limits
//! (characters, as ingest counts them: `LIMITS` in ingest/src/event/validate.rs), event
//! types and what each type requires (contracts §1), JSON properties, IP addresses.

use std::net::IpAddr;

use serde_json::Value;

use crate::{ImportedEvent, RowError, SkipKind, EVENT_TYPES};

/// Properties of an `error` event may be this long; others [`PROPERTIES`].
pub(crate) const ERROR_PROPERTIES: usize = 4096;
pub(crate) const PROPERTIES: usize = 2048;
const FLAG_KEY: usize = 100;
const FLAG_VALUE: usize = 2048;

/// Whether `s` is over `max` characters (Unicode scalar values).
pub(crate) fn over(s: &str, max: usize) -> bool {
    s.len() > max && s.chars().count() > max
}

/// Checks an event against the track API's rules; the event, with its IP normalised.
pub(crate) fn finish(mut ev: ImportedEvent, line: u64) -> Result<ImportedEvent, RowError> {
    let err = |kind, message: String| RowError::new(line, kind, message);
    if ev.source_id.is_empty() {
        return Err(err(
            SkipKind::MissingField,
            "the event has no id of its own".into(),
        ));
    }
    if !EVENT_TYPES.contains(&ev.event_type.as_str()) {
        return Err(err(
            SkipKind::InvalidValue,
            format!(
                "type {:?} is not one of {}",
                ev.event_type,
                EVENT_TYPES.join(", ")
            ),
        ));
    }
    let texts: [(&str, &Option<String>, usize); 14] = [
        ("pathname", &ev.pathname, 2048),
        ("hostname", &ev.hostname, 253),
        ("querystring", &ev.querystring, 2048),
        ("page_title", &ev.page_title, 512),
        ("referrer", &ev.referrer, 2048),
        ("user_id", &ev.user_id, 255),
        ("anonymous_id", &ev.anonymous_id, 255),
        ("user_agent", &ev.user_agent, 512),
        ("language", &ev.language, 35),
        ("event_name", &ev.event_name, 256),
        ("tag", &ev.tag, 256),
        ("app_version", &ev.app_version, 50),
        ("device_model", &ev.device_model, 200),
        (
            "properties",
            &ev.properties,
            if ev.event_type == "error" {
                ERROR_PROPERTIES
            } else {
                PROPERTIES
            },
        ),
    ];
    for (name, value, max) in texts {
        if let Some(v) = value {
            if over(v, max) {
                return Err(err(
                    SkipKind::TooLong,
                    format!(
                        "{name} is {} characters; the limit is {max}",
                        v.chars().count()
                    ),
                ));
            }
        }
    }
    if ev.event_type == "custom_event" && ev.event_name.is_none() {
        return Err(err(
            SkipKind::MissingField,
            "a custom_event needs an event_name".into(),
        ));
    }
    check_properties(&ev).map_err(|(kind, m)| err(kind, m))?;
    if let Some(flags) = &ev.feature_flags {
        check_feature_flags(flags).map_err(|(kind, m)| err(kind, m))?;
    }
    for (name, value) in [
        ("lcp", ev.lcp),
        ("cls", ev.cls),
        ("inp", ev.inp),
        ("fcp", ev.fcp),
        ("ttfb", ev.ttfb),
    ] {
        if let Some(v) = value {
            if !(v.is_finite() && v >= 0.0) {
                return Err(err(
                    SkipKind::InvalidValue,
                    format!("{name} is {v}; a web vital is a number ≥ 0"),
                ));
            }
        }
    }
    for (name, value, max) in [("lat", ev.preset.lat, 90.0), ("lon", ev.preset.lon, 180.0)] {
        if let Some(v) = value {
            if !(v.is_finite() && (-max..=max).contains(&v)) {
                return Err(err(
                    SkipKind::InvalidValue,
                    format!("{name} is {v}, outside -{max}..{max}"),
                ));
            }
        }
    }
    if let Some(ip) = &ev.ip {
        match ip.parse::<IpAddr>() {
            Ok(addr) => ev.ip = Some(addr.to_string()),
            Err(_) => {
                return Err(err(
                    SkipKind::InvalidValue,
                    format!("ip {ip:?} is not an IPv4 or IPv6 address"),
                ))
            }
        }
    }
    Ok(ev)
}

fn check_properties(ev: &ImportedEvent) -> Result<(), (SkipKind, String)> {
    // What a type requires in its properties: (field, must be an absolute http(s) URL).
    let required: Option<(&str, bool)> = match ev.event_type.as_str() {
        "outbound" => Some(("url", true)),
        "error" => Some(("message", false)),
        "copy" => Some(("sourceElement", false)),
        _ => None,
    };
    let Some(props) = &ev.properties else {
        return match required {
            Some((field, _)) => Err((
                SkipKind::MissingField,
                format!(
                    "{} {} event needs properties with {field}",
                    article(&ev.event_type),
                    ev.event_type
                ),
            )),
            None => Ok(()),
        };
    };
    let not_json = |e: serde_json::Error| {
        (
            SkipKind::InvalidValue,
            format!("properties is not JSON: {}", crate::props::json_error(&e)),
        )
    };
    let Some((field, url)) = required else {
        return serde_json::from_str::<serde::de::IgnoredAny>(props)
            .map(drop)
            .map_err(not_json);
    };
    let value: Value = serde_json::from_str(props).map_err(not_json)?;
    match value.get(field) {
        None | Some(Value::Null) => Err((
            SkipKind::MissingField,
            format!("the properties of a {} event need {field}", ev.event_type),
        )),
        Some(Value::String(u)) if url && !crate::url::is_absolute_http(u) => Err((
            SkipKind::InvalidValue,
            format!("the outbound url {u:?} is not an absolute http(s) URL"),
        )),
        Some(v) if url && !v.is_string() => Err((
            SkipKind::InvalidValue,
            "the outbound url is not a string".into(),
        )),
        Some(_) => Ok(()),
    }
}

/// "a" or "an" before a word.
fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

fn check_feature_flags(flags: &str) -> Result<(), (SkipKind, String)> {
    let invalid = |m: &str| {
        (
            SkipKind::InvalidValue,
            format!("feature_flags is not a JSON object of strings: {m}"),
        )
    };
    let value: Value =
        serde_json::from_str(flags).map_err(|e| invalid(&crate::props::json_error(&e)))?;
    let Value::Object(map) = value else {
        return Err(invalid("not an object"));
    };
    for (key, value) in &map {
        let Value::String(value) = value else {
            return Err(invalid(&format!("the value of {key:?} is not a string")));
        };
        if over(key, FLAG_KEY) {
            return Err((
                SkipKind::TooLong,
                format!("the feature flag name {key:?} is over {FLAG_KEY} characters"),
            ));
        }
        if over(value, FLAG_VALUE) {
            return Err((
                SkipKind::TooLong,
                format!("the value of feature flag {key:?} is over {FLAG_VALUE} characters"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(event_type: &str) -> ImportedEvent {
        ImportedEvent {
            source_id: "s1".into(),
            event_type: event_type.into(),
            ..Default::default()
        }
    }

    fn fails(ev: ImportedEvent) -> (SkipKind, String) {
        let e = finish(ev, 7).unwrap_err();
        assert_eq!(e.line, 7);
        (e.kind, e.message)
    }

    #[test]
    fn every_limit_at_and_over() {
        type Set = fn(&mut ImportedEvent, String);
        let fields: [(&str, usize, Set); 13] = [
            ("pathname", 2048, |e, v| e.pathname = Some(v)),
            ("hostname", 253, |e, v| e.hostname = Some(v)),
            ("querystring", 2048, |e, v| e.querystring = Some(v)),
            ("page_title", 512, |e, v| e.page_title = Some(v)),
            ("referrer", 2048, |e, v| e.referrer = Some(v)),
            ("user_id", 255, |e, v| e.user_id = Some(v)),
            ("anonymous_id", 255, |e, v| e.anonymous_id = Some(v)),
            ("user_agent", 512, |e, v| e.user_agent = Some(v)),
            ("language", 35, |e, v| e.language = Some(v)),
            ("event_name", 256, |e, v| e.event_name = Some(v)),
            ("tag", 256, |e, v| e.tag = Some(v)),
            ("app_version", 50, |e, v| e.app_version = Some(v)),
            ("device_model", 200, |e, v| e.device_model = Some(v)),
        ];
        for (name, max, set) in fields {
            // Multi-byte characters: the limit counts characters, not bytes.
            let mut ev = event("pageview");
            set(&mut ev, "é".repeat(max));
            assert!(finish(ev, 1).is_ok(), "{name} at its limit");
            let mut ev = event("pageview");
            set(&mut ev, "é".repeat(max + 1));
            assert_eq!(
                fails(ev),
                (
                    SkipKind::TooLong,
                    format!("{name} is {} characters; the limit is {max}", max + 1)
                )
            );
        }
    }

    #[test]
    fn properties_limits_depend_on_the_type() {
        let props = |n: usize| Some(format!("{{\"message\":\"{}\"}}", "x".repeat(n - 14)));
        let mut ev = event("custom_event");
        ev.event_name = Some("e".into());
        ev.properties = props(2048);
        assert!(finish(ev.clone(), 1).is_ok());
        ev.properties = props(2049);
        assert_eq!(
            fails(ev),
            (
                SkipKind::TooLong,
                "properties is 2049 characters; the limit is 2048".into()
            )
        );
        let mut ev = event("error");
        ev.properties = props(4096);
        assert!(finish(ev.clone(), 1).is_ok());
        ev.properties = props(4097);
        assert_eq!(fails(ev).0, SkipKind::TooLong);
    }

    #[test]
    fn type_rules() {
        assert_eq!(
            fails(event("visit")),
            (SkipKind::InvalidValue, "type \"visit\" is not one of pageview, custom_event, performance, outbound, error, button_click, copy, form_submit, input_change".into())
        );
        assert_eq!(
            fails(event("custom_event")),
            (
                SkipKind::MissingField,
                "a custom_event needs an event_name".into()
            )
        );
        assert_eq!(
            fails(event("outbound")),
            (
                SkipKind::MissingField,
                "an outbound event needs properties with url".into()
            )
        );
        assert_eq!(
            fails(event("error")),
            (
                SkipKind::MissingField,
                "an error event needs properties with message".into()
            )
        );
        let mut ev = event("outbound");
        ev.properties = Some(r#"{"url":"/relative"}"#.into());
        assert_eq!(
            fails(ev.clone()),
            (
                SkipKind::InvalidValue,
                "the outbound url \"/relative\" is not an absolute http(s) URL".into()
            )
        );
        ev.properties = Some(r#"{"url":"https://example.org/"}"#.into());
        assert!(finish(ev, 1).is_ok());
        let mut ev = event("copy");
        ev.properties = Some(r#"{"text":"x"}"#.into());
        assert_eq!(
            fails(ev),
            (
                SkipKind::MissingField,
                "the properties of a copy event need sourceElement".into()
            )
        );
        let mut ev = event("button_click");
        ev.properties = Some("{nope".into());
        assert_eq!(
            fails(ev),
            (
                SkipKind::InvalidValue,
                "properties is not JSON: key must be a string (column 2)".into()
            )
        );
        let mut ev = event("pageview");
        ev.source_id = String::new();
        assert_eq!(fails(ev).0, SkipKind::MissingField);
    }

    #[test]
    fn feature_flags_vitals_coordinates_and_ip() {
        let mut ev = event("pageview");
        ev.feature_flags = Some(r#"{"beta":"on"}"#.into());
        assert!(finish(ev.clone(), 1).is_ok());
        ev.feature_flags = Some(r#"{"beta":true}"#.into());
        assert_eq!(
            fails(ev.clone()),
            (
                SkipKind::InvalidValue,
                "feature_flags is not a JSON object of strings: the value of \"beta\" is not a string".into()
            )
        );
        ev.feature_flags = Some(format!(r#"{{"{}":"x"}}"#, "k".repeat(101)));
        assert_eq!(fails(ev).0, SkipKind::TooLong);

        let mut ev = event("performance");
        ev.lcp = Some(-1.0);
        assert_eq!(
            fails(ev),
            (
                SkipKind::InvalidValue,
                "lcp is -1; a web vital is a number ≥ 0".into()
            )
        );
        let mut ev = event("pageview");
        ev.preset.lat = Some(91.0);
        assert_eq!(
            fails(ev),
            (SkipKind::InvalidValue, "lat is 91, outside -90..90".into())
        );

        let mut ev = event("pageview");
        ev.ip = Some("2001:0db8::0001".into());
        assert_eq!(finish(ev, 1).unwrap().ip.as_deref(), Some("2001:db8::1"));
        let mut ev = event("pageview");
        ev.ip = Some("300.1.1.1".into());
        assert_eq!(
            fails(ev),
            (
                SkipKind::InvalidValue,
                "ip \"300.1.1.1\" is not an IPv4 or IPv6 address".into()
            )
        );
    }
}
