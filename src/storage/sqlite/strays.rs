//! [`StrayStore`] on SQLite, whose columns take any type when the CHECK rules are off.

use rusqlite::params;

use super::lenient;
use super::SqliteTx;
use crate::error::Result;
use crate::storage::jobs::Refused;
use crate::storage::strays::StrayStore;

/// Why a row is stray, or NULL; shows the raw value as SQL would write it.
const STRAY_SQL: &str = "CASE
    WHEN typeof(status) <> 'text' OR status NOT IN
            ('queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled') THEN
        'column status holds ' || upper(typeof(status)) || ' ' || substr(quote(status), 1, 64)
        || ', not one of queued, running, succeeded, failed, dead, cancelled'
    WHEN status IN ('queued', 'failed') AND typeof(run_at) NOT IN ('integer', 'real') THEN
        'column run_at holds ' || upper(typeof(run_at)) || ' ' || substr(quote(run_at), 1, 64)
        || ', not integer milliseconds since 1970, so the job would never be due'
    WHEN status = 'running' AND locked_until IS NOT NULL
            AND typeof(locked_until) NOT IN ('integer', 'real') THEN
        'column locked_until holds ' || upper(typeof(locked_until)) || ' '
        || substr(quote(locked_until), 1, 64)
        || ', not integer milliseconds since 1970, so the lease would never expire'
END";

impl StrayStore for SqliteTx<'_> {
    fn find_strays(&self, limit: usize) -> Result<Vec<i64>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT id FROM jobs WHERE ({STRAY_SQL}) IS NOT NULL ORDER BY id LIMIT ?1"
        ))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let ids = stmt
            .query_map([limit], |row| row.get(0))?
            .collect::<rusqlite::Result<Vec<i64>>>()?;
        Ok(ids)
    }

    fn refuse_strays(&self, ids: &[i64], now: i64) -> Result<Vec<Refused>> {
        let mut refused = Vec::new();
        for &id in ids {
            // Only finished statuses are counted, and a stray never has one: it is counted
            // as dead from now.
            self.count_jobs_where(
                "'dead'",
                1,
                &format!("id = ?1 AND ({STRAY_SQL}) IS NOT NULL"),
                &id,
            )?;
            let mut stmt = self.conn.prepare_cached(&format!(
                "UPDATE jobs SET status = 'dead', finished_at = ?1, updated_at = ?1,
                        locked_by = NULL, locked_until = NULL,
                        last_error = 'job ' || id || ': ' || ({STRAY_SQL})
                                     || '; dead without running'
                 WHERE id = ?2 AND ({STRAY_SQL}) IS NOT NULL
                 RETURNING id, job_type, attempts, last_error, queue"
            ))?;
            let mut rows = stmt.query(params![now, id])?;
            if let Some(row) = rows.next()? {
                let mut ignored = Vec::new();
                refused.push(Refused {
                    id: row.get(0)?,
                    job_type: lenient::text(row, 1, "job_type", &mut ignored)?,
                    attempts: lenient::int(row, 2, "attempts", &mut ignored)?,
                    error: lenient::text(row, 3, "last_error", &mut ignored)?,
                    queue: lenient::text(row, 4, "queue", &mut ignored)?,
                });
            }
        }
        self.group_refused_errors(&refused)?;
        Ok(refused)
    }
}
