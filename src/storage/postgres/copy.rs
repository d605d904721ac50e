//! Moving a queue from a SQLite file to PostgreSQL (`litejobs copy-to`): the live jobs
//! (queued, running, failed) and the dead ones awaiting a person, with their attempt
//! history, the webhook endpoints (secrets included, ids kept: delivery payloads name them),
//! the periodic schedules, paused queues, remembered idempotency keys, the job types marked
//! encrypted (envelopes move as they are, still encrypted), the workflows and batches, and
//! the waits between copied jobs (a held job arrives held, waiting for the same jobs). Ids
//! are kept, so
//! a job's id, a dead job's `requeued_as` and an endpoint's id mean the same after the move;
//! the sequences continue after the largest copied id.
//!
//! Running jobs arrive queued (their leases belonged to workers on the file). Finished
//! history (succeeded, cancelled), rate-limit and breaker state, and report runs stay
//! behind; so do the waits on finished jobs (settled already: a waiting step can no longer
//! read the results of its finished dependencies there). Everything is written in one PostgreSQL transaction into a schema with no jobs or
//! endpoints yet: a copy either lands whole or not at all, and never mixes with other ids.

use std::path::Path;

use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::Connection;
use rusqlite::types::Value;
use rusqlite::OpenFlags;

use super::sql::{query, IntRow, Query};
use super::{quoted_schema, redacted, PgTx, DEFAULT_SCHEMA};
use crate::error::{Error, ErrorKind, Result};
use crate::progress::Progress;
use crate::storage::{Db, DbConfig, Synchronous};

/// What a copy moved.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct CopyReport {
    /// Queued, running (now queued) and failed jobs.
    pub live_jobs: u64,
    /// Dead jobs awaiting a person (and dead jobs already requeued, for their history).
    pub dead_jobs: u64,
    /// Attempt history rows of the copied jobs.
    pub attempts: u64,
    /// What the copied jobs' attempts said (their logs).
    pub attempt_logs: u64,
    /// Webhook endpoints.
    pub endpoints: u64,
    /// Periodic schedules.
    pub schedules: u64,
    /// Paused queues.
    pub paused_queues: u64,
    /// Remembered idempotency keys.
    pub remembered_keys: u64,
    /// Job types marked encrypted (envelopes are copied as they are: the same keys open
    /// them on the server).
    pub encrypted_types: u64,
    /// Workflows and batches.
    pub workflows: u64,
    /// Waits between copied jobs (`job_deps` rows).
    pub dependencies: u64,
}

/// A column of a copied table, and whether it holds integers (`bigint`) or text.
type Columns = &'static [(&'static str, bool)];

const JOB_COLUMNS: Columns = &[
    ("id", true),
    ("queue", false),
    ("job_type", false),
    ("payload", false),
    ("status", false),
    ("priority", true),
    ("attempts", true),
    ("max_attempts", true),
    ("run_at", true),
    ("created_at", true),
    ("updated_at", true),
    ("started_at", true),
    ("finished_at", true),
    ("locked_by", false),
    ("locked_until", true),
    ("last_error", false),
    ("last_status_code", true),
    ("idempotency_key", false),
    ("group_key", false),
    ("timeout_ms", true),
    ("result", false),
    ("progress", false),
    ("requeued_by", false),
    ("requeued_at", true),
    ("requeue_reason", false),
    ("requeued_as", true),
    ("cancelled_by", false),
    ("cancel_reason", false),
    ("expires_at", true),
    ("workflow_id", true),
    ("step", false),
    ("waiting_for", true),
    ("held_run_at", true),
    ("error_group", false),
];

const WORKFLOW_COLUMNS: Columns = &[
    ("id", true),
    ("kind", false),
    ("name", false),
    ("open", true),
    ("created_at", true),
    ("closed_at", true),
];

const DEPENDENCY_COLUMNS: Columns = &[
    ("job_id", true),
    ("depends_on", true),
    ("any_outcome", true),
    ("state", false),
];

const ATTEMPT_COLUMNS: Columns = &[
    ("id", true),
    ("job_id", true),
    ("attempt", true),
    ("worker", false),
    ("started_at", true),
    ("finished_at", true),
    ("outcome", false),
    ("error", false),
    ("status_code", true),
    ("duration_ms", true),
    ("error_group", false),
];

const LOG_COLUMNS: Columns = &[
    ("job_id", true),
    ("attempt", true),
    ("log", false),
    ("cut", true),
    ("written_at", true),
];

const ENDPOINT_COLUMNS: Columns = &[
    ("id", true),
    ("url", false),
    ("secret", false),
    ("previous_secret", false),
    ("previous_secret_expires_at", true),
    ("enabled", true),
    ("disabled_reason", false),
    ("rate_limit", true),
    ("rate_period_ms", true),
    ("description", false),
    ("created_at", true),
    ("updated_at", true),
];

const SCHEDULE_COLUMNS: Columns = &[
    ("name", false),
    ("schedule", false),
    ("last_slot_at", true),
    ("last_job_id", true),
    ("next_slot_at", true),
    ("updated_at", true),
    ("job_type", false),
    ("payload", false),
    ("queue", false),
    ("priority", true),
    ("max_attempts", true),
];

const QUEUE_COLUMNS: Columns = &[("name", false), ("paused", true), ("updated_at", true)];

const ENCRYPTED_TYPE_COLUMNS: Columns = &[("job_type", false), ("created_at", true)];

const KEY_COLUMNS: Columns = &[
    ("key", false),
    ("job_id", true),
    ("completed_at", true),
    ("expires_at", true),
];

/// Rows per INSERT statement (each column goes as one array parameter).
const CHUNK: usize = 1000;

/// How the copy opens each side to check its schema (and create or migrate it), as a queue
/// opened with the defaults would; the storage layer's own open, so that moving rows needs
/// nothing above it.
fn schema_check(create: bool, pg_schema: Option<&str>) -> DbConfig {
    DbConfig {
        synchronous: Synchronous::default(),
        busy_timeout: std::time::Duration::from_secs(5),
        pool_size: 2,
        create,
        pg_schema: pg_schema.map(str::to_string),
        application_name: None,
    }
}

/// Copies the live and dead jobs, endpoints, schedules, paused queues and remembered keys
/// of the SQLite file at `sqlite` into PostgreSQL at `url` (schema `pg_schema`, default
/// `litejobs`, created or migrated first). Remembered keys are copied with their expiry
/// times (expired ones are ignored there as here, and pruned).
///
/// # Errors
/// The file is not a current litejobs database, the server cannot be reached, the target
/// schema already holds jobs or endpoints ([`ErrorKind::InvalidState`]), or a row cannot be
/// written (nothing is written then).
pub fn copy_sqlite_to_postgres(
    sqlite: &Path,
    url: &str,
    pg_schema: Option<&str>,
) -> Result<CopyReport> {
    copy_sqlite_to_postgres_with_progress(sqlite, url, pg_schema, &mut crate::progress::ignore)
}

/// [`copy_sqlite_to_postgres`], calling `on_progress` after each chunk of rows with the
/// rows copied so far of all the rows to copy (counted first, in the same snapshot).
///
/// # Errors
/// As [`copy_sqlite_to_postgres`].
pub fn copy_sqlite_to_postgres_with_progress(
    sqlite: &Path,
    url: &str,
    pg_schema: Option<&str>,
    on_progress: &mut dyn FnMut(Progress),
) -> Result<CopyReport> {
    // The file must be a current litejobs database; opening it through litejobs checks that
    // (and migrates an older one) before anything is read.
    drop(Db::open(sqlite, &schema_check(false, None))?);
    let source = rusqlite::Connection::open_with_flags(
        sqlite,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    let (url, in_url) = super::split_schema(url);
    let url = url.as_str();
    let schema = pg_schema.or(in_url.as_deref()).unwrap_or(DEFAULT_SCHEMA);
    let quoted = quoted_schema(schema)?;
    // Creates or migrates the target schema.
    drop(Db::open(Path::new(url), &schema_check(true, Some(schema)))?);
    let name = format!(
        "litejobs copy-to ({}:{})",
        crate::system::host::name(),
        std::process::id()
    );
    let mut conn = PgConnection::establish(&super::pool::named_url(url, &name)).map_err(|e| {
        Error::new(
            ErrorKind::Database,
            super::pool::connect_error(&redacted(url), &e.to_string()),
        )
    })?;
    // One snapshot of the file for the whole copy.
    source.execute_batch("BEGIN")?;
    conn.transaction(|c| {
        c.batch_execute(&format!("SET LOCAL search_path TO {quoted}"))?;
        let tx = PgTx::new(c);
        let existing = tx
            .row::<IntRow>(query(
                "SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM webhook_endpoints) AS v",
            ))?
            .map_or(0, |r| r.v);
        if existing > 0 {
            return Err(Error::new(
                ErrorKind::InvalidState,
                format!(
                    "PostgreSQL schema {schema:?} already holds jobs or webhook endpoints; copy into \
                     an empty schema (--pg-schema NAME) so ids cannot collide (nothing was written)"
                ),
            ));
        }
        let jobs_where = "status IN ('queued', 'running', 'failed', 'dead')";
        let attempts_where = format!("job_id IN (SELECT id FROM jobs WHERE {jobs_where})");
        let deps_where = format!(
            "job_id IN (SELECT id FROM jobs WHERE {jobs_where}) \
             AND depends_on IN (SELECT id FROM jobs WHERE {jobs_where})"
        );
        let mut total = 0;
        for (table, filter) in [
            ("jobs", jobs_where),
            ("job_attempts", &attempts_where),
            ("job_logs", &attempts_where),
            ("webhook_endpoints", "1"),
            ("periodic_schedules", "1"),
            ("queues", "paused <> 0"),
            ("idempotency_keys", "1"),
            ("encrypted_types", "1"),
            ("workflows", "1"),
            ("job_deps", &deps_where),
        ] {
            total += count(&source, table, filter)?;
        }
        let mut copier = Copier {
            source: &source,
            tx: &tx,
            done: 0,
            total,
            on_progress: &mut *on_progress,
        };
        let mut report = CopyReport::default();
        let copied = copier.rows("jobs", JOB_COLUMNS, jobs_where, |row| {
            // A running job's lease belonged to a worker on the file: due again at once.
            if row[4] == Value::Text("running".into()) {
                row[4] = Value::Text("queued".into());
                row[13] = Value::Null;
                row[14] = Value::Null;
            }
        })?;
        report.dead_jobs = count(&source, "jobs", "status = 'dead'")?;
        report.live_jobs = copied - report.dead_jobs;
        report.attempts = copier.rows("job_attempts", ATTEMPT_COLUMNS, &attempts_where, |_| {})?;
        report.attempt_logs = copier.rows("job_logs", LOG_COLUMNS, &attempts_where, |_| {})?;
        report.endpoints = copier.rows("webhook_endpoints", ENDPOINT_COLUMNS, "1", |_| {})?;
        report.schedules = copier.rows("periodic_schedules", SCHEDULE_COLUMNS, "1", |_| {})?;
        report.paused_queues = copier.rows("queues", QUEUE_COLUMNS, "paused <> 0", |_| {})?;
        report.remembered_keys = copier.rows("idempotency_keys", KEY_COLUMNS, "1", |_| {})?;
        report.encrypted_types =
            copier.rows("encrypted_types", ENCRYPTED_TYPE_COLUMNS, "1", |_| {})?;
        report.workflows = copier.rows("workflows", WORKFLOW_COLUMNS, "1", |_| {})?;
        // The jobs came with their holds (waiting_for, held_run_at): the waits go in as they
        // are, without the triggers that would hold their jobs a second time. DDL is
        // transactional here, so the triggers are back whatever happens.
        tx.execute(query("ALTER TABLE job_deps DISABLE TRIGGER USER"))?;
        report.dependencies = copier.rows("job_deps", DEPENDENCY_COLUMNS, &deps_where, |_| {})?;
        tx.execute(query("ALTER TABLE job_deps ENABLE TRIGGER USER"))?;
        // New rows continue after the copied ids, and ids the file ever gave are not
        // given again (its largest id may belong to a job that stayed behind).
        for (table, file_max) in [
            ("jobs", max_id(&source, "jobs")?),
            ("job_attempts", max_id(&source, "job_attempts")?),
            ("webhook_endpoints", max_id(&source, "webhook_endpoints")?),
            ("workflows", max_id(&source, "workflows")?),
        ] {
            tx.execute(
                query(&format!(
                    "SELECT setval(pg_get_serial_sequence('{table}', 'id'), \
                     greatest($1, (SELECT coalesce(max(id), 0) FROM {table}), 1)) AS v"
                ))
                .int(file_max),
            )?;
        }
        Ok(report)
    })
}

fn count(source: &rusqlite::Connection, table: &str, filter: &str) -> Result<u64> {
    let n: i64 = source.query_row(
        &format!("SELECT count(*) FROM {table} WHERE {filter}"),
        [],
        |r| r.get(0),
    )?;
    Ok(u64::try_from(n).unwrap_or(0))
}

fn max_id(source: &rusqlite::Connection, table: &str) -> Result<i64> {
    // Ids the file handed out, also of rows since deleted (AUTOINCREMENT's sequence).
    let seq: i64 = source
        .query_row(
            "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = ?1), 0)",
            [table],
            |r| r.get(0),
        )
        .unwrap_or(0);
    let max: i64 = source.query_row(
        &format!("SELECT coalesce(max(id), 0) FROM {table}"),
        [],
        |r| r.get(0),
    )?;
    Ok(seq.max(max))
}

/// Copies the rows of `table` matching `filter`, `CHUNK` at a time, each chunk as one
/// `INSERT … SELECT FROM unnest(…)` with a typed array per column. `adjust` may change a row
/// on its way. Returns the rows copied.
/// Copies tables from the file's snapshot into the target's transaction, telling
/// `on_progress` of each chunk.
struct Copier<'a, 'c> {
    source: &'a rusqlite::Connection,
    tx: &'a PgTx<'c>,
    /// Rows copied so far, of `total` in all the tables to copy.
    done: u64,
    total: u64,
    on_progress: &'a mut dyn FnMut(Progress),
}

impl Copier<'_, '_> {
    /// Copies the rows of `table` that `filter` takes, each changed by `adjust`, in chunks.
    fn rows(
        &mut self,
        table: &str,
        columns: Columns,
        filter: &str,
        mut adjust: impl FnMut(&mut Vec<Value>),
    ) -> Result<u64> {
        let names: Vec<&str> = columns.iter().map(|(n, _)| *n).collect();
        let mut stmt = self.source.prepare(&format!(
            "SELECT {} FROM {table} WHERE {filter} ORDER BY 1",
            names.join(", ")
        ))?;
        let mut rows = stmt.query([])?;
        let mut chunk: Vec<Vec<Value>> = Vec::with_capacity(CHUNK);
        let mut copied = 0u64;
        loop {
            let row = rows.next()?;
            let done = row.is_none();
            if let Some(row) = row {
                let mut values = Vec::with_capacity(columns.len());
                for i in 0..columns.len() {
                    values.push(row.get::<_, Value>(i)?);
                }
                adjust(&mut values);
                chunk.push(values);
            }
            if chunk.len() == CHUNK || (done && !chunk.is_empty()) {
                let n = insert_chunk(self.tx, table, columns, &chunk)?;
                copied += n;
                self.done += n;
                (self.on_progress)(Progress::of(self.done, Some(self.total)));
                chunk.clear();
            }
            if done {
                return Ok(copied);
            }
        }
    }
}

fn insert_chunk(tx: &PgTx<'_>, table: &str, columns: Columns, rows: &[Vec<Value>]) -> Result<u64> {
    let names: Vec<&str> = columns.iter().map(|(n, _)| *n).collect();
    let arrays: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, (_, int))| format!("${}::{}[]", i + 1, if *int { "bigint" } else { "text" }))
        .collect();
    let overriding = if columns.first().is_some_and(|(n, _)| *n == "id") {
        " OVERRIDING SYSTEM VALUE"
    } else {
        ""
    };
    let mut q: Query<'_> = query(&format!(
        "INSERT INTO {table} ({}){overriding} SELECT * FROM unnest({})",
        names.join(", "),
        arrays.join(", ")
    ));
    for (i, (name, int)) in columns.iter().enumerate() {
        if *int {
            let mut column = Vec::with_capacity(rows.len());
            for row in rows {
                column.push(as_int(&row[i]).map_err(|why| {
                    Error::new(
                        ErrorKind::InvalidJob,
                        format!("{table} row {:?}: column {name}: {why}", row[0]),
                    )
                })?);
            }
            q = q.opt_ints(&column);
        } else {
            let column: Vec<Option<String>> = rows.iter().map(|row| as_text(&row[i])).collect();
            q = q.opt_texts(&column);
        }
    }
    Ok(tx.execute(q)? as u64)
}

fn as_int(v: &Value) -> std::result::Result<Option<i64>, String> {
    match v {
        Value::Null => Ok(None),
        Value::Integer(i) => Ok(Some(*i)),
        Value::Real(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => Ok(Some(*f as i64)),
        Value::Text(t) => t
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| format!("{t:?} is not an integer")),
        other => Err(format!("{other:?} is not an integer")),
    }
}

fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Integer(i) => Some(i.to_string()),
        Value::Real(f) => Some(f.to_string()),
        Value::Text(t) => Some(t.clone()),
        Value::Blob(b) => Some(String::from_utf8_lossy(b).into_owned()),
    }
}
