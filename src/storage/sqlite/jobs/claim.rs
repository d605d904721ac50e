//! [`ClaimStore`] on SQLite: due jobs chosen by one SELECT, in claim order, then moved to
//! `running` by id, inside the worker's write transaction.

use super::row_rules::{read_claimed, CLAIMED_COLUMNS};
use crate::error::Result;
use crate::storage::jobs::claim::claim_order_sql;
use crate::storage::jobs::{ClaimRequest, ClaimStore, Claimed, ClaimedRow, Waiting};
use crate::storage::sqlite::errors::is_constraint_violation;
use crate::storage::sqlite::SqliteTx;

impl ClaimStore for SqliteTx<'_> {
    /// A claim never fails on a row another program wrote: on the worker's connection (CHECK
    /// rules off) a row that breaks a schema rule is claimed with a [`ClaimedRow::defect`]
    /// and goes dead without running; on a connection with the rules on, its update to
    /// `running` is refused, so such rows are made dead first and the claim runs again.
    fn claim(&self, req: &ClaimRequest<'_>, now: i64) -> Result<Claimed> {
        match self.claim_rows(req, now) {
            Ok(rows) => Ok(Claimed {
                rows,
                refused: Vec::new(),
            }),
            Err(e) if is_constraint_violation(&e) => {
                // The failed statement was rolled back by itself; the transaction goes on.
                let refused = self.refuse_rule_breakers(req.queue, now)?;
                let rows = self.claim_rows(req, now)?;
                Ok(Claimed { rows, refused })
            }
            Err(e) => Err(e),
        }
    }

    fn any_due(
        &self,
        queue: &str,
        job_types: &[String],
        now: i64,
        above: Option<i64>,
    ) -> Result<bool> {
        if job_types.is_empty() {
            return Ok(false);
        }
        let type_params: Vec<String> = (0..job_types.len())
            .map(|i| format!("?{}", i + 4))
            .collect();
        // A bound on the priority is a range of the due index, not a filter over every due row.
        let above_sql = if above.is_some() {
            " AND priority > ?3"
        } else {
            ""
        };
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM jobs WHERE queue = ?1 AND waiting_for = 0{above_sql}
                            AND status IN ('queued', 'failed') AND run_at <= ?2 AND job_type IN ({})
                            AND (expires_at IS NULL OR expires_at > ?2))
                    AND NOT EXISTS (SELECT 1 FROM queues WHERE name = ?1 AND paused = 1)",
            type_params.join(", ")
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let mut args: Vec<rusqlite::types::Value> = vec![queue.to_string().into(), now.into()];
        args.push(above.map_or(rusqlite::types::Value::Null, Into::into));
        args.extend(job_types.iter().map(|t| t.clone().into()));
        Ok(stmt.query_row(rusqlite::params_from_iter(args), |row| row.get(0))?)
    }

    fn waiting(&self, queue: &str, job_types: &[String], now: i64) -> Result<Waiting> {
        if job_types.is_empty() {
            return Ok(Waiting::Nothing);
        }
        let type_params: Vec<String> = (0..job_types.len())
            .map(|i| format!("?{}", i + 3))
            .collect();
        let types = type_params.join(", ");
        let sql = format!(
            "SELECT CASE
                 WHEN EXISTS (SELECT 1 FROM queues WHERE name = ?1 AND paused = 1) THEN 0
                 WHEN EXISTS (SELECT 1 FROM jobs WHERE queue = ?1 AND waiting_for = 0
                                AND status IN ('queued', 'failed') AND run_at <= ?2
                                AND job_type IN ({types})
                                AND (expires_at IS NULL OR expires_at > ?2)) THEN 2
                 WHEN EXISTS (SELECT 1 FROM jobs WHERE queue = ?1 AND waiting_for = 0
                                AND status IN ('queued', 'failed') AND job_type IN ({types}))
                      THEN 1
                 ELSE 0 END"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let mut args: Vec<rusqlite::types::Value> = vec![queue.to_string().into(), now.into()];
        args.extend(job_types.iter().map(|t| t.clone().into()));
        let code: i64 = stmt.query_row(rusqlite::params_from_iter(args), |row| row.get(0))?;
        Ok(Waiting::from_code(code))
    }
}

impl SqliteTx<'_> {
    /// Claims up to `limit` due jobs of one queue in claim order, moving them to `running`
    /// under a lease (see [`ClaimStore::claim`]). Must run inside a write transaction (the
    /// dispatcher's `BEGIN IMMEDIATE`): its lock is what makes the claim's SELECT and UPDATE
    /// choose the same rows, and the claim atomic.
    fn claim_rows(&self, req: &ClaimRequest<'_>, now: i64) -> Result<Vec<ClaimedRow>> {
        let conn = self.conn;
        if req.limit == 0 || req.job_types.is_empty() {
            return Ok(Vec::new());
        }
        if conn.is_autocommit() {
            return Err(crate::Error::new(
                crate::ErrorKind::Database,
                "a claim must run inside a write transaction; nothing was claimed",
            ));
        }
        let sql = claim_sql(req.job_types.len(), req.above_priority.is_some());
        // ?1 the worker, ?2 now, ?3 the longest type timeout, ?4 the lease grace, ?5 the queue,
        // ?6 the limit, then the types and their timeouts. Both statements take the same.
        let bind = |stmt: &mut rusqlite::CachedStatement<'_>| -> rusqlite::Result<()> {
            stmt.raw_bind_parameter(1, req.worker_id)?;
            stmt.raw_bind_parameter(2, now)?;
            let longest = req.type_timeouts_ms.iter().copied().max().unwrap_or(0);
            stmt.raw_bind_parameter(3, longest)?;
            stmt.raw_bind_parameter(4, req.lease_grace_ms)?;
            stmt.raw_bind_parameter(5, req.queue)?;
            stmt.raw_bind_parameter(6, i64::try_from(req.limit).unwrap_or(i64::MAX))?;
            let n = req.job_types.len();
            for (i, (job_type, ms)) in req.job_types.iter().zip(req.type_timeouts_ms).enumerate() {
                stmt.raw_bind_parameter(7 + i, job_type)?;
                stmt.raw_bind_parameter(7 + n + i, ms)?;
            }
            Ok(())
        };
        let mut stmt = conn.prepare_cached(&sql.select)?;
        bind(&mut stmt)?;
        if let Some(above) = req.above_priority {
            stmt.raw_bind_parameter(7 + 2 * req.job_types.len(), above)?;
        }
        // Rows are read leniently: a value another program wrote that litejobs cannot use marks
        // that job defective (it goes dead), and never fails the claim of every other job.
        let mut rows = Vec::new();
        let mut chosen = stmt.raw_query();
        while let Some(row) = chosen.next()? {
            rows.push(read_claimed(row, req.max_payload_bytes)?);
        }
        drop(chosen);
        if rows.is_empty() {
            return Ok(rows);
        }
        // Then claimed by their ids, in statements of a power of two ids each.
        let mut claimed = 0;
        let mut next = 0;
        while next < rows.len() {
            let size = 1usize << (rows.len() - next).min(CLAIM_IDS_PER_UPDATE).ilog2();
            let mut update = conn.prepare_cached(&sql.updates[size.ilog2() as usize])?;
            bind(&mut update)?;
            let first_id = 8 + 2 * req.job_types.len();
            for (i, row) in rows[next..next + size].iter().enumerate() {
                update.raw_bind_parameter(first_id + i, row.id)?;
            }
            claimed += update.raw_execute()?;
            next += size;
        }
        if claimed != rows.len() {
            // Cannot happen in one write transaction; never hand out jobs the update missed.
            return Err(crate::Error::new(
                crate::ErrorKind::Database,
                format!(
                    "a claim chose {} jobs but claimed {claimed}; nothing was claimed",
                    rows.len()
                ),
            ));
        }
        Ok(rows)
    }
}

/// The claim's statements for a worker of `types` job types.
pub(super) struct ClaimSql {
    pub(super) select: String,
    /// The update of 1, 2, 4, … [`CLAIM_IDS_PER_UPDATE`] chosen jobs by id.
    updates: Vec<String>,
}

/// The most ids one claiming `UPDATE` takes.
const CLAIM_IDS_PER_UPDATE: usize = 64;

/// The claim's statements for `types` job types, with or without a bound on the priority
/// (`above`, parameter `7 + 2 × types`), built once per process for each (a claim's text
/// depends on nothing else; building it per claim cost 8 000 instructions).
pub(super) fn claim_sql(types: usize, above: bool) -> std::sync::Arc<ClaimSql> {
    type Built = Vec<((usize, bool), std::sync::Arc<ClaimSql>)>;
    static BUILT: std::sync::Mutex<Built> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, sql)) = built.iter().find(|(key, _)| *key == (types, above)) {
        return std::sync::Arc::clone(sql);
    }
    let n = types;
    let type_params: Vec<String> = (0..n).map(|i| format!("?{}", i + 7)).collect();
    let lease_cases: String = (0..n)
        .map(|i| format!(" WHEN ?{} THEN ?{}", i + 7, i + 7 + n))
        .collect();
    // The LIMIT is an expression, not a bare parameter: SQLite plans with a bare LIMIT
    // parameter's value and re-prepares the statement whenever it changes (measured: 14 % of
    // the dispatcher's time went to re-preparing this claim).
    // The lease is the job's timeout (its own, else its type's) plus the grace.
    // Statements in the caller's write transaction, whose lock keeps the rows as they were
    // read: a SELECT reads the jobs with what they will hold once claimed, in claim order,
    // then UPDATEs claim them by id. One `UPDATE … RETURNING` made SQLite keep a table of
    // returned rows: measured with callgrind, 5 500 instructions more per job (of about
    // 60 000 for a claim and a completion); an UPDATE by the same choice as the SELECT ran
    // the choice twice (2 % more than by ids), one UPDATE per id cost 5 % more.
    let lease = format!("?2 + COALESCE(timeout_ms, CASE job_type{lease_cases} ELSE ?3 END) + ?4");
    let choice = format!(
        "FROM jobs j
            WHERE j.queue = ?5 AND j.waiting_for = 0{above_sql} AND j.status IN ('queued', 'failed')
              AND j.run_at <= ?2
              AND (j.expires_at IS NULL OR j.expires_at > ?2)
              AND j.job_type IN ({types})
              AND NOT EXISTS (SELECT 1 FROM queues WHERE name = ?5 AND paused = 1)
              AND (j.group_key IS NULL OR (
                   NOT EXISTS (SELECT 1 FROM jobs r
                               WHERE r.group_key = j.group_key AND r.status = 'running')
                   AND j.id = (SELECT g.id FROM jobs g
                               WHERE g.group_key = j.group_key
                                 AND g.status IN ('queued', 'failed') AND g.run_at <= ?2
                                 AND g.waiting_for = 0
                                 AND (g.expires_at IS NULL OR g.expires_at > ?2)
                               ORDER BY {group_order} LIMIT 1)))
            ORDER BY {order}
            LIMIT CAST(?6 AS INTEGER)",
        types = type_params.join(", "),
        above_sql = if above {
            format!(" AND j.priority > ?{}", 7 + 2 * n)
        } else {
            String::new()
        },
        group_order = claim_order_sql("g"),
        order = claim_order_sql("j"),
    );
    // `?1` (the worker) only in the UPDATEs, the choice's parameters only in the SELECT:
    // all take the same numbering, so one binding serves both; the ids follow.
    let updates = (0..=CLAIM_IDS_PER_UPDATE.ilog2())
        .map(|power| {
            let ids: Vec<String> = (0..1usize << power)
                .map(|i| format!("?{}", 8 + 2 * n + i))
                .collect();
            // A row whose attempts are not a whole number of at least 0 (written with the
            // rules off) gets attempt 1, and one at the largest integer keeps it, as the
            // claimed-row rules count them: the fence then holds and the claim's defect makes
            // the job dead, instead of a lease no write can match.
            format!(
                "UPDATE jobs SET status = 'running', attempts = CASE
                            WHEN typeof(attempts) = 'integer' AND attempts >= 0
                            THEN attempts + (attempts < 9223372036854775807)
                            ELSE 1 END, locked_by = ?1,
                        locked_until = {lease}, started_at = ?2, updated_at = ?2
                 WHERE id IN ({})",
                ids.join(",")
            )
        })
        .collect();
    let sql = std::sync::Arc::new(ClaimSql {
        select: format!(
            "SELECT {} {choice}",
            CLAIMED_COLUMNS.replace("LEASE", &lease)
        ),
        updates,
    });
    built.push(((types, above), std::sync::Arc::clone(&sql)));
    sql
}
