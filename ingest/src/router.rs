//! Routes and the layer that gives every request an id, a log span and metrics.

use crate::api::ErrorReason;
use crate::handlers;
use crate::state::AppState;
use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use std::time::Instant;
use tracing::Instrument;

pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/api/track",
            post(handlers::track).fallback(handlers::method_not_allowed),
        )
        .route(
            "/api/track/batch",
            post(handlers::track_batch).fallback(handlers::method_not_allowed),
        )
        .route("/api/openapi.json", get(handlers::openapi))
        .route("/_liveness", get(handlers::liveness))
        .route("/_readiness", get(handlers::readiness))
        .route("/metrics", get(handlers::metrics))
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
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
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
    metrics::counter!("ingest_http_requests_total", "route" => route.clone(), "status" => status.as_u16().to_string()).increment(1);
    metrics::histogram!("ingest_http_request_duration_seconds", "route" => route)
        .record(elapsed.as_secs_f64());
    resp
}
