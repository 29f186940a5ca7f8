//! The page frame and the small pieces every page uses. maud escapes every value it
//! interpolates, which is how event data (a pathname like `<script>…`) stays text.

use super::csrf;
use super::session::SessionCtx;
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};
use rivulet_common::registry::Site;

pub fn html(markup: Markup) -> Response {
    Html(markup.into_string()).into_response()
}

/// A whole page. With a session, the header has the navigation and the log-out form.
pub fn page(title: &str, session: Option<&SessionCtx>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Rivulet" }
                link rel="stylesheet" href="/assets/app.css";
                script src="/assets/app.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/sites" { "Rivulet" }
                    @if let Some(s) = session {
                        nav {
                            a href="/sites" { "Sites" }
                            form.inline method="post" action="/logout" {
                                (csrf_field(s))
                                button.link type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The hidden field every form of a logged-in page carries (`login::require_session`).
pub fn csrf_field(s: &SessionCtx) -> Markup {
    html! { input type="hidden" name=(csrf::FIELD) value=(s.csrf); }
}

#[derive(PartialEq, Eq, Clone, Copy)]
pub enum SiteTab {
    Overview,
    People,
    General,
    ApiKey,
    Privacy,
    Domains,
    Tracking,
}

impl SiteTab {
    fn in_settings(self) -> bool {
        !matches!(self, SiteTab::Overview | SiteTab::People)
    }
}

/// A site's name and its tabs: Overview, People, and Settings with General, API Key,
/// Privacy, Domains and Tracking code.
pub fn site_header(site: &Site, active: SiteTab) -> Markup {
    let id = site.site_id;
    let settings = active.in_settings();
    let tab = |href: String, label: &str, on: bool| {
        html! { a.tab.active[on] href=(href) aria-current=[on.then_some("page")] { (label) } }
    };
    let sub = |path: &str, label: &str, which: SiteTab| {
        tab(
            format!("/sites/{id}/settings{path}"),
            label,
            active == which,
        )
    };
    html! {
        div.site-header {
            h1 { (site.name) }
            p.muted { (site.domain) " · site " (id) }
            nav.tabs {
                (tab(format!("/sites/{id}/overview"), "Overview", active == SiteTab::Overview))
                (tab(format!("/sites/{id}/users"), "People", active == SiteTab::People))
                (tab(format!("/sites/{id}/settings"), "Settings", settings))
            }
            @if settings {
                nav.tabs.sub {
                    (sub("", "General", SiteTab::General))
                    (sub("/api-key", "API Key", SiteTab::ApiKey))
                    (sub("/privacy", "Privacy", SiteTab::Privacy))
                    (sub("/domains", "Domains", SiteTab::Domains))
                    (sub("/tracking", "Tracking code", SiteTab::Tracking))
                }
            }
        }
    }
}

/// A table in a box of its own that scrolls sideways when the table is wider than the
/// screen (a phone), instead of pushing the whole page past its edge.
pub fn scroll(table: Markup) -> Markup {
    html! { div.table-scroll { (table) } }
}

/// A time in milliseconds, as `datetime` shows it.
pub fn datetime_ms(epoch_ms: u64) -> String {
    datetime(u32::try_from(epoch_ms / 1000).unwrap_or(u32::MAX))
}

/// `2026-01-31 14:05 UTC`; every time in the dashboard is UTC.
pub fn datetime(epoch_secs: u32) -> String {
    time::OffsetDateTime::from_unix_timestamp(epoch_secs.into())
        .map(|t| {
            format!(
                "{:04}-{:02}-{:02} {:02}:{:02} UTC",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute()
            )
        })
        .unwrap_or_else(|_| "—".into())
}

/// A notice at the top of a page (after a save, a deletion, a revocation).
pub fn notice(text: Option<String>) -> Markup {
    html! {
        @if let Some(t) = text {
            p.notice role="status" { (t) }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn datetimes_are_utc() {
        assert_eq!(super::datetime(0), "1970-01-01 00:00 UTC");
        assert_eq!(super::datetime(1_700_000_000), "2023-11-14 22:13 UTC");
    }
}
