//! The one error type of `rivulet-admin`. The CLI prints it as a sentence; the dashboard
//! maps each variant to exactly one HTTP status here, and shows it as a page or as JSON
//! (`dashboard::respond`).

use axum::http::StatusCode;
use rivulet_common::CommonError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum AdminError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    NotFound(String),
    /// A file that `install` will not put in place (it fails to load or its checks).
    #[error("{0}")]
    Refused(String),
    #[error("{0} is unreachable; start it (scripts/stack up) or check the URL")]
    Unavailable(String),
    /// No credentials, or wrong ones (dashboard and admin API).
    #[error("{0}")]
    Unauthorized(String),
    /// Credentials are fine but the request is not allowed (a missing or stale CSRF token).
    #[error("{0}")]
    Forbidden(String),
    /// Too many tries of the admin token from one address: wait this many seconds.
    #[error("Too many wrong admin tokens from this address: wait {0} s and try again.")]
    TooManyTries(u64),
    #[error("{0}")]
    Common(#[from] CommonError),
    /// A Stats API query the engine refused (the field and what is allowed), or could not
    /// answer.
    #[error("{0}")]
    Stats(#[from] rivulet_stats::StatsError),
    /// ClickHouse stopped a Stats API query at its time limit.
    #[error("The query took longer than the time it may take: narrow its date range or filters, or retry later.")]
    QueryTimeout,
    /// Too many requests with wrong API keys from one address: wait this many seconds.
    #[error("Too many rejected requests from this address. Retry in {0} s.")]
    TooManyRejections(u64),
    /// A Stats API key past its rate limit: retry after this many seconds.
    #[error("Rate limit exceeded: at most {limit} Stats API queries a minute per key. Retry in {retry_after} s.")]
    RateLimited { limit: u32, retry_after: u64 },
}

impl AdminError {
    pub fn status(&self) -> StatusCode {
        match self {
            AdminError::Usage(_) => StatusCode::BAD_REQUEST,
            AdminError::NotFound(_) => StatusCode::NOT_FOUND,
            AdminError::Refused(_) => StatusCode::UNPROCESSABLE_ENTITY,
            AdminError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            AdminError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            AdminError::Forbidden(_) => StatusCode::FORBIDDEN,
            AdminError::TooManyTries(_)
            | AdminError::TooManyRejections(_)
            | AdminError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            AdminError::QueryTimeout => StatusCode::SERVICE_UNAVAILABLE,
            AdminError::Stats(e) => {
                StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
            AdminError::Common(e) => match e {
                CommonError::Invalid(_) => StatusCode::BAD_REQUEST,
                CommonError::NotFound(_) => StatusCode::NOT_FOUND,
                CommonError::Config(_) => StatusCode::INTERNAL_SERVER_ERROR,
                // A client library's error (which ones exist depends on the features the
                // workspace enables): the service behind it is unavailable.
                #[allow(unreachable_patterns)]
                _ => StatusCode::SERVICE_UNAVAILABLE,
            },
        }
    }
}
