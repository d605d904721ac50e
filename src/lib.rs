//! # litejobs
//!
//! Embedded background jobs on one SQLite file: record a job row and answer your user at
//! once; worker threads claim due rows atomically, run your blocking handlers, and write back
//! success, a retry with backoff, or a dead-letter state a person can inspect and requeue.
//! No broker, no async runtime.
//!
//! ## Brief overview
//! - [`Queue`] opens (creates, migrates) the database and enqueues [`NewJob`]s, alone, in a
//!   batch, or inside your own transaction with [`enqueue_in`].
//! - [`Job`] ties a serde struct to its job type and defaults; [`Perform`] runs it, and
//!   [`WorkerBuilder::register`] registers it: typed jobs over the same rows.
//! - [`Queue::job`], [`Queue::list`] and [`Queue::stats`] read jobs back as [`JobRecord`]s.
//! - [`Clock`] is where every component reads the time; [`ManualClock`] moves it in tests.
//! - [`Error`] with [`ErrorKind`] is the one error type.
//! - [`limits`]: rate limits and circuit breakers by key, shared through the database;
#![cfg_attr(
    feature = "webhook",
    doc = "  [`builtin::webhook`] delivers signed webhooks with them."
)]
#![cfg_attr(
    not(feature = "webhook"),
    doc = "  `builtin::webhook` (Cargo feature `webhook`) delivers signed webhooks with them."
)]
//! - [`builtin`]: job types ready to register (webhook delivery, email, reports in chunks).
//! - For people on call (and the `litejobs` command): [`Queue::health`] and
//!   [`Queue::error_groups`] answer what waits and what fails; [`Queue::cancel`],
//!   [`Queue::retry_now`], [`Queue::pause_queue`], [`Queue::requeue_dead_matching`] and
//!   [`Queue::discard_dead`] act; [`Queue::prune`] and [`Pruner`] keep the file small;
//!   [`metrics`] speaks Prometheus; [`redact`] masks secret payload fields in every view.
//!
//! ```
//! use litejobs::{NewJob, Queue, JobStatus};
//! use serde_json::json;
//! # fn main() -> litejobs::Result<()> {
//! let queue = Queue::open_in_memory()?;
//! let id = queue.enqueue(NewJob::new("send_email", json!({"user_id": 42})).queue("mail"))?;
//! assert_eq!(queue.job(id)?.map(|j| j.status), Some(JobStatus::Queued));
//! # Ok(())
//! # }
//! ```
//!
//! ## Cargo features
//! All on by default; with `default-features = false` you get the core: the queue, workers,
//! periodic jobs, reports in chunks, rate limits, metrics and [`testing`], on SQLite
//! (bundled), with no HTTP, TLS or SMTP crates in the build.
//! - `webhook`: `builtin::webhook`, signed webhook delivery over HTTPS (ureq, rustls).
//! - `email`: `builtin::email`, SMTP (lettre) and development mailers.
//! - `web`: `litejobs::web`, the dashboard and its small blocking HTTP server.
//! - `cli`: the `litejobs` binary (implies `webhook` and `email`, which `litejobs work` runs).
//!
//! The README's "Cargo features" has what each one pulls in.
//!
//! ## The schema is a contract
//! `schema.sql` at the top of the repository documents every table and column, so programs
//! in any language can `INSERT INTO jobs (job_type, payload) VALUES (...)` and let litejobs
//! run the row. Times are milliseconds since the Unix epoch.
//!
//! Rows from outside are checked at the door and never trusted at the claim (R28): CHECK
//! rules (written for SQLite 3.31 and later) refuse a wrongly typed insert in the inserting
//! program, naming the rule; a row that still cannot be used (invalid UTF-8 or JSON, an
//! oversized payload) goes dead when claimed, with an error naming the job and the column,
//! while every other job keeps flowing; readers show such rows safely, with what is wrong in
//! [`JobRecord::problems`]. [`Queue::open_read_only`] inspects a file without ever writing it.
//!
//! ## Log levels
//! `info`: schema migrations, worker start and stop. `warn`: retried database errors.
//! `debug`: per-batch activity. Payloads are never logged.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod admin;
pub mod builtin;
mod clock;
mod context;
mod dead_letter;
pub mod defaults;
mod error;
mod events;
#[cfg(all(unix, feature = "exec"))]
pub mod exec;
mod finite;
pub mod guide;
mod handler;
mod host;
pub mod human;
mod job;
pub mod limits;
pub mod maintenance;
pub mod metrics;
mod outage;
mod queue;
mod reads;
pub mod redact;
mod retry;
mod storage;
pub mod testing;
mod typed;
mod wake;
#[cfg(feature = "web")]
pub mod web;
mod worker;

pub use clock::{Clock, ManualClock, SystemClock};
pub use context::JobContext;
pub use dead_letter::Discarded;
pub use error::{Error, ErrorKind, Result};
pub use events::Event;
pub use handler::{Handler, JobError};
pub use job::{AttemptOutcome, AttemptRecord, JobRecord, JobStatus, NewJob};
pub use queue::{enqueue_in, Queue, QueueBuilder};
pub use reads::{ActivityBucket, Health, Overview};
pub use retry::RetryPolicy;
pub use storage::reads::{ErrorGroup, JobFilter, Stats, StatusCount};
pub use storage::Synchronous;
pub use typed::{IntoNewJob, Job, JobOptions, Perform};
pub use worker::{Worker, WorkerActivity, WorkerBuilder};

/// Names that moved: the defaults to [`defaults`], the retention and periodic types to
/// [`maintenance`]. Kept here for one release.
mod moved {
    macro_rules! moved_const {
        ($($name:ident: $ty:ty),* $(,)?) => {$(
            #[doc(hidden)]
            #[deprecated(since = "0.2.0", note = "moved to litejobs::defaults")]
            pub const $name: $ty = crate::defaults::$name;
        )*};
    }
    macro_rules! moved_type {
        ($($name:ident),* $(,)?) => {$(
            #[doc(hidden)]
            #[deprecated(since = "0.2.0", note = "moved to litejobs::maintenance")]
            pub type $name = crate::maintenance::$name;
        )*};
    }
    use std::time::Duration;
    moved_const!(
        DEFAULT_MAX_ATTEMPTS: u32, DEFAULT_MAX_PAYLOAD_BYTES: usize, DEFAULT_QUEUE: &str,
        DEFAULT_PRUNE_CHUNK: usize, DEFAULT_PRUNE_INTERVAL: Duration, DEFAULT_RETENTION: Duration,
        DEFAULT_REAP_INTERVAL: Duration, MIN_PERIODIC_INTERVAL: Duration,
        DEFAULT_BUSY_TIMEOUT: Duration, DEFAULT_IDEMPOTENCY_WINDOW: Duration, DEFAULT_POOL_SIZE: u32,
        DEFAULT_HEALTH_WINDOW: Duration, MAX_ACTIVITY_BUCKETS: usize,
        DEFAULT_RETRY_BASE: Duration, DEFAULT_RETRY_JITTER: f64, DEFAULT_RETRY_MAX_DELAY: Duration,
        DEFAULT_LIST_LIMIT: usize, DEFAULT_CONCURRENCY: usize, DEFAULT_JOB_TIMEOUT: Duration,
        DEFAULT_LEASE_GRACE: Duration, DEFAULT_POLL_INTERVAL: Duration, DEFAULT_PREFETCH: usize,
        DEFAULT_SHUTDOWN_GRACE: Duration,
    );
    moved_type!(
        CheckpointMode,
        CheckpointReport,
        PruneOptions,
        PruneReport,
        Pruner,
        EnqueuedSlot,
        Periodic,
        ScheduleState,
        Scheduler,
        TickReport,
    );
}
#[allow(deprecated)]
pub use moved::*;

/// True when `target`, as given to [`Queue::open`], names a database server
/// (`postgres://…`, `postgresql://…`) rather than a SQLite file.
pub fn is_server_url(target: impl AsRef<std::path::Path>) -> bool {
    storage::server_url(target.as_ref()).is_some()
}

/// The schema version this build of litejobs writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = storage::sqlite::migrate::SCHEMA_VERSION;

#[cfg(feature = "postgres")]
pub use storage::postgres::copy::{copy_sqlite_to_postgres, CopyReport};

/// The PostgreSQL schema version this build writes (`schema_version` table; feature
/// `postgres`). PostgreSQL's migrations count on their own from 1.
#[cfg(feature = "postgres")]
pub const PG_SCHEMA_VERSION: i64 = storage::postgres::migrate::SCHEMA_VERSION;

#[cfg(test)]
mod tests {
    fn assert_traits<T: Clone + Send + Sync + 'static>() {}

    #[test]
    fn queue_is_clone_send_sync_static() {
        assert_traits::<crate::Queue>();
    }
}
