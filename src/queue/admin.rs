//! `impl Queue` for the operator's actions on jobs and queues: cancel (a waiting or a
//! running job, one or by type and text), retry now, pause and resume a queue. Retention
//! (prune, checkpoint) is the maintenance's.

use crate::error::{Error, Result};
use crate::job::JobStatus;
use crate::queue::cancels::CancelNotice;
use crate::queue::events::Event;
use crate::storage::admin::{cancelled_text, Cancelled, CANCELLED_BY_APP};
use crate::Queue;

impl Queue {
    /// Cancels a job that waits (queued, or failed with a retry scheduled) or runs: it is
    /// `cancelled` at once, and no worker starts it again. Its idempotency key is released.
    /// Kept as cancelled by `app`, with no reason; [`Queue::cancel_as`] says who and why.
    ///
    /// A **running** job's attempt is recorded as `cancelled` and its lease ends in the same
    /// transaction, so whatever the attempt reports later (success, failure, heartbeat)
    /// changes nothing. The worker holding it hears of it (at once in this process, within
    /// about a second in another) and tells the handler:
    /// [`JobContext::should_stop`](crate::JobContext::should_stop) turns true and
    /// [`JobContext::heartbeat`](crate::JobContext::heartbeat) fails saying who cancelled
    /// it. A handler that goes on anyway runs until it returns or its timeout passes, its
    /// thread taken meanwhile; what it returns is discarded. A command handler's process
    /// group is stopped (see [`exec`](crate::exec) for `--exec` and `--serve`).
    ///
    /// # Errors
    /// [`NotFound`](crate::ErrorKind::NotFound) for an unknown id;
    /// [`InvalidState`](crate::ErrorKind::InvalidState) for a finished job (succeeded,
    /// dead or cancelled).
    pub fn cancel(&self, id: i64) -> Result<()> {
        self.cancel_as(id, CANCELLED_BY_APP, "")
    }

    /// [`Queue::cancel`], keeping who cancelled the job (`by`, e.g. a person's name) and why
    /// (`reason`; empty for none) on the job, and on the running attempt's history row.
    ///
    /// # Errors
    /// As [`Queue::cancel`].
    pub fn cancel_as(&self, id: i64, by: &str, reason: &str) -> Result<()> {
        let now = self.now_ms();
        let cancelled = self.db().write(|tx| {
            let cancelled = tx.cancel(id, by, reason, now)?;
            tx.settle_dependants(&[id], now)?;
            Ok(cancelled)
        })?;
        log::info!(
            "litejobs: job {id} {}{}",
            cancelled_text(Some(by), Some(reason)),
            if cancelled.running_attempt.is_some() {
                " while it ran"
            } else {
                ""
            }
        );
        self.after_cancel(&[cancelled], by, reason);
        Ok(())
    }

    /// Cancels, in **one transaction**, every waiting or running job of `job_type` whose
    /// last error or payload contains `search` (ASCII letters match either case; `None`
    /// matches all), oldest first, as [`Queue::cancel_as`] does one. Returns their ids; an
    /// empty list when nothing matched.
    ///
    /// The payload is searched as stored (its JSON text): `"campaign": 7` matches only
    /// with the spacing the enqueuer used, so search for a value (`campaign-7`) rather than
    /// a piece of JSON syntax. An encrypted payload is not searched (its stored text is an
    /// envelope); its last error is.
    ///
    /// # Errors
    /// All or nothing: when one job cannot be cancelled none is, and the error names that
    /// job.
    pub fn cancel_matching(
        &self,
        job_type: &str,
        search: Option<&str>,
        by: &str,
        reason: &str,
    ) -> Result<Vec<i64>> {
        let now = self.now_ms();
        let cancelled = self.db().write(|tx| {
            let cancelled = tx.cancel_matching(job_type, search, by, reason, now)?;
            let ids: Vec<i64> = cancelled.iter().map(|c| c.id).collect();
            tx.settle_dependants(&ids, now)?;
            Ok(cancelled)
        })?;
        if !cancelled.is_empty() {
            log::info!(
                "litejobs: {} {job_type} jobs {}",
                cancelled.len(),
                cancelled_text(Some(by), Some(reason))
            );
        }
        self.after_cancel(&cancelled, by, reason);
        Ok(cancelled.into_iter().map(|c| c.id).collect())
    }

    /// What [`Queue::cancel_matching`] would do, changing nothing: the same transaction
    /// with every check it makes, rolled back. Returns the ids of the jobs it would cancel,
    /// oldest first; otherwise the very error it would give.
    ///
    /// # Errors
    /// As [`Queue::cancel_matching`].
    pub fn cancel_matching_dry_run(
        &self,
        job_type: &str,
        search: Option<&str>,
    ) -> Result<Vec<i64>> {
        let now = self.now_ms();
        self.rolled_back(|tx| {
            let cancelled = tx.cancel_matching(job_type, search, "", "", now)?;
            Ok(cancelled.into_iter().map(|c| c.id).collect())
        })
    }

    /// After a cancel committed: the running attempts' outcomes go to subscribers, their
    /// workers in this process are told, and workers may claim what those held back (a
    /// group key now free).
    pub(crate) fn after_cancel(&self, cancelled: &[Cancelled], by: &str, reason: &str) {
        let text = cancelled_text(Some(by), Some(reason));
        let notices: Vec<CancelNotice> = cancelled
            .iter()
            .filter(|c| c.running_attempt.is_some())
            .map(|c| CancelNotice {
                id: c.id,
                text: text.clone(),
            })
            .collect();
        if notices.is_empty() {
            return;
        }
        self.cancel_list().tell(&notices);
        for c in cancelled {
            if let Some(attempt) = c.running_attempt {
                self.events().send(Event::Finished {
                    id: c.id,
                    job_type: c.job_type.clone(),
                    queue: c.queue.clone(),
                    attempt,
                    status: JobStatus::Cancelled,
                    error: Some(text.clone()),
                });
            }
        }
        self.notify();
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
        self.db().write(|tx| {
            if let Some(job) = tx.job(id)? {
                if job.status == JobStatus::Queued && job.waiting_for > 0 {
                    return Err(Error::new(
                        crate::ErrorKind::InvalidState,
                        format!(
                            "job {id} waits for {} other jobs to end; it runs once they have \
                             succeeded",
                            job.waiting_for
                        ),
                    ));
                }
            }
            tx.retry_now(id, now)?;
            // Jobs this one's end had cancelled wait for it again.
            crate::queue::workflows::revive(tx, id, id, now)
        })?;
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
    /// processes as soon as they see the write (the watch on the database's files on Linux,
    /// the schema's notification on PostgreSQL), else at their next change check or poll.
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
