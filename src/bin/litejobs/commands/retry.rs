//! `litejobs retry ID`: make a waiting job due now; a dead job gets one more attempt.

use std::io::Write;

use litejobs::JobStatus;
use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::args::IdArgs;
use crate::output::write_json;

#[derive(Serialize)]
struct RetryJson {
    id: i64,
    status: JobStatus,
    run_at: i64,
    attempts: i64,
    max_attempts: i64,
}

/// Makes the job due now and shows where it stands.
pub fn run(ctx: &Ctx, args: &IdArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    queue.retry_now(args.id)?;
    let job = queue
        .job(args.id)?
        .ok_or_else(|| CliError::new(format!("no job with id {}", args.id)))?;
    if ctx.json {
        write_json(
            out,
            &RetryJson {
                id: job.id,
                status: job.status,
                run_at: job.run_at,
                attempts: job.attempts,
                max_attempts: job.max_attempts,
            },
        )?;
    } else {
        writeln!(
            out,
            "job {} is due now ({}, {} of {} attempts spent)",
            job.id, job.status, job.attempts, job.max_attempts
        )?;
    }
    Ok(Exit::Ok)
}
