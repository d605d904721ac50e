//! A job as stored: its status ([`JobStatus`]), the row ([`JobRecord`]), its attempt
//! history ([`AttemptRecord`], [`AttemptOutcome`]), and what discarding a dead one did
//! ([`Discarded`]).

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::error::{Error, Result};

/// Where a job is in its life. The text forms are the `status` column's values.
///
/// ```text
/// queued ──claim──► running ──success──► succeeded
///   ▲                 │ ├──retryable error──► failed ──(run_at due)──claim──► running
///   │                 │ ├──permanent error / attempts spent──► dead ──requeue──► (new job)
///   └──snooze/release─┘ └──cancel──► cancelled
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Waiting for its `run_at`, never attempted (or snoozed, or released).
    Queued,
    /// Claimed by a worker under a lease.
    Running,
    /// Finished successfully.
    Succeeded,
    /// An attempt failed; the next one is scheduled at `run_at`.
    Failed,
    /// Attempts spent or failed permanently; waits for a person (requeue or discard).
    Dead,
    /// Cancelled before it finished.
    Cancelled,
}

impl JobStatus {
    /// Every status, in life-cycle order.
    pub const ALL: [JobStatus; 6] = [
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::Dead,
        JobStatus::Cancelled,
    ];

    /// The status word stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Dead => "dead",
            JobStatus::Cancelled => "cancelled",
        }
    }

    /// True for succeeded, dead and cancelled: no worker will run the job again by itself.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Dead | JobStatus::Cancelled
        )
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobStatus {
    type Err = Error;

    fn from_str(s: &str) -> Result<JobStatus> {
        JobStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                Error::invalid_job(format!(
                    "unknown status {s:?}: expected one of queued, running, succeeded, failed, dead, cancelled"
                ))
            })
    }
}

/// A stored job, as read by [`Queue::job`](crate::Queue::job) and the listing calls.
///
/// Times are milliseconds since the Unix epoch, as in the schema.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct JobRecord {
    /// Row id, never reused.
    pub id: i64,
    /// Named queue.
    pub queue: String,
    /// Handler name.
    pub job_type: String,
    /// The payload as stored. Views for people should mask secrets first.
    pub payload: serde_json::Value,
    /// Where the job is in its life.
    pub status: JobStatus,
    /// Higher runs first.
    pub priority: i64,
    /// Attempts started so far.
    pub attempts: i64,
    /// Attempts allowed.
    pub max_attempts: i64,
    /// When the job is next due.
    pub run_at: i64,
    /// When it was enqueued.
    pub created_at: i64,
    /// When litejobs last changed it.
    pub updated_at: i64,
    /// When the latest attempt started.
    pub started_at: Option<i64>,
    /// When it reached a final status.
    pub finished_at: Option<i64>,
    /// The worker holding the lease, while running.
    pub locked_by: Option<String>,
    /// When the lease expires, while running.
    pub locked_until: Option<i64>,
    /// The latest failure's message: at most `MAX_ERROR_BYTES` as litejobs writes it; a
    /// longer text (an older version's, another program's) is read as its first 2 000
    /// characters and `[... cut: N bytes in all]`.
    pub last_error: Option<String>,
    /// The latest HTTP status code (webhooks).
    pub last_status_code: Option<i64>,
    /// Deduplication key.
    pub idempotency_key: Option<String>,
    /// Ordering key.
    pub group_key: Option<String>,
    /// Per-attempt time limit in ms, if set on the job.
    pub timeout_ms: Option<i64>,
    /// The handler's stored result.
    pub result: Option<serde_json::Value>,
    /// The handler's latest progress.
    pub progress: Option<serde_json::Value>,
    /// Who requeued this dead job.
    pub requeued_by: Option<String>,
    /// When it was requeued.
    pub requeued_at: Option<i64>,
    /// Why it was requeued.
    pub requeue_reason: Option<String>,
    /// The id of the new job the requeue created.
    pub requeued_as: Option<i64>,
    /// Who cancelled the job: the name given to the cancel, `handler` when its handler
    /// returned [`JobError::cancel`](crate::JobError::cancel), `deadline` when it expired.
    pub cancelled_by: Option<String>,
    /// Why it was cancelled.
    pub cancel_reason: Option<String>,
    /// Its deadline (ms since the Unix epoch): not started by then, it never starts.
    pub expires_at: Option<i64>,
    /// The workflow or batch it belongs to ([`Queue::workflow`](crate::Queue::workflow)).
    pub workflow_id: Option<i64>,
    /// Its step name in that workflow (a batch's callbacks are `on_success` and
    /// `on_complete`; its members have none).
    pub step: Option<String>,
    /// How many of the jobs it waits for have not ended yet (plus one while its batch is
    /// open). A queued job with any is held: it does not run, and [`JobRecord::run_at`]
    /// shows the time it will be due at the earliest once they have succeeded.
    pub waiting_for: i64,
    /// The name of the key whose envelope holds the payload (or the result or progress) at
    /// rest; `None` when they are stored in clear. A [`Queue`](crate::Queue) that holds the
    /// key shows them decrypted; one that does not shows each as the text
    /// `encrypted (key NAME)`.
    pub encryption_key: Option<String>,
    /// What is wrong with the stored row, when another program wrote values litejobs cannot
    /// use (e.g. `column payload holds BLOB X'7B7D' (2 bytes), not text`). Empty for rows
    /// litejobs wrote. Such a job goes dead when a worker claims it; the fields above show
    /// the raw values safely (a BLOB as its hex literal, invalid UTF-8 replaced).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

impl JobRecord {
    /// True when a value of this job is stored encrypted and the queue that read it could
    /// not open it (no key of that name, or another key under that name): the value shows as
    /// the text `encrypted (key NAME)…`.
    pub fn shows_sealed(&self) -> bool {
        let Some(key) = &self.encryption_key else {
            return false;
        };
        let mark = crate::encryption::sealed_text(key);
        [
            Some(&self.payload),
            self.result.as_ref(),
            self.progress.as_ref(),
        ]
        .into_iter()
        .flatten()
        .any(|value| value.as_str().is_some_and(|text| text.starts_with(&mark)))
    }

    /// The moment that matters for a person looking at the job in its status, with its word:
    /// `("due", run_at)` while waiting (`("waiting", ..)` while held for the jobs it waits
    /// for), `("started", ..)` while running, `("finished", ..)`
    /// once final. Listings in the CLI and the dashboard show it relative to now.
    pub fn status_time(&self) -> (&'static str, i64) {
        match self.status {
            JobStatus::Queued if self.waiting_for > 0 => ("waiting", self.run_at),
            JobStatus::Queued | JobStatus::Failed => ("due", self.run_at),
            JobStatus::Running => ("started", self.started_at.unwrap_or(self.updated_at)),
            _ => ("finished", self.finished_at.unwrap_or(self.updated_at)),
        }
    }
}

/// How one attempt in a job's history ended: the `outcome` column of `job_attempts`.
///
/// A first-try success has no history row (it is recorded on the job row alone); a
/// snoozed attempt gives its attempt back and leaves no row either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// Succeeded after earlier attempts had failed.
    Succeeded,
    /// The handler failed (a retry was scheduled, or the job went dead).
    Failed,
    /// The attempt ran past its timeout.
    TimedOut,
    /// Given back unfinished at worker shutdown; the attempt is not spent.
    Released,
    /// The handler cancelled the job.
    Cancelled,
    /// The worker died or hung: its lease expired and the reaper took the job back.
    Lost,
}

impl AttemptOutcome {
    /// Every outcome.
    pub const ALL: [AttemptOutcome; 6] = [
        AttemptOutcome::Succeeded,
        AttemptOutcome::Failed,
        AttemptOutcome::TimedOut,
        AttemptOutcome::Released,
        AttemptOutcome::Cancelled,
        AttemptOutcome::Lost,
    ];

    /// The word stored in the `outcome` column.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::TimedOut => "timed_out",
            AttemptOutcome::Released => "released",
            AttemptOutcome::Cancelled => "cancelled",
            AttemptOutcome::Lost => "lost",
        }
    }

    /// The outcome a stored word names; a word another program wrote that names none is
    /// read as `Failed`, with the problem noted (a view shows the row rather than fail).
    pub(crate) fn read_leniently(word: &str, problems: &mut Vec<String>) -> AttemptOutcome {
        word.parse().unwrap_or_else(|_| {
            let shown: String = word.chars().take(64).collect();
            problems.push(format!(
                "column outcome holds {shown:?}, not one of succeeded, failed, timed_out, \
                 released, cancelled, lost"
            ));
            AttemptOutcome::Failed
        })
    }

    /// True for the outcomes counted as failures in rates and error figures.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            AttemptOutcome::Failed | AttemptOutcome::TimedOut | AttemptOutcome::Lost
        )
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AttemptOutcome {
    type Err = Error;

    fn from_str(s: &str) -> Result<AttemptOutcome> {
        AttemptOutcome::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| {
                Error::new(
                    crate::ErrorKind::Database,
                    format!("unknown attempt outcome {s:?} in job_attempts"),
                )
            })
    }
}

/// One row of a job's attempt history.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// The job.
    pub job_id: i64,
    /// Attempt number, from 1.
    pub attempt: i64,
    /// The worker that ran it.
    pub worker: Option<String>,
    /// When it started (ms).
    pub started_at: Option<i64>,
    /// When it ended (ms).
    pub finished_at: i64,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The error message, if it failed (a long one read cut, as [`JobRecord::last_error`]).
    pub error: Option<String>,
    /// HTTP status code (webhooks).
    pub status_code: Option<i64>,
    /// How long it ran (ms).
    pub duration_ms: Option<i64>,
    /// What is wrong with the stored row, when another program wrote values litejobs cannot
    /// use (e.g. `column outcome holds "weird", not one of …`). Empty for rows litejobs
    /// wrote; the fields above show the raw values safely.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// What [`Queue::discard_dead`](crate::Queue::discard_dead) did with the dead job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discarded {
    /// Deleted, with its attempt history.
    Deleted,
    /// It was the newest job of the table, which is never deleted so that ids are never
    /// reused: it is now `cancelled` (history kept), and retention removes it once newer
    /// jobs exist.
    KeptCancelled,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_words_round_trip() {
        for status in JobStatus::ALL {
            assert_eq!(status.as_str().parse::<JobStatus>().ok(), Some(status));
        }
        assert!("done".parse::<JobStatus>().is_err());
    }
}

/// What one attempt of a job said while it ran: lines its handler logged
/// ([`JobContext::log_line`](crate::JobContext::log_line), `log` records captured on its
/// thread) and a command's stderr. Made by [`Queue::attempt_logs`](crate::Queue::attempt_logs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AttemptLogRecord {
    /// The attempt (1 for the first).
    pub attempt: i64,
    /// Its newest 32 KiB, oldest line first, as stored: mask the secrets in it with
    /// [`Redactor::mask_logs`](crate::redact::Redactor::mask_logs) before showing it (the
    /// command line and the dashboard do).
    pub text: String,
    /// Bytes left out before [`text`](Self::text) (0 when nothing was cut).
    pub cut_bytes: i64,
    /// When the attempt's outcome was written (ms).
    pub written_at: i64,
}
