//! Jobs that wait for other jobs: workflows (named steps that wait for each other) and
//! batches (jobs with callbacks that run once all of them have ended).
//!
//! A waiting job is an ordinary `queued` row that no claim takes until the jobs it waits for
//! have succeeded: the transaction that ends the last of them makes it due, so a waiting job
//! costs nothing while it waits and is released once. One that ends dead or cancelled
//! cancels the jobs waiting for it, unless they wait for any outcome. The guide
//! [`workflows`](crate::guide::workflows) tells the whole story.

mod batch;
mod builder;
mod shown;
mod view;

pub use batch::{Batch, BatchIds, BatchSummary};
pub(crate) use builder::{check_steps, Target};
pub use builder::{Step, Workflow};
pub use shown::{WaitCounts, MEMBER_LABEL};
pub(crate) use view::{info_of, listing_of};
pub use view::{
    Dependency, WaitInfo, WaitState, WorkflowInfo, WorkflowKind, WorkflowListing, WorkflowStep,
};

/// The ids a workflow got when it was enqueued.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkflowIds {
    /// The workflow ([`Queue::workflow`](crate::Queue::workflow)).
    pub workflow_id: i64,
    /// Each step's job id, by step name.
    pub steps: std::collections::BTreeMap<String, i64>,
}

impl WorkflowIds {
    /// The job id of the step named `name`.
    pub fn step(&self, name: &str) -> Option<i64> {
        self.steps.get(name).copied()
    }
}
