//! `litejobs keys new | types | encrypt-type | clear-type | rotate`: encryption keys and
//! the job types every enqueuer encrypts. Keys are never stored by litejobs and never
//! printed but by `keys new`, which makes one.

use std::io::Write;

use litejobs::encryption::{EncryptedType, Keyring, KEYS_ENV};
use litejobs::RotationReport;
use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::args::{KeysCommand, KeysNewArgs};
use crate::duration::utc;
use crate::output::{one_line, write_json, Table};

/// Runs one `keys` subcommand.
pub fn run(ctx: &Ctx, cmd: &KeysCommand, out: &mut dyn Write) -> Result<Exit, CliError> {
    match cmd {
        KeysCommand::New(args) => new(ctx, args, out),
        KeysCommand::Types => types(ctx, out),
        KeysCommand::EncryptType(args) => mark(ctx, &args.job_type, true, out),
        KeysCommand::ClearType(args) => mark(ctx, &args.job_type, false, out),
        KeysCommand::Rotate => rotate(ctx, out),
    }
}

#[derive(Serialize)]
struct NewJson {
    name: String,
    key: String,
}

/// Prints a fresh key; opens no database.
fn new(ctx: &Ctx, args: &KeysNewArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let name = args.name.clone().unwrap_or_else(|| {
        let today = chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now());
        format!("k-{}", today.format("%Y%m%d"))
    });
    let key = Keyring::generate(&name)?;
    if ctx.json {
        write_json(out, &NewJson { name, key })?;
    } else {
        writeln!(out, "{key}")?;
        eprintln!(
            "litejobs: put it first in {KEYS_ENV} or your key file (the first key encrypts); \
             keep the old keys after it until `litejobs keys rotate` has run"
        );
    }
    Ok(Exit::Ok)
}

#[derive(Serialize)]
struct TypesJson<'a> {
    keys: Vec<&'a str>,
    encrypted_types: &'a [EncryptedType],
}

fn types(ctx: &Ctx, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_read_only()?;
    let types = queue.encrypted_types()?;
    let keys = queue.keyring().names();
    if ctx.json {
        write_json(
            out,
            &TypesJson {
                keys,
                encrypted_types: &types,
            },
        )?;
        return Ok(Exit::Ok);
    }
    match keys.split_first() {
        None => writeln!(
            out,
            "keys held: none (set {KEYS_ENV} or --keys-file; `litejobs keys new` makes one)"
        )?,
        Some((first, rest)) => {
            let mut names = vec![format!("{first} (encrypts)")];
            names.extend(rest.iter().map(|n| n.to_string()));
            writeln!(out, "keys held: {}", names.join(", "))?;
        }
    }
    if types.is_empty() {
        writeln!(out, "no job type is marked encrypted")?;
        return Ok(Exit::Ok);
    }
    let mut table = Table::new(&["ENCRYPTED TYPE", "MARKED"]);
    for t in &types {
        table.row(vec![one_line(&t.job_type), utc(t.created_at)]);
    }
    table.write(out)?;
    Ok(Exit::Ok)
}

#[derive(Serialize)]
struct MarkJson<'a> {
    job_type: &'a str,
    encrypted: bool,
    changed: bool,
}

fn mark(ctx: &Ctx, job_type: &str, encrypted: bool, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    let changed = queue.set_type_encrypted(job_type, encrypted)?;
    if ctx.json {
        write_json(
            out,
            &MarkJson {
                job_type,
                encrypted,
                changed,
            },
        )?;
        return Ok(Exit::Ok);
    }
    let shown = one_line(job_type);
    let line = match (encrypted, changed) {
        (true, true) => format!(
            "job type {shown} is marked encrypted: its new payloads are stored encrypted \
             (jobs already stored keep their form until `litejobs keys rotate`)"
        ),
        (true, false) => format!("job type {shown} was already marked encrypted"),
        (false, true) => format!(
            "job type {shown} is no longer marked encrypted: its new payloads are stored in \
             clear (stored envelopes stay as they are)"
        ),
        (false, false) => format!("job type {shown} was not marked encrypted"),
    };
    writeln!(out, "{line}")?;
    Ok(Exit::Ok)
}

fn rotate(ctx: &Ctx, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    let mut bar = crate::progress_bar::Bar::new(ctx.json, "rotating keys", "jobs looked at");
    let report = queue.rotate_keys_with_progress(&mut |p| bar.update(p));
    bar.finish();
    let report = report?;
    let left = report.changed_meanwhile + report.running_in_clear + report.unreadable;
    if ctx.json {
        write_json(out, &report)?;
    } else {
        write_report(&report, out)?;
    }
    Ok(if left > 0 {
        Exit::CheckFailed
    } else {
        Exit::Ok
    })
}

fn write_report(r: &RotationReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "key {}: {} jobs looked at; {} columns re-encrypted, {} in clear encrypted, {} already \
         under it",
        r.key, r.jobs, r.re_encrypted, r.encrypted, r.current
    )?;
    if r.changed_meanwhile > 0 {
        writeln!(
            out,
            "{} columns changed meanwhile (a worker wrote them): run `litejobs keys rotate` again",
            r.changed_meanwhile
        )?;
    }
    if r.running_in_clear > 0 {
        writeln!(
            out,
            "{} running jobs of marked types hold their payload in clear: run `litejobs keys \
             rotate` again once they have finished",
            r.running_in_clear
        )?;
    }
    if r.unreadable > 0 {
        writeln!(out, "{} columns left as they are:", r.unreadable)?;
        for example in &r.unreadable_examples {
            writeln!(out, "  {}", one_line(example))?;
        }
        // Only the first few are named: say so, or the list reads as all of them.
        let unnamed = r
            .unreadable
            .saturating_sub(r.unreadable_examples.len() as u64);
        if unnamed > 0 {
            writeln!(out, "  and {unnamed} more")?;
        }
    }
    Ok(())
}
