//! The Sites page: every active site, and the form that registers a new one.

use super::layout::{self, csrf_field};
use super::respond::PageError;
use super::session::SessionCtx;
use super::AppState;
use axum::extract::{Form, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use maud::html;
use serde::Deserialize;

#[derive(Deserialize)]
pub struct SitesQuery {
    deleted: Option<u32>,
}

pub async fn list(
    State(st): State<AppState>,
    Extension(session): Extension<SessionCtx>,
    Query(q): Query<SitesQuery>,
) -> Result<Response, PageError> {
    let sites = st.reg.list_sites().await?;
    let body = html! {
        h1 { "Sites" }
        (layout::notice(q.deleted.map(|id| format!("Site {id} was deleted. Its events are kept; tracking for it is refused from now on."))))
        @if sites.is_empty() {
            p.muted { "No sites yet. Add the first one below." }
        } @else {
            (layout::scroll(html! { table.sites {
                thead { tr { th.num { "Id" } th { "Name" } th { "Domain" } th { "Created" } th {} } }
                tbody {
                    @for s in &sites {
                        tr {
                            td.num { (s.site_id) }
                            td { a href=(format!("/sites/{}/overview", s.site_id)) { (s.name) } }
                            td.text { (s.domain) }
                            td.when { (layout::datetime(s.created_at)) }
                            td { a href=(format!("/sites/{}/settings", s.site_id)) { "Settings" } }
                        }
                    }
                }
            } }))
        }
        h2 { "Add a site" }
        form.card method="post" action="/sites" {
            (csrf_field(&session))
            label for="domain" { "Domain" }
            input id="domain" type="text" name="domain" placeholder="example.com" required;
            label for="name" { "Name " span.muted { "(optional)" } }
            input id="name" type="text" name="name" placeholder="Example shop";
            p { button type="submit" { "Create site" } }
        }
    };
    Ok(layout::html(layout::page("Sites", Some(&session), body)))
}

#[derive(Deserialize)]
pub struct NewSite {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    name: String,
}

pub async fn create(
    State(st): State<AppState>,
    Form(f): Form<NewSite>,
) -> Result<Response, PageError> {
    let site = st.ops.create_site(&f.domain, Some(&f.name)).await?;
    tracing::info!(site_id = site.site_id, "site created from the dashboard");
    Ok(Redirect::to(&format!("/sites/{}/settings", site.site_id)).into_response())
}
