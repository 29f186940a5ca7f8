//! The track API's rules, applied to every event whatever its source: the wire
//! contract's field limits (characters, as ingest counts them), event types and what each
//! type requires, JSON properties and how deep they nest, feature flags, web vitals, IP
//! addresses (all `rivulet_common::contract`, which ingest validates with); and for the
//! values only an import carries, the times an event may have and the shape of each
//! preset (enriched) value.

use std::net::IpAddr;

use rivulet_common::contract::{self, PropertyProblem};
use rivulet_common::event::EventType;
use serde_json::Value;

use crate::{ImportedEvent, RowError, SkipKind, EVENT_TYPES};

/// Whether `s` is over `max` characters (Unicode scalar values).
pub(crate) fn over(s: &str, max: usize) -> bool {
    contract::longer_than(s, max)
}

/// Checks an event against the track API's rules and the import's; the event, with its
/// IP normalised. `now_ms` is when the import started: an event may lie at most
/// [`contract::MAX_FUTURE_MS`] after it.
pub(crate) fn finish(
    mut ev: ImportedEvent,
    line: u64,
    now_ms: i64,
) -> Result<ImportedEvent, RowError> {
    let err = |(kind, message): (SkipKind, String)| RowError::new(line, kind, message);
    if ev.source_id.is_empty() {
        return Err(err((
            SkipKind::MissingField,
            "the event has no id of its own".into(),
        )));
    }
    let Some(kind) = EventType::parse(&ev.event_type) else {
        return Err(err((
            SkipKind::InvalidValue,
            format!(
                "type {:?} is not one of {}",
                ev.event_type,
                EVENT_TYPES.join(", ")
            ),
        )));
    };
    check_time("timestamp", ev.timestamp_ms, now_ms).map_err(err)?;
    if let Some(received_at) = ev.preset.received_at_ms {
        check_time("received_at", received_at, now_ms).map_err(err)?;
    }
    let texts: [(&str, &Option<String>); 13] = [
        ("pathname", &ev.pathname),
        ("hostname", &ev.hostname),
        ("querystring", &ev.querystring),
        ("page_title", &ev.page_title),
        ("referrer", &ev.referrer),
        ("user_id", &ev.user_id),
        ("anonymous_id", &ev.anonymous_id),
        ("user_agent", &ev.user_agent),
        ("language", &ev.language),
        ("event_name", &ev.event_name),
        ("tag", &ev.tag),
        ("app_version", &ev.app_version),
        ("device_model", &ev.device_model),
    ];
    for (name, value) in texts {
        if let Some(v) = value {
            check_length(name, v, contract::limit_of(name)).map_err(err)?;
        }
    }
    if let Some(props) = &ev.properties {
        check_length("properties", props, contract::properties_limit(kind)).map_err(err)?;
    }
    match kind {
        EventType::CustomEvent if ev.event_name.is_none() => {
            return Err(err((
                SkipKind::MissingField,
                "a custom_event needs an event_name".into(),
            )))
        }
        EventType::Error if ev.event_name.is_none() => {
            return Err(err((
                SkipKind::MissingField,
                "an error event needs an event_name (the error's type)".into(),
            )))
        }
        _ => {}
    }
    check_properties(kind, ev.properties.as_deref()).map_err(err)?;
    if let Some(flags) = &ev.feature_flags {
        check_feature_flags(flags).map_err(err)?;
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
                return Err(err((
                    SkipKind::InvalidValue,
                    format!("{name} is {v}; a web vital is a number ≥ 0"),
                )));
            }
        }
    }
    check_preset(&ev.preset).map_err(err)?;
    if let Some(ip) = &ev.ip {
        match ip.parse::<IpAddr>() {
            Ok(addr) => ev.ip = Some(addr.to_string()),
            Err(_) => {
                return Err(err((
                    SkipKind::InvalidValue,
                    format!("ip {ip:?} is not an IPv4 or IPv6 address"),
                )))
            }
        }
    }
    Ok(ev)
}

type Problem = (SkipKind, String);

/// A time an imported event may have: from [`contract::EARLIEST_TIMESTAMP_MS`] to a day
/// after the import started. Anything else is refused, never stored clamped or wrapped
/// (the table's `DateTime` holds 1970–2106 only).
fn check_time(name: &str, ms: i64, now_ms: i64) -> Result<(), Problem> {
    let latest = now_ms.saturating_add(contract::MAX_FUTURE_MS);
    if (contract::EARLIEST_TIMESTAMP_MS..=latest).contains(&ms) {
        return Ok(());
    }
    Err((
        SkipKind::BadTimestamp,
        format!(
            "{name} {} is outside the times an event may have: from {} to a day from now ({})",
            crate::time::format_ms(ms),
            crate::time::format_ms(contract::EARLIEST_TIMESTAMP_MS),
            crate::time::format_ms(latest),
        ),
    ))
}

fn check_length(name: &str, value: &str, max: usize) -> Result<(), Problem> {
    if over(value, max) {
        return Err((
            SkipKind::TooLong,
            format!(
                "{name} is {} characters; the limit is {max}",
                value.chars().count()
            ),
        ));
    }
    Ok(())
}

/// `properties`: JSON, nested at most [`contract::MAX_DEPTH`] deep, with what the type
/// requires (present when the type needs them).
fn check_properties(kind: EventType, props: Option<&str>) -> Result<(), Problem> {
    let Some(props) = props else {
        if !contract::properties_required(kind) {
            return Ok(());
        }
        let required = contract::property_fields(kind)
            .iter()
            .find(|(_, k)| {
                matches!(
                    k,
                    contract::PropertyKind::RequiredText | contract::PropertyKind::Url
                )
            })
            .map_or("properties", |(name, _)| name);
        return Err((
            SkipKind::MissingField,
            format!(
                "{} {} event needs properties with {required}",
                article(kind.as_str()),
                kind.as_str()
            ),
        ));
    };
    // Depth first: JSON nested deeper than the parser's own limit (128) would otherwise
    // be reported as not JSON.
    let depth = contract::depth(props);
    if depth > contract::MAX_DEPTH {
        return Err((
            SkipKind::InvalidValue,
            format!(
                "properties nest objects or arrays {depth} levels deep; the limit is {}",
                contract::MAX_DEPTH
            ),
        ));
    }
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(props) {
        return Err((
            SkipKind::InvalidValue,
            format!("properties is not JSON: {}", crate::props::json_error(&e)),
        ));
    }
    match contract::property_problems(kind, props).first() {
        None => Ok(()),
        Some(PropertyProblem::Missing(field)) => Err((
            SkipKind::MissingField,
            format!(
                "the properties of {} {} event need {field}",
                article(kind.as_str()),
                kind.as_str()
            ),
        )),
        Some(PropertyProblem::NotAWebUrl(field)) => {
            let value: Value = serde_json::from_str(props).unwrap_or_default();
            Err((
                SkipKind::InvalidValue,
                match &value[field] {
                    Value::String(u) => format!(
                        "the {} {field} {u:?} is not an absolute http(s) URL",
                        kind.as_str()
                    ),
                    _ => format!("the {} {field} is not a string", kind.as_str()),
                },
            ))
        }
        Some(problem) => Err((
            SkipKind::InvalidValue,
            format!(
                "the properties of {} {} event: {problem}",
                article(kind.as_str()),
                kind.as_str()
            ),
        )),
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

fn check_feature_flags(flags: &str) -> Result<(), Problem> {
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
    if map.len() > contract::MAX_FEATURE_FLAGS {
        return Err((
            SkipKind::TooLong,
            format!(
                "feature_flags has {} flags; the limit is {}",
                map.len(),
                contract::MAX_FEATURE_FLAGS
            ),
        ));
    }
    for (key, value) in &map {
        let Value::String(value) = value else {
            return Err(invalid(&format!("the value of {key:?} is not a string")));
        };
        if over(key, contract::FEATURE_FLAG_KEY_LIMIT) {
            return Err((
                SkipKind::TooLong,
                format!(
                    "the feature flag name {key:?} is over {} characters",
                    contract::FEATURE_FLAG_KEY_LIMIT
                ),
            ));
        }
        if over(value, contract::FEATURE_FLAG_VALUE_LIMIT) {
            return Err((
                SkipKind::TooLong,
                format!(
                    "the value of feature flag {key:?} is over {} characters",
                    contract::FEATURE_FLAG_VALUE_LIMIT
                ),
            ));
        }
    }
    Ok(())
}

/// A value as a message shows it: quoted, and cut after 40 characters.
fn shown(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((end, _)) => format!("{:?}…", &s[..end]),
        None => format!("{s:?}"),
    }
}

/// The preset: what the source knew of the enriched columns, each in the shape the
/// enricher writes (`rivulet_common::contract`: value sets, code shapes, lengths), so
/// that an imported row holds nothing a live one could not.
fn check_preset(p: &crate::Preset) -> Result<(), Problem> {
    let invalid = |m: String| (SkipKind::InvalidValue, m);
    for (name, value) in [
        ("session_id", &p.session_id),
        ("region", &p.region),
        ("city", &p.city),
        ("browser", &p.browser),
        ("browser_version", &p.browser_version),
        ("operating_system", &p.operating_system),
        ("operating_system_version", &p.operating_system_version),
    ] {
        let Some(v) = value else { continue };
        let max = contract::PRESET_LIMITS
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, max)| *max);
        check_length(name, v, max)?;
        if v.chars().any(char::is_control) {
            return Err(invalid(format!(
                "{name} {} holds a control character",
                shown(v)
            )));
        }
    }
    if let Some(c) = &p.country {
        if !contract::is_country_code(c) {
            return Err(invalid(format!(
                "country {} is not an ISO 3166-1 alpha-2 code (two upper-case letters)",
                shown(c)
            )));
        }
    }
    if let Some(r) = &p.region {
        if !contract::is_region_of(r, p.country.as_deref()) {
            let of = p.country.as_deref().unwrap_or("XX");
            return Err(invalid(format!(
                "region {} is not a region of {} (`{of}-` and a subdivision's code or name)",
                shown(r),
                p.country
                    .as_deref()
                    .map_or("a country".to_owned(), |c| format!("country {c}")),
            )));
        }
    }
    let one_of = |name: &str, value: &Option<String>, set: &[&str]| match value {
        Some(v) if !set.contains(&v.as_str()) => Err(invalid(format!(
            "{name} {} is not one of {}",
            shown(v),
            set.join(", ")
        ))),
        _ => Ok(()),
    };
    one_of("device_type", &p.device_type, &contract::DEVICE_TYPES)?;
    one_of("channel", &p.channel, &contract::CHANNELS)?;
    if let Some(bot) = p.is_bot.filter(|b| *b > 1) {
        return Err(invalid(format!("is_bot is {bot}, not 0 or 1")));
    }
    if let Some(v) = &p.visitor_id {
        if !(v.len() == 32 && v.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))) {
            return Err(invalid(format!(
                "visitor_id {} is not 32 lower-case hex characters",
                shown(v)
            )));
        }
    }
    for (name, value, max) in [("lat", p.lat, 90.0), ("lon", p.lon, 180.0)] {
        if let Some(v) = value {
            if !(v.is_finite() && (-max..=max).contains(&v)) {
                return Err(invalid(format!("{name} is {v}, outside -{max}..{max}")));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// When the tests' import starts: 2026-11-25T10:00:00Z.
    const NOW: i64 = 1_795_600_800_000;

    fn event(event_type: &str) -> ImportedEvent {
        ImportedEvent {
            source_id: "s1".into(),
            event_type: event_type.into(),
            timestamp_ms: NOW - 3_600_000,
            // What the track API requires of an error event.
            event_name: (event_type == "error").then(|| "TypeError".into()),
            ..Default::default()
        }
    }

    fn finish(ev: ImportedEvent, line: u64) -> Result<ImportedEvent, RowError> {
        super::finish(ev, line, NOW)
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

    #[test]
    fn properties_nested_1000_deep_are_refused_as_ingest_refuses_them() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let mut ev = event("button_click");
        ev.properties = Some(deep(contract::MAX_DEPTH));
        assert!(finish(ev.clone(), 1).is_ok());
        ev.properties = Some(deep(contract::MAX_DEPTH + 1));
        assert_eq!(
            fails(ev.clone()),
            (
                SkipKind::InvalidValue,
                "properties nest objects or arrays 33 levels deep; the limit is 32".into()
            )
        );
        // 1,000 deep: 2,000 characters, within the length limit.
        let mut ev = event("custom_event");
        ev.event_name = Some("e".into());
        ev.properties = Some(deep(1000));
        assert_eq!(
            fails(ev),
            (
                SkipKind::InvalidValue,
                "properties nest objects or arrays 1000 levels deep; the limit is 32".into()
            )
        );
    }

    #[test]
    fn properties_have_each_types_shape() {
        let mut ev = event("form_submit");
        ev.properties = Some(r#"{"fieldCount":"3"}"#.into());
        assert_eq!(
            fails(ev),
            (
                SkipKind::InvalidValue,
                "the properties of a form_submit event: fieldCount must be a number".into()
            )
        );
        let mut ev = event("error");
        ev.properties = Some(r#"{"message":"m","lineNumber":"3"}"#.into());
        assert_eq!(
            fails(ev).1,
            "the properties of an error event: lineNumber must be a number"
        );
        let mut ev = event("error");
        ev.event_name = None;
        ev.properties = Some(r#"{"message":"m"}"#.into());
        assert_eq!(
            fails(ev),
            (
                SkipKind::MissingField,
                "an error event needs an event_name (the error's type)".into()
            )
        );
        let mut ev = event("outbound");
        ev.properties = Some(r#"{"url":"javascript:alert(1)"}"#.into());
        assert_eq!(fails(ev).0, SkipKind::InvalidValue);
        let mut ev = event("pageview");
        ev.feature_flags = Some(format!(
            "{{{}}}",
            (0..101)
                .map(|i| format!("\"f{i}\":\"on\""))
                .collect::<Vec<_>>()
                .join(",")
        ));
        assert_eq!(
            fails(ev),
            (
                SkipKind::TooLong,
                "feature_flags has 101 flags; the limit is 100".into()
            )
        );
    }

    #[test]
    fn times_from_2000_to_a_day_from_now() {
        let at = |ms: i64| {
            let mut ev = event("pageview");
            ev.timestamp_ms = ms;
            finish(ev, 3)
        };
        assert!(at(contract::EARLIEST_TIMESTAMP_MS).is_ok());
        assert!(at(NOW + contract::MAX_FUTURE_MS).is_ok());
        for (ms, shown) in [
            (
                contract::EARLIEST_TIMESTAMP_MS - 1,
                "1999-12-31T23:59:59.999Z",
            ),
            (
                NOW + contract::MAX_FUTURE_MS + 1,
                "2026-11-26T10:00:00.001Z",
            ),
            (-1, "1969-12-31T23:59:59.999Z"),
            (4_294_967_296_000, "2106-02-07T06:28:16Z"),
        ] {
            let e = at(ms).unwrap_err();
            assert_eq!((e.line, e.kind), (3, SkipKind::BadTimestamp));
            assert_eq!(
                e.message,
                format!(
                    "timestamp {shown} is outside the times an event may have: from \
                     2000-01-01T00:00:00Z to a day from now (2026-11-26T10:00:00Z)"
                )
            );
        }
        let mut ev = event("pageview");
        ev.preset.received_at_ms = Some(0);
        assert_eq!(
            fails(ev),
            (
                SkipKind::BadTimestamp,
                "received_at 1970-01-01T00:00:00Z is outside the times an event may have: \
                 from 2000-01-01T00:00:00Z to a day from now (2026-11-26T10:00:00Z)"
                    .into()
            )
        );
    }

    #[test]
    fn preset_values_have_the_enrichers_shapes() {
        type Set = fn(&mut crate::Preset, String);
        let fields: [(&str, usize, Set); 7] = [
            ("session_id", 255, |p, v| p.session_id = Some(v)),
            ("region", 100, |p, v| p.region = Some(format!("GB-{v}"))),
            ("city", 200, |p, v| p.city = Some(v)),
            ("browser", 100, |p, v| p.browser = Some(v)),
            ("browser_version", 50, |p, v| p.browser_version = Some(v)),
            ("operating_system", 100, |p, v| p.operating_system = Some(v)),
            ("operating_system_version", 50, |p, v| {
                p.operating_system_version = Some(v)
            }),
        ];
        for (name, max, set) in fields {
            let fill = |n: usize| "é".repeat(if name == "region" { n - 3 } else { n });
            let mut ev = event("pageview");
            set(&mut ev.preset, fill(max));
            assert!(finish(ev, 1).is_ok(), "{name} at its limit");
            let mut ev = event("pageview");
            set(&mut ev.preset, fill(max + 1));
            assert_eq!(
                fails(ev),
                (
                    SkipKind::TooLong,
                    format!("{name} is {} characters; the limit is {max}", max + 1)
                ),
            );
            // 100,000 characters: refused, never cut short.
            let mut ev = event("pageview");
            set(&mut ev.preset, fill(100_000));
            assert_eq!(fails(ev).0, SkipKind::TooLong, "{name}");
            let mut ev = event("pageview");
            set(&mut ev.preset, "a\u{0}b".into());
            assert_eq!(fails(ev).0, SkipKind::InvalidValue, "{name}");
        }

        let mut ev = event("pageview");
        ev.preset.device_type = Some("Toaster".into());
        assert_eq!(
            fails(ev),
            (
                SkipKind::InvalidValue,
                "device_type \"Toaster\" is not one of Desktop, Mobile, Tablet, Bot".into()
            )
        );
        let mut ev = event("pageview");
        ev.preset.country = Some("<script>".into());
        assert_eq!(
            fails(ev),
            (
                SkipKind::InvalidValue,
                "country \"<script>\" is not an ISO 3166-1 alpha-2 code (two upper-case letters)"
                    .into()
            )
        );
        let mut ev = event("pageview");
        ev.preset.channel = Some("Carrier Pigeon".into());
        assert_eq!(
            fails(ev),
            (
                SkipKind::InvalidValue,
                "channel \"Carrier Pigeon\" is not one of Direct, Organic Search, Paid Search, \
                 Organic Social, Paid Social, Email, Referral, Internal"
                    .into()
            )
        );
        let mut ev = event("pageview");
        ev.preset.country = Some("GB".into());
        ev.preset.region = Some("FR-IDF".into());
        assert_eq!(
            fails(ev),
            (
                SkipKind::InvalidValue,
                "region \"FR-IDF\" is not a region of country GB (`GB-` and a subdivision's \
                 code or name)"
                    .into()
            )
        );
        let mut ev = event("pageview");
        ev.preset.visitor_id = Some("X".repeat(32));
        assert_eq!(fails(ev).0, SkipKind::InvalidValue);
        let mut ev = event("pageview");
        ev.preset.is_bot = Some(2);
        assert_eq!(
            fails(ev),
            (SkipKind::InvalidValue, "is_bot is 2, not 0 or 1".into())
        );

        // What the enricher writes passes.
        let mut ev = event("pageview");
        ev.preset = crate::Preset {
            session_id: Some("0f1e2d3c4b5a69788796a5b4c3d2e1f0".into()),
            channel: Some("Organic Search".into()),
            country: Some("GB".into()),
            region: Some("GB-ENG".into()),
            city: Some("London".into()),
            lat: Some(51.5),
            lon: Some(-0.09),
            browser: Some("Chrome Mobile iOS".into()),
            browser_version: Some("120".into()),
            operating_system: Some("Mac OS X".into()),
            operating_system_version: Some("10.15".into()),
            device_type: Some("Bot".into()),
            is_bot: Some(1),
            visitor_id: Some("3f2a9c1e5b7d4a60918e2c4b6d8f0a13".into()),
            received_at_ms: Some(NOW),
            client_timestamp_ms: Some(NOW - 60_000),
            sent_at_ms: Some(NOW - 30_000),
        };
        assert!(finish(ev, 1).is_ok());
    }
}
