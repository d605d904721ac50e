//! `litejobs dead list | requeue | discard`: the dead letter.

use std::collections::BTreeSet;
use std::io::Write;

use litejobs::human::error_headline;
use litejobs::{Discarded, JobFilter, JobRecord, JobStatus};
use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::args::{DeadCommand, DeadListArgs, IdArgs, RequeueArgs};
use crate::duration::ago;
use crate::output::{clip, or_dash, write_json, Table};

/// Runs a `dead` subcommand.
pub fn run(ctx: &Ctx, cmd: &DeadCommand, out: &mut dyn Write) -> Result<Exit, CliError> {
    match cmd {
        DeadCommand::List(args) => list(ctx, args, out),
        DeadCommand::Requeue(args) => requeue(ctx, args, out),
        DeadCommand::Discard(args) => discard(ctx, args, out),
    }
}

fn list(ctx: &Ctx, args: &DeadListArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_read_only()?;
    let filter = args.filter.to_filter();
    let jobs = if args.all {
        queue.list(&filter.status(JobStatus::Dead))?
    } else {
        queue.dead_jobs(&filter)?
    };
    let jobs: Vec<JobRecord> = jobs.iter().map(|j| ctx.masked(j)).collect();
    if ctx.json {
        write_json(out, &super::list::JobsJson { jobs })?;
        return Ok(Exit::Ok);
    }
    if jobs.is_empty() && args.filter.group.is_some() {
        writeln!(
            out,
            "no dead jobs match{}",
            super::list::group_hint(args.filter.group.as_deref())
        )?;
        return Ok(Exit::Ok);
    }
    write_dead_table(out, &jobs, queue.now_ms(), args.all)?;
    if jobs.is_empty() {
        return Ok(Exit::Ok);
    }
    if jobs.len() == args.filter.limit {
        writeln!(out, "(first {} shown; raise --limit for more)", jobs.len())?;
    }
    if !args.all {
        writeln!(out, "(requeued dead jobs are hidden; --all shows them)")?;
    }
    Ok(Exit::Ok)
}

fn write_dead_table(
    out: &mut dyn Write,
    jobs: &[JobRecord],
    now: i64,
    requeued_column: bool,
) -> std::io::Result<()> {
    if jobs.is_empty() {
        return writeln!(out, "no dead jobs match");
    }
    let mut header = vec!["ID>", "TYPE", "QUEUE", "TRIES", "DIED", "CODE>"];
    if requeued_column {
        header.push("REQUEUED AS");
    }
    header.extend(["ERROR", "PAYLOAD"]);
    let mut table = Table::new(&header);
    for job in jobs {
        let mut row = vec![
            job.id.to_string(),
            job.job_type.clone(),
            job.queue.clone(),
            format!("{}/{}", job.attempts, job.max_attempts),
            ago(job.finished_at.unwrap_or(job.updated_at), now),
            or_dash(job.last_status_code),
        ];
        if requeued_column {
            row.push(or_dash(job.requeued_as));
        }
        let error = job.last_error.as_deref().map(error_headline);
        row.push(clip(&or_dash(error.as_deref()), 50));
        row.push(clip(&job.payload.to_string(), 70));
        table.row(row);
    }
    table.write(out)
}

#[derive(Serialize)]
struct RequeuedJson {
    dead_id: i64,
    new_id: i64,
}

#[derive(Serialize)]
struct RequeueJson {
    requeued: Vec<RequeuedJson>,
}

#[derive(Serialize)]
struct DryRunJson {
    dry_run: bool,
    jobs: Vec<JobRecord>,
}

fn requeue(ctx: &Ctx, args: &RequeueArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    if args.dry_run {
        return dry_run(ctx, &queue, args, out);
    }
    let by = args.by.as_deref().unwrap_or_default();
    let reason = args.reason.as_deref().unwrap_or_default();
    let pairs = match (args.id, &args.job_type) {
        (Some(id), _) => vec![(id, queue.requeue_dead(id, by, reason)?)],
        (None, Some(job_type)) => {
            let mut bar = crate::progress_bar::Bar::new(ctx.json, "requeueing", "dead jobs");
            let pairs = queue.requeue_dead_where_with_progress(
                &bulk_filter(job_type, args),
                by,
                reason,
                &mut |p| bar.update(p),
            );
            bar.finish();
            pairs?
        }
        (None, None) => return Err(CliError::new("give a job id or --type")),
    };
    if ctx.json {
        let requeued = pairs
            .iter()
            .map(|&(dead_id, new_id)| RequeuedJson { dead_id, new_id })
            .collect();
        write_json(out, &RequeueJson { requeued })?;
        return Ok(Exit::Ok);
    }
    if pairs.is_empty() {
        writeln!(
            out,
            "no dead jobs match{}; nothing was requeued",
            super::list::group_hint(args.group.as_deref())
        )?;
        return Ok(Exit::Ok);
    }
    // A bulk requeue of thousands says its first few; `--json` lists every pair.
    for (dead_id, new_id) in pairs.iter().take(REQUEUED_SHOWN) {
        writeln!(out, "dead job {dead_id} requeued as job {new_id}")?;
    }
    if pairs.len() > REQUEUED_SHOWN {
        writeln!(
            out,
            "... and {} more (--json lists every one)",
            pairs.len() - REQUEUED_SHOWN
        )?;
    }
    writeln!(out, "requeued {} job(s) by {by}: {reason}", pairs.len())?;
    Ok(Exit::Ok)
}

/// Requeued pairs a bulk requeue lists, one line each.
const REQUEUED_SHOWN: usize = 20;

/// The dead jobs `requeue --type` takes: of that type, narrowed by `--search` and `--group`.
fn bulk_filter(job_type: &str, args: &RequeueArgs) -> JobFilter {
    let mut filter = JobFilter::new().job_type(job_type);
    if let Some(text) = &args.search {
        filter = filter.search(text);
    }
    if let Some(key) = &args.group {
        filter = filter.error_group(key);
    }
    filter
}

/// `requeue --dry-run`: the requeue's own transaction with every check it makes, rolled
/// back. What it would refuse is refused the same way (exit 2, the same message after
/// "dry run: "); otherwise the jobs it would requeue are listed.
fn dry_run(
    ctx: &Ctx,
    queue: &litejobs::Queue,
    args: &RequeueArgs,
    out: &mut dyn Write,
) -> Result<Exit, CliError> {
    let refused = |e: litejobs::Error| {
        CliError::from(e).map_message(|m| format!("dry run: the requeue would be refused: {m}"))
    };
    let jobs = match (args.id, &args.job_type) {
        (Some(id), _) => {
            queue.requeue_dead_dry_run(id).map_err(refused)?;
            queue.job(id)?.into_iter().collect()
        }
        (None, Some(job_type)) => {
            let filter = bulk_filter(job_type, args);
            let ids: BTreeSet<i64> = queue
                .requeue_dead_where_dry_run(&filter)
                .map_err(refused)?
                .into_iter()
                .collect();
            let mut jobs = queue.dead_jobs(&filter.limit(usize::MAX))?;
            jobs.retain(|job| ids.contains(&job.id));
            jobs
        }
        (None, None) => return Err(CliError::new("give a job id or --type")),
    };
    let jobs: Vec<JobRecord> = jobs.iter().map(|j| ctx.masked(j)).collect();
    if ctx.json {
        write_json(
            out,
            &DryRunJson {
                dry_run: true,
                jobs,
            },
        )?;
    } else {
        writeln!(out, "dry run: {} dead job(s) would be requeued", jobs.len())?;
        if !jobs.is_empty() {
            write_dead_table(out, &jobs, queue.now_ms(), false)?;
        }
    }
    Ok(Exit::Ok)
}

#[derive(Serialize)]
struct DiscardJson {
    discarded: i64,
    /// True when the job was the newest and was cancelled instead of deleted.
    kept_cancelled: bool,
}

fn discard(ctx: &Ctx, args: &IdArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    let discarded = queue.discard_dead(args.id)?;
    let kept = discarded == Discarded::KeptCancelled;
    if ctx.json {
        write_json(
            out,
            &DiscardJson {
                discarded: args.id,
                kept_cancelled: kept,
            },
        )?;
    } else if kept {
        writeln!(
            out,
            "dead job {} discarded: it is the newest job, which keeps ids from being reused, \
             so it is now cancelled instead of deleted (retention removes it once newer jobs exist)",
            args.id
        )?;
    } else {
        writeln!(
            out,
            "dead job {} discarded (deleted with its attempt history)",
            args.id
        )?;
    }
    Ok(Exit::Ok)
}
