//! The wire contract of ingest in one place: response bodies and the error enum, with
//! each variant mapped to exactly one HTTP status (docs/design.md, "Wire contract").

use crate::event::errors::ValidationErrors;
use crate::event::fields::BodyError;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::json;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum IngestError {
    #[error("Invalid JSON body: {0}")]
    InvalidJson(String),
    #[error("Invalid payload")]
    InvalidPayload(ValidationErrors),
    #[error("Invalid API key")]
    InvalidKey,
    #[error("Site not found")]
    SiteNotFound,
    /// A good key without the scope `ingest:write` (a Stats API key).
    #[error("This API key may not send events: it has the scope stats:read only; send events with a key of scope ingest:write")]
    KeyCannotIngest,
    #[error("Rate limit exceeded. Maximum {0} requests per second per API key.")]
    RateLimited(u32),
    /// A key's budget of events (`EVENT_RATE_LIMIT_PER_SECOND`), which batches draw on.
    #[error("Rate limit exceeded. Maximum {0} events per second per API key.")]
    EventsRateLimited(u32),
    /// The browser path's limit per client address and site.
    #[error("Rate limit exceeded. Maximum {0} requests per second per visitor.")]
    BrowserRateLimited(u32),
    /// Too many requests from one address were refused (401, 403, 404): it waits.
    #[error("Too many rejected requests from this address. Retry later.")]
    TooManyRejections(std::time::Duration),
    /// A browser event (no key) from an origin the site does not list, or for no site.
    #[error("Origin not allowed: send browser events from one of the site's domains, or send an API key")]
    OriginNotAllowed,
    /// A keyless request for a site whose browser path is off (`sites update N
    /// --browser-path off`).
    #[error("This site takes events only with an API key: its browser path is off")]
    BrowserPathOff,
    /// A keyless identify call for a site that does not take them (the default).
    #[error("This site takes identify calls only with an API key: send them from your server, or turn on identify from the browser (rivulet-admin sites update SITE_ID --browser-identify on), which lets any visitor of its pages set traits and claim anonymous ids")]
    BrowserIdentifyOff,
    #[error("Request body too large: the limit is {0} bytes")]
    TooLarge(usize),
    #[error("Request body not received in time")]
    BodyTimeout,
    #[error("Unsupported Content-Encoding {0:?}: send identity or gzip")]
    UnsupportedEncoding(String),
    #[error("Method not allowed: use POST")]
    MethodNotAllowed,
    #[error("Not found")]
    NoRoute,
    /// A dependency (Kafka, or the key registry on a cache miss) is unavailable: retry.
    #[error("Service temporarily unavailable: {0}. Retry later.")]
    Unavailable(&'static str),
}

/// A body that is not a JSON object. serde_json rejects invalid UTF-8, and its recursion
/// limit (128) turns deeply nested input into an error rather than a stack overflow.
impl From<BodyError> for IngestError {
    fn from(e: BodyError) -> Self {
        use serde_json::error::Category;
        IngestError::InvalidJson(match e {
            BodyError::Json(e) if e.classify() == Category::Eof => {
                "the JSON body ended early".into()
            }
            e => e.to_string(),
        })
    }
}

/// Seconds a client should wait before retrying a 503.
pub const RETRY_AFTER_UNAVAILABLE: &str = "1";

impl IngestError {
    pub fn status(&self) -> StatusCode {
        match self {
            IngestError::InvalidJson(_) | IngestError::InvalidPayload(_) => StatusCode::BAD_REQUEST,
            IngestError::InvalidKey => StatusCode::UNAUTHORIZED,
            IngestError::OriginNotAllowed
            | IngestError::KeyCannotIngest
            | IngestError::BrowserPathOff
            | IngestError::BrowserIdentifyOff => StatusCode::FORBIDDEN,
            IngestError::SiteNotFound | IngestError::NoRoute => StatusCode::NOT_FOUND,
            IngestError::RateLimited(_)
            | IngestError::EventsRateLimited(_)
            | IngestError::BrowserRateLimited(_)
            | IngestError::TooManyRejections(_) => StatusCode::TOO_MANY_REQUESTS,
            IngestError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            IngestError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            IngestError::UnsupportedEncoding(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            IngestError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            IngestError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The label used in logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            IngestError::InvalidJson(_) => "invalid_json",
            IngestError::InvalidPayload(_) => "invalid_payload",
            IngestError::InvalidKey => "invalid_key",
            IngestError::SiteNotFound => "site_not_found",
            IngestError::KeyCannotIngest => "key_cannot_ingest",
            IngestError::RateLimited(_) => "rate_limited",
            IngestError::EventsRateLimited(_) => "events_rate_limited",
            IngestError::BrowserRateLimited(_) => "browser_rate_limited",
            IngestError::TooManyRejections(_) => "too_many_rejections",
            IngestError::OriginNotAllowed => "origin_not_allowed",
            IngestError::BrowserPathOff => "browser_path_off",
            IngestError::BrowserIdentifyOff => "browser_identify_off",
            IngestError::TooLarge(_) => "too_large",
            IngestError::BodyTimeout => "body_timeout",
            IngestError::UnsupportedEncoding(_) => "unsupported_encoding",
            IngestError::MethodNotAllowed => "method_not_allowed",
            IngestError::NoRoute => "no_route",
            IngestError::Unavailable(_) => "unavailable",
        }
    }

    /// The error body (docs/design.md, "Wire contract"); `details` only for validation errors.
    pub fn body(&self) -> serde_json::Value {
        match self {
            IngestError::InvalidPayload(details) => {
                json!({"success": false, "error": self.to_string(), "details": details})
            }
            _ => json!({"success": false, "error": self.to_string()}),
        }
    }
}

impl IntoResponse for IngestError {
    fn into_response(self) -> Response {
        let mut resp = (self.status(), Json(self.body())).into_response();
        let retry_after = match self {
            IngestError::RateLimited(_)
            | IngestError::EventsRateLimited(_)
            | IngestError::BrowserRateLimited(_) => Some(HeaderValue::from_static("1")),
            IngestError::Unavailable(_) => Some(HeaderValue::from_static(RETRY_AFTER_UNAVAILABLE)),
            IngestError::TooManyRejections(wait) => {
                Some(HeaderValue::from(wait.as_secs_f64().ceil().max(1.0) as u64))
            }
            _ => None,
        };
        if let Some(secs) = retry_after {
            resp.headers_mut().insert(header::RETRY_AFTER, secs);
        }
        if matches!(self, IngestError::MethodNotAllowed) {
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST"));
        }
        resp.extensions_mut().insert(ErrorReason(self.reason()));
        resp
    }
}

/// Carried on error responses so the metrics layer can count rejections by reason.
#[derive(Clone, Copy)]
pub struct ErrorReason(pub &'static str);

/// `{"success":true}`: the answer for an event acknowledged by Kafka.
pub fn success() -> Response {
    // The same bytes for every accepted event: no JSON value to build and serialise.
    (
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"success":true}"#,
    )
        .into_response()
}

/// One entry of a batch answer, in the order of the request's events.
#[derive(Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum BatchItem {
    Accepted {
        event_id: String,
    },
    Invalid {
        error: &'static str,
        details: ValidationErrors,
    },
    /// Could not be made durable (Kafka unavailable); retry with the same event_id.
    Failed {
        event_id: String,
        error: String,
    },
}

#[derive(Debug, Serialize)]
pub struct BatchResponse {
    pub success: bool,
    pub accepted: usize,
    pub rejected: usize,
    pub failed: usize,
    pub results: Vec<BatchItem>,
}
