//! Enrichment: the step that turns a raw event into an `events` row. An imported event
//! may bring values its source already knew (`RawEvent::preset`). Geo and device are
//! derived as for a live event whenever the event has what they come from (an IP, a user
//! agent); the preset's values fill in only where it has not (an export without IPs).
//! The identity of the source (visitor, session, channel) is kept as it was.

use crate::channel;
use crate::device::DeviceParser;
use crate::geo::GeoDb;
use crate::identity;
use crate::session::SessionTracker;
use rivulet_common::event::{Preset, RawEvent};
use rivulet_common::schema::events::{datetime_secs, EventRow};
use std::sync::Arc;

/// What enrichment needs. The rules and the database are shared: a reload
/// (`crate::data`) makes a new `Enrichers` with one of them replaced.
#[derive(Clone)]
pub struct Enrichers {
    pub geo: Arc<GeoDb>,
    pub device: Arc<DeviceParser>,
    pub visitors: Arc<identity::VisitorIds>,
    pub store_ip: bool,
}

fn secs(ms: i64) -> u32 {
    u32::try_from(ms.div_euclid(1000)).unwrap_or(0)
}

impl Enrichers {
    pub fn enrich(&self, mut raw: RawEvent, sessions: &mut SessionTracker) -> EventRow {
        let preset = raw.preset.take().map(|p| *p).unwrap_or_default();
        let geo = raw
            .ip
            .parse()
            .map(|ip| self.geo.lookup(ip))
            .unwrap_or_default();
        let device = self.device.parse(&raw.user_agent, raw.screen_width);
        // The source's channel and visitor, when it knew them; else derived.
        let channel = preset.channel.unwrap_or_else(|| {
            channel::classify(
                raw.referrer.as_deref(),
                raw.hostname.as_deref(),
                raw.querystring.as_deref(),
            )
            .as_str()
            .to_string()
        });
        let (user_id, daily_visitor) = match (raw.user_id, preset.visitor_id) {
            (Some(u), _) if !u.is_empty() => (u, 0),
            (_, Some(v)) if !v.is_empty() => (v, 0),
            _ => (
                self.visitors.id(
                    identity::day_of(raw.timestamp),
                    raw.site_id,
                    &raw.ip,
                    &raw.user_agent,
                ),
                1,
            ),
        };
        let session_id = match preset.session_id {
            Some(s) if !s.is_empty() => s,
            _ => sessions.observe(raw.site_id, &user_id, raw.timestamp),
        };
        let Preset {
            country,
            region,
            city,
            lat,
            lon,
            browser,
            browser_version,
            operating_system,
            operating_system_version,
            device_type,
            is_bot,
            ..
        } = preset;
        // The source's geo only when the event has no IP that locates it; its device only
        // when it has no user agent.
        let geo_known = !geo.country.is_empty();
        let ua_known = !raw.user_agent.is_empty();
        let pick = |derived: String, preset: Option<String>, known: bool| match preset {
            Some(p) if !known => p,
            _ => derived,
        };
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
            channel,
            user_id,
            session_id,
            language: raw.language.unwrap_or_default(),
            screen_width: raw.screen_width.unwrap_or(0),
            screen_height: raw.screen_height.unwrap_or(0),
            lat: if geo_known {
                geo.lat
            } else {
                lat.unwrap_or(geo.lat)
            },
            lon: if geo_known {
                geo.lon
            } else {
                lon.unwrap_or(geo.lon)
            },
            country: pick(geo.country, country, geo_known),
            region: pick(geo.region, region, geo_known),
            city: pick(geo.city, city, geo_known),
            browser: pick(device.browser, browser, ua_known),
            browser_version: pick(device.browser_version, browser_version, ua_known),
            operating_system: pick(device.operating_system, operating_system, ua_known),
            operating_system_version: pick(
                device.operating_system_version,
                operating_system_version,
                ua_known,
            ),
            device_type: pick(device.device_type, device_type, ua_known),
            is_bot: match is_bot {
                Some(b) if !ua_known => b,
                _ => u8::from(device.is_bot),
            },
            ip: if self.store_ip { raw.ip } else { String::new() },
            anonymous_id: raw.anonymous_id.unwrap_or_default(),
            tag: raw.tag.unwrap_or_default(),
            app_version: raw.app_version.unwrap_or_default(),
            device_model: raw.device_model.unwrap_or_default(),
            feature_flags: raw.feature_flags.unwrap_or_default(),
            lcp: raw.vitals.lcp,
            cls: raw.vitals.cls,
            inp: raw.vitals.inp,
            fcp: raw.vitals.fcp,
            ttfb: raw.vitals.ttfb,
            // The client's own times, as sent: for audit (`timestamp` is what ingest made
            // of them).
            client_timestamp: raw.client_timestamp.map(datetime_secs),
            sent_at: raw.sent_at.map(datetime_secs),
            daily_visitor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceParser;
    use std::time::Duration;

    fn enrichers() -> Enrichers {
        let rules = "user_agent_parsers: []\nos_parsers: []\ndevice_parsers: []\n";
        Enrichers {
            geo: Arc::new(GeoDb::disabled()),
            device: Arc::new(DeviceParser::from_yaml_str(rules, 0).unwrap()),
            visitors: Arc::new(identity::VisitorIds::new(vec![7; 32])),
            store_ip: false,
        }
    }

    fn row(message: &str) -> EventRow {
        let raw: RawEvent = serde_json::from_str(message).unwrap();
        let mut sessions = SessionTracker::new(Duration::from_secs(1800));
        enrichers().enrich(raw, &mut sessions)
    }

    /// The client's own times go to `client_timestamp` and `sent_at`, whole seconds; a
    /// message without them (written before they existed) leaves both NULL.
    #[test]
    fn the_clients_times_are_kept_as_sent() {
        let head = r#"{"v":1,"event_id":"0190d6a0-0000-7000-8000-000000000001","site_id":3,"key_id":"key_1","type":"pageview","timestamp":1700000000000,"received_at":1700000000500,"ip":"","user_agent":"""#;
        let r = row(&format!(
            r#"{head},"client_timestamp":1699992800999,"sent_at":1699996400000}}"#
        ));
        assert_eq!(
            (r.timestamp, r.received_at, r.client_timestamp, r.sent_at),
            (
                1_700_000_000,
                1_700_000_000,
                Some(1_699_992_800),
                Some(1_699_996_400)
            )
        );
        let old = row(&format!("{head}}}"));
        assert_eq!((old.client_timestamp, old.sent_at), (None, None));
        // A clock before 1970 or past 2106 is kept at DateTime's bound.
        let r = row(&format!(
            r#"{head},"client_timestamp":-5000,"sent_at":9999999999999}}"#
        ));
        assert_eq!((r.client_timestamp, r.sent_at), (Some(0), Some(u32::MAX)));
    }
}
