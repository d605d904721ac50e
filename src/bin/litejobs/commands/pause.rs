//! `litejobs pause QUEUE` / `litejobs resume QUEUE`: a switch every worker process honours.
//! A name the database does not know is refused, so a typo never pauses a phantom queue
//! while saying it worked; `pause --create` pauses a queue before its first job.

use std::collections::BTreeSet;
use std::io::Write;

use litejobs::Queue;
use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::args::{PauseArgs, QueueArgs};
use crate::output::write_json;

/// A refusal lists at most this many known queue names.
const NAMES_SHOWN: usize = 10;

#[derive(Serialize)]
struct PauseJson<'a> {
    queue: &'a str,
    paused: bool,
}

/// `pause`: pauses a queue the database knows, or any name with `--create`.
pub fn pause(ctx: &Ctx, args: &PauseArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    let name = &args.queue.queue;
    if !args.create {
        refuse_unknown(
            &queue,
            name,
            "; pass --create to pause it before it has jobs",
        )?;
    }
    queue.pause_queue(name)?;
    if ctx.json {
        write_json(
            out,
            &PauseJson {
                queue: name,
                paused: true,
            },
        )?;
    } else {
        writeln!(
            out,
            "queue {name} paused: no worker claims its jobs until `litejobs resume {name}`"
        )?;
    }
    Ok(Exit::Ok)
}

/// `resume`: resumes a queue the database knows; resuming a name it does not know would
/// resume nothing, so that is refused too.
pub fn resume(ctx: &Ctx, args: &QueueArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    let name = &args.queue;
    refuse_unknown(&queue, name, "")?;
    queue.resume_queue(name)?;
    if ctx.json {
        write_json(
            out,
            &PauseJson {
                queue: name,
                paused: false,
            },
        )?;
    } else {
        writeln!(out, "queue {name} resumed")?;
    }
    Ok(Exit::Ok)
}

/// The queue names the database knows: those with jobs in any status (finished ones from
/// the kept counts, so this stays cheap on a big table) and those paused by name.
fn known_queues(queue: &Queue) -> Result<BTreeSet<String>, CliError> {
    let mut names: BTreeSet<String> = queue.stats()?.counts.into_iter().map(|c| c.queue).collect();
    names.extend(queue.paused_queues()?);
    Ok(names)
}

/// Refuses `name` unless the database knows it, naming the queues it does know and ending
/// with `hint`. An empty name is left to the library, whose refusal says what is wrong.
fn refuse_unknown(queue: &Queue, name: &str, hint: &str) -> Result<(), CliError> {
    if name.trim().is_empty() {
        return Ok(());
    }
    let known = known_queues(queue)?;
    if known.contains(name) {
        return Ok(());
    }
    let mut list = known
        .iter()
        .take(NAMES_SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if known.is_empty() {
        list.push_str("none yet");
    } else if known.len() > NAMES_SHOWN {
        list.push_str(&format!(" and {} more", known.len() - NAMES_SHOWN));
    }
    Err(CliError::new(format!(
        "no queue named {name} (known: {list}){hint}"
    )))
}
