//! A site's People tab: find a user by id, and their page (`rivulet-admin users show` as
//! HTML): traits, the anonymous ids they claimed, first and last seen, events and
//! sessions, and their latest events.

use super::layout::{self, SiteTab};
use super::respond::PageError;
use super::session::SessionCtx;
use super::AppState;
use crate::error::AdminError;
use crate::people::{self, Profile};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use maud::{html, Markup};
use rivulet_common::registry::Site;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
pub struct SearchQuery {
    user_id: Option<String>,
}

/// The People tab: the search box, and the user it names (`?user_id=`, which also reaches
/// ids that cannot be a path segment, such as `..`).
pub async fn search(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Extension(session): Extension<SessionCtx>,
    Query(q): Query<SearchQuery>,
) -> Result<Response, PageError> {
    let site = st.ops.site(site_id).await?;
    match q.user_id.filter(|u| !u.is_empty()) {
        Some(user_id) => show(&st, &site, &session, &user_id).await,
        None => Ok(render(
            &site,
            &session,
            "",
            StatusCode::OK,
            html! {
                p.muted { "Enter the user id your site sends (with " code { "identify" } " or an event's " code { "user_id" } ") to see what Rivulet knows of that person." }
            },
        )),
    }
}

/// `/sites/{id}/users/{user_id}`: one user's page.
pub async fn page(
    State(st): State<AppState>,
    Path((site_id, user_id)): Path<(u32, String)>,
    Extension(session): Extension<SessionCtx>,
) -> Result<Response, PageError> {
    let site = st.ops.site(site_id).await?;
    show(&st, &site, &session, &user_id).await
}

async fn show(
    st: &AppState,
    site: &Site,
    session: &SessionCtx,
    user_id: &str,
) -> Result<Response, PageError> {
    match people::profile(&st.db, site.site_id, user_id).await {
        Ok(p) => Ok(render(site, session, user_id, StatusCode::OK, profile(&p))),
        Err(AdminError::NotFound(_)) => Ok(render(
            site,
            session,
            user_id,
            StatusCode::NOT_FOUND,
            html! {
                section.card #no-such-user {
                    h2 { "No such user" }
                    p { "This site has no user " code { (user_id) } ": no event, identify call or trait names that id." }
                    p.hint { "User ids are matched exactly, capitals included. A visitor who was never identified has no user id: their events are counted under a visitor id." }
                }
            },
        )),
        Err(e) => Err(e.into()),
    }
}

fn render(
    site: &Site,
    session: &SessionCtx,
    user_id: &str,
    status: StatusCode,
    content: Markup,
) -> Response {
    let body = html! {
        (layout::site_header(site, SiteTab::People))
        form.search method="get" action=(format!("/sites/{}/users", site.site_id)) role="search" {
            label.sr-only for="user-search" { "User id" }
            input id="user-search" type="search" name="user_id" value=(user_id) placeholder="User id" required;
            button type="submit" { "Find user" }
        }
        (content)
    };
    let title = if user_id.is_empty() {
        format!("{} · People", site.name)
    } else {
        format!("{user_id} · {}", site.name)
    };
    (
        status,
        layout::html(layout::page(&title, Some(session), body)),
    )
        .into_response()
}

/// A trait's value: a string as it is, anything else as its JSON.
fn trait_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn profile(p: &Profile) -> Markup {
    let site_id = p.site_id;
    let when = |t: Option<u32>| t.map(layout::datetime).unwrap_or_else(|| "—".into());
    let export = |format: &str| {
        let query = serde_urlencoded::to_string([("format", format), ("user_id", &p.user_id)])
            .unwrap_or_default();
        format!("/sites/{site_id}/export?{query}")
    };
    html! {
        section #profile {
            h2 { "User " code #profile-user-id { (p.user_id) } }
            dl.facts.card {
                dt { "First seen" } dd { (when(p.first_seen)) }
                dt { "Last seen" } dd { (when(p.last_seen)) }
                dt { "Events" } dd #profile-events { (p.events) }
                dt { "Sent before identify" } dd #profile-anonymous-events { (p.events_before_identify) }
                dt { "Sessions" } dd { (p.sessions) }
            }
            div.grid {
                section.card #traits {
                    h2 { "Traits" }
                    @if p.traits.is_empty() {
                        p.muted { "No traits." }
                    } @else {
                        (layout::scroll(html! { table {
                            thead { tr { th { "Name" } th { "Value" } th { "Set by" } } }
                            tbody {
                                @for (name, value) in &p.traits {
                                    tr {
                                        td.text { (name) }
                                        td.text { (trait_text(value)) }
                                        td { @if p.keyless_traits.contains(name) { span.muted title="Set without an API key, by a page of the site's domains: any visitor could have sent it." { "browser" } } @else { "server" } }
                                    }
                                }
                            }
                        } }))
                        p.hint { "Last changed " (layout::datetime_ms(p.traits_updated_ms)) ". A value a server set with its API key is never changed from the browser." }
                    }
                }
                section.card #aliases {
                    h2 { "Anonymous ids" }
                    @if p.aliases.is_empty() {
                        p.muted { "None claimed: no identify call named an anonymous id for this user." }
                    } @else {
                        ul.ids { @for a in &p.aliases { li.mono { (a) } } }
                        p.hint { "Ids this user claimed with identify; their earlier events count as this user's." }
                    }
                }
            }
            @if p.truncated {
                p.notice { "This profile holds more traits or anonymous ids than are shown here (the first " (rivulet_common::schema::queries::PROFILE_LIST_LIMIT - 1) " of each, by name)." }
            }
            h2 { "Recent events" }
            @if p.recent_events.is_empty() {
                p.muted { "No events." }
            } @else {
                (layout::scroll(html! { table #recent-events {
                    thead { tr { th { "Time" } th { "Type" } th { "Page" } th { "Anonymous id" } th { "Country" } th { "Browser" } th { "Device" } } }
                    tbody {
                        @for e in &p.recent_events {
                            tr {
                                td.when { (layout::datetime(e.timestamp)) }
                                td { (e.event_type) @if !e.event_name.is_empty() { ": " (e.event_name) } }
                                td.text { (e.pathname) }
                                td.text { span.mono { (e.anonymous_id) } }
                                td { (e.country) }
                                td { (e.browser) }
                                td { (e.device_type) }
                            }
                        }
                    }
                } }))
            }
            p.downloads {
                a.button.secondary href=(export("ndjson")) download { "Export their events (NDJSON)" }
                a.button.secondary href=(export("csv")) download { "Export (CSV)" }
                a href=(format!("/sites/{site_id}/settings/privacy#erase")) { "Erase this user…" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::trait_text;
    use serde_json::json;

    #[test]
    fn traits_show_strings_as_they_are_and_the_rest_as_json() {
        assert_eq!(trait_text(&json!("<b>pro</b>")), "<b>pro</b>");
        assert_eq!(trait_text(&json!(5)), "5");
        assert_eq!(trait_text(&json!({"a": [1]})), r#"{"a":[1]}"#);
    }
}
