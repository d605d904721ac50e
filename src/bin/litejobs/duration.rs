//! Durations on the command line (`30s`, `5m`, `2h`, `7d`, `1h30m`, `500ms`) and durations and
//! ages for people (`4m 12s`, `3h ago`).

use std::time::Duration;

use litejobs::RetryPolicy;

pub use litejobs::human::parse_duration as parse;
pub use litejobs::human::{ago, duration_ms as human_ms, utc};

/// A time as RFC 3339 with its offset, e.g. `2026-12-05T03:15:00Z` or
/// `2026-12-05T04:15:00+01:00`.
///
/// # Errors
/// One line naming the text and the form expected.
pub fn parse_rfc3339(text: &str) -> Result<std::time::SystemTime, String> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .map(std::time::SystemTime::from)
        .map_err(|e| {
            format!("invalid time {text:?} ({e}): write RFC 3339, e.g. 2026-12-05T03:15:00Z")
        })
}

/// The first `n` delays of `policy` without jitter, in the form the
/// `LITEJOBS_*_RETRY_SCHEDULE` variables take: `5s,5m,30m,2h`.
pub fn schedule_text(policy: &RetryPolicy, n: u32) -> String {
    (1..=n)
        .map(|attempt| compact(policy.delay(attempt, 0.5)))
        .collect::<Vec<_>>()
        .join(",")
}

/// A duration as the schedule variables are written: `500ms`, `30s`, `1h30m`, `1d2h`.
pub fn compact(d: Duration) -> String {
    let mut rest = d.as_millis();
    if rest == 0 {
        return "0s".to_string();
    }
    let mut text = String::new();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        let n = rest / size;
        if n > 0 {
            text.push_str(&format!("{n}{unit}"));
            rest -= n * size;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_need_their_offset() {
        let utc = parse_rfc3339("2026-12-05T03:15:00Z");
        let paris = parse_rfc3339("2026-12-05T04:15:00+01:00");
        assert!(utc.is_ok());
        assert_eq!(utc, paris);
        let err = parse_rfc3339("2026-12-05 03:15").unwrap_err();
        assert!(
            err.contains("write RFC 3339, e.g. 2026-12-05T03:15:00Z"),
            "{err}"
        );
    }

    #[test]
    fn compact_durations_read_back_as_schedules() {
        let cases = [
            (Duration::from_millis(500), "500ms"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(5400), "1h30m"),
            (Duration::from_secs(93_600), "1d2h"),
            (Duration::from_millis(1_500), "1s500ms"),
            (Duration::ZERO, "0s"),
        ];
        for (d, text) in cases {
            assert_eq!(compact(d), text);
            if !d.is_zero() {
                let back = litejobs::builtin::parse_retry_schedule(text).expect("parses");
                assert_eq!(back.delay(1, 0.5), d, "{text}");
            }
        }
    }
}
