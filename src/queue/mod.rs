//! [`Queue`]: open a database, enqueue jobs, read them back; and what else a program does
//! with a queue without running jobs: the operator's actions (`admin`), the dead letter
//! (`dead_letter`), reads for people and monitors (`reads`, [`metrics`]), and the
//! in-process signals a commit sends (`events` to subscribers, `wake` to idle workers).

mod admin;
pub(crate) mod cancel_board;
pub(crate) mod cancels;
mod dead_letter;
pub(crate) mod encryption;
pub(crate) mod events;
pub mod metrics;
pub(crate) mod reads;
pub(crate) mod rotation;
pub(crate) mod wake;
pub(crate) mod workflows;
pub(crate) mod write_watch;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use crate::encryption::Keyring;
use crate::error::{Error, Result};
use crate::job::{
    validate, AttemptRecord, IntoNewJob, JobRecord, NewJob, DEFAULT_MAX_PAYLOAD_BYTES,
};
use crate::storage::{with_triggers_off, Db, DbConfig, SqliteTx, Synchronous, Tx};
use crate::system::clock::{Clock, SystemClock};
use cancels::CancelList;
use events::{Event, EventHub};
use wake::WakeList;

/// How long a write waits for another process's lock before giving up with
/// [`ErrorKind::Busy`](crate::ErrorKind::Busy), unless configured otherwise.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections in a queue's pool unless configured otherwise.
pub const DEFAULT_POOL_SIZE: u32 = 16;
/// How long keys of succeeded jobs are remembered unless configured otherwise: 7 days.
pub const DEFAULT_IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// A handle on one litejobs database: enqueue jobs, read them, start workers on it.
///
/// # About threads and cloning
/// `Queue` is `Clone + Send + Sync + 'static`. Clones are cheap (one `Arc`) and share one
/// connection pool, one clock, and one wake-up list, so a job enqueued through any clone
/// wakes every idle worker of this process at once. Writes from the threads of one process
/// take turns on an in-process gate before SQLite's write lock; other processes on the same
/// file are waited out up to the busy timeout.
///
/// ```
/// use litejobs::{NewJob, Queue};
/// use serde_json::json;
/// # fn main() -> litejobs::Result<()> {
/// let queue = Queue::open_in_memory()?;
/// let id = queue.enqueue(NewJob::new("send_email", json!({"user_id": 42})))?;
/// let job = queue.job(id)?.expect("just enqueued");
/// assert_eq!(job.status.as_str(), "queued");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

struct Inner {
    db: Db,
    clock: Arc<dyn Clock>,
    max_payload_bytes: usize,
    idempotency_window: Duration,
    wake: WakeList,
    cancels: CancelList,
    events: EventHub,
    encryption: encryption::Encryption,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("db", &self.inner.db).finish()
    }
}

/// Options for opening a [`Queue`]. Made by [`Queue::builder`].
#[derive(Clone)]
#[must_use = "a QueueBuilder does nothing until open() is called"]
pub struct QueueBuilder {
    synchronous: Synchronous,
    busy_timeout: Duration,
    pool_size: u32,
    max_payload_bytes: usize,
    idempotency_window: Duration,
    clock: Arc<dyn Clock>,
    create: bool,
    pg_schema: Option<String>,
    application_name: Option<String>,
    /// Set by [`QueueBuilder::clock`]: a given clock is used as is, also on a server.
    clock_given: bool,
    keys: Keyring,
}

impl std::fmt::Debug for QueueBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueBuilder")
            .field("synchronous", &self.synchronous)
            .field("busy_timeout", &self.busy_timeout)
            .field("pool_size", &self.pool_size)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .field("keys", &self.keys)
            .finish()
    }
}

impl Default for QueueBuilder {
    fn default() -> Self {
        QueueBuilder {
            synchronous: Synchronous::Normal,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            pool_size: DEFAULT_POOL_SIZE,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            idempotency_window: DEFAULT_IDEMPOTENCY_WINDOW,
            clock: Arc::new(SystemClock),
            create: true,
            pg_schema: None,
            application_name: None,
            clock_given: false,
            keys: Keyring::new(),
        }
    }
}

impl QueueBuilder {
    /// `PRAGMA synchronous` for every connection. Defaults to [`Synchronous::Normal`].
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// How long a write waits for another process's lock. Defaults to
    /// [`DEFAULT_BUSY_TIMEOUT`] (5 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Connections in the pool (at least 1). Defaults to [`DEFAULT_POOL_SIZE`] (16).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// The largest payload enqueue accepts, in bytes of JSON text. Defaults to
    /// [`DEFAULT_MAX_PAYLOAD_BYTES`] (64 KiB).
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// How long idempotency keys of succeeded jobs are remembered, also after the job is
    /// pruned. Defaults to [`DEFAULT_IDEMPOTENCY_WINDOW`] (7 days).
    pub fn idempotency_window(mut self, window: Duration) -> Self {
        self.idempotency_window = window;
        self
    }

    /// The clock every component reads. Defaults to the wall clock; tests pass a
    /// [`ManualClock`](crate::ManualClock).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self.clock_given = true;
        self
    }

    /// Whether [`open`](QueueBuilder::open) may create a missing file, or add the litejobs
    /// schema to a file without it (e.g. your application's own database). With `false`,
    /// such a file is refused with [`Uninitialized`](crate::ErrorKind::Uninitialized) and
    /// left unchanged, while an older litejobs schema is still migrated: what a tool that
    /// acts on an existing queue wants, so a typo in a path cannot create an empty one.
    /// Defaults to `true`.
    pub fn create(mut self, create: bool) -> Self {
        self.create = create;
        self
    }

    /// On PostgreSQL (a `postgres://` URL, feature `postgres`): the schema litejobs' tables
    /// live in, created if missing. Defaults to `litejobs`, or to the URL's own `schema=NAME`
    /// parameter (`postgres://app@db/prod?schema=jobs`), which litejobs takes off the URL
    /// before connecting. Letters, digits and `_` only. Ignored for SQLite files.
    pub fn pg_schema(mut self, schema: impl Into<String>) -> Self {
        self.pg_schema = Some(schema.into());
        self
    }

    /// On PostgreSQL: how this queue's connections name themselves in `pg_stat_activity`
    /// (`application_name`), followed by the host and process id: `NAME (HOST:PID)`. Defaults
    /// to `litejobs`; `litejobs work` says `litejobs work`. An `application_name` in the URL
    /// (or the `PGAPPNAME` variable) wins. Ignored for SQLite files.
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = Some(name.into());
        self
    }

    /// The keys of encrypted payloads (feature `encryption`): the first encrypts what this
    /// queue enqueues and its workers write back; every one decrypts, for workers and
    /// views. Defaults to none: a job marked encrypted is then refused at enqueue, and a
    /// view shows an envelope as `encrypted (key NAME)`. See
    /// [`encryption`](crate::encryption).
    ///
    /// ```
    /// use litejobs::encryption::Keyring;
    /// use litejobs::{NewJob, Queue};
    /// use serde_json::json;
    /// # fn main() -> litejobs::Result<()> {
    /// let keys = Keyring::parse(&Keyring::generate("k1")?)?; // or Keyring::from_env()?
    /// let queue = Queue::builder().encryption_keys(keys).open_in_memory()?;
    /// let id = queue.enqueue(NewJob::new("charge", json!({"card": "4111 1111"})).encrypted())?;
    /// let job = queue.job(id)?.expect("just enqueued");
    /// assert_eq!(job.payload["card"], "4111 1111"); // decrypted for this queue's views
    /// assert_eq!(job.encryption_key.as_deref(), Some("k1"));
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "encryption")]
    pub fn encryption_keys(mut self, keys: Keyring) -> Self {
        self.keys = keys;
        self
    }

    fn db_config(&self) -> Result<DbConfig> {
        if self.pool_size == 0 {
            return Err(Error::invalid_config("pool_size must be at least 1, got 0"));
        }
        Ok(DbConfig {
            synchronous: self.synchronous,
            busy_timeout: self.busy_timeout,
            pool_size: self.pool_size,
            create: self.create,
            pg_schema: self.pg_schema.clone(),
            application_name: self.application_name.clone(),
        })
    }

    /// Opens or creates the database file and migrates it (WAL mode).
    ///
    /// # Errors
    /// [`NotADatabase`](crate::ErrorKind::NotADatabase) for a file that is not SQLite,
    /// [`ForeignDatabase`](crate::ErrorKind::ForeignDatabase) for another program's `jobs`
    /// table, [`NewerSchema`](crate::ErrorKind::NewerSchema) for a file from a newer
    /// litejobs. In each case the file is left untouched.
    pub fn open(self, path: impl AsRef<Path>) -> Result<Queue> {
        let db = Db::open(path.as_ref(), &self.db_config()?)?;
        Ok(self.into_queue(db))
    }

    /// Opens an existing litejobs database for reading only, as the `litejobs` read commands
    /// do: nothing is created, migrated or written (not even WAL mode), so it works on a
    /// read-only file, a read-only mount or a backup, and on a file an older litejobs still
    /// writes to (schema version 3 or newer; it is not migrated under that program's feet).
    /// Reads work as usual; every write ([`enqueue`](Queue::enqueue), [`cancel`](Queue::cancel),
    /// starting a [`Worker`](crate::Worker), ...) fails at once with
    /// [`ReadOnly`](crate::ErrorKind::ReadOnly).
    ///
    /// # Errors
    /// [`Uninitialized`](crate::ErrorKind::Uninitialized) for a missing file or one without
    /// the litejobs schema (e.g. another application's database); the errors of
    /// [`open`](QueueBuilder::open) for foreign, newer or non-SQLite files. The file is never
    /// changed.
    pub fn open_read_only(self, path: impl AsRef<Path>) -> Result<Queue> {
        let db = Db::open_read_only(path.as_ref(), &self.db_config()?)?;
        Ok(self.into_queue(db))
    }

    /// Opens a private in-memory database shared by this queue's clones (no WAL).
    pub fn open_in_memory(self) -> Result<Queue> {
        let db = Db::open_in_memory(&self.db_config()?)?;
        Ok(self.into_queue(db))
    }

    fn into_queue(self, db: Db) -> Queue {
        // On a database server the wall clock is the server's, so that hosts with skewed
        // clocks agree on run times and leases (read once, when the queue opens).
        let clock = match db.clock_offset_ms() {
            Some(offset_ms) if !self.clock_given => {
                Arc::new(crate::system::clock::OffsetClock { offset_ms }) as Arc<dyn Clock>
            }
            _ => self.clock,
        };
        Queue {
            inner: Arc::new(Inner {
                db,
                clock,
                max_payload_bytes: self.max_payload_bytes,
                idempotency_window: self.idempotency_window,
                wake: WakeList::default(),
                cancels: CancelList::default(),
                events: EventHub::default(),
                encryption: encryption::Encryption::new(self.keys),
            }),
        }
    }
}

impl Queue {
    /// Opens or creates the database file with default options; see [`QueueBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Queue> {
        QueueBuilder::default().open(path)
    }

    /// Opens an existing database for reading only, with default options; see
    /// [`QueueBuilder::open_read_only`].
    ///
    /// ```
    /// # fn main() -> litejobs::Result<()> {
    /// # let dir = tempfile::tempdir().map_err(|e| litejobs::Error::from(e))?;
    /// # let path = dir.path().join("app.db");
    /// # litejobs::Queue::open(&path)?;
    /// let queue = litejobs::Queue::open_read_only(&path)?;
    /// assert!(queue.is_read_only());
    /// let err = queue
    ///     .enqueue(litejobs::NewJob::new("t", serde_json::json!({})))
    ///     .unwrap_err();
    /// assert_eq!(err.kind(), litejobs::ErrorKind::ReadOnly);
    /// # Ok(())
    /// # }
    /// ```
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Queue> {
        QueueBuilder::default().open_read_only(path)
    }

    /// True when opened with [`Queue::open_read_only`]: every write fails with
    /// [`ReadOnly`](crate::ErrorKind::ReadOnly).
    pub fn is_read_only(&self) -> bool {
        self.inner.db.is_read_only()
    }

    /// A private in-memory database for tests, shared by this queue's clones.
    pub fn open_in_memory() -> Result<Queue> {
        QueueBuilder::default().open_in_memory()
    }

    /// Options for opening a queue.
    pub fn builder() -> QueueBuilder {
        QueueBuilder::default()
    }

    /// Enqueues one job in its own transaction and wakes idle workers of this process.
    /// Returns the new job's id, or the id of the job already holding its idempotency key.
    /// Takes a [`NewJob`] or a typed [`Job`](crate::Job) value (with its type's defaults).
    ///
    /// # Errors
    /// [`InvalidJob`](crate::ErrorKind::InvalidJob) for an empty type, invalid or oversized
    /// payload (or a typed value JSON cannot represent, or one stored in clear with a
    /// top-level `litejobs_envelope` field, the mark of an envelope), or `max_attempts` of 0;
    /// [`Busy`](crate::ErrorKind::Busy) when another process held the lock past the busy
    /// timeout; [`DiskFull`](crate::ErrorKind::DiskFull).
    pub fn enqueue(&self, job: impl IntoNewJob) -> Result<i64> {
        let job = job.into_new_job()?;
        let payload = validate(&job, self.inner.max_payload_bytes)?;
        let now = self.now_ms();
        let payload = self.stored_payload(None, &job, payload, now)?;
        // One insert (a key's races settled by the insert itself; a job without a key goes
        // in with its waits by one statement): no transaction around it where that saves
        // round trips.
        let insert = |tx: &dyn Tx| tx.insert_job_and_waits(&job, &payload, now);
        let inserted = if job.after.is_empty() || job.idempotency_key.is_none() {
            self.inner.db.write_statements(insert)?
        } else {
            self.inner.db.write(insert)?
        };
        if inserted.created {
            self.after_enqueue(&[(inserted.id, &job)]);
        }
        Ok(inserted.id)
    }

    /// Enqueues many jobs in one transaction: all are inserted or none. Returns their ids in
    /// order (an idempotency key already held gives the holder's id). Typed jobs go through
    /// [`NewJob::from_job`] first.
    ///
    /// # Errors
    /// As [`Queue::enqueue`]; a refused job refuses the whole batch, and the message says
    /// which job (by index).
    pub fn enqueue_batch(&self, jobs: Vec<NewJob>) -> Result<Vec<i64>> {
        let now = self.now_ms();
        let payloads = jobs
            .iter()
            .enumerate()
            .map(|(i, job)| {
                validate(job, self.inner.max_payload_bytes)
                    .and_then(|payload| self.stored_payload(None, job, payload, now))
                    .map_err(|e| e.prefixed(&format!("job {i} of the batch")))
            })
            .collect::<Result<Vec<String>>>()?;
        let inserted = self.inner.db.insert_jobs(&jobs, &payloads, now)?;
        let created: Vec<(i64, &NewJob)> = inserted
            .iter()
            .zip(&jobs)
            .filter(|(ins, _)| ins.created)
            .map(|(ins, job)| (ins.id, job))
            .collect();
        self.after_enqueue(&created);
        Ok(inserted.into_iter().map(|ins| ins.id).collect())
    }

    /// Enqueues inside the caller's own transaction, with this queue's payload limit
    /// and clock: the job commits with the caller's change, or not at all. Call
    /// [`Queue::notify`] after the commit to wake workers at once.
    pub fn enqueue_in(&self, conn: &Connection, job: impl IntoNewJob) -> Result<i64> {
        let job = job.into_new_job()?;
        with_triggers_off(conn, || self.enqueue_on(&SqliteTx::new(conn), job))
    }

    /// Enqueues inside the caller's own PostgreSQL transaction on their diesel connection
    /// (feature `postgres`), with this queue's schema, payload limit and clock: the job
    /// commits with the caller's change, or not at all. Workers hear of it at the commit
    /// (the schema's insert trigger notifies them).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use diesel::{Connection, PgConnection, RunQueryDsl};
    /// use litejobs::{NewJob, Queue};
    /// use serde_json::json;
    /// let url = "postgres://app@127.0.0.1/app";
    /// let queue = Queue::open(url)?;
    /// let mut conn = PgConnection::establish(url)?;
    /// conn.transaction(|conn| {
    ///     diesel::sql_query("INSERT INTO users (email) VALUES ('ada@example.com')").execute(conn)?;
    ///     queue.enqueue_in_pg(conn, NewJob::new("send_email", json!({"email": "ada@example.com"})))?;
    ///     Ok::<_, Box<dyn std::error::Error>>(())
    /// })?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// An invalid job, a database error, or [`ErrorKind::InvalidState`](crate::ErrorKind)
    /// when this queue is on a SQLite file (use [`Queue::enqueue_in`]). The caller's
    /// transaction is usable after an invalid job (nothing was sent to the server); after a
    /// database error PostgreSQL has aborted it, as with any failed statement.
    #[cfg(feature = "postgres")]
    pub fn enqueue_in_pg(
        &self,
        conn: &mut diesel::PgConnection,
        job: impl IntoNewJob,
    ) -> Result<i64> {
        let Some(schema) = self.db().pg_schema() else {
            return Err(Error::new(
                crate::ErrorKind::InvalidState,
                "this queue is on a SQLite file: use Queue::enqueue_in with a rusqlite transaction",
            ));
        };
        let job = job.into_new_job()?;
        let payload = validate(&job, self.inner.max_payload_bytes)?;
        let now = self.now_ms();
        crate::storage::postgres::in_callers_transaction(conn, schema, |tx| {
            let payload = self.stored_payload(Some(tx), &job, payload, now)?;
            // A transaction of the caller's: the insert and the waits go in as statements of it.
            let inserted =
                crate::storage::jobs::InsertStore::insert_job_and_waits(tx, &job, &payload, now)?;
            Ok(inserted.id)
        })
    }

    /// Enqueues inside a transaction litejobs opened itself (a handler's report plan, a
    /// periodic slot), with this queue's payload limit and clock.
    pub(crate) fn enqueue_on(&self, tx: &dyn Tx, job: NewJob) -> Result<i64> {
        let payload = validate(&job, self.inner.max_payload_bytes)?;
        let now = self.now_ms();
        let payload = self.stored_payload(Some(tx), &job, payload, now)?;
        Ok(tx.insert_job_and_waits(&job, &payload, now)?.id)
    }

    /// After a commit that inserted `jobs`: tells subscribers and wakes this process's
    /// workers.
    pub(crate) fn after_enqueue(&self, jobs: &[(i64, &NewJob)]) {
        if jobs.is_empty() {
            return;
        }
        if self.inner.events.has_subscribers() {
            for (id, job) in jobs {
                self.inner.events.send(Event::Enqueued {
                    id: *id,
                    job_type: job.job_type.clone(),
                    queue: job.queue.clone(),
                });
            }
        }
        // The first job's queue is the hint (a batch is mostly one queue).
        self.inner.wake.wake_all_for(&jobs[0].1.queue);
    }

    /// Wakes this process's idle workers now, e.g. after committing a transaction that used
    /// [`enqueue_in`]. Workers see what other processes commit within a few milliseconds
    /// without this call (a watch on the database's files, or their
    /// `change_check_interval`).
    pub fn notify(&self) {
        self.inner.wake.wake_all();
    }

    /// One job by id, or `None`. An encrypted payload, result or progress is shown
    /// decrypted when this queue holds its key, and as `encrypted (key NAME)` otherwise.
    pub fn job(&self, id: i64) -> Result<Option<JobRecord>> {
        let job = self.inner.db.read(|conn| conn.job(id))?;
        Ok(job.map(|job| self.reveal(job)))
    }

    /// A job's attempt history, oldest first: every failed, timed-out or released attempt,
    /// and a success that followed failures.
    pub fn attempts(&self, id: i64) -> Result<Vec<AttemptRecord>> {
        self.inner.db.read(|conn| conn.attempts(id))
    }

    /// Now, by this queue's clock (milliseconds since the Unix epoch).
    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// Subscribes to progress events (enqueued, started, finished, ...). Events sent while
    /// nobody listens are not kept; a dropped receiver unsubscribes.
    pub fn subscribe(&self) -> crossbeam_channel::Receiver<Event> {
        self.inner.events.subscribe()
    }

    /// The schema version this build keeps the queue's database at: [`SCHEMA_VERSION`]
    /// for a SQLite file, `PG_SCHEMA_VERSION` on PostgreSQL (feature `postgres`).
    ///
    /// [`SCHEMA_VERSION`]: crate::SCHEMA_VERSION
    pub fn schema_version(&self) -> i64 {
        self.db().schema_version()
    }

    pub(crate) fn db(&self) -> &Db {
        &self.inner.db
    }

    pub(crate) fn events(&self) -> &EventHub {
        &self.inner.events
    }

    pub(crate) fn wake_list(&self) -> &WakeList {
        &self.inner.wake
    }

    /// Where this process's workers hear of running jobs cancelled through this queue.
    pub(crate) fn cancel_list(&self) -> &CancelList {
        &self.inner.cancels
    }

    pub(crate) fn idempotency_window(&self) -> Duration {
        self.inner.idempotency_window
    }

    /// The payload size limit: enqueue refuses larger payloads, and a worker makes a larger
    /// row written by another program dead instead of running it.
    pub(crate) fn max_payload_bytes(&self) -> usize {
        self.inner.max_payload_bytes
    }
}

/// Enqueues inside the caller's own rusqlite transaction, with the default payload
/// limit and the wall clock. The job commits with the caller's change or not at all.
///
/// ```
/// use litejobs::{enqueue_in, NewJob, Queue};
/// use serde_json::json;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("app.db");
/// let queue = Queue::open(&path)?;
/// let mut conn = rusqlite::Connection::open(&path)?;
/// conn.execute_batch("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)")?;
/// let tx = conn.transaction()?;
/// tx.execute("INSERT INTO users (email) VALUES (?1)", ["ada@example.com"])?;
/// let uid = tx.last_insert_rowid();
/// enqueue_in(&tx, NewJob::new("send_email", json!({"user_id": uid})))?;
/// tx.commit()?;
/// queue.notify();
/// # Ok(())
/// # }
/// ```
pub fn enqueue_in(conn: &Connection, job: impl IntoNewJob) -> Result<i64> {
    let job = job.into_new_job()?;
    let payload = validate(&job, DEFAULT_MAX_PAYLOAD_BYTES)?;
    let tx: &dyn Tx = &SqliteTx::new(conn);
    // Without a queue there are no keys: a job that must be encrypted is refused.
    if job.encrypted || tx.is_type_encrypted(&job.job_type)? {
        return Err(Error::new(
            crate::ErrorKind::InvalidConfig,
            format!(
                "job of type {} must be encrypted, and enqueue_in has no keys: use \
                 Queue::enqueue_in on a queue with encryption keys; nothing was written",
                job.job_type
            ),
        ));
    }
    crate::encryption::envelope::refuse_lookalike(&payload)?;
    let now = SystemClock.now_ms();
    with_triggers_off(conn, || {
        Ok(tx.insert_job_and_waits(&job, &payload, now)?.id)
    })
}
