//! `litejobs pause QUEUE` / `litejobs resume QUEUE`: a switch every worker process honours.

use std::io::Write;

use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::args::QueueArgs;
use crate::output::write_json;

#[derive(Serialize)]
struct PauseJson<'a> {
    queue: &'a str,
    paused: bool,
}

/// Pauses (`pause = true`) or resumes the queue.
pub fn run(
    ctx: &Ctx,
    args: &QueueArgs,
    pause: bool,
    out: &mut dyn Write,
) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    if pause {
        queue.pause_queue(&args.queue)?;
    } else {
        queue.resume_queue(&args.queue)?;
    }
    if ctx.json {
        write_json(
            out,
            &PauseJson {
                queue: &args.queue,
                paused: pause,
            },
        )?;
    } else if pause {
        writeln!(
            out,
            "queue {} paused: no worker claims its jobs until `litejobs resume {}`",
            args.queue, args.queue
        )?;
    } else {
        writeln!(out, "queue {} resumed", args.queue)?;
    }
    Ok(Exit::Ok)
}
