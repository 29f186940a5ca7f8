//! Times as Rivulet stores and prints them: milliseconds or seconds since the Unix epoch
//! (UTC), written as RFC 3339. One definition of each, so that every crate reads the
//! clock and writes a date the same way.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// The time now, in epoch milliseconds (0 before 1970, which a working clock never is).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// An epoch second as RFC 3339 in UTC (`2026-11-20T08:00:00Z`). `None` for a second RFC
/// 3339 cannot write (before year 0 or after 9999): no date rather than a wrapped one.
pub fn rfc3339(epoch_secs: i64) -> Option<String> {
    OffsetDateTime::from_unix_timestamp(epoch_secs)
        .ok()?
        .format(&Rfc3339)
        .ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm);
/// negative before 1970. `month` is 1 to 12, `day` 1 to 31; other values are not checked.
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_after_2020_in_milliseconds() {
        assert!(now_ms() > 1_577_836_800_000);
    }

    #[test]
    fn seconds_are_written_as_rfc3339_or_not_at_all() {
        assert_eq!(rfc3339(0).as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(
            rfc3339(1_795_132_800).as_deref(),
            Some("2026-11-20T00:00:00Z")
        );
        assert_eq!(rfc3339(-1).as_deref(), Some("1969-12-31T23:59:59Z"));
        assert_eq!(
            rfc3339(253_402_300_799).as_deref(),
            Some("9999-12-31T23:59:59Z")
        );
        assert_eq!(rfc3339(253_402_300_800), None);
        assert_eq!(rfc3339(i64::MIN), None);
    }

    #[test]
    fn days_are_counted_from_1970() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2024, 3, 1) * 86_400, 1_709_251_200);
        assert_eq!(days_from_civil(0, 1, 1), -719_528);
    }
}
