//! Times and durations as people read and write them, the same in the `litejobs` command,
//! the dashboard and every option: UTC timestamps, short durations, and "how long ago"; the
//! one grammar every duration and delay is read with ([`parse_duration`], [`parse_delay`]);
//! and long texts (error messages) cut to a size a page or a terminal can show, or to the
//! line that matters ([`error_headline`]).
//!
//! ```
//! use litejobs::human;
//! assert_eq!(human::utc(1_700_000_000_000), "2023-11-14 22:13:20 UTC");
//! assert_eq!(human::duration_ms(252_000), "4m 12s");
//! assert_eq!(human::ago(0, 120_000), "2m ago");
//! assert_eq!(human::ago(300_000, 0), "in 5m");
//! assert_eq!(human::ago(5, 10), "now");
//! assert_eq!(human::excerpt("connection refused", 10), "connection… (8 more bytes)");
//! ```

use chrono::{DateTime, Utc};
use std::borrow::Cow;
use std::time::Duration;

/// How much of an error text a job's own view shows (the dashboard's job page, its JSON API,
/// `litejobs show`): 8 KiB, then how many bytes were left out.
pub const ERROR_EXCERPT_BYTES: usize = 8 * 1024;
/// How much of each attempt's error a job's attempt table shows (the dashboard's job page,
/// `litejobs show`): 2 KiB, then how many bytes were left out.
pub const ATTEMPT_ERROR_EXCERPT_BYTES: usize = 2 * 1024;

/// The line of an error that says what went wrong, trimmed: after a Python traceback its
/// exception line, above a stack of `at …` frames (JavaScript, Java) the line there, else the
/// last line; a command's `exit N` or `killed by signal S` stays in front. Lists and error
/// groups show it; a job's own view shows it first, then the whole text. Its fingerprint
/// groups failures ([`ErrorGroup`](crate::ErrorGroup)).
///
/// ```
/// use litejobs::human::error_headline;
/// let stderr = "exit 1: fetching order 1042\nTraceback (most recent call last):\n  \
///               File \"job.py\", line 3, in <module>\nConnectionError: refused";
/// assert_eq!(error_headline(stderr), "exit 1: ConnectionError: refused");
/// assert_eq!(error_headline("HTTP 503 from endpoint 4"), "HTTP 503 from endpoint 4");
/// ```
pub fn error_headline(error: &str) -> Cow<'_, str> {
    crate::fingerprint::headline(error)
}

/// At most `max` bytes of `text`, cut at a character boundary and followed by
/// `… (N more bytes)` when cut; the text itself when it fits. Only the shown part is read,
/// so a text of any size costs the same.
pub fn excerpt(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    Cow::Owned(format!(
        "{}… ({} more bytes)",
        &text[..cut],
        text.len() - cut
    ))
}

/// At most `max` characters of `text`, with `…` when cut; only those are read.
pub fn clip(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some(_) => {
            let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
            cut.push('…');
            Cow::Owned(cut)
        }
    }
}

/// A UTC timestamp (ms since the Unix epoch): `2024-03-05 14:07:09 UTC`.
pub fn utc(ms: i64) -> String {
    utc_pattern(ms, "%Y-%m-%d %H:%M:%S UTC")
}

/// A UTC timestamp in a chrono `strftime` pattern (e.g. `%H:%M` for a chart label); the
/// bare number when it is out of chrono's range.
pub fn utc_pattern(ms: i64, pattern: &str) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map_or_else(|| format!("{ms} ms"), |t| t.format(pattern).to_string())
}

/// A duration in milliseconds, by its two largest units: `350ms`, `1.5s`, `12s`, `4m 12s`,
/// `5m`, `2h 5m`, `3d 4h`. Negative durations read as `0ms`.
pub fn duration_ms(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let s = ms / 1_000;
    let (d, h, m, s) = (s / 86_400, s / 3_600 % 24, s / 60 % 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) if ms < 10_000 && ms % 1_000 != 0 => format!("{:.1}s", ms as f64 / 1_000.0),
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) if s == 0 => format!("{m}m"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h {m}m"),
        (_, 0, _) => format!("{d}d"),
        _ => format!("{d}d {h}h"),
    }
}

/// How far `at` is from `now` (both ms): `4m 12s ago`, `in 2h`, or `now` within a second.
pub fn ago(at: i64, now: i64) -> String {
    let diff = now - at;
    if diff.abs() < 1_000 {
        "now".to_string()
    } else if diff > 0 {
        format!("{} ago", duration_ms(diff))
    } else {
        format!("in {}", duration_ms(-diff))
    }
}

/// Parses a duration as people write one: `500ms`, `30s`, `5m`, `2h`, `7d`, `1w`, or a sum
/// written without spaces such as `1h30m`. Every duration litejobs reads from text is read
/// here: command-line options, retry schedules, the SMTP URL's `timeout=`, a command
/// handler's delay. A bare number is refused, with a message saying to write `10s`: the unit
/// is never guessed.
///
/// ```
/// use litejobs::human::parse_duration;
/// use std::time::Duration;
/// assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
/// assert!(parse_duration("10").unwrap_err().contains("e.g. 10s"));
/// ```
///
/// # Errors
/// One line naming the text and what is wrong with it.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration: write e.g. 30s, 5m, 2h, 7d or 1h30m".to_string());
    }
    let mut total_ms: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(format!(
                "invalid duration {text:?}: expected a number at {rest:?} (e.g. 30s, 5m, 1h30m)"
            ));
        }
        let (number, after) = rest.split_at(digits);
        let unit_len = after.len()
            - after
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let (unit, after) = after.split_at(unit_len);
        let per_unit_ms: u128 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            "" if after.starts_with(['.', ',']) => {
                return Err(format!(
                    "invalid duration {text:?}: fractions are not supported (write 1h30m, not 1.5h)"
                ))
            }
            "" => {
                return Err(format!(
                    "invalid duration {text:?}: {number} needs a unit (ms, s, m, h, d or w), \
                     e.g. {number}s"
                ))
            }
            other => {
                return Err(format!(
                    "invalid duration {text:?}: unknown unit {other:?} (use ms, s, m, h, d or w)"
                ))
            }
        };
        let n: u128 = number
            .parse()
            .map_err(|_| format!("invalid duration {text:?}: {number} is too large"))?;
        total_ms = n
            .checked_mul(per_unit_ms)
            .and_then(|ms| total_ms.checked_add(ms))
            .filter(|ms| *ms <= i64::MAX as u128)
            .ok_or_else(|| format!("invalid duration {text:?}: too large"))?;
        rest = after;
    }
    Ok(Duration::from_millis(total_ms as u64))
}

/// Parses a delay: a duration as [`parse_duration`] reads it, at most `max` (a longer one is
/// a typo, such as `30000h`, more often than a wish).
///
/// ```
/// use litejobs::human::parse_delay;
/// use std::time::Duration;
/// let month = Duration::from_secs(30 * 86_400);
/// assert_eq!(parse_delay("2h", month), Ok(Duration::from_secs(7200)));
/// assert_eq!(parse_delay("31d", month).unwrap_err(), "a delay may be at most 30d");
/// ```
///
/// # Errors
/// [`parse_duration`]'s, or one saying the delay is over `max`.
pub fn parse_delay(text: &str, max: Duration) -> Result<Duration, String> {
    let delay = parse_duration(text)?;
    if delay > max {
        let max_ms = i64::try_from(max.as_millis()).unwrap_or(i64::MAX);
        return Err(format!("a delay may be at most {}", duration_ms(max_ms)));
    }
    Ok(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration_ms(350), "350ms");
        assert_eq!(duration_ms(1_500), "1.5s");
        assert_eq!(duration_ms(12_000), "12s");
        assert_eq!(duration_ms(252_000), "4m 12s");
        assert_eq!(duration_ms(300_000), "5m");
        assert_eq!(duration_ms(7_500_000), "2h 5m");
        assert_eq!(duration_ms(7_200_000), "2h");
        assert_eq!(duration_ms(273_600_000), "3d 4h");
        assert_eq!(duration_ms(86_400_000 * 2 + 60_000), "2d");
        assert_eq!(duration_ms(-5), "0ms");
        assert_eq!(ago(1_000, 61_000), "1m ago");
        assert_eq!(ago(61_000, 1_000), "in 1m");
        assert_eq!(ago(1_000, 1_999), "now");
    }

    #[test]
    fn long_texts_are_cut_on_characters_with_what_was_left_out() {
        assert_eq!(excerpt("short", 5), "short");
        assert_eq!(excerpt("héllo", 2), "h… (5 more bytes)");
        assert_eq!(excerpt("héllo", 3), "hé… (3 more bytes)");
        let big = "x".repeat(10 << 20);
        let cut = excerpt(&big, ERROR_EXCERPT_BYTES);
        assert!(cut.len() < ERROR_EXCERPT_BYTES + 32, "{}", cut.len());
        assert!(cut.ends_with(&format!(
            "… ({} more bytes)",
            (10 << 20) - ERROR_EXCERPT_BYTES
        )));
        assert_eq!(clip("héllo wörld", 5), "héll…");
        assert_eq!(clip("héllo", 5), "héllo");
        assert_eq!(clip(&big, 3), "xx…");
    }

    #[test]
    fn utc_timestamps() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(-1_000), "1969-12-31 23:59:59 UTC");
        assert_eq!(utc_pattern(1_700_000_000_000, "%H:%M"), "22:13");
    }
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    fn ms(text: &str) -> u128 {
        parse_duration(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .as_millis()
    }

    #[test]
    fn parses_every_unit_and_sums() {
        assert_eq!(ms("500ms"), 500);
        assert_eq!(ms("30s"), 30_000);
        assert_eq!(ms("5m"), 300_000);
        assert_eq!(ms("2h"), 7_200_000);
        assert_eq!(ms("7d"), 604_800_000);
        assert_eq!(ms("1w"), 604_800_000);
        assert_eq!(ms("1h30m"), 5_400_000);
        assert_eq!(ms("1m30s500ms"), 90_500);
        assert_eq!(ms(" 0s "), 0);
    }

    #[test]
    fn refuses_bad_input_with_a_message_naming_it() {
        for (text, needle) in [
            ("", "empty duration"),
            ("10", "needs a unit"),
            ("5x", "unknown unit \"x\""),
            ("m5", "expected a number"),
            ("1.5h", "fractions are not supported"),
            ("-5m", "expected a number"),
            ("5 m", "needs a unit"),
            ("99999999999999999999999999999999999999999d", "too large"),
            ("9999999999999999w", "too large"),
        ] {
            let err = parse_duration(text).expect_err(text);
            assert!(err.contains(needle), "{text}: {err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }
}
