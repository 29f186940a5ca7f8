//! The JSON admin API (docs/admin.md, "Admin API"): the same operations as the pages and the
//! CLI, with the CLI's JSON shapes (`output`). Auth: `login::require_api_auth`.

use super::download::{self, ExportQuery};
use super::respond::{ApiError, ApiJson};
use super::stats;
use super::stats::now_secs;
use super::AppState;
use crate::error::AdminError;
use crate::{erase, output, people};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rivulet_common::privacy::{self, SubjectKind};
use rivulet_common::registry::SiteChanges;
use serde::Deserialize;
use serde_json::Value;
use std::time::Duration;

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
    ApiJson(f): ApiJson<NewSite>,
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

/// `PATCH /api/sites/{id}`: any of the settings `rivulet-admin sites update` changes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SitePatch {
    name: Option<String>,
    /// The whole list; the first is the primary domain.
    domains: Option<Vec<String>>,
    allow_subdomains: Option<bool>,
    retention_days: Option<u32>,
    /// Whether keyless requests (the tracking script) are taken.
    browser_path: Option<bool>,
    /// Whether keyless identify calls are taken.
    browser_identify: Option<bool>,
    /// An IANA time zone name.
    timezone: Option<String>,
}

pub async fn update_site(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    ApiJson(p): ApiJson<SitePatch>,
) -> Result<Json<Value>, ApiError> {
    let changes = SiteChanges {
        name: p.name,
        domains: p.domains,
        allow_subdomains: p.allow_subdomains,
        retention_days: p.retention_days,
        browser_path: p.browser_path,
        browser_identify: p.browser_identify,
        timezone: p.timezone,
    };
    // Nothing to change: the site as it is, without writing a new version.
    if changes == SiteChanges::default() {
        return Ok(Json(output::site(&st.ops.site(site_id).await?)));
    }
    Ok(Json(output::site(
        &st.ops.update_site(site_id, &changes).await?,
    )))
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

/// `POST /api/sites/{id}/keys`, with an optional body `{"scopes": [...]}` (none:
/// `ingest:write`).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    #[serde(default)]
    scopes: Vec<String>,
}

pub async fn create_key(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let scopes = if body.iter().all(u8::is_ascii_whitespace) {
        Vec::new()
    } else {
        serde_json::from_slice::<NewKey>(&body)
            .map_err(|e| AdminError::Usage(format!("the body must be {{\"scopes\": [...]}}: {e}")))?
            .scopes
    };
    let (key, rec) = st.ops.create_key(site_id, &scopes).await?;
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

/// `POST /api/sites/{id}/erasures`: whom to erase, as `rivulet-admin erase` takes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewErasure {
    user_id: Option<String>,
    visitor_id: Option<String>,
    #[serde(default)]
    suppress: bool,
}

pub async fn create_erasure(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    ApiJson(e): ApiJson<NewErasure>,
) -> Result<Response, ApiError> {
    st.ops.site(site_id).await?;
    let (kind, subject) = match (e.user_id, e.visitor_id) {
        (Some(u), None) => (SubjectKind::UserId, u),
        (None, Some(v)) => (SubjectKind::VisitorId, v),
        _ => {
            return Err(AdminError::Usage(
                "say whom to erase: give exactly one of user_id and visitor_id".into(),
            )
            .into())
        }
    };
    let receipt = privacy::request_erasure(&st.db, site_id, kind, &subject, e.suppress).await?;
    crate::cache::forget_profile(&st.ops.redis_url, site_id, &subject).await;
    tracing::info!(site_id, request_id = %receipt.request_id, "erasure requested through the admin API");
    Ok((StatusCode::CREATED, Json(output::receipt(&receipt))).into_response())
}

pub async fn list_erasures(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
) -> Result<Json<Value>, ApiError> {
    st.ops.site(site_id).await?;
    Ok(Json(erase::list(&st.db, Some(site_id)).await?))
}

pub async fn get_erasure(
    State(st): State<AppState>,
    Path(request_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        erase::status(&st.db, &request_id, false, Duration::ZERO).await?,
    ))
}

pub async fn user_profile(
    State(st): State<AppState>,
    Path((site_id, user_id)): Path<(u32, String)>,
) -> Result<Json<Value>, ApiError> {
    st.ops.site(site_id).await?;
    Ok(Json(people::show(&st.db, site_id, &user_id).await?))
}

/// The export, streamed (`download`).
pub async fn export(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Query(q): Query<ExportQuery>,
) -> Result<Response, ApiError> {
    st.ops.site(site_id).await?;
    Ok(download::response(st.db.clone(), q.request(site_id)?).await?)
}
