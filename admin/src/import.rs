//! `rivulet-admin import --site N --format rivulet|umami|posthog FILE|-`: a site's past
//! events, from Rivulet's own export, Umami's or PostHog's (docs/import.md), into
//! Rivulet through the historical lane.
//!
//! - Each record is read by `rivulet-import` and becomes the raw event ingest would have
//!   published, with its own time (any age: the import does not go through ingest's
//!   window), its source's enrichment as a preset, and an event id derived from the
//!   source's id (UUIDv5), so that importing a file twice stores each event once.
//! - Events go to their own topic, `KAFKA_TOPIC_IMPORT` (`events.import`), which the
//!   enrichers read with a consumer group and a thread of their own: an import never
//!   queues behind live events, nor live events behind an import. The same enrichment
//!   as live events (geo from an IP, device from a user agent, when the source has them).
//! - A record that cannot be imported is reported with its line and skipped (`--strict`
//!   stops there); people erased before their events are not imported (the erasure
//!   ledger).
//! - Resumable: after each second of acknowledged events, how many records are done is
//!   written to a state file (`FILE.import-state.json`, or `--state`); run the same
//!   command again and it goes on from there (`--restart` starts over). Events that
//!   were sent twice collapse on their id.

use crate::error::AdminError;
use crate::import_producer::{ImportProducer, Settled};
use rivulet_common::event::{Described, Envelope, EventType, Preset, RawEvent, Vitals};
use rivulet_enrichment::ledger::{EventIds, Ledger};
use rivulet_import::{Format, ImportedEvent, Reader, RowError, SkipKind};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `rivulet-admin import`'s arguments.
#[derive(clap::Args)]
pub struct Request {
    #[arg(long = "site")]
    pub site_id: u32,
    /// rivulet (NDJSON or CSV of `rivulet-admin export`), umami (CSV of website
    /// events) or posthog (CSV or JSON lines of events).
    #[arg(long)]
    pub format: Format,
    /// The file, or - for stdin.
    pub input: String,
    /// Stop at the first record that cannot be imported (default: report and skip).
    #[arg(long)]
    pub strict: bool,
    /// Start over, ignoring an earlier, interrupted import of the file.
    #[arg(long)]
    pub restart: bool,
    /// Where to keep the import's progress (default: FILE.import-state.json; needed
    /// to resume an import from stdin).
    #[arg(long)]
    pub state: Option<PathBuf>,
}

/// The namespace of the event ids an import derives (UUIDv5 of format and source id).
const NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6f1c_1b3e_9d2a_4c5e_8b7f_2a3d_4e5f_6a7b);

/// Records sent and not yet acknowledged, at most: the producer's queue holds them.
const IN_FLIGHT: usize = 50_000;
/// The most malformed records printed one by one; the rest are counted.
const PRINT_AT_MOST: u64 = 100;

/// What the state file holds: which import, and how far it is.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Progress {
    site_id: u32,
    format: String,
    /// Records (events and skipped ones) read and, for events, acknowledged by Kafka.
    records_done: u64,
}

#[derive(Default)]
struct Tally {
    read: u64,
    imported: u64,
    skipped: BTreeMap<&'static str, u64>,
    erased: u64,
    first_ms: Option<i64>,
    last_ms: Option<i64>,
}

impl Tally {
    /// Widens the summary's first and last event times to include this one.
    fn span(&mut self, timestamp_ms: i64) {
        self.first_ms = Some(self.first_ms.map_or(timestamp_ms, |t| t.min(timestamp_ms)));
        self.last_ms = Some(self.last_ms.map_or(timestamp_ms, |t| t.max(timestamp_ms)));
    }

    /// What delivery reports settled: events imported, and the records done.
    fn settled(&mut self, s: Settled, done: &mut u64) {
        self.imported += s.stored;
        if let Some(record) = s.through {
            *done = record;
        }
    }
}

fn kafka(e: rdkafka::error::KafkaError) -> AdminError {
    AdminError::Unavailable(format!("Kafka ({e})"))
}

/// The id of an imported event: its own (the rivulet format), or derived from its
/// source's id.
fn event_id(format: Format, ev: &ImportedEvent) -> uuid::Uuid {
    ev.event_id.unwrap_or_else(|| {
        uuid::Uuid::new_v5(
            &NAMESPACE,
            format!("{}:{}", format.as_str(), ev.source_id).as_bytes(),
        )
    })
}

/// The raw event an imported one becomes. `received_at` is the source's when it has one
/// (Rivulet's export), else now.
pub fn raw_event(site_id: u32, format: Format, ev: ImportedEvent, now_ms: i64) -> RawEvent {
    let id = event_id(format, &ev);
    let p = ev.preset;
    let preset = Preset {
        visitor_id: p.visitor_id,
        session_id: p.session_id,
        channel: p.channel,
        country: p.country,
        region: p.region,
        city: p.city,
        lat: p.lat,
        lon: p.lon,
        browser: p.browser,
        browser_version: p.browser_version,
        operating_system: p.operating_system,
        operating_system_version: p.operating_system_version,
        device_type: p.device_type,
        is_bot: p.is_bot,
    };
    let envelope = Envelope {
        event_id: id,
        site_id,
        key_id: format!("import:{}", format.as_str()),
        event_type: EventType::parse(&ev.event_type).unwrap_or_default(),
        timestamp: ev.timestamp_ms,
        received_at: p.received_at_ms.unwrap_or(now_ms),
        // Rivulet's own export keeps the client's times (for audit); other sources have none.
        client_timestamp: p.client_timestamp_ms,
        sent_at: p.sent_at_ms,
        ip: ev.ip.unwrap_or_default(),
        user_agent: ev.user_agent.unwrap_or_default(),
    };
    let described = Described {
        event_name: ev.event_name,
        properties: ev.properties,
        pathname: ev.pathname,
        hostname: ev.hostname,
        querystring: ev.querystring,
        page_title: ev.page_title,
        referrer: ev.referrer,
        user_id: ev.user_id,
        language: ev.language,
        screen_width: ev.screen_width,
        screen_height: ev.screen_height,
        anonymous_id: ev.anonymous_id,
        tag: ev.tag,
        app_version: ev.app_version,
        device_model: ev.device_model,
        feature_flags: ev.feature_flags,
        vitals: Vitals {
            lcp: ev.lcp,
            cls: ev.cls,
            inp: ev.inp,
            fcp: ev.fcp,
            ttfb: ev.ttfb,
        },
    };
    RawEvent::new(envelope, described, Some(preset))
}

fn state_path(req: &Request) -> Option<PathBuf> {
    req.state.clone().or_else(|| {
        (req.input != "-").then(|| PathBuf::from(format!("{}.import-state.json", req.input)))
    })
}

fn read_progress(path: &Path) -> Option<Progress> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn write_progress(path: &Path, p: &Progress) -> Result<(), AdminError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(p).expect("progress as JSON"),
    )
    .and_then(|()| std::fs::rename(&tmp, path))
    .map_err(|e| {
        AdminError::io(
            format!("cannot write the import's state to {}", path.display()),
            e,
        )
    })
}

pub async fn import(req: Request) -> Result<Value, AdminError> {
    let ledger = erasure_ledger_of_site(req.site_id).await?;
    let now_ms = rivulet_common::epoch::now_ms();
    let (mut reader, total_bytes) = open_reader(&req, now_ms)?;
    let state = state_path(&req);
    let this = Progress {
        site_id: req.site_id,
        format: req.format.as_str().into(),
        records_done: 0,
    };
    let skip_first = resume_point(&req, state.as_deref(), &this)?;
    // Below live events (`IMPORT_NICE`, default 10): this thread and the producer's,
    // which it starts next and which inherit it.
    rivulet_common::priority::lower_this_thread(
        rivulet_common::config::parse("IMPORT_NICE", 10)
            .map_err(|e| AdminError::Usage(e.to_string()))?,
    );
    let topic = cfg_topic();
    let mut producer = producer(&topic)?;

    let started = Instant::now();
    let progress_shown = std::io::stderr().is_terminal();
    let mut tally = Tally::default();
    let mut printed = 0u64;
    let mut done = skip_first;
    let (mut last_save, mut last_shown) = (Instant::now(), Instant::now());
    let mut record = 0u64;
    let mut failure: Option<AdminError> = None;
    // Reused for every event: the message's key and payload.
    let (mut key, mut payload) = (Vec::with_capacity(256), Vec::with_capacity(2048));
    // Not a `for`: the loop asks the reader how far it is, for the progress line.
    #[allow(clippy::while_let_on_iterator)]
    while let Some(item) = reader.next() {
        record += 1;
        if record <= skip_first {
            continue;
        }
        tally.read += 1;
        match item {
            Err(e) => {
                *tally.skipped.entry(e.kind.as_str()).or_insert(0) += 1;
                report(&e, &mut printed);
                if req.strict || e.kind == SkipKind::Io {
                    failure = Some(AdminError::Usage(format!("import stopped at {e}")));
                    break;
                }
            }
            Ok(ev) => {
                let raw = raw_event(req.site_id, req.format, ev, now_ms);
                if erased(&ledger, req.site_id, &raw) {
                    tally.erased += 1;
                } else {
                    tally.span(raw.timestamp);
                    key.clear();
                    rivulet_common::kafka::write_message_key(
                        &mut key,
                        req.site_id,
                        raw.user_id.as_deref(),
                        &raw.ip,
                        &raw.user_agent,
                    );
                    payload.clear();
                    serde_json::to_writer(&mut payload, &raw).expect("a raw event as JSON");
                    producer
                        .send(record, &key, &payload, &mut |s| tally.settled(s, &mut done))
                        .map_err(kafka)?;
                }
            }
        }
        if producer.is_idle() {
            done = record;
        }
        if last_save.elapsed() >= Duration::from_secs(1) {
            tally.settled(producer.settle().map_err(kafka)?, &mut done);
            if producer.is_idle() {
                done = record;
            }
            save_progress(state.as_deref(), &this, done)?;
            last_save = Instant::now();
        }
        if progress_shown && last_shown.elapsed() >= Duration::from_millis(200) {
            last_shown = Instant::now();
            show_progress(&tally, reader.bytes_read(), total_bytes);
        }
    }
    producer
        .finish(&mut |s| tally.settled(s, &mut done))
        .map_err(kafka)?;
    if failure.is_none() {
        done = record;
    }
    save_progress(state.as_deref(), &this, done)?;
    if progress_shown {
        eprintln!();
    }
    let summary = summary(
        &req,
        &tally,
        skip_first,
        started.elapsed().as_secs_f64(),
        &topic,
    );
    if let Some(e) = failure {
        eprintln!("{}", serde_json::to_string_pretty(&summary).expect("JSON"));
        return Err(e);
    }
    if let Some(path) = &state {
        // Done: nothing to resume.
        let _ = std::fs::remove_file(path);
    }
    Ok(summary)
}

/// The erasure ledger, once the site is known to exist: an erased person's events are
/// skipped, never sent.
async fn erasure_ledger_of_site(site_id: u32) -> Result<Ledger, AdminError> {
    let clickhouse = rivulet_common::ch::ChConfig::from_env()?;
    let db = clickhouse
        .connect()
        .await
        .map_err(|e| AdminError::Unavailable(format!("ClickHouse at {}: {e}", clickhouse.url)))?;
    if rivulet_common::registry::Registry::new(db.clone())
        .get_site(site_id)
        .await?
        .is_none()
    {
        return Err(AdminError::NotFound(format!(
            "site {site_id} does not exist"
        )));
    }
    let ledger = Ledger::new();
    ledger
        .refresh(&db)
        .await
        .map_err(|e| AdminError::Unavailable(format!("the erasure ledger in ClickHouse ({e})")))?;
    Ok(ledger)
}

/// The input (a file, or `-` for stdin) and its size for the progress line (0: unknown).
/// Events may lie at most a day after this import's start (and none before 2000): any
/// other time is skipped, never stored clamped or wrapped.
fn open_reader(req: &Request, now_ms: i64) -> Result<(Reader<Box<dyn BufRead>>, u64), AdminError> {
    let input: Box<dyn BufRead> = if req.input == "-" {
        Box::new(std::io::BufReader::with_capacity(1 << 20, std::io::stdin()))
    } else {
        let file = std::fs::File::open(&req.input)
            .map_err(|e| AdminError::io(format!("cannot open {}", req.input), e))?;
        Box::new(std::io::BufReader::with_capacity(1 << 20, file))
    };
    let total_bytes = std::fs::metadata(&req.input).map(|m| m.len()).unwrap_or(0);
    let reader = Reader::new(req.format, input)
        .map_err(|e| AdminError::Usage(e.to_string()))?
        .with_now(now_ms);
    Ok((reader, total_bytes))
}

/// How many records an earlier run of the same import (site and format) already sent,
/// from its state file; `--restart` starts over, and another import's state is refused.
fn resume_point(req: &Request, state: Option<&Path>, this: &Progress) -> Result<u64, AdminError> {
    Ok(match state.and_then(read_progress) {
        Some(p) if req.restart => {
            eprintln!(
                "import: --restart: starting over (the earlier import stopped after {} records)",
                p.records_done
            );
            0
        }
        Some(p) if p.site_id == this.site_id && p.format == this.format => {
            eprintln!(
                "import: resuming after {} records (--restart starts over)",
                p.records_done
            );
            p.records_done
        }
        Some(p) => {
            return Err(AdminError::Usage(format!(
            "{} belongs to an import of site {} as {}: use --restart, or --state to keep another",
            state
                .map(Path::display)
                .map(|d| d.to_string())
                .unwrap_or_default(),
            p.site_id,
            p.format
        )))
        }
        None => 0,
    })
}

/// The producer of the import topic: idempotent, `acks=all`, large batches.
fn producer(topic: &str) -> Result<ImportProducer, AdminError> {
    let mut c = rivulet_common::kafka::base_config();
    c.set("bootstrap.servers", rivulet_common::kafka::brokers())
        .set("client.id", "rivulet-import")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("compression.type", "lz4")
        .set("queue.buffering.max.messages", "200000")
        .set("message.timeout.ms", "120000");
    ImportProducer::create(&c, topic, IN_FLIGHT).map_err(kafka)
}

/// Whether the erasure ledger drops this event (its user, or its visitor id, erased).
fn erased(ledger: &Ledger, site_id: u32, raw: &RawEvent) -> bool {
    let anonymous = raw.anonymous_id.as_deref().unwrap_or_default();
    let user = raw
        .user_id
        .as_deref()
        .or(raw.preset.as_ref().and_then(|p| p.visitor_id.as_deref()))
        .unwrap_or_default();
    ledger.erases(&EventIds::new(
        site_id,
        user,
        anonymous,
        raw.timestamp,
        raw.received_at,
    ))
}

/// Records how far this import got, when it keeps a state file.
fn save_progress(state: Option<&Path>, this: &Progress, done: u64) -> Result<(), AdminError> {
    match state {
        Some(path) => write_progress(
            path,
            &Progress {
                records_done: done,
                ..this_progress(this)
            },
        ),
        None => Ok(()),
    }
}

fn show_progress(tally: &Tally, bytes_read: u64, total_bytes: u64) {
    let pct = if total_bytes > 0 {
        bytes_read as f64 * 100.0 / total_bytes as f64
    } else {
        0.0
    };
    eprint!(
        "\rimport: {} records read, {} imported ({pct:.0} %)   ",
        tally.read, tally.imported
    );
}

/// What `import` prints (and, when it stopped early, prints to stderr before its error).
fn summary(req: &Request, tally: &Tally, skip_first: u64, seconds: f64, topic: &str) -> Value {
    json!({
        "site_id": req.site_id,
        "format": req.format.as_str(),
        "read": tally.read,
        "imported": tally.imported,
        "skipped": tally.skipped,
        "skipped_as_erased": tally.erased,
        "resumed_after": skip_first,
        "from": tally.first_ms.and_then(summary_time),
        "to": tally.last_ms.and_then(summary_time),
        "seconds": (seconds * 10.0).round() / 10.0,
        "events_per_second": (tally.imported as f64 / seconds.max(0.001)).round(),
        "topic": topic,
    })
}

/// An event's time in the summary: RFC 3339, to the second (rounded down). `None` for a
/// time RFC 3339 cannot write, rather than another one: the summary never shows a date
/// wrapped or clamped (the reader lets none through, and this does not rely on it).
fn summary_time(ms: i64) -> Option<String> {
    rivulet_common::epoch::rfc3339(ms.div_euclid(1000))
}

fn this_progress(p: &Progress) -> Progress {
    Progress {
        site_id: p.site_id,
        format: p.format.clone(),
        records_done: p.records_done,
    }
}

fn cfg_topic() -> String {
    rivulet_common::kafka::topic_import()
}

fn report(e: &RowError, printed: &mut u64) {
    *printed += 1;
    if *printed <= PRINT_AT_MOST {
        eprintln!("import: skipped {e}");
    } else if *printed == PRINT_AT_MOST + 1 {
        eprintln!("import: more records skipped; the summary counts them by reason");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_writes_times_as_they_are_never_wrapped() {
        let at = |s: &str| {
            time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
                .unwrap()
        };
        for s in [
            "2026-11-25T10:00:00Z",
            "2000-01-01T00:00:00Z",
            "1969-12-31T23:59:59Z",
            "2106-02-07T06:28:16Z",
            "9999-12-31T23:59:59Z",
            "0000-01-01T00:00:00Z",
        ] {
            assert_eq!(summary_time(at(s)).as_deref(), Some(s));
        }
        // Milliseconds round down, before 1970 too.
        assert_eq!(summary_time(-1).as_deref(), Some("1969-12-31T23:59:59Z"));
        // Beyond what RFC 3339 can write: no date rather than a wrong one.
        assert_eq!(summary_time(i64::MAX), None);
        assert_eq!(summary_time(i64::MIN), None);
    }

    /// What the importer sends is what the reader kept: an event of year 9999, 2106, 1969
    /// or 0000 never becomes a raw event, so nothing can store it wrapped.
    #[test]
    fn events_outside_the_times_never_become_raw_events() {
        let now = 1_795_600_800_000; // 2026-11-25T10:00:00Z
        let file: String = [
            ("1", "2026-11-25T09:00:00Z"),
            ("2", "9999-12-31T23:59:59Z"),
            ("3", "2106-02-07T06:28:16Z"),
            ("4", "1969-12-31T23:59:59Z"),
            ("5", "0000-01-01T00:00:00Z"),
        ]
        .iter()
        .map(|(n, ts)| {
            format!(
                "{{\"event_id\":\"0190a5a8-7c3e-7000-8000-00000000000{n}\",\"timestamp\":\"{ts}\",\"type\":\"pageview\"}}\n"
            )
        })
        .collect();
        let reader = Reader::new(Format::Rivulet, file.as_bytes())
            .unwrap()
            .with_now(now);
        let (events, skipped): (Vec<_>, Vec<_>) = reader.partition(Result::is_ok);
        let skipped: Vec<(u64, SkipKind)> = skipped
            .into_iter()
            .map(|e| e.map(drop).unwrap_err())
            .map(|e| (e.line, e.kind))
            .collect();
        assert_eq!(
            skipped,
            [2, 3, 4, 5].map(|line| (line, SkipKind::BadTimestamp))
        );
        let raw: Vec<RawEvent> = events
            .into_iter()
            .map(|ev| raw_event(7, Format::Rivulet, ev.unwrap(), now))
            .collect();
        assert_eq!(raw.len(), 1);
        assert_eq!(raw[0].timestamp, now - 3_600_000);
    }

    /// The preset's channels are the enricher's: an exported channel imports again.
    #[test]
    fn the_contracts_channels_are_the_enrichers() {
        use rivulet_enrichment::channel::Channel::*;
        let enricher = [
            Direct,
            OrganicSearch,
            PaidSearch,
            OrganicSocial,
            PaidSocial,
            Email,
            Referral,
            Internal,
        ]
        .map(|c| c.as_str());
        assert_eq!(enricher, rivulet_common::contract::CHANNELS);
    }
}
