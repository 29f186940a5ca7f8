//! Request handlers: `POST /api/track`, `POST /api/track/batch`, health and metrics.

use crate::api::{self, BatchItem, BatchResponse, IngestError};
use crate::client_ip::client_ip;
use crate::event::fields::{self, EventFields, Events, Field, Item};
use crate::event::validate::{effective_timestamp, validate_event, ValidationErrors};
use crate::event::TrackEvent;
use crate::request_body::{self, Linger, RequestBody};
use crate::sink::{Record, Sink, SinkError};
use crate::state::AppState;
use axum::http::{header, HeaderMap, HeaderName, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use metrics::Counter;
use rivulet_common::event::{RawEvent, RAW_EVENT_VERSION};
use rivulet_common::health::{self, Readiness};
use rivulet_common::kafka::write_message_key;
use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::LazyLock;
use uuid::Uuid;

// Counters of the request path, registered once: `counter!` builds its key and looks the
// series up in the recorder on every call.
static EVENTS_ACCEPTED: LazyLock<Counter> =
    LazyLock::new(|| metrics::counter!("ingest_events_accepted_total"));
static RATE_LIMITED: LazyLock<Counter> =
    LazyLock::new(|| metrics::counter!("ingest_rate_limited_total"));

/// Header-derived request context: who sent it and with what user agent, borrowed from
/// the request's headers.
struct Origin<'a> {
    peer: std::net::IpAddr,
    forwarded_for: Option<Cow<'a, str>>,
    user_agent: Option<&'a str>,
}

impl<'a> Origin<'a> {
    fn new(peer: SocketAddr, headers: &'a HeaderMap) -> Self {
        Origin {
            peer: peer.ip(),
            forwarded_for: forwarded_for(headers),
            user_agent: headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok()),
        }
    }

    /// The `User-Agent` header, cut to the event field's limit (512 characters); empty
    /// when it is a Rivulet server SDK's own, which names the SDK, not the visitor.
    fn user_agent(&self) -> Cow<'a, str> {
        let ua = self
            .user_agent
            .filter(|ua| !is_server_sdk(ua))
            .unwrap_or_default();
        match ua.char_indices().nth(512) {
            None => Cow::Borrowed(ua),
            Some((end, _)) => Cow::Borrowed(&ua[..end]),
        }
    }
}

/// Rivulet's server SDKs send `User-Agent: rivulet-<language>/<version>` (the Node.js SDK:
/// `rivulet-node/0.2.0`). An event they send without a `user_agent` of its own is stored
/// with none: empty device fields, not "Other", and not a bot.
const SERVER_SDK_AGENT_PREFIX: &str = "rivulet-";

fn is_server_sdk(user_agent: &str) -> bool {
    user_agent
        .get(..SERVER_SDK_AGENT_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(SERVER_SDK_AGENT_PREFIX))
}

/// `X-Forwarded-For` as one list: a header sent on several lines is their values joined
/// in order (RFC 9110 §5.3), since a proxy may add its hop as a line of its own, and the
/// rightmost hops are the ones to believe. A line that is not text makes it absent.
fn forwarded_for(headers: &HeaderMap) -> Option<Cow<'_, str>> {
    let mut lines = headers
        .get_all(HeaderName::from_static("x-forwarded-for"))
        .iter();
    let first = lines.next()?.to_str().ok()?;
    let mut joined: Option<String> = None;
    for line in lines {
        let all = joined.get_or_insert_with(|| first.to_string());
        all.push_str(", ");
        all.push_str(line.to_str().ok()?);
    }
    Some(joined.map_or(Cow::Borrowed(first), Cow::Owned))
}

/// The request body, read within `limit` and decoded (`Content-Encoding`).
async fn read_body<S: Sink>(
    st: &AppState<S>,
    headers: &HeaderMap,
    body: impl RequestBody,
    limit: usize,
) -> Result<Bytes, IngestError> {
    // A client waiting for `100 Continue` has sent nothing yet: it gets the 413 instead.
    let expects_continue = headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let linger = if expects_continue {
        Linger::NONE
    } else {
        st.cfg.oversize_linger
    };
    let raw = request_body::read_body(body, limit, st.cfg.body_timeout, linger).await?;
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok());
    request_body::decode_content(encoding, raw, limit)
}

fn now_ms() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp_nanos() as i64 / 1_000_000
}

/// The Kafka message for a validated event: server-chosen id, times, IP and user agent.
/// Its strings stay borrowed from the request until the message is written.
fn raw_event<'a, S: Sink>(
    ev: TrackEvent<'a>,
    key_id: &'a str,
    origin: &Origin<'a>,
    st: &AppState<S>,
    received_at: i64,
) -> RawEvent<Cow<'a, str>> {
    let ip = match ev.ip_address {
        Some(ip) => ip,
        None => client_ip(
            origin.peer,
            origin.forwarded_for.as_deref(),
            &st.cfg.trusted_proxies,
        )
        .to_string(),
    };
    RawEvent {
        v: RAW_EVENT_VERSION,
        event_id: ev.event_id.unwrap_or_else(Uuid::now_v7),
        site_id: ev.site_id,
        key_id: Cow::Borrowed(key_id),
        event_type: ev.event_type,
        timestamp: effective_timestamp(ev.timestamp_ms, received_at),
        received_at,
        ip: Cow::Owned(ip),
        user_agent: ev.user_agent.unwrap_or_else(|| origin.user_agent()),
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

/// Publishes one event and waits until it is durable.
async fn publish(sink: &impl Sink, raw: &RawEvent<Cow<'_, str>>) -> Result<(), SinkError> {
    sink.publish(&record(raw)?).await
}

/// Publishes the events and waits until they are durable: one outcome per event, in order.
async fn publish_all(
    sink: &impl Sink,
    raws: &[RawEvent<Cow<'_, str>>],
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
    let mut acks = sink.publish_all(&records).await.into_iter();
    for outcome in outcomes.iter_mut().filter(|o| o.is_ok()) {
        if let Some(Err(e)) = acks.next() {
            *outcome = Err(e);
        }
    }
    outcomes
}

/// The key check (401/404) and then the key's rate limit (429): one unit per request,
/// whether it carries one event or a batch.
async fn admit<S: Sink>(
    st: &AppState<S>,
    api_key: Option<&Field<'_>>,
    site_id: u32,
) -> Result<crate::auth::KeyInfo, IngestError> {
    let key = st
        .auth
        .authorize(api_key.and_then(Field::as_str), site_id)
        .await?;
    if !st.limiter.allow(&key.key_id).await {
        RATE_LIMITED.increment(1);
        return Err(IngestError::RateLimited(st.limiter.limit()));
    }
    st.last_used.touch(&key.key_id);
    Ok(key)
}

pub async fn track<S: Sink>(
    st: &AppState<S>,
    peer: SocketAddr,
    req: Request<impl RequestBody>,
) -> Result<Response, IngestError> {
    let (head, body) = req.into_parts();
    let headers = &head.headers;
    let body = read_body(st, headers, body, st.cfg.max_body_bytes).await?;
    let mut fields = fields::parse_event(&body)?;
    let api_key = fields.api_key.take();
    let ev = validate_event(fields).map_err(IngestError::InvalidPayload)?;
    let key = admit(st, api_key.as_ref(), ev.site_id).await?;
    let raw = raw_event(ev, &key.key_id, &Origin::new(peer, headers), st, now_ms());
    if let Err(e) = publish(&*st.sink, &raw).await {
        tracing::warn!(error = %e, "event not acknowledged by Kafka");
        return Err(IngestError::Unavailable("the event could not be stored"));
    }
    EVENTS_ACCEPTED.increment(1);
    Ok(api::success())
}

/// `{api_key, site_id, events:[…]}`: one rate-limit unit, each event validated on its
/// own. 200 when every valid event is in Kafka; 503 (with per-event results) if any
/// could not be stored, so the client retries those with the same event_id.
pub async fn track_batch<S: Sink>(
    st: &AppState<S>,
    peer: SocketAddr,
    req: Request<impl RequestBody>,
) -> Result<Response, IngestError> {
    let (head, body) = req.into_parts();
    let headers = &head.headers;
    let body = read_body(st, headers, body, st.cfg.max_batch_bytes).await?;
    let batch = fields::parse_batch(&body)?;
    let events = match batch.events {
        Some(Events::List(events)) if events.len() <= st.cfg.max_batch_events => events,
        other => {
            let msg = match other {
                Some(Events::List(_)) => format!(
                    "events must hold at most {} events",
                    st.cfg.max_batch_events
                ),
                _ => "events must be an array of event objects".to_string(),
            };
            let mut details = ValidationErrors::default();
            details.field_errors.insert("events".into(), vec![msg]);
            return Err(IngestError::InvalidPayload(details));
        }
    };
    // The envelope carries site_id and api_key; its site_id is checked as an event's.
    let envelope = EventFields {
        site_id: batch.site_id,
        ..EventFields::default()
    };
    let site_id = validate_event(envelope)
        .map_err(IngestError::InvalidPayload)?
        .site_id;
    let key = admit(st, batch.api_key.as_ref(), site_id).await?;
    let origin = Origin::new(peer, headers);
    let received_at = now_ms();
    let mut results: Vec<Option<BatchItem>> = Vec::with_capacity(events.len());
    let mut pending = Vec::new();
    for (i, item) in events.into_iter().enumerate() {
        match batch_event(item, site_id) {
            Ok(ev) => {
                pending.push((i, raw_event(ev, &key.key_id, &origin, st, received_at)));
                results.push(None);
            }
            Err(details) => results.push(Some(BatchItem::Invalid {
                error: "Invalid payload",
                details,
            })),
        }
    }
    let (places, raws): (Vec<usize>, Vec<RawEvent<Cow<str>>>) = pending.into_iter().unzip();
    let outcomes = publish_all(&*st.sink, &raws).await;
    let (mut accepted, mut failed) = (0, 0);
    for ((i, raw), outcome) in places.into_iter().zip(raws).zip(outcomes) {
        let event_id = raw.event_id.to_string();
        results[i] = Some(match outcome {
            Ok(()) => {
                accepted += 1;
                BatchItem::Accepted { event_id }
            }
            Err(error) => {
                failed += 1;
                BatchItem::Failed {
                    event_id,
                    error: error.to_string(),
                }
            }
        });
    }
    let results: Vec<BatchItem> = results.into_iter().flatten().collect();
    let rejected = results.len() - accepted - failed;
    EVENTS_ACCEPTED.increment(accepted as u64);
    let body = BatchResponse {
        // Every event is in Kafka; a caller that checks only this learns of rejections too.
        success: failed == 0 && rejected == 0,
        accepted,
        rejected,
        failed,
        results,
    };
    if failed > 0 {
        let mut resp = (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            api::RETRY_AFTER_UNAVAILABLE.parse().expect("header"),
        );
        return Ok(resp);
    }
    Ok(Json(body).into_response())
}

/// One event of a batch: it inherits the envelope's site_id; its own, if any, must match.
fn batch_event(item: Item<'_>, site_id: u32) -> Result<TrackEvent<'_>, ValidationErrors> {
    let Item::Event(mut fields) = item else {
        let mut e = ValidationErrors::default();
        e.form_errors
            .push("each event must be a JSON object".into());
        return Err(e);
    };
    let own = fields.site_id.replace(Field::Unsigned(u64::from(site_id)));
    let ev = validate_event(fields)?;
    let matches = match own {
        None | Some(Field::Null) => true,
        Some(Field::Unsigned(n)) => n == u64::from(site_id),
        Some(Field::Str(s)) => s == site_id.to_string(),
        Some(_) => false,
    };
    if !matches {
        let mut e = ValidationErrors::default();
        e.field_errors.insert(
            "site_id".into(),
            vec!["an event's site_id must match the batch's site_id".into()],
        );
        return Err(e);
    }
    Ok(ev)
}

/// 200 when Kafka and Redis answer and no shutdown is under way; 503 otherwise.
pub fn readiness<S: Sink>(st: &AppState<S>) -> Response {
    Readiness::new()
        .check("kafka", st.sink.is_ready())
        .check("redis", st.redis.is_ready())
        .shutting_down(st.shutting_down.load(Ordering::Relaxed))
        .into_response()
}

pub fn metrics<S: Sink>(st: &AppState<S>) -> Response {
    metrics::gauge!("ingest_kafka_queue_depth").set(st.sink.queue_depth() as f64);
    health::metrics(&st.prometheus)
}

pub fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        include_str!("../openapi.json"),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::{forwarded_for, publish, publish_all, Origin};
    use crate::sink::{Record, Sink, SinkError};
    use axum::http::{HeaderMap, HeaderValue};
    use rivulet_common::event::{EventType, RawEvent, RAW_EVENT_VERSION};
    use std::borrow::Cow;
    use std::future::Future;
    use std::sync::Mutex;

    /// A sink in memory: keeps what it accepts, and refuses the records whose payload
    /// contains `refuse` (as Kafka would refuse them: with an error, in their place).
    #[derive(Default)]
    struct MemorySink {
        refuse: &'static str,
        stored: Mutex<Vec<RawEvent>>,
    }

    impl MemorySink {
        fn take(&self, r: &Record) -> Result<(), SinkError> {
            let raw: RawEvent = serde_json::from_slice(r.payload()).expect("a raw event");
            if !self.refuse.is_empty() && raw.pathname.as_deref() == Some(self.refuse) {
                return Err(SinkError::Timeout);
            }
            self.stored.lock().unwrap().push(raw);
            Ok(())
        }
    }

    impl Sink for MemorySink {
        fn publish(&self, r: &Record) -> impl Future<Output = Result<(), SinkError>> + Send {
            std::future::ready(self.take(r))
        }
        fn publish_all(
            &self,
            records: &[Record],
        ) -> impl Future<Output = Vec<Result<(), SinkError>>> + Send {
            std::future::ready(records.iter().map(|r| self.take(r)).collect())
        }
        fn is_ready(&self) -> bool {
            true
        }
        fn queue_depth(&self) -> usize {
            0
        }
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
        }
    }

    #[tokio::test]
    async fn an_event_is_published_as_its_raw_message_under_its_visitor_key() {
        let sink = MemorySink::default();
        let ev = raw("/a", Some("u1"));
        publish(&sink, &ev).await.unwrap();
        let stored = sink.stored.lock().unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].event_id, ev.event_id);
        assert_eq!(stored[0].pathname.as_deref(), Some("/a"));
        assert_eq!(stored[0].user_id.as_deref(), Some("u1"));
    }

    #[tokio::test]
    async fn a_batch_gets_one_outcome_per_event_in_order() {
        let sink = MemorySink {
            refuse: "/refused",
            ..MemorySink::default()
        };
        let events = [raw("/a", None), raw("/refused", None), raw("/b", None)];
        let outcomes = publish_all(&sink, &events).await;
        assert!(matches!(
            outcomes.as_slice(),
            [Ok(()), Err(SinkError::Timeout), Ok(())]
        ));
        let stored: Vec<_> = sink
            .stored
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.event_id)
            .collect();
        assert_eq!(stored, [events[0].event_id, events[2].event_id]);
    }

    #[test]
    fn a_server_sdks_own_user_agent_is_not_the_visitors() {
        let peer = "127.0.0.1:1".parse().unwrap();
        let mut h = HeaderMap::new();
        for (header, stored) in [
            ("rivulet-node/0.2.0", ""),
            ("Rivulet-Python/1.0", ""),
            (
                "Mozilla/5.0 (X11; Linux x86_64) rivulet-node/1",
                "Mozilla/5.0 (X11; Linux x86_64) rivulet-node/1",
            ),
            ("curl/8.5.0", "curl/8.5.0"),
        ] {
            h.insert("user-agent", HeaderValue::from_static(header));
            assert_eq!(Origin::new(peer, &h).user_agent(), stored, "{header}");
        }
    }

    #[test]
    fn forwarded_for_lines_are_one_list_in_order() {
        let mut h = HeaderMap::new();
        assert_eq!(forwarded_for(&h), None);
        h.append("x-forwarded-for", HeaderValue::from_static("6.6.6.6"));
        assert_eq!(forwarded_for(&h).as_deref(), Some("6.6.6.6"));
        h.append(
            "x-forwarded-for",
            HeaderValue::from_static("203.0.113.7, 10.0.0.2"),
        );
        assert_eq!(
            forwarded_for(&h).as_deref(),
            Some("6.6.6.6, 203.0.113.7, 10.0.0.2")
        );
        h.append("x-forwarded-for", HeaderValue::from_bytes(b"\xff").unwrap());
        assert_eq!(forwarded_for(&h), None);
    }
}
