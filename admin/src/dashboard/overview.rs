//! A site's Overview page: totals, the hourly chart, the breakdowns (audience, event
//! types, sources) and the latest events of the last 24 hours (data from `stats`).

use super::layout::{self, SiteTab};
use super::respond::PageError;
use super::session::SessionCtx;
use super::stats::now_secs;
use super::stats::{self, Count};
use super::{chart, AppState};
use axum::extract::{Path, State};
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};

pub async fn page(
    State(st): State<AppState>,
    Path(site_id): Path<u32>,
    Extension(session): Extension<SessionCtx>,
) -> Result<Response, PageError> {
    let site = st.ops.site(site_id).await?;
    let o = stats::load(&st.db, site_id, now_secs()).await?;
    let body = html! {
        (layout::site_header(&site, SiteTab::Overview))
        p.muted { "Last 24 hours, since " (layout::datetime(o.since)) ". Bots are not counted. " a href=(format!("/sites/{site_id}/overview")) { "Refresh" } }
        div.totals {
            div.card { div.muted { "Pageviews" } div.value #total-pageviews { (o.totals.pageviews) } }
            div.card { div.muted { "Visitors" } div.value #total-visitors { (o.totals.visitors) } }
            div.card { div.muted { "Custom events" } div.value #total-custom-events { (o.totals.custom_events) } }
        }
        h2 { "Pageviews and visitors per hour (UTC)" }
        (chart::hourly(&o.hourly))
        details {
            summary { "The numbers" }
            (layout::scroll(html! { table {
                thead { tr { th { "Hour (UTC)" } th.num { "Pageviews" } th.num { "Visitors" } } }
                tbody {
                    @for h in &o.hourly {
                        tr { td.when { (layout::datetime(h.hour)) } td.num { (h.pageviews) } td.num { (h.visitors) } }
                    }
                }
            } }))
        }
        div.grid {
            (breakdown("Top pages", "Page", "Pageviews", &o.top_pages))
            (breakdown("Countries", "Country", "Events", &o.countries))
            (breakdown("Browsers", "Browser", "Events", &o.browsers))
            (breakdown("Devices", "Device", "Events", &o.devices))
            (breakdown("Custom events", "Event", "Count", &o.custom_events))
            (breakdown("Event types", "Type", "Events", &o.event_types))
        }
        h2 { "Sources" }
        div.grid #sources {
            (breakdown("Channels", "Channel", "Events", &o.channels))
            (breakdown("Referrers", "Site", "Events", &o.referrers))
        }
        h2 { "Latest events" }
        @if o.latest_events.is_empty() {
            p.muted { "No events in the last 24 hours. Send one with an API key from Settings → API Key." }
        } @else {
            (layout::scroll(html! { table #latest-events {
                thead { tr { th { "Time" } th { "Type" } th { "Page" } th { "Country" } th { "Browser" } th { "Device" } } }
                tbody {
                    @for e in &o.latest_events {
                        tr {
                            td.when { (layout::datetime(e.timestamp)) }
                            td {
                                (e.event_type)
                                @if !e.event_name.is_empty() { ": " (e.event_name) }
                                @if e.is_bot == 1 { " " span.badge { "bot" } }
                            }
                            td.text { (e.hostname) (e.pathname) }
                            td { (or_unknown(&e.country)) @if !e.city.is_empty() { " · " (e.city) } }
                            td { (or_unknown(&e.browser)) }
                            td { (or_unknown(&e.device_type)) }
                        }
                    }
                }
            } }))
        }
    };
    Ok(layout::html(layout::page(
        &format!("{} · Overview", site.name),
        Some(&session),
        body,
    )))
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() {
        "Unknown"
    } else {
        s
    }
}

fn breakdown(title: &str, what: &str, measure: &str, rows: &[Count]) -> Markup {
    html! {
        section.card {
            h2 { (title) }
            @if rows.is_empty() {
                p.muted { "Nothing yet." }
            } @else {
                (layout::scroll(html! { table {
                    thead { tr { th { (what) } th.num { (measure) } th.num { "Visitors" } } }
                    tbody {
                        @for r in rows {
                            tr { td.text { (or_unknown(&r.label)) } td.num { (r.events) } td.num { (r.visitors) } }
                        }
                    }
                } }))
            }
        }
    }
}
