//! The Overview's chart, drawn on the server as SVG: the chosen metric over time as a
//! line, the compared period as a dashed one, a y axis with a round maximum. Every point
//! has a `<title>` so the numbers show on hover and to screen readers.

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

/// One bucket of the Overview's time series: its label (as the Stats API gives it), the
/// metric's value, and the comparison's value at the same position.
pub struct Point {
    pub label: String,
    pub value: f64,
    pub compared: Option<f64>,
}

/// The metric over time, drawn twice: wide for a desktop, narrow and taller for a phone
/// (the stylesheet shows one), so that its labels stay readable at 390 px.
pub fn series(label: &str, points: &[Point], with_comparison: bool) -> Markup {
    html! {
        div.chart-wide { (series_svg(label, points, with_comparison, WIDTH, HEIGHT, 8)) }
        div.chart-narrow { (series_svg(label, points, with_comparison, 400.0, 260.0, 4)) }
        @if with_comparison {
            div.legend { span.pv { "This period" } span.cmp { "Compared period" } }
        }
    }
}

/// The metric over time as a line (and the comparison as a dashed line), on a y axis with
/// a round maximum; at most `max_labels` x labels, whatever the number of buckets. Every
/// point has a `<title>`, so its value shows on hover and to screen readers.
fn series_svg(
    label: &str,
    points: &[Point],
    with_comparison: bool,
    width: f64,
    height: f64,
    max_labels: usize,
) -> Markup {
    let top = points
        .iter()
        .flat_map(|p| [p.value, p.compared.unwrap_or(0.0)])
        .fold(0.0_f64, f64::max);
    let max = nice_max(top.ceil() as u64) as f64;
    let plot_w = width - LEFT - RIGHT;
    let plot_h = height - TOP - BOTTOM;
    let slot = plot_w / points.len().max(1) as f64;
    let y = |v: f64| TOP + plot_h - (v / max) * plot_h;
    let x = |i: usize| LEFT + slot * (i as f64 + 0.5);
    let line = |values: &mut dyn Iterator<Item = (usize, f64)>| -> String {
        values
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(v)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let current = line(&mut points.iter().enumerate().map(|(i, p)| (i, p.value)));
    let compared = line(
        &mut points
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.compared.map(|c| (i, c))),
    );
    let every = points.len().div_ceil(max_labels).max(1);
    let short = |l: &str| {
        l.get(..16)
            .unwrap_or(l)
            .replace(" 00:00:00", "")
            .to_string()
    };
    let fmt = |v: f64| {
        if v.fract() == 0.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.2}")
        }
    };
    html! {
        svg.chart.series viewBox=(format!("0 0 {width} {height}")) role="img" aria-label=(format!("{label} over time")) xmlns="http://www.w3.org/2000/svg" {
            @for v in [0.0, max / 2.0, max] {
                line.grid-line x1=(LEFT) x2=(width - RIGHT) y1=(format!("{:.1}", y(v))) y2=(format!("{:.1}", y(v))) {}
                text x=(LEFT - 6.0) y=(format!("{:.1}", y(v) + 4.0)) text-anchor="end" { (fmt(v)) }
            }
            @for (i, p) in points.iter().enumerate() {
                @if i % every == 0 {
                    text x=(format!("{:.1}", x(i))) y=(height - 8.0) text-anchor="middle" { (short(&p.label)) }
                }
            }
            @if with_comparison && !compared.is_empty() {
                polyline.line.compared points=(compared) {}
            }
            polyline.line.current points=(current) {}
            @for (i, p) in points.iter().enumerate() {
                circle.dot cx=(format!("{:.1}", x(i))) cy=(format!("{:.1}", y(p.value))) r="2.5" {
                    title { (p.label) ": " (fmt(p.value)) @if let Some(c) = p.compared { " (compared: " (fmt(c)) ")" } }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_has_a_point_per_bucket_and_at_most_eight_labels() {
        let points: Vec<Point> = (0..30)
            .map(|i| Point {
                label: format!("2026-03-{:02}", i + 1),
                value: f64::from(i),
                compared: (i < 28).then_some(1.0),
            })
            .collect();
        let svg = series_svg("Visitors", &points, true, WIDTH, HEIGHT, 8).into_string();
        assert_eq!(svg.matches("<circle").count(), 30);
        assert!(svg.matches("</text>").count() <= 3 + 8);
        assert!(svg.contains("2026-03-30: 29"));
        assert!(svg.contains("class=\"line compared\""));
        assert!(svg.contains(">50</text>"), "y axis up to nice_max(29) = 50");
    }

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
}
