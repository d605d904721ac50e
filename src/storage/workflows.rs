//! Workflows and batches: the `workflows` rows that group jobs, and what people and handlers
//! read of them. The waits between their jobs are [`crate::storage::jobs::deps`].
//!
//! A workflow's jobs are its steps, named in `jobs.step`. A batch's members have no step
//! name; its callbacks are the jobs named [`ON_SUCCESS`] and [`ON_COMPLETE`], which wait for
//! every member (the second whatever the outcome) and, while the batch is open, for its
//! closing too.

use crate::error::Result;

/// The step name of a batch's callback that runs once every member succeeded.
pub(crate) const ON_SUCCESS: &str = "on_success";
/// The step name of a batch's callback that runs once every member ended, however.
pub(crate) const ON_COMPLETE: &str = "on_complete";

/// A `workflows` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkflowRow {
    pub(crate) id: i64,
    /// `workflow` or `batch`.
    pub(crate) kind: String,
    pub(crate) name: String,
    /// A batch still taking jobs.
    pub(crate) open: bool,
    pub(crate) created_at: i64,
    pub(crate) closed_at: Option<i64>,
}

/// One job of a workflow or batch, with the jobs it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepRow {
    pub(crate) id: i64,
    pub(crate) step: Option<String>,
    pub(crate) job_type: String,
    pub(crate) queue: String,
    pub(crate) status: String,
    pub(crate) attempts: i64,
    /// Its dependencies not yet ended (held while above 0 and queued).
    pub(crate) waiting_for: i64,
    pub(crate) last_error: Option<String>,
    pub(crate) cancel_reason: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) finished_at: Option<i64>,
    /// The job a person requeued this dead one as.
    pub(crate) requeued_as: Option<i64>,
    /// The jobs it waits for: (job id, any outcome will do, `pending`/`done`/`failed`).
    pub(crate) depends_on: Vec<(i64, bool, String)>,
}

/// A workflow or batch with its jobs counted by status, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkflowSummary {
    pub(crate) row: WorkflowRow,
    /// Jobs by status word, but dead ones a person requeued (their new jobs count instead).
    pub(crate) counts: Vec<(String, i64)>,
}

/// A job another job waits for, as the waiting job's handler reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DependencyRow {
    pub(crate) id: i64,
    pub(crate) step: Option<String>,
    pub(crate) job_type: String,
    pub(crate) queue: String,
    pub(crate) status: String,
    /// The stored result text (an envelope when the job is encrypted).
    pub(crate) result: Option<String>,
    pub(crate) any_outcome: bool,
}

/// Workflow and batch rows, each call in the caller's transaction.
pub(crate) trait WorkflowStore {
    /// Inserts a `workflows` row; returns its id.
    fn create_workflow(&self, kind: &str, name: &str, open: bool, now: i64) -> Result<i64>;

    /// Puts job `job_id` in workflow `workflow_id` under `step` (none for a batch member).
    fn place_in_workflow(&self, job_id: i64, workflow_id: i64, step: Option<&str>) -> Result<()>;

    /// Puts each of `jobs` in workflow `workflow_id` under its step name.
    fn place_many_in_workflow(
        &self,
        workflow_id: i64,
        jobs: &[(i64, Option<String>)],
    ) -> Result<()> {
        for (id, step) in jobs {
            self.place_in_workflow(*id, workflow_id, step.as_deref())?;
        }
        Ok(())
    }

    /// One workflow or batch.
    fn workflow(&self, id: i64) -> Result<Option<WorkflowRow>>;

    /// Its jobs in id order, each with the jobs it waits for.
    fn workflow_steps(&self, id: i64) -> Result<Vec<StepRow>>;

    /// Workflows and batches, newest first, up to `limit`, with ids below `before` if given.
    fn workflows(&self, limit: usize, before: Option<i64>) -> Result<Vec<WorkflowSummary>>;

    /// The ids of the named steps of a workflow (names it does not have are left out).
    fn steps_by_name(&self, workflow_id: i64, names: &[String]) -> Result<Vec<(String, i64)>>;

    /// The jobs `job_id` waits for, in id order.
    fn dependencies_of(&self, job_id: i64) -> Result<Vec<DependencyRow>>;

    /// The jobs waiting for `job_id` whose wait is still pending.
    fn pending_dependants_of(&self, job_id: i64) -> Result<Vec<i64>>;

    /// Marks a batch closed. False when it was not an open batch.
    fn close_batch(&self, id: i64, now: i64) -> Result<bool>;
}
