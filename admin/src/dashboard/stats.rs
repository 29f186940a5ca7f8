//! What a site's Overview shows, read from ClickHouse `events`: the last 24 hours by
//! hour, the top pages, countries, browsers, devices, custom events, event types, channels
//! and referrers, and the latest events. Shared by the Overview page and `GET /api/sites/{id}/overview`.
//!
//! The statements are `schema::queries::OVERVIEW_*`: they count with
//! `uniqExact(event_id)`, so an unmerged duplicate counts once (on a cluster too: every
//! copy of an event is on one shard). Bots are left out of every count (they are stored
//! and flagged) but shown in the latest events.

use crate::error::AdminError;
use crate::output::rfc3339;
use clickhouse::{Row, RowOwned, RowRead};
use rivulet_common::ch::Db;
use rivulet_common::schema::queries;
use rivulet_common::CommonError;
use serde::{Deserialize, Serialize, Serializer};

pub const HOURS: u32 = 24;

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
    /// Events by type: whatever types occur (pageview, custom_event, performance, …).
    pub event_types: Vec<Count>,
    /// Sources: the enricher's channel (Direct, Organic Search, …) and the referring sites.
    pub channels: Vec<Count>,
    pub referrers: Vec<Count>,
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

pub async fn load(db: &Db, site_id: u32, now: u32) -> Result<Overview, AdminError> {
    let since = window_start(now);
    let all = |sql| fetch_all(db, sql, site_id, since);
    let (
        totals,
        hourly,
        top_pages,
        countries,
        browsers,
        devices,
        custom_events,
        event_types,
        channels,
        referrers,
        latest_events,
    ) = tokio::try_join!(
        fetch_one(db, queries::OVERVIEW_TOTALS, site_id, since),
        fetch_all(db, queries::OVERVIEW_HOURLY, site_id, since),
        all(queries::OVERVIEW_TOP_PAGES),
        all(queries::OVERVIEW_COUNTRIES),
        all(queries::OVERVIEW_BROWSERS),
        all(queries::OVERVIEW_DEVICES),
        all(queries::OVERVIEW_CUSTOM_EVENTS),
        all(queries::OVERVIEW_EVENT_TYPES),
        all(queries::OVERVIEW_CHANNELS),
        all(queries::OVERVIEW_REFERRERS),
        fetch_all(db, queries::OVERVIEW_LATEST, site_id, since),
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
        event_types,
        channels,
        referrers,
        latest_events,
    })
}

/// One Overview statement for a site and window: the one row it answers.
async fn fetch_one<T>(db: &Db, sql: &str, site_id: u32, since: u32) -> Result<T, CommonError>
where
    T: RowOwned + RowRead,
{
    Ok(db
        .client
        .query(sql)
        .bind(site_id)
        .bind(since)
        .fetch_one()
        .await?)
}

/// One Overview statement for a site and window: every row it answers.
async fn fetch_all<T>(db: &Db, sql: &str, site_id: u32, since: u32) -> Result<Vec<T>, CommonError>
where
    T: RowOwned + RowRead,
{
    Ok(db
        .client
        .query(sql)
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
