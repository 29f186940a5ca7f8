//! A site's Settings → Domains: the domains its browser events are accepted from (one a
//! line, the first the primary one) and whether their subdomains count too. Saved as
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
    let text = site.domains().join("\n");
    let allow = site.allow_subdomains == 1;
    let saved = q.saved.map(|_| {
        "Saved. Running ingests accept browser events from these domains within a second."
            .to_string()
    });
    Ok(render(&site, &session, &text, allow, saved, &[]).into_response())
}

/// The tab, with `text` in the list and any `errors` of the last save above it (400).
fn render(
    site: &Site,
    session: &SessionCtx,
    text: &str,
    allow_subdomains: bool,
    notice: Option<String>,
    errors: &[String],
) -> Response {
    let site_id = site.site_id;
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
            p { button type="submit" { "Save domains" } }
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
    let allow = f.allow_subdomains.is_some();
    let domains = match parse_lines(&f.domains) {
        Ok(d) => d,
        // Shown with what was typed, so that it can be corrected rather than retyped.
        Err(errors) => return Ok(render(&site, &session, &f.domains, allow, None, &errors)),
    };
    let changes = SiteChanges {
        domains: Some(domains),
        allow_subdomains: Some(allow),
        ..SiteChanges::default()
    };
    st.ops.update_site(site_id, &changes).await?;
    tracing::info!(site_id, "domains changed from the dashboard");
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
