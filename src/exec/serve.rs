//! [`Serve`]: a handler that keeps long-lived processes and hands them jobs as JSON lines
//! (the protocol is in `docs/serve-protocol.md` and [`super`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::process::Program;
use super::serve_pool::Pool;
use super::serve_process::{Answer, Process};
use super::{parse_command_line, slot_wait_until, DEFAULT_KILL_GRACE, NO_SLOT_SNOOZE};
use crate::handler::JobContext;
use crate::handler::{Handler, JobError};

/// A handler that keeps `processes` copies of a program running and sends each one job at a
/// time: one JSON line in (`{"id", "type", "queue", "attempt", "max_attempts",
/// "deadline_ms", "payload"}`), one JSON line out (`{"id", "outcome": "ok" | "retry" |
/// "permanent" | "snooze" | "cancel", "result", "error", "delay"}`).
///
/// A process that exits, breaks the protocol, or does not read its job or answer before the
/// job's deadline is stopped (its whole process group: SIGTERM, then SIGKILL after the kill grace), the
/// job's attempt fails (it is retried by its policy) and the next job starts a fresh
/// process. A job is given to one process only, and only after the process that had the
/// previous attempt is stopped.
///
/// ```no_run
/// use litejobs::exec::Serve;
/// use litejobs::{Queue, Worker};
/// # fn main() -> litejobs::Result<()> {
/// let queue = Queue::open("app.db")?;
/// let worker = Worker::builder(&queue)
///     .handler("thumbnail", Serve::parse("python3 examples/serve_worker.py")?.processes(4))
///     .concurrency(4)
///     .start()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Serve {
    program: Program,
    kill_grace: Duration,
    processes: usize,
    pool: Arc<Pool>,
}

impl Serve {
    /// Runs `program` (looked up in `PATH` when it has no `/`) with no arguments.
    pub fn new(program: impl Into<String>) -> Serve {
        Serve::from_program(Program {
            program: program.into(),
            args: Vec::new(),
            envs: Vec::new(),
            dir: None,
        })
    }

    /// A command line as written in a shell (see [`super::Command::parse`]).
    ///
    /// # Errors
    /// As [`super::Command::parse`].
    pub fn parse(line: &str) -> crate::Result<Serve> {
        let (program, args) = parse_command_line(line)?;
        Ok(Serve::new(program).args(args))
    }

    fn from_program(program: Program) -> Serve {
        Serve {
            program,
            kill_grace: DEFAULT_KILL_GRACE,
            processes: 1,
            pool: Pool::shared(1, DEFAULT_KILL_GRACE),
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Serve
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.program.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for the processes.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Serve {
        self.program.envs.push((name.into(), value.into()));
        self
    }

    /// The directory the processes run in.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Serve {
        self.program.dir = Some(dir.into());
        self
    }

    /// How many processes to keep (default 1, at least 1). Each runs one job at a time; a
    /// job waits on its handler thread for a free process, so give the worker at least as
    /// many handler threads.
    pub fn processes(mut self, processes: usize) -> Serve {
        self.processes = processes.max(1);
        self.pool = Pool::shared(self.processes, self.kill_grace);
        self
    }

    /// How long a stopped process group has between SIGTERM and SIGKILL. Defaults to
    /// [`DEFAULT_KILL_GRACE`].
    pub fn kill_grace(mut self, grace: Duration) -> Serve {
        self.kill_grace = grace;
        self.pool = Pool::shared(self.processes, grace);
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

    /// Takes an idle process (or starts one), waiting while all are busy.
    fn take(&self, ctx: &JobContext) -> Result<Process, JobError> {
        let until = slot_wait_until(ctx);
        match self
            .pool
            .take
            .recv_timeout(until.saturating_duration_since(Instant::now()))
        {
            Ok(Some(mut process)) => {
                if !process.has_exited() {
                    return Ok(process);
                }
                // It exited while idle: no job was lost with it, a new one takes this job.
                let ended = process.retire(Duration::ZERO, self.kill_grace);
                log::warn!(
                    "litejobs: {} (pid {}) ended while idle: {ended}",
                    self.shown(),
                    ended.pid
                );
                self.start_in_slot()
            }
            Ok(None) => self.start_in_slot(),
            // All busy: back to the queue, attempt not spent.
            Err(_) => Err(JobError::snooze(NO_SLOT_SNOOZE)),
        }
    }

    /// Starts a process for a free slot; on failure the slot stays free.
    fn start_in_slot(&self) -> Result<Process, JobError> {
        Process::start(&self.program).inspect_err(|_| {
            let _ = self.pool.give.send(None);
        })
    }
}

impl Handler for Serve {
    fn run(&self, ctx: &JobContext) -> Result<(), JobError> {
        let mut process = self.take(ctx)?;
        let mut answer = process.run_job(ctx, self.kill_grace);
        if let Answer::NotSent(why) = &answer {
            // The process ended before it could read the job: nothing ran, so a fresh
            // process takes it, once.
            let ended = process.retire(Duration::ZERO, self.kill_grace);
            log::warn!(
                "litejobs: {} (pid {}) {why}; {ended}",
                self.shown(),
                ended.pid
            );
            process = self.start_in_slot()?;
            answer = process.run_job(ctx, self.kill_grace);
        }
        // Its stderr during the job is the attempt's log.
        ctx.log_line(process.job_stderr());
        let outcome = match answer {
            Answer::Done(outcome) => {
                let _ = self.pool.give.send(Some(process));
                outcome
            }
            Answer::DoneByStopped(outcome) => {
                process.retire(Duration::ZERO, self.kill_grace);
                let _ = self.pool.give.send(None);
                outcome
            }
            Answer::Broken(why) | Answer::NotSent(why) => {
                let ended = process.retire(Duration::ZERO, self.kill_grace);
                let _ = self.pool.give.send(None);
                // The pid only in the log: the stored error of equal failures is equal, so
                // they group in `stats`.
                log::warn!(
                    "litejobs: job {} ({}): {} (pid {}) replaced: {why}; {}",
                    ctx.id(),
                    ctx.job_type(),
                    self.shown(),
                    ended.pid,
                    ended.how
                );
                return Err(JobError::retry(format!("{why}; {ended}")));
            }
        };
        if let Some(result) = outcome? {
            ctx.set_result(result);
        }
        Ok(())
    }
}
