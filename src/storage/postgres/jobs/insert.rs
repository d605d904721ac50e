//! [`InsertStore`] on PostgreSQL: new jobs one at a time or a batch per statement, and the
//! idempotency keys, settled against writers in other processes by the unique index.

use super::super::sql::{query, BoolRow, IntRow, Query};
use super::super::PgTx;
use crate::error::{Error, ErrorKind, Result};
use crate::job::{resolve_expiry, NewJob, RunAt};
use crate::storage::jobs::deps::{insert_then_wait, waits_asked, HELD_RUN_AT};
use crate::storage::jobs::{batch_error, ExpireStore, InsertStore, Inserted};

/// The statuses whose jobs hold their idempotency key (the predicate of
/// `jobs_idempotency_key_idx`).
const KEY_HOLDING: &str = "('queued', 'running', 'failed', 'succeeded')";

/// Jobs without an idempotency key go in by statements of up to this many rows (arrays
/// bound as one parameter each, so the size is only a bound on one statement's memory).
const ROWS_PER_INSERT: usize = 1_000;

impl InsertStore for PgTx<'_> {
    /// With an idempotency key, nothing is inserted when the key is held (the holder's id
    /// comes back instead). Racing inserts of one key in other processes wait for each other on the
    /// unique index, and the loser finds the winner.
    fn insert_job(&self, job: &NewJob, payload: &str, now: i64) -> Result<Inserted> {
        let Some(key) = job.idempotency_key.as_deref() else {
            let run_at = RunAt::resolve(job.run_at, now)?;
            let expires_at = resolve_expiry(job, run_at, now)?;
            let id =
                self.row::<IntRow>(insert_query(job, payload, (run_at, expires_at), now, ""))?;
            return match id {
                Some(row) => Ok(Inserted::created(row.v, waits_asked(job) > 0)),
                None => Err(ignored(job)),
            };
        };
        if let Some(id) = self.find_key_holder(key, now)? {
            // A holder past its deadline never runs: it expires, and the key is free.
            if !self.expire_key_holder(key, now)? {
                return Ok(Inserted::found(id));
            }
            if let Some(id) = self.find_key_holder(key, now)? {
                return Ok(Inserted::found(id));
            }
        }
        let run_at = RunAt::resolve(job.run_at, now)?;
        let times = (run_at, resolve_expiry(job, run_at, now)?);
        let on_conflict = format!(
            "ON CONFLICT (idempotency_key)
               WHERE idempotency_key IS NOT NULL AND status IN {KEY_HOLDING} DO NOTHING"
        );
        // A holder found by the conflict may be cancelled before the lookup sees it: then the
        // key is free again, and the insert is tried once more.
        for _ in 0..3 {
            if let Some(row) =
                self.row::<IntRow>(insert_query(job, payload, times, now, &on_conflict))?
            {
                return Ok(Inserted::created(row.v, waits_asked(job) > 0));
            }
            if let Some(id) = self.find_key_holder(key, now)? {
                return Ok(Inserted::found(id));
            }
        }
        Err(ignored(job))
    }

    /// A job without an idempotency key, on its own (no transaction around it), goes in with
    /// its waits by one statement: one round trip, where a transaction of the insert, the
    /// checks and the waits took seven. The settings it gives the triggers end with its
    /// transaction, the statement's own: in a longer transaction they would pass later
    /// inserts of waits by plain SQL over the row check.
    ///
    /// The statement locks the jobs waited for (for share, in id order, as the row check
    /// does: none can end before it commits, and each one's end finds the new rows), gives
    /// the triggers litejobs' clock and `litejobs.counted`, inserts the job held (counting
    /// each job it names once) and its `job_deps` rows. When every job waited for was there
    /// and not ended, it also sets `litejobs.checked`, and the statement trigger, with
    /// nothing left to do, does not run: its queries cost more than the rest of the
    /// statement. Otherwise the trigger refuses a missing job and settles a wait on an
    /// ended one at once.
    fn insert_job_and_waits(&self, job: &NewJob, payload: &str, now: i64) -> Result<Inserted> {
        if job.after.is_empty() {
            return self.insert_job(job, payload, now);
        }
        if self.in_transaction
            || job.idempotency_key.is_some()
            || job.extra_waits > 0
            || job.placed.is_some()
        {
            // Several statements: only atomic in a transaction, which the queue opens for
            // these.
            debug_assert!(self.in_transaction, "a job's insert and its waits apart");
            return insert_then_wait(self, job, payload, now);
        }
        // A job named twice is one wait, the first one given.
        let mut on: Vec<i64> = Vec::with_capacity(job.after.len());
        let mut any_outcome: Vec<i64> = Vec::with_capacity(job.after.len());
        for &(depends_on, any) in &job.after {
            if !on.contains(&depends_on) {
                on.push(depends_on);
                any_outcome.push(i64::from(any));
            }
        }
        let run_at = RunAt::resolve(job.run_at, now)?;
        let expires_at = resolve_expiry(job, run_at, now)?;
        let inserted = {
            use diesel::RunQueryDsl;
            let mut conn = self.conn.borrow_mut();
            query(
                "WITH locked AS MATERIALIZED (
                     SELECT count(*) FILTER (
                                WHERE status NOT IN ('succeeded', 'dead', 'cancelled')) AS live
                     FROM (SELECT status FROM jobs WHERE id = ANY($14::bigint[])
                           ORDER BY id FOR SHARE) AS j
                 ), settings AS MATERIALIZED (
                     SELECT set_config('litejobs.now_ms', $13, true) AS now_ms,
                            set_config('litejobs.counted', 'on', true) AS counted,
                            set_config('litejobs.checked',
                                       CASE WHEN live = $11 THEN 'on' ELSE '' END, true) AS checked
                     FROM locked
                 ), job AS (
                     INSERT INTO jobs (queue, job_type, payload, priority, max_attempts, run_at,
                                       created_at, updated_at, timeout_ms, group_key, expires_at,
                                       waiting_for, held_run_at)
                     SELECT $1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10, $11, $12 FROM settings
                     RETURNING id
                 ), waits AS (
                     INSERT INTO job_deps (job_id, depends_on, any_outcome)
                     SELECT job.id, w.depends_on, w.any_outcome
                     FROM job, unnest($14::bigint[], $15::bigint[]) AS w (depends_on, any_outcome)
                 )
                 SELECT id AS v FROM job",
            )
            .text(&job.queue)
            .text(&job.job_type)
            .text(payload)
            .int(job.priority)
            .int(job.max_attempts)
            .int(HELD_RUN_AT)
            .int(now)
            .opt_int(job.timeout_ms)
            .opt_text(job.group_key.as_deref())
            .opt_int(expires_at)
            .int(i64::try_from(on.len()).unwrap_or(i64::MAX))
            .int(run_at)
            .text(&now.to_string())
            .ints(&on)
            .ints(&any_outcome)
            .load::<IntRow>(&mut **conn)
            .map_err(super::deps::trigger_refusal)
        };
        match inserted?.first() {
            Some(row) => Ok(Inserted::created(row.v, true)),
            None => Err(ignored(job)),
        }
    }

    /// A job with an idempotency key alone (it may find a holder instead), the runs of jobs
    /// between them by multi-row statements.
    fn insert_jobs(&self, jobs: &[NewJob], payloads: &[String], now: i64) -> Result<Vec<Inserted>> {
        let mut inserted = Vec::with_capacity(jobs.len());
        let mut next = 0;
        while next < jobs.len() {
            if jobs[next].idempotency_key.is_some() {
                inserted.push(self.insert_job(&jobs[next], &payloads[next], now)?);
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
            inserted.extend(
                ids.into_iter()
                    .zip(chunk)
                    .map(|(id, job)| Inserted::created(id, waits_asked(job) > 0)),
            );
            next += rows;
        }
        Ok(inserted)
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
}

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

    /// Inserts jobs without idempotency keys by one statement; their ids in order. The rows
    /// reach the insert in the batch's order (`ORDER BY` its ordinality) and the sequence
    /// only grows within a session, so jobs later in the batch get larger ids (the claim's
    /// last tie-break), whatever other processes draw meanwhile. A column whose value is the
    /// same for every job (most are: one queue, one type, no group key…) is bound once
    /// rather than as an array: unnesting thirteen arrays of a thousand took a third of the
    /// statement's time.
    fn insert_rows(&self, jobs: &[NewJob], payloads: &[String], now: i64) -> Result<Vec<i64>> {
        let mut queues = Vec::with_capacity(jobs.len());
        let mut types = Vec::with_capacity(jobs.len());
        let mut priorities = Vec::with_capacity(jobs.len());
        let mut max_attempts = Vec::with_capacity(jobs.len());
        let mut run_ats = Vec::with_capacity(jobs.len());
        let mut timeouts = Vec::with_capacity(jobs.len());
        let mut group_keys = Vec::with_capacity(jobs.len());
        let mut expires = Vec::with_capacity(jobs.len());
        let mut waits = Vec::with_capacity(jobs.len());
        let mut held_run_ats = Vec::with_capacity(jobs.len());
        let mut workflow_ids = Vec::with_capacity(jobs.len());
        let mut steps = Vec::with_capacity(jobs.len());
        for job in jobs {
            workflow_ids.push(job.placed.as_ref().map(|(workflow_id, _)| *workflow_id));
            steps.push(job.placed.as_ref().map(|(_, step)| step.clone()));
            queues.push(Some(job.queue.clone()));
            types.push(Some(job.job_type.clone()));
            priorities.push(Some(job.priority));
            max_attempts.push(Some(job.max_attempts));
            let run_at = RunAt::resolve(job.run_at, now)?;
            let (stored, held_run_at) = held_times(job, run_at);
            run_ats.push(Some(stored));
            held_run_ats.push(held_run_at);
            waits.push(Some(waits_asked(job)));
            timeouts.push(job.timeout_ms);
            group_keys.push(job.group_key.clone());
            expires.push(resolve_expiry(job, run_at, now)?);
        }
        let columns = [
            Column::texts("queue", queues),
            Column::texts("job_type", types),
            Column::ints("priority", priorities),
            Column::ints("max_attempts", max_attempts),
            Column::ints("run_at", run_ats),
            Column::ints("timeout_ms", timeouts),
            Column::texts("group_key", group_keys),
            Column::ints("expires_at", expires),
            Column::ints("waiting_for", waits),
            Column::ints("held_run_at", held_run_ats),
            Column::ints("workflow_id", workflow_ids),
            Column::texts("step", steps),
        ];
        // $1 the time, $2 the payloads, then each column: one value, or one array.
        let mut names = vec!["payload".to_string()];
        let mut values = vec!["u.payload".to_string()];
        let mut arrays = vec!["$2".to_string()];
        let mut array_names = vec!["payload".to_string()];
        for (i, column) in columns.iter().enumerate() {
            let param = format!("${}", i + 3);
            names.push(column.name.to_string());
            if column.uniform {
                values.push(format!("{param}::{}", column.sql_type()));
            } else {
                values.push(format!("u.{}", column.name));
                arrays.push(param);
                array_names.push(column.name.to_string());
            }
        }
        let sql = format!(
            "INSERT INTO jobs ({names}, created_at, updated_at)
             SELECT {values}, $1, $1
             FROM unnest({arrays}) WITH ORDINALITY AS u({array_names}, ord)
             ORDER BY u.ord
             RETURNING id AS v",
            names = names.join(", "),
            values = values.join(", "),
            arrays = arrays.join(", "),
            array_names = array_names.join(", "),
        );
        let mut q = query(&sql).int(now).texts(payloads);
        for column in &columns {
            q = column.bind(q);
        }
        let mut ids: Vec<i64> = self
            .rows::<IntRow>(q)?
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
}

/// One column of a batch insert: its values, bound as one value when they are all equal.
struct Column {
    name: &'static str,
    values: Values,
    /// Every job has the same value: bound once.
    uniform: bool,
}

enum Values {
    Texts(Vec<Option<String>>),
    Ints(Vec<Option<i64>>),
}

impl Column {
    fn texts(name: &'static str, values: Vec<Option<String>>) -> Column {
        let uniform = values.windows(2).all(|w| w[0] == w[1]);
        Column {
            name,
            values: Values::Texts(values),
            uniform,
        }
    }

    fn ints(name: &'static str, values: Vec<Option<i64>>) -> Column {
        let uniform = values.windows(2).all(|w| w[0] == w[1]);
        Column {
            name,
            values: Values::Ints(values),
            uniform,
        }
    }

    fn sql_type(&self) -> &'static str {
        match self.values {
            Values::Texts(_) => "text",
            Values::Ints(_) => "bigint",
        }
    }

    /// Binds the one value, or the array.
    fn bind<'a>(&self, q: Query<'a>) -> Query<'a> {
        match &self.values {
            Values::Texts(v) if self.uniform => q.opt_text(v.first().and_then(Option::as_deref)),
            Values::Ints(v) if self.uniform => q.opt_int(v.first().copied().flatten()),
            Values::Texts(v) => q.opt_texts(v),
            Values::Ints(v) => q.opt_ints(v),
        }
    }
}

/// The `run_at` to store for `job` due at `run_at`, and its `held_run_at`: a job that waits
/// for others goes in held, its waits counted (the waits' trigger then only takes off those
/// already ended), which saves an update of its row per wait statement.
fn held_times(job: &NewJob, run_at: i64) -> (i64, Option<i64>) {
    if waits_asked(job) > 0 {
        (HELD_RUN_AT, Some(run_at))
    } else {
        (run_at, None)
    }
}

/// The statement inserting one job due at `run_at` with deadline `expires_at` (`times`),
/// with `conflict` (an `ON CONFLICT` clause, or nothing); held if it waits for others.
fn insert_query(
    job: &NewJob,
    payload: &str,
    (run_at, expires_at): (i64, Option<i64>),
    now: i64,
    conflict: &str,
) -> Query<'static> {
    let (stored_run_at, held_run_at) = held_times(job, run_at);
    query(&format!(
        "INSERT INTO jobs (queue, job_type, payload, priority, max_attempts, run_at, created_at,
                           updated_at, timeout_ms, idempotency_key, group_key, expires_at,
                           waiting_for, held_run_at, workflow_id, step)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10, $11, $12, $13, $14, $15)
         {conflict}
         RETURNING id AS v"
    ))
    .text(&job.queue)
    .text(&job.job_type)
    .text(payload)
    .int(job.priority)
    .int(job.max_attempts)
    .int(stored_run_at)
    .int(now)
    .opt_int(job.timeout_ms)
    .opt_text(job.idempotency_key.as_deref())
    .opt_text(job.group_key.as_deref())
    .opt_int(expires_at)
    .int(waits_asked(job))
    .opt_int(held_run_at)
    .opt_int(job.placed.as_ref().map(|(workflow_id, _)| *workflow_id))
    .opt_text(job.placed.as_ref().map(|(_, step)| step.as_str()))
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
