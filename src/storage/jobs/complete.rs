//! The writes fenced by a lease: heartbeat, success, failure, snooze or release, cancel,
//! and the attempt history they leave.

use crate::error::Result;
use crate::job::AttemptOutcome;

/// The lease a write is fenced by: the job is still running under this worker's claim of
/// this attempt. A late result of a reaped, timed-out or released attempt matches nothing,
/// whether it is the outcome of the job or a write of its own (a report chunk's rows).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease<'a> {
    pub(crate) job_id: i64,
    pub(crate) attempt: i64,
    pub(crate) worker_id: &'a str,
}

/// A succeeded attempt to write: its lease, the handler's result and latest progress (JSON).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Success<'a> {
    pub(crate) lease: Lease<'a>,
    pub(crate) result: Option<&'a str>,
    pub(crate) progress: Option<&'a str>,
    /// The job's queue and type as claimed: where the row still holds them, the success
    /// is counted under them without reading them back.
    pub(crate) queue: &'a str,
    pub(crate) job_type: &'a str,
}

/// What happens to a job after a failed attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AfterFailure {
    /// Due again at this time (status `failed`).
    RetryAt(i64),
    /// Attempts spent or permanent error (status `dead`).
    Dead,
}

/// One attempt's record, as written by the completer and the reaper.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttemptRow<'a> {
    pub(crate) job_id: i64,
    pub(crate) attempt: i64,
    pub(crate) worker: &'a str,
    pub(crate) started_at: i64,
    pub(crate) finished_at: i64,
    pub(crate) outcome: AttemptOutcome,
    pub(crate) error: Option<&'a str>,
    pub(crate) status_code: Option<i64>,
}

/// The writes for a running job, each in the caller's transaction and each fenced by the
/// job's [`Lease`]: false (nothing changed) when the lease no longer holds.
pub(crate) trait CompleteStore {
    /// Moves the lease on to `until` (heartbeat), saving `progress` if given.
    fn extend_lease(
        &self,
        lease: Lease<'_>,
        until: i64,
        progress: Option<&str>,
        now: i64,
    ) -> Result<bool>;

    /// Marks jobs succeeded with their results (progress kept when none is given), each
    /// under its own lease. Returns, in order, whether each lease held. At most one success
    /// per job in a call.
    fn succeed(&self, jobs: &[Success<'_>], now: i64) -> Result<Vec<bool>>;

    /// Records a failed attempt: `failed` with a new run time, or `dead`.
    fn fail(
        &self,
        lease: Lease<'_>,
        after: AfterFailure,
        error: &str,
        status_code: Option<i64>,
        now: i64,
    ) -> Result<bool>;

    /// Puts the job back without spending its attempt: snoozed until `run_at`, or released
    /// (shutdown; `None`) with the run time it had, so it keeps its place in line.
    fn put_back(&self, lease: Lease<'_>, run_at: Option<i64>, now: i64) -> Result<bool>;

    /// Cancels the job at its handler's request.
    fn cancel_running(&self, lease: Lease<'_>, reason: &str, now: i64) -> Result<bool>;

    /// Appends one attempt to the job's history.
    fn insert_attempt(&self, row: &AttemptRow<'_>) -> Result<()>;
}
