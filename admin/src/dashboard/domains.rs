//! A site's Settings → Domains: the domains its browser events are accepted from (one a
//! line, the first the primary one), whether their subdomains count too, and the browser
//! path's two switches: keyless requests at all, and keyless identify calls. Saved as
//! `rivulet-admin sites update` does, which tells every ingest within a second.

use super::layout::{self, csrf_field, SiteTab};
use super::respond::PageError;
use super::session::SessionCtx;
use super::AppState;
use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use maud::html;
use rivulet_common::registry::{self, Site, SiteChanges};
use serde::Deserialize;

#[derive(Deserialize)]
pub struct DomainsQuery {
    saved: Option<u8>,
}

pub async fn page(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Extension(session): Extension<SessionCtx>,
    Query(q): Query<DomainsQuery>,
) -> Result<Response, PageError> {
    let site = st.ops.site(site_id).await?;
    let form = FormState {
        text: site.domains().join("\n"),
        allow_subdomains: site.allow_subdomains == 1,
        browser_path: site.browser_path(),
        browser_identify: site.browser_identify == 1,
    };
    let saved = q
        .saved
        .map(|_| "Saved. Running ingests apply these settings within a second.".to_string());
    Ok(render(&site, &session, &form, saved, &[]).into_response())
}

/// What the form shows: the site's settings, or what was typed.
struct FormState {
    text: String,
    allow_subdomains: bool,
    browser_path: bool,
    browser_identify: bool,
}

/// The tab, with the form's state and any `errors` of the last save above it (400).
fn render(
    site: &Site,
    session: &SessionCtx,
    form: &FormState,
    notice: Option<String>,
    errors: &[String],
) -> Response {
    let site_id = site.site_id;
    let (text, allow_subdomains) = (&form.text, form.allow_subdomains);
    let body = html! {
        (layout::site_header(site, SiteTab::Domains))
        (layout::notice(notice))
        @if !errors.is_empty() {
            div.error-box role="alert" {
                p.error { "Nothing was saved:" }
                ul #domain-errors { @for e in errors { li { (e) } } }
            }
        }
        form.card method="post" action=(format!("/sites/{site_id}/settings/domains")) {
            (csrf_field(session))
            label for="domains" { "Domains, one a line" }
            textarea id="domains" name="domains" rows="6" spellcheck="false" autocapitalize="off" required { (text) }
            p.hint { "Host names only (" code { "example.com" } ", " code { "shop.example.org" } "), without scheme, port or path. The first is the site's primary domain. At most " (registry::MAX_DOMAINS) "." }
            label.check {
                input type="checkbox" name="allow_subdomains" value="1" checked[allow_subdomains];
                span { "Also accept subdomains (" code { "blog.example.com" } " for " code { "example.com" } ")" }
            }
            fieldset {
                legend { "Browser path (requests without an API key)" }
                label.check {
                    input #browser-path type="checkbox" name="browser_path" value="1" checked[form.browser_path];
                    span { "Accept events from the tracking script on these domains" }
                }
                p.hint { "Off: only requests with an API key are taken; keyless ones get 403. Turn it off for a site tracked from servers and apps only." }
                label.check {
                    input #browser-identify type="checkbox" name="browser_identify" value="1" checked[form.browser_identify];
                    span { "Accept identify calls from the browser" }
                }
                p.hint { "A keyless call's only credential is an " code { "Origin" } " header, which any program can send: with this on, anyone can set a user's traits (never one your server set with its key, which always wins) and claim anonymous ids for a user. Off by default; send identify from your server with its key instead." }
            }
            p { button type="submit" { "Save" } }
        }
        p.hint { "The tracking script's events carry no key: ingest accepts them only from pages on these domains (their " code { "Origin" } "). Events sent with an API key are not limited to them." }
    };
    let status = if errors.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    };
    (
        status,
        layout::html(layout::page(
            &format!("{} · Domains", site.name),
            Some(session),
            body,
        )),
    )
        .into_response()
}

#[derive(Deserialize)]
pub struct DomainsForm {
    #[serde(default)]
    domains: String,
    allow_subdomains: Option<String>,
    browser_path: Option<String>,
    browser_identify: Option<String>,
}

/// The lines of the list, without blanks; every invalid one named with its line number
/// (and then what `validate_domains` says of the list as a whole).
pub fn parse_lines(text: &str) -> Result<Vec<String>, Vec<String>> {
    let mut domains = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match registry::validate_domain(line) {
            Ok(d) => domains.push(d),
            Err(e) => errors.push(format!("Line {}: {e}", i + 1)),
        }
    }
    if errors.is_empty() {
        registry::validate_domains(&domains).map_err(|e| vec![e.to_string()])
    } else {
        Err(errors)
    }
}

pub async fn save(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Extension(session): Extension<SessionCtx>,
    Form(f): Form<DomainsForm>,
) -> Result<Response, PageError> {
    let site = st.ops.site(site_id).await?;
    let form = FormState {
        allow_subdomains: f.allow_subdomains.is_some(),
        browser_path: f.browser_path.is_some(),
        browser_identify: f.browser_identify.is_some(),
        text: f.domains,
    };
    let domains = match parse_lines(&form.text) {
        Ok(d) => d,
        // Shown with what was typed, so that it can be corrected rather than retyped.
        Err(errors) => return Ok(render(&site, &session, &form, None, &errors)),
    };
    let changes = SiteChanges {
        domains: Some(domains),
        allow_subdomains: Some(form.allow_subdomains),
        browser_path: Some(form.browser_path),
        browser_identify: Some(form.browser_identify),
        ..SiteChanges::default()
    };
    st.ops.update_site(site_id, &changes).await?;
    tracing::info!(
        site_id,
        "domains and browser path changed from the dashboard"
    );
    Ok(Redirect::to(&format!("/sites/{site_id}/settings/domains?saved=1")).into_response())
}

#[cfg(test)]
mod tests {
    use super::parse_lines;

    #[test]
    fn lines_are_domains_and_every_bad_one_is_named() {
        assert_eq!(
            parse_lines("Example.com\n\n  shop.example.com \r\nexample.com\n").unwrap(),
            ["example.com", "shop.example.com"]
        );
        let errors = parse_lines("ok.example\nhttps://x.example/\nok2.example\na b").unwrap_err();
        assert_eq!(errors.len(), 2);
        assert!(errors[0].starts_with("Line 2: \"https://x.example/\" is not a domain name"));
        assert!(errors[1].starts_with("Line 4: "));
        assert_eq!(
            parse_lines(" \n").unwrap_err(),
            ["a site needs at least one domain"]
        );
    }
}
