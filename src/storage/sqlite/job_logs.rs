//! [`JobLogStore`] on SQLite: the `job_logs` table.

use rusqlite::params;

use super::{lenient, SqliteTx};
use crate::error::Result;
use crate::job::AttemptLogRecord;
use crate::storage::job_logs::JobLogStore;

impl JobLogStore for SqliteTx<'_> {
    fn insert_attempt_log(
        &self,
        job_id: i64,
        attempt: i64,
        text: &str,
        cut: i64,
        now: i64,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO job_logs (job_id, attempt, log, cut, written_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (job_id, attempt) DO UPDATE SET log = excluded.log,
                     cut = excluded.cut, written_at = excluded.written_at",
            )?
            .execute(params![job_id, attempt, text, cut, now])?;
        Ok(())
    }

    fn attempt_logs(&self, job_id: i64) -> Result<Vec<AttemptLogRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT attempt, log, cut, written_at FROM job_logs WHERE job_id = ?1
             ORDER BY attempt",
        )?;
        let rows = stmt.query_map([job_id], |r| {
            let mut ignored = Vec::new();
            Ok(AttemptLogRecord {
                attempt: lenient::int(r, 0, "attempt", &mut ignored)?,
                text: lenient::label(r, 1)?,
                cut_bytes: lenient::int(r, 2, "cut", &mut ignored)?,
                written_at: lenient::int(r, 3, "written_at", &mut ignored)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
