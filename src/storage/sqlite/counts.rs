//! The finished-job and attempt counts (`job_counts`, `attempt_counts`) on SQLite, kept by
//! litejobs' own writes rather than by the schema's triggers (see [`keep_counts_in_code`]):
//! each write that finishes, revives or deletes jobs adjusts them in the same transaction.

use rusqlite::{params, Connection};

use super::SqliteTx;
use crate::error::Result;

/// litejobs keeps `job_counts` itself, in batches, so its connections skip the schema's
/// triggers (which keep the counts for other programs): a trigger runs per row, and measured
/// it cost a fifth of the claim-and-complete speed even when its WHEN clause was false.
pub(crate) fn keep_counts_in_code(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER,
        false,
    )?;
    Ok(())
}

/// Runs `f` on a caller's own connection (the `_in` enqueues) with the schema's triggers off,
/// as on litejobs' own connections, then puts the caller's setting back: litejobs' code keeps
/// the counts and holds waiting jobs itself, so with the triggers on both would be written
/// twice (a cancelled job counted twice; a wait counted twice holds its job for ever).
pub(crate) fn with_triggers_off<T>(conn: &Connection, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let trigger = rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER;
    if !conn.db_config(trigger)? {
        return f();
    }
    conn.set_db_config(trigger, false)?;
    let result = f();
    let restored = conn.set_db_config(trigger, true);
    let value = result?;
    restored?;
    Ok(value)
}

impl SqliteTx<'_> {
    /// Adds the jobs this transaction marked succeeded to `job_counts`, one row per queue
    /// and type (a batch of 64 completions costs one or two upserts, not 64).
    pub(super) fn write_succeeded_counts(&self) -> Result<()> {
        let counts = std::mem::take(&mut *self.succeeded.borrow_mut());
        for ((queue, job_type), n) in counts {
            self.add_count(&queue, &job_type, "succeeded", n)?;
        }
        Ok(())
    }

    /// Adds `n` (negative to take off) to the finished-job count of `(queue, job_type, status)`.
    fn add_count(&self, queue: &str, job_type: &str, status: &str, n: i64) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO job_counts (queue, job_type, status, n) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (queue, job_type, status) DO UPDATE SET n = n + excluded.n",
            )?
            .execute(params![queue, job_type, status, n])?;
        Ok(())
    }

    /// Counts job `id` in `job_counts` under its current (finished) status, by the row's own
    /// values (whatever another program stored there). For the rarer finishing writes.
    pub(super) fn count_row(&self, id: i64, n: i64) -> Result<()> {
        self.count_jobs_where(
            "status",
            n,
            "id = ?1 AND (status = 'succeeded' OR status = 'dead' OR status = 'cancelled')",
            &id,
        )
    }

    /// Adds `sign` times the jobs that `filter` (a `WHERE` with one parameter, `?1` = `arg`)
    /// selects to `job_counts`, by queue, type and `status_sql` (the `status` column, or the
    /// status they are about to get, e.g. `'dead'`). One upsert per group: litejobs' own
    /// connections run without the counting triggers and count set-wise before or after a
    /// write that changes many rows.
    pub(super) fn count_jobs_where(
        &self,
        status_sql: &str,
        sign: i64,
        filter: &str,
        arg: &dyn rusqlite::ToSql,
    ) -> Result<()> {
        self.conn
            .prepare_cached(&format!(
                "INSERT INTO job_counts (queue, job_type, status, n)
             SELECT queue, job_type, {status_sql}, ?2 * COUNT(*) FROM jobs WHERE {filter}
             GROUP BY 1, 2, 3
             ON CONFLICT (queue, job_type, status) DO UPDATE SET n = n + excluded.n"
            ))?
            .execute(params![arg, sign])?;
        Ok(())
    }

    /// Takes the attempts of the jobs `job_ids_sql` selects (a `SELECT id ...` with parameter
    /// ?1) off the attempt counts, before they are deleted.
    pub(super) fn uncount_attempts_of(
        &self,
        job_ids_sql: &str,
        arg: &dyn rusqlite::ToSql,
    ) -> Result<()> {
        self.conn.prepare_cached(&format!(
            "INSERT INTO attempt_counts (job_type, outcome, n)
             SELECT j.job_type, a.outcome, -COUNT(*) FROM job_attempts a JOIN jobs j ON j.id = a.job_id
             WHERE a.job_id IN ({job_ids_sql})
             GROUP BY j.job_type, a.outcome
             ON CONFLICT (job_type, outcome) DO UPDATE SET n = n + excluded.n"
        ))?
        .execute([arg])?;
        Ok(())
    }
}
