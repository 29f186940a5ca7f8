//! `posthog`: PostHog's events, as JSON lines or CSV (the first non-blank byte tells:
//! `{` is JSON lines).
//!
//! - JSON lines: the events model of PostHog's batch exports (S3 and the like): `uuid`,
//!   `event`, `distinct_id`, `timestamp` (ISO 8601), `properties` (an object, or a string
//!   of JSON), `elements_chain`, and others that are ignored (`person_id`,
//!   `person_properties`, `created_at`, `team_id`, …).
//! - CSV: the UI's export and the SQL editor's. Columns by name, in any order, with or
//!   without the `*.` prefix the UI gives the columns of its `*` selection; `id` for
//!   `uuid` (the old events API's name); the properties either in one `properties`
//!   column (JSON) or flattened into `properties.<name>` columns (every value then text),
//!   or both (the JSON column wins); `$session_id` may be a column of its own.
//!
//! Events: `$pageview` → pageview; `$autocapture` clicks on a link to another site →
//! outbound, on a `<button>` → button_click; `$web_vitals` → performance; `$exception`
//! → error; an event whose name does not start with `$` → custom_event with its own
//! properties (those not starting with `$`, less what posthog-js adds to every event);
//! any other `$` event (`$pageleave`, `$identify`, `$feature_flag_called`, `$screen`,
//! other autocaptures, …) is skipped as unsupported.
//!
//! Who: `$is_identified` true (or, without it, a `$device_id` that differs from
//! `distinct_id`) → `user_id` = `distinct_id` and `anonymous_id` = `$device_id`; else
//! `anonymous_id` = `distinct_id`. `person_id` (PostHog's own id of its person record)
//! is not used.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::csv::Record;
use crate::props::{
    dimension, flag, json_error, json_kind, major, major_minor, number, text, Props,
};
use crate::{Format, HeaderError, ImportedEvent, Preset, RowError, SkipKind};

/// Properties posthog-js (and PostHog's ingestion) puts on every event: not the
/// developer's own. The campaign parameters are those PostHog copies to persons
/// (plugin-server's `eventToPersonProperties`); the landing URL carries them anyway.
const SDK_PROPERTIES: &[&str] = &[
    "token",
    "distinct_id",
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "utm_content",
    "utm_name",
    "utm_term",
    "gclid",
    "gad_source",
    "gclsrc",
    "dclid",
    "gbraid",
    "wbraid",
    "fbclid",
    "msclkid",
    "twclid",
    "li_fat_id",
    "mc_cid",
    "igshid",
    "ttclid",
    "rdt_cid",
];

/// One event whatever the shape it came in.
struct Raw<'a> {
    uuid: &'a str,
    event: &'a str,
    timestamp: &'a str,
    distinct_id: &'a str,
    session_id: Option<&'a str>,
    elements_chain: Option<&'a str>,
    props: Props,
}

// ---------------------------------------------------------------- JSON lines

#[derive(Deserialize)]
struct JsonLine {
    uuid: Option<String>,
    id: Option<String>,
    event: Option<String>,
    timestamp: Option<Value>,
    distinct_id: Option<Value>,
    properties: Option<Value>,
    elements_chain: Option<String>,
    #[serde(rename = "$session_id")]
    session_id: Option<String>,
}

pub(crate) fn parse_jsonl(bytes: &[u8], line: u64) -> Result<ImportedEvent, RowError> {
    let err = |kind, message: String| RowError::new(line, kind, message);
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(err(
            SkipKind::Malformed,
            "not a JSON object (each line holds one event as {…})".into(),
        ));
    }
    let text = crate::props::utf8(bytes).map_err(|m| err(SkipKind::Malformed, m))?;
    let l: JsonLine = serde_json::from_str(text).map_err(|e| {
        let kind = json_kind(&e);
        let m = json_error(&e);
        err(
            kind,
            if kind == SkipKind::Malformed {
                format!("invalid JSON: {m}")
            } else {
                m
            },
        )
    })?;
    let timestamp = match &l.timestamp {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(err(
                SkipKind::BadTimestamp,
                format!("timestamp is {other}; expected an ISO 8601 string"),
            ))
        }
    };
    let distinct_id = match &l.distinct_id {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err(err(
                SkipKind::InvalidValue,
                format!("distinct_id is {other}, not a string"),
            ))
        }
    };
    let props = match l.properties {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(Value::String(s)) => parse_props(&s).map_err(|m| err(SkipKind::InvalidValue, m))?,
        Some(other) => {
            return Err(err(
                SkipKind::InvalidValue,
                format!("properties is {}, not a JSON object", kind_of(&other)),
            ))
        }
    };
    let raw = Raw {
        uuid: l.uuid.as_deref().or(l.id.as_deref()).unwrap_or_default(),
        event: l.event.as_deref().unwrap_or_default(),
        timestamp,
        distinct_id: &distinct_id,
        session_id: l.session_id.as_deref(),
        elements_chain: l.elements_chain.as_deref(),
        props,
    };
    map_event(raw, line)
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A string of JSON that must hold an object; empty is no properties.
fn parse_props(s: &str) -> Result<Props, String> {
    if s.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(s) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!(
            "properties is {}, not a JSON object",
            kind_of(&other)
        )),
        Err(e) => Err(format!("properties is not JSON: {}", json_error(&e))),
    }
}

// ---------------------------------------------------------------- CSV

pub(crate) struct CsvColumns {
    count: usize,
    uuid: usize,
    event: usize,
    timestamp: usize,
    distinct_id: usize,
    session_id: Option<usize>,
    elements_chain: Option<usize>,
    properties: Option<usize>,
    /// `properties.<name>` columns: (name, column).
    flattened: Vec<(String, usize)>,
}

impl CsvColumns {
    pub(crate) fn new(header: &[String]) -> Result<Self, HeaderError> {
        // The UI names the columns of its `*` selection `*.uuid`, `*.event`, ….
        let names: Vec<&str> = header
            .iter()
            .map(|h| h.strip_prefix("*.").unwrap_or(h))
            .collect();
        let find = |name: &str| names.iter().position(|h| *h == name);
        const COLUMNS_HINT: &str =
            ": export the events' uuid, event, timestamp, distinct_id and properties";
        let need = |name: &'static str, hint: &'static str| {
            find(name).ok_or(HeaderError::MissingColumn {
                format: Format::Posthog,
                column: name,
                hint,
            })
        };
        let uuid = find("uuid").or(find("id")).ok_or(HeaderError::MissingColumn {
            format: Format::Posthog,
            column: "uuid",
            hint: ": add uuid to the export (the importer keys each event by it, so that importing a file again stores each event once)",
        })?;
        let event = need("event", COLUMNS_HINT)?;
        let timestamp = need("timestamp", COLUMNS_HINT)?;
        let distinct_id = need("distinct_id", COLUMNS_HINT)?;
        let mut flattened = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if let Some(key) = name.strip_prefix("properties.") {
                if !key.is_empty() && !flattened.iter().any(|(k, _)| k == key) {
                    flattened.push((key.to_owned(), i));
                }
            }
        }
        let properties = find("properties");
        if properties.is_none() && flattened.is_empty() {
            return Err(HeaderError::MissingColumn {
                format: Format::Posthog,
                column: "properties",
                hint: " (nor any properties.<name> column): export the events' properties",
            });
        }
        Ok(CsvColumns {
            count: header.len(),
            uuid,
            event,
            timestamp,
            distinct_id,
            session_id: find("$session_id").or(find("session_id")),
            elements_chain: find("elements_chain"),
            properties,
            flattened,
        })
    }

    pub(crate) fn shape(&self) -> &'static str {
        if self.properties.is_some() {
            "posthog CSV (properties column)"
        } else {
            "posthog CSV (properties.* columns)"
        }
    }

    pub(crate) fn event(&self, record: &Record, line: u64) -> Result<ImportedEvent, RowError> {
        let err = |kind, message: String| RowError::new(line, kind, message);
        if record.len() != self.count {
            return Err(err(
                SkipKind::Malformed,
                format!(
                    "the row has {} fields where the header has {} (a missing comma, or an unquoted comma or line break?)",
                    record.len(),
                    self.count
                ),
            ));
        }
        let fields = record.fields().map_err(|m| err(SkipKind::Malformed, m))?;
        let get = |i: usize| fields[i].trim();
        let opt = |i: Option<usize>| i.map(get).filter(|s| !s.is_empty());
        let mut props = match self.properties {
            Some(i) => parse_props(fields[i]).map_err(|m| err(SkipKind::InvalidValue, m))?,
            None => Map::new(),
        };
        for (key, i) in &self.flattened {
            let value = fields[*i];
            if !value.is_empty() && !props.contains_key(key) {
                props.insert(key.clone(), Value::String(value.to_owned()));
            }
        }
        let raw = Raw {
            uuid: get(self.uuid),
            event: get(self.event),
            timestamp: get(self.timestamp),
            distinct_id: get(self.distinct_id),
            session_id: opt(self.session_id),
            elements_chain: opt(self.elements_chain),
            props,
        };
        map_event(raw, line)
    }
}

// ---------------------------------------------------------------- mapping

enum Kind {
    Pageview,
    Custom,
    Outbound(String),
    Button,
    Performance,
    Error,
}

fn map_event(r: Raw<'_>, line: u64) -> Result<ImportedEvent, RowError> {
    let err = |kind, message: String| RowError::new(line, kind, message);
    let p = &r.props;
    if r.event.is_empty() {
        return Err(err(SkipKind::MissingField, "event is empty".into()));
    }
    let chain = r.elements_chain.or_else(|| text(p, "$elements_chain"));
    let kind = match r.event {
        "$pageview" => Kind::Pageview,
        "$autocapture" => autocapture(p, chain).map_err(|m| err(SkipKind::UnsupportedEvent, m))?,
        "$web_vitals" => Kind::Performance,
        "$exception" => Kind::Error,
        e if e.starts_with('$') => {
            return Err(err(
                SkipKind::UnsupportedEvent,
                format!("{e} is a PostHog event with no Rivulet equivalent"),
            ))
        }
        _ => Kind::Custom,
    };
    if r.uuid.is_empty() {
        return Err(err(SkipKind::MissingField, "uuid is empty".into()));
    }
    if r.timestamp.is_empty() {
        return Err(err(SkipKind::BadTimestamp, "timestamp is empty".into()));
    }
    let timestamp_ms = crate::time::parse(r.timestamp)
        .map_err(|why| err(SkipKind::BadTimestamp, format!("timestamp {why}")))?;
    if r.distinct_id.is_empty() {
        return Err(err(SkipKind::MissingField, "distinct_id is empty".into()));
    }
    let invalid = |m: String| err(SkipKind::InvalidValue, m);

    // Who.
    let device_id = text(p, "$device_id");
    let identified = match flag(p, "$is_identified") {
        Some(b) => b,
        None => device_id.is_some_and(|d| d != r.distinct_id),
    };
    let (user_id, anonymous_id) = if identified {
        (
            Some(r.distinct_id.to_owned()),
            device_id.filter(|d| *d != r.distinct_id).map(str::to_owned),
        )
    } else {
        (None, Some(r.distinct_id.to_owned()))
    };

    // Where.
    let url = text(p, "$current_url").and_then(crate::url::split);
    let hostname = match &url {
        Some(u) => Some(u.host.to_owned()),
        None => text(p, "$host").map(|h| h.split(':').next().unwrap_or(h).to_owned()),
    };
    let pathname = text(p, "$pathname")
        .or(url.as_ref().map(|u| u.path))
        .map(str::to_owned);
    let querystring = url
        .as_ref()
        .map(|u| u.query)
        .filter(|q| !q.is_empty())
        .map(str::to_owned);

    // What.
    let mut ev = ImportedEvent {
        source_id: r.uuid.to_owned(),
        timestamp_ms,
        hostname,
        pathname,
        querystring,
        page_title: if matches!(kind, Kind::Pageview) {
            text(p, "title").map(str::to_owned)
        } else {
            None
        },
        referrer: text(p, "$referrer")
            .filter(|r| *r != "$direct")
            .map(str::to_owned),
        user_id,
        anonymous_id,
        ip: text(p, "$ip").map(str::to_owned),
        user_agent: text(p, "$raw_user_agent").map(str::to_owned),
        language: text(p, "$browser_language").map(str::to_owned),
        screen_width: number(p, "$screen_width")
            .and_then(|v| dimension("$screen_width", v))
            .map_err(invalid)?,
        screen_height: number(p, "$screen_height")
            .and_then(|v| dimension("$screen_height", v))
            .map_err(invalid)?,
        preset: preset(p, r.session_id).map_err(invalid)?,
        ..ImportedEvent::default()
    };
    match kind {
        Kind::Pageview => ev.event_type = "pageview".into(),
        Kind::Custom => {
            ev.event_type = "custom_event".into();
            ev.event_name = Some(r.event.to_owned());
            let own: Map<String, Value> = p
                .iter()
                .filter(|(k, _)| !k.starts_with('$') && !SDK_PROPERTIES.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if !own.is_empty() {
                ev.properties = Some(Value::Object(own).to_string());
            }
        }
        Kind::Outbound(url) => {
            ev.event_type = "outbound".into();
            let mut props = Map::new();
            props.insert("url".into(), Value::String(url));
            if let Some(t) = element_text(p, chain) {
                props.insert("text".into(), Value::String(t));
            }
            ev.properties = Some(Value::Object(props).to_string());
        }
        Kind::Button => {
            ev.event_type = "button_click".into();
            if let Some(t) = element_text(p, chain) {
                let mut props = Map::new();
                props.insert("text".into(), Value::String(t));
                ev.properties = Some(Value::Object(props).to_string());
            }
        }
        Kind::Performance => {
            ev.event_type = "performance".into();
            let vital = |name: &str| number(p, name).map_err(invalid);
            ev.lcp = vital("$web_vitals_LCP_value")?;
            ev.cls = vital("$web_vitals_CLS_value")?;
            ev.inp = vital("$web_vitals_INP_value")?;
            ev.fcp = vital("$web_vitals_FCP_value")?;
            ev.ttfb = vital("$web_vitals_TTFB_value")?;
            if [ev.lcp, ev.cls, ev.inp, ev.fcp, ev.ttfb]
                .iter()
                .all(Option::is_none)
            {
                return Err(err(
                    SkipKind::MissingField,
                    "a $web_vitals event with none of $web_vitals_LCP_value, _CLS_, _INP_, _FCP_, _TTFB_value".into(),
                ));
            }
        }
        Kind::Error => {
            ev.event_type = "error".into();
            let (name, props) = exception(p).map_err(|m| err(SkipKind::MissingField, m))?;
            ev.event_name = Some(name);
            ev.properties = Some(Value::Object(props).to_string());
        }
    }
    Ok(ev)
}

/// What an `$autocapture` event becomes; the message says why it is skipped.
fn autocapture(p: &Props, chain: Option<&str>) -> Result<Kind, String> {
    match text(p, "$event_type") {
        Some("click") => {}
        Some(other) => {
            return Err(format!(
                "$autocapture {other} events are not imported (only clicks on a button or on a link to another site)"
            ))
        }
        None => return Err("$autocapture without $event_type".into()),
    }
    if let Some(url) = text(p, "$external_click_url") {
        return Ok(Kind::Outbound(url.to_owned()));
    }
    match chain.and_then(|c| first_element(c).0) {
        Some(tag) if tag.eq_ignore_ascii_case("button") => Ok(Kind::Button),
        Some(tag) => Err(format!(
            "$autocapture click on <{tag}>: only clicks on a <button> or on a link to another site are imported"
        )),
        None => Err("$autocapture click without elements_chain: what was clicked is unknown".into()),
    }
}

/// The clicked element's text: `$el_text`, else the first element's `text` in the chain.
fn element_text(p: &Props, chain: Option<&str>) -> Option<String> {
    text(p, "$el_text")
        .map(str::to_owned)
        .or_else(|| chain.and_then(|c| first_element(c).1))
}

/// The tag and `text` attribute of the first (clicked) element of an elements chain:
/// `button.btn.primary:text="Sign up"nth-child="2";div.hero:…` → (`button`, `Sign up`).
fn first_element(chain: &str) -> (Option<&str>, Option<String>) {
    let tag_end = chain
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .unwrap_or(chain.len());
    let tag = (tag_end > 0).then(|| &chain[..tag_end]);
    // Attributes follow the first ':' as key="value" pairs; the element ends at a ';'
    // outside quotes.
    let mut text = None;
    let bytes = chain.as_bytes();
    let mut i = tag_end;
    let mut in_quotes = false;
    let mut key_start = None;
    while i < bytes.len() {
        let b = bytes[i];
        if in_quotes {
            if b == b'\\' {
                i += 2;
                continue;
            }
            if b == b'"' {
                in_quotes = false;
                key_start = Some(i + 1);
            }
        } else {
            match b {
                b'"' => {
                    in_quotes = true;
                    let key = key_start.and_then(|ks| chain.get(ks..i));
                    if key == Some("text=") && text.is_none() {
                        text = Some(quoted(&chain[i + 1..]));
                    }
                }
                b';' => break,
                b':' if key_start.is_none() => key_start = Some(i + 1),
                _ => {}
            }
        }
        i += 1;
    }
    (tag, text.filter(|t| !t.is_empty()))
}

/// The text of a quoted value up to its closing quote, with `\"` and `\\` unescaped.
fn quoted(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => break,
            '\\' => {
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// An `$exception`'s type (the event name) and properties: `message` and, when the
/// innermost stack frame has them, `fileName`, `lineNumber`, `columnNumber`.
fn exception(p: &Props) -> Result<(String, Map<String, Value>), String> {
    let first = p
        .get("$exception_list")
        .and_then(Value::as_array)
        .and_then(|list| list.first());
    let field = |name: &str| {
        first
            .and_then(|e| e.get(name))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let kind = field("type")
        .or_else(|| text(p, "$exception_type"))
        .or_else(|| text(p, "$exception_list.0.type"))
        .unwrap_or("Error");
    let message = field("value")
        .or_else(|| text(p, "$exception_message"))
        .or_else(|| text(p, "$exception_list.0.value"))
        .ok_or(
            "an $exception without a message ($exception_list[0].value or $exception_message)",
        )?;
    let mut props = Map::new();
    props.insert("message".into(), Value::String(message.to_owned()));
    // PostHog lists frames from the outermost call in: the last is where it was thrown.
    let frame = first
        .and_then(|e| e.pointer("/stacktrace/frames"))
        .and_then(Value::as_array)
        .and_then(|frames| frames.last());
    if let Some(frame) = frame {
        let pick = |a: &str, b: &str| frame.get(a).or_else(|| frame.get(b));
        if let Some(Value::String(f)) = pick("filename", "source") {
            props.insert("fileName".into(), Value::String(f.clone()));
        }
        if let Some(n @ Value::Number(_)) = pick("lineno", "line") {
            props.insert("lineNumber".into(), n.clone());
        }
        if let Some(n @ Value::Number(_)) = pick("colno", "column") {
            props.insert("columnNumber".into(), n.clone());
        }
    }
    Ok((kind.to_owned(), props))
}

/// What PostHog already knows of the enriched columns.
fn preset(p: &Props, session_column: Option<&str>) -> Result<Preset, String> {
    let os = text(p, "$os");
    let version = |key: &str| match p.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let country = text(p, "$geoip_country_code").map(str::to_owned);
    let region = match (&country, text(p, "$geoip_subdivision_1_code")) {
        (Some(c), Some(s)) => Some(format!("{c}-{s}")),
        _ => None,
    };
    Ok(Preset {
        session_id: session_column
            .or_else(|| text(p, "$session_id"))
            .map(str::to_owned),
        country,
        region,
        city: text(p, "$geoip_city_name").map(str::to_owned),
        lat: number(p, "$geoip_latitude")?,
        lon: number(p, "$geoip_longitude")?,
        browser: text(p, "$browser").map(|b| browser_name(b, os)),
        browser_version: version("$browser_version").and_then(|v| major(&v)),
        operating_system: os.map(str::to_owned),
        operating_system_version: version("$os_version").and_then(|v| os_version(os, &v)),
        device_type: text(p, "$device_type")
            .and_then(device_type)
            .map(str::to_owned),
        ..Preset::default()
    })
}

/// posthog-js's browser names to uap-core's (the enricher's); others stay as they are.
fn browser_name(name: &str, os: Option<&str>) -> String {
    match (name, os) {
        ("Chrome", Some("Android")) => "Chrome Mobile",
        ("Firefox", Some("Android")) => "Firefox Mobile",
        ("Microsoft Edge", _) => "Edge",
        ("Chrome iOS", _) => "Chrome Mobile iOS",
        ("Internet Explorer", _) => "IE",
        ("Internet Explorer Mobile", _) => "IE Mobile",
        ("Facebook Mobile", _) => "Facebook",
        ("Android Mobile", _) => "Android",
        (other, _) => other,
    }
    .to_owned()
}

/// posthog-js gives Windows its NT version (`10.0`, `6.1`); uap-core names the release.
fn os_version(os: Option<&str>, version: &str) -> Option<String> {
    if os == Some("Windows") {
        let release = match version {
            "10.0" => "10",
            "6.3" => "8.1",
            "6.2" => "8",
            "6.1" => "7",
            "6.0" => "Vista",
            "5.1" | "5.2" => "XP",
            _ => return major_minor(version),
        };
        return Some(release.into());
    }
    major_minor(version)
}

/// posthog-js's `$device_type` to Rivulet's (consoles count as Desktop, watches as
/// Mobile, as the enricher counts them).
fn device_type(device: &str) -> Option<&'static str> {
    match device {
        "Desktop" | "Console" => Some("Desktop"),
        "Mobile" | "Wearable" => Some("Mobile"),
        "Tablet" => Some("Tablet"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_chain_first_element() {
        assert_eq!(
            first_element(
                r#"button.btn.primary:attr__class="btn primary"nth-child="2"text="Sign up";div.hero:nth-child="1""#
            ),
            (Some("button"), Some("Sign up".into()))
        );
        assert_eq!(
            first_element(r#"a:href="https://x.example/a;b"text="Say \"hi\"";body"#),
            (Some("a"), Some("Say \"hi\"".into()))
        );
        assert_eq!(
            first_element(r#"span:nth-child="1";button:text="Outer""#),
            (Some("span"), None)
        );
        assert_eq!(first_element(""), (None, None));
        assert_eq!(first_element(":text=\"x\""), (None, Some("x".into())));
    }

    #[test]
    fn names() {
        assert_eq!(browser_name("Chrome", Some("Android")), "Chrome Mobile");
        assert_eq!(browser_name("Chrome", Some("Windows")), "Chrome");
        assert_eq!(browser_name("Microsoft Edge", None), "Edge");
        assert_eq!(browser_name("Chrome iOS", Some("iOS")), "Chrome Mobile iOS");
        assert_eq!(os_version(Some("Windows"), "10.0"), Some("10".into()));
        assert_eq!(
            os_version(Some("Mac OS X"), "10.15.7"),
            Some("10.15".into())
        );
        assert_eq!(os_version(Some("iOS"), "17.1.0"), Some("17.1".into()));
        assert_eq!(device_type("Console"), Some("Desktop"));
        assert_eq!(device_type("Wearable"), Some("Mobile"));
        assert_eq!(device_type(""), None);
    }
}
