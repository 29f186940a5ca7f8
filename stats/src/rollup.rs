//! The daily rollup: the top figures and the time series of whole local days, read from
//! `stats_total_days` for the days the rollup job has computed and from `events` for the rest,
//! with the same answers as [`EventsSource`] (docs/decisions/015-stats-rollup.md has the
//! design and the measurements; docs/stats-api.md, "The daily rollup", what a user sees).
//!
//! **Rows.** For each (site, time zone, local day) the job writes one *generation*: a
//! marker row (kind 0) and, from [`rows`], the day's *pieces* (kind 1), one per UTC day
//! the local day overlaps (one in UTC, two elsewhere), and the piece's recurring visitor
//! ids (kind 2). A piece holds what adds up across pieces: pageviews and events (distinct
//! ids; an event's copies share its second), and the visits *started* in it and *carried*
//! into it (a visit that began earlier), each with its bounces, duration and pageviews
//! measured over all its events. A bucket (the range, a day, a week, a month) counts the
//! visits started in its pieces plus those carried into its first one: a visit is counted
//! once, in every bucket it has an event in, as [`EventsSource`] counts it. (A visit that
//! began before a bucket and skips the bucket's whole first piece — no event for hours —
//! is not counted in that bucket: the enricher's visits end after 30 minutes without one.)
//!
//! **Visitors, exactly, without a set of a year's ids.** The enricher's visitor id of an
//! event without a user id (`events.daily_visitor = 1`) is derived from the event's UTC day
//! and never recurs on another one, so the distinct ones of a range are a sum over UTC
//! days: each piece keeps its own count and its whole UTC day's, and a bucket takes the
//! whole day's count when it holds all the day's pieces, else the sum of its pieces'.
//! Every other id (a user id, an imported visitor) may recur on any day: those are kept
//! one row per piece (as `cityHash64`) and counted with `uniqExact` over the bucket.
//!
//! **Fresh, and exact while it is not.** Every insert into `events` stamps its (site, UTC
//! hour)s in `stats_touched` (a materialized view); erasure and retention stamp the hours
//! they change. A day's generation is valid while no hour it read (its local day, six
//! hours either side for its visits, and the whole UTC days it overlaps) was stamped at or
//! after the generation began. Before a query, the server reads the site's stale days
//! ([`state_statement`] into [`RollupState`]); the query reads the range's days before
//! the first stale one from `stats_total_days`, and the rest (the *tail*) from `events`,
//! computed by the same [`rows`] the job uses, in one statement. In steady state the tail
//! is today, and yesterday until 6 hours after midnight.

use crate::date_range::Zone;
use crate::dimensions::{
    Bucket, Dimension, EventProperty, TimeGrain, VisitProperty, VISIT_PROPERTIES,
};
use crate::events_source::{engagement_list, event_property, visit_aggregate, EventsSource};
use crate::filters::{Filter, Leaf, Op};
use crate::identity;
use crate::limits::SESSION_LOOKAROUND_SECS;
use crate::metrics::Metric;
use crate::rows::decode_rows;
use crate::source::{Restriction, Source, Spec};
use crate::sql::{quote, sql, Sql, Statement};
use crate::{SiteContext, StatsError};
use jiff::civil::Date;

/// What the rollup's rows are computed from: `events` read with `FINAL`. A replay writes
/// a changed event again under the same key, and until ClickHouse merges the two, both
/// are in the table with different values (a browser, a country). `FINAL` takes the newer,
/// so a day computed in that window holds the replayed values and not a mix of both, which
/// would stay: a merge stamps no hour, and the day would not be computed again. The copies
/// the enricher writes are equal and read the same either way.
const EVENTS_FINAL: &str = "events FINAL";

/// The rollup's table.
pub const TABLE: &str = "stats_total_days";
/// The rollup's breakdowns by visit attributes: [`TABLE`]'s columns and the attribute's
/// name (`dimension`, as the API spells it) and `value`; its markers have neither.
pub const BREAKDOWN_TABLE: &str = "stats_breakdown_days";
/// The rollup's visits, one row per visit and day: `crate::visits` reads them.
pub const VISIT_TABLE: &str = "stats_visit_days";
/// [`RollupSource`]'s name, as [`crate::QueryPlan::source`] gives it.
pub const SOURCE_NAME: &str = "rollup";
/// When each (site, UTC hour) last had events inserted (or erased, or expired).
pub const TOUCHED_TABLE: &str = "stats_touched";

/// A generation's marker: it is complete.
pub const KIND_MARKER: u8 = 0;
/// A piece's counts.
pub const KIND_PIECE: u8 = 1;
/// One recurring visitor id of a piece.
pub const KIND_ID: u8 = 2;
/// One person of a piece by their user id (an event's `user_id` that is not a visitor
/// id): `users`.
pub const KIND_PERSON: u8 = 3;
/// One anonymous id of a piece's events whose `user_id` is a visitor id: its owner, read
/// from the claims when a query reads it (a claim may come after the day is computed),
/// is a person of the piece.
pub const KIND_ANONYMOUS: u8 = 4;

/// The columns of [`rows`], in the table's order after `site_id`, `time_zone`,
/// `local_day` and `generation`.
pub const ROW_COLUMNS: [&str; 16] = [
    "kind",
    "utc_day",
    "day_pieces",
    "pageviews",
    "events",
    "visits_started",
    "visits_carried",
    "bounces_started",
    "bounces_carried",
    "duration_started",
    "duration_carried",
    "views_started",
    "views_carried",
    "daily_visitors",
    "daily_visitors_utc_day",
    "id_hash",
];

/// What a generation holds, written as its breakdown markers' `value`: a generation of
/// another layout (another set of dimensions, or day rows without the persons) counts
/// as missing, and its days are computed again. Changed with [`breakdown_dimensions`]
/// and with the kinds of [`rows`].
pub const LAYOUT: &str = "visit attributes; event page, name, hostname, type; \
     pageview pages, custom event names; persons";

/// The event dimensions the breakdown table holds (not a custom property: any name).
pub const EVENT_DIMENSIONS: [EventProperty; 4] = [
    EventProperty::Page,
    EventProperty::Name,
    EventProperty::Hostname,
    EventProperty::Type,
];

/// The event dimensions the breakdown table also holds over the events of one type: what
/// the dashboard asks with an `event:type` filter (its Top pages, of pageviews, and its
/// Custom events).
pub const TYPED_EVENT_DIMENSIONS: [(EventProperty, &str); 2] = [
    (EventProperty::Page, "pageview"),
    (EventProperty::Name, "custom_event"),
];

/// One breakdown the table holds: by a dimension, of every event or of the events of one
/// type only ([`TYPED_EVENT_DIMENSIONS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breakdown {
    pub dimension: Dimension,
    pub of_type: Option<&'static str>,
}

impl Breakdown {
    /// Its `dimension` in the table: the dimension's name, and the type after a `|`.
    pub fn name(&self) -> String {
        match self.of_type {
            None => self.dimension.name(),
            Some(t) => format!("{}|event:type={t}", self.dimension.name()),
        }
    }
}

/// The breakdowns the table holds: by every visit attribute, by [`EVENT_DIMENSIONS`],
/// and [`TYPED_EVENT_DIMENSIONS`].
pub fn breakdown_dimensions() -> Vec<Breakdown> {
    let all = |dimension| Breakdown {
        dimension,
        of_type: None,
    };
    VISIT_PROPERTIES
        .iter()
        .map(|(p, _)| all(Dimension::Visit(*p)))
        .chain(EVENT_DIMENSIONS.iter().map(|p| all(Dimension::Event(*p))))
        .chain(TYPED_EVENT_DIMENSIONS.iter().map(|(p, t)| Breakdown {
            dimension: Dimension::Event(*p),
            of_type: Some(t),
        }))
        .collect()
}

/// The metrics the rollup answers by an event dimension: those of the events alone.
const EVENT_METRICS: [Metric; 4] = [
    Metric::Visitors,
    Metric::Percentage,
    Metric::Pageviews,
    Metric::Events,
];

/// The metrics the rollup answers (`users` in total and by time alone: the breakdowns
/// hold no persons).
const METRICS: [Metric; 9] = [
    Metric::Users,
    Metric::Visitors,
    Metric::Percentage,
    Metric::Visits,
    Metric::Pageviews,
    Metric::Events,
    Metric::BounceRate,
    Metric::VisitDuration,
    Metric::ViewsPerVisit,
];

/// The local days a computation covers, as SQL: the instants they start and end at
/// (`DateTime`s; the end is the start of the day after the last).
#[derive(Debug, Clone)]
pub struct Days {
    pub start: Sql,
    pub end: Sql,
}

impl Days {
    /// Local days `first..=last` of a zone, as the job computes them.
    pub fn literal(zone: &Zone, first: Date, last: Date) -> Result<Days, StatsError> {
        let start = zone.start_of(first)?;
        let end = zone.start_of(next_day(last)?)?;
        Ok(Days {
            start: datetime(start),
            end: datetime(end),
        })
    }
}

fn datetime(second: i64) -> Sql {
    let mut s = sql("toDateTime(");
    s.bind_uint(second.max(0) as u64).push(")");
    s
}

pub(crate) fn date(d: Date) -> Sql {
    let mut s = sql("toDate(");
    s.bind_str(&d.to_string()).push(")");
    s
}

fn next_day(d: Date) -> Result<Date, StatsError> {
    d.tomorrow()
        .map_err(|_| StatsError::SiteContext(format!("no day after {d}")))
}

/// `site_id` and `[from, to)` of `timestamp`, bots left out.
fn between(site_id: u32, from: &Sql, to: &Sql) -> Sql {
    let mut s = sql("site_id = ");
    s.bind_uint(u64::from(site_id))
        .push(" AND timestamp >= ")
        .append(from)
        .push(" AND timestamp < ")
        .append(to)
        .push(" AND is_bot = 0");
    s
}

/// An instant `secs` seconds from `at`.
fn shifted(at: &Sql, secs: i64) -> Sql {
    let mut s = sql("toDateTime(toUInt32(");
    s.append(at).push(&format!(") + ({secs}))"));
    s
}

/// The start of the UTC day of `at`.
fn utc_floor(at: &Sql) -> Sql {
    let mut s = sql("toDateTime(intDiv(toUInt32(");
    s.append(at).push("), 86400) * 86400)");
    s
}

/// The end of the UTC day of the second before `at` (`at` itself at a UTC midnight).
fn utc_ceil(at: &Sql) -> Sql {
    let mut s = sql("toDateTime(intDiv(toUInt32(");
    s.append(at).push(") + 86399, 86400) * 86400)");
    s
}

/// Whether rows computed from `events` carry their visits' measures (the `visits_*`,
/// `bounces_*`, `duration_*` and `views_*` columns). The job stores them all; a query's
/// tail that asks no visit measure leaves them zero and skips the grouping of every visit
/// that fills them (a sixth of the tail's reads of `events`: a breakdown's statement over
/// a year with its last two days in the tail, 300 against 240 ms at 10M).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisitMeasures {
    Computed,
    Zero,
}

/// The visit measures' columns of a row, as `toUInt64(v_<column>) AS <column>` from the
/// join that computes them, or zero.
fn visit_measure_columns(visits: VisitMeasures) -> String {
    visit_measure_names()
        .iter()
        .map(|c| match visits {
            VisitMeasures::Computed => format!("toUInt64(v_{c}) AS {c}"),
            VisitMeasures::Zero => format!("toUInt64(0) AS {c}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The visit measures' columns: those of [`ROW_COLUMNS`] from `visits_started` to
/// `views_carried`.
fn visit_measure_names() -> &'static [&'static str] {
    &ROW_COLUMNS[5..13]
}

/// The piece of an instant: its local day and its UTC day, as one number.
fn piece(at: &str, tz: &str) -> String {
    format!("toUInt64(toDate({at}, {tz})) * 65536 + toUInt64(toDate({at}, 'UTC'))")
}

/// ` (… ) AS piece_visits USING local_day, utc_day` for [`rows`]: each piece's visits,
/// `v_<column>` of [`visit_measure_names`].
fn piece_visits(s: &mut Sql, site_id: u32, tz: &str, days: &Days) {
    let around = SESSION_LOOKAROUND_SECS as i64;
    let piece = |at: &str| piece(at, tz);
    s.push(
        "SELECT toDate(intDiv(piece, 65536)) AS local_day, toDate(piece % 65536) AS utc_day, \
         countIf(first) AS v_visits_started, countIf(NOT first) AS v_visits_carried, \
         sumIf(bounce, first) AS v_bounces_started, sumIf(bounce, NOT first) AS v_bounces_carried, \
         sumIf(duration, first) AS v_duration_started, sumIf(duration, NOT first) AS v_duration_carried, \
         sumIf(views, first) AS v_views_started, sumIf(views, NOT first) AS v_views_carried FROM (\
         SELECT views, bounce, duration, arrayJoin(pieces) AS piece, piece = start_piece AS first FROM (\
         SELECT session_id, arrayUniq(groupArrayIf(event_id, type = 'pageview')) AS views, ",
    );
    s.push(&format!(
        "toUInt8(views = 1 AND countIf(type IN ({})) = 0) AS bounce, \
         toUInt32(max(timestamp)) - toUInt32(min(timestamp)) AS duration, \
         {} AS start_piece, groupUniqArrayIf({}, ",
        engagement_list(),
        piece("min(timestamp)"),
        piece("timestamp"),
    ))
    .push("timestamp >= ")
    .append(&days.start)
    .push(" AND timestamp < ")
    .append(&days.end)
    .push(&format!(") AS pieces FROM {EVENTS_FINAL} WHERE "))
    .append(&between(
        site_id,
        &shifted(&days.start, -around),
        &shifted(&days.end, around),
    ))
    .push(" GROUP BY session_id)) GROUP BY piece) AS piece_visits USING local_day, utc_day");
}

/// The rows of a generation of `days` (without their marker), computed from `events`:
/// columns `local_day` and [`ROW_COLUMNS`]. The job inserts them all: [`piece_rows`] and
/// [`id_rows`] with the persons.
pub fn rows(site_id: u32, zone: &Zone, days: &Days, persons: bool, visits: VisitMeasures) -> Sql {
    let mut s = piece_rows(site_id, zone, days, visits);
    s.push(" UNION ALL ")
        .append(&id_rows(site_id, zone, days, persons));
    s
}

/// The pieces' rows of [`rows`] (kind 1). A query reads its tail's pieces through them,
/// with the visit measures only when it asks one of them.
pub fn piece_rows(site_id: u32, zone: &Zone, days: &Days, visits: VisitMeasures) -> Sql {
    let tz = quote(zone.name());
    let between = |from: &Sql, to: &Sql| between(site_id, from, to);
    let in_days = between(&days.start, &days.end);

    let mut s = sql(&format!(
        "SELECT local_day, toUInt8(1) AS kind, utc_day, u_pieces AS day_pieces, \
         toUInt64(e_pageviews) AS pageviews, toUInt64(e_events) AS events, {}, \
         toUInt64(e_daily) AS daily_visitors, toUInt64(u_daily) AS daily_visitors_utc_day, \
         toUInt64(0) AS id_hash FROM (\
         SELECT utc_day, local_day, e_pageviews, e_events, e_daily, u_daily, u_pieces FROM (",
        visit_measure_columns(visits)
    ));
    // Each piece's events and its day visitors.
    s.push(&format!(
        "SELECT toDate(timestamp, 'UTC') AS utc_day, toDate(timestamp, {tz}) AS local_day, \
         uniqExactIf(event_id, type = 'pageview') AS e_pageviews, uniqExact(event_id) AS e_events, \
         uniqExactIf(user_id, daily_visitor = 1) AS e_daily FROM {EVENTS_FINAL} WHERE "
    ))
    .append(&in_days)
    .push(" GROUP BY local_day, utc_day) AS piece_events ANY LEFT JOIN (");
    // Each whole UTC day's day visitors, and how many local days it has events of.
    // (`!= 0`, not `= 1`: 18.16 takes two equal expressions on the sides of a JOIN for
    // one column.)
    s.push(&format!(
        "SELECT toDate(timestamp, 'UTC') AS utc_day, uniqExactIf(user_id, daily_visitor != 0) AS u_daily, \
         toUInt8(uniqExact(toDate(timestamp, {tz}))) AS u_pieces FROM {EVENTS_FINAL} WHERE "
    ))
    .append(&between(&utc_floor(&days.start), &utc_ceil(&days.end)))
    .push(" GROUP BY utc_day) AS utc_days USING utc_day) AS pieces");
    if visits == VisitMeasures::Computed {
        // Each piece's visits: every visit with an event in the days, measured over all
        // its events (read six hours beyond them), started in the piece or carried into it.
        s.push(" ANY LEFT JOIN (");
        piece_visits(&mut s, site_id, &tz, days);
    }
    s
}

/// The ids' rows of [`rows`]: the recurring ids (kind 2), and with `persons` the persons
/// (kinds 3 and 4). A query reads its tail's ids through them, with the persons only when
/// it asks `users`.
pub fn id_rows(site_id: u32, zone: &Zone, days: &Days, persons: bool) -> Sql {
    let tz = quote(zone.name());
    let in_days = between(site_id, &days.start, &days.end);
    let mut s = Sql::new();
    let mut ids = |kind: u8, id: &str, condition: &str| {
        if kind != KIND_ID {
            s.push(" UNION ALL ");
        }
        s.append(&piece_ids(&tz, kind, id))
            .append(&in_days)
            .push(&format!(
                " AND {condition} GROUP BY local_day, utc_day, id_hash"
            ));
    };
    ids(KIND_ID, "user_id", "daily_visitor = 0");
    if persons {
        let visitor = identity::VISITOR_FORM;
        ids(
            KIND_PERSON,
            "user_id",
            &format!("user_id != '' AND NOT {visitor}"),
        );
        ids(
            KIND_ANONYMOUS,
            "anonymous_id",
            &format!("anonymous_id != '' AND {visitor}"),
        );
    }
    s
}

/// `SELECT` the rows of one `kind` of ids (`cityHash64` of the column `id` as `id_hash`)
/// `FROM events WHERE `, for a `GROUP BY local_day, utc_day, id_hash`. Every column
/// named: 18.16 asks each branch of a UNION ALL for the columns by name.
fn piece_ids(tz: &str, kind: u8, id: &str) -> Sql {
    let mut s = sql(&format!(
        "SELECT toDate(timestamp, {tz}) AS local_day, toUInt8({kind}) AS kind, \
         toDate(timestamp, 'UTC') AS utc_day, toUInt8(0) AS day_pieces"
    ));
    for c in &ROW_COLUMNS[3..15] {
        s.push(&format!(", toUInt64(0) AS {c}"));
    }
    s.push(&format!(
        ", cityHash64({id}) AS id_hash FROM {EVENTS_FINAL} WHERE "
    ));
    s
}

/// The rows of a generation's breakdowns of `days` by `dims` (without their marker),
/// computed from `events`: columns `local_day`, [`ROW_COLUMNS`] and `dimension`, `value`.
/// They are [`rows`] for each value of each dimension, so that a value's figures add up
/// across pieces as the totals do. By a visit attribute, the events and visits of the
/// visits that have that value (a visit's attributes are those of its first event, or
/// pageview, as [`EventsSource`] takes them): a visit has one value of each attribute, so
/// each of its events counts under that value, and the visit is started or carried under
/// it, as in the totals. By an event dimension ([`EVENT_DIMENSIONS`]), each event's own
/// value, and no visits (a visit has events of several pages: the rollup answers only
/// the event metrics of those). Dimensions of neither kind are left out. The job inserts
/// them into [`BREAKDOWN_TABLE`]; a query reads its tail through them.
pub fn breakdown_rows(
    site_id: u32,
    zone: &Zone,
    days: &Days,
    dims: &[Breakdown],
    visits: VisitMeasures,
) -> Sql {
    let visit: Vec<VisitProperty> = dims
        .iter()
        .filter_map(|b| match (&b.dimension, b.of_type) {
            (Dimension::Visit(p), None) => Some(*p),
            _ => None,
        })
        .collect();
    let event: Vec<(EventProperty, Option<&'static str>)> = dims
        .iter()
        .filter_map(|b| match (&b.dimension, b.of_type) {
            (Dimension::Event(p), None) if EVENT_DIMENSIONS.contains(p) => Some((*p, None)),
            (Dimension::Event(p), Some(t)) if TYPED_EVENT_DIMENSIONS.contains(&(*p, t)) => {
                Some((*p, Some(t)))
            }
            _ => None,
        })
        .collect();
    let mut s = Sql::new();
    if !visit.is_empty() {
        s.append(&visit_breakdown_rows(site_id, zone, days, &visit, visits));
    }
    if !event.is_empty() {
        if !visit.is_empty() {
            s.push(" UNION ALL ");
        }
        s.append(&event_breakdown_rows(site_id, zone, days, &event));
    }
    s
}

/// [`breakdown_rows`] by visit attributes.
fn visit_breakdown_rows(
    site_id: u32,
    zone: &Zone,
    days: &Days,
    props: &[VisitProperty],
    visits: VisitMeasures,
) -> Sql {
    let tz = quote(zone.name());
    let between = |from: &Sql, to: &Sql| between(site_id, from, to);
    let around = SESSION_LOOKAROUND_SECS as i64;
    let names: Vec<String> = props
        .iter()
        .map(|p| quote(&Dimension::Visit(*p).name()))
        .collect();
    let names = format!("[{}]", names.join(", "));
    let values: Vec<String> = props
        .iter()
        .map(|p| format!("toString({})", visit_aggregate(*p)))
        .collect();
    let values = format!("[{}]", values.join(", "));
    // Each of the events of `[from, to)` once per attribute, with its visit's value. The
    // visits are read over the UTC days the local days overlap and six hours either side:
    // every event that a whole UTC day's count reads has its visit there.
    let wide = (
        shifted(&utc_floor(&days.start), -around),
        shifted(&utc_ceil(&days.end), around),
    );
    let tagged = |from: &Sql, to: &Sql| {
        let mut s = sql(&format!(
            "SELECT timestamp, event_id, type, user_id, daily_visitor, \
             arrayJoin(arrayEnumerate(s_values)) AS i, arrayElement({names}, i) AS dimension, \
             arrayElement(s_values, i) AS value FROM (\
             SELECT timestamp, event_id, type, user_id, daily_visitor, session_id FROM {EVENTS_FINAL} WHERE "
        ));
        s.append(&between(from, to));
        s.push(&format!(
            ") AS ev ANY LEFT JOIN (SELECT session_id, {values} AS s_values FROM {EVENTS_FINAL} WHERE "
        ))
        .append(&between(&wide.0, &wide.1))
        .push(" GROUP BY session_id) AS vis USING session_id");
        s
    };

    let mut s = value_rows_header(visits);
    s.append(&value_rows(&tz, days, &tagged))
        .push(") AS pieces");
    if visits == VisitMeasures::Zero {
        return s;
    }
    // Each piece's visits by value: as in `rows`, each visit with its values.
    s.push(" ANY LEFT JOIN (");
    s.push(&format!(
        "SELECT toDate(intDiv(piece, 65536)) AS local_day, toDate(piece % 65536) AS utc_day, dimension, value, \
         countIf(first) AS v_visits_started, countIf(NOT first) AS v_visits_carried, \
         sumIf(bounce, first) AS v_bounces_started, sumIf(bounce, NOT first) AS v_bounces_carried, \
         sumIf(duration, first) AS v_duration_started, sumIf(duration, NOT first) AS v_duration_carried, \
         sumIf(views, first) AS v_views_started, sumIf(views, NOT first) AS v_views_carried FROM (\
         SELECT views, bounce, duration, arrayJoin(pieces) AS piece, piece = start_piece AS first, \
         arrayJoin(arrayEnumerate(s_values)) AS i, arrayElement({names}, i) AS dimension, \
         arrayElement(s_values, i) AS value FROM (\
         SELECT session_id, arrayUniq(groupArrayIf(event_id, type = 'pageview')) AS views, \
         toUInt8(views = 1 AND countIf(type IN ({engaged})) = 0) AS bounce, \
         toUInt32(max(timestamp)) - toUInt32(min(timestamp)) AS duration, \
         {start} AS start_piece, {values} AS s_values, groupUniqArrayIf({each}, ",
        engaged = engagement_list(),
        start = piece("min(timestamp)", &tz),
        each = piece("timestamp", &tz),
    ))
    .push("timestamp >= ")
    .append(&days.start)
    .push(" AND timestamp < ")
    .append(&days.end)
    .push(&format!(") AS pieces FROM {EVENTS_FINAL} WHERE "))
    .append(&between(
        &shifted(&days.start, -around),
        &shifted(&days.end, around),
    ))
    .push(
        " GROUP BY session_id)) GROUP BY piece, dimension, value) AS piece_visits \
         USING local_day, utc_day, dimension, value",
    );
    s
}

/// [`breakdown_rows`] by event dimensions: each event under its own value; by a typed
/// one, only the events of its type (the others have no dimension, and are dropped).
fn event_breakdown_rows(
    site_id: u32,
    zone: &Zone,
    days: &Days,
    props: &[(EventProperty, Option<&'static str>)],
) -> Sql {
    let tz = quote(zone.name());
    let names: Vec<String> = props
        .iter()
        .map(|(p, of_type)| {
            let name = Breakdown {
                dimension: Dimension::Event(*p),
                of_type: *of_type,
            }
            .name();
            match of_type {
                None => quote(&name),
                Some(t) => format!("if(type = {}, {}, '')", quote(t), quote(&name)),
            }
        })
        .collect();
    let names = format!("[{}]", names.join(", "));
    let values: Vec<String> = props
        .iter()
        .map(|(p, _)| format!("toString({})", event_property(*p)))
        .collect();
    let values = format!("[{}]", values.join(", "));
    let typed = props.iter().any(|(_, t)| t.is_some());
    // A typed dimension's name depends on the event's type: a column. Untyped, the names
    // stay one constant array rather than a column built for every event.
    let (names_column, names_of) = if typed {
        (format!(" {names} AS e_names,"), "e_names".to_string())
    } else {
        (String::new(), names)
    };
    let tagged = |from: &Sql, to: &Sql| {
        let mut s = sql(&format!(
            "SELECT timestamp, event_id, type, user_id, daily_visitor, \
             arrayJoin(arrayEnumerate(e_values)) AS i, arrayElement({names_of}, i) AS dimension, \
             arrayElement(e_values, i) AS value FROM (\
             SELECT timestamp, event_id, type, user_id, daily_visitor,{names_column} \
             {values} AS e_values FROM {EVENTS_FINAL} WHERE "
        ));
        s.append(&between(site_id, from, to));
        s.push(")");
        if typed {
            s.push(" WHERE dimension != ''");
        }
        s
    };
    let mut s = value_rows_header(VisitMeasures::Zero);
    s.append(&value_rows(&tz, days, &tagged)).push(")");
    s
}

/// `SELECT <local_day, ROW_COLUMNS, dimension, value> FROM (`, for [`value_rows`] (and,
/// with the visit measures computed, the join that computes them). A piece's visit
/// measures are on its counts' row (kind 1); its ids' rows have none.
fn value_rows_header(visits: VisitMeasures) -> Sql {
    let measures = match visits {
        VisitMeasures::Zero => visit_measure_columns(visits),
        VisitMeasures::Computed => visit_measure_names()
            .iter()
            .map(|c| format!("toUInt64(if(kind = {KIND_PIECE}, v_{c}, 0)) AS {c}"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    sql(&format!(
        "SELECT local_day, kind, utc_day, day_pieces, r_pageviews AS pageviews, r_events AS events, {measures}, \
         r_daily AS daily_visitors, r_daily_utc_day AS daily_visitors_utc_day, id_hash, dimension, value FROM ("
    ))
}

/// A tagged event stream of `[from, to)` for [`breakdown_rows`]: `timestamp`, `event_id`,
/// `type`, `user_id`, `daily_visitor`, `dimension`, `value`.
type Tagged<'a> = dyn Fn(&Sql, &Sql) -> Sql + 'a;

/// Each piece's rows by value, both kinds, from one read of the tagged events of the UTC
/// days the local days overlap: `local_day`, `kind`, `utc_day`, `day_pieces`,
/// `r_pageviews`, `r_events`, `r_daily`, `r_daily_utc_day`, `id_hash`, `dimension`,
/// `value`. A piece's counts are of its events in the days; its UTC day's day visitors
/// and pieces of all the UTC day's events (grouped by piece, then by UTC day, and spread
/// back over the pieces); its recurring ids, one row each. One read where the events of
/// the days, those of their UTC days and the recurring ids' were three reads, each
/// tagging every event with its visit's values again (every dimension of 3 days at 10M,
/// as the job computes them: 21–27 % faster, the same rows).
fn value_rows(tz: &str, days: &Days, tagged: &Tagged) -> Sql {
    let mut s = sql(&format!(
        "SELECT local_day, tupleElement(k, 1) AS kind, utc_day, \
         toUInt8(if(kind = {KIND_PIECE}, u_pieces, 0)) AS day_pieces, \
         toUInt64(if(kind = {KIND_PIECE}, e_pageviews, 0)) AS r_pageviews, \
         toUInt64(if(kind = {KIND_PIECE}, e_events, 0)) AS r_events, \
         toUInt64(if(kind = {KIND_PIECE}, e_daily, 0)) AS r_daily, \
         toUInt64(if(kind = {KIND_PIECE}, u_daily, 0)) AS r_daily_utc_day, \
         tupleElement(k, 2) AS id_hash, dimension, value FROM (\
         SELECT utc_day, dimension, value, u_daily, u_pieces, local_day, e_pageviews, e_events, \
         e_daily, g_ids FROM (\
         SELECT utc_day, dimension, value, uniqExactArray(g_daily) AS u_daily, \
         toUInt8(count()) AS u_pieces, groupArray(local_day) AS a_day, \
         groupArray(e_pageviews) AS a_pageviews, groupArray(e_events) AS a_events, \
         groupArray(e_daily) AS a_daily, groupArray(g_ids) AS a_ids, \
         groupArray(n_in_days) AS a_in_days FROM (\
         SELECT toDate(timestamp, 'UTC') AS utc_day, toDate(timestamp, {tz}) AS local_day, \
         dimension, value, \
         uniqExactIf(event_id, type = 'pageview' AND in_days) AS e_pageviews, \
         uniqExactIf(event_id, in_days) AS e_events, \
         uniqExactIf(user_id, daily_visitor = 1 AND in_days) AS e_daily, \
         groupUniqArrayIf(user_id, daily_visitor != 0) AS g_daily, \
         groupUniqArrayIf(cityHash64(user_id), daily_visitor = 0 AND in_days) AS g_ids, \
         countIf(in_days) AS n_in_days FROM (\
         SELECT timestamp, event_id, type, user_id, daily_visitor, dimension, value, \
         timestamp >= "
    ));
    s.append(&days.start)
        .push(" AND timestamp < ")
        .append(&days.end)
        .push(" AS in_days FROM (")
        .append(&tagged(&utc_floor(&days.start), &utc_ceil(&days.end)))
        .push(&format!(
            ")) GROUP BY local_day, utc_day, dimension, value) \
             GROUP BY utc_day, dimension, value) \
             ARRAY JOIN a_day AS local_day, a_pageviews AS e_pageviews, a_events AS e_events, \
             a_daily AS e_daily, a_ids AS g_ids, a_in_days AS n_in_days WHERE n_in_days > 0) \
             ARRAY JOIN arrayConcat([(toUInt8({KIND_PIECE}), toUInt64(0))], \
             arrayMap(h -> (toUInt8({KIND_ID}), h), g_ids)) AS k"
        ));
    s
}

/// The local days whose reads an hour `hour` (a `DateTime` column) changes: those within
/// six hours (and one) of it, and those its UTC day overlaps.
fn days_of_hour(tz: &str) -> String {
    format!(
        "arrayJoin([toDate(hour - {around}, {tz}), toDate(hour + {later}, {tz}), \
         toDate(toDateTime(intDiv(toUInt32(hour), 86400) * 86400), {tz}), \
         toDate(toDateTime(intDiv(toUInt32(hour), 86400) * 86400 + 86399), {tz})])",
        around = SESSION_LOOKAROUND_SECS,
        later = SESSION_LOOKAROUND_SECS + 3599,
    )
}

/// For the job: the days of sites of one zone whose latest generation is not valid, with
/// their last stamp: `site_id`, `day` (the local day, a string), `generation` (the
/// latest, 0 for none) and `touched` (epoch seconds), by site and oldest day first; and
/// the days whose generation is valid but whose visits [`VISIT_TABLE`] does not
/// hold (computed before it existed): `visits_only` 1, `valid` that generation. One
/// statement for all the sites of a zone: the job asks every minute.
pub fn stale_days(site_ids: &[u32], zone: &Zone) -> Sql {
    let tz = quote(zone.name());
    let sites = |s: &mut Sql| {
        s.push("site_id IN (");
        for (i, id) in site_ids.iter().enumerate() {
            if i > 0 {
                s.push(", ");
            }
            s.bind_uint(u64::from(*id));
        }
        if site_ids.is_empty() {
            s.push("NULL");
        }
        s.push(")");
    };
    let mut s = sql(
        "SELECT site_id, toString(local_day) AS day, g_any AS generation, t AS touched, \
         toUInt8(g > t) AS visits_only, g AS valid FROM (",
    );
    s.push(&format!(
        "SELECT site_id, {} AS local_day, max(toUInt32(touched_at)) AS t FROM {TOUCHED_TABLE} \
         WHERE ",
        days_of_hour(&tz)
    ));
    sites(&mut s);
    // A generation counts once both tables have its marker: the job writes the
    // breakdowns' first, and a day computed before the breakdowns existed is stale.
    // `generation` is the day table's latest all the same: what the job replaces.
    s.push(&format!(
        " GROUP BY site_id, local_day) AS stamps ANY LEFT JOIN (SELECT site_id, local_day, \
         max(generation) AS g_any, maxIf(generation, (site_id, local_day, generation) IN (\
         SELECT site_id, local_day, generation FROM {BREAKDOWN_TABLE} WHERE "
    ));
    sites(&mut s);
    s.push(" AND time_zone = ")
        .bind_str(zone.name())
        .push(&format!(
            " AND dimension = '' AND kind = {KIND_MARKER} AND value = "
        ))
        .bind_str(LAYOUT)
        .push(&format!(")) AS g FROM {TABLE} WHERE "));
    sites(&mut s);
    s.push(" AND time_zone = ")
        .bind_str(zone.name())
        .push(&format!(
            " AND kind = {KIND_MARKER} GROUP BY site_id, local_day) AS generations USING site_id, \
         local_day WHERE g <= t OR (site_id, local_day, g) NOT IN (SELECT site_id, local_day, \
         generation FROM {} WHERE ",
            VISIT_TABLE
        ));
    sites(&mut s);
    s.push(" AND time_zone = ")
        .bind_str(zone.name())
        .push(&format!(
            " AND kind = {KIND_MARKER}) ORDER BY site_id, local_day"
        ));
    s
}

/// What a query needs to know of the rollup of its site: the local days (of the site's
/// zone) that have events but no valid generation, and those whose generation is valid
/// but whose visits are not in [`VISIT_TABLE`] yet, read with [`state_statement`]
/// just before the query. A day in neither list either has a valid generation with its
/// visits or no event at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RollupState {
    /// Not read: queries read `events`.
    #[default]
    NotLoaded,
    /// The stale days and the days without visits, each in order.
    Stale {
        days: Vec<Date>,
        visits_missing: Vec<Date>,
    },
}

impl RollupState {
    pub fn stale(&self) -> Option<&[Date]> {
        match self {
            RollupState::NotLoaded => None,
            RollupState::Stale { days, .. } => Some(days),
        }
    }

    /// The days whose visits the rollup does not hold yet (none when not loaded).
    pub fn visits_missing(&self) -> &[Date] {
        match self {
            RollupState::NotLoaded => &[],
            RollupState::Stale { visits_missing, .. } => visits_missing,
        }
    }

    /// From [`state_statement`]'s answer.
    pub fn from_rows(statement: &Statement, body: &[u8]) -> Result<RollupState, StatsError> {
        let mut days = Vec::new();
        let mut visits_missing = Vec::new();
        for row in decode_rows(statement, body)? {
            let day = row.dimensions.first().and_then(|d| d.parse::<Date>().ok());
            let visits_only = row.dimensions.get(1).map(String::as_str);
            match (day, visits_only) {
                (Some(d), Some("0")) => days.push(d),
                (Some(d), Some("1")) => visits_missing.push(d),
                _ => {
                    return Err(StatsError::RowShape {
                        statement: statement.name,
                        reason: format!("{:?} is not a date and a flag", row.dimensions),
                    })
                }
            }
        }
        days.sort();
        visits_missing.sort();
        Ok(RollupState::Stale {
            days,
            visits_missing,
        })
    }
}

/// The statement that reads a site's [`RollupState`]: `d0`, a day, and `d1`, `1` when only its
/// visits are missing.
pub fn state_statement(site: &SiteContext) -> Result<Statement, StatsError> {
    let zone = Zone::new(&site.time_zone)?;
    let mut s = sql("SELECT day AS d0, toString(visits_only) AS d1 FROM (");
    s.append(&stale_days(&[site.site_id], &zone)).push(")");
    Ok(Statement::new(
        "stats_rollup_state",
        s,
        vec!["d0".into(), "d1".into()],
        vec![(
            "max_execution_time",
            crate::limits::MAX_EXECUTION_TIME_SECS.to_string(),
        )],
    ))
}

/// The rollup as a [`Source`]: the metrics of [`METRICS`] over whole local days, in
/// total or by day, week or month, with no filter. Any other spec (a comparison's range
/// that it does not cover) is [`EventsSource`]'s.
#[derive(Debug, Default, Clone, Copy)]
pub struct RollupSource;

impl Source for RollupSource {
    fn name(&self) -> &'static str {
        SOURCE_NAME
    }

    fn covers(&self, spec: &Spec) -> bool {
        let dimensions_ok = match spec.dimensions {
            [] => spec.filters.is_empty(),
            [Dimension::Time(TimeGrain::Bucket(b))] => {
                *b != Bucket::Hour && spec.filters.is_empty()
            }
            [Dimension::Visit(_)] => stored_breakdown(spec).is_some(),
            [Dimension::Event(_)] => {
                stored_breakdown(spec).is_some()
                    && spec.metrics.iter().all(|m| EVENT_METRICS.contains(m))
            }
            _ => false,
        };
        // A comparison's restriction to the main rows' values: of the one attribute.
        let restriction_ok = match spec.restriction {
            None => true,
            Some(r) => {
                matches!(spec.dimensions, [Dimension::Visit(_) | Dimension::Event(_)])
                    && of_one_dimension(r)
            }
        };
        // The persons are the day table's alone.
        let users_ok = !spec.metrics.contains(&Metric::Users)
            || matches!(spec.dimensions, [] | [Dimension::Time(_)]);
        dimensions_ok
            && users_ok
            && restriction_ok
            && spec.rollup_stale.is_some()
            && spec.range.whole_days
            && spec.metrics.iter().all(|m| METRICS.contains(m))
    }

    fn select(&self, spec: &Spec) -> Sql {
        if !self.covers(spec) {
            return EventsSource.select(spec);
        }
        select(spec)
    }

    /// A breakdown's values alone: a 12-month breakdown's metrics cost twice its values.
    fn count_rows(&self, spec: &Spec) -> Option<Sql> {
        self.covers(spec).then(|| count_values(spec)).flatten()
    }
}

/// The breakdown of the table that answers a spec by one attribute: its dimension with no
/// filter, or a typed one ([`TYPED_EVENT_DIMENSIONS`]) with the filter `event:type is`
/// that type (case-sensitive: the stored types are).
fn stored_breakdown(spec: &Spec) -> Option<Breakdown> {
    let [dimension] = spec.dimensions else {
        return None;
    };
    let of_type = match spec.filters {
        [] => None,
        [Filter::Leaf(Leaf {
            op: Op::Is,
            dimension: Dimension::Event(EventProperty::Type),
            values,
            case_sensitive: true,
        })] => {
            let (Dimension::Event(p), [v]) = (dimension, values.as_slice()) else {
                return None;
            };
            let (_, t) = TYPED_EVENT_DIMENSIONS
                .iter()
                .find(|(q, t)| q == p && t == v)?;
            Some(*t)
        }
        _ => return None,
    };
    let stored = match (dimension, of_type) {
        (Dimension::Visit(_), None) => true,
        (Dimension::Event(p), None) => EVENT_DIMENSIONS.contains(p),
        (Dimension::Event(_), Some(_)) => true,
        _ => false,
    };
    stored.then(|| Breakdown {
        dimension: dimension.clone(),
        of_type,
    })
}

/// Which of its range's rows a statement reads.
#[derive(Debug, Clone, Copy)]
enum RowsOf<'a> {
    /// The day table's pieces (kind 1).
    Pieces,
    /// The day table's recurring ids (kind 2), and with `persons` its persons (kinds 3
    /// and 4: `users`).
    Ids { persons: bool },
    /// The breakdown table's rows of these breakdowns (one or more), every kind but the
    /// markers.
    Values(&'a [Breakdown]),
}

/// The rows a spec reads, with `columns` of each (of `local_day`, [`ROW_COLUMNS`],
/// `dimension` and `value`, as the tables have them): those of its range's days before
/// the tail (the first stale day on) from the table, each day's latest generation with
/// its marker in the table read, and the tail's computed from `events`. `None` when the
/// range's days cannot be resolved.
fn range_rows(spec: &Spec, of: RowsOf, columns: &str, visits: VisitMeasures) -> Option<Sql> {
    let zone = spec.zone;
    let range = spec.range;
    let (first, last) = (date(range.first_date), date(range.last_date));
    let tail_day = spec
        .rollup_stale
        .unwrap_or_default()
        .iter()
        .copied()
        .find(|d| *d >= range.first_date && *d <= range.last_date);
    let (tail, tail_days) = match tail_day {
        Some(d) => (date(d), Some(Days::literal(zone, d, range.last_date).ok()?)),
        None => (date(next_day(range.last_date).ok()?), None),
    };
    let table = match of {
        RowsOf::Pieces | RowsOf::Ids { .. } => TABLE,
        RowsOf::Values(_) => BREAKDOWN_TABLE,
    };
    let of_site = |s: &mut Sql| {
        s.bind_uint(u64::from(spec.site_id))
            .push(" AND time_zone = ")
            .bind_str(zone.name());
    };
    let mut stored = sql(&format!("SELECT {columns} FROM {table} WHERE site_id = "));
    of_site(&mut stored);
    match of {
        // The day table's kind comes before its day in its key: each kind is read apart.
        RowsOf::Pieces => {
            stored.push(&format!(" AND kind = {KIND_PIECE}"));
        }
        RowsOf::Ids { persons: false } => {
            stored.push(&format!(" AND kind = {KIND_ID}"));
        }
        RowsOf::Ids { persons: true } => {
            stored.push(&format!(
                " AND kind IN ({KIND_ID}, {KIND_PERSON}, {KIND_ANONYMOUS})"
            ));
        }
        RowsOf::Values([b]) => {
            stored
                .push(" AND dimension = ")
                .bind_str(&b.name())
                .push(&format!(" AND kind != {KIND_MARKER}"));
        }
        RowsOf::Values(several) => {
            stored.push(" AND dimension IN (");
            for (i, b) in several.iter().enumerate() {
                if i > 0 {
                    stored.push(", ");
                }
                stored.bind_str(&b.name());
            }
            stored.push(&format!(") AND kind != {KIND_MARKER}"));
        }
    }
    stored
        .push(" AND local_day >= ")
        .append(&first)
        .push(" AND local_day < ")
        .append(&tail)
        // Each day's latest generation, as one number: a set of numbers is looked up
        // faster than one of pairs (the 12-month overview: 90 ms against 140 at 10M).
        .push(&format!(
            " AND {day_generation} IN (SELECT {latest} FROM {table} WHERE site_id = ",
            day_generation = day_generation("generation"),
            latest = day_generation("max(generation)"),
        ));
    of_site(&mut stored);
    if let RowsOf::Values(_) = of {
        // The markers are the breakdown table's rows without a dimension.
        stored
            .push(" AND dimension = '' AND value = ")
            .bind_str(LAYOUT);
    }
    stored
        .push(&format!(" AND kind = {KIND_MARKER} AND local_day >= "))
        .append(&first)
        .push(" AND local_day <= ")
        .append(&last)
        .push(" GROUP BY local_day)");
    if let Some(days) = &tail_days {
        stored
            .push(" UNION ALL ")
            .push(&format!("SELECT {columns} FROM ("));
        match of {
            RowsOf::Pieces => stored.append(&piece_rows(spec.site_id, zone, days, visits)),
            RowsOf::Ids { persons } => stored.append(&id_rows(spec.site_id, zone, days, persons)),
            RowsOf::Values(by_value) => {
                stored.append(&breakdown_rows(spec.site_id, zone, days, by_value, visits))
            }
        };
        stored.push(")");
    }
    Some(stored)
}

/// A local day and a generation of it as one number (`local_day` and `generation`, a
/// `UInt32`, side by side).
fn day_generation(generation: &str) -> String {
    format!("toUInt64(toUInt16(local_day)) * 4294967296 + {generation}")
}

/// Whether a comparison's restriction is to values of the spec's one dimension, which
/// [`restricted`] reads.
pub(crate) fn of_one_dimension(r: &Restriction) -> bool {
    r.dimensions == [0] && r.values.iter().all(|v| v.len() == 1)
}

/// ` WHERE <column> IN (…)`: a comparison's restriction to the main rows' values, of the
/// one dimension.
pub(crate) fn restricted(s: &mut Sql, spec: &Spec, column: &str) {
    if let Some(r) = spec.restriction {
        s.push(&format!(" WHERE {column} IN ("));
        for (i, v) in r.values.iter().flatten().enumerate() {
            if i > 0 {
                s.push(", ");
            }
            s.bind_str(v);
        }
        if r.values.is_empty() {
            s.push("NULL");
        }
        s.push(")");
    }
}

/// [`RollupSource::count_rows`]: the breakdown's values, read alone, from the pieces'
/// rows (a value with a recurring id in a piece has the piece's counts too).
fn count_values(spec: &Spec) -> Option<Sql> {
    let b = stored_breakdown(spec)?;
    let rows = range_rows(
        spec,
        RowsOf::Values(std::slice::from_ref(&b)),
        "kind, value",
        VisitMeasures::Zero,
    )?;
    let mut s = sql("SELECT count() AS total_rows FROM (SELECT value FROM (SELECT value FROM (");
    s.append(&rows)
        .push(&format!(") WHERE kind = {KIND_PIECE})"));
    restricted(&mut s, spec, "value");
    s.push(" GROUP BY value)");
    Some(s)
}

/// The metrics of a spec over its rows, grouped by its bucket (a value, a day, a week, a
/// month) or in total: each row's part of the bucket's figures is computed from the row
/// alone.
///
/// - **Visitors.** A UTC day's day visitors count once per bucket: when all the day's
///   pieces (of the value) are in the bucket, its whole count, taken from the piece that
///   holds the day's first instant; else each piece's own count. A UTC day has at most two
///   pieces (a zone's offset is under a day), so the other piece's local day is the day
///   after or before the piece's, and whether it is in the bucket follows from the row.
///   Then the recurring ids, as a set.
/// - **Visits.** Those started in the bucket's pieces, plus those carried into its first
///   piece (the least local day, then UTC day).
fn select(spec: &Spec) -> Sql {
    match stored_breakdown(spec) {
        Some(b) => select_by(spec, std::slice::from_ref(&b)),
        None => select_totals(spec),
    }
    .unwrap_or_else(|| EventsSource.select(spec))
}

fn wants(spec: &Spec, ms: &[Metric]) -> bool {
    spec.metrics.iter().any(|m| ms.contains(m))
}

/// Whether a spec counts visitors (`percentage` divides them).
fn counts_visitors(spec: &Spec) -> bool {
    wants(spec, &[Metric::Visitors, Metric::Percentage])
}

/// The columns of a piece's row that a spec's metrics read, after `local_day`, `kind` and
/// `utc_day` (only those: a year's breakdown has hundreds of thousands of rows), and
/// whether its tail computes the visit measures.
fn piece_columns(spec: &Spec) -> (Vec<&'static str>, VisitMeasures) {
    let mut picked: Vec<&str> = vec!["local_day", "kind", "utc_day"];
    if counts_visitors(spec) {
        picked.extend(["day_pieces", "daily_visitors", "daily_visitors_utc_day"]);
    }
    if wants(spec, &[Metric::Pageviews]) {
        picked.push("pageviews");
    }
    if wants(spec, &[Metric::Events]) {
        picked.push("events");
    }
    let visit_measures = [
        (
            &[
                Metric::Visits,
                Metric::BounceRate,
                Metric::VisitDuration,
                Metric::ViewsPerVisit,
            ][..],
            ["visits_started", "visits_carried"],
        ),
        (
            &[Metric::BounceRate][..],
            ["bounces_started", "bounces_carried"],
        ),
        (
            &[Metric::VisitDuration][..],
            ["duration_started", "duration_carried"],
        ),
        (
            &[Metric::ViewsPerVisit][..],
            ["views_started", "views_carried"],
        ),
    ];
    let mut visits = VisitMeasures::Zero;
    for (ms, cols) in visit_measures {
        if wants(spec, ms) {
            picked.extend(cols);
            visits = VisitMeasures::Computed;
        }
    }
    (picked, visits)
}

/// `, <is_start>, <other>`: whether a piece holds its UTC day's first instant, and the
/// local day of the UTC day's other piece (for [`piece_visitors`]).
fn other_piece(tz: &str) -> String {
    format!(
        ", local_day = toDate(toDateTime(toUInt32(toUInt16(utc_day)) * 86400), {tz}) AS is_start, \
         if(is_start, local_day + 1, local_day - 1) AS other"
    )
}

/// The day visitors of a bucket's pieces (see [`select`]); `same_bucket` is ` AND <whether
/// the other piece is in the row's bucket>`, or empty when a bucket is the whole range.
fn piece_visitors(spec: &Spec, same_bucket: &str) -> Sql {
    let mut s = sql("sumIf(if(day_pieces = 1, daily_visitors_utc_day, if(other >= ");
    s.append(&date(spec.range.first_date))
        .push(" AND other <= ")
        .append(&date(spec.range.last_date))
        .push(&format!(
            "{same_bucket}, if(is_start, daily_visitors_utc_day, 0), daily_visitors)), kind = {KIND_PIECE})"
        ));
    s
}

/// A visit measure of a bucket: the sum of its started visits', plus its first piece's
/// carried ones.
fn with_carried(measure: &str) -> String {
    format!(
        "(sumIf({measure}_started, kind = {KIND_PIECE}) + \
         argMinIf({measure}_carried, (local_day, utc_day), kind = {KIND_PIECE}))"
    )
}

/// A metric computed from the pieces alone; `None` for the visitors, their percentage and
/// `users`, which also count ids.
fn piece_metric(m: Metric) -> Option<Sql> {
    let visits = with_carried("visits");
    Some(match m {
        Metric::Visits => sql(&visits),
        Metric::Pageviews => sql(&format!("sumIf(pageviews, kind = {KIND_PIECE})")),
        Metric::Events => sql(&format!("sumIf(events, kind = {KIND_PIECE})")),
        Metric::BounceRate => sql(&format!(
            "100 * {} / greatest({visits}, 1)",
            with_carried("bounces")
        )),
        Metric::VisitDuration => sql(&format!(
            "{} / greatest({visits}, 1)",
            with_carried("duration")
        )),
        Metric::ViewsPerVisit => sql(&format!(
            "{} / greatest({visits}, 1)",
            with_carried("views")
        )),
        _ => return None,
    })
}

/// `100 * <visitors> / <the range's visitors>`, as `EventsSource` divides: the same query
/// without its dimensions, a scalar computed once. With a type's filter (`of_type`), the
/// visitors of that type: its row by `event:type`.
fn percentage(spec: &Spec, visitors: Sql, of_type: Option<&'static str>) -> Sql {
    let typed = of_type.map(|t| {
        (
            [Dimension::Event(EventProperty::Type)],
            Restriction {
                dimensions: vec![0],
                values: vec![vec![t.to_string()]],
            },
        )
    });
    let total = match &typed {
        None => Spec {
            metrics: &[Metric::Visitors],
            dimensions: &[],
            restriction: None,
            filters: &[],
            ..*spec
        },
        Some((dimensions, restriction)) => Spec {
            metrics: &[Metric::Visitors],
            dimensions,
            restriction: Some(restriction),
            filters: &[],
            ..*spec
        },
    };
    // (`sum`: one row even when no event has the type.)
    let mut s = sql("100 * ");
    s.append(&visitors)
        .push(" / greatest((SELECT sum(visitors) FROM (")
        .append(&select(&total))
        .push(")), 1)");
    s
}

/// [`select`] of the day table: the totals, or a series by day, week or month. The pieces
/// and the ids are aggregated apart and joined by bucket: a year holds two pieces a day
/// and hundreds of thousands of ids a day at 100 million events, and the pieces'
/// aggregates computed over every id's row cost more than the ids' set (the 12-month
/// overview at 100 million events: 110 against 330 ms, both tables ordered by kind
/// first). `None` when the range's days cannot be resolved.
fn select_totals(spec: &Spec) -> Option<Sql> {
    let first = date(spec.range.first_date);
    // The bucket, and whether a piece's other local day is in the same one.
    let (bucket, same_bucket) = match spec.dimensions {
        [Dimension::Time(TimeGrain::Bucket(b))] => match b {
            Bucket::Day => (Some(sql("toString(local_day)")), " AND 0"),
            Bucket::Week => {
                let mut s = sql("toString(greatest(toMonday(local_day), ");
                s.append(&first).push("))");
                (Some(s), " AND toMonday(other) = toMonday(local_day)")
            }
            Bucket::Month => (
                Some(sql("toString(toStartOfMonth(local_day))")),
                " AND toStartOfMonth(other) = toStartOfMonth(local_day)",
            ),
            // Not covered: a day's rows have no hours. (`events` answers.)
            Bucket::Hour => return None,
        },
        _ => (None, ""),
    };
    // Each side's bucket as `d0`: the totals are one bucket.
    let key = || {
        let mut s = bucket.clone().unwrap_or_else(|| sql("toUInt8(0)"));
        s.push(" AS d0");
        s
    };
    let group = if bucket.is_some() { " GROUP BY d0" } else { "" };
    let tz = quote(spec.zone.name());
    let visitors = counts_visitors(spec);
    let users = spec.metrics.contains(&Metric::Users);

    // The pieces: every metric but the ids' sets.
    let (picked, visits) = piece_columns(spec);
    let columns = picked.join(", ");
    let pieces = range_rows(spec, RowsOf::Pieces, &columns, visits)?;
    let mut p = sql("SELECT ");
    let mut p_metrics = vec![key()];
    if visitors {
        let mut s = piece_visitors(spec, same_bucket);
        s.push(" AS p_visitors");
        p_metrics.push(s);
    }
    for m in spec.metrics {
        if let Some(mut s) = piece_metric(*m) {
            s.push(&format!(" AS p_{}", m.name()));
            p_metrics.push(s);
        }
    }
    p.join(&p_metrics, ", ")
        .push(&format!(" FROM (SELECT {columns}"));
    if visitors {
        p.push(&other_piece(&tz));
    }
    p.push(" FROM (").append(&pieces).push("))").push(group);

    let mut out = sql("SELECT ");
    let mut metrics: Vec<Sql> = Vec::new();
    if bucket.is_some() {
        metrics.push(sql("d0"));
    }
    for m in spec.metrics {
        let name = m.name();
        metrics.push(match m {
            Metric::Visitors => sql("p_visitors + i_visitors AS visitors"),
            Metric::Users => sql("i_users AS users"),
            Metric::Percentage => {
                let mut s = percentage(spec, sql("(p_visitors + i_visitors)"), None);
                s.push(" AS percentage");
                s
            }
            _ => sql(&format!("p_{name} AS {name}")),
        });
    }
    out.join(&metrics, ", ")
        .push(" FROM (")
        .append(&p)
        .push(") AS pieces");
    if !visitors && !users {
        return Some(out);
    }

    // The ids: the recurring visitor ids, and the persons.
    let mut i = sql("SELECT ");
    let mut i_metrics = vec![key()];
    if visitors {
        i_metrics.push(sql(&format!(
            "uniqExactIf(id_hash, kind = {KIND_ID}) AS i_visitors"
        )));
    }
    if users {
        i_metrics.push(sql(&format!(
            "uniqExactIf(p_hash, kind = {KIND_PERSON} OR (kind = {KIND_ANONYMOUS} AND p_hash != 0)) AS i_users"
        )));
    }
    let ids = range_rows(
        spec,
        RowsOf::Ids { persons: users },
        "local_day, kind, id_hash",
        VisitMeasures::Zero,
    )?;
    i.join(&i_metrics, ", ").push(" FROM (");
    if users {
        // A piece's persons: its user ids, and the owners of its anonymous ids as the
        // claims have them now (`0`: no owner), all as `cityHash64` of the person.
        i.push(&format!(
            "SELECT local_day, kind, id_hash, if(kind = {KIND_ANONYMOUS}, o_hash, id_hash) AS p_hash FROM ("
        ))
        .append(&ids)
        .push(
            ") AS r ANY LEFT JOIN (SELECT cityHash64(anonymous_id) AS id_hash, \
             cityHash64(owner) AS o_hash FROM (",
        )
        .append(&identity::owners(spec.site_id))
        .push(")) AS own USING id_hash");
    } else {
        i.append(&ids);
    }
    i.push(")").push(group);
    out.push(" ANY LEFT JOIN (")
        .append(&i)
        .push(") AS ids USING d0");
    Some(out)
}

/// [`select`] over the breakdown table's rows of `by_value`: the spec's own breakdown, or
/// several of the spec's kind ([`shared_select`]), in one pass over the rows. `None`
/// when the range's days cannot be resolved.
fn select_by(spec: &Spec, by_value: &[Breakdown]) -> Option<Sql> {
    let shared = by_value.len() > 1;
    let visitors = counts_visitors(spec);
    let (mut picked, visits) = piece_columns(spec);
    if visitors {
        picked.push("id_hash");
    }
    if shared {
        picked.push("dimension");
    }
    picked.push("value");
    let columns = picked.join(", ");
    let union = range_rows(spec, RowsOf::Values(by_value), &columns, visits)?;

    let tz = quote(spec.zone.name());
    let mut rows = sql(&format!("SELECT {columns}"));
    if visitors {
        rows.push(&other_piece(&tz));
    }
    rows.push(" FROM (").append(&union).push(")");
    restricted(&mut rows, spec, "value");

    let visitors_of = || {
        let mut s = sql("(");
        s.append(&piece_visitors(spec, ""))
            .push(&format!(" + uniqExactIf(id_hash, kind = {KIND_ID}))"));
        s
    };
    let mut out = sql("SELECT ");
    // Shared: each breakdown's values apart (`d0` its name, `d1` the value).
    let mut metrics: Vec<Sql> = vec![sql(if shared {
        "dimension AS d0, value AS d1"
    } else {
        "value AS d0"
    })];
    for m in spec.metrics {
        let mut s = match m {
            Metric::Visitors => visitors_of(),
            Metric::Percentage => percentage(
                spec,
                visitors_of(),
                by_value.first().and_then(|b| b.of_type),
            ),
            other => piece_metric(*other)
                .unwrap_or_else(|| unreachable!("the rollup does not answer {}", other.name())),
        };
        s.push(&format!(" AS {}", m.name()));
        metrics.push(s);
    }
    out.join(&metrics, ", ")
        .push(" FROM (")
        .append(&rows)
        .push(")");
    out.push(if shared {
        " GROUP BY d0, d1"
    } else {
        " GROUP BY d0"
    });
    Some(out)
}

/// One relation for several breakdowns of a spec's kind that differ only in their
/// attribute (the dashboard's cards): `d0` names each row's breakdown ([`Breakdown::name`]),
/// `d1` is its value, then the metrics. They read their rows of the breakdown table at
/// once, and a live day's tail reads its events and joins them to their visits once for
/// all of them instead of once each. `None` unless the spec is covered and every
/// breakdown is of a visit attribute; which plans may share is [`crate::share_main`]'s
/// to say.
pub(crate) fn shared_select(spec: &Spec, by_value: &[Breakdown]) -> Option<Sql> {
    let plain = |b: &Breakdown| matches!(b.dimension, Dimension::Visit(_)) && b.of_type.is_none();
    (by_value.len() > 1 && by_value.iter().all(plain) && RollupSource.covers(spec))
        .then(|| select_by(spec, by_value))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{request, NOW};
    use crate::{FirstEvent, Planner, SiteContext};
    use serde_json::{json, Value};
    use std::sync::Arc;

    #[test]
    fn the_rollup_reads_the_events_table_with_final() {
        assert_eq!(
            EVENTS_FINAL,
            format!("{} FINAL", crate::events_source::TABLE)
        );
        let zone = Zone::new("Europe/Berlin").unwrap();
        let day = Date::constant(2025, 3, 30);
        let days = Days::literal(&zone, day, day).unwrap();
        let persons = rows(1, &zone, &days, true, VisitMeasures::Computed);
        let dims = breakdown_dimensions();
        let breakdowns = breakdown_rows(1, &zone, &days, &dims, VisitMeasures::Computed);
        for sql in [persons.text(), breakdowns.text()] {
            assert!(sql.contains("FROM events FINAL WHERE"), "{sql}");
            assert!(!sql.contains("FROM events WHERE"), "{sql}");
        }
    }

    fn plan_with_rollup(fields: Value, tz: &str) -> crate::QueryPlan {
        let site = SiteContext {
            site_id: 1,
            time_zone: tz.into(),
            first_event: FirstEvent::At(1_704_067_200),
            rollup: RollupState::Stale {
                days: Vec::new(),
                visits_missing: Vec::new(),
            },
        };
        Planner::default()
            .with_source(Arc::new(RollupSource))
            .plan(&request(fields), &site, NOW)
            .expect("a plan")
    }

    const OVERVIEW: [&str; 6] = [
        "visitors",
        "visits",
        "pageviews",
        "views_per_visit",
        "bounce_rate",
        "visit_duration",
    ];

    #[test]
    fn the_overview_and_day_week_month_series_and_visit_breakdowns_are_the_rollups() {
        for dims in [
            json!([]),
            json!(["time:day"]),
            json!(["time:week"]),
            json!(["time:month"]),
            json!(["visit:source"]),
            json!(["visit:entry_page"]),
            json!(["visit:city"]),
        ] {
            let p = plan_with_rollup(
                json!({"metrics": OVERVIEW, "dimensions": dims}),
                "Europe/Berlin",
            );
            assert_eq!(p.source(), "rollup", "{dims}");
        }
    }

    #[test]
    fn users_in_total_and_by_day_are_the_rollups_persons_with_their_owners_now() {
        for dims in [json!([]), json!(["time:day"]), json!(["time:month"])] {
            let p = plan_with_rollup(
                json!({"metrics": ["users", "visitors"], "dimensions": dims}),
                "Europe/Berlin",
            );
            assert_eq!(p.source(), "rollup", "{dims}");
            let sql = p.main().inline();
            assert!(
                sql.contains(
                    "uniqExactIf(p_hash, kind = 3 OR (kind = 4 AND p_hash != 0)) AS i_users"
                ),
                "{sql}"
            );
            assert!(
                sql.contains(&format!(
                    "cityHash64(owner) AS o_hash FROM ({})) AS own USING id_hash",
                    identity::owners(1).inline()
                )),
                "{sql}"
            );
            assert!(sql.contains("AND kind IN (2, 3, 4) AND local_day"), "{sql}");
        }
        // Without `users`, the persons' rows are not read.
        let p = plan_with_rollup(json!({"metrics": ["visitors"]}), "Europe/Berlin");
        let sql = p.main().inline();
        assert!(sql.contains("AND kind = 2 AND local_day"), "{sql}");
        assert!(!sql.contains("kind IN (2, 3, 4)"), "{sql}");
        assert!(!sql.contains("person"), "{sql}");
        // Nor the ids without a count of people.
        let p = plan_with_rollup(json!({"metrics": ["pageviews"]}), "Europe/Berlin");
        let sql = p.main().inline();
        assert!(sql.contains("AND kind = 1 AND local_day"), "{sql}");
        assert!(!sql.contains("kind = 2"), "{sql}");
    }

    #[test]
    fn filters_hours_other_dimensions_metrics_and_instants_are_the_events() {
        for fields in [
            json!({"filters": [["is", "visit:country", ["DE"]]]}),
            json!({"dimensions": ["time:hour"]}),
            json!({"dimensions": ["event:page"], "metrics": ["visits"]}),
            json!({"dimensions": ["event:props:plan"]}),
            json!({"dimensions": ["visit:source", "visit:country"]}),
            json!({"metrics": ["users"], "dimensions": ["visit:source"]}),
            json!({"metrics": ["users"], "dimensions": ["time:hour"]}),
            json!({"date_range": ["2024-03-01T10:00:00+01:00", "2024-03-02T10:00:00+01:00"]}),
        ] {
            let p = plan_with_rollup(fields.clone(), "Europe/Berlin");
            assert_eq!(p.source(), "events", "{fields}");
        }
    }

    #[test]
    fn without_the_state_loaded_every_query_reads_the_events() {
        let site = SiteContext::utc(1);
        let planner = Planner::default().with_source(Arc::new(RollupSource));
        let req = request(json!({"metrics": OVERVIEW}));
        assert!(planner.needs_rollup_state(&req, &site, NOW));
        assert_eq!(planner.plan(&req, &site, NOW).unwrap().source(), "events");
        let filtered = request(json!({"filters": [["is", "visit:country", ["DE"]]]}));
        assert!(!planner.needs_rollup_state(&filtered, &site, NOW));
    }

    #[test]
    fn the_tail_starts_at_the_first_stale_day_of_the_range() {
        let site = SiteContext {
            rollup: RollupState::Stale {
                days: vec![
                    "2024-02-10".parse().unwrap(),
                    "2024-03-20".parse().unwrap(),
                    "2024-03-21".parse().unwrap(),
                ],
                visits_missing: Vec::new(),
            },
            ..SiteContext::utc(1)
        };
        let planner = Planner::default().with_source(Arc::new(RollupSource));
        let p = planner
            .plan(&request(json!({"metrics": OVERVIEW})), &site, NOW)
            .unwrap();
        let sql = p.main().inline();
        assert!(sql.contains("local_day < toDate('2024-03-20')"), "{sql}");
        // 2024-03-20T00:00Z to 2024-04-01T00:00Z.
        assert!(
            sql.contains(
                "timestamp >= toDateTime(1710892800) AND timestamp < toDateTime(1711929600)"
            ),
            "{sql}"
        );
        let fresh = SiteContext {
            rollup: RollupState::Stale {
                days: vec!["2024-04-02".parse().unwrap()],
                visits_missing: Vec::new(),
            },
            ..SiteContext::utc(1)
        };
        let p = planner
            .plan(&request(json!({"metrics": OVERVIEW})), &fresh, NOW)
            .unwrap();
        let sql = p.main().inline();
        assert!(sql.contains("local_day < toDate('2024-04-01')"), "{sql}");
        assert!(!sql.contains("FROM events"), "no tail: {sql}");
    }

    #[test]
    fn the_visit_measures_are_the_row_columns_between_the_events_and_the_day_visitors() {
        assert_eq!(
            visit_measure_names(),
            [
                "visits_started",
                "visits_carried",
                "bounces_started",
                "bounces_carried",
                "duration_started",
                "duration_carried",
                "views_started",
                "views_carried"
            ]
        );
    }

    /// A tail computes its visits' measures only for a query that asks one: the totals,
    /// a visit breakdown and a percentage's total of visitors alone leave them zero.
    #[test]
    fn a_tail_groups_its_visits_only_for_the_visit_measures() {
        let site = SiteContext {
            rollup: RollupState::Stale {
                days: vec!["2024-03-20".parse().unwrap()],
                visits_missing: Vec::new(),
            },
            ..SiteContext::utc(1)
        };
        let planner = Planner::default().with_source(Arc::new(RollupSource));
        let tail = |fields: Value| {
            let p = planner.plan(&request(fields), &site, NOW).unwrap();
            let sql = p.main().inline();
            assert!(sql.contains("FROM events FINAL"), "a tail: {sql}");
            sql
        };
        for fields in [
            json!({"metrics": ["visitors", "pageviews"]}),
            json!({"metrics": ["visitors", "percentage"], "dimensions": ["visit:country"]}),
            json!({"metrics": ["visitors", "pageviews", "percentage"], "dimensions": ["event:page"],
                   "filters": [["is", "event:type", ["pageview"]]]}),
            json!({"metrics": ["visitors"], "dimensions": ["time:day"]}),
        ] {
            let sql = tail(fields.clone());
            assert!(!sql.contains("piece_visits"), "{fields}: {sql}");
            assert!(
                sql.contains("toUInt64(0) AS visits_started"),
                "{fields}: {sql}"
            );
        }
        for fields in [
            json!({"metrics": OVERVIEW}),
            json!({"metrics": ["visitors", "bounce_rate"], "dimensions": ["visit:source"]}),
            json!({"metrics": ["visit_duration"], "dimensions": ["time:week"]}),
        ] {
            let sql = tail(fields.clone());
            assert!(sql.contains("AS piece_visits USING"), "{fields}: {sql}");
        }
    }

    #[test]
    fn event_breakdowns_of_the_event_metrics_are_the_rollups() {
        for dim in ["event:page", "event:name", "event:hostname", "event:type"] {
            let p = plan_with_rollup(
                json!({"metrics": ["visitors", "pageviews", "events", "percentage"], "dimensions": [dim]}),
                "Europe/Berlin",
            );
            assert_eq!(p.source(), "rollup", "{dim}");
        }
    }

    #[test]
    fn pageview_pages_and_custom_event_names_are_the_typed_rollups() {
        let site = SiteContext {
            rollup: RollupState::Stale {
                days: vec!["2024-03-20".parse().unwrap()],
                visits_missing: Vec::new(),
            },
            ..SiteContext::utc(1)
        };
        let planner = Planner::default().with_source(Arc::new(RollupSource));
        for (dim, t) in [("event:page", "pageview"), ("event:name", "custom_event")] {
            let req = request(
                json!({"metrics": ["visitors", "pageviews", "events", "percentage"],
                "dimensions": [dim], "filters": [["is", "event:type", [t]]]}),
            );
            let p = planner.plan(&req, &site, NOW).unwrap();
            assert_eq!(p.source(), "rollup", "{dim}");
            let sql = p.main().inline();
            let name = format!("{dim}|event:type={t}");
            assert!(sql.contains(&format!("dimension = '{name}'")), "{sql}");
            // The tail keeps the type's events only.
            assert!(
                sql.contains(&format!("if(type = '{t}', '{name}', '')")),
                "{sql}"
            );
            assert!(sql.contains("WHERE dimension != ''"), "{sql}");
            // The percentage's total: the visitors of the type, its row by event:type.
            assert!(sql.contains("dimension = 'event:type'"), "{sql}");
            assert!(sql.contains(&format!("WHERE value IN ('{t}')")), "{sql}");
        }
    }

    #[test]
    fn other_types_other_operators_and_more_filters_are_the_events() {
        for filters in [
            json!([["is", "event:type", ["outbound"]]]),
            json!([["is", "event:type", ["custom_event"]]]),
            json!([["is", "event:type", ["pageview", "custom_event"]]]),
            json!([["is", "event:type", ["pageview"], {"case_sensitive": false}]]),
            json!([["is_not", "event:type", ["pageview"]]]),
            json!([
                ["is", "event:type", ["pageview"]],
                ["is", "visit:country", ["DE"]]
            ]),
        ] {
            let p = plan_with_rollup(
                json!({"metrics": ["visitors"], "dimensions": ["event:page"], "filters": filters}),
                "UTC",
            );
            assert_eq!(p.source(), "events", "{filters}");
        }
        // The overview of a type is not stored either.
        let p = plan_with_rollup(
            json!({"metrics": ["visitors"], "filters": [["is", "event:type", ["pageview"]]]}),
            "UTC",
        );
        assert_eq!(p.source(), "events");
    }

    #[test]
    fn a_breakdowns_total_rows_counts_its_values_alone() {
        let site = SiteContext {
            rollup: RollupState::Stale {
                days: vec!["2024-03-20".parse().unwrap()],
                visits_missing: Vec::new(),
            },
            ..SiteContext::utc(1)
        };
        let planner = Planner::default().with_source(Arc::new(RollupSource));
        let req = request(
            json!({"metrics": ["visitors", "percentage"], "dimensions": ["visit:country"],
            "include": {"total_rows": true}}),
        );
        let p = planner.plan(&req, &site, NOW).unwrap();
        let count = p.total_rows().expect("total_rows").inline();
        assert!(
            count.starts_with(&format!(
                "SELECT count() AS total_rows FROM (SELECT value FROM (SELECT value FROM (\
                 SELECT kind, value FROM {BREAKDOWN_TABLE} \
                 WHERE site_id = 1 AND time_zone = 'UTC' AND dimension = 'visit:country' AND kind != 0"
            )),
            "{count}"
        );
        // The tail's values too, of the pieces' rows; no metric is computed.
        assert!(
            count.contains("UNION ALL SELECT kind, value FROM ("),
            "{count}"
        );
        assert!(
            count.contains(") WHERE kind = 1) GROUP BY value)"),
            "{count}"
        );
        assert!(count.ends_with(" GROUP BY value)"), "{count}");
        assert!(!count.contains("AS visitors"), "{count}");
        assert!(!count.contains("AS percentage"), "{count}");
        // Totals, a series, and the events count the relation's rows.
        for q in [
            json!({"metrics": ["visitors"], "dimensions": ["time:day"], "include": {"total_rows": true}}),
            json!({"metrics": ["visits"], "dimensions": ["event:page"], "include": {"total_rows": true}}),
        ] {
            let p = planner.plan(&request(q), &site, NOW).unwrap();
            let count = p.total_rows().unwrap().inline();
            assert!(
                count.starts_with("SELECT count() AS total_rows FROM (SELECT "),
                "{count}"
            );
            assert!(!count.contains("SELECT value FROM"), "{count}");
        }
    }

    #[test]
    fn a_visit_breakdown_reads_its_attributes_rows_and_computes_only_it_in_the_tail() {
        let site = SiteContext {
            rollup: RollupState::Stale {
                days: vec!["2024-03-20".parse().unwrap()],
                visits_missing: Vec::new(),
            },
            ..SiteContext::utc(1)
        };
        let planner = Planner::default().with_source(Arc::new(RollupSource));
        let p = planner
            .plan(
                &request(json!({"metrics": OVERVIEW, "dimensions": ["visit:country"]})),
                &site,
                NOW,
            )
            .unwrap();
        let sql = p.main().inline();
        assert!(
            sql.contains(&format!("FROM {BREAKDOWN_TABLE} WHERE site_id = 1 AND time_zone = 'UTC' AND dimension = 'visit:country'")),
            "{sql}"
        );
        assert!(
            sql.contains("['visit:country']"),
            "the tail's one attribute: {sql}"
        );
        assert!(!sql.contains("visit:source"), "{sql}");
    }

    #[test]
    fn the_cards_by_visit_attributes_share_one_statement_and_the_others_their_own() {
        let card = |d: &str, more: Value| {
            let mut fields = json!({"dimensions": [d], "pagination": {"limit": 10}});
            for (k, v) in more.as_object().unwrap() {
                fields[k] = v.clone();
            }
            plan_with_rollup(fields, "Europe/Berlin")
        };
        let plans = [
            card("visit:source", json!({})),
            card(
                "event:page",
                json!({"filters": [["is", "event:type", ["pageview"]]]}),
            ),
            card("visit:country", json!({})),
            card("visit:country", json!({})),
            card("visit:browser", json!({})),
            card(
                "visit:os",
                json!({"filters": [["is", "visit:country", ["DE"]]]}),
            ),
            card("visit:device", json!({"metrics": ["visitors", "visits"]})),
            card(
                "visit:screen",
                json!({"pagination": {"limit": 10, "offset": 10}}),
            ),
        ];
        let refs: Vec<&crate::QueryPlan> = plans.iter().collect();
        let shared = crate::share_main(&refs).expect("the visit cards share");
        // The event card, the second ask of an attribute, a filter, other metrics and a
        // later page are answered on their own.
        assert_eq!(shared.members(), [0, 2, 4]);
        let sql = shared.statement().inline();
        assert!(
            sql.contains(
                "dimension IN ('visit:source', 'visit:country', 'visit:browser') AND kind != 0"
            ),
            "{sql}"
        );
        assert!(
            sql.ends_with(") ORDER BY d0 ASC, visitors DESC, d1 ASC LIMIT 10 BY d0"),
            "{sql}"
        );
        assert_eq!(shared.statement().columns, ["d0", "d1", "visitors"]);
        let row = |d: &str, v: &str| crate::Row {
            dimensions: vec![d.into(), v.into()],
            metrics: vec![Some(1.0)],
        };
        let split = shared.split(vec![
            row("visit:browser", "Chrome"),
            row("visit:country", "DE"),
            row("visit:source", "Google"),
            row("visit:source", "Bing"),
        ]);
        let values: Vec<Vec<&str>> = split
            .iter()
            .map(|rows| rows.iter().map(|r| r.dimensions[0].as_str()).collect())
            .collect();
        assert_eq!(values, [vec!["Google", "Bing"], vec!["DE"], vec!["Chrome"]]);
        // One plan alone shares nothing.
        assert!(crate::share_main(&refs[..1]).is_none());
        // A first card that asks `percentage` answers on its own, and the others share.
        let percentage = card("visit:city", json!({"metrics": ["visitors", "percentage"]}));
        let refs: Vec<&crate::QueryPlan> = std::iter::once(&percentage).chain(&plans).collect();
        let shared = crate::share_main(&refs).expect("the other cards share");
        assert_eq!(shared.members(), [1, 3, 5]);
    }

    #[test]
    fn a_breakdowns_comparison_reads_the_main_rows_values_of_the_rollup() {
        let p = plan_with_rollup(
            json!({"metrics": ["visitors"], "dimensions": ["visit:country"],
                   "include": {"comparisons": {"mode": "previous_period"}}}),
            "UTC",
        );
        assert_eq!(p.source(), "rollup");
        let rows = [crate::rows::Row {
            dimensions: vec!["DE".into()],
            metrics: vec![Some(3.0)],
        }];
        let c = p.comparison(&rows).expect("a comparison").inline();
        assert!(c.contains(BREAKDOWN_TABLE), "{c}");
        assert!(c.contains("WHERE value IN ('DE')"), "{c}");
    }

    #[test]
    fn a_comparison_the_rollup_cannot_cover_reads_the_events() {
        let p = plan_with_rollup(
            json!({"metrics": ["visitors"], "include": {"comparisons": {"mode": "previous_period"}}}),
            "UTC",
        );
        let c = p.comparison(&[]).expect("a comparison");
        assert!(c.inline().contains(TABLE), "{}", c.inline());
    }

    /// `RIVULET_ROLLUP_SQL=dir cargo test -p rivulet-stats rollup::tests::write_sql`
    /// writes the statements of a few requests for a site and zone, inline, to try them
    /// by hand (`RIVULET_ROLLUP_SITE`, `RIVULET_ROLLUP_TZ`, `RIVULET_ROLLUP_RANGE`); and
    /// those of one request of `RIVULET_ROLLUP_REQUEST` (JSON, without its site and
    /// range) as `request.{main,total_rows,comparison}.sql`.
    #[test]
    fn write_sql() {
        let Ok(dir) = std::env::var("RIVULET_ROLLUP_SQL") else {
            return;
        };
        let site_id: u32 = std::env::var("RIVULET_ROLLUP_SITE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let tz = std::env::var("RIVULET_ROLLUP_TZ").unwrap_or_else(|_| "UTC".into());
        let range: Value = std::env::var("RIVULET_ROLLUP_RANGE")
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(json!(["2024-03-01", "2024-03-31"]));
        let stale: Vec<Date> = std::env::var("RIVULET_ROLLUP_STALE")
            .unwrap_or_default()
            .split(',')
            .filter_map(|d| d.parse().ok())
            .collect();
        let site = SiteContext {
            site_id,
            time_zone: tz,
            first_event: FirstEvent::At(1_704_067_200),
            rollup: RollupState::Stale {
                days: stale,
                visits_missing: Vec::new(),
            },
        };
        for (name, dims) in [
            ("overview", json!([])),
            ("days", json!(["time:day"])),
            ("weeks", json!(["time:week"])),
            ("months", json!(["time:month"])),
        ] {
            for (source, planner) in [
                (
                    "rollup",
                    Planner::default().with_source(Arc::new(RollupSource)),
                ),
                ("events", Planner::default()),
            ] {
                let req = request(
                    json!({"site_id": site_id, "metrics": OVERVIEW, "dimensions": dims, "date_range": range}),
                );
                let p = planner.plan(&req, &site, NOW).expect("a plan");
                std::fs::write(format!("{dir}/{name}.{source}.sql"), p.main().inline())
                    .expect("written");
            }
        }
        if let Some(Value::Object(fields)) = std::env::var("RIVULET_ROLLUP_REQUEST")
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
        {
            let mut req = json!({"site_id": site_id, "date_range": range});
            req.as_object_mut().expect("an object").extend(fields);
            let p = Planner::default()
                .with_source(Arc::new(RollupSource))
                .plan(&request(req), &site, NOW)
                .expect("a plan");
            let statements = [
                ("main", Some(p.main().clone())),
                ("total_rows", p.total_rows().cloned()),
                ("comparison", p.comparison(&[])),
            ];
            for (name, st) in statements {
                if let Some(st) = st {
                    std::fs::write(format!("{dir}/request.{name}.sql"), st.inline())
                        .expect("written");
                }
            }
        }
        let zone = Zone::new(&site.time_zone).expect("a zone");
        std::fs::write(
            format!("{dir}/stale.sql"),
            stale_days(&[site_id], &zone).inline(),
        )
        .expect("written");
        let day = |v: &Value| -> Date { v.as_str().and_then(|s| s.parse().ok()).expect("a date") };
        let days = Days::literal(&zone, day(&range[0]), day(&range[1])).expect("days");
        std::fs::write(
            format!("{dir}/rows.sql"),
            rows(site_id, &zone, &days, true, VisitMeasures::Computed).inline(),
        )
        .expect("written");
        std::fs::write(
            format!("{dir}/breakdown_rows.sql"),
            breakdown_rows(
                site_id,
                &zone,
                &days,
                &breakdown_dimensions(),
                VisitMeasures::Computed,
            )
            .inline(),
        )
        .expect("written");
        std::fs::write(
            format!("{dir}/breakdown_rows.zero.sql"),
            breakdown_rows(
                site_id,
                &zone,
                &days,
                &breakdown_dimensions(),
                VisitMeasures::Zero,
            )
            .inline(),
        )
        .expect("written");
    }
}
