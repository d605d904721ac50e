//! `litejobs copy-to URL`: move a queue from its SQLite file to PostgreSQL.

use std::io::Write;

use super::{CliError, Ctx, Exit};
use crate::args::CopyToArgs;
use crate::output::write_json;

/// Copies the file's live state into the server and says what moved.
pub fn run(ctx: &Ctx, args: &CopyToArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    if ctx.is_server() {
        return Err(CliError::new(
            "copy-to copies from a SQLite file: pass the file as --db and the server as URL",
        ));
    }
    let file = ctx.db_path()?;
    let mut bar = crate::progress_bar::Bar::new(ctx.json, "copying", "rows");
    let report = litejobs::copy_sqlite_to_postgres_with_progress(
        file,
        &args.url,
        ctx.pg_schema.as_deref(),
        &mut |p| bar.update(p),
    );
    bar.finish();
    let report = report?;
    if ctx.json {
        write_json(out, &report)?;
    } else {
        writeln!(
            out,
            "copied {} live and {} dead jobs ({} attempts, {} attempt logs), {} webhook endpoints, \
             {} schedules, {} paused queues, {} remembered keys, {} encrypted types from {}",
            report.live_jobs,
            report.dead_jobs,
            report.attempts,
            report.attempt_logs,
            report.endpoints,
            report.schedules,
            report.paused_queues,
            report.remembered_keys,
            report.encrypted_types,
            file.display()
        )?;
    }
    Ok(Exit::Ok)
}
