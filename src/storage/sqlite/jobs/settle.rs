//! Settling on SQLite: the pending waits on jobs that ended are marked done or failed,
//! their dependants counted down, released or cancelled, a few statements per batch of
//! ended jobs (and per level of a cascade of cancels). [`super::deps`] calls it from the
//! places an end is written.

use std::collections::BTreeMap;

use rusqlite::params;

use super::deps::{id_list, status_word};
use crate::error::Result;
use crate::storage::jobs::deps::{
    dependency_ended_reason, DependencyStore, Settled, CANCELLED_BY_DEPENDENCY, DELETED,
    HELD_RUN_AT,
};
use crate::storage::sqlite::SqliteTx;

/// A pending wait whose job has ended, as settling reads it.
struct EndedWait {
    dependency: i64,
    /// The six words, or [`DELETED`] for a job no longer there.
    status: &'static str,
    step: Option<String>,
    dependant: i64,
    any_outcome: bool,
    /// The dependant's count of pending waits (0 if it is gone).
    waiting_for: i64,
    /// The dependant is queued and held.
    held: bool,
}

/// What settling does to one dependant.
struct CountDown {
    dependant: i64,
    /// Its waits that ended.
    ended: i64,
    /// Why the first failed one cancels it.
    failed: Option<String>,
    waiting_for: i64,
    held: bool,
}

impl SqliteTx<'_> {
    /// Settles the pending waits on `ended` (jobs with dependants): marks each wait done or
    /// failed, counts each dependant down, releases those left waiting for nothing and
    /// cancels those a failed wait fails. Returns the dependants it cancelled (the next
    /// level of a cascade).
    pub(super) fn settle_level(
        &self,
        ended: &[i64],
        now: i64,
        settled: &mut Settled,
    ) -> Result<Vec<i64>> {
        // Every pending wait on `ended` whose job has ended (or is gone), in dependant order,
        // with what settling needs of both jobs.
        let mut waits: Vec<EndedWait> = Vec::new();
        {
            let mut stmt = self.conn.prepare_cached(
                "SELECT d.depends_on, COALESCE(CAST(j.status AS TEXT), ?2), j.step, d.job_id,
                        d.any_outcome, k.waiting_for, k.status = 'queued' AND k.run_at = ?3
                 FROM job_deps d LEFT JOIN jobs j ON j.id = d.depends_on
                      LEFT JOIN jobs k ON k.id = d.job_id
                 WHERE d.state = 'pending' AND d.depends_on IN (SELECT value FROM json_each(?1))
                   AND (j.id IS NULL
                        OR j.status = 'succeeded' OR j.status = 'dead' OR j.status = 'cancelled')
                 ORDER BY d.job_id",
            )?;
            let mut rows = stmt.query(params![id_list(ended)?, DELETED, HELD_RUN_AT])?;
            while let Some(row) = rows.next()? {
                waits.push(EndedWait {
                    dependency: row.get(0)?,
                    status: status_word(row.get_ref(1)?.as_str().unwrap_or(DELETED)),
                    step: row.get(2)?,
                    dependant: row.get(3)?,
                    any_outcome: row.get(4)?,
                    waiting_for: row.get::<_, Option<i64>>(5)?.unwrap_or(0),
                    held: row.get::<_, Option<bool>>(6)?.unwrap_or(false),
                });
            }
        }
        if waits.is_empty() {
            return Ok(Vec::new());
        }
        self.mark_ended_waits(&waits)?;
        // Per dependant: how many of its waits ended, and the first that failed it.
        let mut counts: Vec<CountDown> = Vec::new();
        for w in &waits {
            let failed = (w.status != "succeeded" && !w.any_outcome)
                .then(|| dependency_ended_reason(w.dependency, w.step.as_deref(), w.status));
            match counts.last_mut() {
                Some(c) if c.dependant == w.dependant => {
                    c.ended += 1;
                    if c.failed.is_none() {
                        c.failed = failed;
                    }
                }
                _ => counts.push(CountDown {
                    dependant: w.dependant,
                    ended: 1,
                    failed,
                    waiting_for: w.waiting_for,
                    held: w.held,
                }),
            }
        }
        // One pending wait fewer each, whatever the dependant's status (the count stays the
        // number of pending waits if it is ever brought back). A held job left waiting for
        // nothing and failed by none is released: its run_at put back.
        let (free, waiting): (Vec<&CountDown>, Vec<&CountDown>) = counts
            .iter()
            .partition(|c| c.held && c.failed.is_none() && c.waiting_for <= c.ended);
        let released: Vec<i64> = free.iter().map(|c| c.dependant).collect();
        if !released.is_empty() {
            self.conn
                .prepare_cached(
                    "UPDATE jobs SET waiting_for = 0, run_at = COALESCE(held_run_at, ?2),
                                     held_run_at = NULL, updated_at = ?2
                     WHERE id IN (SELECT value FROM json_each(?1))",
                )?
                .execute(params![id_list(&released)?, now])?;
        }
        let mut by_count: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for c in waiting {
            by_count.entry(c.ended).or_default().push(c.dependant);
        }
        for (n, ids) in by_count {
            self.conn
                .prepare_cached(
                    "UPDATE jobs SET waiting_for = MAX(waiting_for - ?2, 0), updated_at = ?3
                     WHERE id IN (SELECT value FROM json_each(?1))",
                )?
                .execute(params![id_list(&ids)?, n, now])?;
        }
        settled.released.extend(released);
        let mut cancelled = Vec::new();
        for c in counts {
            if let Some(reason) = c.failed {
                if self.cancel_dependant(c.dependant, &reason, now)? {
                    settled.cancelled.push(c.dependant);
                    cancelled.push(c.dependant);
                }
            }
        }
        Ok(cancelled)
    }

    /// Marks `waits` (pending, on jobs that have ended) done, or failed. Each job's status
    /// is as just read: a wait on a success is done; one on any other end is done where any
    /// outcome will do, else failed.
    fn mark_ended_waits(&self, waits: &[EndedWait]) -> Result<()> {
        let (mut succeeded, mut other): (Vec<i64>, Vec<i64>) = (Vec::new(), Vec::new());
        for w in waits {
            if w.status == "succeeded" {
                succeeded.push(w.dependency);
            } else {
                other.push(w.dependency);
            }
        }
        for (mut dependencies, state) in [
            (succeeded, "'done'"),
            (
                other,
                "CASE WHEN any_outcome = 1 THEN 'done' ELSE 'failed' END",
            ),
        ] {
            if dependencies.is_empty() {
                continue;
            }
            dependencies.sort_unstable();
            dependencies.dedup();
            self.conn
                .prepare_cached(&format!(
                    "UPDATE job_deps SET state = {state}
                     WHERE depends_on IN (SELECT value FROM json_each(?1)) AND state = 'pending'"
                ))?
                .execute([id_list(&dependencies)?])?;
        }
        Ok(())
    }

    /// `old` (dead or cancelled) runs again as `new`: the jobs that waited for it on any
    /// outcome and have not started took its end for an end, so they wait for `new` (held
    /// again if queued). Those that have started are left alone.
    pub(super) fn wait_again_on_any_outcome(&self, old: i64, new: i64, now: i64) -> Result<()> {
        let unstarted: Vec<(i64, String)> = self
            .conn
            .prepare_cached(
                "SELECT d.job_id, CAST(j.status AS TEXT) FROM job_deps d JOIN jobs j ON j.id = d.job_id
                 WHERE d.depends_on = ?1 AND d.state = 'done' AND d.any_outcome = 1
                   AND j.started_at IS NULL
                   AND (j.status = 'queued' OR (j.status = 'cancelled' AND j.cancelled_by = ?2))
                 ORDER BY d.job_id",
            )?
            .query_map(params![old, CANCELLED_BY_DEPENDENCY], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        if unstarted.is_empty() {
            return Ok(());
        }
        for (dependant, status) in unstarted {
            self.conn
                .prepare_cached(
                    "UPDATE job_deps SET depends_on = ?3, state = 'pending'
                     WHERE job_id = ?1 AND depends_on = ?2",
                )?
                .execute(params![dependant, old, new])?;
            if status == "queued" {
                self.hold(&[dependant], 1, now)?;
            } else {
                self.conn
                    .prepare_cached("UPDATE jobs SET waiting_for = waiting_for + 1 WHERE id = ?1")?
                    .execute([dependant])?;
            }
        }
        Ok(())
    }

    /// Puts back the `run_at` of a held queued job left waiting for nothing. True if it did.
    pub(super) fn release_if_free(&self, id: i64, now: i64) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE jobs SET run_at = COALESCE(held_run_at, ?2), held_run_at = NULL, updated_at = ?2
                 WHERE id = ?1 AND status = 'queued' AND waiting_for = 0 AND run_at = ?3",
            )?
            .execute(params![id, now, HELD_RUN_AT])?;
        Ok(n == 1)
    }

    /// Cancels a queued dependant whose dependency failed it. True if it did.
    pub(super) fn cancel_dependant(&self, id: i64, reason: &str, now: i64) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE jobs SET status = 'cancelled', cancelled_by = ?2, cancel_reason = ?3,
                                 finished_at = ?4, updated_at = ?4,
                                 run_at = COALESCE(held_run_at, run_at), held_run_at = NULL
                 WHERE id = ?1 AND status = 'queued'",
            )?
            .execute(params![id, CANCELLED_BY_DEPENDENCY, reason, now])?;
        if n == 1 {
            self.count_row(id, 1)?;
        }
        Ok(n == 1)
    }
}
