//! The waits sweep: dependencies whose job ended without settling them (its status was
//! changed by another program, by plain SQL) are settled here, so that no job waits
//! forever. litejobs settles its own in the transaction that ends a job; the sweep reads only
//! the index of pending waits, so it costs nothing where there are none. Every worker runs
//! it on the reaper's schedule, with the expiry sweep.

use crate::error::Result;

/// The most ended jobs one transaction of the sweep settles.
const SETTLED_PER_TRANSACTION: usize = 500;

impl crate::Queue {
    /// Settles the waits on jobs that ended without settling them: their dependants are
    /// released or cancelled as if the job had ended through litejobs. Returns how many
    /// dependants were released or cancelled. Workers run it every reap interval.
    ///
    /// # Errors
    /// A database error.
    pub fn settle_waits(&self) -> Result<usize> {
        let now = self.now_ms();
        let settled = self
            .db()
            .write(|tx| tx.settle_stragglers(SETTLED_PER_TRANSACTION, now))?;
        let n = settled.released.len() + settled.cancelled.len();
        if n > 0 {
            log::info!(
                "litejobs: settled the waits of jobs that ended outside litejobs: {} released, \
                 {} cancelled",
                settled.released.len(),
                settled.cancelled.len()
            );
            self.notify();
        }
        Ok(n)
    }
}
