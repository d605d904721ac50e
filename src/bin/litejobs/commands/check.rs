//! `litejobs check`: exit 1 with one line per crossed threshold, 0 and `ok` otherwise; for
//! cron and monitoring agents.

use std::io::Write;

use litejobs::Health;
use serde::Serialize;

use super::{CliError, Ctx, Exit};
use crate::args::CheckArgs;
use crate::duration::human_ms;
use crate::output::{percent, write_json};

/// One crossed threshold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// The flag's name without dashes: `max_dead`, `max_dead_last_hour`, `max_oldest_age`,
    /// `max_failed_rate`.
    pub check: &'static str,
    /// The threshold (a count, milliseconds for ages, a share for rates).
    pub limit: f64,
    /// What was measured, in the same unit.
    pub value: f64,
    /// The line a person reads.
    pub message: String,
}

#[derive(Serialize)]
struct CheckJson<'a> {
    ok: bool,
    failures: &'a [Failure],
    health: &'a Health,
}

/// Reads the figures and judges them.
pub fn run(ctx: &Ctx, args: &CheckArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    if args.max_dead.is_none()
        && args.max_dead_last_hour.is_none()
        && args.max_oldest_age.is_none()
        && args.max_failed_rate.is_none()
    {
        return Err(CliError::new(
            "check needs at least one threshold: --max-dead, --max-dead-last-hour, \
             --max-oldest-age or --max-failed-rate",
        ));
    }
    let queue = ctx.open_read_only()?;
    let health = queue.health(args.window)?;
    // Who serves what waits, for the message of a due job older than the limit: the
    // registry and the counts are read only then.
    let workers = || match (queue.workers(), queue.stats()) {
        (Ok(workers), Ok(stats)) => super::workers::summary(&workers, &stats.counts),
        _ => "is a worker running?".to_string(),
    };
    let failures = evaluate(args, &health, &workers);
    if ctx.json {
        write_json(
            out,
            &CheckJson {
                ok: failures.is_empty(),
                failures: &failures,
                health: &health,
            },
        )?;
    } else if failures.is_empty() {
        writeln!(out, "ok")?;
    } else {
        for f in &failures {
            writeln!(out, "{}", f.message)?;
        }
    }
    Ok(if failures.is_empty() {
        Exit::Ok
    } else {
        Exit::CheckFailed
    })
}

/// The thresholds `args` sets that `h` crosses, in flag order; `workers` says who serves
/// what waits, asked only for the message of a due job older than its limit.
pub fn evaluate(args: &CheckArgs, h: &Health, workers: &dyn Fn() -> String) -> Vec<Failure> {
    let mut failures = Vec::new();
    if let Some(limit) = args.max_dead {
        if h.dead > limit {
            failures.push(Failure {
                check: "max_dead",
                limit: limit as f64,
                value: h.dead as f64,
                message: format!(
                    "dead jobs: {} wait for a person, above the limit of {limit} \
                     (see `litejobs dead list`)",
                    h.dead
                ),
            });
        }
    }
    if let Some(limit) = args.max_dead_last_hour {
        if h.dead_last_hour > limit {
            failures.push(Failure {
                check: "max_dead_last_hour",
                limit: limit as f64,
                value: h.dead_last_hour as f64,
                message: format!(
                    "dead jobs growing: {} died in the last hour, above the limit of {limit}",
                    h.dead_last_hour
                ),
            });
        }
    }
    if let (Some(limit), Some(age)) = (args.max_oldest_age, h.oldest_due_age_ms) {
        let limit_ms = i64::try_from(limit.as_millis()).unwrap_or(i64::MAX);
        if age > limit_ms {
            let workers = workers();
            let paused = if h.paused_queues.is_empty() {
                String::new()
            } else {
                format!("; paused queues: {}", h.paused_queues.join(", "))
            };
            failures.push(Failure {
                check: "max_oldest_age",
                limit: limit_ms as f64,
                value: age as f64,
                message: format!(
                    "oldest due job has waited {}, longer than {} ({} due now; {workers}{paused})",
                    human_ms(age),
                    human_ms(limit_ms),
                    h.due_now
                ),
            });
        }
    }
    if let (Some(limit), Some(rate)) = (args.max_failed_rate, h.failure_rate) {
        let attempts = h.failed_attempts + h.succeeded;
        if rate > limit && attempts >= args.min_attempts {
            failures.push(Failure {
                check: "max_failed_rate",
                limit,
                value: rate,
                message: format!(
                    "failure rate {} ({} of {} attempts in the last {}), above {}",
                    percent(rate),
                    h.failed_attempts,
                    attempts,
                    human_ms(h.window_ms),
                    percent(limit)
                ),
            });
        }
    }
    failures
}
