//! The rollup job: computes the Stats API's daily rollup (`rivulet_stats::rollup`, which
//! has the design) for the days whose generation is missing or stale. The enricher's
//! lifecycle runner calls [`RollupJob::run`] every `STATS_ROLLUP_INTERVAL_SECS`;
//! `rivulet-admin rollup` calls it once.
//!
//! A day is computed once the hours it reads have had no insert for `margin`: an insert
//! stamps its hours when its block is written, a little before its rows can be read, and
//! a generation computed in between would miss them while looking newer than the stamp.
//! A day is also left until its visits can no longer grow: six hours (and its whole UTC
//! days) after it ends.
//!
//! Each run of consecutive days (up to [`MAX_DAYS`]) is one statement over `events` and
//! one insert of its rows with each day's marker: one block, so that a server (or a
//! replica) has either all of a generation or none of it. The generations it replaces are
//! deleted afterwards by one mutation.

use clickhouse::{Row, RowOwned, RowWrite};
use rivulet_common::ch::Db;
use rivulet_common::schema::migrations::ROLLUP_TABLES;
use rivulet_stats::date_range::Zone;
use rivulet_stats::limits::SESSION_LOOKAROUND_SECS;
use rivulet_stats::rollup::{self, Days, VisitMeasures, KIND_MARKER};
use rivulet_stats::sql::{sql, Sql};
use rivulet_stats::visits;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Days computed by one statement: a month's events at most.
pub const MAX_DAYS: usize = 31;
/// Days of breakdowns computed and inserted together (one block, with their markers).
pub const BREAKDOWN_DAYS: usize = 3;
/// Dimensions of breakdowns computed by one statement.
pub const BREAKDOWN_DIMENSIONS: usize = 5;

/// The columns of [`RollupRow`], in the order of its fields (rows are read and written in
/// that order): the site, zone, day and generation, then [`rollup::ROW_COLUMNS`].
const DAY_COLUMNS: [&str; 4] = ["site_id", "time_zone", "local_day", "generation"];
/// The same of [`BreakdownRow`].
const BREAKDOWN_COLUMNS: [&str; 6] = [
    "site_id",
    "time_zone",
    "dimension",
    "local_day",
    "generation",
    "value",
];

/// One row of `stats_total_days`.
#[derive(Debug, Clone, Default, PartialEq, Row, Serialize, Deserialize)]
pub struct RollupRow {
    pub site_id: u32,
    pub time_zone: String,
    /// Days since 1970-01-01 (a `Date`).
    pub local_day: u16,
    pub generation: u32,
    pub kind: u8,
    pub utc_day: u16,
    pub day_pieces: u8,
    pub pageviews: u64,
    pub events: u64,
    pub visits_started: u64,
    pub visits_carried: u64,
    pub bounces_started: u64,
    pub bounces_carried: u64,
    pub duration_started: u64,
    pub duration_carried: u64,
    pub views_started: u64,
    pub views_carried: u64,
    pub daily_visitors: u64,
    pub daily_visitors_utc_day: u64,
    pub id_hash: u64,
}

/// One row of `stats_breakdown_days`: [`RollupRow`]'s columns for one value of one
/// dimension (in a marker, no dimension and the layout as its value). Its own struct:
/// rows are written by column name, in the order of their fields.
#[derive(Debug, Clone, Default, PartialEq, Row, Serialize, Deserialize)]
pub struct BreakdownRow {
    pub site_id: u32,
    pub time_zone: String,
    pub dimension: String,
    /// Days since 1970-01-01 (a `Date`).
    pub local_day: u16,
    pub generation: u32,
    pub value: String,
    pub kind: u8,
    pub utc_day: u16,
    pub day_pieces: u8,
    pub pageviews: u64,
    pub events: u64,
    pub visits_started: u64,
    pub visits_carried: u64,
    pub bounces_started: u64,
    pub bounces_carried: u64,
    pub duration_started: u64,
    pub duration_carried: u64,
    pub views_started: u64,
    pub views_carried: u64,
    pub daily_visitors: u64,
    pub daily_visitors_utc_day: u64,
    pub id_hash: u64,
}

/// One row of `stats_visit_days` (`rivulet_stats::visits`), its fields in the table's
/// order: the site, zone, day and generation, then [`visits::row_columns`].
#[derive(Debug, Clone, Default, PartialEq, Row, Serialize, Deserialize)]
pub struct VisitRow {
    pub site_id: u32,
    pub time_zone: String,
    /// Days since 1970-01-01 (a `Date`).
    pub local_day: u16,
    pub generation: u32,
    pub kind: u8,
    pub visit_hash: u64,
    pub started: u8,
    pub entry_page: String,
    pub exit_page: String,
    pub source: String,
    pub referrer: String,
    pub channel: String,
    pub utm_source: String,
    pub utm_medium: String,
    pub utm_campaign: String,
    pub utm_content: String,
    pub utm_term: String,
    pub device: String,
    pub browser: String,
    pub browser_version: String,
    pub os: String,
    pub os_version: String,
    pub country: String,
    pub region: String,
    pub city: String,
    pub screen: String,
    pub pageviews: u64,
    pub events: u64,
    pub views: u64,
    pub bounce: u8,
    pub duration: u64,
    pub visitors: Vec<u64>,
    pub event_pages: Vec<String>,
    pub event_pageviews: Vec<u8>,
    pub event_visitors: Vec<u64>,
}

#[derive(Debug, Row, Deserialize)]
struct Stale {
    site_id: u32,
    day: String,
    generation: u32,
    touched: u32,
    /// The day's generation is valid; only its visits are missing.
    visits_only: u8,
    /// That generation.
    valid: u32,
}

/// What one run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RollupRun {
    /// Days computed (a generation written).
    pub days: u64,
    /// Days whose visits were filled in at their valid generation.
    pub visit_days: u64,
    /// Rows written, markers included.
    pub rows: u64,
    /// Days stale but not yet ready (an insert within the margin, or visits that may
    /// still grow).
    pub waiting: u64,
    /// Nothing was computed: a mutation of `events` was under way.
    pub mutations_under_way: bool,
}

pub struct RollupJob {
    pub db: Db,
    /// Every server (`ChConfig::each_node`): the job waits while any of them has a
    /// mutation of `events` under way.
    pub nodes: Vec<Db>,
    /// How long the hours a day reads must have had no insert.
    pub margin: Duration,
    /// Days computed in one run at most (the rest in the next): `None` for all.
    pub max_days: Option<usize>,
}

/// A stamp of `stats_touched`.
#[derive(Debug, Row, Serialize)]
struct Touch {
    site_id: u32,
    hour: u32,
    touched_at: u32,
}

/// Stamps `(site_id, hour)`s (epoch seconds of whole UTC hours) as changed now: the
/// rollup's days that read them are stale until computed again. Erasure and retention
/// call it; their deletes are not inserts, so the view does not see them.
pub async fn touch(db: &Db, hours: &[(u32, u32)]) -> Result<(), clickhouse::error::Error> {
    if hours.is_empty() {
        return Ok(());
    }
    let now = u32::try_from(rivulet_common::epoch::now_ms() / 1000).unwrap_or(u32::MAX);
    // On a cluster, through the Distributed table, written to each shard before the
    // insert returns; without the quorum, which would wait on the enricher's inserts.
    let client = match db.topology.cluster() {
        Some(_) => db
            .client
            .clone()
            .with_setting("insert_distributed_sync", "1"),
        None => db.client.clone(),
    };
    let mut insert = client.insert::<Touch>(rollup::TOUCHED_TABLE).await?;
    for (site_id, hour) in hours {
        insert
            .write(&Touch {
                site_id: *site_id,
                hour: hour - hour % 3600,
                touched_at: now,
            })
            .await?;
    }
    insert.end().await
}

/// The rollup rows of the local days that can hold the events of these hours (a UTC
/// day either side of theirs, whatever the zone), as a condition on `stats_total_days` and its
/// binds: what erasure deletes.
pub fn days_of_hours(hours: &[(u32, u32)]) -> (String, Vec<u64>) {
    let mut by_site: std::collections::BTreeMap<u32, (u64, u64)> = Default::default();
    for (site, hour) in hours {
        let day = u64::from(*hour) / 86_400;
        let e = by_site.entry(*site).or_insert((day, day));
        e.0 = e.0.min(day);
        e.1 = e.1.max(day);
    }
    let condition = vec![
        "(site_id = ? AND toUInt16(local_day) >= ? AND toUInt16(local_day) <= ?)";
        by_site.len()
    ]
    .join(" OR ");
    let binds = by_site
        .iter()
        .flat_map(|(site, (first, last))| [u64::from(*site), first.saturating_sub(1), last + 1])
        .collect();
    (condition, binds)
}

/// Whether any server has a mutation of `events` under way (an erasure, a retention):
/// a day computed meanwhile could count rows about to go.
pub async fn events_mutations_unfinished(nodes: &[Db]) -> Result<bool, clickhouse::error::Error> {
    for node in nodes {
        let n: u64 = node
            .root
            .query(
                "SELECT count() FROM system.mutations WHERE database = ? \
                 AND table IN ('events', 'events_local') AND is_done = 0",
            )
            .bind(&node.database)
            .fetch_one()
            .await?;
        if n > 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

impl RollupJob {
    /// Computes every ready stale day of the sites (`(site_id, IANA time zone)`), at
    /// `now` (epoch seconds).
    pub async fn run(
        &self,
        sites: &[(u32, String)],
        now: i64,
    ) -> Result<RollupRun, clickhouse::error::Error> {
        let mut total = RollupRun::default();
        if events_mutations_unfinished(&self.nodes).await? {
            tracing::debug!("rollup: a mutation of events is under way; waiting");
            total.mutations_under_way = true;
            return Ok(total);
        }
        let mut budget = self.max_days.unwrap_or(usize::MAX);
        // One question per time zone, for all its sites.
        let mut by_zone: std::collections::BTreeMap<&str, Vec<u32>> = Default::default();
        for (site_id, tz) in sites {
            by_zone.entry(tz.as_str()).or_default().push(*site_id);
        }
        for (tz, site_ids) in by_zone {
            let zone = match Zone::new(tz) {
                Ok(z) => z,
                Err(e) => {
                    tracing::warn!(?site_ids, error = %e, "rollup: a time zone that is not known; skipped");
                    continue;
                }
            };
            let stale: Vec<Stale> = query(&self.db, &rollup::stale_days(&site_ids, &zone))
                .fetch_all()
                .await?;
            for site_id in site_ids {
                let of_site: Vec<&Stale> = stale.iter().filter(|s| s.site_id == site_id).collect();
                let mut ready: Vec<(jiff::civil::Date, u32)> = Vec::new();
                let mut fill: Vec<(jiff::civil::Date, u32)> = Vec::new();
                for s in of_site {
                    let Ok(day) = s.day.parse::<jiff::civil::Date>() else {
                        continue;
                    };
                    if s.visits_only == 1 {
                        // Valid as it is: its events have not changed since its
                        // generation, so its visits computed now are that generation's.
                        if ready.len() + fill.len() < budget {
                            fill.push((day, s.valid));
                        } else {
                            total.waiting += 1;
                        }
                    } else if ready.len() + fill.len() < budget
                        && is_ready(&zone, day, s.touched, self.margin, now)
                    {
                        ready.push((day, s.generation));
                    } else {
                        total.waiting += 1;
                    }
                }
                budget -= ready.len() + fill.len();
                for days in consecutive_runs(&fill) {
                    total.rows += self.write_visits(site_id, &zone, days).await?;
                    total.visit_days += days.len() as u64;
                }
                for days in consecutive_runs(&ready) {
                    total.rows += self.compute(site_id, &zone, days, now).await?;
                    total.days += days.len() as u64;
                }
            }
        }
        Ok(total)
    }

    /// Computes consecutive days as one generation each (the same number: `now`) and
    /// deletes the generations they replace.
    async fn compute(
        &self,
        site_id: u32,
        zone: &Zone,
        days: &[(jiff::civil::Date, u32)],
        now: i64,
    ) -> Result<u64, clickhouse::error::Error> {
        let (Some(first), Some(last)) = (days.first(), days.last()) else {
            return Ok(0);
        };
        let generation = u32::try_from(now).unwrap_or(u32::MAX);
        let range = match Days::literal(zone, first.0, last.0) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(site_id, error = %e, "rollup: days out of range; skipped");
                return Ok(0);
            }
        };
        let rows = as_written(
            &rollup::rows(site_id, zone, &range, true, VisitMeasures::Computed),
            &DAY_COLUMNS,
            site_id,
            zone,
            generation,
        );
        let computed: Vec<RollupRow> = query(&self.db, &rows).fetch_all().await?;
        // The breakdowns first: a generation counts once both tables have its markers,
        // and a query reads a day's latest generation of the table it reads.
        let mut written = self
            .write_breakdowns(site_id, zone, days, generation)
            .await?;
        let of_generation: Vec<(jiff::civil::Date, u32)> =
            days.iter().map(|(day, _)| (*day, generation)).collect();
        written += self.write_visits(site_id, zone, &of_generation).await?;
        let markers = days.iter().map(|(day, _)| RollupRow {
            site_id,
            time_zone: zone.name().to_string(),
            local_day: day_number(*day),
            generation,
            kind: KIND_MARKER,
            ..RollupRow::default()
        });
        written += self.insert_block(rollup::TABLE, markers, &computed).await?;
        if days.iter().any(|(_, old)| *old > 0) {
            // The replaced generations: rows no query reads any more.
            for table in ROLLUP_TABLES {
                self.db
                    .alter(
                        table,
                        "DELETE WHERE site_id = ? AND time_zone = ? \
                     AND local_day >= toDate(?) AND local_day <= toDate(?) AND generation < ?",
                        |q| {
                            q.bind(site_id)
                                .bind(zone.name())
                                .bind(first.0.to_string())
                                .bind(last.0.to_string())
                                .bind(generation)
                        },
                    )
                    .await?;
            }
        }
        metrics::counter!("enricher_rollup_days_total").increment(days.len() as u64);
        tracing::debug!(site_id, first = %first.0, last = %last.0, rows = written, "rollup computed");
        Ok(written)
    }

    /// Writes the breakdowns of consecutive days as generation `generation`: for each
    /// [`BREAKDOWN_DAYS`] of them, the dimensions' rows computed [`BREAKDOWN_DIMENSIONS`]
    /// at a time and inserted with the days' markers in one block. (All the visit
    /// attributes of a month in one statement held 3.7 GiB at 10 million events a year:
    /// each event counts once per dimension.) Returns the rows written.
    async fn write_breakdowns(
        &self,
        site_id: u32,
        zone: &Zone,
        days: &[(jiff::civil::Date, u32)],
        generation: u32,
    ) -> Result<u64, clickhouse::error::Error> {
        let dims = rollup::breakdown_dimensions();
        let mut written = 0u64;
        for run in days.chunks(BREAKDOWN_DAYS) {
            let (Some(first), Some(last)) = (run.first(), run.last()) else {
                continue;
            };
            // `compute` has resolved the whole range; a part of it cannot fail to. Were it
            // to, its days would keep no breakdown marker and stay stale: say so.
            let range = match Days::literal(zone, first.0, last.0) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(site_id, error = %e, "rollup: breakdown days out of range; skipped");
                    continue;
                }
            };
            let mut rows: Vec<BreakdownRow> = Vec::new();
            for some in dims.chunks(BREAKDOWN_DIMENSIONS) {
                let sql = as_written(
                    &rollup::breakdown_rows(site_id, zone, &range, some, VisitMeasures::Computed),
                    &BREAKDOWN_COLUMNS,
                    site_id,
                    zone,
                    generation,
                );
                rows.extend(query(&self.db, &sql).fetch_all::<BreakdownRow>().await?);
            }
            let markers = run.iter().map(|(day, _)| BreakdownRow {
                site_id,
                time_zone: zone.name().to_string(),
                local_day: day_number(*day),
                generation,
                kind: KIND_MARKER,
                value: rollup::LAYOUT.to_string(),
                ..BreakdownRow::default()
            });
            written += self
                .insert_block(rollup::BREAKDOWN_TABLE, markers, &rows)
                .await?;
        }
        Ok(written)
    }

    /// Writes the visits of consecutive days, each at its generation (`days`: the day and
    /// its generation), [`BREAKDOWN_DAYS`] of them per statement and per insert, with
    /// their markers in the same block. Returns the rows written.
    async fn write_visits(
        &self,
        site_id: u32,
        zone: &Zone,
        days: &[(jiff::civil::Date, u32)],
    ) -> Result<u64, clickhouse::error::Error> {
        let mut written = 0u64;
        for run in days.chunks(BREAKDOWN_DAYS) {
            let (Some(first), Some(last)) = (run.first(), run.last()) else {
                continue;
            };
            let range = match Days::literal(zone, first.0, last.0) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(site_id, error = %e, "rollup: visit days out of range; skipped");
                    continue;
                }
            };
            let sql = visits_as_written(
                &visits::visit_rows(site_id, zone, &range),
                site_id,
                zone,
                run,
            );
            let rows: Vec<VisitRow> = query(&self.db, &sql).fetch_all().await?;
            let markers = run.iter().map(|(day, generation)| VisitRow {
                site_id,
                time_zone: zone.name().to_string(),
                local_day: day_number(*day),
                generation: *generation,
                kind: KIND_MARKER,
                ..VisitRow::default()
            });
            written += self.insert_block(visits::TABLE, markers, &rows).await?;
        }
        Ok(written)
    }

    /// Inserts `markers`, then `rows`, into `table` as one insert: a generation's rows
    /// land with its markers or not at all. Returns the rows written.
    async fn insert_block<R: RowOwned + RowWrite>(
        &self,
        table: &str,
        markers: impl Iterator<Item = R>,
        rows: &[R],
    ) -> Result<u64, clickhouse::error::Error> {
        let mut written = 0u64;
        let mut insert = self.db.client.insert::<R>(table).await?;
        for marker in markers {
            insert.write(&marker).await?;
            written += 1;
        }
        for row in rows {
            insert.write(row).await?;
            written += 1;
        }
        insert.end().await?;
        Ok(written)
    }
}

/// `computed` (rows of [`visits::visit_rows`]) as the table's rows: the site, zone, day,
/// each day's generation (from `days`), then [`visits::row_columns`].
fn visits_as_written(
    computed: &Sql,
    site_id: u32,
    zone: &Zone,
    days: &[(jiff::civil::Date, u32)],
) -> Sql {
    let numbers = |f: &dyn Fn(&(jiff::civil::Date, u32)) -> String| {
        days.iter().map(f).collect::<Vec<_>>().join(", ")
    };
    let mut s = sql("SELECT toUInt32(");
    s.bind_uint(u64::from(site_id))
        .push(") AS site_id, ")
        .bind_str(zone.name())
        .push(&format!(
            " AS time_zone, local_day, toUInt32(transform(toUInt16(local_day), [{}], [{}], 0)) AS generation",
            numbers(&|(d, _)| format!("toUInt16({})", day_number(*d))),
            numbers(&|(_, g)| format!("toUInt32({g})")),
        ));
    for column in visits::row_columns() {
        s.push(", ").push(column);
    }
    s.push(" FROM (").append(computed).push(")");
    s
}

/// `computed` (rows of [`rollup::rows`] or [`rollup::breakdown_rows`]: `local_day`,
/// `dimension` and `value` where they have them, and [`rollup::ROW_COLUMNS`]) as the
/// table's rows: `leading` then [`rollup::ROW_COLUMNS`], with the site, zone and
/// generation given by the statement, so that the rows read are the rows written.
fn as_written(computed: &Sql, leading: &[&str], site_id: u32, zone: &Zone, generation: u32) -> Sql {
    let mut s = Sql::new();
    s.push("SELECT ");
    for (i, column) in leading.iter().enumerate() {
        if i > 0 {
            s.push(", ");
        }
        match *column {
            "site_id" => s
                .push("toUInt32(")
                .bind_uint(u64::from(site_id))
                .push(") AS site_id"),
            "time_zone" => s.bind_str(zone.name()).push(" AS time_zone"),
            "generation" => s
                .push("toUInt32(")
                .bind_uint(u64::from(generation))
                .push(") AS generation"),
            other => s.push(other),
        };
    }
    for column in rollup::ROW_COLUMNS {
        s.push(", ").push(column);
    }
    s.push(" FROM (").append(computed).push(")");
    s
}

/// The statement of a [`Sql`], its binds bound.
fn query(db: &Db, sql: &Sql) -> clickhouse::query::Query {
    sql.binds()
        .iter()
        .fold(db.client.query(sql.text()), |q, b| q.bind(b))
}

/// A date as ClickHouse's `Date` holds it: days since 1970-01-01.
pub fn day_number(day: jiff::civil::Date) -> u16 {
    let epoch = jiff::civil::date(1970, 1, 1);
    epoch
        .until(day)
        .ok()
        .and_then(|span| u16::try_from(span.get_days()).ok())
        .unwrap_or(0)
}

/// Whether a stale day can be computed at `now`: its last stamp is `margin` old, and its
/// visits are over (six hours after it ends, and its last UTC day over), `margin` ago.
pub fn is_ready(
    zone: &Zone,
    day: jiff::civil::Date,
    touched: u32,
    margin: Duration,
    now: i64,
) -> bool {
    // At least a second: a generation is the second its computation began, and it is
    // valid only for stamps before it.
    let margin = (margin.as_secs() as i64).max(1);
    let Ok(end) = day
        .tomorrow()
        .map_err(|_| ())
        .and_then(|d| zone.start_of(d).map_err(|_| ()))
    else {
        return false;
    };
    let visits_over = (end + SESSION_LOOKAROUND_SECS as i64).max((end + 86_399) / 86_400 * 86_400);
    i64::from(touched) + margin <= now && visits_over + margin <= now
}

/// The days split where they are not consecutive, and into runs of [`MAX_DAYS`] at most.
pub fn consecutive_runs<T>(days: &[(jiff::civil::Date, T)]) -> Vec<&[(jiff::civil::Date, T)]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=days.len() {
        let split = i == days.len()
            || i - start >= MAX_DAYS
            || days[i - 1].0.tomorrow().ok() != Some(days[i].0);
        if split {
            out.push(&days[start..i]);
            start = i;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;

    /// The columns a row is read with are its fields, in their order: a row is read and
    /// written by position.
    #[test]
    fn the_rows_are_read_in_the_order_of_their_fields() {
        fn fields_in_order<T: Serialize + Default>() -> Vec<String> {
            let text = serde_json::to_string(&T::default()).unwrap();
            let mut keys: Vec<(usize, String)> =
                serde_json::from_str::<serde_json::Map<_, _>>(&text)
                    .unwrap()
                    .keys()
                    .map(|k| (text.find(&format!("\"{k}\":")).unwrap(), k.clone()))
                    .collect();
            keys.sort();
            keys.into_iter().map(|(_, k)| k).collect()
        }
        let columns = |leading: &[&str]| -> Vec<String> {
            leading
                .iter()
                .chain(rollup::ROW_COLUMNS.iter())
                .map(|c| c.to_string())
                .collect()
        };
        assert_eq!(fields_in_order::<RollupRow>(), columns(&DAY_COLUMNS));
        assert_eq!(
            fields_in_order::<BreakdownRow>(),
            columns(&BREAKDOWN_COLUMNS)
        );
        let visit_columns: Vec<String> = DAY_COLUMNS
            .iter()
            .copied()
            .chain(visits::row_columns())
            .map(String::from)
            .collect();
        assert_eq!(fields_in_order::<VisitRow>(), visit_columns);
        let zone = Zone::new("Europe/Berlin").unwrap();
        let sql = as_written(
            &Sql::new().push("SELECT 1").clone(),
            &BREAKDOWN_COLUMNS,
            7,
            &zone,
            9,
        );
        assert!(
            sql.text().starts_with(
                "SELECT toUInt32(?) AS site_id, ? AS time_zone, dimension, local_day, \
                 toUInt32(?) AS generation, value, kind, utc_day, day_pieces,"
            ),
            "{}",
            sql.text()
        );
    }

    #[test]
    fn the_tables_written_are_those_erasure_and_retention_delete_from() {
        // And those whose replaced generations the job deletes.
        assert_eq!(
            ROLLUP_TABLES,
            [rollup::TABLE, rollup::BREAKDOWN_TABLE, visits::TABLE]
        );
    }

    #[test]
    fn erasure_deletes_a_day_either_side_of_the_hours_days() {
        let (c, b) = days_of_hours(&[(3, 86_400 * 10 + 7200), (3, 86_400 * 12), (5, 3600)]);
        assert_eq!(
            c,
            "(site_id = ? AND toUInt16(local_day) >= ? AND toUInt16(local_day) <= ?) OR \
             (site_id = ? AND toUInt16(local_day) >= ? AND toUInt16(local_day) <= ?)"
        );
        assert_eq!(b, [3, 9, 13, 5, 0, 1]);
    }

    #[test]
    fn days_are_counted_from_1970() {
        assert_eq!(day_number(date(1970, 1, 1)), 0);
        assert_eq!(day_number(date(2024, 3, 31)), 19_813);
    }

    #[test]
    fn runs_break_at_gaps_and_at_a_month() {
        let days: Vec<(jiff::civil::Date, ())> = (0..40)
            .map(|i| (date(2024, 1, 1) + jiff::Span::new().days(i), ()))
            .filter(|(d, _)| *d != date(2024, 1, 5))
            .collect();
        let runs = consecutive_runs(&days);
        let lens: Vec<usize> = runs.iter().map(|r| r.len()).collect();
        assert_eq!(lens, vec![4, 31, 4]);
        assert!(consecutive_runs::<()>(&[]).is_empty());
    }

    #[test]
    fn a_day_is_ready_once_its_visits_are_over_and_its_last_insert_is_a_margin_old() {
        let berlin = Zone::new("Europe/Berlin").unwrap();
        let day = date(2024, 3, 10);
        // It ends at 2024-03-10T23:00Z; its visits may run until 05:00Z; its last UTC
        // day (the 10th) ends at midnight before that.
        let end = 1_710_111_600;
        let over = end + 6 * 3600;
        let margin = Duration::from_secs(300);
        assert!(!is_ready(&berlin, day, 0, margin, over + 299));
        assert!(is_ready(&berlin, day, 0, margin, over + 300));
        assert!(!is_ready(
            &berlin,
            day,
            (over + 100) as u32,
            margin,
            over + 300
        ));
        // In a zone behind UTC, the UTC day it ends in is over later than its visits.
        let la = Zone::new("America/Los_Angeles").unwrap();
        let la_end = la.start_of(date(2024, 3, 11)).unwrap(); // 2024-03-11T07:00Z
        let utc_end = 1_710_201_600; // 2024-03-12T00:00Z
        assert!(la_end + 6 * 3600 < utc_end);
        assert!(!is_ready(&la, day, 0, margin, utc_end + 299));
        assert!(is_ready(&la, day, 0, margin, utc_end + 300));
    }
}
