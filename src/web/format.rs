//! Numbers and text as people read them on the dashboard; times, durations and cut texts
//! come from [`crate::human`], as on the command line.
//!
//! Error texts can be megabytes (a handler's whole output, rows written by other programs),
//! so no page shows one whole: lists clip them to a line, hover texts and search links to
//! [`TITLE_CHARS`], a job's page to [`ERROR_EXCERPT_BYTES`] (each attempt's to
//! [`ATTEMPT_ERROR_BYTES`]), with how many bytes were left out.

pub(crate) use crate::human::{
    ago, clip, duration_ms as human_ms, excerpt, utc, utc_pattern,
    ATTEMPT_ERROR_EXCERPT_BYTES as ATTEMPT_ERROR_BYTES, ERROR_EXCERPT_BYTES,
};

/// Characters of an error in a hover text, and of the longest error group a link or a bulk
/// requeue names as it is.
pub(crate) const TITLE_CHARS: usize = 500;

/// The query field that narrows a list or a bulk requeue to error group `group`: `group`
/// itself, or, for a key a field cannot carry as it is (a whole error text of a row without
/// fingerprint, with spaces or a newline at an end, which fields lose, or longer than
/// [`TITLE_CHARS`]), `search` for its start.
pub(crate) fn group_field(group: &str) -> (&'static str, &str) {
    if group.len() <= TITLE_CHARS && group.trim() == group {
        return ("group", group);
    }
    let text = group.trim();
    match text.char_indices().nth(TITLE_CHARS) {
        Some((cut, _)) => ("search", &text[..cut]),
        None => ("search", text),
    }
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
        assert_eq!(group_field("HTTP #"), ("group", "HTTP #"));
        assert_eq!(group_field("boom\n"), ("search", "boom"));
        let long = "é".repeat(TITLE_CHARS + 10);
        let (field, value) = group_field(&long);
        assert_eq!((field, value.chars().count()), ("search", TITLE_CHARS));
    }
}
