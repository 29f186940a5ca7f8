//! `rivulet`: Rivulet's own export, NDJSON (one event a line) or CSV.
//!
//! Fields map 1:1 (the JSON names of the track API: `type`, `screenWidth`, …; `ip` or
//! `ip_address`); every enriched column goes to [`Preset`]. Empty strings are absent
//! values. `timestamp` and `received_at` are RFC 3339 or epoch milliseconds (a number or
//! digits). `event_id` is required (it is the source id too), as are `timestamp` and
//! `type`. `site_id` and unknown fields are ignored: the importer decides the site.
//!
//! `user_id` is the stored user id: the caller's own, or the enricher's 32-hex visitor
//! id; the export cannot tell them apart. It is kept in `user_id`, and also in
//! [`Preset::visitor_id`] when it has a visitor id's shape.
//!
//! The CSV export has the NDJSON line's fields as columns, under a header line. Its text
//! cells are neutralised against formula injection (`admin/src/export.rs`): one that
//! starts with `=`, `+`, `-`, `@`, a tab, a carriage return or `'` has a `'` put before
//! it. [`CsvColumns`] takes exactly one leading `'` off each text cell and reads the row
//! as the NDJSON line it stands for, so that both exports of the same rows import as the
//! same events.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::Value;

use crate::csv::Record;
use crate::props::{json_error, json_kind};
use crate::{Format, HeaderError, ImportedEvent, Preset, RowError, SkipKind};

#[derive(Deserialize)]
struct Line {
    event_id: Option<String>,
    timestamp: Option<Ts>,
    received_at: Option<Ts>,
    client_timestamp: Option<Ts>,
    sent_at: Option<Ts>,
    #[serde(rename = "type")]
    event_type: Option<String>,
    event_name: Option<String>,
    properties: Option<String>,
    hostname: Option<String>,
    pathname: Option<String>,
    querystring: Option<String>,
    page_title: Option<String>,
    referrer: Option<String>,
    user_id: Option<String>,
    anonymous_id: Option<String>,
    user_agent: Option<String>,
    ip: Option<String>,
    ip_address: Option<String>,
    language: Option<String>,
    #[serde(rename = "screenWidth")]
    screen_width: Option<f64>,
    #[serde(rename = "screenHeight")]
    screen_height: Option<f64>,
    tag: Option<String>,
    app_version: Option<String>,
    device_model: Option<String>,
    /// A string of JSON in the export; an object is taken too.
    feature_flags: Option<Value>,
    lcp: Option<f64>,
    cls: Option<f64>,
    inp: Option<f64>,
    fcp: Option<f64>,
    ttfb: Option<f64>,
    channel: Option<String>,
    session_id: Option<String>,
    country: Option<String>,
    region: Option<String>,
    city: Option<String>,
    lat: Option<f64>,
    lon: Option<f64>,
    browser: Option<String>,
    browser_version: Option<String>,
    operating_system: Option<String>,
    operating_system_version: Option<String>,
    device_type: Option<String>,
    is_bot: Option<u8>,
}

/// A timestamp as written: text (RFC 3339 or digits) or a number (epoch ms).
enum Ts {
    Text(String),
    Millis(i64),
    /// A number that is not an integer of milliseconds.
    Other(f64),
}

impl<'de> Deserialize<'de> for Ts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Ts;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an RFC 3339 string or epoch milliseconds")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Ts, E> {
                Ok(Ts::Text(v.to_owned()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Ts, E> {
                Ok(Ts::Millis(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Ts, E> {
                Ok(i64::try_from(v).map_or(Ts::Other(v as f64), Ts::Millis))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Ts, E> {
                Ok(Ts::Other(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Epoch milliseconds of a timestamp field.
fn millis(name: &str, ts: &Ts) -> Result<i64, String> {
    match ts {
        Ts::Millis(ms) => Ok(*ms),
        Ts::Other(v) => Err(format!(
            "{name} {v} is not a whole number of epoch milliseconds"
        )),
        Ts::Text(s) => crate::time::parse_epoch_ms(s)
            .map_or_else(|| crate::time::parse(s), Ok)
            .map_err(|why| format!("{name} {why}")),
    }
}

/// `None` for an empty string.
fn opt(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// An enricher visitor id: 32 lowercase hex characters.
fn looks_like_visitor_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The fields that hold a time: RFC 3339 or epoch milliseconds.
const TIME_FIELDS: [&str; 4] = ["timestamp", "received_at", "client_timestamp", "sent_at"];

const TEXT_FIELDS: &[&str] = &[
    "event_id",
    "type",
    "event_name",
    "properties",
    "hostname",
    "pathname",
    "querystring",
    "page_title",
    "referrer",
    "user_id",
    "anonymous_id",
    "user_agent",
    "ip",
    "ip_address",
    "language",
    "tag",
    "app_version",
    "device_model",
    "channel",
    "session_id",
    "country",
    "region",
    "city",
    "browser",
    "browser_version",
    "operating_system",
    "operating_system_version",
    "device_type",
];
const NUMBER_FIELDS: &[&str] = &[
    "screenWidth",
    "screenHeight",
    "lcp",
    "cls",
    "inp",
    "fcp",
    "ttfb",
    "lat",
    "lon",
];

/// Which field has a value of the wrong type, said by name (serde's own message names
/// only the type). Read again as a plain object: only on the error path.
fn wrong_type(bytes: &[u8]) -> Option<String> {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(bytes) else {
        return None;
    };
    let shown = |v: &Value| {
        let mut s = v.to_string();
        if s.len() > 40 {
            let mut end = 40;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s.truncate(end);
            s.push('…');
        }
        s
    };
    for (name, value) in &map {
        let name = name.as_str();
        let wanted = match value {
            Value::Null => continue,
            Value::String(_) if TEXT_FIELDS.contains(&name) => continue,
            Value::Number(_) if NUMBER_FIELDS.contains(&name) => continue,
            Value::String(_) | Value::Number(_) if TIME_FIELDS.contains(&name) => continue,
            Value::String(_) | Value::Object(_) if name == "feature_flags" => continue,
            Value::Number(n) if name == "is_bot" && n.as_u64().is_some_and(|v| v <= 1) => continue,
            _ if TEXT_FIELDS.contains(&name) => "a string",
            _ if NUMBER_FIELDS.contains(&name) => "a number",
            _ if TIME_FIELDS.contains(&name) => "an RFC 3339 string or epoch milliseconds",
            _ if name == "is_bot" => "0 or 1",
            _ => continue,
        };
        return Some(format!("{name} is {}, not {wanted}", shown(value)));
    }
    None
}

pub(crate) fn parse(bytes: &[u8], line: u64) -> Result<ImportedEvent, RowError> {
    let err = |kind, message: String| RowError::new(line, kind, message);
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(err(
            SkipKind::Malformed,
            "not a JSON object (each line holds one event as {…})".into(),
        ));
    }
    // One pass over the line checks its UTF-8; parsing from text then skips checking
    // each string again.
    let text = crate::props::utf8(bytes).map_err(|m| err(SkipKind::Malformed, m))?;
    let l: Line = serde_json::from_str(text).map_err(|e| match json_kind(&e) {
        SkipKind::Malformed => err(
            SkipKind::Malformed,
            format!("invalid JSON: {}", json_error(&e)),
        ),
        kind => err(kind, wrong_type(bytes).unwrap_or_else(|| json_error(&e))),
    })?;

    let source_id =
        opt(l.event_id).ok_or_else(|| err(SkipKind::MissingField, "no event_id".into()))?;
    let event_id = match uuid::Uuid::parse_str(&source_id) {
        Ok(id) if !id.is_nil() => id,
        _ => {
            return Err(err(
                SkipKind::InvalidValue,
                format!("event_id {source_id:?} is not a UUID (nor may it be the nil UUID)"),
            ))
        }
    };
    let timestamp_ms = match &l.timestamp {
        None => return Err(err(SkipKind::BadTimestamp, "no timestamp".into())),
        Some(ts) => millis("timestamp", ts).map_err(|m| err(SkipKind::BadTimestamp, m))?,
    };
    let optional_time = |name: &str, ts: &Option<Ts>| match ts {
        Some(Ts::Text(s)) if s.is_empty() => Ok(None),
        None => Ok(None),
        Some(ts) => millis(name, ts)
            .map(Some)
            .map_err(|m| err(SkipKind::BadTimestamp, m)),
    };
    let received_at_ms = optional_time("received_at", &l.received_at)?;
    let client_timestamp_ms = optional_time("client_timestamp", &l.client_timestamp)?;
    let sent_at_ms = optional_time("sent_at", &l.sent_at)?;
    let event_type =
        opt(l.event_type).ok_or_else(|| err(SkipKind::MissingField, "no type".into()))?;
    let screen_width = crate::props::dimension("screenWidth", l.screen_width)
        .map_err(|m| err(SkipKind::InvalidValue, m))?;
    let screen_height = crate::props::dimension("screenHeight", l.screen_height)
        .map_err(|m| err(SkipKind::InvalidValue, m))?;
    let feature_flags = match l.feature_flags {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => opt(Some(s)),
        Some(v @ Value::Object(_)) => Some(v.to_string()),
        Some(other) => {
            return Err(err(
                SkipKind::InvalidValue,
                format!("feature_flags is {other}, not a JSON object"),
            ))
        }
    };
    if let Some(bot) = l.is_bot.filter(|b| *b > 1) {
        return Err(err(
            SkipKind::InvalidValue,
            format!("is_bot is {bot}, not 0 or 1"),
        ));
    }
    let user_id = opt(l.user_id);
    let visitor_id = user_id
        .as_ref()
        .filter(|u| looks_like_visitor_id(u))
        .cloned();
    Ok(ImportedEvent {
        source_id,
        timestamp_ms,
        event_type,
        event_name: opt(l.event_name),
        properties: opt(l.properties),
        hostname: opt(l.hostname),
        pathname: opt(l.pathname),
        querystring: opt(l.querystring),
        page_title: opt(l.page_title),
        referrer: opt(l.referrer),
        user_id,
        anonymous_id: opt(l.anonymous_id),
        ip: opt(l.ip).or(opt(l.ip_address)),
        user_agent: opt(l.user_agent),
        language: opt(l.language),
        screen_width,
        screen_height,
        event_id: Some(event_id),
        tag: opt(l.tag),
        app_version: opt(l.app_version),
        device_model: opt(l.device_model),
        feature_flags,
        lcp: l.lcp,
        cls: l.cls,
        inp: l.inp,
        fcp: l.fcp,
        ttfb: l.ttfb,
        preset: Preset {
            session_id: opt(l.session_id),
            channel: opt(l.channel),
            country: opt(l.country),
            region: opt(l.region),
            city: opt(l.city),
            lat: l.lat,
            lon: l.lon,
            browser: opt(l.browser),
            browser_version: opt(l.browser_version),
            operating_system: opt(l.operating_system),
            operating_system_version: opt(l.operating_system_version),
            device_type: opt(l.device_type),
            is_bot: l.is_bot,
            visitor_id,
            received_at_ms,
            client_timestamp_ms,
            sent_at_ms,
        },
    })
}

/// The columns of Rivulet's CSV export, by name, in the header's order.
pub(crate) struct CsvColumns {
    names: Vec<String>,
}

/// What a header must name; the other columns are optional, as the NDJSON line's fields.
const REQUIRED_COLUMNS: [&str; 3] = ["event_id", "timestamp", "type"];

/// Columns that hold numbers in the export (written unquoted, never neutralised); every
/// other column is text.
const CSV_NUMBER_COLUMNS: &[&str] = &[
    "site_id",
    "screenWidth",
    "screenHeight",
    "lcp",
    "cls",
    "inp",
    "fcp",
    "ttfb",
    "lat",
    "lon",
    "is_bot",
];

impl CsvColumns {
    pub(crate) fn new(header: &[String]) -> Result<Self, HeaderError> {
        for column in REQUIRED_COLUMNS {
            if !header.iter().any(|h| h == column) {
                return Err(HeaderError::MissingColumn {
                    format: Format::Rivulet,
                    column,
                    hint: ": a Rivulet CSV export starts with its header line \
                           (`event_id,site_id,timestamp,…`), and an NDJSON export has one \
                           JSON object a line",
                });
            }
        }
        if let Some((i, twice)) = header
            .iter()
            .enumerate()
            .find(|(i, h)| !h.is_empty() && header[..*i].contains(h))
        {
            return Err(HeaderError::WrongFile(format!(
                "the rivulet CSV header names `{twice}` twice (column {}): an export writes \
                 each column once",
                i + 1
            )));
        }
        Ok(CsvColumns {
            names: header.to_vec(),
        })
    }

    /// The event of one row: the NDJSON line it stands for, read as a line is.
    pub(crate) fn event(&self, record: &Record, line: u64) -> Result<ImportedEvent, RowError> {
        let err = |kind, message: String| RowError::new(line, kind, message);
        if record.len() != self.names.len() {
            return Err(err(
                SkipKind::Malformed,
                format!(
                    "the row has {} fields where the header has {} (a missing comma, or an unquoted comma or line break?)",
                    record.len(),
                    self.names.len()
                ),
            ));
        }
        let fields = record.fields().map_err(|m| err(SkipKind::Malformed, m))?;
        let mut object = serde_json::Map::with_capacity(fields.len());
        for (name, cell) in self.names.iter().zip(fields) {
            // An empty cell is an absent value, as an empty string or null in a line.
            if name.is_empty() || cell.is_empty() {
                continue;
            }
            let value = if CSV_NUMBER_COLUMNS.contains(&name.as_str()) {
                // Not a number: kept as text, which the line's reader reports by name.
                serde_json::from_str::<serde_json::Number>(cell)
                    .map_or_else(|_| Value::String(cell.to_owned()), Value::Number)
            } else {
                Value::String(unneutralise(cell).to_owned())
            };
            object.insert(name.clone(), value);
        }
        let line_bytes = serde_json::to_vec(&Value::Object(object)).expect("a map is JSON");
        parse(&line_bytes, line)
    }
}

/// A text cell of the CSV export as it was before the export neutralised it: without
/// one leading `'` (the export puts one before every text cell that starts with `=`,
/// `+`, `-`, `@`, a tab, a carriage return, or `'` itself).
pub(crate) fn unneutralise(cell: &str) -> &str {
    cell.strip_prefix('\'').unwrap_or(cell)
}
