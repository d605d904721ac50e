//! Report runs, their chunks and their rows as stored.
//!
//! A chunk is done once: its rows, its `done` mark and the run's counters are written in one
//! transaction, guarded by the chunk still being pending and by its job still holding this
//! attempt (so a late result of a timed-out attempt writes nothing). The finishing job is a
//! step of the run's workflow that waits for every chunk's job (see `builtin::report`), so
//! the transaction that ends the last of them releases it, once, even when the last chunks
//! finish at the same moment in different threads or processes.

use std::fmt;

use serde::Serialize;

use crate::error::Result;
use crate::storage::jobs::Lease;

/// Where a report run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportState {
    /// Planning or running its chunks, or finishing.
    Processing,
    /// Finished: the result is ready to download.
    Ready,
    /// A chunk, the request or the finishing job failed for good; see the run's `error`.
    Failed,
}

impl ReportState {
    /// The word stored in `report_runs.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReportState::Processing => "processing",
            ReportState::Ready => "ready",
            ReportState::Failed => "failed",
        }
    }

    /// The state for a stored word; the CHECK constraint allows no other, and a run whose
    /// word is unknown cannot finish, so it reads as failed.
    pub(crate) fn parse(s: &str) -> ReportState {
        match s {
            "processing" => ReportState::Processing,
            "ready" => ReportState::Ready,
            _ => ReportState::Failed,
        }
    }
}

impl fmt::Display for ReportState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `report_runs` row, with the state a reader should see (see [`ReportStore::report_run`]).
#[derive(Debug, Clone)]
pub(crate) struct RunRow {
    pub(crate) id: i64,
    pub(crate) kind: String,
    pub(crate) params: String,
    pub(crate) state: ReportState,
    pub(crate) chunks_total: i64,
    pub(crate) chunks_done: i64,
    pub(crate) rows_done: i64,
    pub(crate) result_path: Option<String>,
    pub(crate) result_rows: Option<i64>,
    pub(crate) error: Option<String>,
    pub(crate) request_job_id: Option<i64>,
    pub(crate) finish_job_id: Option<i64>,
    pub(crate) planned_at: Option<i64>,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) finished_at: Option<i64>,
}

/// A chunk's spec and whether it is done.
#[derive(Debug, Clone)]
pub(crate) struct ChunkRow {
    pub(crate) spec: String,
    pub(crate) done: bool,
}

/// What [`ReportStore::complete_chunk`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkWrite {
    /// The chunk is now done; `last` when it was the run's last one.
    Done { last: bool },
    /// Already done by an earlier attempt, or the run is not processing: nothing written.
    AlreadyDone,
    /// This attempt no longer holds its job (timed out, reaped): nothing written.
    Fenced,
}

/// What [`ReportStore::finish_run`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinishWrite {
    /// The run is ready.
    Ready,
    /// It was not processing (ready already, or failed): nothing written.
    NotProcessing,
    /// This attempt no longer holds its job: nothing written.
    Fenced,
}

/// Report runs, chunks and rows.
pub(crate) trait ReportStore {
    /// Inserts a run in `processing`; returns its id.
    fn insert_run(
        &self,
        kind: &str,
        params: &str,
        request_job_id: Option<i64>,
        now: i64,
    ) -> Result<i64>;

    /// Records which job plans a run.
    fn set_request_job(&self, run_id: i64, job_id: i64) -> Result<()>;

    /// The run a request job created, if it did.
    fn run_of_request(&self, request_job_id: i64) -> Result<Option<i64>>;

    /// One run, as a reader should see it.
    fn report_run(&self, id: i64) -> Result<Option<RunRow>>;

    /// The latest runs, newest first, of one kind or of all.
    fn report_runs(&self, kind: Option<&str>, limit: i64) -> Result<Vec<RunRow>>;

    /// Records a run's plan: its chunks (JSON specs, in order). False, changing nothing, when the
    /// run was already planned (a retried request job) or is no longer processing.
    fn plan_run(&self, run_id: i64, specs: &[String], now: i64) -> Result<bool>;

    /// Records the job that runs a chunk.
    fn set_chunk_job(&self, run_id: i64, chunk: i64, job_id: i64) -> Result<()>;

    /// Records the job that finishes a run.
    fn set_finish_job(&self, run_id: i64, job_id: i64) -> Result<()>;

    /// A chunk of a run: its spec and whether it is done.
    fn report_chunk(&self, run_id: i64, chunk: i64) -> Result<Option<ChunkRow>>;

    /// True while the job is running under `lease` (not timed out, reaped or released).
    fn chunk_fence_holds(&self, lease: Lease<'_>) -> Result<bool>;

    /// Writes a chunk's rows (JSON texts, in order) and `count`, marks it done and counts it on
    /// the run, all or nothing. Must run inside a write transaction.
    fn complete_chunk(
        &self,
        run_id: i64,
        chunk: i64,
        rows: &[String],
        count: i64,
        lease: Lease<'_>,
        now: i64,
    ) -> Result<ChunkWrite>;

    /// Marks a processing run failed with `error`. False when it was not processing.
    fn fail_run(&self, run_id: i64, error: &str, now: i64) -> Result<bool>;

    /// Marks a processing run ready with its result. Must run inside a write transaction.
    fn finish_run(
        &self,
        run_id: i64,
        result_path: Option<&str>,
        result_rows: i64,
        lease: Lease<'_>,
        now: i64,
    ) -> Result<FinishWrite>;

    /// Up to `limit` stored rows of a run after position `(chunk, seq)` (exclusive), in order.
    /// Start with `(-1, -1)`.
    fn report_rows_after(
        &self,
        run_id: i64,
        after: (i64, i64),
        limit: i64,
    ) -> Result<Vec<(i64, i64, String)>>;

    /// Up to `limit` stored rows of a run from position `offset` in (chunk, seq) order.
    fn report_rows_page(&self, run_id: i64, offset: i64, limit: i64) -> Result<Vec<String>>;

    /// Deletes a run with its chunks and rows. False when there was none.
    fn delete_run(&self, run_id: i64) -> Result<bool>;
}
