//! `rivulet-admin export`: a site's events (or one person's, for an access request) as
//! NDJSON or CSV, streamed from ClickHouse a row at a time, so memory stays flat however
//! many rows there are (docs/privacy.md, "Export"). The bytes go to a [`Sink`] a chunk at
//! a time: a file or stdout for the CLI, a response body for the dashboard
//! (`dashboard::download`), which waits while its client reads slower than ClickHouse
//! answers.
//!
//! An NDJSON line is the tracking API's shape with `event_id`, `timestamp` and the
//! enriched columns (`rivulet-admin import --format rivulet` reads it back), plus
//! `person_id`: the user an anonymous id belongs to after identify, else `user_id`.
//!
//! CSV has the same columns under a header line. It is the one CSV writer of Rivulet
//! (the CLI, the dashboard's downloads, the admin API and a person's export all come
//! here), and it neutralises text cells against formula injection, as OWASP recommends:
//! a text cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return, which a
//! spreadsheet would run as a formula, is written with a `'` before it; so is one that
//! starts with `'`, so that taking one leading `'` off every text cell gives the value
//! back exactly (`rivulet-admin import --format rivulet` does). Numbers are written as
//! numbers, a negative one too.

use crate::error::AdminError;
use clickhouse::Row;
use rivulet_common::ch::Db;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::future::Future;
use std::io::Write;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Ndjson,
    Csv,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ndjson" => Ok(Format::Ndjson),
            "csv" => Ok(Format::Csv),
            other => Err(format!("{other:?}: use ndjson or csv")),
        }
    }
}

pub struct Request {
    pub site_id: u32,
    /// One person: this user id, and the anonymous ids it claimed.
    pub user_id: Option<String>,
    /// Epoch seconds: from (inclusive), to (exclusive).
    pub from: Option<u32>,
    pub to: Option<u32>,
    pub format: Format,
    /// Counts the rows first and shows progress on stderr (the CLI, on a terminal).
    pub progress: bool,
}

impl Format {
    /// The file name extension, and the media type of a download.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Ndjson => "ndjson",
            Format::Csv => "csv",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Ndjson => "application/x-ndjson; charset=utf-8",
            Format::Csv => "text/csv; charset=utf-8",
        }
    }
}

/// `--from`/`--to` (and the download's `from`/`to`): RFC 3339, a UTC date, or a time
/// before now (`90m`, `7d`), as `replay` reads them; epoch seconds.
pub fn parse_bound(s: &str) -> Result<u32, AdminError> {
    let ms = crate::replay::parse_time(s, rivulet_common::epoch::now_ms())?;
    u32::try_from(ms.div_euclid(1000))
        .map_err(|_| AdminError::Usage(format!("{s:?} is outside the times events can have")))
}

/// How many bytes of rows are gathered before they are handed to the sink.
const CHUNK_BYTES: usize = 64 * 1024;

/// Where an export's bytes go, a chunk (about [`CHUNK_BYTES`]) at a time. `write` returns
/// when the chunk is taken, which is how a slow reader holds the export back instead of
/// letting rows pile up in memory.
pub trait Sink {
    fn write(&mut self, chunk: Vec<u8>) -> impl Future<Output = Result<(), AdminError>> + Send;
}

/// A file or stdout (the CLI): written at once.
pub struct WriteSink<W>(pub W);

impl<W: Write + Send> Sink for WriteSink<W> {
    async fn write(&mut self, chunk: Vec<u8>) -> Result<(), AdminError> {
        self.0
            .write_all(&chunk)
            .and_then(|()| self.0.flush())
            .map_err(io)
    }
}

/// One exported event: the columns of `events` and the resolved person.
#[derive(Debug, Row, Serialize, Deserialize)]
pub struct ExportRow {
    #[serde(with = "clickhouse::serde::uuid")]
    pub event_id: uuid::Uuid,
    pub site_id: u32,
    pub timestamp: u32,
    pub received_at: u32,
    #[serde(rename = "type")]
    pub event_type: String,
    pub event_name: String,
    pub properties: String,
    pub hostname: String,
    pub pathname: String,
    pub querystring: String,
    pub page_title: String,
    pub referrer: String,
    pub channel: String,
    pub user_id: String,
    pub session_id: String,
    pub language: String,
    pub screen_width: u16,
    pub screen_height: u16,
    pub country: String,
    pub region: String,
    pub city: String,
    pub lat: f64,
    pub lon: f64,
    pub browser: String,
    pub browser_version: String,
    pub operating_system: String,
    pub operating_system_version: String,
    pub device_type: String,
    pub is_bot: u8,
    pub ip: String,
    pub anonymous_id: String,
    pub tag: String,
    pub app_version: String,
    pub device_model: String,
    pub feature_flags: String,
    pub lcp: Option<f64>,
    pub cls: Option<f64>,
    pub inp: Option<f64>,
    pub fcp: Option<f64>,
    pub ttfb: Option<f64>,
    pub client_timestamp: Option<u32>,
    pub sent_at: Option<u32>,
    pub person_id: String,
}

/// The fields of a line, in its order, as the CSV header names them.
pub const FIELDS: &[&str] = &[
    "event_id",
    "site_id",
    "timestamp",
    "received_at",
    "client_timestamp",
    "sent_at",
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
    "language",
    "screenWidth",
    "screenHeight",
    "tag",
    "app_version",
    "device_model",
    "feature_flags",
    "lcp",
    "cls",
    "inp",
    "fcp",
    "ttfb",
    "channel",
    "session_id",
    "country",
    "region",
    "city",
    "lat",
    "lon",
    "browser",
    "browser_version",
    "operating_system",
    "operating_system_version",
    "device_type",
    "is_bot",
    "ip",
    "person_id",
];

/// A stored second (`DateTime`: 1970 to 2106, always writable) as RFC 3339.
fn rfc3339(secs: u32) -> String {
    rivulet_common::epoch::rfc3339(secs.into()).unwrap_or_default()
}

/// One NDJSON line: the track API's names (`screenWidth`), in its order, then the
/// enriched columns; times in RFC 3339.
#[derive(Serialize)]
struct Line<'a> {
    event_id: String,
    site_id: u32,
    timestamp: String,
    received_at: String,
    /// The client's own `timestamp` and `sent_at`, as it sent them; null when it sent none.
    client_timestamp: Option<String>,
    sent_at: Option<String>,
    #[serde(rename = "type")]
    event_type: &'a str,
    event_name: &'a str,
    properties: &'a str,
    hostname: &'a str,
    pathname: &'a str,
    querystring: &'a str,
    page_title: &'a str,
    referrer: &'a str,
    user_id: &'a str,
    anonymous_id: &'a str,
    language: &'a str,
    #[serde(rename = "screenWidth")]
    screen_width: u16,
    #[serde(rename = "screenHeight")]
    screen_height: u16,
    tag: &'a str,
    app_version: &'a str,
    device_model: &'a str,
    feature_flags: &'a str,
    lcp: Option<f64>,
    cls: Option<f64>,
    inp: Option<f64>,
    fcp: Option<f64>,
    ttfb: Option<f64>,
    channel: &'a str,
    session_id: &'a str,
    country: &'a str,
    region: &'a str,
    city: &'a str,
    lat: f64,
    lon: f64,
    browser: &'a str,
    browser_version: &'a str,
    operating_system: &'a str,
    operating_system_version: &'a str,
    device_type: &'a str,
    is_bot: u8,
    ip: &'a str,
    person_id: &'a str,
}

impl ExportRow {
    fn line(&self) -> Line<'_> {
        Line {
            event_id: self.event_id.to_string(),
            site_id: self.site_id,
            timestamp: rfc3339(self.timestamp),
            received_at: rfc3339(self.received_at),
            client_timestamp: self.client_timestamp.map(rfc3339),
            sent_at: self.sent_at.map(rfc3339),
            event_type: &self.event_type,
            event_name: &self.event_name,
            properties: &self.properties,
            hostname: &self.hostname,
            pathname: &self.pathname,
            querystring: &self.querystring,
            page_title: &self.page_title,
            referrer: &self.referrer,
            user_id: &self.user_id,
            anonymous_id: &self.anonymous_id,
            language: &self.language,
            screen_width: self.screen_width,
            screen_height: self.screen_height,
            tag: &self.tag,
            app_version: &self.app_version,
            device_model: &self.device_model,
            feature_flags: &self.feature_flags,
            lcp: self.lcp,
            cls: self.cls,
            inp: self.inp,
            fcp: self.fcp,
            ttfb: self.ttfb,
            channel: &self.channel,
            session_id: &self.session_id,
            country: &self.country,
            region: &self.region,
            city: &self.city,
            lat: self.lat,
            lon: self.lon,
            browser: &self.browser,
            browser_version: &self.browser_version,
            operating_system: &self.operating_system,
            operating_system_version: &self.operating_system_version,
            device_type: &self.device_type,
            is_bot: self.is_bot,
            ip: &self.ip,
            person_id: &self.person_id,
        }
    }

    /// The NDJSON object, as a JSON value (for callers that add to it).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.line()).expect("a line is JSON")
    }

    /// The CSV record: text neutralised and quoted as it must be, numbers as they are,
    /// an absent value (a vital not measured) empty.
    fn csv_record(&self) -> String {
        let Value::Object(map) = self.to_json() else {
            unreachable!("an object")
        };
        FIELDS
            .iter()
            .map(|f| match &map[*f] {
                Value::String(s) => csv_field(&neutralise(s)),
                Value::Null => String::new(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A text cell that a spreadsheet would take for a formula (it starts with `=`, `+`, `-`,
/// `@`, a tab or a carriage return: OWASP's list), or that starts with `'`, with a `'`
/// before it. The second rule makes the first reversible: a reader takes exactly one
/// leading `'` off every text cell. Only text goes through here; numbers stay numbers.
fn neutralise(s: &str) -> Cow<'_, str> {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r', '\'']) {
        Cow::Owned(format!("'{s}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// A text cell of any CSV Rivulet writes (the dashboard's breakdown exports too):
/// neutralised, then quoted as it must be.
pub fn csv_text(s: &str) -> String {
    csv_field(&neutralise(s))
}

/// A CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// What an export starts with: CSV's header line; nothing for NDJSON.
fn write_header(format: Format, buf: &mut Vec<u8>) {
    if format == Format::Csv {
        buf.extend_from_slice(FIELDS.join(",").as_bytes());
        buf.push(b'\n');
    }
}

/// One event: an NDJSON line, or a CSV record.
fn write_row(format: Format, row: &ExportRow, buf: &mut Vec<u8>) -> Result<(), AdminError> {
    match format {
        Format::Ndjson => {
            serde_json::to_writer(&mut *buf, &row.line()).map_err(|e| io(e.into()))?;
        }
        Format::Csv => buf.extend_from_slice(row.csv_record().as_bytes()),
    }
    buf.push(b'\n');
    Ok(())
}

/// The rows' filter, and its binds after the site's: the person, the time range.
fn filter(req: &Request) -> (String, Vec<String>) {
    let mut cond = String::from("e.site_id = ?");
    let mut binds = Vec::new();
    if let Some(user) = &req.user_id {
        cond.push_str(" AND (e.user_id = ? OR a.owner = ?)");
        binds.push(user.clone());
        binds.push(user.clone());
    }
    if let Some(from) = req.from {
        cond.push_str(" AND e.timestamp >= toDateTime(?)");
        binds.push(from.to_string());
    }
    if let Some(to) = req.to {
        cond.push_str(" AND e.timestamp < toDateTime(?)");
        binds.push(to.to_string());
    }
    (cond, binds)
}

/// The export's query: `events` (each event once, `FINAL`) with each anonymous id's owner.
/// `GLOBAL`: on a cluster the owners are read once, on the server asked, and sent to the
/// shards (each shard would otherwise look for `person_claims` in its default database).
/// An anonymous id's owner is the user of its strongest claim (`people::claim_rank`).
fn sql(cond: &str, what: &str) -> String {
    format!(
        "SELECT {what} FROM events AS e FINAL GLOBAL ANY LEFT JOIN \
         (SELECT anonymous_id, argMax(user_id, (rank, user_id)) AS owner \
          FROM person_claims WHERE site_id = ? GROUP BY anonymous_id) AS a USING anonymous_id \
         WHERE {cond}"
    )
}

const COLUMNS: &str = "event_id, site_id, timestamp, received_at, type, event_name, properties, \
    hostname, pathname, querystring, page_title, referrer, channel, user_id, session_id, language, \
    screen_width, screen_height, country, region, city, lat, lon, browser, browser_version, \
    operating_system, operating_system_version, device_type, is_bot, ip, anonymous_id, tag, \
    app_version, device_model, feature_flags, lcp, cls, inp, fcp, ttfb, client_timestamp, sent_at, \
    if(a.owner != '', a.owner, e.user_id) AS person_id";

/// Writes the export to `out`; returns how many events. With `req.progress`, progress
/// goes to stderr.
pub async fn export<S: Sink + Send>(
    db: &Db,
    req: &Request,
    out: &mut S,
) -> Result<u64, AdminError> {
    let (cond, binds) = filter(req);
    let query = |what: &str, order: &str| {
        let mut q = db
            .client
            .query(&(sql(&cond, what) + order))
            .bind(req.site_id)
            .bind(req.site_id);
        for b in &binds {
            q = q.bind(b.as_str());
        }
        q
    };
    let progress = req.progress;
    let total = if progress {
        query("count()", "").fetch_one::<u64>().await.map_err(ch)?
    } else {
        0
    };
    let mut cursor = query(COLUMNS, " ORDER BY e.timestamp, e.event_id")
        .fetch::<ExportRow>()
        .map_err(ch)?;
    let mut buf = Vec::with_capacity(CHUNK_BYTES + 4096);
    write_header(req.format, &mut buf);
    let (mut n, mut shown) = (0u64, Instant::now());
    while let Some(row) = cursor.next().await.map_err(ch)? {
        write_row(req.format, &row, &mut buf)?;
        n += 1;
        if buf.len() >= CHUNK_BYTES {
            let chunk = std::mem::replace(&mut buf, Vec::with_capacity(CHUNK_BYTES + 4096));
            out.write(chunk).await?;
        }
        if progress && shown.elapsed() >= Duration::from_millis(200) {
            shown = Instant::now();
            eprint!(
                "\rexported {n} of {total} events ({:.0} %)",
                n as f64 * 100.0 / total.max(1) as f64
            );
        }
    }
    if !buf.is_empty() {
        out.write(buf).await?;
    }
    if progress {
        eprintln!("\rexported {n} of {total} events          ");
    }
    Ok(n)
}

fn ch(e: clickhouse::error::Error) -> AdminError {
    AdminError::Common(e.into())
}

fn io(e: std::io::Error) -> AdminError {
    AdminError::io("cannot write the export", e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_only_when_they_must_be() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
    }

    #[test]
    fn text_cells_a_spreadsheet_would_run_are_neutralised() {
        for trigger in ["=", "+", "-", "@", "\t", "\r"] {
            let cell = format!("{trigger}SUM(A1:A9)");
            assert_eq!(neutralise(&cell), format!("'{cell}"), "{trigger:?}");
        }
        // A leading quote is doubled, so that one taken off gives the text back.
        assert_eq!(neutralise("'quoted"), "''quoted");
        assert_eq!(neutralise("''"), "'''");
        // Anything else is as it was, a trigger that does not lead too.
        for plain in ["", "plain", "a=b", "1-2", " =x", "\n=x", "é=", "/-/"] {
            assert!(matches!(neutralise(plain), Cow::Borrowed(_)), "{plain:?}");
            assert_eq!(neutralise(plain), plain);
        }
        // Then quoted as RFC 4180 wants: a CR forces quotes, a tab does not.
        assert_eq!(csv_field(&neutralise("\rline")), "\"'\rline\"");
        assert_eq!(csv_field(&neutralise("\tx")), "'\tx");
        assert_eq!(csv_field(&neutralise("=a,\"b\"")), "\"'=a,\"\"b\"\"\"");
    }

    /// A row of `events`, from JSON text (see the header test for why text).
    fn row(fields: serde_json::Value) -> ExportRow {
        let mut base = serde_json::json!({
            "event_id": "0190d6a0-0000-7000-8000-000000000001", "site_id": 1,
            "timestamp": 1_795_597_200u32, "received_at": 1_795_597_201u32, "type": "pageview",
            "event_name": "", "properties": "", "hostname": "", "pathname": "/", "querystring": "",
            "page_title": "", "referrer": "", "channel": "", "user_id": "", "session_id": "",
            "language": "", "screen_width": 0, "screen_height": 0, "country": "", "region": "",
            "city": "", "lat": 0.0, "lon": 0.0, "browser": "", "browser_version": "",
            "operating_system": "", "operating_system_version": "", "device_type": "",
            "is_bot": 0, "ip": "", "anonymous_id": "", "tag": "", "app_version": "",
            "device_model": "", "feature_flags": "", "lcp": null, "cls": null, "inp": null,
            "fcp": null, "ttfb": null, "person_id": ""
        });
        // (client_timestamp and sent_at: absent, so None.)
        base.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        serde_json::from_str(&base.to_string()).unwrap()
    }

    #[test]
    fn numbers_are_written_as_numbers_negative_ones_too() {
        let r = row(
            serde_json::json!({"lat": -33.8688, "lon": -151.2093, "screen_width": 390,
            "lcp": 1234.5, "pathname": "-1"}),
        );
        let record = r.csv_record();
        assert!(record.contains(",-33.8688,-151.2093,"), "{record}");
        assert!(record.contains(",390,"), "{record}");
        assert!(record.contains(",1234.5,"), "{record}");
        // The same digits as text are text, and neutralised.
        assert!(record.contains(",'-1,"), "{record}");
    }

    /// Export as CSV → import gives the same events as export as NDJSON → import, for
    /// values that need neutralising, quoting, or both.
    #[test]
    fn a_csv_export_imports_as_its_ndjson_does() {
        use serde_json::json;
        let rows = [
            row(json!({
                "event_id": "0190d6a0-0000-7000-8000-000000000001", "type": "custom_event",
                "event_name": "=HYPERLINK(\"https://evil.example\",\"x\")",
                "properties": "{\"plan\":\"pro\",\"n\":-1}", "hostname": "shop.example.com",
                "pathname": "-/", "querystring": "?q=\"a,b\"", "page_title": "+1 offer",
                "referrer": "@home", "channel": "Direct", "user_id": "=cmd|' /C calc'!A0",
                "session_id": "+session", "language": "'en", "screen_width": 1920,
                "screen_height": 1080, "country": "AU", "region": "AU-NSW", "city": "-Sydney",
                "lat": -33.8688, "lon": 151.2093, "browser": "@Chrome", "browser_version": "120",
                "operating_system": "=Windows", "operating_system_version": "10",
                "device_type": "Desktop", "anonymous_id": "''anon", "tag": "\ttab",
                "app_version": "\rv1", "device_model": "'", "feature_flags": "{\"beta\":\"on\"}",
                "lcp": 1234.5, "cls": 0.1, "person_id": "=cmd",
                "client_timestamp": 1_795_590_000u32, "sent_at": 1_795_593_600u32
            })),
            row(json!({
                "event_id": "0190d6a0-0000-7000-8000-000000000002", "type": "error",
                "event_name": "TypeError", "lat": -0.5, "lon": -0.25,
                "properties": "{\"message\":\"-1 is not a function\",\"stack\":\"at a\\nat b\"}",
                "page_title": "two\nlines, \"quoted\"", "is_bot": 1, "device_type": "Bot"
            })),
            row(json!({
                "event_id": "0190d6a0-0000-7000-8000-000000000003", "type": "outbound",
                "properties": "{\"url\":\"https://other.example/\"}", "pathname": "",
                "timestamp": 946_684_800u32
            })),
        ];
        let (mut ndjson, mut csv) = (Vec::new(), Vec::new());
        write_header(Format::Ndjson, &mut ndjson);
        write_header(Format::Csv, &mut csv);
        for r in &rows {
            write_row(Format::Ndjson, r, &mut ndjson).unwrap();
            write_row(Format::Csv, r, &mut csv).unwrap();
        }
        let text = String::from_utf8(csv.clone()).unwrap();
        for neutralised in [
            ",\"'=HYPERLINK(\"\"https://evil.example\"\",\"\"x\"\")\",",
            ",'-/,",
            ",'+1 offer,",
            ",'@home,",
            ",'''anon,",
            ",'\ttab,",
            ",\"'\rv1\",",
            ",'',",
            ",-33.8688,151.2093,",
        ] {
            assert!(text.contains(neutralised), "{neutralised:?} in {text}");
        }

        let now = 1_795_600_800_000;
        let read = |bytes: &[u8]| -> Vec<rivulet_import::ImportedEvent> {
            rivulet_import::Reader::new(rivulet_import::Format::Rivulet, bytes)
                .unwrap()
                .with_now(now)
                .map(|r| r.unwrap())
                .collect()
        };
        let from_ndjson = read(&ndjson);
        let from_csv = read(&csv);
        assert_eq!(from_ndjson.len(), rows.len());
        assert_eq!(from_csv, from_ndjson);
        // And the values are the stored ones, not the neutralised text.
        assert_eq!(
            from_csv[0].event_name.as_deref(),
            Some("=HYPERLINK(\"https://evil.example\",\"x\")")
        );
        assert_eq!(from_csv[0].anonymous_id.as_deref(), Some("''anon"));
        assert_eq!(from_csv[0].device_model.as_deref(), Some("'"));
        assert_eq!(from_csv[0].preset.lat, Some(-33.8688));
        assert_eq!(
            from_csv[1].page_title.as_deref(),
            Some("two\nlines, \"quoted\"")
        );
        // As raw events, too: what the importer sends.
        let raw = |evs: Vec<rivulet_import::ImportedEvent>| -> Vec<String> {
            evs.into_iter()
                .map(|ev| {
                    let raw = crate::import::raw_event(2, rivulet_import::Format::Rivulet, ev, now);
                    serde_json::to_string(&raw).unwrap()
                })
                .collect()
        };
        assert_eq!(raw(from_csv), raw(from_ndjson));
    }

    /// The client's own times: RFC 3339 as the other times, null (NDJSON) or empty (CSV)
    /// when it sent none.
    #[test]
    fn the_clients_times_are_exported_and_null_when_not_sent() {
        let r = row(serde_json::json!({"client_timestamp": 1_795_590_000u32}));
        let line = r.to_json();
        assert_eq!(line["client_timestamp"], "2026-11-25T07:00:00Z");
        assert_eq!(line["sent_at"], Value::Null);
        let mut csv = Vec::new();
        write_header(Format::Csv, &mut csv);
        write_row(Format::Csv, &r, &mut csv).unwrap();
        let text = String::from_utf8(csv).unwrap();
        assert!(
            text.contains("timestamp,received_at,client_timestamp,sent_at,type,"),
            "{text}"
        );
        assert!(text.contains(",2026-11-25T07:00:00Z,,pageview,"), "{text}");
    }

    #[test]
    fn the_filter_names_the_person_and_the_range() {
        let req = Request {
            site_id: 1,
            user_id: Some("u".into()),
            from: Some(10),
            to: None,
            format: Format::Ndjson,
            progress: false,
        };
        let (cond, binds) = filter(&req);
        assert_eq!(
            cond,
            "e.site_id = ? AND (e.user_id = ? OR a.owner = ?) AND e.timestamp >= toDateTime(?)"
        );
        assert_eq!(binds, ["u", "u", "10"]);
    }

    #[test]
    fn the_csv_header_names_every_field_of_a_line() {
        // From text: `clickhouse::serde::uuid` reads a UUID from a borrowed string, which
        // `from_value` cannot lend.
        let row: ExportRow = serde_json::from_str(&serde_json::json!({
            "event_id": "0190d6a0-0000-7000-8000-000000000001", "site_id": 1, "timestamp": 0,
            "received_at": 0, "type": "pageview", "event_name": "", "properties": "",
            "hostname": "", "pathname": "/", "querystring": "", "page_title": "", "referrer": "",
            "channel": "", "user_id": "", "session_id": "", "language": "", "screen_width": 0,
            "screen_height": 0, "country": "", "region": "", "city": "", "lat": 0.0, "lon": 0.0,
            "browser": "", "browser_version": "", "operating_system": "",
            "operating_system_version": "", "device_type": "", "is_bot": 0, "ip": "",
            "anonymous_id": "", "tag": "", "app_version": "", "device_model": "",
            "feature_flags": "", "lcp": null, "cls": null, "inp": null, "fcp": null, "ttfb": null,
            "person_id": ""
        })
        .to_string())
        .unwrap();
        // Serialised in FIELDS' order: the NDJSON line and the CSV columns agree.
        let text = serde_json::to_string(&row.line()).unwrap();
        let mut at = 0;
        for f in FIELDS {
            let found = text[at..]
                .find(&format!("\"{f}\":"))
                .unwrap_or_else(|| panic!("{f} in order"));
            at += found;
        }
    }
}
