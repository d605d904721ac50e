//! `impl Queue` for the dead letter (R8) and lease recovery (R9).

use crate::error::Result;
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
        let new_id = self.db().write(|tx| tx.requeue_dead(id, by, reason, now))?;
        log::info!("litejobs: dead job {id} requeued as job {new_id} by {by}: {reason}");
        self.notify();
        Ok(new_id)
    }

    /// Makes running jobs whose lease expired due again (or dead when their attempts are
    /// spent), as workers do at start-up and periodically. Returns how many were reaped.
    pub fn reap_expired_leases(&self) -> Result<usize> {
        let now = self.now_ms();
        let reaped = self.db().write(|tx| tx.reap_expired(now))?;
        if reaped > 0 {
            self.notify();
        }
        Ok(reaped)
    }
}
