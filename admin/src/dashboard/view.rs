//! The state of a site's dashboard, all of it in the URL (so that a view can be bookmarked
//! and shared): the period, the comparison, the chart's metric and interval, the filters,
//! and each card's tab. `View::parse` reads it from the query string, `View::href` writes
//! it back with changes, and `View::request` turns it into the Stats API's request: the
//! dashboard asks the engine exactly what an API client would.

use rivulet_common::registry::Site;
use serde_json::{json, Value};

/// The periods the picker offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Period {
    Today,
    Yesterday,
    Last7,
    Last30,
    ThisMonth,
    LastMonth,
    Last12Months,
    All,
    /// Two local dates, `YYYY-MM-DD`, the first not after the second.
    Custom(String, String),
}

impl Period {
    pub const PRESETS: [Period; 8] = [
        Period::Today,
        Period::Yesterday,
        Period::Last7,
        Period::Last30,
        Period::ThisMonth,
        Period::LastMonth,
        Period::Last12Months,
        Period::All,
    ];

    fn key(&self) -> &'static str {
        match self {
            Period::Today => "day",
            Period::Yesterday => "yesterday",
            Period::Last7 => "7d",
            Period::Last30 => "30d",
            Period::ThisMonth => "month",
            Period::LastMonth => "last_month",
            Period::Last12Months => "12mo",
            Period::All => "all",
            Period::Custom(..) => "custom",
        }
    }

    pub fn label(&self) -> String {
        match self {
            Period::Today => "Today".into(),
            Period::Yesterday => "Yesterday".into(),
            Period::Last7 => "Last 7 days".into(),
            Period::Last30 => "Last 30 days".into(),
            Period::ThisMonth => "This month".into(),
            Period::LastMonth => "Last month".into(),
            Period::Last12Months => "Last 12 months".into(),
            Period::All => "All time".into(),
            Period::Custom(a, b) if a == b => a.clone(),
            Period::Custom(a, b) => format!("{a} to {b}"),
        }
    }

    /// The keyboard shortcut Plausible gives it.
    pub fn shortcut(&self) -> Option<&'static str> {
        Some(match self {
            Period::Today => "d",
            Period::Yesterday => "e",
            Period::Last7 => "w",
            Period::Last30 => "t",
            Period::ThisMonth => "m",
            Period::Last12Months => "y",
            Period::All => "a",
            _ => return None,
        })
    }

    /// The Stats API's `date_range`, for a site whose local date today is `today`. The
    /// rolling periods end today (the API's `7d`, `30d` and `12mo` end yesterday, as
    /// Plausible's do): an owner who just sent an event sees it.
    fn date_range(&self, today: jiff::civil::Date) -> Value {
        let d = |d: jiff::civil::Date| d.to_string();
        let back = |days: i32| {
            today
                .checked_sub(jiff::Span::new().days(days))
                .unwrap_or(today)
        };
        match self {
            Period::Today => json!("day"),
            Period::Yesterday => {
                let y = today.yesterday().unwrap_or(today);
                json!([d(y), d(y)])
            }
            Period::Last7 => json!([d(back(6)), d(today)]),
            Period::Last30 => json!([d(back(29)), d(today)]),
            Period::ThisMonth => json!("month"),
            Period::LastMonth => {
                let first = today.first_of_month();
                let last = first.yesterday().unwrap_or(first);
                json!([d(last.first_of_month()), d(last)])
            }
            Period::Last12Months => {
                let first = today
                    .first_of_month()
                    .checked_sub(jiff::Span::new().months(11))
                    .unwrap_or(today);
                json!([d(first), d(today)])
            }
            Period::All => json!("all"),
            Period::Custom(a, b) => json!([a, b]),
        }
    }

    /// The chart's interval when none is chosen: as the API's `time` picks it.
    fn auto_interval(&self) -> Interval {
        match self {
            Period::Today | Period::Yesterday => Interval::Hour,
            Period::Last12Months | Period::All => Interval::Month,
            Period::Custom(a, b) => {
                let days = match (
                    a.parse::<jiff::civil::Date>(),
                    b.parse::<jiff::civil::Date>(),
                ) {
                    (Ok(a), Ok(b)) => (b - a).get_days() + 1,
                    _ => 31,
                };
                match days {
                    ..=1 => Interval::Hour,
                    2..=92 => Interval::Day,
                    93..=400 => Interval::Week,
                    _ => Interval::Month,
                }
            }
            _ => Interval::Day,
        }
    }
}

/// The chart's bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interval {
    Hour,
    Day,
    Week,
    Month,
}

impl Interval {
    pub const ALL: [Interval; 4] = [
        Interval::Hour,
        Interval::Day,
        Interval::Week,
        Interval::Month,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Interval::Hour => "hour",
            Interval::Day => "day",
            Interval::Week => "week",
            Interval::Month => "month",
        }
    }

    fn parse(s: &str) -> Option<Interval> {
        Interval::ALL.into_iter().find(|i| i.key() == s)
    }
}

/// The comparison of the top figures and the chart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    PreviousPeriod,
    YearOverYear,
}

impl Compare {
    pub fn key(self) -> &'static str {
        match self {
            Compare::PreviousPeriod => "previous_period",
            Compare::YearOverYear => "year_over_year",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Compare::PreviousPeriod => "Previous period",
            Compare::YearOverYear => "Year over year",
        }
    }
}

/// The top figures, in the order shown; the chart draws one of them.
pub const METRICS: [(&str, &str); 7] = [
    ("visitors", "Unique visitors"),
    ("visits", "Visits"),
    ("pageviews", "Pageviews"),
    ("views_per_visit", "Views per visit"),
    ("bounce_rate", "Bounce rate"),
    ("visit_duration", "Visit duration"),
    ("users", "Identified users"),
];

/// The filter operators the filter menu offers (the API has more: `matches`, …).
pub const OPERATORS: [(&str, &str); 4] = [
    ("is", "is"),
    ("is_not", "is not"),
    ("contains", "contains"),
    ("contains_not", "does not contain"),
];

/// One filter: `[op, dimension, [value]]` of the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    pub op: String,
    pub dimension: String,
    pub value: String,
}

impl Filter {
    /// As written in the URL: `op|dimension|value` (a value may hold `|`).
    fn encode(&self) -> String {
        format!("{}|{}|{}", self.op, self.dimension, self.value)
    }

    fn decode(s: &str) -> Option<Filter> {
        let mut parts = s.splitn(3, '|');
        let (op, dimension, value) = (parts.next()?, parts.next()?, parts.next()?);
        OPERATORS.iter().any(|(o, _)| *o == op).then(|| Filter {
            op: op.into(),
            dimension: dimension.into(),
            value: value.into(),
        })
    }

    pub fn op_label(&self) -> &'static str {
        OPERATORS
            .iter()
            .find(|(o, _)| *o == self.op)
            .map_or("is", |(_, l)| l)
    }
}

/// The most filters a view holds (the API allows 20 leaves).
pub const MAX_FILTERS: usize = 10;

/// Everything a dashboard view is.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    pub period: Period,
    pub compare: Option<Compare>,
    pub metric: String,
    pub interval: Option<Interval>,
    pub filters: Vec<Filter>,
    /// Each card's tab (`sources=referrer`), in the order read.
    pub tabs: Vec<(String, String)>,
}

impl Default for View {
    fn default() -> Self {
        View {
            period: Period::Last30,
            compare: None,
            metric: "visitors".into(),
            interval: None,
            filters: Vec::new(),
            tabs: Vec::new(),
        }
    }
}

/// The query parameters that belong to the view (a details page or an export adds its
/// own after them).
const CARD_KEYS: [&str; 6] = ["sources", "pages", "places", "devices", "events", "prop"];

impl View {
    /// The view a query string describes; what it does not say (or says wrong) is the
    /// default.
    pub fn parse(query: &str) -> View {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).unwrap_or_default();
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        let mut v = View::default();
        let date = |s: Option<&str>| {
            s.filter(|d| d.parse::<jiff::civil::Date>().is_ok())
                .map(str::to_string)
        };
        v.period = match get("period") {
            Some("custom") => match (date(get("from")), date(get("to"))) {
                (Some(a), Some(b)) if a <= b => Period::Custom(a, b),
                (Some(a), Some(b)) => Period::Custom(b, a),
                _ => Period::Last30,
            },
            Some(k) => Period::PRESETS
                .iter()
                .find(|p| p.key() == k)
                .cloned()
                .unwrap_or(Period::Last30),
            None => Period::Last30,
        };
        v.compare = match get("compare") {
            Some("previous_period") => Some(Compare::PreviousPeriod),
            Some("year_over_year") => Some(Compare::YearOverYear),
            _ => None,
        };
        if let Some(m) = get("metric").filter(|m| METRICS.iter().any(|(k, _)| k == m)) {
            v.metric = m.to_string();
        }
        v.interval = get("interval").and_then(Interval::parse);
        v.filters = pairs
            .iter()
            .filter(|(k, _)| k == "f")
            .filter_map(|(_, f)| Filter::decode(f))
            .take(MAX_FILTERS)
            .collect();
        v.tabs = pairs
            .iter()
            .filter(|(k, _)| CARD_KEYS.contains(&k.as_str()))
            .map(|(k, t)| (k.clone(), t.clone()))
            .collect();
        v
    }

    /// The chosen tab of a card, if any.
    pub fn tab(&self, card: &str) -> Option<&str> {
        self.tabs
            .iter()
            .rev()
            .find(|(k, _)| k == card)
            .map(|(_, t)| t.as_str())
    }

    /// The interval the chart uses: the chosen one, else the period's.
    pub fn interval(&self) -> Interval {
        self.interval.unwrap_or_else(|| self.period.auto_interval())
    }

    /// The query string of this view (no leading `?`), without defaults.
    pub fn query(&self) -> String {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        if self.period != Period::Last30 {
            pairs.push(("period", self.period.key().into()));
            if let Period::Custom(a, b) = &self.period {
                pairs.push(("from", a.clone()));
                pairs.push(("to", b.clone()));
            }
        }
        if let Some(c) = self.compare {
            pairs.push(("compare", c.key().into()));
        }
        if self.metric != "visitors" {
            pairs.push(("metric", self.metric.clone()));
        }
        if let Some(i) = self.interval {
            pairs.push(("interval", i.key().into()));
        }
        for f in &self.filters {
            pairs.push(("f", f.encode()));
        }
        for (k, t) in &self.tabs {
            pairs.push((k.as_str(), t.clone()));
        }
        serde_urlencoded::to_string(&pairs).unwrap_or_default()
    }

    /// A link to `path` with this view changed by `change`.
    pub fn href(&self, path: &str, change: impl FnOnce(&mut View)) -> String {
        let mut v = self.clone();
        change(&mut v);
        let q = v.query();
        if q.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{q}")
        }
    }

    /// The view with one more filter (`is`, from a click on a row); a filter on the same
    /// dimension and operator is replaced.
    pub fn with_filter(&self, dimension: &str, value: &str) -> View {
        let mut v = self.clone();
        v.filters
            .retain(|f| !(f.dimension == dimension && f.op == "is"));
        v.filters.push(Filter {
            op: "is".into(),
            dimension: dimension.into(),
            value: value.into(),
        });
        v.filters.truncate(MAX_FILTERS);
        v
    }

    /// The API's `filters` of this view, and `extra` leaves after them.
    fn api_filters(&self, extra: &[Value]) -> Value {
        let mut all: Vec<Value> = self
            .filters
            .iter()
            .map(|f| json!([f.op, f.dimension, [f.value]]))
            .collect();
        all.extend(extra.iter().cloned());
        Value::Array(all)
    }

    /// A Stats API request of this view's site, period and filters.
    pub fn request(&self, site: &Site, today: jiff::civil::Date, q: Query<'_>) -> Value {
        let mut r = json!({
            "site_id": site.site_id,
            "metrics": q.metrics,
            "date_range": self.period.date_range(today),
            "filters": self.api_filters(q.extra_filters),
        });
        if !q.dimensions.is_empty() {
            r["dimensions"] = json!(q.dimensions);
        }
        if let Some(order) = q.order_by {
            r["order_by"] = json!([order]);
        }
        let mut include = serde_json::Map::new();
        if q.time_labels {
            include.insert("time_labels".into(), json!(true));
        }
        if q.total_rows {
            include.insert("total_rows".into(), json!(true));
        }
        if let (true, Some(c)) = (q.compare, self.compare) {
            include.insert("comparisons".into(), json!({"mode": c.key()}));
        }
        if !include.is_empty() {
            r["include"] = Value::Object(include);
        }
        if let Some((limit, offset)) = q.page {
            r["pagination"] = json!({"limit": limit, "offset": offset});
        }
        r
    }
}

/// What one of the dashboard's requests asks, beyond the view.
#[derive(Clone, Copy, Default)]
pub struct Query<'a> {
    pub metrics: &'a [&'a str],
    pub dimensions: &'a [&'a str],
    pub extra_filters: &'a [Value],
    pub order_by: Option<[&'a str; 2]>,
    pub time_labels: bool,
    pub total_rows: bool,
    /// Whether to ask for the view's comparison.
    pub compare: bool,
    /// `(limit, offset)`.
    pub page: Option<(u64, u64)>,
}

/// The date today in the site's time zone.
pub fn today_in(site: &Site) -> jiff::civil::Date {
    let tz = jiff::tz::TimeZone::get(site.time_zone()).unwrap_or(jiff::tz::TimeZone::UTC);
    jiff::Timestamp::now().to_zoned(tz).date()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_round_trips_through_its_query_string() {
        let q = "period=custom&from=2026-03-01&to=2026-03-31&compare=year_over_year&metric=pageviews\
                 &interval=week&f=is%7Cvisit%3Acountry%7CDE&f=contains%7Cevent%3Apage%7C%2Fblog%7Cx&sources=referrer";
        let v = View::parse(q);
        assert_eq!(
            v.period,
            Period::Custom("2026-03-01".into(), "2026-03-31".into())
        );
        assert_eq!(v.compare, Some(Compare::YearOverYear));
        assert_eq!(
            (v.metric.as_str(), v.interval),
            ("pageviews", Some(Interval::Week))
        );
        assert_eq!(
            v.filters[1].value, "/blog|x",
            "a value may hold the separator"
        );
        assert_eq!(v.tab("sources"), Some("referrer"));
        assert_eq!(View::parse(&v.query()), v);
        assert_eq!(View::default().query(), "");
    }

    #[test]
    fn what_the_url_says_wrong_is_the_default() {
        let v = View::parse("period=fortnight&metric=%3Cscript%3E&f=drop%7Ca%7Cb&interval=year");
        assert_eq!(v, View::default());
        assert_eq!(
            View::parse("period=custom&from=2026-13-01&to=x").period,
            Period::Last30
        );
        let many: String = (0..30)
            .map(|i| format!("f=is%7Cevent%3Apage%7C{i}&"))
            .collect();
        assert_eq!(View::parse(&many).filters.len(), MAX_FILTERS);
    }

    #[test]
    fn a_click_adds_a_filter_and_replaces_one_on_the_same_dimension() {
        let v = View::default()
            .with_filter("visit:country", "DE")
            .with_filter("visit:browser", "Chrome")
            .with_filter("visit:country", "FR");
        let dims: Vec<(&str, &str)> = v
            .filters
            .iter()
            .map(|f| (f.dimension.as_str(), f.value.as_str()))
            .collect();
        assert_eq!(dims, [("visit:browser", "Chrome"), ("visit:country", "FR")]);
    }

    #[test]
    fn the_request_is_the_apis() {
        let site = Site {
            site_id: 4,
            ..Site::default()
        };
        let today: jiff::civil::Date = "2026-03-15".parse().unwrap();
        let v = View::parse(
            "period=last_month&compare=previous_period&f=is_not%7Cvisit%3Adevice%7CMobile",
        );
        let r = v.request(
            &site,
            today,
            Query {
                metrics: &["visitors"],
                dimensions: &["time:day"],
                time_labels: true,
                compare: true,
                ..Query::default()
            },
        );
        assert_eq!(
            r,
            json!({"site_id": 4, "metrics": ["visitors"], "date_range": ["2026-02-01", "2026-02-28"],
                   "filters": [["is_not", "visit:device", ["Mobile"]]], "dimensions": ["time:day"],
                   "include": {"time_labels": true, "comparisons": {"mode": "previous_period"}}})
        );
    }
}
