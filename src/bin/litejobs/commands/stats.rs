//! `litejobs stats`: how many jobs wait, how many fail, how old the oldest due job is; counts
//! by queue, type and status; the most common errors.

use std::collections::BTreeMap;
use std::io::Write;

use litejobs::{ErrorGroup, Health, JobStatus, StatusCount};

use super::{CliError, Ctx, Exit};
use crate::args::StatsArgs;
use crate::duration::{ago, human_ms};
use crate::output::{clip, percent, write_json, Table};

/// Prints the overview.
pub fn run(ctx: &Ctx, args: &StatsArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_read_only()?;
    let overview = queue.overview(args.window, args.errors)?;
    if ctx.json {
        write_json(out, &overview)?;
        return Ok(Exit::Ok);
    }
    let (health, counts, errors) = (&overview.health, &overview.counts, &overview.top_errors);
    let retrying = overview.count(JobStatus::Failed);
    // Requeued dead jobs stay dead: the DEAD column counts them, `health.dead` does not.
    let requeued = (overview.count(JobStatus::Dead) - health.dead).max(0);
    write_summary(out, health, retrying, requeued)?;
    // Who serves what waits: read apart, so a file from before the registry still shows
    // the rest.
    if let Ok(workers) = queue.workers() {
        writeln!(
            out,
            "workers   {}",
            super::workers::summary(&workers, counts)
        )?;
    }
    writeln!(out)?;
    write_counts(out, counts)?;
    writeln!(out)?;
    write_errors(out, errors, health.at_ms)?;
    Ok(Exit::Ok)
}

/// The three questions, one line each. `requeued`: dead jobs already requeued, which the
/// table's DEAD column counts and `h.dead` does not (0 when unknown).
pub fn write_summary(
    out: &mut dyn Write,
    h: &Health,
    retrying: i64,
    requeued: i64,
) -> std::io::Result<()> {
    let oldest = match h.oldest_due_age_ms {
        Some(age) => format!("oldest due job waiting {}", human_ms(age)),
        None => "nothing overdue".to_string(),
    };
    writeln!(out, "waiting   {}; {oldest}", waiting_text(h))?;
    let rate = failure_rate_text(h);
    let dead = dead_text(h, requeued);
    writeln!(out, "failing   {retrying} retrying, {dead}; {rate}")?;
    if h.expired_last_hour > 0 {
        writeln!(
            out,
            "expired   {} in the last hour, not started by their deadline (cancelled, not \
             failures)",
            h.expired_last_hour
        )?;
    }
    if !h.paused_queues.is_empty() {
        writeln!(out, "paused    {}", h.paused_queues.join(", "))?;
    }
    Ok(())
}

/// What waits: "2 due now, 0 scheduled, 1 waiting for other jobs, 3 running". Held jobs
/// are neither due nor scheduled: said apart, when there are any.
pub fn waiting_text(h: &Health) -> String {
    let held = if h.waiting_dependants > 0 {
        format!(", {} waiting for other jobs", h.waiting_dependants)
    } else {
        String::new()
    };
    format!(
        "{} due now, {} scheduled{held}, {} running",
        h.due_now, h.scheduled, h.running
    )
}

/// The dead jobs: "2 dead (1 died in the last hour)"; with requeued ones, which the DEAD
/// column counts and `h.dead` does not, said apart.
pub fn dead_text(h: &Health, requeued: i64) -> String {
    if requeued > 0 {
        format!(
            "{} dead not requeued and {requeued} requeued ({} in the DEAD column; {} died in \
             the last hour)",
            h.dead,
            h.dead + requeued,
            h.dead_last_hour
        )
    } else {
        format!(
            "{} dead ({} died in the last hour)",
            h.dead, h.dead_last_hour
        )
    }
}

/// "3 of 40 attempts failed in the last 1h (7.5%)", or that none finished.
pub fn failure_rate_text(h: &Health) -> String {
    match h.failure_rate {
        Some(rate) => format!(
            "{} of {} attempts failed in the last {} ({})",
            h.failed_attempts,
            h.failed_attempts + h.succeeded,
            human_ms(h.window_ms),
            percent(rate)
        ),
        None => format!("no attempts finished in the last {}", human_ms(h.window_ms)),
    }
}

fn write_counts(out: &mut dyn Write, counts: &[StatusCount]) -> std::io::Result<()> {
    if counts.is_empty() {
        return writeln!(out, "no jobs");
    }
    let mut rows: BTreeMap<(&str, &str), [i64; 6]> = BTreeMap::new();
    for c in counts {
        let i = JobStatus::ALL
            .iter()
            .position(|s| *s == c.status)
            .unwrap_or(0);
        rows.entry((&c.queue, &c.job_type)).or_default()[i] += c.count;
    }
    let mut table = Table::new(&[
        "QUEUE",
        "TYPE",
        "QUEUED>",
        "RUNNING>",
        "SUCCEEDED>",
        "FAILED>",
        "DEAD>",
        "CANCELLED>",
    ]);
    for ((queue, job_type), n) in rows {
        let mut row = vec![queue.to_string(), job_type.to_string()];
        row.extend(n.iter().map(i64::to_string));
        table.row(row);
    }
    table.write(out)
}

/// The most common errors, most frequent first.
pub fn write_errors(out: &mut dyn Write, errors: &[ErrorGroup], now: i64) -> std::io::Result<()> {
    if errors.is_empty() {
        return writeln!(out, "no failing jobs");
    }
    writeln!(out, "most common errors (failed and dead jobs):")?;
    let mut table = Table::new(&[
        "JOBS>",
        "DEAD>",
        "TYPES",
        "FIRST SEEN",
        "LAST SEEN",
        "ERROR",
    ]);
    for g in errors {
        table.row(vec![
            g.count.to_string(),
            g.dead.to_string(),
            g.job_types.join(","),
            ago(g.first_seen_at, now),
            ago(g.last_seen_at, now),
            clip(&g.headline, 80),
        ]);
    }
    table.write(out)
}
