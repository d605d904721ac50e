//! Reads for people and tools: one job, its attempts, filtered lists, stats.

use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{params, params_from_iter, OptionalExtension, Row};

use super::job_row::{error_as_read, job_from_row, JOB_COLUMNS};
use super::{lenient, SqliteTx};
use crate::error::Result;
use crate::job::{AttemptOutcome, AttemptRecord, JobRecord, JobStatus};
use crate::storage::jobs::deps::HELD_RUN_AT;
use crate::storage::reads::{
    BucketCounts, ErrorGroup, ExpiredCount, HealthRow, JobFilter, LiveSummary, ReadStore,
    StatusCount,
};

/// Adds one live row (queue, job type, status, run time or NULL when running) to `live`.
fn summarize(live: &mut LiveSummary, row: &Row<'_>, now: i64) -> rusqlite::Result<()> {
    let Some(run_at) = lenient_ms(row, 3)? else {
        live.running += 1;
        return Ok(());
    };
    let queue: &[u8] = match row.get_ref(0)? {
        ValueRef::Text(bytes) => bytes,
        _ => b"",
    };
    if run_at >= HELD_RUN_AT {
        // Held until jobs it waits for end: neither due nor scheduled.
        match live.held.iter_mut().find(|(q, _)| q.as_bytes() == queue) {
            Some((_, n)) => *n += 1,
            None => live.held.push((lenient::label(row, 0)?, 1)),
        }
        return Ok(());
    }
    if run_at > now {
        live.scheduled += 1;
        return Ok(());
    }
    live.due_now += 1;
    // Rows stream in queue order from the due index: the entry to update is the last one.
    match live.oldest_due.last_mut() {
        Some((q, oldest)) if q.as_bytes() == queue => *oldest = (*oldest).min(run_at),
        _ => match live
            .oldest_due
            .iter_mut()
            .find(|(q, _)| q.as_bytes() == queue)
        {
            Some((_, oldest)) => *oldest = (*oldest).min(run_at),
            None => live.oldest_due.push((lenient::label(row, 0)?, run_at)),
        },
    }
    Ok(())
}

/// A run time read leniently: an integer, or a real or text another program wrote.
fn lenient_ms(row: &Row<'_>, i: usize) -> rusqlite::Result<Option<i64>> {
    Ok(match row.get_ref(i)? {
        ValueRef::Null => None,
        ValueRef::Integer(v) => Some(v),
        ValueRef::Real(v) => Some(v as i64),
        ValueRef::Text(t) => std::str::from_utf8(t)
            .ok()
            .and_then(|t| t.trim().parse::<f64>().ok())
            .map(|v| v as i64)
            .or(Some(0)),
        ValueRef::Blob(_) => Some(0),
    })
}

/// Adds one `(queue, job_type, status)` row to `counts`. There are few distinct keys (queues
/// times types times three statuses), so a linear search beats hashing owned strings; text
/// columns are compared in place, and anything else is read leniently.
fn tally(counts: &mut Vec<(String, String, String, i64)>, row: &Row<'_>) -> rusqlite::Result<()> {
    let as_text = |i: usize| -> rusqlite::Result<Option<&str>> {
        Ok(match row.get_ref(i)? {
            ValueRef::Text(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        })
    };
    if let (Some(queue), Some(job_type), Some(status)) = (as_text(0)?, as_text(1)?, as_text(2)?) {
        match counts
            .iter_mut()
            .find(|(q, t, s, _)| q == queue && t == job_type && s == status)
        {
            Some(entry) => entry.3 += 1,
            None => counts.push((
                queue.to_string(),
                job_type.to_string(),
                status.to_string(),
                1,
            )),
        }
        return Ok(());
    }
    let key = (
        lenient::label(row, 0)?,
        lenient::label(row, 1)?,
        lenient::label(row, 2)?,
    );
    match counts
        .iter_mut()
        .find(|(q, t, s, _)| (q, t, s) == (&key.0, &key.1, &key.2))
    {
        Some(entry) => entry.3 += 1,
        None => counts.push((key.0, key.1, key.2, 1)),
    }
    Ok(())
}

/// The condition "in error group `?`": the key [`ErrorGroup::group`] holds, which the error
/// indexes of jobs and attempts are built on.
pub(crate) const GROUP_IS: &str = " AND COALESCE(error_group, last_error) = ?";

/// Attempt outcomes that count as failures in rates and error figures.
const FAILED_OUTCOMES: &str = "('failed', 'timed_out', 'lost')";

impl ReadStore for SqliteTx<'_> {
    /// One job by id.
    fn job(&self, id: i64) -> Result<Option<JobRecord>> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1"))?;
        Ok(stmt.query_row([id], job_from_row).optional()?)
    }

    /// A job's attempt history, oldest first.
    fn attempts(&self, job_id: i64) -> Result<Vec<AttemptRecord>> {
        let mut stmt = self.conn.prepare_cached(concat!(
            "SELECT job_id, attempt, worker, started_at, finished_at, outcome, ",
            error_as_read!("error"),
            ", status_code, duration_ms FROM job_attempts WHERE job_id = ?1 ORDER BY attempt, id",
        ))?;
        // Whatever another program wrote into the history is shown, never a failed read.
        let rows = stmt.query_map([job_id], |row| {
            let mut problems = Vec::new();
            let p = &mut problems;
            let outcome = lenient::text(row, 5, "outcome", p)?;
            Ok(AttemptRecord {
                job_id: row.get(0)?,
                attempt: lenient::int(row, 1, "attempt", p)?,
                worker: lenient::opt_text(row, 2, "worker", p)?,
                started_at: lenient::opt_int(row, 3, "started_at", p)?,
                finished_at: lenient::int(row, 4, "finished_at", p)?,
                outcome: AttemptOutcome::read_leniently(&outcome, p),
                error: lenient::opt_text(row, 6, "error", p)?,
                status_code: lenient::opt_int(row, 7, "status_code", p)?,
                duration_ms: lenient::opt_int(row, 8, "duration_ms", p)?,
                problems,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Jobs matching a filter, newest first.
    fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        let mut sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE 1 = 1");
        let mut args: Vec<SqlValue> = Vec::new();
        let mut bind = |sql: &mut String, clause: &str, value: SqlValue| {
            args.push(value);
            sql.push_str(&clause.replace('?', &format!("?{}", args.len())));
        };
        if let Some(status) = filter.status {
            // The status word is written into the SQL (it is one of six fixed words), so the
            // planner can match a partial index: the due index for waiting jobs, the lease index
            // for running ones, the finished index for the rarer finished statuses. Succeeded
            // jobs are most rows: walking ids down finds the newest ones soonest.
            sql.push_str(match status {
                JobStatus::Queued => " AND status = 'queued' AND status IN ('queued', 'failed')",
                JobStatus::Failed => " AND status = 'failed' AND status IN ('queued', 'failed')",
                JobStatus::Running => " AND status = 'running'",
                JobStatus::Succeeded => " AND status = 'succeeded'",
                JobStatus::Dead => " AND status = 'dead' AND finished_at IS NOT NULL",
                JobStatus::Cancelled => " AND status = 'cancelled' AND finished_at IS NOT NULL",
            });
        }
        if let Some(job_type) = &filter.job_type {
            bind(
                &mut sql,
                " AND job_type = ?",
                SqlValue::Text(job_type.clone()),
            );
        }
        if let Some(queue) = &filter.queue {
            bind(&mut sql, " AND queue = ?", SqlValue::Text(queue.clone()));
        }
        if let Some(search) = &filter.search {
            bind(
                &mut sql,
                " AND instr(lower(last_error), lower(?)) > 0",
                SqlValue::Text(search.clone()),
            );
        }
        if let Some(group) = &filter.error_group {
            bind(&mut sql, GROUP_IS, SqlValue::Text(group.clone()));
        }
        if let Some(before) = filter.before_id {
            bind(&mut sql, " AND id < ?", SqlValue::Integer(before));
        }
        bind(
            &mut sql,
            " ORDER BY id DESC LIMIT ?",
            SqlValue::Integer(filter.limit as i64),
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(params_from_iter(args), job_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// How many jobs of each queue and type are in each status.
    fn status_counts(&self, now: i64) -> Result<(Vec<StatusCount>, LiveSummary)> {
        // Finished jobs are read from the counts kept as they finish; live ones (a tenth of a
        // big table at most, in practice far less) are counted here as they stream from the due
        // index (which covers every column read) and the lease index, and the same pass sums up
        // what is due, scheduled and running. Counting them in Rust is three times faster than
        // SQLite's GROUP BY, which sorts every row in a temporary B-tree first. A file of schema
        // 3 or 4 (opened read-only) has no kept counts: count every row there.
        let mut counts: Vec<(String, String, String, i64)> = Vec::new();
        let live = if self.counts_kept()? {
            let mut live = LiveSummary::default();
            let mut stmt = self.conn.prepare_cached(
                "SELECT queue, job_type, status, run_at FROM jobs WHERE status IN ('queued', 'failed')
                 UNION ALL
                 SELECT queue, job_type, status, NULL FROM jobs WHERE status = 'running'",
            )?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                tally(&mut counts, row)?;
                summarize(&mut live, row, now)?;
            }
            live.oldest_due.sort();
            live.held.sort();
            self.push_counts(
                "SELECT queue, job_type, status, n FROM job_counts WHERE n <> 0",
                &mut counts,
            )?;
            live
        } else {
            self.push_counts("SELECT queue, job_type, status, COUNT(*) FROM jobs GROUP BY queue, job_type, status",
                &mut counts,
            )?;
            let row = self.health(now, now, true)?;
            LiveSummary {
                due_now: row.due_now,
                scheduled: row.scheduled,
                running: row.running,
                oldest_due: self.oldest_due_by_queue(now)?,
                // A file this old has no jobs that wait for others.
                held: Vec::new(),
            }
        };
        Ok((crate::storage::reads::status_counts_of(counts), live))
    }

    /// Jobs that became dead at `since` or later.
    fn dead_since(&self, since: i64) -> Result<i64> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT COUNT(*) FROM jobs WHERE status = 'dead' AND finished_at >= ?1",
            )?
            .query_row([since], |row| row.get(0))?)
    }

    /// Rows another program finished may hold any value: their queue and type are read as
    /// labels.
    fn expired_counts(&self, since: i64) -> Result<Vec<ExpiredCount>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT queue, job_type, COUNT(*) FROM jobs
             WHERE status = 'cancelled' AND finished_at >= ?1 AND cancelled_by = 'deadline'
             GROUP BY queue, job_type ORDER BY queue, job_type",
        )?;
        let counts = stmt
            .query_map([since], |row| {
                Ok(ExpiredCount {
                    queue: lenient::label(row, 0)?,
                    job_type: lenient::label(row, 1)?,
                    count: row.get(2)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(counts)
    }

    /// The most common errors among failed and dead jobs, by group (requeued dead jobs left
    /// out).
    fn error_groups(&self, limit: usize) -> Result<Vec<ErrorGroup>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // The groups come from the error index alone (failed and dead rows only). Then per
        // group: its latest job's error, from the index's (group, updated_at) order; and
        // "first seen", one probe into the attempts' error index, bounded below by the
        // group's own earliest change (a row refused at the claim has no attempt).
        let mut stmt = self.conn.prepare_cached(
            "SELECT CAST(g.grp AS TEXT),
                    (SELECT substr(CAST(j.last_error AS TEXT), 1, 65536) FROM jobs j
                     WHERE COALESCE(j.error_group, j.last_error) = g.grp
                       AND j.last_error IS NOT NULL AND j.status IN ('failed', 'dead')
                       AND j.requeued_as IS NULL
                     ORDER BY j.updated_at DESC
                     LIMIT 1),
                    g.n, g.failed, g.dead, g.types,
                    COALESCE(MIN((SELECT MIN(a.finished_at) FROM job_attempts a
                                  WHERE COALESCE(a.error_group, a.error) = g.grp
                                    AND a.error IS NOT NULL),
                                 g.first_change),
                             g.first_change),
                    g.last_change
             FROM (SELECT COALESCE(error_group, last_error) AS grp, COUNT(*) AS n,
                          SUM(status = 'failed') AS failed, SUM(status = 'dead') AS dead,
                          json_group_array(DISTINCT CAST(job_type AS TEXT)) AS types,
                          CAST(MIN(updated_at) AS INTEGER) AS first_change,
                          CAST(MAX(updated_at) AS INTEGER) AS last_change
                   FROM jobs
                   WHERE last_error IS NOT NULL AND status IN ('failed', 'dead')
                     AND requeued_as IS NULL
                   GROUP BY COALESCE(error_group, last_error)
                   ORDER BY n DESC, last_change DESC
                   LIMIT ?1) AS g
             ORDER BY g.n DESC, g.last_change DESC",
        )?;
        let rows = stmt.query_map([i64::try_from(limit).unwrap_or(i64::MAX)], |row| {
            Ok((
                lenient::label(row, 0)?,
                lenient::label(row, 1)?,
                row.get::<_, i64>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, i64>(4)?,
                lenient::label(row, 5)?,
                row.get::<_, i64>(6)?,
                row.get::<_, i64>(7)?,
            ))
        })?;
        let mut groups = Vec::new();
        for row in rows {
            let (group, error, count, failed, dead, types, first_seen_at, last_seen_at) = row?;
            let mut job_types: Vec<String> = serde_json::from_str(&types).unwrap_or_default();
            job_types.sort();
            groups.push(ErrorGroup::new(
                group,
                error,
                (count, failed, dead),
                job_types,
                (first_seen_at, last_seen_at),
            ));
        }
        Ok(groups)
    }

    /// Waiting, running and dead counts now; failed attempts and successes since `since`.
    fn health(&self, now: i64, since: i64, count_live: bool) -> Result<HealthRow> {
        // Dead jobs awaiting a person: the kept dead count less the few requeued ones (an
        // index holds those), instead of reading every dead row.
        let dead_awaiting = if self.counts_kept()? {
            "(SELECT COALESCE(SUM(n), 0) FROM job_counts WHERE status = 'dead')
             - (SELECT COUNT(*) FROM jobs WHERE requeued_as IS NOT NULL AND status = 'dead')"
        } else {
            "(SELECT COUNT(*) FROM jobs WHERE status = 'dead' AND requeued_as IS NULL)"
        };
        // Held jobs' run_at is HELD_RUN_AT: they are counted apart, not as scheduled.
        let live = if count_live {
            format!(
                "(SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'failed') AND run_at <= ?1),
                (SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'failed') AND run_at > ?1
                                             AND run_at < {HELD_RUN_AT}),
                (SELECT COUNT(*) FROM jobs WHERE status = 'running'),
                (SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'failed')
                                             AND run_at >= {HELD_RUN_AT})"
            )
        } else {
            "0, 0, 0, 0".to_string()
        };
        let sql = format!(
            "SELECT
                {live},
                {dead_awaiting},
                (SELECT COUNT(*) FROM job_attempts WHERE finished_at >= ?2
                                                     AND outcome IN {FAILED_OUTCOMES}),
                (SELECT COUNT(*) FROM jobs WHERE status = 'succeeded' AND finished_at >= ?2)"
        );
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .query_row(params![now, since], |row| {
                Ok(HealthRow {
                    due_now: row.get(0)?,
                    scheduled: row.get(1)?,
                    running: row.get(2)?,
                    held: row.get(3)?,
                    dead_awaiting: row.get(4)?,
                    failed_attempts: row.get(5)?,
                    succeeded: row.get(6)?,
                })
            })?)
    }

    /// The oldest due job's run time per queue (only queues with due jobs).
    fn oldest_due_by_queue(&self, now: i64) -> Result<Vec<(String, i64)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT queue, CAST(MIN(run_at) AS INTEGER) FROM jobs
             WHERE status IN ('queued', 'failed') AND run_at <= ?1
             GROUP BY queue ORDER BY queue",
        )?;
        let rows = stmt.query_map([now], |row| Ok((lenient::label(row, 0)?, row.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Attempt outcomes by job type: history rows, plus one success per succeeded job (a
    /// first-try success has no history row; a later success has one, counted once here).
    fn attempt_outcomes(&self) -> Result<Vec<(String, String, i64)>> {
        let sql = if self.counts_kept()? {
            "SELECT job_type, outcome, n FROM attempt_counts WHERE outcome != 'succeeded' AND n <> 0
             UNION ALL
             SELECT job_type, 'succeeded', SUM(n) FROM job_counts WHERE status = 'succeeded'
             GROUP BY job_type HAVING SUM(n) <> 0
             ORDER BY 1, 2"
        } else {
            "SELECT j.job_type, a.outcome, COUNT(*) FROM job_attempts a JOIN jobs j ON j.id = a.job_id
             WHERE a.outcome != 'succeeded' GROUP BY j.job_type, a.outcome
             UNION ALL
             SELECT job_type, 'succeeded', COUNT(*) FROM jobs WHERE status = 'succeeded'
             GROUP BY job_type
             ORDER BY 1, 2"
        };
        let mut stmt = self.conn.prepare_cached(sql)?;
        let rows = stmt.query_map([], |row| {
            Ok((lenient::label(row, 0)?, row.get(1)?, row.get(2)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Finished work since `since` in buckets of `bucket_ms`: `(succeeded, failed attempts,
    /// dead)`, each as `(bucket index, count)` pairs for the buckets that have any.
    fn activity(
        &self,
        since: i64,
        bucket_ms: i64,
    ) -> Result<(BucketCounts, BucketCounts, BucketCounts)> {
        // (status, finished_at) is indexed for finished rows: a covering index range scan.
        let succeeded = self.grouped(
            "SELECT (CAST(finished_at AS INTEGER) - ?1) / ?2, COUNT(*) FROM jobs
             WHERE status = 'succeeded' AND finished_at >= ?1
             GROUP BY 1",
            since,
            bucket_ms,
        )?;
        // The same outcomes the health figures count as failures.
        let failed = self.grouped(
            "SELECT (CAST(finished_at AS INTEGER) - ?1) / ?2, COUNT(*) FROM job_attempts
             WHERE finished_at >= ?1 AND outcome IN ('failed', 'timed_out', 'lost')
             GROUP BY 1",
            since,
            bucket_ms,
        )?;
        // Requeued dead jobs stay dead (with `requeued_as`), so they still count when they died.
        let dead = self.grouped(
            "SELECT (CAST(finished_at AS INTEGER) - ?1) / ?2, COUNT(*) FROM jobs
             WHERE status = 'dead' AND finished_at >= ?1
             GROUP BY 1",
            since,
            bucket_ms,
        )?;
        Ok((succeeded, failed, dead))
    }
}

impl SqliteTx<'_> {
    /// Refuses to `act` on job `id` (requeue it, retry it) when its row holds values another
    /// program wrote that no handler could use: the new attempt would only go dead again.
    pub(super) fn refuse_unusable(&self, id: i64, act: &str) -> Result<()> {
        let Some(job) = self.job(id)? else {
            return Ok(());
        };
        if job.problems.is_empty() {
            return Ok(());
        }
        Err(crate::Error::new(
            crate::ErrorKind::InvalidState,
            format!(
                "job {id} cannot be {act}: {}; fix the row with SQL (see the rules in schema.sql) \
                 or discard it",
                job.problems.join("; ")
            ),
        ))
    }

    fn push_counts(
        &self,
        sql: &str,
        counts: &mut Vec<(String, String, String, i64)>,
    ) -> Result<()> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let rows = stmt.query_map([], |row| {
            Ok((
                lenient::label(row, 0)?,
                lenient::label(row, 1)?,
                lenient::label(row, 2)?,
                row.get::<_, i64>(3)?,
            ))
        })?;
        for entry in rows {
            counts.push(entry?);
        }
        Ok(())
    }

    /// True when the file keeps counts (`job_counts` and `attempt_counts`, schema 5 and later).
    fn counts_kept(&self) -> Result<bool> {
        Ok(self.conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'job_counts')",
            )?
            .query_row([], |row| row.get(0))?)
    }

    fn grouped(&self, sql: &str, since: i64, bucket_ms: i64) -> Result<BucketCounts> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let rows = stmt.query_map(params![since, bucket_ms], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

#[cfg(test)]
mod tests {
    use crate::handler::MAX_ERROR_BYTES;
    use crate::storage::sqlite::job_row::JOB_COLUMNS;

    /// The read-side cut is SQL text and cannot name the constant: it must say the same.
    #[test]
    fn errors_are_read_cut_at_the_length_litejobs_keeps() {
        let over = format!("> {MAX_ERROR_BYTES} ");
        assert!(JOB_COLUMNS.contains(&over), "{JOB_COLUMNS}");
        #[cfg(feature = "postgres")]
        assert!(
            crate::storage::postgres::job_row::JOB_COLUMNS.contains(&over),
            "{}",
            crate::storage::postgres::job_row::JOB_COLUMNS
        );
    }
}
