//! A site's Settings → Privacy: erase a person (the request `rivulet-admin erase` makes),
//! the site's erasure requests with their receipts, how long its events are kept and when
//! they were last pruned, and the downloads of its export (`download`).

use super::download::{self, ExportQuery};
use super::layout::{self, csrf_field, SiteTab};
use super::respond::PageError;
use super::session::SessionCtx;
use super::AppState;
use crate::error::AdminError;
use axum::extract::{Form, Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use clickhouse::Row;
use maud::{html, Markup};
use rivulet_common::ch::Db;
use rivulet_common::privacy::{self, Receipt, SubjectKind};
use rivulet_common::registry::{SiteChanges, MAX_RETENTION_DAYS};
use rivulet_common::schema::queries;
use rivulet_common::CommonError;
use serde::Deserialize;

/// A site's latest retention run (`retention_runs`, written by the enricher).
#[derive(Debug, Row, Deserialize)]
pub struct RetentionRun {
    pub ran_at: u32,
    /// Events before this were removed.
    pub cutoff: u32,
    pub rows_removed: u64,
}

/// When the site's data was last pruned; `None` if never.
pub async fn last_retention_run(
    db: &Db,
    site_id: u32,
) -> Result<Option<RetentionRun>, CommonError> {
    Ok(db
        .client
        .query(queries::RETENTION_LAST_RUN_OF_SITE)
        .bind(site_id)
        .fetch_optional()
        .await?)
}

#[derive(Deserialize)]
pub struct PrivacyQuery {
    requested: Option<String>,
    saved: Option<u8>,
}

pub async fn page(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Extension(session): Extension<SessionCtx>,
    Query(q): Query<PrivacyQuery>,
) -> Result<Response, PageError> {
    let site = st.ops.site(site_id).await?;
    let (receipts, last_run) = tokio::try_join!(
        privacy::receipts(&st.db, Some(site_id)),
        last_retention_run(&st.db, site_id),
    )?;
    // Only a request of this site is announced (the id comes from the address bar).
    let requested = q
        .requested
        .and_then(|id| receipts.iter().find(|r| r.request_id == id))
        .map(|r| {
            format!(
                "Erasure request {} recorded ({}). The enricher erases the data within seconds; reload this page to follow it.",
                r.request_id, r.state
            )
        });
    let saved = q.saved.map(|_| "Retention saved.".to_string());
    let body = html! {
        (layout::site_header(&site, SiteTab::Privacy))
        (layout::notice(requested.or(saved)))
        (erase_form(site_id, &session))
        h2 { "Erasure requests" }
        (requests(&receipts))
        (retention(site_id, site.retention_days, last_run.as_ref(), &session))
        (export_links(site_id))
    };
    Ok(layout::html(layout::page(
        &format!("{} · Privacy", site.name),
        Some(&session),
        body,
    )))
}

fn erase_form(site_id: u32, session: &SessionCtx) -> Markup {
    html! {
        section.card #erase {
            h2 { "Erase a person" }
            p { "Removes their events from every replica, and their profile; events of theirs that arrive again (a redelivery, a replay, an import) are not stored. This cannot be undone." }
            form method="post" action=(format!("/sites/{site_id}/erasures"))
                data-confirm="Erase this person's data? This cannot be undone." {
                (csrf_field(session))
                fieldset {
                    legend { "Who" }
                    label.check {
                        input type="radio" name="kind" value="user_id" checked;
                        span { "A user id: the one your site sent (identify, " code { "user_id" } "), with the anonymous ids it claimed and its traits" }
                    }
                    label.check {
                        input type="radio" name="kind" value="visitor_id";
                        span { "A visitor id: as stored for events sent without a user id" }
                    }
                }
                label for="subject" { "Id" }
                input id="subject" type="text" name="subject" autocomplete="off" required maxlength="255";
                label.check {
                    input type="checkbox" name="suppress" value="1";
                    span { "Also drop their future events (ingest and the enricher drop events of these ids from now on)" }
                }
                p { button.danger type="submit" { "Erase" } }
            }
        }
    }
}

/// The ids a receipt names: `["user_id"|"anonymous_id", id]` pairs.
fn erased_ids(r: &Receipt) -> Vec<(String, String)> {
    serde_json::from_str(&r.ids).unwrap_or_default()
}

fn requests(receipts: &[Receipt]) -> Markup {
    html! {
        @if receipts.is_empty() {
            p.muted #erasure-requests { "No erasure requests for this site." }
        } @else {
            (layout::scroll(html! { table #erasure-requests {
                thead { tr { th { "Requested" } th { "Who" } th { "State" } th.num { "Rows removed" } th { "Ids erased" } th { "Request" } } }
                tbody {
                    @for r in receipts {
                        tr data-request-id=(r.request_id) {
                            td.when { (layout::datetime_ms(r.requested_at_ms)) }
                            td.text {
                                span.muted { (r.subject_kind) } " " (r.subject)
                                @if r.suppress == 1 { " " span.badge title="Their future events are dropped" { "suppressed" } }
                            }
                            td {
                                span.badge.(r.state) { (r.state) }
                                @if !r.reason.is_empty() { br; span.error { (r.reason) } }
                                @if r.is_finished() { br; span.muted { (layout::datetime_ms(r.updated_at_ms)) } }
                            }
                            td.num { (r.rows_removed) }
                            td.text {
                                ul.ids {
                                    @for (kind, id) in erased_ids(r) {
                                        li { span.muted { (kind) } " " (id) }
                                    }
                                }
                            }
                            td { span.mono { (r.request_id) } }
                        }
                    }
                }
            } }))
            p.hint { "States: pending (recorded), running, done, or failed with the reason. Rows removed counts events." }
        }
    }
}

fn retention(site_id: u32, days: u32, last: Option<&RetentionRun>, session: &SessionCtx) -> Markup {
    html! {
        section.card #retention {
            h2 { "Retention" }
            p {
                @if days == 0 { "Events are kept for ever." }
                @else { "Events are kept for " (days) " days." }
            }
            form method="post" action=(format!("/sites/{site_id}/retention")) {
                (csrf_field(session))
                label for="retention_days" { "Keep events for (days)" }
                input id="retention_days" type="number" name="retention_days" min="0"
                    max=(MAX_RETENTION_DAYS) value=(days) required;
                p.hint { "0 keeps everything. The enricher removes older events about once an hour: whole months at once where it can." }
                p { button type="submit" { "Save retention" } }
            }
            p #last-pruned {
                "Last pruned: "
                @match last {
                    None => span.muted { "never" },
                    Some(r) => {
                        (layout::datetime(r.ran_at)) ", events before "
                        (layout::datetime(r.cutoff)) " (" (r.rows_removed) " rows removed)"
                    }
                }
            }
        }
    }
}

fn export_links(site_id: u32) -> Markup {
    let href = |format: &str| format!("/sites/{site_id}/export?format={format}");
    html! {
        section.card #export {
            h2 { "Export" }
            p { "All of this site's events, one per line, streamed as they are read:" }
            div.downloads {
                a.button href=(href("ndjson")) download { "Download NDJSON" }
                a.button href=(href("csv")) download { "Download CSV" }
            }
            p.hint { "NDJSON lines have the tracking API's fields plus the enriched ones, and "
                code { "rivulet-admin import --format rivulet" } " reads them back." }
            h2 { "One person's events" }
            form.search method="get" action=(format!("/sites/{site_id}/export")) {
                label.sr-only for="export-user" { "User id" }
                input id="export-user" type="text" name="user_id" placeholder="User id" required;
                select name="format" aria-label="Format" {
                    option value="ndjson" { "NDJSON" }
                    option value="csv" { "CSV" }
                }
                button.secondary type="submit" { "Export" }
            }
            p.hint { "With the anonymous ids the user claimed. The admin API takes a time range too: "
                code { "GET /api/sites/" (site_id) "/export?format=csv&from=2026-01-01&to=7d" } "." }
        }
    }
}

#[derive(Deserialize)]
pub struct EraseForm {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    subject: String,
    suppress: Option<String>,
}

/// The subject kind of a form or API body.
pub fn subject_kind(kind: &str) -> Result<SubjectKind, AdminError> {
    match kind {
        "user_id" => Ok(SubjectKind::UserId),
        "visitor_id" => Ok(SubjectKind::VisitorId),
        other => Err(AdminError::Usage(format!(
            "{other:?} is not whom to erase: choose a user id or a visitor id"
        ))),
    }
}

pub async fn erase(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Form(f): Form<EraseForm>,
) -> Result<Response, PageError> {
    st.ops.site(site_id).await?;
    let kind = subject_kind(&f.kind)?;
    let suppress = f.suppress.is_some();
    let receipt =
        privacy::request_erasure(&st.db, site_id, kind, f.subject.trim(), suppress).await?;
    crate::cache::forget_profile(&st.ops.redis_url, site_id, f.subject.trim()).await;
    tracing::info!(site_id, request_id = %receipt.request_id, "erasure requested from the dashboard");
    Ok(Redirect::to(&format!(
        "/sites/{site_id}/settings/privacy?requested={}",
        receipt.request_id
    ))
    .into_response())
}

#[derive(Deserialize)]
pub struct RetentionForm {
    #[serde(default)]
    retention_days: String,
}

pub async fn save_retention(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Form(f): Form<RetentionForm>,
) -> Result<Response, PageError> {
    let days = f.retention_days.trim().parse::<u32>().map_err(|_| {
        AdminError::Usage(format!(
            "{:?} is not a number of days: give 0 (keep everything) to {MAX_RETENTION_DAYS}",
            f.retention_days
        ))
    })?;
    let changes = SiteChanges {
        retention_days: Some(days),
        ..SiteChanges::default()
    };
    st.ops.update_site(site_id, &changes).await?;
    tracing::info!(site_id, days, "retention changed from the dashboard");
    Ok(Redirect::to(&format!("/sites/{site_id}/settings/privacy?saved=1")).into_response())
}

/// The download of the Export links and form.
pub async fn export(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Query(q): Query<ExportQuery>,
) -> Result<Response, PageError> {
    st.ops.site(site_id).await?;
    Ok(download::response(st.db.clone(), q.request(site_id)?).await?)
}
