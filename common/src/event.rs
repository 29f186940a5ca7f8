//! The event message that moves from ingest to the enricher.
//!
//! `RawEvent` is what ingest publishes to Kafka: a validated tracking event's fields plus
//! what the server decided (`event_id`, times, the client IP and user agent chosen by the
//! rules, the key's id). The enricher reads it back.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Version of the `RawEvent` message format. The enricher sends any other to the DLQ.
pub const RAW_EVENT_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    Pageview,
    CustomEvent,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Pageview => "pageview",
            EventType::CustomEvent => "custom_event",
        }
    }
}

/// The Kafka message value on `events.raw` (JSON, `"v":1`).
///
/// `S` is the type of its strings: `String` to read a message (the default), and
/// borrowed strings where ingest writes one from a request it still holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawEvent<S = String> {
    pub v: u32,
    pub event_id: Uuid,
    pub site_id: u32,
    pub key_id: S,
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// When the event happened (client `timestamp` inside the window, else `received_at`), epoch ms.
    pub timestamp: i64,
    /// When ingest received it, epoch ms.
    pub received_at: i64,
    /// Client IP chosen by the rules: `ip_address`, else the peer, else a trusted proxy's X-Forwarded-For.
    pub ip: S,
    /// `user_agent` when given, else the request's User-Agent header.
    pub user_agent: S,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_name: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pathname: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub querystring: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_title: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub referrer: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen_width: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen_height: Option<u16>,
}

/// Only the version field, read first so that a future format is recognised as such.
#[derive(Deserialize)]
pub struct VersionProbe {
    pub v: Option<u32>,
}
