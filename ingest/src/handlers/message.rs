//! The Kafka messages of a request: an event's and an identify call's, with the ids,
//! times, address and user agent the server decides; and their publishing.

use super::admission::Admitted;
use super::client::Client;
use crate::api::IngestError;
use crate::event::identify::Identify;
use crate::event::validate::effective_timestamp;
use crate::event::TrackEvent;
use crate::sink::{Record, Sink, SinkError};
use rivulet_common::event::{
    Described, Envelope, IdentifyMessage, MessageKind, RawEvent, RAW_EVENT_VERSION,
};
use rivulet_common::kafka::write_message_key;
use std::borrow::Cow;
use tokio::time::Instant;
use uuid::Uuid;

/// The Kafka message for a validated event: server-chosen id, times, IP and user agent.
/// Its strings stay borrowed from the request until the message is written. A browser
/// event's own `ip_address` and `user_agent` are not believed: the request's are used.
pub(super) fn raw_event<'a>(
    ev: TrackEvent<'a>,
    who: &'a Admitted,
    client: &Client<'a>,
    received_at: i64,
) -> RawEvent<Cow<'a, str>> {
    let (ip_address, user_agent) = if who.browser {
        (None, None)
    } else {
        (ev.ip_address, ev.user_agent)
    };
    let ip = ip_address.unwrap_or_else(|| client.ip.to_string());
    let envelope = Envelope {
        event_id: stored_event_id(ev.event_id, ev.site_id, who),
        site_id: ev.site_id,
        key_id: Cow::Borrowed(&*who.key_id),
        event_type: ev.event_type,
        timestamp: crate::clock::event_time(ev.timestamp_ms, ev.sent_at_ms, received_at),
        received_at,
        client_timestamp: ev.timestamp_ms,
        sent_at: ev.sent_at_ms,
        ip: Cow::Owned(ip),
        user_agent: user_agent.unwrap_or_else(|| client.user_agent()),
    };
    let described = Described {
        event_name: ev.event_name,
        properties: ev.properties,
        pathname: ev.pathname,
        hostname: ev.hostname,
        querystring: ev.querystring,
        page_title: ev.page_title,
        referrer: ev.referrer,
        user_id: ev.user_id,
        language: ev.language,
        screen_width: ev.screen_width,
        screen_height: ev.screen_height,
        anonymous_id: ev.anonymous_id,
        tag: ev.tag,
        app_version: ev.app_version,
        device_model: ev.device_model,
        feature_flags: ev.feature_flags,
        vitals: ev.vitals,
    };
    RawEvent::new(envelope, described, None)
}

/// Namespace of the ids browser events are stored under (a fixed random UUID).
const KEYLESS_EVENT_IDS: Uuid = Uuid::from_u128(0x5c1f_0e8a_3b6d_4f27_9a41_d2c8_7e05_b913);

/// The id an event or identify call is stored under: the client's `event_id` when it came
/// with a key; on the browser path, a UUIDv5 of the site and the client's id, so that a
/// keyless request can never write under a keyed event's id (and replace it: rows
/// collapse on the id), while a browser's retry of one event still collapses into one.
/// Without an id, a new UUIDv7.
pub(super) fn stored_event_id(given: Option<Uuid>, site_id: u32, who: &Admitted) -> Uuid {
    match given {
        Some(id) if who.browser => {
            let mut name = [0u8; 20];
            name[..4].copy_from_slice(&site_id.to_be_bytes());
            name[4..].copy_from_slice(id.as_bytes());
            Uuid::new_v5(&KEYLESS_EVENT_IDS, &name)
        }
        Some(id) => id,
        None => Uuid::now_v7(),
    }
}

/// The Kafka message of an event: keyed by visitor, JSON payload.
fn record(raw: &RawEvent<Cow<'_, str>>) -> Result<Record, SinkError> {
    Record::build(
        |key| {
            let user_id = raw.user_id.as_deref();
            write_message_key(key, raw.site_id, user_id, &raw.ip, &raw.user_agent)
        },
        |payload| serde_json::to_writer(payload, raw),
    )
    .map_err(|e| SinkError::Encode(e.to_string()))
}

/// Publishes one event and waits until it is durable, or until `deadline`.
pub(super) async fn publish(
    sink: &impl Sink,
    raw: &RawEvent<Cow<'_, str>>,
    deadline: Instant,
) -> Result<(), SinkError> {
    sink.publish(&record(raw)?, deadline).await
}

/// Publishes the events and waits until they are durable: one outcome per event, in order.
pub(super) async fn publish_all(
    sink: &impl Sink,
    raws: &[RawEvent<Cow<'_, str>>],
    deadline: Instant,
) -> Vec<Result<(), SinkError>> {
    let mut outcomes: Vec<Result<(), SinkError>> = Vec::with_capacity(raws.len());
    let mut records = Vec::with_capacity(raws.len());
    for raw in raws {
        match record(raw) {
            Ok(r) => {
                records.push(r);
                outcomes.push(Ok(()));
            }
            Err(e) => outcomes.push(Err(e)),
        }
    }
    let mut acks = sink.publish_all(&records, deadline).await.into_iter();
    for outcome in outcomes.iter_mut().filter(|o| o.is_ok()) {
        if let Some(Err(e)) = acks.next() {
            *outcome = Err(e);
        }
    }
    outcomes
}

/// The Kafka message of an identify call, keyed by its user.
pub(super) fn identify_record(
    id: &Identify<'_>,
    who: &Admitted,
    client: &Client<'_>,
    received_at: i64,
) -> Result<Record, IngestError> {
    let msg = IdentifyMessage {
        v: RAW_EVENT_VERSION,
        kind: MessageKind::Identify,
        event_id: stored_event_id(id.event_id, id.site_id, who),
        site_id: id.site_id,
        key_id: &*who.key_id,
        timestamp: effective_timestamp(id.timestamp_ms, received_at),
        received_at,
        user_id: &*id.user_id,
        anonymous_id: id.anonymous_id.as_deref(),
        traits: id.traits.as_deref(),
    };
    let ip = client.ip.to_string();
    Record::build(
        |key| {
            write_message_key(
                key,
                id.site_id,
                Some(&id.user_id),
                &ip,
                &client.user_agent(),
            )
        },
        |payload| serde_json::to_writer(payload, &msg),
    )
    .map_err(|_| IngestError::Unavailable("the identify call could not be encoded"))
}

#[cfg(test)]
mod tests {
    use super::{publish, publish_all};
    use crate::sink::SinkError;
    use crate::testing::MemorySink;
    use rivulet_common::event::{EventType, RawEvent, RAW_EVENT_VERSION};
    use std::borrow::Cow;
    use std::time::Duration;
    use tokio::time::Instant;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    fn raw(pathname: &'static str, user_id: Option<&'static str>) -> RawEvent<Cow<'static, str>> {
        RawEvent {
            v: RAW_EVENT_VERSION,
            event_id: uuid::Uuid::now_v7(),
            site_id: 7,
            key_id: Cow::Borrowed("key_0123456789abcdef"),
            event_type: EventType::Pageview,
            timestamp: 1_700_000_000_000,
            received_at: 1_700_000_000_001,
            ip: Cow::Borrowed("81.2.69.142"),
            user_agent: Cow::Borrowed(""),
            event_name: None,
            properties: None,
            pathname: Some(Cow::Borrowed(pathname)),
            hostname: None,
            querystring: None,
            page_title: None,
            referrer: None,
            user_id: user_id.map(Cow::Borrowed),
            language: None,
            screen_width: None,
            screen_height: None,
            ..RawEvent::default()
        }
    }

    #[tokio::test]
    async fn an_event_is_published_as_its_raw_message_under_its_visitor_key() {
        let sink = MemorySink::default();
        let ev = raw("/a", Some("u1"));
        publish(&sink, &ev, soon()).await.unwrap();
        let stored = sink.events();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].event_id, ev.event_id);
        assert_eq!(stored[0].pathname.as_deref(), Some("/a"));
        assert_eq!(stored[0].user_id.as_deref(), Some("u1"));
    }

    #[tokio::test]
    async fn a_batch_gets_one_outcome_per_event_in_order() {
        let sink = MemorySink::default();
        sink.refuse("/refused");
        let events = [raw("/a", None), raw("/refused", None), raw("/b", None)];
        let outcomes = publish_all(&sink, &events, soon()).await;
        assert!(matches!(
            outcomes.as_slice(),
            [Ok(()), Err(SinkError::Timeout), Ok(())]
        ));
        let stored: Vec<_> = sink.events().iter().map(|r| r.event_id).collect();
        assert_eq!(stored, [events[0].event_id, events[2].event_id]);
    }
}
