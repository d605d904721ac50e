//! `workflow list | show | cancel`.

use clap::{Args, Subcommand};

/// `workflow ...`.
#[derive(Debug, Subcommand)]
pub enum WorkflowCommand {
    /// Workflows and batches, newest first: kind, name, state, how many of their jobs have
    /// ended, counts by status.
    List(WorkflowListArgs),
    /// One workflow or batch: each job after the jobs it waits for, with its status, what
    /// it waits for (✓ done, ✗ failed, … pending), its last error (secrets masked) and why
    /// it was cancelled. --json prints the whole workflow.
    Show(WorkflowIdArgs),
    /// Cancel every job of a workflow or batch that has not ended (waiting, held or
    /// running), in one transaction, and close a batch that is open.
    Cancel(WorkflowCancelArgs),
}

/// `workflow list`.
#[derive(Debug, Args)]
pub struct WorkflowListArgs {
    /// At most this many.
    #[arg(long, default_value_t = litejobs::defaults::DEFAULT_LIST_LIMIT, value_name = "N")]
    pub limit: usize,
    /// Only workflows with a smaller id (the next page after the last id shown).
    #[arg(long, value_name = "ID")]
    pub before: Option<i64>,
}

/// A workflow or batch id.
#[derive(Debug, Args)]
pub struct WorkflowIdArgs {
    /// The workflow or batch id (`litejobs workflow list` shows them).
    pub id: i64,
}

/// `workflow cancel`.
#[derive(Debug, Args)]
pub struct WorkflowCancelArgs {
    #[command(flatten)]
    pub workflow: WorkflowIdArgs,
    /// Why (kept on each job cancelled; shown by `show` and the dashboard).
    #[arg(long, value_name = "WHY")]
    pub reason: Option<String>,
    /// Who cancels (kept on each job). Defaults to $USER, or "cli" without one.
    #[arg(long, value_name = "WHO")]
    pub by: Option<String>,
}

impl WorkflowCancelArgs {
    /// Who cancels: `--by`, else $USER, else "cli" (as `cancel`).
    pub fn who(&self) -> String {
        super::cancel::who(self.by.as_deref())
    }
}
