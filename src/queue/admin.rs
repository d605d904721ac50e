//! `impl Queue` for the operator's actions on waiting jobs and queues: cancel, retry now,
//! pause and resume a queue. Retention (prune, checkpoint) is the maintenance's.

use crate::error::{Error, Result};
use crate::Queue;

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
}
