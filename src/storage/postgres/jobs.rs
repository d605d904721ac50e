//! [`JobStore`] on PostgreSQL: the `jobs` table's inserts (with idempotency keys), the claim,
//! the lease-fenced writes, the attempt history and the reaper.
//!
//! Unlike SQLite, many processes write at once (READ COMMITTED), so each read-then-write is
//! one statement or guarded by a unique index: an idempotency key by
//! `INSERT … ON CONFLICT` on `jobs_idempotency_key_idx`; a claim locks its rows
//! `FOR UPDATE SKIP LOCKED` and takes at most one job per group key, with
//! `jobs_group_key_running_idx` as the last word; every fenced write is one `UPDATE` whose
//! `WHERE` is the lease; the reaper locks the expired rows and writes their `lost` attempts
//! in the same statement. The finished-job and attempt counts are kept by the schema's
//! triggers, never here.

use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::QueryableByName;

use super::sql::{query, BoolRow, IntRow};
use super::PgTx;
use crate::error::{Error, ErrorKind, Result};
use crate::job::{clamp_run_at, NewJob, RunAt};
use crate::storage::jobs::{
    batch_error, AfterFailure, AttemptRow, ClaimRequest, Claimed, ClaimedRow, Inserted, JobStore,
    Lease, Success,
};

/// The largest `bigint`, for sums that must not overflow (a lease of a huge timeout).
const BIGINT_MAX: &str = "9223372036854775807";

/// The statuses whose jobs hold their idempotency key (the predicate of
/// `jobs_idempotency_key_idx`).
const KEY_HOLDING: &str = "('queued', 'running', 'failed', 'succeeded')";

/// Jobs without an idempotency key go in by statements of up to this many rows (arrays
/// bound as one parameter each, so the size is only a bound on one statement's memory).
const ROWS_PER_INSERT: usize = 1_000;

/// How often a claim runs before it leaves group-keyed jobs for the next round (see
/// [`PgTx::claim`]).
const CLAIM_TRIES: usize = 3;

impl PgTx<'_> {
    /// The job holding `key`: a live or succeeded job, or a remembered key of a pruned job.
    fn find_key_holder(&self, key: &str, now: i64) -> Result<Option<i64>> {
        let holder = self.row::<IntRow>(
            query(&format!(
                "SELECT id AS v FROM jobs WHERE idempotency_key = $1 AND status IN {KEY_HOLDING}"
            ))
            .text(key),
        )?;
        if let Some(row) = holder {
            return Ok(Some(row.v));
        }
        Ok(self
            .row::<IntRow>(
                query(
                    "SELECT job_id AS v FROM idempotency_keys WHERE key = $1 AND expires_at > $2",
                )
                .text(key)
                .int(now),
            )?
            .map(|row| row.v))
    }

    /// Inserts one job; with an idempotency key, nothing when the key is held (the holder's
    /// id instead). Racing inserts of one key in other processes wait for each other on the
    /// unique index, and the loser finds the winner.
    fn insert_one(&self, job: &NewJob, payload: &str, now: i64) -> Result<Inserted> {
        let Some(key) = job.idempotency_key.as_deref() else {
            let run_at = RunAt::resolve(job.run_at, now)?;
            let id = self.row::<IntRow>(insert_query(job, payload, run_at, now, ""))?;
            return match id {
                Some(row) => Ok(Inserted {
                    id: row.v,
                    created: true,
                }),
                None => Err(ignored(job)),
            };
        };
        if let Some(id) = self.find_key_holder(key, now)? {
            return Ok(Inserted { id, created: false });
        }
        let run_at = RunAt::resolve(job.run_at, now)?;
        let on_conflict = format!(
            "ON CONFLICT (idempotency_key)
               WHERE idempotency_key IS NOT NULL AND status IN {KEY_HOLDING} DO NOTHING"
        );
        // A holder found by the conflict may be cancelled before the lookup sees it: then the
        // key is free again, and the insert is tried once more.
        for _ in 0..3 {
            if let Some(row) =
                self.row::<IntRow>(insert_query(job, payload, run_at, now, &on_conflict))?
            {
                return Ok(Inserted {
                    id: row.v,
                    created: true,
                });
            }
            if let Some(id) = self.find_key_holder(key, now)? {
                return Ok(Inserted { id, created: false });
            }
        }
        Err(ignored(job))
    }

    /// Inserts jobs without idempotency keys by one statement; their ids in order. The ids
    /// are drawn from the table's sequence first and handed out in ascending order, so jobs
    /// later in the batch get larger ids (the claim's last tie-break), whatever other
    /// processes draw meanwhile.
    fn insert_rows(&self, jobs: &[NewJob], payloads: &[String], now: i64) -> Result<Vec<i64>> {
        let mut queues = Vec::with_capacity(jobs.len());
        let mut types = Vec::with_capacity(jobs.len());
        let mut priorities = Vec::with_capacity(jobs.len());
        let mut max_attempts = Vec::with_capacity(jobs.len());
        let mut run_ats = Vec::with_capacity(jobs.len());
        let mut timeouts = Vec::with_capacity(jobs.len());
        let mut group_keys = Vec::with_capacity(jobs.len());
        for job in jobs {
            queues.push(job.queue.clone());
            types.push(job.job_type.clone());
            priorities.push(job.priority);
            max_attempts.push(job.max_attempts);
            run_ats.push(RunAt::resolve(job.run_at, now)?);
            timeouts.push(job.timeout_ms);
            group_keys.push(job.group_key.clone());
        }
        let mut ids: Vec<i64> = self
            .rows::<IntRow>(
                query(
                    "WITH ids AS (
                         SELECT nextval(pg_get_serial_sequence('jobs', 'id')) AS id
                         FROM generate_series(1, $1)),
                     numbered AS (SELECT id, row_number() OVER (ORDER BY id) AS ord FROM ids)
                     INSERT INTO jobs (id, queue, job_type, payload, priority, max_attempts,
                                       run_at, timeout_ms, group_key, created_at, updated_at)
                     SELECT n.id, u.queue, u.job_type, u.payload, u.priority, u.max_attempts,
                            u.run_at, u.timeout_ms, u.group_key, $2, $2
                     FROM unnest($3, $4, $5, $6, $7, $8, $9, $10) WITH ORDINALITY
                          AS u(queue, job_type, payload, priority, max_attempts, run_at,
                               timeout_ms, group_key, ord)
                     JOIN numbered n ON n.ord = u.ord
                     RETURNING id AS v",
                )
                .int(jobs.len() as i64)
                .int(now)
                .texts(&queues)
                .texts(&types)
                .texts(payloads)
                .ints(&priorities)
                .ints(&max_attempts)
                .ints(&run_ats)
                .opt_ints(&timeouts)
                .opt_texts(&group_keys),
            )?
            .into_iter()
            .map(|row| row.v)
            .collect();
        ids.sort_unstable();
        if ids.len() != jobs.len() {
            return Err(Error::new(
                ErrorKind::Database,
                format!(
                    "a batch insert of {} jobs inserted {} rows",
                    jobs.len(),
                    ids.len()
                ),
            ));
        }
        Ok(ids)
    }

    /// One run of the claim (see [`JobStore::claim`]); `keyed` false leaves jobs with a
    /// group key alone.
    fn claim_rows(
        &self,
        req: &ClaimRequest<'_>,
        now: i64,
        keyed: bool,
    ) -> std::result::Result<Vec<ClaimRow>, DieselError> {
        // The lease is the job's timeout (its own, else its type's) plus the grace, capped
        // at the largest bigint rather than failing the claim on an absurd timeout. A row at
        // the largest attempt count keeps it (the claim's defect check makes it dead).
        let sql = format!(
            "WITH picked AS (
                SELECT j.id FROM jobs j
                WHERE j.queue = $1 AND j.status IN ('queued', 'failed') AND j.run_at <= $2
                  AND j.job_type = ANY($3)
                  AND NOT EXISTS (SELECT 1 FROM queues WHERE name = $1 AND paused = 1)
                  AND (j.group_key IS NULL OR ($4 AND
                       NOT EXISTS (SELECT 1 FROM jobs r
                                   WHERE r.group_key = j.group_key AND r.status = 'running')
                       AND j.id = (SELECT g.id FROM jobs g
                                   WHERE g.group_key = j.group_key
                                     AND g.status IN ('queued', 'failed') AND g.run_at <= $2
                                   ORDER BY g.priority DESC, g.run_at, g.id LIMIT 1)))
                ORDER BY j.priority DESC, j.run_at, j.id
                LIMIT $5
                FOR UPDATE OF j SKIP LOCKED)
             UPDATE jobs SET status = 'running',
                    attempts = CASE WHEN jobs.attempts < {BIGINT_MAX} THEN jobs.attempts + 1
                                    ELSE jobs.attempts END,
                    locked_by = $6,
                    locked_until = LEAST($2::numeric + COALESCE(jobs.timeout_ms,
                                       ($7::bigint[])[array_position($3, jobs.job_type)], $8)
                                   + $9, {BIGINT_MAX})::bigint,
                    started_at = $2, updated_at = $2
             FROM picked WHERE jobs.id = picked.id
             RETURNING jobs.id, jobs.queue, jobs.job_type, jobs.payload, jobs.priority,
                       jobs.run_at, jobs.attempts, jobs.max_attempts, jobs.timeout_ms,
                       jobs.locked_until, jobs.idempotency_key, jobs.group_key"
        );
        let q = query(&sql)
            .text(req.queue)
            .int(now)
            .texts(req.job_types)
            .bool(keyed)
            .int(i64::try_from(req.limit).unwrap_or(i64::MAX))
            .text(req.worker_id)
            .ints(req.type_timeouts_ms)
            .int(req.type_timeouts_ms.iter().copied().max().unwrap_or(0))
            .int(req.lease_grace_ms);
        self.rows_in_savepoint::<ClaimRow>(q)
    }
}

/// The statement inserting one job, with `conflict` (an `ON CONFLICT` clause, or nothing).
fn insert_query(
    job: &NewJob,
    payload: &str,
    run_at: i64,
    now: i64,
    conflict: &str,
) -> super::sql::Query<'static> {
    query(&format!(
        "INSERT INTO jobs (queue, job_type, payload, priority, max_attempts, run_at, created_at,
                           updated_at, timeout_ms, idempotency_key, group_key)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10)
         {conflict}
         RETURNING id AS v"
    ))
    .text(&job.queue)
    .text(&job.job_type)
    .text(payload)
    .int(job.priority)
    .int(job.max_attempts)
    .int(run_at)
    .int(now)
    .opt_int(job.timeout_ms)
    .opt_text(job.idempotency_key.as_deref())
    .opt_text(job.group_key.as_deref())
}

/// An insert that wrote nothing and found no holder of its key.
fn ignored(job: &NewJob) -> Error {
    Error::new(
        ErrorKind::Database,
        format!(
            "insert of job type {:?} was ignored by a constraint",
            job.job_type
        ),
    )
}

/// True when a claim failed only because another process claimed a job of the same group
/// key at the same time: the second running job of the key was refused by
/// `jobs_group_key_running_idx`, two claims waited for each other's index entries
/// (deadlock), or the wait for the other claim's commit ran past the lock timeout.
fn lost_a_group_key_race(e: &DieselError) -> bool {
    match e {
        DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, info) => {
            info.constraint_name() == Some("jobs_group_key_running_idx")
        }
        DieselError::DatabaseError(_, info) => {
            let message = info.message();
            message.contains("deadlock detected") || message.contains("lock timeout")
        }
        _ => false,
    }
}

/// A row of the claim's `RETURNING` list.
#[derive(QueryableByName, Debug)]
struct ClaimRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    payload: String,
    #[diesel(sql_type = BigInt)]
    priority: i64,
    #[diesel(sql_type = BigInt)]
    run_at: i64,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
    #[diesel(sql_type = BigInt)]
    max_attempts: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    timeout_ms: Option<i64>,
    #[diesel(sql_type = BigInt)]
    locked_until: i64,
    #[diesel(sql_type = Nullable<Text>)]
    idempotency_key: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    group_key: Option<String>,
}

impl ClaimRow {
    /// The claimed row, with a defect when its values cannot be handed to a handler. The
    /// schema's rules already refuse most such values on PostgreSQL; the checks stay for a
    /// schema whose rules were dropped.
    fn into_claimed(self, max_payload_bytes: usize) -> ClaimedRow {
        let mut problems = Vec::new();
        if self.attempts == i64::MAX {
            problems.push(format!(
                "column attempts holds {}, no further attempt can be counted",
                self.attempts
            ));
        }
        if self.max_attempts < 1 {
            problems.push(format!(
                "column max_attempts holds {}, not an integer of at least 1",
                self.max_attempts
            ));
        }
        if self.timeout_ms.is_some_and(|ms| ms < 1) {
            problems.push("column timeout_ms holds a value below 1 ms".to_string());
        }
        let size = self.payload.len();
        if size > max_payload_bytes {
            problems.push(format!(
                "column payload is {size} bytes, over this worker's limit of \
                 {max_payload_bytes} bytes"
            ));
        }
        ClaimedRow {
            id: self.id,
            queue: self.queue,
            job_type: self.job_type,
            payload: self.payload,
            attempt: self.attempts,
            max_attempts: self.max_attempts,
            timeout_ms: self.timeout_ms,
            locked_until: self.locked_until,
            idempotency_key: self.idempotency_key,
            group_key: self.group_key,
            defect: (!problems.is_empty()).then(|| problems.join("; ")),
        }
    }
}

/// The fence of every lease-fenced write: `$1` the job, `$2` the worker, `$3` the attempt.
const FENCE: &str = "id = $1 AND status = 'running' AND locked_by = $2 AND attempts = $3";

impl JobStore for PgTx<'_> {
    fn insert_job(&self, job: &NewJob, payload: &str, now: i64) -> Result<Inserted> {
        self.insert_one(job, payload, now)
    }

    /// A job with an idempotency key alone (it may find a holder instead), the runs of jobs
    /// between them by multi-row statements.
    fn insert_jobs(&self, jobs: &[NewJob], payloads: &[String], now: i64) -> Result<Vec<Inserted>> {
        let mut inserted = Vec::with_capacity(jobs.len());
        let mut next = 0;
        while next < jobs.len() {
            if jobs[next].idempotency_key.is_some() {
                inserted.push(self.insert_one(&jobs[next], &payloads[next], now)?);
                next += 1;
                continue;
            }
            let rows = jobs[next..]
                .iter()
                .take(ROWS_PER_INSERT)
                .take_while(|job| job.idempotency_key.is_none())
                .count();
            let chunk = &jobs[next..next + rows];
            let ids = self
                .insert_rows(chunk, &payloads[next..next + rows], now)
                .map_err(|e| batch_error(e, chunk, next))?;
            inserted.extend(ids.into_iter().map(|id| Inserted { id, created: true }));
            next += rows;
        }
        Ok(inserted)
    }

    /// Claims in one statement: the due rows are locked `FOR UPDATE SKIP LOCKED` (rows
    /// another process is claiming are passed over) in a CTE limited to `req.limit`, and
    /// only those are updated. At most one job per group key is taken, and none of a key
    /// with a running job; should another process claim a job of the same key at the same
    /// moment (each seeing the other's job as still waiting), the unique index refuses the
    /// second running job: that statement alone is undone (a savepoint) and the claim runs
    /// again, seeing the other claim; the last try leaves group-keyed jobs for the next
    /// round, so a round never fails on the race.
    fn claim(&self, req: &ClaimRequest<'_>, now: i64) -> Result<Claimed> {
        if req.limit == 0 || req.job_types.is_empty() {
            return Ok(Claimed::default());
        }
        let mut tries = 0;
        let mut rows = loop {
            tries += 1;
            let keyed = tries < CLAIM_TRIES;
            match self.claim_rows(req, now, keyed) {
                Ok(rows) => break rows,
                Err(e) if keyed && lost_a_group_key_race(&e) => {
                    log::debug!(
                        "litejobs: a claim on queue {:?} met another process's claim of the \
                         same group key ({e}); claiming again",
                        req.queue
                    );
                }
                Err(e) => return Err(e.into()),
            }
        };
        // RETURNING gives no order; hand jobs out in claim order.
        rows.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(a.run_at.cmp(&b.run_at))
                .then(a.id.cmp(&b.id))
        });
        let rows: Vec<ClaimedRow> = rows
            .into_iter()
            .map(|row| row.into_claimed(req.max_payload_bytes))
            .collect();
        Ok(Claimed {
            rows,
            refused: Vec::new(),
        })
    }

    fn any_due(&self, queue: &str, job_types: &[String], now: i64) -> Result<bool> {
        if job_types.is_empty() {
            return Ok(false);
        }
        let due = self.row::<BoolRow>(
            query(
                "SELECT EXISTS (SELECT 1 FROM jobs WHERE queue = $1
                                  AND status IN ('queued', 'failed') AND run_at <= $2
                                  AND job_type = ANY($3))
                        AND NOT EXISTS (SELECT 1 FROM queues WHERE name = $1 AND paused = 1)
                        AS v",
            )
            .text(queue)
            .int(now)
            .texts(job_types),
        )?;
        Ok(due.is_some_and(|row| row.v))
    }

    /// A lease already ending later is kept; a running job without one (written by another
    /// program) keeps none, as on SQLite, so the reaper still takes it.
    fn extend_lease(
        &self,
        lease: Lease<'_>,
        until: i64,
        progress: Option<&str>,
        now: i64,
    ) -> Result<bool> {
        let n = self.execute(
            query(&format!(
                "UPDATE jobs SET locked_until = CASE WHEN locked_until IS NULL THEN NULL
                                                     ELSE GREATEST(locked_until, $4) END,
                        progress = COALESCE($5, progress), updated_at = $6
                 WHERE {FENCE}"
            ))
            .int(lease.job_id)
            .text(lease.worker_id)
            .int(lease.attempt)
            .int(until)
            .opt_text(progress)
            .int(now),
        )?;
        Ok(n == 1)
    }

    /// One `UPDATE … FROM unnest(…)` for the whole batch, each row fenced by its own lease.
    fn succeed(&self, jobs: &[Success<'_>], now: i64) -> Result<Vec<bool>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = jobs.iter().map(|s| s.lease.job_id).collect();
        let attempts: Vec<i64> = jobs.iter().map(|s| s.lease.attempt).collect();
        let workers: Vec<String> = jobs.iter().map(|s| s.lease.worker_id.to_string()).collect();
        let results: Vec<Option<String>> =
            jobs.iter().map(|s| s.result.map(str::to_string)).collect();
        let progress: Vec<Option<String>> = jobs
            .iter()
            .map(|s| s.progress.map(str::to_string))
            .collect();
        let written = self.rows::<IntRow>(
            query(
                "UPDATE jobs SET status = 'succeeded', finished_at = $1, updated_at = $1,
                        locked_by = NULL, locked_until = NULL, result = done.result,
                        progress = COALESCE(done.progress, jobs.progress)
                 FROM unnest($2, $3, $4, $5, $6) AS done(id, attempt, worker, result, progress)
                 WHERE jobs.id = done.id AND jobs.status = 'running'
                   AND jobs.locked_by = done.worker AND jobs.attempts = done.attempt
                 RETURNING jobs.id AS v",
            )
            .int(now)
            .ints(&ids)
            .ints(&attempts)
            .texts(&workers)
            .opt_texts(&results)
            .opt_texts(&progress),
        )?;
        let written: std::collections::HashSet<i64> = written.into_iter().map(|r| r.v).collect();
        Ok(ids.iter().map(|id| written.contains(id)).collect())
    }

    fn fail(
        &self,
        lease: Lease<'_>,
        after: AfterFailure,
        error: &str,
        status_code: Option<i64>,
        now: i64,
    ) -> Result<bool> {
        // $4 is the next run time, or NULL when the job is dead.
        let retry_at = match after {
            AfterFailure::RetryAt(run_at) => Some(clamp_run_at(run_at)),
            AfterFailure::Dead => None,
        };
        let n = self.execute(
            query(&format!(
                "UPDATE jobs SET status = CASE WHEN $4::bigint IS NULL THEN 'dead' ELSE 'failed' END,
                        run_at = COALESCE($4, run_at),
                        finished_at = CASE WHEN $4::bigint IS NULL THEN $7 ELSE finished_at END,
                        last_error = $5, last_status_code = $6, updated_at = $7,
                        locked_by = NULL, locked_until = NULL
                 WHERE {FENCE}"
            ))
            .int(lease.job_id)
            .text(lease.worker_id)
            .int(lease.attempt)
            .opt_int(retry_at)
            .text(error)
            .opt_int(status_code)
            .int(now),
        )?;
        Ok(n == 1)
    }

    fn put_back(&self, lease: Lease<'_>, run_at: i64, now: i64) -> Result<bool> {
        let n = self.execute(
            query(&format!(
                "UPDATE jobs SET status = 'queued', attempts = attempts - 1, run_at = $4,
                        updated_at = $5, locked_by = NULL, locked_until = NULL
                 WHERE {FENCE}"
            ))
            .int(lease.job_id)
            .text(lease.worker_id)
            .int(lease.attempt)
            .int(clamp_run_at(run_at))
            .int(now),
        )?;
        Ok(n == 1)
    }

    fn cancel_running(&self, lease: Lease<'_>, reason: &str, now: i64) -> Result<bool> {
        let n = self.execute(
            query(&format!(
                "UPDATE jobs SET status = 'cancelled', finished_at = $4, updated_at = $4,
                        last_error = $5, locked_by = NULL, locked_until = NULL
                 WHERE {FENCE}"
            ))
            .int(lease.job_id)
            .text(lease.worker_id)
            .int(lease.attempt)
            .int(now)
            .text(reason),
        )?;
        Ok(n == 1)
    }

    /// One upsert: safe against another process remembering the same key.
    fn remember_key(&self, key: &str, job_id: i64, now: i64, window_ms: i64) -> Result<()> {
        self.execute(
            query(
                "INSERT INTO idempotency_keys (key, job_id, completed_at, expires_at)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id,
                     completed_at = excluded.completed_at, expires_at = excluded.expires_at",
            )
            .text(key)
            .int(job_id)
            .int(now)
            .int(now.saturating_add(window_ms)),
        )?;
        Ok(())
    }

    fn key_remembered(&self, key: &str, now: i64) -> Result<bool> {
        let found = self.row::<BoolRow>(
            query(
                "SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE key = $1 AND expires_at > $2)
                        AS v",
            )
            .text(key)
            .int(now),
        )?;
        Ok(found.is_some_and(|row| row.v))
    }

    fn insert_attempt(&self, row: &AttemptRow<'_>) -> Result<()> {
        self.execute(
            query(
                "INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at,
                                           outcome, error, status_code, duration_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .int(row.job_id)
            .int(row.attempt)
            .text(row.worker)
            .int(row.started_at)
            .int(row.finished_at)
            .text(row.outcome.as_str())
            .opt_text(row.error)
            .opt_int(row.status_code)
            .int(row.finished_at.saturating_sub(row.started_at).max(0)),
        )?;
        Ok(())
    }

    /// One statement: the expired rows are locked `FOR UPDATE SKIP LOCKED` (and their lease
    /// checked again on the locked version), moved on, and given their `lost` attempts
    /// from the locked values. A reaper in another process passes over the rows this one
    /// holds, and finds them no longer expired once it commits: no attempt is written twice.
    fn reap_expired(&self, now: i64) -> Result<usize> {
        let reaped = self.rows::<IntRow>(
            query(&format!(
                "WITH expired AS (
                    SELECT id, locked_by, started_at, attempts FROM jobs
                    WHERE status = 'running' AND (locked_until < $1 OR locked_until IS NULL)
                    FOR UPDATE SKIP LOCKED),
                 reaped AS (
                    UPDATE jobs SET
                        status = CASE WHEN jobs.attempts >= jobs.max_attempts THEN 'dead'
                                      ELSE 'failed' END,
                        run_at = CASE WHEN jobs.attempts >= jobs.max_attempts THEN jobs.run_at
                                      ELSE $1 END,
                        finished_at = CASE WHEN jobs.attempts >= jobs.max_attempts THEN $1
                                           ELSE jobs.finished_at END,
                        updated_at = $1,
                        last_error = CASE WHEN jobs.attempts >= jobs.max_attempts THEN
                                'the worker died or hung while running attempt ' || jobs.attempts
                                || ' of ' || jobs.max_attempts
                                || ' (lease expired); attempts spent'
                            ELSE 'the worker died or hung while running attempt '
                                || jobs.attempts || ' (lease expired)' END,
                        locked_by = NULL, locked_until = NULL
                    FROM expired
                    WHERE jobs.id = expired.id AND jobs.status = 'running'
                      AND (jobs.locked_until < $1 OR jobs.locked_until IS NULL)
                    RETURNING jobs.id, expired.locked_by, expired.started_at, expired.attempts)
                 INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at,
                                           outcome, error, duration_ms)
                 SELECT id, attempts, locked_by, started_at, $1, 'lost',
                        'lease expired: the worker ' || COALESCE(locked_by, '?')
                            || ' died or hung while running attempt ' || attempts,
                        GREATEST(LEAST($1::numeric - COALESCE(started_at, $1), {BIGINT_MAX}),
                                 -{BIGINT_MAX})::bigint
                 FROM reaped
                 RETURNING job_id AS v"
            ))
            .int(now),
        )?;
        Ok(reaped.len())
    }
}
