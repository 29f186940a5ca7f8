//! A site's Settings: the General tab (domain, name, delete) and the API Key tab
//! (generate a key and see it once, list keys, revoke).

use super::layout::{self, csrf_field, SiteTab};
use super::respond::PageError;
use super::session::{NewKey, SessionCtx};
use super::AppState;
use crate::error::AdminError;
use crate::output::KEY_WARNING;
use axum::extract::{Form, Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use maud::html;
use rivulet_common::registry::SiteChanges;
use serde::Deserialize;

#[derive(Deserialize)]
pub struct GeneralQuery {
    saved: Option<u8>,
}

pub async fn general(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Extension(session): Extension<SessionCtx>,
    Query(q): Query<GeneralQuery>,
) -> Result<Response, PageError> {
    let site = st.ops.site(site_id).await?;
    let body = html! {
        (layout::site_header(&site, SiteTab::General))
        (layout::notice(q.saved.map(|_| "Saved.".to_string())))
        form.card method="post" action=(format!("/sites/{site_id}/settings")) {
            (csrf_field(&session))
            label for="domain" { "Domain" }
            input id="domain" type="text" name="domain" value=(site.domain) required;
            label for="name" { "Name" }
            input id="name" type="text" name="name" value=(site.name);
            label for="timezone" { "Time zone" }
            input id="timezone" type="text" name="timezone" value=(site.time_zone()) list="time-zones" autocomplete="off" spellcheck="false";
            datalist #time-zones { @for tz in COMMON_TIME_ZONES { option value=(tz) {} } }
            p.hint { "An IANA name such as " code { "Europe/Berlin" } " or " code { "America/New_York" } ": the dashboard's and the Stats API's days, weeks and months start at its midnight." }
            p { button type="submit" { "Save" } }
        }
        section.card.danger-zone {
            h2 { "Delete this site" }
            p { "Tracking for the site stops at once (requests get 404); its events stay in ClickHouse. This cannot be undone." }
            form method="post" action=(format!("/sites/{site_id}/delete")) {
                (csrf_field(&session))
                label for="confirm" { "Type the domain, " code { (site.domain) } ", to confirm" }
                input id="confirm" type="text" name="confirm" autocomplete="off" required;
                p { button.danger type="submit" { "Delete site" } }
            }
        }
    };
    Ok(layout::html(layout::page(
        &format!("{} · Settings", site.name),
        Some(&session),
        body,
    )))
}

/// Suggestions for the time zone field (any IANA name is taken).
const COMMON_TIME_ZONES: &[&str] = &[
    "UTC",
    "Europe/London",
    "Europe/Berlin",
    "Europe/Paris",
    "Europe/Madrid",
    "Europe/Moscow",
    "America/New_York",
    "America/Chicago",
    "America/Denver",
    "America/Los_Angeles",
    "America/Sao_Paulo",
    "Asia/Kolkata",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Australia/Sydney",
];

#[derive(Deserialize)]
pub struct SiteForm {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    name: String,
    /// Absent from older forms: the time zone stays.
    timezone: Option<String>,
}

pub async fn update(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Form(f): Form<SiteForm>,
) -> Result<Response, PageError> {
    // The primary domain leads the site's list; the other domains stay.
    let site = st.ops.site(site_id).await?;
    let primary = rivulet_common::registry::validate_domain(&f.domain)?;
    let mut domains = vec![primary.clone()];
    domains.extend(
        site.domains()
            .into_iter()
            .filter(|d| *d != primary && *d != site.domain),
    );
    let name = Some(f.name.trim())
        .filter(|n| !n.is_empty())
        .unwrap_or(&primary);
    let changes = SiteChanges {
        name: Some(name.to_string()),
        domains: Some(domains),
        timezone: f.timezone.filter(|t| !t.trim().is_empty()),
        ..SiteChanges::default()
    };
    st.ops.update_site(site_id, &changes).await?;
    Ok(Redirect::to(&format!("/sites/{site_id}/settings?saved=1")).into_response())
}

#[derive(Deserialize)]
pub struct DeleteForm {
    #[serde(default)]
    confirm: String,
}

pub async fn delete(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Form(f): Form<DeleteForm>,
) -> Result<Response, PageError> {
    let site = st.ops.site(site_id).await?;
    if f.confirm.trim() != site.domain {
        return Err(AdminError::Usage(format!(
            "The site was not deleted: to confirm, type its domain ({}) exactly.",
            site.domain
        ))
        .into());
    }
    st.ops.delete_site(site_id).await?;
    tracing::info!(site_id, "site deleted from the dashboard");
    Ok(Redirect::to(&format!("/sites?deleted={site_id}")).into_response())
}

#[derive(Deserialize)]
pub struct ApiKeyQuery {
    revoked: Option<String>,
}

pub async fn api_key(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Extension(session): Extension<SessionCtx>,
    Query(q): Query<ApiKeyQuery>,
) -> Result<Response, PageError> {
    let site = st.ops.site(site_id).await?;
    let keys = st.ops.list_keys(site_id).await?;
    let used = st.ops.last_used(&keys).await;
    let new_key = st.sessions.take_new_key(&session, site_id);
    let revoked = q
        .revoked
        .and_then(|id| keys.iter().find(|k| k.key_id == id))
        .map(|k| {
            format!(
                "Key {}… was revoked: requests with it are rejected from now on.",
                k.key_prefix
            )
        });
    let body = html! {
        (layout::site_header(&site, SiteTab::ApiKey))
        (layout::notice(revoked))
        @if let Some(k) = &new_key {
            section.card.new-key {
                h2 { "Your new API key" }
                div.key-row {
                    input id="new-api-key" type="text" readonly value=(k.api_key) aria-label="New API key";
                    button.secondary type="button" data-copy="new-api-key" { "Copy" }
                }
                p.warning { (KEY_WARNING) }
                p.hint { "Key id " code { (k.key_id) } ". Rivulet keeps only a hash of the key: if you lose it, generate a new one and revoke this one." }
            }
        }
        div.key-actions {
            form method="post" action=(format!("/sites/{site_id}/keys")) {
                (csrf_field(&session))
                button type="submit" { "Generate API Key" }
            }
            form method="post" action=(format!("/sites/{site_id}/keys")) {
                (csrf_field(&session))
                input type="hidden" name="scope" value="stats:read";
                button.secondary #generate-stats-key type="submit" { "Generate Stats API Key" }
            }
        }
        p.hint { "An API key sends events (" code { "ingest:write" } "); a Stats API key reads the site's statistics with " code { "POST /api/v2/query" } " (" code { "stats:read" } ") and cannot send events. Both are shown once." }
        h2 { "Keys" }
        @if keys.is_empty() {
            p.muted { "This site has no API keys yet." }
        } @else {
            (layout::scroll(html! { table.keys {
                thead { tr { th { "Key" } th { "Scopes" } th { "Created" } th { "Last used" } th { "Status" } th {} } }
                tbody {
                    @for k in &keys {
                        tr data-key-id=(k.key_id) {
                            td { code { (k.key_prefix) "…" } br; span.muted.mono { (k.key_id) } }
                            td.scopes { @for s in k.scope_names() { code { (s) } " " } }
                            td.when { (layout::datetime(k.created_at)) }
                            td {
                                @match used.as_ref().map(|u| u.get(&k.key_id)) {
                                    Some(Some(at)) => (layout::datetime(*at)),
                                    Some(None) => span.muted { "never" },
                                    None => span.muted title="Redis is unreachable" { "unknown" },
                                }
                            }
                            td {
                                @if k.revoked == 1 {
                                    span.badge.revoked { "Revoked " (layout::datetime(k.revoked_at)) }
                                } @else {
                                    span.badge.active { "Active" }
                                }
                            }
                            td {
                                @if k.revoked == 0 {
                                    form.inline method="post" action=(format!("/sites/{site_id}/keys/{}/revoke", k.key_id))
                                        data-confirm=(format!("Revoke {}…? Requests with this key will be rejected at once.", k.key_prefix)) {
                                        (csrf_field(&session))
                                        button.danger type="submit" { "Revoke" }
                                    }
                                }
                            }
                        }
                    }
                }
            } }))
            p.hint { "Last used: when an ingest last accepted a request with the key, to the minute." }
        }
    };
    Ok(layout::html(layout::page(
        &format!("{} · API Key", site.name),
        Some(&session),
        body,
    )))
}

#[derive(Deserialize)]
pub struct KeyForm {
    /// `stats:read` for a key that reads the Stats API; absent: an ingest key.
    scope: Option<String>,
}

pub async fn generate_key(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Extension(session): Extension<SessionCtx>,
    Form(f): Form<KeyForm>,
) -> Result<Response, PageError> {
    let scopes: Vec<String> = f.scope.into_iter().collect();
    let (key, rec) = st.ops.create_key(site_id, &scopes).await?;
    tracing::info!(site_id, key_id = %rec.key_id, "API key generated from the dashboard");
    // Shown by the next GET of the API Key tab and then forgotten (post/redirect/get, so
    // a reload neither shows the key again nor makes another one).
    st.sessions.hold_new_key(
        &session,
        NewKey {
            site_id,
            key_id: rec.key_id,
            api_key: key.reveal().to_string(),
        },
    );
    Ok(Redirect::to(&format!("/sites/{site_id}/settings/api-key")).into_response())
}

pub async fn revoke_key(
    State(st): State<AppState>,
    Path((site_id, key_id)): Path<(u32, String)>,
) -> Result<Response, PageError> {
    let rec = st.ops.site_key(site_id, &key_id).await?;
    st.ops.revoke_key(&rec).await?;
    tracing::info!(site_id, key_id = %key_id, "API key revoked from the dashboard");
    Ok(Redirect::to(&format!(
        "/sites/{site_id}/settings/api-key?revoked={key_id}"
    ))
    .into_response())
}
