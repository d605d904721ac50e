//! A person's actions on jobs and queues: cancel (a waiting or a running job, one or by
//! type and text), retry now, pause and resume.

use crate::error::{Error, ErrorKind, Result};

/// Who cancelled a job when the caller did not say ([`Queue::cancel`](crate::Queue::cancel)):
/// the application, through the library.
pub(crate) const CANCELLED_BY_APP: &str = "app";

/// Refuses to cancel a job in `status` unless it waits (queued or failed) or runs. A
/// finished job stays as it ended.
pub(crate) fn check_cancellable(id: i64, status: &str) -> Result<()> {
    match status {
        "queued" | "failed" | "running" => Ok(()),
        other => Err(Error::new(
            ErrorKind::InvalidState,
            format!("job {id} is {other}; only queued, failed or running jobs can be cancelled"),
        )),
    }
}

/// "cancelled by WHO: WHY" (or without the why when none was given), as the cancelled
/// attempt's error and in what a running handler is told.
pub(crate) fn cancelled_text(by: Option<&str>, reason: Option<&str>) -> String {
    let by = by.filter(|b| !b.is_empty()).unwrap_or("someone");
    match reason.filter(|r| !r.trim().is_empty()) {
        Some(reason) => format!("cancelled by {by}: {reason}"),
        None => format!("cancelled by {by}"),
    }
}

/// A job a cancel ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cancelled {
    pub(crate) id: i64,
    pub(crate) job_type: String,
    pub(crate) queue: String,
    /// The attempt that was running, whose outcome is now `cancelled` (its worker is to
    /// stop it); `None` for a job that was waiting.
    pub(crate) running_attempt: Option<i64>,
}

/// A cancelled job among those a worker holds, with who cancelled it and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CancelledNote {
    pub(crate) id: i64,
    pub(crate) by: Option<String>,
    pub(crate) reason: Option<String>,
}

/// Cancels the jobs `ids` in order in the caller's transaction, for a bulk cancel: the
/// first refusal names its job and fails the whole (the caller's transaction then rolls
/// back, so nothing is cancelled).
pub(crate) fn cancel_each<S: AdminStore + ?Sized>(
    store: &S,
    ids: Vec<i64>,
    by: &str,
    reason: &str,
    now: i64,
) -> Result<Vec<Cancelled>> {
    ids.into_iter()
        .map(|id| {
            store.cancel(id, by, reason, now).map_err(|e| {
                e.prefixed(&format!(
                    "bulk cancel refused at job {id}, nothing was cancelled"
                ))
            })
        })
        .collect()
}

/// Operator actions on jobs and queues.
pub(crate) trait AdminStore {
    /// Cancels a waiting (queued or failed) or running job, keeping who and why (an empty
    /// reason is kept as none). A running attempt gets its history row (outcome `cancelled`)
    /// and loses its lease, so whatever it writes later changes nothing.
    fn cancel(&self, id: i64, by: &str, reason: &str, now: i64) -> Result<Cancelled>;

    /// Cancels every waiting or running job of `job_type` whose last error or payload
    /// contains `search` (ASCII letters match either case; `None` matches all), oldest
    /// first, inside the caller's transaction: one refusal fails them all.
    fn cancel_matching(
        &self,
        job_type: &str,
        search: Option<&str>,
        by: &str,
        reason: &str,
        now: i64,
    ) -> Result<Vec<Cancelled>>;

    /// The jobs among `ids` that are cancelled now, with who and why: a worker's look at the
    /// jobs it holds.
    fn cancelled_among(&self, ids: &[i64]) -> Result<Vec<CancelledNote>>;

    /// Makes a waiting job due now; a dead job gets one more attempt (see `Queue::retry_now`).
    fn retry_now(&self, id: i64, now: i64) -> Result<()>;

    /// Sets a queue's paused switch (creating its row on first use).
    fn set_paused(&self, queue: &str, paused: bool, now: i64) -> Result<()>;

    /// Names of the paused queues, sorted.
    fn paused_queues(&self) -> Result<Vec<String>>;
}
