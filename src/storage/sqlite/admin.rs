//! [`AdminStore`] on SQLite: cancel (one job or by type and text), retry now, pause and
//! resume a queue.

use rusqlite::{params, ErrorCode, OptionalExtension};

use super::SqliteTx;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::admin::{
    cancelled_text, check_cancellable, AdminStore, Cancelled, CancelledNote,
};
use crate::storage::encryption::MARKER_LITERAL;

pub(super) fn invalid_state(message: String) -> Error {
    Error::new(ErrorKind::InvalidState, message)
}

impl AdminStore for SqliteTx<'_> {
    fn cancel(&self, id: i64, by: &str, reason: &str, now: i64) -> Result<Cancelled> {
        let (status, _) = self.status_of(id)?;
        check_cancellable(id, &status)?;
        let (job_type, queue, attempt): (String, String, i64) = self
            .conn
            .prepare_cached(
                "SELECT CAST(job_type AS TEXT), CAST(queue AS TEXT), CAST(attempts AS INTEGER)
                 FROM jobs WHERE id = ?1",
            )?
            .query_row([id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
        let running = status == "running";
        if running {
            // The running attempt's history row, as the completer would write it; its
            // worker's late outcome finds no lease and adds none.
            let error = cancelled_text(Some(by), Some(reason));
            self.conn
                .prepare_cached(
                    "INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at,
                                               outcome, error, status_code, duration_ms,
                                               error_group)
                     SELECT id, attempts, locked_by, started_at, ?2, 'cancelled', ?3, NULL,
                            CASE WHEN started_at IS NULL THEN NULL ELSE MAX(?2 - started_at, 0) END,
                            ?4
                     FROM jobs WHERE id = ?1",
                )?
                .execute(params![
                    id,
                    now,
                    error,
                    crate::fingerprint::fingerprint(&error)
                ])?;
            // litejobs' connections keep the attempt counts in code (triggers are off).
            self.conn
                .prepare_cached(
                    "INSERT INTO attempt_counts (job_type, outcome, n)
                     SELECT job_type, 'cancelled', 1 FROM jobs WHERE id = ?1
                     ON CONFLICT (job_type, outcome) DO UPDATE SET n = n + 1",
                )?
                .execute([id])?;
        }
        let n = self
            .conn
            .prepare_cached(
                "UPDATE jobs SET status = 'cancelled', finished_at = ?1, updated_at = ?1,
                                 locked_by = NULL, locked_until = NULL,
                                 cancelled_by = ?2, cancel_reason = NULLIF(?3, ''),
                                 run_at = COALESCE(held_run_at, run_at), held_run_at = NULL
                 WHERE id = ?4 AND status IN ('queued', 'failed', 'running')",
            )?
            .execute(params![now, by, reason, id])?;
        if n == 1 {
            self.count_row(id, 1)?;
        }
        Ok(Cancelled {
            id,
            job_type,
            queue,
            running_attempt: running.then_some(attempt),
        })
    }

    fn cancel_matching(
        &self,
        job_type: &str,
        search: Option<&str>,
        by: &str,
        reason: &str,
        now: i64,
    ) -> Result<Vec<Cancelled>> {
        // Waiting jobs through the index of waiting jobs, running ones through the lease
        // index: the finished majority of the table is never read.
        // An encrypted payload's stored text is its envelope: the search would match its
        // field names and, by chance, its base64, cancelling jobs that hold no such text.
        let matches = if search.is_some() {
            format!(
                " AND (instr(lower(last_error), lower(?2)) > 0
                       OR (instr(payload, {MARKER_LITERAL}) = 0
                           AND instr(lower(payload), lower(?2)) > 0))"
            )
        } else {
            " AND ?2 IS NULL".to_string()
        };
        let sql = format!(
            "SELECT id FROM jobs WHERE status IN ('queued', 'failed') AND job_type = ?1{matches}
             UNION
             SELECT id FROM jobs WHERE status = 'running' AND job_type = ?1{matches}
             ORDER BY id"
        );
        let ids: Vec<i64> = self
            .conn
            .prepare(&sql)?
            .query_map(params![job_type, search], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        crate::storage::admin::cancel_each(self, ids, by, reason, now)
    }

    fn cancelled_among(&self, ids: &[i64]) -> Result<Vec<CancelledNote>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let list = serde_json::to_string(ids)
            .map_err(|e| Error::new(ErrorKind::Database, format!("id list: {e}")))?;
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, CAST(cancelled_by AS TEXT), CAST(cancel_reason AS TEXT) FROM jobs
             WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'cancelled'",
        )?;
        let rows = stmt.query_map([list], |row| {
            Ok(CancelledNote {
                id: row.get(0)?,
                by: row.get(1)?,
                reason: row.get(2)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Makes a waiting job due now; a dead job gets one more attempt (see `Queue::retry_now`).
    fn retry_now(&self, id: i64, now: i64) -> Result<()> {
        let (status, requeued_as) = self.status_of(id)?;
        let sql = match status.as_str() {
            "queued" | "failed" => "UPDATE jobs SET run_at = ?1, updated_at = ?1 WHERE id = ?2",
            "dead" => {
                if let Some(new_id) = requeued_as {
                    return Err(invalid_state(format!(
                        "job {id} was already requeued as job {new_id}; retry that one instead"
                    )));
                }
                self.refuse_unusable(id, "retried")?;
                "UPDATE jobs SET status = 'failed', run_at = ?1, updated_at = ?1, finished_at = NULL,
                        max_attempts = attempts + 1
                 WHERE id = ?2"
            }
            other => {
                return Err(invalid_state(format!(
                    "job {id} is {other}; only queued, failed or dead jobs can be retried"
                )))
            }
        };
        // A dead job leaves the finished counts when it becomes due again.
        if status == "dead" {
            self.count_row(id, -1)?;
        }
        match self.conn.prepare_cached(sql)?.execute(params![now, id]) {
            Ok(_) => Ok(()),
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
                Err(invalid_state(format!(
                    "job {id} cannot be retried: its idempotency key is held by another live or \
                     succeeded job"
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Sets a queue's paused switch (creating its row on first use).
    fn set_paused(&self, queue: &str, paused: bool, now: i64) -> Result<()> {
        self.conn.prepare_cached(
            "INSERT INTO queues (name, paused, updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at",
        )?
        .execute(params![queue, paused, now])?;
        Ok(())
    }

    /// Names of the paused queues, sorted.
    fn paused_queues(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT name FROM queues WHERE paused = 1 ORDER BY name")?;
        let rows = stmt.query_map([], |row| row.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

impl SqliteTx<'_> {
    /// A job's status and `requeued_as`, or `NotFound`.
    pub(super) fn status_of(&self, id: i64) -> Result<(String, Option<i64>)> {
        self.conn
            .prepare_cached("SELECT status, requeued_as FROM jobs WHERE id = ?1")?
            .query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?
            .ok_or_else(|| Error::not_found("job", id))
    }
}
