//! [`ReportStore`] on PostgreSQL: `report_runs`, `report_chunks` and `report_rows`.
//!
//! With writers in several processes, the guarded writes lock what they check for the rest
//! of their transaction, so each check holds until commit as SQLite's single writer made it
//! hold: the fence's job row `FOR SHARE` (a reaper or a timeout cannot take the job away
//! meanwhile) and the run's row `FOR UPDATE` (completions, the finish and a failure of one
//! run take turns). The callers also take [`Tx::lock_key`](crate::storage::Tx::lock_key) on
//! `report-run:<id>`, but the store does not rely on it: of two chunks completing at once in
//! two processes, exactly one sees `chunks_done` reach `chunks_total` and enqueues the
//! finishing job. Chunks and rows go with their run by `ON DELETE CASCADE`, which
//! PostgreSQL always enforces.

use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel::QueryableByName;

use super::sql::{query, IntRow, TextRow};
use super::PgTx;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::jobs::Lease;
use crate::storage::reports::{
    ChunkRow, ChunkWrite, FinishWrite, ReportState, ReportStore, RunRow,
};

/// A `report_runs` row as a reader should see it (see [`run_query`]).
#[derive(QueryableByName)]
struct Run {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Text)]
    params: String,
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = BigInt)]
    chunks_total: i64,
    #[diesel(sql_type = BigInt)]
    chunks_done: i64,
    #[diesel(sql_type = BigInt)]
    rows_done: i64,
    #[diesel(sql_type = Nullable<Text>)]
    result_path: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    result_rows: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    error: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    request_job_id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    finish_job_id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    planned_at: Option<i64>,
    #[diesel(sql_type = BigInt)]
    created_at: i64,
    #[diesel(sql_type = BigInt)]
    updated_at: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    finished_at: Option<i64>,
}

impl From<Run> for RunRow {
    fn from(r: Run) -> RunRow {
        RunRow {
            id: r.id,
            kind: r.kind,
            params: r.params,
            state: ReportState::parse(&r.state),
            chunks_total: r.chunks_total,
            chunks_done: r.chunks_done,
            rows_done: r.rows_done,
            result_path: r.result_path,
            result_rows: r.result_rows,
            error: r.error,
            request_job_id: r.request_job_id,
            finish_job_id: r.finish_job_id,
            planned_at: r.planned_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
            finished_at: r.finished_at,
        }
    }
}

/// A chunk's spec and done mark.
#[derive(QueryableByName)]
struct Chunk {
    #[diesel(sql_type = Text)]
    spec: String,
    #[diesel(sql_type = Bool)]
    done: bool,
}

/// A stored row with its position.
#[derive(QueryableByName)]
struct StoredRow {
    #[diesel(sql_type = BigInt)]
    chunk: i64,
    #[diesel(sql_type = BigInt)]
    seq: i64,
    #[diesel(sql_type = Text)]
    data: String,
}

/// A run's counters after a chunk was counted.
#[derive(QueryableByName)]
struct Counted {
    #[diesel(sql_type = BigInt)]
    chunks_done: i64,
    #[diesel(sql_type = BigInt)]
    chunks_total: i64,
}

/// The query of runs picked by `filter` (a `WHERE`/`ORDER BY`/`LIMIT` tail over
/// `report_runs r`). A run still `processing` whose request, finishing job or a pending
/// chunk's job is dead or cancelled reads as `failed`, with that job's error: those jobs will
/// not run again by themselves, so the run cannot finish. The jobs are looked up by id (a
/// semi-join on the primary key), never by scanning `jobs`.
fn run_query(filter: &str) -> String {
    format!(
        "SELECT id, kind, params,
                CASE WHEN lost IS NOT NULL THEN 'failed' ELSE state END AS state,
                chunks_total, chunks_done, rows_done, result_path, result_rows,
                COALESCE(lost, error) AS error, request_job_id, finish_job_id, planned_at,
                created_at, updated_at, finished_at
         FROM (
            SELECT r.*, CASE WHEN r.state = 'processing' THEN (
                SELECT 'job ' || j.id::text || ' (' || j.job_type || ') is ' || j.status
                       || ': ' || COALESCE(j.last_error, 'no error recorded')
                FROM jobs j
                WHERE j.status IN ('dead', 'cancelled')
                  AND j.id IN (SELECT r.request_job_id
                               UNION ALL SELECT r.finish_job_id
                               UNION ALL SELECT c.job_id FROM report_chunks c
                                         WHERE c.run_id = r.id AND c.state = 'pending')
                ORDER BY j.id LIMIT 1) END AS lost
            FROM report_runs r {filter}
         ) AS runs"
    )
}

/// `LIMIT` as SQLite reads it: a negative limit is no limit.
fn sql_limit(limit: i64) -> Option<i64> {
    (limit >= 0).then_some(limit)
}

impl ReportStore for PgTx<'_> {
    fn insert_run(
        &self,
        kind: &str,
        params: &str,
        request_job_id: Option<i64>,
        now: i64,
    ) -> Result<i64> {
        let row: Option<IntRow> = self.row(
            query(
                "INSERT INTO report_runs (kind, params, request_job_id, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $4)
                 RETURNING id AS v",
            )
            .text(kind)
            .text(params)
            .opt_int(request_job_id)
            .int(now),
        )?;
        row.map(|r| r.v).ok_or_else(|| {
            Error::new(
                ErrorKind::Database,
                "PostgreSQL: inserting a report run returned no id",
            )
        })
    }

    fn set_request_job(&self, run_id: i64, job_id: i64) -> Result<()> {
        self.execute(
            query("UPDATE report_runs SET request_job_id = $1 WHERE id = $2")
                .int(job_id)
                .int(run_id),
        )?;
        Ok(())
    }

    fn run_of_request(&self, request_job_id: i64) -> Result<Option<i64>> {
        let row: Option<IntRow> = self.row(
            query("SELECT id AS v FROM report_runs WHERE request_job_id = $1").int(request_job_id),
        )?;
        Ok(row.map(|r| r.v))
    }

    fn report_run(&self, id: i64) -> Result<Option<RunRow>> {
        let row: Option<Run> = self.row(query(&run_query("WHERE r.id = $1")).int(id))?;
        Ok(row.map(RunRow::from))
    }

    fn report_runs(&self, kind: Option<&str>, limit: i64) -> Result<Vec<RunRow>> {
        let sql = run_query(
            "WHERE ($1::text IS NULL OR r.kind = $1)
             ORDER BY r.created_at DESC, r.id DESC LIMIT $2",
        ) + " ORDER BY created_at DESC, id DESC";
        let rows: Vec<Run> = self.rows(query(&sql).opt_text(kind).opt_int(sql_limit(limit)))?;
        Ok(rows.into_iter().map(RunRow::from).collect())
    }

    fn plan_run(&self, run_id: i64, specs: &[String], now: i64) -> Result<bool> {
        // The conditional UPDATE locks the run's row and re-checks `planned_at IS NULL` on
        // its latest version: of two planners, one plans and the other changes nothing.
        let n = self.execute(
            query(
                "UPDATE report_runs SET chunks_total = $1, planned_at = $2, updated_at = $2
                 WHERE id = $3 AND planned_at IS NULL AND state = 'processing'",
            )
            .int(specs.len() as i64)
            .int(now)
            .int(run_id),
        )?;
        if n == 0 {
            return Ok(false);
        }
        if !specs.is_empty() {
            self.execute(
                query(
                    "INSERT INTO report_chunks (run_id, chunk, spec)
                     SELECT $1, s.ord - 1, s.spec
                     FROM unnest($2::text[]) WITH ORDINALITY AS s (spec, ord)",
                )
                .int(run_id)
                .texts(specs),
            )?;
        }
        Ok(true)
    }

    fn set_chunk_job(&self, run_id: i64, chunk: i64, job_id: i64) -> Result<()> {
        self.execute(
            query("UPDATE report_chunks SET job_id = $1 WHERE run_id = $2 AND chunk = $3")
                .int(job_id)
                .int(run_id)
                .int(chunk),
        )?;
        Ok(())
    }

    fn set_finish_job(&self, run_id: i64, job_id: i64) -> Result<()> {
        self.execute(
            query("UPDATE report_runs SET finish_job_id = $1 WHERE id = $2")
                .int(job_id)
                .int(run_id),
        )?;
        Ok(())
    }

    fn report_chunk(&self, run_id: i64, chunk: i64) -> Result<Option<ChunkRow>> {
        let row: Option<Chunk> = self.row(
            query(
                "SELECT spec, state = 'done' AS done FROM report_chunks
                 WHERE run_id = $1 AND chunk = $2",
            )
            .int(run_id)
            .int(chunk),
        )?;
        Ok(row.map(|c| ChunkRow {
            spec: c.spec,
            done: c.done,
        }))
    }

    /// The same fence as every write of the job's outcome (the job, its status, the worker
    /// and the attempt), and it keeps holding until this transaction ends: the job's row is
    /// locked `FOR SHARE`, so no other writer can end or reclaim the attempt meanwhile (a
    /// writer that got there first is waited for, and the row checked again). Write
    /// transactions only (PostgreSQL refuses row locks in a read-only one); the writes that
    /// follow it in the transaction rely on the lock.
    fn chunk_fence_holds(&self, lease: Lease<'_>) -> Result<bool> {
        let row: Option<IntRow> = self.row(
            query(
                "SELECT id AS v FROM jobs
                 WHERE id = $1 AND status = 'running' AND locked_by = $2 AND attempts = $3
                 FOR SHARE",
            )
            .int(lease.job_id)
            .text(lease.worker_id)
            .int(lease.attempt),
        )?;
        Ok(row.is_some())
    }

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
        // The run's row, locked: another chunk's completion, the finish or a failure of this
        // run waits for this transaction, and this one sees theirs once they committed.
        let processing: Option<IntRow> = self.row(
            query(
                "SELECT id AS v FROM report_runs WHERE id = $1 AND state = 'processing' FOR UPDATE",
            )
            .int(run_id),
        )?;
        if processing.is_none() {
            return Ok(ChunkWrite::AlreadyDone);
        }
        let marked = self.execute(
            query(
                "UPDATE report_chunks SET state = 'done', row_count = $1, finished_at = $2
                 WHERE run_id = $3 AND chunk = $4 AND state = 'pending'",
            )
            .int(count)
            .int(now)
            .int(run_id)
            .int(chunk),
        )?;
        if marked == 0 {
            return Ok(ChunkWrite::AlreadyDone);
        }
        // Nothing of a pending chunk is stored, but be exact even if someone wrote rows by hand.
        self.execute(
            query("DELETE FROM report_rows WHERE run_id = $1 AND chunk = $2")
                .int(run_id)
                .int(chunk),
        )?;
        if !rows.is_empty() {
            self.execute(
                query(
                    "INSERT INTO report_rows (run_id, chunk, seq, data)
                     SELECT $1, $2, s.ord - 1, s.data
                     FROM unnest($3::text[]) WITH ORDINALITY AS s (data, ord)",
                )
                .int(run_id)
                .int(chunk)
                .texts(rows),
            )?;
        }
        let counted: Option<Counted> = self.row(
            query(
                "UPDATE report_runs SET chunks_done = chunks_done + 1, rows_done = rows_done + $1,
                                        updated_at = $2
                 WHERE id = $3
                 RETURNING chunks_done, chunks_total",
            )
            .int(count)
            .int(now)
            .int(run_id),
        )?;
        let counted = counted.ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("PostgreSQL: report run {run_id} vanished while its chunk was counted"),
            )
        })?;
        Ok(ChunkWrite::Done {
            last: counted.chunks_done >= counted.chunks_total,
        })
    }

    fn fail_run(&self, run_id: i64, error: &str, now: i64) -> Result<bool> {
        let n = self.execute(
            query(
                "UPDATE report_runs SET state = 'failed', error = $1, updated_at = $2,
                                        finished_at = $2
                 WHERE id = $3 AND state = 'processing'",
            )
            .text(error)
            .int(now)
            .int(run_id),
        )?;
        Ok(n == 1)
    }

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
        let n = self.execute(
            query(
                "UPDATE report_runs SET state = 'ready', result_path = $1, result_rows = $2,
                                        updated_at = $3, finished_at = $3
                 WHERE id = $4 AND state = 'processing'",
            )
            .opt_text(result_path)
            .int(result_rows)
            .int(now)
            .int(run_id),
        )?;
        Ok(if n == 1 {
            FinishWrite::Ready
        } else {
            FinishWrite::NotProcessing
        })
    }

    fn report_rows_after(
        &self,
        run_id: i64,
        after: (i64, i64),
        limit: i64,
    ) -> Result<Vec<(i64, i64, String)>> {
        let rows: Vec<StoredRow> = self.rows(
            query(
                "SELECT chunk, seq, data FROM report_rows
                 WHERE run_id = $1 AND (chunk, seq) > ($2, $3)
                 ORDER BY chunk, seq LIMIT $4",
            )
            .int(run_id)
            .int(after.0)
            .int(after.1)
            .opt_int(sql_limit(limit)),
        )?;
        Ok(rows.into_iter().map(|r| (r.chunk, r.seq, r.data)).collect())
    }

    fn report_rows_page(&self, run_id: i64, offset: i64, limit: i64) -> Result<Vec<String>> {
        let rows: Vec<TextRow> = self.rows(
            query(
                "SELECT data AS v FROM report_rows WHERE run_id = $1 ORDER BY chunk, seq
                 LIMIT $2 OFFSET $3",
            )
            .int(run_id)
            .opt_int(sql_limit(limit))
            // SQLite reads a negative offset as 0; PostgreSQL refuses it.
            .int(offset.max(0)),
        )?;
        Ok(rows.into_iter().map(|r| r.v).collect())
    }

    fn delete_run(&self, run_id: i64) -> Result<bool> {
        // Its chunks and rows go with it (ON DELETE CASCADE).
        let n = self.execute(query("DELETE FROM report_runs WHERE id = $1").int(run_id))?;
        Ok(n == 1)
    }
}
