//! [`JobLogStore`] on PostgreSQL: the `job_logs` table.

use diesel::sql_types::{BigInt, Text};
use diesel::QueryableByName;

use super::sql::query;
use super::PgTx;
use crate::error::Result;
use crate::job::AttemptLogRecord;
use crate::storage::job_logs::JobLogStore;

#[derive(QueryableByName)]
struct LogRow {
    #[diesel(sql_type = BigInt)]
    attempt: i64,
    #[diesel(sql_type = Text)]
    log: String,
    #[diesel(sql_type = BigInt)]
    cut: i64,
    #[diesel(sql_type = BigInt)]
    written_at: i64,
}

impl JobLogStore for PgTx<'_> {
    fn insert_attempt_log(
        &self,
        job_id: i64,
        attempt: i64,
        text: &str,
        cut: i64,
        now: i64,
    ) -> Result<()> {
        self.execute(
            query(
                "INSERT INTO job_logs (job_id, attempt, log, cut, written_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (job_id, attempt) DO UPDATE SET log = excluded.log,
                     cut = excluded.cut, written_at = excluded.written_at",
            )
            .int(job_id)
            .int(attempt)
            .text(text)
            .int(cut)
            .int(now),
        )?;
        Ok(())
    }

    fn attempt_logs(&self, job_id: i64) -> Result<Vec<AttemptLogRecord>> {
        let rows = self.rows::<LogRow>(
            query(
                "SELECT attempt, log, cut, written_at FROM job_logs WHERE job_id = $1
                 ORDER BY attempt",
            )
            .int(job_id),
        )?;
        Ok(rows
            .into_iter()
            .map(|r| AttemptLogRecord {
                attempt: r.attempt,
                text: r.log,
                cut_bytes: r.cut,
                written_at: r.written_at,
            })
            .collect())
    }
}
