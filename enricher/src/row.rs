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
#[derive(Debug, Clone, Default, PartialEq, Row, Serialize, Deserialize)]
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

/// The columns `write_row_binary` writes, in its order.
pub const COLUMNS: &str =
    "event_id, site_id, timestamp, received_at, type, event_name, properties, \
hostname, pathname, querystring, page_title, referrer, channel, user_id, session_id, language, \
screen_width, screen_height, country, region, city, lat, lon, browser, browser_version, \
operating_system, operating_system_version, device_type, is_bot, ip";

impl EventRow {
    /// Appends the row in ClickHouse's RowBinary format, columns as in [`COLUMNS`].
    ///
    /// A batch keeps its rows encoded (about a third of the memory of the structs, and
    /// ready to resend unchanged when an insert is retried).
    pub fn write_row_binary(&self, out: &mut Vec<u8>) {
        // UUID: the high then the low 64 bits, each little-endian (as the clickhouse crate).
        let (high, low) = self.event_id.as_u64_pair();
        out.extend_from_slice(&high.to_le_bytes());
        out.extend_from_slice(&low.to_le_bytes());
        out.extend_from_slice(&self.site_id.to_le_bytes());
        out.extend_from_slice(&self.timestamp.to_le_bytes());
        out.extend_from_slice(&self.received_at.to_le_bytes());
        for s in [
            &self.event_type,
            &self.event_name,
            &self.properties,
            &self.hostname,
            &self.pathname,
            &self.querystring,
            &self.page_title,
            &self.referrer,
            &self.channel,
            &self.user_id,
            &self.session_id,
            &self.language,
        ] {
            put_string(out, s);
        }
        out.extend_from_slice(&self.screen_width.to_le_bytes());
        out.extend_from_slice(&self.screen_height.to_le_bytes());
        put_string(out, &self.country);
        put_string(out, &self.region);
        put_string(out, &self.city);
        out.extend_from_slice(&self.lat.to_le_bytes());
        out.extend_from_slice(&self.lon.to_le_bytes());
        for s in [
            &self.browser,
            &self.browser_version,
            &self.operating_system,
            &self.operating_system_version,
            &self.device_type,
        ] {
            put_string(out, s);
        }
        out.push(self.is_bot);
        put_string(out, &self.ip);
    }
}

/// RowBinary `String`: the length as unsigned LEB128, then the bytes.
fn put_string(out: &mut Vec<u8>, s: &str) {
    let mut n = s.len() as u64;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(s.as_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_lengths_are_leb128() {
        let mut out = Vec::new();
        put_string(&mut out, "");
        assert_eq!(out, [0]);
        out.clear();
        put_string(&mut out, &"a".repeat(127));
        assert_eq!(out[0], 127);
        assert_eq!(out.len(), 128);
        out.clear();
        put_string(&mut out, &"a".repeat(300));
        // 300 = 0b10_0101100: low seven bits with the continuation bit, then 2.
        assert_eq!(&out[..2], &[0xac, 0x02]);
        assert_eq!(out.len(), 302);
    }

    #[test]
    fn columns_match_the_struct() {
        // Serde's field order is the struct's; COLUMNS must list the same names in it.
        let row = EventRow {
            event_id: Uuid::nil(),
            site_id: 0,
            timestamp: 0,
            received_at: 0,
            event_type: String::new(),
            event_name: String::new(),
            properties: String::new(),
            hostname: String::new(),
            pathname: String::new(),
            querystring: String::new(),
            page_title: String::new(),
            referrer: String::new(),
            channel: String::new(),
            user_id: String::new(),
            session_id: String::new(),
            language: String::new(),
            screen_width: 0,
            screen_height: 0,
            country: String::new(),
            region: String::new(),
            city: String::new(),
            lat: 0.0,
            lon: 0.0,
            browser: String::new(),
            browser_version: String::new(),
            operating_system: String::new(),
            operating_system_version: String::new(),
            device_type: String::new(),
            is_bot: 0,
            ip: String::new(),
        };
        let json = serde_json::to_string(&row).unwrap();
        let names: Vec<String> =
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&json)
                .map(|m| m.keys().cloned().collect())
                .unwrap();
        let listed: Vec<&str> = COLUMNS.split(',').map(str::trim).collect();
        let mut sorted_listed = listed.clone();
        sorted_listed.sort_unstable();
        let mut sorted_names: Vec<&str> = names.iter().map(String::as_str).collect();
        sorted_names.sort_unstable();
        assert_eq!(sorted_listed, sorted_names);
        // Fixed-size part of an all-empty row: 16 + 3×4 + 12 strings + 2×2 + 3 strings + 2×8 + 5 strings + 1 + 1 string.
        let mut out = Vec::new();
        row.write_row_binary(&mut out);
        assert_eq!(out.len(), 16 + 12 + 12 + 4 + 3 + 16 + 5 + 1 + 1);
    }
}
