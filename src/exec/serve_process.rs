//! One long-lived [`Serve`](super::Serve) process: started, handed one job at a time as a
//! JSON line, its answer read, and stopped. All I/O with it is non-blocking and starts under
//! the job's watch, so a process that does not read its input, or leaves a `setsid` child
//! holding its stdout, is stopped at the job's deadline and gives its slot back.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsFd;
use std::process::{Child, ChildStdin, ChildStdout};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

use super::command_io::LEFTOVER_WAIT;
use super::outcome::{self, clip, STDERR_TAIL_BYTES};
use super::pipes::{
    printable, set_nonblocking, wait_one, write_some, Dir, Io, Line, LineReader, POLL_TICK,
};
use super::process::{group_is_empty, signal_group, watchdog, Program, Watch};
use super::serve_cancel::JobStop;
use super::{deadline_ms, MAX_STDOUT_BYTES};
use crate::handler::JobContext;
use crate::handler::JobError;

/// The longest answer line read (2 MiB, room for a result of [`MAX_STDOUT_BYTES`] and the
/// answer's other fields). A longer line is never read whole: the job's attempt fails with
/// an error naming this limit and the process is replaced.
pub const MAX_ANSWER_BYTES: usize = 2 << 20;

/// The longest stderr line logged (8 KiB); the rest of a longer one is dropped.
const MAX_STDERR_LINE: usize = 8 * 1024;

/// Lines that are not answers (stray prints on stdout, second answers) are logged at most
/// once per this interval per process, with a count of the ones not logged.
const NOTE_INTERVAL: Duration = Duration::from_secs(10);

/// How many of its latest jobs a process is remembered to have had: a second answer for
/// one of them is dropped, not taken as a broken protocol.
const RECENT_JOBS: usize = 16;

/// A running process and our ends of its pipes.
#[derive(Debug)]
pub(crate) struct Process {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: LineReader<ChildStdout>,
    /// What it wrote on stderr during its current job (the logger thread fills it).
    stderr: Arc<Mutex<Tail>>,
    /// Disconnected once the logger thread has read stderr to its end.
    stderr_done: crossbeam_channel::Receiver<()>,
    /// Its latest jobs, oldest first.
    recent: VecDeque<i64>,
    stray: Throttle,
    late: Throttle,
    /// Counts the process as running until it is reaped.
    alive: Alive,
    /// Its command line, for logs.
    shown: Arc<str>,
}

/// What became of a job handed to a process.
pub(crate) enum Answer {
    Done(Result<Option<Value>, JobError>),
    /// Answered, but the process is being stopped: it takes no other job.
    DoneByStopped(Result<Option<Value>, JobError>),
    /// The job never reached the process (it had ended): another process may take it.
    NotSent(String),
    /// The process can no longer be trusted with a job: it is stopped.
    Broken(String),
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
    payload: &'a Value,
}

impl Process {
    /// Starts `program` with a thread that logs its stderr.
    pub(crate) fn start(program: &Program) -> Result<Process, JobError> {
        let shown = program.shown();
        let mut child = program
            .spawn(&[])
            .map_err(|e| JobError::retry(format!("cannot start {shown}: {e}")))?;
        let pid = child.id();
        let fail = |child: &mut Child, why: String| {
            signal_group(pid, Signal::SIGKILL);
            let _ = child.wait();
            JobError::retry(why)
        };
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(fail(&mut child, "a started process has no pipes".into()));
        };
        if let Err(e) =
            set_nonblocking(stdin.as_fd()).and_then(|()| set_nonblocking(stdout.as_fd()))
        {
            return Err(fail(&mut child, format!("cannot set up its pipes: {e}")));
        }
        let tail = Arc::new(Mutex::new(Tail::default()));
        let tail_writer = Arc::clone(&tail);
        let logged = shown.clone();
        let (done, stderr_done) = crossbeam_channel::bounded::<()>(0);
        let logger = std::thread::Builder::new()
            .name("litejobs-serve-err".into())
            .spawn(move || {
                log_stderr(BufReader::new(stderr), &tail_writer, &logged, pid);
                drop(done);
            });
        if let Err(e) = logger {
            return Err(fail(
                &mut child,
                format!("cannot start a reader thread: {e}"),
            ));
        }
        log::info!("litejobs: started {shown} (pid {pid})");
        let shown: Arc<str> = shown.into();
        Ok(Process {
            child,
            stdin: Some(stdin),
            stdout: LineReader::new(stdout, MAX_ANSWER_BYTES),
            stderr: tail,
            stderr_done,
            recent: VecDeque::with_capacity(RECENT_JOBS + 1),
            stray: Throttle::default(),
            late: Throttle::default(),
            alive: Alive::new(),
            shown,
        })
    }

    /// What it wrote on stderr during its current job (its last 1.5 KiB), as its logger
    /// thread has read it so far.
    pub(crate) fn job_stderr(&self) -> String {
        self.stderr.lock().map(|t| t.text()).unwrap_or_default()
    }

    /// Its process id (and process group).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// True when it has exited (reaped: its status is kept).
    pub(crate) fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Hands it the job of `ctx` and reads its answer, all under a watch that stops its
    /// process group at the job's deadline (or when the worker stops).
    pub(crate) fn run_job(&mut self, ctx: &JobContext, kill_grace: Duration) -> Answer {
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
        let pid = self.pid();
        let shown = Arc::clone(&self.shown);
        let shown = &*shown;
        // Not the context's own stop flag: a cancel is passed on before the group is stopped.
        let mut stop = JobStop::new(kill_grace);
        let watch = watchdog().watch(pid, stop.flag(), Some(ctx.run_until()), kill_grace);
        if let Ok(mut tail) = self.stderr.lock() {
            tail.clear();
        }
        if let Some(answer) = self.send(line.as_bytes(), &watch, ctx, &mut stop) {
            return answer;
        }
        self.recent.push_back(ctx.id());
        if self.recent.len() > RECENT_JOBS {
            self.recent.pop_front();
        }
        let mut exited = false;
        // Right after the job is sent its answer is rarely there yet: wait, then read.
        let mut readable = false;
        loop {
            let text = match self.stdout.next_line(readable) {
                Line::Text(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Line::TooLong => {
                    return Answer::Broken(format!(
                        "answer line over {MAX_ANSWER_BYTES} bytes (the longest answer line \
                         read)"
                    ))
                }
                Line::Closed => return Answer::Broken(ended_why(&watch, &stop, kill_grace)),
                Line::Pending if exited => {
                    return Answer::Broken(ended_why(&watch, &stop, kill_grace))
                }
                Line::Pending => {
                    stop.check(ctx, self.stdin.as_mut());
                    readable = wait_one(self.stdout.fd(), Dir::Read, POLL_TICK);
                    // Nothing to read: a process that ended while a child of its own holds
                    // its stdout is noticed here; what it wrote before is read first.
                    exited = !readable && self.has_exited();
                    readable |= exited;
                    continue;
                }
            };
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            if !text.starts_with('{') {
                // Stray prints are not answers: say where they belong, keep waiting.
                if let Some(more) = self.stray.allow() {
                    log::warn!(
                        "litejobs: {shown} (pid {pid}) printed a line that is not JSON on \
                         stdout (use stderr for logs){}: {}",
                        not_logged(more),
                        printable(&clip(text))
                    );
                }
                continue;
            }
            match self.judge(text, ctx.id()) {
                Judged::Mine(answer) => {
                    let outcome = match outcome::from_answer(&answer) {
                        Ok(outcome) => bounded_result(outcome, ctx, shown),
                        Err(why) => return Answer::Broken(why),
                    };
                    // An answer that came as the watchdog was stopping the process: the job
                    // is done, the process is not trusted with another. Nor is one told of
                    // a cancel that did not answer `cancel`: the line may still wait unread
                    // in its input, and a program that does not know it would take it for a
                    // job.
                    let unread_cancel = stop.told()
                        && answer.get("outcome").and_then(Value::as_str) != Some("cancel");
                    return if watch.stopped().is_some() || unread_cancel {
                        Answer::DoneByStopped(outcome)
                    } else {
                        Answer::Done(outcome)
                    };
                }
                Judged::Again(id) => {
                    if let Some(more) = self.late.allow() {
                        log::warn!(
                            "litejobs: {shown} (pid {pid}) answered job {id} again; a job \
                             takes one answer, the extra one is dropped{}",
                            not_logged(more)
                        );
                    }
                }
                Judged::Broken(why) => return Answer::Broken(why),
            }
        }
    }

    /// Writes `line` to its stdin without ever blocking past the watch; `None` once all of
    /// it is written.
    fn send(
        &mut self,
        line: &[u8],
        watch: &Watch,
        ctx: &JobContext,
        stop: &mut JobStop,
    ) -> Option<Answer> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Some(Answer::NotSent("its stdin is closed".into()));
        };
        let mut sent = 0;
        let cut_short = |sent: usize, why: String| {
            if sent == 0 {
                Answer::NotSent(format!("cannot send the job: {why}"))
            } else {
                Answer::Broken(format!("{why}, while reading its job"))
            }
        };
        loop {
            match write_some(stdin, &line[sent..]) {
                Io::Moved(n) => {
                    sent += n;
                    if sent == line.len() {
                        return None;
                    }
                    continue;
                }
                Io::Closed => {
                    return Some(match watch.stopped() {
                        Some(why) => Answer::Broken(format!("{why}, before it read its job")),
                        None => cut_short(sent, "the process exited".into()),
                    })
                }
                Io::Pending => {}
            }
            // A process that does not read its input is stopped like one that does not
            // answer: the deadline holds while the job is written.
            if let Some(why) = watch.stopped() {
                return Some(Answer::Broken(format!("{why}, before it read its job")));
            }
            if matches!(self.child.try_wait(), Ok(Some(_)) | Err(_)) {
                return Some(cut_short(sent, "the process exited".into()));
            }
            // A job cancelled before the process read it is not passed on as a line in the
            // middle of its job's: the process is stopped.
            if let Some(text) = ctx.cancelled() {
                return Some(Answer::Broken(format!(
                    "the job was {text} before the process read it"
                )));
            }
            stop.check(ctx, None);
            wait_one(stdin.as_fd(), Dir::Write, POLL_TICK);
        }
    }

    /// Whose answer `text` is.
    fn judge(&self, text: &str, job: i64) -> Judged {
        let answer: Value = match serde_json::from_str(text) {
            Ok(answer) => answer,
            Err(e) => return Judged::Broken(format!("answer is not JSON ({e}): {}", clip(text))),
        };
        match answer.get("id") {
            None | Some(Value::Null) => Judged::Broken(format!("answer has no id: {}", clip(text))),
            Some(id) => match id.as_i64() {
                Some(id) if id == job => Judged::Mine(answer),
                Some(id) if self.recent.contains(&id) => Judged::Again(id),
                _ => Judged::Broken(format!("answer for another job: {}", clip(text))),
            },
        }
    }

    /// Closes its stdin: a well-behaved process exits at the end of its input.
    pub(crate) fn close_input(&mut self) {
        self.stdin = None;
    }

    /// Stops it for good (see [`stop`]) after `patience` to exit by itself, and reaps it.
    pub(crate) fn retire(mut self, patience: Duration, grace: Duration) -> Ended {
        self.stdin = None;
        let pid = self.pid();
        let shown = &self.shown;
        for (throttle, what) in [
            (&self.stray, "lines that are not JSON on stdout"),
            (&self.late, "extra answers"),
        ] {
            if throttle.skipped > 0 {
                log::warn!(
                    "litejobs: {shown} (pid {pid}): {} more {what} were not logged",
                    throttle.skipped
                );
            }
        }
        let Process {
            mut child,
            stdout,
            stderr,
            stderr_done,
            alive,
            ..
        } = self;
        drop(stdout);
        let how = stop(&mut child, patience, grace);
        drop(alive);
        // Its last words on stderr belong in the error; a child of its own still holding
        // stderr (a `setsid` daemon) is not waited for long.
        let _ = stderr_done.recv_timeout(LEFTOVER_WAIT);
        let stderr = stderr.lock().map(|t| t.text()).unwrap_or_default();
        Ended { pid, how, stderr }
    }
}

/// Whose answer a line is.
enum Judged {
    Mine(Value),
    /// A second answer for one of the process's earlier jobs.
    Again(i64),
    Broken(String),
}

/// Why a process stopped answering: it did not end a cancelled job in time, the watchdog
/// stopped it, or it ended.
fn ended_why(watch: &Watch, stop: &JobStop, kill_grace: Duration) -> String {
    if stop.told() && watch.stopped().is_some() {
        return format!(
            "did not end its cancelled job within the kill grace of {} ms",
            kill_grace.as_millis()
        );
    }
    watch
        .stopped()
        .map(str::to_string)
        .unwrap_or_else(|| "the process exited mid-job".to_string())
}

/// A result larger than `--exec`'s ([`MAX_STDOUT_BYTES`]) is not kept, as there.
fn bounded_result(
    outcome: Result<Option<Value>, JobError>,
    ctx: &JobContext,
    shown: &str,
) -> Result<Option<Value>, JobError> {
    match outcome {
        Ok(Some(result)) if json_size(&result) > MAX_STDOUT_BYTES => {
            log::warn!(
                "litejobs: job {} ({}): {shown} answered with a result over \
                 {MAX_STDOUT_BYTES} bytes, which is not kept",
                ctx.id(),
                ctx.job_type()
            );
            Ok(None)
        }
        other => other,
    }
}

/// The size of `value` as stored (compact JSON), counted without building the text.
fn json_size(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Lets a kind of log line through at most once per [`NOTE_INTERVAL`].
#[derive(Debug, Default)]
struct Throttle {
    last: Option<Instant>,
    skipped: u64,
}

impl Throttle {
    /// `Some(lines skipped since the last one logged)` when this one may be logged.
    fn allow(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.last.is_some_and(|at| now < at + NOTE_INTERVAL) {
            self.skipped += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.skipped))
    }
}

fn not_logged(skipped: u64) -> String {
    if skipped == 0 {
        String::new()
    } else {
        format!(" ({skipped} more since the last one logged)")
    }
}

/// How a stopped process ended, for the attempt's error. Its pid is only logged: equal
/// failures keep equal errors, which group in `litejobs stats`.
pub(crate) struct Ended {
    pub(crate) pid: u32,
    pub(crate) how: String,
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
/// SIGTERM, and SIGKILL `grace` later. Processes of its group outliving it (a shell
/// wrapper's child cleaning up) get the same grace before the SIGKILL. Says how it ended.
fn stop(child: &mut Child, patience: Duration, grace: Duration) -> String {
    let pid = child.id();
    let term_at = Instant::now() + patience;
    let end = term_at + grace;
    let mut termed = false;
    let mut status = None;
    loop {
        if status.is_none() {
            match child.try_wait() {
                Ok(Some(s)) => status = Some(s),
                Ok(None) => {}
                Err(_) => break,
            }
        }
        if status.is_some() && group_is_empty(pid) {
            break;
        }
        let now = Instant::now();
        if now >= end {
            signal_group(pid, Signal::SIGKILL);
            if status.is_none() {
                status = child.wait().ok();
            }
            break;
        }
        if !termed && now >= term_at {
            signal_group(pid, Signal::SIGTERM);
            termed = true;
        }
        // Polled: std's Child has no wait with a timeout, and a group none.
        std::thread::sleep(Duration::from_millis(5));
    }
    match status {
        Some(s) => format!("process {s}"),
        None => "process state unknown".to_string(),
    }
}

/// Logs a process's stderr line by line (its own logging, control characters escaped) and
/// keeps the lines of its current job for the error of an attempt it breaks.
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
        log::info!("{shown} (pid {pid}): {}", printable(&text));
        if let Ok(mut tail) = tail.lock() {
            tail.push(&text);
        }
    }
}

/// The last [`STDERR_TAIL_BYTES`] of what a process wrote on stderr during its current job.
#[derive(Debug, Default)]
pub(crate) struct Tail {
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

    fn clear(&mut self) {
        self.text.clear();
    }

    fn text(&self) -> String {
        self.text.clone()
    }
}

/// Serve processes started and not yet reaped, in this whole program: `litejobs work` must
/// not exit before they are gone, whichever thread stops them (a pool dropped by the last
/// handler thread that held it stops its idle processes on that thread).
static ALIVE: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// One process in [`ALIVE`] for as long as this lives.
#[derive(Debug)]
pub(crate) struct Alive;

impl Alive {
    pub(crate) fn new() -> Alive {
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

/// Waits until every serve process started here has been reaped, at most until `end`;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_lets_one_line_through_per_interval_and_counts_the_rest() {
        let mut throttle = Throttle::default();
        assert_eq!(throttle.allow(), Some(0));
        assert_eq!(throttle.allow(), None);
        assert_eq!(throttle.allow(), None);
        throttle.last = throttle.last.and_then(|at| at.checked_sub(NOTE_INTERVAL));
        assert_eq!(throttle.allow(), Some(2));
    }

    #[test]
    fn result_sizes_are_counted_as_stored() {
        let value = serde_json::json!({"a": [1, 2], "b": "é"});
        assert_eq!(json_size(&value), value.to_string().len());
    }
}
