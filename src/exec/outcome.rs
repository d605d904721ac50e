//! What a command's exit (or a JSON-lines answer) means for its job: the exit-code table of
//! [`super`] and the `outcome` words of the protocol, turned into a result or a [`JobError`].

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use serde_json::Value;

use crate::handler::JobError;
use crate::human::parse_delay;

/// Exit 0: the job succeeded; stdout, when it is a JSON value, is its result.
pub const EXIT_SUCCESS: i32 = 0;
/// Exit 65 (`EX_DATAERR` of BSD's sysexits): the job can never succeed; it goes `dead` at
/// once, whatever attempts are left.
pub const EXIT_PERMANENT: i32 = 65;
/// Exit 75 (`EX_TEMPFAIL`): a temporary failure; the job runs again after the delay printed
/// on stdout (seconds, or `500ms`, `30s`, `5m`, `2h`, like `Retry-After`), or after its retry
/// policy's delay when stdout is empty. The attempt counts.
pub const EXIT_RETRY: i32 = 75;
/// Exit 98: the job is no longer wanted; it becomes `cancelled` with stderr as the reason.
pub const EXIT_CANCEL: i32 = 98;
/// Exit 99: not now; the job waits for the delay printed on stdout (60 s when none is
/// printed) and the attempt does not count.
pub const EXIT_SNOOZE: i32 = 99;

/// The snooze of a command that printed no delay.
pub const DEFAULT_SNOOZE: Duration = Duration::from_secs(60);

/// The most of a command's stderr kept as the attempt's error: its end, where the reason
/// usually is.
pub const STDERR_TAIL_BYTES: usize = 1536;

/// What a finished process means. `stopped` says the watchdog stopped it (timeout or
/// shutdown): then its exit is not the command's answer.
pub(crate) fn from_exit(
    status: ExitStatus,
    stdout: &[u8],
    stderr_tail: &str,
    stopped: Option<&str>,
) -> Result<Option<Value>, JobError> {
    if let Some(why) = stopped {
        return Err(JobError::retry(with_stderr(why.to_string(), stderr_tail)));
    }
    let Some(code) = status.code() else {
        let signal = status.signal().unwrap_or(0);
        return Err(JobError::retry(with_stderr(
            format!("killed by signal {}", signal_name(signal)),
            stderr_tail,
        )));
    };
    let first_line = std::str::from_utf8(stdout)
        .ok()
        .and_then(|s| s.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("");
    let error = || with_stderr(format!("exit {code}"), stderr_tail);
    // The exit code is the attempt's status code (the CODE column), as a webhook's HTTP
    // status is; an exit code is 0..=255.
    let coded = |e: JobError| match u16::try_from(code) {
        Ok(code) => e.with_status_code(code),
        Err(_) => e,
    };
    match code {
        EXIT_SUCCESS => Ok(json_result(stdout)),
        EXIT_PERMANENT => Err(coded(JobError::permanent(error()))),
        EXIT_RETRY => match delay_text(first_line) {
            Some(delay) => Err(coded(JobError::retry_after(delay, error()))),
            None => Err(coded(JobError::retry(error()))),
        },
        EXIT_CANCEL => Err(coded(JobError::cancel(error()))),
        EXIT_SNOOZE => Err(JobError::snooze(
            delay_text(first_line).unwrap_or(DEFAULT_SNOOZE),
        )),
        _ => Err(coded(JobError::retry(error()))),
    }
}

/// stdout as the job's result when it is a JSON value; anything else is not a result.
fn json_result(stdout: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(stdout).ok()?.trim();
    if text.is_empty() {
        return None;
    }
    serde_json::from_str(text).ok()
}

/// What an answer of the JSON-lines protocol (already checked to be for its job) means.
///
/// # Errors
/// The outer `Err` is a broken protocol (an unknown outcome): the process can no longer be
/// trusted and is restarted.
pub(crate) fn from_answer(answer: &Value) -> Result<Result<Option<Value>, JobError>, String> {
    let error = || {
        answer
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no error message")
            .to_string()
    };
    let delay = || answer.get("delay").and_then(delay_value);
    let outcome = answer.get("outcome").and_then(Value::as_str).unwrap_or("");
    Ok(match outcome {
        "ok" => Ok(answer.get("result").filter(|r| !r.is_null()).cloned()),
        "retry" => Err(match delay() {
            Some(d) => JobError::retry_after(d, error()),
            None => JobError::retry(error()),
        }),
        "permanent" => Err(JobError::permanent(error())),
        "snooze" => Err(JobError::snooze(delay().unwrap_or(DEFAULT_SNOOZE))),
        "cancel" => Err(JobError::cancel(error())),
        other => {
            return Err(format!(
                "unknown outcome {other:?} (expected ok, retry, permanent, snooze or cancel)"
            ))
        }
    })
}

/// A delay given as a JSON number of seconds or as a string like `30s`.
fn delay_value(value: &Value) -> Option<Duration> {
    match value {
        Value::Number(n) => n.as_f64().and_then(seconds),
        Value::String(s) => delay_text(s),
        _ => None,
    }
}

/// The longest delay a command may ask for: a year. A longer one is a mistake, not a plan.
const MAX_DELAY: Duration = Duration::from_secs(365 * 86_400);

/// A command's delay: `30`, `2.5` (seconds, the protocol's number form, as in `Retry-After`),
/// or a delay as every other one litejobs reads ([`parse_delay`]: `500ms`, `5m`, `1h30m`).
/// None for anything else, which the caller ignores.
pub(crate) fn delay_text(text: &str) -> Option<Duration> {
    let text = text.trim();
    match text.parse::<f64>() {
        Ok(secs) => seconds(secs),
        Err(_) => parse_delay(text, MAX_DELAY).ok(),
    }
}

/// A number of seconds as a delay, when it is one (not negative, at most [`MAX_DELAY`]).
fn seconds(value: f64) -> Option<Duration> {
    (value.is_finite() && (0.0..=MAX_DELAY.as_secs_f64()).contains(&value))
        .then(|| Duration::from_secs_f64(value))
}

fn with_stderr(head: String, stderr_tail: &str) -> String {
    let tail = stderr_tail.trim();
    if tail.is_empty() {
        format!("{head} (nothing on stderr)")
    } else {
        format!("{head}: {tail}")
    }
}

/// The first 200 characters of `line`, for an error or a log.
pub(crate) fn clip(line: &str) -> String {
    match line.char_indices().nth(200) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_string(),
    }
}

fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| signal.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::Action;

    fn exit(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    fn action(outcome: Result<Option<Value>, JobError>) -> Action {
        outcome.expect_err("a failure").action
    }

    #[test]
    fn exit_codes_map_to_the_documented_outcomes() {
        assert_eq!(
            from_exit(exit(0), b"{\"n\": 1}\n", "", None).ok(),
            Some(Some(serde_json::json!({"n": 1})))
        );
        assert_eq!(
            from_exit(exit(0), b"plain words", "", None).ok(),
            Some(None)
        );
        assert_eq!(
            action(from_exit(exit(65), b"", "bad", None)),
            Action::Permanent
        );
        assert_eq!(
            action(from_exit(exit(75), b"30\n", "", None)),
            Action::RetryAfter(Duration::from_secs(30))
        );
        assert_eq!(action(from_exit(exit(75), b"", "", None)), Action::Retry);
        assert_eq!(action(from_exit(exit(98), b"", "", None)), Action::Cancel);
        assert_eq!(
            action(from_exit(exit(99), b"2m", "", None)),
            Action::Snooze(Duration::from_secs(120))
        );
        assert_eq!(
            action(from_exit(exit(99), b"", "", None)),
            Action::Snooze(DEFAULT_SNOOZE)
        );
        let other = from_exit(exit(3), b"", "boom\n", None).expect_err("fails");
        assert_eq!(other.action, Action::Retry);
        assert_eq!(other.message(), "exit 3: boom");
        let signalled = from_exit(ExitStatus::from_raw(9), b"", "", None).expect_err("fails");
        assert!(
            signalled.message().contains("SIGKILL"),
            "{}",
            signalled.message()
        );
    }

    #[test]
    fn delays_read_like_retry_after() {
        assert_eq!(delay_text("30"), Some(Duration::from_secs(30)));
        assert_eq!(delay_text("2.5"), Some(Duration::from_millis(2500)));
        assert_eq!(delay_text("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(delay_text("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(delay_text("soon"), None);
        assert_eq!(delay_text("-1"), None);
        assert_eq!(delay_text("1000d"), None);
    }

    #[test]
    fn answers_give_the_documented_outcomes() {
        use serde_json::json;
        let ok = from_answer(&json!({"id": 7, "outcome": "ok", "result": [1]}));
        assert_eq!(ok.ok().and_then(Result::ok), Some(Some(json!([1]))));
        let retry = from_answer(&json!({"id": 7, "outcome": "retry", "delay": "5s", "error": "x"}))
            .expect("valid");
        assert_eq!(action(retry), Action::RetryAfter(Duration::from_secs(5)));
        assert!(from_answer(&json!({"id": 7, "outcome": "maybe"})).is_err());
    }

    #[test]
    fn a_failed_exit_keeps_its_code_as_the_status_code() {
        let failed = from_exit(exit(3), b"", "boom", None).expect_err("fails");
        assert_eq!(failed.status_code, Some(3));
        let dead = from_exit(exit(65), b"", "", None).expect_err("fails");
        assert_eq!(dead.status_code, Some(65));
        let killed = from_exit(ExitStatus::from_raw(9), b"", "", None).expect_err("fails");
        assert_eq!(killed.status_code, None);
    }
}
