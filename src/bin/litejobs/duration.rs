//! Durations on the command line (`30s`, `5m`, `2h`, `7d`, `1h30m`, `500ms`) and durations and
//! ages for people (`4m 12s`, `3h ago`).

use std::time::Duration;

/// Parses `500ms`, `30s`, `5m`, `2h`, `7d`, `1w`, or a sum written without spaces such as
/// `1h30m`. A bare number is refused: the unit is never guessed.
pub fn parse(text: &str) -> Result<Duration, String> {
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
                    "invalid duration {text:?}: {number} needs a unit (ms, s, m, h, d or w)"
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

pub use litejobs::human::{ago, duration_ms as human_ms, utc};

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> u128 {
        parse(text)
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
            let err = parse(text).expect_err(text);
            assert!(err.contains(needle), "{text}: {err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }
}
