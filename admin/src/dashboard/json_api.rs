//! The JSON admin API (docs/admin.md, "Admin API"): the same operations as the pages and the
//! CLI, with the CLI's JSON shapes (`output`). Auth: `login::require_api_auth`.

use super::respond::ApiError;
use super::stats;
use super::stats::now_secs;
use super::AppState;
use crate::output;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;

pub async fn list_sites(State(st): State<AppState>) -> Result<Json<Value>, ApiError> {
    let sites = st.reg.list_sites().await?;
    Ok(Json(Value::Array(sites.iter().map(output::site).collect())))
}

#[derive(Deserialize)]
pub struct NewSite {
    domain: String,
    name: Option<String>,
}

pub async fn create_site(
    State(st): State<AppState>,
    Json(f): Json<NewSite>,
) -> Result<Response, ApiError> {
    let site = st.ops.create_site(&f.domain, f.name.as_deref()).await?;
    Ok((StatusCode::CREATED, Json(output::site(&site))).into_response())
}

pub async fn get_site(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(output::site(&st.ops.site(site_id).await?)))
}

pub async fn delete_site(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(output::site(&st.ops.delete_site(site_id).await?)))
}

pub async fn list_keys(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
) -> Result<Json<Value>, ApiError> {
    let keys = st.ops.list_keys(site_id).await?;
    let used = st.ops.last_used(&keys).await;
    Ok(Json(Value::Array(
        keys.iter()
            .map(|k| output::key_used(k, used.as_ref().and_then(|u| u.get(&k.key_id).copied())))
            .collect(),
    )))
}

pub async fn create_key(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
) -> Result<Response, ApiError> {
    let (key, rec) = st.ops.create_key(site_id).await?;
    Ok((StatusCode::CREATED, Json(output::new_key(&rec, &key))).into_response())
}

pub async fn revoke_key(
    State(st): State<AppState>,
    Path((site_id, key_id)): Path<(u32, String)>,
) -> Result<Json<Value>, ApiError> {
    let rec = st.ops.site_key(site_id, &key_id).await?;
    Ok(Json(output::key(&st.ops.revoke_key(&rec).await?)))
}

pub async fn overview(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
) -> Result<Json<stats::Overview>, ApiError> {
    st.ops.site(site_id).await?;
    Ok(Json(stats::load(&st.db, site_id, now_secs()).await?))
}
