//! `litejobs workers`: who is working. The live workers of the database, in any process or
//! host, as the workers registry holds them (`--all`: also those that stopped or died in the
//! last day), the latest started first, each with its queues, job types, latest sign of life
//! and the jobs it runs now.

use std::collections::BTreeMap;
use std::io::Write;

use litejobs::{StatusCount, WorkerInfo};
use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::args::WorkersArgs;
use crate::duration::ago;
use crate::output::{clip, one_line, write_json, Table};

#[derive(Serialize)]
struct WorkersJson<'a> {
    workers: Vec<WorkerJson<'a>>,
}

/// A worker with its state word (alive, stopped, gone), as the table says it.
#[derive(Serialize)]
struct WorkerJson<'a> {
    #[serde(flatten)]
    worker: &'a WorkerInfo,
    state: &'static str,
}

/// Prints the workers.
pub fn run(ctx: &Ctx, args: &WorkersArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_read_only()?;
    let now = queue.now_ms();
    let all = queue.workers()?;
    let shown: Vec<&WorkerInfo> = all.iter().filter(|w| args.all || w.alive).collect();
    if ctx.json {
        let workers = shown
            .iter()
            .map(|w| WorkerJson {
                worker: w,
                state: w.state(),
            })
            .collect();
        write_json(out, &WorkersJson { workers })?;
        return Ok(Exit::Ok);
    }
    let gone = all.len() - all.iter().filter(|w| w.alive).count();
    if shown.is_empty() {
        writeln!(out, "no live worker{}", gone_note(gone, args.all))?;
        return Ok(Exit::Ok);
    }
    let mut table = Table::new(&[
        "ID",
        "STATE",
        "HOST",
        "PID>",
        "VERSION",
        "QUEUES",
        "TYPES",
        "STARTED",
        "LAST SEEN",
        "RUNNING>",
    ]);
    for w in &shown {
        table.row(vec![
            w.id.clone(),
            w.state().to_string(),
            w.host.clone(),
            w.pid.to_string(),
            w.version.clone(),
            w.queues
                .iter()
                .map(|(name, threads)| format!("{name}×{threads}"))
                .collect::<Vec<_>>()
                .join(","),
            clip(&w.job_types.join(","), 60),
            ago(w.started_at, now),
            ago(w.heartbeat_at, now),
            w.running.to_string(),
        ]);
    }
    table.write(out)?;
    if !args.all && gone > 0 {
        writeln!(out, "({})", gone_note(gone, false).trim_start_matches("; "))?;
    }
    Ok(Exit::Ok)
}

fn gone_note(gone: usize, all: bool) -> String {
    if gone == 0 || all {
        String::new()
    } else {
        format!("; {gone} stopped or gone in the last day: --all shows them")
    }
}

/// Jobs waiting (queued or failed) in a queue, of a type, that no live worker serves: works
/// that queue and has a handler for that type. Sorted by queue and type.
pub fn unserved(workers: &[WorkerInfo], counts: &[StatusCount]) -> Vec<(String, String, i64)> {
    let mut waiting: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for c in WorkerInfo::unserved(workers, counts) {
        *waiting.entry((&c.queue, &c.job_type)).or_insert(0) += c.count;
    }
    waiting
        .into_iter()
        .map(|((queue, job_type), n)| (queue.to_string(), job_type.to_string(), n))
        .collect()
}

/// Who is working, in a few words for `stats` and `check`: how many live workers, and the
/// waiting job types none of them serves (at most [`UNSERVED_SHOWN`]).
pub fn summary(workers: &[WorkerInfo], counts: &[StatusCount]) -> String {
    let live: Vec<&WorkerInfo> = workers.iter().filter(|w| w.alive).collect();
    if live.is_empty() {
        return match workers.len() {
            0 => "no live worker".to_string(),
            n => format!("no live worker ({n} stopped or gone in the last day)"),
        };
    }
    // Names another program may have written: one line each, control characters shown.
    let mut hosts: Vec<String> = live.iter().map(|w| one_line(&w.host)).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let mut text = format!(
        "{} live worker{} on {}",
        live.len(),
        if live.len() == 1 { "" } else { "s" },
        hosts.join(", ")
    );
    let missing = unserved(workers, counts);
    if !missing.is_empty() {
        let named: Vec<String> = missing
            .iter()
            .take(UNSERVED_SHOWN)
            .map(|(queue, job_type, n)| {
                format!(
                    "{} in queue {} ({n} waiting)",
                    one_line(job_type),
                    one_line(queue)
                )
            })
            .collect();
        let more = missing.len().saturating_sub(UNSERVED_SHOWN);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        text.push_str(&format!("; none serves {}{more}", named.join(", ")));
    }
    text
}

/// Unserved job types named by [`summary`].
pub const UNSERVED_SHOWN: usize = 5;
