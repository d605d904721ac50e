//! `impl JobContext` for jobs in workflows and batches: what the jobs it waited for
//! returned, its batch's counts, and steps added while it runs.

use std::collections::BTreeMap;

use crate::error::{Error, ErrorKind, Result};
use crate::job::JobStatus;
use crate::storage::jobs::Edge;
use crate::storage::workflows::{ON_COMPLETE, ON_SUCCESS};
use crate::storage::Tx;
use crate::workflow::{BatchSummary, Dependency, Step};
use crate::JobContext;

impl JobContext {
    /// The workflow or batch this job belongs to, if any.
    ///
    /// # Errors
    /// A database error.
    pub fn workflow_id(&self) -> Result<Option<i64>> {
        Ok(self.placement()?.0)
    }

    /// This job's step name in its workflow (`on_success`/`on_complete` for a batch's
    /// callbacks), if any.
    ///
    /// # Errors
    /// A database error.
    pub fn step(&self) -> Result<Option<String>> {
        Ok(self.placement()?.1)
    }

    fn placement(&self) -> Result<(Option<i64>, Option<String>)> {
        if let Some(known) = self.placement.get() {
            return Ok(known.clone());
        }
        let id = self.row.id;
        let job = self.queue.db().read(|tx| tx.job(id))?;
        let placement = job.map_or((None, None), |j| (j.workflow_id, j.step));
        Ok(self.placement.get_or_init(|| placement).clone())
    }

    /// The jobs this one waited for, in id order, each with the result its handler stored
    /// (decrypted with the queue's keys). All have succeeded, except those waited for with
    /// [`Step::after_any_outcome`], which may have ended dead or cancelled.
    ///
    /// # Errors
    /// A database error; a result encrypted with a key this queue does not hold.
    pub fn dependencies(&self) -> Result<Vec<Dependency>> {
        let id = self.row.id;
        let rows = self.queue.db().read(|tx| tx.dependencies_of(id))?;
        rows.into_iter()
            .map(|row| {
                let result = match &row.result {
                    Some(text) => Some(
                        self.queue
                            .open_result(text, &row.job_type, &row.queue)
                            .map_err(|e| e.prefixed(&format!("job {}", row.id)))?,
                    ),
                    None => None,
                };
                Ok(Dependency {
                    id: row.id,
                    step: row.step,
                    job_type: row.job_type,
                    status: row.status.parse().unwrap_or(JobStatus::Dead),
                    result,
                    any_outcome: row.any_outcome,
                })
            })
            .collect()
    }

    /// The result stored by the step named `step` that this job waited for; `None` when it
    /// stored none.
    ///
    /// # Errors
    /// [`NotFound`](crate::ErrorKind::NotFound) when this job did not wait for a step of
    /// that name; as [`JobContext::dependencies`].
    pub fn dependency_result(&self, step: &str) -> Result<Option<serde_json::Value>> {
        self.dependencies()?
            .into_iter()
            .find(|d| d.step.as_deref() == Some(step))
            .map(|d| d.result)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("job {} did not wait for a step named {step:?}", self.row.id),
                )
            })
    }

    /// For a batch's callback: how the batch's jobs ended, and their ids. `None` for a job
    /// that is not a batch callback.
    ///
    /// # Errors
    /// A database error.
    pub fn batch(&self) -> Result<Option<BatchSummary>> {
        let (Some(batch_id), Some(step)) = self.placement()? else {
            return Ok(None);
        };
        if step != ON_SUCCESS && step != ON_COMPLETE {
            return Ok(None);
        }
        let Some(info) = self.queue.workflow(batch_id)? else {
            return Ok(None);
        };
        if info.kind != crate::workflow::WorkflowKind::Batch {
            return Ok(None);
        }
        // A dead member that was requeued is replaced by its new job (a member too): only
        // that one counts, so an on_success brought back by the requeue reads no dead job.
        let mut members = Vec::new();
        for s in info.steps.iter().filter(|s| s.step.is_none()) {
            if s.status == JobStatus::Dead {
                let job = self.queue.db().read(|tx| tx.job(s.id))?;
                if job.is_some_and(|j| j.requeued_as.is_some()) {
                    continue;
                }
            }
            members.push(s);
        }
        let count = |status: JobStatus| members.iter().filter(|s| s.status == status).count();
        Ok(Some(BatchSummary {
            batch_id,
            name: info.name.clone(),
            succeeded: count(JobStatus::Succeeded),
            dead: count(JobStatus::Dead),
            cancelled: count(JobStatus::Cancelled),
            members: members.iter().map(|s| s.id).collect(),
        }))
    }

    /// Adds steps to this job's workflow while it runs (a fan-out decided at run time: a
    /// report plans its chunks, then a finishing step waits for them all). The new steps
    /// may wait for each other, for steps the workflow already has (by name, this one's
    /// included) and for jobs by id. Committed at once, in one transaction; returns their
    /// ids by name.
    ///
    /// Steps that already waited for this one still wait only for this one: to make them
    /// wait for the new steps too, use [`JobContext::add_steps_before_dependants`].
    ///
    /// # Errors
    /// [`InvalidState`](crate::ErrorKind::InvalidState) when this job is in no workflow;
    /// [`InvalidJob`](crate::ErrorKind::InvalidJob) for a name the workflow already has, a
    /// wait for a step it does not have, or a cycle. Nothing is added then.
    pub fn add_steps(&self, steps: Vec<Step>) -> Result<BTreeMap<String, i64>> {
        self.add_steps_holding(steps, false)
    }

    /// [`JobContext::add_steps`], and every step that waits for this job (and has not
    /// started) also waits for each new step: "email the link" declared after "report"
    /// runs once the chunks "report" planned are done, not when "report" returns.
    ///
    /// # Errors
    /// As [`JobContext::add_steps`]; also when a new step waits for one of those steps
    /// (a cycle).
    pub fn add_steps_before_dependants(&self, steps: Vec<Step>) -> Result<BTreeMap<String, i64>> {
        self.add_steps_holding(steps, true)
    }

    fn add_steps_holding(&self, steps: Vec<Step>, hold: bool) -> Result<BTreeMap<String, i64>> {
        let Some(workflow_id) = self.workflow_id()? else {
            return Err(Error::new(
                ErrorKind::InvalidState,
                format!(
                    "job {} is not in a workflow: it cannot add steps",
                    self.row.id
                ),
            ));
        };
        let dependants = if hold {
            Dependants::WaitForAll
        } else {
            Dependants::Unchanged
        };
        let queue = &self.queue;
        let now = queue.now_ms();
        let ids = queue
            .db()
            .write(|tx| self.add_steps_on(tx, workflow_id, &steps, dependants, now))?;
        queue.notify();
        Ok(ids)
    }

    /// Adds `steps` to workflow `workflow_id` in the caller's transaction, on behalf of this
    /// job: the new steps may wait for steps the workflow has (this one's included), and
    /// this job's dependants that have not started wait for the new steps `dependants` names
    /// too. Returns the new steps' ids by name.
    pub(crate) fn add_steps_on(
        &self,
        tx: &dyn Tx,
        workflow_id: i64,
        steps: &[Step],
        dependants: Dependants<'_>,
        now: i64,
    ) -> Result<BTreeMap<String, i64>> {
        let me = self.row.id;
        let queue = &self.queue;
        let existing = queue.existing_steps(tx, workflow_id, steps)?;
        let waiting = match dependants {
            Dependants::Unchanged => Vec::new(),
            // One that was cancelled (by a person, or with its workflow) waits for nothing.
            Dependants::WaitForAll | Dependants::WaitFor(_) => {
                let mut queued = Vec::new();
                for id in tx.pending_dependants_of(me)? {
                    if tx.job(id)?.is_some_and(|j| j.status == JobStatus::Queued) {
                        queued.push(id);
                    }
                }
                queued
            }
        };
        for step in steps {
            for wait in &step.waits {
                if let crate::workflow::Target::Step(name) = &wait.target {
                    if existing.get(name).is_some_and(|id| waiting.contains(id)) {
                        return Err(Error::new(
                            ErrorKind::InvalidJob,
                            format!(
                                "step {:?} waits for step {name:?}, which will wait for it: \
                                 a cycle",
                                step.name
                            ),
                        ));
                    }
                }
            }
        }
        let ids = queue.insert_steps(tx, workflow_id, steps, &existing, now)?;
        let waited_for: Vec<i64> = match dependants {
            Dependants::Unchanged => Vec::new(),
            Dependants::WaitForAll => ids.values().copied().collect(),
            Dependants::WaitFor(name) => ids.get(name).copied().into_iter().collect(),
        };
        let edges: Vec<Edge> = waiting
            .iter()
            .flat_map(|&dependant| {
                waited_for.iter().map(move |&new| Edge {
                    job_id: dependant,
                    depends_on: new,
                    any_outcome: false,
                    counted: false,
                })
            })
            .collect();
        tx.add_dependencies(&edges, now)?;
        Ok(ids)
    }
}

/// Which of the steps a job adds its own dependants (steps waiting for it that have not
/// started) wait for too.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dependants<'a> {
    /// None: they still wait only for the job ([`JobContext::add_steps`]).
    Unchanged,
    /// Every new step ([`JobContext::add_steps_before_dependants`]).
    WaitForAll,
    /// The new step of this name, which itself waits for the others (a report's finishing
    /// step: one wait instead of one per chunk).
    WaitFor(&'a str),
}
