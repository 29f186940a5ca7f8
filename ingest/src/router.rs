//! Routes, and what every request gets around its handler: an id, a log span, and
//! per-route request counts and latency. The public listener serves tracking, the
//! script, the OpenAPI document and liveness; the internal one (`INGEST_INTERNAL_ADDR`)
//! serves readiness and metrics, which say more about the service than the public
//! should know.
//!
//! Routing is a `match` on the path and the method rather than axum's `Router` with a
//! `from_fn` layer: ingest has six fixed routes, and the router's per-request work (a
//! cloned route service, boxed futures, an extensions map for the matched path and the
//! peer address, a labelled-metric lookup under a lock) was a measurable share of
//! ingest's CPU (docs/decisions/002-ingest-request-path.md).

use crate::api::{ErrorReason, IngestError};
use crate::handlers::{self, answer, Job};
use crate::request_body::RequestBody;
use crate::state::{AppState, Backends};
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use metrics::{Counter, Histogram};
use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::{LazyLock, OnceLock};
use std::time::Instant;
use tracing::Instrument;

/// Every route; `label` is the `route` label of the request metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Track,
    TrackBatch,
    Identify,
    Script,
    OpenApi,
    Liveness,
    Readiness,
    Metrics,
    Unmatched,
}

impl Route {
    const ALL: [Route; 9] = [
        Route::Track,
        Route::TrackBatch,
        Route::Identify,
        Route::Script,
        Route::OpenApi,
        Route::Liveness,
        Route::Readiness,
        Route::Metrics,
        Route::Unmatched,
    ];

    /// Paths match exactly, as axum's did: no trailing slash, no case folding.
    pub fn of(path: &str) -> Route {
        match path {
            "/api/track" => Route::Track,
            "/api/track/batch" => Route::TrackBatch,
            "/api/identify" => Route::Identify,
            "/api/script.js" => Route::Script,
            "/api/openapi.json" => Route::OpenApi,
            "/_liveness" => Route::Liveness,
            "/_readiness" => Route::Readiness,
            "/metrics" => Route::Metrics,
            _ => Route::Unmatched,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Route::Track => "/api/track",
            Route::TrackBatch => "/api/track/batch",
            Route::Identify => "/api/identify",
            Route::Script => "/api/script.js",
            Route::OpenApi => "/api/openapi.json",
            Route::Liveness => "/_liveness",
            Route::Readiness => "/_readiness",
            Route::Metrics => "/metrics",
            Route::Unmatched => "unmatched",
        }
    }
}

/// Which listener a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    Public,
    Internal,
}

/// Handles one request of the public listener.
pub async fn handle<S: Backends, B: RequestBody>(
    st: AppState<S>,
    peer: SocketAddr,
    req: Request<B>,
) -> Response {
    handle_on(Listener::Public, st, peer, req).await
}

/// Handles one request of the internal listener.
pub async fn handle_internal<S: Backends, B: RequestBody>(
    st: AppState<S>,
    peer: SocketAddr,
    req: Request<B>,
) -> Response {
    handle_on(Listener::Internal, st, peer, req).await
}

/// Handles one request: routes it, and gives it an id (the client's `X-Request-Id` if
/// sane, else a new one, echoed in the response), a tracing span, and its metrics.
/// Never logs bodies: they carry API keys.
async fn handle_on<S: Backends, B: RequestBody>(
    listener: Listener,
    st: AppState<S>,
    peer: SocketAddr,
    req: Request<B>,
) -> Response {
    let start = Instant::now();
    let route = Route::of(req.uri().path());
    let request_id = request_id(req.headers());
    let span = tracing::info_span!(
        "request",
        request_id = request_id.to_str().unwrap_or_default(),
        route = route.label()
    );
    let mut resp = match listener {
        Listener::Public => {
            dispatch(&st, route, peer, req)
                .instrument(span.clone())
                .await
        }
        Listener::Internal => dispatch_internal(&st, route, &req),
    };
    let status = resp.status();
    let elapsed = start.elapsed();
    resp.headers_mut().insert("x-request-id", request_id);
    let reason = resp.extensions().get::<ErrorReason>().map(|r| r.0);
    span.in_scope(|| {
        if status.is_server_error() {
            tracing::warn!(
                status = status.as_u16(),
                reason,
                ms = elapsed.as_millis() as u64,
                "request failed"
            );
        } else {
            tracing::debug!(
                status = status.as_u16(),
                reason,
                ms = elapsed.as_millis() as u64,
                "request"
            );
        }
    });
    HTTP_METRICS.record(route, status, elapsed.as_secs_f64());
    resp
}

async fn dispatch<S: Backends, B: RequestBody>(
    st: &AppState<S>,
    route: Route,
    peer: SocketAddr,
    req: Request<B>,
) -> Response {
    let read_only = matches!(*req.method(), Method::GET | Method::HEAD);
    let tracking = matches!(route, Route::Track | Route::TrackBatch | Route::Identify);
    match route {
        _ if tracking && req.method() == Method::OPTIONS => {
            handlers::preflight(st, peer, req.headers())
        }
        Route::Track if req.method() == Method::POST => answer(st, peer, req, Job::Track).await,
        Route::TrackBatch if req.method() == Method::POST => {
            answer(st, peer, req, Job::Batch).await
        }
        Route::Identify if req.method() == Method::POST => {
            answer(st, peer, req, Job::Identify).await
        }
        _ if tracking => IngestError::MethodNotAllowed.into_response(),
        // Off the public port: they tell an attacker what is down.
        Route::Unmatched | Route::Readiness | Route::Metrics => {
            IngestError::NoRoute.into_response()
        }
        _ if !read_only => get_only(),
        Route::Script => crate::script::serve(req.headers()),
        Route::OpenApi => handlers::openapi(req.headers()),
        Route::Liveness => rivulet_common::health::liveness(),
        Route::Track | Route::TrackBatch | Route::Identify => unreachable!("tracking routes above"),
    }
}

/// The internal listener: liveness, readiness and metrics only.
fn dispatch_internal<S: Backends, B>(st: &AppState<S>, route: Route, req: &Request<B>) -> Response {
    let read_only = matches!(*req.method(), Method::GET | Method::HEAD);
    match route {
        Route::Liveness | Route::Readiness | Route::Metrics if !read_only => get_only(),
        Route::Liveness => rivulet_common::health::liveness(),
        Route::Readiness => handlers::readiness(st),
        Route::Metrics => handlers::metrics(st),
        _ => IngestError::NoRoute.into_response(),
    }
}

/// 405 for the read-only routes, as axum answered it: no body, `Allow: GET,HEAD`.
fn get_only() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, HeaderValue::from_static("GET,HEAD"))],
    )
        .into_response()
}

/// The client's `X-Request-Id` when it is short and plain, else a new id: 32 hex digits,
/// a random prefix per thread and that thread's count, so that making one takes no
/// random numbers and touches no memory shared with other threads.
fn request_id(headers: &HeaderMap) -> HeaderValue {
    if let Some(v) = headers.get("x-request-id").filter(|v| {
        v.len() <= 64
            && v.as_bytes()
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
    }) {
        return v.clone();
    }
    thread_local! {
        static NEXT: Cell<(u64, u64)> = Cell::new((thread_prefix(), 0));
    }
    let (prefix, n) = NEXT.with(|c| {
        let (prefix, n) = c.get();
        c.set((prefix, n.wrapping_add(1)));
        (prefix, n)
    });
    let mut id = [0u8; 32];
    hex_into(&mut id[..16], prefix);
    hex_into(&mut id[16..], n);
    HeaderValue::from_bytes(&id).expect("hex digits are a valid header value")
}

fn thread_prefix() -> u64 {
    let mut bytes = [0u8; 8];
    // A random source that fails leaves the prefix at 0: ids are then unique per thread,
    // which is all a log correlation id needs.
    let _ = getrandom::fill(&mut bytes);
    u64::from_le_bytes(bytes)
}

fn hex_into(out: &mut [u8], mut v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in out.iter_mut().rev() {
        *b = DIGITS[(v & 0xf) as usize];
        v >>= 4;
    }
}

/// `ingest_http_requests_total` by route and status, and
/// `ingest_http_request_duration_seconds` by route. Each handle is registered on first use
/// and then read without a lock: a slot per route and status code.
struct HttpMetrics {
    routes: Vec<RouteMetrics>,
}

struct RouteMetrics {
    duration: Histogram,
    /// Indexed by status code - 100.
    requests: Vec<OnceLock<Counter>>,
}

impl HttpMetrics {
    fn record(&self, route: Route, status: StatusCode, seconds: f64) {
        let m = &self.routes[route as usize];
        m.duration.record(seconds);
        let code = status.as_u16();
        m.requests[usize::from(code - 100)]
            .get_or_init(|| {
                metrics::counter!("ingest_http_requests_total", "route" => route.label(), "status" => code.to_string())
            })
            .increment(1);
    }
}

static HTTP_METRICS: LazyLock<HttpMetrics> = LazyLock::new(|| {
    HttpMetrics {
    routes: Route::ALL
        .iter()
        .map(|route| RouteMetrics {
            duration: metrics::histogram!("ingest_http_request_duration_seconds", "route" => route.label()),
            // StatusCode is always 100..=999.
            requests: (100..1000).map(|_| OnceLock::new()).collect(),
        })
        .collect(),
}
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match_exactly_and_in_order_of_all() {
        for (i, route) in Route::ALL.iter().enumerate() {
            assert_eq!(*route as usize, i);
            if *route != Route::Unmatched {
                assert_eq!(Route::of(route.label()), *route);
            }
        }
        for other in [
            "/api/track/",
            "/API/track",
            "/",
            "",
            "/api/track/batch/x",
            "unmatched",
        ] {
            assert_eq!(Route::of(other), Route::Unmatched, "{other}");
        }
    }

    #[test]
    fn request_ids_are_kept_when_sane_and_made_unique_otherwise() {
        let mut h = HeaderMap::new();
        h.insert("x-request-id", HeaderValue::from_static("abc-DEF_123"));
        assert_eq!(request_id(&h), "abc-DEF_123");
        for bad in ["a b", "a/b", &"x".repeat(65)] {
            h.insert("x-request-id", HeaderValue::from_str(bad).unwrap());
            assert_ne!(request_id(&h), bad);
        }
        let (a, b) = (request_id(&HeaderMap::new()), request_id(&HeaderMap::new()));
        assert_ne!(a, b);
        for id in [a, b] {
            assert_eq!(id.len(), 32);
            assert!(id.as_bytes().iter().all(u8::is_ascii_hexdigit));
        }
        let other_thread = std::thread::spawn(|| request_id(&HeaderMap::new()))
            .join()
            .unwrap();
        assert_ne!(
            other_thread.as_bytes()[..16],
            request_id(&HeaderMap::new()).as_bytes()[..16]
        );
    }
}
