//! The event message that moves from ingest to the enricher.
//!
//! `RawEvent` is what ingest publishes to Kafka: a validated tracking event's fields plus
//! what the server decided (`event_id`, times, the client IP and user agent chosen by the
//! rules, the key's id). The enricher reads it back.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Version of the `RawEvent` message format. The enricher sends any other to the DLQ.
pub const RAW_EVENT_VERSION: u32 = 1;

/// The kinds of event are the wire contract's; defined there, with their names, and used
/// here in the message.
pub use crate::contract::EventType;

/// The Kafka message value on `events.raw` (JSON, `"v":1`).
///
/// `S` is the type of its strings: `String` to read a message (the default), and
/// borrowed strings where ingest writes one from a request it still holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RawEvent<S = String> {
    pub v: u32,
    pub event_id: Uuid,
    pub site_id: u32,
    pub key_id: S,
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// When the event happened, epoch ms: the client's `timestamp`, corrected for its clock
    /// by `sent_at` when it sent one, inside the accepted window; else `received_at`
    /// (`contract::event_time`).
    pub timestamp: i64,
    /// When ingest received it, epoch ms.
    pub received_at: i64,
    /// The client's `timestamp` as it sent it, epoch ms, kept for audit; absent when it
    /// sent none. (Added within version 1: a reader that does not know it ignores it.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_timestamp: Option<i64>,
    /// When the client says it sent the event (`sent_at`, its own or its batch's), by its
    /// own clock, epoch ms; absent when it sent none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<i64>,
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
    /// The caller's anonymous (device or cookie) id; an identify may make it a user's alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anonymous_id: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_version: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_model: Option<S>,
    /// A JSON object of strings, as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_flags: Option<S>,
    /// Web vitals of a `performance` event, each ≥ 0.
    #[serde(default, skip_serializing_if = "Vitals::is_empty")]
    pub vitals: Vitals,
    /// Set by `rivulet-admin import` only: what the source already knew of the event's
    /// enrichment, used where the enricher cannot derive a value itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<Box<Preset>>,
}

/// The fields of a [`RawEvent`] whose value its writer works out for itself: ingest from
/// a request and its key, `rivulet-admin import` from an exported event and its format.
#[derive(Debug)]
pub struct Envelope<S> {
    pub event_id: Uuid,
    pub site_id: u32,
    pub key_id: S,
    pub event_type: EventType,
    pub timestamp: i64,
    pub received_at: i64,
    pub client_timestamp: Option<i64>,
    pub sent_at: Option<i64>,
    pub ip: S,
    pub user_agent: S,
}

/// The fields of a [`RawEvent`] that describe the event as its client (or an import's
/// source) gave them, carried into the message unchanged.
#[derive(Debug)]
pub struct Described<S> {
    pub event_name: Option<S>,
    pub properties: Option<S>,
    pub pathname: Option<S>,
    pub hostname: Option<S>,
    pub querystring: Option<S>,
    pub page_title: Option<S>,
    pub referrer: Option<S>,
    pub user_id: Option<S>,
    pub language: Option<S>,
    pub screen_width: Option<u16>,
    pub screen_height: Option<u16>,
    pub anonymous_id: Option<S>,
    pub tag: Option<S>,
    pub app_version: Option<S>,
    pub device_model: Option<S>,
    pub feature_flags: Option<S>,
    pub vitals: Vitals,
}

impl<S> RawEvent<S> {
    /// The message of the current version; `preset` comes from an import only. Ingest and
    /// the import both build their events here, so a new field goes into this literal
    /// and into [`Envelope`] or [`Described`], whose literals then make each writer
    /// supply it.
    pub fn new(envelope: Envelope<S>, described: Described<S>, preset: Option<Preset>) -> Self {
        // Destructured rather than read field by field: a field added to either struct
        // and not placed in the message fails to compile.
        let Envelope {
            event_id,
            site_id,
            key_id,
            event_type,
            timestamp,
            received_at,
            client_timestamp,
            sent_at,
            ip,
            user_agent,
        } = envelope;
        let Described {
            event_name,
            properties,
            pathname,
            hostname,
            querystring,
            page_title,
            referrer,
            user_id,
            language,
            screen_width,
            screen_height,
            anonymous_id,
            tag,
            app_version,
            device_model,
            feature_flags,
            vitals,
        } = described;
        RawEvent {
            v: RAW_EVENT_VERSION,
            event_id,
            site_id,
            key_id,
            event_type,
            timestamp,
            received_at,
            client_timestamp,
            sent_at,
            ip,
            user_agent,
            event_name,
            properties,
            pathname,
            hostname,
            querystring,
            page_title,
            referrer,
            user_id,
            language,
            screen_width,
            screen_height,
            anonymous_id,
            tag,
            app_version,
            device_model,
            feature_flags,
            vitals,
            preset: preset.map(Box::new),
        }
    }
}

/// The web vitals of a page: Largest Contentful Paint, Cumulative Layout Shift,
/// Interaction to Next Paint, First Contentful Paint and Time To First Byte (ms, except
/// CLS, a score). `None`: not measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Vitals {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lcp: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cls: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inp: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fcp: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfb: Option<f64>,
}

impl Vitals {
    pub const NAMES: [&'static str; 5] = ["lcp", "cls", "inp", "fcp", "ttfb"];

    pub fn is_empty(&self) -> bool {
        *self == Vitals::default()
    }
}

/// Enrichment an imported event brings from its source (its own export, Umami's, PostHog's):
/// each value is used as is where present, and derived as for a live event where absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Preset {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visitor_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub city: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lat: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lon: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub browser: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub browser_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operating_system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operating_system_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_bot: Option<u8>,
}

/// The `key_id` of a message sent without an API key (ingest's browser path, whose only
/// credential is an `Origin` header): its writes rank below any made with a key.
pub const KEYLESS_KEY_ID: &str = "browser";

/// The Kafka message of `POST /api/identify` on `events.raw` (JSON, `"v":1`,
/// `"kind":"identify"`): `anonymous_id` becomes claimed by `user_id`, and `traits` (a
/// JSON object; a null value removes the trait) merge into the user's profile. Which
/// write wins is decided by `key_id` (keyed before keyless) and `received_at`, never by
/// the client's `timestamp`. It has no `type`, so it never reads as a [`RawEvent`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IdentifyMessage<S = String> {
    pub v: u32,
    pub kind: MessageKind,
    pub event_id: Uuid,
    pub site_id: u32,
    pub key_id: S,
    /// When identify was called (the client's `timestamp` inside the accepted window,
    /// else `received_at`), epoch ms; a retry carries the same.
    pub timestamp: i64,
    pub received_at: i64,
    pub user_id: S,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anonymous_id: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traits: Option<S>,
}

/// What a message on `events.raw` other than an event is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    #[default]
    Identify,
}

/// Only the version field, read first so that a future format is recognised as such.
#[derive(Deserialize)]
pub struct VersionProbe {
    pub v: Option<u32>,
}
