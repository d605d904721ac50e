//! The closed set of outcomes a handler returns ([`JobError`]), and the bound on the error
//! text a failure keeps.

use std::fmt;
use std::time::Duration;

/// The most of an error message kept (2 KiB), as the job's last error and its attempt's
/// error: a longer one keeps its first part and says how long it was. Every handler's
/// errors are cut to it (a command's answer, a panic message, a closure's `Err`), so one
/// failing job cannot fill the database or a page. Why 2 KiB: PostgreSQL's indexes over
/// errors (error groups) take entries of at most 2 704 bytes, and an error of random text
/// (hashes, base64, compressed output) does not shrink to fit; with the job type and status
/// beside it, 2 KiB always does.
pub const MAX_ERROR_BYTES: usize = 2 * 1024;

/// `message` within [`MAX_ERROR_BYTES`]: its head, cut at a character boundary, and a note
/// of the length it had.
pub(crate) fn bounded_error(mut message: String) -> String {
    if message.len() <= MAX_ERROR_BYTES {
        return message;
    }
    let note = format!(" [... cut: {} bytes in all]", message.len());
    let mut keep = MAX_ERROR_BYTES - note.len();
    while !message.is_char_boundary(keep) {
        keep -= 1;
    }
    message.truncate(keep);
    message.push_str(&note);
    message
}

/// A handler's failed outcome. Each constructor says what happens to the job's status and
/// attempts. Its message is kept up to [`MAX_ERROR_BYTES`].
///
/// Any `std::error::Error` converts into [`JobError::retry`], so `?` works in handlers.
pub struct JobError {
    pub(crate) action: Action,
    pub(crate) message: String,
    pub(crate) status_code: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Retry,
    RetryAfter(Duration),
    Permanent,
    Snooze(Duration),
    Cancel,
}

impl JobError {
    /// A retryable failure: the attempt is spent and the job runs again after its type's
    /// retry policy delay (status `failed`), or becomes `dead` if that was its last attempt.
    pub fn retry(message: impl Into<String>) -> JobError {
        JobError::new(Action::Retry, message.into())
    }

    /// A retryable failure with a set delay (e.g. an HTTP `Retry-After`): the attempt is
    /// spent and the job runs again after `delay`, or becomes `dead` if that was its last
    /// attempt.
    pub fn retry_after(delay: Duration, message: impl Into<String>) -> JobError {
        JobError::new(Action::RetryAfter(delay), message.into())
    }

    /// A permanent failure: the job becomes `dead` at once, whatever attempts are left.
    pub fn permanent(message: impl Into<String>) -> JobError {
        JobError::new(Action::Permanent, message.into())
    }

    /// Not now: the job goes back to `queued`, due after `delay`, and the attempt is not
    /// counted. No attempt history row is written.
    pub fn snooze(delay: Duration) -> JobError {
        JobError::new(
            Action::Snooze(delay),
            format!("snoozed for {} ms", delay.as_millis()),
        )
    }

    /// The job is no longer wanted: it becomes `cancelled` with `reason` as its last error,
    /// kept as cancelled by `handler` for that reason.
    pub fn cancel(reason: impl Into<String>) -> JobError {
        JobError::new(Action::Cancel, reason.into())
    }

    /// Attaches an HTTP status code, kept in the job's `last_status_code` and the attempt
    /// history.
    pub fn with_status_code(mut self, code: u16) -> JobError {
        self.status_code = Some(i64::from(code));
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    fn new(action: Action, message: String) -> JobError {
        JobError {
            action,
            message: bounded_error(message),
            status_code: None,
        }
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("action", &self.action)
            .field("message", &self.message)
            .field("status_code", &self.status_code)
            .finish()
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for JobError {
    fn from(err: E) -> JobError {
        JobError::retry(err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_to_the_limit_with_their_length() {
        let long = "é".repeat(10_000);
        let error = JobError::retry(long.clone());
        assert!(error.message().len() <= MAX_ERROR_BYTES);
        assert!(error.message().starts_with("éé"));
        assert!(error.message().ends_with(" [... cut: 20000 bytes in all]"));
        assert_eq!(JobError::permanent("short").message(), "short");
    }
}
