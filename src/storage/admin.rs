//! A person's actions on waiting jobs and queues: cancel, retry now, pause and resume.

use crate::error::{Error, ErrorKind, Result};

/// Refuses to cancel a job in `status` unless it waits (queued or failed). A running job is
/// refused: its handler is not interrupted, and a cancel that only took effect later would be
/// a surprise.
pub(crate) fn check_cancellable(id: i64, status: &str) -> Result<()> {
    match status {
        "queued" | "failed" => Ok(()),
        "running" => Err(Error::new(
            ErrorKind::InvalidState,
            format!(
                "job {id} is running; a running job cannot be cancelled from outside (its \
                 handler can return JobError::cancel), try again once it has finished"
            ),
        )),
        other => Err(Error::new(
            ErrorKind::InvalidState,
            format!("job {id} is {other}; only queued or failed jobs can be cancelled"),
        )),
    }
}

/// Operator actions on jobs and queues.
pub(crate) trait AdminStore {
    /// Cancels a waiting (queued or failed) job. A running job is refused: its handler is not
    /// interrupted, and a cancel that only took effect later would be a surprise.
    fn cancel(&self, id: i64, now: i64) -> Result<()>;

    /// Makes a waiting job due now; a dead job gets one more attempt (see `Queue::retry_now`).
    fn retry_now(&self, id: i64, now: i64) -> Result<()>;

    /// Sets a queue's paused switch (creating its row on first use).
    fn set_paused(&self, queue: &str, paused: bool, now: i64) -> Result<()>;

    /// Names of the paused queues, sorted.
    fn paused_queues(&self) -> Result<Vec<String>>;
}
