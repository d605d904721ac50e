//! `litejobs init`: create the database, or migrate an older one.

use std::io::Write;

use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::output::write_json;

#[derive(Serialize)]
struct InitJson<'a> {
    path: &'a str,
    created: bool,
    schema_version: i64,
}

/// Creates or migrates the file and says which.
pub fn run(ctx: &Ctx, out: &mut dyn Write) -> Result<Exit, CliError> {
    let path = ctx.db_path()?;
    let created = if ctx.is_server() {
        // A schema without litejobs' tables is refused read-only as uninitialized.
        matches!(ctx.open_read_only(), Err(e) if e.is_uninitialized())
    } else {
        !path.exists()
    };
    let queue = ctx.open_or_create()?;
    let schema_version = queue.schema_version();
    drop(queue);
    let shown = ctx.shown_db()?;
    if ctx.json {
        write_json(
            out,
            &InitJson {
                path: &shown,
                created,
                schema_version,
            },
        )?;
    } else if created {
        writeln!(out, "created {shown} (schema version {schema_version})")?;
    } else {
        writeln!(out, "{shown} is ready (schema version {schema_version})")?;
    }
    Ok(Exit::Ok)
}
