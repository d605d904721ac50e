//! [`DependencyStore`] on SQLite. litejobs' connections run with triggers off, so this is
//! where its own writes hold, release and cancel dependants; the schema's `job_deps`
//! triggers do the insert side of the same for other programs. SQLite's one writer makes
//! each read-then-write here safe. Settling the waits on jobs that end is in
//! [`super::settle`].

use std::collections::{BTreeMap, VecDeque};

use rusqlite::params;

use crate::error::{Error, ErrorKind, Result};
use crate::storage::jobs::deps::{
    check_wait, dependency_ended_reason, DependencyStore, Edge, Settled, CANCELLED_BY_DEPENDENCY,
    DELETED, HELD_RUN_AT,
};
use crate::storage::sqlite::SqliteTx;

use super::{value_rows_from, RowStatements};

/// Inserts of waits, up to 64 rows a statement (four parameters a row), returning the rows
/// that went in (bound parameters rather than a JSON array: a batch of 1 000 jobs with one
/// wait each went from 200 000 to 258 000 jobs a second).
static WAIT_INSERTS: RowStatements = RowStatements::new(64, |rows| {
    format!(
        "INSERT INTO job_deps (job_id, depends_on, any_outcome, state) VALUES {}
         ON CONFLICT DO NOTHING RETURNING job_id, depends_on",
        value_rows_from(1, rows, 4, "")
    )
});

/// [`WAIT_INSERTS`] for the waits of jobs inserted in the same transaction: no row can be
/// there already (job ids are never reused, and a wait asked for twice is taken once before),
/// so nothing is returned (returning the rows cost a third of a batch's waits).
static FRESH_WAIT_INSERTS: RowStatements = RowStatements::new(64, |rows| {
    format!(
        "INSERT INTO job_deps (job_id, depends_on, any_outcome, state) VALUES {}",
        value_rows_from(1, rows, 4, "")
    )
});

/// Waits of new jobs on jobs that exist and have not ended, up to 64 rows a statement
/// (three parameters a row: the new job, the job it waits for, any outcome); a row whose
/// job waited for is ended or missing does not go in.
static LIVE_WAIT_INSERTS: RowStatements = RowStatements::new(64, |rows| {
    format!(
        "INSERT INTO job_deps (job_id, depends_on, any_outcome)
         SELECT v.column1, v.column2, v.column3 FROM (VALUES {}) AS v
         JOIN jobs j ON j.id = v.column2
         WHERE j.status NOT IN ('succeeded', 'dead', 'cancelled')",
        value_rows_from(1, rows, 3, "")
    )
});

/// One wait to insert, or inserted.
#[derive(Clone, Copy)]
struct Wait {
    job_id: i64,
    depends_on: i64,
    any_outcome: bool,
    /// `pending`, or `done` or `failed` for a job waited for that has ended.
    state: &'static str,
    /// The waiting job was inserted in this transaction.
    fresh: bool,
}

/// A job [`DependencyStore::add_dependencies`] reads: id, status, step, and whether a
/// dependency cancelled it; in id order.
type Involved = (i64, &'static str, Option<String>, bool);

/// A status as read, as one of the six words or [`DELETED`] (anything else a program wrote
/// by hand reads as "unknown": not queued, not ended), without a string per row.
pub(super) fn status_word(text: &str) -> &'static str {
    match text {
        "queued" => "queued",
        "running" => "running",
        "succeeded" => "succeeded",
        "failed" => "failed",
        "dead" => "dead",
        "cancelled" => "cancelled",
        DELETED => DELETED,
        _ => "unknown",
    }
}

/// `ids` as a JSON array, for `json_each`.
pub(super) fn id_list(ids: &[i64]) -> Result<String> {
    serde_json::to_string(ids).map_err(|e| Error::new(ErrorKind::Database, format!("id list: {e}")))
}

/// The waits [`DependencyStore::add_dependencies`] just added to one job.
struct NewWaits {
    job_id: i64,
    /// Those left pending.
    pending: i64,
    /// Those whose job had ended already (settled as they went in).
    ended: i64,
    /// Why the first failed one cancels the job.
    failed: Option<String>,
}

impl DependencyStore for SqliteTx<'_> {
    /// Set-wise, a few statements for any number of waits (a batch of jobs each waiting
    /// for one, a workflow's steps): the jobs involved are read in one statement, the waits
    /// inserted by multi-row statements and the waiting jobs not inserted held already held
    /// in one; only a wait on a job already dead or cancelled cancels, one job at a time.
    fn add_dependencies(&self, edges: &[Edge], now: i64) -> Result<Settled> {
        let mut settled = Settled::default();
        let left;
        let edges = if self.all_new_and_distinct(edges) {
            left = self.insert_live_waits(edges)?;
            &left[..]
        } else {
            edges
        };
        if edges.is_empty() {
            return Ok(settled);
        }
        // A dependant inserted held in this transaction is queued and was cancelled by
        // nothing: only the jobs waited for, and dependants from before, are read.
        let mut ids: Vec<i64> = edges
            .iter()
            .flat_map(|e| [(!e.counted).then_some(e.job_id), Some(e.depends_on)])
            .flatten()
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let jobs = self.involved_jobs(&ids)?;
        let job = |id: i64| {
            jobs.binary_search_by_key(&id, |j| j.0)
                .ok()
                .map(|i| &jobs[i])
        };
        let waiting = |edge: &Edge| {
            if edge.counted {
                Some(("queued", false))
            } else {
                job(edge.job_id).map(|j| (j.1, j.3))
            }
        };
        let mut rows = Vec::with_capacity(edges.len());
        for edge in edges {
            // A dependant cancelled by a dependency may be brought back by a requeue: it
            // keeps count of its waits meanwhile, so that it then waits for this one too.
            check_wait(edge, waiting(edge), job(edge.depends_on).is_some(), true)?;
            let state = match job(edge.depends_on).map_or("", |j| j.1) {
                "succeeded" => "done",
                "dead" | "cancelled" if edge.any_outcome => "done",
                "dead" | "cancelled" => "failed",
                _ => "pending",
            };
            rows.push(Wait {
                job_id: edge.job_id,
                depends_on: edge.depends_on,
                any_outcome: edge.any_outcome,
                state,
                fresh: edge.counted,
            });
        }
        // The waits not there already (a repeated wait is one wait), by multi-row statements.
        let added = self.insert_waits(rows)?;
        // Per waiting job: its new waits still pending, those whose job had ended already,
        // and the first wait that fails it.
        let mut per_job: Vec<NewWaits> = Vec::new();
        for &Wait {
            job_id,
            depends_on,
            state,
            ..
        } in &added
        {
            let failed = (state == "failed").then(|| {
                let (step, status) = job(depends_on).map_or((None, ""), |j| (j.2.as_deref(), j.1));
                dependency_ended_reason(depends_on, step, status)
            });
            let pending = i64::from(state == "pending");
            match per_job.last_mut() {
                Some(waits) if waits.job_id == job_id => {
                    waits.pending += pending;
                    waits.ended += 1 - pending;
                    if waits.failed.is_none() {
                        waits.failed = failed;
                    }
                }
                _ => per_job.push(NewWaits {
                    job_id,
                    pending,
                    ended: 1 - pending,
                    failed,
                }),
            }
        }
        // A job inserted held counted every wait passed for it as pending: those that are
        // not (already ended, or there twice) come off, and one left waiting for nothing
        // (and not failed) is released.
        let mut counted: BTreeMap<i64, i64> = BTreeMap::new();
        for edge in edges.iter().filter(|e| e.counted) {
            *counted.entry(edge.job_id).or_default() += 1;
        }
        for (&job_id, &given) in &counted {
            // per_job is in job id order (from `added`).
            let waits = per_job
                .binary_search_by_key(&job_id, |w| w.job_id)
                .ok()
                .map(|i| &per_job[i]);
            let off = given - waits.map_or(0, |w| w.pending);
            if off == 0 {
                continue;
            }
            self.conn
                .prepare_cached("UPDATE jobs SET waiting_for = waiting_for - ?2 WHERE id = ?1")?
                .execute(params![job_id, off])?;
            if waits.is_none_or(|w| w.failed.is_none()) && self.release_if_free(job_id, now)? {
                settled.released.push(job_id);
            }
        }
        let holds: Vec<serde_json::Value> = per_job
            .iter()
            .filter(|w| w.pending > 0 && !counted.contains_key(&w.job_id))
            .map(|w| serde_json::json!([w.job_id, w.pending]))
            .collect();
        if !holds.is_empty() {
            // A queued job is held (its run_at kept aside); one cancelled by a dependency
            // only counts the wait, for when a requeue brings it back.
            self.conn
                .prepare_cached(
                    "UPDATE jobs SET
                        held_run_at = CASE WHEN status <> 'queued' THEN held_run_at
                                           WHEN waiting_for > 0 AND run_at = ?3 THEN held_run_at
                                           ELSE run_at END,
                        run_at = CASE WHEN status = 'queued' THEN ?3 ELSE run_at END,
                        waiting_for = waiting_for + c.value ->> 1,
                        updated_at = CASE WHEN status = 'queued' THEN ?2 ELSE updated_at END
                     FROM json_each(?1) AS c
                     WHERE jobs.id = c.value ->> 0",
                )?
                .execute(params![
                    serde_json::Value::Array(holds).to_string(),
                    now,
                    HELD_RUN_AT
                ])?;
        }
        for NewWaits {
            job_id,
            failed: why,
            ..
        } in per_job
        {
            let Some(reason) = why else { continue };
            if job(job_id).is_some_and(|j| j.3) {
                continue;
            }
            if self.cancel_dependant(job_id, &reason, now)? {
                settled.cancelled.push(job_id);
                settled.extend(self.settle_dependants(&[job_id], now)?);
            }
        }
        Ok(settled)
    }

    /// Set-wise, a few statements per batch of ended jobs whatever its size (a worker's
    /// completions come in batches): their pending waits are read and marked in one
    /// statement each, and their dependants counted down and released in one more. Only a
    /// cascade of cancels goes on, level by level, the same way.
    fn settle_dependants(&self, ended: &[i64], now: i64) -> Result<Settled> {
        let mut settled = Settled::default();
        let (Some(&low), Some(&high)) = (ended.iter().min(), ended.iter().max()) else {
            return Ok(settled);
        };
        // Most jobs have no dependants: one look at the pending waits over the batch's id
        // range, which reads no job row and finds nothing in most batches.
        let mut level: Vec<i64> = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT depends_on FROM job_deps
                 WHERE state = 'pending' AND depends_on BETWEEN ?1 AND ?2",
            )?
            .query_map([low, high], |row| row.get(0))?
            .collect::<rusqlite::Result<Vec<i64>>>()?
            .into_iter()
            .filter(|id| ended.contains(id))
            .collect();
        while !level.is_empty() {
            let cancelled = self.settle_level(&level, now, &mut settled)?;
            level = cancelled;
        }
        Ok(settled)
    }

    fn revive_dependants(&self, old: i64, new: i64, now: i64) -> Result<Vec<i64>> {
        let mut revived = Vec::new();
        let mut todo: VecDeque<(i64, i64)> = VecDeque::from([(old, new)]);
        while let Some((old, new)) = todo.pop_front() {
            self.wait_again_on_any_outcome(old, new, now)?;
            let failed: Vec<i64> = self
                .conn
                .prepare_cached(
                    "SELECT job_id FROM job_deps WHERE depends_on = ?1 AND state = 'failed'
                     ORDER BY job_id",
                )?
                .query_map([old], |row| row.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            if failed.is_empty() {
                continue;
            }
            // The failed rows wait again, for the job that now stands in for `old`.
            self.conn
                .prepare_cached(
                    "UPDATE job_deps SET depends_on = ?2, state = 'pending'
                     WHERE depends_on = ?1 AND state = 'failed'",
                )?
                .execute(params![old, new])?;
            for dependant in failed {
                self.conn
                    .prepare_cached("UPDATE jobs SET waiting_for = waiting_for + 1 WHERE id = ?1")?
                    .execute([dependant])?;
                let still_failed: bool = self
                    .conn
                    .prepare_cached(
                        "SELECT EXISTS (SELECT 1 FROM job_deps WHERE job_id = ?1 AND state = 'failed')",
                    )?
                    .query_row([dependant], |row| row.get(0))?;
                if still_failed {
                    continue;
                }
                self.count_row(dependant, -1)?;
                let n = self
                    .conn
                    .prepare_cached(
                        "UPDATE jobs SET status = 'queued', cancelled_by = NULL, cancel_reason = NULL,
                                         finished_at = NULL, updated_at = ?2,
                                         held_run_at = run_at, run_at = ?3
                         WHERE id = ?1 AND status = 'cancelled' AND cancelled_by = ?4",
                    )?
                    .execute(params![dependant, now, HELD_RUN_AT, CANCELLED_BY_DEPENDENCY])?;
                if n == 1 {
                    revived.push(dependant);
                    todo.push_back((dependant, dependant));
                } else {
                    self.count_row(dependant, 1)?;
                }
            }
        }
        Ok(revived)
    }

    fn hold(&self, ids: &[i64], n: i64, now: i64) -> Result<()> {
        let mut stmt = self.conn.prepare_cached(
            "UPDATE jobs SET held_run_at = CASE WHEN waiting_for > 0 AND run_at = ?4
                                                THEN held_run_at ELSE run_at END,
                             run_at = ?4, waiting_for = waiting_for + ?2, updated_at = ?3
             WHERE id = ?1 AND status = 'queued'",
        )?;
        for id in ids {
            stmt.execute(params![id, n, now, HELD_RUN_AT])?;
        }
        Ok(())
    }

    fn unhold(&self, ids: &[i64], now: i64) -> Result<Settled> {
        let mut settled = Settled::default();
        for &id in ids {
            self.conn
                .prepare_cached(
                    "UPDATE jobs SET waiting_for = waiting_for - 1 WHERE id = ?1 AND waiting_for > 0",
                )?
                .execute([id])?;
            if self.release_if_free(id, now)? {
                settled.released.push(id);
            }
        }
        Ok(settled)
    }

    fn settle_stragglers(&self, limit: usize, now: i64) -> Result<Settled> {
        let ended: Vec<i64> = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT d.depends_on FROM job_deps d LEFT JOIN jobs j ON j.id = d.depends_on
                 WHERE d.state = 'pending'
                   AND (j.id IS NULL
                        OR j.status = 'succeeded' OR j.status = 'dead' OR j.status = 'cancelled')
                 LIMIT ?1",
            )?
            .query_map([i64::try_from(limit).unwrap_or(i64::MAX)], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        if ended.is_empty() {
            return Ok(Settled::default());
        }
        self.settle_dependants(&ended, now)
    }
}

impl SqliteTx<'_> {
    /// True when every edge is a new job's (inserted held in this transaction), none a job
    /// waiting for itself (its id given ahead of time; the general path refuses it) and no
    /// wait asked for twice: then [`SqliteTx::insert_live_waits`] may take them.
    fn all_new_and_distinct(&self, edges: &[Edge]) -> bool {
        if !edges.iter().all(|e| e.counted && e.job_id != e.depends_on) {
            return false;
        }
        let mut pairs: Vec<(i64, i64)> = edges.iter().map(|e| (e.job_id, e.depends_on)).collect();
        pairs.sort_unstable();
        pairs.windows(2).all(|w| w[0] != w[1])
    }

    /// Inserts, by a join to the jobs waited for, the waits of new jobs on jobs that exist
    /// and have not ended: the common case, which then needs no other statement (the new
    /// jobs went in held, counting them). Returns the edges left (a job waited for that has
    /// ended, or does not exist), for the general path. Measured, a batch of 1 000 jobs
    /// each waiting for one spent a third of its time reading the jobs waited for before.
    fn insert_live_waits(&self, edges: &[Edge]) -> Result<Vec<Edge>> {
        let mut left = Vec::new();
        let mut rest = edges;
        while !rest.is_empty() {
            let (chunk, more) = rest.split_at(LIVE_WAIT_INSERTS.next_rows(rest.len()));
            let mut stmt = self
                .conn
                .prepare_cached(LIVE_WAIT_INSERTS.sql(chunk.len()))?;
            for (i, e) in chunk.iter().enumerate() {
                stmt.raw_bind_parameter(3 * i + 1, e.job_id)?;
                stmt.raw_bind_parameter(3 * i + 2, e.depends_on)?;
                stmt.raw_bind_parameter(3 * i + 3, e.any_outcome)?;
            }
            if stmt.raw_execute()? < chunk.len() {
                // Which did not go in: the new jobs' rows are theirs alone.
                let low = chunk.iter().map(|e| e.job_id).min().unwrap_or(i64::MIN);
                let high = chunk.iter().map(|e| e.job_id).max().unwrap_or(i64::MAX);
                let mut inserted: Vec<(i64, i64)> = self
                    .conn
                    .prepare_cached(
                        "SELECT job_id, depends_on FROM job_deps WHERE job_id BETWEEN ?1 AND ?2",
                    )?
                    .query_map([low, high], |row| Ok((row.get(0)?, row.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                inserted.sort_unstable();
                left.extend(
                    chunk
                        .iter()
                        .filter(|e| inserted.binary_search(&(e.job_id, e.depends_on)).is_err()),
                );
            }
            rest = more;
        }
        Ok(left)
    }

    /// The rows of `ids` (sorted, distinct) that exist, in id order. Ids close together (a
    /// batch waiting for the batch before, a workflow's steps) are read as one range of the
    /// table, which costs a fraction of looking each up.
    fn involved_jobs(&self, ids: &[i64]) -> Result<Vec<Involved>> {
        let (Some(&low), Some(&high)) = (ids.first(), ids.last()) else {
            return Ok(Vec::new());
        };
        let dense =
            u64::try_from(high.saturating_sub(low)).is_ok_and(|span| span < 2 * ids.len() as u64);
        let columns = "SELECT id, CAST(status AS TEXT), step,
                              status = 'cancelled' AND cancelled_by IS ?3 FROM jobs";
        let sql = if dense {
            format!("{columns} WHERE id BETWEEN ?1 AND ?2 ORDER BY id")
        } else {
            // ?2 has no use here: the parameters keep their numbers.
            format!("{columns} WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id")
        };
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let mut rows = if dense {
            stmt.query(params![low, high, CANCELLED_BY_DEPENDENCY])?
        } else {
            stmt.query(params![
                id_list(ids)?,
                rusqlite::types::Null,
                CANCELLED_BY_DEPENDENCY
            ])?
        };
        let mut jobs = Vec::with_capacity(ids.len());
        while let Some(row) = rows.next()? {
            let id: i64 = row.get(0)?;
            if dense && ids.binary_search(&id).is_err() {
                continue;
            }
            let status = status_word(row.get_ref(1)?.as_str().unwrap_or_default());
            jobs.push((id, status, row.get(2)?, row.get(3)?));
        }
        Ok(jobs)
    }

    /// Inserts `rows`; returns those that went in (a wait there already, or asked for twice,
    /// is one wait), in (job, job waited for) order.
    fn insert_waits(&self, mut rows: Vec<Wait>) -> Result<Vec<Wait>> {
        // Stable: of a wait asked for twice, the first one given is kept.
        rows.sort_by_key(|w| (!w.fresh, w.job_id, w.depends_on));
        rows.dedup_by_key(|w| (w.fresh, w.job_id, w.depends_on));
        let older = rows.iter().position(|w| !w.fresh).unwrap_or(rows.len());
        let mut added = Vec::with_capacity(rows.len());
        for (statements, part) in [
            (&FRESH_WAIT_INSERTS, &rows[..older]),
            (&WAIT_INSERTS, &rows[older..]),
        ] {
            let returning = std::ptr::eq(statements, &WAIT_INSERTS);
            let mut left = part;
            while !left.is_empty() {
                let (chunk, rest) = left.split_at(statements.next_rows(left.len()));
                let mut stmt = self.conn.prepare_cached(statements.sql(chunk.len()))?;
                for (i, w) in chunk.iter().enumerate() {
                    stmt.raw_bind_parameter(4 * i + 1, w.job_id)?;
                    stmt.raw_bind_parameter(4 * i + 2, w.depends_on)?;
                    stmt.raw_bind_parameter(4 * i + 3, w.any_outcome)?;
                    stmt.raw_bind_parameter(4 * i + 4, w.state)?;
                }
                if returning {
                    let mut returned = stmt.raw_query();
                    while let Some(row) = returned.next()? {
                        let key = (row.get::<_, i64>(0)?, row.get::<_, i64>(1)?);
                        if let Some(w) = chunk.iter().find(|w| (w.job_id, w.depends_on) == key) {
                            added.push(*w);
                        }
                    }
                } else {
                    stmt.raw_execute()?;
                    added.extend_from_slice(chunk);
                }
                left = rest;
            }
        }
        added.sort_by_key(|w| (w.job_id, w.depends_on));
        Ok(added)
    }
}
