//! [`Serve`]: a handler that keeps long-lived processes and hands them jobs as JSON lines
//! (the protocol is in `docs/serve-protocol.md` and [`super`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use nix::sys::signal::Signal;

use super::outcome::{self, STDERR_TAIL_BYTES};
use super::process::{signal_group, watchdog, Program};
use super::{deadline_ms, parse_command_line, slot_wait_until, DEFAULT_KILL_GRACE, NO_SLOT_SNOOZE};
use crate::context::JobContext;
use crate::handler::{Handler, JobError};

/// The longest answer line read (16 MiB): a longer one breaks the protocol.
pub const MAX_ANSWER_BYTES: usize = 16 << 20;

/// The longest stderr line logged (8 KiB); the rest of a longer one is dropped.
const MAX_STDERR_LINE: usize = 8 * 1024;

/// A handler that keeps `processes` copies of a program running and sends each one job at a
/// time: one JSON line in (`{"id", "type", "queue", "attempt", "max_attempts",
/// "deadline_ms", "payload"}`), one JSON line out (`{"id", "outcome": "ok" | "retry" |
/// "permanent" | "snooze" | "cancel", "result", "error", "delay"}`).
///
/// A process that exits, breaks the protocol or does not answer before the job's deadline
/// is stopped (its whole process group: SIGTERM, then SIGKILL after the kill grace), the
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

/// Idle processes wait in the channel; a `None` is a slot whose process is not started yet
/// (or was stopped).
#[derive(Debug)]
struct Pool {
    take: Receiver<Option<Worker>>,
    give: Sender<Option<Worker>>,
    kill_grace: Duration,
}

impl Drop for Pool {
    fn drop(&mut self) {
        let workers: Vec<Worker> = self.take.try_iter().flatten().collect();
        stop_idle(workers, self.kill_grace);
    }
}

/// One running process.
#[derive(Debug)]
struct Worker {
    child: Child,
    stdin: ChildStdin,
    /// Read on the handler's thread: a process that stops answering is stopped by the
    /// watchdog, which closes this pipe.
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<Tail>>,
    /// Counts the process as running until it is waited for (or the worker dropped).
    alive: Alive,
}

/// Serve processes started and not yet waited for, in this whole program: `litejobs work`
/// must not exit before they are gone, whichever thread stops them (a pool dropped by the
/// last handler thread that held it stops its idle processes on that thread).
static ALIVE: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// One process in [`ALIVE`] for as long as this lives.
#[derive(Debug)]
struct Alive;

impl Alive {
    fn new() -> Alive {
        *ALIVE.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        Alive
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        let mut alive = ALIVE.0.lock().unwrap_or_else(|p| p.into_inner());
        *alive = alive.saturating_sub(1);
        ALIVE.1.notify_all();
    }
}

/// Waits until every serve process started here has been waited for, at most until `end`;
/// true when none is left.
pub(crate) fn wait_processes_gone(end: Instant) -> bool {
    let mut alive = ALIVE.0.lock().unwrap_or_else(|p| p.into_inner());
    while *alive > 0 {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        alive = ALIVE
            .1
            .wait_timeout(alive, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    true
}

/// One line read from a process's stdout.
enum Line {
    Text(String),
    TooLong,
    Closed,
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

    fn start(&self) -> Result<Worker, JobError> {
        let mut child = self
            .program
            .spawn(&[])
            .map_err(|e| JobError::retry(format!("cannot start {}: {e}", self.shown())))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(JobError::retry("a started process has no pipes"));
        };
        let pid = child.id();
        let tail = Arc::new(Mutex::new(Tail::default()));
        let tail_writer = Arc::clone(&tail);
        let shown = self.shown();
        let logger = std::thread::Builder::new()
            .name("litejobs-serve-err".into())
            .spawn(move || log_stderr(BufReader::new(stderr), &tail_writer, &shown, pid));
        if let Err(e) = logger {
            signal_group(pid, Signal::SIGKILL);
            let _ = child.wait();
            return Err(JobError::retry(format!(
                "cannot start a reader thread: {e}"
            )));
        }
        log::info!("litejobs: started {} (pid {pid})", self.shown());
        Ok(Worker {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            stderr: tail,
            alive: Alive::new(),
        })
    }

    /// Takes an idle process (or starts one), waiting while all are busy.
    fn take(&self, ctx: &JobContext) -> Result<Worker, JobError> {
        let until = slot_wait_until(ctx);
        match self
            .pool
            .take
            .recv_timeout(until.saturating_duration_since(Instant::now()))
        {
            Ok(Some(mut worker)) => match worker.child.try_wait() {
                // It exited while idle: no job was lost with it, a new one takes this job.
                Ok(None) => Ok(worker),
                _ => {
                    let ended = self.retire(worker);
                    log::warn!(
                        "litejobs: {} ({}) ended while idle: {ended}",
                        self.shown(),
                        ended.pid
                    );
                    self.start_in_slot()
                }
            },
            Ok(None) => self.start_in_slot(),
            // All busy: back to the queue, attempt not spent.
            Err(_) => Err(JobError::snooze(NO_SLOT_SNOOZE)),
        }
    }

    /// Starts a process for a free slot; on failure the slot stays free.
    fn start_in_slot(&self) -> Result<Worker, JobError> {
        self.start().inspect_err(|_| {
            let _ = self.pool.give.send(None);
        })
    }

    fn run_on(&self, worker: &mut Worker, ctx: &JobContext) -> Answer {
        let request = Request {
            id: ctx.id(),
            job_type: ctx.job_type(),
            queue: ctx.queue_name(),
            attempt: ctx.attempt(),
            max_attempts: ctx.max_attempts(),
            deadline_ms: deadline_ms(ctx),
            payload: ctx.payload(),
        };
        // Serialized from borrows: the payload is not copied into a new JSON value per job.
        let mut line = match serde_json::to_string(&request) {
            Ok(line) => line,
            Err(e) => return Answer::NotSent(format!("cannot write the job as JSON: {e}")),
        };
        line.push('\n');
        if let Err(e) = worker
            .stdin
            .write_all(line.as_bytes())
            .and_then(|()| worker.stdin.flush())
        {
            return Answer::NotSent(format!("cannot send the job: {e}"));
        }
        let pid = worker.child.id();
        let watch = watchdog().watch(pid, ctx.stop_flag(), Some(ctx.run_until()), self.kill_grace);
        loop {
            match read_line(&mut worker.stdout) {
                Line::Text(text) if !text.trim_start().starts_with('{') => {
                    // Stray prints are not answers: say where they belong, keep waiting.
                    log::warn!(
                        "litejobs: {} (pid {pid}) printed a line that is not JSON on stdout \
                         (use stderr for logs): {}",
                        self.shown(),
                        text.chars().take(200).collect::<String>()
                    );
                }
                Line::Text(text) => {
                    return match outcome::from_answer(&text, ctx.id()) {
                        // An answer that came as the watchdog was stopping the process: the
                        // job is done, the process is not trusted with another.
                        Ok(outcome) if watch.stopped().is_some() => Answer::DoneByStopped(outcome),
                        Ok(outcome) => Answer::Done(outcome),
                        Err(why) => Answer::Broken(why),
                    };
                }
                Line::TooLong => {
                    return Answer::Broken(format!("answer over {MAX_ANSWER_BYTES} bytes"))
                }
                Line::Closed => {
                    // stdout closed: the process ended or the watchdog stopped it.
                    let why = watch
                        .stopped()
                        .map(str::to_string)
                        .unwrap_or_else(|| "the process exited mid-job".to_string());
                    return Answer::Broken(why);
                }
            }
        }
    }
}

/// One job as the line a process reads (field names are the protocol's).
#[derive(serde::Serialize)]
struct Request<'a> {
    id: i64,
    #[serde(rename = "type")]
    job_type: &'a str,
    queue: &'a str,
    attempt: u32,
    max_attempts: u32,
    deadline_ms: i64,
    payload: &'a serde_json::Value,
}

enum Answer {
    Done(Result<Option<serde_json::Value>, JobError>),
    /// Answered, but the process is being stopped: it takes no other job.
    DoneByStopped(Result<Option<serde_json::Value>, JobError>),
    /// The job never reached the process (it had ended): another process may take it.
    NotSent(String),
    /// The process can no longer be trusted with a job: it is stopped.
    Broken(String),
}

/// Every live pool, so that the end of `litejobs work` can stop idle processes whose pool
/// an abandoned handler thread still holds.
static POOLS: Mutex<Vec<Weak<Pool>>> = Mutex::new(Vec::new());

/// Stops the idle processes of every live pool: stdin closed, then SIGTERM and SIGKILL
/// after their kill grace (`hard`: SIGKILL at once).
pub(crate) fn stop_idle_processes(hard: bool) {
    let pools: Vec<Arc<Pool>> = {
        let mut all = POOLS.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|weak| weak.strong_count() > 0);
        all.iter().filter_map(Weak::upgrade).collect()
    };
    for pool in pools {
        let workers: Vec<Worker> = pool.take.try_iter().flatten().collect();
        for _ in 0..workers.len() {
            let _ = pool.give.send(None);
        }
        if hard {
            for worker in &workers {
                signal_group(worker.child.id(), Signal::SIGKILL);
            }
        }
        stop_idle(workers, pool.kill_grace);
    }
}

impl Pool {
    fn shared(processes: usize, kill_grace: Duration) -> Arc<Pool> {
        let pool = Arc::new(Pool::new(processes, kill_grace));
        POOLS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(&pool));
        pool
    }

    fn new(processes: usize, kill_grace: Duration) -> Pool {
        let (give, take) = crossbeam_channel::bounded(processes);
        for _ in 0..processes {
            let _ = give.send(None);
        }
        Pool {
            take,
            give,
            kill_grace,
        }
    }
}

impl Handler for Serve {
    fn run(&self, ctx: &JobContext) -> Result<(), JobError> {
        let mut worker = self.take(ctx)?;
        let mut answer = self.run_on(&mut worker, ctx);
        if let Answer::NotSent(why) = &answer {
            // The process ended before it could read the job: nothing ran, so a fresh
            // process takes it, once.
            let ended = self.retire(worker);
            log::warn!("litejobs: {} {why}; {ended}", self.shown());
            worker = self.start_in_slot()?;
            answer = self.run_on(&mut worker, ctx);
        }
        let outcome = match answer {
            Answer::Done(outcome) => {
                let _ = self.pool.give.send(Some(worker));
                outcome
            }
            Answer::DoneByStopped(outcome) => {
                self.retire(worker);
                let _ = self.pool.give.send(None);
                outcome
            }
            Answer::Broken(why) | Answer::NotSent(why) => {
                let ended = self.retire(worker);
                let _ = self.pool.give.send(None);
                // The parts that vary (pid, stderr) last, so equal failures group in `stats`.
                return Err(JobError::retry(format!(
                    "{why}; {ended} ({}, pid {})",
                    self.shown(),
                    ended.pid
                )));
            }
        };
        if let Some(result) = outcome? {
            ctx.set_result(result);
        }
        Ok(())
    }
}

impl Serve {
    /// Stops a process that takes no more jobs (its slot is the caller's to give back).
    fn retire(&self, worker: Worker) -> Ended {
        let Worker {
            mut child,
            stdin,
            stdout,
            stderr,
            alive,
        } = worker;
        drop(stdin);
        drop(stdout);
        let ended = stop(&mut child, &stderr, Duration::ZERO, self.kill_grace);
        drop(alive);
        ended
    }
}

/// How a stopped process ended, for the attempt's error.
struct Ended {
    pid: u32,
    how: String,
    stderr: String,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; a new process takes the next job", self.how)?;
        if !self.stderr.trim().is_empty() {
            write!(f, "; stderr: {}", self.stderr.trim())?;
        }
        Ok(())
    }
}

/// Stops a process's group and reaps it: after `patience` (time to exit by itself)
/// SIGTERM, and SIGKILL `grace` later.
fn stop(child: &mut Child, stderr: &Mutex<Tail>, patience: Duration, grace: Duration) -> Ended {
    let pid = child.id();
    let term_at = Instant::now() + patience;
    let end = term_at + grace;
    let mut termed = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if !termed && Instant::now() >= term_at => {
                signal_group(pid, Signal::SIGTERM);
                termed = true;
            }
            Ok(None) if Instant::now() >= end => {
                signal_group(pid, Signal::SIGKILL);
                break child.wait().ok();
            }
            // Polled: std's Child has no wait with a timeout.
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => break None,
        }
    };
    // Whatever it left in its group goes too.
    signal_group(pid, Signal::SIGKILL);
    let how = match status {
        Some(s) => format!("process {s}"),
        None => "process state unknown".to_string(),
    };
    let stderr = stderr.lock().map(|t| t.text()).unwrap_or_default();
    Ended { pid, how, stderr }
}

/// Idle processes at the end: stdin closed (a well-behaved worker exits at the end of its
/// input), then stopped like a broken one if they linger.
fn stop_idle(workers: Vec<Worker>, grace: Duration) {
    let mut children = Vec::new();
    for worker in workers {
        drop(worker.stdin);
        drop(worker.stdout);
        children.push((worker.child, worker.stderr, worker.alive));
    }
    for (mut child, stderr, alive) in children {
        let ended = stop(&mut child, &stderr, grace, grace);
        log::info!("litejobs: {} (pid {})", ended.how, ended.pid);
        drop(alive);
    }
}

/// Reads the next non-empty line.
fn read_line(reader: &mut impl BufRead) -> Line {
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader
            .by_ref()
            .take(MAX_ANSWER_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
        {
            Ok(0) | Err(_) => return Line::Closed,
            Ok(_) if buf.len() > MAX_ANSWER_BYTES => return Line::TooLong,
            Ok(_) => {
                let text = String::from_utf8_lossy(&buf).trim_end().to_string();
                if !text.is_empty() {
                    return Line::Text(text);
                }
            }
        }
    }
}

/// Logs a process's stderr line by line (its own logging) and keeps the last lines for the
/// error of an attempt it breaks.
fn log_stderr(mut reader: impl BufRead, tail: &Mutex<Tail>, shown: &str, pid: u32) {
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader
            .by_ref()
            .take(MAX_STDERR_LINE as u64)
            .read_until(b'\n', &mut buf)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let complete = buf.ends_with(b"\n");
        let mut text = String::from_utf8_lossy(&buf).trim_end().to_string();
        if !complete && buf.len() >= MAX_STDERR_LINE {
            // The rest of an endless line is read and dropped, so memory stays bounded.
            let mut rest = Vec::new();
            loop {
                rest.clear();
                match reader
                    .by_ref()
                    .take(MAX_STDERR_LINE as u64)
                    .read_until(b'\n', &mut rest)
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) if rest.ends_with(b"\n") => break,
                    Ok(_) => {}
                }
            }
            text.push_str(" [line cut]");
        }
        log::info!("{shown} (pid {pid}): {text}");
        if let Ok(mut tail) = tail.lock() {
            tail.push(&text);
        }
    }
}

/// The last [`STDERR_TAIL_BYTES`] of a process's stderr.
#[derive(Debug, Default)]
struct Tail {
    text: String,
}

impl Tail {
    fn push(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
        if self.text.len() > STDERR_TAIL_BYTES {
            let mut cut = self.text.len() - STDERR_TAIL_BYTES;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.text.drain(..cut);
        }
    }

    fn text(&self) -> String {
        self.text.clone()
    }
}
