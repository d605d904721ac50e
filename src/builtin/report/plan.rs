//! The request job: plans a run's chunks and enqueues their jobs, all in one transaction.

use std::sync::Arc;

use serde_json::{json, Value};

use super::{chunk_job_type, run_id_of, storage_error, Kind, REPORT_QUEUE};
use crate::error::Result;
use crate::handler::JobContext;
use crate::handler::{Handler, JobError};
use crate::job::NewJob;
use crate::storage::reports::ReportState;

/// Runs `report.<kind>.request`.
pub(crate) struct RequestHandler(pub(crate) Arc<Kind>);

/// What the planning transaction did.
enum Planned {
    Now { run_id: i64, chunks: usize },
    Already { run_id: i64 },
    Fenced,
}

impl Handler for RequestHandler {
    fn run(&self, ctx: &JobContext) -> std::result::Result<(), JobError> {
        let kind = &self.0;
        let queue = &kind.queue;
        // The run: named by the payload (Queue::request_report), or the one this job created
        // on an earlier attempt, or none yet (a request from a schedule or another program).
        let run_id = match run_id_of(ctx)? {
            Some(id) => Some(id),
            None => queue
                .db()
                .read(|conn| conn.run_of_request(ctx.id()))
                .map_err(storage_error)?,
        };
        let run = match run_id {
            Some(id) => Some(
                queue
                    .db()
                    .read(|conn| conn.report_run(id))
                    .map_err(storage_error)?
                    .ok_or_else(|| {
                        JobError::permanent(format!("report run {id} does not exist (deleted?)"))
                    })?,
            ),
            None => None,
        };
        if let Some(run) = &run {
            if run.planned_at.is_some() || run.state != ReportState::Processing {
                ctx.set_result(json!({"run_id": run.id, "already_planned": true}));
                return Ok(());
            }
        }
        let params: Value = match &run {
            Some(run) => serde_json::from_str(&run.params).unwrap_or(Value::Null),
            None => ctx
                .payload()
                .get("params")
                .cloned()
                .unwrap_or_else(|| json!({})),
        };
        let specs = match kind.report.plan(&params) {
            Ok(specs) => specs,
            Err(err) => {
                if let Some(id) = run_id {
                    kind.fail_if_final(ctx, id, &err, "planning the report");
                }
                return Err(err);
            }
        };
        if ctx.should_stop() {
            return Err(JobError::retry(
                "the request attempt was stopped (time limit or shutdown) before it planned",
            ));
        }
        let spec_texts: Vec<String> = specs.iter().map(Value::to_string).collect();
        let params_text = params.to_string();
        let now = queue.now_ms();
        let planned = queue
            .db()
            .write(|tx| -> Result<Planned> {
                if !tx.chunk_fence_holds(ctx.lease())? {
                    return Ok(Planned::Fenced);
                }
                let run_id = match run_id {
                    Some(id) => id,
                    None => match tx.run_of_request(ctx.id())? {
                        Some(id) => id,
                        None => tx.insert_run(&kind.name, &params_text, Some(ctx.id()), now)?,
                    },
                };
                if !tx.plan_run(run_id, &spec_texts, now)? {
                    return Ok(Planned::Already { run_id });
                }
                for index in 0..spec_texts.len() {
                    let job = NewJob::new(
                        chunk_job_type(&kind.name),
                        json!({"run_id": run_id, "chunk": index}),
                    )
                    .queue(REPORT_QUEUE)
                    .timeout(kind.report.chunk_timeout())
                    .max_attempts(kind.report.chunk_max_attempts())
                    .idempotency_key(format!("report:{run_id}:chunk:{index}"));
                    let job_id = queue.enqueue_on(tx, job)?;
                    tx.set_chunk_job(run_id, index as i64, job_id)?;
                }
                if spec_texts.is_empty() {
                    kind.enqueue_finish(tx, run_id)?;
                }
                Ok(Planned::Now {
                    run_id,
                    chunks: spec_texts.len(),
                })
            })
            .map_err(storage_error)?;
        match planned {
            Planned::Now { run_id, chunks } => {
                queue.notify();
                ctx.set_result(json!({"run_id": run_id, "chunks": chunks}));
                Ok(())
            }
            Planned::Already { run_id } => {
                ctx.set_result(json!({"run_id": run_id, "already_planned": true}));
                Ok(())
            }
            Planned::Fenced => Err(JobError::retry(
                "the request attempt lost its job (timed out or reaped) before it planned",
            )),
        }
    }
}
