//! The exact source: every query answered from the `events` table itself, in one SQL
//! statement that runs on ClickHouse 18.16 and on current servers (no CTE, no
//! `JSONExtract`, one JOIN per SELECT, time zones as function arguments). It is the
//! reference a faster source (rollups, a sessions table) is measured and checked against.
//!
//! The shape of the statement depends on what the query needs:
//!
//! - **flat**: event metrics (`visitors`, `visits`, `pageviews`, `events`, `percentage`)
//!   by event dimensions and time: one `GROUP BY` over the range's events;
//! - **users**: the same over events joined to their person ([`crate::identity`]);
//! - **visits**: with a `visit:` dimension or filter, the range's events joined to their
//!   visit's attributes (`ANY LEFT JOIN` on `session_id` with an aggregate of the visits'
//!   events, read [`SESSION_LOOKAROUND_SECS`] beyond the range on both sides);
//! - **per visit**: with `bounce_rate`, `visit_duration` or `views_per_visit`, the joined
//!   events grouped by (dimensions, visit) first, then by the dimensions, so that each
//!   visit counts once per row with its own measures;
//! - **by visit**: the per-visit case whose dimensions are all the visit's (the overview,
//!   sources, entry pages, countries, devices), and any breakdown by the visit's
//!   dimensions alone whose metrics are `visitors`, `visits`, `pageviews`, `events` or
//!   `percentage`: no join at all. One `GROUP BY session_id`
//!   over the range and its lookaround gives each visit's attributes and measures from
//!   all its events and, with `-If` on the range and the event filters, what it counts
//!   in the range; the visit filters are its `HAVING`. It reads the events once instead
//!   of twice and holds no hash table of visits for a join: the 12-month overview of a
//!   10M-event site answers where the joined shape ran out of memory.
//!
//! Web vitals' percentiles (`lcp_p75`, …) are event metrics, in every shape: the distinct
//! `(event_id, value)` pairs of the `performance` events with a value, sorted, and the
//! one at `quantileExact`'s index taken (see [`p75`]).
//!
//! Bots are left out (`is_bot = 0`) everywhere. Duplicates of an event (same `event_id`)
//! count once: events by `uniqExact(event_id)` (within a visit by `arrayUniq` of the
//! visit's ids: a set per visit is a hash table per visit, hundreds of bytes each even
//! when empty), people by `uniqExact`, and a visit's first/last values by
//! `argMin`/`argMax` over `(timestamp, event_id)`, which duplicates do not change.

use crate::date_range::auto_bucket;
use crate::dimensions::{
    Bucket, Dimension, EventProperty, TimeGrain, VisitProperty, SCREEN_CLASSES, SCREEN_WIDEST,
};
use crate::filters::{self, Filter, Leaf, Op};
use crate::identity;
use crate::limits::SESSION_LOOKAROUND_SECS;
use crate::metrics::{Metric, Vital};
use crate::source::{Restriction, Source, Spec};
use crate::sql::{quote, sql, Sql};

/// The event types that make a visit engaged (not a bounce) besides a second pageview:
/// things a person did. `performance` (web vitals) and `error` events are sent by the
/// page on its own and do not count.
pub const ENGAGEMENT_TYPES: &[&str] = &[
    "custom_event",
    "outbound",
    "button_click",
    "copy",
    "form_submit",
    "input_change",
];

/// The table read.
pub const TABLE: &str = "events";

#[derive(Debug, Default, Clone, Copy)]
pub struct EventsSource;

impl Source for EventsSource {
    fn name(&self) -> &'static str {
        "events"
    }

    /// Every query.
    fn covers(&self, _spec: &Spec) -> bool {
        true
    }

    fn select(&self, spec: &Spec) -> Sql {
        Builder::new(spec).select()
    }
}

struct Builder<'a> {
    spec: &'a Spec<'a>,
    /// The time zone as a quoted literal.
    tz: String,
    /// Events are joined to their visit's attributes.
    visits: bool,
    /// Events carry their person (`users`).
    person: bool,
    /// Rows are made per (dimensions, visit) first.
    per_visit: bool,
    /// Per visit, and every dimension is the visit's: one `GROUP BY session_id`.
    by_visit: bool,
    /// Event rows whose visit filters only pick visits: the events of the visits kept
    /// (`session_id GLOBAL IN`), no join.
    kept_visits: bool,
}

impl<'a> Builder<'a> {
    fn new(spec: &'a Spec<'a>) -> Self {
        // A breakdown by visit attributes alone whose metrics a visit's row holds (its
        // ids, its events' counts) reads one row per visit, as the visit measures do: the
        // same figures without joining each of the range's events to its visit.
        let visit_rows_suffice = !spec.dimensions.is_empty()
            && spec.dimensions.iter().all(Dimension::is_visit)
            && spec.metrics.iter().all(|m| {
                matches!(
                    m,
                    Metric::Visitors
                        | Metric::Visits
                        | Metric::Pageviews
                        | Metric::Events
                        | Metric::Percentage
                )
            });
        let per_visit = visit_rows_suffice || spec.metrics.iter().any(|m| m.is_visit_measure());
        let visits = per_visit
            || spec.dimensions.iter().any(Dimension::is_visit)
            || spec
                .filters
                .iter()
                .any(|f| !f.all_leaves(&|l| !l.dimension.is_visit()));
        let person = spec.metrics.contains(&Metric::Users);
        // Each top-level filter must be on the event alone (it picks the events a visit
        // counts) or on the visit alone (it picks visits): a filter mixing the two needs
        // each event next to its visit's attributes, which only the join has.
        let separable = spec.filters.iter().all(|f| {
            f.all_leaves(&|l| !l.dimension.is_visit()) || f.all_leaves(&|l| l.dimension.is_visit())
        });
        let by_visit = per_visit
            && spec.dimensions.iter().all(Dimension::is_visit)
            && separable
            && !person
            && !spec.metrics.iter().any(|m| m.vital().is_some());
        // Visit filters on event rows with no visit dimension: which visits pass is all
        // the join adds, and a set of their ids says it for less (`scripts/bench query`,
        // `pages_30d_filtered`).
        let kept_visits =
            visits && !per_visit && separable && !spec.dimensions.iter().any(Dimension::is_visit);
        Builder {
            spec,
            tz: quote(spec.zone.name()),
            visits,
            person,
            per_visit,
            by_visit,
            kept_visits,
        }
    }

    fn select(&self) -> Sql {
        let spec = self.spec;
        let dims: Vec<Sql> = (0..spec.dimensions.len())
            .map(|i| {
                let mut s = self.dimension(&spec.dimensions[i]);
                s.push(&format!(" AS d{i}"));
                s
            })
            .collect();
        let group_by: Vec<String> = (0..spec.dimensions.len())
            .map(|i| format!("d{i}"))
            .collect();
        let mut out = Sql::new();
        if self.by_visit {
            out.push("SELECT ");
            let mut columns: Vec<Sql> = spec
                .dimensions
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let mut s = self.dimension(d);
                    s.push(&format!(" AS d{i}"));
                    s
                })
                .collect();
            columns.extend(spec.metrics.iter().map(|m| self.metric(*m)));
            out.join(&columns, ", ");
            out.push(" FROM (")
                .append(&self.visits_in_range())
                .push(")");
        } else if self.per_visit {
            // Inner: one row per (dimensions, visit); outer: per dimensions.
            let mut inner = sql("SELECT ");
            for d in &dims {
                inner.append(d).push(", ");
            }
            inner.push("session_id");
            for (name, agg) in self.per_visit_columns() {
                inner.push(&format!(", {agg} AS {name}"));
            }
            inner.push(" FROM ");
            inner.append(&self.joined());
            let mut keys = group_by.clone();
            keys.push("session_id".into());
            inner.push(&format!(" GROUP BY {}", keys.join(", ")));

            out.push("SELECT ");
            let mut columns: Vec<Sql> = group_by.iter().map(|g| sql(g)).collect();
            columns.extend(spec.metrics.iter().map(|m| self.metric(*m)));
            out.join(&columns, ", ");
            out.push(" FROM (").append(&inner).push(")");
        } else {
            out.push("SELECT ");
            let mut columns = dims;
            columns.extend(spec.metrics.iter().map(|m| self.metric(*m)));
            out.join(&columns, ", ");
            out.push(" FROM ");
            if self.kept_visits {
                out.append(&self.in_kept_visits());
            } else if self.visits {
                out.append(&self.joined());
            } else if self.person {
                out.push("(")
                    .append(&self.events(&self.event_read(true, &Sql::new())))
                    .push(")");
            } else {
                // The plain case: no subquery at all.
                out.push(TABLE).append(&self.event_read(true, &Sql::new()));
            }
        }
        if !group_by.is_empty() {
            out.push(&format!(" GROUP BY {}", group_by.join(", ")));
        }
        out
    }

    /// One metric's aggregate, `AS` its name. Ratios are not rounded here: `round` breaks
    /// ties differently by version (18.16: 1.625 → 1.63, 26.9: 1.62); the response
    /// rounds them, one way.
    fn metric(&self, m: Metric) -> Sql {
        let visitors = if self.per_visit {
            "uniqExactArray(g_users)"
        } else {
            "uniqExact(user_id)"
        };
        let expr = match (m, self.per_visit) {
            (Metric::Percentage, _) => {
                let mut s = sql(&format!("100 * {visitors} / greatest("));
                s.append(&self.total_visitors()).push(", 1)");
                s.push(" AS percentage");
                return s;
            }
            (Metric::Visitors, _) => visitors.to_string(),
            (Metric::Visits, false) => "uniqExact(session_id)".into(),
            (Metric::Pageviews, false) => "uniqExactIf(event_id, type = 'pageview')".into(),
            (Metric::Events, false) => "uniqExact(event_id)".into(),
            (Metric::Users, false) => "uniqExactIf(person, person != '')".into(),
            (Metric::Visits, true) => "count()".into(),
            (Metric::Pageviews, true) => "sum(g_pageviews)".into(),
            (Metric::Events, true) => "sum(g_events)".into(),
            (Metric::Users, true) => "uniqExactArray(g_persons)".into(),
            (Metric::BounceRate, _) => "100 * sum(g_bounce) / greatest(count(), 1)".into(),
            (Metric::VisitDuration, _) => "sum(g_duration) / greatest(count(), 1)".into(),
            (Metric::ViewsPerVisit, _) => "sum(g_views) / greatest(count(), 1)".into(),
            (Metric::P75(v), false) => p75(&measurements(v)),
            // Each event is in one (dimensions, visit) group: the groups' pairs together
            // are the row's, with no pair twice.
            (Metric::P75(v), true) => p75(&format!("groupArrayArray({})", vital_group_column(v))),
        };
        sql(&format!("{expr} AS {}", m.name()))
    }

    /// The inner aggregates of the per-visit shape, by what the metrics need.
    fn per_visit_columns(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let has = |m: Metric| self.spec.metrics.contains(&m);
        if has(Metric::Visitors) || has(Metric::Percentage) {
            out.push(("g_users", "groupArray(user_id)".into()));
        }
        if has(Metric::Users) {
            out.push(("g_persons", "groupArrayIf(person, person != '')".into()));
        }
        if has(Metric::Pageviews) {
            out.push((
                "g_pageviews",
                "arrayUniq(groupArrayIf(event_id, type = 'pageview'))".into(),
            ));
        }
        if has(Metric::Events) {
            out.push(("g_events", "arrayUniq(groupArray(event_id))".into()));
        }
        if has(Metric::BounceRate) {
            out.push(("g_bounce", "any(s_bounce)".into()));
        }
        if has(Metric::VisitDuration) {
            out.push(("g_duration", "any(s_duration)".into()));
        }
        if has(Metric::ViewsPerVisit) {
            out.push(("g_views", "any(s_pageviews)".into()));
        }
        for m in self.spec.metrics {
            if let Some(v) = m.vital() {
                out.push((vital_group_column(v), measurements(v)));
            }
        }
        out
    }

    /// All visitors of the range and filters (no dimensions, no restriction), as a
    /// scalar subquery: the denominator of `percentage`.
    fn total_visitors(&self) -> Sql {
        let total = Spec {
            metrics: &[Metric::Visitors],
            dimensions: &[],
            restriction: None,
            ..*self.spec
        };
        let mut s = sql("(SELECT visitors FROM (");
        s.append(&Builder::new(&total).select()).push("))");
        s
    }

    /// A dimension's expression where the rows are events (joined to their visit when
    /// [`Self::visits`]).
    fn dimension(&self, d: &Dimension) -> Sql {
        match d {
            Dimension::Visit(p) => sql(visit_column(*p)),
            _ => self.event_expression(d),
        }
    }

    /// An event dimension (or time) over the columns of `events`.
    fn event_expression(&self, d: &Dimension) -> Sql {
        let tz = &self.tz;
        match d {
            Dimension::Event(p) => sql(event_property(*p)),
            Dimension::Prop(name) => {
                // A string property unescaped; a number, boolean or null as its JSON text;
                // an absent one empty.
                let mut s = sql("if(substring(visitParamExtractRaw(properties, ");
                s.bind_str(name)
                    .push("), 1, 1) = '\"', visitParamExtractString(properties, ")
                    .bind_str(name)
                    .push("), visitParamExtractRaw(properties, ")
                    .bind_str(name)
                    .push("))");
                s
            }
            Dimension::Time(grain) => {
                let bucket = match grain {
                    TimeGrain::Bucket(b) => *b,
                    TimeGrain::Auto => auto_bucket(self.spec.range),
                };
                match bucket {
                    // Not `toString`: ClickHouse takes it as injective and groups by the
                    // instant under it, so the hour that summer time gives back (two
                    // instants, one local label) would be two rows.
                    Bucket::Hour => sql(&format!(
                        "formatDateTime(toStartOfHour(timestamp, {tz}), '%Y-%m-%d %H:00:00', {tz})"
                    )),
                    Bucket::Day => sql(&format!("toString(toDate(timestamp, {tz}))")),
                    Bucket::Week => sql(&format!(
                        "toString(greatest(toMonday(toDate(timestamp, {tz})), toDate({})))",
                        quote(&self.spec.range.first_date.to_string())
                    )),
                    Bucket::Month => sql(&format!(
                        "toString(toStartOfMonth(toDate(timestamp, {tz})))"
                    )),
                }
            }
            Dimension::Visit(p) => sql(visit_column(*p)),
        }
    }

    /// The columns of `events` the rows need.
    fn event_columns(&self) -> Vec<&'static str> {
        let mut cols = vec!["event_id", "type", "user_id", "session_id"];
        let leaves = self
            .spec
            .filters
            .iter()
            .flat_map(|f| f.leaves())
            .map(|l| &l.dimension);
        for d in self.spec.dimensions.iter().chain(leaves) {
            let col = match d {
                Dimension::Event(EventProperty::Name) => "event_name",
                Dimension::Event(EventProperty::Page) => "pathname",
                Dimension::Event(EventProperty::Hostname) => "hostname",
                Dimension::Prop(_) => "properties",
                Dimension::Time(_) => "timestamp",
                Dimension::Event(EventProperty::Type) | Dimension::Visit(_) => continue,
            };
            if !cols.contains(&col) {
                cols.push(col);
            }
        }
        for v in self.spec.metrics.iter().filter_map(|m| m.vital()) {
            cols.push(v.column());
        }
        cols
    }

    /// `site_id`, the range (widened by `around` seconds each side), no bots.
    fn range(&self, around: u64) -> Sql {
        let start = (self.spec.range.start as u64).saturating_sub(around);
        let end = (self.spec.range.end as u64)
            .saturating_add(around)
            .min(u64::from(u32::MAX));
        let mut s = sql("site_id = ");
        s.bind_uint(u64::from(self.spec.site_id))
            .push(" AND timestamp >= toDateTime(")
            .bind_uint(start)
            .push(") AND timestamp < toDateTime(")
            .bind_uint(end)
            .push(") AND is_bot = 0");
        s
    }

    /// ` AND session_id GLOBAL IN (…)`: the visits that could pass the top-level filters
    /// on a visit attribute that [`needs_an_event_of_its_value`], read over the range and
    /// its lookaround, as the attributes are. Such filters on attributes taken from the
    /// same event (its first event; its first pageview; its last pageview) all hold on
    /// that one event, so a visit is a candidate when it has, for each of those events,
    /// one event that passes all of that event's filters. Every visit those filters keep
    /// is among them, so the figures are the same; a filtered query then groups the few
    /// visits that can match instead of all of them (`scripts/bench query`, the
    /// `_filtered` queries: "Germany and Chrome" on one event keeps 39,000 of the 30 days'
    /// 965,000 events at 10M, where "a German event and a Chrome event" had two
    /// `countIf`s over 450,000 of them, 48 ms against 100 ms). Empty without such a filter.
    fn visit_prefilter(&self) -> Sql {
        let mut by_event: Vec<(AttributeEvent, Vec<(&Leaf, VisitProperty)>)> = Vec::new();
        for (leaf, p) in self
            .spec
            .filters
            .iter()
            .filter_map(needs_an_event_of_its_value)
        {
            let from = AttributeEvent::of(p);
            match by_event.iter_mut().find(|(e, _)| *e == from) {
                Some((_, leaves)) => leaves.push((leaf, p)),
                None => by_event.push((from, vec![(leaf, p)])),
            }
        }
        if by_event.is_empty() {
            return Sql::new();
        }
        // One event passing all the filters on what `from` is taken from.
        let on_event = |(from, leaves): &(AttributeEvent, Vec<(&Leaf, VisitProperty)>)| {
            let mut each: Vec<Sql> = Vec::new();
            if let Some(when) = from.condition() {
                each.push(sql(when));
            }
            for (leaf, p) in leaves {
                each.push(filters::leaf_condition(leaf, &sql(&visit_event_value(*p))));
            }
            let mut c = sql("(");
            c.join(&each, " AND ").push(")");
            c
        };
        // GLOBAL: on a cluster `events` is a `Distributed` table and a visit's events are
        // on both shards, so the set is made once, over all of them, and sent to each
        // (a plain IN there is refused, code 288); on one server it is a plain IN.
        let mut s = sql(&format!(
            " AND session_id GLOBAL IN (SELECT session_id FROM {TABLE} WHERE "
        ));
        s.append(&self.range(SESSION_LOOKAROUND_SECS))
            .push(" AND (");
        let any: Vec<Sql> = by_event.iter().map(on_event).collect();
        s.join(&any, " OR ");
        if by_event.len() == 1 {
            s.push("))");
            return s;
        }
        s.push(") GROUP BY session_id HAVING ");
        let each: Vec<Sql> = by_event
            .iter()
            .map(|e| {
                let mut c = sql("countIf(");
                c.append(&on_event(e)).push(") > 0");
                c
            })
            .collect();
        s.join(&each, " AND ");
        s.push(")");
        s
    }

    /// The filters evaluated on the event itself: all of them (and the restriction) when
    /// `everything`, else the top-level filters that read only the event (the rest is
    /// evaluated after the join). Empty without such filters.
    fn event_filters(&self, everything: bool) -> Sql {
        let pushed: Vec<&Filter> = self
            .spec
            .filters
            .iter()
            .filter(|f| everything || f.all_leaves(&|l| !l.dimension.is_visit()))
            .collect();
        let expr = |d: &Dimension| self.event_expression(d);
        let mut s = filters::conjunction(&pushed, &expr);
        if everything {
            if let Some(r) = self.spec.restriction {
                if !s.is_empty() {
                    s.push(" AND ");
                }
                s.append(&self.restriction(r, &expr));
            }
        }
        s
    }

    /// The range's conditions and [`Self::event_filters`], as one condition (what a
    /// visit's row counts, `-If`).
    fn event_conditions(&self, everything: bool) -> Sql {
        let mut s = self.range(0);
        let c = self.event_filters(everything);
        if !c.is_empty() {
            s.push(" AND ").append(&c);
        }
        s
    }

    /// How a read of the range's events keeps them: ` PREWHERE` [`Self::event_filters`]
    /// ` WHERE` the range and `more`. 18.16 moves conditions to `PREWHERE` on its own, and
    /// not these: said explicitly, the filter's columns are read first and the rest only
    /// where an event passes (`props_30d` of `scripts/bench query`, the statement alone:
    /// 60 against 48 ms at 10M events, 660 against 540 ms at 100M; the same rows). Never
    /// with `FINAL`, where it would pick among an event's versions.
    fn event_read(&self, everything: bool, more: &Sql) -> Sql {
        let filters = self.event_filters(everything);
        let mut s = Sql::new();
        if !filters.is_empty() {
            s.push(" PREWHERE ").append(&filters);
        }
        s.push(" WHERE ").append(&self.range(0)).append(more);
        s
    }

    /// The events [`Self::event_read`] keeps, with the columns the rows need, and their
    /// person when `users` is asked for.
    fn events(&self, read: &Sql) -> Sql {
        let cols = self.event_columns().join(", ");
        let mut s = Sql::new();
        if self.person {
            s.push(&format!(
                "SELECT {cols}, {} AS person FROM (",
                identity::PERSON
            ))
            .push(&format!("SELECT {cols}, anonymous_id FROM {TABLE}"))
            .append(read)
            .push(") AS ev ANY LEFT JOIN (")
            .append(&identity::owners(self.spec.site_id))
            .push(") AS own USING anonymous_id");
        } else {
            s.push(&format!("SELECT {cols} FROM {TABLE}")).append(read);
        }
        s
    }

    /// The range's events that pass the event filters, of the visits that can pass the
    /// visit filters ([`Self::visit_prefilter`]).
    fn candidate_read(&self) -> Sql {
        self.event_read(false, &self.visit_prefilter())
    }

    /// The range's events joined to their visit's attributes, with the filters that need
    /// the visit and the restriction: `(events) ANY LEFT JOIN (visits) USING session_id
    /// WHERE …`. Every event of the range has its visit on the right (the visits are read
    /// over the range and more), so LEFT is INNER here; LEFT because `ANY INNER JOIN`
    /// keeps one row per key of the left side too on current servers (18.16 keeps every
    /// left row), and `ANY LEFT JOIN` means the same on both: each event, one visit. The
    /// subqueries have aliases: current servers require them (`joined_subquery_requires_alias`).
    fn joined(&self) -> Sql {
        let mut s = sql("(");
        s.append(&self.events(&self.candidate_read()))
            .push(") AS ev ANY LEFT JOIN (")
            .append(&self.visit_attributes())
            .push(") AS vis USING session_id");
        let rest = self.visit_filters();
        let expr = |d: &Dimension| self.dimension(d);
        let mut conditions = filters::conjunction(&rest, &expr);
        if let Some(r) = self.spec.restriction {
            if !conditions.is_empty() {
                conditions.push(" AND ");
            }
            conditions.append(&self.restriction(r, &expr));
        }
        if !conditions.is_empty() {
            s.push(" WHERE ").append(&conditions);
        }
        s
    }

    /// The top-level filters that read a visit attribute (the rest read the event alone).
    fn visit_filters(&self) -> Vec<&Filter> {
        self.spec
            .filters
            .iter()
            .filter(|f| !f.all_leaves(&|l| !l.dimension.is_visit()))
            .collect()
    }

    /// The range's events (and their person) of the visits the visit filters keep, with
    /// the restriction: `(events) AS ev WHERE session_id GLOBAL IN (…) AND …`. The visits
    /// are those [`Self::joined`] keeps: the same attributes, over the same events.
    fn in_kept_visits(&self) -> Sql {
        let on_visit = self.visit_filters();
        let attribute = |d: &Dimension| match d {
            Dimension::Visit(p) => sql(&visit_aggregate(*p)),
            _ => self.event_expression(d),
        };
        // The kept visits' set already holds only candidates; the events are narrowed
        // to them first only to spare the join to their person (a second read of the
        // candidates otherwise: 168 ms against 208 ms for `pages_30d_filtered` at 10M).
        let read = if self.person {
            self.candidate_read()
        } else {
            self.event_read(false, &Sql::new())
        };
        let mut s = sql("(");
        s.append(&self.events(&read)).push(&format!(
            ") AS ev WHERE session_id GLOBAL IN (SELECT session_id FROM {TABLE} WHERE "
        ));
        s.append(&self.range(SESSION_LOOKAROUND_SECS))
            .append(&self.visit_prefilter())
            .push(" GROUP BY session_id HAVING ")
            .append(&filters::conjunction(&on_visit, &attribute))
            .push(")");
        if let Some(r) = self.spec.restriction {
            let expr = |d: &Dimension| self.dimension(d);
            s.push(" AND ").append(&self.restriction(r, &expr));
        }
        s
    }

    /// The by-visit shape's rows: one per visit with an event in the range that passes
    /// the event filters, with the attributes the query groups or filters by (from all
    /// its events, the lookaround included) and the `g_` measures of
    /// [`Self::per_visit_columns`], those of the range's events (`-If` on
    /// [`Self::event_conditions`]); the visit filters and the restriction as `HAVING`.
    fn visits_in_range(&self) -> Sql {
        let counted = self.event_conditions(false);
        // `counted` carries binds: each use appends its own.
        let when = |extra: &str| {
            let mut s = sql("(");
            s.append(&counted).push(")").push(extra);
            s
        };
        let mut s = sql("SELECT session_id");
        for p in self.visit_properties() {
            s.push(&format!(", {} AS {}", visit_aggregate(p), visit_column(p)));
        }
        let has = |m: Metric| self.spec.metrics.contains(&m);
        if has(Metric::Visitors) || has(Metric::Percentage) {
            // Every id, repeats and all: `uniqExactArray` counts each once.
            s.push(", groupArrayIf(user_id, ")
                .append(&when(""))
                .push(") AS g_users");
        }
        if has(Metric::Pageviews) {
            s.push(", arrayUniq(groupArrayIf(event_id, ")
                .append(&when(" AND type = 'pageview'"))
                .push(")) AS g_pageviews");
        }
        if has(Metric::Events) {
            s.push(", arrayUniq(groupArrayIf(event_id, ")
                .append(&when(""))
                .push(")) AS g_events");
        }
        if has(Metric::BounceRate) || has(Metric::ViewsPerVisit) {
            s.push(", arrayUniq(groupArrayIf(event_id, type = 'pageview')) AS g_views");
        }
        if has(Metric::BounceRate) {
            s.push(&format!(
                ", toUInt8(g_views = 1 AND countIf(type IN ({})) = 0) AS g_bounce",
                engagement_list()
            ));
        }
        if has(Metric::VisitDuration) {
            s.push(", toUInt32(max(timestamp)) - toUInt32(min(timestamp)) AS g_duration");
        }
        s.push(", countIf(")
            .append(&when(""))
            .push(") AS g_counted");
        s.push(&format!(" FROM {TABLE} WHERE "))
            .append(&self.range(SESSION_LOOKAROUND_SECS))
            .append(&self.visit_prefilter())
            .push(" GROUP BY session_id HAVING g_counted > 0");
        let on_visit = self.visit_filters();
        let expr = |d: &Dimension| self.dimension(d);
        let c = filters::conjunction(&on_visit, &expr);
        if !c.is_empty() {
            s.push(" AND ").append(&c);
        }
        if let Some(r) = self.spec.restriction {
            s.push(" AND ").append(&self.restriction(r, &expr));
        }
        s
    }

    /// The visit attributes the query groups or filters by, each once.
    fn visit_properties(&self) -> Vec<VisitProperty> {
        let mut props: Vec<VisitProperty> = Vec::new();
        let leaves = self
            .spec
            .filters
            .iter()
            .flat_map(|f| f.leaves())
            .map(|l| &l.dimension);
        for d in self.spec.dimensions.iter().chain(leaves) {
            if let Dimension::Visit(p) = d {
                if !props.contains(p) {
                    props.push(*p);
                }
            }
        }
        props
    }

    /// One row per visit with an event in the range (and around it): the attributes the
    /// query groups or filters by, and the measures its metrics need.
    fn visit_attributes(&self) -> Sql {
        let mut cols: Vec<String> = self
            .visit_properties()
            .iter()
            .map(|p| format!("{} AS {}", visit_aggregate(*p), visit_column(*p)))
            .collect();
        let has = |m: Metric| self.spec.metrics.contains(&m);
        if has(Metric::BounceRate) || has(Metric::ViewsPerVisit) {
            cols.push("arrayUniq(groupArrayIf(event_id, type = 'pageview')) AS s_pageviews".into());
        }
        if has(Metric::BounceRate) {
            // Whether there is any engagement: a count, duplicates or not, is 0 exactly
            // when there is none.
            cols.push(format!(
                "toUInt8(s_pageviews = 1 AND countIf(type IN ({})) = 0) AS s_bounce",
                engagement_list()
            ));
        }
        if has(Metric::VisitDuration) {
            cols.push("toUInt32(max(timestamp)) - toUInt32(min(timestamp)) AS s_duration".into());
        }
        let mut s = sql("SELECT session_id");
        for c in cols {
            s.push(", ").push(&c);
        }
        s.push(&format!(" FROM {TABLE} WHERE "))
            .append(&self.range(SESSION_LOOKAROUND_SECS))
            .append(&self.visit_prefilter())
            .push(" GROUP BY session_id");
        s
    }

    /// `(d_a, d_b) IN ((?, ?), …)`: rows whose dimensions are among the given values.
    fn restriction(&self, r: &Restriction, expr: &dyn Fn(&Dimension) -> Sql) -> Sql {
        let exprs: Vec<Sql> = r
            .dimensions
            .iter()
            .map(|i| expr(&self.spec.dimensions[*i]))
            .collect();
        let mut s = Sql::new();
        let tuple = exprs.len() > 1;
        if tuple {
            s.push("(").join(&exprs, ", ").push(")");
        } else {
            s.join(&exprs, ", ");
        }
        s.push(" IN (");
        for (i, values) in r.values.iter().enumerate() {
            if i > 0 {
                s.push(", ");
            }
            if tuple {
                s.push("(");
            }
            for (j, v) in values.iter().enumerate() {
                if j > 0 {
                    s.push(", ");
                }
                s.bind_str(v);
            }
            if tuple {
                s.push(")");
            }
        }
        s.push(")");
        s
    }
}

/// [`ENGAGEMENT_TYPES`] as a list of SQL strings.
pub(crate) fn engagement_list() -> String {
    ENGAGEMENT_TYPES
        .iter()
        .map(|t| quote(t))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The measurements of a vital in a group of events: each `performance` event that has
/// one, once (copies of an event share its `event_id` and its value), as an array of
/// `(event_id, value)`.
fn measurements(v: Vital) -> String {
    let c = v.column();
    format!(
        "groupUniqArrayIf((event_id, assumeNotNull({c})), type = 'performance' AND isNotNull({c}))"
    )
}

/// The per-visit shape's column of a vital's measurements.
fn vital_group_column(v: Vital) -> &'static str {
    match v {
        Vital::Lcp => "g_lcp",
        Vital::Cls => "g_cls",
        Vital::Inp => "g_inp",
        Vital::Fcp => "g_fcp",
        Vital::Ttfb => "g_ttfb",
    }
}

/// The 75th percentile of an array of `(event_id, value)`: NULL when it is empty, else
/// the sorted values' element at `quantileExact(0.75)`'s index, `floor(n * 3 / 4)`
/// ([`crate::metrics::p75_index`]; 1-based in SQL). Not `quantileExact` itself: it would
/// count an event's copies, and 18.16's `arrayReduce` takes no parametric aggregate.
/// ClickHouse computes the repeated aggregate once.
fn p75(pairs: &str) -> String {
    format!(
        "if(empty({pairs}), NULL, arrayElement(arraySort(arrayMap(m -> tupleElement(m, 2), {pairs})), \
         intDiv(length({pairs}) * 3, 4) + 1))"
    )
}

/// The column a visit attribute is joined as.
fn visit_column(p: VisitProperty) -> &'static str {
    match p {
        VisitProperty::EntryPage => "s_entry_page",
        VisitProperty::ExitPage => "s_exit_page",
        VisitProperty::Source => "s_source",
        VisitProperty::Referrer => "s_referrer",
        VisitProperty::Channel => "s_channel",
        VisitProperty::UtmSource => "s_utm_source",
        VisitProperty::UtmMedium => "s_utm_medium",
        VisitProperty::UtmCampaign => "s_utm_campaign",
        VisitProperty::UtmContent => "s_utm_content",
        VisitProperty::UtmTerm => "s_utm_term",
        VisitProperty::Device => "s_device",
        VisitProperty::Browser => "s_browser",
        VisitProperty::BrowserVersion => "s_browser_version",
        VisitProperty::Os => "s_os",
        VisitProperty::OsVersion => "s_os_version",
        VisitProperty::Country => "s_country",
        VisitProperty::Region => "s_region",
        VisitProperty::City => "s_city",
        VisitProperty::Screen => "s_screen",
    }
}

/// A query-string parameter of the event's page, decoded (`+` as a space). The query
/// string is stored with or without its `?`; the SQL spells `?` as `\x3F`, since every
/// `?` of a statement's text is a bind.
fn utm(param: &str) -> String {
    format!(
        "decodeURLComponent(replaceAll(extractURLParameter(concat('\\x3F', \
         replaceRegexpOne(querystring, '^[\\x3F]', '')), '{param}'), '+', ' '))"
    )
}

/// An event dimension's value of each event.
pub(crate) fn event_property(p: EventProperty) -> &'static str {
    match p {
        EventProperty::Name => "if(event_name = '', type, event_name)",
        EventProperty::Page => "pathname",
        EventProperty::Hostname => "hostname",
        EventProperty::Type => "type",
    }
}

/// A visit attribute: the value of the visit's first event (its first pageview for the
/// entry page, its last for the exit page).
pub(crate) fn visit_aggregate(p: VisitProperty) -> String {
    let value = visit_event_value(p);
    match p {
        VisitProperty::EntryPage => {
            format!("argMinIf({value}, (timestamp, event_id), {PAGEVIEW})")
        }
        VisitProperty::ExitPage => {
            format!("argMaxIf({value}, (timestamp, event_id), {PAGEVIEW})")
        }
        _ => format!("argMin({value}, (timestamp, event_id))"),
    }
}

const PAGEVIEW: &str = "type = 'pageview'";

/// The event of a visit its attribute is taken from ([`visit_aggregate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AttributeEvent {
    /// Its first event: the source, the device, the place…
    First,
    /// Its first pageview: the entry page.
    FirstPageview,
    /// Its last pageview: the exit page.
    LastPageview,
}

impl AttributeEvent {
    fn of(p: VisitProperty) -> Self {
        match p {
            VisitProperty::EntryPage => Self::FirstPageview,
            VisitProperty::ExitPage => Self::LastPageview,
            _ => Self::First,
        }
    }

    /// The events it is one of, when not all of them.
    fn condition(self) -> Option<&'static str> {
        match self {
            Self::First => None,
            Self::FirstPageview | Self::LastPageview => Some(PAGEVIEW),
        }
    }
}

/// What a visit attribute is of each event ([`visit_aggregate`] takes one event's).
fn visit_event_value(p: VisitProperty) -> String {
    match p {
        VisitProperty::EntryPage | VisitProperty::ExitPage => "pathname".into(),
        // The utm_source the visit came with, else the referring site, unless the
        // referrer is the site itself (a visit resumed from its own page).
        VisitProperty::Source => format!(
            "if({0} != '', {0}, if(channel = 'Internal', '', domainWithoutWWW(referrer)))",
            utm("utm_source")
        ),
        VisitProperty::Referrer => "if(channel = 'Internal', '', referrer)".into(),
        VisitProperty::Channel => "channel".into(),
        VisitProperty::UtmSource => utm("utm_source"),
        VisitProperty::UtmMedium => utm("utm_medium"),
        VisitProperty::UtmCampaign => utm("utm_campaign"),
        VisitProperty::UtmContent => utm("utm_content"),
        VisitProperty::UtmTerm => utm("utm_term"),
        VisitProperty::Device => "device_type".into(),
        VisitProperty::Browser => "browser".into(),
        VisitProperty::BrowserVersion => "browser_version".into(),
        VisitProperty::Os => "operating_system".into(),
        VisitProperty::OsVersion => "operating_system_version".into(),
        VisitProperty::Country => "country".into(),
        VisitProperty::Region => "region".into(),
        VisitProperty::City => "city".into(),
        VisitProperty::Screen => {
            let mut s = String::from("multiIf(screen_width = 0, ''");
            for (below, class) in SCREEN_CLASSES {
                s.push_str(&format!(", screen_width < {below}, '{class}'"));
            }
            s.push_str(&format!(", '{SCREEN_WIDEST}')"));
            s
        }
    }
}

/// A top-level filter that only a visit with some event of the same value can pass: `is`
/// or `contains` of values none of which is empty, on a visit attribute (the value of
/// one of its events). Negations, patterns and the empty value can match a visit with no
/// such event (a visit without a pageview has the empty entry page).
fn needs_an_event_of_its_value(f: &Filter) -> Option<(&Leaf, VisitProperty)> {
    let Filter::Leaf(leaf) = f else { return None };
    let Dimension::Visit(p) = leaf.dimension else {
        return None;
    };
    let empty = leaf.dimension.empty_label();
    let positive = matches!(leaf.op, Op::Is | Op::Contains);
    let non_empty = leaf
        .values
        .iter()
        .all(|v| !v.is_empty() && Some(v.as_str()) != empty);
    (positive && non_empty && !leaf.values.is_empty()).then_some((leaf, p))
}

#[cfg(test)]
mod tests {
    use crate::test_support::{planned, request, try_plan, NOW};
    use crate::{plan, FirstEvent, SiteContext, StatsError};
    use serde_json::json;

    /// March 2024 in Berlin: [2024-02-29T23:00Z, 2024-03-31T22:00Z), and 6 hours more on
    /// each side for the visits.
    const MARCH: &str = "site_id = 1 AND timestamp >= toDateTime(1709247600) \
                         AND timestamp < toDateTime(1711922400) AND is_bot = 0";
    const MARCH_AROUND: &str = "site_id = 1 AND timestamp >= toDateTime(1709226000) \
                                AND timestamp < toDateTime(1711944000) AND is_bot = 0";
    const BERLIN: &str = "Europe/Berlin";
    /// The visits that can be German (`visit_prefilter`): those with a German event.
    const DE_VISITS: &str = " AND session_id GLOBAL IN (SELECT session_id FROM events WHERE \
        site_id = 1 AND timestamp >= toDateTime(1709226000) AND timestamp < toDateTime(1711944000) \
        AND is_bot = 0 AND (((country IN ('DE')))))";

    #[test]
    fn flat_totals() {
        let p = planned(
            json!({"metrics": ["visitors", "visits", "pageviews", "events"]}),
            BERLIN,
        );
        assert_eq!(
            p.main().inline(),
            format!(
                "SELECT * FROM (SELECT uniqExact(user_id) AS visitors, uniqExact(session_id) AS visits, \
                 uniqExactIf(event_id, type = 'pageview') AS pageviews, uniqExact(event_id) AS events \
                 FROM events WHERE {MARCH}) ORDER BY visitors DESC LIMIT 0, 10000"
            )
        );
        assert_eq!(
            p.main().columns,
            ["visitors", "visits", "pageviews", "events"]
        );
        assert_eq!(
            p.main().settings,
            [("max_execution_time", "30".to_string())]
        );
        assert_eq!(p.source(), "events");
    }

    #[test]
    fn event_rows_of_the_visits_a_visit_filter_keeps_need_no_join() {
        let p = planned(
            json!({"metrics": ["visitors", "pageviews"], "dimensions": ["event:page"],
                   "filters": [["is", "visit:country", ["DE"]]]}),
            BERLIN,
        );
        assert_eq!(
            p.main().inline(),
            format!(
                "SELECT * FROM (SELECT pathname AS d0, uniqExact(user_id) AS visitors, \
                 uniqExactIf(event_id, type = 'pageview') AS pageviews FROM (SELECT event_id, type, \
                 user_id, session_id, pathname FROM events WHERE {MARCH}) AS ev WHERE \
                 session_id GLOBAL IN (SELECT session_id FROM events WHERE {MARCH_AROUND}{DE_VISITS} \
                 GROUP BY session_id HAVING (argMin(country, (timestamp, event_id)) IN ('DE'))) \
                 GROUP BY d0) ORDER BY visitors DESC, d0 ASC LIMIT 0, 10000"
            )
        );
    }

    #[test]
    fn flat_breakdown_with_a_filter_an_order_and_a_page() {
        let p = planned(
            json!({"metrics": ["visitors", "pageviews"], "dimensions": ["event:page"],
                   "filters": [["contains", "event:page", ["/blog"]]],
                   "order_by": [["pageviews", "desc"]], "pagination": {"limit": 10, "offset": 20}}),
            BERLIN,
        );
        assert_eq!(
            p.main().inline(),
            format!(
                "SELECT * FROM (SELECT pathname AS d0, uniqExact(user_id) AS visitors, \
                 uniqExactIf(event_id, type = 'pageview') AS pageviews FROM events \
                 PREWHERE (position(pathname, '/blog') > 0) WHERE {MARCH} GROUP BY d0) \
                 ORDER BY pageviews DESC, d0 ASC LIMIT 20, 10"
            )
        );
        // The value is bound: the text has a `?` for it, after the site and the range.
        assert!(p.main().sql.contains("position(pathname, ?)"));
        assert_eq!(p.main().binds.len(), 4);
    }

    #[test]
    fn users_join_the_alias_owners() {
        let p = planned(json!({"metrics": ["users"]}), BERLIN);
        assert_eq!(
            p.main().inline(),
            format!(
                "SELECT * FROM (SELECT uniqExactIf(person, person != '') AS users FROM (\
                 SELECT event_id, type, user_id, session_id, \
                 if(match(user_id, '^[0-9a-f]{{32}}$'), owner, user_id) AS person FROM (\
                 SELECT event_id, type, user_id, session_id, anonymous_id FROM events WHERE {MARCH}) AS ev \
                 ANY LEFT JOIN (SELECT anonymous_id, argMax(user_id, (rank, user_id)) AS owner \
                 FROM person_claims WHERE site_id = 1 AND anonymous_id != '' GROUP BY anonymous_id) AS own \
                 USING anonymous_id)) ORDER BY users DESC LIMIT 0, 10000"
            )
        );
    }

    #[test]
    fn visit_dimensions_join_each_event_to_its_visit() {
        let p = planned(
            json!({"metrics": ["visitors", "events"], "dimensions": ["visit:country", "time:week"]}),
            BERLIN,
        );
        assert_eq!(
            p.main().inline(),
            format!(
                "SELECT * FROM (SELECT s_country AS d0, \
                 toString(greatest(toMonday(toDate(timestamp, 'Europe/Berlin')), toDate('2024-03-01'))) AS d1, \
                 uniqExact(user_id) AS visitors, uniqExact(event_id) AS events FROM (\
                 SELECT event_id, type, user_id, session_id, timestamp FROM events WHERE {MARCH}) AS ev \
                 ANY LEFT JOIN (SELECT session_id, argMin(country, (timestamp, event_id)) AS s_country \
                 FROM events WHERE {MARCH_AROUND} GROUP BY session_id) AS vis USING session_id \
                 GROUP BY d0, d1) ORDER BY d1 ASC, d0 ASC LIMIT 0, 10000"
            )
        );
    }

    #[test]
    fn visit_measures_by_visit_dimensions_are_one_group_by_visit() {
        let p = planned(
            json!({"metrics": ["visits", "bounce_rate", "visit_duration", "views_per_visit"],
                   "dimensions": ["visit:entry_page"],
                   "filters": [["is", "visit:country", ["DE"]], ["is", "event:name", ["signup"]]]}),
            BERLIN,
        );
        assert_eq!(
            p.main().inline(),
            format!(
                "SELECT * FROM (SELECT s_entry_page AS d0, count() AS visits, \
                 100 * sum(g_bounce) / greatest(count(), 1) AS bounce_rate, \
                 sum(g_duration) / greatest(count(), 1) AS visit_duration, \
                 sum(g_views) / greatest(count(), 1) AS views_per_visit FROM (\
                 SELECT session_id, \
                 argMinIf(pathname, (timestamp, event_id), type = 'pageview') AS s_entry_page, \
                 argMin(country, (timestamp, event_id)) AS s_country, \
                 arrayUniq(groupArrayIf(event_id, type = 'pageview')) AS g_views, \
                 toUInt8(g_views = 1 AND countIf(type IN ('custom_event', 'outbound', \
                 'button_click', 'copy', 'form_submit', 'input_change')) = 0) AS g_bounce, \
                 toUInt32(max(timestamp)) - toUInt32(min(timestamp)) AS g_duration, \
                 countIf(({MARCH} AND (if(event_name = '', type, event_name) IN ('signup')))) AS g_counted \
                 FROM events WHERE {MARCH_AROUND}{DE_VISITS} GROUP BY session_id \
                 HAVING g_counted > 0 AND (s_country IN ('DE'))) GROUP BY d0) \
                 ORDER BY visits DESC, d0 ASC LIMIT 0, 10000"
            )
        );
    }

    #[test]
    fn the_overview_counts_the_ranges_events_of_each_visit_once() {
        let p = planned(
            json!({"metrics": ["visitors", "visits", "pageviews", "events", "bounce_rate"]}),
            BERLIN,
        );
        let sql = p.main().inline();
        assert!(!sql.contains(" JOIN "), "{sql}");
        for part in [
            format!("groupArrayIf(user_id, ({MARCH})) AS g_users"),
            format!("arrayUniq(groupArrayIf(event_id, ({MARCH}) AND type = 'pageview')) AS g_pageviews"),
            format!("arrayUniq(groupArrayIf(event_id, ({MARCH}))) AS g_events"),
            format!("FROM events WHERE {MARCH_AROUND} GROUP BY session_id HAVING g_counted > 0)"),
            "SELECT uniqExactArray(g_users) AS visitors, count() AS visits, sum(g_pageviews) AS pageviews, \
             sum(g_events) AS events"
                .to_string(),
        ] {
            assert!(sql.contains(&part), "{part}\n  not in\n{sql}");
        }
    }

    /// Only a filter that no visit without an event of its value can pass narrows the
    /// visits read: not a negation, a pattern, the empty value, or a filter inside `or`.
    #[test]
    fn visit_filters_narrow_the_visits_read_only_when_they_need_an_event_of_their_value() {
        let narrowed = |filters: serde_json::Value| {
            let p = planned(
                json!({"metrics": ["visitors", "visits"], "dimensions": ["visit:device"], "filters": filters}),
                BERLIN,
            );
            p.main().inline().contains("session_id GLOBAL IN (")
        };
        assert!(narrowed(json!([["is", "visit:country", ["DE"]]])));
        assert!(narrowed(json!([["contains", "visit:source", ["goo"]]])));
        for kept in [
            json!([["is_not", "visit:country", ["DE"]]]),
            json!([["is", "visit:country", ["(not set)"]]]),
            json!([["is", "visit:source", ["Direct / None"]]]),
            json!([["matches", "visit:country", ["^D"]]]),
            json!([["contains_not", "visit:browser", ["Chr"]]]),
            json!([[
                "or",
                [
                    ["is", "visit:country", ["DE"]],
                    ["is", "visit:country", ["FR"]]
                ]
            ]]),
            json!([["is", "event:page", ["/a"]]]),
        ] {
            assert!(!narrowed(kept.clone()), "{kept}");
        }
        // Two taken from the first event: one event passing both, no grouping.
        let p = planned(
            json!({"metrics": ["visitors"], "dimensions": ["visit:device"],
                   "filters": [["is", "visit:country", ["DE"]], ["is", "visit:browser", ["Chrome"]]]}),
            BERLIN,
        );
        let sql = p.main().inline();
        assert!(
            sql.contains(&format!(
                "session_id GLOBAL IN (SELECT session_id FROM events WHERE {MARCH_AROUND} \
                 AND (((country IN ('DE')) AND (browser IN ('Chrome'))))) "
            )) && !sql.contains("countIf(((country"),
            "{sql}"
        );
        // Two taken from different events: one read, each visit needing both; the entry
        // page from pageviews only.
        let p = planned(
            json!({"metrics": ["visitors"], "dimensions": ["visit:device"],
                   "filters": [["is", "visit:entry_page", ["/a"]], ["contains", "visit:browser", ["Chr"]]]}),
            BERLIN,
        );
        let sql = p.main().inline();
        assert!(
            sql.contains("AND ((type = 'pageview' AND (pathname IN ('/a'))) OR (")
                && sql.contains(
                    "GROUP BY session_id HAVING countIf((type = 'pageview' AND (pathname IN ('/a')))) > 0 \
                     AND countIf(("
                ),
            "{sql}"
        );
    }

    #[test]
    fn visit_measures_by_time_group_by_visit_first() {
        let p = planned(
            json!({"metrics": ["visits", "bounce_rate", "visit_duration", "views_per_visit"],
                   "dimensions": ["time:day"],
                   "filters": [["is", "visit:country", ["DE"]], ["is", "event:name", ["signup"]]]}),
            BERLIN,
        );
        assert_eq!(
            p.main().inline(),
            format!(
                "SELECT * FROM (SELECT d0, count() AS visits, \
                 100 * sum(g_bounce) / greatest(count(), 1) AS bounce_rate, \
                 sum(g_duration) / greatest(count(), 1) AS visit_duration, \
                 sum(g_views) / greatest(count(), 1) AS views_per_visit FROM (\
                 SELECT toString(toDate(timestamp, 'Europe/Berlin')) AS d0, session_id, any(s_bounce) AS g_bounce, \
                 any(s_duration) AS g_duration, any(s_pageviews) AS g_views FROM (\
                 SELECT event_id, type, user_id, session_id, timestamp, event_name FROM events \
                 PREWHERE (if(event_name = '', type, event_name) IN ('signup')) WHERE {MARCH}{DE_VISITS}) AS ev \
                 ANY LEFT JOIN (SELECT session_id, \
                 argMin(country, (timestamp, event_id)) AS s_country, \
                 arrayUniq(groupArrayIf(event_id, type = 'pageview')) AS s_pageviews, \
                 toUInt8(s_pageviews = 1 AND countIf(type IN ('custom_event', 'outbound', \
                 'button_click', 'copy', 'form_submit', 'input_change')) = 0) AS s_bounce, \
                 toUInt32(max(timestamp)) - toUInt32(min(timestamp)) AS s_duration \
                 FROM events WHERE {MARCH_AROUND}{DE_VISITS} GROUP BY session_id) AS vis USING session_id \
                 WHERE (s_country IN ('DE')) GROUP BY d0, session_id) GROUP BY d0) \
                 ORDER BY d0 ASC LIMIT 0, 10000"
            )
        );
    }

    #[test]
    fn event_only_filters_are_read_before_the_join_and_the_rest_after() {
        let p = planned(
            json!({"metrics": ["visits"], "dimensions": ["visit:os"], "filters": [
                ["is", "event:page", ["/a"]],
                ["or", [["is", "visit:country", ["DE"]], ["is", "event:hostname", ["x.com"]]]]
            ]}),
            BERLIN,
        );
        let sql = p.main().inline();
        let (before, after) = sql.split_once(" AS ev ANY LEFT JOIN ").unwrap();
        assert!(
            before.contains(" PREWHERE (pathname IN ('/a')) WHERE "),
            "{sql}"
        );
        assert!(!before.contains("s_country"), "{sql}");
        assert!(
            after.contains("WHERE ((s_country IN ('DE')) OR (hostname IN ('x.com'))) GROUP BY d0"),
            "{sql}"
        );
        // The columns the later filter reads are carried to it.
        assert!(
            before.contains(
                "SELECT event_id, type, user_id, session_id, pathname, hostname FROM events"
            ),
            "{sql}"
        );
    }

    #[test]
    fn web_vitals_are_the_p75_of_each_performance_event_once() {
        let p = planned(
            json!({"metrics": ["events", "lcp_p75", "cls_p75"], "dimensions": ["event:page"],
                   "filters": [["is", "event:type", ["performance"]]],
                   "order_by": [["lcp_p75", "desc"]]}),
            BERLIN,
        );
        let pairs = |c: &str| {
            format!(
                "groupUniqArrayIf((event_id, assumeNotNull({c})), type = 'performance' AND isNotNull({c}))"
            )
        };
        let p75 = |a: &str| {
            format!(
                "if(empty({a}), NULL, arrayElement(arraySort(arrayMap(m -> tupleElement(m, 2), {a})), \
                 intDiv(length({a}) * 3, 4) + 1))"
            )
        };
        assert_eq!(
            p.main().inline(),
            format!(
                "SELECT * FROM (SELECT pathname AS d0, uniqExact(event_id) AS events, \
                 {} AS lcp_p75, {} AS cls_p75 FROM events \
                 PREWHERE (type IN ('performance')) WHERE {MARCH} GROUP BY d0) \
                 ORDER BY lcp_p75 DESC NULLS LAST, d0 ASC LIMIT 0, 10000",
                p75(&pairs("lcp")),
                p75(&pairs("cls"))
            )
        );
        // By a visit dimension: the events carry their vitals to the join.
        let p = planned(
            json!({"metrics": ["inp_p75"], "dimensions": ["visit:device"]}),
            BERLIN,
        );
        let sql = p.main().inline();
        assert!(
            sql.contains(&format!("SELECT s_device AS d0, {} AS inp_p75 FROM (SELECT event_id, type, user_id, session_id, inp FROM events", p75(&pairs("inp")))),
            "{sql}"
        );
        assert!(
            sql.contains("ORDER BY inp_p75 DESC NULLS LAST, d0 ASC"),
            "{sql}"
        );
        // With a visit measure: each (dimensions, visit) group's pairs, then all of them.
        let p = planned(
            json!({"metrics": ["bounce_rate", "ttfb_p75", "fcp_p75"], "dimensions": ["visit:country"]}),
            BERLIN,
        );
        let sql = p.main().inline();
        assert!(
            sql.contains(&format!(
                "{} AS ttfb_p75, {} AS fcp_p75 FROM (SELECT s_country AS d0, session_id, \
                 any(s_bounce) AS g_bounce, {} AS g_ttfb, {} AS g_fcp FROM (\
                 SELECT event_id, type, user_id, session_id, ttfb, fcp FROM events",
                p75("groupArrayArray(g_ttfb)"),
                p75("groupArrayArray(g_fcp)"),
                pairs("ttfb"),
                pairs("fcp")
            )),
            "{sql}"
        );
        // The bounce rate keeps its default place first in the order.
        assert!(
            sql.ends_with("ORDER BY bounce_rate DESC, d0 ASC LIMIT 0, 10000"),
            "{sql}"
        );
    }

    #[test]
    fn percentage_divides_by_all_visitors_of_the_filters() {
        let p = planned(
            json!({"metrics": ["percentage"], "dimensions": ["event:type"],
                   "filters": [["is_not", "event:type", ["error"]]]}),
            "UTC",
        );
        let range = "site_id = 1 AND timestamp >= toDateTime(1709251200) \
                     AND timestamp < toDateTime(1711929600) AND is_bot = 0";
        assert_eq!(
            p.main().inline(),
            format!(
                "SELECT * FROM (SELECT type AS d0, 100 * uniqExact(user_id) / greatest((SELECT visitors FROM (\
                 SELECT uniqExact(user_id) AS visitors FROM events PREWHERE NOT (type IN ('error')) WHERE {range})), 1) \
                 AS percentage FROM events PREWHERE NOT (type IN ('error')) WHERE {range} GROUP BY d0) \
                 ORDER BY percentage DESC, d0 ASC LIMIT 0, 10000"
            )
        );
    }

    #[test]
    fn time_buckets_in_the_site_s_zone() {
        let expr = |dim: &str, range: serde_json::Value| {
            let p = planned(
                json!({"dimensions": [dim], "date_range": range}),
                "America/New_York",
            );
            let sql = p.main().inline();
            let start = sql.find("SELECT * FROM (SELECT ").unwrap() + 22;
            sql[start..sql.find(" AS d0").unwrap()].to_string()
        };
        let tz = "'America/New_York'";
        assert_eq!(
            expr("time:hour", json!("day")),
            format!("formatDateTime(toStartOfHour(timestamp, {tz}), '%Y-%m-%d %H:00:00', {tz})")
        );
        assert_eq!(
            expr("time:day", json!("7d")),
            format!("toString(toDate(timestamp, {tz}))")
        );
        assert_eq!(
            expr("time:week", json!(["2024-03-06", "2024-03-31"])),
            format!("toString(greatest(toMonday(toDate(timestamp, {tz})), toDate('2024-03-06')))")
        );
        assert_eq!(
            expr("time:month", json!("6mo")),
            format!("toString(toStartOfMonth(toDate(timestamp, {tz})))")
        );
        // `time`: hours for a day, days for a month, weeks for a quarter, months beyond.
        assert_eq!(expr("time", json!("day")), expr("time:hour", json!("day")));
        assert_eq!(expr("time", json!("30d")), expr("time:day", json!("30d")));
        assert_eq!(
            expr("time", json!("91d")),
            format!("toString(greatest(toMonday(toDate(timestamp, {tz})), toDate('2024-01-15')))")
        );
        assert_eq!(
            expr("time", json!("12mo")),
            expr("time:month", json!("12mo"))
        );
    }

    #[test]
    fn every_visit_attribute_reads_the_visit_s_first_event() {
        let cases = [
            ("visit:exit_page", "argMaxIf(pathname, (timestamp, event_id), type = 'pageview')"),
            ("visit:referrer", "argMin(if(channel = 'Internal', '', referrer), (timestamp, event_id))"),
            ("visit:channel", "argMin(channel, (timestamp, event_id))"),
            ("visit:utm_medium", "argMin(decodeURLComponent(replaceAll(extractURLParameter(concat('\\x3F', replaceRegexpOne(querystring, '^[\\x3F]', '')), 'utm_medium'), '+', ' ')), (timestamp, event_id))"),
            ("visit:device", "argMin(device_type, (timestamp, event_id))"),
            ("visit:browser_version", "argMin(browser_version, (timestamp, event_id))"),
            ("visit:os", "argMin(operating_system, (timestamp, event_id))"),
            ("visit:os_version", "argMin(operating_system_version, (timestamp, event_id))"),
            ("visit:region", "argMin(region, (timestamp, event_id))"),
            ("visit:city", "argMin(city, (timestamp, event_id))"),
            ("visit:screen", "argMin(multiIf(screen_width = 0, '', screen_width < 576, 'Mobile', screen_width < 992, 'Tablet', screen_width < 1440, 'Laptop', 'Desktop'), (timestamp, event_id))"),
        ];
        for (dim, aggregate) in cases {
            let p = planned(json!({"dimensions": [dim]}), "UTC");
            let column = format!("s_{}", &dim[6..]);
            assert!(
                p.main().sql.contains(&format!("{aggregate} AS {column}")),
                "{dim}: {}",
                p.main().sql
            );
            assert!(
                p.main().sql.contains(&format!("SELECT {column} AS d0")),
                "{dim}"
            );
        }
    }

    #[test]
    fn custom_properties_are_bound_and_read_as_text() {
        let p = planned(
            json!({"metrics": ["events"], "dimensions": ["event:props:it's?"],
                   "filters": [["is", "event:props:it's?", ["(none)"]]]}),
            "UTC",
        );
        let st = p.main();
        assert!(st.sql.contains(
            "if(substring(visitParamExtractRaw(properties, ?), 1, 1) = '\"', \
             visitParamExtractString(properties, ?), visitParamExtractRaw(properties, ?)) AS d0"
        ));
        let names = st
            .binds
            .iter()
            .filter(|b| **b == crate::Bind::Str("it's?".into()))
            .count();
        assert_eq!(names, 6, "three for the dimension, three for the filter");
        assert!(st
            .inline()
            .contains("visitParamExtractRaw(properties, 'it\\'s?')"));
        // `(none)` is the absent property.
        assert!(st.inline().contains(") IN (''))"));
    }

    /// Whatever the request, the statements' `?`s are exactly their binds, and no value of
    /// a request is in their text.
    #[test]
    fn every_question_mark_is_a_bind() {
        let marker = "zz'\\?x";
        let requests = [
            json!({"metrics": ["visitors", "users", "percentage", "bounce_rate"], "dimensions": ["visit:source", "time:day"],
                   "filters": [["matches", "visit:entry_page", [marker]], ["not", ["contains", "event:page", [marker], {"case_sensitive": false}]]],
                   "include": {"total_rows": true, "comparisons": {"mode": "previous_period"}}}),
            json!({"metrics": ["events"], "dimensions": ["event:props:zz'\\?x"], "filters": [["is", "event:props:zz'\\?x", [marker]]]}),
        ];
        for r in requests {
            let p = planned(r, BERLIN);
            let main_row = crate::Row {
                dimensions: vec![
                    marker.into();
                    p.main()
                        .columns
                        .iter()
                        .filter(|c| c.starts_with('d'))
                        .count()
                ],
                metrics: vec![Some(1.0); p.query().metrics.len()],
            };
            let comparison = p.comparison(&[main_row]);
            for st in [Some(p.main().clone()), p.total_rows().cloned(), comparison]
                .into_iter()
                .flatten()
            {
                assert_eq!(st.sql.matches('?').count(), st.binds.len(), "{}", st.sql);
                assert!(!st.sql.contains("zz"), "{}", st.sql);
            }
        }
    }

    #[test]
    fn a_site_context_the_engine_cannot_use_is_an_internal_error() {
        let e = try_plan(json!({}), "Mars/Olympus_Mons").unwrap_err();
        assert_eq!(e.status(), 500);
        let site = SiteContext {
            first_event: FirstEvent::NotLoaded,
            ..SiteContext::utc(1)
        };
        let e = plan(&request(json!({"date_range": "all"})), &site, NOW).unwrap_err();
        assert!(matches!(e, StatsError::SiteContext(_)));
        assert!(request(json!({"date_range": "all"})).needs_first_event());
    }

    #[test]
    fn the_first_event_statement() {
        let st = crate::first_event_statement(3);
        assert_eq!(
            st.inline(),
            "SELECT toUInt32(min(timestamp)) AS first_event FROM events WHERE site_id = 3 AND is_bot = 0"
        );
        assert_eq!(FirstEvent::from_epoch(0), FirstEvent::NoEvents);
        assert_eq!(FirstEvent::from_epoch(5), FirstEvent::At(5));
    }
}
