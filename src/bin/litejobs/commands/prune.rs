//! `litejobs prune --older-than 7d`: retention.

use std::io::Write;

use litejobs::maintenance::{CheckpointMode, PruneOptions};

use super::{CliError, Ctx, Exit};
use crate::args::{CheckpointArg, PruneArgs};
use crate::duration::utc;
use crate::output::write_json;

/// Deletes succeeded and cancelled jobs past the window, in chunks; then checkpoints.
pub fn run(ctx: &Ctx, args: &PruneArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    let mut options = PruneOptions::new(args.older_than)
        .chunk_size(args.chunk_size)
        .checkpoint(match args.checkpoint {
            CheckpointArg::None => CheckpointMode::Skip,
            CheckpointArg::Passive => CheckpointMode::Passive,
            CheckpointArg::Truncate => CheckpointMode::Truncate,
        });
    if let Some(window) = args.keys_older_than {
        options = options.keys_older_than(window);
    }
    let mut bar = crate::progress_bar::Bar::new(ctx.json, "pruning", "jobs deleted");
    let report = queue.prune_with_progress(&options, &mut |p| bar.update(p));
    bar.finish();
    let report = report?;
    if ctx.json {
        write_json(out, &report)?;
        return Ok(Exit::Ok);
    }
    writeln!(
        out,
        "deleted {} succeeded/cancelled jobs finished before {} and {} attempt rows; forgot {} \
         idempotency keys ({} transactions)",
        report.jobs_deleted,
        utc(report.cutoff_ms),
        report.attempts_deleted,
        report.keys_deleted,
        report.transactions
    )?;
    match report.checkpoint {
        Some(cp) if cp.busy => writeln!(
            out,
            "checkpoint: busy (another connection was active); {} of {} WAL frames copied",
            cp.checkpointed_frames, cp.wal_frames
        )?,
        // A server keeps its own log: nothing to checkpoint, nothing to say.
        Some(_) if ctx.is_server() => {}
        Some(cp) if cp.wal_frames < 0 => writeln!(out, "checkpoint: not in WAL mode")?,
        // SQLite reports an emptied log as 0 of 0 frames: say what happened instead.
        Some(_) if matches!(args.checkpoint, CheckpointArg::Truncate) => writeln!(
            out,
            "checkpoint: the WAL file was copied into the database and emptied"
        )?,
        Some(cp) => writeln!(
            out,
            "checkpoint: {} of {} WAL frames copied",
            cp.checkpointed_frames, cp.wal_frames
        )?,
        None => {}
    }
    Ok(Exit::Ok)
}
