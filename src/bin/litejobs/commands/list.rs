//! `litejobs list`: jobs by status, type, queue and error text, newest first.

use std::io::Write;

use litejobs::{JobRecord, JobStatus};
use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::args::ListArgs;
use crate::duration::ago;
use crate::output::{clip, or_dash, write_json, Table};

/// `{"jobs": [...]}`, secrets masked.
#[derive(Serialize)]
pub struct JobsJson {
    /// The jobs.
    pub jobs: Vec<JobRecord>,
}

/// Prints the matching jobs.
pub fn run(ctx: &Ctx, args: &ListArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_read_only()?;
    let mut filter = args.filter.to_filter();
    if let Some(status) = args.status {
        filter = filter.status(status);
    }
    if let Some(id) = args.before {
        filter = filter.before_id(id);
    }
    let jobs: Vec<JobRecord> = queue.list(&filter)?.iter().map(|j| ctx.masked(j)).collect();
    if ctx.json {
        write_json(out, &JobsJson { jobs })?;
        return Ok(Exit::Ok);
    }
    if jobs.is_empty() {
        writeln!(out, "no jobs match")?;
        return Ok(Exit::Ok);
    }
    let now = queue.now_ms();
    let mut table = Table::new(&[
        "ID>",
        "QUEUE",
        "TYPE",
        "STATUS",
        "TRIES",
        "WHEN",
        "LAST ERROR",
    ]);
    for job in &jobs {
        table.row(vec![
            job.id.to_string(),
            job.queue.clone(),
            job.job_type.clone(),
            job.status.to_string(),
            format!("{}/{}", job.attempts, job.max_attempts),
            when(job, now),
            clip(&or_dash(current_error(job)), 70),
        ]);
    }
    table.write(out)?;
    if jobs.len() == args.filter.limit {
        if let Some(last) = jobs.last() {
            writeln!(
                out,
                "(first {} shown; next page: --before {})",
                jobs.len(),
                last.id
            )?;
        }
    }
    Ok(Exit::Ok)
}

/// The error the LAST ERROR column shows: none for a succeeded job, whose `last_error` is
/// an earlier attempt's failure (kept for `show` and the JSON) and would read as if the
/// job had failed; why a cancelled job was cancelled, when that is kept (an expired job's
/// reason names its deadline).
fn current_error(job: &JobRecord) -> Option<&str> {
    match job.status {
        JobStatus::Succeeded => None,
        JobStatus::Cancelled => job.cancel_reason.as_deref().or(job.last_error.as_deref()),
        _ => job.last_error.as_deref(),
    }
}

/// The time that matters for a job in its status, relative to now; for a waiting job with
/// a deadline, the deadline too.
pub fn when(job: &JobRecord, now: i64) -> String {
    let (word, at) = job.status_time();
    match job.expires_at {
        Some(deadline) if matches!(job.status, JobStatus::Queued | JobStatus::Failed) => {
            format!("{word} {}, expires {}", ago(at, now), ago(deadline, now))
        }
        _ => format!("{word} {}", ago(at, now)),
    }
}
