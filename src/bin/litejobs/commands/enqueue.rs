//! `litejobs enqueue TYPE [PAYLOAD]`: add a job; the payload comes from the argument or stdin.

use std::io::{IsTerminal, Read, Write};

use litejobs::NewJob;
use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::args::EnqueueArgs;
use crate::output::write_json;

#[derive(Serialize)]
struct EnqueueJson {
    id: i64,
}

/// Checks the payload before the database is opened (or created), so bad input changes
/// nothing; prints the id (the holder's id when the idempotency key is taken).
pub fn run(ctx: &Ctx, args: &EnqueueArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let (text, from) = match args.payload.as_deref() {
        Some("-") | None => (read_stdin()?, "stdin was empty"),
        Some(text) => (text.to_string(), "the payload argument is empty"),
    };
    if text.trim().is_empty() {
        return Err(CliError::new(format!(
            "no payload: {from}; give the job's JSON (e.g. '{{}}') as an argument, or pipe it \
             on stdin"
        )));
    }
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&text) {
        return Err(CliError::new(format!("payload is not valid JSON: {e}")));
    }
    let mut job = NewJob::from_json_text(&args.job_type, text)
        .queue(&args.queue)
        .priority(args.priority);
    if let Some(delay) = args.delay {
        job = job.delay(delay);
    }
    if let Some(max) = args.max_attempts {
        job = job.max_attempts(max);
    }
    if let Some(timeout) = args.timeout {
        job = job.timeout(timeout);
    }
    if let Some(key) = &args.idempotency_key {
        job = job.idempotency_key(key);
    }
    if let Some(key) = &args.group_key {
        job = job.group_key(key);
    }
    if let Some(window) = args.expire_after {
        job = job.expire_after(window);
    }
    if let Some(at) = args.expires_at {
        job = job.expires_at(at);
    }
    if args.encrypt {
        job = job.encrypted();
    }
    if !ctx.is_server() && !ctx.db_path()?.exists() {
        // Let the library refuse a bad job (empty type, oversized payload, ...) before the
        // file is created, so a refused enqueue leaves nothing behind.
        ctx.builder()?.open_in_memory()?.enqueue(job.clone())?;
    }
    // After that check: the jobs waited for are in the database, not in that copy.
    for &id in &args.after {
        job = job.after(id);
    }
    for &id in &args.after_any {
        job = job.after_any_outcome(id);
    }
    let queue = ctx.open_or_create()?;
    let id = queue.enqueue(job)?;
    warn_if_unserved(&queue, &args.job_type, &args.queue);
    if ctx.json {
        write_json(out, &EnqueueJson { id })?;
    } else {
        writeln!(out, "{id}")?;
    }
    Ok(Exit::Ok)
}

/// Warns (on stderr, the id still printed) when litejobs workers ran on this database in the
/// last day and none of them served `job_type` in `queue_name`: most often a typo in the
/// type, or a queue no worker works. Nothing is said while no worker has been seen at all.
/// (A worker of your own that claims by SQL keeps no row: the warning then means nothing.)
fn warn_if_unserved(queue: &litejobs::Queue, job_type: &str, queue_name: &str) {
    let Ok(workers) = queue.workers() else { return };
    if workers.is_empty() || workers.iter().any(|w| w.serves(queue_name, job_type)) {
        return;
    }
    let served = workers
        .iter()
        .any(|w| w.job_types.iter().any(|t| t == job_type));
    let why = if served {
        format!("none works queue {queue_name}")
    } else {
        "none serves that type (a typo?)".to_string()
    };
    log::warn!(
        "litejobs enqueue: job type {job_type} in queue {queue_name} waits for a worker: of the \
         {} litejobs worker(s) seen in the last day, {why}; `litejobs workers --all` lists \
         them",
        workers.len()
    );
}

fn read_stdin() -> Result<String, CliError> {
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(CliError::new(
            "no payload: give it as an argument, or pipe JSON on stdin",
        ));
    }
    let mut text = String::new();
    stdin
        .read_to_string(&mut text)
        .map_err(|e| CliError::new(format!("reading the payload from stdin: {e}")))?;
    Ok(text)
}
