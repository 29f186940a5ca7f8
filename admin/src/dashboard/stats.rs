//! What a site's Overview shows, read from ClickHouse `events`: the last 24 hours by
//! hour, the top pages, countries, browsers, devices and custom events, and the latest
//! events. Shared by the Overview page and `GET /api/sites/{id}/overview`.
//!
//! The SQL runs on ClickHouse 18.16 as well as current servers. Rows are counted with
//! `uniqExact(event_id)`, not `count()`: `events` is a ReplacingMergeTree, and until a
//! background merge removes them a redelivered event is there twice. Bots are left out
//! of every count (they are stored and flagged, DESIGN.md) but shown in the latest events.

use crate::error::AdminError;
use crate::output::rfc3339;
use clickhouse::Row;
use rivulet_common::registry::Registry;
use rivulet_common::CommonError;
use serde::{Deserialize, Serialize, Serializer};

pub const HOURS: u32 = 24;
const TOP_N: u32 = 10;
const LATEST_N: u32 = 20;

#[derive(Debug, Serialize)]
pub struct Overview {
    pub site_id: u32,
    /// Start of the first hour shown; the window runs from here to now.
    #[serde(serialize_with = "as_rfc3339")]
    pub since: u32,
    pub totals: Totals,
    pub hourly: Vec<Hour>,
    pub top_pages: Vec<Count>,
    pub countries: Vec<Count>,
    pub browsers: Vec<Count>,
    pub devices: Vec<Count>,
    pub custom_events: Vec<Count>,
    pub latest_events: Vec<LatestEvent>,
}

#[derive(Debug, Default, Row, Serialize, Deserialize)]
pub struct Totals {
    pub pageviews: u64,
    pub visitors: u64,
    pub custom_events: u64,
}

#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct Hour {
    #[serde(serialize_with = "as_rfc3339")]
    pub hour: u32,
    pub pageviews: u64,
    pub visitors: u64,
}

/// One row of a breakdown: the value (empty when unknown), its events and visitors.
#[derive(Debug, Row, Serialize, Deserialize)]
pub struct Count {
    pub label: String,
    pub events: u64,
    pub visitors: u64,
}

#[derive(Debug, Row, Serialize, Deserialize)]
pub struct LatestEvent {
    #[serde(serialize_with = "as_rfc3339")]
    pub timestamp: u32,
    #[serde(rename = "type")]
    pub event_type: String,
    pub event_name: String,
    pub hostname: String,
    pub pathname: String,
    pub country: String,
    pub city: String,
    pub browser: String,
    pub operating_system: String,
    pub device_type: String,
    pub is_bot: u8,
}

fn as_rfc3339<S: Serializer>(epoch: &u32, s: S) -> Result<S::Ok, S::Error> {
    rfc3339(*epoch).serialize(s)
}

/// The events the counts are made of: this site, the window, no bots.
const COUNTED: &str = "site_id = ? AND timestamp >= toDateTime(?) AND is_bot = 0";

/// A breakdown: which column, which events, and what ranks the rows.
struct Breakdown {
    column: &'static str,
    only_type: Option<&'static str>,
    rank_by: &'static str,
}

const PAGES: Breakdown = Breakdown {
    column: "pathname",
    only_type: Some("pageview"),
    rank_by: "events",
};
const COUNTRIES: Breakdown = Breakdown {
    column: "country",
    only_type: None,
    rank_by: "visitors",
};
const BROWSERS: Breakdown = Breakdown {
    column: "browser",
    only_type: None,
    rank_by: "visitors",
};
const DEVICES: Breakdown = Breakdown {
    column: "device_type",
    only_type: None,
    rank_by: "visitors",
};
const CUSTOM_EVENTS: Breakdown = Breakdown {
    column: "event_name",
    only_type: Some("custom_event"),
    rank_by: "events",
};

pub fn now_secs() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

/// The first hour of the window: the current hour and the 23 before it, in UTC.
pub fn window_start(now: u32) -> u32 {
    now / 3600 * 3600 - (HOURS - 1) * 3600
}

pub async fn load(reg: &Registry, site_id: u32, now: u32) -> Result<Overview, AdminError> {
    let since = window_start(now);
    let (totals, hourly, top_pages, countries, browsers, devices, custom_events, latest_events) = tokio::try_join!(
        totals(reg, site_id, since),
        hourly(reg, site_id, since),
        breakdown(reg, site_id, since, &PAGES),
        breakdown(reg, site_id, since, &COUNTRIES),
        breakdown(reg, site_id, since, &BROWSERS),
        breakdown(reg, site_id, since, &DEVICES),
        breakdown(reg, site_id, since, &CUSTOM_EVENTS),
        latest(reg, site_id, since),
    )?;
    Ok(Overview {
        site_id,
        since,
        totals,
        hourly: fill_hours(since, hourly),
        top_pages,
        countries,
        browsers,
        devices,
        custom_events,
        latest_events,
    })
}

async fn totals(reg: &Registry, site_id: u32, since: u32) -> Result<Totals, CommonError> {
    let sql = format!(
        "SELECT uniqExactIf(event_id, type = 'pageview') AS pageviews, uniqExact(user_id) AS visitors, \
         uniqExactIf(event_id, type = 'custom_event') AS custom_events FROM events WHERE {COUNTED}"
    );
    Ok(reg
        .db()
        .client
        .query(&sql)
        .bind(site_id)
        .bind(since)
        .fetch_one()
        .await?)
}

/// Pageviews and visitors (anyone with a non-bot event) per UTC hour, for hours that
/// have events; `fill_hours` adds the empty ones.
async fn hourly(reg: &Registry, site_id: u32, since: u32) -> Result<Vec<Hour>, CommonError> {
    let sql = format!(
        "SELECT toUInt32(intDiv(toUInt32(timestamp), 3600) * 3600) AS hour, \
         uniqExactIf(event_id, type = 'pageview') AS pageviews, uniqExact(user_id) AS visitors \
         FROM events WHERE {COUNTED} GROUP BY hour ORDER BY hour"
    );
    Ok(reg
        .db()
        .client
        .query(&sql)
        .bind(site_id)
        .bind(since)
        .fetch_all()
        .await?)
}

async fn breakdown(
    reg: &Registry,
    site_id: u32,
    since: u32,
    b: &Breakdown,
) -> Result<Vec<Count>, CommonError> {
    let only_type = b
        .only_type
        .map(|t| format!(" AND type = '{t}'"))
        .unwrap_or_default();
    let sql = format!(
        "SELECT {col} AS label, uniqExact(event_id) AS events, uniqExact(user_id) AS visitors \
         FROM events WHERE {COUNTED}{only_type} GROUP BY label ORDER BY {rank} DESC, label LIMIT {TOP_N}",
        col = b.column,
        rank = b.rank_by,
    );
    Ok(reg
        .db()
        .client
        .query(&sql)
        .bind(site_id)
        .bind(since)
        .fetch_all()
        .await?)
}

/// The newest events, bots included; `LIMIT 1 BY event_id` hides unmerged duplicates.
async fn latest(reg: &Registry, site_id: u32, since: u32) -> Result<Vec<LatestEvent>, CommonError> {
    let sql = format!(
        "SELECT toUInt32(timestamp) AS ts, type, event_name, hostname, pathname, country, city, \
         browser, operating_system, device_type, is_bot FROM events \
         WHERE site_id = ? AND timestamp >= toDateTime(?) \
         ORDER BY timestamp DESC, event_id LIMIT 1 BY event_id LIMIT {LATEST_N}"
    );
    Ok(reg
        .db()
        .client
        .query(&sql)
        .bind(site_id)
        .bind(since)
        .fetch_all()
        .await?)
}

/// One entry per hour of the window, zero where ClickHouse had no rows.
pub fn fill_hours(since: u32, rows: Vec<Hour>) -> Vec<Hour> {
    (0..HOURS)
        .map(|i| {
            let hour = since + i * 3600;
            rows.iter()
                .find(|r| r.hour == hour)
                .cloned()
                .unwrap_or(Hour {
                    hour,
                    pageviews: 0,
                    visitors: 0,
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_the_current_hour_and_the_23_before() {
        let now = 1_700_000_000; // 22:13:20 UTC
        let since = window_start(now);
        assert_eq!(since % 3600, 0);
        assert_eq!(now - since, 23 * 3600 + 13 * 60 + 20);
    }

    #[test]
    fn missing_hours_are_zero() {
        let since = 1_699_920_000;
        let rows = vec![Hour {
            hour: since + 2 * 3600,
            pageviews: 5,
            visitors: 2,
        }];
        let filled = fill_hours(since, rows);
        assert_eq!(filled.len(), 24);
        assert_eq!(filled[2].pageviews, 5);
        assert_eq!(filled[0].pageviews + filled[23].visitors, 0);
        assert_eq!(filled[23].hour, since + 23 * 3600);
    }
}
