//! Handlers in any language (feature `exec`, Unix): run a program per job ([`Command`]), or
//! keep long-lived programs that take jobs as JSON lines ([`Serve`]). `litejobs work --exec
//! TYPE=COMMAND` and `--serve TYPE=COMMAND` are these two.
//!
//! # A process per job ([`Command`])
//! The command starts in a process group of its own, with the payload as JSON on stdin and
//! the job in its environment:
//!
//! | variable | value |
//! | --- | --- |
//! | `LITEJOBS_JOB_ID` | the job's id |
//! | `LITEJOBS_JOB_TYPE` | its type |
//! | `LITEJOBS_QUEUE` | its queue |
//! | `LITEJOBS_ATTEMPT` | this attempt, from 1 |
//! | `LITEJOBS_MAX_ATTEMPTS` | attempts it gets in all |
//! | `LITEJOBS_DEADLINE_MS` | when this attempt times out, in ms since the Unix epoch |
//! | `LITEJOBS_IDEMPOTENCY_KEY`, `LITEJOBS_GROUP_KEY` | the job's keys, when it has them |
//! | `LITEJOBS_DB` | the database (set by `litejobs work`; in Rust, by [`Command::env`]) |
//!
//! Its exit code says what happens next (BSD's sysexits where one fits):
//!
//! | exit | outcome |
//! | --- | --- |
//! | 0 | `succeeded`; stdout, when it is a JSON value, is the job's result |
//! | 65 (`EX_DATAERR`) | `dead` at once: retrying cannot help |
//! | 75 (`EX_TEMPFAIL`) | retry after the delay printed on stdout (`30`, `30s`, `5m`, `2h`), or by the retry policy when none is printed |
//! | 98 | `cancelled`: the job is no longer wanted |
//! | 99 | snooze: due again after the delay on stdout (60 s if none); the attempt does not count |
//! | any other, or killed by a signal | retry by the retry policy (`dead` after the last attempt) |
//!
//! The last 1.5 KiB of stderr is the attempt's error, and a failed attempt's exit code its
//! status code. Past the job's timeout (or when a shutdown's grace is over) the whole
//! process group gets SIGTERM, then SIGKILL after the kill grace ([`DEFAULT_KILL_GRACE`]),
//! so the slot is really free again; the attempt is recorded as timed out. Processes of the
//! group get all of the kill grace even when the command itself (a shell wrapper, say) dies
//! at once. A command that exits but leaves processes of its group holding its output has
//! them stopped the same way after 0.5 s; output held by processes outside the group (a
//! `setsid` daemon) is read for 0.5 s after the command exits, then no longer waited for.
//! A job cancelled while its command runs ([`Queue::cancel`](crate::Queue::cancel)) has its
//! process group stopped the same way (SIGTERM, then SIGKILL after the kill grace), and the
//! slot runs the next job; whatever the command reports is discarded.
//! If the worker's own process is killed with SIGKILL, its commands run on as orphans;
//! their jobs are reaped when the lease expires.
//!
//! # Long-lived processes ([`Serve`])
//! For throughput: N processes started once, each taking one job at a time. Each job is one
//! line of JSON on the process's stdin:
//! ```json
//! {"id": 12, "type": "thumbnail", "queue": "default", "attempt": 1, "max_attempts": 20,
//!  "deadline_ms": 1764806400000, "payload": {"path": "a.png"}}
//! ```
//! and the process answers with one line on stdout (logs go to stderr, which is logged):
//! ```json
//! {"id": 12, "outcome": "ok", "result": {"width": 128}}
//! {"id": 12, "outcome": "retry", "error": "upstream busy", "delay": 30}
//! {"id": 12, "outcome": "permanent", "error": "not an image"}
//! {"id": 12, "outcome": "snooze", "delay": "5m"}
//! {"id": 12, "outcome": "cancel", "error": "user deleted"}
//! ```
//! A process that exits mid-job, answers without an id or for a job it was not given, writes
//! a line that is JSON but not an answer or longer than [`MAX_ANSWER_BYTES`], or does not
//! read its job or answer before the job's deadline is stopped (its process group), the
//! job's attempt fails and is retried by its policy, and a new process takes the next job.
//! A second answer for one of its earlier jobs is logged and dropped. A result over
//! [`MAX_STDOUT_BYTES`] is not kept (the job succeeds), as with [`Command`]. When the worker
//! stops, idle processes see their stdin close and should exit.
//!
//! A job cancelled while a process works on it is passed on as a line of its own,
//! `{"cancel": 12}`: the process should end that job and answer it (any outcome; an answer
//! of `cancel` says it understood, and the process keeps its slot). One that does not answer
//! within the kill grace is stopped and replaced, as is one that answers otherwise (the
//! cancel line may still wait unread in its input), so a program written before cancel
//! lines keeps working. `docs/serve-protocol.md` has the protocol for implementers, and
//! `examples/serve_worker.py` is a worker in 20 lines of Python.

mod command;
mod command_io;
mod outcome;
mod pipes;
mod process;
mod serve;
mod serve_cancel;
mod serve_pool;
mod serve_process;

use std::time::{Duration, UNIX_EPOCH};

pub use command::{Command, MAX_STDOUT_BYTES};
pub use outcome::{
    DEFAULT_SNOOZE, EXIT_CANCEL, EXIT_PERMANENT, EXIT_RETRY, EXIT_SNOOZE, EXIT_SUCCESS,
    STDERR_TAIL_BYTES,
};
pub use serve::Serve;
pub use serve_process::MAX_ANSWER_BYTES;

use crate::error::{Error, ErrorKind, Result};
use crate::handler::JobContext;

/// Time between SIGTERM and SIGKILL for a process group that must stop.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// The longest a job waits on its handler thread for a free process (a `concurrency`
/// slot, or an idle `Serve` process); a quarter of its timeout when that is shorter.
pub const MAX_SLOT_WAIT: Duration = Duration::from_secs(1);

/// A job that found no free process goes back to the queue for this long, its attempt
/// not spent, rather than spending its time limit waiting.
pub const NO_SLOT_SNOOZE: Duration = Duration::from_secs(1);

/// Until when a job may wait for a free process: the wait counts toward its time limit, so
/// it is kept short.
fn slot_wait_until(ctx: &JobContext) -> std::time::Instant {
    let now = std::time::Instant::now();
    let left = ctx.run_until().saturating_duration_since(now);
    now + MAX_SLOT_WAIT.min(left / 4)
}

/// Stops the idle [`Serve`] processes (stdin closed, then SIGTERM and SIGKILL after their
/// kill grace) and waits until no command started by this process's handlers is running,
/// at most `timeout`; true when none is. `litejobs work` calls it after
/// [`Worker::shutdown`]: the shutdown's end stops the commands still running (SIGTERM, then
/// SIGKILL after their kill grace), and the process must not exit before they are gone.
///
/// [`Worker::shutdown`]: crate::Worker::shutdown
pub fn wait_for_commands(timeout: Duration) -> bool {
    let end = std::time::Instant::now() + timeout;
    serve_pool::stop_idle_processes(false);
    // Both: a pool dropped on another thread stops its idle processes there.
    let commands = process::watchdog().wait_idle(timeout);
    serve_process::wait_processes_gone(end) && commands
}

/// Kills (SIGKILL) the process group of every command running for this process's handlers
/// and every idle [`Serve`] process, at once. For a process about to exit without a
/// graceful shutdown (`litejobs work` on a second signal): no command outlives it as an
/// orphan. Their jobs come back when their leases expire.
pub fn kill_all_commands() {
    process::watchdog().kill_all();
    serve_pool::stop_idle_processes(true);
}

/// The environment a command gets for one job.
fn job_env(ctx: &JobContext) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("LITEJOBS_JOB_ID", ctx.id().to_string()),
        ("LITEJOBS_JOB_TYPE", ctx.job_type().to_string()),
        ("LITEJOBS_QUEUE", ctx.queue_name().to_string()),
        ("LITEJOBS_ATTEMPT", ctx.attempt().to_string()),
        ("LITEJOBS_MAX_ATTEMPTS", ctx.max_attempts().to_string()),
        ("LITEJOBS_DEADLINE_MS", deadline_ms(ctx).to_string()),
    ];
    if let Some(key) = ctx.idempotency_key() {
        env.push(("LITEJOBS_IDEMPOTENCY_KEY", key.to_string()));
    }
    if let Some(key) = ctx.group_key() {
        env.push(("LITEJOBS_GROUP_KEY", key.to_string()));
    }
    env
}

/// The attempt's deadline in ms since the Unix epoch.
fn deadline_ms(ctx: &JobContext) -> i64 {
    ctx.deadline()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Splits a command line into a program and its arguments, as a shell would for plain
/// words and quotes. A line with other shell syntax runs as `sh -c LINE`.
fn parse_command_line(line: &str) -> Result<(String, Vec<String>)> {
    let invalid =
        |why: &str| Error::new(ErrorKind::InvalidConfig, format!("command {line:?}: {why}"));
    if line.trim().is_empty() {
        return Err(invalid("empty"));
    }
    if line.contains([
        '|', '&', ';', '<', '>', '(', ')', '$', '`', '*', '?', '[', '~', '#', '\n',
    ]) {
        return Ok((
            "/bin/sh".to_string(),
            vec!["-c".to_string(), line.to_string()],
        ));
    }
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err(invalid("unclosed '")),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => w.push(c),
                            None => return Err(invalid("unclosed \"")),
                        },
                        Some(c) => w.push(c),
                        None => return Err(invalid("unclosed \"")),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) => word.get_or_insert_with(String::new).push(c),
                None => return Err(invalid("ends with \\")),
            },
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    if let Some(w) = word {
        words.push(w);
    }
    let mut words = words.into_iter();
    let program = words.next().ok_or_else(|| invalid("empty"))?;
    Ok((program, words.collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_split_like_a_shell_or_go_to_one() {
        let split = |l: &str| parse_command_line(l).expect("parses");
        assert_eq!(
            split("python3 worker.py --name 'two words' \"a \\\"q\\\"\""),
            (
                "python3".to_string(),
                vec!["worker.py", "--name", "two words", "a \"q\""]
                    .into_iter()
                    .map(String::from)
                    .collect()
            )
        );
        assert_eq!(
            split("cat | wc -l"),
            (
                "/bin/sh".to_string(),
                vec!["-c".to_string(), "cat | wc -l".to_string()]
            )
        );
        assert!(parse_command_line("  ").is_err());
        assert!(parse_command_line("echo 'open").is_err());
    }
}
