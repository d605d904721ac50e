//! The finishing job: a step of the run's workflow that waits for every chunk's job, so the
//! transaction that ends the last of them releases it, once. It hands the run to
//! [`ReportKind::finish`](super::ReportKind::finish) and marks the run ready.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::csv::CsvFile;
use super::progress::{ReportRun, ReportState};
use super::{run_id_of, storage_error, Kind};
use crate::handler::JobContext;
use crate::handler::{Handler, JobError};
use crate::storage::reports::FinishWrite;
use crate::Queue;

/// Rows read per query while streaming a run's rows.
const ROWS_PER_READ: i64 = 1_000;

/// A finished run, as [`ReportKind::finish`](super::ReportKind::finish) sees it: the run and
/// its stored rows.
#[derive(Debug)]
pub struct Finish<'a> {
    queue: &'a Queue,
    run: ReportRun,
}

impl Finish<'_> {
    /// The run, with every chunk done.
    pub fn run(&self) -> &ReportRun {
        &self.run
    }

    /// Calls `f` with each stored row, in chunk order, reading a page at a time; returns how
    /// many rows there were. An error from `f` stops the walk and is returned.
    pub fn for_each_row(
        &self,
        mut f: impl FnMut(&Value) -> Result<(), JobError>,
    ) -> Result<u64, JobError> {
        let mut after = (-1, -1);
        let mut count = 0u64;
        loop {
            let page = self
                .queue
                .db()
                .read(|conn| conn.report_rows_after(self.run.id, after, ROWS_PER_READ))
                .map_err(storage_error)?;
            let Some(last) = page.last() else {
                return Ok(count);
            };
            after = (last.0, last.1);
            for (_, _, text) in &page {
                let row =
                    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()));
                f(&row)?;
                count += 1;
            }
        }
    }

    /// Writes the stored rows to `path` as CSV (RFC 4180: comma-separated, fields quoted when
    /// needed, CRLF line ends) under a `header` line, and returns the row count. A row that
    /// is a JSON array gives its elements in order; an object gives the values named by the
    /// header; text is written as is, `null` as an empty field, other values as JSON. The
    /// file appears complete or not at all (written beside it, then renamed).
    pub fn write_csv(&self, path: impl AsRef<Path>, header: &[&str]) -> Result<u64, JobError> {
        let path = path.as_ref();
        let io_error = |e: std::io::Error| {
            JobError::retry(format!("writing the report CSV {}: {e}", path.display()))
        };
        let mut file = CsvFile::create(path, header).map_err(io_error)?;
        let count = self.for_each_row(|row| file.write_row(row, header).map_err(io_error))?;
        file.commit().map_err(io_error)?;
        Ok(count)
    }
}

/// Runs `report.<kind>.finish`.
pub(crate) struct FinishHandler(pub(crate) Arc<Kind>);

impl Handler for FinishHandler {
    fn run(&self, ctx: &JobContext) -> Result<(), JobError> {
        let kind = &self.0;
        let queue = &kind.queue;
        let run_id = run_id_of(ctx)?
            .ok_or_else(|| JobError::permanent("payload field run_id is missing"))?;
        let row = queue
            .db()
            .read(|conn| conn.report_run(run_id))
            .map_err(storage_error)?
            .ok_or_else(|| {
                JobError::permanent(format!("report run {run_id} does not exist (deleted?)"))
            })?;
        let workflow_id = ctx.workflow_id().map_err(storage_error)?;
        let run = ReportRun::from_row(row, workflow_id).map_err(storage_error)?;
        match run.state {
            ReportState::Ready => {
                ctx.set_result(json!({"run_id": run_id, "already_ready": true}));
                return Ok(());
            }
            ReportState::Failed => {
                return Err(JobError::cancel(format!(
                    "report run {run_id} failed: {}",
                    run.error.as_deref().unwrap_or("no error recorded")
                )));
            }
            ReportState::Processing => {}
        }
        if run.chunks_done < run.chunks_total || run.planned_at.is_none() {
            return Err(JobError::permanent(format!(
                "report run {run_id} is not complete ({} of {} chunks done); its finishing job \
                 runs when the last chunk is done",
                run.chunks_done, run.chunks_total
            )));
        }
        let finish = Finish { queue, run };
        let result = match kind.report.finish(ctx, &finish) {
            Ok(result) => result,
            Err(err) => {
                kind.fail_if_final(ctx, run_id, &err, "finishing the report");
                return Err(err);
            }
        };
        if ctx.should_stop() {
            return Err(JobError::retry(
                "finishing the report: the attempt was stopped (time limit or shutdown)",
            ));
        }
        let rows = result.rows.map_or(finish.run.rows_done, |n| {
            i64::try_from(n).unwrap_or(i64::MAX)
        });
        let path = result
            .path
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned());
        let now = queue.now_ms();
        let written = queue
            .db()
            .write(|tx| {
                tx.lock_key(&format!("report-run:{run_id}"))?;
                tx.finish_run(run_id, path.as_deref(), rows, ctx.lease(), now)
            })
            .map_err(storage_error)?;
        match written {
            FinishWrite::Ready | FinishWrite::NotProcessing => {
                ctx.set_result(json!({"run_id": run_id, "path": path, "rows": rows}));
                Ok(())
            }
            FinishWrite::Fenced => Err(JobError::retry(
                "finishing the report: the attempt lost its job (timed out or reaped)",
            )),
        }
    }
}
