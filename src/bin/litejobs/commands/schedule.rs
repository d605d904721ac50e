//! `litejobs schedule add | list | remove`: periodic jobs kept in the database, run by every
//! `litejobs work` (the library's `Queue::add_schedule` and `WorkerBuilder::stored_schedules`).

use std::io::Write;

use litejobs::human::{ago, utc};
use litejobs::maintenance::{Periodic, ScheduleState};
use litejobs::NewJob;
use serde::Serialize;
use serde_json::Value;

use super::{CliError, Ctx, Exit};
use crate::args::{ScheduleAddArgs, ScheduleCommand, ScheduleNameArgs};
use crate::output::{clip, or_dash, write_json, Table};

#[derive(Serialize)]
struct ListJson<'a> {
    schedules: &'a [ScheduleState],
}

#[derive(Serialize)]
struct RemoveJson<'a> {
    name: &'a str,
    removed: bool,
}

/// Runs one `schedule` subcommand.
pub fn run(ctx: &Ctx, cmd: &ScheduleCommand, out: &mut dyn Write) -> Result<Exit, CliError> {
    match cmd {
        ScheduleCommand::Add(args) => add(ctx, args, out),
        ScheduleCommand::List => list(ctx, out),
        ScheduleCommand::Remove(args) => remove(ctx, args, out),
    }
}

/// `schedule add`: checks the schedule and the job before the database is opened, so a
/// refusal creates and changes nothing.
fn add(ctx: &Ctx, args: &ScheduleAddArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    if args.name.trim().is_empty() {
        return Err(CliError::new("the schedule's name is empty"));
    }
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&args.payload) {
        return Err(CliError::new(format!("payload is not valid JSON: {e}")));
    }
    let mut job = NewJob::from_json_text(&args.job_type, &args.payload)
        .queue(&args.queue)
        .priority(args.priority);
    if let Some(max) = args.max_attempts {
        job = job.max_attempts(max);
    }
    let periodic = Periodic::parse(&args.schedule, job)?.named(&args.name);
    let queue = ctx.open_or_create()?;
    let stored = masked(
        ctx,
        if args.replace {
            queue.replace_schedule(&periodic)?
        } else {
            queue.add_schedule(&periodic)?
        },
    );
    if ctx.json {
        write_json(out, &stored)?;
    } else {
        let next = stored.next_slot_at.map_or_else(|| "never".to_string(), utc);
        writeln!(
            out,
            "schedule {} kept: {} enqueues {} ({}); next slot {next}. Every `litejobs work` on \
             this database enqueues it; one with a handler for {} that works queue {} runs it.",
            stored.name, stored.schedule, args.job_type, args.queue, args.job_type, args.queue
        )?;
    }
    Ok(Exit::Ok)
}

/// `schedule list`: every schedule, stored and from code, by name.
fn list(ctx: &Ctx, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    let schedules: Vec<ScheduleState> = queue
        .periodic_schedules()?
        .into_iter()
        .map(|s| masked(ctx, s))
        .collect();
    if ctx.json {
        write_json(
            out,
            &ListJson {
                schedules: &schedules,
            },
        )?;
        return Ok(Exit::Ok);
    }
    if schedules.is_empty() {
        writeln!(out, "no schedules")?;
        return Ok(Exit::Ok);
    }
    let now = queue.now_ms();
    let mut table = Table::new(&[
        "NAME",
        "SCHEDULE",
        "JOB",
        "QUEUE",
        "KEPT IN",
        "NEXT SLOT",
        "LAST JOB",
    ]);
    for s in &schedules {
        let (job, queue_name, kept) = match &s.job {
            Some(job) => (
                format!("{} {}", job.job_type, clip(&job.payload, 40)),
                job.queue.clone(),
                "database",
            ),
            None => ("-".to_string(), "-".to_string(), "worker code"),
        };
        table.row(vec![
            s.name.clone(),
            s.schedule.clone(),
            job,
            queue_name,
            kept.to_string(),
            next_slot(s, now),
            or_dash(s.last_job_id),
        ]);
    }
    table.write(out)?;
    Ok(Exit::Ok)
}

/// The NEXT SLOT cell: the next slot as the last tick wrote it, or for a schedule kept in
/// the database and not ticked yet (a row another program inserted) as its schedule says;
/// why it cannot run when its schedule or job would be refused.
fn next_slot(s: &ScheduleState, now: i64) -> String {
    let when = |at: i64| format!("{} ({})", utc(at), ago(at, now));
    let Some(job) = &s.job else {
        return s.next_slot_at.map_or_else(|| "-".to_string(), when);
    };
    match Periodic::parse(
        &s.schedule,
        NewJob::from_json_text(&job.job_type, &job.payload),
    ) {
        Ok(periodic) => s
            .next_slot_at
            .or_else(|| periodic.next_slot_after(s.last_slot_at.max(now)))
            .map_or_else(|| "never".to_string(), when),
        Err(e) => format!("cannot run: {}", clip(&e.to_string(), 60)),
    }
}

/// A schedule as people and scripts may see it: secrets in its job's payload masked, as in
/// every view of a job.
fn masked(ctx: &Ctx, mut schedule: ScheduleState) -> ScheduleState {
    if let Some(job) = schedule.job.as_mut() {
        if let Value::String(text) = ctx.redactor.mask(&Value::String(job.payload.clone())) {
            job.payload = text;
        }
    }
    schedule
}

/// `schedule remove`.
fn remove(ctx: &Ctx, args: &ScheduleNameArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let queue = ctx.open_existing()?;
    let removed = queue.remove_schedule(&args.name)?;
    if !removed {
        return Err(CliError::new(format!(
            "no schedule {:?} is kept in the database (`litejobs schedule list` shows them)",
            args.name
        )));
    }
    if ctx.json {
        write_json(
            out,
            &RemoveJson {
                name: &args.name,
                removed,
            },
        )?;
    } else {
        writeln!(out, "schedule {} removed", args.name)?;
    }
    Ok(Exit::Ok)
}
