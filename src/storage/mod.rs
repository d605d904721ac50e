//! The storage interface: the only place that knows SQL, behind one seam.
//!
//! The runtime, the built-in job kinds, the CLI and the dashboard ask the database for
//! everything through a [`Tx`]: a transaction handle whose operations are grouped by concept,
//! one store per file of this folder ([`JobStore`] for the job life cycle, in `jobs/`, one
//! file per concern; [`ReadStore`] for what people read, [`AdminStore`], [`DeadLetterStore`],
//! [`RetentionStore`], [`LimitStore`], [`PeriodicStore`], [`ReportStore`], [`WebhookStore`],
//! [`StrayStore`], [`EncryptionStore`], [`WorkflowStore`], [`WorkerStore`], [`JobLogStore`]). The value types they speak live next to them (or,
//! for encryption, in `crate::encryption`, a layer below), so nothing here imports from the
//! layers above; so do the rules both backends share (the claim order, the
//! claimed-row rules), written once.
//!
//! [`Db`] is a handle on one database: [`Db::read`] runs a closure on a `Tx` that sees one
//! snapshot, [`Db::write`] one that runs in a single write transaction and commits when the
//! closure returns `Ok`. `sqlite/` is the SQLite implementation (WAL, a pool, an in-process
//! write gate) and `postgres/` the PostgreSQL one; each implements the same traits in files
//! of the same names, on its transaction handle, and the runtime never knows which one it
//! talks to.
//!
//! Read-then-write paths (a rate limit's next slot, a breaker's state, a periodic slot, a
//! report's completion, an idempotency-key lookup) call [`Tx::lock_key`] first: a no-op on
//! SQLite, whose write transaction already excludes every other writer; a backend with
//! concurrent writers takes a lock on the key for the rest of the transaction.

pub(crate) mod admin;
mod config;
pub(crate) mod dead_letter;
pub(crate) mod encryption;
pub(crate) mod job_logs;
pub(crate) mod jobs;
pub(crate) mod limits;
pub(crate) mod periodic;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod reads;
pub(crate) mod reports;
pub(crate) mod retention;
pub(crate) mod sqlite;
pub(crate) mod strays;
pub(crate) mod webhooks;
pub(crate) mod workers;
pub(crate) mod workflows;

use std::path::Path;

use crate::error::{Error, ErrorKind, Result};

use admin::AdminStore;
pub(crate) use config::DbConfig;
pub use config::Synchronous;
use dead_letter::DeadLetterStore;
use encryption::EncryptionStore;
use job_logs::JobLogStore;
use jobs::JobStore;
use limits::LimitStore;
use periodic::PeriodicStore;
use reads::ReadStore;
use reports::ReportStore;
use retention::RetentionStore;
pub(crate) use sqlite::{with_triggers_off, SqliteDb, SqliteTx};
use strays::StrayStore;
use webhooks::WebhookStore;
use workers::WorkerStore;
use workflows::WorkflowStore;

/// Every operation the rest of litejobs asks of a database, inside one transaction (or, for
/// reads, one snapshot).
pub(crate) trait Tx:
    JobStore
    + ReadStore
    + AdminStore
    + DeadLetterStore
    + RetentionStore
    + LimitStore
    + PeriodicStore
    + ReportStore
    + WebhookStore
    + StrayStore
    + EncryptionStore
    + WorkflowStore
    + WorkerStore
    + JobLogStore
{
    /// Locks `key` for the rest of this write transaction, so that a read-then-write on it
    /// (a rate limit, a breaker, a periodic slot, a report, an idempotency key) cannot
    /// interleave with another writer's. A no-op where the transaction already excludes
    /// every other writer (SQLite).
    fn lock_key(&self, key: &str) -> Result<()>;
}

/// A database a [`Db`] talks to. Object-safe: the generic [`Db::read`] and [`Db::write`] wrap
/// these.
pub(crate) trait Backend: Send + Sync + std::fmt::Debug {
    /// Runs `f` once on a handle that sees one snapshot and writes nothing.
    fn read_tx(&self, f: &mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()>;

    /// Runs `f` once inside one write transaction, committed when it returns `Ok` and rolled
    /// back otherwise. Waits for other writers up to the busy timeout, then fails with
    /// [`ErrorKind::Busy`] having written nothing.
    fn write_tx(&self, f: &mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()>;

    /// [`Backend::write_tx`] for a transaction that writes only values litejobs made or
    /// validated in code (a big batch of new jobs; a worker's claims, outcomes, renewals and
    /// reaping, whose claim checks every row against the rules as it reads it), where the
    /// backend can skip the schema's CHECK rules. Defaults to [`Backend::write_tx`].
    fn write_validated_tx(&self, f: &mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()> {
        self.write_tx(f)
    }

    /// Runs `f`, a read of one statement (which sees one snapshot by itself), without an
    /// explicit transaction where the backend gains from that. Defaults to
    /// [`Backend::read_tx`].
    fn read_statement(&self, f: &mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()> {
        self.read_tx(f)
    }

    /// Runs `f`, each of whose statements is correct on its own (one insert, or an insert
    /// that settles its own races, as an idempotency key's `ON CONFLICT`), without an
    /// explicit transaction where the backend gains from that: on a server, `BEGIN` and
    /// `COMMIT` are two of a single enqueue's three round trips. Defaults to
    /// [`Backend::write_tx`].
    fn write_statements(&self, f: &mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()> {
        self.write_tx(f)
    }

    /// True for a database server, where every statement is a round trip: a worker's claims
    /// go faster in statements of their own than inside the transaction that writes its
    /// outcomes.
    fn is_server(&self) -> bool {
        false
    }

    /// True when every write is refused ([`ErrorKind::ReadOnly`]).
    fn is_read_only(&self) -> bool;

    /// The schema version this build writes on this kind of database.
    fn schema_version(&self) -> i64;

    /// How far the database server's clock is ahead of this host's (ms), for a backend
    /// whose times come from the server; `None` for a file.
    fn clock_offset_ms(&self) -> Option<i64> {
        None
    }

    /// The PostgreSQL schema litejobs' tables live in; `None` for a file.
    #[cfg(feature = "postgres")]
    fn pg_schema(&self) -> Option<&str> {
        None
    }

    /// A cheap way to learn that another connection committed; see [`ChangeSignal`].
    fn change_signal(&self) -> Result<Box<dyn ChangeSignal>>;

    /// A [`ChangeSignal`] that sees every write, of any table: what a view that re-reads
    /// only after a change needs. The worker's [`Backend::change_signal`] may hear of new
    /// jobs only (PostgreSQL's insert notifications); on a file it already sees everything.
    fn write_watch(&self) -> Result<Box<dyn ChangeSignal>> {
        self.change_signal()
    }

    /// The files a commit writes, for a file watch that tells a waiting worker when to ask
    /// the [`ChangeSignal`]; `None` when there are none to watch (in memory, a server).
    fn commit_files(&self) -> Option<CommitFiles>;
}

/// Files in one directory whose writes announce a commit (see [`Backend::commit_files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommitFiles {
    /// The directory to watch.
    pub(crate) dir: std::path::PathBuf,
    /// The names in it whose writes count.
    pub(crate) names: Vec<std::ffi::OsString>,
}

/// Tells, far more cheaply than a query for due jobs, whether any other connection (another
/// process, a program inserting rows by plain SQL, or this process's own pool) committed
/// since the last look. An idle worker asks every few milliseconds, so a job enqueued
/// elsewhere starts within that time rather than at the next poll.
pub(crate) trait ChangeSignal: Send {
    /// True when another connection committed since the previous call (or since the
    /// signal was made). A false `true` costs one due-check; a missed change waits for the poll.
    fn changed(&mut self) -> Result<bool>;

    /// Where the signal hears of commits as they happen (PostgreSQL's notifications): a
    /// channel that receives a message after each, so the dispatcher sleeps until then
    /// instead of asking on a timer. `None` where it must be asked.
    fn news(&self) -> Option<crossbeam_channel::Receiver<()>> {
        None
    }
}

/// A handle on one database, shared by a queue's clones.
#[derive(Debug)]
pub(crate) struct Db {
    backend: Box<dyn Backend>,
}

impl Db {
    /// Opens (creating or migrating) a SQLite file, see [`SqliteDb::open`], or, for a
    /// `postgres://` URL, a PostgreSQL schema.
    pub(crate) fn open(path: &Path, config: &DbConfig) -> Result<Db> {
        if let Some(url) = server_url(path) {
            return open_server(url, config, false);
        }
        Ok(Db::on(SqliteDb::open(path, config)?))
    }

    /// Opens an existing SQLite file (or PostgreSQL schema) for reading only; see
    /// [`SqliteDb::open_read_only`].
    pub(crate) fn open_read_only(path: &Path, config: &DbConfig) -> Result<Db> {
        if let Some(url) = server_url(path) {
            return open_server(url, config, true);
        }
        Ok(Db::on(SqliteDb::open_read_only(path, config)?))
    }

    /// A private in-memory SQLite database; see [`SqliteDb::open_in_memory`].
    pub(crate) fn open_in_memory(config: &DbConfig) -> Result<Db> {
        Ok(Db::on(SqliteDb::open_in_memory(config)?))
    }

    fn on(backend: impl Backend + 'static) -> Db {
        Db {
            backend: Box::new(backend),
        }
    }

    /// Runs `f` on a handle that sees one snapshot and writes nothing.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&dyn Tx) -> Result<T>) -> Result<T> {
        run_once(|g| self.backend.read_tx(g), f)
    }

    /// Runs `f` inside one write transaction and commits it when `f` returns `Ok`.
    ///
    /// # Errors
    /// `f`'s error (nothing was written); [`ErrorKind::Busy`] when another writer held the
    /// database past the busy timeout; [`ErrorKind::ReadOnly`] on a read-only database.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&dyn Tx) -> Result<T>) -> Result<T> {
        run_once(|g| self.backend.write_tx(g), f)
    }

    /// [`Db::write`] for a transaction that writes only values litejobs made or validated
    /// itself; see [`Backend::write_validated_tx`].
    pub(crate) fn write_validated<T>(&self, f: impl FnOnce(&dyn Tx) -> Result<T>) -> Result<T> {
        run_once(|g| self.backend.write_validated_tx(g), f)
    }

    /// Inserts validated jobs in one write transaction, in order. A batch that
    /// [`skips_the_rules`](jobs::insert::skips_the_rules) goes through
    /// [`Backend::write_validated_tx`].
    pub(crate) fn insert_jobs(
        &self,
        jobs: &[crate::job::NewJob],
        payloads: &[String],
        now: i64,
    ) -> Result<Vec<jobs::Inserted>> {
        let insert = |tx: &dyn Tx| {
            let inserted = tx.insert_jobs(jobs, payloads, now)?;
            // Every wait of the batch at once (a handful of statements for any number).
            let edges: Vec<jobs::Edge> = inserted
                .iter()
                .zip(jobs)
                .filter(|(ins, _)| ins.created)
                .flat_map(|(ins, job)| jobs::deps::edges_of(ins, job))
                .collect();
            tx.add_dependencies(&edges, now)?;
            Ok(inserted)
        };
        if jobs::insert::skips_the_rules(jobs) {
            run_once(|g| self.backend.write_validated_tx(g), insert)
        } else {
            self.write(insert)
        }
    }

    /// Runs `f`, a read of one statement, possibly without an explicit transaction; see
    /// [`Backend::read_statement`].
    pub(crate) fn read_statement<T>(&self, f: impl FnOnce(&dyn Tx) -> Result<T>) -> Result<T> {
        run_once(|g| self.backend.read_statement(g), f)
    }

    /// Runs `f`, whose statements are each correct on their own, possibly without an
    /// explicit transaction; see [`Backend::write_statements`].
    pub(crate) fn write_statements<T>(&self, f: impl FnOnce(&dyn Tx) -> Result<T>) -> Result<T> {
        run_once(|g| self.backend.write_statements(g), f)
    }

    /// See [`Backend::is_server`].
    pub(crate) fn is_server(&self) -> bool {
        self.backend.is_server()
    }

    /// True when every write is refused ([`ErrorKind::ReadOnly`]).
    pub(crate) fn is_read_only(&self) -> bool {
        self.backend.is_read_only()
    }

    /// See [`Backend::pg_schema`].
    #[cfg(feature = "postgres")]
    pub(crate) fn pg_schema(&self) -> Option<&str> {
        self.backend.pg_schema()
    }

    /// See [`Backend::clock_offset_ms`].
    pub(crate) fn clock_offset_ms(&self) -> Option<i64> {
        self.backend.clock_offset_ms()
    }

    /// The schema version this build writes on this kind of database.
    pub(crate) fn schema_version(&self) -> i64 {
        self.backend.schema_version()
    }

    /// A new [`ChangeSignal`] on this database.
    pub(crate) fn change_signal(&self) -> Result<Box<dyn ChangeSignal>> {
        self.backend.change_signal()
    }

    /// A signal of every write; see [`Backend::write_watch`].
    pub(crate) fn write_watch(&self) -> Result<Box<dyn ChangeSignal>> {
        self.backend.write_watch()
    }

    /// The files a commit writes; see [`Backend::commit_files`].
    pub(crate) fn commit_files(&self) -> Option<CommitFiles> {
        self.backend.commit_files()
    }
}

/// The URL when `target` names a database server (`postgres://`, `postgresql://`) rather
/// than a file.
pub(crate) fn server_url(target: &Path) -> Option<&str> {
    let text = target.to_str()?;
    let lower = text.get(..13).unwrap_or(text).to_ascii_lowercase();
    (lower.starts_with("postgres://") || lower.starts_with("postgresql://")).then_some(text)
}

#[cfg(feature = "postgres")]
fn open_server(url: &str, config: &DbConfig, read_only: bool) -> Result<Db> {
    let db = if read_only {
        postgres::PgDb::open_read_only(url, config)?
    } else {
        postgres::PgDb::open(url, config)?
    };
    Ok(Db::on(db))
}

#[cfg(not(feature = "postgres"))]
fn open_server(_url: &str, _config: &DbConfig, _read_only: bool) -> Result<Db> {
    Err(Error::new(
        ErrorKind::InvalidConfig,
        "a postgres:// URL needs litejobs built with the `postgres` feature \
         (cargo build --features postgres)",
    ))
}

/// Runs `f` once through `call` (a backend's object-safe entry point) and returns its value.
fn run_once<T>(
    call: impl FnOnce(&mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()>,
    f: impl FnOnce(&dyn Tx) -> Result<T>,
) -> Result<T> {
    let mut f = Some(f);
    let mut out = None;
    call(&mut |tx| {
        if let Some(f) = f.take() {
            out = Some(f(tx)?);
        }
        Ok(())
    })?;
    out.ok_or_else(not_run)
}

/// A backend that returned without running the closure: a bug in the backend.
fn not_run() -> Error {
    Error::new(
        ErrorKind::Database,
        "the storage backend returned without running the transaction",
    )
}
