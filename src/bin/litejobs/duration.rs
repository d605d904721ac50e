//! Durations on the command line (`30s`, `5m`, `2h`, `7d`, `1h30m`, `500ms`) and durations and
//! ages for people (`4m 12s`, `3h ago`).

use std::time::Duration;

use litejobs::RetryPolicy;

pub use litejobs::human::parse_duration as parse;
pub use litejobs::human::{ago, duration_ms as human_ms, utc};

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
