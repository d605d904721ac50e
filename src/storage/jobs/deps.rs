//! Dependencies: a job that waits for other jobs. Each wait is a `job_deps` row (the
//! dependant, the dependency, whether any outcome will do, and its state: `pending`, then
//! `done` or `failed`).
//!
//! A dependant with pending rows is *held*: it stays `queued` (the six statuses are the
//! contract), its `run_at` is [`HELD_RUN_AT`] so no claim, due count or overdue alarm ever
//! takes it for due, `held_run_at` keeps the time it asked for, and `waiting_for` counts its
//! pending rows (plus one while its batch is open). Each row leaves `pending` exactly once,
//! in the transaction that ends its dependency, and takes one off that count: a dependant is
//! released (its `run_at` put back) by the last one, once, and never forgotten. A dependency
//! that ends dead or cancelled cancels its dependants (and theirs, transitively) unless the
//! row says any outcome will do; a requeue or retry of that dependency brings them back, and
//! those that waited for it on any outcome and have not started wait for its new end.
//! Every end litejobs writes is settled in its own transaction (the completer, a person's
//! cancel, the deadline sweep, the reaper, an enqueue that ends a key's holder); ends written
//! by other programs, and their broken rows that the claim or the stray sweep makes dead,
//! wait for the waits sweep.

use crate::error::Result;
use crate::storage::jobs::InsertStore;

/// `run_at` of a held job: later than any real time litejobs schedules (the schema's rule
/// allows up to 99 999 999 999 999 ms, in the year 5138), so it is never due.
pub(crate) const HELD_RUN_AT: i64 = crate::job::MAX_RUN_AT_MS;

/// What settling takes for the status of a job waited for whose row is gone (deleted by
/// another program): it will never succeed, so its dependants are cancelled (or run, when
/// any outcome will do) as for a dead one.
pub(crate) const DELETED: &str = "deleted";

/// `cancelled_by` of a job cancelled because a dependency ended dead or cancelled.
pub(crate) const CANCELLED_BY_DEPENDENCY: &str = "dependency";

/// One wait: `job_id` waits for `depends_on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Edge {
    pub(crate) job_id: i64,
    pub(crate) depends_on: i64,
    /// The dependant runs whatever the dependency's outcome.
    pub(crate) any_outcome: bool,
    /// The dependant went in held ([`Inserted::held`](crate::storage::jobs::Inserted)),
    /// counting as pending every wait passed with it in this call: those that are not
    /// (there twice, or on a job already ended) come off that count.
    pub(crate) counted: bool,
}

/// What settling changed: dependants now due, and dependants cancelled (transitively).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Settled {
    pub(crate) released: Vec<i64>,
    pub(crate) cancelled: Vec<i64>,
}

impl Settled {
    pub(crate) fn extend(&mut self, other: Settled) {
        self.released.extend(other.released);
        self.cancelled.extend(other.cancelled);
    }
}

/// The `cancel_reason` of a dependant whose dependency `id` (step `step`, if in a
/// workflow) ended `status`.
pub(crate) fn dependency_ended_reason(id: i64, step: Option<&str>, status: &str) -> String {
    if status == DELETED {
        return format!("dependency job {id} was deleted");
    }
    match step {
        Some(step) => format!("dependency job {id} (step {step}) ended {status}"),
        None => format!("dependency job {id} ended {status}"),
    }
}

/// Inserts `job`, then the waits it asks for ([`NewJob::after`](crate::NewJob::after)), in
/// the caller's transaction: [`InsertStore::insert_job_and_waits`] wherever the backend has
/// no single statement for both.
pub(crate) fn insert_then_wait<S: InsertStore + DependencyStore + ?Sized>(
    store: &S,
    job: &crate::job::NewJob,
    payload: &str,
    now: i64,
) -> Result<crate::storage::jobs::Inserted> {
    let inserted = store.insert_job(job, payload, now)?;
    if inserted.created && !job.after.is_empty() {
        let edges: Vec<Edge> = edges_of(&inserted, job).collect();
        store.add_dependencies(&edges, now)?;
    }
    Ok(inserted)
}

/// The waits a new job asked for.
pub(crate) fn edges_of<'a>(
    inserted: &crate::storage::jobs::Inserted,
    job: &'a crate::job::NewJob,
) -> impl Iterator<Item = Edge> + 'a {
    let (job_id, counted) = (inserted.id, inserted.held);
    job.after
        .iter()
        .map(move |&(depends_on, any_outcome)| Edge {
            job_id,
            depends_on,
            any_outcome,
            counted,
        })
}

/// How many waits the transaction inserting `job` adds to it (`after`, and
/// `extra_waits`): what a held insert counts as pending. A wait that turns out to be there
/// twice or already ended comes off that count as it goes in.
pub(crate) fn waits_asked(job: &crate::job::NewJob) -> i64 {
    i64::try_from(job.after.len() + job.extra_waits).unwrap_or(i64::MAX)
}

/// Refuses what both backends refuse of a wait, with the same words, before anything is
/// written: a job waiting for itself, a waiting job that does not exist or is not queued
/// (`waiting`: its status, and whether a dependency cancelled it, which `revivable_ok`
/// accepts: it only counts the wait, for when a requeue brings it back), and a wait for a
/// job that does not exist.
pub(crate) fn check_wait(
    edge: &Edge,
    waiting: Option<(&str, bool)>,
    waited_for_exists: bool,
    revivable_ok: bool,
) -> Result<()> {
    use crate::error::{Error, ErrorKind};
    if edge.job_id == edge.depends_on {
        return Err(Error::new(
            ErrorKind::InvalidJob,
            format!("job {} cannot wait for itself", edge.job_id),
        ));
    }
    match waiting {
        Some(("queued", _)) => {}
        Some((_, true)) if revivable_ok => {}
        Some((other, _)) => {
            return Err(Error::new(
                ErrorKind::InvalidState,
                format!(
                    "job {} is {other}: only a queued job can wait for another",
                    edge.job_id
                ),
            ))
        }
        None => {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("job {} does not exist", edge.job_id),
            ))
        }
    }
    if !waited_for_exists {
        return Err(no_job_to_wait_for(edge.depends_on));
    }
    Ok(())
}

/// The refusal of a wait for job `id`, which does not exist (`schema.pg.sql`'s statement
/// trigger raises the same words for litejobs' own inserts). It names the job waited for,
/// not the waiting one: a new job's insert is undone with the refusal.
pub(crate) fn no_job_to_wait_for(id: i64) -> crate::Error {
    crate::Error::new(
        crate::ErrorKind::NotFound,
        format!("there is no job {id} to wait for; nothing was written"),
    )
}

/// Waits between jobs, each in the caller's write transaction.
pub(crate) trait DependencyStore {
    /// Adds `edges`. Each dependant must be `queued`, or cancelled by a dependency (an
    /// earlier edge of the same job, on a job that had ended dead: it only counts its pending
    /// waits, so that a requeue that brings it back leaves it waiting for all of them), and
    /// each dependency must exist. A dependency that has already ended settles its row at
    /// once (done, or failed and the dependant cancelled); otherwise the dependant is held
    /// until it ends. Returns what that settled.
    fn add_dependencies(&self, edges: &[Edge], now: i64) -> Result<Settled>;

    /// Settles the dependants of `ended` (jobs this transaction ended: succeeded, dead or
    /// cancelled): releases those whose last dependency this was, cancels (transitively)
    /// those a dead or cancelled dependency fails. Jobs that are not ended, or have no
    /// dependants, are passed over.
    fn settle_dependants(&self, ended: &[i64], now: i64) -> Result<Settled>;

    /// [`DependencyStore::settle_dependants`] for a caller with no use for what it settled
    /// (a worker's batch of outcomes): where the schema's triggers have settled already
    /// (PostgreSQL), nothing is left to do, and reading back what they did cost each batch
    /// a round trip.
    fn settle_dependants_unread(&self, ended: &[i64], now: i64) -> Result<()> {
        self.settle_dependants(ended, now).map(|_| ())
    }

    /// `old` (dead or cancelled) is running again as `new` (a requeue's new job, or `old`
    /// itself after a retry): the dependants it failed wait for `new` again, and those it
    /// cancelled (transitively) are held again; so do those that waited for it on any
    /// outcome and have not started (queued, or cancelled by a dependency). Returns the jobs
    /// brought back.
    fn revive_dependants(&self, old: i64, new: i64, now: i64) -> Result<Vec<i64>>;

    /// Holds queued `ids` by `n` more (a batch's callbacks while it is open).
    fn hold(&self, ids: &[i64], n: i64, now: i64) -> Result<()>;

    /// Takes one hold off queued `ids` (a batch closed), releasing those left with none.
    fn unhold(&self, ids: &[i64], now: i64) -> Result<Settled>;

    /// Settles up to `limit` ended jobs that still have pending dependants (their status
    /// was changed by another program, which settles nothing).
    fn settle_stragglers(&self, limit: usize, now: i64) -> Result<Settled>;
}
