//! The chunk job: produces one chunk's rows and writes them with the chunk's done mark and
//! the run's counters in one fenced transaction. The finishing step waits for every chunk's
//! job: the transaction that ends the last of them releases it.

use std::sync::Arc;

use serde_json::{json, Value};

use super::{run_id_of, storage_error, Chunk, Kind};
use crate::handler::JobContext;
use crate::handler::{Handler, JobError};
use crate::storage::reports::ChunkWrite;

/// Runs `report.<kind>.chunk`.
pub(crate) struct ChunkHandler(pub(crate) Arc<Kind>);

fn parse_json(text: &str, what: &str) -> std::result::Result<Value, JobError> {
    serde_json::from_str(text)
        .map_err(|e| JobError::permanent(format!("{what} is not valid JSON: {e}")))
}

impl Handler for ChunkHandler {
    fn run(&self, ctx: &JobContext) -> std::result::Result<(), JobError> {
        let kind = &self.0;
        let queue = &kind.queue;
        let run_id = run_id_of(ctx)?
            .ok_or_else(|| JobError::permanent("payload field run_id is missing"))?;
        let index = ctx
            .payload()
            .get("chunk")
            .and_then(Value::as_u64)
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| JobError::permanent("payload field chunk must be a chunk number"))?;
        let run = queue
            .db()
            .read(|conn| conn.report_run(run_id))
            .map_err(storage_error)?
            .ok_or_else(|| {
                JobError::permanent(format!("report run {run_id} does not exist (deleted?)"))
            })?;
        match run.state.as_str() {
            "failed" => {
                // Write down what the read noticed (a dead sibling), then stop working for it.
                let error = run.error.unwrap_or_default();
                let now = queue.now_ms();
                let _ = queue.db().write(|tx| tx.fail_run(run_id, &error, now));
                return Err(JobError::cancel(format!(
                    "report run {run_id} failed, chunk {index} not needed: {error}"
                )));
            }
            "ready" => return Ok(()),
            _ => {}
        }
        let stored = queue
            .db()
            .read(|conn| conn.report_chunk(run_id, i64::from(index)))
            .map_err(storage_error)?
            .ok_or_else(|| {
                JobError::permanent(format!("report run {run_id} has no chunk {index}"))
            })?;
        if stored.done {
            ctx.set_result(json!({"run_id": run_id, "chunk": index, "already_done": true}));
            return Ok(());
        }
        let total = u32::try_from(run.chunks_total).unwrap_or(u32::MAX);
        let chunk = Chunk {
            run_id,
            index,
            total,
            spec: parse_json(&stored.spec, "the chunk's spec")?,
            params: parse_json(&run.params, "the report's params")?,
        };
        let what = format!("chunk {index} of {total}");
        let output = match kind.report.run_chunk(ctx, &chunk) {
            Ok(output) => output,
            Err(err) => {
                kind.fail_if_final(ctx, run_id, &err, &what);
                return Err(err);
            }
        };
        if ctx.should_stop() {
            return Err(JobError::retry(format!(
                "{what}: the attempt was stopped (time limit or shutdown); its rows were not kept"
            )));
        }
        let rows: Vec<String> = output.rows.iter().map(Value::to_string).collect();
        let count = output.row_count();
        let now = queue.now_ms();
        let written = queue
            .db()
            .write(|tx| {
                tx.lock_key(&format!("report-run:{run_id}"))?;
                tx.complete_chunk(run_id, i64::from(index), &rows, count, ctx.lease(), now)
            })
            .map_err(storage_error)?;
        match written {
            ChunkWrite::Done { .. } => {
                ctx.set_result(json!({"run_id": run_id, "chunk": index, "rows": count}));
                Ok(())
            }
            ChunkWrite::AlreadyDone => {
                ctx.set_result(json!({"run_id": run_id, "chunk": index, "already_done": true}));
                Ok(())
            }
            ChunkWrite::Fenced => Err(JobError::retry(format!(
                "{what}: the attempt lost its job (timed out or reaped); its rows were not kept"
            ))),
        }
    }
}
