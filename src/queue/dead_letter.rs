//! `impl Queue` for the dead letter: dead jobs waiting for a person, requeue (one, or
//! by type and error text), discard.

use crate::error::{Error, ErrorKind, Result};
use crate::job::{Discarded, JobRecord};
use crate::queue::workflows::stand_in;
use crate::storage::reads::JobFilter;
use crate::storage::Tx;
use crate::Queue;

impl Queue {
    /// Requeues dead job `id` as a **new** job (new id, same type, payload and options, due
    /// now, attempts from 0). The dead job stays, marked with `by`, the time, `reason` and the
    /// new id. Returns the new id and wakes this process's workers.
    ///
    /// # Errors
    /// [`NotFound`](crate::ErrorKind::NotFound) for an unknown id;
    /// [`InvalidState`](crate::ErrorKind::InvalidState) when the job is not dead, was
    /// already requeued, or its idempotency key is held by another live job.
    pub fn requeue_dead(&self, id: i64, by: &str, reason: &str) -> Result<i64> {
        let now = self.now_ms();
        let new_id = self.db().write(|tx| {
            let new_id = tx.requeue_dead(id, by, reason, now)?;
            stand_in(tx, id, new_id, now)?;
            Ok(new_id)
        })?;
        log::info!("litejobs: dead job {id} requeued as job {new_id} by {by}: {reason}");
        self.notify();
        Ok(new_id)
    }

    /// Dead jobs that wait for a person (nobody requeued or discarded them), newest first,
    /// narrowed by the filter's type, queue, search text, page and limit (its status is
    /// ignored). [`Queue::list`] with [`JobStatus::Dead`](crate::JobStatus::Dead) also shows requeued ones.
    pub fn dead_jobs(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        let jobs = self.db().read(|conn| conn.dead_awaiting(filter))?;
        Ok(self.reveal_all(jobs))
    }

    /// Deletes dead job `id` and its attempt history ("discard", as in Sidekiq's dead set).
    ///
    /// The newest job of the table is never deleted, because it keeps job ids from being
    /// reused: discarding it makes it `cancelled` instead ([`Discarded::KeptCancelled`]),
    /// out of the dead letter, and retention removes it once newer jobs exist.
    ///
    /// # Errors
    /// [`NotFound`](crate::ErrorKind::NotFound) for an unknown id;
    /// [`InvalidState`](crate::ErrorKind::InvalidState) when the job is not dead.
    pub fn discard_dead(&self, id: i64) -> Result<Discarded> {
        let now = self.now_ms();
        let discarded = self.db().write(|tx| tx.discard_dead(id, now))?;
        match discarded {
            Discarded::Deleted => log::info!("litejobs: dead job {id} discarded"),
            Discarded::KeptCancelled => log::info!(
                "litejobs: dead job {id} discarded: cancelled, not deleted, as the newest job \
                 keeps ids from being reused"
            ),
        }
        Ok(discarded)
    }

    /// Requeues, in **one transaction**, every dead job of `job_type` that nobody requeued
    /// yet and whose last error contains `search` (ASCII letters match either case; `None`
    /// matches all), oldest first, as [`Queue::requeue_dead`] does one. Returns
    /// `(dead id, new id)` pairs; an empty list when nothing matched.
    /// [`Queue::requeue_dead_where`] narrows by any filter, an error group too.
    ///
    /// # Errors
    /// All or nothing: when one job cannot be requeued (e.g. its idempotency key is held by a
    /// live job) none is, and the error names that job with
    /// [`InvalidState`](crate::ErrorKind::InvalidState).
    pub fn requeue_dead_matching(
        &self,
        job_type: &str,
        search: Option<&str>,
        by: &str,
        reason: &str,
    ) -> Result<Vec<(i64, i64)>> {
        self.requeue_dead_where(&type_and_search(job_type, search), by, reason)
    }

    /// Requeues, in **one transaction**, every dead job that nobody requeued yet and that
    /// the filter's type, queue, search text and error group narrow to (its status, page
    /// and limit are ignored), oldest first, as [`Queue::requeue_dead`] does one: say, a
    /// whole [`ErrorGroup`](crate::ErrorGroup) once its cause is fixed. Returns
    /// `(dead id, new id)` pairs; an empty list when nothing matched.
    ///
    /// ```
    /// # fn main() -> litejobs::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let queue = litejobs::Queue::open(dir.path().join("app.db"))?;
    /// use litejobs::JobFilter;
    /// for group in queue.error_groups(10)? {
    ///     if group.headline.contains("Connection refused") {
    ///         let filter = JobFilter::new().error_group(group.group);
    ///         queue.requeue_dead_where(&filter, "ops@example.com", "database back up")?;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Queue::requeue_dead_matching`]: all or nothing.
    pub fn requeue_dead_where(
        &self,
        filter: &JobFilter,
        by: &str,
        reason: &str,
    ) -> Result<Vec<(i64, i64)>> {
        self.requeue_dead_where_with_progress(filter, by, reason, &mut crate::progress::ignore)
    }

    /// [`Queue::requeue_dead_where`], calling `on_progress` after each job with how many of
    /// how many are requeued (all in the one transaction, committed at the end).
    ///
    /// # Errors
    /// As [`Queue::requeue_dead_where`].
    pub fn requeue_dead_where_with_progress(
        &self,
        filter: &JobFilter,
        by: &str,
        reason: &str,
        on_progress: &mut dyn FnMut(crate::progress::Progress),
    ) -> Result<Vec<(i64, i64)>> {
        let now = self.now_ms();
        let pairs = self.db().write(|tx| {
            let pairs = requeue_matching(tx, filter, by, reason, now, &mut *on_progress)?;
            for &(old, new) in &pairs {
                stand_in(tx, old, new, now)?;
            }
            Ok(pairs)
        })?;
        if !pairs.is_empty() {
            let what = filter.job_type.as_deref().unwrap_or("(any type)");
            log::info!(
                "litejobs: {} dead {what} jobs requeued by {by}: {reason}",
                pairs.len()
            );
            self.notify();
        }
        Ok(pairs)
    }

    /// What [`Queue::requeue_dead`] would do to dead job `id`, changing nothing: the same
    /// transaction with every check it makes, rolled back. `Ok` when it would requeue the
    /// job; otherwise the very error it would give. (On PostgreSQL the rolled-back insert
    /// uses up a job id: ids have gaps, never repeats.)
    ///
    /// # Errors
    /// As [`Queue::requeue_dead`].
    pub fn requeue_dead_dry_run(&self, id: i64) -> Result<()> {
        let now = self.now_ms();
        self.rolled_back(|tx| tx.requeue_dead(id, "", "", now).map(|_| ()))
    }

    /// What [`Queue::requeue_dead_matching`] would do, changing nothing: the same
    /// transaction with every check it makes, rolled back. Returns the ids of the dead jobs
    /// it would requeue, oldest first; otherwise the very error it would give (naming the
    /// first job it would refuse).
    ///
    /// # Errors
    /// As [`Queue::requeue_dead_matching`].
    pub fn requeue_dead_matching_dry_run(
        &self,
        job_type: &str,
        search: Option<&str>,
    ) -> Result<Vec<i64>> {
        self.requeue_dead_where_dry_run(&type_and_search(job_type, search))
    }

    /// What [`Queue::requeue_dead_where`] would do, changing nothing, as
    /// [`Queue::requeue_dead_matching_dry_run`].
    ///
    /// # Errors
    /// As [`Queue::requeue_dead_where`].
    pub fn requeue_dead_where_dry_run(&self, filter: &JobFilter) -> Result<Vec<i64>> {
        let now = self.now_ms();
        self.rolled_back(|tx| {
            let pairs = requeue_matching(tx, filter, "", "", now, &mut crate::progress::ignore)?;
            Ok(pairs.into_iter().map(|(dead_id, _)| dead_id).collect())
        })
    }

    /// Runs `f` in a write transaction that is always rolled back, and gives what `f` gave.
    pub(super) fn rolled_back<T>(&self, f: impl FnOnce(&dyn Tx) -> Result<T>) -> Result<T> {
        let mut kept = None;
        let outcome = self.db().write(|tx| {
            kept = Some(f(tx)?);
            // An error is what rolls a transaction back.
            Err::<(), _>(Error::new(
                ErrorKind::InvalidState,
                "a dry run, rolled back",
            ))
        });
        match (kept, outcome) {
            (Some(value), _) => Ok(value),
            (None, Err(e)) => Err(e),
            (None, Ok(())) => Err(Error::new(
                ErrorKind::Database,
                "a dry run's transaction ended without running",
            )),
        }
    }
}

/// Requeues every dead job (not yet requeued) that `filter` narrows to (its page and limit
/// ignored), oldest first, inside `tx`: one refusal fails them all. `on_progress` hears
/// after each job how many of how many are requeued.
fn requeue_matching(
    tx: &dyn Tx,
    filter: &JobFilter,
    by: &str,
    reason: &str,
    now: i64,
    on_progress: &mut dyn FnMut(crate::progress::Progress),
) -> Result<Vec<(i64, i64)>> {
    let ids = tx.dead_ids_matching(&JobFilter {
        before_id: None,
        ..filter.clone()
    })?;
    let total = ids.len() as u64;
    let mut pairs = Vec::with_capacity(ids.len());
    for id in ids {
        let new_id = tx
            .requeue_dead(id, by, reason, now)
            .map_err(|e| e.prefixed("bulk requeue refused, nothing was requeued"))?;
        pairs.push((id, new_id));
        on_progress(crate::progress::Progress::of(
            pairs.len() as u64,
            Some(total),
        ));
    }
    Ok(pairs)
}

/// The filter of [`Queue::requeue_dead_matching`]: one type, and an error text.
fn type_and_search(job_type: &str, search: Option<&str>) -> JobFilter {
    let filter = JobFilter::new().job_type(job_type);
    match search {
        Some(text) => filter.search(text),
        None => filter,
    }
}
