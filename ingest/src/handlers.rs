//! Request handlers: `POST /api/track`, `/api/track/batch` and `/api/identify`, each on
//! the key path or the browser path; CORS preflights; the tracking script; health and
//! metrics.
//!
//! A request with an API key (`api_key` in the body, or `Authorization: Bearer rb_…`) is
//! on the key path: the key is checked, then its rate limits. A request with no key but an
//! `Origin` is a browser event: it is accepted only from an origin the site lists,
//! answered with CORS headers for that exact origin, limited per client address and site,
//! and may not name its own IP or user agent (docs/design.md, "Browser path"). A request
//! with neither is an invalid payload: `api_key` is missing.

use crate::api::{self, BatchItem, BatchResponse, IngestError};
use crate::auth::KeyCheck;
use crate::event::errors::ValidationErrors;
use crate::event::fields::{self, EventFields, Events, Field, Item};
use crate::event::identify::{validate_identify, Identify};
use crate::event::validate::{effective_timestamp, validate_event};
use crate::event::TrackEvent;
use crate::profile_caps::{self, CapVerdict, ProfileCaps, ProfileWrite};
use crate::rate_limit::{Limiter, Verdict};
use crate::request_body::{self, Linger, RequestBody};
use crate::sink::{Record, Sink, SinkError};
use crate::state::{AppState, Backends};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use metrics::Counter;
use rivulet_common::client_ip::{client_ip, counted_as};
use rivulet_common::event::{IdentifyMessage, MessageKind, RawEvent, RAW_EVENT_VERSION};
use rivulet_common::health::{self, Readiness};
use rivulet_common::kafka::write_message_key;
use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};
use uuid::Uuid;

// Counters of the request path, registered once: `counter!` builds its key and looks the
// series up in the recorder on every call.
static EVENTS_ACCEPTED: LazyLock<Counter> =
    LazyLock::new(|| metrics::counter!("ingest_events_accepted_total"));
static RATE_LIMITED: LazyLock<Counter> =
    LazyLock::new(|| metrics::counter!("ingest_rate_limited_total"));

/// The `key_id` of a browser event's Kafka message: it was sent with no key.
pub use rivulet_common::event::KEYLESS_KEY_ID as BROWSER_KEY_ID;

/// Who sent a request, from its socket and headers, borrowed from the request.
pub(crate) struct Client<'a> {
    peer: IpAddr,
    forwarded_for: Option<Cow<'a, str>>,
    user_agent: Option<&'a str>,
    origin: Option<&'a HeaderValue>,
    bearer: Option<&'a str>,
}

impl<'a> Client<'a> {
    pub(crate) fn new(peer: SocketAddr, headers: &'a HeaderMap) -> Self {
        Client {
            peer: peer.ip(),
            forwarded_for: forwarded_for(headers),
            user_agent: headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok()),
            origin: headers.get(header::ORIGIN),
            bearer: headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim),
        }
    }

    /// The client's address: the peer, or what a trusted proxy says it forwarded.
    fn ip<S: Backends>(&self, st: &AppState<S>) -> IpAddr {
        client_ip(
            self.peer,
            self.forwarded_for.as_deref(),
            &st.cfg.trusted_proxies,
        )
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

    /// The host of the `Origin` header (`https://Shop.Example:8443` → `shop.example`).
    fn origin_host(&self) -> Option<String> {
        origin_host(self.origin?.to_str().ok()?)
    }
}

/// The host of an `Origin` value, lowercase, without scheme or port; `None` for `null`
/// and anything that is not `scheme://host[:port]`.
fn origin_host(origin: &str) -> Option<String> {
    let (_, rest) = origin.split_once("://")?;
    let host = match rest.strip_prefix('[') {
        // An IPv6 literal: `[::1]:8080`.
        Some(v6) => v6.split_once(']')?.0,
        None => rest.split(':').next()?,
    };
    (!host.is_empty() && !host.contains('/')).then(|| host.to_ascii_lowercase())
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

/// How a request says it may send for its site.
enum Credential<'a> {
    /// An API key, from the body or the `Authorization` header (`None`: given, but not a
    /// string, so invalid).
    Key(Option<&'a str>),
    /// No key at all: a browser event, checked against the site's domains.
    Browser,
}

/// The body's `api_key` when the body has one (even `null` counts as none), else a Bearer
/// key, else the browser path when the request has an `Origin`. `None` when it has none:
/// browsers send `Origin` with every POST, so a request with neither a key nor an origin
/// comes from a server that forgot its key, and is told so (`require_key`) rather than
/// sent down the browser path to a 403 about origins.
fn credential<'a>(body_key: Option<&'a Field<'a>>, client: &Client<'a>) -> Option<Credential<'a>> {
    match body_key {
        Some(Field::Null) | None => match (client.bearer, client.origin) {
            (Some(key), _) => Some(Credential::Key(Some(key))),
            (None, Some(_)) => Some(Credential::Browser),
            (None, None) => None,
        },
        Some(field) => Some(Credential::Key(field.as_str())),
    }
}

/// What `fieldErrors.api_key` says to a request with neither a key nor an `Origin`.
const MISSING_KEY: &str =
    "api_key is required: send it in the body or as Authorization: Bearer rb_…";

/// The payload's validation, with a missing key as one more field error: every problem of
/// a payload is reported in one answer, the missing key among them.
fn require_key<'a, T>(
    credential: Option<Credential<'a>>,
    validated: Result<T, ValidationErrors>,
) -> Result<(T, Credential<'a>), IngestError> {
    let mut errors = match (credential, validated) {
        (Some(credential), Ok(v)) => return Ok((v, credential)),
        (Some(_), Err(errors)) => return Err(IngestError::InvalidPayload(errors)),
        (None, Ok(_)) => ValidationErrors::default(),
        (None, Err(errors)) => errors,
    };
    errors.field("api_key", MISSING_KEY);
    Err(IngestError::InvalidPayload(errors))
}

/// A request that may send for its site.
struct Admitted {
    key_id: Arc<str>,
    browser: bool,
}

/// What a response to a browser event from an allowed origin carries: CORS for that
/// exact origin, with credentials, since `sendBeacon` sends them.
pub(crate) fn cors_headers(resp: &mut Response, origin: &HeaderValue) {
    let h = resp.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    h.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    h.append(header::VARY, HeaderValue::from_static("Origin"));
}

/// The body, read within `limit` and decoded (`Content-Encoding`).
async fn read_body<S: Backends>(
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

/// Decides whether the request may send `events` events for `site_id`: the key and its
/// rate limits, or the browser's origin and its limit per address. Rejections that say
/// something about keys or sites (401, 403, 404) count against the client's address,
/// which past its limit is answered 429 before anything is looked up. Sets `cors` once
/// a browser request's origin is known to be allowed.
async fn admit<S: Backends>(
    st: &AppState<S>,
    credential: Credential<'_>,
    site_id: u32,
    events: u32,
    client: &Client<'_>,
    cors: &mut Option<HeaderValue>,
) -> Result<Admitted, IngestError> {
    let ip = client.ip(st);
    if let Err(blocked) = st.failures.check(ip) {
        // A key held as good (in memory or Redis, never a registry query) is served
        // even from an address past its limit: behind a shared address (NAT), one
        // client's bad keys must not lock out another's good one.
        let good = match credential {
            Credential::Key(key) => st.auth.cached_good(key).await,
            Credential::Browser => false,
        };
        if !good {
            return Err(IngestError::TooManyRejections(blocked.0));
        }
    }
    // A key not held in memory may cost a registry query: its token is taken before the
    // lookup, so concurrent unknown keys cannot get more queries than the address has
    // tokens; a good key gives it back.
    let ahead = match credential {
        Credential::Key(key) if !st.auth.knows(key) => {
            if let Err(blocked) = st.failures.take(ip) {
                return Err(IngestError::TooManyRejections(blocked.0));
            }
            true
        }
        _ => false,
    };
    let admitted = match credential {
        Credential::Key(key) => admit_key(st, key, site_id, events).await,
        Credential::Browser => admit_browser(st, site_id, events, client, ip, cors),
    };
    match &admitted {
        Err(
            IngestError::InvalidKey
            | IngestError::SiteNotFound
            | IngestError::OriginNotAllowed
            | IngestError::BrowserPathOff,
        ) if !ahead => st.failures.record(ip),
        Err(
            IngestError::InvalidKey
            | IngestError::SiteNotFound
            | IngestError::OriginNotAllowed
            | IngestError::BrowserPathOff,
        ) => {}
        _ if ahead => st.failures.refund(ip),
        _ => {}
    }
    admitted
}

async fn admit_key<S: Backends>(
    st: &AppState<S>,
    key: Option<&str>,
    site_id: u32,
    events: u32,
) -> Result<Admitted, IngestError> {
    let key = st.auth.authorize(key, site_id).await?;
    let budgets = st.limiter.budgets();
    match st.limiter.allow(&key.key_id, events).await {
        Verdict::Allowed => {}
        Verdict::TooManyRequests => {
            RATE_LIMITED.increment(1);
            return Err(IngestError::RateLimited(budgets.requests));
        }
        Verdict::TooManyEvents => {
            RATE_LIMITED.increment(1);
            return Err(IngestError::EventsRateLimited(budgets.events));
        }
    }
    st.last_used.touch(&key.key_id);
    Ok(Admitted {
        key_id: key.key_id,
        browser: false,
    })
}

fn admit_browser<S: Backends>(
    st: &AppState<S>,
    site_id: u32,
    events: u32,
    client: &Client<'_>,
    ip: IpAddr,
    cors: &mut Option<HeaderValue>,
) -> Result<Admitted, IngestError> {
    let host = client.origin_host().ok_or(IngestError::OriginNotAllowed)?;
    let site = st
        .auth
        .site(site_id)?
        .ok_or(IngestError::OriginNotAllowed)?;
    if !site.accepts_host(&host) {
        return Err(IngestError::OriginNotAllowed);
    }
    if !site.browser_path {
        return Err(IngestError::BrowserPathOff);
    }
    *cors = client.origin.cloned();
    // One host usually holds a whole IPv6 /64: counted as one client, as the rejection
    // limit counts it, so that it cannot multiply its budget by its addresses.
    match st.browser_limiter.take((counted_as(ip), site_id), events) {
        Verdict::Allowed => {}
        Verdict::TooManyRequests | Verdict::TooManyEvents => {
            RATE_LIMITED.increment(1);
            return Err(IngestError::BrowserRateLimited(
                st.browser_limiter.budgets().requests,
            ));
        }
    }
    static BROWSER_KEY: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(BROWSER_KEY_ID));
    Ok(Admitted {
        key_id: BROWSER_KEY.clone(),
        browser: true,
    })
}

/// The Kafka message for a validated event: server-chosen id, times, IP and user agent.
/// Its strings stay borrowed from the request until the message is written. A browser
/// event's own `ip_address` and `user_agent` are not believed: the request's are used.
fn raw_event<'a, S: Backends>(
    ev: TrackEvent<'a>,
    who: &'a Admitted,
    client: &Client<'a>,
    st: &AppState<S>,
    received_at: i64,
) -> RawEvent<Cow<'a, str>> {
    let (ip_address, user_agent) = if who.browser {
        (None, None)
    } else {
        (ev.ip_address, ev.user_agent)
    };
    let ip = ip_address.unwrap_or_else(|| client.ip(st).to_string());
    RawEvent {
        v: RAW_EVENT_VERSION,
        event_id: stored_event_id(ev.event_id, ev.site_id, who),
        site_id: ev.site_id,
        key_id: Cow::Borrowed(&who.key_id),
        event_type: ev.event_type,
        timestamp: crate::clock::event_time(ev.timestamp_ms, ev.sent_at_ms, received_at),
        received_at,
        client_timestamp: ev.timestamp_ms,
        sent_at: ev.sent_at_ms,
        ip: Cow::Owned(ip),
        user_agent: user_agent.unwrap_or_else(|| client.user_agent()),
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
        preset: None,
    }
}

/// Namespace of the ids browser events are stored under (a fixed random UUID).
const KEYLESS_EVENT_IDS: Uuid = Uuid::from_u128(0x5c1f_0e8a_3b6d_4f27_9a41_d2c8_7e05_b913);

/// The id an event or identify call is stored under: the client's `event_id` when it came
/// with a key; on the browser path, a UUIDv5 of the site and the client's id, so that a
/// keyless request can never write under a keyed event's id (and replace it: rows
/// collapse on the id), while a browser's retry of one event still collapses into one.
/// Without an id, a new UUIDv7.
fn stored_event_id(given: Option<Uuid>, site_id: u32, who: &Admitted) -> Uuid {
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

/// The answer, with CORS headers when a browser request's origin was allowed.
fn respond(result: Result<Response, IngestError>, cors: Option<HeaderValue>) -> Response {
    let mut resp = result.unwrap_or_else(IntoResponse::into_response);
    if let Some(origin) = cors {
        cors_headers(&mut resp, &origin);
    }
    resp
}

pub async fn track<S: Backends>(
    st: &AppState<S>,
    peer: SocketAddr,
    req: Request<impl RequestBody>,
) -> Response {
    let (head, body) = req.into_parts();
    let client = Client::new(peer, &head.headers);
    let mut cors = None;
    let result = track_one(st, &client, &head.headers, body, &mut cors).await;
    respond(result, cors)
}

async fn track_one<S: Backends>(
    st: &AppState<S>,
    client: &Client<'_>,
    headers: &HeaderMap,
    body: impl RequestBody,
    cors: &mut Option<HeaderValue>,
) -> Result<Response, IngestError> {
    let body = read_body(st, headers, body, st.cfg.max_body_bytes).await?;
    let mut fields = fields::parse_event(&body)?;
    let api_key = fields.api_key.take();
    let (ev, credential) =
        require_key(credential(api_key.as_ref(), client), validate_event(fields))?;
    let who = admit(st, credential, ev.site_id, 1, client, cors).await?;
    if suppressed(st, &ev) {
        return Ok(api::success());
    }
    let raw = raw_event(ev, &who, client, st, now_ms());
    if let Err(e) = publish(&*st.sink, &raw).await {
        tracing::warn!(error = %e, "event not acknowledged by Kafka");
        return Err(IngestError::Unavailable("the event could not be stored"));
    }
    EVENTS_ACCEPTED.increment(1);
    Ok(api::success())
}

/// `{api_key, site_id, events:[…]}`: one request for the request limit, and its valid
/// events for the events budget; each event validated on its own. 200 when every valid
/// event is in Kafka; 503 (with per-event results) if any could not be stored, so the
/// client retries those with the same event_id.
pub async fn track_batch<S: Backends>(
    st: &AppState<S>,
    peer: SocketAddr,
    req: Request<impl RequestBody>,
) -> Response {
    let (head, body) = req.into_parts();
    let client = Client::new(peer, &head.headers);
    let mut cors = None;
    let result = track_many(st, &client, &head.headers, body, &mut cors).await;
    respond(result, cors)
}

async fn track_many<S: Backends>(
    st: &AppState<S>,
    client: &Client<'_>,
    headers: &HeaderMap,
    body: impl RequestBody,
    cors: &mut Option<HeaderValue>,
) -> Result<Response, IngestError> {
    let body = read_body(st, headers, body, st.cfg.max_batch_bytes).await?;
    let batch = fields::parse_batch(&body, st.cfg.max_batch_events)?;
    let events = match batch.events {
        Some(Events::List(events)) => events,
        other => {
            let msg = match other {
                Some(Events::TooMany) => format!(
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
    // The envelope carries site_id, api_key and sent_at; its site_id and sent_at are
    // checked as an event's. Its sent_at is each event's that has none of its own.
    let envelope = EventFields {
        site_id: batch.site_id,
        sent_at: batch.sent_at,
        ..EventFields::default()
    };
    let (envelope, credential) = require_key(
        credential(batch.api_key.as_ref(), client),
        validate_event(envelope),
    )?;
    let site_id = envelope.site_id;
    let checked: Vec<Result<TrackEvent<'_>, ValidationErrors>> = events
        .into_iter()
        .map(|item| {
            batch_event(item, site_id).map(|mut ev| {
                ev.sent_at_ms = ev.sent_at_ms.or(envelope.sent_at_ms);
                ev
            })
        })
        .collect();
    let valid = checked.iter().filter(|c| c.is_ok()).count() as u32;
    let who = admit(st, credential, site_id, valid, client, cors).await?;
    let received_at = now_ms();
    let mut results: Vec<Option<BatchItem>> = Vec::with_capacity(checked.len());
    let mut pending = Vec::new();
    // Suppressed events: answered accepted, never published.
    let mut dropped = 0;
    for (i, event) in checked.into_iter().enumerate() {
        match event {
            Ok(ev) if suppressed(st, &ev) => {
                dropped += 1;
                results.push(Some(BatchItem::Accepted {
                    event_id: stored_event_id(ev.event_id, site_id, &who).to_string(),
                }))
            }
            Ok(ev) => {
                pending.push((i, raw_event(ev, &who, client, st, received_at)));
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
    let (mut accepted, mut failed) = (dropped, 0);
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
    EVENTS_ACCEPTED.increment((accepted - dropped) as u64);
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

/// Whether an erasure asked to drop this person's future events: answered 200 (the
/// client must not send it again) and never published.
fn suppressed<S: Backends>(st: &AppState<S>, ev: &TrackEvent<'_>) -> bool {
    let dropped = st.auth.suppressed(
        ev.site_id,
        &[ev.user_id.as_deref(), ev.anonymous_id.as_deref()],
    );
    if dropped {
        metrics::counter!("ingest_events_suppressed_total").increment(1);
    }
    dropped
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

/// `POST /api/identify`: `anonymous_id` becomes an alias of `user_id`, and `traits`
/// merge into the user's profile. Authenticated like an event; 200 once in Kafka.
pub async fn identify<S: Backends>(
    st: &AppState<S>,
    peer: SocketAddr,
    req: Request<impl RequestBody>,
) -> Response {
    let (head, body) = req.into_parts();
    let client = Client::new(peer, &head.headers);
    let mut cors = None;
    let result = identify_one(st, &client, &head.headers, body, &mut cors).await;
    respond(result, cors)
}

async fn identify_one<S: Backends>(
    st: &AppState<S>,
    client: &Client<'_>,
    headers: &HeaderMap,
    body: impl RequestBody,
    cors: &mut Option<HeaderValue>,
) -> Result<Response, IngestError> {
    let body = read_body(st, headers, body, st.cfg.max_body_bytes).await?;
    let mut fields = fields::parse_identify(&body)?;
    let api_key = fields.api_key.take();
    let (id, credential) = require_key(
        credential(api_key.as_ref(), client),
        validate_identify(fields),
    )?;
    let who = admit(st, credential, id.site_id, 0, client, cors).await?;
    if who.browser {
        let takes_identify = st
            .auth
            .site(id.site_id)?
            .is_some_and(|site| site.browser_identify);
        if !takes_identify {
            return Err(IngestError::BrowserIdentifyOff);
        }
    }
    let ids = [Some(&*id.user_id), id.anonymous_id.as_deref()];
    if st.auth.suppressed(id.site_id, &ids) {
        metrics::counter!("ingest_events_suppressed_total").increment(1);
        return Ok(api::success());
    }
    within_profile_caps(st, &id).await?;
    let record = identify_record(&id, &who, client, st, now_ms())?;
    if let Err(e) = st.sink.publish(&record).await {
        tracing::warn!(error = %e, "identify not acknowledged by Kafka");
        return Err(IngestError::Unavailable(
            "the identify call could not be stored",
        ));
    }
    Ok(api::success())
}

/// 400 when the call would give its user more traits or anonymous ids than the caps
/// allow (`profile_caps`); nothing of it is published then.
async fn within_profile_caps<S: Backends>(
    st: &AppState<S>,
    id: &Identify<'_>,
) -> Result<(), IngestError> {
    let names = id
        .traits
        .as_deref()
        .map(profile_caps::trait_names)
        .unwrap_or_default();
    let anonymous_id = id.anonymous_id.as_deref().filter(|a| !a.is_empty());
    let verdict = st
        .caps
        .admit(ProfileWrite {
            site_id: id.site_id,
            user_id: &id.user_id,
            trait_names: &names,
            anonymous_id,
        })
        .await;
    let (field, message) = match verdict {
        CapVerdict::Admitted => return Ok(()),
        CapVerdict::TooManyTraits(cap) => (
            "traits",
            format!(
                "this user would have more than {cap} traits, the most a user may have (MAX_TRAITS_PER_USER); set fewer new traits or remove some (null)"
            ),
        ),
        CapVerdict::TooManyAnonymousIds(cap) => (
            "anonymous_id",
            format!(
                "this user would have more than {cap} anonymous ids, the most a user may have (MAX_ANONYMOUS_IDS_PER_USER)"
            ),
        ),
    };
    metrics::counter!("ingest_profile_caps_refused_total", "cap" => field).increment(1);
    let mut details = ValidationErrors::default();
    details.field_errors.insert(field.into(), vec![message]);
    Err(IngestError::InvalidPayload(details))
}

/// The Kafka message of an identify call, keyed by its user.
fn identify_record<S: Backends>(
    id: &Identify<'_>,
    who: &Admitted,
    client: &Client<'_>,
    st: &AppState<S>,
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
    let ip = client.ip(st).to_string();
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

/// A CORS preflight (`OPTIONS`) of a tracking route: answered for an origin that some
/// site lists (a preflight names no site; the POST that follows is checked against its
/// own site), with the exact origin and credentials, for `sendBeacon`. Any other origin
/// gets 403 and no CORS headers, so the browser does not send the POST.
///
/// A refused preflight counts against the client address's rejection limit, as a refused
/// POST does: probing origins one preflight at a time would otherwise list the domains
/// Rivulet serves, at no cost.
pub fn preflight<S: Backends>(st: &AppState<S>, peer: SocketAddr, headers: &HeaderMap) -> Response {
    let ip = Client::new(peer, headers).ip(st);
    if let Err(blocked) = st.failures.check(ip) {
        return IngestError::TooManyRejections(blocked.0).into_response();
    }
    let origin = headers.get(header::ORIGIN);
    let host = origin.and_then(|o| o.to_str().ok()).and_then(origin_host);
    let allowed = host.is_some_and(|h| st.auth.any_site_accepts(&h).unwrap_or(false));
    let (true, Some(origin)) = (allowed, origin) else {
        st.failures.record(ip);
        return IngestError::OriginNotAllowed.into_response();
    };
    let mut resp = StatusCode::NO_CONTENT.into_response();
    cors_headers(&mut resp, origin);
    let h = resp.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("POST, OPTIONS"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("Content-Type, Content-Encoding, X-Request-Id"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("7200"),
    );
    resp
}

/// 200 when Kafka and Redis answer, the site directory is loaded and no shutdown is
/// under way; 503 otherwise.
pub fn readiness<S: Backends>(st: &AppState<S>) -> Response {
    Readiness::new()
        .check("kafka", st.sink.is_ready())
        .check("redis", st.redis.is_ready())
        .check("sites", st.auth.site(0).is_ok())
        .shutting_down(st.shutting_down.load(Ordering::Relaxed))
        .into_response()
}

pub fn metrics<S: Backends>(st: &AppState<S>) -> Response {
    metrics::gauge!("ingest_kafka_queue_depth").set(st.sink.queue_depth() as f64);
    health::metrics(&st.prometheus)
}

pub fn openapi(headers: &HeaderMap) -> Response {
    // It changes only with ingest's version: an hour in caches, as the script, and after
    // that a 304 while the ETag (a hash of the document) is the same.
    static DOCUMENT: std::sync::LazyLock<crate::asset::Asset> = std::sync::LazyLock::new(|| {
        crate::asset::Asset::new(
            include_bytes!("../openapi.json"),
            "application/json",
            "public, max-age=3600",
            false,
        )
    });
    DOCUMENT.serve(headers)
}

#[cfg(test)]
mod tests {
    use super::{forwarded_for, origin_host, publish, publish_all, Client};
    use crate::sink::SinkError;
    use crate::testing::MemorySink;
    use axum::http::{HeaderMap, HeaderValue};
    use rivulet_common::event::{EventType, RawEvent, RAW_EVENT_VERSION};
    use std::borrow::Cow;

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
        publish(&sink, &ev).await.unwrap();
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
        let outcomes = publish_all(&sink, &events).await;
        assert!(matches!(
            outcomes.as_slice(),
            [Ok(()), Err(SinkError::Timeout), Ok(())]
        ));
        let stored: Vec<_> = sink.events().iter().map(|r| r.event_id).collect();
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
            assert_eq!(Client::new(peer, &h).user_agent(), stored, "{header}");
        }
    }

    #[test]
    fn origin_hosts() {
        for (origin, host) in [
            ("https://Shop.Example", Some("shop.example")),
            ("http://shop.example:8080", Some("shop.example")),
            ("https://[::1]:3000", Some("::1")),
            ("null", None),
            ("shop.example", None),
            ("https://", None),
        ] {
            assert_eq!(origin_host(origin).as_deref(), host, "{origin}");
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
