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
mod error;
mod events;
mod finite;
mod handler;
pub mod human;
mod job;
pub mod limits;
mod maintenance;
pub mod metrics;
mod queue;
mod reads;
pub mod redact;
mod retry;
mod storage;
pub mod testing;
mod wake;
#[cfg(feature = "web")]
pub mod web;
mod worker;

pub use clock::{Clock, ManualClock, SystemClock};
pub use context::JobContext;
pub use error::{Error, ErrorKind, Result};
pub use events::Event;
pub use handler::{Handler, JobError};
pub use job::{
    AttemptRecord, JobRecord, JobStatus, NewJob, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_QUEUE,
};
pub use maintenance::pruner::{
    CheckpointMode, CheckpointReport, PruneOptions, PruneReport, Pruner, DEFAULT_PRUNE_CHUNK,
    DEFAULT_PRUNE_INTERVAL, DEFAULT_RETENTION,
};
pub use maintenance::reaper::DEFAULT_REAP_INTERVAL;
pub use maintenance::scheduler::{
    EnqueuedSlot, Periodic, ScheduleState, Scheduler, TickReport, MIN_PERIODIC_INTERVAL,
};
pub use queue::{
    enqueue_in, Queue, QueueBuilder, DEFAULT_BUSY_TIMEOUT, DEFAULT_IDEMPOTENCY_WINDOW,
    DEFAULT_POOL_SIZE,
};
pub use reads::{ActivityBucket, MAX_ACTIVITY_BUCKETS};
pub use reads::{Health, Overview, DEFAULT_HEALTH_WINDOW};
pub use retry::{RetryPolicy, DEFAULT_RETRY_BASE, DEFAULT_RETRY_JITTER, DEFAULT_RETRY_MAX_DELAY};
pub use storage::reads::{ErrorGroup, JobFilter, Stats, StatusCount, DEFAULT_LIST_LIMIT};
pub use storage::Synchronous;
pub use worker::{
    Worker, WorkerBuilder, DEFAULT_CONCURRENCY, DEFAULT_JOB_TIMEOUT, DEFAULT_LEASE_GRACE,
    DEFAULT_POLL_INTERVAL, DEFAULT_PREFETCH, DEFAULT_SHUTDOWN_GRACE,
};

/// The schema version this build of litejobs writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = storage::sqlite::migrate::SCHEMA_VERSION;

#[cfg(test)]
mod tests {
    fn assert_traits<T: Clone + Send + Sync + 'static>() {}

    #[test]
    fn queue_is_clone_send_sync_static() {
        assert_traits::<crate::Queue>();
    }
}
