//! The events that move through Rivulet.
//!
//! `TrackEvent` is a validated tracking event as a client sent it (spec §2.1). `RawEvent`
//! is what ingest publishes to Kafka: the validated fields plus what the server decided
//! (`event_id`, times, the client IP and user agent chosen by the rules, the key's id).

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
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

/// A tracking event that passed validation, its strings borrowed from the request body
/// where they were. The API key is not part of it: it is checked and dropped at the door.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackEvent<'a> {
    pub site_id: u32,
    pub event_type: EventType,
    pub event_name: Option<Cow<'a, str>>,
    pub properties: Option<Cow<'a, str>>,
    pub pathname: Option<Cow<'a, str>>,
    pub hostname: Option<Cow<'a, str>>,
    pub querystring: Option<Cow<'a, str>>,
    pub page_title: Option<Cow<'a, str>>,
    pub referrer: Option<Cow<'a, str>>,
    pub user_id: Option<Cow<'a, str>>,
    pub user_agent: Option<Cow<'a, str>>,
    /// Normalised (`2001:0db8::0001` → `2001:db8::1`).
    pub ip_address: Option<String>,
    pub language: Option<Cow<'a, str>>,
    pub screen_width: Option<u16>,
    pub screen_height: Option<u16>,
    pub event_id: Option<Uuid>,
    /// Client-supplied event time, epoch milliseconds, already checked to be well-formed.
    pub timestamp_ms: Option<i64>,
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
