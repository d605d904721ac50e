//! [`ReportStore`] on SQLite: `report_runs`, `report_chunks` and `report_rows`.

use rusqlite::{params, OptionalExtension};

use super::SqliteTx;
use crate::error::Result;
use crate::storage::jobs::Lease;
use crate::storage::reports::{
    ChunkRow, ChunkWrite, FinishWrite, ReportState, ReportStore, RunRow,
};

/// The query of [`RunRow`]s picked by `filter` (a `WHERE`/`ORDER BY`/`LIMIT` tail over
/// `report_runs r`). A run still `processing` whose request, finishing job or a pending
/// chunk's job is dead or cancelled reads as `failed`, with that job's error: those jobs will
/// not run again by themselves, so the run cannot finish (this covers an attempt that timed
/// out or was reaped on its last try, which its handler never saw).
fn run_query(filter: &str) -> String {
    format!(
        "SELECT id, kind, params, CASE WHEN lost IS NOT NULL THEN 'failed' ELSE state END,
                chunks_total, chunks_done, rows_done, result_path, result_rows,
                COALESCE(lost, error), request_job_id, finish_job_id, planned_at,
                created_at, updated_at, finished_at
         FROM (
            SELECT r.*, CASE WHEN r.state = 'processing' THEN (
                SELECT 'job ' || j.id || ' (' || j.job_type || ') is ' || j.status || ': ' ||
                       COALESCE(j.last_error, 'no error recorded')
                FROM jobs j
                WHERE j.status IN ('dead', 'cancelled')
                  AND (j.id = r.request_job_id OR j.id = r.finish_job_id
                       OR j.id IN (SELECT c.job_id FROM report_chunks c
                                   WHERE c.run_id = r.id AND c.state = 'pending'))
                ORDER BY j.id LIMIT 1) END AS lost
            FROM report_runs r {filter}
         )"
    )
}

fn run_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    Ok(RunRow {
        id: row.get(0)?,
        kind: row.get(1)?,
        params: row.get(2)?,
        state: ReportState::parse(&row.get::<_, String>(3)?),
        chunks_total: row.get(4)?,
        chunks_done: row.get(5)?,
        rows_done: row.get(6)?,
        result_path: row.get(7)?,
        result_rows: row.get(8)?,
        error: row.get(9)?,
        request_job_id: row.get(10)?,
        finish_job_id: row.get(11)?,
        planned_at: row.get(12)?,
        created_at: row.get(13)?,
        updated_at: row.get(14)?,
        finished_at: row.get(15)?,
    })
}

impl ReportStore for SqliteTx<'_> {
    /// Inserts a run in `processing`; returns its id.
    fn insert_run(
        &self,
        kind: &str,
        params: &str,
        request_job_id: Option<i64>,
        now: i64,
    ) -> Result<i64> {
        self.conn
            .prepare_cached(
                "INSERT INTO report_runs (kind, params, request_job_id, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?4)",
            )?
            .execute(params![kind, params, request_job_id, now])?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Records which job plans a run.
    fn set_request_job(&self, run_id: i64, job_id: i64) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE report_runs SET request_job_id = ?1 WHERE id = ?2")?
            .execute(params![job_id, run_id])?;
        Ok(())
    }

    /// The run a request job created, if it did.
    fn run_of_request(&self, request_job_id: i64) -> Result<Option<i64>> {
        Ok(self
            .conn
            .prepare_cached("SELECT id FROM report_runs WHERE request_job_id = ?1")?
            .query_row([request_job_id], |row| row.get(0))
            .optional()?)
    }

    /// One run, as a reader should see it.
    fn report_run(&self, id: i64) -> Result<Option<RunRow>> {
        let sql = run_query("WHERE r.id = ?1");
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .query_row([id], run_row)
            .optional()?)
    }

    /// The latest runs, newest first, of one kind or of all.
    fn report_runs(&self, kind: Option<&str>, limit: i64) -> Result<Vec<RunRow>> {
        let sql = run_query(
            "WHERE (?1 IS NULL OR r.kind = ?1)
             ORDER BY r.created_at DESC, r.id DESC LIMIT CAST(?2 AS INTEGER)",
        ) + " ORDER BY created_at DESC, id DESC";
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt
            .query_map(params![kind, limit], run_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Records a run's plan: its chunks (JSON specs, in order). False, changing nothing, when the
    /// run was already planned (a retried request job) or is no longer processing.
    fn plan_run(&self, run_id: i64, specs: &[String], now: i64) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE report_runs SET chunks_total = ?1, planned_at = ?2, updated_at = ?2
                 WHERE id = ?3 AND planned_at IS NULL AND state = 'processing'",
            )?
            .execute(params![specs.len() as i64, now, run_id])?;
        if n == 0 {
            return Ok(false);
        }
        let mut insert = self.conn.prepare_cached(
            "INSERT INTO report_chunks (run_id, chunk, spec) VALUES (?1, ?2, ?3)",
        )?;
        for (index, spec) in specs.iter().enumerate() {
            insert.execute(params![run_id, index as i64, spec])?;
        }
        Ok(true)
    }

    /// Records the job that runs a chunk.
    fn set_chunk_job(&self, run_id: i64, chunk: i64, job_id: i64) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE report_chunks SET job_id = ?1 WHERE run_id = ?2 AND chunk = ?3",
            )?
            .execute(params![job_id, run_id, chunk])?;
        Ok(())
    }

    /// Records the job that finishes a run.
    fn set_finish_job(&self, run_id: i64, job_id: i64) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE report_runs SET finish_job_id = ?1 WHERE id = ?2")?
            .execute(params![job_id, run_id])?;
        Ok(())
    }

    fn report_chunk(&self, run_id: i64, chunk: i64) -> Result<Option<ChunkRow>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT spec, state = 'done' FROM report_chunks WHERE run_id = ?1 AND chunk = ?2",
            )?
            .query_row(params![run_id, chunk], |row| {
                Ok(ChunkRow {
                    spec: row.get(0)?,
                    done: row.get(1)?,
                })
            })
            .optional()?)
    }

    /// The same fence as every write of the job's outcome: the job, its status, the worker
    /// and the attempt.
    fn chunk_fence_holds(&self, lease: Lease<'_>) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM jobs WHERE id = ?1 AND status = 'running'
                                  AND locked_by = ?2 AND attempts = ?3)",
            )?
            .query_row(
                params![lease.job_id, lease.worker_id, lease.attempt],
                |row| row.get(0),
            )?)
    }

    /// Writes a chunk's rows (JSON texts, in order) and `count`, marks it done and counts it on
    /// the run, all or nothing. Must run inside a write transaction.
    fn complete_chunk(
        &self,
        run_id: i64,
        chunk: i64,
        rows: &[String],
        count: i64,
        lease: Lease<'_>,
        now: i64,
    ) -> Result<ChunkWrite> {
        if !self.chunk_fence_holds(lease)? {
            return Ok(ChunkWrite::Fenced);
        }
        let marked = self
            .conn
            .prepare_cached(
                "UPDATE report_chunks SET state = 'done', row_count = ?1, finished_at = ?2
                 WHERE run_id = ?3 AND chunk = ?4 AND state = 'pending'
                   AND EXISTS (SELECT 1 FROM report_runs WHERE id = ?3 AND state = 'processing')",
            )?
            .execute(params![count, now, run_id, chunk])?;
        if marked == 0 {
            return Ok(ChunkWrite::AlreadyDone);
        }
        // Nothing of a pending chunk is stored, but be exact even if someone wrote rows by hand.
        self.conn
            .prepare_cached("DELETE FROM report_rows WHERE run_id = ?1 AND chunk = ?2")?
            .execute(params![run_id, chunk])?;
        let mut insert = self.conn.prepare_cached(
            "INSERT INTO report_rows (run_id, chunk, seq, data) VALUES (?1, ?2, ?3, ?4)",
        )?;
        for (seq, data) in rows.iter().enumerate() {
            insert.execute(params![run_id, chunk, seq as i64, data])?;
        }
        let (done, total): (i64, i64) = self
            .conn
            .prepare_cached(
                "UPDATE report_runs SET chunks_done = chunks_done + 1, rows_done = rows_done + ?1,
                                        updated_at = ?2
                 WHERE id = ?3
                 RETURNING chunks_done, chunks_total",
            )?
            .query_row(params![count, now, run_id], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?;
        Ok(ChunkWrite::Done {
            last: done >= total,
        })
    }

    /// Marks a processing run failed with `error`. False when it was not processing.
    fn fail_run(&self, run_id: i64, error: &str, now: i64) -> Result<bool> {
        let n = self.conn
            .prepare_cached(
                "UPDATE report_runs SET state = 'failed', error = ?1, updated_at = ?2, finished_at = ?2
                 WHERE id = ?3 AND state = 'processing'",
            )?
            .execute(params![error, now, run_id])?;
        Ok(n == 1)
    }

    /// Marks a processing run ready with its result. Must run inside a write transaction.
    fn finish_run(
        &self,
        run_id: i64,
        result_path: Option<&str>,
        result_rows: i64,
        lease: Lease<'_>,
        now: i64,
    ) -> Result<FinishWrite> {
        if !self.chunk_fence_holds(lease)? {
            return Ok(FinishWrite::Fenced);
        }
        let n = self
            .conn
            .prepare_cached(
                "UPDATE report_runs SET state = 'ready', result_path = ?1, result_rows = ?2,
                                        updated_at = ?3, finished_at = ?3
                 WHERE id = ?4 AND state = 'processing'",
            )?
            .execute(params![result_path, result_rows, now, run_id])?;
        Ok(if n == 1 {
            FinishWrite::Ready
        } else {
            FinishWrite::NotProcessing
        })
    }

    /// Up to `limit` stored rows of a run after position `(chunk, seq)` (exclusive), in order.
    /// Start with `(-1, -1)`.
    fn report_rows_after(
        &self,
        run_id: i64,
        after: (i64, i64),
        limit: i64,
    ) -> Result<Vec<(i64, i64, String)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT chunk, seq, data FROM report_rows
             WHERE run_id = ?1 AND (chunk > ?2 OR (chunk = ?2 AND seq > ?3))
             ORDER BY chunk, seq LIMIT CAST(?4 AS INTEGER)",
        )?;
        let rows = stmt
            .query_map(params![run_id, after.0, after.1, limit], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Up to `limit` stored rows of a run from position `offset` in (chunk, seq) order.
    fn report_rows_page(&self, run_id: i64, offset: i64, limit: i64) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT data FROM report_rows WHERE run_id = ?1 ORDER BY chunk, seq
             LIMIT CAST(?2 AS INTEGER) OFFSET CAST(?3 AS INTEGER)",
        )?;
        let rows = stmt
            .query_map(params![run_id, limit, offset], |row| row.get(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Deletes a run with its chunks and rows. False when there was none.
    fn delete_run(&self, run_id: i64) -> Result<bool> {
        // Explicit deletes rather than relying on ON DELETE CASCADE, which needs
        // `PRAGMA foreign_keys` on in whichever connection does it.
        self.conn
            .prepare_cached("DELETE FROM report_rows WHERE run_id = ?1")?
            .execute([run_id])?;
        self.conn
            .prepare_cached("DELETE FROM report_chunks WHERE run_id = ?1")?
            .execute([run_id])?;
        let n = self
            .conn
            .prepare_cached("DELETE FROM report_runs WHERE id = ?1")?
            .execute([run_id])?;
        Ok(n == 1)
    }
}
