//! A job's deadline at the end of an attempt: a retry or snooze that would fall at or after
//! `expires_at` ends the job `cancelled` as expired instead, since the claim would never
//! start it. The attempt that ran is not cut short by the deadline (its timeout does that):
//! this only decides what comes after it.

use crate::error::Result;
use crate::job::{retry_reason, snooze_reason, AttemptOutcome};
use crate::storage::jobs::{AttemptRow, ClaimedRow, ExpiredAttempt, Lease};
use crate::storage::Tx;

/// An attempt after which its job expires: the job's `cancel_reason`, and what the attempt
/// itself ended with (a failure's error and status code; none for a snooze).
#[derive(Debug, Clone)]
pub(crate) struct Expiry {
    pub(crate) reason: String,
    pub(crate) error: Option<String>,
    pub(crate) status_code: Option<i64>,
    pub(crate) timed_out: bool,
}

/// The reason `row`'s job expires instead of retrying at `retry_at`, if it does.
pub(crate) fn retry_expires(row: &ClaimedRow, retry_at: i64) -> Option<String> {
    let deadline = row.expires_at.filter(|&deadline| retry_at >= deadline)?;
    Some(retry_reason(retry_at, deadline))
}

/// The reason `row`'s job expires instead of snoozing until `until`, if it does.
pub(crate) fn snooze_expires(row: &ClaimedRow, until: i64) -> Option<String> {
    let deadline = row.expires_at.filter(|&deadline| until >= deadline)?;
    Some(snooze_reason(until, deadline))
}

/// Writes an expired job's end, fenced by `lease`, and its attempt's history row (`attempt`
/// with the outcome filled in: the failure as it was, or `cancelled` with the reason for a
/// snooze). False when the lease was gone.
pub(crate) fn write_expired(
    tx: &dyn Tx,
    lease: Lease<'_>,
    attempt: &AttemptRow<'_>,
    expiry: &Expiry,
    now: i64,
) -> Result<bool> {
    let ended = ExpiredAttempt {
        lease,
        reason: &expiry.reason,
        error: expiry.error.as_deref(),
        status_code: expiry.status_code,
    };
    if !tx.expire_running(&ended, now)? {
        return Ok(false);
    }
    let (outcome, error) = match &expiry.error {
        Some(error) if expiry.timed_out => (AttemptOutcome::TimedOut, error),
        Some(error) => (AttemptOutcome::Failed, error),
        None => (AttemptOutcome::Cancelled, &expiry.reason),
    };
    tx.insert_attempt(&AttemptRow {
        outcome,
        error: Some(error),
        status_code: expiry.status_code,
        ..*attempt
    })?;
    Ok(true)
}
