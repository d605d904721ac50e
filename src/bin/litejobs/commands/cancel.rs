//! `litejobs cancel ID` and `litejobs cancel --type TYPE [--search TEXT] [--dry-run]`:
//! cancel a waiting or running job, or all of a type (and text) in one transaction.

use std::io::Write;

use litejobs::{JobRecord, JobStatus, Queue};
use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::args::CancelArgs;
use crate::duration::ago;
use crate::output::{clip, write_json, Table};

#[derive(Serialize)]
struct CancelJson {
    cancelled: i64,
}

#[derive(Serialize)]
struct CancelManyJson {
    cancelled: Vec<i64>,
}

#[derive(Serialize)]
struct DryRunJson {
    dry_run: bool,
    jobs: Vec<JobRecord>,
}

/// Cancels one job, or every matching job of a type; a finished job is refused (exit 2),
/// and a bulk cancel that would refuse one cancels none.
pub fn run(ctx: &Ctx, args: &CancelArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    let by = args.who();
    let reason = args.reason.as_deref().unwrap_or_default();
    let why = if reason.trim().is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    let job_type = match (args.id, &args.job_type) {
        (Some(id), _) => return one(ctx, &queue, id, &by, reason, out),
        (None, Some(job_type)) => job_type,
        (None, None) => return Err(CliError::new("give a job id or --type")),
    };
    if args.dry_run {
        return dry_run(ctx, &queue, job_type, args.search.as_deref(), out);
    }
    let ids = queue.cancel_matching(job_type, args.search.as_deref(), &by, reason)?;
    if ctx.json {
        write_json(out, &CancelManyJson { cancelled: ids })?;
        return Ok(Exit::Ok);
    }
    if ids.is_empty() {
        writeln!(
            out,
            "no queued, failed or running {job_type} jobs match; nothing was cancelled"
        )?;
        return Ok(Exit::Ok);
    }
    for id in &ids {
        writeln!(out, "job {id} cancelled")?;
    }
    writeln!(out, "cancelled {} job(s) by {by}{why}", ids.len())?;
    Ok(Exit::Ok)
}

fn one(
    ctx: &Ctx,
    queue: &Queue,
    id: i64,
    by: &str,
    reason: &str,
    out: &mut dyn Write,
) -> Result<Exit, CliError> {
    // Read before, only to say what the cancel did to a running job.
    let was_running = queue
        .job(id)
        .ok()
        .flatten()
        .is_some_and(|job| job.status == JobStatus::Running);
    queue.cancel_as(id, by, reason)?;
    if ctx.json {
        write_json(out, &CancelJson { cancelled: id })?;
        return Ok(Exit::Ok);
    }
    let why = if reason.trim().is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    writeln!(out, "job {id} cancelled by {by}{why}")?;
    if was_running {
        writeln!(
            out,
            "it was running: its worker stops it, and what the attempt reports is discarded"
        )?;
    }
    Ok(Exit::Ok)
}

/// `--dry-run`: the cancel's own transaction with every check it makes, rolled back. What
/// it would refuse is refused the same way (exit 2); otherwise the jobs it would cancel are
/// listed.
fn dry_run(
    ctx: &Ctx,
    queue: &Queue,
    job_type: &str,
    search: Option<&str>,
    out: &mut dyn Write,
) -> Result<Exit, CliError> {
    let ids = queue
        .cancel_matching_dry_run(job_type, search)
        .map_err(|e| {
            CliError::from(e).map_message(|m| format!("dry run: the cancel would be refused: {m}"))
        })?;
    let mut jobs = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(job) = queue.job(id)? {
            jobs.push(ctx.masked(&job));
        }
    }
    if ctx.json {
        write_json(
            out,
            &DryRunJson {
                dry_run: true,
                jobs,
            },
        )?;
        return Ok(Exit::Ok);
    }
    writeln!(out, "dry run: {} job(s) would be cancelled", jobs.len())?;
    if jobs.is_empty() {
        return Ok(Exit::Ok);
    }
    let now = queue.now_ms();
    let mut table = Table::new(&[
        "ID>", "TYPE", "QUEUE", "STATUS", "TRIES", "CREATED", "PAYLOAD",
    ]);
    for job in &jobs {
        table.row(vec![
            job.id.to_string(),
            job.job_type.clone(),
            job.queue.clone(),
            job.status.to_string(),
            format!("{}/{}", job.attempts, job.max_attempts),
            ago(job.created_at, now),
            clip(&job.payload.to_string(), 70),
        ]);
    }
    table.write(out)?;
    Ok(Exit::Ok)
}
