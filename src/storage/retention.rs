//! Retention: finished jobs and remembered keys past their window, and WAL
//! checkpoints.

use crate::error::Result;

/// Pruning and checkpoints.
pub(crate) trait RetentionStore {
    /// Ids of at most `limit` succeeded or cancelled jobs last changed before `cutoff`.
    fn prunable_jobs(&self, cutoff: i64, limit: usize) -> Result<Vec<i64>>;

    /// Deletes these jobs (if still succeeded or cancelled) and their attempts. Returns
    /// (jobs, attempts) deleted.
    fn delete_finished(&self, ids: &[i64]) -> Result<(u64, u64)>;

    /// Forgets at most `limit` remembered idempotency keys that expired by `now` or completed
    /// before `completed_before`. Returns how many.
    fn delete_keys(&self, now: i64, completed_before: Option<i64>, limit: usize) -> Result<u64>;

    /// `PRAGMA wal_checkpoint(mode)`: (busy, WAL frames, frames checkpointed). Must run outside
    /// a transaction.
    fn wal_checkpoint(&self, mode: &str) -> Result<(bool, i64, i64)>;
}
