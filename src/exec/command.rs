//! [`Command`]: a handler that runs a program per job.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::command_io::{run_to_end, Limits};
use super::outcome::{self, STDERR_TAIL_BYTES};
use super::process::{watchdog, Program};
use super::{job_env, parse_command_line, slot_wait_until, DEFAULT_KILL_GRACE, NO_SLOT_SNOOZE};
use crate::handler::JobContext;
use crate::handler::{Handler, JobError};
use crate::job_log::ATTEMPT_LOG_BYTES;

/// The most of a command's stdout read as its result (1 MiB); more is read and dropped.
pub const MAX_STDOUT_BYTES: usize = 1 << 20;

/// A handler that runs a program for each job: the payload as JSON on stdin, the job in
/// `LITEJOBS_*` variables, the outcome from the exit code (see [the table](super)).
///
/// ```no_run
/// use litejobs::exec::Command;
/// use litejobs::{Queue, Worker};
/// use std::time::Duration;
/// # fn main() -> litejobs::Result<()> {
/// let queue = Queue::open("app.db")?;
/// let worker = Worker::builder(&queue)
///     .handler("resize_image", Command::parse("./resize.sh --quality 80")?.concurrency(2))
///     .timeout("resize_image", Duration::from_secs(120))
///     .start()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Command {
    program: Program,
    kill_grace: Duration,
    slots: Option<Slots>,
}

#[derive(Debug, Clone)]
struct Slots {
    take: Receiver<()>,
    give: Sender<()>,
}

impl Command {
    /// Runs `program` (looked up in `PATH` when it has no `/`) with no arguments.
    pub fn new(program: impl Into<String>) -> Command {
        Command {
            program: Program {
                program: program.into(),
                args: Vec::new(),
                envs: Vec::new(),
                dir: None,
            },
            kill_grace: DEFAULT_KILL_GRACE,
            slots: None,
        }
    }

    /// A command line as written in a shell: words split on spaces with `'…'`, `"…"` and
    /// `\` quoting. A line with shell syntax (pipes, redirections, `$`, `;`, `&`, globs…)
    /// runs under `sh -c`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for an empty line or
    /// an unclosed quote.
    pub fn parse(line: &str) -> crate::Result<Command> {
        let (program, args) = parse_command_line(line)?;
        Ok(Command::new(program).args(args))
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Command {
        self.program.args.push(arg.into());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.program.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for the command (it inherits this process's
    /// environment too). `litejobs work` sets `LITEJOBS_DB` so that commands can open the
    /// queue.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Command {
        self.program.envs.push((name.into(), value.into()));
        self
    }

    /// The directory the command runs in (default: this process's).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Command {
        self.program.dir = Some(dir.into());
        self
    }

    /// How long a stopped command's process group has between SIGTERM and SIGKILL.
    /// Defaults to [`DEFAULT_KILL_GRACE`] (5 s).
    pub fn kill_grace(mut self, grace: Duration) -> Command {
        self.kill_grace = grace;
        self
    }

    /// Runs at most `processes` of this command at once in this worker (0: no limit but the
    /// worker's handler threads). A job waits on its handler thread up to [`MAX_SLOT_WAIT`]
    /// (a quarter of its timeout if shorter) for a free slot; then it goes back to the queue
    /// for [`NO_SLOT_SNOOZE`], its attempt not spent.
    ///
    /// [`MAX_SLOT_WAIT`]: super::MAX_SLOT_WAIT
    /// [`NO_SLOT_SNOOZE`]: super::NO_SLOT_SNOOZE
    pub fn concurrency(mut self, processes: usize) -> Command {
        self.slots = (processes > 0).then(|| {
            let (give, take) = crossbeam_channel::bounded(processes);
            for _ in 0..processes {
                let _ = give.send(());
            }
            Slots { take, give }
        });
        self
    }

    /// The command line, for logs.
    pub fn shown(&self) -> String {
        self.program.shown()
    }

    /// The program started (the first word of a parsed line, or `/bin/sh`).
    pub fn program(&self) -> String {
        self.program.program.clone()
    }

    /// A free slot, or a snooze: a job never spends its attempt waiting for one.
    fn take_slot(&self, ctx: &JobContext) -> Result<Option<SlotGuard<'_>>, JobError> {
        let Some(slots) = &self.slots else {
            return Ok(None);
        };
        let until = slot_wait_until(ctx);
        match slots
            .take
            .recv_timeout(until.saturating_duration_since(Instant::now()))
        {
            Ok(()) => Ok(Some(SlotGuard(&slots.give))),
            Err(_) => Err(JobError::snooze(NO_SLOT_SNOOZE)),
        }
    }
}

/// Gives a concurrency slot back when dropped.
struct SlotGuard<'a>(&'a Sender<()>);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

impl Handler for Command {
    fn run(&self, ctx: &JobContext) -> Result<(), JobError> {
        let _slot = self.take_slot(ctx)?;
        let mut child = self
            .program
            .spawn(&job_env(ctx))
            .map_err(|e| JobError::retry(format!("cannot start {}: {e}", self.program.shown())))?;
        let watch = watchdog().watch(
            child.id(),
            ctx.stop_signal(),
            Some(ctx.run_until()),
            self.kill_grace,
        );
        // Its stderr's newest bytes are the attempt's log; their end, its error.
        let limits = Limits {
            stdout_head: MAX_STDOUT_BYTES,
            stderr_tail: ATTEMPT_LOG_BYTES,
            kill_grace: self.kill_grace,
        };
        let payload = ctx.payload().to_string();
        let ran = run_to_end(&mut child, payload.as_bytes(), &watch, limits)
            .map_err(|e| JobError::retry(format!("cannot run {}: {e}", self.shown())))?;
        drop(watch);
        if ran.stdout.truncated && ran.status.success() {
            log::warn!(
                "litejobs: job {} ({}): stdout over {MAX_STDOUT_BYTES} bytes is not kept as \
                 the result",
                ctx.id(),
                ctx.job_type()
            );
        }
        let stdout: &[u8] = if ran.stdout.truncated {
            b""
        } else {
            &ran.stdout.bytes
        };
        let stderr = ran.stderr.text();
        ctx.log_stderr(&stderr, ran.stderr.dropped);
        let result = outcome::from_exit(ran.status, stdout, tail(&stderr), ran.stopped)?;
        if let Some(result) = result {
            ctx.set_result(result);
        }
        Ok(())
    }
}

/// The last [`STDERR_TAIL_BYTES`] of `stderr`, at a character boundary: the part of a
/// command's stderr its error keeps.
fn tail(stderr: &str) -> &str {
    let mut at = stderr.len().saturating_sub(STDERR_TAIL_BYTES);
    while !stderr.is_char_boundary(at) {
        at += 1;
    }
    &stderr[at..]
}
