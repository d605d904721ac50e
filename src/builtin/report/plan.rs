//! The request job: plans a run's chunks and adds them to the run's workflow as steps, with
//! the finishing step that waits for all of them, in one transaction.

use std::sync::Arc;

use serde_json::{json, Value};

use super::{chunk_job_type, run_id_of, storage_error, Kind, REPORT_QUEUE};
use crate::error::Result;
use crate::handler::{Dependants, Handler, JobContext, JobError};
use crate::job::NewJob;
use crate::storage::reports::ReportState;
use crate::storage::Tx;
use crate::workflow::Step;

/// The request's step name in the workflow [`Queue::request_report`](crate::Queue::request_report)
/// makes (and in the one a request job without a workflow joins).
pub(crate) const REQUEST_STEP: &str = "request";

/// Runs `report.<kind>.request`.
pub(crate) struct RequestHandler(pub(crate) Arc<Kind>);

/// What the planning transaction did.
enum Planned {
    Now { run_id: i64, chunks: usize },
    Already { run_id: i64 },
    Fenced,
}

/// Where a run's chunks go: the workflow, the prefix of their step names, and whether the
/// request's own dependants (steps of the caller's workflow) wait for the finishing step.
struct Placement {
    workflow_id: i64,
    prefix: String,
    hold_dependants: bool,
}

impl Placement {
    fn chunk(&self, index: usize) -> String {
        format!("{}chunk {index}", self.prefix)
    }

    fn finish(&self) -> String {
        format!("{}finish", self.prefix)
    }
}

/// The workflow the run's steps join, in the planning transaction: the request's own (a
/// step of the run's workflow, or of a workflow of the caller's, whose steps waiting for the
/// request then wait for the finishing step too), or a new one: one the request job joins
/// when it is in none (a request from a schedule or another program), or one of the run's
/// own beside the batch the request job is a member of.
fn place(tx: &dyn Tx, ctx: &JobContext, kind: &str, run_id: i64, now: i64) -> Result<Placement> {
    let job = tx.job(ctx.id())?;
    let (workflow_id, step) = job.map_or((None, None), |j| (j.workflow_id, j.step));
    if let (Some(workflow_id), Some(step)) = (workflow_id, &step) {
        let is_workflow = tx
            .workflow(workflow_id)?
            .is_some_and(|row| row.kind == "workflow");
        if is_workflow {
            let own = step == REQUEST_STEP;
            return Ok(Placement {
                workflow_id,
                prefix: if own {
                    String::new()
                } else {
                    format!("{step}: ")
                },
                hold_dependants: !own,
            });
        }
    }
    let name = format!("report {kind} run {run_id}");
    let new = tx.create_workflow("workflow", &name, false, now)?;
    if workflow_id.is_none() {
        tx.place_in_workflow(ctx.id(), new, Some(REQUEST_STEP))?;
    }
    Ok(Placement {
        workflow_id: new,
        prefix: String::new(),
        hold_dependants: false,
    })
}

impl Handler for RequestHandler {
    fn run(&self, ctx: &JobContext) -> std::result::Result<(), JobError> {
        let kind = &self.0;
        let queue = &kind.queue;
        check_request_payload(ctx.payload())?;
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
                let at = place(tx, ctx, &kind.name, run_id, now)?;
                let mut steps: Vec<Step> = (0..spec_texts.len())
                    .map(|index| Step::new(at.chunk(index), kind.chunk_job(run_id, index)))
                    .collect();
                // The finishing step waits for every chunk: the transaction that ends the
                // last chunk's job releases it, once.
                let finish = (0..spec_texts.len()).fold(
                    Step::new(at.finish(), kind.finish_job(run_id)),
                    |step, index| step.after(at.chunk(index)),
                );
                steps.push(finish);
                let finish_name = at.finish();
                let dependants = if at.hold_dependants {
                    Dependants::WaitFor(&finish_name)
                } else {
                    Dependants::Unchanged
                };
                let ids = ctx.add_steps_on(tx, at.workflow_id, &steps, dependants, now)?;
                for index in 0..spec_texts.len() {
                    if let Some(&job_id) = ids.get(&at.chunk(index)) {
                        tx.set_chunk_job(run_id, index as i64, job_id)?;
                    }
                }
                if let Some(&job_id) = ids.get(&finish_name) {
                    tx.set_finish_job(run_id, job_id)?;
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

impl Kind {
    /// The job of chunk `index` of a run.
    fn chunk_job(&self, run_id: i64, index: usize) -> NewJob {
        NewJob::new(
            chunk_job_type(&self.name),
            json!({"run_id": run_id, "chunk": index}),
        )
        .queue(REPORT_QUEUE)
        .timeout(self.report.chunk_timeout())
        .max_attempts(self.report.chunk_max_attempts())
        .idempotency_key(format!("report:{run_id}:chunk:{index}"))
    }
}

/// A request's payload holds `params` (and `run_id`, from `Queue::request_report`) only: a
/// payload with other fields is a request written by hand without its `params` wrapper,
/// which would otherwise plan with no parameters and end an empty report as ready.
fn check_request_payload(payload: &Value) -> std::result::Result<(), JobError> {
    let Some(fields) = payload.as_object() else {
        return Err(JobError::permanent(format!(
            "a report request's payload is {{\"params\": {{…}}}}, got {payload}"
        )));
    };
    let unknown: Vec<&str> = fields
        .keys()
        .map(String::as_str)
        .filter(|k| !matches!(*k, "params" | "run_id"))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(JobError::permanent(format!(
        "a report request's payload is {{\"params\": {{…}}}}; this one has field(s) {} \
         (put the report's parameters inside \"params\")",
        unknown.join(", ")
    )))
}
