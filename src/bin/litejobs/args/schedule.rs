//! `schedule add | list | remove`.

use clap::{Args, Subcommand};

/// `schedule ...`.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Keep a periodic job in the database, for every `litejobs work`.
    ///
    /// Every `litejobs work` on the database enqueues its job once per slot between them
    /// (the first slot after now), so a program in any language gets periodic jobs without
    /// a cron of its own; a worker with a handler for TYPE that works its queue runs them.
    /// SCHEDULE is a cron expression in UTC ('0 2 * * *', six fields with seconds first, or
    /// '@daily' and the like) or an interval of at least a second ('every 15m', 'every
    /// 1h30m', on multiples of it since the Unix epoch).
    Add(ScheduleAddArgs),
    /// Every schedule, kept in the database or in a worker's code.
    ///
    /// With its job, its next slot (or why a row another program wrote cannot run) and the
    /// job enqueued for its last slot.
    List,
    /// Remove a schedule kept in the database.
    ///
    /// No worker enqueues it any more; jobs already enqueued stay.
    Remove(ScheduleNameArgs),
}

/// `schedule add`.
#[derive(Debug, Args)]
pub struct ScheduleAddArgs {
    /// The schedule's name (also the first part of its jobs' idempotency keys,
    /// periodic:NAME:SLOT).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// A cron expression ('0 2 * * *', '@daily') or an interval of at least a second
    /// ('every 15m', 'every 1h30m').
    #[arg(value_name = "SCHEDULE")]
    pub schedule: String,
    /// The job type each slot enqueues.
    #[arg(value_name = "TYPE")]
    pub job_type: String,
    /// The payload as JSON (default {}).
    #[arg(value_name = "PAYLOAD", default_value = "{}")]
    pub payload: String,
    /// The queue.
    #[arg(long, default_value = litejobs::defaults::DEFAULT_QUEUE)]
    pub queue: String,
    /// Higher runs first within the queue.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i64,
    /// Attempts before a slot's job is dead (default 6, as for any job).
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// Replace the schedule of that name kept in the database (its slots start again after
    /// now), where without it a name taken is refused.
    #[arg(long)]
    pub replace: bool,
}

/// A schedule's name.
#[derive(Debug, Args)]
pub struct ScheduleNameArgs {
    /// The schedule's name (`litejobs schedule list` shows them).
    #[arg(value_name = "NAME")]
    pub name: String,
}
