//! Reports in chunks: a report request fans out into chunk jobs (one per page or key
//! range) and a finishing job that runs once, when every chunk has succeeded: the steps of
//! a workflow the request job plans at run time.
//!
//! You describe a report kind by implementing [`ReportKind`] (how to split a request into
//! chunks, how to produce one chunk's rows, what to do with all of them) and register it
//! with [`WorkerBuilder::report`]. [`Queue::request_report`] starts a run and returns its
//! id; [`Queue::report_run`] is what a UI polls: state (processing, ready, failed), chunks
//! done of total, rows so far, and the result (a file path and row count, or the rows kept
//! in the `report_rows` table, read with [`Queue::report_rows`]).
//!
//! How a run goes, with the job types for a kind named `activity`: each run is a
//! [workflow](crate::guide::workflows) ([`ReportRun::workflow_id`]), whose steps are its jobs.
//! ```text
//! request_report ─► step "request" (report.activity.request) ─► plan()
//!   adds steps "chunk 0" … "chunk N-1" (report.activity.chunk) and "finish"
//!   (report.activity.finish), which waits for every chunk
//!   each chunk: run_chunk() → rows + done mark + counters in one transaction
//!   the transaction that ends the last chunk's job releases "finish" ─► finish()
//! ```
//! - A chunk's rows are written with its done mark in one transaction, fenced by its job's
//!   attempt: a chunk that fails and retries, or times out and is retried while its first
//!   attempt is still running, contributes its rows exactly once.
//! - The finishing step is planned with the chunks and held until each chunk's job has
//!   succeeded: the transaction that ends the last of them releases it, once, even when the
//!   last chunks finish together in different threads or processes.
//! - A chunk that goes dead (permanent error, attempts spent, timed out or lost on its last
//!   attempt) makes the run `failed`, with the chunk's error, and cancels the finishing step
//!   (`cancelled_by` `dependency`); the remaining chunks cancel themselves instead of working
//!   for nothing.
//! - Each chunk has a hard time limit ([`ReportKind::chunk_timeout`]): past it the attempt
//!   is recorded as timed out and retried, and its late rows are discarded.
//! - A request job that is a step of a workflow of yours ([`request_job`] as a
//!   [`Step`]) adds the chunks to that workflow (named `<its step>: chunk 0` …
//!   and `<its step>: finish`), and your steps that wait for it wait for the finishing step
//!   too: "email the link" after "report" runs once the report is ready.
//!
//! Report jobs go to the [`REPORT_QUEUE`] queue, so a backlog of reports never delays other
//! jobs; [`WorkerBuilder::report`] makes the worker work it.

mod chunk;
mod csv;
mod finish;
mod plan;
mod progress;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::handler::JobContext;
use crate::handler::{Action, JobError};
use crate::job::{NewJob, DEFAULT_MAX_ATTEMPTS};
use crate::workflow::{Step, Workflow};
use crate::{Queue, WorkerBuilder};

pub use finish::Finish;
pub use progress::{ReportRun, ReportState};

/// The queue every report job goes to.
pub const REPORT_QUEUE: &str = "reports";
/// Handler threads [`WorkerBuilder::report`] gives [`REPORT_QUEUE`] when the worker does not
/// work it yet.
pub const DEFAULT_REPORT_CONCURRENCY: usize = 2;
/// A chunk's hard time limit unless [`ReportKind::chunk_timeout`] says otherwise.
pub const DEFAULT_CHUNK_TIMEOUT: Duration = Duration::from_secs(300);

/// A report kind: how a request is split into chunks, how one chunk is produced, and what
/// happens when all are done. Register it with [`WorkerBuilder::report`].
///
/// ```
/// use litejobs::builtin::report::{Chunk, ChunkOutput, ReportKind, ReportState};
/// use litejobs::{testing, JobContext, JobError, Queue, Worker};
/// use serde_json::{json, Value};
///
/// /// The squares of 0..n, in chunks of 10.
/// struct Squares;
///
/// impl ReportKind for Squares {
///     fn plan(&self, params: &Value) -> Result<Vec<Value>, JobError> {
///         let n = params["n"].as_u64().ok_or_else(|| JobError::permanent("n is missing"))?;
///         Ok((0..n).step_by(10).map(|from| json!({"from": from, "to": (from + 10).min(n)})).collect())
///     }
///
///     fn run_chunk(&self, _ctx: &JobContext, chunk: &Chunk) -> Result<ChunkOutput, JobError> {
///         let (from, to) = (chunk.spec["from"].as_u64().unwrap_or(0), chunk.spec["to"].as_u64().unwrap_or(0));
///         Ok(ChunkOutput::rows((from..to).map(|i| json!([i, i * i])).collect()))
///     }
/// }
///
/// # fn main() -> litejobs::Result<()> {
/// let queue = Queue::open_in_memory()?;
/// let worker = Worker::builder(&queue).report("squares", Squares);
/// let run_id = queue.request_report("squares", json!({"n": 25}))?;
/// testing::drain(&worker)?;
/// let run = queue.report_run(run_id)?.expect("the run exists");
/// assert_eq!(run.state, ReportState::Ready);
/// assert_eq!((run.chunks_done, run.chunks_total, run.rows_done), (3, 3, 25));
/// assert_eq!(queue.report_rows(run_id, 24, 10)?, vec![json!([24, 576])]);
/// # Ok(())
/// # }
/// ```
pub trait ReportKind: Send + Sync + 'static {
    /// Splits a request into chunks: one JSON value per chunk saying what it covers (a page,
    /// a key range). Runs once per run, in the request job. An empty plan makes a run with
    /// no rows that goes straight to [`finish`](ReportKind::finish).
    fn plan(&self, params: &Value) -> std::result::Result<Vec<Value>, JobError>;

    /// Produces one chunk's rows. May run more than once for a chunk (after a failure or a
    /// timeout), so it must not have side effects of its own; only the rows of the attempt
    /// that completes the chunk are kept. Long chunks check
    /// [`ctx.should_stop()`](JobContext::should_stop) now and then.
    fn run_chunk(
        &self,
        ctx: &JobContext,
        chunk: &Chunk,
    ) -> std::result::Result<ChunkOutput, JobError>;

    /// Runs once, when every chunk is done: e.g. writes the rows to a file
    /// ([`Finish::write_csv`]) and says where it is. Defaults to keeping the rows in the
    /// `report_rows` table ([`ReportResult::table`]).
    fn finish(
        &self,
        ctx: &JobContext,
        finish: &Finish<'_>,
    ) -> std::result::Result<ReportResult, JobError> {
        let _ = (ctx, finish);
        Ok(ReportResult::table())
    }

    /// A chunk's hard time limit. Defaults to [`DEFAULT_CHUNK_TIMEOUT`] (5 minutes).
    fn chunk_timeout(&self) -> Duration {
        DEFAULT_CHUNK_TIMEOUT
    }

    /// The time limit of the request job (planning) and of the finishing job. Defaults to
    /// [`DEFAULT_CHUNK_TIMEOUT`] (5 minutes).
    fn finish_timeout(&self) -> Duration {
        DEFAULT_CHUNK_TIMEOUT
    }

    /// Attempts of each chunk (and of the finishing job) before the run fails. Defaults to
    /// [`DEFAULT_MAX_ATTEMPTS`].
    fn chunk_max_attempts(&self) -> u32 {
        DEFAULT_MAX_ATTEMPTS
    }
}

/// One chunk of a run, as [`ReportKind::run_chunk`] sees it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Chunk {
    /// The run.
    pub run_id: i64,
    /// This chunk's number, from 0.
    pub index: u32,
    /// The run's number of chunks.
    pub total: u32,
    /// What this chunk covers, as planned.
    pub spec: Value,
    /// The request's parameters.
    pub params: Value,
}

/// What one chunk produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChunkOutput {
    rows: Vec<Value>,
    count: Option<u64>,
}

impl ChunkOutput {
    /// Rows to keep with the run (JSON arrays of fields, or objects), in order. They are
    /// stored in `report_rows` in the same transaction that marks the chunk done.
    pub fn rows(rows: Vec<Value>) -> ChunkOutput {
        ChunkOutput { rows, count: None }
    }

    /// No rows to keep, only a count for the progress (the chunk stored its output itself).
    pub fn counted(rows: u64) -> ChunkOutput {
        ChunkOutput {
            rows: Vec::new(),
            count: Some(rows),
        }
    }

    fn row_count(&self) -> i64 {
        let n = self.count.unwrap_or(self.rows.len() as u64);
        i64::try_from(n).unwrap_or(i64::MAX)
    }
}

/// Where a finished run's result is, returned by [`ReportKind::finish`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportResult {
    path: Option<PathBuf>,
    rows: Option<u64>,
}

impl ReportResult {
    /// The rows stay in the `report_rows` table (read them with [`Queue::report_rows`]).
    pub fn table() -> ReportResult {
        ReportResult::default()
    }

    /// The result is a file (e.g. the CSV written by [`Finish::write_csv`]).
    pub fn file(path: impl Into<PathBuf>) -> ReportResult {
        ReportResult {
            path: Some(path.into()),
            rows: None,
        }
    }

    /// The result's row count. Defaults to the rows the chunks produced.
    pub fn row_count(mut self, rows: u64) -> ReportResult {
        self.rows = Some(rows);
        self
    }
}

/// The job type of a kind's request job: `report.<kind>.request`.
pub fn request_job_type(kind: &str) -> String {
    format!("report.{kind}.request")
}

/// The job type of a kind's chunk jobs: `report.<kind>.chunk`.
pub fn chunk_job_type(kind: &str) -> String {
    format!("report.{kind}.chunk")
}

/// The job type of a kind's finishing job: `report.<kind>.finish`.
pub fn finish_job_type(kind: &str) -> String {
    format!("report.{kind}.finish")
}

/// A request job that creates its own run when it runs: the template for a report on a
/// schedule ([`Periodic`](crate::worker::maintenance::Periodic)), or for other programs (`{"params": {...}}` in
/// the queue [`REPORT_QUEUE`]), or for a step of a workflow of yours. A retried request job
/// finds the run it created. When it runs it joins a workflow of the run's own, or, as a step
/// of your workflow, adds the chunks to yours; either way [`ReportRun::workflow_id`] names it.
///
/// ```
/// use litejobs::builtin::report;
/// use litejobs::NewJob;
/// use litejobs::maintenance::Periodic;
/// use serde_json::json;
/// # fn main() -> litejobs::Result<()> {
/// let nightly = Periodic::cron("0 2 * * *", report::request_job("activity", json!({"days": 1})))?;
/// assert_eq!(nightly.name(), "report.activity.request");
/// # Ok(())
/// # }
/// ```
pub fn request_job(kind: &str, params: Value) -> NewJob {
    NewJob::new(request_job_type(kind), json!({ "params": params })).queue(REPORT_QUEUE)
}

impl WorkerBuilder {
    /// Registers a report kind: the handlers of its request, chunk and finishing jobs, with
    /// the kind's time limits. Works [`REPORT_QUEUE`] with [`DEFAULT_REPORT_CONCURRENCY`]
    /// threads unless the worker already works it (set its threads with
    /// [`queue`](WorkerBuilder::queue), before or after).
    pub fn report(self, kind: impl Into<String>, report: impl ReportKind) -> Self {
        let kind: String = kind.into();
        let shared = Arc::new(Kind {
            name: kind.clone(),
            queue: self.queue_handle().clone(),
            report: Box::new(report),
        });
        let chunk_timeout = shared.report.chunk_timeout();
        let finish_timeout = shared.report.finish_timeout();
        let mut builder = self
            .handler(
                request_job_type(&kind),
                plan::RequestHandler(Arc::clone(&shared)),
            )
            .handler(
                chunk_job_type(&kind),
                chunk::ChunkHandler(Arc::clone(&shared)),
            )
            .handler(finish_job_type(&kind), finish::FinishHandler(shared))
            .timeout(request_job_type(&kind), finish_timeout)
            .timeout(chunk_job_type(&kind), chunk_timeout)
            .timeout(finish_job_type(&kind), finish_timeout);
        if !builder.queues.iter().any(|(name, _)| name == REPORT_QUEUE) {
            builder = builder.queue(REPORT_QUEUE, DEFAULT_REPORT_CONCURRENCY);
        }
        builder
    }
}

impl Queue {
    /// Starts a run of the report `kind` with `params` and returns the run's id, to poll
    /// with [`Queue::report_run`]. The run and its request job are written in one
    /// transaction.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidJob`](crate::ErrorKind::InvalidJob) for an empty kind;
    /// database errors.
    pub fn request_report(&self, kind: &str, params: Value) -> Result<i64> {
        if kind.trim().is_empty() {
            return Err(Error::invalid_job("report kind must not be empty"));
        }
        let params_text = params.to_string();
        let now = self.now_ms();
        let run_id = self.db().write(|tx| {
            let run_id = tx.insert_run(kind, &params_text, None, now)?;
            let job = NewJob::new(request_job_type(kind), json!({ "run_id": run_id }))
                .queue(REPORT_QUEUE);
            let flow = Workflow::new(format!("report {kind} run {run_id}"))
                .step(Step::new(plan::REQUEST_STEP, job));
            let ids = self.workflow_on(tx, &flow, now)?;
            if let Some(job_id) = ids.step(plan::REQUEST_STEP) {
                tx.set_request_job(run_id, job_id)?;
            }
            Ok(run_id)
        })?;
        self.notify();
        Ok(run_id)
    }
}

/// A registered report kind, shared by its three handlers.
pub(crate) struct Kind {
    pub(crate) name: String,
    pub(crate) queue: Queue,
    pub(crate) report: Box<dyn ReportKind>,
}

impl Kind {
    /// The finishing job of a run: a step that waits for every chunk.
    fn finish_job(&self, run_id: i64) -> NewJob {
        NewJob::new(finish_job_type(&self.name), json!({ "run_id": run_id }))
            .queue(REPORT_QUEUE)
            .timeout(self.report.finish_timeout())
            .max_attempts(self.report.chunk_max_attempts())
            .idempotency_key(format!("report:{run_id}:finish"))
    }

    /// Marks the run failed when `err` ends the job for good: a permanent error or a cancel,
    /// or a retryable one on the last attempt. `what` names the step for the message.
    fn fail_if_final(&self, ctx: &JobContext, run_id: i64, err: &JobError, what: &str) {
        let is_final = match err.action {
            Action::Permanent | Action::Cancel => true,
            Action::Retry | Action::RetryAfter(_) => ctx.is_last_attempt(),
            Action::Snooze(_) => false,
        };
        if !is_final {
            return;
        }
        let message = format!("{what} failed: {}", err.message());
        let now = self.queue.now_ms();
        if let Err(e) = self
            .queue
            .db()
            .write(|tx| tx.fail_run(run_id, &message, now))
        {
            // The run still reads as failed once the job is dead (see storage::reports).
            log::warn!("litejobs: could not mark report run {run_id} failed: {e}");
        }
    }
}

/// A storage failure inside a report handler: retried, it is not the report's fault.
fn storage_error(err: Error) -> JobError {
    JobError::retry(format!("report storage: {err}"))
}

/// `run_id` from a report job's payload.
fn run_id_of(ctx: &JobContext) -> std::result::Result<Option<i64>, JobError> {
    match ctx.payload().get("run_id") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| {
            JobError::permanent(format!("payload field run_id must be an integer, got {v}"))
        }),
    }
}
