//! The one error type of `rivulet-admin`. The CLI prints it as a sentence; the dashboard
//! maps each variant to exactly one HTTP status here, and shows it as a page or as JSON
//! (`dashboard::respond`).

use axum::http::StatusCode;
use rivulet_common::CommonError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum AdminError {
    /// What was asked cannot be done as asked (a bad argument, form or body): the sentence
    /// says what to give instead.
    #[error("{0}")]
    Usage(String),
    /// The dashboard could not listen on its address. Its own variant, so that an address
    /// in use or not this host's is not mistaken for a bad argument.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// A file, stream or connection failed to be read or written; `doing` says which
    /// (`cannot write /var/lib/…`). A failure of this machine, not of the request.
    #[error("{doing}: {source}")]
    Io {
        doing: String,
        #[source]
        source: std::io::Error,
    },
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
    /// ClickHouse stopped a Stats API query at its memory limit (`max_memory_usage`).
    #[error("The query needs more memory than a query may use: narrow its date range or filters.")]
    QueryTooLarge,
    /// Too many requests with wrong API keys from one address: wait this many seconds.
    #[error("Too many rejected requests from this address. Retry in {0} s.")]
    TooManyRejections(u64),
    /// A Stats API key past its rate limit: retry after this many seconds.
    #[error("Rate limit exceeded: at most {limit} Stats API queries a minute per key. Retry in {retry_after} s.")]
    RateLimited { limit: u32, retry_after: u64 },
}

impl AdminError {
    /// An I/O error, with what was being done when it happened.
    pub fn io(doing: impl Into<String>, source: std::io::Error) -> Self {
        AdminError::Io {
            doing: doing.into(),
            source,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            AdminError::Usage(_) => StatusCode::BAD_REQUEST,
            AdminError::Bind { .. } | AdminError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            AdminError::NotFound(_) => StatusCode::NOT_FOUND,
            AdminError::Refused(_) => StatusCode::UNPROCESSABLE_ENTITY,
            AdminError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            AdminError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            AdminError::Forbidden(_) => StatusCode::FORBIDDEN,
            AdminError::TooManyTries(_)
            | AdminError::TooManyRejections(_)
            | AdminError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            AdminError::QueryTimeout | AdminError::QueryTooLarge => StatusCode::SERVICE_UNAVAILABLE,
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

#[cfg(test)]
mod tests {
    use super::AdminError;
    use axum::http::StatusCode;
    use std::error::Error;
    use std::io;

    #[test]
    fn a_bind_failure_says_so_and_keeps_its_cause() {
        let e = AdminError::Bind {
            addr: "ADMIN_ADDR=127.0.0.1:3002".into(),
            source: io::Error::from(io::ErrorKind::AddrInUse),
        };
        assert!(e
            .to_string()
            .starts_with("cannot listen on ADMIN_ADDR=127.0.0.1:3002: "));
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let cause = e.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(cause.map(io::Error::kind), Some(io::ErrorKind::AddrInUse));
    }

    #[test]
    fn an_io_error_is_a_server_error_not_a_bad_request() {
        let e = AdminError::io("cannot write the export", io::Error::other("disk full"));
        assert_eq!(e.to_string(), "cannot write the export: disk full");
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(e.source().is_some());
        assert_eq!(
            AdminError::Usage("give --site".into()).status(),
            StatusCode::BAD_REQUEST
        );
    }
}
