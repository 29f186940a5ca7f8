//! The wire contract's rules, defined once (docs/design.md, "Wire contract"): the event
//! types, each string field's limit, what `properties` may hold, `feature_flags`, screen
//! sizes, identify's traits; and for imports, the times an event may have and the shape
//! of each preset (enriched) value.
//!
//! Ingest validates requests with these, `rivulet-import` validates every imported
//! record with them, and the tests below check that the OpenAPI document
//! (`ingest/openapi.json`), the Node.js SDK (`sdk/node/src/validate.ts`) and the tracking
//! script (`sdk/browser/src/tracker.ts`) state the same numbers.
//!
//! Feature-free: it needs none of the crate's client features (ClickHouse, Kafka, Redis),
//! so that the importer links nothing more to use it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// The event types, as `type` names them on the wire, in the order of
/// [`EventType::ALL`] (whose `as_str` reads this table).
pub const EVENT_TYPES: [&str; 9] = [
    "pageview",
    "custom_event",
    "performance",
    "outbound",
    "error",
    "button_click",
    "copy",
    "form_submit",
    "input_change",
];

/// The kinds of event: the tracking API's two, and the browser's (Rybbit's current types).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    #[default]
    Pageview,
    CustomEvent,
    /// Web vitals of one page (`lcp`, `cls`, `inp`, `fcp`, `ttfb`).
    Performance,
    /// A click on a link to another site.
    Outbound,
    /// An uncaught error; `event_name` is its type.
    Error,
    ButtonClick,
    Copy,
    FormSubmit,
    InputChange,
}

impl EventType {
    pub const ALL: [EventType; 9] = [
        EventType::Pageview,
        EventType::CustomEvent,
        EventType::Performance,
        EventType::Outbound,
        EventType::Error,
        EventType::ButtonClick,
        EventType::Copy,
        EventType::FormSubmit,
        EventType::InputChange,
    ];

    /// The type's name on the wire ([`EVENT_TYPES`], which lists them in the order of
    /// [`EventType::ALL`]).
    pub fn as_str(self) -> &'static str {
        EVENT_TYPES[self as usize]
    }

    /// The type named `name` on the wire, if there is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

/// Maximum length in characters (Unicode scalar values) of each string field: the
/// tracking API's for `page_title`, `referrer`, `user_id`, `user_agent`, `event_name` and
/// `properties`; Rybbit's for `pathname`, `hostname`, `querystring` and `language`; ours
/// for the rest.
pub const LIMITS: &[(&str, usize)] = &[
    ("pathname", 2048),
    ("hostname", 253),
    ("querystring", 2048),
    ("page_title", 512),
    ("referrer", 2048),
    ("user_id", 255),
    ("user_agent", 512),
    ("language", 35),
    ("event_name", 256),
    ("properties", 2048),
    ("anonymous_id", 255),
    ("tag", 256),
    ("app_version", 50),
    ("device_model", 200),
];

/// The limit of a string field without one of its own in [`LIMITS`] (`ip_address`).
pub const DEFAULT_LIMIT: usize = 2048;

/// The limit of `properties` in an `error` event, which carries a stack trace.
pub const ERROR_PROPERTIES_LIMIT: usize = 4096;

/// `properties` may nest objects and arrays at most this deep: some readers of the stored
/// JSON (Python's json module among them) cannot go much deeper.
pub const MAX_DEPTH: usize = 32;

/// `feature_flags`: at most this many flags, names and values at most this long.
pub const MAX_FEATURE_FLAGS: usize = 100;
pub const FEATURE_FLAG_KEY_LIMIT: usize = 100;
pub const FEATURE_FLAG_VALUE_LIMIT: usize = 2048;

/// Identify's `traits`, as JSON text, may be at most this many characters.
pub const TRAITS_LIMIT: usize = 2048;

/// `screenWidth` and `screenHeight`: from 0 to this, rounded to whole pixels.
pub const SCREEN_MAX: u16 = u16::MAX;

/// The limit of a string field, by its JSON name.
pub fn limit_of(name: &str) -> usize {
    LIMITS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(DEFAULT_LIMIT, |(_, m)| *m)
}

/// The limit of `properties` for an event of type `kind`.
pub fn properties_limit(kind: EventType) -> usize {
    if kind == EventType::Error {
        ERROR_PROPERTIES_LIMIT
    } else {
        limit_of("properties")
    }
}

/// True when `s` has more than `max` characters (Unicode scalar values): the limits are
/// in characters, as the tracking API states them. Counts only when the bytes could be
/// over.
pub fn longer_than(s: &str, max: usize) -> bool {
    s.len() > max && s.chars().count() > max
}

/// A screen dimension as the track API takes it: a number from 0 to [`SCREEN_MAX`]
/// (checked before rounding), rounded to whole pixels.
pub fn screen(v: f64) -> Option<u16> {
    (0.0..=f64::from(SCREEN_MAX))
        .contains(&v)
        .then(|| v.round() as u16)
}

/// How deep `json` (valid JSON) nests objects and arrays.
pub fn depth(json: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in json.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Whether an event of type `kind` must have `properties`.
pub fn properties_required(kind: EventType) -> bool {
    matches!(
        kind,
        EventType::Outbound | EventType::Error | EventType::Copy
    )
}

/// What a typed property must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropertyKind {
    Text,
    RequiredText,
    Number,
    /// Required: an absolute http(s) URL.
    Url,
}

/// The properties a type defines, and what each must be (other properties are allowed).
/// Types without any take any JSON.
pub fn property_fields(kind: EventType) -> &'static [(&'static str, PropertyKind)] {
    use PropertyKind::*;
    match kind {
        EventType::Outbound => &[("url", Url), ("text", Text), ("target", Text)],
        EventType::Error => &[
            ("message", RequiredText),
            ("stack", Text),
            ("fileName", Text),
            ("lineNumber", Number),
            ("columnNumber", Number),
        ],
        EventType::Copy => &[
            ("sourceElement", RequiredText),
            ("text", Text),
            ("textLength", Number),
        ],
        EventType::FormSubmit => &[
            ("formId", Text),
            ("formName", Text),
            ("formAction", Text),
            ("method", Text),
            ("fieldCount", Number),
        ],
        EventType::InputChange => &[("element", Text), ("inputName", Text)],
        EventType::Pageview
        | EventType::CustomEvent
        | EventType::Performance
        | EventType::ButtonClick => &[],
    }
}

/// Why a type's `properties` do not have the shape it defines. Its text is the track
/// API's (`fieldErrors.properties`, after "`<type>` events: ").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropertyProblem {
    /// The type defines properties, and the JSON is not an object.
    NotAnObject,
    /// A required property is absent or null.
    Missing(&'static str),
    NotText(&'static str),
    NotANumber(&'static str),
    NotAWebUrl(&'static str),
}

impl fmt::Display for PropertyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PropertyProblem::NotAnObject => f.write_str("properties must be a JSON object"),
            PropertyProblem::Missing(name) => write!(f, "{name} is required"),
            PropertyProblem::NotText(name) => write!(f, "{name} must be a string"),
            PropertyProblem::NotANumber(name) => write!(f, "{name} must be a number"),
            PropertyProblem::NotAWebUrl(name) => {
                write!(f, "{name} must be an absolute http(s) URL")
            }
        }
    }
}

/// The problems of `json` (valid JSON) as the `properties` of an event of type `kind`,
/// against [`property_fields`]; empty when it has the type's shape.
pub fn property_problems(kind: EventType, json: &str) -> Vec<PropertyProblem> {
    let fields = property_fields(kind);
    if fields.is_empty() {
        return Vec::new();
    }
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(json) else {
        return vec![PropertyProblem::NotAnObject];
    };
    fields
        .iter()
        .filter_map(|(name, kind)| field_problem(&map, name, *kind))
        .collect()
}

fn field_problem(
    map: &Map<String, Value>,
    name: &'static str,
    kind: PropertyKind,
) -> Option<PropertyProblem> {
    use PropertyKind::*;
    match (kind, map.get(name)) {
        (RequiredText | Url, None | Some(Value::Null)) => Some(PropertyProblem::Missing(name)),
        (_, None | Some(Value::Null)) => None,
        (Text | RequiredText, Some(Value::String(_))) => None,
        (Text | RequiredText, Some(_)) => Some(PropertyProblem::NotText(name)),
        (Number, Some(Value::Number(_))) => None,
        (Number, Some(_)) => Some(PropertyProblem::NotANumber(name)),
        (Url, Some(Value::String(u))) if is_web_url(u) => None,
        (Url, Some(_)) => Some(PropertyProblem::NotAWebUrl(name)),
    }
}

/// An absolute http(s) URL with a host (an outbound link's `url`).
pub fn is_web_url(s: &str) -> bool {
    url::Url::parse(s).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
}

// ------------------------------------------------------------------------ client time

/// The fields that carry a client's clock: when the event happened (`timestamp`) and when
/// the client sent it (`sent_at`; on a batch, on each event or on the envelope). Each is
/// an RFC 3339 date-time or a positive integer of epoch milliseconds; anything else is a
/// 400 naming the field ([`TIME_MESSAGE`]).
pub const TIME_FIELDS: [&str; 2] = ["timestamp", "sent_at"];

/// What a time field must be: the `fieldErrors` message after the field's name.
pub const TIME_MESSAGE: &str = "must be an RFC 3339 date-time or epoch milliseconds";

/// A client's `timestamp` sent without `sent_at` is used when it lies at most this long
/// before the receive time (7 days)…
pub const TIMESTAMP_MAX_PAST_MS: i64 = 7 * 24 * 3600 * 1000;
/// …and at most this long after it (10 minutes); else the receive time is used.
pub const TIMESTAMP_MAX_FUTURE_MS: i64 = 10 * 60 * 1000;

/// A timestamp corrected by `sent_at` that lies more than this after the receive time
/// (23 hours, as PostHog) is clamped to the receive time. One that lies more than
/// [`TIMESTAMP_MAX_PAST_MS`] before it gets the receive time, as without `sent_at`.
pub const CORRECTED_MAX_FUTURE_MS: i64 = 23 * 3600 * 1000;

/// Which bound of the accepted window a client's time crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    Past,
    Future,
}

impl Bound {
    pub fn as_str(self) -> &'static str {
        match self {
            Bound::Past => "past",
            Bound::Future => "future",
        }
    }
}

/// The time an event is stored at, and how it was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTime {
    /// Epoch milliseconds.
    pub ms: i64,
    /// The client's `timestamp` was corrected by its `sent_at`.
    pub corrected: bool,
    /// The client's (corrected) time lay outside the accepted window: `ms` is the receive
    /// time instead.
    pub clamped: Option<Bound>,
}

/// The time to store an event at, from the client's `timestamp` and `sent_at` and the
/// receive time (all epoch ms).
///
/// - No `timestamp`: the receive time.
/// - A `timestamp` without `sent_at`: itself when it lies within [`TIMESTAMP_MAX_PAST_MS`]
///   before and [`TIMESTAMP_MAX_FUTURE_MS`] after the receive time, else the receive time.
/// - Both: corrected for the client's clock, as PostHog and Segment do:
///   `received − (sent_at − timestamp)`, the event's age by the client's own clock taken
///   back from the server's receive time. A result more than [`CORRECTED_MAX_FUTURE_MS`]
///   ahead of the receive time, or more than [`TIMESTAMP_MAX_PAST_MS`] before it, gives
///   the receive time.
pub fn event_time(timestamp: Option<i64>, sent_at: Option<i64>, received: i64) -> EventTime {
    let Some(ts) = timestamp else {
        return EventTime {
            ms: received,
            corrected: false,
            clamped: None,
        };
    };
    let (candidate, corrected, max_future) = match sent_at {
        // i128: the client's values are any i64 epoch milliseconds.
        Some(sent) => (
            i128::from(received) - (i128::from(sent) - i128::from(ts)),
            true,
            CORRECTED_MAX_FUTURE_MS,
        ),
        None => (i128::from(ts), false, TIMESTAMP_MAX_FUTURE_MS),
    };
    let clamped = if candidate > i128::from(received) + i128::from(max_future) {
        Some(Bound::Future)
    } else if candidate < i128::from(received) - i128::from(TIMESTAMP_MAX_PAST_MS) {
        Some(Bound::Past)
    } else {
        None
    };
    EventTime {
        // Within the window, so within i64.
        ms: if clamped.is_some() {
            received
        } else {
            candidate as i64
        },
        corrected,
        clamped,
    }
}

// ---------------------------------------------------------------------------- imports

/// The earliest time an imported event may have: 2000-01-01T00:00:00Z, epoch ms. The
/// `events` table stores seconds from 1970 to 2106 (an unsigned 32-bit `DateTime`); web
/// analytics events older than 2000 are not real ones, and a date before 1970 could only
/// be stored wrapped or clamped.
pub const EARLIEST_TIMESTAMP_MS: i64 = 946_684_800_000;

/// An imported event may lie at most this far after the import's start (a source's clock
/// a little ahead), epoch ms: one day.
pub const MAX_FUTURE_MS: i64 = 24 * 3600 * 1000;

/// `device_type`: the enricher's device classes.
pub const DEVICE_TYPES: [&str; 4] = ["Desktop", "Mobile", "Tablet", "Bot"];

/// `channel`: the enricher's channels (`enrichment/src/channel.rs`).
pub const CHANNELS: [&str; 8] = [
    "Direct",
    "Organic Search",
    "Paid Search",
    "Organic Social",
    "Paid Social",
    "Email",
    "Referral",
    "Internal",
];

/// The longest value of each free-text preset field, in characters. `country`,
/// `device_type`, `channel` and `visitor_id` have shapes of their own instead.
pub const PRESET_LIMITS: &[(&str, usize)] = &[
    ("session_id", 255),
    // An ISO 3166-2 code (`GB-ENG`), or the country and a subdivision's name
    // (`GB-England`) when the geo database has no code.
    ("region", 100),
    ("city", 200),
    ("browser", 100),
    ("browser_version", 50),
    ("operating_system", 100),
    ("operating_system_version", 50),
];

/// Whether `s` has the shape of an ISO 3166-1 alpha-2 code: two upper-case ASCII
/// letters. The shape, not the list: geo databases also use user-assigned codes (`XK`
/// for Kosovo, `EU`), which the enricher stores as they come.
pub fn is_country_code(s: &str) -> bool {
    s.len() == 2 && s.bytes().all(|b| b.is_ascii_uppercase())
}

/// Whether `region` is a region of `country` as the enricher writes one: the country's
/// code, `-`, and a subdivision's code or name. Without a country, any country code
/// may lead.
pub fn is_region_of(region: &str, country: Option<&str>) -> bool {
    match region.split_once('-') {
        Some((cc, sub)) => {
            is_country_code(cc) && country.is_none_or(|c| c == cc) && !sub.trim().is_empty()
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_type_names_are_the_wires() {
        assert_eq!(EventType::ALL.len(), EVENT_TYPES.len());
        for (t, name) in EventType::ALL.into_iter().zip(EVENT_TYPES) {
            assert_eq!(t.as_str(), name);
            assert_eq!(serde_json::to_value(t).unwrap(), name, "serde's name");
            assert_eq!(EventType::parse(name), Some(t));
        }
    }

    #[test]
    fn limits_and_helpers() {
        assert_eq!(limit_of("page_title"), 512);
        assert_eq!(limit_of("ip_address"), DEFAULT_LIMIT);
        assert_eq!(properties_limit(EventType::Error), 4096);
        assert_eq!(properties_limit(EventType::Copy), 2048);
        assert!(!longer_than(&"é".repeat(3), 3));
        assert!(longer_than(&"é".repeat(4), 3));
        assert_eq!(screen(1080.5), Some(1081));
        assert_eq!(screen(65535.0), Some(65535));
        for bad in [65535.2, -0.1, f64::NAN, f64::INFINITY] {
            assert_eq!(screen(bad), None, "{bad}");
        }
    }

    #[test]
    fn depth_counts_nesting_outside_strings() {
        assert_eq!(depth("1"), 0);
        assert_eq!(depth(r#"{"a":[1,{"b":2}]}"#), 3);
        assert_eq!(depth(r#"{"a":"[[[[\"{{{"}"#), 1);
        let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
        assert_eq!(depth(&deep), 1000);
    }

    #[test]
    fn property_shapes() {
        let p = |kind, json| property_problems(kind, json);
        assert!(p(EventType::Outbound, r#"{"url":"https://x.example/a"}"#).is_empty());
        assert_eq!(
            p(EventType::Outbound, r#"{"url":"/relative"}"#),
            [PropertyProblem::NotAWebUrl("url")]
        );
        assert_eq!(
            p(EventType::Outbound, r#"{"url":"javascript:alert(1)"}"#),
            [PropertyProblem::NotAWebUrl("url")]
        );
        assert_eq!(
            p(EventType::Error, r#"{"lineNumber":"3"}"#),
            [
                PropertyProblem::Missing("message"),
                PropertyProblem::NotANumber("lineNumber")
            ]
        );
        assert_eq!(p(EventType::Copy, "[]"), [PropertyProblem::NotAnObject]);
        assert!(p(EventType::ButtonClick, "[1]").is_empty());
        assert_eq!(
            PropertyProblem::NotAWebUrl("url").to_string(),
            "url must be an absolute http(s) URL"
        );
        assert_eq!(
            PropertyProblem::Missing("message").to_string(),
            "message is required"
        );
    }

    const HOUR: i64 = 3600 * 1000;
    /// A receive time: 2026-01-02T03:04:05.678Z.
    const RECEIVED: i64 = 1_767_323_045_678;

    #[test]
    fn without_sent_at_a_timestamp_is_used_within_its_window() {
        let t = |ts: Option<i64>| event_time(ts, None, RECEIVED);
        let kept = |ms| EventTime {
            ms,
            corrected: false,
            clamped: None,
        };
        let received = |bound| EventTime {
            ms: RECEIVED,
            corrected: false,
            clamped: bound,
        };
        assert_eq!(t(None), received(None));
        assert_eq!(t(Some(RECEIVED - 1000)), kept(RECEIVED - 1000));
        assert_eq!(
            t(Some(RECEIVED - TIMESTAMP_MAX_PAST_MS)),
            kept(RECEIVED - TIMESTAMP_MAX_PAST_MS)
        );
        assert_eq!(
            t(Some(RECEIVED + TIMESTAMP_MAX_FUTURE_MS)),
            kept(RECEIVED + TIMESTAMP_MAX_FUTURE_MS)
        );
        assert_eq!(
            t(Some(RECEIVED - TIMESTAMP_MAX_PAST_MS - 1)),
            received(Some(Bound::Past))
        );
        assert_eq!(
            t(Some(RECEIVED + TIMESTAMP_MAX_FUTURE_MS + 1)),
            received(Some(Bound::Future))
        );
        // sent_at alone changes nothing: there is no time of the event to correct.
        assert_eq!(
            event_time(None, Some(RECEIVED - HOUR), RECEIVED),
            received(None)
        );
    }

    #[test]
    fn sent_at_corrects_the_clients_clock() {
        // An event 2 h old, queued offline, by a clock 1 h slow. The client's clock read
        // (received − 1 h) when it sent the event and (received − 3 h) when it happened:
        // 2 h apart. received − (sent_at − timestamp) = received − 2 h.
        let sent_at = RECEIVED - HOUR;
        let timestamp = RECEIVED - 3 * HOUR;
        let t = event_time(Some(timestamp), Some(sent_at), RECEIVED);
        assert_eq!(t.ms, RECEIVED - 2 * HOUR);
        assert!(t.corrected && t.clamped.is_none());

        // A clock 5 h fast, an event 10 s old: received − 10 s, though the client's
        // timestamp lies 5 h ahead (without sent_at, the receive time).
        let t = event_time(
            Some(RECEIVED + 5 * HOUR - 10_000),
            Some(RECEIVED + 5 * HOUR),
            RECEIVED,
        );
        assert_eq!(t.ms, RECEIVED - 10_000);
        assert_eq!(
            event_time(Some(RECEIVED + 5 * HOUR - 10_000), None, RECEIVED).ms,
            RECEIVED
        );

        // A clock that is right: the event's time plus the request's time in flight.
        let t = event_time(Some(RECEIVED - 5000), Some(RECEIVED - 40), RECEIVED);
        assert_eq!(t.ms, RECEIVED - 5000 + 40);
    }

    #[test]
    fn a_corrected_time_is_kept_within_its_window() {
        let at = |ts: i64, sent: i64| event_time(Some(ts), Some(sent), RECEIVED);
        // A timestamp after sent_at puts the event in the future: up to 23 h is kept…
        let t = at(RECEIVED + CORRECTED_MAX_FUTURE_MS, RECEIVED);
        assert_eq!(
            (t.ms, t.clamped),
            (RECEIVED + CORRECTED_MAX_FUTURE_MS, None)
        );
        // …more is clamped to the receive time.
        let t = at(RECEIVED + CORRECTED_MAX_FUTURE_MS + 1, RECEIVED);
        assert_eq!((t.ms, t.clamped), (RECEIVED, Some(Bound::Future)));
        let t = at(RECEIVED + 24 * HOUR, RECEIVED - HOUR);
        assert_eq!((t.ms, t.clamped), (RECEIVED, Some(Bound::Future)));
        assert!(t.corrected);
        // Older than 7 days once corrected: the receive time, as without sent_at.
        let t = at(RECEIVED - TIMESTAMP_MAX_PAST_MS, RECEIVED);
        assert_eq!((t.ms, t.clamped), (RECEIVED - TIMESTAMP_MAX_PAST_MS, None));
        let t = at(RECEIVED - TIMESTAMP_MAX_PAST_MS - 1, RECEIVED);
        assert_eq!((t.ms, t.clamped), (RECEIVED, Some(Bound::Past)));
        // An event 8 days old by a clock 8 days slow: too old, whatever the clock.
        let slow = RECEIVED - 8 * 24 * HOUR;
        let t = at(slow - 8 * 24 * HOUR, slow);
        assert_eq!((t.ms, t.clamped), (RECEIVED, Some(Bound::Past)));
        // A clock 8 days slow, an event a minute old: within the window once corrected.
        assert_eq!(at(slow - 60_000, slow).ms, RECEIVED - 60_000);
        // Extreme values do not overflow.
        for (ts, sent) in [
            (i64::MAX, i64::MIN),
            (i64::MIN, i64::MAX),
            (i64::MAX, 1),
            (1, i64::MAX),
        ] {
            let t = at(ts, sent);
            assert_eq!(t.ms, RECEIVED, "{ts} {sent}");
            assert!(t.clamped.is_some());
        }
    }

    #[test]
    fn preset_shapes() {
        assert!(is_country_code("GB"));
        for bad in ["", "gb", "GBR", "<script>", "G1", "É"] {
            assert!(!is_country_code(bad), "{bad}");
        }
        assert!(is_region_of("GB-ENG", Some("GB")));
        assert!(is_region_of("GB-England", Some("GB")));
        assert!(is_region_of("US-CA", None));
        for (bad, country) in [
            ("FR-IDF", Some("GB")),
            ("ENG", Some("GB")),
            ("GB-", Some("GB")),
            ("<script>-x", None),
        ] {
            assert!(!is_region_of(bad, country), "{bad}");
        }
    }
}

/// Every other statement of the contract says the same as this module: the OpenAPI
/// document served to clients, the Node.js SDK's own checks and the tracking script's
/// cuts. Read from their sources, so that a change to one of them without the other
/// fails here (CI runs these with the Rust tests).
#[cfg(test)]
mod statements_agree {
    use super::*;
    use std::collections::BTreeMap;

    const OPENAPI: &str = include_str!("../../ingest/openapi.json");
    const NODE_SDK: &str = include_str!("../../sdk/node/src/validate.ts");
    const BROWSER: &str = include_str!("../../sdk/browser/src/tracker.ts");

    fn limits() -> BTreeMap<String, u64> {
        LIMITS
            .iter()
            .map(|(f, n)| (f.to_string(), *n as u64))
            .collect()
    }

    #[test]
    fn the_openapi_document_has_the_limits_and_the_types() {
        let doc: Value = serde_json::from_str(OPENAPI).expect("ingest/openapi.json is JSON");
        let props = &doc["components"]["schemas"]["TrackRequest"]["properties"];
        let documented: BTreeMap<String, u64> = props
            .as_object()
            .expect("TrackRequest properties")
            .iter()
            .filter_map(|(f, p)| Some((f.clone(), p["maxLength"].as_u64()?)))
            .collect();
        assert_eq!(documented, limits(), "maxLength of each field");
        assert_eq!(props["type"]["enum"], serde_json::json!(EVENT_TYPES));
        for f in ["screenWidth", "screenHeight"] {
            assert_eq!(props[f]["minimum"], 0, "{f}");
            assert_eq!(props[f]["maximum"], SCREEN_MAX, "{f}");
        }
        let said = |field: &str, what: &str| {
            let text = props[field]["description"].as_str().unwrap_or_default();
            assert!(
                text.contains(what),
                "{field}'s description says {what}: {text}"
            );
        };
        said("properties", &format!("nested at most {MAX_DEPTH} deep"));
        said(
            "properties",
            &format!("up to {ERROR_PROPERTIES_LIMIT} characters"),
        );
        said(
            "feature_flags",
            &format!(
                "At most {MAX_FEATURE_FLAGS} flags; names at most {FEATURE_FLAG_KEY_LIMIT} \
                 characters, values at most {FEATURE_FLAG_VALUE_LIMIT}"
            ),
        );
        let traits = &doc["components"]["schemas"]["IdentifyRequest"]["properties"]["traits"];
        assert!(
            traits.to_string().contains(&TRAITS_LIMIT.to_string()),
            "IdentifyRequest's traits state their limit, {TRAITS_LIMIT}: {traits}"
        );
        // The time fields: on an event (a batch's events are TrackRequests), and sent_at
        // on a batch's envelope too; each RFC 3339 or epoch ms, with its window.
        let batch = &doc["components"]["schemas"]["BatchRequest"]["properties"];
        let time_schema =
            serde_json::json!([{"type": "string", "format": "date-time"}, {"type": "integer"}]);
        for (schema, field) in TIME_FIELDS
            .iter()
            .map(|f| (props, *f))
            .chain([(batch, "sent_at")])
        {
            assert_eq!(schema[field]["oneOf"], time_schema, "{field}");
        }
        said(
            "timestamp",
            "7 days in the past and 10 minutes in the future",
        );
        said("sent_at", "more than 23 hours in the future");
        said("sent_at", "7 days");
        assert_eq!(
            (
                TIMESTAMP_MAX_PAST_MS,
                TIMESTAMP_MAX_FUTURE_MS,
                CORRECTED_MAX_FUTURE_MS
            ),
            (7 * 24 * 3_600_000, 10 * 60_000, 23 * 3_600_000),
            "the numbers the descriptions state"
        );
    }

    /// Both clients send `sent_at` with their events (the time of each attempt), so that
    /// ingest can correct their clocks.
    #[test]
    fn the_clients_send_sent_at() {
        const NODE_TRACKER: &str = include_str!("../../sdk/node/src/tracker.ts");
        assert!(
            NODE_TRACKER.contains("\"sent_at\":"),
            "sdk/node/src/tracker.ts sends sent_at"
        );
        assert!(
            BROWSER.contains("sent_at: Date.now()"),
            "sdk/browser/src/tracker.ts sends sent_at"
        );
    }

    /// The numbers of `export const NAME = { field: N, … } as const`.
    fn ts_object(ts: &str, name: &str) -> Option<BTreeMap<String, u64>> {
        let head = format!("export const {name} = {{");
        let start = ts.find(&head)?;
        let end = start + ts[start..].find("} as const")?;
        Some(
            ts[start + head.len()..end]
                .lines()
                .filter_map(|l| {
                    let (field, n) = l.trim().trim_end_matches(',').split_once(':')?;
                    Some((field.trim().to_string(), n.trim().parse().ok()?))
                })
                .collect(),
        )
    }

    /// The number `name = N;` sets.
    fn ts_number(ts: &str, name: &str) -> Option<u64> {
        let head = format!("{name} = ");
        let rest = &ts[ts.find(&head)? + head.len()..];
        rest[..rest.find(';')?].trim().replace('_', "").parse().ok()
    }

    /// The fields the Node.js SDK sends and so checks itself: the tracking API's, and
    /// the anonymous id. (The browser-only fields are the tracking script's.)
    const NODE_FIELDS: &[&str] = &[
        "pathname",
        "hostname",
        "querystring",
        "page_title",
        "referrer",
        "user_id",
        "user_agent",
        "language",
        "event_name",
        "properties",
        "anonymous_id",
    ];

    /// Where the Node.js SDK's source (`sdk/node/src/validate.ts`) differs from the
    /// contract.
    fn node_sdk_differences(ts: &str) -> Vec<String> {
        let mut out = Vec::new();
        let Some(sdk) = ts_object(ts, "LIMITS") else {
            return vec!["it exports no LIMITS".into()];
        };
        let ours = limits();
        for (field, limit) in &sdk {
            if ours.get(field) != Some(limit) {
                out.push(format!(
                    "LIMITS.{field} is {limit}, the contract's {:?}",
                    ours.get(field)
                ));
            }
        }
        for field in NODE_FIELDS {
            if !sdk.contains_key(*field) {
                out.push(format!("LIMITS has no {field}"));
            }
        }
        let traits = ts_number(ts, "export const TRAITS_MAX_CHARS");
        if traits != Some(TRAITS_LIMIT as u64) {
            out.push(format!(
                "TRAITS_MAX_CHARS is {traits:?}, the contract's {TRAITS_LIMIT}"
            ));
        }
        let screen = ts
            .find("function checkScreen")
            .map(|at| &ts[at..])
            .and_then(|f| Some(&f[..f.find("\n}")?]))
            .unwrap_or_default();
        if !(screen.contains(&format!("value <= {SCREEN_MAX}"))
            && screen.contains(&format!("from 0 to {SCREEN_MAX}")))
        {
            out.push(format!("checkScreen's range is not 0 to {SCREEN_MAX}"));
        }
        out
    }

    #[test]
    fn the_node_sdk_has_the_limits() {
        assert_eq!(
            node_sdk_differences(NODE_SDK),
            Vec::<String>::new(),
            "sdk/node/src/validate.ts"
        );
    }

    /// The text of a call's arguments: from the `(` at `open` to its matching `)`.
    fn call_arguments(src: &str, open: usize) -> Option<&str> {
        let mut depth = 0;
        for (i, c) in src[open..].char_indices() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(&src[open + 1..open + i]);
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// The top-level arguments of a call, split at its commas.
    fn arguments(args: &str) -> Vec<&str> {
        let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
        for (i, c) in args.char_indices() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(args[start..i].trim());
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push(args[start..].trim());
        out.retain(|a| !a.is_empty());
        out
    }

    /// Where the tracking script (`sdk/browser/src/tracker.ts`) differs from the contract.
    /// It cuts each text field to ingest's limit (`field: … cut(value, N) …`) and an
    /// error's properties to theirs (`fitJson(object, N, order)`); the numbers are written
    /// where they are used, which keeps the script small.
    fn tracking_script_differences(src: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut cuts: BTreeMap<&str, Vec<Option<u64>>> = BTreeMap::new();
        for (at, _) in src.match_indices("cut(") {
            if src[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                continue; // another function's name ending in "cut"
            }
            // The field is the property the line sets.
            let line = src[..at].rsplit('\n').next().unwrap_or_default();
            let Some((field, _)) = line.trim().split_once(':') else {
                continue;
            };
            let n = call_arguments(src, at + "cut".len())
                .and_then(|args| arguments(args).last()?.parse().ok());
            cuts.entry(field).or_default().push(n);
        }
        let ours = limits();
        for field in [
            "pathname",
            "querystring",
            "page_title",
            "referrer",
            "event_name",
        ] {
            match cuts.get(field) {
                None => out.push(format!("no `{field}: cut(…, N)`")),
                Some(found) => {
                    for n in found {
                        if n.as_ref() != ours.get(field) {
                            out.push(format!(
                                "{field} is cut to {n:?}, the contract's limit is {:?}",
                                ours.get(field)
                            ));
                        }
                    }
                }
            }
        }
        let error_limit = src
            .find("fitJson(")
            .and_then(|at| call_arguments(src, at + "fitJson".len()))
            .and_then(|args| arguments(args).get(1)?.parse::<usize>().ok());
        if error_limit != Some(ERROR_PROPERTIES_LIMIT) {
            out.push(format!(
                "an error's properties are fitted to {error_limit:?}, the contract's limit is {ERROR_PROPERTIES_LIMIT}"
            ));
        }
        out
    }

    #[test]
    fn the_tracking_script_cuts_to_the_limits() {
        assert_eq!(
            tracking_script_differences(BROWSER),
            Vec::<String>::new(),
            "sdk/browser/src/tracker.ts"
        );
    }

    /// The readers above see a change: each number changed in a copy of the sources is
    /// reported.
    #[test]
    fn a_changed_number_is_seen() {
        for (from, to) in [
            ("page_title: 512", "page_title: 513"),
            ("TRAITS_MAX_CHARS = 2048", "TRAITS_MAX_CHARS = 4096"),
            ("value <= 65535", "value <= 65536"),
        ] {
            assert!(NODE_SDK.contains(from), "{from}");
            let changed = NODE_SDK.replace(from, to);
            assert_eq!(node_sdk_differences(&changed).len(), 1, "{to}");
        }
        for (from, to) in [
            ("cut(doc.title, 512)", "cut(doc.title, 500)"),
            ("cut(page.query, 2048)", "cut(page.query, 4096)"),
            ("event_name: cut(name, 256)", "event_name: cut(name, 255)"),
            ("4096,", "2048,"),
        ] {
            assert!(BROWSER.contains(from), "{from}");
            let changed = BROWSER.replacen(from, to, 1);
            assert_eq!(tracking_script_differences(&changed).len(), 1, "{to}");
        }
    }
}
