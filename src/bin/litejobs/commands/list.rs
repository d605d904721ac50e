//! `litejobs list`: jobs by status, type, queue and error text, newest first.

use std::io::Write;

use litejobs::human::error_headline;
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
        writeln!(
            out,
            "no jobs match{}",
            group_hint(args.filter.group.as_deref())
        )?;
        return Ok(Exit::Ok);
    }
    let now = queue.now_ms();
    // The WORKFLOW column only when a job listed belongs to one.
    let workflows = jobs.iter().any(|j| j.workflow_id.is_some());
    let mut header = vec!["ID>", "QUEUE", "TYPE", "STATUS", "TRIES", "WHEN"];
    if workflows {
        header.push("WORKFLOW");
    }
    header.push("LAST ERROR");
    let mut table = Table::new(&header);
    for job in &jobs {
        let mut row = vec![
            job.id.to_string(),
            job.queue.clone(),
            job.job_type.clone(),
            job.status.to_string(),
            format!("{}/{}", job.attempts, job.max_attempts),
            when(job, now),
        ];
        if workflows {
            row.push(workflow_cell(job));
        }
        // The line that matters: a traceback's last line, not the log lines before it.
        let error = current_error(job).map(error_headline);
        row.push(clip(&or_dash(error.as_deref()), 70));
        table.row(row);
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
    if job.status == JobStatus::Queued && job.waiting_for > 0 {
        let waiting = format!("waiting for {} job(s)", job.waiting_for);
        return match job.expires_at {
            Some(deadline) => format!("{waiting}, expires {}", ago(deadline, now)),
            None => waiting,
        };
    }
    let (word, at) = job.status_time();
    match job.expires_at {
        Some(deadline) if matches!(job.status, JobStatus::Queued | JobStatus::Failed) => {
            format!("{word} {}, expires {}", ago(at, now), ago(deadline, now))
        }
        _ => format!("{word} {}", ago(at, now)),
    }
}

/// `3 ship` (workflow 3, step ship), `4 member` for a batch member, `-` for neither.
fn workflow_cell(job: &JobRecord) -> String {
    match job.workflow_id {
        Some(id) => format!(
            "{id} {}",
            clip(
                job.step
                    .as_deref()
                    .unwrap_or(litejobs::workflow::MEMBER_LABEL),
                30
            )
        ),
        None => "-".to_string(),
    }
}

/// What to say after "no … match" when `--group` was given: its key is the `group` of an
/// error in `stats --json`, not the text `stats` shows (numbers and ids in it are `#` and
/// `<id>` there).
pub fn group_hint(group: Option<&str>) -> &'static str {
    match group {
        Some(_) => {
            " (--group takes an error group's key, the `group` of an error in `stats --json`, \
             where numbers read # and ids <id>)"
        }
        None => "",
    }
}
