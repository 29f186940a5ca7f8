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

mod admission;
mod batch;
mod client;
mod identify;
mod message;

use crate::api::{self, IngestError};
use crate::auth::KeyCheck;
use crate::event::fields;
use crate::event::validate::validate_event;
use crate::event::TrackEvent;
use crate::request_body::{self, Linger, RequestBody};
use crate::sink::Sink;
use crate::state::{AppState, Backends};
use admission::{admit, credential, require_key};
use axum::http::{header, HeaderMap, HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use client::{origin_host, Client};
use message::{publish, raw_event};
use metrics::Counter;
use rivulet_common::epoch::now_ms;
use rivulet_common::health::{self, Readiness};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::LazyLock;
use tokio::time::Instant;

// Registered once: `counter!` builds its key and looks the series up on every call.
static EVENTS_ACCEPTED: LazyLock<Counter> =
    LazyLock::new(|| metrics::counter!("ingest_events_accepted_total"));

/// The `key_id` of a browser event's Kafka message: it was sent with no key.
pub use rivulet_common::event::KEYLESS_KEY_ID as BROWSER_KEY_ID;

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

/// When a request must have its answer: `KAFKA_ACK_TIMEOUT_MS` after its body was read.
/// The key and rate-limit checks count against it (each bounded on its own as well), so
/// a client waits at most the ack time-out plus the time it took to send the body, and
/// then gets a 503 it can retry.
fn answer_deadline<S: Backends>(st: &AppState<S>) -> Instant {
    Instant::now() + st.cfg.kafka_ack_timeout
}

/// The answer, with CORS headers when a browser request's origin was allowed.
fn respond(result: Result<Response, IngestError>, cors: Option<HeaderValue>) -> Response {
    let mut resp = result.unwrap_or_else(IntoResponse::into_response);
    if let Some(origin) = cors {
        cors_headers(&mut resp, &origin);
    }
    resp
}

/// What a tracking request asks for: the three share who sent it (resolved once) and how
/// the answer gets its CORS headers.
#[derive(Clone, Copy)]
pub enum Job {
    /// `POST /api/track`: one event; 200 once it is in Kafka.
    Track,
    /// `POST /api/track/batch`, `{api_key, site_id, events:[…]}`: one request for the
    /// request limit, and its valid events for the events budget; each event validated on
    /// its own. 200 when every valid event is in Kafka; 503 (with per-event results) if
    /// any could not be stored, so the client retries those with the same event_id.
    Batch,
    /// `POST /api/identify`: `anonymous_id` becomes an alias of `user_id`, and `traits`
    /// merge into the user's profile. Authenticated like an event; 200 once in Kafka.
    Identify,
}

pub async fn answer<S: Backends>(
    st: &AppState<S>,
    peer: SocketAddr,
    req: Request<impl RequestBody>,
    job: Job,
) -> Response {
    let (head, body) = req.into_parts();
    let client = Client::new(peer, &head.headers, &st.cfg.trusted_proxies);
    let (headers, mut cors) = (&head.headers, None);
    let result = match job {
        Job::Track => track_one(st, &client, headers, body, &mut cors).await,
        Job::Batch => batch::track_many(st, &client, headers, body, &mut cors).await,
        Job::Identify => identify::identify_one(st, &client, headers, body, &mut cors).await,
    };
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
    let deadline = answer_deadline(st);
    let mut fields = fields::parse_event(&body)?;
    let api_key = fields.api_key.take();
    let (ev, credential) =
        require_key(credential(api_key.as_ref(), client), validate_event(fields))?;
    let who = admit(st, credential, ev.site_id, 1, client, cors).await?;
    if suppressed(st, &ev) {
        return Ok(api::success());
    }
    let raw = raw_event(ev, &who, client, now_ms());
    if let Err(e) = publish(&*st.sink, &raw, deadline).await {
        tracing::warn!(error = %e, "event not acknowledged by Kafka");
        return Err(IngestError::Unavailable("the event could not be stored"));
    }
    EVENTS_ACCEPTED.increment(1);
    Ok(api::success())
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

/// A CORS preflight (`OPTIONS`) of a tracking route: answered for an origin that some
/// site lists (a preflight names no site; the POST that follows is checked against its
/// own site), with the exact origin and credentials, for `sendBeacon`. Any other origin
/// gets 403 and no CORS headers, so the browser does not send the POST.
///
/// A refused preflight counts against the client address's rejection limit, as a refused
/// POST does: probing origins one preflight at a time would otherwise list the domains
/// Rivulet serves, at no cost.
pub fn preflight<S: Backends>(st: &AppState<S>, peer: SocketAddr, headers: &HeaderMap) -> Response {
    let ip = Client::new(peer, headers, &st.cfg.trusted_proxies).ip;
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
            include_bytes!("../../openapi.json"),
            "application/json",
            "public, max-age=3600",
            false,
        )
    });
    DOCUMENT.serve(headers)
}
