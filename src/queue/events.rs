//! Progress events: what users, the dashboard and tests wait on instead of sleeping.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crossbeam_channel::{unbounded, Receiver, Sender};

use crate::job::JobStatus;
use crate::storage::jobs::Refused;

/// Something that happened to a job, sent to every [`Queue::subscribe`](crate::Queue::subscribe)
/// receiver after it was committed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// A job was inserted through this process's `Queue`.
    Enqueued {
        /// The new job.
        id: i64,
        /// Its job type.
        job_type: String,
        /// Its queue.
        queue: String,
    },
    /// A worker of this process started an attempt.
    Started {
        /// The job.
        id: i64,
        /// Its job type.
        job_type: String,
        /// Its queue.
        queue: String,
        /// The attempt number, from 1.
        attempt: i64,
    },
    /// The outcome of an attempt was written: the job's status is now `status`
    /// (succeeded, failed, dead, cancelled, or queued after a snooze or release).
    Finished {
        /// The job.
        id: i64,
        /// Its job type.
        job_type: String,
        /// Its queue.
        queue: String,
        /// The attempt number.
        attempt: i64,
        /// The job's status after the write.
        status: JobStatus,
        /// The error, for a failed attempt.
        error: Option<String>,
    },
    /// The reaper found running jobs whose lease had expired and made them due again (or
    /// dead when their attempts were spent).
    Reaped {
        /// How many jobs.
        count: usize,
    },
    /// A worker's scheduled prune pass finished (see
    /// [`WorkerBuilder::prune`](crate::WorkerBuilder::prune)).
    Pruned {
        /// Succeeded and cancelled jobs deleted.
        jobs: u64,
    },
    /// A worker's periodic scheduler could not enqueue its due slots (a busy or full
    /// database, a row another program's rule refused): nothing of the tick was written,
    /// and the same slots are tried again after `retry_in` (500 ms, doubling to about a
    /// minute while the failures go on).
    PeriodicTickFailed {
        /// Why the tick failed.
        error: String,
        /// How long until the next try.
        retry_in: std::time::Duration,
    },
}

/// Fan-out of events to subscribers; costs one atomic load when nobody listens.
#[derive(Debug, Default)]
pub(crate) struct EventHub {
    subscribers: Mutex<Vec<Sender<Event>>>,
    count: AtomicUsize,
}

impl EventHub {
    /// Tells subscribers about a job made dead without running (a row breaking a schema
    /// rule, found by the claim or the stray sweep), as a `Finished` event like any other.
    pub(crate) fn refused(&self, refused: &Refused) {
        self.send(Event::Finished {
            id: refused.id,
            job_type: refused.job_type.clone(),
            queue: refused.queue.clone(),
            attempt: refused.attempts,
            status: JobStatus::Dead,
            error: Some(refused.error.clone()),
        });
    }

    pub(crate) fn subscribe(&self) -> Receiver<Event> {
        let (tx, rx) = unbounded();
        let mut subs = self.lock();
        subs.push(tx);
        self.count.store(subs.len(), Ordering::Release);
        rx
    }

    pub(crate) fn has_subscribers(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    pub(crate) fn send(&self, event: Event) {
        if !self.has_subscribers() {
            return;
        }
        let mut subs = self.lock();
        subs.retain(|tx| tx.send(event.clone()).is_ok());
        self.count.store(subs.len(), Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Sender<Event>>> {
        self.subscribers.lock().unwrap_or_else(|p| p.into_inner())
    }
}
