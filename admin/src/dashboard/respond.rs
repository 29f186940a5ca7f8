//! How an `AdminError` reaches the user: a page for the dashboard, JSON for the API.
//! The status comes from `AdminError::status`, the one mapping to HTTP.

use super::layout;
use crate::error::AdminError;
use axum::response::{IntoResponse, Response};
use axum::Json;
use maud::html;

fn log(e: &AdminError) {
    if e.status().is_server_error() {
        tracing::error!(error = %e, "dashboard request failed");
    }
}

pub fn page_error(e: AdminError) -> Response {
    log(&e);
    let status = e.status();
    let body = html! {
        section.error-page {
            h1 { (status.canonical_reason().unwrap_or("Error")) }
            p.error role="alert" { (e.to_string()) }
            p { a href="/sites" { "Back to the sites" } }
        }
    };
    (status, layout::html(layout::page("Error", None, body))).into_response()
}

pub fn api_error(e: AdminError) -> Response {
    log(&e);
    (
        e.status(),
        Json(serde_json::json!({ "error": e.to_string() })),
    )
        .into_response()
}

/// The error of a page handler, shown as an HTML page.
pub struct PageError(pub AdminError);

impl<E: Into<AdminError>> From<E> for PageError {
    fn from(e: E) -> Self {
        PageError(e.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        page_error(self.0)
    }
}

/// The error of an API handler, shown as `{"error": "…"}`.
pub struct ApiError(pub AdminError);

impl<E: Into<AdminError>> From<E> for ApiError {
    fn from(e: E) -> Self {
        ApiError(e.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        api_error(self.0)
    }
}

/// An API handler's JSON body. A body that is not JSON, or not the JSON the handler
/// takes, is a 400 in the API's `{"error": …}` shape (axum's own answer is plain text).
pub struct ApiJson<T>(pub T);

impl<S, T> axum::extract::FromRequest<S> for ApiJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(ApiError(AdminError::Usage(rejection.body_text()))),
        }
    }
}
