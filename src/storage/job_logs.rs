//! Per-attempt logs: what a job said while it ran, one row per attempt that said something,
//! written with the attempt's outcome and deleted with its job.

use serde::Serialize;

use crate::error::Result;

/// What one attempt of a job said while it ran: lines its handler logged
/// ([`JobContext::log_line`](crate::JobContext::log_line), `log` records captured on its
/// thread) and a command's stderr. Made by [`Queue::attempt_logs`](crate::Queue::attempt_logs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AttemptLogRecord {
    /// The attempt (1 for the first).
    pub attempt: i64,
    /// Its newest 32 KiB, oldest line first, secret fields masked as in payloads when read
    /// through a queue that masks ([`Queue::attempt_logs`](crate::Queue::attempt_logs) gives
    /// it as stored; the command line and the dashboard mask it).
    pub text: String,
    /// Bytes left out before [`text`](Self::text) (0 when nothing was cut).
    pub cut_bytes: i64,
    /// When the attempt's outcome was written (ms).
    pub written_at: i64,
}

/// The per-attempt logs.
pub(crate) trait JobLogStore {
    /// Keeps what attempt `attempt` of job `job_id` said (replacing what an earlier write
    /// of the same attempt kept).
    fn insert_attempt_log(
        &self,
        job_id: i64,
        attempt: i64,
        text: &str,
        cut: i64,
        now: i64,
    ) -> Result<()>;

    /// What each attempt of job `job_id` said, first attempt first.
    fn attempt_logs(&self, job_id: i64) -> Result<Vec<AttemptLogRecord>>;
}
