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
//!   [`Queue::discard_dead`] act; [`Queue::prune`] and [`Pruner`](maintenance::Pruner) keep the file small;
//!   [`metrics`] speaks Prometheus; [`redact`] masks secret payload fields in every view;
//!   [`encryption`] keeps them out of the database file ([`NewJob::encrypted`]).
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
//! ## How a job runs
//! The path of one job from [`Queue::enqueue`] to its written outcome, with the threads and
//! channels on the way (threads are named as `top -H` and debuggers show them):
//!
//! ```text
//!  your thread              a worker's dispatcher thread           executor threads of the
//!                           (litejobs-dispatcher: its only         job's queue
//!                            writer to the database)               (litejobs-QUEUE-N)
//!  ───────────              ──────────────────────────────         ──────────────────────
//!  Queue::enqueue
//!   INSERT, status queued
//!   Event::Enqueued ─► subscribers
//!   wake channel ─────────► woken (other processes' commits:
//!                           the change watch; anything else:
//!                           a poll every poll_interval)
//!                           write round, one transaction:
//!                            · the completer's batch of outcomes
//!                              and heartbeats
//!                            · the reaper, when due
//!                            · lease renewals of prefetched jobs
//!                            · the claim: due rows of the queue
//!                              become running, leased for their
//!                              timeout + grace
//!                           feed channel (one per queue) ───────► runs the handler with a
//!                                                                 JobContext (a panic is
//!                                                                 caught; the dispatcher
//!                                                                 times out an overdue one)
//!                           ◄─ writer channel: the outcome ─────
//!                           ◄─ nudge channel: "decide now" ─────  (not one per outcome)
//!                           next write round: the completer
//!                           writes the outcome, fenced by the
//!                           lease (a reaped job's late result
//!                           changes nothing) ─► written outcome
//!                           Event::Finished ─► subscribers
//! ```
//!
//! - **The dispatcher thread** (one per [`Worker`]) is the worker's only writer: each round
//!   writes the finished attempts, reaps expired leases when due, renews the leases of
//!   prefetched jobs, and claims for every queue with free threads plus a prefetch sized by
//!   how long its jobs take, in one transaction on SQLite (on PostgreSQL the claim is a
//!   statement of its own). Between rounds it does the upkeep: scheduled pruning, the expiry
//!   sweep of jobs past their deadline, and the sweep of rows no claim can take.
//! - **Executor threads**, as many per queue as its concurrency, each run one attempt at a
//!   time. A heartbeat ([`JobContext::heartbeat`]) travels the writer channel too, and waits
//!   for its answer.
//! - **The feed channel** of a queue carries claimed jobs (and an early "a job is coming"
//!   after an in-process enqueue) from the dispatcher to that queue's executors, in claim
//!   order. Beside it, a short lane holds jobs of a higher priority than every job waiting
//!   in the channel: the executors take those first.
//! - **The writer channel** (the dispatcher's `results`) carries outcomes and heartbeats to
//!   the dispatcher, which drains it in batches; **the nudge channel** wakes the dispatcher
//!   only when it has something to decide (a queue running low, a heartbeat waiting).
//! - **The wake channel** of each dispatcher (and scheduler) is how an enqueue in this
//!   process wakes it at once; [`Queue::notify`] sends on it too.
//! - **The change watch** learns of other connections' commits (other processes, plain SQL):
//!   on Linux a thread (`litejobs-watch`) waits on an inotify watch of the database's files;
//!   on PostgreSQL a thread (`litejobs-listen`) sleeps on a `LISTEN` connection's socket
//!   until the insert trigger's notification arrives, and tells the dispatcher at once;
//!   elsewhere the dispatcher asks on a timer, every `change_check_interval`.
//! - **The control channel** carries [`Worker::shutdown`] to the dispatcher: it stops
//!   claiming, gives back the prefetched jobs, waits for running handlers up to the grace,
//!   gives back the rest and joins the threads.
//! - **The scheduler thread** (`litejobs-scheduler`, only when periodic jobs are registered)
//!   enqueues each periodic job once per slot, like any other enqueue.
//!
//! [`testing::drain`] runs the same claim, attempt and completion on the calling thread.
//!
//! ### The status machine
//! The `status` column, and who moves a job from one status to the next:
//!
//! ```text
//!  enqueue ─► queued ──claim──► running ──success───────────────────────────► succeeded
//!               ▲                │  │
//!               │   snooze, or   │  ├─retryable error, attempts left ─────────► failed
//!               └── given back ──┘  │ (or the reaper: lease expired)              │
//!                   at shutdown     │                                 run_at due: │
//!                                   │                  claim ─► running ◄─────────┘
//!                                   ├─permanent error, or attempts spent ───────► dead
//!                                   │ (or the reaper: lease expired, spent)       │
//!                                   │                 requeue: a new queued job ◄─┘
//!                                   └─JobError::cancel, or a person ────────────► cancelled
//!  queued or failed, past its deadline (expires_at) ──expiry sweep──────────────► cancelled
//!  running, its retry or snooze at or after the deadline ──the completer───────► cancelled
//! ```
//!
//! | transition | who writes it |
//! | --- | --- |
//! | queued or failed (due) → running | the claim, in a dispatcher's write round |
//! | running → succeeded, failed, dead, cancelled; queued (a snooze, or given back at shutdown) | the completer, in the dispatcher's next round, fenced by the job's lease |
//! | running (lease expired: its worker died or hung) → failed, due now, or dead | the reaper, in any worker's dispatcher, every reap interval |
//! | queued or failed → dead (a row no claim can use) | the claim, and the stray sweep |
//! | queued or failed, past its deadline → cancelled (`cancelled_by` `deadline`; the claim never starts it) | the expiry sweep, in any worker's dispatcher every reap interval; [`testing::drain`]; [`Queue::cancel_expired`] |
//! | running → cancelled by `deadline`, when the retry or snooze it asks for would fall at or after its deadline | the completer, fenced by the lease |
//! | queued, failed or running → cancelled; queued or failed → due now | a person: [`Queue::cancel`] (a running attempt's later outcome is fenced off), [`Queue::retry_now`] |
//! | dead → failed with one more attempt; dead → a new queued job; dead → deleted | a person: [`Queue::retry_now`], [`Queue::requeue_dead`], [`Queue::discard_dead`] |
//! | succeeded, cancelled → deleted | retention: [`Queue::prune`], a worker's pruner |
//!
//!
//! ## Where things are
//! One module per concept, each using only those listed before it (`tests/layout/` checks
//! that imports between modules never go round in a cycle, at every level of the tree):
//!
//! | module | what it holds |
//! | --- | --- |
//! | `error` | [`Error`] and [`ErrorKind`] |
//! | `system` | what litejobs meets outside its code: the time ([`Clock`]), the machine's name, a database server that cannot be reached |
//! | [`human`] | times, durations and long texts as people read and write them (the one duration grammar) |
//! | `job` | a job as data: [`NewJob`], [`JobRecord`], [`JobStatus`], typed [`Job`]s, [`RetryPolicy`] |
//! | [`encryption`] | payloads, results and progress encrypted at rest: the [`Keyring`](encryption::Keyring), the envelope |
//! | [`redact`] | secret payload fields masked in every view |
//! | `storage` | SQLite and PostgreSQL behind one interface: all the SQL |
//! | `queue` | [`Queue`]: open, enqueue, read, act, the dead letter, [`metrics`], events |
//! | `handler` | what runs a job: [`Handler`], [`JobContext`], [`JobError`], [`Perform`] |
//! | [`limits`] | rate limits and circuit breakers shared through the database |
//! | `worker` | [`Worker`]: the dispatcher, executor threads and completer below; the [`maintenance`] workers run; [`testing`] |
//! | `exec`, [`builtin`] | handlers ready to register: commands in any language, webhooks, email, reports |
//! | `web` | the dashboard (feature `web`), over its own HTTP server (`web/server/`) |
//! | [`defaults`], [`guide`] | every default in one place; the guides |
//!
//! ## Cargo features
//! All on by default; with `default-features = false` you get the core: the queue, workers,
//! periodic jobs, reports in chunks, rate limits, metrics and [`testing`], on SQLite
//! (bundled), with no HTTP, TLS or SMTP crates in the build.
//! - `webhook`: `builtin::webhook`, signed webhook delivery over HTTPS (ureq, rustls).
//! - `email`: `builtin::email`, SMTP (lettre) and development mailers.
//! - `web`: `litejobs::web`, the dashboard and its small blocking HTTP server.
//! - `encryption`: payloads, results and progress encrypted at rest ([`encryption`]):
//!   AES-256-GCM-SIV (aes-gcm-siv), named keys, `litejobs keys`.
//! - `cli`: the `litejobs` binary (implies `webhook` and `email`, which `litejobs work` runs,
//!   and `encryption`).
//!
//! The README's "Cargo features" has what each one pulls in.
//!
//! ## The schema is a contract
//! `schema.sql` at the top of the repository documents every table and column, so programs
//! in any language can `INSERT INTO jobs (job_type, payload) VALUES (...)` and let litejobs
//! run the row. Times are milliseconds since the Unix epoch.
//!
//! Rows from outside are checked at the door and never trusted at the claim: CHECK
//! rules (written for SQLite 3.31 and later) refuse a wrongly typed insert in the inserting
//! program, naming the rule; a row that still cannot be used (invalid UTF-8 or JSON, an
//! oversized payload) goes dead when claimed, with an error naming the job and the column,
//! while every other job keeps flowing; readers show such rows safely, with what is wrong in
//! [`JobRecord::problems`]. [`Queue::open_read_only`] inspects a file without ever writing it.
//!
//! ## Log levels
//! `info`: schema migrations, worker start and stop. `warn`: retried database errors.
//! `debug`: per-batch activity. Payloads are never logged.
// One module calls C (libpq) itself and allows `unsafe` there: see
// src/storage/postgres/listen/libpq.rs. Everything else is safe code.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod builtin;
pub mod defaults;
pub mod encryption;
mod error;
#[cfg(all(unix, feature = "exec"))]
pub mod exec;
mod fingerprint;
pub mod guide;
mod handler;
pub mod human;
mod job;
pub mod job_log;
pub mod limits;
pub mod progress;
mod queue;
pub mod redact;
mod storage;
mod system;
#[cfg(feature = "web")]
pub mod web;
mod worker;
pub mod workflow;

pub use error::{Error, ErrorKind, Result};
pub use handler::{Handler, JobContext, JobError, Perform};
pub use job::{
    AttemptOutcome, AttemptRecord, Discarded, IntoNewJob, Job, JobOptions, JobRecord, JobStatus,
    NewJob, RetryPolicy,
};
pub use queue::events::Event;
pub use queue::metrics;
pub use queue::reads::{ActivityBucket, Health, Overview};
pub use queue::rotation::RotationReport;
pub use queue::write_watch::WriteWatch;
pub use queue::{enqueue_in, Queue, QueueBuilder};
pub use storage::reads::{ErrorGroup, JobFilter, Stats, StatusCount};
pub use storage::workers::WorkerInfo;
pub use storage::Synchronous;
pub use system::{Clock, ManualClock, SystemClock};
pub use worker::{maintenance, testing};
pub use worker::{Worker, WorkerActivity, WorkerBuilder};
pub use workflow::{Batch, BatchIds, Step, Workflow, WorkflowIds};

/// True when `target`, as given to [`Queue::open`], names a database server
/// (`postgres://…`, `postgresql://…`) rather than a SQLite file.
pub fn is_server_url(target: impl AsRef<std::path::Path>) -> bool {
    storage::server_url(target.as_ref()).is_some()
}

/// The schema version this build of litejobs writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = storage::sqlite::migrate::SCHEMA_VERSION;

#[cfg(feature = "postgres")]
pub use storage::postgres::copy::{
    copy_sqlite_to_postgres, copy_sqlite_to_postgres_with_progress, CopyReport,
};

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
