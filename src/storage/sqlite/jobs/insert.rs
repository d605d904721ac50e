//! [`InsertStore`] on SQLite: new jobs one at a time or in multi-row statements, and the
//! idempotency keys that make an insert happen once per key.

use rusqlite::{params, OptionalExtension};

use super::{value_rows, value_rows_from, RowStatements};
use crate::error::Result;
use crate::job::{resolve_expiry, NewJob, RunAt};
use crate::storage::jobs::deps::{insert_then_wait, waits_asked, HELD_RUN_AT};
use crate::storage::jobs::insert::skips_the_rules;
use crate::storage::jobs::{batch_error, DependencyStore, ExpireStore, InsertStore, Inserted};
use crate::storage::sqlite::SqliteTx;

/// A job that waits for others ([`NewJob::after`], a workflow's steps) goes in held (`?12` its count of waits,
/// `?13` its own run time, `?6` [`HELD_RUN_AT`]): holding it afterwards would write its row
/// and move its due-index entry a second time. A workflow's step goes in placed (`?14`,
/// `?15`).
const INSERT_SQL: &str = "INSERT INTO jobs (queue, job_type, payload, priority, max_attempts,
        run_at, created_at, updated_at, timeout_ms, idempotency_key, group_key, expires_at,
        waiting_for, held_run_at, workflow_id, step)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
     ON CONFLICT DO NOTHING";

/// Jobs without an idempotency key go in by statements of up to this many rows: a
/// statement's fixed cost is paid once per statement instead of once per job, which nearly
/// doubled a batch's speed (measured with 25, 50, 100 and 200 rows: the gain stops at 25).
const ROWS_PER_INSERT: usize = 32;

/// Inserts of jobs without idempotency keys: `?1` is the time of the enqueue, then nine
/// parameters per row. No `RETURNING`: the ids follow from the newest id before the
/// statement ([`SqliteTx::insert_rows`]), which spares SQLite a table of returned rows per statement.
static INSERTS: RowStatements = RowStatements::new(ROWS_PER_INSERT, |rows| {
    format!(
        "INSERT INTO jobs (queue, job_type, payload, priority, max_attempts,
            run_at, timeout_ms, group_key, expires_at, created_at, updated_at) VALUES {}",
        value_rows(rows, 9, ",?1,?1")
    )
});

/// [`INSERTS`] for statements with jobs that wait for others, which go in held, or a
/// workflow's steps, which go in placed (see [`INSERT_SQL`]): four more parameters per row,
/// `waiting_for`, `held_run_at`, `workflow_id` and `step`.
static FULL_INSERTS: RowStatements = RowStatements::new(ROWS_PER_INSERT, |rows| {
    format!(
        "INSERT INTO jobs (queue, job_type, payload, priority, max_attempts,
            run_at, timeout_ms, group_key, expires_at, waiting_for, held_run_at,
            workflow_id, step, created_at, updated_at) VALUES {}",
        value_rows(rows, 13, ",?1,?1")
    )
});

/// [`INSERTS`] for rows of one queue and one job type (`?2`, `?3`: bound once, not per row),
/// then seven parameters per row. Most batches are one kind of job: measured with callgrind,
/// binding the two texts per row (SQLite copies each) cost 5 % of a batched insert.
static INSERTS_OF_ONE_KIND: RowStatements = RowStatements::new(ROWS_PER_INSERT, |rows| {
    format!(
        "INSERT INTO jobs (payload, priority, max_attempts, run_at, timeout_ms, group_key,
            expires_at, queue, job_type, created_at, updated_at) VALUES {}",
        value_rows_from(4, rows, 7, ",?2,?3,?1,?1")
    )
});

/// [`INSERTS_OF_ONE_KIND`] with jobs held or placed (see [`FULL_INSERTS`]).
static FULL_INSERTS_OF_ONE_KIND: RowStatements = RowStatements::new(ROWS_PER_INSERT, |rows| {
    format!(
        "INSERT INTO jobs (payload, priority, max_attempts, run_at, timeout_ms, group_key,
            expires_at, waiting_for, held_run_at, workflow_id, step, queue, job_type,
            created_at, updated_at)
            VALUES {}",
        value_rows_from(4, rows, 11, ",?2,?3,?1,?1")
    )
});

impl InsertStore for SqliteTx<'_> {
    /// A held or remembered idempotency key returns the holder's id instead; the unique
    /// index makes this safe against racing writers in other processes.
    fn insert_job(&self, job: &NewJob, payload: &str, now: i64) -> Result<Inserted> {
        if let Some(key) = job.idempotency_key.as_deref() {
            if let Some(id) = self.find_key_holder(key, now)? {
                // A holder past its deadline never runs: it expires, and the key is free.
                if !self.expire_key_holder(key, now)? {
                    return Ok(Inserted::found(id));
                }
                // It ended: the jobs waiting for it are settled with that end.
                self.settle_dependants(&[id], now)?;
                if let Some(id) = self.find_key_holder(key, now)? {
                    return Ok(Inserted::found(id));
                }
            }
        }
        let run_at = RunAt::resolve(job.run_at, now)?;
        let expires_at = resolve_expiry(job, run_at, now)?;
        let held = waits_asked(job) > 0;
        let (stored_run_at, held_run_at) = if held {
            (HELD_RUN_AT, Some(run_at))
        } else {
            (run_at, None)
        };
        let changed = self.conn.prepare_cached(INSERT_SQL)?.execute(params![
            job.queue,
            job.job_type,
            payload,
            job.priority,
            job.max_attempts,
            stored_run_at,
            now,
            job.timeout_ms,
            job.idempotency_key,
            job.group_key,
            expires_at,
            waits_asked(job),
            held_run_at,
            job.placed.as_ref().map(|(workflow_id, _)| workflow_id),
            job.placed.as_ref().map(|(_, step)| step),
        ])?;
        if changed == 1 {
            return Ok(Inserted::created(self.conn.last_insert_rowid(), held));
        }
        // Only the idempotency index can conflict (litejobs leaves the id to SQLite).
        let key = job.idempotency_key.as_deref().unwrap_or_default();
        let id = self.find_key_holder(key, now)?.ok_or_else(|| {
            crate::Error::new(
                crate::ErrorKind::Database,
                format!(
                    "insert of job type {:?} was ignored by a constraint",
                    job.job_type
                ),
            )
        })?;
        Ok(Inserted::found(id))
    }

    /// Always in the caller's transaction: SQLite has no round trips to save.
    fn insert_job_and_waits(&self, job: &NewJob, payload: &str, now: i64) -> Result<Inserted> {
        insert_then_wait(self, job, payload, now)
    }

    /// A job with an idempotency key alone (it may find a holder instead), the runs of jobs
    /// between them by multi-row statements.
    fn insert_jobs(&self, jobs: &[NewJob], payloads: &[String], now: i64) -> Result<Vec<Inserted>> {
        if !skips_the_rules(jobs) {
            return self.insert_in_order(jobs, payloads, now);
        }
        // A batch that skips the rules goes in with the CHECK rules off (a test holds every
        // validated row to RULE_BROKEN_SQL). The queue's own batches come on a connection
        // kept with them off (`SqliteDb::write_validated_tx`); on any other connection they
        // are switched off for the batch, which makes SQLite re-prepare that connection's
        // statements (the switch changes the code they compile to).
        let already_off: bool = self
            .conn
            .prepare_cached("PRAGMA ignore_check_constraints")?
            .query_row([], |row| row.get(0))?;
        if already_off {
            return self.insert_in_order(jobs, payloads, now);
        }
        self.conn
            .prepare_cached("PRAGMA ignore_check_constraints = ON")?
            .execute([])?;
        let inserted = self.insert_in_order(jobs, payloads, now);
        // Back on whatever happened: the connection goes on to serve writes of values from
        // outside (a job's fields, a person's edit), which the rules guard.
        self.conn
            .prepare_cached("PRAGMA ignore_check_constraints = OFF")?
            .execute([])?;
        inserted
    }

    fn remember_key(&self, key: &str, job_id: i64, now: i64, window_ms: i64) -> Result<()> {
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO idempotency_keys (key, job_id, completed_at, expires_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id,
                 completed_at = excluded.completed_at, expires_at = excluded.expires_at",
        )?;
        stmt.execute(params![key, job_id, now, now.saturating_add(window_ms)])?;
        Ok(())
    }

    fn key_remembered(&self, key: &str, now: i64) -> Result<bool> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE key = ?1 AND expires_at > ?2)",
        )?;
        Ok(stmt.query_row(params![key, now], |row| row.get(0))?)
    }
}

impl SqliteTx<'_> {
    fn insert_in_order(
        &self,
        jobs: &[NewJob],
        payloads: &[String],
        now: i64,
    ) -> Result<Vec<Inserted>> {
        let mut inserted = Vec::with_capacity(jobs.len());
        let mut next = 0;
        // The largest id in the table, once read: this transaction is the only writer.
        let mut newest = None;
        while next < jobs.len() {
            if jobs[next].idempotency_key.is_some() {
                inserted.push(self.insert_job(&jobs[next], &payloads[next], now)?);
                newest = None;
                next += 1;
                continue;
            }
            let run = jobs[next..]
                .iter()
                .take_while(|job| job.idempotency_key.is_none())
                .count();
            let rows = INSERTS.next_rows(run);
            let chunk = &jobs[next..next + rows];
            let ids = self
                .insert_rows(chunk, &payloads[next..next + rows], now, &mut newest)
                .map_err(|e| batch_error(e, chunk, next))?;
            inserted.extend(
                ids.into_iter()
                    .zip(chunk)
                    .map(|(id, job)| Inserted::created(id, waits_asked(job) > 0)),
            );
            next += rows;
        }
        Ok(inserted)
    }

    /// Inserts jobs without idempotency keys by one statement; their ids in order. `newest`
    /// is the largest id in the table (read if `None`), and is moved past the new rows.
    fn insert_rows(
        &self,
        jobs: &[NewJob],
        payloads: &[String],
        now: i64,
        newest: &mut Option<i64>,
    ) -> Result<Vec<i64>> {
        let conn = self.conn;
        let before = match *newest {
            Some(id) => id,
            None => conn
                .prepare_cached("SELECT MAX(id) FROM jobs")?
                .query_row([], |row| row.get::<_, Option<i64>>(0))?
                .unwrap_or(0),
        };
        let Some(first) = jobs.first() else {
            return Ok(Vec::new());
        };
        let one_kind = jobs
            .iter()
            .all(|job| job.queue == first.queue && job.job_type == first.job_type);
        let full = jobs
            .iter()
            .any(|job| waits_asked(job) > 0 || job.placed.is_some());
        // Parameters per row besides the queue and type: four more for held or placed jobs.
        let per_row = if full { 11 } else { 7 };
        let statements = match (one_kind, full) {
            (true, false) => &INSERTS_OF_ONE_KIND,
            (true, true) => &FULL_INSERTS_OF_ONE_KIND,
            (false, false) => &INSERTS,
            (false, true) => &FULL_INSERTS,
        };
        let mut stmt = conn.prepare_cached(statements.sql(jobs.len()))?;
        if one_kind {
            stmt.raw_bind_parameter(2, &first.queue)?;
            stmt.raw_bind_parameter(3, &first.job_type)?;
        }
        stmt.raw_bind_parameter(1, now)?;
        for (row, (job, payload)) in jobs.iter().zip(payloads).enumerate() {
            let p = if one_kind {
                4 + row * per_row
            } else {
                let p = 2 + row * (per_row + 2);
                stmt.raw_bind_parameter(p, &job.queue)?;
                stmt.raw_bind_parameter(p + 1, &job.job_type)?;
                p + 2
            };
            stmt.raw_bind_parameter(p, payload)?;
            stmt.raw_bind_parameter(p + 1, job.priority)?;
            stmt.raw_bind_parameter(p + 2, job.max_attempts)?;
            let run_at = RunAt::resolve(job.run_at, now)?;
            if full {
                // waiting_for has no NULL: a row that waits for nothing binds 0.
                let waits = waits_asked(job);
                stmt.raw_bind_parameter(p + 7, waits)?;
                if waits > 0 {
                    stmt.raw_bind_parameter(p + 3, HELD_RUN_AT)?;
                    stmt.raw_bind_parameter(p + 8, run_at)?;
                } else {
                    stmt.raw_bind_parameter(p + 3, run_at)?;
                }
                if let Some((workflow_id, step)) = &job.placed {
                    stmt.raw_bind_parameter(p + 9, workflow_id)?;
                    stmt.raw_bind_parameter(p + 10, step)?;
                }
            } else {
                stmt.raw_bind_parameter(p + 3, run_at)?;
            }
            // A statement comes from the cache with every parameter NULL (rusqlite clears
            // them when it goes back): NULLs need no binding.
            if let Some(ms) = job.timeout_ms {
                stmt.raw_bind_parameter(p + 4, ms)?;
            }
            if let Some(key) = &job.group_key {
                stmt.raw_bind_parameter(p + 5, key)?;
            }
            if job.expires.is_some() {
                stmt.raw_bind_parameter(p + 6, resolve_expiry(job, run_at, now)?)?;
            }
        }
        let added = stmt.raw_execute()?;
        // SQLite gives each new row one more than the largest id so far, until the largest
        // is the last 64-bit integer (then it picks at random). So `added` rows whose last id
        // is `before + added` are exactly `before + 1 ..= before + added`, in the jobs'
        // order. Anything else is refused rather than guessed (the transaction rolls back).
        let last = conn.last_insert_rowid();
        let count = i64::try_from(added).unwrap_or(i64::MAX);
        if added != jobs.len() || before.checked_add(count) != Some(last) {
            return Err(crate::Error::new(
                crate::ErrorKind::Database,
                format!(
                    "a batch insert of {} jobs added {added} rows ending at id {last} after id \
                     {before}, not one consecutive run",
                    jobs.len()
                ),
            ));
        }
        *newest = Some(last);
        Ok((before + 1..=last).collect())
    }

    /// The job holding `key`: a live or succeeded job, or a remembered key of a pruned job.
    fn find_key_holder(&self, key: &str, now: i64) -> Result<Option<i64>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id FROM jobs WHERE idempotency_key = ?1
               AND status IN ('queued', 'running', 'failed', 'succeeded')",
        )?;
        if let Some(id) = stmt.query_row([key], |row| row.get(0)).optional()? {
            return Ok(Some(id));
        }
        let mut stmt = self.conn.prepare_cached(
            "SELECT job_id FROM idempotency_keys WHERE key = ?1 AND expires_at > ?2",
        )?;
        Ok(stmt
            .query_row(params![key, now], |row| row.get(0))
            .optional()?)
    }
}
