//! Deadlines: waiting jobs past their `expires_at` end `cancelled` (`cancelled_by`
//! `deadline`), found through `jobs_expiring_idx`, which holds only waiting jobs that have a
//! deadline; and a running job whose next run would fall after its deadline ends the same
//! way, fenced by its lease.

use super::complete::Lease;
use crate::error::Result;

/// A waiting job the sweep cancelled because its deadline passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expired {
    pub(crate) id: i64,
    pub(crate) queue: String,
    pub(crate) job_type: String,
    /// The attempts it had run.
    pub(crate) attempts: i64,
    /// Its `cancel_reason`.
    pub(crate) reason: String,
}

/// An attempt whose job expires instead of running again: what the attempt itself ended
/// with (`error`, `status_code`: a failure's; none for a snooze) and the job's
/// `cancel_reason`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpiredAttempt<'a> {
    pub(crate) lease: Lease<'a>,
    pub(crate) reason: &'a str,
    pub(crate) error: Option<&'a str>,
    pub(crate) status_code: Option<i64>,
}

/// What a sweep does with a row another transaction is writing (on PostgreSQL; SQLite's one
/// writer never meets one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeldRows {
    /// Pass it over: the next sweep takes it (a worker's sweep, which must never wait).
    Skip,
    /// Wait for that transaction, then take the row if it still waits past its deadline:
    /// when the sweep returns, no job that was past its deadline when it began still waits
    /// (`Queue::cancel_expired`).
    Wait,
}

/// Ending jobs by their deadline, each in the caller's transaction.
pub(crate) trait ExpireStore {
    /// Cancels up to `limit` waiting (queued or failed) jobs whose deadline is at or before
    /// `now` (earliest deadline first, or in id order when it waits for held rows), each with a `cancel_reason` naming its deadline
    /// ([`crate::job::not_started_reason`]). Reads only `jobs_expiring_idx`; rows another
    /// process is writing are passed over or waited for, as `held` says. Returns them.
    fn cancel_expired(&self, now: i64, limit: usize, held: HeldRows) -> Result<Vec<Expired>>;

    /// Ends a running job `cancelled` by its deadline after the attempt under `attempt.lease`
    /// (the retry or snooze it asked for would fall at or after the deadline): the attempt is
    /// spent; the failure's error, if any, is kept as the last error. False (nothing changed)
    /// when the lease no longer holds.
    fn expire_running(&self, attempt: &ExpiredAttempt<'_>, now: i64) -> Result<bool>;

    /// Ends the waiting job that holds idempotency key `key`, when it is past its deadline,
    /// as the sweep would (it would never start, and must not keep the key from a new job).
    /// True when it ended one.
    fn expire_key_holder(&self, key: &str, now: i64) -> Result<bool>;
}
