use rivulet_common::CommonError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum AdminError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0} is unreachable; start it (scripts/stack up) or check the URL")]
    Unavailable(String),
    #[error("{0}")]
    Common(#[from] CommonError),
}
