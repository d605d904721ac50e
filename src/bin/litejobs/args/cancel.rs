//! `cancel`.

use clap::{ArgGroup, Args};

/// `cancel ID` or `cancel --type TYPE`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["id", "job_type"])))]
#[command(
    override_usage = "litejobs cancel [OPTIONS] <ID> [--reason <WHY>] [--by <WHO>]\n       \
                  litejobs cancel [OPTIONS] --type <TYPE> [--search <TEXT>] [--dry-run] [--reason <WHY>] [--by <WHO>]"
)]
pub struct CancelArgs {
    /// One job: queued, failed (waiting for a retry) or running.
    pub id: Option<i64>,
    /// Every queued, failed or running job of this type, in one transaction: all or
    /// nothing.
    #[arg(long = "type", value_name = "TYPE")]
    pub job_type: Option<String>,
    /// With --type: only those whose last error or payload (its JSON text) contains this
    /// text (ASCII case-insensitive; an encrypted payload is not searched).
    // `requires` alone lets `ID --search` through (clap takes any member of the group
    // for the required one), so it also conflicts with the id.
    #[arg(
        long,
        requires = "job_type",
        conflicts_with = "id",
        value_name = "TEXT"
    )]
    pub search: Option<String>,
    /// Why (kept on the job; shown by `show` and the dashboard).
    #[arg(long, value_name = "WHY")]
    pub reason: Option<String>,
    /// Who cancels (kept on the job). Defaults to $USER, or "cli" without one.
    #[arg(long, value_name = "WHO")]
    pub by: Option<String>,
    /// With --type: show what would be cancelled, changing nothing.
    #[arg(long, requires = "job_type", conflicts_with = "id")]
    pub dry_run: bool,
}

impl CancelArgs {
    /// Who cancels: `--by`, else $USER, else "cli".
    pub fn who(&self) -> String {
        who(self.by.as_deref())
    }
}

/// Who cancels: `by` when given, else $USER, else "cli".
pub fn who(by: Option<&str>) -> String {
    by.map(str::to_string)
        .filter(|by| !by.trim().is_empty())
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.trim().is_empty()))
        .unwrap_or_else(|| "cli".to_string())
}
