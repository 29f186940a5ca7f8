//! Parsers of a site's past events for `rivulet-admin import`.
//!
//! A [`Reader`] reads one file in one [`Format`] and yields one [`ImportedEvent`] per
//! event, or a [`RowError`] for a record it cannot take, with the 1-based physical line
//! of the file where that record starts. It streams: memory stays bounded by the longest
//! record (at most [`MAX_RECORD_BYTES`]), whatever the size of the file, and it never
//! panics, whatever the bytes.
//!
//! The formats (each one's columns and every mapping are in `docs/import.md`):
//! - [`Format::Rivulet`]: Rivulet's own export, NDJSON (one event a line) or CSV (told
//!   apart by the first non-blank byte: `{` or a header's name); fields map 1:1 and every
//!   enriched column goes to [`Preset`], so that export → import gives the same rows.
//! - [`Format::Umami`]: the CSV of Umami's `website_event` rows (Umami Cloud's data
//!   export and its documented import format), header-driven.
//! - [`Format::Posthog`]: PostHog's events as JSON lines (batch exports to S3) or CSV
//!   (the UI's export and the SQL editor's), detected from the first non-blank byte.
//!
//! What a reader checks, for every format, with the wire contract's rules
//! (`rivulet_common::contract`, which ingest validates with): the field limits (counted
//! in characters), the event types and what each requires of `properties`, that
//! `properties` is JSON nested at most 32 deep, feature flags, web vitals, screen sizes
//! and IP addresses; and what only an import carries: a time from 2000-01-01 to a day
//! after the import started, and preset values of the enricher's shapes (`device_type`
//! one of its classes, `country` an ISO 3166-1 alpha-2 code, …, each of bounded length).
//! A record that breaks a rule is a [`RowError`] naming the field; no value is ever cut
//! short, clamped or wrapped.
//!
//! ```
//! use rivulet_import::{Format, Reader};
//!
//! let file = "{\"event_id\":\"0190a5a8-7c3e-7000-8000-000000000001\",\"timestamp\":\"2026-11-25T10:00:00Z\",\"type\":\"pageview\",\"pathname\":\"/\"}\n";
//! let mut reader = Reader::new(Format::Rivulet, file.as_bytes()).unwrap();
//! let event = reader.next().unwrap().unwrap();
//! assert_eq!(event.timestamp_ms, 1_795_600_800_000);
//! assert_eq!(event.pathname.as_deref(), Some("/"));
//! assert!(reader.next().is_none());
//! ```

use std::fmt;
use std::io::BufRead;
use std::str::FromStr;

mod csv;
mod input;
mod limits;
mod posthog;
mod props;
mod rivulet;
mod time;
mod umami;
mod url;

use input::Input;

/// The longest record a reader takes: a longer line (or CSV record) is a
/// [`SkipKind::TooLong`] error, and the reader goes on with the next one without having
/// held it in memory.
pub const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// The event types of the track API (the wire contract's, `rivulet_common::contract`);
/// [`ImportedEvent::event_type`] is one.
pub use rivulet_common::contract::EVENT_TYPES;

/// The format of an import file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Rivulet's export, NDJSON or CSV.
    Rivulet,
    /// Umami's CSV of `website_event` rows.
    Umami,
    /// PostHog's events, JSON lines or CSV.
    Posthog,
}

impl Format {
    pub const ALL: [Format; 3] = [Format::Rivulet, Format::Umami, Format::Posthog];

    /// The name `--format` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Rivulet => "rivulet",
            Format::Umami => "umami",
            Format::Posthog => "posthog",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A format name that is none of [`Format::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown format {0:?}: expected rivulet, umami or posthog")]
pub struct UnknownFormat(pub String);

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| UnknownFormat(s.to_owned()))
    }
}

/// One event read from an import file: the track API's fields, plus what the source
/// already knows of the enriched columns ([`Preset`]).
///
/// Text fields are `None` when the source has no value or an empty one. Every value is
/// within the track API's limits (see `docs/import.md`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportedEvent {
    /// The source's own id for the event (rivulet: `event_id`; umami: `event_id`;
    /// posthog: `uuid`). The importer derives Rivulet's event_id from (format,
    /// source_id), so a re-import stores each event once.
    pub source_id: String,
    /// When the event happened, epoch milliseconds (UTC): from 2000-01-01 to a day after
    /// the import started.
    pub timestamp_ms: i64,
    /// One of [`EVENT_TYPES`].
    pub event_type: String,
    pub event_name: Option<String>,
    /// A JSON string, as the track API carries it (an object for the events this crate
    /// builds; a rivulet export's value as it was).
    pub properties: Option<String>,
    pub hostname: Option<String>,
    pub pathname: Option<String>,
    /// With its leading `?`, as the tracking script sends it.
    pub querystring: Option<String>,
    pub page_title: Option<String>,
    pub referrer: Option<String>,
    /// The source's identified user id, if any (rivulet: the stored `user_id`, see
    /// [`Preset::visitor_id`]).
    pub user_id: Option<String>,
    /// The source's anonymous or device id (posthog: `distinct_id` when not identified,
    /// else `$device_id`; umami: `session_id`, Umami's visitor).
    pub anonymous_id: Option<String>,
    /// A valid IPv4 or IPv6 address, normalised (`2001:0db8::0001` → `2001:db8::1`).
    pub ip: Option<String>,
    pub user_agent: Option<String>,
    pub language: Option<String>,
    pub screen_width: Option<u16>,
    pub screen_height: Option<u16>,
    /// rivulet format: the exported event_id, kept as it is.
    pub event_id: Option<uuid::Uuid>,
    pub tag: Option<String>,
    pub app_version: Option<String>,
    pub device_model: Option<String>,
    /// A JSON object of strings, as a string.
    pub feature_flags: Option<String>,
    /// Web vitals of a `performance` event (milliseconds; `cls` unitless), each ≥ 0.
    pub lcp: Option<f64>,
    pub cls: Option<f64>,
    pub inp: Option<f64>,
    pub fcp: Option<f64>,
    pub ttfb: Option<f64>,
    /// Enriched values the source already has; the enricher uses them where it cannot
    /// derive its own (no IP → no geo; no user agent → no device). rivulet format: every
    /// enriched column, so export → import gives the same rows.
    pub preset: Preset,
}

/// Enriched columns as the source has them. Names follow Rivulet's: `device_type` is
/// `Desktop`, `Mobile`, `Tablet` or `Bot`; browsers and systems use uap-core's names
/// (`Chrome Mobile iOS`, `Mac OS X`, …) where the source's could be mapped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Preset {
    pub session_id: Option<String>,
    pub channel: Option<String>,
    /// ISO 3166-1 alpha-2.
    pub country: Option<String>,
    /// ISO 3166-2, e.g. `GB-ENG`.
    pub region: Option<String>,
    pub city: Option<String>,
    pub lat: Option<f64>,
    pub lon: Option<f64>,
    pub browser: Option<String>,
    /// Major version only.
    pub browser_version: Option<String>,
    pub operating_system: Option<String>,
    /// `major` or `major.minor`.
    pub operating_system_version: Option<String>,
    pub device_type: Option<String>,
    pub is_bot: Option<u8>,
    /// rivulet format: the stored `user_id` when it looks like an enricher visitor id
    /// (32 lowercase hex characters). The export cannot tell a visitor id from a
    /// caller's id of that shape, so the value is in [`ImportedEvent::user_id`] too and
    /// the importer decides which to use.
    pub visitor_id: Option<String>,
    /// rivulet format: `received_at`, epoch milliseconds.
    pub received_at_ms: Option<i64>,
    /// rivulet format: the client's own `timestamp` and `sent_at` as the export kept
    /// them (for audit), epoch milliseconds; absent when the client sent none.
    pub client_timestamp_ms: Option<i64>,
    pub sent_at_ms: Option<i64>,
}

/// Why a record was not imported: a small set, for the import's summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkipKind {
    /// Not valid JSON, CSV or UTF-8; not a JSON object; the wrong number of CSV fields.
    Malformed,
    /// A required field is absent or empty (e.g. `event_id`, `event_name` of a custom event).
    MissingField,
    /// A field holds a value of the wrong type or outside its range (a bad UUID, IP
    /// address, screen size, event type, properties that are not JSON, …).
    InvalidValue,
    /// The timestamp is absent or not a date and time this reader understands.
    BadTimestamp,
    /// An event the source has and Rivulet has no equivalent of (e.g. PostHog's
    /// `$pageleave`, `$identify`, `$feature_flag_called`; Umami's link and pixel events).
    UnsupportedEvent,
    /// A field over the track API's limit, or a record over [`MAX_RECORD_BYTES`].
    TooLong,
    /// The input could not be read. The reader stops after this one.
    Io,
}

impl SkipKind {
    pub const ALL: [SkipKind; 7] = [
        SkipKind::Malformed,
        SkipKind::MissingField,
        SkipKind::InvalidValue,
        SkipKind::BadTimestamp,
        SkipKind::UnsupportedEvent,
        SkipKind::TooLong,
        SkipKind::Io,
    ];

    /// The name the summary prints.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipKind::Malformed => "malformed",
            SkipKind::MissingField => "missing_field",
            SkipKind::InvalidValue => "invalid_value",
            SkipKind::BadTimestamp => "bad_timestamp",
            SkipKind::UnsupportedEvent => "unsupported_event",
            SkipKind::TooLong => "too_long",
            SkipKind::Io => "io",
        }
    }
}

impl fmt::Display for SkipKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A record that was not imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}: {message}")]
pub struct RowError {
    /// The 1-based physical line of the file where the record starts (a CSV record with
    /// quoted newlines spans several lines; this is its first).
    pub line: u64,
    pub kind: SkipKind,
    /// What is wrong, naming the field.
    pub message: String,
}

impl RowError {
    pub(crate) fn new(line: u64, kind: SkipKind, message: impl Into<String>) -> Self {
        RowError {
            line,
            kind,
            message: message.into(),
        }
    }
}

/// The file cannot be read as the format at all: nothing was imported.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("cannot read the input: {0}")]
    Io(#[from] std::io::Error),
    #[error("the input is empty: a {0} CSV file starts with a header line")]
    Empty(Format),
    #[error("line {line}: the header is not valid CSV: {reason}")]
    Malformed { line: u64, reason: String },
    /// A column the format needs is not in the header.
    #[error("the {format} header has no `{column}` column{hint}")]
    MissingColumn {
        format: Format,
        column: &'static str,
        /// More about the column, starting with a separator (e.g. ": add `uuid` to …").
        hint: &'static str,
    },
    /// The file is another file of the same source (e.g. Umami's event-data CSV).
    #[error("{0}")]
    WrongFile(String),
}

/// Reads the events of one file: an iterator of `Result<ImportedEvent, RowError>`.
///
/// Streaming and bounded in memory; ends after the last record, or after a
/// [`SkipKind::Io`] error.
pub struct Reader<R: BufRead> {
    format: Format,
    input: Input<R>,
    parser: Parser,
    record: csv::Record,
    /// When the import started, epoch ms: an event may lie at most a day after it.
    now_ms: i64,
    done: bool,
}

enum Parser {
    Rivulet,
    RivuletCsv(Box<rivulet::CsvColumns>),
    Umami(Box<umami::Columns>),
    PosthogJsonl,
    PosthogCsv(Box<posthog::CsvColumns>),
}

impl<R: BufRead> Reader<R> {
    /// Starts reading `input` as `format`. CSV formats read their header line here (and
    /// PostHog's tells JSON lines from CSV by the first non-blank byte); a header that
    /// lacks a required column is an error naming it.
    pub fn new(format: Format, input: R) -> Result<Self, HeaderError> {
        let mut input = Input::new(input);
        let mut record = csv::Record::default();
        let parser = match format {
            // A JSON line starts with `{`; a CSV header with a column's name, a letter,
            // or a quote. Anything else is read as lines, each reported if it is not an
            // event.
            Format::Rivulet => match input.first_non_blank()? {
                Some(b) if b.is_ascii_alphabetic() || b == b'"' => {
                    let header = read_header(&mut input, &mut record, format)?;
                    Parser::RivuletCsv(Box::new(rivulet::CsvColumns::new(&header)?))
                }
                _ => Parser::Rivulet,
            },
            Format::Umami => {
                input.skip_bom()?;
                let header = read_header(&mut input, &mut record, format)?;
                Parser::Umami(Box::new(umami::Columns::new(&header)?))
            }
            Format::Posthog => match input.first_non_blank()? {
                Some(b'{') => Parser::PosthogJsonl,
                Some(_) => {
                    let header = read_header(&mut input, &mut record, format)?;
                    Parser::PosthogCsv(Box::new(posthog::CsvColumns::new(&header)?))
                }
                None => return Err(HeaderError::Empty(format)),
            },
        };
        Ok(Reader {
            format,
            input,
            parser,
            record,
            now_ms: rivulet_common::epoch::now_ms(),
            done: false,
        })
    }

    /// Reads as if the import started at `now_ms` (epoch ms) rather than when
    /// [`Reader::new`] was called: the latest time an event may have is a day after it.
    pub fn with_now(mut self, now_ms: i64) -> Self {
        self.now_ms = now_ms;
        self
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// How the file is read, for the importer's messages: `rivulet NDJSON`, `rivulet
    /// CSV`, `umami CSV`,
    /// `posthog JSON lines`, `posthog CSV (properties column)` or `posthog CSV
    /// (properties.* columns)`.
    pub fn shape(&self) -> &'static str {
        match &self.parser {
            Parser::Rivulet => "rivulet NDJSON",
            Parser::RivuletCsv(_) => "rivulet CSV",
            Parser::Umami(_) => "umami CSV",
            Parser::PosthogJsonl => "posthog JSON lines",
            Parser::PosthogCsv(c) => c.shape(),
        }
    }

    /// Bytes consumed so far (for a progress bar).
    pub fn bytes_read(&self) -> u64 {
        self.input.bytes
    }

    /// Physical lines consumed so far (complete ones: the count of line feeds).
    pub fn lines_read(&self) -> u64 {
        self.input.line
    }

    fn next_jsonl(
        &mut self,
        parse: fn(&[u8], u64) -> Result<ImportedEvent, RowError>,
    ) -> Option<Result<ImportedEvent, RowError>> {
        loop {
            let line = match self.input.next_line(MAX_RECORD_BYTES)? {
                Ok(line) => line,
                Err(e) => return Some(Err(self.input_error(e))),
            };
            let bytes = &self.input.buf;
            if bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let now_ms = self.now_ms;
            return Some(parse(bytes, line).and_then(|ev| limits::finish(ev, line, now_ms)));
        }
    }

    fn next_csv(&mut self) -> Option<Result<ImportedEvent, RowError>> {
        let line = match csv::read_record(&mut self.input, &mut self.record, MAX_RECORD_BYTES)? {
            Ok(line) => line,
            Err(e) => return Some(Err(self.input_error(e))),
        };
        let result = match &self.parser {
            Parser::RivuletCsv(columns) => columns.event(&self.record, line),
            Parser::Umami(columns) => columns.event(&self.record, line),
            Parser::PosthogCsv(columns) => columns.event(&self.record, line),
            Parser::Rivulet | Parser::PosthogJsonl => unreachable_parser(line),
        };
        Some(result.and_then(|ev| limits::finish(ev, line, self.now_ms)))
    }

    fn input_error(&mut self, e: input::InputError) -> RowError {
        match e {
            input::InputError::TooLong { line } => RowError::new(
                line,
                SkipKind::TooLong,
                format!(
                    "the record is longer than {} MiB (is a quote never closed?)",
                    MAX_RECORD_BYTES / (1024 * 1024)
                ),
            ),
            input::InputError::Malformed { line, reason } => {
                RowError::new(line, SkipKind::Malformed, reason)
            }
            input::InputError::Io { line, error } => {
                self.done = true;
                RowError::new(
                    line,
                    SkipKind::Io,
                    format!("cannot read the input: {error}"),
                )
            }
        }
    }
}

/// CSV parsers are only reached for CSV formats; a value, not a panic, if that ever broke.
fn unreachable_parser(line: u64) -> Result<ImportedEvent, RowError> {
    Err(RowError::new(
        line,
        SkipKind::Malformed,
        "internal error: a CSV record for a JSON format",
    ))
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = Result<ImportedEvent, RowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = match self.parser {
            Parser::Rivulet => self.next_jsonl(rivulet::parse),
            Parser::PosthogJsonl => self.next_jsonl(posthog::parse_jsonl),
            Parser::RivuletCsv(_) | Parser::Umami(_) | Parser::PosthogCsv(_) => self.next_csv(),
        };
        if item.is_none() {
            self.done = true;
        }
        item
    }
}

impl<R: BufRead> std::iter::FusedIterator for Reader<R> {}

/// Reads the header record: the column names, trimmed.
fn read_header<R: BufRead>(
    input: &mut Input<R>,
    record: &mut csv::Record,
    format: Format,
) -> Result<Vec<String>, HeaderError> {
    match csv::read_record(input, record, MAX_RECORD_BYTES) {
        None => Err(HeaderError::Empty(format)),
        Some(Err(input::InputError::Io { error, .. })) => Err(HeaderError::Io(error)),
        Some(Err(input::InputError::TooLong { line })) => Err(HeaderError::Malformed {
            line,
            reason: format!(
                "longer than {} MiB (is a quote never closed?)",
                MAX_RECORD_BYTES / (1024 * 1024)
            ),
        }),
        Some(Err(input::InputError::Malformed { line, reason })) => {
            Err(HeaderError::Malformed { line, reason })
        }
        Some(Ok(line)) => {
            let fields = record.fields().map_err(|reason| HeaderError::Malformed {
                line,
                reason: reason.to_string(),
            })?;
            Ok(fields.into_iter().map(|f| f.trim().to_owned()).collect())
        }
    }
}
