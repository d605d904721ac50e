//! [`JobStore`] on SQLite: the `jobs` table's inserts (with idempotency keys), the claim,
//! the lease-fenced writes, the attempt history and the reaper.

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension};

use super::{lenient, SqliteTx};
use crate::error::Result;
use crate::job::{clamp_run_at, NewJob, RunAt};
use crate::storage::jobs::{
    batch_error, AfterFailure, AttemptRow, ClaimRequest, Claimed, ClaimedRow, Inserted, JobStore,
    Lease, Refused, Success, VALIDATED_FROM_ROWS,
};

const INSERT_SQL: &str = "INSERT INTO jobs (queue, job_type, payload, priority, max_attempts,
        run_at, created_at, updated_at, timeout_ms, idempotency_key, group_key)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10)
     ON CONFLICT DO NOTHING";

/// Inserts one validated job (its payload already JSON text). A held or remembered
/// idempotency key returns the holder's id instead; the unique index makes this safe against
/// racing writers in other processes.
pub(super) fn insert(conn: &Connection, job: &NewJob, payload: &str, now: i64) -> Result<Inserted> {
    if let Some(key) = job.idempotency_key.as_deref() {
        if let Some(id) = find_key_holder(conn, key, now)? {
            return Ok(Inserted { id, created: false });
        }
    }
    let run_at = RunAt::resolve(job.run_at, now)?;
    let changed = conn.prepare_cached(INSERT_SQL)?.execute(params![
        job.queue,
        job.job_type,
        payload,
        job.priority,
        job.max_attempts,
        run_at,
        now,
        job.timeout_ms,
        job.idempotency_key,
        job.group_key,
    ])?;
    if changed == 1 {
        return Ok(Inserted {
            id: conn.last_insert_rowid(),
            created: true,
        });
    }
    // Only the idempotency index can conflict (litejobs leaves the id to SQLite).
    let key = job.idempotency_key.as_deref().unwrap_or_default();
    let id = find_key_holder(conn, key, now)?.ok_or_else(|| {
        crate::Error::new(
            crate::ErrorKind::Database,
            format!(
                "insert of job type {:?} was ignored by a constraint",
                job.job_type
            ),
        )
    })?;
    Ok(Inserted { id, created: false })
}

/// Jobs without an idempotency key go in by statements of up to this many rows: a
/// statement's fixed cost is paid once per statement instead of once per job, which nearly
/// doubled a batch's speed (measured with 25, 50, 100 and 200 rows: the gain stops at 25).
const ROWS_PER_INSERT: usize = 32;

/// The texts of a multi-row statement for 1, 2, 4, … up to `max` rows, built once per
/// process (building one per statement cost 5 % of a batch), and how a run of rows is cut
/// into them: cutting into powers of two keeps the statements a connection ever prepares to
/// a handful.
struct RowStatements {
    max: usize,
    build: fn(usize) -> String,
    texts: std::sync::OnceLock<Vec<String>>,
}

impl RowStatements {
    const fn new(max: usize, build: fn(usize) -> String) -> RowStatements {
        RowStatements {
            max,
            build,
            texts: std::sync::OnceLock::new(),
        }
    }

    /// How many of `left` rows (at least one) the next statement takes.
    fn next_rows(&self, left: usize) -> usize {
        1 << left.min(self.max).ilog2()
    }

    /// The statement for `rows`, a count [`RowStatements::next_rows`] gave.
    fn sql(&self, rows: usize) -> &str {
        let texts = self.texts.get_or_init(|| {
            (0..=self.max.ilog2())
                .map(|power| (self.build)(1 << power))
                .collect()
        });
        &texts[rows.ilog2() as usize]
    }
}

/// `rows` parenthesised rows of `per_row` parameters numbered from `?2` (`?1` is the one
/// all rows share), each ending with `tail`.
fn value_rows(rows: usize, per_row: usize, tail: &str) -> String {
    value_rows_from(2, rows, per_row, tail)
}

/// [`value_rows`] with the rows' parameters numbered from `?{from}`.
fn value_rows_from(from: usize, rows: usize, per_row: usize, tail: &str) -> String {
    (0..rows)
        .map(|row| {
            let first = from + row * per_row;
            let params: Vec<String> = (first..first + per_row).map(|p| format!("?{p}")).collect();
            format!("({}{tail})", params.join(","))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Inserts of jobs without idempotency keys: `?1` is the time of the enqueue, then eight
/// parameters per row. No `RETURNING`: the ids follow from the newest id before the
/// statement ([`insert_rows`]), which spares SQLite a table of returned rows per statement.
static INSERTS: RowStatements = RowStatements::new(ROWS_PER_INSERT, |rows| {
    format!(
        "INSERT INTO jobs (queue, job_type, payload, priority, max_attempts,
            run_at, timeout_ms, group_key, created_at, updated_at) VALUES {}",
        value_rows(rows, 8, ",?1,?1")
    )
});

/// [`INSERTS`] for rows of one queue and one job type (`?2`, `?3`: bound once, not per row),
/// then six parameters per row. Most batches are one kind of job: measured with callgrind,
/// binding the two texts per row (SQLite copies each) cost 5 % of a batched insert.
static INSERTS_OF_ONE_KIND: RowStatements = RowStatements::new(ROWS_PER_INSERT, |rows| {
    format!(
        "INSERT INTO jobs (payload, priority, max_attempts, run_at, timeout_ms, group_key,
            queue, job_type, created_at, updated_at) VALUES {}",
        value_rows_from(4, rows, 6, ",?2,?3,?1,?1")
    )
});

/// Inserts validated jobs in order: a job with an idempotency key alone (it may find a
/// holder instead), the runs of jobs between them by multi-row statements.
pub(super) fn insert_many(
    conn: &Connection,
    jobs: &[NewJob],
    payloads: &[String],
    now: i64,
) -> Result<Vec<Inserted>> {
    let keyless = jobs
        .iter()
        .filter(|job| job.idempotency_key.is_none())
        .count();
    if keyless < VALIDATED_FROM_ROWS {
        return insert_in_order(conn, jobs, payloads, now);
    }
    // A batch of VALIDATED_FROM_ROWS jobs without keys goes in with the CHECK rules off (a
    // test holds every validated row to RULE_BROKEN_SQL). The queue's own batches come on a
    // connection kept with them off (`SqliteDb::write_validated_tx`); on any other
    // connection they are switched off for the batch, which makes SQLite re-prepare that
    // connection's statements (the switch changes the code they compile to).
    let already_off: bool = conn
        .prepare_cached("PRAGMA ignore_check_constraints")?
        .query_row([], |row| row.get(0))?;
    if already_off {
        return insert_in_order(conn, jobs, payloads, now);
    }
    conn.prepare_cached("PRAGMA ignore_check_constraints = ON")?
        .execute([])?;
    let inserted = insert_in_order(conn, jobs, payloads, now);
    // Back on whatever happened: the connection goes on to serve writes of values from
    // outside (a job's fields, a person's edit), which the rules guard.
    conn.prepare_cached("PRAGMA ignore_check_constraints = OFF")?
        .execute([])?;
    inserted
}

fn insert_in_order(
    conn: &Connection,
    jobs: &[NewJob],
    payloads: &[String],
    now: i64,
) -> Result<Vec<Inserted>> {
    let mut inserted = Vec::with_capacity(jobs.len());
    let mut next = 0;
    // The largest id in the table, once read: this transaction is the only writer.
    let mut newest = None;
    while next < jobs.len() {
        if jobs[next].idempotency_key.is_some() {
            inserted.push(insert(conn, &jobs[next], &payloads[next], now)?);
            newest = None;
            next += 1;
            continue;
        }
        let run = jobs[next..]
            .iter()
            .take_while(|job| job.idempotency_key.is_none())
            .count();
        let rows = INSERTS.next_rows(run);
        let chunk = &jobs[next..next + rows];
        let ids = insert_rows(conn, chunk, &payloads[next..next + rows], now, &mut newest)
            .map_err(|e| batch_error(e, chunk, next))?;
        inserted.extend(ids.into_iter().map(|id| Inserted { id, created: true }));
        next += rows;
    }
    Ok(inserted)
}

/// Inserts jobs without idempotency keys by one statement; their ids in order. `newest` is
/// the largest id in the table (read if `None`), and is moved past the new rows.
fn insert_rows(
    conn: &Connection,
    jobs: &[NewJob],
    payloads: &[String],
    now: i64,
    newest: &mut Option<i64>,
) -> Result<Vec<i64>> {
    let before = match *newest {
        Some(id) => id,
        None => conn
            .prepare_cached("SELECT MAX(id) FROM jobs")?
            .query_row([], |row| row.get::<_, Option<i64>>(0))?
            .unwrap_or(0),
    };
    let Some(first) = jobs.first() else {
        return Ok(Vec::new());
    };
    let one_kind = jobs
        .iter()
        .all(|job| job.queue == first.queue && job.job_type == first.job_type);
    let mut stmt = if one_kind {
        let mut stmt = conn.prepare_cached(INSERTS_OF_ONE_KIND.sql(jobs.len()))?;
        stmt.raw_bind_parameter(2, &first.queue)?;
        stmt.raw_bind_parameter(3, &first.job_type)?;
        stmt
    } else {
        conn.prepare_cached(INSERTS.sql(jobs.len()))?
    };
    stmt.raw_bind_parameter(1, now)?;
    for (row, (job, payload)) in jobs.iter().zip(payloads).enumerate() {
        let p = if one_kind {
            4 + row * 6
        } else {
            let p = 2 + row * 8;
            stmt.raw_bind_parameter(p, &job.queue)?;
            stmt.raw_bind_parameter(p + 1, &job.job_type)?;
            p + 2
        };
        stmt.raw_bind_parameter(p, payload)?;
        stmt.raw_bind_parameter(p + 1, job.priority)?;
        stmt.raw_bind_parameter(p + 2, job.max_attempts)?;
        stmt.raw_bind_parameter(p + 3, RunAt::resolve(job.run_at, now)?)?;
        // A statement comes from the cache with every parameter NULL (rusqlite clears
        // them when it goes back): NULLs need no binding.
        if let Some(ms) = job.timeout_ms {
            stmt.raw_bind_parameter(p + 4, ms)?;
        }
        if let Some(key) = &job.group_key {
            stmt.raw_bind_parameter(p + 5, key)?;
        }
    }
    let added = stmt.raw_execute()?;
    // SQLite gives each new row one more than the largest id so far, until the largest is
    // the last 64-bit integer (then it picks at random). So `added` rows whose last id is
    // `before + added` are exactly `before + 1 ..= before + added`, in the jobs' order.
    // Anything else is refused rather than guessed (the transaction rolls back).
    let last = conn.last_insert_rowid();
    let count = i64::try_from(added).unwrap_or(i64::MAX);
    if added != jobs.len() || before.checked_add(count) != Some(last) {
        return Err(crate::Error::new(
            crate::ErrorKind::Database,
            format!(
                "a batch insert of {} jobs added {added} rows ending at id {last} after id \
                 {before}, not one consecutive run",
                jobs.len()
            ),
        ));
    }
    *newest = Some(last);
    Ok((before + 1..=last).collect())
}

/// The job holding `key`: a live or succeeded job, or a remembered key of a pruned job.
pub(super) fn find_key_holder(conn: &Connection, key: &str, now: i64) -> Result<Option<i64>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM jobs WHERE idempotency_key = ?1
           AND status IN ('queued', 'running', 'failed', 'succeeded')",
    )?;
    if let Some(id) = stmt.query_row([key], |row| row.get(0)).optional()? {
        return Ok(Some(id));
    }
    let mut stmt = conn
        .prepare_cached("SELECT job_id FROM idempotency_keys WHERE key = ?1 AND expires_at > ?2")?;
    Ok(stmt
        .query_row(params![key, now], |row| row.get(0))
        .optional()?)
}

/// Reads a row of the claim's SELECT, whatever its columns hold, and checks it against every
/// schema rule ([`RULE_BROKEN_SQL`] in code, which a test holds it to; all but `updated_at`'s,
/// which the claim writes anew): the worker claims on
/// a connection with the CHECK rules off, so a row another program wrote with the rules off
/// is caught here, and goes dead without running instead of stopping the queue (R28).
fn read_claimed(row: &rusqlite::Row<'_>, max_payload_bytes: usize) -> rusqlite::Result<ClaimedRow> {
    let mut problems = Vec::new();
    let p = &mut problems;
    let id = row.get(0)?;
    // Text the rules let in (a number too; empty text only where `empty_ok`), else the
    // problem noted and the value described. Each value is read once: this runs per job.
    let text = |i: usize,
                column: &str,
                what: &str,
                empty_ok: bool,
                p: &mut Vec<String>|
     -> rusqlite::Result<Option<String>> {
        let value = row.get_ref(i)?;
        if value == ValueRef::Text(b"") && !empty_ok {
            p.push(format!("column {column} holds TEXT '', not {what}"));
            return Ok(Some(String::new()));
        }
        Ok(lenient::opt_text_of(value, column, what, p))
    };
    let queue = text(1, "queue", "a queue name", false, p)?.unwrap_or_default();
    let job_type = text(2, "job_type", "a job type", false, p)?.unwrap_or_default();
    let payload = text(3, "payload", "JSON text", true, p)?.unwrap_or_default();
    strict_int(row, 4, "priority", i64::MIN, p)?;
    let created_at = strict_int(row, 12, "created_at", i64::MIN, p)?;
    if let Some(run_at) = strict_int(row, 5, "run_at", i64::MIN, p)? {
        if created_at.is_some_and(|created| run_at < created / 100) {
            p.push(format!(
                "column run_at holds {run_at}, which looks like seconds, not milliseconds since 1970"
            ));
        } else if run_at > crate::job::MAX_RUN_AT_MS {
            p.push(format!(
                "column run_at holds {run_at}, past the year 5000: microseconds or \
                 nanoseconds, not milliseconds"
            ));
        }
    }
    let attempts = strict_int(row, 6, "attempts", 0, p)?.unwrap_or(0);
    let max_attempts = strict_int(row, 7, "max_attempts", 1, p)?.unwrap_or(1);
    let timeout_ms = match row.get_ref(8)? {
        ValueRef::Null => None,
        _ => strict_int(row, 8, "timeout_ms", 1, p)?,
    };
    let locked_until = lenient::int(row, 9, "locked_until", p)?;
    let idempotency_key = text(10, "idempotency_key", "NULL or text", true, p)?;
    let group_key = text(11, "group_key", "NULL or text", true, p)?;
    let size = row.get_ref(3)?.as_bytes().map_or(0, <[u8]>::len);
    if size > max_payload_bytes {
        p.push(format!(
            "column payload is {size} bytes, over this worker's limit of \
             {max_payload_bytes} bytes"
        ));
    }
    Ok(ClaimedRow {
        id,
        queue,
        job_type,
        payload,
        attempt: attempts.saturating_add(1),
        max_attempts,
        timeout_ms,
        locked_until,
        idempotency_key,
        group_key,
        defect: (!problems.is_empty()).then(|| problems.join("; ")),
    })
}

/// What the claim's SELECT reads of each job, in [`read_claimed`]'s order; `LEASE` stands
/// for the lease's expression. Not `updated_at`: the claim writes it anew.
const CLAIMED_COLUMNS: &str = "j.id, j.queue, j.job_type, j.payload, j.priority, j.run_at,
    j.attempts, j.max_attempts, j.timeout_ms, LEASE, j.idempotency_key, j.group_key,
    j.created_at";

/// An INTEGER column's value of at least `least`, or `None` with the problem noted: the
/// schema's rules store a whole number as INTEGER whatever type it was bound as, so any
/// other stored type got in with the rules off.
fn strict_int(
    row: &rusqlite::Row<'_>,
    index: usize,
    column: &str,
    least: i64,
    problems: &mut Vec<String>,
) -> rusqlite::Result<Option<i64>> {
    let value = row.get_ref(index)?;
    Ok(match value {
        ValueRef::Integer(i) if i >= least => Some(i),
        _ => {
            let what = match least {
                i64::MIN => "an integer".to_string(),
                least => format!("an integer of at least {least}"),
            };
            problems.push(format!(
                "column {column} holds {}, not {what}",
                lenient::describe(value)
            ));
            None
        }
    })
}

/// Why a live row breaks a schema rule (the CHECK rules of schema.sql, in the same order),
/// or NULL. Shows the raw value as SQL would write it.
const RULE_BROKEN_SQL: &str = "CASE
    WHEN typeof(payload) = 'blob' THEN 'column payload holds ' || upper(typeof(payload)) || ' '
        || substr(quote(payload), 1, 64) || ', not JSON text'
    WHEN typeof(queue) = 'blob' OR queue = '' THEN 'column queue holds ' || upper(typeof(queue))
        || ' ' || substr(quote(queue), 1, 64) || ', not a queue name'
    WHEN typeof(job_type) = 'blob' OR job_type = '' THEN 'column job_type holds '
        || upper(typeof(job_type)) || ' ' || substr(quote(job_type), 1, 64) || ', not a job type'
    WHEN typeof(priority) <> 'integer' THEN 'column priority holds ' || upper(typeof(priority))
        || ' ' || substr(quote(priority), 1, 64) || ', not an integer'
    WHEN typeof(attempts) <> 'integer' OR attempts < 0 THEN 'column attempts holds '
        || upper(typeof(attempts)) || ' ' || substr(quote(attempts), 1, 64)
        || ', not an integer of at least 0'
    WHEN typeof(max_attempts) <> 'integer' OR max_attempts < 1 THEN 'column max_attempts holds '
        || upper(typeof(max_attempts)) || ' ' || substr(quote(max_attempts), 1, 64)
        || ', not an integer of at least 1'
    WHEN typeof(created_at) <> 'integer' OR typeof(updated_at) <> 'integer' THEN
        'columns created_at and updated_at hold ' || upper(typeof(created_at)) || ' '
        || substr(quote(created_at), 1, 64) || ' and ' || upper(typeof(updated_at)) || ' '
        || substr(quote(updated_at), 1, 64) || ', not integer milliseconds'
    WHEN typeof(run_at) <> 'integer' THEN 'column run_at holds ' || upper(typeof(run_at)) || ' '
        || substr(quote(run_at), 1, 64) || ', not integer milliseconds since 1970'
    WHEN run_at < created_at / 100 THEN 'column run_at holds ' || run_at
        || ', which looks like seconds, not milliseconds since 1970'
    WHEN run_at >= 100000000000000 THEN 'column run_at holds ' || run_at
        || ', past the year 5000: microseconds or nanoseconds, not milliseconds'
    WHEN timeout_ms IS NOT NULL AND (typeof(timeout_ms) <> 'integer' OR timeout_ms < 1) THEN
        'column timeout_ms holds ' || upper(typeof(timeout_ms)) || ' '
        || substr(quote(timeout_ms), 1, 64) || ', not NULL or a positive integer'
    WHEN typeof(idempotency_key) = 'blob' THEN
        'column idempotency_key holds ' || upper(typeof(idempotency_key)) || ' '
        || substr(quote(idempotency_key), 1, 64) || ', not NULL or text'
    WHEN typeof(group_key) = 'blob' THEN 'column group_key holds '
        || upper(typeof(group_key)) || ' ' || substr(quote(group_key), 1, 64)
        || ', not NULL or text'
END";

/// Makes every waiting row of `queue` that breaks a schema rule dead, with an error naming
/// the job, the column and what it held. Only runs after a claim failed on such a row: it
/// reads every waiting row of the queue.
fn refuse_rule_breakers(conn: &Connection, queue: &str, now: i64) -> Result<Vec<Refused>> {
    count_jobs_where(
        conn,
        "'dead'",
        1,
        &format!(
            "queue = ?1 AND status IN ('queued', 'failed') AND ({RULE_BROKEN_SQL}) IS NOT NULL"
        ),
        &queue,
    )?;
    let sql = format!(
        "UPDATE jobs SET status = 'dead', finished_at = ?1, updated_at = ?1, locked_by = NULL,
                locked_until = NULL,
                last_error = 'job ' || id || ': ' || ({RULE_BROKEN_SQL}) || '; dead without running'
         WHERE queue = ?2 AND status IN ('queued', 'failed') AND ({RULE_BROKEN_SQL}) IS NOT NULL
         RETURNING id, job_type, attempts, last_error"
    );
    let mut stmt = conn.prepare(&sql)?;
    let refused = stmt
        .query_map(params![now, queue], |row| {
            let mut ignored = Vec::new();
            Ok(Refused {
                id: row.get(0)?,
                job_type: lenient::text(row, 1, "job_type", &mut ignored)?,
                attempts: lenient::int(row, 2, "attempts", &mut ignored)?,
                error: lenient::text(row, 3, "last_error", &mut ignored)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for r in &refused {
        log::warn!("litejobs: {}", r.error);
    }
    Ok(refused)
}

/// Claims up to `limit` due jobs of one queue (see [`claim_rows`]). A claim never fails on a
/// row another program wrote: on the worker's connection (CHECK rules off) a row that breaks
/// a schema rule is claimed with a [`ClaimedRow::defect`] and goes dead without running; on
/// a connection with the rules on, its update to `running` is refused, so such rows are made
/// dead first and the claim runs again.
pub(super) fn claim(conn: &Connection, req: &ClaimRequest<'_>, now: i64) -> Result<Claimed> {
    match claim_rows(conn, req, now) {
        Ok(rows) => Ok(Claimed {
            rows,
            refused: Vec::new(),
        }),
        Err(e) if super::errors::is_constraint_violation(&e) => {
            // The failed statement was rolled back by itself; the transaction goes on.
            let refused = refuse_rule_breakers(conn, req.queue, now)?;
            let rows = claim_rows(conn, req, now)?;
            Ok(Claimed { rows, refused })
        }
        Err(e) => Err(e),
    }
}

/// Claims up to `limit` due jobs of one queue in (priority DESC, run_at, id) order, moving
/// them to `running` under a lease. Skips a paused queue, types this worker cannot run, and
/// any job whose group key already has a running job or an earlier due job (R13).
/// Must run inside a write transaction (the dispatcher's `BEGIN IMMEDIATE`): its lock is what
/// makes the claim's SELECT and UPDATE choose the same rows, and the claim atomic (R3).
fn claim_rows(conn: &Connection, req: &ClaimRequest<'_>, now: i64) -> Result<Vec<ClaimedRow>> {
    if req.limit == 0 || req.job_types.is_empty() {
        return Ok(Vec::new());
    }
    if conn.is_autocommit() {
        return Err(crate::Error::new(
            crate::ErrorKind::Database,
            "a claim must run inside a write transaction; nothing was claimed",
        ));
    }
    let sql = claim_sql(req.job_types.len());
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
        let first_id = 7 + 2 * req.job_types.len();
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

/// The claim's statements for a worker of `types` job types.
struct ClaimSql {
    select: String,
    /// The update of 1, 2, 4, … [`CLAIM_IDS_PER_UPDATE`] chosen jobs by id.
    updates: Vec<String>,
}

/// The most ids one claiming `UPDATE` takes.
const CLAIM_IDS_PER_UPDATE: usize = 64;

/// The claim's statements for `types` job types, built once per process for each count (a
/// claim's text depends on nothing else; building it per claim cost 8 000 instructions).
fn claim_sql(types: usize) -> std::sync::Arc<ClaimSql> {
    static BUILT: std::sync::Mutex<Vec<(usize, std::sync::Arc<ClaimSql>)>> =
        std::sync::Mutex::new(Vec::new());
    let mut built = BUILT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, sql)) = built.iter().find(|(n, _)| *n == types) {
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
            WHERE j.queue = ?5 AND j.status IN ('queued', 'failed') AND j.run_at <= ?2
              AND j.job_type IN ({types})
              AND NOT EXISTS (SELECT 1 FROM queues WHERE name = ?5 AND paused = 1)
              AND (j.group_key IS NULL OR (
                   NOT EXISTS (SELECT 1 FROM jobs r
                               WHERE r.group_key = j.group_key AND r.status = 'running')
                   AND j.id = (SELECT g.id FROM jobs g
                               WHERE g.group_key = j.group_key
                                 AND g.status IN ('queued', 'failed') AND g.run_at <= ?2
                               ORDER BY g.priority DESC, g.run_at, g.id LIMIT 1)))
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT CAST(?6 AS INTEGER)",
        types = type_params.join(", "),
    );
    // `?1` (the worker) only in the UPDATEs, the choice's parameters only in the SELECT:
    // all take the same numbering, so one binding serves both; the ids follow.
    let updates = (0..=CLAIM_IDS_PER_UPDATE.ilog2())
        .map(|power| {
            let ids: Vec<String> = (0..1usize << power)
                .map(|i| format!("?{}", 7 + 2 * n + i))
                .collect();
            // A row whose attempts are not a whole number of at least 0 (written with the
            // rules off) gets attempt 1, as `read_claimed` counts it: the fence then holds and
            // the claim's defect makes the job dead, instead of a lease no write can match.
            format!(
                "UPDATE jobs SET status = 'running', attempts = CASE
                            WHEN typeof(attempts) = 'integer' AND attempts >= 0 THEN attempts + 1
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
    built.push((types, std::sync::Arc::clone(&sql)));
    sql
}

/// True when a claim could find work: some job of these types in this queue is due.
/// A cheap read that spares an idle worker the write lock on every poll.
pub(super) fn any_due(
    conn: &Connection,
    queue: &str,
    job_types: &[String],
    now: i64,
) -> Result<bool> {
    if job_types.is_empty() {
        return Ok(false);
    }
    let type_params: Vec<String> = (0..job_types.len())
        .map(|i| format!("?{}", i + 3))
        .collect();
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM jobs WHERE queue = ?1 AND status IN ('queued', 'failed')
                        AND run_at <= ?2 AND job_type IN ({}))
                AND NOT EXISTS (SELECT 1 FROM queues WHERE name = ?1 AND paused = 1)",
        type_params.join(", ")
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut args: Vec<rusqlite::types::Value> = vec![queue.to_string().into(), now.into()];
    args.extend(job_types.iter().map(|t| t.clone().into()));
    Ok(stmt.query_row(rusqlite::params_from_iter(args), |row| row.get(0))?)
}

/// Sets a new lease expiry (heartbeat) and optionally progress. False when the lease is gone.
pub(super) fn extend_lease(
    conn: &Connection,
    lease: Lease<'_>,
    until: i64,
    progress: Option<&str>,
    now: i64,
) -> Result<bool> {
    let mut stmt = conn.prepare_cached(
        "UPDATE jobs SET locked_until = MAX(locked_until, ?1), progress = COALESCE(?2, progress),
                         updated_at = ?3
         WHERE id = ?4 AND status = 'running' AND locked_by = ?5 AND attempts = ?6",
    )?;
    let n = stmt.execute(params![
        until,
        progress,
        now,
        lease.job_id,
        lease.worker_id,
        lease.attempt
    ])?;
    Ok(n == 1)
}

/// Successes go in by statements of up to this many jobs, as inserts do
/// ([`ROWS_PER_INSERT`]): one `UPDATE .. FROM (VALUES ..)` for many jobs measured 1.8 times
/// as fast as a statement per job.
const ROWS_PER_SUCCEED: usize = 32;

/// Marking jobs succeeded: `?1` is the time; then per job its id, attempt, worker, result
/// and progress. Each row is fenced by its own lease; `RETURNING` says which held, with the
/// queue and type as stored (for the finished-job counts).
static SUCCESSES: RowStatements = RowStatements::new(ROWS_PER_SUCCEED, |rows| {
    format!(
        "{} RETURNING jobs.id, jobs.queue, jobs.job_type",
        success_update(rows, 5, "")
    )
});

/// [`SUCCESSES`] for jobs whose rows still hold the queue and type they were claimed with
/// (`column6`, `column7`), without `RETURNING`: when every row changed, each lease held and
/// each success counts under its claimed queue and type. `RETURNING` made SQLite keep a
/// table of the returned rows: measured with callgrind, a tenth of the instructions per job.
static SUCCESSES_AS_CLAIMED: RowStatements = RowStatements::new(ROWS_PER_SUCCEED, |rows| {
    success_update(
        rows,
        7,
        " AND jobs.queue = done.column6 AND jobs.job_type = done.column7",
    )
});

/// The success update of `rows` jobs of `per_row` values each (the first five: id, attempt,
/// worker, result, progress), with `and` added to its fence.
fn success_update(rows: usize, per_row: usize, and: &str) -> String {
    format!(
        "UPDATE jobs SET status = 'succeeded', finished_at = ?1, updated_at = ?1,
                locked_by = NULL, locked_until = NULL, result = done.column4,
                progress = COALESCE(done.column5, jobs.progress)
         FROM (VALUES {}) AS done
         WHERE jobs.id = done.column1 AND jobs.status = 'running'
           AND jobs.locked_by = done.column3 AND jobs.attempts = done.column2{and}",
        value_rows(rows, per_row, "")
    )
}

/// The queue and type a success is counted under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CountedAs {
    /// Those it was claimed with ([`Success::queue`], [`Success::job_type`]).
    Claimed,
    /// Others, as the row holds them now (another program changed them while it ran).
    Stored(String, String),
}

/// Marks jobs succeeded, each fenced by its lease (see [`JobStore::succeed`]). Returns, per
/// job in order, what it is counted under, or `None` when its lease was gone.
pub(super) fn succeed(
    conn: &Connection,
    jobs: &[Success<'_>],
    now: i64,
) -> Result<Vec<Option<CountedAs>>> {
    let mut written = vec![None; jobs.len()];
    let mut next = 0;
    while next < jobs.len() {
        let rows = SUCCESSES.next_rows(jobs.len() - next);
        let chunk = &jobs[next..next + rows];
        // Every lease held and every row as claimed (all but always): done, in one statement
        // without `RETURNING`. Otherwise that statement is undone and the one that reports
        // row by row runs instead.
        conn.prepare_cached("SAVEPOINT litejobs_succeed")?
            .execute([])?;
        let as_claimed = bind_successes(conn, SUCCESSES_AS_CLAIMED.sql(rows), chunk, now, true)
            .and_then(|mut stmt| Ok(stmt.raw_execute()?));
        let undo = !matches!(as_claimed, Ok(n) if n == rows);
        if undo {
            conn.prepare_cached("ROLLBACK TO litejobs_succeed")?
                .execute([])?;
        }
        conn.prepare_cached("RELEASE litejobs_succeed")?
            .execute([])?;
        as_claimed?;
        if !undo {
            written[next..next + rows].fill(Some(CountedAs::Claimed));
            next += rows;
            continue;
        }
        let mut stmt = bind_successes(conn, SUCCESSES.sql(rows), chunk, now, false)?;
        let mut returned = stmt.raw_query();
        while let Some(row) = returned.next()? {
            let id: i64 = row.get(0)?;
            // A claimed job's queue and type are text (the claim matched them as text).
            let (queue, job_type): (String, String) = (row.get(1)?, row.get(2)?);
            if let Some(at) = chunk.iter().position(|job| job.lease.job_id == id) {
                let job = &chunk[at];
                written[next + at] = Some(if (job.queue, job.job_type) == (&queue, &job_type) {
                    CountedAs::Claimed
                } else {
                    CountedAs::Stored(queue, job_type)
                });
            }
        }
        next += rows;
    }
    Ok(written)
}

/// `sql` (a success statement for `jobs.len()` rows) with `now` and the jobs bound, and
/// their claimed queue and type where `as_claimed`.
fn bind_successes<'c>(
    conn: &'c Connection,
    sql: &str,
    jobs: &[Success<'_>],
    now: i64,
    as_claimed: bool,
) -> Result<rusqlite::CachedStatement<'c>> {
    let mut stmt = conn.prepare_cached(sql)?;
    stmt.raw_bind_parameter(1, now)?;
    let per_row = if as_claimed { 7 } else { 5 };
    for (row, job) in jobs.iter().enumerate() {
        let p = 2 + row * per_row;
        stmt.raw_bind_parameter(p, job.lease.job_id)?;
        stmt.raw_bind_parameter(p + 1, job.lease.attempt)?;
        stmt.raw_bind_parameter(p + 2, job.lease.worker_id)?;
        stmt.raw_bind_parameter(p + 3, job.result)?;
        stmt.raw_bind_parameter(p + 4, job.progress)?;
        if as_claimed {
            stmt.raw_bind_parameter(p + 5, job.queue)?;
            stmt.raw_bind_parameter(p + 6, job.job_type)?;
        }
    }
    Ok(stmt)
}

/// Adds `n` (negative to take off) to the finished-job count of `(queue, job_type, status)`.
pub(super) fn add_count(
    conn: &Connection,
    queue: &str,
    job_type: &str,
    status: &str,
    n: i64,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO job_counts (queue, job_type, status, n) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (queue, job_type, status) DO UPDATE SET n = n + excluded.n",
    )?
    .execute(params![queue, job_type, status, n])?;
    Ok(())
}

/// True when `id` is the largest id in the table. That row is never deleted: without
/// AUTOINCREMENT, SQLite gives a new row one more than the largest id, so keeping the newest
/// row is what keeps ids from being reused (schema.sql, `jobs_newest_kept`).
pub(super) fn is_newest(conn: &Connection, id: i64) -> Result<bool> {
    let newest: Option<i64> = conn
        .prepare_cached("SELECT MAX(id) FROM jobs")?
        .query_row([], |row| row.get(0))?;
    Ok(newest == Some(id))
}

/// Counts job `id` in `job_counts` under its current (finished) status, by the row's own
/// values (whatever another program stored there). For the rarer finishing writes.
pub(super) fn count_row(conn: &Connection, id: i64, n: i64) -> Result<()> {
    count_jobs_where(
        conn,
        "status",
        n,
        "id = ?1 AND (status = 'succeeded' OR status = 'dead' OR status = 'cancelled')",
        &id,
    )
}

/// Adds `sign` times the jobs that `filter` (a `WHERE` with one parameter, `?1` = `arg`)
/// selects to `job_counts`, by queue, type and `status_sql` (the `status` column, or the
/// status they are about to get, e.g. `'dead'`). One upsert per group: litejobs' own
/// connections run without the counting triggers and count set-wise before or after a
/// write that changes many rows.
pub(super) fn count_jobs_where(
    conn: &Connection,
    status_sql: &str,
    sign: i64,
    filter: &str,
    arg: &dyn rusqlite::ToSql,
) -> Result<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO job_counts (queue, job_type, status, n)
         SELECT queue, job_type, {status_sql}, ?2 * COUNT(*) FROM jobs WHERE {filter}
         GROUP BY 1, 2, 3
         ON CONFLICT (queue, job_type, status) DO UPDATE SET n = n + excluded.n"
    ))?
    .execute(params![arg, sign])?;
    Ok(())
}

/// Remembers a succeeded job's idempotency key for the window (R12).
pub(super) fn remember_key(
    conn: &Connection,
    key: &str,
    job_id: i64,
    now: i64,
    window_ms: i64,
) -> Result<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO idempotency_keys (key, job_id, completed_at, expires_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id,
             completed_at = excluded.completed_at, expires_at = excluded.expires_at",
    )?;
    stmt.execute(params![key, job_id, now, now.saturating_add(window_ms)])?;
    Ok(())
}

/// True when `key` is remembered as completed (not expired).
pub(super) fn key_remembered(conn: &Connection, key: &str, now: i64) -> Result<bool> {
    let mut stmt = conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE key = ?1 AND expires_at > ?2)",
    )?;
    Ok(stmt.query_row(params![key, now], |row| row.get(0))?)
}

/// Records a failed attempt: `failed` with a new run time, or `dead`. False when the lease
/// is gone.
pub(super) fn fail(
    conn: &Connection,
    lease: Lease<'_>,
    after: AfterFailure,
    error: &str,
    status_code: Option<i64>,
    now: i64,
) -> Result<bool> {
    // ?1 is the next run time, or NULL when the job is dead.
    let retry_at = match after {
        AfterFailure::RetryAt(run_at) => Some(clamp_run_at(run_at)),
        AfterFailure::Dead => None,
    };
    let n = conn
        .prepare_cached(
            "UPDATE jobs SET status = CASE WHEN ?1 IS NULL THEN 'dead' ELSE 'failed' END,
                    run_at = COALESCE(?1, run_at),
                    finished_at = CASE WHEN ?1 IS NULL THEN ?4 ELSE finished_at END,
                    last_error = ?2, last_status_code = ?3, updated_at = ?4,
                    locked_by = NULL, locked_until = NULL
             WHERE id = ?5 AND status = 'running' AND locked_by = ?6 AND attempts = ?7",
        )?
        .execute(params![
            retry_at,
            error,
            status_code,
            now,
            lease.job_id,
            lease.worker_id,
            lease.attempt
        ])?;
    if n == 1 && retry_at.is_none() {
        count_row(conn, lease.job_id, 1)?;
    }
    Ok(n == 1)
}

/// Puts a running job back without spending its attempt: snoozed until `run_at`, or
/// released (shutdown, lost lease check) due at once. False when the lease is gone.
pub(super) fn put_back(conn: &Connection, lease: Lease<'_>, run_at: i64, now: i64) -> Result<bool> {
    let mut stmt = conn.prepare_cached(
        "UPDATE jobs SET status = 'queued', attempts = attempts - 1, run_at = ?1, updated_at = ?2,
                         locked_by = NULL, locked_until = NULL
         WHERE id = ?3 AND status = 'running' AND locked_by = ?4 AND attempts = ?5",
    )?;
    let n = stmt.execute(params![
        clamp_run_at(run_at),
        now,
        lease.job_id,
        lease.worker_id,
        lease.attempt
    ])?;
    Ok(n == 1)
}

/// Cancels a running job at its handler's request. False when the lease is gone.
pub(super) fn cancel_running(
    conn: &Connection,
    lease: Lease<'_>,
    reason: &str,
    now: i64,
) -> Result<bool> {
    let mut stmt = conn.prepare_cached(
        "UPDATE jobs SET status = 'cancelled', finished_at = ?1, updated_at = ?1, last_error = ?2,
                         locked_by = NULL, locked_until = NULL
         WHERE id = ?3 AND status = 'running' AND locked_by = ?4 AND attempts = ?5",
    )?;
    let n = stmt.execute(params![
        now,
        reason,
        lease.job_id,
        lease.worker_id,
        lease.attempt
    ])?;
    if n == 1 {
        count_row(conn, lease.job_id, 1)?;
    }
    Ok(n == 1)
}

/// Reaps running jobs whose lease expired before `now` (R9), or that have none (a row
/// another program inserted as `running`): each gets a `lost` attempt row, then becomes due at once, or dead when its attempts are spent (a job that kills its
/// worker every time must not crash-loop). Never touches a live lease. Returns the count.
pub(super) fn reap_expired(conn: &Connection, now: i64) -> Result<usize> {
    // Counts first (litejobs' connections keep them in code), from the rows about to change.
    conn.prepare_cached(
        "INSERT INTO attempt_counts (job_type, outcome, n)
         SELECT job_type, 'lost', COUNT(*) FROM jobs
         WHERE status = 'running' AND (locked_until < ?1 OR locked_until IS NULL)
         GROUP BY job_type
         ON CONFLICT (job_type, outcome) DO UPDATE SET n = n + excluded.n",
    )?
    .execute([now])?;
    conn.prepare_cached(
        "INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome,
                                   error, duration_ms)
         SELECT id, attempts, locked_by, started_at, ?1, 'lost',
                'lease expired: the worker ' || COALESCE(locked_by, '?') ||
                ' died or hung while running attempt ' || attempts,
                ?1 - COALESCE(started_at, ?1)
         FROM jobs WHERE status = 'running' AND (locked_until < ?1 OR locked_until IS NULL)",
    )?
    .execute([now])?;
    count_jobs_where(
        conn,
        "'dead'",
        1,
        "status = 'running' AND (locked_until < ?1 OR locked_until IS NULL)
         AND attempts >= max_attempts",
        &now,
    )?;
    let dead = conn
        .prepare_cached(
            "UPDATE jobs SET status = 'dead', finished_at = ?1, updated_at = ?1,
                    last_error = 'the worker died or hung while running attempt ' || attempts ||
                                 ' of ' || max_attempts || ' (lease expired); attempts spent',
                    locked_by = NULL, locked_until = NULL
             WHERE status = 'running' AND (locked_until < ?1 OR locked_until IS NULL)
               AND attempts >= max_attempts",
        )?
        .execute([now])?;
    let retried = conn
        .prepare_cached(
            "UPDATE jobs SET status = 'failed', run_at = ?1, updated_at = ?1,
                    last_error = 'the worker died or hung while running attempt ' || attempts ||
                                 ' (lease expired)',
                    locked_by = NULL, locked_until = NULL
             WHERE status = 'running' AND (locked_until < ?1 OR locked_until IS NULL)",
        )?
        .execute([now])?;
    Ok(dead + retried)
}

/// The SQLite implementation of the runtime's job writes: each method is this file's
/// function of the same name on the transaction's connection.
impl JobStore for SqliteTx<'_> {
    fn insert_job(&self, job: &NewJob, payload: &str, now: i64) -> Result<Inserted> {
        insert(self.conn, job, payload, now)
    }

    fn insert_jobs(&self, jobs: &[NewJob], payloads: &[String], now: i64) -> Result<Vec<Inserted>> {
        insert_many(self.conn, jobs, payloads, now)
    }

    fn claim(&self, req: &ClaimRequest<'_>, now: i64) -> Result<Claimed> {
        claim(self.conn, req, now)
    }

    fn any_due(&self, queue: &str, job_types: &[String], now: i64) -> Result<bool> {
        any_due(self.conn, queue, job_types, now)
    }

    fn extend_lease(
        &self,
        lease: Lease<'_>,
        until: i64,
        progress: Option<&str>,
        now: i64,
    ) -> Result<bool> {
        extend_lease(self.conn, lease, until, progress, now)
    }

    fn succeed(&self, jobs: &[Success<'_>], now: i64) -> Result<Vec<bool>> {
        let written = succeed(self.conn, jobs, now)?;
        let mut counts = self.succeeded.borrow_mut();
        // Counted by runs of one queue and type (a batch is mostly one run): a map entry,
        // and its owned key, per run instead of per job.
        let mut run: Option<((&str, &str), i64)> = None;
        let mut add = |run: Option<((&str, &str), i64)>| {
            if let Some(((queue, job_type), n)) = run {
                *counts
                    .entry((queue.to_owned(), job_type.to_owned()))
                    .or_insert(0) += n;
            }
        };
        for (job, counted) in jobs.iter().zip(&written) {
            let key = match counted {
                None => continue,
                Some(CountedAs::Claimed) => (job.queue, job.job_type),
                Some(CountedAs::Stored(queue, job_type)) => (queue.as_str(), job_type.as_str()),
            };
            match &mut run {
                Some((current, n)) if *current == key => *n += 1,
                _ => add(run.replace((key, 1))),
            }
        }
        add(run);
        Ok(written.iter().map(Option::is_some).collect())
    }

    fn fail(
        &self,
        lease: Lease<'_>,
        after: AfterFailure,
        error: &str,
        status_code: Option<i64>,
        now: i64,
    ) -> Result<bool> {
        fail(self.conn, lease, after, error, status_code, now)
    }

    fn put_back(&self, lease: Lease<'_>, run_at: i64, now: i64) -> Result<bool> {
        put_back(self.conn, lease, run_at, now)
    }

    fn cancel_running(&self, lease: Lease<'_>, reason: &str, now: i64) -> Result<bool> {
        cancel_running(self.conn, lease, reason, now)
    }

    fn remember_key(&self, key: &str, job_id: i64, now: i64, window_ms: i64) -> Result<()> {
        remember_key(self.conn, key, job_id, now, window_ms)
    }

    fn key_remembered(&self, key: &str, now: i64) -> Result<bool> {
        key_remembered(self.conn, key, now)
    }

    fn insert_attempt(&self, row: &AttemptRow<'_>) -> Result<()> {
        super::history::insert(self.conn, row)
    }

    fn reap_expired(&self, now: i64) -> Result<usize> {
        reap_expired(self.conn, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::{Transaction, TransactionBehavior};
    use std::collections::BTreeMap;

    /// Marks one job succeeded under `lease`; true when the lease held.
    fn succeed_one(
        conn: &Connection,
        lease: Lease<'_>,
        result: Option<&str>,
        now: i64,
    ) -> Result<bool> {
        let success = Success {
            lease,
            result,
            progress: None,
            queue: "default",
            job_type: "t",
        };
        Ok(succeed(conn, &[success], now)?[0].is_some())
    }

    /// A private database with the current schema.
    fn db() -> Connection {
        let conn = Connection::open_in_memory().expect("in-memory database");
        super::super::migrate::check_and_migrate(
            &conn,
            false,
            std::time::Duration::from_secs(5),
            true,
        )
        .expect("migrations");
        super::super::keep_counts_in_code(&conn).expect("triggers off");
        conn
    }

    /// Runs `f` in one write transaction and commits it.
    fn write<T>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
        let value = f(&tx)?;
        tx.commit()?;
        Ok(value)
    }

    /// Jobs of a batch get the ids after the newest row, in the batch's order, around
    /// jobs with keys and after rows another program inserted with ids of its own; where
    /// SQLite would pick ids at random (the newest id is the last 64-bit integer) the batch
    /// is refused and nothing is inserted.
    #[test]
    fn batch_ids_follow_the_newest_row_in_order_or_the_batch_is_refused() {
        let conn = db();
        conn.execute(
            "INSERT INTO jobs (id, job_type, payload) VALUES (1000, 'other', '{}')",
            [],
        )
        .expect("a row with an id of its own");
        let jobs: Vec<NewJob> = (0..70)
            .map(|n| {
                let job = NewJob::new("t", serde_json::json!({ "n": n }));
                if n == 40 {
                    job.idempotency_key("forty")
                } else {
                    job
                }
            })
            .collect();
        let payloads: Vec<String> = (0..70).map(|n| format!("{{\"n\":{n}}}")).collect();
        let ids: Vec<i64> = write(&conn, |tx| insert_many(tx, &jobs, &payloads, T0))
            .expect("insert")
            .into_iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(ids, (1001..1071).collect::<Vec<_>>());
        let stored: Vec<String> = conn
            .prepare("SELECT payload FROM jobs WHERE id > 1000 ORDER BY id")
            .and_then(|mut st| {
                st.query_map([], |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()
            })
            .expect("read back");
        assert_eq!(stored, payloads, "each id holds its own job");

        conn.execute(
            "INSERT INTO jobs (id, job_type, payload) VALUES (9223372036854775806, 'other', '{}')",
            [],
        )
        .expect("a row just below the last id");
        let err = write(&conn, |tx| insert_many(tx, &jobs[..3], &payloads[..3], T0))
            .expect_err("three more ids do not fit in order");
        assert!(err.to_string().contains("not one consecutive run"), "{err}");
        let count: i64 = conn
            .query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
            .expect("count");
        assert_eq!(count, 72, "the refused batch left nothing behind");
    }

    /// The claim recovers from a rule-breaking row only if [`RULE_BROKEN_SQL`] names every
    /// row the schema's CHECK rules refuse to move to `running`, and no other: checked over
    /// every combination of odd values in the checked columns.
    #[test]
    fn rule_broken_sql_agrees_with_the_check_rules() {
        let db = db();
        let odd: &[(&str, &[&str])] = &[
            ("queue", &["'default'", "''", "x'71'", "7"]),
            ("job_type", &["'t'", "''", "x'74'"]),
            ("payload", &["'{}'", "x'7b7d'", "42"]),
            ("priority", &["0", "'high'", "1.5", "-3"]),
            ("attempts", &["0", "-1", "'x'"]),
            ("max_attempts", &["6", "0", "'five'", "2.5"]),
            (
                "run_at",
                &["1767225600000", "1767225600", "'2020-01-01'", "1.5e15", "0"],
            ),
            ("created_at", &["1767225600000", "'yesterday'", "5"]),
            ("timeout_ms", &["NULL", "0", "'10s'", "2.5", "100"]),
            ("idempotency_key", &["NULL", "'k'", "x'6b'"]),
            ("group_key", &["NULL", "'g'", "x'67'"]),
        ];
        write(&db, |tx| {
            tx.execute_batch("PRAGMA ignore_check_constraints = ON")?;
            let columns: Vec<&str> = odd.iter().map(|(c, _)| *c).collect();
            // Each column's odd values against the others' first (valid) value, and a few
            // rows breaking two rules at once.
            let mut rows: Vec<Vec<&str>> = Vec::new();
            for (i, (_, values)) in odd.iter().enumerate() {
                for v in *values {
                    let mut row: Vec<&str> = odd.iter().map(|(_, vs)| vs[0]).collect();
                    row[i] = v;
                    rows.push(row);
                }
            }
            let mut both: Vec<&str> = odd.iter().map(|(_, vs)| vs[0]).collect();
            both[2] = "x'7b7d'";
            both[6] = "'2020-01-01'";
            rows.push(both);
            for row in &rows {
                tx.execute(
                    &format!(
                        "INSERT INTO jobs ({}, updated_at) VALUES ({}, 1767225600000)",
                        columns.join(", "),
                        row.join(", ")
                    ),
                    [],
                )?;
            }
            tx.execute_batch("PRAGMA ignore_check_constraints = OFF")?;
            let ids: Vec<(i64, Option<String>)> = tx
                .prepare(&format!("SELECT id, {RULE_BROKEN_SQL} FROM jobs ORDER BY id"))?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            assert_eq!(ids.len(), rows.len());
            // The claim's own reading (on a connection with the rules off) finds the same
            // rows, naming the column the SQL names first.
            let claimed_sql = format!(
                "SELECT {} FROM jobs j ORDER BY j.id",
                CLAIMED_COLUMNS.replace("LEASE", "0")
            );
            let defects: Vec<Option<String>> = tx
                .prepare(&claimed_sql)?
                .query_map([], |r| read_claimed(r, 1 << 16).map(|c| c.defect))?
                .collect::<rusqlite::Result<_>>()?;
            for ((row, (_, broken)), defect) in rows.iter().zip(&ids).zip(&defects) {
                match (broken, defect) {
                    (None, None) => {}
                    (Some(why), Some(defect)) => {
                        let column = why
                            .split_whitespace()
                            .nth(1)
                            .expect("the SQL names a column");
                        assert!(defect.contains(column), "{row:?}: {why} / {defect}");
                    }
                    _ => panic!("row {row:?}: RULE_BROKEN_SQL says {broken:?}, the claim {defect:?}"),
                }
            }
            for ((id, broken), row) in ids.into_iter().zip(&rows) {
                let moved = tx.execute(
                    "UPDATE jobs SET status = 'running' WHERE id = ?1",
                    [id],
                );
                match (&moved, &broken) {
                    (Ok(_), None) => {}
                    (Err(e), Some(why)) => assert!(
                        e.to_string().contains("CHECK constraint failed"),
                        "{row:?}: {e} ({why})"
                    ),
                    _ => panic!(
                        "row {row:?}: the CHECK rules say {moved:?} but RULE_BROKEN_SQL says {broken:?}"
                    ),
                }
            }
            Ok(())
        })
        .expect("the comparison runs");
    }

    /// A big batch goes in with the CHECK rules off: every job that passed litejobs'
    /// validation must still satisfy every rule (none is named by [`RULE_BROKEN_SQL`]), may
    /// move to `running` with the rules on, and the rules are on again afterwards.
    #[test]
    fn validated_jobs_satisfy_every_rule_on_the_unchecked_path() {
        use std::time::{Duration, UNIX_EPOCH};
        let db = db();
        let now = 1_767_225_600_000;
        let edge: Vec<NewJob> = vec![
            NewJob::new("t", serde_json::json!(null)),
            NewJob::new(" t ", serde_json::json!([1, "x"])).queue("q é"),
            NewJob::new("t", serde_json::json!({})).priority(i64::MIN),
            NewJob::new("t", serde_json::json!({})).priority(i64::MAX),
            NewJob::new("t", serde_json::json!({})).max_attempts(1),
            NewJob::new("t", serde_json::json!({})).max_attempts(u32::MAX),
            NewJob::new("t", serde_json::json!({})).timeout(Duration::from_millis(1)),
            NewJob::new("t", serde_json::json!({})).timeout(Duration::MAX),
            NewJob::new("t", serde_json::json!({})).delay(Duration::from_millis(
                (crate::job::MAX_RUN_AT_MS - now) as u64,
            )),
            NewJob::new("t", serde_json::json!({})).run_at(UNIX_EPOCH),
            NewJob::new("t", serde_json::json!({}))
                .run_at(UNIX_EPOCH + Duration::from_millis(crate::job::MAX_RUN_AT_MS as u64)),
            NewJob::new("t", serde_json::json!({})).group_key("g"),
            NewJob::from_json_text("t", " { \"a\" : 1 } "),
            // What validation must refuse: were it to let one in, its row would break a rule.
            NewJob::new("t", serde_json::json!({})).max_attempts(0),
            NewJob::new("t", serde_json::json!({})).timeout(Duration::ZERO),
            NewJob::new("t", serde_json::json!({})).queue(""),
            NewJob::new("", serde_json::json!({})),
            NewJob::from_json_text("t", "not json"),
        ];
        let valid: Vec<(NewJob, String)> = edge
            .into_iter()
            .filter_map(|job| {
                let payload = crate::job::validate(&job, 1 << 16).ok()?;
                Some((job, payload))
            })
            .collect();
        assert_eq!(valid.len(), 13, "the cases meant to be valid are");
        let (jobs, payloads): (Vec<NewJob>, Vec<String>) = (0..VALIDATED_FROM_ROWS * 2)
            .map(|i| valid[i % valid.len()].clone())
            .unzip();
        write(&db, |tx| {
            assert_eq!(insert_many(tx, &jobs, &payloads, now)?.len(), jobs.len());
            let broken: Vec<(i64, String)> = tx
                .prepare(&format!(
                    "SELECT id, {RULE_BROKEN_SQL} FROM jobs WHERE {RULE_BROKEN_SQL} IS NOT NULL"
                ))?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            assert_eq!(broken, Vec::new(), "validated rows that break a rule");
            let ignored: i64 = tx.query_row("PRAGMA ignore_check_constraints", [], |r| r.get(0))?;
            assert_eq!(ignored, 0, "the rules are on again");
            let moved = tx.execute("UPDATE jobs SET status = 'running'", [])?;
            assert_eq!(moved, jobs.len(), "the rules let every row run");
            Ok(())
        })
        .expect("the batch scenario runs");
    }

    // -----------------------------------------------------------------------------------
    // Fences: a write for an attempt that no longer holds the lease changes nothing
    // -----------------------------------------------------------------------------------

    const T0: i64 = 1_700_000_000_000;

    /// A claim of one `t` job of the default queue by `worker`.
    fn t_jobs<'a>(types: &'a [String], worker: &'a str) -> ClaimRequest<'a> {
        ClaimRequest {
            queue: "default",
            job_types: types,
            type_timeouts_ms: &[1_000],
            limit: 1,
            worker_id: worker,
            lease_grace_ms: 500,
            max_payload_bytes: 1 << 16,
        }
    }

    fn claim_one(tx: &Connection, worker: &str, now: i64) -> ClaimedRow {
        let types = ["t".to_string()];
        let req = t_jobs(&types, worker);
        let mut claimed = claim(tx, &req, now).expect("claim");
        assert!(claimed.refused.is_empty());
        claimed.rows.pop().expect("a due job to claim")
    }

    /// A success counts under the queue and type its row holds when it finishes: those it
    /// was claimed with (the statement without `RETURNING`), or, where another program
    /// changed them while it ran, the stored ones (the statement that reads them back).
    #[test]
    fn successes_count_under_the_queue_and_type_the_row_holds() {
        let db = db();
        write(&db, |tx| {
            for _ in 0..3 {
                tx.execute(
                    "INSERT INTO jobs (job_type, payload, run_at, created_at)
                     VALUES ('t', '{}', ?1, ?1)",
                    [T0],
                )?;
            }
            let types = ["t".to_string()];
            let req = ClaimRequest {
                limit: 3,
                ..t_jobs(&types, "A")
            };
            let rows = claim(tx, &req, T0)?.rows;
            let count = |stx: &SqliteTx<'_>, rows: &[ClaimedRow]| -> Result<Vec<bool>> {
                let successes: Vec<Success<'_>> = rows
                    .iter()
                    .map(|r| Success {
                        lease: Lease {
                            job_id: r.id,
                            attempt: r.attempt,
                            worker_id: "A",
                        },
                        result: None,
                        progress: None,
                        queue: &r.queue,
                        job_type: &r.job_type,
                    })
                    .collect();
                stx.succeed(&successes, T0 + 1)
            };
            let key = |q: &str, t: &str| (q.to_string(), t.to_string());
            let stx = SqliteTx::new(tx);
            assert_eq!(count(&stx, &rows[..1])?, [true]);
            assert_eq!(
                *stx.succeeded.borrow(),
                BTreeMap::from([(key("default", "t"), 1)])
            );
            tx.execute(
                "UPDATE jobs SET queue = 'moved' WHERE id = ?1",
                [rows[1].id],
            )?;
            assert_eq!(count(&stx, &rows[1..])?, [true, true]);
            assert_eq!(
                *stx.succeeded.borrow(),
                BTreeMap::from([(key("default", "t"), 2), (key("moved", "t"), 1)])
            );
            // A success whose lease is gone counts nowhere.
            assert_eq!(count(&stx, &rows[..1])?, [false]);
            assert_eq!(stx.succeeded.borrow().values().sum::<i64>(), 3);
            Ok(())
        })
        .expect("the counting scenario runs");
    }

    /// A row that breaks a rule (written with the rules off) never fails a claim, with the
    /// rules on or off: with them on (a connection serving outside values) it is made dead
    /// and the good job is claimed; with them off (the worker's connection) it is claimed
    /// defective, naming the column, and goes dead without running.
    #[test]
    fn a_rule_breaker_never_fails_a_claim_with_the_rules_on_or_off() {
        for rules_off in [false, true] {
            let db = db();
            let types = ["t".to_string()];
            let req = ClaimRequest {
                limit: 10,
                ..t_jobs(&types, "A")
            };
            let claimed = write(&db, |tx| {
                tx.execute_batch(
                    "PRAGMA ignore_check_constraints = ON;
                     INSERT INTO jobs (job_type, payload, run_at, created_at)
                         VALUES ('t', '{}', 1700000000000, 1700000000000);
                     INSERT INTO jobs (job_type, payload, priority, run_at, created_at)
                         VALUES ('t', '{}', 'high', 1700000000000, 1700000000000);",
                )?;
                if !rules_off {
                    tx.execute_batch("PRAGMA ignore_check_constraints = OFF")?;
                }
                claim(tx, &req, T0)
            })
            .expect("the claim succeeds");
            let mut defects: Vec<(i64, Option<String>)> = claimed
                .rows
                .iter()
                .map(|r| (r.id, r.defect.clone()))
                .collect();
            // TEXT sorts above every number: the claim's order put the bad row first.
            defects.sort();
            if rules_off {
                assert!(claimed.refused.is_empty());
                assert_eq!(defects.len(), 2, "{defects:?}");
                assert_eq!(defects[0], (1, None));
                let defect = defects[1].1.clone().unwrap_or_default();
                assert!(
                    defects[1].0 == 2 && defect.contains("column priority holds TEXT 'high'"),
                    "{defects:?}"
                );
            } else {
                assert_eq!(defects, vec![(1, None)]);
                let refused: Vec<(i64, &str)> = claimed
                    .refused
                    .iter()
                    .map(|r| (r.id, r.error.as_str()))
                    .collect();
                assert!(
                    refused.len() == 1
                        && refused[0].0 == 2
                        && refused[0].1.contains("column priority holds TEXT 'high'"),
                    "{refused:?}"
                );
            }
        }
    }

    /// A claim outside a write transaction is refused: only the transaction's lock makes
    /// its SELECT and its UPDATE choose the same rows.
    #[test]
    fn a_claim_outside_a_write_transaction_is_refused_and_claims_nothing() {
        let db = db();
        db.execute(
            "INSERT INTO jobs (job_type, payload) VALUES ('t', '{}')",
            [],
        )
        .expect("a due job");
        let types = ["t".to_string()];
        let req = t_jobs(&types, "w");
        // A "now" far enough ahead that the job (run_at defaults to the wall clock) is due.
        let later = 4_000_000_000_000;
        let err = claim(&db, &req, later).expect_err("no transaction");
        assert!(
            err.to_string().contains("inside a write transaction"),
            "{err}"
        );
        let running: i64 = db
            .query_row(
                "SELECT COUNT(*) FROM jobs WHERE status = 'running'",
                [],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(running, 0);
        let tx = db.unchecked_transaction().expect("tx");
        assert_eq!(
            claim_one(&tx, "w", later).attempt,
            1,
            "inside one, the same claim works"
        );
    }

    /// Successes written together (45 jobs: statements of 32, 8, 4 and 1) each take their
    /// own result and keep their progress when none is given; a stale lease among them
    /// changes nothing and is reported as not applied, in its place.
    #[test]
    fn successes_written_together_are_each_fenced_by_their_own_lease() {
        let db = db();
        write(&db, |tx| {
            let jobs: Vec<NewJob> = (0..45)
                .map(|i| NewJob::new("t", serde_json::json!({ "i": i })))
                .collect();
            let payloads: Vec<String> = (0..45).map(|i| format!("{{\"i\":{i}}}")).collect();
            insert_many(tx, &jobs, &payloads, T0)?;
            let rows: Vec<ClaimedRow> = (0..45).map(|_| claim_one(tx, "A", T0)).collect();
            tx.execute(
                "UPDATE jobs SET progress = '\"half\"' WHERE id = ?1",
                [rows[3].id],
            )?;
            let before = |i: usize| snapshot(tx, rows[i].id);
            let stale = [
                (7, "B", rows[7].attempt),
                (20, "A", rows[20].attempt + 1),
                (44, "A", 0),
            ];
            let kept: Vec<_> = stale.iter().map(|&(i, _, _)| before(i)).collect();
            let results: Vec<String> = (0..45).map(|i| format!("{{\"r\":{i}}}")).collect();
            let successes: Vec<Success<'_>> = rows
                .iter()
                .enumerate()
                .map(|(i, row)| {
                    let (worker, attempt) = stale
                        .iter()
                        .find(|s| s.0 == i)
                        .map_or(("A", row.attempt), |&(_, w, a)| (w, a));
                    Success {
                        lease: Lease {
                            job_id: row.id,
                            attempt,
                            worker_id: worker,
                        },
                        result: (i % 2 == 0).then_some(results[i].as_str()),
                        progress: (i == 5).then_some("\"done\""),
                        queue: "default",
                        job_type: "t",
                    }
                })
                .collect();
            let written = succeed(tx, &successes, T0 + 10)?;
            for (i, row) in rows.iter().enumerate() {
                let is_stale = stale.iter().any(|s| s.0 == i);
                assert_eq!(written[i].is_some(), !is_stale, "job {i}");
                let (status, result, progress): (String, Option<String>, Option<String>) = tx
                    .query_row(
                        "SELECT status, result, progress FROM jobs WHERE id = ?1",
                        [row.id],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )?;
                if is_stale {
                    assert_eq!(status, "running", "job {i}");
                    continue;
                }
                assert_eq!(written[i], Some(CountedAs::Claimed));
                assert_eq!(status, "succeeded");
                assert_eq!(result, (i % 2 == 0).then(|| results[i].clone()), "job {i}");
                let expected = match i {
                    3 => Some("\"half\"".to_string()),
                    5 => Some("\"done\"".to_string()),
                    _ => None,
                };
                assert_eq!(progress, expected, "job {i}");
            }
            for (&(i, _, _), kept) in stale.iter().zip(kept) {
                assert_eq!(before(i), kept, "stale job {i} unchanged");
            }
            Ok(())
        })
        .expect("the batch scenario runs");
    }

    /// Every column of the job, to compare before and after a write.
    fn snapshot(tx: &Connection, id: i64) -> Vec<rusqlite::types::Value> {
        tx.query_row("SELECT * FROM jobs WHERE id = ?1", [id], |row| {
            (0..row.as_ref().column_count())
                .map(|i| row.get::<_, rusqlite::types::Value>(i))
                .collect()
        })
        .expect("the job row")
    }

    fn attempt_rows(tx: &Connection, id: i64) -> i64 {
        tx.query_row(
            "SELECT COUNT(*) FROM job_attempts WHERE job_id = ?1",
            [id],
            |r| r.get(0),
        )
        .expect("counting attempts")
    }

    /// Each fenced write, by name, applied with `lease`; true when it changed the job.
    type Write = fn(&Connection, Lease<'_>, i64) -> Result<bool>;
    const WRITES: &[(&str, Write)] = &[
        ("heartbeat", |c, l, now| {
            extend_lease(c, l, now + 60_000, Some("{}"), now)
        }),
        ("complete", |c, l, now| succeed_one(c, l, Some("{}"), now)),
        ("retry", |c, l, now| {
            fail(c, l, AfterFailure::RetryAt(now + 5_000), "boom", None, now)
        }),
        ("dead", |c, l, now| {
            fail(c, l, AfterFailure::Dead, "boom", Some(500), now)
        }),
        ("snooze", |c, l, now| put_back(c, l, now + 60_000, now)),
        ("release", |c, l, now| put_back(c, l, now, now)),
        ("cancel", |c, l, now| cancel_running(c, l, "stop", now)),
    ];

    /// A job running under worker A's attempt 2 (its attempt 1 was reaped), and the leases
    /// that must not write to it: another worker's with the same attempt, A's reaped
    /// attempt 1, and one for another job.
    #[test]
    fn a_stale_lease_changes_nothing_and_the_live_one_writes() {
        for (name, write_fenced) in WRITES {
            let conn = db();
            write(&conn, |tx| {
                let job = NewJob::new("t", serde_json::json!({}));
                let id = insert(tx, &job, "{}", T0)?.id;
                let first = claim_one(tx, "A", T0);
                assert_eq!((first.id, first.attempt), (id, 1));
                // Attempt 1's lease (1 000 ms + 500 ms grace) runs out; the reaper makes the
                // job due again and A claims it anew.
                assert_eq!(
                    reap_expired(tx, T0 + 1_499)?,
                    0,
                    "[{name}] a live lease is kept"
                );
                assert_eq!(
                    reap_expired(tx, T0 + 1_501)?,
                    1,
                    "[{name}] an expired one is reaped"
                );
                let second = claim_one(tx, "A", T0 + 1_501);
                assert_eq!((second.id, second.attempt), (id, 2));
                let now = T0 + 2_000;
                let before = snapshot(tx, id);
                let history = attempt_rows(tx, id);
                for stale in [
                    Lease {
                        job_id: id,
                        attempt: 2,
                        worker_id: "B",
                    },
                    Lease {
                        job_id: id,
                        attempt: 1,
                        worker_id: "A",
                    },
                    Lease {
                        job_id: id + 1,
                        attempt: 2,
                        worker_id: "A",
                    },
                ] {
                    assert!(
                        !write_fenced(tx, stale, now)?,
                        "[{name}] {stale:?} must not write"
                    );
                    assert_eq!(
                        snapshot(tx, id),
                        before,
                        "[{name}] {stale:?} changed the job"
                    );
                }
                assert_eq!(attempt_rows(tx, id), history);
                let live = Lease {
                    job_id: id,
                    attempt: 2,
                    worker_id: "A",
                };
                assert!(
                    write_fenced(tx, live, now)?,
                    "[{name}] the live lease writes"
                );
                assert_ne!(
                    snapshot(tx, id),
                    before,
                    "[{name}] the live write changed the job"
                );
                if *name != "heartbeat" {
                    // The job is no longer running: the same lease cannot write twice.
                    let after = snapshot(tx, id);
                    for (again, w) in WRITES {
                        assert!(!w(tx, live, now)?, "[{name}] then {again} wrote again");
                    }
                    assert_eq!(
                        snapshot(tx, id),
                        after,
                        "[{name}] a second write changed it"
                    );
                }
                Ok(())
            })
            .expect("the fence scenario runs");
        }
    }

    /// Another program may move a running job out of `running` by plain SQL without
    /// clearing its lease columns (an admin's `UPDATE jobs SET status = 'cancelled'`): the
    /// worker still holding that lease must not write over the outsider's decision.
    #[test]
    fn a_job_moved_out_of_running_by_plain_sql_is_not_written_by_its_old_lease() {
        for (name, write_fenced) in WRITES {
            for outside in ["cancelled", "succeeded", "queued", "dead"] {
                let conn = db();
                write(&conn, |tx| {
                    let id = insert(tx, &NewJob::new("t", serde_json::json!({})), "{}", T0)?.id;
                    let claimed = claim_one(tx, "A", T0);
                    tx.execute(
                        "UPDATE jobs SET status = ?1, finished_at = CASE WHEN ?1 = 'queued'                          THEN NULL ELSE ?2 END WHERE id = ?3",
                        params![outside, T0 + 10, id],
                    )?;
                    let before = snapshot(tx, id);
                    let history = attempt_rows(tx, id);
                    let lease = Lease {
                        job_id: id,
                        attempt: claimed.attempt,
                        worker_id: "A",
                    };
                    assert!(
                        !write_fenced(tx, lease, T0 + 20)?,
                        "[{name}] wrote a job an outsider made {outside}"
                    );
                    assert_eq!(snapshot(tx, id), before, "[{name}] changed the {outside} job");
                    assert_eq!(attempt_rows(tx, id), history);
                    Ok(())
                })
                .expect("the scenario runs");
            }
        }
    }

    #[test]
    fn the_reaper_takes_only_expired_leases_and_spends_the_attempt() {
        let conn = db();
        write(&conn, |tx| {
            let a = insert(tx, &NewJob::new("t", serde_json::json!({})), "{}", T0)?.id;
            let b = insert(
                tx,
                &NewJob::new("t", serde_json::json!({})).max_attempts(1),
                "{}",
                T0,
            )?
            .id;
            claim_one(tx, "A", T0);
            claim_one(tx, "A", T0 + 100);
            // a's lease ends at T0 + 1 500, b's at T0 + 1 600.
            assert_eq!(
                reap_expired(tx, T0 + 1_500)?,
                0,
                "a lease ending now is still live"
            );
            assert_eq!(reap_expired(tx, T0 + 1_550)?, 1);
            let status = |id: i64| -> String {
                tx.query_row("SELECT status FROM jobs WHERE id = ?1", [id], |r| r.get(0))
                    .expect("status")
            };
            assert_eq!((status(a), status(b)), ("failed".into(), "running".into()));
            // The kept counts move with the rows: b's live lease (attempts spent) is not
            // counted lost, nor dead.
            let counts = || -> (i64, i64) {
                let lost = tx
                    .query_row(
                        "SELECT COALESCE(SUM(n), 0) FROM attempt_counts WHERE outcome = 'lost'",
                        [],
                        |r| r.get(0),
                    )
                    .expect("lost attempts counted");
                let dead = tx
                    .query_row(
                        "SELECT COALESCE(SUM(n), 0) FROM job_counts WHERE status = 'dead'",
                        [],
                        |r| r.get(0),
                    )
                    .expect("dead jobs counted");
                (lost, dead)
            };
            assert_eq!(counts(), (1, 0), "a's lost attempt, nobody dead");
            assert_eq!(reap_expired(tx, T0 + 1_601)?, 1);
            assert_eq!(status(b), "dead", "its one attempt was spent");
            assert_eq!(counts(), (2, 1), "b's lost attempt, and b dead");
            assert_eq!(
                (attempt_rows(tx, a), attempt_rows(tx, b)),
                (1, 1),
                "a lost attempt each"
            );
            Ok(())
        })
        .expect("the reaper scenario runs");
    }

    /// At most one running job per group key, and within a key the first due job in
    /// (priority, run time, id) order goes first, whatever other keys do.
    #[test]
    fn the_claim_keeps_one_running_job_per_group_key_in_order() {
        let conn = db();
        write(&conn, |tx| {
            let job = |key: &str, priority: i64| {
                NewJob::new("t", serde_json::json!({}))
                    .group_key(key)
                    .priority(priority)
            };
            let k1 = insert(tx, &job("k", 0), "{}", T0)?.id;
            let k2 = insert(tx, &job("k", 5), "{}", T0)?.id;
            let other = insert(tx, &job("other", 0), "{}", T0)?.id;
            let free = insert(tx, &NewJob::new("t", serde_json::json!({})), "{}", T0)?.id;
            let types = ["t".to_string()];
            let req = ClaimRequest {
                limit: 10,
                ..t_jobs(&types, "A")
            };
            let ids = |c: Claimed| c.rows.iter().map(|r| r.id).collect::<Vec<_>>();
            // k2 outranks k1 within key k; one job per key; keyless jobs all go.
            assert_eq!(ids(claim(tx, &req, T0)?), vec![k2, other, free]);
            assert!(
                ids(claim(tx, &req, T0)?).is_empty(),
                "k1 waits while k2 runs"
            );
            let lease = Lease {
                job_id: k2,
                attempt: 1,
                worker_id: "A",
            };
            assert!(succeed_one(tx, lease, None, T0)?);
            assert_eq!(ids(claim(tx, &req, T0)?), vec![k1], "then k1 runs");
            Ok(())
        })
        .expect("the group-key scenario runs");
    }

    /// What a claim makes of a row's timeout and payload size at the edges: a timeout of
    /// 1 ms and a payload exactly at the limit run; a timeout of 0 (possible only with the
    /// checks switched off) and one byte over the limit make the job defective.
    #[test]
    fn claim_defects_at_the_edges_of_timeout_and_payload_size() {
        let db = db();
        write(&db, |tx| {
            tx.execute_batch("PRAGMA ignore_check_constraints = ON")?;
            let insert = |timeout: i64, payload: &str| -> rusqlite::Result<i64> {
                tx.execute(
                    "INSERT INTO jobs (job_type, payload, timeout_ms, run_at, created_at)
                     VALUES ('t', ?1, ?2, ?3, ?3)",
                    params![payload, timeout, T0],
                )?;
                Ok(tx.last_insert_rowid())
            };
            let limit = "{\"s\": \"xxxxxxxxxx\"}";
            let one_ms = insert(1, "{}")?;
            let zero_ms = insert(0, "{}")?;
            let at_limit = insert(1_000, limit)?;
            let over = insert(1_000, &format!("{limit} "))?;
            let types = ["t".to_string()];
            let req = ClaimRequest {
                limit: 10,
                max_payload_bytes: limit.len(),
                ..t_jobs(&types, "A")
            };
            let claimed = claim(tx, &req, T0)?;
            let defect = |id: i64| {
                claimed
                    .rows
                    .iter()
                    .find(|r| r.id == id)
                    .map(|r| r.defect.clone())
                    .expect("claimed")
            };
            assert_eq!(defect(one_ms), None);
            assert_eq!(defect(at_limit), None);
            assert!(defect(zero_ms).is_some_and(|d| d.contains("column timeout_ms")));
            assert!(defect(over).is_some_and(|d| d.contains("over this worker's limit")));
            Ok(())
        })
        .expect("the edge scenario runs");
    }
}
