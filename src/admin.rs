//! `impl Queue` for people and tools: filtered lists and stats; and the operator's actions
//! (cancel, retry now, pause/resume a queue, dead-letter discard and bulk requeue, grouped
//! errors, health figures, retention).

use std::time::Duration;

use serde::Serialize;

use crate::clock::duration_to_ms;
use crate::error::{Error, Result};
use crate::job::JobRecord;
use crate::maintenance::pruner::{
    self, CheckpointMode, CheckpointReport, PruneOptions, PruneReport,
};
use crate::storage::reads::{ErrorGroup, JobFilter, Stats};
use crate::Queue;

impl Queue {
    /// Jobs matching `filter`, newest first.
    pub fn list(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        self.db().read(|conn| conn.list_jobs(filter))
    }

    /// Counts by queue, type and status; the oldest due job's age; dead jobs in the last hour.
    pub fn stats(&self) -> Result<Stats> {
        let now = self.now_ms();
        self.db().read(|conn| conn.stats(now))
    }
}

/// Failed attempts of the last this-long count toward [`Health::failure_rate`] unless
/// another window is asked for: one hour.
pub const DEFAULT_HEALTH_WINDOW: Duration = Duration::from_secs(3600);

/// The three questions of the morning after, answered at once: how many jobs wait, how many
/// fail, how old the oldest due job is. Made by [`Queue::health`]; read in one snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Health {
    /// When it was read, by the queue's clock (ms).
    pub at_ms: i64,
    /// Queued or failed jobs whose run time has come.
    pub due_now: i64,
    /// Queued or failed jobs due later (retries in backoff, delayed jobs).
    pub scheduled: i64,
    /// Jobs running under a lease.
    pub running: i64,
    /// How long the oldest due job has waited past its run time (ms); `None` when nothing is
    /// due. It grows when nobody picks jobs up (no worker, a paused queue, a stuck worker).
    pub oldest_due_age_ms: Option<i64>,
    /// Dead jobs nobody has requeued or discarded yet.
    pub dead: i64,
    /// Jobs that became dead in the last hour (requeued ones included).
    pub dead_last_hour: i64,
    /// The window of the attempt figures below (ms).
    pub window_ms: i64,
    /// Attempts that failed, timed out or were lost in the window.
    pub failed_attempts: i64,
    /// Jobs that succeeded in the window.
    pub succeeded: i64,
    /// `failed_attempts / (failed_attempts + succeeded)`; `None` when neither happened.
    pub failure_rate: Option<f64>,
    /// Queues paused with [`Queue::pause_queue`].
    pub paused_queues: Vec<String>,
}

impl Queue {
    /// Cancels a waiting job (queued, or failed with a retry scheduled): it becomes
    /// `cancelled` and no worker runs it. Its idempotency key is released.
    ///
    /// A **running** job is refused rather than marked: its handler is not interrupted, and
    /// a handler that wants to stop returns [`JobError::cancel`](crate::JobError::cancel).
    ///
    /// # Errors
    /// [`NotFound`](crate::ErrorKind::NotFound) for an unknown id;
    /// [`InvalidState`](crate::ErrorKind::InvalidState) for a running or finished job.
    pub fn cancel(&self, id: i64) -> Result<()> {
        let now = self.now_ms();
        self.db().write(|tx| tx.cancel(id, now))?;
        log::info!("litejobs: job {id} cancelled");
        Ok(())
    }

    /// Makes a job due now, keeping its id and history:
    /// - `queued` or `failed` (a retry in backoff, a delayed job): due now, nothing else
    ///   changes.
    /// - `dead`: back to `failed`, due now, with `max_attempts` raised to one more than the
    ///   attempts spent, so it gets exactly one more attempt and is dead again if that fails.
    ///   (To start over with a fresh job and a full set of attempts, use
    ///   [`Queue::requeue_dead`].)
    ///
    /// # Errors
    /// [`NotFound`](crate::ErrorKind::NotFound) for an unknown id;
    /// [`InvalidState`](crate::ErrorKind::InvalidState) for a running, succeeded or
    /// cancelled job, a dead job that was already requeued, or a dead job whose idempotency
    /// key another live job holds.
    pub fn retry_now(&self, id: i64) -> Result<()> {
        let now = self.now_ms();
        self.db().write(|tx| tx.retry_now(id, now))?;
        log::info!("litejobs: job {id} made due now");
        self.notify();
        Ok(())
    }

    /// Pauses a queue in every process working this file: workers stop claiming its jobs
    /// (running ones finish), and its jobs wait without spending attempts. A queue may be
    /// paused before it has jobs.
    ///
    /// # Errors
    /// [`InvalidJob`](crate::ErrorKind::InvalidJob) for an empty name.
    pub fn pause_queue(&self, name: &str) -> Result<()> {
        self.set_queue_paused(name, true)?;
        log::info!("litejobs: queue {name:?} paused");
        Ok(())
    }

    /// Resumes a paused queue. This process's workers look at once; workers of other
    /// processes at their next poll.
    ///
    /// # Errors
    /// [`InvalidJob`](crate::ErrorKind::InvalidJob) for an empty name.
    pub fn resume_queue(&self, name: &str) -> Result<()> {
        self.set_queue_paused(name, false)?;
        log::info!("litejobs: queue {name:?} resumed");
        self.notify();
        Ok(())
    }

    fn set_queue_paused(&self, name: &str, paused: bool) -> Result<()> {
        if name.trim().is_empty() {
            return Err(Error::invalid_job("queue name must not be empty"));
        }
        let now = self.now_ms();
        self.db().write(|tx| tx.set_paused(name, paused, now))
    }

    /// Names of the paused queues, sorted.
    pub fn paused_queues(&self) -> Result<Vec<String>> {
        self.db().read(|tx| tx.paused_queues())
    }

    /// The `limit` most common last errors among failed and dead jobs (dead jobs already
    /// requeued are left out), most frequent first.
    pub fn error_groups(&self, limit: usize) -> Result<Vec<ErrorGroup>> {
        self.db().read(|conn| conn.error_groups(limit))
    }

    /// How many jobs wait, how many fail, how old the oldest due job is; failure figures
    /// over the last `window`. See [`Health`].
    pub fn health(&self, window: Duration) -> Result<Health> {
        let now = self.now_ms();
        let window_ms = duration_to_ms(window);
        let row = self
            .db()
            .read(|conn| conn.health(now, now.saturating_sub(window_ms)))?;
        let paused_queues = self.paused_queues()?;
        let attempts = row.failed_attempts + row.succeeded;
        Ok(Health {
            at_ms: now,
            due_now: row.due_now,
            scheduled: row.scheduled,
            running: row.running,
            oldest_due_age_ms: row.oldest_due_run_at.map(|at| (now - at).max(0)),
            dead: row.dead_awaiting,
            dead_last_hour: row.dead_last_hour,
            window_ms,
            failed_attempts: row.failed_attempts,
            succeeded: row.succeeded,
            failure_rate: (attempts > 0).then(|| row.failed_attempts as f64 / attempts as f64),
            paused_queues,
        })
    }

    /// Dead jobs that wait for a person (nobody requeued or discarded them), newest first,
    /// narrowed by the filter's type, queue, search text, page and limit (its status is
    /// ignored). [`Queue::list`] with [`JobStatus::Dead`] also shows requeued ones.
    pub fn dead_jobs(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        self.db().read(|conn| conn.dead_awaiting(filter))
    }

    /// Deletes dead job `id` and its attempt history ("discard", as in Sidekiq's dead set).
    ///
    /// # Errors
    /// [`NotFound`](crate::ErrorKind::NotFound) for an unknown id;
    /// [`InvalidState`](crate::ErrorKind::InvalidState) when the job is not dead.
    pub fn discard_dead(&self, id: i64) -> Result<()> {
        self.db().write(|tx| tx.discard_dead(id))?;
        log::info!("litejobs: dead job {id} discarded");
        Ok(())
    }

    /// Requeues, in **one transaction**, every dead job of `job_type` that nobody requeued
    /// yet and whose last error contains `search` (ASCII letters match either case; `None`
    /// matches all), oldest first, as [`Queue::requeue_dead`] does one. Returns
    /// `(dead id, new id)` pairs; an empty list when nothing matched.
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
        let now = self.now_ms();
        let pairs = self
            .db()
            .write(|tx| tx.requeue_dead_matching(job_type, search, by, reason, now))?;
        if !pairs.is_empty() {
            log::info!(
                "litejobs: {} dead {job_type} jobs requeued by {by}: {reason}",
                pairs.len()
            );
            self.notify();
        }
        Ok(pairs)
    }

    /// Retention (R17): deletes succeeded and cancelled jobs (and their attempts) that
    /// finished before `options.older_than` ago, forgets expired idempotency keys, then
    /// checkpoints the WAL. Never touches queued, running, failed or dead jobs. Deletes in
    /// chunks, one short write transaction each, so workers keep going meanwhile.
    pub fn prune(&self, options: &PruneOptions) -> Result<PruneReport> {
        let report = pruner::prune(self, options)?;
        log::info!(
            "litejobs: pruned {} jobs, {} attempts, {} idempotency keys",
            report.jobs_deleted,
            report.attempts_deleted,
            report.keys_deleted
        );
        Ok(report)
    }

    /// Copies the write-ahead log into the database file (`PRAGMA wal_checkpoint`); with
    /// [`CheckpointMode::Truncate`] the WAL file is emptied too. `None` for
    /// [`CheckpointMode::Skip`].
    pub fn checkpoint(&self, mode: CheckpointMode) -> Result<Option<CheckpointReport>> {
        pruner::checkpoint(self, mode)
    }
}
