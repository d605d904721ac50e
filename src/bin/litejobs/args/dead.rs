//! `dead list | requeue | discard`.

use clap::{ArgGroup, Args, Subcommand};

use super::{FilterArgs, IdArgs};

/// `dead ...`.
#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// Dead jobs waiting for a person, newest first.
    List(DeadListArgs),
    /// Requeue one dead job, or all dead jobs of a type (and error text), as new jobs.
    Requeue(RequeueArgs),
    /// Delete a dead job and its attempt history.
    Discard(IdArgs),
}

/// `dead list`.
#[derive(Debug, Args)]
pub struct DeadListArgs {
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Also dead jobs already requeued.
    #[arg(long)]
    pub all: bool,
}

/// `dead requeue`. clap leaves arguments that are required only without another out of the
/// usage line, so the usage is written out: `--by` and `--reason` are required.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["id", "job_type"])))]
#[command(
    override_usage = "litejobs dead requeue [OPTIONS] <ID|--type <TYPE>> --by <WHO> --reason <WHY>\n       \
                  litejobs dead requeue [OPTIONS] <ID|--type <TYPE>> --dry-run"
)]
pub struct RequeueArgs {
    /// One dead job.
    pub id: Option<i64>,
    /// Every dead job of this type (not yet requeued), in one transaction: all or nothing.
    #[arg(long = "type", value_name = "TYPE")]
    pub job_type: Option<String>,
    /// With --type: only those whose last error contains this text.
    // `requires` alone lets `ID --search` through (clap takes any member of the group
    // for the required one), so it also conflicts with the id.
    #[arg(
        long,
        requires = "job_type",
        conflicts_with = "id",
        value_name = "TEXT"
    )]
    pub search: Option<String>,
    /// With --type: only those in this error group (the `group` of an error in
    /// `stats --json`): one failure, however each job's text differs.
    #[arg(long, requires = "job_type", conflicts_with = "id", value_name = "KEY")]
    pub group: Option<String>,
    /// Required: who requeues (kept on the dead job). Not needed with --dry-run.
    #[arg(long, required_unless_present = "dry_run", value_name = "WHO")]
    pub by: Option<String>,
    /// Required: why (kept on the dead job). Not needed with --dry-run.
    #[arg(long, required_unless_present = "dry_run", value_name = "WHY")]
    pub reason: Option<String>,
    /// Run the requeue's checks and show what it would requeue, changing nothing: what it
    /// would refuse is refused the same way (exit 2).
    #[arg(long)]
    pub dry_run: bool,
}
