//! [`RetentionStore`] on PostgreSQL: pruning finished jobs and remembered keys. Ids come
//! from an identity sequence, so any finished job may go (SQLite keeps the newest row);
//! there is no write-ahead log of litejobs' own to checkpoint.

use super::reads::limit_int;
use super::sql::{query, IntRow};
use super::PgTx;
use crate::error::Result;
use crate::storage::retention::*;

impl RetentionStore for PgTx<'_> {
    fn prunable_jobs(&self, cutoff: i64, limit: usize) -> Result<Vec<i64>> {
        // (status, finished_at) is indexed for finished rows. The rows are locked for the
        // rest of the transaction (delete_finished follows in it); rows another pruner
        // holds are skipped rather than waited for.
        Ok(self
            .rows::<IntRow>(
                query(
                    "SELECT id AS v FROM jobs
                     WHERE status IN ('succeeded', 'cancelled') AND finished_at < $1
                     LIMIT $2
                     FOR UPDATE SKIP LOCKED",
                )
                .int(cutoff)
                .int(limit_int(limit)),
            )?
            .into_iter()
            .map(|r| r.v)
            .collect())
    }

    fn delete_finished(&self, ids: &[i64]) -> Result<(u64, u64)> {
        if ids.is_empty() {
            return Ok((0, 0));
        }
        // Lock the rows still finished first, so the attempts deleted are exactly those of
        // the jobs deleted; the counts follow by the schema's triggers.
        let locked: Vec<i64> = self
            .rows::<IntRow>(
                query(
                    "SELECT id AS v FROM jobs
                     WHERE id = ANY($1) AND status IN ('succeeded', 'cancelled')
                     ORDER BY id FOR UPDATE",
                )
                .ints(ids),
            )?
            .into_iter()
            .map(|r| r.v)
            .collect();
        if locked.is_empty() {
            return Ok((0, 0));
        }
        let attempts =
            self.execute(query("DELETE FROM job_attempts WHERE job_id = ANY($1)").ints(&locked))?;
        self.execute(query("DELETE FROM job_logs WHERE job_id = ANY($1)").ints(&locked))?;
        // Their settled waits go with them (a job's waits are settled when it ends), and so
        // does a workflow left without jobs.
        self.execute(
            query(
                "DELETE FROM job_deps WHERE state IN ('done', 'failed')
                   AND (job_id = ANY($1) OR depends_on = ANY($1))",
            )
            .ints(&locked),
        )?;
        let workflows: Vec<i64> = self
            .rows::<IntRow>(
                query(
                    "SELECT DISTINCT workflow_id AS v FROM jobs
                     WHERE id = ANY($1) AND workflow_id IS NOT NULL",
                )
                .ints(&locked),
            )?
            .into_iter()
            .map(|r| r.v)
            .collect();
        let jobs = self.execute(
            query("DELETE FROM jobs WHERE id = ANY($1) AND status IN ('succeeded', 'cancelled')")
                .ints(&locked),
        )?;
        if !workflows.is_empty() {
            self.execute(
                query(
                    "DELETE FROM workflows w WHERE w.id = ANY($1) AND w.open = 0
                       AND NOT EXISTS (SELECT 1 FROM jobs WHERE workflow_id = w.id)",
                )
                .ints(&workflows),
            )?;
        }
        Ok((jobs as u64, attempts as u64))
    }

    fn delete_keys(&self, now: i64, completed_before: Option<i64>, limit: usize) -> Result<u64> {
        let n = self.execute(
            query(
                "DELETE FROM idempotency_keys WHERE key IN (
                    SELECT key FROM idempotency_keys
                    WHERE expires_at <= $1 OR completed_at < $2
                    LIMIT $3
                    FOR UPDATE SKIP LOCKED)",
            )
            .int(now)
            .int(completed_before.unwrap_or(i64::MIN))
            .int(limit_int(limit)),
        )?;
        Ok(n as u64)
    }

    /// Nothing to checkpoint: what SQLite answers for a database without a write-ahead log
    /// (not busy, -1 frames, -1 copied), which callers show as "not in WAL mode".
    fn wal_checkpoint(&self, _mode: &str) -> Result<(bool, i64, i64)> {
        Ok((false, -1, -1))
    }
}
