//! The `events` row, and the step that turns a raw event into one.

use crate::channel;
use crate::device::DeviceParser;
use crate::geo::GeoDb;
use crate::identity;
use crate::session::SessionTracker;
use clickhouse::Row;
use rivulet_common::event::RawEvent;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One row of `rivulet.events`; field names are the column names.
#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct EventRow {
    #[serde(with = "clickhouse::serde::uuid")]
    pub event_id: Uuid,
    pub site_id: u32,
    /// Epoch seconds (DateTime).
    pub timestamp: u32,
    pub received_at: u32,
    #[serde(rename = "type")]
    pub event_type: String,
    pub event_name: String,
    pub properties: String,
    pub hostname: String,
    pub pathname: String,
    pub querystring: String,
    pub page_title: String,
    pub referrer: String,
    pub channel: String,
    pub user_id: String,
    pub session_id: String,
    pub language: String,
    pub screen_width: u16,
    pub screen_height: u16,
    pub country: String,
    pub region: String,
    pub city: String,
    pub lat: f64,
    pub lon: f64,
    pub browser: String,
    pub browser_version: String,
    pub operating_system: String,
    pub operating_system_version: String,
    pub device_type: String,
    pub is_bot: u8,
    pub ip: String,
}

impl EventRow {
    /// Rough size in bytes, for the batch's byte bound.
    pub fn approx_bytes(&self) -> usize {
        150 + self.properties.len()
            + self.pathname.len()
            + self.querystring.len()
            + self.page_title.len()
            + self.referrer.len()
            + self.user_id.len()
            + self.hostname.len()
            + self.event_name.len()
    }
}

/// What enrichment needs, built once at startup.
pub struct Enrichers {
    pub geo: GeoDb,
    pub device: DeviceParser,
    pub visitor_secret: Vec<u8>,
    pub store_ip: bool,
}

fn secs(ms: i64) -> u32 {
    u32::try_from(ms.div_euclid(1000)).unwrap_or(0)
}

impl Enrichers {
    pub fn enrich(&self, raw: RawEvent, sessions: &mut SessionTracker) -> EventRow {
        let geo = raw
            .ip
            .parse()
            .map(|ip| self.geo.lookup(ip))
            .unwrap_or_default();
        let device = self.device.parse(&raw.user_agent, raw.screen_width);
        let channel = channel::classify(
            raw.referrer.as_deref(),
            raw.hostname.as_deref(),
            raw.querystring.as_deref(),
        );
        let day = (raw.timestamp.div_euclid(86_400_000)) as u32;
        let visitor = identity::visitor_id(
            &self.visitor_secret,
            day,
            raw.site_id,
            &raw.ip,
            &raw.user_agent,
        );
        let user_id = match raw.user_id {
            Some(u) if !u.is_empty() => u,
            _ => visitor,
        };
        let session_id = sessions.observe(raw.site_id, &user_id, raw.timestamp);
        EventRow {
            event_id: raw.event_id,
            site_id: raw.site_id,
            timestamp: secs(raw.timestamp),
            received_at: secs(raw.received_at),
            event_type: raw.event_type.as_str().to_string(),
            event_name: raw.event_name.unwrap_or_default(),
            properties: raw.properties.unwrap_or_default(),
            hostname: raw.hostname.unwrap_or_default(),
            pathname: raw.pathname.unwrap_or_default(),
            querystring: raw.querystring.unwrap_or_default(),
            page_title: raw.page_title.unwrap_or_default(),
            referrer: raw.referrer.unwrap_or_default(),
            channel: channel.as_str().to_string(),
            user_id,
            session_id,
            language: raw.language.unwrap_or_default(),
            screen_width: raw.screen_width.unwrap_or(0),
            screen_height: raw.screen_height.unwrap_or(0),
            country: geo.country,
            region: geo.region,
            city: geo.city,
            lat: geo.lat,
            lon: geo.lon,
            browser: device.browser,
            browser_version: device.browser_version,
            operating_system: device.operating_system,
            operating_system_version: device.operating_system_version,
            device_type: device.device_type,
            is_bot: u8::from(device.is_bot),
            ip: if self.store_ip { raw.ip } else { String::new() },
        }
    }
}
