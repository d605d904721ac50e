//! [`DeadLetterStore`] on SQLite: dead jobs waiting for a person, requeue (one, or by type
//! and error text, all or nothing), discard.

use rusqlite::types::Value as SqlValue;
use rusqlite::{params, params_from_iter, OptionalExtension};

use super::admin::invalid_state;
use super::job_row::{job_from_row, JOB_COLUMNS};
use super::SqliteTx;
use crate::error::{Error, ErrorKind, Result};
use crate::job::Discarded;
use crate::job::JobRecord;
use crate::storage::dead_letter::DeadLetterStore;
use crate::storage::reads::JobFilter;
use crate::storage::sqlite::reads::GROUP_IS;

/// The `WHERE` of dead jobs that nobody has requeued yet, narrowed by a filter's type,
/// queue and search text. Returns the clause and its arguments (numbered from 1).
fn awaiting_dead_clause(filter: &JobFilter) -> (String, Vec<SqlValue>) {
    let mut sql = String::from("status = 'dead' AND requeued_as IS NULL");
    let mut args: Vec<SqlValue> = Vec::new();
    let mut bind = |sql: &mut String, clause: &str, value: SqlValue| {
        args.push(value);
        sql.push_str(&clause.replace('?', &format!("?{}", args.len())));
    };
    if let Some(job_type) = &filter.job_type {
        bind(&mut sql, " AND job_type = ?", job_type.clone().into());
    }
    if let Some(queue) = &filter.queue {
        bind(&mut sql, " AND queue = ?", queue.clone().into());
    }
    if let Some(search) = &filter.search {
        bind(
            &mut sql,
            " AND instr(lower(last_error), lower(?)) > 0",
            search.clone().into(),
        );
    }
    if let Some(group) = &filter.error_group {
        bind(&mut sql, GROUP_IS, group.clone().into());
    }
    if let Some(before) = filter.before_id {
        bind(&mut sql, " AND id < ?", before.into());
    }
    (sql, args)
}

impl DeadLetterStore for SqliteTx<'_> {
    /// Creates a new job from dead job `id` (same type, payload and options, due now) and marks
    /// the dead one with who requeued it, when, why and the new id. Returns the new id.
    fn requeue_dead(&self, id: i64, by: &str, reason: &str, now: i64) -> Result<i64> {
        let row: Option<(String, Option<i64>)> = self
            .conn
            .prepare_cached("SELECT status, requeued_as FROM jobs WHERE id = ?1")?
            .query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        let (status, requeued_as) = row.ok_or_else(|| Error::not_found("job", id))?;
        if status != "dead" {
            return Err(Error::new(
                ErrorKind::InvalidState,
                format!("job {id} is {status}, not dead; only dead jobs can be requeued"),
            ));
        }
        if let Some(new_id) = requeued_as {
            return Err(Error::new(
                ErrorKind::InvalidState,
                format!("job {id} was already requeued as job {new_id}"),
            ));
        }
        self.refuse_unusable(id, "requeued")?;
        let inserted = self.conn
            .prepare_cached(
                "INSERT INTO jobs (queue, job_type, payload, priority, max_attempts, run_at, created_at,
                                   updated_at, timeout_ms, idempotency_key, group_key)
                 SELECT queue, job_type, payload, priority, max_attempts, ?1, ?1, ?1, timeout_ms,
                        idempotency_key, group_key
                 FROM jobs WHERE id = ?2",
            )?
            .execute(params![now, id]);
        match inserted {
            Ok(_) => {}
            Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) => {
                return Err(Error::new(
                    ErrorKind::InvalidState,
                    format!(
                        "job {id} cannot be requeued: its idempotency key is held by another live or \
                         succeeded job"
                    ),
                ))
            }
            Err(e) => return Err(e.into()),
        }
        let new_id = self.conn.last_insert_rowid();
        self.conn.prepare_cached(
            "UPDATE jobs SET requeued_by = ?1, requeued_at = ?2, requeue_reason = ?3, requeued_as = ?4,
                             updated_at = ?2
             WHERE id = ?5",
        )?
        .execute(params![by, now, reason, new_id, id])?;
        Ok(new_id)
    }

    /// Deletes a dead job and its attempt history; the newest job of the table becomes
    /// `cancelled` instead: see [`Discarded`].
    fn discard_dead(&self, id: i64, now: i64) -> Result<Discarded> {
        let (status, _) = self.status_of(id)?;
        if status != "dead" {
            return Err(invalid_state(format!(
                "job {id} is {status}, not dead; only dead jobs can be discarded"
            )));
        }
        if self.is_newest(id)? {
            self.count_row(id, -1)?;
            self.conn
                .prepare_cached(
                    "UPDATE jobs SET status = 'cancelled', finished_at = ?2, updated_at = ?2
                 WHERE id = ?1 AND status = 'dead'",
                )?
                .execute(params![id, now])?;
            self.count_row(id, 1)?;
            return Ok(Discarded::KeptCancelled);
        }
        // Explicit rather than through ON DELETE CASCADE, which only works on connections that
        // turned foreign keys on.
        self.uncount_attempts_of("SELECT ?1", &id)?;
        self.conn
            .prepare_cached("DELETE FROM job_attempts WHERE job_id = ?1")?
            .execute([id])?;
        self.conn
            .prepare_cached("DELETE FROM job_logs WHERE job_id = ?1")?
            .execute([id])?;
        self.count_row(id, -1)?;
        self.conn
            .prepare_cached("DELETE FROM jobs WHERE id = ?1 AND status = 'dead'")?
            .execute([id])?;
        Ok(Discarded::Deleted)
    }

    /// Dead jobs awaiting a person (not requeued), newest first, up to the filter's limit.
    fn dead_awaiting(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        let (clause, mut args) = awaiting_dead_clause(filter);
        args.push(SqlValue::Integer(
            i64::try_from(filter.limit).unwrap_or(i64::MAX),
        ));
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE {clause} ORDER BY id DESC LIMIT ?{}",
            args.len()
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(params_from_iter(args), job_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn dead_ids_matching(&self, filter: &JobFilter) -> Result<Vec<i64>> {
        let (clause, args) = awaiting_dead_clause(filter);
        let ids: Vec<i64> = self
            .conn
            .prepare(&format!("SELECT id FROM jobs WHERE {clause} ORDER BY id"))?
            .query_map(params_from_iter(args), |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(ids)
    }
}

impl SqliteTx<'_> {
    /// True when `id` is the largest id in the table. That row is never deleted: without
    /// AUTOINCREMENT, SQLite gives a new row one more than the largest id, so keeping the
    /// newest row is what keeps ids from being reused (schema.sql, `jobs_newest_kept`).
    pub(super) fn is_newest(&self, id: i64) -> Result<bool> {
        let newest: Option<i64> = self
            .conn
            .prepare_cached("SELECT MAX(id) FROM jobs")?
            .query_row([], |row| row.get(0))?;
        Ok(newest == Some(id))
    }
}
