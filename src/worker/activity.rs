//! How often a worker's dispatcher woke and wrote: a diagnostic of idle cost. A worker with
//! nothing to do should barely wake; one whose loop spins shows it here long before a user
//! notices a core gone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug, Default)]
struct Counters {
    wakeups: AtomicU64,
    write_rounds: AtomicU64,
    polls: AtomicU64,
}

/// Live counters of one [`Worker`](crate::Worker)'s dispatcher thread, from
/// [`Worker::activity`](crate::Worker::activity). Cheap to clone; it stays readable after
/// the worker is shut down, so a shutdown can be measured too.
///
/// ```
/// use litejobs::{JobContext, JobError, Queue, Worker};
/// # fn main() -> litejobs::Result<()> {
/// let queue = Queue::open_in_memory()?;
/// let worker = Worker::builder(&queue)
///     .handler("noop", |_: &JobContext| -> Result<(), JobError> { Ok(()) })
///     .start()?;
/// let activity = worker.activity();
/// let before = activity.wakeups();
/// // ... a second later, an idle worker has woken a few times at most.
/// assert!(activity.wakeups() >= before);
/// worker.shutdown(std::time::Duration::from_secs(5))?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct WorkerActivity(Arc<Counters>);

impl WorkerActivity {
    /// How many times the dispatcher went round its loop: once per wake-up (a finished job,
    /// an enqueue, a timer) and once per pass while it has work.
    pub fn wakeups(&self) -> u64 {
        self.0.wakeups.load(Ordering::Relaxed)
    }

    /// How many write transactions the dispatcher began (outcomes, lease renewals, reaping
    /// and claims go together in one).
    pub fn write_rounds(&self) -> u64 {
        self.0.write_rounds.load(Ordering::Relaxed)
    }

    /// How many times the dispatcher asked the database whether an idle queue has due jobs
    /// it was not told about (one statement each): every poll interval, and when another
    /// process's commit was seen.
    pub fn polls(&self) -> u64 {
        self.0.polls.load(Ordering::Relaxed)
    }

    pub(crate) fn woke(&self) {
        self.0.wakeups.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn wrote(&self) {
        self.0.write_rounds.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn polled(&self) {
        self.0.polls.fetch_add(1, Ordering::Relaxed);
    }
}
