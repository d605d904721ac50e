//! [`DependencyStore`] on PostgreSQL. Unlike SQLite, triggers run for litejobs' own
//! connections too, so the schema's `job_deps` and `jobs` triggers (migration 4) hold,
//! release and cancel dependants for every writer alike, in the transaction that inserts the
//! wait or ends the dependency, under the row locks that make concurrent writers safe. What
//! is left here: inserting waits (the triggers settle them), reading back what the triggers
//! did, bringing dependants back after a requeue or retry, and a batch's holds.
//!
//! The triggers write litejobs' times, as on SQLite: a job that ends settles its dependants
//! at the `finished_at` its write set, and a new row at the time passed in the
//! transaction-local setting `litejobs.now_ms`.

use std::collections::VecDeque;

use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::{BigInt, Bool, Text};
use diesel::QueryableByName;

use super::super::reads::limit_int;
use super::super::sql::{query, BoolRow, IntRow};
use super::super::PgTx;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::jobs::deps::{
    check_wait, DependencyStore, Edge, Settled, CANCELLED_BY_DEPENDENCY, HELD_RUN_AT,
};
use crate::storage::workflows::{ON_COMPLETE, ON_SUCCESS};

#[derive(QueryableByName)]
struct StatusRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    status: String,
}

#[derive(QueryableByName)]
struct SettledRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Bool)]
    released: bool,
}

/// What the triggers settled for `ended` (jobs this transaction ended): dependants released
/// (queued, waiting for nothing, their `run_at` put back at the settling time) and those
/// cancelled, transitively. A dependant is settled at `at`, or at the `finished_at` of the
/// job that ended (the time its write set, which the trigger used). A cancelled job's own
/// dependants carry its `finished_at`: that is how the walk tells the jobs this settling
/// cancelled from jobs a failed wait of theirs had cancelled before.
const SETTLED: &str = "
    WITH RECURSIVE ended AS (
        SELECT id, COALESCE($2, finished_at) AS at FROM jobs
        WHERE id = ANY($1)
          AND status IN ('succeeded', 'dead', 'cancelled')
    ), cancelled (id, at) AS (
        SELECT j.id, j.finished_at
        FROM ended e JOIN job_deps d ON d.depends_on = e.id AND d.state = 'failed'
        JOIN jobs j ON j.id = d.job_id
        WHERE j.status = 'cancelled' AND j.cancelled_by = $3 AND j.finished_at = e.at
      UNION
        SELECT j.id, j.finished_at
        FROM cancelled c JOIN job_deps d ON d.depends_on = c.id AND d.state = 'failed'
        JOIN jobs j ON j.id = d.job_id
        WHERE j.status = 'cancelled' AND j.cancelled_by = $3 AND j.finished_at = c.at
    )
    SELECT DISTINCT j.id, true AS released
    FROM ended e JOIN job_deps d ON d.depends_on = e.id AND d.state = 'done'
    JOIN jobs j ON j.id = d.job_id
    WHERE j.status = 'queued' AND j.waiting_for = 0 AND j.updated_at = e.at
    UNION
    SELECT id, false AS released FROM cancelled
    ORDER BY id";

impl PgTx<'_> {
    fn settled(&self, ended: &[i64], at: Option<i64>) -> Result<Settled> {
        let mut settled = Settled::default();
        if ended.is_empty() {
            return Ok(settled);
        }
        let rows = self.rows::<SettledRow>(
            query(SETTLED)
                .ints(ended)
                .opt_int(at)
                .text(CANCELLED_BY_DEPENDENCY),
        )?;
        for row in rows {
            if row.released {
                settled.released.push(row.id);
            } else {
                settled.cancelled.push(row.id);
            }
        }
        Ok(settled)
    }

    /// Inserts the waits `edges`, all of jobs inserted held (`held`: the trigger then only
    /// takes off those already ended) or none. The triggers get litejobs' clock meanwhile.
    /// Returns the waiting jobs of the rows inserted (a repeated wait is not), and whether the
    /// trigger cancelled a waiting job (a wait on a job that ended dead or cancelled).
    ///
    /// Held jobs' waits lock the jobs waited for first (for share, in id order, as the
    /// trigger would): when all are there and none has ended, `litejobs.checked` tells the
    /// statement trigger it has nothing to do, and it does not run. Their jobs are new (no
    /// row can name them yet), so a wait given twice is told apart here, and the rest go in
    /// by a plain insert: `ON CONFLICT` and `RETURNING` cost a third of a batch's insert.
    fn insert_waits(&self, edges: &[Edge], held: bool, now: i64) -> Result<(Vec<i64>, bool)> {
        let mut on: Vec<i64> = if held {
            edges.iter().map(|e| e.depends_on).collect()
        } else {
            Vec::new()
        };
        on.sort_unstable();
        on.dedup();
        self.execute(
            query(
                "WITH locked AS MATERIALIZED (
                     SELECT count(*) FILTER (
                                WHERE status NOT IN ('succeeded', 'dead', 'cancelled')) AS live
                     FROM (SELECT j.status FROM unnest($3::bigint[]) AS u (id)
                           JOIN jobs j ON j.id = u.id ORDER BY j.id FOR SHARE OF j) AS j
                 )
                 SELECT set_config('litejobs.now_ms', $1, true),
                        set_config('litejobs.counted', $2, true),
                        set_config('litejobs.cancelled', '', true),
                        set_config('litejobs.checked',
                                   CASE WHEN $2 = 'on' AND live = $4 THEN 'on' ELSE '' END, true)
                 FROM locked",
            )
            .text(&now.to_string())
            .text(if held { "on" } else { "" })
            .ints(&on)
            .int(i64::try_from(on.len()).unwrap_or(i64::MAX)),
        )?;
        // Other jobs' waits may be there already; held (new) jobs' cannot (see above).
        let mut seen = std::collections::HashSet::with_capacity(edges.len());
        let rows: Vec<&Edge> = edges
            .iter()
            .filter(|e| !held || seen.insert((e.job_id, e.depends_on)))
            .collect();
        let columns = |f: fn(&Edge) -> i64| rows.iter().map(|e| f(e)).collect::<Vec<_>>();
        let insert = |sql: &str| {
            query(sql)
                .ints(&columns(|e| e.job_id))
                .ints(&columns(|e| e.depends_on))
                .ints(&columns(|e| i64::from(e.any_outcome)))
        };
        let inserted: Vec<i64> = {
            use diesel::RunQueryDsl;
            let mut conn = self.conn.borrow_mut();
            if held {
                insert(
                    "INSERT INTO job_deps (job_id, depends_on, any_outcome)
                     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])",
                )
                .execute(&mut **conn)
                .map_err(trigger_refusal)?;
                columns(|e| e.job_id)
            } else {
                insert(
                    "INSERT INTO job_deps (job_id, depends_on, any_outcome)
                     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])
                     ON CONFLICT DO NOTHING
                     RETURNING job_id AS v",
                )
                .load::<IntRow>(&mut **conn)
                .map_err(trigger_refusal)?
                .into_iter()
                .map(|r| r.v)
                .collect()
            }
        };
        // Cleared again: later statements of the transaction take the server's clock.
        let cancelled = self
            .row::<BoolRow>(query(
                "SELECT set_config('litejobs.now_ms', '', true) IS NOT NULL
                        AND set_config('litejobs.counted', '', true) IS NOT NULL
                        AND set_config('litejobs.checked', '', true) IS NOT NULL
                        AND current_setting('litejobs.cancelled', true) = 'on' AS v",
            ))?
            .is_some_and(|row| row.v);
        Ok((inserted, cancelled))
    }

    /// A job inserted held counted each wait passed for it; one repeated (not inserted
    /// again) comes off, and a job left waiting for nothing is released.
    fn uncount_repeated(&self, edges: &[Edge], inserted: &[i64], now: i64) -> Result<()> {
        let mut repeated: std::collections::BTreeMap<i64, i64> = std::collections::BTreeMap::new();
        for edge in edges {
            *repeated.entry(edge.job_id).or_default() += 1;
        }
        for id in inserted {
            if let Some(n) = repeated.get_mut(id) {
                *n -= 1;
            }
        }
        let (ids, counts): (Vec<i64>, Vec<i64>) =
            repeated.into_iter().filter(|&(_, n)| n > 0).unzip();
        if ids.is_empty() {
            return Ok(());
        }
        self.execute(
            query(
                "UPDATE jobs SET waiting_for = GREATEST(waiting_for - r.n, 0),
                        run_at = CASE WHEN waiting_for <= r.n AND status = 'queued' AND run_at = $3
                                      THEN COALESCE(held_run_at, $4) ELSE run_at END,
                        held_run_at = CASE WHEN waiting_for <= r.n AND status = 'queued'
                                           AND run_at = $3 THEN NULL ELSE held_run_at END
                 FROM unnest($1::bigint[], $2::bigint[]) AS r (id, n)
                 WHERE jobs.id = r.id",
            )
            .ints(&ids)
            .ints(&counts)
            .int(HELD_RUN_AT)
            .int(now),
        )?;
        Ok(())
    }

    /// The same refusals as on SQLite, with the same kinds, before the insert: the triggers
    /// check again under their locks (a status changed since is refused by them).
    fn check_edges(&self, edges: &[Edge]) -> Result<()> {
        let mut ids: Vec<i64> = edges
            .iter()
            .flat_map(|e| [e.job_id, e.depends_on])
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let found = self.rows::<StatusRow>(
            // Joined to the ids (a lookup each), not `id = ANY($1)`: measured 34 ms for 2 000
            // ids while a batch was going in, against 2 ms.
            query(
                "SELECT j.id, j.status FROM unnest($1::bigint[]) AS u (id)
                 JOIN jobs j ON j.id = u.id ORDER BY j.id",
            )
            .ints(&ids),
        )?;
        let status = |id: i64| -> Option<&str> {
            found
                .binary_search_by_key(&id, |r| r.id)
                .ok()
                .map(|i| found[i].status.as_str())
        };
        for edge in edges {
            check_wait(
                edge,
                status(edge.job_id).map(|s| (s, false)),
                status(edge.depends_on).is_some(),
                false,
            )?;
        }
        Ok(())
    }
}

/// A refusal of the `job_deps` triggers (a circle, or a status changed since the check) as
/// the invalid state it is; anything else as it came.
pub(super) fn trigger_refusal(e: DieselError) -> Error {
    if let DieselError::DatabaseError(kind, info) = &e {
        let message = info.message();
        if info.constraint_name() == Some("job_deps_not_itself") {
            // Only a new job given its own id ahead of time gets here: the others are
            // refused by the check before their insert.
            return Error::new(ErrorKind::InvalidJob, "a job cannot wait for itself");
        }
        if message.starts_with("job_deps:") {
            let kind = match kind {
                DatabaseErrorKind::ForeignKeyViolation => ErrorKind::NotFound,
                _ => ErrorKind::InvalidState,
            };
            return Error::new(kind, message.trim_start_matches("job_deps: ").to_string());
        }
    }
    Error::from(e)
}

impl DependencyStore for PgTx<'_> {
    /// Inserts the rows; the triggers hold the dependants or settle the rows at once. Returns
    /// the dependants that cancelled (transitively), read back.
    fn add_dependencies(&self, edges: &[Edge], now: i64) -> Result<Settled> {
        if edges.is_empty() {
            return Ok(Settled::default());
        }
        let waiting: Vec<i64> = edges.iter().map(|e| e.job_id).collect();
        let on: Vec<i64> = edges.iter().map(|e| e.depends_on).collect();
        // Waits of jobs inserted held (their waits counted) and the others go in by separate
        // statements: the trigger holds only the latter. The former are new jobs' waits,
        // which the statement trigger checks, marks and locks set-wise; the latter are
        // checked here first (the refusals in SQLite's words) and by the row trigger.
        let (counted, others): (Vec<Edge>, Vec<Edge>) = edges.iter().partition(|e| e.counted);
        // A new job given its own id ahead of time: refused in SQLite's words (the table's
        // rule would refuse it too, without the job's id).
        for edge in counted.iter().filter(|e| e.job_id == e.depends_on) {
            check_wait(edge, Some(("queued", false)), true, false)?;
        }
        if !others.is_empty() {
            self.check_edges(&others)?;
        }
        let mut cancelled_any = false;
        for (group, held) in [(counted, true), (others, false)] {
            if group.is_empty() {
                continue;
            }
            let (inserted, cancelled) = self.insert_waits(&group, held, now)?;
            cancelled_any |= cancelled;
            if held {
                self.uncount_repeated(&group, &inserted, now)?;
            }
        }
        if !cancelled_any {
            return Ok(Settled::default());
        }
        // A dependant that a row of this insert cancelled (its dependency had ended dead or
        // cancelled) was not held by the rows after it: it counts its pending waits all the
        // same (and its batch's hold), so that a requeue that brings it back leaves it
        // waiting for every one.
        self.execute(
            query(
                "UPDATE jobs j SET waiting_for =
                        (SELECT count(*) FROM job_deps d WHERE d.job_id = j.id AND d.state = 'pending')
                        + CASE WHEN j.step IN ($3, $4) AND EXISTS (
                              SELECT 1 FROM workflows w
                              WHERE w.id = j.workflow_id AND w.kind = 'batch' AND w.open = 1)
                          THEN 1 ELSE 0 END
                 WHERE j.id = ANY($1) AND j.status = 'cancelled' AND j.cancelled_by = $2",
            )
            .ints(&waiting)
            .text(CANCELLED_BY_DEPENDENCY)
            .text(ON_SUCCESS)
            .text(ON_COMPLETE),
        )?;
        // A new row whose dependency had ended dead or cancelled cancelled its dependant at
        // `now`, and that dependant's own dependants in turn.
        let cancelled = self.rows::<IntRow>(
            query(
                "WITH RECURSIVE cancelled (id) AS (
                     SELECT j.id FROM unnest($1::bigint[], $2::bigint[]) AS e (job_id, depends_on)
                     JOIN job_deps d ON d.job_id = e.job_id AND d.depends_on = e.depends_on
                                    AND d.state = 'failed'
                     JOIN jobs j ON j.id = d.job_id
                     WHERE j.status = 'cancelled' AND j.cancelled_by = $3 AND j.finished_at = $4
                   UNION
                     SELECT j.id FROM cancelled c
                     JOIN job_deps d ON d.depends_on = c.id AND d.state = 'failed'
                     JOIN jobs j ON j.id = d.job_id
                     WHERE j.status = 'cancelled' AND j.cancelled_by = $3 AND j.finished_at = $4
                 )
                 SELECT id AS v FROM cancelled ORDER BY id",
            )
            .ints(&waiting)
            .ints(&on)
            .text(CANCELLED_BY_DEPENDENCY)
            .int(now),
        )?;
        Ok(Settled {
            released: Vec::new(),
            cancelled: cancelled.into_iter().map(|r| r.v).collect(),
        })
    }

    /// Settling already happened: the `jobs` trigger did it in the statement that ended each
    /// job, in this transaction. This reads back what it did (one statement; a batch with
    /// no job that others wait for finds nothing at once).
    fn settle_dependants(&self, ended: &[i64], _now: i64) -> Result<Settled> {
        self.settled(ended, None)
    }

    /// Nothing: the `jobs` trigger settled them in the statement that ended each job.
    fn settle_dependants_unread(&self, _ended: &[i64], _now: i64) -> Result<()> {
        Ok(())
    }

    fn revive_dependants(&self, old: i64, new: i64, now: i64) -> Result<Vec<i64>> {
        let mut revived = Vec::new();
        let mut todo: VecDeque<(i64, i64)> = VecDeque::from([(old, new)]);
        while let Some((old, new)) = todo.pop_front() {
            self.wait_again_on_any_outcome(old, new, now)?;
            // The failed rows wait again, for the job that now stands in for `old`.
            let failed: Vec<i64> = self
                .rows::<IntRow>(
                    query(
                        "UPDATE job_deps SET depends_on = $2, state = 'pending'
                         WHERE depends_on = $1 AND state = 'failed'
                         RETURNING job_id AS v",
                    )
                    .int(old)
                    .int(new),
                )?
                .into_iter()
                .map(|r| r.v)
                .collect();
            if failed.is_empty() {
                continue;
            }
            lock_in_order(self, &failed)?;
            self.execute(
                query("UPDATE jobs SET waiting_for = waiting_for + 1 WHERE id = ANY($1)")
                    .ints(&failed),
            )?;
            // Back to queued and held, unless another wait of theirs failed too, or their
            // idempotency key went to another job meanwhile (they stay cancelled).
            let back = self.rows::<IntRow>(
                query(
                    "UPDATE jobs SET status = 'queued', cancelled_by = NULL, cancel_reason = NULL,
                            finished_at = NULL, updated_at = $2, held_run_at = run_at, run_at = $3
                     WHERE id = ANY($1) AND status = 'cancelled' AND cancelled_by = $4
                       AND NOT EXISTS (SELECT 1 FROM job_deps d
                                       WHERE d.job_id = jobs.id AND d.state = 'failed')
                       AND (idempotency_key IS NULL OR NOT EXISTS (
                           SELECT 1 FROM jobs k WHERE k.idempotency_key = jobs.idempotency_key
                              AND k.id <> jobs.id
                              AND k.status IN ('queued', 'running', 'failed', 'succeeded')))
                     RETURNING id AS v",
                )
                .ints(&failed)
                .int(now)
                .int(HELD_RUN_AT)
                .text(CANCELLED_BY_DEPENDENCY),
            )?;
            let mut back: Vec<i64> = back.into_iter().map(|r| r.v).collect();
            back.sort_unstable();
            for id in back {
                revived.push(id);
                todo.push_back((id, id));
            }
        }
        Ok(revived)
    }

    fn hold(&self, ids: &[i64], n: i64, now: i64) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        lock_in_order(self, ids)?;
        self.execute(
            query(
                "UPDATE jobs SET held_run_at = CASE WHEN waiting_for > 0 AND run_at = $4
                                                    THEN held_run_at ELSE run_at END,
                        run_at = $4, waiting_for = waiting_for + $2, updated_at = $3
                 WHERE id = ANY($1) AND status = 'queued'",
            )
            .ints(ids)
            .int(n)
            .int(now)
            .int(HELD_RUN_AT),
        )?;
        Ok(())
    }

    fn unhold(&self, ids: &[i64], now: i64) -> Result<Settled> {
        if ids.is_empty() {
            return Ok(Settled::default());
        }
        lock_in_order(self, ids)?;
        self.execute(
            query(
                "UPDATE jobs SET waiting_for = waiting_for - 1 WHERE id = ANY($1) AND waiting_for > 0",
            )
            .ints(ids),
        )?;
        let mut released: Vec<i64> = self
            .rows::<IntRow>(
                query(
                    "UPDATE jobs SET run_at = COALESCE(held_run_at, $2), held_run_at = NULL,
                            updated_at = $2
                     WHERE id = ANY($1) AND status = 'queued' AND waiting_for = 0 AND run_at = $3
                     RETURNING id AS v",
                )
                .ints(ids)
                .int(now)
                .int(HELD_RUN_AT),
            )?
            .into_iter()
            .map(|r| r.v)
            .collect();
        if !released.is_empty() {
            // As the trigger does when it releases: other hosts' workers look at once.
            self.execute(query("SELECT pg_notify('litejobs_jobs', '')"))?;
        }
        released.sort_unstable();
        Ok(Settled {
            released,
            cancelled: Vec::new(),
        })
    }

    /// Only a status changed while triggers were off (`session_replication_role = replica`,
    /// a restore) leaves pending rows behind an ended job; the schema's own settling function
    /// settles them.
    fn settle_stragglers(&self, limit: usize, now: i64) -> Result<Settled> {
        let ended: Vec<i64> = self
            .rows::<IntRow>(
                query(
                    "SELECT DISTINCT d.depends_on AS v
                     FROM job_deps d LEFT JOIN jobs j ON j.id = d.depends_on
                     WHERE d.state = 'pending'
                       AND (j.id IS NULL OR j.status IN ('succeeded', 'dead', 'cancelled'))
                     ORDER BY 1 LIMIT $1",
                )
                .int(limit_int(limit)),
            )?
            .into_iter()
            .map(|r| r.v)
            .collect();
        if ended.is_empty() {
            return Ok(Settled::default());
        }
        self.execute(
            query("SELECT job_deps_settle($1::bigint[], $2)")
                .ints(&ended)
                .int(now),
        )?;
        self.settled(&ended, Some(now))
    }
}

impl PgTx<'_> {
    /// `old` (dead or cancelled) runs again as `new`: the jobs that waited for it on any
    /// outcome and have not started took its end for an end, so they wait for `new` (held
    /// again if queued). Those that have started are left alone.
    fn wait_again_on_any_outcome(&self, old: i64, new: i64, now: i64) -> Result<()> {
        let again = self.rows::<StatusRow>(
            query(
                "UPDATE job_deps d SET depends_on = $2, state = 'pending'
                 FROM jobs j
                 WHERE d.depends_on = $1 AND d.state = 'done' AND d.any_outcome = 1
                   AND j.id = d.job_id AND j.started_at IS NULL
                   AND (j.status = 'queued' OR (j.status = 'cancelled' AND j.cancelled_by = $3))
                 RETURNING d.job_id AS id, j.status AS status",
            )
            .int(old)
            .int(new)
            .text(CANCELLED_BY_DEPENDENCY),
        )?;
        if again.is_empty() {
            return Ok(());
        }
        let (queued, cancelled): (Vec<&StatusRow>, Vec<&StatusRow>) =
            again.iter().partition(|r| r.status == "queued");
        let queued: Vec<i64> = queued.iter().map(|r| r.id).collect();
        let cancelled: Vec<i64> = cancelled.iter().map(|r| r.id).collect();
        self.hold(&queued, 1, now)?;
        if !cancelled.is_empty() {
            lock_in_order(self, &cancelled)?;
            self.execute(
                query("UPDATE jobs SET waiting_for = waiting_for + 1 WHERE id = ANY($1)")
                    .ints(&cancelled),
            )?;
        }
        Ok(())
    }
}

/// Locks `ids` in id order, as the triggers lock dependants, so that two transactions
/// changing the same jobs wait for each other rather than deadlock.
fn lock_in_order(tx: &PgTx<'_>, ids: &[i64]) -> Result<()> {
    tx.execute(
        query("SELECT 1 FROM jobs WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE").ints(ids),
    )?;
    Ok(())
}
