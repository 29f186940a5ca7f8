//! A site's Settings → Tracking code: the `<script>` tag to put in its pages, loaded from
//! ingest (`ADMIN_INGEST_URL`), with the copy button of the API Key tab.

use super::layout::{self, SiteTab};
use super::respond::PageError;
use super::session::SessionCtx;
use super::AppState;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::Extension;
use maud::html;

/// The snippet for a site: the script from ingest, which sends events back to where it
/// was loaded from (sdk/browser/README.md).
pub fn snippet(ingest_url: &str, site_id: u32) -> String {
    format!(r#"<script src="{ingest_url}/api/script.js" data-site-id="{site_id}" defer></script>"#)
}

pub async fn page(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Extension(session): Extension<SessionCtx>,
) -> Result<Response, PageError> {
    let site = st.ops.site(site_id).await?;
    let domains = site.domains();
    let body = html! {
        (layout::site_header(&site, SiteTab::Tracking))
        section.card {
            h2 { "Add Rivulet to your site" }
            p { "Put this tag in the " code { "<head>" } " of every page:" }
            div.key-row {
                // Text in a textarea is escaped by maud and shown (and copied) as written.
                textarea id="tracking-snippet" .snippet readonly rows="3" spellcheck="false" aria-label="Tracking code" { (snippet(&st.ingest_url, site_id)) }
                button.secondary type="button" data-copy="tracking-snippet" { "Copy" }
            }
            p.hint { "It counts pageviews (single-page apps included), outbound links, errors and web vitals, and sends " code { "window.rivulet.event(name, properties)" } " calls. It needs no API key: keep keys on servers." }
        }
        section.card {
            h2 { "Where events are accepted from" }
            p {
                "Ingest accepts the script's events only from pages on the site's domains"
                @if site.allow_subdomains == 1 { " and their subdomains" }
                ":"
            }
            ul #tracking-domains { @for d in &domains { li { code { (d) } } } }
            p { a href=(format!("/sites/{site_id}/settings/domains")) { "Change the domains" } }
        }
        section.card {
            h2 { "Options" }
            p { "Each option is a " code { "data-*" } " attribute of the tag, for instance "
                code { "data-track-query=\"false\"" } " (no query strings), "
                code { "data-skip-patterns=\"/admin/**\"" } " (send nothing from those pages), "
                code { "data-mask-patterns=\"/users/*\"" } " (report such paths as the pattern) or "
                code { "data-api-host" } " (send through a proxy of your own)." }
            p.hint { "Every option, and what the script sends, is described in the Rivulet repository's "
                strong { "sdk/browser/README.md" } " (\"Options\" and \"What it sends\")." }
            p.hint { "The script is served by ingest at " code { (st.ingest_url) "/api/script.js" }
                ". If that is not the address your visitors reach ingest at, start the dashboard with "
                code { "ADMIN_INGEST_URL" } " set to it." }
        }
    };
    Ok(layout::html(layout::page(
        &format!("{} · Tracking code", site.name),
        Some(&session),
        body,
    )))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_snippet_names_the_script_and_the_site() {
        assert_eq!(
            super::snippet("https://stats.example.com", 7),
            r#"<script src="https://stats.example.com/api/script.js" data-site-id="7" defer></script>"#
        );
    }
}
