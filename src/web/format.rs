//! Numbers and text as people read them on the dashboard; times and durations come from
//! [`crate::human`], as on the command line.

pub(crate) use crate::human::{ago, duration_ms as human_ms, utc, utc_pattern};

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
    fn times_counts_and_clips() {
        assert_eq!(count(1_234_567), "1\u{2009}234\u{2009}567");
        assert_eq!(count(999), "999");
        assert_eq!(count(-1000), "-1\u{2009}000");
        assert_eq!(clip("héllo wörld", 5), "héll…");
        assert_eq!(percent(0.004), "0.4%");
    }
}
