//! The endpoints every service serves beside its own: `/_liveness`, `/_readiness` and
//! `/metrics` (Prometheus). Each service decides what "ready" means for it; the shape of
//! the answer is the same everywhere: 200 when every check passes and no shutdown is
//! under way, else 503, with a JSON body naming each check.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use serde_json::{Map, Value};

/// `/_liveness`: the process is up and answering.
pub fn liveness() -> Response {
    "ok".into_response()
}

/// `/_readiness`, built check by check:
/// `{"ready": …, "<check>": true|false, …, "shutting_down": …, "<info>": …}`.
pub struct Readiness {
    ready: bool,
    body: Map<String, Value>,
}

impl Readiness {
    pub fn new() -> Self {
        Readiness {
            ready: true,
            body: Map::new(),
        }
    }

    /// A dependency that must answer for the service to be ready.
    pub fn check(mut self, name: &str, ok: bool) -> Self {
        self.ready &= ok;
        self.body.insert(name.into(), Value::Bool(ok));
        self
    }

    /// Once shutdown starts, readiness is 503 so that a load balancer stops sending.
    pub fn shutting_down(mut self, yes: bool) -> Self {
        self.ready &= !yes;
        self.body.insert("shutting_down".into(), Value::Bool(yes));
        self
    }

    /// A figure shown with the checks that does not decide readiness.
    pub fn info(mut self, name: &str, value: impl Serialize) -> Self {
        self.body.insert(
            name.into(),
            serde_json::to_value(value).unwrap_or(Value::Null),
        );
        self
    }

    pub fn is_ready(&self) -> bool {
        self.ready
    }
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness::new()
    }
}

impl IntoResponse for Readiness {
    fn into_response(mut self) -> Response {
        self.body.insert("ready".into(), Value::Bool(self.ready));
        let status = if self.ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        (status, Json(Value::Object(self.body))).into_response()
    }
}

/// `/metrics`: the process's Prometheus exposition.
pub fn metrics(handle: &PrometheusHandle) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_check_passes_and_not_shutting_down() {
        assert!(Readiness::new()
            .check("a", true)
            .shutting_down(false)
            .is_ready());
        assert!(!Readiness::new()
            .check("a", true)
            .check("b", false)
            .is_ready());
        assert!(!Readiness::new()
            .check("a", true)
            .shutting_down(true)
            .is_ready());
        assert!(Readiness::new().info("n", 3).is_ready());
    }
}
