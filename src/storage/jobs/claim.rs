//! The claim: due jobs of one queue moved to `running` under a worker's lease, in one
//! order on every backend.

use std::cmp::Reverse;

use crate::error::Result;

/// What a dispatcher asks for in one claim: due jobs of one queue whose type it can run.
#[derive(Debug)]
pub(crate) struct ClaimRequest<'a> {
    pub(crate) queue: &'a str,
    pub(crate) job_types: &'a [String],
    /// Each type's timeout in ms (aligned with `job_types`), for jobs without their own.
    pub(crate) type_timeouts_ms: &'a [i64],
    pub(crate) limit: usize,
    /// Only jobs of a higher priority than this: a look for jobs that go ahead of those
    /// already claimed and waiting for a thread.
    pub(crate) above_priority: Option<i64>,
    pub(crate) worker_id: &'a str,
    pub(crate) lease_grace_ms: i64,
    /// A payload longer than this (bytes) is not handed to a handler: the job goes dead.
    pub(crate) max_payload_bytes: usize,
}

/// A row moved to `running` by a claim.
#[derive(Debug, Clone)]
pub(crate) struct ClaimedRow {
    pub(crate) id: i64,
    pub(crate) queue: String,
    pub(crate) job_type: String,
    pub(crate) payload: String,
    /// Its priority when claimed: a job of a higher priority than those waiting for a
    /// thread goes before them.
    pub(crate) priority: i64,
    pub(crate) attempt: i64,
    pub(crate) max_attempts: i64,
    pub(crate) timeout_ms: Option<i64>,
    pub(crate) locked_until: i64,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) group_key: Option<String>,
    /// The job's deadline (ms): a retry or snooze at or after it ends the job expired.
    pub(crate) expires_at: Option<i64>,
    /// Why the row cannot be handed to a handler (a value another program wrote that
    /// litejobs cannot use, e.g. a BLOB payload; see [`super::row_rules`]): the job goes dead
    /// without running. The claim never fails on such a row, so one bad row cannot stop
    /// a queue.
    pub(crate) defect: Option<String>,
}

/// What one claim took: jobs now running under this worker's lease, and jobs it found
/// unusable and made dead without running.
#[derive(Debug, Default)]
pub(crate) struct Claimed {
    pub(crate) rows: Vec<ClaimedRow>,
    pub(crate) refused: Vec<Refused>,
}

/// A due job the claim made dead without running: a live row breaking a schema rule (written
/// while the rules were switched off), which the claim's own update could not move to
/// `running`.
#[derive(Debug, Clone)]
pub(crate) struct Refused {
    pub(crate) id: i64,
    pub(crate) job_type: String,
    pub(crate) queue: String,
    pub(crate) attempts: i64,
    pub(crate) error: String,
}

/// The claim order as SQL for the `jobs` row named `alias`: higher priority first, then the
/// earlier run time, then the older job. The due-jobs indexes of both schemas hold rows in
/// this order, so a claim reads them without sorting.
pub(crate) fn claim_order_sql(alias: &str) -> String {
    format!("{alias}.priority DESC, {alias}.run_at, {alias}.id")
}

/// The claim order as a sort key, for rows a statement returned in no order: the same order
/// as [`claim_order_sql`].
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn claim_order_key(priority: i64, run_at: i64, id: i64) -> (Reverse<i64>, i64, i64) {
    (Reverse(priority), run_at, id)
}

/// The claim, in the caller's transaction.
pub(crate) trait ClaimStore {
    /// Claims up to `req.limit` due jobs of one queue in claim order ([`claim_order_sql`]),
    /// moving them to `running` under a lease; skips a paused queue, types the worker cannot
    /// run, jobs whose deadline (`expires_at`) is not after `now`, and jobs whose group key
    /// has a running job or an earlier due job (one job per key at a time, in order). Never
    /// fails on a row another program wrote: unusable rows come back [`Claimed::refused`]
    /// (made dead) or with a [`ClaimedRow::defect`].
    fn claim(&self, req: &ClaimRequest<'_>, now: i64) -> Result<Claimed>;

    /// True when a claim could find work: some job of these types in this queue is due and
    /// not past its deadline (of a higher priority than `above`, when given). A cheap read
    /// that spares an idle worker the write lock on every poll, and a busy one on each look
    /// for jobs to go ahead of those it holds.
    fn any_due(
        &self,
        queue: &str,
        job_types: &[String],
        now: i64,
        above: Option<i64>,
    ) -> Result<bool>;

    /// What an idle worker's poll of one queue finds: a job due now ([`Waiting::Due`], as
    /// [`any_due`](ClaimStore::any_due) says), jobs that wait for a later time
    /// ([`Waiting::Later`]), or none at all ([`Waiting::Nothing`], also for a paused queue,
    /// whose resume is announced). One read.
    fn waiting(&self, queue: &str, job_types: &[String], now: i64) -> Result<Waiting>;
}

/// What a poll of one queue found (see [`ClaimStore::waiting`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// A job is due now.
    Due,
    /// Jobs wait, none due yet (or due but past their deadline, which the sweep ends).
    Later,
    /// No job waits, or the queue is paused.
    Nothing,
}

impl Waiting {
    /// From the one number the statements return: 2 due, 1 later, 0 nothing.
    pub(crate) fn from_code(code: i64) -> Waiting {
        match code {
            2 => Waiting::Due,
            1 => Waiting::Later,
            _ => Waiting::Nothing,
        }
    }
}
