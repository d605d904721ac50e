//! Retry schedules written as text (`30s,2m,10m,1h,4h`), the form of
//! `LITEJOBS_WEBHOOK_RETRY_SCHEDULE` and `LITEJOBS_EMAIL_RETRY_SCHEDULE`: one parser, so
//! both built-in kinds read (and refuse) the same way.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::human::parse_delay;
use crate::job::RetryPolicy;

/// The jitter a schedule read from text gets: ±10 %, as the built-in defaults, so jobs
/// failing together (an SMTP or endpoint outage) do not all retry in the same second.
pub const SCHEDULE_JITTER: f64 = 0.1;

/// The longest delay a written schedule may hold: 30 days. Longer is a typo (`30000h`)
/// more often than a wish.
const MAX_DELAY: Duration = Duration::from_secs(30 * 86_400);

/// The most delays a written schedule may hold.
const MAX_ENTRIES: usize = 100;

/// Parses a retry schedule written as comma-separated delays, e.g. `30s,2m,10m,1h,4h`: the
/// delay after attempt `n` is the `n`-th entry and the last entry repeats (see
/// [`RetryPolicy::schedule`]), with ±10 % jitter ([`SCHEDULE_JITTER`]). Each delay is a
/// whole number with a unit (`ms`, `s`, `m`, `h`, `d`), or a sum such as `1h30m`; each is
/// above 0 and at most 30 days.
///
/// ```
/// use litejobs::builtin::parse_retry_schedule;
/// use std::time::Duration;
/// let policy = parse_retry_schedule("30s, 2m, 1h30m").unwrap();
/// assert_eq!(policy.delay(1, 0.5), Duration::from_secs(30));
/// assert_eq!(policy.delay(3, 0.5), Duration::from_secs(5400));
/// assert_eq!(policy.delay(9, 0.5), Duration::from_secs(5400)); // the last one repeats
/// assert!(parse_retry_schedule("30").is_err()); // the unit is never guessed
/// ```
///
/// # Errors
/// A message saying which entry is wrong and why.
pub fn parse_retry_schedule(text: &str) -> std::result::Result<RetryPolicy, String> {
    if text.trim().is_empty() {
        return Err("the schedule is empty".to_string());
    }
    let mut delays = Vec::new();
    for (i, entry) in text.split(',').enumerate() {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err(format!("entry {} is empty", i + 1));
        }
        let delay = schedule_entry(entry).map_err(|why| format!("{entry:?}: {why}"))?;
        delays.push(delay);
    }
    if delays.len() > MAX_ENTRIES {
        return Err(format!(
            "{} delays; at most {MAX_ENTRIES} (the last one repeats)",
            delays.len()
        ));
    }
    Ok(RetryPolicy::schedule(delays).jitter(SCHEDULE_JITTER))
}

/// [`parse_retry_schedule`] for the environment variable `name`: its error names the
/// variable, its value and the expected form.
pub(crate) fn schedule_from_var(name: &str, value: &str) -> Result<RetryPolicy> {
    parse_retry_schedule(value).map_err(|why| {
        Error::invalid_config(format!(
            "{name}={value:?}: {why}; expected delays like 30s,2m,10m,1h,4h"
        ))
    })
}

/// One entry: a delay as every delay litejobs reads ([`parse_delay`]), above 0.
fn schedule_entry(text: &str) -> std::result::Result<Duration, String> {
    let delay = parse_delay(text, MAX_DELAY)?;
    if delay.is_zero() {
        return Err("a delay must be above 0 (a failing job would retry at once)".to_string());
    }
    Ok(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(text: &str) -> Vec<u64> {
        let policy = parse_retry_schedule(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        (1..=6).map(|a| policy.delay(a, 0.5).as_secs()).collect()
    }

    #[test]
    fn delays_take_every_unit_sums_and_spaces_and_the_last_repeats() {
        assert_eq!(
            secs("30s,2m,10m,1h,4h"),
            vec![30, 120, 600, 3600, 14_400, 14_400]
        );
        assert_eq!(
            secs(" 1h30m , 1d "),
            vec![5400, 86_400, 86_400, 86_400, 86_400, 86_400]
        );
        let policy = parse_retry_schedule("1500ms").expect("ms");
        assert_eq!(policy.delay(1, 0.5), Duration::from_millis(1500));
    }

    #[test]
    fn a_written_schedule_gets_ten_percent_jitter() {
        let policy = parse_retry_schedule("100s").expect("valid");
        assert_eq!(policy.delay(1, 0.0), Duration::from_secs(90));
        assert_eq!(policy.delay(1, 1.0), Duration::from_secs(110));
    }

    #[test]
    fn bad_schedules_say_which_entry_and_why() {
        let cases = [
            ("", "empty"),
            ("  ", "empty"),
            ("30s,,2m", "entry 2 is empty"),
            ("30s,", "entry 2 is empty"),
            ("30", "\"30\": 30 needs a unit"),
            ("5x", "unknown unit \"x\""),
            ("1.5h", "fractions are not supported"),
            ("-5s", "expected a number"),
            ("0s", "above 0"),
            ("31d", "at most 30d"),
            ("99999999999999999999999999999999999999999d", "too large"),
        ];
        for (text, needle) in cases {
            let err = parse_retry_schedule(text).err().unwrap_or_default();
            assert!(err.contains(needle), "{text:?}: {err:?} lacks {needle:?}");
        }
        let many = vec!["1s"; MAX_ENTRIES + 1].join(",");
        assert!(parse_retry_schedule(&many).is_err());
    }

    #[test]
    fn errors_from_a_variable_name_it_and_its_value() {
        let err = schedule_from_var("LITEJOBS_EMAIL_RETRY_SCHEDULE", "5")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("LITEJOBS_EMAIL_RETRY_SCHEDULE=\"5\"") && err.contains("30s,2m"),
            "{err}"
        );
    }
}
