//! [`RetentionStore`] on SQLite: pruning finished jobs and remembered keys, WAL checkpoints.

use rusqlite::params;

use super::SqliteTx;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::retention::RetentionStore;

impl RetentionStore for SqliteTx<'_> {
    /// Ids of at most `limit` succeeded or cancelled jobs finished before `cutoff`, never the
    /// newest job of the table (it keeps ids from being reused; see [`SqliteTx::is_newest`]).
    fn prunable_jobs(&self, cutoff: i64, limit: usize) -> Result<Vec<i64>> {
        // (status, finished_at) is indexed for finished rows (every finishing write sets
        // finished_at; a row another program wrote as finished without one is kept). The newest
        // row stays newest until it is deleted, which nothing does, so an id below it here is
        // still below it when delete_finished runs.
        let mut stmt = self.conn.prepare_cached(
            "SELECT id FROM jobs WHERE status IN ('succeeded', 'cancelled') AND finished_at < ?1
               AND id < (SELECT MAX(id) FROM jobs)
             LIMIT CAST(?2 AS INTEGER)",
        )?;
        let rows = stmt.query_map(
            params![cutoff, i64::try_from(limit).unwrap_or(i64::MAX)],
            |row| row.get(0),
        )?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Deletes these jobs (if still succeeded or cancelled) and their attempts. Returns
    /// (jobs, attempts) deleted.
    fn delete_finished(&self, ids: &[i64]) -> Result<(u64, u64)> {
        let list = serde_json::to_string(ids)
            .map_err(|e| Error::new(ErrorKind::Database, format!("id list: {e}")))?;
        // litejobs' connections keep the counts in code (triggers are off for them).
        self.uncount_attempts_of(
            "SELECT j.id FROM jobs j WHERE j.id IN (SELECT value FROM json_each(?1))
               AND j.status IN ('succeeded', 'cancelled')",
            &list,
        )?;
        self.conn
            .prepare_cached(
                "DELETE FROM job_logs WHERE job_id IN (
                    SELECT j.id FROM jobs j WHERE j.id IN (SELECT value FROM json_each(?1))
                      AND j.status IN ('succeeded', 'cancelled'))",
            )?
            .execute([&list])?;
        let attempts = self
            .conn
            .prepare_cached(
                "DELETE FROM job_attempts WHERE job_id IN (
                    SELECT j.id FROM jobs j WHERE j.id IN (SELECT value FROM json_each(?1))
                      AND j.status IN ('succeeded', 'cancelled'))",
            )?
            .execute([&list])?;
        self.count_jobs_where(
            "status",
            -1,
            "id IN (SELECT value FROM json_each(?1)) AND status IN ('succeeded', 'cancelled')",
            &list,
        )?;
        // Their settled waits go with them (a job's waits are settled when it ends, or by
        // the sweep within a reap interval, long before it is old enough to prune), and so
        // does a workflow left empty.
        let workflows: Vec<i64> = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT workflow_id FROM jobs WHERE id IN (SELECT value FROM json_each(?1))
                   AND workflow_id IS NOT NULL AND status IN ('succeeded', 'cancelled')",
            )?
            .query_map([&list], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        self.conn
            .prepare_cached(
                "DELETE FROM job_deps WHERE state <> 'pending' AND (
                    job_id IN (SELECT j.id FROM jobs j WHERE j.id IN (SELECT value FROM json_each(?1))
                                 AND j.status IN ('succeeded', 'cancelled'))
                    OR depends_on IN (SELECT j.id FROM jobs j WHERE j.id IN (SELECT value FROM json_each(?1))
                                 AND j.status IN ('succeeded', 'cancelled')))",
            )?
            .execute([&list])?;
        let jobs = self
            .conn
            .prepare_cached(
                "DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?1))
                   AND status IN ('succeeded', 'cancelled')",
            )?
            .execute([&list])?;
        let mut empty = self.conn.prepare_cached(
            "DELETE FROM workflows WHERE id = ?1 AND open = 0
               AND NOT EXISTS (SELECT 1 FROM jobs WHERE workflow_id = ?1)",
        )?;
        for id in workflows {
            empty.execute([id])?;
        }
        Ok((jobs as u64, attempts as u64))
    }

    /// Forgets at most `limit` remembered idempotency keys that expired by `now` or completed
    /// before `completed_before`. Returns how many.
    fn delete_keys(&self, now: i64, completed_before: Option<i64>, limit: usize) -> Result<u64> {
        let n = self
            .conn
            .prepare_cached(
                "DELETE FROM idempotency_keys WHERE key IN (
                    SELECT key FROM idempotency_keys
                    WHERE expires_at <= ?1 OR completed_at < ?2
                    LIMIT CAST(?3 AS INTEGER))",
            )?
            .execute(params![
                now,
                completed_before.unwrap_or(i64::MIN),
                i64::try_from(limit).unwrap_or(i64::MAX)
            ])?;
        Ok(n as u64)
    }

    /// `PRAGMA wal_checkpoint(mode)`: (busy, WAL frames, frames checkpointed). Must run outside
    /// a transaction.
    fn wal_checkpoint(&self, mode: &str) -> Result<(bool, i64, i64)> {
        let sql = format!("PRAGMA wal_checkpoint({mode})");
        Ok(self.conn.query_row(&sql, [], |row| {
            Ok((row.get::<_, i64>(0)? != 0, row.get(1)?, row.get(2)?))
        })?)
    }
}
