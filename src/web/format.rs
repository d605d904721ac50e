//! Times, durations and numbers as people read them on the dashboard. Times are shown in
//! UTC, like the command line's.

use chrono::{DateTime, Utc};

/// `2026-12-02 15:00:12 UTC`.
pub(crate) fn utc(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms).map_or_else(
        || format!("{ms} ms"),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

/// A time with this pattern (for chart labels).
pub(crate) fn utc_pattern(ms: i64, pattern: &str) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map_or_else(|| ms.to_string(), |t| t.format(pattern).to_string())
}

/// `850ms`, `12s`, `4m 12s`, `2h 5m`, `3d 4h`: the two largest units.
pub(crate) fn human_ms(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    let units = [(d, "d"), (h, "h"), (m, "m"), (s, "s")];
    let first = units.iter().position(|(n, _)| *n > 0).unwrap_or(3);
    units[first..]
        .iter()
        .take(2)
        .filter(|(n, _)| *n > 0)
        .map(|(n, u)| format!("{n}{u}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `2m ago`, `in 5m`, `now`.
pub(crate) fn ago(ms: i64, now: i64) -> String {
    let diff = now - ms;
    if diff.abs() < 1000 {
        "now".to_string()
    } else if diff > 0 {
        format!("{} ago", human_ms(diff))
    } else {
        format!("in {}", human_ms(-diff))
    }
}

/// At most `max` characters, with `…` when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A share as a percentage: `23%`, `0.4%`.
pub(crate) fn percent(rate: f64) -> String {
    let p = rate * 100.0;
    if p == 0.0 || p >= 10.0 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

/// `1234567` as `1 234 567` (thin spaces keep big counts readable).
pub(crate) fn count(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push('\u{2009}');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_the_command_line() {
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(12_000), "12s");
        assert_eq!(human_ms(252_000), "4m 12s");
        assert_eq!(human_ms(7_500_000), "2h 5m");
        assert_eq!(human_ms(3_600_000), "1h");
        assert_eq!(human_ms(3 * 86_400_000 + 4 * 3_600_000 + 5_000), "3d 4h");
        assert_eq!(ago(0, 120_000), "2m ago");
        assert_eq!(ago(300_000, 0), "in 5m");
        assert_eq!(ago(5, 10), "now");
    }

    #[test]
    fn times_counts_and_clips() {
        assert_eq!(utc(1_700_000_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(count(1_234_567), "1\u{2009}234\u{2009}567");
        assert_eq!(count(999), "999");
        assert_eq!(count(-1000), "-1\u{2009}000");
        assert_eq!(clip("héllo wörld", 5), "héll…");
        assert_eq!(percent(0.004), "0.4%");
    }
}
