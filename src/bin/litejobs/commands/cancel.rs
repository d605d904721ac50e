//! `litejobs cancel ID`: cancel a waiting job.

use std::io::Write;

use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::args::IdArgs;
use crate::output::write_json;

#[derive(Serialize)]
struct CancelJson {
    cancelled: i64,
}

/// Cancels a queued or failed job; a running or finished one is refused (exit 2).
pub fn run(ctx: &Ctx, args: &IdArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    queue.cancel(args.id)?;
    if ctx.json {
        write_json(out, &CancelJson { cancelled: args.id })?;
    } else {
        writeln!(out, "job {} cancelled", args.id)?;
    }
    Ok(Exit::Ok)
}
