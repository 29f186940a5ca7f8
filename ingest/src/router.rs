//! Routes and the layer that gives every request an id, a log span and metrics.

use crate::api::ErrorReason;
use crate::handlers;
use crate::metric_handles::Handles;
use crate::state::AppState;
use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use metrics::{Counter, Histogram};
use std::sync::LazyLock;
use std::time::Instant;
use tracing::Instrument;

const TRACK: &str = "/api/track";
const TRACK_BATCH: &str = "/api/track/batch";
const OPENAPI: &str = "/api/openapi.json";
const LIVENESS: &str = "/_liveness";
const READINESS: &str = "/_readiness";
const METRICS: &str = "/metrics";

/// Every route, as the `route` label of the request metrics.
const ROUTES: [&str; 6] = [TRACK, TRACK_BATCH, OPENAPI, LIVENESS, READINESS, METRICS];

pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            TRACK,
            post(handlers::track).fallback(handlers::method_not_allowed),
        )
        .route(
            TRACK_BATCH,
            post(handlers::track_batch).fallback(handlers::method_not_allowed),
        )
        .route(OPENAPI, get(handlers::openapi))
        .route(LIVENESS, get(handlers::liveness))
        .route(READINESS, get(handlers::readiness))
        .route(METRICS, get(handlers::metrics))
        .fallback(handlers::no_route)
        .layer(middleware::from_fn(observe))
        .with_state(state)
}

/// Request id (the client's `X-Request-Id` if sane, else a new one), a tracing span,
/// and per-route request counts and latency. Never logs bodies: they carry API keys.
async fn observe(req: Request, next: Next) -> Response {
    let start = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .and_then(|p| ROUTES.into_iter().find(|r| *r == p.as_str()))
        .unwrap_or("unmatched");
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            v.len() <= 64
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let span = tracing::info_span!("request", request_id = %request_id, route = %route);
    let mut resp = next.run(req).instrument(span.clone()).await;
    let status = resp.status();
    let elapsed = start.elapsed();
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert("x-request-id", v);
    }
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
    let (requests, duration) = HTTP_METRICS.get(&(route, status.as_u16()));
    requests.increment(1);
    duration.record(elapsed.as_secs_f64());
    resp
}

/// Per (route, status): `ingest_http_requests_total` and the route's
/// `ingest_http_request_duration_seconds`.
type HttpMetrics = Handles<(&'static str, u16), (Counter, Histogram)>;

static HTTP_METRICS: LazyLock<HttpMetrics> = LazyLock::new(|| {
    Handles::new(|&(route, status)| {
        (
            metrics::counter!("ingest_http_requests_total", "route" => route, "status" => status.to_string()),
            metrics::histogram!("ingest_http_request_duration_seconds", "route" => route),
        )
    })
});
