//! Per-attempt logs: what a job said while it ran, one row per attempt that said something,
//! written with the attempt's outcome and deleted with its job.

use crate::error::Result;
use crate::job::AttemptLogRecord;

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
