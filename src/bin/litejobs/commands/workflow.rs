//! `litejobs workflow list | cancel` (`show` is `workflow_show`, run from `commands`):
//! workflows and batches, the jobs that wait for other jobs.

use std::collections::BTreeMap;
use std::io::Write;

use litejobs::workflow::WorkflowListing;
use litejobs::JobStatus;
use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::args::{WorkflowCancelArgs, WorkflowListArgs};
use crate::duration::ago;
use crate::output::{clip, write_json, Table};

/// One workflow of `workflow list --json`: the listing with its progress spelled out.
#[derive(Serialize)]
struct ListedJson<'a> {
    #[serde(flatten)]
    listing: &'a WorkflowListing,
    /// Its jobs that have ended (succeeded, dead or cancelled).
    ended: usize,
    /// Its jobs.
    total: usize,
}

#[derive(Serialize)]
struct ListJson<'a> {
    workflows: Vec<ListedJson<'a>>,
}

#[derive(Serialize)]
struct CancelJson {
    workflow_id: i64,
    cancelled: Vec<i64>,
}

/// `in progress`, `finished`, or `open` for a batch still taking jobs (as
/// [`litejobs::workflow::WorkflowInfo::state`] says it).
pub fn state(open: bool, ended: usize, total: usize) -> &'static str {
    if open {
        "open"
    } else if ended == total {
        "finished"
    } else {
        "in progress"
    }
}

/// Counts by status in the order statuses go (`2 succeeded, 1 running`); `no jobs` for none.
pub fn counts_text(counts: &BTreeMap<JobStatus, usize>) -> String {
    let parts: Vec<String> = JobStatus::ALL
        .iter()
        .filter_map(|s| {
            counts
                .get(s)
                .filter(|n| **n > 0)
                .map(|n| format!("{n} {s}"))
        })
        .collect();
    if parts.is_empty() {
        "no jobs".to_string()
    } else {
        parts.join(", ")
    }
}

/// `workflow list`: newest first, a page at a time.
pub fn list(ctx: &Ctx, args: &WorkflowListArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_read_only()?;
    let listings = queue.workflows(args.limit, args.before)?;
    if ctx.json {
        let workflows = listings
            .iter()
            .map(|listing| ListedJson {
                listing,
                ended: listing.ended(),
                total: listing.total(),
            })
            .collect();
        write_json(out, &ListJson { workflows })?;
        return Ok(Exit::Ok);
    }
    if listings.is_empty() {
        writeln!(out, "no workflows or batches")?;
        return Ok(Exit::Ok);
    }
    let now = queue.now_ms();
    let mut table = Table::new(&[
        "ID>", "KIND", "NAME", "STATE", "PROGRESS", "JOBS", "CREATED",
    ]);
    for w in &listings {
        table.row(vec![
            w.id.to_string(),
            w.kind.as_str().to_string(),
            clip(&w.name, 40),
            state(w.open, w.ended(), w.total()).to_string(),
            format!("{} of {} ended", w.ended(), w.total()),
            counts_text(&w.counts),
            ago(w.created_at, now),
        ]);
    }
    table.write(out)?;
    if listings.len() == args.limit {
        if let Some(last) = listings.last() {
            writeln!(
                out,
                "(first {} shown; next page: --before {})",
                listings.len(),
                last.id
            )?;
        }
    }
    Ok(Exit::Ok)
}

/// `workflow cancel`: what has not ended, in one transaction.
pub fn cancel(ctx: &Ctx, args: &WorkflowCancelArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    let id = args.workflow.id;
    let by = args.who();
    let reason = args.reason.as_deref().unwrap_or_default();
    let mut cancelled = queue.cancel_workflow(id, &by, reason)?;
    // Told in id order, as `workflow show` lists them.
    cancelled.sort_unstable();
    if ctx.json {
        write_json(
            out,
            &CancelJson {
                workflow_id: id,
                cancelled,
            },
        )?;
        return Ok(Exit::Ok);
    }
    if cancelled.is_empty() {
        writeln!(
            out,
            "nothing to cancel: every job of workflow {id} had ended"
        )?;
        return Ok(Exit::Ok);
    }
    let why = if reason.trim().is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    for job in &cancelled {
        writeln!(out, "job {job} cancelled")?;
    }
    writeln!(
        out,
        "workflow {id}: cancelled {} job(s) by {by}{why}",
        cancelled.len()
    )?;
    Ok(Exit::Ok)
}
