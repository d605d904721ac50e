//! `litejobs metrics`: Prometheus text exposition (or the snapshot as JSON).

use std::io::Write;

use super::{CliError, Ctx, Exit};
use crate::output::write_json;

/// Prints the metrics.
pub fn run(ctx: &Ctx, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_read_only()?;
    let snapshot = queue.metrics_snapshot()?;
    if ctx.json {
        write_json(out, &snapshot)?;
    } else {
        out.write_all(litejobs::metrics::render(&snapshot).as_bytes())?;
    }
    Ok(Exit::Ok)
}
