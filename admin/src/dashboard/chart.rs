//! The Overview's chart, drawn on the server as SVG: pageviews per hour as bars,
//! visitors per hour as a line, a y axis with a round maximum, and hour labels in UTC.
//! Every bar has a `<title>` so the numbers show on hover and to screen readers.

use super::stats::Hour;
use maud::{html, Markup};

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 26.0;

/// The smallest of 1, 2, 5 × 10^k that is at least `n` (and at least 1).
pub fn nice_max(n: u64) -> u64 {
    let mut scale = 1u64;
    loop {
        for step in [1, 2, 5] {
            if step * scale >= n.max(1) {
                return step * scale;
            }
        }
        scale = scale.saturating_mul(10);
    }
}

fn hour_label(epoch: u32) -> String {
    format!("{:02}:00", epoch % 86_400 / 3600)
}

pub fn hourly(hours: &[Hour]) -> Markup {
    let max = nice_max(
        hours
            .iter()
            .map(|h| h.pageviews.max(h.visitors))
            .max()
            .unwrap_or(0),
    );
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let slot = plot_w / hours.len().max(1) as f64;
    let y = |v: u64| TOP + plot_h - (v as f64 / max as f64) * plot_h;
    let x_mid = |i: usize| LEFT + slot * (i as f64 + 0.5);
    let line: Vec<String> = hours
        .iter()
        .enumerate()
        .map(|(i, h)| format!("{:.1},{:.1}", x_mid(i), y(h.visitors)))
        .collect();
    let label = "Pageviews and visitors per hour, last 24 hours (UTC)";
    html! {
        svg.chart viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img" aria-label=(label) xmlns="http://www.w3.org/2000/svg" {
            @for v in [0, max / 2, max] {
                line.grid-line x1=(LEFT) x2=(WIDTH - RIGHT) y1=(format!("{:.1}", y(v))) y2=(format!("{:.1}", y(v))) {}
                text x=(LEFT - 6.0) y=(format!("{:.1}", y(v) + 4.0)) text-anchor="end" { (v) }
            }
            @for (i, h) in hours.iter().enumerate() {
                rect.bar x=(format!("{:.1}", LEFT + slot * i as f64 + slot * 0.15))
                    y=(format!("{:.1}", y(h.pageviews)))
                    width=(format!("{:.1}", slot * 0.7))
                    height=(format!("{:.1}", TOP + plot_h - y(h.pageviews))) {
                    title { (hour_label(h.hour)) " UTC: " (h.pageviews) " pageviews, " (h.visitors) " visitors" }
                }
                @if i % 3 == 0 {
                    text x=(format!("{:.1}", x_mid(i))) y=(HEIGHT - 8.0) text-anchor="middle" { (hour_label(h.hour)) }
                }
            }
            polyline.line points=(line.join(" ")) {}
            @for (i, h) in hours.iter().enumerate() {
                circle.dot cx=(format!("{:.1}", x_mid(i))) cy=(format!("{:.1}", y(h.visitors))) r="2.5" {}
            }
        }
        div.legend { span.pv { "Pageviews" } span.vis { "Visitors" } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_maxima() {
        assert_eq!(nice_max(0), 1);
        assert_eq!(nice_max(1), 1);
        assert_eq!(nice_max(3), 5);
        assert_eq!(nice_max(7), 10);
        assert_eq!(nice_max(11), 20);
        assert_eq!(nice_max(200), 200);
        assert_eq!(nice_max(201), 500);
    }

    #[test]
    fn one_bar_per_hour_and_labels_every_three() {
        let hours: Vec<Hour> = (0..24)
            .map(|i| Hour {
                hour: 1_699_920_000 + i * 3600,
                pageviews: u64::from(i),
                visitors: 1,
            })
            .collect();
        let svg = hourly(&hours).into_string();
        assert_eq!(svg.matches("<rect").count(), 24);
        assert_eq!(svg.matches("<circle").count(), 24);
        assert!(svg.contains("00:00</text>"));
        assert!(svg.contains("23:00 UTC: 23 pageviews, 1 visitors"));
        assert!(svg.contains(">50</text>"), "y axis up to nice_max(23) = 50");
    }
}
