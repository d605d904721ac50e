//! What people and handlers read of workflows and batches.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::job::JobStatus;
use crate::storage::workflows::{StepRow, WorkflowRow, WorkflowSummary};

/// A workflow or a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WorkflowKind {
    /// Steps that wait for each other ([`Workflow`](crate::Workflow)).
    Workflow,
    /// Jobs with callbacks ([`Batch`](crate::Batch)).
    Batch,
}

impl WorkflowKind {
    fn from_stored(kind: &str) -> WorkflowKind {
        if kind == "batch" {
            WorkflowKind::Batch
        } else {
            WorkflowKind::Workflow
        }
    }

    /// `workflow` or `batch`, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowKind::Workflow => "workflow",
            WorkflowKind::Batch => "batch",
        }
    }
}

/// Where one wait stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WaitState {
    /// The job waited for has not ended.
    Pending,
    /// It succeeded (or ended at all, for a wait on any outcome).
    Done,
    /// It ended dead or cancelled, which cancelled the waiting job.
    Failed,
}

/// One wait of a step: the job it waits for and where that stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct WaitInfo {
    /// The job waited for.
    pub job_id: i64,
    /// The waiting job runs whatever that job's outcome.
    pub any_outcome: bool,
    /// Where it stands.
    pub state: WaitState,
}

/// One job of a workflow or batch, as [`Queue::workflow`](crate::Queue::workflow) shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct WorkflowStep {
    /// The job.
    pub id: i64,
    /// Its step name (`on_success`/`on_complete` for a batch's callbacks, none for its
    /// members).
    pub step: Option<String>,
    /// Its type and queue.
    pub job_type: String,
    /// Its queue.
    pub queue: String,
    /// Its status.
    pub status: JobStatus,
    /// Attempts started.
    pub attempts: i64,
    /// Waits not yet settled (held while above 0 and queued).
    pub waiting_for: i64,
    /// The latest failure's message, as stored (mask it before showing it).
    pub last_error: Option<String>,
    /// Why it was cancelled.
    pub cancel_reason: Option<String>,
    /// When it was enqueued and when it ended (ms).
    pub created_at: i64,
    /// When it ended (ms).
    pub finished_at: Option<i64>,
    /// The job a person requeued this dead one as: that job took its place, and the
    /// workflow's counts and progress count it instead of this one.
    pub requeued_as: Option<i64>,
    /// What it waits for.
    pub waits_for: Vec<WaitInfo>,
}

impl WorkflowStep {
    /// True while the job waits for others (queued and held).
    pub fn is_held(&self) -> bool {
        self.status == JobStatus::Queued && self.waiting_for > 0
    }
}

fn ended(status: JobStatus) -> bool {
    matches!(
        status,
        JobStatus::Succeeded | JobStatus::Dead | JobStatus::Cancelled
    )
}

/// A workflow or batch with every job in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct WorkflowInfo {
    /// Its id.
    pub id: i64,
    /// Workflow or batch.
    pub kind: WorkflowKind,
    /// Its name.
    pub name: String,
    /// A batch still taking jobs.
    pub open: bool,
    /// When it was created and (a batch) closed (ms).
    pub created_at: i64,
    /// When the batch was closed (ms).
    pub closed_at: Option<i64>,
    /// Its jobs, in id order.
    pub steps: Vec<WorkflowStep>,
}

impl WorkflowInfo {
    /// Its jobs but the dead ones a person requeued (their new jobs stand for them).
    pub fn current(&self) -> impl Iterator<Item = &WorkflowStep> {
        self.steps.iter().filter(|s| s.requeued_as.is_none())
    }

    /// Its jobs, counted as [`WorkflowInfo::current`].
    pub fn total(&self) -> usize {
        self.current().count()
    }

    /// Jobs that have ended (succeeded, dead or cancelled), of [`WorkflowInfo::current`].
    pub fn ended(&self) -> usize {
        self.current().filter(|s| ended(s.status)).count()
    }

    /// True when every job has ended and (a batch) it is closed.
    pub fn is_finished(&self) -> bool {
        !self.open && self.ended() == self.total()
    }

    /// Jobs by status, of [`WorkflowInfo::current`].
    pub fn counts(&self) -> BTreeMap<JobStatus, usize> {
        let mut counts = BTreeMap::new();
        for step in self.current() {
            *counts.entry(step.status).or_insert(0) += 1;
        }
        counts
    }
}

/// A workflow or batch in a listing ([`Queue::workflows`](crate::Queue::workflows)): its
/// jobs counted by status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct WorkflowListing {
    /// Its id.
    pub id: i64,
    /// Workflow or batch.
    pub kind: WorkflowKind,
    /// Its name.
    pub name: String,
    /// A batch still taking jobs.
    pub open: bool,
    /// When it was created (ms).
    pub created_at: i64,
    /// Its jobs by status (a dead job a person requeued is counted as its new job).
    pub counts: BTreeMap<JobStatus, usize>,
}

impl WorkflowListing {
    /// Its jobs.
    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }

    /// Its jobs that have ended.
    pub fn ended(&self) -> usize {
        self.counts
            .iter()
            .filter(|(s, _)| ended(**s))
            .map(|(_, n)| n)
            .sum()
    }
}

/// A job the running job waits for, as its handler reads it
/// ([`JobContext::dependencies`](crate::JobContext::dependencies)).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Dependency {
    /// The job.
    pub id: i64,
    /// Its step name, in a workflow.
    pub step: Option<String>,
    /// Its type.
    pub job_type: String,
    /// How it ended (`succeeded`, or `dead`/`cancelled` for a wait on any outcome).
    pub status: JobStatus,
    /// The result its handler stored (decrypted), if any.
    pub result: Option<serde_json::Value>,
    /// The running job waited for it whatever its outcome.
    pub any_outcome: bool,
}

fn status_of(text: &str) -> JobStatus {
    text.parse().unwrap_or(JobStatus::Dead)
}

pub(crate) fn info_of(row: WorkflowRow, steps: Vec<StepRow>) -> WorkflowInfo {
    WorkflowInfo {
        id: row.id,
        kind: WorkflowKind::from_stored(&row.kind),
        name: row.name,
        open: row.open,
        created_at: row.created_at,
        closed_at: row.closed_at,
        steps: steps
            .into_iter()
            .map(|s| WorkflowStep {
                id: s.id,
                step: s.step,
                job_type: s.job_type,
                queue: s.queue,
                status: status_of(&s.status),
                attempts: s.attempts,
                waiting_for: s.waiting_for,
                last_error: s.last_error,
                cancel_reason: s.cancel_reason,
                created_at: s.created_at,
                finished_at: s.finished_at,
                requeued_as: s.requeued_as,
                waits_for: s
                    .depends_on
                    .into_iter()
                    .map(|(job_id, any_outcome, state)| WaitInfo {
                        job_id,
                        any_outcome,
                        state: match state.as_str() {
                            "done" => WaitState::Done,
                            "failed" => WaitState::Failed,
                            _ => WaitState::Pending,
                        },
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub(crate) fn listing_of(summary: WorkflowSummary) -> WorkflowListing {
    let mut counts = BTreeMap::new();
    for (status, n) in summary.counts {
        *counts.entry(status_of(&status)).or_insert(0) += usize::try_from(n).unwrap_or(0);
    }
    WorkflowListing {
        id: summary.row.id,
        kind: WorkflowKind::from_stored(&summary.row.kind),
        name: summary.row.name,
        open: summary.row.open,
        created_at: summary.row.created_at,
        counts,
    }
}
