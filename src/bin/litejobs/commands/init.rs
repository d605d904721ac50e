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
    let created = !path.exists();
    drop(ctx.open_or_create()?);
    let shown = path.display().to_string();
    if ctx.json {
        write_json(
            out,
            &InitJson {
                path: &shown,
                created,
                schema_version: litejobs::SCHEMA_VERSION,
            },
        )?;
    } else if created {
        writeln!(
            out,
            "created {shown} (schema version {})",
            litejobs::SCHEMA_VERSION
        )?;
    } else {
        writeln!(
            out,
            "{shown} is ready (schema version {})",
            litejobs::SCHEMA_VERSION
        )?;
    }
    Ok(Exit::Ok)
}
