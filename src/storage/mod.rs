//! The storage layer: the only place that writes SQL.
//!
//! [`Db`] owns the connection pool (every connection gets the queue's pragmas) and the
//! in-process write gate: threads of one process take turns on a mutex before `BEGIN
//! IMMEDIATE`, because threads that fight over SQLite's own lock lose their time in the busy
//! handler's sleeps. Other processes are waited out by SQLite's busy timeout.
//!
//! A second backend (e.g. PostgreSQL) would replace this module behind the same functions.

pub(crate) mod admin;
pub(crate) mod dashboard;
pub(crate) mod dead_letter;
pub(crate) mod history;
pub(crate) mod jobs;
pub(crate) mod limits;
pub(crate) mod migrate;
pub(crate) mod periodic;
pub(crate) mod read;
pub(crate) mod reports;
pub(crate) mod webhooks;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

use crate::error::{Error, Result};

/// How hard SQLite flushes to disk at commit (`PRAGMA synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// `NORMAL`: in WAL mode a commit is durable against a process crash; a power loss may
    /// lose the last commits, never corrupt the file. The default.
    #[default]
    Normal,
    /// `FULL`: every commit is flushed; durable against power loss, slower.
    Full,
}

impl Synchronous {
    fn pragma_value(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// Connection settings shared by every pooled connection.
#[derive(Debug, Clone)]
pub(crate) struct DbConfig {
    pub(crate) synchronous: Synchronous,
    pub(crate) busy_timeout: Duration,
    pub(crate) pool_size: u32,
}

type Pool = r2d2::Pool<SqliteConnectionManager>;

/// A pooled SQLite database with the queue's pragmas and a write gate.
pub(crate) struct Db {
    pool: Pool,
    write_gate: Mutex<()>,
    /// An in-memory database lives while a connection is open; this one keeps it alive
    /// when the pool drops idle connections.
    _anchor: Option<Mutex<Connection>>,
    in_memory: bool,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("in_memory", &self.in_memory)
            .finish()
    }
}

const OPEN_FLAGS: OpenFlags = OpenFlags::SQLITE_OPEN_READ_WRITE
    .union(OpenFlags::SQLITE_OPEN_CREATE)
    .union(OpenFlags::SQLITE_OPEN_URI)
    .union(OpenFlags::SQLITE_OPEN_NO_MUTEX);

impl Db {
    /// Opens (creating if needed) the database file, checks that it is litejobs' or empty,
    /// migrates it, and builds the pool. A refused file is left byte-for-byte untouched:
    /// nothing is written before the checks pass.
    pub(crate) fn open(path: &Path, config: &DbConfig) -> Result<Db> {
        let probe = Connection::open_with_flags(path, OPEN_FLAGS)
            .map_err(|e| Error::from(e).prefixed(&format!("cannot open {}", path.display())))?;
        probe.busy_timeout(config.busy_timeout)?;
        migrate::check_and_migrate(&probe, true, config.busy_timeout)
            .map_err(|e| e.prefixed(&path.display().to_string()))?;
        drop(probe);
        let manager = SqliteConnectionManager::file(path).with_flags(OPEN_FLAGS);
        Db::with_pool(manager, config, None, false)
    }

    /// A private in-memory database shared by this Db's connections (SQLite's `memdb` VFS,
    /// which, unlike shared cache, keeps normal locking).
    pub(crate) fn open_in_memory(config: &DbConfig) -> Result<Db> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "file:/litejobs-mem-{}-{}?vfs=memdb",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let anchor = Connection::open_with_flags(&name, OPEN_FLAGS)?;
        anchor.busy_timeout(config.busy_timeout)?;
        migrate::check_and_migrate(&anchor, false, config.busy_timeout)?;
        let manager = SqliteConnectionManager::file(&name).with_flags(OPEN_FLAGS);
        Db::with_pool(manager, config, Some(Mutex::new(anchor)), true)
    }

    fn with_pool(
        manager: SqliteConnectionManager,
        config: &DbConfig,
        anchor: Option<Mutex<Connection>>,
        in_memory: bool,
    ) -> Result<Db> {
        let synchronous = config.synchronous;
        let busy_timeout = config.busy_timeout;
        let manager =
            manager.with_init(move |conn| configure(conn, synchronous, busy_timeout, !in_memory));
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
        Ok(Db {
            pool,
            write_gate: Mutex::new(()),
            _anchor: anchor,
            in_memory,
        })
    }

    /// A pooled connection for reads (or for statements that manage their own transaction).
    pub(crate) fn conn(&self) -> Result<r2d2::PooledConnection<SqliteConnectionManager>> {
        Ok(self.pool.get()?)
    }

    /// Runs `f` on a pooled connection, outside any explicit transaction (each statement
    /// sees one snapshot).
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.conn()?;
        f(&conn)
    }

    /// Runs `f` inside one `BEGIN IMMEDIATE` transaction and commits it. Threads of this
    /// process queue on the write gate first; another process's lock is waited out up to the
    /// busy timeout, then [`ErrorKind::Busy`] is returned and nothing was written.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.conn()?;
        let _gate = self.gate();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = f(&tx)?;
        tx.commit()?;
        Ok(value)
    }

    fn gate(&self) -> MutexGuard<'_, ()> {
        // A panic while holding the gate leaves no shared state behind (the transaction
        // rolled back on drop), so a poisoned gate is still usable.
        self.write_gate
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
    if wal {
        // Persistent in the file; set again here so that every connection agrees.
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))?;
        // Bounds the WAL file left behind after a checkpoint (R17): 64 MiB.
        conn.query_row("PRAGMA journal_size_limit = 67108864", [], |_| Ok(()))?;
    }
    conn.pragma_update(None, "synchronous", synchronous.pragma_value())?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}
