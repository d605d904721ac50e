//! A scripted handler and event waits for the worker-runtime tests.
//!
//! [`ScriptedHandler`] does, call by call, what the test scripted ([`Step`]s), records every
//! call, and tells the test when a call started. Tests never sleep: they wait on the queue's
//! events ([`wait_finished`] and friends), on handler signals, or on a [`Latch`] / a
//! [`Rendezvous`], always with a generous bound ([`WAIT`]) and a message naming what did
//! not happen.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use litejobs::{
    testing, AttemptRecord, Event, Handler, JobContext, JobError, JobRecord, JobStatus, Queue,
    Worker, WorkerBuilder,
};
use serde_json::Value;
use tempfile::TempDir;

use super::TestEnv;

/// The bound of every wait: far beyond anything a healthy run needs.
pub const WAIT: Duration = Duration::from_secs(30);

/// The bound for waiting on something that should happen: [`WAIT`], or
/// `LITEJOBS_TEST_WAIT_SECS` when set. scripts/mutants.sh sets it low, so that a mutant which
/// stops an event from ever coming fails its test in seconds instead of half a minute.
pub fn wait_bound() -> Duration {
    static BOUND: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *BOUND.get_or_init(|| {
        std::env::var("LITEJOBS_TEST_WAIT_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(WAIT, Duration::from_secs)
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------------
// Coordination
// ---------------------------------------------------------------------------------------

/// A gate that starts closed; [`Latch::open`] lets every waiter through, now and later.
#[derive(Clone, Default)]
pub struct Latch {
    inner: Arc<(Mutex<bool>, Condvar)>,
}

impl Latch {
    /// A closed latch.
    pub fn new() -> Latch {
        Latch::default()
    }

    /// Opens the latch for good.
    pub fn open(&self) {
        *lock(&self.inner.0) = true;
        self.inner.1.notify_all();
    }

    /// Waits until the latch is open, at most `within`; false when it stayed closed.
    pub fn wait(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let mut open = lock(&self.inner.0);
        while !*open {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            open = self
                .inner
                .1
                .wait_timeout(open, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// Opens the latch when the returned guard is dropped, so a failing test does not leave
    /// handler threads blocked. Declare it after the worker so it drops first.
    pub fn open_on_drop(&self) -> OpenOnDrop {
        OpenOnDrop(self.clone())
    }
}

/// Opens its latch when dropped.
pub struct OpenOnDrop(Latch);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// `n` parties meet: each [`arrive`](Rendezvous::arrive) returns true once all `n` arrived
/// (false if they did not within the bound). Proves that `n` handlers ran at the same time.
#[derive(Clone)]
pub struct Rendezvous {
    inner: Arc<(Mutex<usize>, Condvar)>,
    n: usize,
}

impl Rendezvous {
    /// A meeting of `n` parties.
    pub fn new(n: usize) -> Rendezvous {
        Rendezvous {
            inner: Arc::new((Mutex::new(0), Condvar::new())),
            n,
        }
    }

    /// Arrives and waits for the others, at most `within`.
    pub fn arrive(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let mut arrived = lock(&self.inner.0);
        *arrived += 1;
        self.inner.1.notify_all();
        while *arrived < self.n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            arrived = self
                .inner
                .1
                .wait_timeout(arrived, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }
}

/// Receives from a test channel, at most [`WAIT`]; panics naming `what` if nothing came.
pub fn recv<T>(rx: &Receiver<T>, what: &str) -> T {
    let bound = wait_bound();
    rx.recv_timeout(bound)
        .unwrap_or_else(|_| panic!("waited {bound:?} for {what}; it did not happen"))
}

/// Sends on its channel when dropped; kept in a thread-local, it reports the thread's end
/// (thread-local destructors run when a thread exits).
struct ExitSignal(Sender<()>);

impl Drop for ExitSignal {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

thread_local! {
    static ON_EXIT: std::cell::RefCell<Option<ExitSignal>> = const { std::cell::RefCell::new(None) };
}

/// Called from a handler: `tx` receives `()` when the calling thread ends. Shows that a
/// handler thread the worker gave up on (timeout, shutdown) ends once its handler returns,
/// after which nothing it could still write back is in flight.
pub fn signal_on_thread_exit(tx: Sender<()>) {
    ON_EXIT.with(|slot| *slot.borrow_mut() = Some(ExitSignal(tx)));
}

// ---------------------------------------------------------------------------------------
// The scripted handler
// ---------------------------------------------------------------------------------------

type Body = Arc<dyn Fn(&JobContext) -> Result<(), JobError> + Send + Sync>;

/// What one call of a [`ScriptedHandler`] does.
#[derive(Clone)]
pub enum Step {
    /// Returns `Ok(())`.
    Succeed,
    /// Stores the value with `ctx.set_result`, then returns `Ok(())`.
    SucceedWith(Value),
    /// Returns the error the closure makes.
    Fail(Arc<dyn Fn() -> JobError + Send + Sync>),
    /// Panics with this message (a `String` payload).
    Panic(String),
    /// Blocks until the latch opens (at most twice [`WAIT`]), then returns `Ok(())`.
    Block(Latch),
    /// Runs the closure.
    Run(Body),
}

impl Step {
    /// `JobError::retry(message)`.
    pub fn retry(message: &str) -> Step {
        let message = message.to_string();
        Step::fail(move || JobError::retry(message.clone()))
    }

    /// `JobError::permanent(message)`.
    pub fn permanent(message: &str) -> Step {
        let message = message.to_string();
        Step::fail(move || JobError::permanent(message.clone()))
    }

    /// Returns the error `make` builds (e.g. with a status code).
    pub fn fail(make: impl Fn() -> JobError + Send + Sync + 'static) -> Step {
        Step::Fail(Arc::new(make))
    }

    /// Runs `body` as the handler.
    pub fn run(body: impl Fn(&JobContext) -> Result<(), JobError> + Send + Sync + 'static) -> Step {
        Step::Run(Arc::new(body))
    }
}

/// One recorded handler call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// `ctx.id()`.
    pub id: i64,
    /// `ctx.job_type()`.
    pub job_type: String,
    /// `ctx.queue_name()`.
    pub queue: String,
    /// `ctx.attempt()`.
    pub attempt: u32,
    /// `ctx.payload()`.
    pub payload: Value,
    /// The name of the thread the handler ran on.
    pub thread: Option<String>,
}

struct Inner {
    script: Mutex<VecDeque<Step>>,
    fallback: Step,
    calls: Mutex<Vec<Call>>,
    started_tx: Sender<Call>,
    started_rx: Receiver<Call>,
    running: AtomicUsize,
    max_running: AtomicUsize,
}

/// A handler whose calls take the scripted steps in order (then the fallback step), and
/// that records every call. Clones share the script and the records.
#[derive(Clone)]
pub struct ScriptedHandler {
    inner: Arc<Inner>,
}

impl Default for ScriptedHandler {
    fn default() -> Self {
        ScriptedHandler::always(Step::Succeed)
    }
}

impl ScriptedHandler {
    /// A handler that succeeds unless scripted otherwise.
    pub fn new() -> ScriptedHandler {
        ScriptedHandler::default()
    }

    /// A handler that takes `step` whenever the script is empty.
    pub fn always(step: Step) -> ScriptedHandler {
        let (started_tx, started_rx) = unbounded();
        ScriptedHandler {
            inner: Arc::new(Inner {
                script: Mutex::new(VecDeque::new()),
                fallback: step,
                calls: Mutex::new(Vec::new()),
                started_tx,
                started_rx,
                running: AtomicUsize::new(0),
                max_running: AtomicUsize::new(0),
            }),
        }
    }

    /// Appends a step to the script (builder form).
    pub fn then(self, step: Step) -> ScriptedHandler {
        self.push(step);
        self
    }

    /// Appends a step to the script.
    pub fn push(&self, step: Step) {
        lock(&self.inner.script).push_back(step);
    }

    /// Every call so far, in the order they started.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.inner.calls).clone()
    }

    /// The job ids of the calls so far, in the order they started.
    pub fn call_ids(&self) -> Vec<i64> {
        self.calls().iter().map(|c| c.id).collect()
    }

    /// How many calls so far.
    pub fn call_count(&self) -> usize {
        lock(&self.inner.calls).len()
    }

    /// The most calls that were running at the same time.
    pub fn max_concurrent(&self) -> usize {
        self.inner.max_running.load(Ordering::SeqCst)
    }

    /// Waits for the next call to start (calls are announced once each, in start order).
    pub fn wait_started(&self, what: &str) -> Call {
        let bound = wait_bound();
        match self.inner.started_rx.recv_timeout(bound) {
            Ok(call) => call,
            Err(_) => panic!("waited {bound:?} for the handler to start {what}; it did not"),
        }
    }

    fn next_step(&self) -> Step {
        lock(&self.inner.script)
            .pop_front()
            .unwrap_or_else(|| self.inner.fallback.clone())
    }
}

struct RunningGuard<'a>(&'a Inner);

impl<'a> RunningGuard<'a> {
    fn enter(inner: &'a Inner) -> RunningGuard<'a> {
        let now = inner.running.fetch_add(1, Ordering::SeqCst) + 1;
        inner.max_running.fetch_max(now, Ordering::SeqCst);
        RunningGuard(inner)
    }
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Handler for ScriptedHandler {
    fn run(&self, ctx: &JobContext) -> Result<(), JobError> {
        let call = Call {
            id: ctx.id(),
            job_type: ctx.job_type().to_string(),
            queue: ctx.queue_name().to_string(),
            attempt: ctx.attempt(),
            payload: ctx.payload().clone(),
            thread: std::thread::current().name().map(str::to_string),
        };
        lock(&self.inner.calls).push(call.clone());
        let _ = self.inner.started_tx.send(call);
        let _running = RunningGuard::enter(&self.inner);
        match self.next_step() {
            Step::Succeed => Ok(()),
            Step::SucceedWith(value) => {
                ctx.set_result(value);
                Ok(())
            }
            Step::Fail(make) => Err(make()),
            Step::Panic(message) => panic!("{message}"),
            Step::Block(latch) => {
                if latch.wait(WAIT * 2) {
                    Ok(())
                } else {
                    Err(JobError::retry("scripted latch was never opened"))
                }
            }
            Step::Run(body) => body(ctx),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Waiting on events
// ---------------------------------------------------------------------------------------

/// An `Event::Finished`, flattened.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// The job.
    pub id: i64,
    /// The attempt that finished.
    pub attempt: i64,
    /// The job's status after the write.
    pub status: JobStatus,
    /// The error of a failed attempt.
    pub error: Option<String>,
}

fn as_finished(event: &Event) -> Option<Finished> {
    match event {
        Event::Finished {
            id,
            attempt,
            status,
            error,
            ..
        } => Some(Finished {
            id: *id,
            attempt: *attempt,
            status: *status,
            error: error.clone(),
        }),
        _ => None,
    }
}

/// Receives events until `pick` returns `Some`, at most `within`; panics naming `what` (and
/// the last events seen) when it does not happen.
pub fn wait_event_within<T>(
    events: &Receiver<Event>,
    within: Duration,
    what: &str,
    mut pick: impl FnMut(&Event) -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    let mut seen: VecDeque<Event> = VecDeque::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(event) => {
                if let Some(found) = pick(&event) {
                    return found;
                }
                if seen.len() == 20 {
                    seen.pop_front();
                }
                seen.push_back(event);
            }
            Err(RecvTimeoutError::Timeout) => {
                panic!("waited {within:?} for {what}; it did not happen (last events: {seen:?})")
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("event stream closed while waiting for {what}")
            }
        }
    }
}

/// [`wait_event_within`] with the [`WAIT`] bound.
pub fn wait_event<T>(
    events: &Receiver<Event>,
    what: &str,
    pick: impl FnMut(&Event) -> Option<T>,
) -> T {
    wait_event_within(events, wait_bound(), what, pick)
}

/// The next `Finished` event of job `id`.
pub fn wait_finished(events: &Receiver<Event>, id: i64) -> Finished {
    wait_finished_within(events, id, wait_bound())
}

/// The next `Finished` event of job `id`, at most `within`.
pub fn wait_finished_within(events: &Receiver<Event>, id: i64, within: Duration) -> Finished {
    wait_event_within(
        events,
        within,
        &format!("job {id} to finish an attempt"),
        |e| as_finished(e).filter(|f| f.id == id),
    )
}

/// The first `Finished` event of job `id` with `status` (others of the job are skipped).
pub fn wait_status(events: &Receiver<Event>, id: i64, status: JobStatus) -> Finished {
    wait_event(events, &format!("job {id} to become {status}"), |e| {
        as_finished(e).filter(|f| f.id == id && f.status == status)
    })
}

/// Waits until every job in `ids` had a `Finished` event with `status`; returns those events
/// in the order they came.
pub fn wait_all(events: &Receiver<Event>, ids: &[i64], status: JobStatus) -> Vec<Finished> {
    let mut left: Vec<i64> = ids.to_vec();
    let mut got = Vec::new();
    while !left.is_empty() {
        let what = format!("jobs {left:?} to become {status}");
        let f = wait_event(events, &what, |e| {
            as_finished(e).filter(|f| f.status == status && left.contains(&f.id))
        });
        left.retain(|&id| id != f.id);
        got.push(f);
    }
    got
}

/// The next `Finished` event of every job in `ids`, whatever order they come in; returned
/// in the order of `ids`.
pub fn wait_each(events: &Receiver<Event>, ids: &[i64]) -> Vec<Finished> {
    let mut got: Vec<Finished> = Vec::new();
    while got.len() < ids.len() {
        let what = format!("jobs {ids:?} to finish an attempt (got {got:?})");
        let f = wait_event(events, &what, |e| {
            as_finished(e).filter(|f| ids.contains(&f.id) && got.iter().all(|g| g.id != f.id))
        });
        got.push(f);
    }
    got.sort_by_key(|f| ids.iter().position(|&id| id == f.id));
    got
}

/// The next `Started` event of job `id`; returns its attempt number.
pub fn wait_started(events: &Receiver<Event>, id: i64) -> i64 {
    wait_event(events, &format!("job {id} to start"), |e| match e {
        Event::Started {
            id: started,
            attempt,
            ..
        } if *started == id => Some(*attempt),
        _ => None,
    })
}

/// The next `Reaped` event; returns its count.
pub fn wait_reaped(events: &Receiver<Event>) -> usize {
    wait_event(events, "the reaper to reap expired leases", |e| match e {
        Event::Reaped { count } => Some(*count),
        _ => None,
    })
}

// ---------------------------------------------------------------------------------------
// Running attempts through a worker or through drain
// ---------------------------------------------------------------------------------------

/// How the attempts of a test are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A started `Worker` (threads, dispatcher, events).
    Worker,
    /// `testing::drain` on the test thread.
    Drain,
}

/// Both modes, for tests that check one behaviour through each.
pub const MODES: [Mode; 2] = [Mode::Worker, Mode::Drain];

/// The `worker_id` a [`Runner`] gives its worker.
pub const WORKER_ID: &str = "test-worker";

/// Runs the attempts of a test in one [`Mode`].
pub struct Runner<'a> {
    env: &'a TestEnv,
    /// How attempts run.
    pub mode: Mode,
    /// Subscribed before the worker started.
    pub events: Receiver<Event>,
    /// Kept for `drain` in drain mode.
    pub builder: Option<WorkerBuilder>,
    worker: Option<Worker>,
}

impl<'a> Runner<'a> {
    /// Subscribes to events, then starts the worker (worker mode) or keeps the builder.
    pub fn start(env: &'a TestEnv, mode: Mode, builder: WorkerBuilder) -> Runner<'a> {
        let events = env.queue.subscribe();
        let builder = builder.worker_id(WORKER_ID);
        let (builder, worker) = match mode {
            Mode::Worker => (None, Some(builder.start().expect("the worker starts"))),
            Mode::Drain => (Some(builder), None),
        };
        Runner {
            env,
            mode,
            events,
            builder,
            worker,
        }
    }

    /// Runs the next attempt of job `id` (which must be due) and returns its outcome event.
    pub fn attempt(&mut self, id: i64) -> Finished {
        match &self.builder {
            Some(builder) => {
                let report = testing::drain(builder).expect("drain");
                assert_eq!(
                    report.attempts(),
                    1,
                    "[drain] one due job, one attempt expected: {report:?}"
                );
            }
            None => self.env.queue.notify(),
        }
        wait_finished(&self.events, id)
    }

    /// Runs the next attempt of every job in `ids` (all due) and returns their outcome
    /// events in the order of `ids`.
    pub fn attempt_all(&mut self, ids: &[i64]) -> Vec<Finished> {
        match &self.builder {
            Some(builder) => {
                let report = testing::drain(builder).expect("drain");
                assert_eq!(
                    report.attempts(),
                    ids.len(),
                    "[drain] {} due jobs: {report:?}",
                    ids.len()
                );
            }
            None => self.env.queue.notify(),
        }
        wait_each(&self.events, ids)
    }

    /// In drain mode, asserts that nothing is due (a worker cannot prove a negative
    /// without waiting, so worker mode skips this check).
    pub fn assert_nothing_due(&self) {
        if let Some(builder) = &self.builder {
            let report = testing::drain(builder).expect("drain");
            assert_eq!(
                report.attempts(),
                0,
                "[drain] nothing should be due: {report:?}"
            );
        }
    }

    /// Moves the test clock (the next `attempt` wakes the worker).
    pub fn advance(&self, by: Duration) {
        self.env.clock.advance(by);
    }

    /// The worker id expected in the attempt history.
    pub fn assert_worker(&self, worker: Option<&str>) {
        let worker = worker.expect("an attempt row names its worker");
        match self.mode {
            Mode::Worker => assert_eq!(worker, WORKER_ID),
            Mode::Drain => assert!(worker.starts_with("drain:"), "{worker}"),
        }
    }

    /// Shuts the worker down (worker mode).
    pub fn finish(self) {
        if let Some(worker) = self.worker {
            stop(worker);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Reading jobs back, time, and a wall-clock database
// ---------------------------------------------------------------------------------------

/// Job `id`, which must exist.
pub fn job(queue: &Queue, id: i64) -> JobRecord {
    queue
        .job(id)
        .unwrap_or_else(|e| panic!("reading job {id}: {e}"))
        .unwrap_or_else(|| panic!("job {id} does not exist"))
}

/// Job `id`'s attempt history.
pub fn history(queue: &Queue, id: i64) -> Vec<AttemptRecord> {
    queue
        .attempts(id)
        .unwrap_or_else(|e| panic!("reading the attempts of job {id}: {e}"))
}

/// Job `id`'s attempt history as `(attempt, outcome)` pairs.
pub fn outcomes(queue: &Queue, id: i64) -> Vec<(i64, String)> {
    history(queue, id)
        .into_iter()
        .map(|a| (a.attempt, a.outcome.to_string()))
        .collect()
}

/// A `SystemTime` from milliseconds since the epoch (e.g. `START_MS - 1000`).
pub fn at_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).expect("a time after 1970"))
}

/// Shuts the worker down with a generous grace and expects it to go cleanly, and soon:
/// a worker with nothing left to do returns at once, whatever the grace (the wait is
/// bounded by [`wait_bound`], so a shutdown that waits out its grace fails the test).
pub fn stop(worker: Worker) {
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = done_tx.send(worker.shutdown(WAIT));
    });
    recv(&done_rx, "the worker to shut down once its work is written")
        .expect("the worker shuts down cleanly within the grace");
}

/// A queue on a fresh database file with the wall clock, for rows inserted by plain SQL that
/// take the schema's `run_at` default (now).
pub struct WallClockEnv {
    /// Keeps the database alive for the test.
    dir: TempDir,
    /// Opened with the wall clock.
    pub queue: Queue,
}

impl WallClockEnv {
    /// The database file.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("jobs.db")
    }
}

/// A fresh database with a wall-clock queue.
pub fn setup_wall_clock() -> WallClockEnv {
    let dir = tempfile::tempdir().expect("creating a temp dir");
    let queue = Queue::open(dir.path().join("jobs.db")).expect("Queue::open on a fresh file");
    WallClockEnv { dir, queue }
}
