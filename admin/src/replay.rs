//! `rivulet-admin replay --since T [--until T] [--site S]`: re-enriches stored events from
//! `events.raw` with the rules and databases the enricher is configured with now.
//!
//! - It reads the raw topic through a consumer of its own (group `rivulet-replay`,
//!   partitions assigned by hand, no offsets ever committed), so the enricher's group and
//!   offsets are untouched. Each partition is read from the first message at or after
//!   `--since` (Kafka's `offsets_for_times`) to the first one a minute after `--until`;
//!   events are then selected by the time ingest received them (`received_at`).
//! - Each event is enriched by `rivulet_enrichment::enrich::Enrichers::enrich`, the
//!   enricher's own code, with `UA_REGEXES`, `GEOIP_DB` and the other enrichment settings
//!   (`EnrichmentConfig`: the enricher's service settings are not read).
//! - Its stored row is read from ClickHouse (`FINAL`). The new row keeps the stored
//!   `user_id`, `session_id` and `ip` (a replay that starts mid-session could not
//!   recompute a session id, and `ip` follows the `STORE_IP` of the time it was stored);
//!   every other column is recomputed. Only rows that differ are written, with the same
//!   insert as the enricher (`rivulet_enrichment::insert::insert_row_binary`, with the
//!   cluster's quorum settings). A new row has the same `(site_id, timestamp, event_id)`
//!   as the stored one, so `ReplacingMergeTree` keeps the newer: counts do not change.
//! - Events not in ClickHouse (the enricher has not written them yet) are left alone,
//!   and so is every event of a person erased before it (the erasure ledger, read at the
//!   start: docs/privacy.md), even one whose row a running erasure has not removed yet.

use crate::error::AdminError;
use bytes::Bytes;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use rivulet_common::ch::ChConfig;
use rivulet_common::ch::Db;
use rivulet_common::event::RawEvent;
use rivulet_common::schema::events::EventRow;
use rivulet_common::schema::queries;
use rivulet_enrichment::data::EnrichmentData;
use rivulet_enrichment::enrich::Enrichers;
use rivulet_enrichment::ledger::{EventIds, Ledger};
use rivulet_enrichment::message::{decode, Message as Decoded};
use rivulet_enrichment::session::SessionTracker;
use rivulet_enrichment::EnrichmentConfig;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// The consumer group replay reads under (it never commits offsets).
pub const GROUP: &str = "rivulet-replay";

/// Events looked up and rewritten together (the lookup names each event id: ~80 KB of SQL).
const BATCH: usize = 2000;
/// Kafka timestamps are set when ingest produces, just after it received the event: the
/// end of the read goes this far past `--until`, and `received_at` decides.
const UNTIL_SLACK_MS: i64 = 60_000;
const KAFKA_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Request {
    /// Epoch milliseconds, inclusive.
    pub since_ms: i64,
    /// Epoch milliseconds, exclusive.
    pub until_ms: i64,
    pub site: Option<u32>,
    pub dry_run: bool,
    pub optimize: bool,
}

/// What a replay saw and did (the summary printed at the end).
#[derive(Default, Debug)]
struct Tally {
    messages_read: u64,
    undecodable: u64,
    events_in_range: u64,
    not_stored: u64,
    erased: u64,
    timestamp_differs: u64,
    unchanged: u64,
    rows_rewritten: u64,
    device_changed: u64,
    browser_changed: u64,
    os_changed: u64,
    device_type_changed: u64,
    geo_changed: u64,
    other_changed: u64,
    browser_changes: BTreeMap<(String, String), u64>,
    months: BTreeSet<u32>,
    oldest_message_ms: Option<i64>,
}

pub async fn replay(req: Request) -> Result<Value, AdminError> {
    if req.until_ms <= req.since_ms {
        return Err(AdminError::Usage(
            "--until must be later than --since".into(),
        ));
    }
    let started = Instant::now();
    let cfg = Settings::from_env()?;
    let (db, ledger) = connect(&cfg, &req).await?;
    let data = EnrichmentData::load(cfg.enrichment.clone())
        .map_err(|e| AdminError::Usage(format!("cannot load the enrichment data: {e}")))?;
    let enrichers = data.current();
    let rules = data.ua_rules();
    let geo = data.geo();
    eprintln!(
        "replay: user-agent rules {} (revision {}), geo {}",
        cfg.enrichment.ua_regexes.display(),
        rules.as_ref().map_or("?", |r| r.revision.as_str()),
        enrichers.geo.describe()
    );
    let data_used = json!({
        "ua_rules": rules.map(|r| json!({"path": r.path, "revision": r.revision})),
        "geo_db": geo.map(|g| g.files),
    });

    let rewrite = Rewrite {
        db: &db,
        enrichers: &enrichers,
        ledger: &ledger,
        dry_run: req.dry_run,
    };
    let consumer = consumer(&cfg)?;
    let ranges = assign_ranges(&consumer, &cfg.topic, &req)?;
    let total: i64 = ranges.values().map(|(start, end)| end - start).sum();
    let low_watermarks = low_watermarks(&consumer, &cfg.topic, &ranges)?;
    let mut tally = Tally::default();
    let mut pending: HashMap<i32, i64> = ranges.iter().map(|(p, (_, end))| (*p, *end)).collect();
    // Session ids are recomputed by `enrich` but not kept (the stored ones are), so one
    // tracker serves every partition.
    let mut sessions = SessionTracker::new(cfg.enrichment.session_timeout);
    let mut batch: Vec<RawEvent> = Vec::new();
    let mut last_progress = Instant::now();
    let mut last_message = Instant::now();
    while !pending.is_empty() {
        let msg = match tokio::time::timeout(Duration::from_secs(2), consumer.recv()).await {
            Err(_) => {
                drop_partitions_at_their_end(&consumer, &cfg.topic, &mut pending);
                if last_message.elapsed() > Duration::from_secs(60) && !pending.is_empty() {
                    return Err(AdminError::Unavailable(format!(
                        "Kafka at {} (no message for 60 s, partitions {:?} not read to their end)",
                        cfg.brokers,
                        pending.keys().collect::<Vec<_>>()
                    )));
                }
                continue;
            }
            Ok(Err(e)) => {
                return Err(AdminError::Unavailable(format!(
                    "Kafka at {} ({e})",
                    cfg.brokers
                )))
            }
            Ok(Ok(m)) => m,
        };
        last_message = Instant::now();
        let (partition, offset) = (msg.partition(), msg.offset());
        let Some(&end) = pending.get(&partition) else {
            continue;
        };
        if offset >= end {
            pending.remove(&partition);
            continue;
        }
        if offset + 1 >= end {
            pending.remove(&partition);
        }
        tally.messages_read += 1;
        // The first message a partition still holds, when older ones were deleted.
        if offset > 0 && low_watermarks.get(&partition) == Some(&offset) {
            if let Some(ts) = msg.timestamp().to_millis() {
                tally.oldest_message_ms = Some(tally.oldest_message_ms.map_or(ts, |t| t.min(ts)));
            }
        }
        let raw = match decode(msg.payload()) {
            Ok(Decoded::Event(raw)) => raw,
            // Identify calls change no event: the people they wrote stand.
            Ok(Decoded::Identify(_)) => continue,
            Err(_) => {
                tally.undecodable += 1;
                continue;
            }
        };
        if raw.received_at < req.since_ms
            || raw.received_at >= req.until_ms
            || req.site.is_some_and(|s| s != raw.site_id)
        {
            continue;
        }
        tally.events_in_range += 1;
        batch.push(raw);
        if batch.len() >= BATCH {
            let batch = std::mem::take(&mut batch);
            process(&rewrite, &mut sessions, batch, &mut tally).await?;
        }
        if last_progress.elapsed() >= Duration::from_secs(2) {
            last_progress = Instant::now();
            progress(&tally, total);
        }
    }
    if !batch.is_empty() {
        process(&rewrite, &mut sessions, batch, &mut tally).await?;
    }
    progress(&tally, total);
    drop(consumer);

    let mut optimized = Vec::new();
    if req.optimize && !req.dry_run && tally.rows_rewritten > 0 {
        for month in &tally.months {
            optimize(&db, *month).await?;
            optimized.push(*month);
        }
    }

    let seconds = started.elapsed().as_secs_f64();
    Ok(summary(
        &req, &cfg.topic, data_used, &tally, &optimized, seconds,
    ))
}

/// ClickHouse, refused for `--optimize` on a cluster, and the erasure ledger from it.
async fn connect(cfg: &Settings, req: &Request) -> Result<(Db, Ledger), AdminError> {
    let db = cfg.clickhouse.connect().await.map_err(|e| {
        AdminError::Unavailable(format!("ClickHouse at {}: {e}", cfg.clickhouse.url))
    })?;
    if req.optimize && db.topology.cluster().is_some() {
        return Err(AdminError::Usage(
            "--optimize merges the table on a single server; on a cluster, run OPTIMIZE TABLE events_local ON CLUSTER <name> PARTITION <YYYYMM> FINAL on the shards yourself".into(),
        ));
    }
    let ledger = Ledger::new();
    ledger
        .refresh(&db)
        .await
        .map_err(|e| AdminError::Unavailable(format!("the erasure ledger in ClickHouse: {e}")))?;
    Ok((db, ledger))
}

/// Each partition's offsets of the messages received in the replay's window, assigned to
/// the consumer from their start.
fn assign_ranges(
    consumer: &StreamConsumer,
    topic: &str,
    req: &Request,
) -> Result<BTreeMap<i32, (i64, i64)>, AdminError> {
    let ranges = partition_ranges(consumer, topic, req.since_ms, req.until_ms)?;
    let total: i64 = ranges.values().map(|(start, end)| end - start).sum();
    eprintln!(
        "replay: {} messages to read from {} partition(s) of {}",
        total,
        ranges.len(),
        topic
    );
    let mut tpl = TopicPartitionList::new();
    for (p, (start, _)) in &ranges {
        tpl.add_partition_offset(topic, *p, Offset::Offset(*start))
            .map_err(kafka_error)?;
    }
    consumer.assign(&tpl).map_err(kafka_error)?;
    Ok(ranges)
}

/// While idle: partitions whose position reached their end are done (their last offsets
/// may be ones a consumer never sees, such as transaction markers).
fn drop_partitions_at_their_end(
    consumer: &StreamConsumer,
    topic: &str,
    pending: &mut HashMap<i32, i64>,
) {
    let Ok(positions) = consumer.position() else {
        return;
    };
    for e in positions.elements_for_topic(topic) {
        if let (Offset::Offset(pos), Some(end)) = (e.offset(), pending.get(&e.partition())) {
            if pos >= *end {
                pending.remove(&e.partition());
            }
        }
    }
}

/// What `replay` prints: what it read, what it changed and how, with a warning when the
/// topic no longer holds the start of the window.
fn summary(
    req: &Request,
    topic: &str,
    data_used: Value,
    tally: &Tally,
    optimized: &[u32],
    seconds: f64,
) -> Value {
    let rfc = |ms: i64| crate::output::rfc3339(u32::try_from(ms.div_euclid(1000)).unwrap_or(0));
    let mut changes: Vec<_> = tally.browser_changes.iter().collect();
    changes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut summary = json!({
        "since": rfc(req.since_ms),
        "until": rfc(req.until_ms),
        "site": req.site,
        "topic": topic,
        "group": GROUP,
        "dry_run": req.dry_run,
        "ua_rules": data_used["ua_rules"],
        "geo_db": data_used["geo_db"],
        "messages_read": tally.messages_read,
        "undecodable": tally.undecodable,
        "events_in_range": tally.events_in_range,
        "not_stored": tally.not_stored,
        "erased": tally.erased,
        "timestamp_differs": tally.timestamp_differs,
        "unchanged": tally.unchanged,
        "rows_rewritten": tally.rows_rewritten,
        "changed": {
            "device": tally.device_changed,
            "browser": tally.browser_changed,
            "operating_system": tally.os_changed,
            "device_type": tally.device_type_changed,
            "geo": tally.geo_changed,
            "other": tally.other_changed,
        },
        "browser_changes": changes.iter().take(20).map(|((from, to), n)| json!({"from": from, "to": to, "events": n})).collect::<Vec<_>>(),
        "optimized_partitions": optimized,
        "seconds": (seconds * 10.0).round() / 10.0,
    });
    if let Some(oldest) = tally.oldest_message_ms.filter(|t| *t > req.since_ms) {
        summary["warning"] = json!(format!(
            "{} holds events from {} on (its retention); events received before that cannot be replayed",
            topic,
            rfc(oldest).as_str().unwrap_or_default()
        ));
    }
    if req.dry_run {
        summary["message"] = json!(
            "dry run: nothing was written; rows_rewritten counts the rows a replay would write"
        );
    }
    summary
}

fn progress(t: &Tally, total: i64) {
    let pct = if total > 0 {
        t.messages_read as f64 * 100.0 / total as f64
    } else {
        100.0
    };
    eprintln!(
        "replay: {}/{} messages ({:.0} %), {} events in range, {} rows rewritten, {} not stored",
        t.messages_read, total, pct, t.events_in_range, t.rows_rewritten, t.not_stored
    );
}

fn kafka_error(e: rdkafka::error::KafkaError) -> AdminError {
    AdminError::Unavailable(format!("Kafka ({e})"))
}

/// What a replay reads from the environment: the enrichment's settings, ClickHouse, and
/// where the raw topic is. Nothing of the enricher service's own.
struct Settings {
    enrichment: EnrichmentConfig,
    clickhouse: ChConfig,
    brokers: String,
    topic: String,
}

impl Settings {
    fn from_env() -> Result<Self, AdminError> {
        Ok(Settings {
            enrichment: EnrichmentConfig::from_env()?,
            clickhouse: ChConfig::from_env()?,
            brokers: rivulet_common::kafka::brokers(),
            topic: rivulet_common::kafka::topic_raw(),
        })
    }
}

fn consumer(cfg: &Settings) -> Result<StreamConsumer, AdminError> {
    let mut c = rivulet_common::kafka::base_config();
    c.set("bootstrap.servers", &cfg.brokers)
        .set("client.id", "rivulet-admin-replay")
        .set("group.id", GROUP)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest");
    c.create().map_err(kafka_error)
}

/// `partition → (first offset, end offset)` of the messages to read: from the first
/// message at or after `since_ms` to the first one after `until_ms` (plus the slack), or
/// the end of the partition. Partitions with nothing to read are left out.
fn partition_ranges(
    consumer: &StreamConsumer,
    topic: &str,
    since_ms: i64,
    until_ms: i64,
) -> Result<BTreeMap<i32, (i64, i64)>, AdminError> {
    let metadata = consumer
        .fetch_metadata(Some(topic), KAFKA_TIMEOUT)
        .map_err(kafka_error)?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        return Err(AdminError::NotFound(format!(
            "Kafka has no topic {topic} (KAFKA_TOPIC_RAW)"
        )));
    }
    let at = |ms: i64| -> Result<HashMap<i32, Offset>, AdminError> {
        let mut tpl = TopicPartitionList::new();
        for p in &partitions {
            tpl.add_partition_offset(topic, *p, Offset::Offset(ms))
                .map_err(kafka_error)?;
        }
        let found = consumer
            .offsets_for_times(tpl, KAFKA_TIMEOUT)
            .map_err(kafka_error)?;
        Ok(found
            .elements_for_topic(topic)
            .iter()
            .map(|e| (e.partition(), e.offset()))
            .collect())
    };
    let starts = at(since_ms)?;
    let ends = at(until_ms.saturating_add(UNTIL_SLACK_MS))?;
    let mut ranges = BTreeMap::new();
    for p in partitions {
        let Some(Offset::Offset(start)) = starts.get(&p).copied() else {
            continue; // nothing at or after --since
        };
        let end = match ends.get(&p).copied() {
            Some(Offset::Offset(end)) => end,
            _ => {
                consumer
                    .fetch_watermarks(topic, p, KAFKA_TIMEOUT)
                    .map_err(kafka_error)?
                    .1
            }
        };
        if start < end {
            ranges.insert(p, (start, end));
        }
    }
    Ok(ranges)
}

/// The first offset each partition still holds (older ones are past retention).
fn low_watermarks(
    consumer: &StreamConsumer,
    topic: &str,
    ranges: &BTreeMap<i32, (i64, i64)>,
) -> Result<HashMap<i32, i64>, AdminError> {
    ranges
        .keys()
        .map(|p| {
            consumer
                .fetch_watermarks(topic, *p, KAFKA_TIMEOUT)
                .map(|(low, _)| (*p, low))
                .map_err(kafka_error)
        })
        .collect()
}

/// Re-enriches `batch`, compares each row with the stored one, and writes those that
/// changed.
/// What every batch of a replay is enriched, checked and written with.
struct Rewrite<'a> {
    db: &'a Db,
    enrichers: &'a Enrichers,
    ledger: &'a Ledger,
    dry_run: bool,
}

async fn process(
    rewrite: &Rewrite<'_>,
    sessions: &mut SessionTracker,
    batch: Vec<RawEvent>,
    tally: &mut Tally,
) -> Result<(), AdminError> {
    let Rewrite {
        db,
        enrichers,
        ledger,
        dry_run,
    } = *rewrite;
    let mut rows: Vec<EventRow> = Vec::with_capacity(batch.len());
    for raw in batch {
        let (ts, received) = (raw.timestamp, raw.received_at);
        let row = enrichers.enrich(raw, sessions);
        if ledger.erases(&EventIds::new(
            row.site_id,
            &row.user_id,
            &row.anonymous_id,
            ts,
            received,
        )) {
            tally.erased += 1;
        } else {
            rows.push(row);
        }
    }
    let stored = stored_rows(db, &rows).await?;
    let mut encoded = Vec::new();
    for mut row in rows {
        let Some(old) = stored.get(&row.event_id) else {
            tally.not_stored += 1;
            continue;
        };
        if old.timestamp != row.timestamp || old.site_id != row.site_id {
            // Not the same row of the table: writing it would add one, not replace it.
            tally.timestamp_differs += 1;
            continue;
        }
        row.user_id.clone_from(&old.user_id);
        row.daily_visitor = old.daily_visitor;
        row.session_id.clone_from(&old.session_id);
        row.ip.clone_from(&old.ip);
        if row == *old {
            tally.unchanged += 1;
            continue;
        }
        let browser = (&old.browser, &old.browser_version) != (&row.browser, &row.browser_version);
        let os = (&old.operating_system, &old.operating_system_version)
            != (&row.operating_system, &row.operating_system_version);
        let device_type = old.device_type != row.device_type || old.is_bot != row.is_bot;
        let geo = old.country != row.country
            || old.region != row.region
            || old.city != row.city
            || old.lat.to_bits() != row.lat.to_bits()
            || old.lon.to_bits() != row.lon.to_bits();
        tally.browser_changed += u64::from(browser);
        tally.os_changed += u64::from(os);
        tally.device_type_changed += u64::from(device_type);
        tally.device_changed += u64::from(browser || os || device_type);
        tally.geo_changed += u64::from(geo);
        tally.other_changed += u64::from(!(browser || os || device_type || geo));
        if browser {
            let name = |b: &str, v: &str| format!("{b} {v}").trim().to_string();
            *tally
                .browser_changes
                .entry((
                    name(&old.browser, &old.browser_version),
                    name(&row.browser, &row.browser_version),
                ))
                .or_default() += 1;
        }
        tally.months.insert(month_of(row.timestamp));
        tally.rows_rewritten += 1;
        row.write_row_binary(&mut encoded);
    }
    if !encoded.is_empty() && !dry_run {
        insert(db, Bytes::from(encoded)).await?;
    }
    Ok(())
}

/// Merges one month of `events`. ClickHouse skips an OPTIMIZE it cannot run now (a merge
/// of that partition is under way) and says nothing unless asked: it is asked to, and
/// the OPTIMIZE is tried again for up to a minute.
async fn optimize(db: &Db, month: u32) -> Result<(), AdminError> {
    let sql = queries::OPTIMIZE_EVENTS_PARTITION.replace("{partition}", &month.to_string());
    let client = db
        .client
        .clone()
        .with_setting("optimize_throw_if_noop", "1");
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        match client.query(&sql).execute().await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() < give_up => {
                tracing::debug!(error = %e, "OPTIMIZE not run yet; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                return Err(AdminError::Unavailable(format!(
                    "ClickHouse ({sql} did not run within a minute: {e}); the rows are rewritten, and ClickHouse merges the old ones away later by itself"
                )))
            }
        }
    }
}

/// `YYYYMM` of an epoch second (the partition of `events`).
fn month_of(ts: u32) -> u32 {
    let t = time::OffsetDateTime::from_unix_timestamp(i64::from(ts))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.year() as u32 * 100 + u32::from(u8::from(t.month()))
}

/// The stored rows (as `FINAL` shows them) of these events, by event id: per site, the
/// rows of the batch's time range (the sorting key's prefix narrows the read), of which
/// the batch's events are kept.
async fn stored_rows(
    db: &Db,
    rows: &[EventRow],
) -> Result<HashMap<uuid::Uuid, EventRow>, AdminError> {
    let wanted: std::collections::HashSet<uuid::Uuid> = rows.iter().map(|r| r.event_id).collect();
    let sites: BTreeSet<u32> = rows.iter().map(|r| r.site_id).collect();
    let mut out = HashMap::new();
    for site in sites {
        let of_site = rows.iter().filter(|r| r.site_id == site);
        let min_ts = of_site.clone().map(|r| r.timestamp).min().unwrap_or(0);
        let max_ts = of_site.map(|r| r.timestamp).max().unwrap_or(0);
        let stored: Vec<EventRow> = db
            .client
            .query(queries::REPLAY_STORED_ROWS)
            .bind(site)
            .bind(min_ts)
            .bind(max_ts)
            .fetch_all()
            .await
            .map_err(|e| {
                AdminError::Unavailable(format!("ClickHouse (reading stored rows: {e})"))
            })?;
        out.extend(
            stored
                .into_iter()
                .filter(|r| wanted.contains(&r.event_id))
                .map(|r| (r.event_id, r)),
        );
    }
    Ok(out)
}

/// The enricher's insert, retried a few times (a cluster's quorum may be busy with the
/// enricher's own inserts). A replay stopped here can simply be run again.
async fn insert(db: &Db, rows: Bytes) -> Result<(), AdminError> {
    let mut delay = Duration::from_millis(100);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match rivulet_enrichment::insert::insert_row_binary(db, std::slice::from_ref(&rows)).await
        {
            Ok(()) => return Ok(()),
            Err(e) if attempt < 10 => {
                tracing::debug!(error = %e, attempt, "insert failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(e) => {
                return Err(AdminError::Unavailable(format!(
                    "ClickHouse (inserting re-enriched rows, {attempt} attempts: {e}); rows written so far replaced theirs, run the replay again"
                )))
            }
        }
    }
}

/// `--since` / `--until`: RFC 3339 (`2026-11-20T08:00:00Z`), a UTC date (`2026-11-20`), or
/// a time before now (`90m`, `36h`, `7d`). Epoch milliseconds.
pub fn parse_time(s: &str, now_ms: i64) -> Result<i64, AdminError> {
    let s = s.trim();
    let bad = || {
        AdminError::Usage(format!(
            "{s:?} is not a time: give RFC 3339 (2026-11-20T08:00:00Z), a UTC date (2026-11-20) or a time before now (90m, 36h, 7d)"
        ))
    };
    if let Some(unit) = s.chars().last().filter(|c| matches!(c, 'm' | 'h' | 'd')) {
        if let Ok(n) = s[..s.len() - 1].parse::<i64>() {
            let ms = match unit {
                'm' => 60_000,
                'h' => 3_600_000,
                _ => 86_400_000,
            };
            return n.checked_mul(ms).map(|back| now_ms - back).ok_or_else(bad);
        }
    }
    if let Ok(t) = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339) {
        return Ok((t.unix_timestamp_nanos() / 1_000_000) as i64);
    }
    let date = time::Date::parse(s, time::macros::format_description!("[year]-[month]-[day]"))
        .map_err(|_| bad())?;
    Ok(date.midnight().assume_utc().unix_timestamp() * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_dates_or_before_now() {
        let now = 1_800_000_000_000;
        assert_eq!(parse_time("90m", now).unwrap(), now - 90 * 60_000);
        assert_eq!(parse_time("36h", now).unwrap(), now - 36 * 3_600_000);
        assert_eq!(parse_time("7d", now).unwrap(), now - 7 * 86_400_000);
        assert_eq!(
            parse_time("2026-11-20T08:00:00Z", now).unwrap(),
            1_795_132_800_000 + 8 * 3_600_000
        );
        assert_eq!(parse_time("2026-11-20", now).unwrap(), 1_795_132_800_000);
        assert_eq!(
            parse_time("2026-11-20T09:00:00+01:00", now).unwrap(),
            parse_time("2026-11-20T08:00:00Z", now).unwrap()
        );
        for bad in ["", "yesterday", "7w", "2026-13-01", "-"] {
            let err = parse_time(bad, now).unwrap_err().to_string();
            assert!(err.contains("is not a time"), "{bad}: {err}");
        }
    }

    #[test]
    fn months_are_the_partitions_of_events() {
        assert_eq!(month_of(0), 197001);
        assert_eq!(month_of(1_795_132_800), 202611);
    }
}
