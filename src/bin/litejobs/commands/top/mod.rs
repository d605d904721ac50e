//! `litejobs top`: a live view of the queues in the terminal, for a machine reached over SSH
//! with no browser at hand.
//!
//! Two threads. The reading thread owns the [`Queue`]: every interval it asks a
//! [`WriteWatch`](litejobs::WriteWatch) whether anything was written, and reads a new
//! [`Snapshot`] only then (or every [`FULL_READ_EVERY`], for what changes with time alone:
//! a delayed job coming due, the minutes sliding), else moves the old one's ages on; never
//! more often than a read takes, so a big database costs at most half a core. It carries out
//! what the keys ask (pause, retry, cancel, requeue), each followed by a fresh read. The screen's thread only draws and reads keys, so a slow or unreachable
//! database never freezes it, and a key, SIGTERM or SIGHUP ends it at once.
//!
//! ```text
//!   keys ──▶ App::on_key ──Request──▶ reading thread ──▶ Queue (SQLite or PostgreSQL)
//!                ▲                          │
//!   draw ◀── App ◀──── Reply (Snapshot, outcome) ◀┘
//! ```
//!
//! The terminal is restored on every way out: a key, a signal, an error (by [`Restore`]'s
//! drop) and a panic (by the hook ratatui installs before the first frame).

mod app;
mod detail;
mod snapshot;
mod view;

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use litejobs::redact::Redactor;
use litejobs::{JobFilter, Queue};
use ratatui::crossterm::event::{self, Event, KeyEventKind};
use ratatui::DefaultTerminal;

use app::{Action, App, Request, Requeue, Step};
use snapshot::Snapshot;

use super::{CliError, Ctx, Exit};
use crate::args::TopArgs;

/// How long the screen's thread waits for a key before it looks for a new snapshot: the
/// most a snapshot waits to be drawn.
const TICK: Duration = Duration::from_millis(100);

/// With nothing written, the figures are read again this often all the same: for what
/// changes with time alone.
const FULL_READ_EVERY: Duration = Duration::from_secs(10);

/// What the reading thread sends back.
enum Reply {
    Snapshot(Box<Result<Snapshot, String>>),
    /// Nothing was written: the last snapshot holds, its ages as of this time (ms).
    Aged(i64),
    Done(Result<String, String>),
    Count(Requeue, Result<usize, String>),
    Detail(i64, Result<Vec<String>, String>),
}

/// Runs the screen until a key, SIGINT, SIGTERM or SIGHUP ends it.
pub fn run(ctx: &Ctx, args: &TopArgs, _out: &mut dyn Write) -> Result<Exit, CliError> {
    if ctx.json {
        return Err(CliError::new(
            "top draws a screen and has no --json: `litejobs stats --json` gives its figures",
        ));
    }
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(CliError::new(
            "top needs a terminal to draw on: for a script or a pipe, use `litejobs stats`",
        ));
    }
    let queue = match ctx.open_existing() {
        Err(e) if e.is_read_only() => ctx.open_read_only()?,
        other => other?,
    };
    let mut app = App::new(ctx.shown_db()?, queue.is_read_only());
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))
        .map_err(|e| CliError::new(format!("cannot handle SIGTERM: {e}")))?;

    let (requests, requests_rx) = crossbeam_channel::unbounded();
    let (replies_tx, replies) = crossbeam_channel::unbounded();
    let by = crate::args::who(None);
    let interval = args.interval;
    let redactor = ctx.redactor.clone();
    std::thread::Builder::new()
        .name("litejobs-top-reader".into())
        .spawn(move || {
            let reader = Reader {
                queue: &queue,
                by: &by,
                redactor: &redactor,
            };
            read_loop(&reader, interval, &requests_rx, &replies_tx);
        })
        .map_err(|e| CliError::new(format!("cannot start the reading thread: {e}")))?;

    let watched = Arc::clone(&stop);
    std::thread::Builder::new()
        .name("litejobs-top-guard".into())
        .spawn(move || guard(&watched))
        .map_err(|e| CliError::new(format!("cannot start the guard thread: {e}")))?;

    let mut terminal = ratatui::try_init()?;
    let _restore = Restore;
    screen_loop(&mut terminal, &mut app, &replies, &requests, &stop)?;
    Ok(Exit::Ok)
}

/// Leaves raw mode and the alternate screen when dropped.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

fn screen_loop(
    terminal: &mut DefaultTerminal,
    app: &mut App,
    replies: &Receiver<Reply>,
    requests: &Sender<Request>,
    stop: &AtomicBool,
) -> Result<(), CliError> {
    let mut dirty = true;
    while !stop.load(Ordering::SeqCst) {
        loop {
            match replies.try_recv() {
                Ok(Reply::Snapshot(read)) => app.on_snapshot(*read),
                Ok(Reply::Aged(now)) => app.on_aged(now),
                Ok(Reply::Done(outcome)) => app.on_done(outcome),
                Ok(Reply::Count(what, count)) => app.on_count(what, count),
                Ok(Reply::Detail(id, detail)) => app.on_detail(id, detail),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    return Err(CliError::new("top's reading thread stopped"))
                }
            }
            dirty = true;
        }
        if dirty {
            let size = terminal.size()?;
            app.too_small = view::too_small(size.width, size.height);
            terminal.draw(|frame| view::draw(frame, app))?;
            dirty = false;
        }
        if !event::poll(TICK)? {
            continue;
        }
        match event::read()? {
            Event::Key(key) if key.kind == KeyEventKind::Press => match app.on_key(key) {
                Step::Quit => return Ok(()),
                Step::Send(request) => {
                    if !matches!(request, Request::Show(_)) {
                        app.on_done(Ok("working…".to_string()));
                    }
                    if requests.send(request).is_err() {
                        return Err(CliError::new("top's reading thread stopped"));
                    }
                }
                Step::Redraw => {}
            },
            Event::Resize(..) => terminal.autoresize()?,
            _ => {}
        }
        dirty = true;
    }
    Ok(())
}

/// How often the guard looks; how long a signal leaves the screen to end by itself.
const GUARD_TICK: Duration = Duration::from_millis(200);
const SIGNAL_GRACE: Duration = Duration::from_secs(1);

/// Ends the process when the screen's thread cannot. crossterm's key reader spins inside
/// `poll` once the terminal hangs up (a closed SSH session, a killed tmux): it reads
/// end-of-file again and again and never returns, so neither the screen's loop nor the flag
/// SIGHUP or SIGTERM set would be seen. So: no terminal on stdin any more, the process ends
/// (there is nothing left to restore); a signal not obeyed within [`SIGNAL_GRACE`], the
/// terminal is restored and the process ends.
fn guard(stop: &AtomicBool) {
    let mut asked: Option<Instant> = None;
    loop {
        std::thread::sleep(GUARD_TICK);
        if !std::io::stdin().is_terminal() {
            std::process::exit(0);
        }
        if stop.load(Ordering::SeqCst)
            && asked.get_or_insert_with(Instant::now).elapsed() >= SIGNAL_GRACE
        {
            ratatui::restore();
            std::process::exit(0);
        }
    }
}

/// What the reading thread works with: the queue, who acts, what is masked.
struct Reader<'a> {
    queue: &'a Queue,
    by: &'a str,
    redactor: &'a Redactor,
}

/// The reading thread: a snapshot every `interval`, and whatever the keys ask in between.
fn read_loop(
    reader: &Reader,
    interval: Duration,
    requests: &Receiver<Request>,
    replies: &Sender<Reply>,
) {
    let Reader {
        queue,
        by,
        redactor,
    } = *reader;
    // Without a watch (it could not be made), every interval reads.
    let mut watch = queue.watch_writes().ok();
    let mut last_read: Option<(Instant, i64)> = None;
    loop {
        let started = Instant::now();
        let now = queue.now_ms();
        // Asked every time, so that a write is not seen twice.
        let written = watch.as_mut().is_none_or(|w| w.changed().unwrap_or(true));
        let reply = match last_read {
            Some((at, at_ms))
                if !written
                    && at.elapsed() < FULL_READ_EVERY
                    && at_ms.div_euclid(60_000) == now.div_euclid(60_000) =>
            {
                Reply::Aged(now)
            }
            _ => {
                let read = Snapshot::read(queue).map_err(|e| e.to_string());
                last_read = match &read {
                    Ok(s) => Some((started, s.at_ms)),
                    Err(_) => None,
                };
                Reply::Snapshot(Box::new(read))
            }
        };
        if replies.send(reply).is_err() {
            return;
        }
        let took = started.elapsed();
        let reply = match requests.recv_timeout(interval.saturating_sub(took).max(took)) {
            Ok(Request::Act(action)) => Reply::Done(carry_out(queue, by, &action)),
            Ok(Request::Show(id)) => Reply::Detail(id, detail::lines(queue, redactor, id)),
            Ok(Request::CountRequeue(what)) => {
                let count = queue
                    .requeue_dead_where_dry_run(&filter(&what))
                    .map(|ids| ids.len())
                    .map_err(|e| e.to_string());
                Reply::Count(what, count)
            }
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if replies.send(reply).is_err() {
            return;
        }
    }
}

/// The dead jobs a bulk requeue takes.
fn filter(what: &Requeue) -> JobFilter {
    match what {
        Requeue::Queue(queue) => JobFilter::new().queue(queue),
        Requeue::Type { queue, job_type } => JobFilter::new().queue(queue).job_type(job_type),
        Requeue::Group { group, .. } => JobFilter::new().error_group(group),
    }
}

/// Does what a key asked; says what happened.
fn carry_out(queue: &Queue, by: &str, action: &Action) -> Result<String, String> {
    const REASON: &str = "from litejobs top";
    let done = match action {
        Action::Pause(name) => queue
            .pause_queue(name)
            .map(|()| format!("queue {name} paused: no worker claims its jobs")),
        Action::Resume(name) => queue
            .resume_queue(name)
            .map(|()| format!("queue {name} resumed")),
        Action::Retry(id) => queue
            .retry_now(*id)
            .map(|()| format!("job {id} is due now")),
        Action::Cancel(id) => queue
            .cancel_as(*id, by, REASON)
            .map(|()| format!("job {id} cancelled")),
        Action::Requeue(what) => queue
            .requeue_dead_where(&filter(what), by, REASON)
            .map(|pairs| format!("{} {} requeued", pairs.len(), what.describe())),
    };
    done.map_err(|e| e.to_string())
}
