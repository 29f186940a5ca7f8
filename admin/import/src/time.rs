//! Timestamps: RFC 3339 and the ISO 8601 shapes the sources write, to epoch milliseconds.
//!
//! `YYYY-MM-DD` then `T`, `t` or a space, then `HH:MM[:SS[.fraction]]`, then an optional
//! zone: `Z`, `z`, `±HH:MM`, `±HHMM` or `±HH`. Without a zone the time is UTC (Umami's
//! `created_at` is written so). Fractions beyond milliseconds are truncated. A leap
//! second (`:60`) is read as the next second, as most systems store it.

use rivulet_common::epoch::days_from_civil;

/// Parses a date and time; the error says what is wrong with it.
pub(crate) fn parse(s: &str) -> Result<i64, String> {
    parse_inner(s.as_bytes()).map_err(|why| format!("{s:?} is not a date and time: {why}"))
}

/// Epoch milliseconds written as digits (the rivulet format's other timestamp form).
pub(crate) fn parse_epoch_ms(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || digits.len() > 15 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn digits(&mut self, n: usize, what: &str) -> Result<i64, String> {
        let end = self.at + n;
        match self.s.get(self.at..end) {
            Some(d) if d.iter().all(u8::is_ascii_digit) => {
                self.at = end;
                Ok(d.iter().fold(0, |v, &b| v * 10 + i64::from(b - b'0')))
            }
            _ => Err(format!("expected {n} digits of the {what}")),
        }
    }

    fn byte(&mut self, expected: &[u8], what: &str) -> Result<u8, String> {
        match self.s.get(self.at) {
            Some(b) if expected.contains(b) => {
                self.at += 1;
                Ok(*b)
            }
            _ => Err(format!("expected {what}")),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }
}

fn parse_inner(s: &[u8]) -> Result<i64, String> {
    let mut c = Cursor { s, at: 0 };
    let year = c.digits(4, "year")?;
    c.byte(b"-", "'-' after the year")?;
    let month = c.digits(2, "month")?;
    c.byte(b"-", "'-' after the month")?;
    let day = c.digits(2, "day")?;
    c.byte(b"Tt ", "'T' or a space after the date")?;
    let hour = c.digits(2, "hour")?;
    c.byte(b":", "':' after the hour")?;
    let minute = c.digits(2, "minute")?;
    let mut second = 0;
    let mut millis = 0;
    if c.peek() == Some(b':') {
        c.at += 1;
        second = c.digits(2, "second")?;
        if matches!(c.peek(), Some(b'.' | b',')) {
            c.at += 1;
            let start = c.at;
            while c.peek().is_some_and(|b| b.is_ascii_digit()) {
                if c.at - start < 3 {
                    millis = millis * 10 + i64::from(s[c.at] - b'0');
                }
                c.at += 1;
            }
            let n = c.at - start;
            if n == 0 {
                return Err("expected digits after the decimal point".into());
            }
            for _ in n..3 {
                millis *= 10;
            }
        }
    }
    let offset_minutes = match c.peek() {
        None => 0,
        Some(b'Z' | b'z') => {
            c.at += 1;
            0
        }
        Some(sign @ (b'+' | b'-')) => {
            c.at += 1;
            let h = c.digits(2, "zone's hours")?;
            let m = match c.peek() {
                Some(b':') => {
                    c.at += 1;
                    c.digits(2, "zone's minutes")?
                }
                Some(b'0'..=b'9') => c.digits(2, "zone's minutes")?,
                _ => 0,
            };
            if h > 23 || m > 59 {
                return Err(format!("the zone offset {h:02}:{m:02} is out of range"));
            }
            let total = h * 60 + m;
            if sign == b'-' {
                -total
            } else {
                total
            }
        }
        Some(_) => return Err("expected 'Z', an offset like +01:00, or the end".into()),
    };
    if c.at != s.len() {
        return Err("unexpected text after the time".into());
    }
    if !(1..=12).contains(&month) {
        return Err(format!("month {month} does not exist"));
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err(format!("{year:04}-{month:02} has no day {day}"));
    }
    if hour > 23 || minute > 59 || second > 60 {
        return Err(format!(
            "{hour:02}:{minute:02}:{second:02} is not a time of day"
        ));
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    Ok(seconds * 1_000 + millis)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Epoch milliseconds as an RFC 3339 UTC time, for messages: any year (a negative one
/// with its sign), milliseconds only when there are some.
pub(crate) fn format_ms(ms: i64) -> String {
    let (secs, millis) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, s) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    let year = if year < 0 {
        format!("-{:04}", -year)
    } else {
        format!("{year:04}")
    };
    let fraction = if millis == 0 {
        String::new()
    } else {
        format!(".{millis:03}")
    };
    format!(
        "{year}-{month:02}-{day:02}T{:02}:{:02}:{:02}{fraction}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// The proleptic Gregorian date of a day since 1970-01-01 (the inverse of
/// [`days_from_civil`], Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_the_sources_write() {
        let t = 1_795_600_800_000; // 2026-11-25T10:00:00Z
        for s in [
            "2026-11-25T10:00:00Z",
            "2026-11-25t10:00:00z",
            "2026-11-25 10:00:00",
            "2026-11-25 10:00",
            "2026-11-25T10:00:00.000Z",
            "2026-11-25T10:00:00.000000+00:00",
            "2026-11-25 10:00:00.000000+00:00",
            "2026-11-25T11:00:00+01:00",
            "2026-11-25T11:00:00+0100",
            "2026-11-25T11:00:00+01",
            "2026-11-25T05:30:00-04:30",
        ] {
            assert_eq!(parse(s), Ok(t), "{s}");
        }
        assert_eq!(parse("2026-11-25T10:00:00.5Z"), Ok(t + 500));
        assert_eq!(parse("2026-11-25T10:00:00.123999Z"), Ok(t + 123));
        assert_eq!(parse("2026-11-25T10:00:00,25Z"), Ok(t + 250));
        assert_eq!(parse("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse("1969-12-31T23:59:59.999Z"), Ok(-1));
        assert_eq!(parse("2000-02-29T00:00:00Z"), Ok(951_782_400_000));
        assert_eq!(parse("1900-01-01T00:00:00Z"), Ok(-2_208_988_800_000));
        assert_eq!(parse("2016-12-31T23:59:60Z"), Ok(1_483_228_800_000));
    }

    #[test]
    fn what_is_wrong_is_said() {
        let cases = [
            ("", "expected 4 digits of the year"),
            ("2026-13-01T00:00:00Z", "month 13 does not exist"),
            ("2026-02-29T00:00:00Z", "2026-02 has no day 29"),
            ("1900-02-29T00:00:00Z", "1900-02 has no day 29"),
            ("2026-11-25", "expected 'T' or a space after the date"),
            ("2026-11-25T24:00:00Z", "24:00:00 is not a time of day"),
            (
                "2026-11-25T10:00:00.Z",
                "expected digits after the decimal point",
            ),
            (
                "2026-11-25T10:00:00 UTC",
                "expected 'Z', an offset like +01:00, or the end",
            ),
            ("2026-11-25T10:00:00Zx", "unexpected text after the time"),
            (
                "2026-11-25T10:00:00+25:00",
                "the zone offset 25:00 is out of range",
            ),
            ("1795600800000", "expected '-' after the year"),
            (
                "2026-11-25T10:00:00+1",
                "expected 2 digits of the zone's hours",
            ),
        ];
        for (s, why) in cases {
            assert_eq!(
                parse(s),
                Err(format!("{s:?} is not a date and time: {why}")),
                "{s}"
            );
        }
    }

    #[test]
    fn epoch_milliseconds() {
        assert_eq!(parse_epoch_ms("1795600800000"), Some(1_795_600_800_000));
        assert_eq!(parse_epoch_ms("-5"), Some(-5));
        for s in ["", "-", "1.5", "1e3", "+5", "9999999999999999", " 1"] {
            assert_eq!(parse_epoch_ms(s), None, "{s}");
        }
    }

    #[test]
    fn days_match_a_day_by_day_count() {
        let mut days = days_from_civil(1600, 1, 1);
        for year in 1600..2500 {
            for month in 1..=12 {
                for day in 1..=days_in_month(year, month) {
                    assert_eq!(days_from_civil(year, month, day), days);
                    assert_eq!(civil_from_days(days), (year, month, day));
                    days += 1;
                }
            }
        }
    }

    #[test]
    fn times_are_written_back_as_read() {
        for s in [
            "2026-11-25T10:00:00Z",
            "2026-11-25T10:00:00.500Z",
            "1969-12-31T23:59:59.999Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59Z",
            "2106-02-07T06:28:16Z",
        ] {
            assert_eq!(format_ms(parse(s).unwrap()), s);
        }
        assert_eq!(
            format_ms(parse("0000-01-01T00:00:00Z").unwrap() - 1000),
            "-0001-12-31T23:59:59Z"
        );
    }
}
