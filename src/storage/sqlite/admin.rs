//! [`AdminStore`] on SQLite: cancel, retry now, pause and resume a queue.

use rusqlite::{params, ErrorCode, OptionalExtension};

use super::SqliteTx;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::admin::AdminStore;

pub(super) fn invalid_state(message: String) -> Error {
    Error::new(ErrorKind::InvalidState, message)
}

impl AdminStore for SqliteTx<'_> {
    /// Cancels a waiting (queued or failed) job. A running job is refused: its handler is not
    /// interrupted, and a cancel that only took effect later would be a surprise.
    fn cancel(&self, id: i64, now: i64) -> Result<()> {
        let (status, _) = self.status_of(id)?;
        crate::storage::admin::check_cancellable(id, &status)?;
        let n = self
            .conn
            .prepare_cached(
                "UPDATE jobs SET status = 'cancelled', finished_at = ?1, updated_at = ?1
                 WHERE id = ?2 AND status IN ('queued', 'failed')",
            )?
            .execute(params![now, id])?;
        if n == 1 {
            self.count_row(id, 1)?;
        }
        Ok(())
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
