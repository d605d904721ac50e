//! [`CompleteStore`] on SQLite: the writes fenced by a job's lease (heartbeat, success,
//! failure, snooze or release, cancel) and the attempt history. Successes go in many to a
//! statement; every write keeps the finished-job and attempt counts, which litejobs'
//! connections keep in code (see [`keep_counts_in_code`](crate::storage::sqlite::keep_counts_in_code)).

use rusqlite::params;

use super::{value_rows, RowStatements};
use crate::error::Result;
use crate::fingerprint::fingerprint as error_fingerprint;
use crate::job::clamp_run_at;
use crate::storage::jobs::{AfterFailure, AttemptRow, CompleteStore, Lease, Refused, Success};
use crate::storage::sqlite::SqliteTx;

/// Successes go in by statements of up to this many jobs, as inserts do
/// (`ROWS_PER_INSERT`): one `UPDATE .. FROM (VALUES ..)` for many jobs measured 1.8 times
/// as fast as a statement per job.
const ROWS_PER_SUCCEED: usize = 32;

/// Marking jobs succeeded: `?1` is the time; then per job its id, attempt, worker, result
/// and progress. Each row is fenced by its own lease; `RETURNING` says which held, with the
/// queue and type as stored (for the finished-job counts).
static SUCCESSES: RowStatements = RowStatements::new(ROWS_PER_SUCCEED, |rows| {
    format!(
        "{} RETURNING jobs.id, jobs.queue, jobs.job_type",
        success_update(rows, 5, "")
    )
});

/// [`SUCCESSES`] for jobs whose rows still hold the queue and type they were claimed with
/// (`column6`, `column7`), without `RETURNING`: when every row changed, each lease held and
/// each success counts under its claimed queue and type. `RETURNING` made SQLite keep a
/// table of the returned rows: measured with callgrind, a tenth of the instructions per job.
static SUCCESSES_AS_CLAIMED: RowStatements = RowStatements::new(ROWS_PER_SUCCEED, |rows| {
    success_update(
        rows,
        7,
        " AND jobs.queue = done.column6 AND jobs.job_type = done.column7",
    )
});

/// The success update of `rows` jobs of `per_row` values each (the first five: id, attempt,
/// worker, result, progress), with `and` added to its fence.
fn success_update(rows: usize, per_row: usize, and: &str) -> String {
    format!(
        "UPDATE jobs SET status = 'succeeded', finished_at = ?1, updated_at = ?1,
                locked_by = NULL, locked_until = NULL, result = done.column4,
                progress = COALESCE(done.column5, jobs.progress)
         FROM (VALUES {}) AS done
         WHERE jobs.id = done.column1 AND jobs.status = 'running'
           AND jobs.locked_by = done.column3 AND jobs.attempts = done.column2{and}",
        value_rows(rows, per_row, "")
    )
}

/// The queue and type a success is counted under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CountedAs {
    /// Those it was claimed with ([`Success::queue`], [`Success::job_type`]).
    Claimed,
    /// Others, as the row holds them now (another program changed them while it ran).
    Stored(String, String),
}

impl CompleteStore for SqliteTx<'_> {
    /// A lease already ending later is kept. False when the lease is gone.
    fn extend_lease(
        &self,
        lease: Lease<'_>,
        until: i64,
        progress: Option<&str>,
        now: i64,
    ) -> Result<bool> {
        let mut stmt = self.conn.prepare_cached(
            "UPDATE jobs SET locked_until = MAX(locked_until, ?1), progress = COALESCE(?2, progress),
                             updated_at = ?3
             WHERE id = ?4 AND status = 'running' AND locked_by = ?5 AND attempts = ?6",
        )?;
        let n = stmt.execute(params![
            until,
            progress,
            now,
            lease.job_id,
            lease.worker_id,
            lease.attempt
        ])?;
        Ok(n == 1)
    }

    /// The successes are counted at commit, by the queue and type each row held
    /// ([`SqliteTx::write_successes`]).
    fn succeed(&self, jobs: &[Success<'_>], now: i64) -> Result<Vec<bool>> {
        let written = self.write_successes(jobs, now)?;
        let mut counts = self.succeeded.borrow_mut();
        // Counted by runs of one queue and type (a batch is mostly one run): a map entry,
        // and its owned key, per run instead of per job.
        let mut run: Option<((&str, &str), i64)> = None;
        let mut add = |run: Option<((&str, &str), i64)>| {
            if let Some(((queue, job_type), n)) = run {
                *counts
                    .entry((queue.to_owned(), job_type.to_owned()))
                    .or_insert(0) += n;
            }
        };
        for (job, counted) in jobs.iter().zip(&written) {
            let key = match counted {
                None => continue,
                Some(CountedAs::Claimed) => (job.queue, job.job_type),
                Some(CountedAs::Stored(queue, job_type)) => (queue.as_str(), job_type.as_str()),
            };
            match &mut run {
                Some((current, n)) if *current == key => *n += 1,
                _ => add(run.replace((key, 1))),
            }
        }
        add(run);
        Ok(written.iter().map(Option::is_some).collect())
    }

    fn fail(
        &self,
        lease: Lease<'_>,
        after: AfterFailure,
        error: &str,
        status_code: Option<i64>,
        now: i64,
    ) -> Result<bool> {
        // ?1 is the next run time, or NULL when the job is dead.
        let retry_at = match after {
            AfterFailure::RetryAt(run_at) => Some(clamp_run_at(run_at)),
            AfterFailure::Dead => None,
        };
        let n = self
            .conn
            .prepare_cached(
                "UPDATE jobs SET status = CASE WHEN ?1 IS NULL THEN 'dead' ELSE 'failed' END,
                        run_at = COALESCE(?1, run_at),
                        finished_at = CASE WHEN ?1 IS NULL THEN ?4 ELSE finished_at END,
                        last_error = ?2, error_group = ?8, last_status_code = ?3, updated_at = ?4,
                        locked_by = NULL, locked_until = NULL
                 WHERE id = ?5 AND status = 'running' AND locked_by = ?6 AND attempts = ?7",
            )?
            .execute(params![
                retry_at,
                error,
                status_code,
                now,
                lease.job_id,
                lease.worker_id,
                lease.attempt,
                error_fingerprint(error)
            ])?;
        if n == 1 && retry_at.is_none() {
            self.count_row(lease.job_id, 1)?;
        }
        Ok(n == 1)
    }

    fn put_back(&self, lease: Lease<'_>, run_at: Option<i64>, now: i64) -> Result<bool> {
        let mut stmt = self.conn.prepare_cached(
            "UPDATE jobs SET status = 'queued', attempts = attempts - 1,
                             run_at = COALESCE(?1, run_at), updated_at = ?2,
                             locked_by = NULL, locked_until = NULL
             WHERE id = ?3 AND status = 'running' AND locked_by = ?4 AND attempts = ?5",
        )?;
        let n = stmt.execute(params![
            run_at.map(clamp_run_at),
            now,
            lease.job_id,
            lease.worker_id,
            lease.attempt
        ])?;
        Ok(n == 1)
    }

    fn cancel_running(&self, lease: Lease<'_>, reason: &str, now: i64) -> Result<bool> {
        let mut stmt = self.conn.prepare_cached(
            "UPDATE jobs SET status = 'cancelled', finished_at = ?1, updated_at = ?1, last_error = ?2,
                             error_group = ?6, locked_by = NULL, locked_until = NULL,
                             cancelled_by = 'handler', cancel_reason = ?2
             WHERE id = ?3 AND status = 'running' AND locked_by = ?4 AND attempts = ?5",
        )?;
        let n = stmt.execute(params![
            now,
            reason,
            lease.job_id,
            lease.worker_id,
            lease.attempt,
            error_fingerprint(reason)
        ])?;
        if n == 1 {
            self.count_row(lease.job_id, 1)?;
        }
        Ok(n == 1)
    }

    fn insert_attempt(&self, row: &AttemptRow<'_>) -> Result<()> {
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome,
                                       error, status_code, duration_ms, error_group)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?;
        stmt.execute(params![
            row.job_id,
            row.attempt,
            row.worker,
            row.started_at,
            row.finished_at,
            row.outcome.as_str(),
            row.error,
            row.status_code,
            (row.finished_at - row.started_at).max(0),
            row.error.map(error_fingerprint),
        ])?;
        // litejobs' connections keep the attempt counts in code (triggers are off for them).
        self.conn
            .prepare_cached(
                "INSERT INTO attempt_counts (job_type, outcome, n)
             SELECT job_type, ?2, 1 FROM jobs WHERE id = ?1
             ON CONFLICT (job_type, outcome) DO UPDATE SET n = n + 1",
            )?
            .execute(params![row.job_id, row.outcome.as_str()])?;
        Ok(())
    }
}

impl SqliteTx<'_> {
    /// Writes the fingerprint of each refused row's error, which SQL composed (it names the
    /// job and the value it held, so the fingerprint needs Rust).
    pub(crate) fn group_refused_errors(&self, refused: &[Refused]) -> Result<()> {
        let mut stmt = self
            .conn
            .prepare_cached("UPDATE jobs SET error_group = ?2 WHERE id = ?1")?;
        for r in refused {
            stmt.execute(params![r.id, error_fingerprint(&r.error)])?;
        }
        Ok(())
    }

    /// Marks jobs succeeded, each fenced by its lease (see [`CompleteStore::succeed`]). Returns, per
    /// job in order, what it is counted under, or `None` when its lease was gone.
    pub(crate) fn write_successes(
        &self,
        jobs: &[Success<'_>],
        now: i64,
    ) -> Result<Vec<Option<CountedAs>>> {
        let conn = self.conn;
        let mut written = vec![None; jobs.len()];
        let mut next = 0;
        while next < jobs.len() {
            let rows = SUCCESSES.next_rows(jobs.len() - next);
            let chunk = &jobs[next..next + rows];
            // Every lease held and every row as claimed (all but always): done, in one statement
            // without `RETURNING`. Otherwise that statement is undone and the one that reports
            // row by row runs instead.
            conn.prepare_cached("SAVEPOINT litejobs_succeed")?
                .execute([])?;
            let as_claimed = self
                .bind_successes(SUCCESSES_AS_CLAIMED.sql(rows), chunk, now, true)
                .and_then(|mut stmt| Ok(stmt.raw_execute()?));
            let undo = !matches!(as_claimed, Ok(n) if n == rows);
            if undo {
                conn.prepare_cached("ROLLBACK TO litejobs_succeed")?
                    .execute([])?;
            }
            conn.prepare_cached("RELEASE litejobs_succeed")?
                .execute([])?;
            as_claimed?;
            if !undo {
                written[next..next + rows].fill(Some(CountedAs::Claimed));
                next += rows;
                continue;
            }
            let mut stmt = self.bind_successes(SUCCESSES.sql(rows), chunk, now, false)?;
            let mut returned = stmt.raw_query();
            while let Some(row) = returned.next()? {
                let id: i64 = row.get(0)?;
                // A claimed job's queue and type are text (the claim matched them as text).
                let (queue, job_type): (String, String) = (row.get(1)?, row.get(2)?);
                if let Some(at) = chunk.iter().position(|job| job.lease.job_id == id) {
                    let job = &chunk[at];
                    written[next + at] =
                        Some(if (job.queue, job.job_type) == (&queue, &job_type) {
                            CountedAs::Claimed
                        } else {
                            CountedAs::Stored(queue, job_type)
                        });
                }
            }
            next += rows;
        }
        Ok(written)
    }

    /// `sql` (a success statement for `jobs.len()` rows) with `now` and the jobs bound, and
    /// their claimed queue and type where `as_claimed`.
    fn bind_successes(
        &self,
        sql: &str,
        jobs: &[Success<'_>],
        now: i64,
        as_claimed: bool,
    ) -> Result<rusqlite::CachedStatement<'_>> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        stmt.raw_bind_parameter(1, now)?;
        let per_row = if as_claimed { 7 } else { 5 };
        for (row, job) in jobs.iter().enumerate() {
            let p = 2 + row * per_row;
            stmt.raw_bind_parameter(p, job.lease.job_id)?;
            stmt.raw_bind_parameter(p + 1, job.lease.attempt)?;
            stmt.raw_bind_parameter(p + 2, job.lease.worker_id)?;
            stmt.raw_bind_parameter(p + 3, job.result)?;
            stmt.raw_bind_parameter(p + 4, job.progress)?;
            if as_claimed {
                stmt.raw_bind_parameter(p + 5, job.queue)?;
                stmt.raw_bind_parameter(p + 6, job.job_type)?;
            }
        }
        Ok(stmt)
    }
}
