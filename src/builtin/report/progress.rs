//! What a UI polls: a run's state, progress and result ([`ReportRun`]), and its stored rows.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use crate::error::Result;
pub use crate::storage::reports::ReportState;
use crate::storage::reports::RunRow;
use crate::storage::Tx;
use crate::Queue;

/// A report run: state, progress and result, as stored in `report_runs`. Times are
/// milliseconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ReportRun {
    /// The run's id.
    pub id: i64,
    /// The report kind.
    pub kind: String,
    /// The request's parameters.
    pub params: Value,
    /// processing, ready or failed.
    pub state: ReportState,
    /// Chunks planned (0 until the request job has planned them; see `planned_at`).
    pub chunks_total: i64,
    /// Chunks done.
    pub chunks_done: i64,
    /// Rows the done chunks produced.
    pub rows_done: i64,
    /// The result file, when the report wrote one.
    pub result_path: Option<PathBuf>,
    /// The result's row count, once ready.
    pub result_rows: Option<i64>,
    /// Why the run failed.
    pub error: Option<String>,
    /// The job that planned the chunks.
    pub request_job_id: Option<i64>,
    /// The finishing job, once the chunks are planned (held until every chunk is done).
    pub finish_job_id: Option<i64>,
    /// The run's workflow ([`Queue::workflow`]): its request, chunk and finishing jobs as
    /// steps. `None` once those jobs are pruned, or for a run whose request job was
    /// enqueued by another program and has not planned yet.
    pub workflow_id: Option<i64>,
    /// When the chunks were planned.
    pub planned_at: Option<i64>,
    /// When the run was requested.
    pub created_at: i64,
    /// When the run last changed.
    pub updated_at: i64,
    /// When it became ready or failed.
    pub finished_at: Option<i64>,
}

impl ReportRun {
    /// Chunks done of total, from 0.0 to 1.0 (0.0 before planning; 1.0 when ready).
    pub fn fraction_done(&self) -> f64 {
        match self.state {
            ReportState::Ready => 1.0,
            _ if self.chunks_total <= 0 => 0.0,
            _ => self.chunks_done as f64 / self.chunks_total as f64,
        }
    }

    pub(crate) fn from_row(row: RunRow, workflow_id: Option<i64>) -> Result<ReportRun> {
        let params = serde_json::from_str(&row.params).unwrap_or(Value::String(row.params));
        Ok(ReportRun {
            id: row.id,
            kind: row.kind,
            params,
            state: row.state,
            chunks_total: row.chunks_total,
            chunks_done: row.chunks_done,
            rows_done: row.rows_done,
            result_path: row.result_path.map(PathBuf::from),
            result_rows: row.result_rows,
            error: row.error,
            request_job_id: row.request_job_id,
            finish_job_id: row.finish_job_id,
            workflow_id,
            planned_at: row.planned_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
            finished_at: row.finished_at,
        })
    }
}

/// Parses stored row texts; a row that is not JSON (written by hand) comes back as a string.
fn parse_rows(texts: Vec<String>) -> Vec<Value> {
    texts
        .into_iter()
        .map(|t| serde_json::from_str(&t).unwrap_or(Value::String(t)))
        .collect()
}

/// The workflow of a run: its finishing job's (in the run's workflow once planned), or its
/// request job's.
fn workflow_of(tx: &dyn Tx, row: &RunRow) -> Result<Option<i64>> {
    for id in [row.finish_job_id, row.request_job_id]
        .into_iter()
        .flatten()
    {
        if let Some(workflow_id) = tx.job(id)?.and_then(|job| job.workflow_id) {
            return Ok(Some(workflow_id));
        }
    }
    Ok(None)
}

impl Queue {
    /// One report run by id (state, progress, result), or `None`. A run whose chunk job went
    /// dead reads as failed even before anything else noticed.
    pub fn report_run(&self, id: i64) -> Result<Option<ReportRun>> {
        self.db().read(|tx| {
            let Some(row) = tx.report_run(id)? else {
                return Ok(None);
            };
            let workflow_id = workflow_of(tx, &row)?;
            ReportRun::from_row(row, workflow_id).map(Some)
        })
    }

    /// The latest runs, newest first: of one kind, or of all with `None`.
    pub fn report_runs(&self, kind: Option<&str>, limit: usize) -> Result<Vec<ReportRun>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.db().read(|tx| {
            tx.report_runs(kind, limit)?
                .into_iter()
                .map(|row| {
                    let workflow_id = workflow_of(tx, &row)?;
                    ReportRun::from_row(row, workflow_id)
                })
                .collect()
        })
    }

    /// A page of a run's stored rows, in chunk order: at most `limit` rows from position
    /// `offset` (from 0). Rows of chunks done so far are there while the run is processing.
    pub fn report_rows(&self, run_id: i64, offset: usize, limit: usize) -> Result<Vec<Value>> {
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let texts = self
            .db()
            .read(|conn| conn.report_rows_page(run_id, offset, limit))?;
        Ok(parse_rows(texts))
    }

    /// Deletes a run with its chunks and stored rows (not its result file). False when there
    /// was no such run.
    pub fn delete_report_run(&self, id: i64) -> Result<bool> {
        self.db().write(|tx| tx.delete_run(id))
    }
}
