//! A tracking event as a client sends it: its body read into known fields (`fields`),
//! checked against the wire contract (`validate`), and the result, a [`TrackEvent`].

pub mod errors;
pub mod fields;
pub mod identify;
pub mod properties;
pub mod validate;

use rivulet_common::event::{EventType, Vitals};
use std::borrow::Cow;
use uuid::Uuid;

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
    /// When the client sent it, by its clock (`sent_at`, or a batch's), epoch milliseconds.
    pub sent_at_ms: Option<i64>,
    pub anonymous_id: Option<Cow<'a, str>>,
    pub tag: Option<Cow<'a, str>>,
    pub app_version: Option<Cow<'a, str>>,
    pub device_model: Option<Cow<'a, str>>,
    /// A JSON object of strings, as text.
    pub feature_flags: Option<Cow<'a, str>>,
    pub vitals: Vitals,
}
