//! [`Worker`] and [`WorkerBuilder`]: validation, wiring, and shutdown. The runtime roles live
//! in their own files: the [`dispatcher`] claims and writes, [`executor`] threads run
//! handlers, the [`completer`] writes outcomes, the [`registry`] maps job types to handlers.
//! Beside them: the upkeep workers run ([`maintenance`]: the reaper, the stray sweep,
//! retention, periodic jobs), and [`testing`], the same roles on the caller's thread.

mod activity;
mod cancels;
mod change_watch;
pub(crate) mod completer;
mod deadline;
pub(crate) mod dispatcher;
pub(crate) mod executor;
mod feed;
pub mod maintenance;
mod prefetch;
mod queue_runtime;
pub(crate) mod registry;
mod renewal;
pub mod testing;
mod typed;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::error::{Error, ErrorKind, Result};
use crate::handler::Handler;
use crate::job::RetryPolicy;
use crate::job::DEFAULT_QUEUE;
use crate::system::clock::duration_to_ms;
use crate::worker::maintenance::periodic::Periodic;
use crate::worker::maintenance::presence::Presence;
use crate::worker::maintenance::pruner::{PruneOptions, Pruner};
use crate::worker::maintenance::reaper::DEFAULT_REAP_INTERVAL;
use crate::worker::maintenance::scheduler::SchedulerThread;
use crate::Queue;

pub use activity::WorkerActivity;
use cancels::CancelWatch;
use completer::WriterHandle;
use dispatcher::{Control, DispatchConfig, Dispatcher};
use executor::ExecShared;
use queue_runtime::QueueRuntime;
use registry::Registry;

/// Handler threads of the default queue unless [`WorkerBuilder::concurrency`] says otherwise.
pub const DEFAULT_CONCURRENCY: usize = 4;
/// The most jobs a queue claims beyond its free handler slots on SQLite, unless configured
/// otherwise: they wait in memory so a finishing thread finds its next job without a round
/// trip. Within this bound the prefetch follows the jobs: a queue holds about 10 ms of its
/// threads' work (measured from the run times of its recent attempts), and at least one job
/// per thread. Fast jobs are claimed up to this many at a time, in few transactions (no-op
/// jobs, 4 threads: about 100 k/s against 70 k/s with a fixed 64); slow jobs are not
/// hoarded, so other workers share a backlog of them.
pub const DEFAULT_PREFETCH: usize = 256;
/// [`DEFAULT_PREFETCH`] on a PostgreSQL server, where each claim is a statement of the
/// server's and a round trip: only jobs quicker than about 40 µs (4 threads) come in batches
/// this big, which measured 49 k no-op jobs/s against 36 k/s with 256.
pub const DEFAULT_PREFETCH_ON_SERVER: usize = 1024;
/// How often an idle worker queries for due rows no commit announced (jobs whose `run_at`
/// came, and a fallback for the change check).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Where the database's files cannot be watched (not Linux, an in-memory database, a
/// directory inotify refuses), how often an idle worker asks SQLite whether another
/// connection committed (`PRAGMA data_version`, a read of shared memory); a commit is
/// followed by a look for due jobs, so a job another process inserts starts within about
/// this long. On Linux a watch on the database's files tells the worker when to ask.
pub const DEFAULT_CHANGE_CHECK_INTERVAL: Duration = Duration::from_millis(4);
/// An attempt's time limit when neither the job nor its type sets one.
pub const DEFAULT_JOB_TIMEOUT: Duration = Duration::from_secs(60);
/// Added to the timeout to make the lease, so a slow write-back is not mistaken for a crash.
pub const DEFAULT_LEASE_GRACE: Duration = Duration::from_secs(10);
/// How long dropping a [`Worker`] without [`Worker::shutdown`] waits for running handlers.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Worker threads on a [`Queue`]: they claim due jobs of the registered types, run the
/// handlers, and write back the outcomes. Made by [`Worker::builder`].
///
/// Several workers, in one process or many, may run on one file; each job runs on one of
/// them at a time. Dropping a `Worker` shuts it down with [`DEFAULT_SHUTDOWN_GRACE`].
#[must_use = "a Worker stops (and waits for its handlers) when dropped"]
pub struct Worker {
    id: Arc<str>,
    control: Sender<Control>,
    dispatcher: Option<JoinHandle<usize>>,
    /// Enqueues periodic jobs; only when some were registered.
    scheduler: Option<SchedulerThread>,
    activity: WorkerActivity,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").field("id", &self.id).finish()
    }
}

impl Worker {
    /// A builder for a worker on `queue`.
    pub fn builder(queue: &Queue) -> WorkerBuilder {
        WorkerBuilder::new(queue)
    }

    /// This worker's id, written to `locked_by` of the jobs it runs (host:pid:random).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Counters of the dispatcher's wake-ups and write transactions: how much an idle or a
    /// busy worker costs, readable while it runs and after it stopped.
    pub fn activity(&self) -> WorkerActivity {
        self.activity.clone()
    }

    /// Graceful shutdown: stops claiming, releases prefetched jobs that have not
    /// started, waits up to `grace` for running handlers, releases the rest (due again at
    /// once, attempt not spent) and joins the threads.
    ///
    /// # Errors
    /// [`ErrorKind::ShutdownTimeout`] when handlers were still running after the grace; their
    /// jobs were released and their late results will be discarded.
    pub fn shutdown(mut self, grace: Duration) -> Result<()> {
        self.stop(grace)
    }

    fn stop(&mut self, grace: Duration) -> Result<()> {
        if let Some(scheduler) = self.scheduler.take() {
            scheduler.stop();
        }
        let Some(handle) = self.dispatcher.take() else {
            return Ok(());
        };
        let _ = self.control.send(Control::Shutdown(grace));
        let still_running = handle.join().map_err(|_| {
            Error::new(
                ErrorKind::Database,
                "the worker's dispatcher thread panicked",
            )
        })?;
        if still_running > 0 {
            return Err(Error::new(
                ErrorKind::ShutdownTimeout,
                format!(
                    "{still_running} handlers were still running after the shutdown grace of \
                     {grace:?}; their jobs were released"
                ),
            ));
        }
        log::info!("litejobs: worker {} stopped", self.id);
        Ok(())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Err(e) = self.stop(DEFAULT_SHUTDOWN_GRACE) {
            log::warn!("litejobs: worker dropped: {e}");
        }
    }
}

/// Configures and starts a [`Worker`].
///
/// ```
/// use litejobs::{JobContext, JobError, NewJob, Queue, RetryPolicy, Worker};
/// use serde_json::json;
/// use std::time::Duration;
/// # fn main() -> litejobs::Result<()> {
/// let queue = Queue::open_in_memory()?;
/// let done = queue.subscribe();
/// let worker = Worker::builder(&queue)
///     .handler("send_email", |ctx: &JobContext| -> Result<(), JobError> {
///         let _user = ctx.payload()["user_id"].as_i64();
///         Ok(())
///     })
///     .concurrency(2)
///     .retry_policy("send_email", RetryPolicy::exponential(Duration::from_secs(5)))
///     .start()?;
/// let id = queue.enqueue(NewJob::new("send_email", json!({"user_id": 42})))?;
/// // Wait for the outcome without sleeping:
/// loop {
///     if let litejobs::Event::Finished { id: done_id, .. } =
///         done.recv_timeout(Duration::from_secs(10)).expect("job finished")
///     {
///         if done_id == id { break; }
///     }
/// }
/// worker.shutdown(Duration::from_secs(5))?;
/// # Ok(())
/// # }
/// ```
#[must_use = "a WorkerBuilder does nothing until start() is called"]
pub struct WorkerBuilder {
    queue: Queue,
    pub(crate) registry: Registry,
    pub(crate) queues: Vec<(String, usize)>,
    /// `None`: the backend's default.
    prefetch: Option<usize>,
    poll_interval: Duration,
    change_check_interval: Duration,
    reap_interval: Duration,
    lease_grace: Duration,
    worker_id: Option<String>,
    periodics: Vec<Periodic>,
    stored_schedules: bool,
    pruner: Option<Pruner>,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("job_types", &self.registry.job_types())
            .field("queues", &self.queues)
            .field("prefetch", &self.prefetch)
            .finish()
    }
}

impl WorkerBuilder {
    fn new(queue: &Queue) -> WorkerBuilder {
        WorkerBuilder {
            queue: queue.clone(),
            registry: Registry::new(DEFAULT_JOB_TIMEOUT),
            queues: vec![(DEFAULT_QUEUE.to_string(), DEFAULT_CONCURRENCY)],
            prefetch: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
            change_check_interval: DEFAULT_CHANGE_CHECK_INTERVAL,
            reap_interval: DEFAULT_REAP_INTERVAL,
            lease_grace: DEFAULT_LEASE_GRACE,
            worker_id: None,
            periodics: Vec::new(),
            stored_schedules: false,
            pruner: None,
        }
    }

    /// Registers the handler for `job_type` (replacing an earlier one). Jobs of types with
    /// no handler in this worker are never claimed by it.
    pub fn handler(mut self, job_type: impl Into<String>, handler: impl Handler) -> Self {
        self.registry
            .add_handler(job_type.into(), Arc::new(handler));
        self
    }

    /// Handler threads for the `"default"` queue. 0 leaves the default queue to other
    /// workers. Defaults to [`DEFAULT_CONCURRENCY`].
    pub fn concurrency(self, threads: usize) -> Self {
        self.queue(DEFAULT_QUEUE, threads)
    }

    /// Works another named queue with its own `threads` handler threads, so a backlog in
    /// one queue never delays another.
    pub fn queue(mut self, name: impl Into<String>, threads: usize) -> Self {
        let name = name.into();
        match self.queues.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = threads,
            None => self.queues.push((name, threads)),
        }
        self
    }

    /// The retry policy of a job type. Defaults to [`RetryPolicy::default`] (exponential
    /// from 5 s with jitter, capped at an hour).
    pub fn retry_policy(mut self, job_type: impl Into<String>, policy: RetryPolicy) -> Self {
        self.registry.set_retry_policy(job_type.into(), policy);
        self
    }

    /// The retry policy of job types without their own.
    pub fn default_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.registry.set_default_retry_policy(policy);
        self
    }

    /// The attempt time limit of a job type (a job's own `timeout` wins). Defaults to
    /// [`default_timeout`](WorkerBuilder::default_timeout).
    pub fn timeout(mut self, job_type: impl Into<String>, timeout: Duration) -> Self {
        self.registry.set_timeout(job_type.into(), timeout);
        self
    }

    /// The attempt time limit of types without their own. Defaults to
    /// [`DEFAULT_JOB_TIMEOUT`] (60 s).
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.registry.default_timeout = timeout;
        self
    }

    /// The most jobs claimed per queue beyond the free slots: within it a queue holds about
    /// 10 ms of its threads' work, at least one job per thread. `0` claims only for free
    /// slots. Defaults to [`DEFAULT_PREFETCH`] (256), or [`DEFAULT_PREFETCH_ON_SERVER`]
    /// (1 024) on PostgreSQL.
    /// Lower it when a backlog of quick jobs should be spread evenly over several workers.
    pub fn prefetch(mut self, jobs: usize) -> Self {
        self.prefetch = Some(jobs);
        self
    }

    /// How often an idle worker queries for due jobs that no commit announced: jobs whose
    /// `run_at` has come, and anything the change check missed (in-process enqueues wake it
    /// at once; other processes' commits within [`change_check_interval`]). Defaults to
    /// [`DEFAULT_POLL_INTERVAL`] (200 ms). On PostgreSQL, where the worker is told of every
    /// write that leaves a job waiting, an idle worker with no job waiting at all polls every
    /// 5 seconds instead (or this interval, when longer).
    ///
    /// [`change_check_interval`]: WorkerBuilder::change_check_interval
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How often an idle worker asks whether another connection (another process, a
    /// plain SQL insert) committed, where it cannot watch the database's files; after a
    /// commit it looks for due jobs at once. On SQLite this reads `PRAGMA data_version` on a
    /// connection of the worker's own, which costs a read of shared memory, not of the file.
    /// On Linux, with the database in a local directory, an inotify watch on its files
    /// tells the worker when to ask instead, and an idle worker does not wake on a timer.
    /// On PostgreSQL the worker is told instead: a thread of its own waits for the insert
    /// trigger's notifications on a `LISTEN` connection, and this interval applies only on
    /// platforms without `poll(2)`. For a second after a check has seen a commit, checks
    /// come every millisecond instead (jobs come in runs); then the interval applies again.
    /// Defaults to [`DEFAULT_CHANGE_CHECK_INTERVAL`] (4 ms); checks stop while every slot is
    /// busy.
    pub fn change_check_interval(mut self, interval: Duration) -> Self {
        self.change_check_interval = interval;
        self
    }

    /// How often expired leases are reaped, and jobs past their deadline cancelled (the
    /// expiry sweep, [`Queue::cancel_expired`](crate::Queue::cancel_expired)). Defaults to
    /// [`DEFAULT_REAP_INTERVAL`](crate::defaults::DEFAULT_REAP_INTERVAL) (15 s).
    pub fn reap_interval(mut self, interval: Duration) -> Self {
        self.reap_interval = interval;
        self
    }

    /// Added to an attempt's timeout to make its lease. Defaults to
    /// [`DEFAULT_LEASE_GRACE`] (10 s).
    pub fn lease_grace(mut self, grace: Duration) -> Self {
        self.lease_grace = grace;
        self
    }

    /// Whether what each attempt says ([`JobContext::log_line`](crate::JobContext::log_line),
    /// `log` records captured on its thread, a command's stderr) is kept with it. Defaults to
    /// on; [`WorkerBuilder::job_logs_for`] turns one type's off.
    pub fn job_logs(mut self, on: bool) -> Self {
        self.registry.set_keep_logs(on);
        self
    }

    /// Whether the attempts' logs of `job_type` are kept (see [`WorkerBuilder::job_logs`]).
    pub fn job_logs_for(mut self, job_type: impl Into<String>, on: bool) -> Self {
        self.registry.set_keep_logs_for(job_type.into(), on);
        self
    }

    /// The id written to `locked_by`. Defaults to `host:pid:random`.
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }

    /// Enqueues `periodic`'s job once per slot, from a scheduler thread of this
    /// worker; several workers (and processes) with the same schedule enqueue each slot once
    /// between them. See [`Periodic`] for the missed-slot rule.
    pub fn periodic(mut self, periodic: Periodic) -> Self {
        self.periodics.push(periodic);
        self
    }

    /// Also enqueues the schedules kept in the database ([`Queue::add_schedule`], `litejobs
    /// schedule add`), once per slot between every worker that runs them; one added,
    /// changed or removed in another process counts within 5 seconds. Off by default in
    /// the library; `litejobs work` turns it on.
    pub fn stored_schedules(mut self) -> Self {
        self.stored_schedules = true;
        self
    }

    /// Prunes on a schedule from this worker's own loop: every `every`, succeeded and
    /// cancelled jobs past `options`' window are deleted in short chunks between claims,
    /// expired idempotency keys are forgotten and the WAL is checkpointed. Off by default
    /// (run `litejobs prune` from cron, or turn it on in one worker per file).
    pub fn prune(mut self, options: PruneOptions, every: Duration) -> Self {
        self.pruner = Some(Pruner::new(options, every));
        self
    }

    pub(crate) fn queue_handle(&self) -> &Queue {
        &self.queue
    }

    pub(crate) fn lease_grace_ms(&self) -> i64 {
        duration_to_ms(self.lease_grace)
    }

    fn validate(&self) -> Result<()> {
        if self.registry.is_empty() {
            return Err(Error::invalid_config(
                "no handlers registered: add one with .handler(job_type, handler)",
            ));
        }
        if self.queues.iter().all(|(_, threads)| *threads == 0) {
            return Err(Error::invalid_config(
                "no handler threads: concurrency and every queue are 0",
            ));
        }
        if let Some((name, _)) = self.queues.iter().find(|(name, _)| name.trim().is_empty()) {
            return Err(Error::invalid_config(format!(
                "queue name {name:?} is empty"
            )));
        }
        if self.poll_interval.is_zero() {
            return Err(Error::invalid_config("poll_interval must be above 0"));
        }
        if self.change_check_interval.is_zero() {
            return Err(Error::invalid_config(
                "change_check_interval must be above 0",
            ));
        }
        if self.registry.default_timeout.is_zero() {
            return Err(Error::invalid_config("default_timeout must be above 0"));
        }
        Ok(())
    }

    /// Starts the threads: one dispatcher (claims and writes) and the handler threads of
    /// each queue.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] naming the bad option, or naming the job types it would
    /// serve that are marked encrypted (or have waiting encrypted jobs) under keys the queue
    /// does not hold; [`ErrorKind::Io`] when a thread cannot be spawned.
    pub fn start(mut self) -> Result<Worker> {
        self.validate()?;
        if self.queue.is_read_only() {
            return Err(crate::Error::new(
                crate::ErrorKind::ReadOnly,
                "a worker cannot start on a queue opened read-only (Queue::open_read_only)",
            ));
        }
        // Jobs it would only make dead (encrypted with keys it lacks): refused up front.
        let worked: Vec<&str> = (self.queues.iter())
            .filter(|(_, threads)| *threads > 0)
            .map(|(name, _)| name.as_str())
            .collect();
        self.queue
            .check_keys_for(&self.registry.job_types(), &worked)?;
        let id: Arc<str> = Arc::from(self.worker_id.clone().unwrap_or_else(default_worker_id));
        // Unbounded in type, bounded in practice: each executor thread sends one outcome per
        // job it was given, and at most one heartbeat at a time (it waits for the answer), so
        // the channel never holds more than the jobs in flight plus one message per thread.
        let (writer_tx, writer_rx) = crossbeam_channel::unbounded();
        let (nudge_tx, nudge_rx) = crossbeam_channel::bounded(1);
        let (control_tx, control_rx) = crossbeam_channel::bounded(1);
        let shared = Arc::new(ExecShared {
            queue: self.queue.clone(),
            registry: Arc::new(self.registry.clone()),
            worker_id: Arc::clone(&id),
            writer: WriterHandle {
                messages: writer_tx,
                nudge: nudge_tx,
            },
            stopping: AtomicBool::new(false),
            lease_grace_ms: self.lease_grace_ms(),
            cancelled: Arc::default(),
        });
        let prefetch = self.prefetch.unwrap_or(if self.queue.db().is_server() {
            DEFAULT_PREFETCH_ON_SERVER
        } else {
            DEFAULT_PREFETCH
        });
        let mut runtimes = Vec::new();
        for (name, threads) in self.queues.iter().filter(|(_, t)| *t > 0) {
            runtimes.push(QueueRuntime::start(
                &shared,
                name.clone(),
                *threads,
                prefetch,
            )?);
        }
        let wake = self.queue.wake_list().register();
        let cancels = CancelWatch::new(
            self.queue
                .cancel_list()
                .register(Arc::clone(&shared.cancelled)),
            Arc::clone(&shared.cancelled),
        );
        let activity = WorkerActivity::default();
        let dispatcher = Dispatcher::new(
            shared,
            runtimes,
            writer_rx,
            nudge_rx,
            wake,
            cancels,
            control_rx,
            DispatchConfig {
                poll_interval: self.poll_interval,
                change_check_interval: self.change_check_interval,
                reap_interval: self.reap_interval,
                pruner: self.pruner.take(),
                presence: Presence::new(
                    &self.queue,
                    &id,
                    &self.queues,
                    self.registry.job_types(),
                    self.reap_interval,
                ),
            },
            activity.clone(),
        );
        // Dropping it (if the dispatcher cannot start) ends its thread.
        let scheduler =
            SchedulerThread::start(&self.queue, self.periodics.clone(), self.stored_schedules)?;
        let handle = std::thread::Builder::new()
            .name("litejobs-dispatcher".to_string())
            .spawn(move || dispatcher.run())?;
        log::info!(
            "litejobs: worker {id} started: queues {:?}, job types {:?}",
            self.queues,
            self.registry.job_types()
        );
        Ok(Worker {
            id,
            control: control_tx,
            dispatcher: Some(handle),
            scheduler,
            activity,
        })
    }
}

fn default_worker_id() -> String {
    let host = crate::system::host::name();
    let random = (crate::job::jitter_sample() * f64::from(u32::MAX)) as u32;
    format!("{host}:{}:{random:08x}", std::process::id())
}
