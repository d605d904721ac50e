//! The expiry sweep: waiting jobs whose deadline has passed end `cancelled`, with
//! `cancelled_by` `deadline` and a `cancel_reason` naming the deadline. The claim already
//! skips them; the sweep makes their status say so. Every worker sweeps on the reaper's
//! schedule (at start-up, then every reap interval), and [`drain`](crate::testing::drain)
//! before each claim. It reads only the index of waiting jobs that have a deadline, so it
//! costs nothing per job that has none.

use crate::error::Result;
use crate::job::JobStatus;
use crate::queue::events::Event;
use crate::storage::jobs::HeldRows;

/// The most jobs one transaction of the sweep cancels; the sweep goes on in the next.
const EXPIRED_PER_TRANSACTION: usize = 1000;

impl crate::Queue {
    /// Cancels the waiting (queued or failed) jobs whose deadline
    /// ([`NewJob::expires_at`](crate::NewJob::expires_at)) has passed, by the queue's clock,
    /// as workers do every reap interval; each ends `cancelled` with `cancelled_by`
    /// `deadline`. Returns how many. Many processes may sweep at once: a job another
    /// process is cancelling or claiming meanwhile is waited for, so that when this returns
    /// no job past its deadline when it began still waits.
    ///
    /// # Errors
    /// A database error; the jobs cancelled before it stay cancelled.
    pub fn cancel_expired(&self) -> Result<usize> {
        let mut total = 0;
        loop {
            let (n, more) = self.cancel_expired_batch(HeldRows::Wait)?;
            total += n;
            if !more {
                return Ok(total);
            }
        }
    }

    /// One transaction of the sweep: how many jobs it cancelled, and whether more may wait
    /// (a worker takes the next batch after its next round, so a backlog of expired jobs
    /// never holds its writes up for long). A worker passes over rows other transactions
    /// hold (`HeldRows::Skip`): its dispatcher never waits on another process.
    pub(crate) fn cancel_expired_batch(&self, held: HeldRows) -> Result<(usize, bool)> {
        let now = self.now_ms();
        let expired = self.db().write(|tx| {
            let expired = tx.cancel_expired(now, EXPIRED_PER_TRANSACTION, held)?;
            let ids: Vec<i64> = expired.iter().map(|job| job.id).collect();
            tx.settle_dependants(&ids, now)?;
            Ok(expired)
        })?;
        if !expired.is_empty() {
            log::debug!("litejobs: {} jobs expired", expired.len());
        }
        if self.events().has_subscribers() {
            for job in &expired {
                self.events().send(Event::Finished {
                    id: job.id,
                    job_type: job.job_type.clone(),
                    queue: job.queue.clone(),
                    attempt: job.attempts,
                    status: JobStatus::Cancelled,
                    error: Some(job.reason.clone()),
                });
            }
        }
        Ok((expired.len(), expired.len() == EXPIRED_PER_TRANSACTION))
    }
}
