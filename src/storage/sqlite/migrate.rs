//! Schema versions through `PRAGMA user_version`, applied in one transaction on open.
//!
//! Before anything is written the file is classified; a file that is not SQLite, a SQLite
//! file whose `jobs` table is not ours, or a file from a newer litejobs is refused with a
//! clear error and left untouched.

use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, TransactionBehavior};

use crate::error::{Error, ErrorKind, Result};

/// Migration `n` (1-based) is `MIGRATIONS[n - 1]`. Files are frozen once released;
/// `schema.sql` is kept equal to the result of all of them (tests/schema.rs proves it).
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_init.sql"),
    include_str!("migrations/0002_webhooks.sql"),
    include_str!("migrations/0003_reports_periodic.sql"),
    include_str!("migrations/0004_jobs_checked_at_the_door.sql"),
    include_str!("migrations/0005_read_side.sql"),
    include_str!("migrations/0006_job_ids_without_autoincrement.sql"),
    include_str!("migrations/0007_cancel_deadline_encryption.sql"),
    include_str!("migrations/0008_workflows.sql"),
    include_str!("migrations/0009_stored_schedules.sql"),
    include_str!("migrations/0010_error_groups.sql"),
    include_str!("migrations/0011_workers.sql"),
    include_str!("migrations/0012_job_logs.sql"),
];

/// The schema version this build writes and understands.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Columns that mark a `jobs` table as litejobs'.
const SIGNATURE_COLUMNS: &[&str] = &[
    "id",
    "queue",
    "job_type",
    "payload",
    "status",
    "run_at",
    "attempts",
    "max_attempts",
    "locked_by",
    "locked_until",
];

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// No litejobs schema yet (the file may hold the application's own tables).
    Empty,
    /// A litejobs schema at this version, at most `SCHEMA_VERSION`.
    Ours(i64),
}

fn classify(conn: &Connection) -> Result<State> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    let jobs_columns = {
        let mut stmt = conn.prepare("SELECT name FROM pragma_table_info('jobs')")?;
        let names = stmt.query_map([], |row| row.get::<_, String>(0))?;
        names.collect::<rusqlite::Result<Vec<String>>>()?
    };
    if jobs_columns.is_empty() {
        if version == 0 {
            return Ok(State::Empty);
        }
        return Err(Error::new(
            ErrorKind::ForeignDatabase,
            format!(
                "not a litejobs database: user_version is {version} but there is no jobs table \
                 (another program's schema?); the file was not changed"
            ),
        ));
    }
    let missing: Vec<&str> = SIGNATURE_COLUMNS
        .iter()
        .copied()
        .filter(|c| !jobs_columns.iter().any(|have| have == c))
        .collect();
    if !missing.is_empty() || version == 0 {
        let why = if missing.is_empty() {
            "its user_version is 0".to_string()
        } else {
            format!("it lacks the columns {}", missing.join(", "))
        };
        return Err(Error::new(
            ErrorKind::ForeignDatabase,
            format!(
                "the jobs table in this file is not litejobs' ({why}); the file was not changed"
            ),
        ));
    }
    if version > SCHEMA_VERSION {
        return Err(Error::new(
            ErrorKind::NewerSchema,
            format!(
                "database schema version {version} is newer than this litejobs understands \
                 ({SCHEMA_VERSION}); upgrade litejobs. The file was not changed"
            ),
        ));
    }
    Ok(State::Ours(version))
}

/// The oldest schema version a read-only open reads: versions 3 and 4 have the same tables
/// and columns (4 added CHECK rules), so a newer litejobs can inspect a file an older one
/// still writes to without migrating it under that program's feet.
pub(crate) const OLDEST_READABLE_VERSION: i64 = 3;

fn not_initialized() -> Error {
    Error::new(
        ErrorKind::Uninitialized,
        "not a litejobs database (it has no litejobs schema); run `litejobs init` to add one. \
         The file was not changed",
    )
}

/// For a read-only open: the file's schema version, or a clear refusal of a file without
/// the litejobs schema, a foreign, newer or non-SQLite file, or one too old to read. Writes
/// nothing.
pub(crate) fn check_readable(conn: &Connection) -> Result<i64> {
    let state = {
        let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Deferred)?;
        let state = classify(&tx)?;
        tx.commit()?;
        state
    };
    match state {
        State::Empty => Err(not_initialized()),
        State::Ours(version) if version < OLDEST_READABLE_VERSION => Err(Error::new(
            ErrorKind::Uninitialized,
            format!(
                "database schema version {version} is older than this litejobs reads without \
                 migrating ({OLDEST_READABLE_VERSION}); run `litejobs init` to migrate it. The \
                 file was not changed"
            ),
        )),
        State::Ours(version) => Ok(version),
    }
}

/// Lets this build's reads run on an older file opened read-only (which is never migrated):
/// temporary objects, private to the connection and shadowing the file's own, give it what
/// later migrations added, empty. Nothing is written to the file.
pub(crate) fn shim_older_for_reading(conn: &Connection) -> rusqlite::Result<()> {
    let version: i64 = conn.query_row("PRAGMA main.user_version", [], |row| row.get(0))?;
    if version < 7 {
        conn.execute_batch(
            "CREATE TEMP VIEW IF NOT EXISTS jobs AS
                 SELECT *, NULL AS cancelled_by, NULL AS cancel_reason, NULL AS expires_at,
                        NULL AS workflow_id, NULL AS step, 0 AS waiting_for,
                        NULL AS held_run_at
                 FROM main.jobs;
             CREATE TEMP TABLE IF NOT EXISTS encrypted_types (
                 job_type TEXT PRIMARY KEY NOT NULL, created_at INTEGER NOT NULL);",
        )?;
    } else if version < 8 {
        conn.execute_batch(
            "CREATE TEMP VIEW IF NOT EXISTS jobs AS
                 SELECT *, NULL AS workflow_id, NULL AS step, 0 AS waiting_for,
                        NULL AS held_run_at
                 FROM main.jobs;",
        )?;
    }
    if version < 8 {
        conn.execute_batch(
            "CREATE TEMP TABLE IF NOT EXISTS workflows (
                 id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL,
                 open INTEGER NOT NULL, created_at INTEGER NOT NULL, closed_at INTEGER);
             CREATE TEMP TABLE IF NOT EXISTS job_deps (
                 job_id INTEGER NOT NULL, depends_on INTEGER NOT NULL,
                 any_outcome INTEGER NOT NULL, state TEXT NOT NULL,
                 PRIMARY KEY (job_id, depends_on));",
        )?;
    }
    Ok(())
}

/// Refuses a foreign, newer or non-SQLite file, and brings an empty or older one to
/// [`SCHEMA_VERSION`] in one transaction. `wal` turns on WAL mode before the first write.
/// Without `create`, a file without the litejobs schema is refused (and left unchanged)
/// instead of getting one. Returns the version it migrated from (0: the schema was
/// created), `None` when the schema was current.
pub(crate) fn check_and_migrate(
    conn: &Connection,
    wal: bool,
    busy_timeout: Duration,
    create: bool,
) -> Result<Option<i64>> {
    // One read transaction, so the version and the tables are read from one snapshot even
    // while another process migrates.
    let state = {
        let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Deferred)?;
        let state = classify(&tx)?;
        tx.commit()?;
        state
    };
    if state == State::Ours(SCHEMA_VERSION) {
        return Ok(None);
    }
    if state == State::Empty && !create {
        return Err(not_initialized());
    }
    if wal {
        enable_wal(conn, busy_timeout)?;
    }
    // A migration that rebuilds a table (SQLite cannot add a constraint in place) drops the
    // old copy: with foreign keys on, that would cascade into job_attempts, and a rename
    // would repoint job_attempts' reference. Both pragmas only take effect outside a
    // transaction, and are put back whatever happens.
    let foreign_keys: bool = conn.query_row("PRAGMA foreign_keys", [], |row| row.get(0))?;
    conn.execute_batch("PRAGMA foreign_keys = OFF; PRAGMA legacy_alter_table = ON;")?;
    let migrated = migrate(conn);
    let restored = conn.execute_batch(if foreign_keys {
        "PRAGMA legacy_alter_table = OFF; PRAGMA foreign_keys = ON;"
    } else {
        "PRAGMA legacy_alter_table = OFF;"
    });
    let from = migrated?;
    restored?;
    Ok(Some(from))
}

/// Applies the missing migrations in one `BEGIN IMMEDIATE` transaction; returns the version
/// the database had (0: it was empty).
fn migrate(conn: &Connection) -> Result<i64> {
    // Another process may be migrating at the same moment: take the write lock, then look
    // again.
    let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    let version = match classify(&tx)? {
        State::Ours(v) => v,
        State::Empty => 0,
    };
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let to = index as i64 + 1;
        tx.execute_batch(sql).map_err(|e| {
            Error::from(e).prefixed(&format!("migration to schema version {to} failed"))
        })?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(version)
}

/// Switches the file to WAL mode. The switch needs a moment of exclusive access and SQLite
/// does not apply the busy handler to it, so a concurrent opener is waited out here.
fn enable_wal(conn: &Connection, busy_timeout: Duration) -> Result<()> {
    let give_up = Instant::now() + busy_timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |row| {
            row.get::<_, String>(0)
        }) {
            Ok(mode) => {
                if !mode.eq_ignore_ascii_case("wal") {
                    log::warn!(
                        "litejobs: the file system refused WAL mode; journal mode is {mode}"
                    );
                }
                return Ok(());
            }
            Err(e)
                if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                    && Instant::now() < give_up =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(e.into()),
        }
    }
}
