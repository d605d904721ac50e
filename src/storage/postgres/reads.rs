//! [`ReadStore`] on PostgreSQL: one job, its attempts, filtered lists, counts, health
//! figures, grouped errors, activity. Finished jobs and attempt outcomes are read from the
//! counts the schema's triggers keep (`job_counts`, `attempt_counts`), as on SQLite.
//!
//! Column types are enforced by PostgreSQL, so a row another program wrote can only be
//! unusable through its payload (text that is not JSON): that is the one problem a
//! [`JobRecord`] read here reports.

use diesel::sql_types::{Array, BigInt, Nullable, Text};
use diesel::QueryableByName;

use super::job_row::{error_as_read, JobRow, JOB_COLUMNS};
use super::sql::{query, IntRow, Query};
use super::PgTx;
use crate::error::{Error, ErrorKind, Result};
use crate::job::{AttemptOutcome, AttemptRecord, JobRecord, JobStatus};
use crate::storage::jobs::deps::HELD_RUN_AT;
use crate::storage::reads::*;

/// Attempt outcomes that count as failures in rates and error figures.
const FAILED_OUTCOMES: &str = "('failed', 'timed_out', 'lost')";

/// A `usize` limit as a bigint (a limit past `i64::MAX` is no limit).
pub(crate) fn limit_int(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// `expr` with ASCII letters lowered, the way SQLite's `lower()` does (other letters are
/// left as they are, whatever the database's collation).
fn ascii_lower(expr: &str) -> String {
    format!("translate({expr}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')")
}

/// The condition "`last_error` contains parameter `$n`", ASCII letters matching in either
/// case, as plain text (no wildcards), as on SQLite.
pub(crate) fn error_contains(n: usize) -> String {
    column_contains("last_error", n)
}

/// The condition "text column `column` contains parameter `$n`", as [`error_contains`].
pub(crate) fn column_contains(column: &str, n: usize) -> String {
    format!(
        "strpos({}, {}) > 0",
        ascii_lower(column),
        ascii_lower(&format!("${n}"))
    )
}

/// A parameter of a [`Clause`].
enum Param {
    Int(i64),
    Text(String),
}

/// A `WHERE` clause built up with its parameters, numbered in the order they are bound.
#[derive(Default)]
pub(crate) struct Clause {
    pub(crate) sql: String,
    params: Vec<Param>,
}

impl Clause {
    /// A clause starting with fixed text.
    pub(crate) fn new(sql: &str) -> Clause {
        Clause {
            sql: sql.to_string(),
            ..Clause::default()
        }
    }

    /// Appends `text` with its `?` standing for a new bigint parameter.
    pub(crate) fn int(&mut self, text: &str, v: i64) {
        self.params.push(Param::Int(v));
        self.sql
            .push_str(&text.replace('?', &format!("${}", self.params.len())));
    }

    /// Appends `text` with its `?` standing for a new text parameter.
    pub(crate) fn text(&mut self, text: &str, v: &str) {
        self.params.push(Param::Text(v.to_string()));
        self.sql
            .push_str(&text.replace('?', &format!("${}", self.params.len())));
    }

    /// Appends "`last_error` contains `search`" (see [`error_contains`]).
    pub(crate) fn search(&mut self, search: &str) {
        self.params.push(Param::Text(search.to_string()));
        self.sql
            .push_str(&format!(" AND {}", error_contains(self.params.len())));
    }

    /// The narrowing of a filter shared by the lists: type, queue, search text, page.
    pub(crate) fn narrow(&mut self, filter: &JobFilter) {
        if let Some(job_type) = &filter.job_type {
            self.text(" AND job_type = ?", job_type);
        }
        if let Some(queue) = &filter.queue {
            self.text(" AND queue = ?", queue);
        }
        if let Some(search) = &filter.search {
            self.search(search);
        }
        if let Some(group) = &filter.error_group {
            self.text(" AND COALESCE(error_group, last_error) = ?", group);
        }
        if let Some(before) = filter.before_id {
            self.int(" AND id < ?", before);
        }
    }

    /// The statement `head` followed by the clause (and `tail`), with every parameter bound.
    pub(crate) fn query(&self, head: &str, tail: &str) -> Query<'static> {
        let mut q = query(&format!("{head}{}{tail}", self.sql));
        for p in &self.params {
            q = match p {
                Param::Int(v) => q.int(*v),
                Param::Text(v) => q.text(v),
            };
        }
        q
    }

    /// The number the next parameter gets.
    pub(crate) fn next_param(&self) -> usize {
        self.params.len() + 1
    }
}

/// One job by id.
pub(crate) fn job(tx: &PgTx<'_>, id: i64) -> Result<Option<JobRecord>> {
    Ok(tx
        .row::<JobRow>(query(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1")).int(id))?
        .map(JobRow::into_record))
}

/// Refuses to `act` on job `id` (requeue it, retry it) when its row holds values another
/// program wrote that no handler could use: the new attempt would only go dead again.
pub(crate) fn refuse_unusable(tx: &PgTx<'_>, id: i64, act: &str) -> Result<()> {
    let Some(job) = job(tx, id)? else {
        return Ok(());
    };
    if job.problems.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::InvalidState,
        format!(
            "job {id} cannot be {act}: {}; fix the row with SQL (see the rules in \
             schema.pg.sql) or discard it",
            job.problems.join("; ")
        ),
    ))
}

/// Jobs matching `clause`, newest first, at most `limit`.
pub(crate) fn jobs_where(tx: &PgTx<'_>, clause: &Clause, limit: usize) -> Result<Vec<JobRecord>> {
    let n = clause.next_param();
    let q = clause
        .query(
            &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE "),
            &format!(" ORDER BY id DESC LIMIT ${n}"),
        )
        .int(limit_int(limit));
    Ok(tx
        .rows::<JobRow>(q)?
        .into_iter()
        .map(JobRow::into_record)
        .collect())
}

#[derive(QueryableByName)]
struct AttemptRow {
    #[diesel(sql_type = BigInt)]
    job_id: i64,
    #[diesel(sql_type = BigInt)]
    attempt: i64,
    #[diesel(sql_type = Nullable<Text>)]
    worker: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    started_at: Option<i64>,
    #[diesel(sql_type = BigInt)]
    finished_at: i64,
    #[diesel(sql_type = Text)]
    outcome: String,
    #[diesel(sql_type = Nullable<Text>)]
    error: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    status_code: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    duration_ms: Option<i64>,
}

/// A live group of jobs: (queue, type, status), how many, how many are due, the oldest due
/// run time.
#[derive(QueryableByName)]
struct LiveRow {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
    #[diesel(sql_type = BigInt)]
    due: i64,
    /// Held until jobs they wait for end (run_at is `HELD_RUN_AT`).
    #[diesel(sql_type = BigInt)]
    held: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    oldest: Option<i64>,
}

#[derive(QueryableByName)]
struct CountRow {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct ExpiredRow {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct GroupRow {
    #[diesel(sql_type = Text)]
    grp: String,
    #[diesel(sql_type = Text)]
    latest: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
    #[diesel(sql_type = BigInt)]
    failed: i64,
    #[diesel(sql_type = BigInt)]
    dead: i64,
    #[diesel(sql_type = Array<Text>)]
    types: Vec<String>,
    #[diesel(sql_type = BigInt)]
    first_seen: i64,
    #[diesel(sql_type = BigInt)]
    last_change: i64,
}

#[derive(QueryableByName)]
struct HealthCounts {
    #[diesel(sql_type = BigInt)]
    due_now: i64,
    #[diesel(sql_type = BigInt)]
    scheduled: i64,
    #[diesel(sql_type = BigInt)]
    running: i64,
    #[diesel(sql_type = BigInt)]
    held: i64,
    #[diesel(sql_type = BigInt)]
    dead_awaiting: i64,
    #[diesel(sql_type = BigInt)]
    failed_attempts: i64,
    #[diesel(sql_type = BigInt)]
    succeeded: i64,
}

#[derive(QueryableByName)]
struct QueueTime {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = BigInt)]
    at: i64,
}

#[derive(QueryableByName)]
struct OutcomeRow {
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    outcome: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct BucketRow {
    #[diesel(sql_type = BigInt)]
    bucket: i64,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

impl PgTx<'_> {
    fn buckets(&self, sql: &str, since: i64, bucket_ms: i64) -> Result<BucketCounts> {
        Ok(self
            .rows::<BucketRow>(query(sql).int(since).int(bucket_ms))?
            .into_iter()
            .map(|r| (r.bucket, r.n))
            .collect())
    }
}

impl ReadStore for PgTx<'_> {
    fn job(&self, id: i64) -> Result<Option<JobRecord>> {
        job(self, id)
    }

    fn attempts(&self, job_id: i64) -> Result<Vec<AttemptRecord>> {
        let rows = self.rows::<AttemptRow>(
            query(concat!(
                "SELECT job_id, attempt, worker, started_at, finished_at, outcome, ",
                error_as_read!("error"),
                ", status_code, duration_ms FROM job_attempts WHERE job_id = $1 \
                 ORDER BY attempt, id",
            ))
            .int(job_id),
        )?;
        rows.into_iter()
            .map(|r| {
                let mut problems = Vec::new();
                Ok(AttemptRecord {
                    job_id: r.job_id,
                    attempt: r.attempt,
                    worker: r.worker,
                    started_at: r.started_at,
                    finished_at: r.finished_at,
                    outcome: AttemptOutcome::read_leniently(&r.outcome, &mut problems),
                    error: r.error,
                    status_code: r.status_code,
                    duration_ms: r.duration_ms,
                    problems,
                })
            })
            .collect()
    }

    fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        // The status word is written into the SQL (one of six fixed words), so the planner
        // can match a partial index; the extra conditions are those of the SQLite backend
        // (a dead or cancelled row without finished_at is not listed by status).
        let mut clause = Clause::new(match filter.status {
            None => "TRUE",
            Some(JobStatus::Queued) => "status = 'queued' AND status IN ('queued', 'failed')",
            Some(JobStatus::Failed) => "status = 'failed' AND status IN ('queued', 'failed')",
            Some(JobStatus::Running) => "status = 'running'",
            Some(JobStatus::Succeeded) => "status = 'succeeded'",
            Some(JobStatus::Dead) => "status = 'dead' AND finished_at IS NOT NULL",
            Some(JobStatus::Cancelled) => "status = 'cancelled' AND finished_at IS NOT NULL",
        });
        clause.narrow(filter);
        jobs_where(self, &clause, filter.limit)
    }

    fn status_counts(&self, now: i64) -> Result<(Vec<StatusCount>, LiveSummary)> {
        // Live jobs are grouped here, in one pass over them that also sums up what is due,
        // scheduled and running; finished ones come from the counts the triggers keep.
        let live_rows = self.rows::<LiveRow>(
            query(
                "SELECT queue, job_type, status, COUNT(*) AS n,
                        COUNT(*) FILTER (WHERE status <> 'running' AND run_at <= $1) AS due,
                        COUNT(*) FILTER (WHERE status <> 'running' AND run_at >= $2) AS held,
                        MIN(run_at) FILTER (WHERE status <> 'running' AND run_at <= $1) AS oldest
                 FROM jobs WHERE status IN ('queued', 'failed', 'running')
                 GROUP BY queue, job_type, status",
            )
            .int(now)
            .int(HELD_RUN_AT),
        )?;
        let mut counts: Vec<(String, String, String, i64)> = Vec::new();
        let mut live = LiveSummary::default();
        for r in live_rows {
            if r.status == "running" {
                live.running += r.n;
            } else {
                live.due_now += r.due;
                live.scheduled += r.n - r.due - r.held;
                if r.held > 0 {
                    match live.held.iter_mut().find(|(q, _)| *q == r.queue) {
                        Some((_, n)) => *n += r.held,
                        None => live.held.push((r.queue.clone(), r.held)),
                    }
                }
                if let Some(at) = r.oldest {
                    match live.oldest_due.iter_mut().find(|(q, _)| *q == r.queue) {
                        Some((_, oldest)) => *oldest = (*oldest).min(at),
                        None => live.oldest_due.push((r.queue.clone(), at)),
                    }
                }
            }
            counts.push((r.queue, r.job_type, r.status, r.n));
        }
        live.oldest_due.sort();
        live.held.sort();
        let finished = self.rows::<CountRow>(query(
            "SELECT queue, job_type, status, SUM(n)::bigint AS n FROM job_counts
             GROUP BY queue, job_type, status HAVING SUM(n) <> 0",
        ))?;
        counts.extend(
            finished
                .into_iter()
                .map(|r| (r.queue, r.job_type, r.status, r.n)),
        );
        Ok((crate::storage::reads::status_counts_of(counts), live))
    }

    fn dead_since(&self, since: i64) -> Result<i64> {
        Ok(self
            .row::<IntRow>(
                query("SELECT COUNT(*) AS v FROM jobs WHERE status = 'dead' AND finished_at >= $1")
                    .int(since),
            )?
            .map_or(0, |r| r.v))
    }

    fn expired_counts(&self, since: i64) -> Result<Vec<ExpiredCount>> {
        let rows = self.rows::<ExpiredRow>(
            query(
                "SELECT queue, job_type, COUNT(*) AS n FROM jobs
                 WHERE status = 'cancelled' AND finished_at >= $1 AND cancelled_by = 'deadline'
                 GROUP BY queue, job_type ORDER BY queue, job_type",
            )
            .int(since),
        )?;
        Ok(rows
            .into_iter()
            .map(|r| ExpiredCount {
                queue: r.queue,
                job_type: r.job_type,
                count: r.n,
            })
            .collect())
    }

    fn error_groups(&self, limit: usize) -> Result<Vec<ErrorGroup>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // The groups come from the error index. Then per group: its latest job's error,
        // from the index's (group, updated_at) order; and "first seen", one probe into the
        // attempts' error index, bounded by the group's own earliest change (a row refused
        // at the claim has no attempt). LEAST ignores a NULL probe.
        let rows = self.rows::<GroupRow>(
            query(
                "SELECT g.grp,
                        (SELECT substr(j.last_error, 1, 65536) FROM jobs j
                         WHERE COALESCE(j.error_group, j.last_error) = g.grp
                           AND j.last_error IS NOT NULL AND j.status IN ('failed', 'dead')
                           AND j.requeued_as IS NULL
                         ORDER BY j.updated_at DESC
                         LIMIT 1) AS latest,
                        g.n, g.failed, g.dead, g.types,
                        LEAST((SELECT MIN(a.finished_at) FROM job_attempts a
                               WHERE COALESCE(a.error_group, a.error) = g.grp
                                 AND a.error IS NOT NULL),
                              g.first_change) AS first_seen,
                        g.last_change
                 FROM (SELECT COALESCE(error_group, last_error) AS grp, COUNT(*) AS n,
                              COUNT(*) FILTER (WHERE status = 'failed') AS failed,
                              COUNT(*) FILTER (WHERE status = 'dead') AS dead,
                              array_agg(DISTINCT job_type) AS types,
                              MIN(updated_at) AS first_change,
                              MAX(updated_at) AS last_change
                       FROM jobs
                       WHERE last_error IS NOT NULL AND status IN ('failed', 'dead')
                         AND requeued_as IS NULL
                       GROUP BY COALESCE(error_group, last_error)
                       ORDER BY n DESC, last_change DESC
                       LIMIT $1) AS g
                 ORDER BY g.n DESC, g.last_change DESC",
            )
            .int(limit_int(limit)),
        )?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let mut job_types = r.types;
                job_types.sort();
                ErrorGroup::new(
                    r.grp,
                    r.latest,
                    (r.n, r.failed, r.dead),
                    job_types,
                    (r.first_seen, r.last_change),
                )
            })
            .collect())
    }

    fn health(&self, now: i64, since: i64, count_live: bool) -> Result<HealthRow> {
        // Held jobs' run_at is HELD_RUN_AT: they are counted apart, not as scheduled.
        let live = if count_live {
            format!(
                "(SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'failed') AND run_at <= $1)
                    AS due_now,
                 (SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'failed') AND run_at > $1
                                              AND run_at < {HELD_RUN_AT}) AS scheduled,
                 (SELECT COUNT(*) FROM jobs WHERE status = 'running') AS running,
                 (SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'failed')
                                              AND run_at >= {HELD_RUN_AT}) AS held"
            )
        } else {
            "0::bigint AS due_now, 0::bigint AS scheduled, 0::bigint AS running, \
             0::bigint AS held"
                .to_string()
        };
        // Dead jobs awaiting a person: the kept dead count less the few requeued ones (an
        // index holds those), instead of reading every dead row.
        let sql = format!(
            "SELECT {live},
                (SELECT COALESCE(SUM(n), 0) FROM job_counts WHERE status = 'dead')::bigint
                  - (SELECT COUNT(*) FROM jobs WHERE requeued_as IS NOT NULL AND status = 'dead')
                  AS dead_awaiting,
                (SELECT COUNT(*) FROM job_attempts
                  WHERE finished_at >= $2 AND outcome IN {FAILED_OUTCOMES}) AS failed_attempts,
                (SELECT COUNT(*) FROM jobs WHERE status = 'succeeded' AND finished_at >= $2)
                  AS succeeded"
        );
        let row = self
            .row::<HealthCounts>(query(&sql).int(now).int(since))?
            .ok_or_else(|| Error::new(ErrorKind::Database, "the health query returned no row"))?;
        Ok(HealthRow {
            due_now: row.due_now,
            scheduled: row.scheduled,
            running: row.running,
            held: row.held,
            dead_awaiting: row.dead_awaiting,
            failed_attempts: row.failed_attempts,
            succeeded: row.succeeded,
        })
    }

    fn oldest_due_by_queue(&self, now: i64) -> Result<Vec<(String, i64)>> {
        let mut rows: Vec<(String, i64)> = self
            .rows::<QueueTime>(
                query(
                    "SELECT queue, MIN(run_at) AS at FROM jobs
                     WHERE status IN ('queued', 'failed') AND run_at <= $1
                     GROUP BY queue",
                )
                .int(now),
            )?
            .into_iter()
            .map(|r| (r.queue, r.at))
            .collect();
        // In byte order, as SQLite sorts, whatever the database's collation.
        rows.sort();
        Ok(rows)
    }

    fn attempt_outcomes(&self) -> Result<Vec<(String, String, i64)>> {
        let mut rows: Vec<(String, String, i64)> = self
            .rows::<OutcomeRow>(query(
                "SELECT job_type, outcome, SUM(n)::bigint AS n FROM attempt_counts
                 WHERE outcome <> 'succeeded'
                 GROUP BY job_type, outcome HAVING SUM(n) <> 0
                 UNION ALL
                 SELECT job_type, 'succeeded', SUM(n)::bigint FROM job_counts
                 WHERE status = 'succeeded'
                 GROUP BY job_type HAVING SUM(n) <> 0",
            ))?
            .into_iter()
            .map(|r| (r.job_type, r.outcome, r.n))
            .collect();
        rows.sort();
        Ok(rows)
    }

    fn activity(
        &self,
        since: i64,
        bucket_ms: i64,
    ) -> Result<(BucketCounts, BucketCounts, BucketCounts)> {
        // (status, finished_at) is indexed for finished rows; attempts by finished_at.
        let succeeded = self.buckets(
            "SELECT (finished_at - $1) / $2 AS bucket, COUNT(*) AS n FROM jobs
             WHERE status = 'succeeded' AND finished_at >= $1
             GROUP BY 1 ORDER BY 1",
            since,
            bucket_ms,
        )?;
        // The same outcomes the health figures count as failures.
        let failed = self.buckets(
            &format!(
                "SELECT (finished_at - $1) / $2 AS bucket, COUNT(*) AS n FROM job_attempts
                 WHERE finished_at >= $1 AND outcome IN {FAILED_OUTCOMES}
                 GROUP BY 1 ORDER BY 1"
            ),
            since,
            bucket_ms,
        )?;
        // Requeued dead jobs stay dead (with `requeued_as`), so they still count when they
        // died.
        let dead = self.buckets(
            "SELECT (finished_at - $1) / $2 AS bucket, COUNT(*) AS n FROM jobs
             WHERE status = 'dead' AND finished_at >= $1
             GROUP BY 1 ORDER BY 1",
            since,
            bucket_ms,
        )?;
        Ok((succeeded, failed, dead))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clauses_number_their_parameters_in_order() {
        let mut c = Clause::new("status = 'dead'");
        c.narrow(
            &JobFilter::new()
                .job_type("t")
                .queue("q")
                .search("x")
                .before_id(9),
        );
        assert_eq!(
            c.sql,
            format!(
                "status = 'dead' AND job_type = $1 AND queue = $2 AND {} AND id < $4",
                error_contains(3)
            )
        );
        assert_eq!(c.next_param(), 5);
    }
}
