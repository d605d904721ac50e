//! The overview's bar charts, drawn on the server as inline SVG (no script, no library):
//! per time bucket, jobs succeeded, attempts failed, and jobs that died. Colours come from
//! the stylesheet's `bar-*` classes; each bucket has a `<title>` tooltip with its figures.

use std::fmt::Write as _;

use crate::ActivityBucket;

use super::format::{count, utc_pattern};
use super::html::esc;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 210.0;
const LEFT: f64 = 46.0;
const RIGHT: f64 = 6.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 26.0;

/// How a chart's buckets are labelled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Axis {
    /// Length of a bucket (ms), for the tooltips.
    pub(crate) bucket_ms: i64,
    /// Label every n-th bucket.
    pub(crate) label_every: usize,
    /// strftime pattern of the labels.
    pub(crate) label: &'static str,
    /// strftime pattern of the tooltips' start and end.
    pub(crate) tooltip: &'static str,
}

/// The smallest of 1, 2, 5 × 10ⁿ at or above `n` (at least 1): a round top for the y axis.
fn nice_ceiling(n: i64) -> i64 {
    let mut step = 1i64;
    loop {
        for m in [1, 2, 5] {
            if step.saturating_mul(m) >= n {
                return step.saturating_mul(m).max(1);
            }
        }
        step = step.saturating_mul(10);
    }
}

/// An SVG bar chart of `buckets`, oldest on the left.
pub(crate) fn activity(buckets: &[ActivityBucket], axis: Axis, caption: &str) -> String {
    let max = buckets
        .iter()
        .map(|b| b.succeeded.max(b.failed_attempts).max(b.dead))
        .max()
        .unwrap_or(0);
    let top = nice_ceiling(max);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let y = |v: i64| TOP + plot_h - plot_h * (v as f64 / top as f64);
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{}\" xmlns=\"http://www.w3.org/2000/svg\">",
        esc(caption)
    );
    for v in [0, top / 2, top] {
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\"/>\
             <text class=\"axis\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            WIDTH - RIGHT,
            y(v),
            y(v),
            LEFT - 6.0,
            y(v) + 4.0,
            count(v)
        );
    }
    let n = buckets.len().max(1) as f64;
    let slot = plot_w / n;
    let bar = slot * 0.78 / 3.0;
    for (i, b) in buckets.iter().enumerate() {
        let x0 = LEFT + slot * i as f64 + slot * 0.11;
        let _ = write!(
            svg,
            "<g><title>{} – {}: {} succeeded, {} failed attempts, {} died</title>\
             <rect class=\"hover\" x=\"{:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{plot_h:.1}\"/>",
            esc(&utc_pattern(b.start_ms, axis.tooltip)),
            esc(&utc_pattern(b.start_ms + axis.bucket_ms, axis.tooltip)),
            b.succeeded,
            b.failed_attempts,
            b.dead,
            LEFT + slot * i as f64,
            slot
        );
        for (k, (value, class)) in [
            (b.succeeded, "bar-ok"),
            (b.failed_attempts, "bar-fail"),
            (b.dead, "bar-dead"),
        ]
        .into_iter()
        .enumerate()
        {
            if value <= 0 {
                continue;
            }
            // A bucket with a few failures among thousands of successes still shows them.
            let h = (plot_h * value as f64 / top as f64).max(1.5);
            let _ = write!(
                svg,
                "<rect class=\"{class}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\"/>",
                x0 + bar * k as f64,
                TOP + plot_h - h,
                bar
            );
        }
        svg.push_str("</g>");
        if axis.label_every > 0 && (buckets.len() - 1 - i) % axis.label_every == 0 {
            let _ = write!(
                svg,
                "<text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                LEFT + slot * (i as f64 + 0.5),
                HEIGHT - 8.0,
                esc(&utc_pattern(b.start_ms, axis.label))
            );
        }
    }
    let _ = write!(
        svg,
        "<line class=\"baseline\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\"/></svg>",
        WIDTH - RIGHT,
        TOP + plot_h,
        TOP + plot_h
    );
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_y_axis_tops_at_a_round_number() {
        assert_eq!(nice_ceiling(0), 1);
        assert_eq!(nice_ceiling(1), 1);
        assert_eq!(nice_ceiling(3), 5);
        assert_eq!(nice_ceiling(7), 10);
        assert_eq!(nice_ceiling(120), 200);
        assert_eq!(nice_ceiling(5000), 5000);
    }

    #[test]
    fn draws_one_bar_per_non_zero_figure() {
        let bucket = |start_ms, succeeded, failed_attempts, dead| ActivityBucket {
            start_ms,
            succeeded,
            failed_attempts,
            dead,
        };
        let axis = Axis {
            bucket_ms: 3_600_000,
            label_every: 1,
            label: "%H:00",
            tooltip: "%H:%M",
        };
        let svg = activity(
            &[bucket(0, 10, 0, 0), bucket(3_600_000, 4, 2, 1)],
            axis,
            "last hours",
        );
        assert_eq!(svg.matches("class=\"bar-ok\"").count(), 2);
        assert_eq!(svg.matches("class=\"bar-fail\"").count(), 1);
        assert_eq!(svg.matches("class=\"bar-dead\"").count(), 1);
        assert!(svg.contains("01:00 – 02:00: 4 succeeded, 2 failed attempts, 1 died"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }
}
