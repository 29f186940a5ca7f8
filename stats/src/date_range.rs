//! Date ranges: what the request says (`"7d"`, two dates, two datetimes), resolved in
//! the site's IANA time zone into an interval of UTC seconds; the comparison periods; and
//! the labels of time buckets.
//!
//! Days, weeks and months are local: a day is from one local midnight to the next (23 or
//! 25 hours across a DST change; where midnight does not exist, from the first instant of
//! the day). The resolved interval is half-open, `[start, end)`, in epoch seconds.
//! ClickHouse buckets rows with the same time zone (`toStartOfHour(timestamp, tz)` …),
//! so the labels made here are the ones its rows carry.

use crate::dimensions::Bucket;
use crate::error::StatsError;
use crate::limits::MAX_TIME_BUCKETS;
use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use serde_json::Value;

/// The latest second a ClickHouse `DateTime` holds (2106-02-07T06:28:15Z).
const DATETIME_MAX: i64 = u32::MAX as i64;

const ALLOWED_RANGES: &str = "give \"day\", \"7d\", \"30d\" (any \"<n>d\" up to 5000), \
     \"month\", \"6mo\", \"12mo\" (any \"<n>mo\" up to 100), \"year\", \"all\", two dates \
     [\"2024-01-01\", \"2024-01-31\"] or two datetimes with offsets \
     [\"2024-01-01T00:00:00+01:00\", \"2024-01-01T12:00:00+01:00\"], the first not after \
     the second, between 1970 and 2105";

/// A site's time zone: an IANA name and its rules.
#[derive(Debug, Clone)]
pub struct Zone {
    name: String,
    tz: TimeZone,
}

impl Zone {
    /// An IANA time zone name (`Europe/Berlin`, `UTC`). The name is also written into the
    /// SQL (quoted), so only the characters of IANA names are accepted.
    pub fn new(name: &str) -> Result<Zone, StatsError> {
        let plausible_name = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-' | b'+'));
        let tz = TimeZone::get(name)
            .ok()
            .filter(|_| plausible_name)
            .ok_or_else(|| {
                StatsError::SiteContext(format!(
                    "the site's time zone {name:?} is not an IANA time zone name"
                ))
            })?;
        Ok(Zone {
            name: name.to_string(),
            tz,
        })
    }

    pub fn utc() -> Zone {
        Zone::new("UTC").expect("UTC is a time zone")
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The local date at an instant.
    pub fn date_of(&self, second: i64) -> Date {
        timestamp(second).to_zoned(self.tz.clone()).date()
    }

    /// The first instant of a local date.
    pub fn start_of(&self, date: Date) -> Result<i64, StatsError> {
        date.to_zoned(self.tz.clone())
            .and_then(|z| z.start_of_day())
            .map(|z| z.timestamp().as_second())
            .map_err(|_| out_of_range("date_range", &date.to_string()))
    }

    /// An instant as ISO 8601 with the local offset: `2024-03-31T02:00:00+02:00`.
    pub fn iso(&self, second: i64) -> String {
        timestamp(second)
            .to_zoned(self.tz.clone())
            .strftime("%Y-%m-%dT%H:%M:%S%:z")
            .to_string()
    }

    /// The local offset at an instant, in seconds.
    fn offset_at(&self, second: i64) -> i64 {
        i64::from(self.tz.to_offset(timestamp(second)).seconds())
    }
}

fn timestamp(second: i64) -> Timestamp {
    Timestamp::from_second(second.clamp(0, DATETIME_MAX)).expect("within jiff's range")
}

/// A date range as the request gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DateRangeInput {
    /// Today.
    Day,
    /// The `n` whole days before today (today left out).
    LastDays(u32),
    /// This calendar month, all of it.
    Month,
    /// The `n` whole calendar months before this one.
    LastMonths(u32),
    /// This calendar year, all of it.
    Year,
    /// From the local date of the site's first event to today.
    All,
    /// Two local dates, both included.
    Dates(Date, Date),
    /// Two instants, both included (to the second).
    Instants(i64, i64),
}

impl DateRangeInput {
    pub fn parse(value: &Value, field: &str) -> Result<DateRangeInput, StatsError> {
        let bad = || StatsError::InvalidDateRange {
            field: field.to_string(),
            value: value.to_string(),
            allowed: ALLOWED_RANGES,
        };
        match value {
            Value::String(s) => match s.as_str() {
                "day" => Ok(DateRangeInput::Day),
                "month" => Ok(DateRangeInput::Month),
                "year" => Ok(DateRangeInput::Year),
                "all" => Ok(DateRangeInput::All),
                s => {
                    let count = |digits: &str, max: u32| {
                        (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                            .then(|| digits.parse::<u32>().ok())
                            .flatten()
                            .filter(|n| (1..=max).contains(n))
                    };
                    if let Some(n) = s.strip_suffix("mo").and_then(|d| count(d, 100)) {
                        Ok(DateRangeInput::LastMonths(n))
                    } else if let Some(n) = s.strip_suffix('d').and_then(|d| count(d, 5000)) {
                        Ok(DateRangeInput::LastDays(n))
                    } else {
                        Err(bad())
                    }
                }
            },
            Value::Array(pair) if pair.len() == 2 => {
                let (Some(a), Some(b)) = (pair[0].as_str(), pair[1].as_str()) else {
                    return Err(bad());
                };
                if let (Some(a), Some(b)) = (parse_date(a), parse_date(b)) {
                    return if a <= b {
                        Ok(DateRangeInput::Dates(a, b))
                    } else {
                        Err(bad())
                    };
                }
                match (parse_instant(a), parse_instant(b)) {
                    (Some(a), Some(b)) if a <= b => Ok(DateRangeInput::Instants(a, b)),
                    _ => Err(bad()),
                }
            }
            _ => Err(bad()),
        }
    }

    /// Whether resolving it needs the site's first event.
    pub fn needs_first_event(&self) -> bool {
        *self == DateRangeInput::All
    }
}

/// `YYYY-MM-DD`, nothing else.
fn parse_date(s: &str) -> Option<Date> {
    let b = s.as_bytes();
    let shape = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
    shape.then(|| s.parse::<Date>().ok()).flatten()
}

/// An RFC 3339 datetime with its offset (or `Z`); a fraction of a second is dropped.
fn parse_instant(s: &str) -> Option<i64> {
    if s.len() < 20 || s.as_bytes().get(10) != Some(&b'T') || s.contains('[') {
        return None;
    }
    s.parse::<Timestamp>().ok().map(|t| t.as_second())
}

/// When the site's first event was, for `"all"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstEvent {
    /// Not looked up: a plan for `"all"` fails (the caller must ask first: see
    /// `Request::needs_first_event`).
    NotLoaded,
    /// The site has no event: `"all"` is today.
    NoEvents,
    /// Epoch seconds of the earliest event.
    At(i64),
}

/// A resolved range: `[start, end)` in epoch seconds, and its first and last local dates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    pub start: i64,
    /// Exclusive.
    pub end: i64,
    pub first_date: Date,
    /// The local date of the range's last second.
    pub last_date: Date,
    /// Whole local days (every input but two datetimes).
    pub whole_days: bool,
}

impl TimeRange {
    fn days(zone: &Zone, first: Date, last: Date) -> Result<TimeRange, StatsError> {
        let start = zone.start_of(first)?;
        let end = zone.start_of(
            last.tomorrow()
                .map_err(|_| out_of_range("date_range", ""))?,
        )?;
        TimeRange::checked(zone, start, end, true)
    }

    fn instants(zone: &Zone, start: i64, end: i64) -> Result<TimeRange, StatsError> {
        TimeRange::checked(zone, start, end, false)
    }

    fn checked(
        zone: &Zone,
        start: i64,
        end: i64,
        whole_days: bool,
    ) -> Result<TimeRange, StatsError> {
        if start < 0 || end > DATETIME_MAX + 1 || end <= start {
            return Err(out_of_range("date_range", &format!("{start}..{end}")));
        }
        Ok(TimeRange {
            start,
            end,
            first_date: zone.date_of(start),
            last_date: zone.date_of(end - 1),
            whole_days,
        })
    }

    /// The range as the response echoes it: its first and last second, local.
    pub fn echo(&self, zone: &Zone) -> [String; 2] {
        [zone.iso(self.start), zone.iso(self.end - 1)]
    }
}

fn out_of_range(field: &str, value: &str) -> StatsError {
    StatsError::InvalidDateRange {
        field: field.to_string(),
        value: value.to_string(),
        allowed: ALLOWED_RANGES,
    }
}

fn shift_date(date: Date, span: jiff::Span) -> Result<Date, StatsError> {
    date.checked_add(span)
        .map_err(|_| out_of_range("date_range", &date.to_string()))
}

/// Resolves a range at `now` (epoch seconds) in the site's time zone.
pub fn resolve(
    input: &DateRangeInput,
    zone: &Zone,
    now: i64,
    first_event: FirstEvent,
) -> Result<TimeRange, StatsError> {
    let today = zone.date_of(now);
    match *input {
        DateRangeInput::Day => TimeRange::days(zone, today, today),
        DateRangeInput::LastDays(n) => TimeRange::days(
            zone,
            shift_date(today, -i64::from(n).days())?,
            shift_date(today, -1.day())?,
        ),
        DateRangeInput::Month => {
            TimeRange::days(zone, today.first_of_month(), today.last_of_month())
        }
        DateRangeInput::LastMonths(n) => TimeRange::days(
            zone,
            shift_date(today.first_of_month(), -i64::from(n).months())?,
            shift_date(today.first_of_month(), -1.day())?,
        ),
        DateRangeInput::Year => TimeRange::days(zone, today.first_of_year(), today.last_of_year()),
        DateRangeInput::All => {
            let first = match first_event {
                FirstEvent::NotLoaded => return Err(StatsError::SiteContext(
                    "date_range \"all\" needs the site's first event (SiteContext::first_event)"
                        .into(),
                )),
                FirstEvent::NoEvents => today,
                FirstEvent::At(t) => zone.date_of(t).min(today),
            };
            TimeRange::days(zone, first, today)
        }
        DateRangeInput::Dates(a, b) => TimeRange::days(zone, a, b),
        DateRangeInput::Instants(a, b) => TimeRange::instants(zone, a, b.saturating_add(1)),
    }
}

/// What a comparison compares with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComparisonMode {
    /// The period of equal length right before.
    PreviousPeriod,
    /// The same local dates (or times) a year earlier.
    YearOverYear,
    /// A range of its own (two dates or two datetimes).
    Custom(DateRangeInput),
}

/// The range a comparison reads. A range of whole days that reaches past today is
/// compared as far as today (Plausible's rule): this month so far with the same number of
/// days before it, or with the same days a year ago.
pub fn comparison_range(
    main: &TimeRange,
    mode: ComparisonMode,
    zone: &Zone,
    now: i64,
) -> Result<TimeRange, StatsError> {
    let field = "include.comparisons";
    let today = zone.date_of(now);
    let last = main.last_date.min(today).max(main.first_date);
    match mode {
        ComparisonMode::PreviousPeriod if main.whole_days => {
            let days = i64::from(
                main.first_date
                    .until(last)
                    .map_err(|_| out_of_range(field, ""))?
                    .get_days(),
            ) + 1;
            TimeRange::days(
                zone,
                shift_date(main.first_date, -days.days())?,
                shift_date(main.first_date, -1.day())?,
            )
        }
        ComparisonMode::PreviousPeriod => {
            let length = main.end - main.start;
            TimeRange::instants(zone, main.start - length, main.start)
        }
        ComparisonMode::YearOverYear if main.whole_days => TimeRange::days(
            zone,
            shift_date(main.first_date, -1.year())?,
            shift_date(last, -1.year())?,
        ),
        ComparisonMode::YearOverYear => {
            let back = |second: i64| -> Result<i64, StatsError> {
                timestamp(second)
                    .to_zoned(zone.tz.clone())
                    .checked_sub(1.year())
                    .map(|z| z.timestamp().as_second())
                    .map_err(|_| out_of_range(field, ""))
            };
            TimeRange::instants(zone, back(main.start)?, back(main.end)?)
        }
        ComparisonMode::Custom(input) => resolve(&input, zone, now, FirstEvent::NoEvents),
    }
}

/// The bucket `time` stands for, by the range's number of local days: hours for one
/// day, days up to 31, weeks up to 92, months beyond.
pub fn auto_bucket(range: &TimeRange) -> Bucket {
    let days = range
        .first_date
        .until(range.last_date)
        .map(|s| i64::from(s.get_days()) + 1)
        .unwrap_or(i64::MAX);
    match days {
        ..=1 => Bucket::Hour,
        2..=31 => Bucket::Day,
        32..=92 => Bucket::Week,
        _ => Bucket::Month,
    }
}

/// Every bucket's label, in order: `2024-03-31 02:00:00` (hour, local), `2024-03-31`
/// (day), the week's Monday or the range's first date if later, the month's first day.
/// Local hours that repeat (the hour DST gives back) are one bucket; skipped ones none.
pub fn labels(range: &TimeRange, bucket: Bucket, zone: &Zone) -> Result<Vec<String>, StatsError> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |label: String| -> Result<(), StatsError> {
        if out.last() != Some(&label) {
            if out.len() == MAX_TIME_BUCKETS {
                return Err(StatsError::TooLarge {
                    field: "dimensions".into(),
                    what: "the number of time buckets (choose a larger bucket or a shorter date_range)",
                    actual: MAX_TIME_BUCKETS as u64 + 1,
                    max: MAX_TIME_BUCKETS as u64,
                });
            }
            out.push(label);
        }
        Ok(())
    };
    let date = |d: Date| d.strftime("%Y-%m-%d").to_string();
    match bucket {
        Bucket::Hour => {
            // The local hour's first instant: local time floored to the hour, less the
            // offset. Next hour: an hour later in UTC.
            let local = range.start + zone.offset_at(range.start);
            let mut t = local - local.rem_euclid(3600) - zone.offset_at(range.start);
            while t < range.end {
                let label = timestamp(t)
                    .to_zoned(zone.tz.clone())
                    .strftime("%Y-%m-%d %H:00:00")
                    .to_string();
                push(label)?;
                t += 3600;
            }
        }
        Bucket::Day => {
            let mut d = range.first_date;
            while d <= range.last_date {
                push(date(d))?;
                d = shift_date(d, 1.day())?;
            }
        }
        Bucket::Week => {
            push(date(range.first_date))?;
            let mut d = range
                .first_date
                .nth_weekday(1, Weekday::Monday)
                .map_err(|_| out_of_range("date_range", ""))?;
            while d <= range.last_date {
                push(date(d))?;
                d = shift_date(d, 1.week())?;
            }
        }
        Bucket::Month => {
            let mut d = range.first_date.first_of_month();
            while d <= range.last_date {
                push(date(d))?;
                d = shift_date(d, 1.month())?;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;
    use serde_json::json;

    fn at(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap().as_second()
    }

    fn zone(name: &str) -> Zone {
        Zone::new(name).unwrap()
    }

    fn range(input: Value, tz: &str, now: &str) -> TimeRange {
        let input = DateRangeInput::parse(&input, "date_range").unwrap();
        resolve(&input, &zone(tz), at(now), FirstEvent::NoEvents).unwrap()
    }

    fn echo(input: Value, tz: &str, now: &str) -> [String; 2] {
        range(input, tz, now).echo(&zone(tz))
    }

    #[test]
    fn named_ranges_in_utc() {
        let now = "2024-03-15T10:00:00Z";
        assert_eq!(
            echo(json!("day"), "UTC", now),
            ["2024-03-15T00:00:00+00:00", "2024-03-15T23:59:59+00:00"]
        );
        assert_eq!(
            echo(json!("7d"), "UTC", now),
            ["2024-03-08T00:00:00+00:00", "2024-03-14T23:59:59+00:00"]
        );
        assert_eq!(
            echo(json!("30d"), "UTC", now),
            ["2024-02-14T00:00:00+00:00", "2024-03-14T23:59:59+00:00"]
        );
        assert_eq!(
            echo(json!("month"), "UTC", now),
            ["2024-03-01T00:00:00+00:00", "2024-03-31T23:59:59+00:00"]
        );
        assert_eq!(
            echo(json!("6mo"), "UTC", now),
            ["2023-09-01T00:00:00+00:00", "2024-02-29T23:59:59+00:00"]
        );
        assert_eq!(
            echo(json!("12mo"), "UTC", now),
            ["2023-03-01T00:00:00+00:00", "2024-02-29T23:59:59+00:00"]
        );
        assert_eq!(
            echo(json!("year"), "UTC", now),
            ["2024-01-01T00:00:00+00:00", "2024-12-31T23:59:59+00:00"]
        );
        assert_eq!(
            echo(json!(["2024-01-01", "2024-01-31"]), "UTC", now),
            ["2024-01-01T00:00:00+00:00", "2024-01-31T23:59:59+00:00"]
        );
        assert_eq!(
            echo(
                json!(["2024-01-01T10:00:00+03:00", "2024-01-01T12:30:00Z"]),
                "UTC",
                now
            ),
            ["2024-01-01T07:00:00+00:00", "2024-01-01T12:30:00+00:00"]
        );
    }

    #[test]
    fn today_is_the_site_s_local_date() {
        // 23:30 UTC on the 15th is already the 16th in Berlin, still the 15th in New York.
        let now = "2024-03-15T23:30:00Z";
        assert_eq!(
            range(json!("day"), "Europe/Berlin", now).first_date,
            date(2024, 3, 16)
        );
        assert_eq!(
            range(json!("day"), "America/New_York", now).first_date,
            date(2024, 3, 15)
        );
    }

    #[test]
    fn days_across_dst_in_berlin() {
        // Spring forward, 2024-03-31: 02:00 CET becomes 03:00 CEST; the day has 23 hours.
        let r = range(
            json!(["2024-03-31", "2024-03-31"]),
            "Europe/Berlin",
            "2024-06-01T00:00:00Z",
        );
        assert_eq!(r.start, at("2024-03-30T23:00:00Z"));
        assert_eq!(r.end, at("2024-03-31T22:00:00Z"));
        assert_eq!(r.end - r.start, 23 * 3600);
        assert_eq!(
            r.echo(&zone("Europe/Berlin")),
            ["2024-03-31T00:00:00+01:00", "2024-03-31T23:59:59+02:00"]
        );
        // Fall back, 2024-10-27: 25 hours.
        let r = range(
            json!(["2024-10-27", "2024-10-27"]),
            "Europe/Berlin",
            "2024-12-01T00:00:00Z",
        );
        assert_eq!(r.end - r.start, 25 * 3600);
        assert_eq!(r.start, at("2024-10-26T22:00:00Z"));
    }

    #[test]
    fn days_across_dst_in_new_york() {
        // 2024-03-10: 02:00 EST becomes 03:00 EDT.
        let r = range(
            json!(["2024-03-09", "2024-03-10"]),
            "America/New_York",
            "2024-06-01T00:00:00Z",
        );
        assert_eq!(r.start, at("2024-03-09T05:00:00Z"));
        assert_eq!(r.end, at("2024-03-11T04:00:00Z"));
        assert_eq!(r.end - r.start, 47 * 3600);
        assert_eq!(
            r.echo(&zone("America/New_York")),
            ["2024-03-09T00:00:00-05:00", "2024-03-10T23:59:59-04:00"]
        );
        // "7d" ending the day after the change.
        let r = range(json!("7d"), "America/New_York", "2024-03-11T15:00:00Z");
        assert_eq!(
            (r.first_date, r.last_date),
            (date(2024, 3, 4), date(2024, 3, 10))
        );
        assert_eq!(r.end - r.start, 7 * 86400 - 3600);
    }

    #[test]
    fn a_midnight_that_does_not_exist_starts_the_day_at_its_first_instant() {
        // America/Santiago, 2022-09-11: clocks went from 00:00 to 01:00.
        let r = range(
            json!(["2022-09-11", "2022-09-11"]),
            "America/Santiago",
            "2023-01-01T00:00:00Z",
        );
        assert_eq!(
            zone("America/Santiago").iso(r.start),
            "2022-09-11T01:00:00-03:00"
        );
        assert_eq!(r.end - r.start, 23 * 3600);
    }

    #[test]
    fn all_runs_from_the_first_event() {
        let input = DateRangeInput::parse(&json!("all"), "date_range").unwrap();
        assert!(input.needs_first_event());
        let z = zone("Europe/Berlin");
        let now = at("2024-03-15T12:00:00Z");
        let r = resolve(&input, &z, now, FirstEvent::At(at("2023-12-31T23:30:00Z"))).unwrap();
        assert_eq!(
            (r.first_date, r.last_date),
            (date(2024, 1, 1), date(2024, 3, 15))
        );
        let r = resolve(&input, &z, now, FirstEvent::NoEvents).unwrap();
        assert_eq!(
            (r.first_date, r.last_date),
            (date(2024, 3, 15), date(2024, 3, 15))
        );
        assert!(matches!(
            resolve(&input, &z, now, FirstEvent::NotLoaded),
            Err(StatsError::SiteContext(_))
        ));
    }

    #[test]
    fn malformed_ranges_are_refused() {
        for bad in [
            json!("week"),
            json!("0d"),
            json!("5001d"),
            json!("7 d"),
            json!("+7d"),
            json!("101mo"),
            json!("d"),
            json!(["2024-01-31", "2024-01-01"]),
            json!(["2024-1-1", "2024-01-31"]),
            json!(["2024-02-30", "2024-03-01"]),
            json!(["2024-01-01", "2024-01-02T00:00:00Z"]),
            json!(["2024-01-01T00:00:00", "2024-01-02T00:00:00"]),
            json!(["2024-01-02T00:00:00Z", "2024-01-01T00:00:00Z"]),
            json!(["2024-01-01"]),
            json!(["2024-01-01", "2024-01-02", "2024-01-03"]),
            json!([1, 2]),
            json!(7),
            json!(null),
        ] {
            match DateRangeInput::parse(&bad, "date_range") {
                Err(StatsError::InvalidDateRange { field, allowed, .. }) => {
                    assert_eq!(field, "date_range");
                    assert_eq!(allowed, ALLOWED_RANGES);
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        // Before 1970 or past DateTime's end: resolving refuses it.
        for out in [
            json!(["1969-12-31", "1970-01-02"]),
            json!(["2106-02-01", "2106-03-01"]),
        ] {
            let input = DateRangeInput::parse(&out, "date_range").unwrap();
            assert!(
                resolve(&input, &zone("UTC"), 0, FirstEvent::NoEvents).is_err(),
                "{out}"
            );
        }
    }

    #[test]
    fn time_zone_names_are_checked() {
        assert_eq!(zone("Europe/Berlin").name(), "Europe/Berlin");
        assert_eq!(Zone::utc().name(), "UTC");
        for bad in [
            "",
            "Mars/Olympus",
            "Europe/Berlin'",
            "../etc/passwd",
            "UTC; DROP",
        ] {
            assert!(
                matches!(Zone::new(bad), Err(StatsError::SiteContext(_))),
                "{bad}"
            );
        }
    }

    fn cmp(input: Value, mode: ComparisonMode, tz: &str, now: &str) -> [String; 2] {
        let z = zone(tz);
        let main = range(input, tz, now);
        comparison_range(&main, mode, &z, at(now)).unwrap().echo(&z)
    }

    #[test]
    fn previous_period_is_the_same_length_right_before() {
        let now = "2024-03-15T10:00:00Z";
        assert_eq!(
            cmp(json!("7d"), ComparisonMode::PreviousPeriod, "UTC", now),
            ["2024-03-01T00:00:00+00:00", "2024-03-07T23:59:59+00:00"]
        );
        assert_eq!(
            cmp(json!("day"), ComparisonMode::PreviousPeriod, "UTC", now),
            ["2024-03-14T00:00:00+00:00", "2024-03-14T23:59:59+00:00"]
        );
        // This month so far (15 days) against the 15 days before it.
        assert_eq!(
            cmp(json!("month"), ComparisonMode::PreviousPeriod, "UTC", now),
            ["2024-02-15T00:00:00+00:00", "2024-02-29T23:59:59+00:00"]
        );
        // Local days: across the Berlin spring-forward, the previous 2 days.
        assert_eq!(
            cmp(
                json!(["2024-04-01", "2024-04-02"]),
                ComparisonMode::PreviousPeriod,
                "Europe/Berlin",
                "2024-06-01T00:00:00Z"
            ),
            ["2024-03-30T00:00:00+01:00", "2024-03-31T23:59:59+02:00"]
        );
        // A range wholly after today compares as far as its first day.
        assert_eq!(
            cmp(
                json!(["2024-04-01", "2024-04-02"]),
                ComparisonMode::PreviousPeriod,
                "UTC",
                now
            ),
            ["2024-03-31T00:00:00+00:00", "2024-03-31T23:59:59+00:00"]
        );
        // Two datetimes: the same number of seconds before.
        assert_eq!(
            cmp(
                json!(["2024-01-01T10:00:00Z", "2024-01-01T11:59:59Z"]),
                ComparisonMode::PreviousPeriod,
                "UTC",
                now
            ),
            ["2024-01-01T08:00:00+00:00", "2024-01-01T09:59:59+00:00"]
        );
    }

    #[test]
    fn year_over_year_is_the_same_local_range_a_year_earlier() {
        let now = "2024-03-15T10:00:00Z";
        assert_eq!(
            cmp(json!("month"), ComparisonMode::YearOverYear, "UTC", now),
            ["2023-03-01T00:00:00+00:00", "2023-03-15T23:59:59+00:00"]
        );
        // A leap day has no twin: the 28th.
        assert_eq!(
            cmp(
                json!(["2024-02-01", "2024-02-29"]),
                ComparisonMode::YearOverYear,
                "UTC",
                now
            ),
            ["2023-02-01T00:00:00+00:00", "2023-02-28T23:59:59+00:00"]
        );
        // Local: the Berlin day after 2023's change (2023-03-26) is a summer-time day.
        assert_eq!(
            cmp(
                json!(["2024-03-27", "2024-03-27"]),
                ComparisonMode::YearOverYear,
                "Europe/Berlin",
                "2024-06-01T00:00:00Z"
            ),
            ["2023-03-27T00:00:00+02:00", "2023-03-27T23:59:59+02:00"]
        );
        // Datetimes keep their local wall time: 10:00 New York in summer 2024 → 10:00 in
        // summer 2023.
        assert_eq!(
            cmp(
                json!(["2024-07-01T10:00:00-04:00", "2024-07-01T11:00:00-04:00"]),
                ComparisonMode::YearOverYear,
                "America/New_York",
                now
            ),
            ["2023-07-01T10:00:00-04:00", "2023-07-01T11:00:00-04:00"]
        );
        let custom = DateRangeInput::parse(&json!(["2023-01-01", "2023-01-07"]), "x").unwrap();
        assert_eq!(
            cmp(json!("7d"), ComparisonMode::Custom(custom), "UTC", now),
            ["2023-01-01T00:00:00+00:00", "2023-01-07T23:59:59+00:00"]
        );
    }

    #[test]
    fn time_picks_its_bucket_from_the_length() {
        let now = "2024-03-15T10:00:00Z";
        let bucket = |v: Value| auto_bucket(&range(v, "UTC", now));
        assert_eq!(bucket(json!("day")), Bucket::Hour);
        assert_eq!(
            bucket(json!(["2024-01-01T00:00:00Z", "2024-01-01T05:00:00Z"])),
            Bucket::Hour
        );
        assert_eq!(bucket(json!("7d")), Bucket::Day);
        assert_eq!(bucket(json!("30d")), Bucket::Day);
        assert_eq!(bucket(json!("month")), Bucket::Day);
        assert_eq!(bucket(json!(["2024-01-01", "2024-01-31"])), Bucket::Day);
        assert_eq!(bucket(json!(["2024-01-01", "2024-02-01"])), Bucket::Week);
        assert_eq!(bucket(json!("91d")), Bucket::Week);
        assert_eq!(bucket(json!("6mo")), Bucket::Month);
        assert_eq!(bucket(json!("year")), Bucket::Month);
    }

    #[test]
    fn hour_labels_across_dst() {
        let z = zone("Europe/Berlin");
        let spring = range(
            json!(["2024-03-31", "2024-03-31"]),
            "Europe/Berlin",
            "2024-06-01T00:00:00Z",
        );
        let l = labels(&spring, Bucket::Hour, &z).unwrap();
        assert_eq!(l.len(), 23);
        assert_eq!(
            &l[..3],
            [
                "2024-03-31 00:00:00",
                "2024-03-31 01:00:00",
                "2024-03-31 03:00:00"
            ]
        );
        let fall = range(
            json!(["2024-10-27", "2024-10-27"]),
            "Europe/Berlin",
            "2024-12-01T00:00:00Z",
        );
        let l = labels(&fall, Bucket::Hour, &z).unwrap();
        // 25 hours, the repeated 02:00 one bucket.
        assert_eq!(l.len(), 24);
        assert_eq!(
            &l[1..4],
            [
                "2024-10-27 01:00:00",
                "2024-10-27 02:00:00",
                "2024-10-27 03:00:00"
            ]
        );
        let ny = range(
            json!(["2024-03-10", "2024-03-10"]),
            "America/New_York",
            "2024-06-01T00:00:00Z",
        );
        let l = labels(&ny, Bucket::Hour, &zone("America/New_York")).unwrap();
        assert_eq!(l.len(), 23);
        assert!(!l.contains(&"2024-03-10 02:00:00".to_string()));
        // A range of datetimes starts with the hour it starts in; half-hour offsets too.
        let r = range(
            json!(["2024-01-01T10:20:00+05:30", "2024-01-01T11:10:00+05:30"]),
            "Asia/Kolkata",
            "2024-06-01T00:00:00Z",
        );
        assert_eq!(
            labels(&r, Bucket::Hour, &zone("Asia/Kolkata")).unwrap(),
            ["2024-01-01 10:00:00", "2024-01-01 11:00:00"]
        );
    }

    #[test]
    fn day_week_and_month_labels() {
        let z = zone("UTC");
        let r = range(
            json!(["2024-01-03", "2024-02-05"]),
            "UTC",
            "2024-06-01T00:00:00Z",
        );
        let days = labels(&r, Bucket::Day, &z).unwrap();
        assert_eq!(days.len(), 34);
        assert_eq!(
            (days[0].as_str(), days[33].as_str()),
            ("2024-01-03", "2024-02-05")
        );
        // 2024-01-03 is a Wednesday: its week is labelled by the range's first date.
        assert_eq!(
            labels(&r, Bucket::Week, &z).unwrap(),
            [
                "2024-01-03",
                "2024-01-08",
                "2024-01-15",
                "2024-01-22",
                "2024-01-29",
                "2024-02-05"
            ]
        );
        assert_eq!(
            labels(&r, Bucket::Month, &z).unwrap(),
            ["2024-01-01", "2024-02-01"]
        );
        let monday = range(
            json!(["2024-01-08", "2024-01-14"]),
            "UTC",
            "2024-06-01T00:00:00Z",
        );
        assert_eq!(labels(&monday, Bucket::Week, &z).unwrap(), ["2024-01-08"]);
    }

    #[test]
    fn too_many_buckets_is_an_error() {
        let r = range(
            json!(["2020-01-01", "2024-01-01"]),
            "UTC",
            "2024-06-01T00:00:00Z",
        );
        assert!(matches!(
            labels(&r, Bucket::Hour, &Zone::utc()),
            Err(StatsError::TooLarge { field, max, .. }) if field == "dimensions" && max == MAX_TIME_BUCKETS as u64
        ));
        assert_eq!(labels(&r, Bucket::Day, &Zone::utc()).unwrap().len(), 1462);
    }
}
