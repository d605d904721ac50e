//! The SQLite implementation of the storage interface: [`SqliteDb`] (a pool of connections
//! with the queue's pragmas, and the in-process write gate) hands out [`SqliteTx`]s, which
//! implement every store of [`crate::storage`] in this folder's files.
//!
//! Threads of one process take turns on a mutex before `BEGIN IMMEDIATE`, because threads
//! that fight over SQLite's own lock lose their time in the busy handler's sleeps. Other
//! processes are waited out by SQLite's busy timeout.

mod admin;
mod checkpointer;
mod counts;
mod dead_letter;
mod encryption;
mod errors;
mod job_logs;
pub(crate) mod job_row;
mod jobs;
pub(crate) mod lenient;
mod limits;
pub(crate) mod migrate;
mod periodic;
pub(crate) mod reads;
mod reports;
mod retention;
mod strays;
mod webhooks;
mod workers;
mod workflows;
mod write_tx;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::{Backend, ChangeSignal, CommitFiles, DbConfig, Synchronous, Tx};
pub(crate) use counts::{keep_counts_in_code, with_triggers_off};
use write_tx::WriteTx;

impl Synchronous {
    fn pragma_value(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

type Pool = r2d2::Pool<SqliteConnectionManager>;

/// A pooled SQLite database with the queue's pragmas and a write gate.
pub(crate) struct SqliteDb {
    pool: Pool,
    /// Shared with the checkpoint thread, which holds it to let the log catch up.
    write_gate: Arc<Mutex<()>>,
    /// An in-memory database lives while a connection is open; this one keeps it alive
    /// when the pool drops idle connections.
    _anchor: Option<Mutex<Connection>>,
    in_memory: bool,
    /// Opened with [`SqliteDb::open_read_only`]: every write is refused at once.
    read_only: bool,
    /// Opens one more connection to the same database, outside the pool (for the
    /// [`ChangeSignal`], which keeps its connection for the worker's life).
    open_more: Box<dyn Fn() -> rusqlite::Result<Connection> + Send + Sync>,
    /// The database file, for a watch on its writes (`None` in memory).
    file: Option<PathBuf>,
    /// A connection of its own with the schema's CHECK rules off, for writes of values
    /// litejobs made or validated in code ([`Backend::write_validated_tx`]): big batches of
    /// jobs, and the worker's claims and outcomes (the rules cost a sixth of the instructions
    /// of a claim and a completion, measured with callgrind); opened on first use.
    /// Switching the rules off and on per batch on a pooled connection made SQLite
    /// re-prepare that connection's statements every time (6 % of a batch).
    validated: Mutex<Option<Connection>>,
    synchronous: Synchronous,
    busy_timeout: Duration,
    /// Checkpoints the WAL of a writable file off the writers' path (after the pool in
    /// this struct, so that it closes the last connection).
    checkpointer: Option<checkpointer::Checkpointer>,
}

impl std::fmt::Debug for SqliteDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteDb")
            .field("in_memory", &self.in_memory)
            .field("read_only", &self.read_only)
            .finish()
    }
}

const OPEN_FLAGS: OpenFlags = OpenFlags::SQLITE_OPEN_READ_WRITE
    .union(OpenFlags::SQLITE_OPEN_CREATE)
    .union(OpenFlags::SQLITE_OPEN_URI)
    .union(OpenFlags::SQLITE_OPEN_NO_MUTEX);

const READ_ONLY_FLAGS: OpenFlags = OpenFlags::SQLITE_OPEN_READ_ONLY
    .union(OpenFlags::SQLITE_OPEN_URI)
    .union(OpenFlags::SQLITE_OPEN_NO_MUTEX);

/// `file:` URI of a path, for SQLite's URI parameters (`%`, `?` and `#` escaped).
fn file_uri(path: &Path, params: &str) -> String {
    let mut uri = String::from("file:");
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    uri.push('?');
    uri.push_str(params);
    uri
}

impl SqliteDb {
    /// Opens (creating if needed) the database file, checks that it is litejobs' or empty,
    /// migrates it, and builds the pool. A refused file is left byte-for-byte untouched:
    /// nothing is written before the checks pass.
    pub(crate) fn open(path: &Path, config: &DbConfig) -> Result<SqliteDb> {
        refuse_non_regular(path)?;
        if !config.create && missing(path)? {
            return Err(Error::new(
                ErrorKind::Uninitialized,
                format!(
                    "{}: the file does not exist; create it with `litejobs init`",
                    path.display()
                ),
            ));
        }
        let probe = Connection::open_with_flags(path, OPEN_FLAGS)
            .map_err(|e| Error::from(e).prefixed(&format!("cannot open {}", path.display())))?;
        probe.busy_timeout(config.busy_timeout)?;
        // SQLite opens a write-protected file read-only without a word; say so now rather
        // than at the first write (or, worse, time out in the pool setting WAL mode).
        if probe.is_readonly(rusqlite::MAIN_DB)? {
            return Err(Error::new(
                ErrorKind::ReadOnly,
                format!(
                    "{} is read-only (file permissions, a read-only mount or a backup) and this \
                     needs to write to it; read commands (list, show, stats, check, metrics) \
                     still work",
                    path.display()
                ),
            ));
        }
        let migrated = migrate::check_and_migrate(&probe, true, config.busy_timeout, config.create)
            .map_err(|e| e.prefixed(&path.display().to_string()))?;
        // One line, not one per migration step: a new file is news, its steps are not.
        match migrated {
            Some(0) => log::info!(
                "litejobs: created database {} (schema version {})",
                path.display(),
                migrate::SCHEMA_VERSION
            ),
            Some(from) => log::info!(
                "litejobs: migrated {} from schema version {from} to {}",
                path.display(),
                migrate::SCHEMA_VERSION
            ),
            None => {}
        }
        drop(probe);
        let manager = SqliteConnectionManager::file(path).with_flags(OPEN_FLAGS);
        let file = path.to_path_buf();
        let path = file.clone();
        let opener = move || Connection::open_with_flags(&path, OPEN_FLAGS);
        let mut db = SqliteDb::with_pool(manager, config, None, false, Box::new(opener))?;
        db.checkpointer = Some(
            checkpointer::Checkpointer::start(file.clone(), OPEN_FLAGS, Arc::clone(&db.write_gate))
                .map_err(|e| {
                    Error::new(
                        ErrorKind::Database,
                        format!("cannot start the checkpoint thread: {e}"),
                    )
                })?,
        );
        db.file = Some(file);
        Ok(db)
    }

    /// Opens an existing litejobs database for reading only: nothing is created, migrated or
    /// written (not even WAL mode), so a file another program owns, an older litejobs still
    /// writes to, a backup or a read-only mount can be inspected. A file without the
    /// litejobs schema is refused with [`ErrorKind::Uninitialized`]; every write through this
    /// Db fails at once with [`ErrorKind::ReadOnly`].
    pub(crate) fn open_read_only(path: &Path, config: &DbConfig) -> Result<SqliteDb> {
        let context = |e: Error| e.prefixed(&path.display().to_string());
        refuse_non_regular(path)?;
        if missing(path)? {
            return Err(context(Error::new(
                ErrorKind::Uninitialized,
                "the file does not exist; create it with `litejobs init`",
            )));
        }
        let open = |name: &str| -> Result<Connection> {
            let conn = Connection::open_with_flags(name, READ_ONLY_FLAGS)?;
            conn.busy_timeout(config.busy_timeout)?;
            migrate::check_readable(&conn)?;
            Ok(conn)
        };
        let plain = file_uri(path, "mode=ro");
        let name = match open(&plain) {
            Ok(_) => plain,
            // A WAL-mode file on a read-only mount whose shared-memory file cannot be made:
            // SQLite reads it as immutable (nobody can be writing to it there anyway).
            Err(e) if e.kind() == ErrorKind::ReadOnly || e.kind() == ErrorKind::Database => {
                let immutable = file_uri(path, "mode=ro&immutable=1");
                open(&immutable).map_err(|_| context(e))?;
                if std::fs::metadata(checkpointer::log_path(path)).is_ok_and(|m| m.len() > 0) {
                    log::warn!(
                        "litejobs: {} is on a read-only file system and its write-ahead log \
                         cannot be read without its -shm file; showing the database as of its \
                         last checkpoint",
                        path.display()
                    );
                }
                immutable
            }
            Err(e) => return Err(context(e)),
        };
        let manager = SqliteConnectionManager::file(&name).with_flags(READ_ONLY_FLAGS);
        let uri = name.clone();
        let opener = move || Connection::open_with_flags(&uri, READ_ONLY_FLAGS);
        let mut db = SqliteDb::with_pool(manager, config, None, false, Box::new(opener))?;
        db.read_only = true;
        Ok(db)
    }

    /// A private in-memory database shared by this Db's connections (SQLite's `memdb` VFS,
    /// which, unlike shared cache, keeps normal locking).
    pub(crate) fn open_in_memory(config: &DbConfig) -> Result<SqliteDb> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "file:/litejobs-mem-{}-{}?vfs=memdb",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let anchor = Connection::open_with_flags(&name, OPEN_FLAGS)?;
        anchor.busy_timeout(config.busy_timeout)?;
        migrate::check_and_migrate(&anchor, false, config.busy_timeout, true)?;
        let manager = SqliteConnectionManager::file(&name).with_flags(OPEN_FLAGS);
        let uri = name.clone();
        let opener = move || Connection::open_with_flags(&uri, OPEN_FLAGS);
        SqliteDb::with_pool(
            manager,
            config,
            Some(Mutex::new(anchor)),
            true,
            Box::new(opener),
        )
    }

    fn with_pool(
        manager: SqliteConnectionManager,
        config: &DbConfig,
        anchor: Option<Mutex<Connection>>,
        in_memory: bool,
        open_more: Box<dyn Fn() -> rusqlite::Result<Connection> + Send + Sync>,
    ) -> Result<SqliteDb> {
        let synchronous = config.synchronous;
        let busy_timeout = config.busy_timeout;
        let manager = manager.with_init(move |conn| {
            // A read-only connection must not try to set WAL mode (a write).
            let read_only = conn.is_readonly(rusqlite::MAIN_DB)?;
            if read_only {
                migrate::shim_older_for_reading(conn)?;
            }
            configure(conn, synchronous, busy_timeout, !in_memory && !read_only)
        });
        let pool = r2d2::Pool::builder()
            .max_size(config.pool_size)
            .min_idle(Some(1))
            // Connections hold prepared statements; keep them rather than recycle them.
            .idle_timeout(None)
            .max_lifetime(None)
            .connection_timeout(config.busy_timeout.max(Duration::from_secs(5)))
            // Pooled connections stay valid; a check per checkout costs every enqueue.
            .test_on_check_out(false)
            .build(manager)?;
        Ok(SqliteDb {
            pool,
            write_gate: Arc::new(Mutex::new(())),
            _anchor: anchor,
            in_memory,
            read_only: false,
            open_more,
            validated: Mutex::new(None),
            synchronous,
            busy_timeout,
            file: None,
            checkpointer: None,
        })
    }

    /// A pooled connection.
    fn conn(&self) -> Result<r2d2::PooledConnection<SqliteConnectionManager>> {
        Ok(self.pool.get()?)
    }

    fn refuse_if_read_only(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::new(
                ErrorKind::ReadOnly,
                "this queue was opened read-only (Queue::open_read_only); nothing was written",
            ));
        }
        Ok(())
    }

    /// One `BEGIN IMMEDIATE` transaction on `conn` (the caller holds the write gate).
    fn write_on(&self, conn: &Connection, f: &mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()> {
        let tx = WriteTx::begin(conn, self.busy_timeout)?;
        let handle = SqliteTx::new(conn);
        f(&handle)?;
        handle.write_succeeded_counts()?;
        tx.commit()?;
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.wrote();
        }
        Ok(())
    }
    fn gate(&self) -> MutexGuard<'_, ()> {
        // A panic while holding the gate leaves no shared state behind (the transaction
        // rolled back on drop), so a poisoned gate is still usable.
        self.write_gate
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Backend for SqliteDb {
    /// Runs `f` on a pooled connection, outside any explicit transaction (each statement
    /// sees one snapshot).
    fn read_tx(&self, f: &mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()> {
        let conn = self.conn()?;
        f(&SqliteTx::new(&conn))
    }

    /// Runs `f` inside one `BEGIN IMMEDIATE` transaction and commits it. Threads of this
    /// process queue on the write gate first; another process's lock is waited out up to the
    /// busy timeout, then [`ErrorKind::Busy`] is returned and nothing was written.
    fn write_tx(&self, f: &mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()> {
        self.refuse_if_read_only()?;
        let conn = self.conn()?;
        let _gate = self.gate();
        self.write_on(&conn, f)
    }

    /// [`Backend::write_tx`] on the connection kept with the CHECK rules off.
    fn write_validated_tx(&self, f: &mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()> {
        self.refuse_if_read_only()?;
        let _gate = self.gate();
        let mut kept = self
            .validated
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let conn = match &mut *kept {
            Some(conn) => conn,
            empty @ None => {
                let mut conn = (self.open_more)()?;
                configure(
                    &mut conn,
                    self.synchronous,
                    self.busy_timeout,
                    !self.in_memory,
                )?;
                conn.execute_batch("PRAGMA ignore_check_constraints = ON")?;
                empty.insert(conn)
            }
        };
        self.write_on(conn, f)
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn schema_version(&self) -> i64 {
        migrate::SCHEMA_VERSION
    }

    /// Every commit writes the write-ahead log (`-wal`); the database file itself and a
    /// rollback `-journal` are written by checkpoints and by programs that open the file in
    /// another journal mode.
    fn commit_files(&self) -> Option<CommitFiles> {
        let file = self.file.as_deref()?;
        let name = file.file_name()?;
        let dir = match file.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let with = |suffix: &str| {
            let mut n = name.to_os_string();
            n.push(suffix);
            n
        };
        Some(CommitFiles {
            dir,
            names: vec![name.to_os_string(), with("-wal"), with("-journal")],
        })
    }

    fn change_signal(&self) -> Result<Box<dyn ChangeSignal>> {
        let conn = (self.open_more)()?;
        conn.busy_timeout(Duration::from_secs(1))?;
        let mut signal = DataVersion { conn, last: 0 };
        signal.changed()?;
        Ok(Box::new(signal))
    }
}

/// [`ChangeSignal`] on SQLite: `PRAGMA data_version` on a connection of its own changes
/// whenever any other connection commits. It reads the write-ahead log's shared-memory
/// header, not the file, so asking every few milliseconds costs next to nothing.
struct DataVersion {
    conn: Connection,
    last: i64,
}

impl ChangeSignal for DataVersion {
    fn changed(&mut self) -> Result<bool> {
        let now: i64 = self
            .conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |row| row.get(0))?;
        let changed = now != self.last;
        self.last = now;
        Ok(changed)
    }
}

/// Refuses a path that exists and is not a regular file (after symlinks): SQLite would take
/// `/dev/null` or a FIFO as an empty database and leave a world-writable `-journal` beside
/// it, in a directory that is not the user's.
#[cfg(unix)]
fn special_file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(not(unix))]
fn special_file_kind(_meta: &std::fs::Metadata) -> &'static str {
    "not a regular file"
}

/// True when nothing is at `path`. A file this user may not look at (a folder it cannot
/// enter, such as a systemd service's private state) is refused for what it is, not taken
/// for a missing file.
fn missing(path: &Path) -> Result<bool> {
    match std::fs::metadata(path) {
        Ok(_) => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(Error::new(
            ErrorKind::Io,
            format!(
                "{}: cannot look at the file ({e}); run as a user that may read it (its \
                 owner, or root)",
                path.display()
            ),
        )),
    }
}

fn refuse_non_regular(path: &Path) -> Result<()> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    if meta.is_file() {
        return Ok(());
    }
    let what = if meta.is_dir() {
        "a directory"
    } else {
        special_file_kind(&meta)
    };
    Err(Error::new(
        ErrorKind::NotADatabase,
        format!(
            "{} is {what}, not a database file: litejobs keeps its jobs in a regular file \
             (nothing was opened or created)",
            path.display()
        ),
    ))
}

/// The storage interface on one SQLite connection, inside the transaction the [`SqliteDb`] opened
/// (or, for reads, outside any: each statement sees one snapshot).
pub(crate) struct SqliteTx<'c> {
    pub(crate) conn: &'c Connection,
    /// Jobs marked succeeded in this transaction, by (queue, job type): counted in
    /// `job_counts` just before the commit.
    succeeded: RefCell<BTreeMap<(String, String), i64>>,
}

impl Tx for SqliteTx<'_> {
    /// SQLite has one writer at a time: the transaction already holds every key.
    fn lock_key(&self, _key: &str) -> Result<()> {
        Ok(())
    }
}

impl<'c> SqliteTx<'c> {
    /// The interface on `conn`, e.g. the caller's own transaction (`enqueue_in`).
    pub(crate) fn new(conn: &'c Connection) -> SqliteTx<'c> {
        SqliteTx {
            conn,
            succeeded: RefCell::new(BTreeMap::new()),
        }
    }
}

/// The pragmas every connection needs.
fn configure(
    conn: &mut Connection,
    synchronous: Synchronous,
    busy_timeout: Duration,
    wal: bool,
) -> rusqlite::Result<()> {
    conn.busy_timeout(busy_timeout)?;
    keep_counts_in_code(conn)?;
    if wal {
        // Persistent in the file; set again here so that every connection agrees.
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))?;
        // No `journal_size_limit`: the log file keeps its length when it starts over, and the
        // checkpoint thread empties a long one once writes stop (see checkpointer.rs).
        // Commits never checkpoint: the checkpoint thread does (see checkpointer.rs).
        conn.query_row("PRAGMA wal_autocheckpoint = 0", [], |_| Ok(()))?;
    }
    conn.pragma_update(None, "synchronous", synchronous.pragma_value())?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_config() -> DbConfig {
        DbConfig {
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_secs(5),
            pool_size: 2,
            create: true,
            pg_schema: None,
            application_name: None,
        }
    }

    /// Writes through a file database never checkpoint in the committing thread (the
    /// checkpoint thread does, off the writers' path); databases without a log have none.
    #[test]
    fn pooled_connections_leave_checkpoints_to_the_checkpoint_thread() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = test_config();
        let db = SqliteDb::open(&dir.path().join("q.db"), &config).expect("open");
        let autocheckpoint: i64 = db
            .conn()
            .expect("a pooled connection")
            .query_row("PRAGMA wal_autocheckpoint", [], |row| row.get(0))
            .expect("the pragma");
        assert_eq!(autocheckpoint, 0);
        assert!(db.checkpointer.is_some());
        let memory = SqliteDb::open_in_memory(&config).expect("in memory");
        assert!(memory.checkpointer.is_none());
    }

    /// A big batch of new jobs goes in on the connection kept with the CHECK rules off, in
    /// the same database, while every pooled connection keeps them on: a rule-breaking write
    /// through the queue's other paths is still refused after it.
    #[test]
    fn big_batches_use_a_connection_of_their_own_and_the_pool_keeps_the_rules() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = test_config();
        for db in [
            SqliteDb::open(&dir.path().join("q.db"), &config).expect("open"),
            SqliteDb::open_in_memory(&config).expect("in memory"),
        ] {
            let jobs: Vec<crate::NewJob> = (0..crate::storage::jobs::insert::VALIDATED_FROM_ROWS)
                .map(|n| crate::NewJob::new("t", serde_json::json!({ "n": n })))
                .collect();
            let payloads: Vec<String> = jobs
                .iter()
                .map(|job| crate::job::validate(job, 1 << 16).expect("valid"))
                .collect();
            for round in 0..2 {
                db.write_validated_tx(&mut |tx| {
                    let ids = tx.insert_jobs(&jobs, &payloads, 1_700_000_000_000)?;
                    assert_eq!(ids.len(), jobs.len(), "round {round}");
                    Ok(())
                })
                .expect("a big batch");
            }
            let kept = db.validated.lock().expect("the kept connection");
            let off: i64 = kept
                .as_ref()
                .expect("opened by the batch")
                .query_row("PRAGMA ignore_check_constraints", [], |r| r.get(0))
                .expect("pragma");
            assert_eq!(off, 1, "the kept connection has the rules off");
            let conn = db.conn().expect("a pooled connection");
            let count: i64 = conn
                .query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
                .expect("count");
            assert_eq!(count, 2 * jobs.len() as i64, "both batches, one database");
            let off: i64 = conn
                .query_row("PRAGMA ignore_check_constraints", [], |r| r.get(0))
                .expect("pragma");
            assert_eq!(off, 0, "pooled connections keep the rules");
            let refused = conn.execute("UPDATE jobs SET priority = 'high' WHERE id = 1", []);
            assert!(
                refused.is_err(),
                "a rule-breaking write is refused: {refused:?}"
            );
        }
    }
}
