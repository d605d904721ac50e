//! Jobs as the runtime writes them: insert (with idempotency keys), claim under a lease,
//! the writes fenced by that lease (heartbeat, complete, fail, snooze/release, cancel), the
//! attempt history, and the reaper. [`JobStore`] is the interface; `sqlite/jobs.rs` is its
//! SQLite implementation.

use crate::error::{Error, Result};
use crate::job::{AttemptOutcome, NewJob};

/// A batch statement's error, naming the jobs it held (`first` is the index in the batch of
/// `chunk[0]`): the database does not say which of its rows broke a rule.
pub(crate) fn batch_error(e: Error, chunk: &[NewJob], first: usize) -> Error {
    let mut types: Vec<&str> = chunk.iter().map(|job| job.job_type.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    e.prefixed(&format!(
        "jobs {first} to {} of the batch (types {})",
        first + chunk.len().max(1) - 1,
        types.join(", ")
    ))
}

/// The outcome of an insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inserted {
    pub(crate) id: i64,
    /// False when an idempotency key matched an existing job and nothing was inserted.
    pub(crate) created: bool,
}

/// What a dispatcher asks for in one claim: due jobs of one queue whose type it can run.
#[derive(Debug)]
pub(crate) struct ClaimRequest<'a> {
    pub(crate) queue: &'a str,
    pub(crate) job_types: &'a [String],
    /// Each type's timeout in ms (aligned with `job_types`), for jobs without their own.
    pub(crate) type_timeouts_ms: &'a [i64],
    pub(crate) limit: usize,
    pub(crate) worker_id: &'a str,
    pub(crate) lease_grace_ms: i64,
    /// A payload longer than this (bytes) is not handed to a handler: the job goes dead.
    pub(crate) max_payload_bytes: usize,
}

/// From this many jobs without keys, a batch is inserted with the schema's CHECK rules
/// off where the backend allows (SQLite): they guard rows from other programs, and a job
/// litejobs inserts has passed the same rules in code already ([`crate::job::validate`],
/// [`crate::job::RunAt::resolve`]; a test holds every validated row to the rules). Measured,
/// the rules cost 15 % of a batch.
pub(crate) const VALIDATED_FROM_ROWS: usize = 128;

/// A row moved to `running` by a claim.
#[derive(Debug, Clone)]
pub(crate) struct ClaimedRow {
    pub(crate) id: i64,
    pub(crate) queue: String,
    pub(crate) job_type: String,
    pub(crate) payload: String,
    pub(crate) attempt: i64,
    pub(crate) max_attempts: i64,
    pub(crate) timeout_ms: Option<i64>,
    pub(crate) locked_until: i64,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) group_key: Option<String>,
    /// Why the row cannot be handed to a handler (a value another program wrote that
    /// litejobs cannot use, e.g. a BLOB payload): the job goes dead without running. The
    /// claim never fails on such a row (R28).
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
    pub(crate) attempts: i64,
    pub(crate) error: String,
}

/// The lease a write is fenced by: the job is still running under this worker's claim of
/// this attempt. A late result of a reaped or timed-out attempt matches nothing.
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

/// The writes of a job's life, each in the caller's transaction.
///
/// Every write for a running job takes the [`Lease`] it was claimed under and changes
/// nothing (returning false) unless the job is still `running` under that worker and that
/// attempt: a late result of an attempt that timed out, was reaped or was released can
/// never overwrite a newer one.
pub(crate) trait JobStore {
    /// Inserts one validated job (`payload` is its JSON text). A held or remembered
    /// idempotency key returns the holder's id instead, inserting nothing.
    fn insert_job(&self, job: &NewJob, payload: &str, now: i64) -> Result<Inserted>;

    /// Inserts many validated jobs (`payloads[i]` is `jobs[i]`'s JSON text), in order.
    /// On SQLite, a batch of [`VALIDATED_FROM_ROWS`] or more jobs without keys skips the
    /// schema's CHECK rules.
    fn insert_jobs(&self, jobs: &[NewJob], payloads: &[String], now: i64) -> Result<Vec<Inserted>>;

    /// Claims up to `req.limit` due jobs of one queue in (priority DESC, run_at, id) order,
    /// moving them to `running` under a lease; skips a paused queue, types the worker cannot
    /// run, and jobs whose group key has a running job or an earlier due job (R13). Never
    /// fails on a row another program wrote: unusable rows come back [`Claimed::refused`]
    /// (made dead) or with a [`ClaimedRow::defect`].
    fn claim(&self, req: &ClaimRequest<'_>, now: i64) -> Result<Claimed>;

    /// True when a claim could find work: some job of these types in this queue is due. A
    /// cheap read that spares an idle worker the write lock on every poll.
    fn any_due(&self, queue: &str, job_types: &[String], now: i64) -> Result<bool>;

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
    /// (shutdown) due at once.
    fn put_back(&self, lease: Lease<'_>, run_at: i64, now: i64) -> Result<bool>;

    /// Cancels the job at its handler's request.
    fn cancel_running(&self, lease: Lease<'_>, reason: &str, now: i64) -> Result<bool>;

    /// Remembers a succeeded job's idempotency key for the window (R12).
    fn remember_key(&self, key: &str, job_id: i64, now: i64, window_ms: i64) -> Result<()>;

    /// True when `key` is remembered as completed (not expired).
    fn key_remembered(&self, key: &str, now: i64) -> Result<bool>;

    /// Appends one attempt to the job's history.
    fn insert_attempt(&self, row: &AttemptRow<'_>) -> Result<()>;

    /// Reaps running jobs whose lease expired before `now` (R9), or that have none: each
    /// gets a `lost` attempt, then is due at once, or dead when its attempts are spent.
    /// Never touches a live lease. Returns the count.
    fn reap_expired(&self, now: i64) -> Result<usize>;
}
