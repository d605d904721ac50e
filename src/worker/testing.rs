//! Helpers for testing code that uses litejobs: run every due job on the calling
//! thread with [`drain`], move time with [`ManualClock`](crate::ManualClock), and use an
//! in-memory database with [`Queue::open_in_memory`](crate::Queue::open_in_memory).

use std::sync::Arc;

use serde::Serialize;

use super::completer::{self, Completer, Completion, LeaseKeeper, WriterMsg};
use super::executor::{run_attempt, AttemptEnv};
use super::registry::Claimer;
use super::WorkerBuilder;
use crate::error::Result;
use crate::job::JobStatus;
use crate::system::clock::duration_to_ms;

/// Jobs claimed per round of [`drain`].
const DRAIN_BATCH: usize = 64;
/// Rounds after which [`drain`] stops even if jobs keep coming due (e.g. a handler that
/// snoozes for zero seconds).
const DRAIN_MAX_ROUNDS: usize = 10_000;

/// What a [`drain`] did, counted by the status each attempt left its job in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DrainReport {
    /// Attempts that succeeded.
    pub succeeded: usize,
    /// Attempts that failed with a retry scheduled.
    pub failed: usize,
    /// Attempts after which the job was dead.
    pub dead: usize,
    /// Attempts that snoozed (or were released) back to queued.
    pub snoozed: usize,
    /// Attempts that cancelled their job (an attempt whose retry or snooze would have
    /// fallen after the job's deadline included: its job ended cancelled as expired).
    pub cancelled: usize,
    /// Waiting jobs cancelled because their deadline had passed before they started
    /// ([`NewJob::expires_at`](crate::NewJob::expires_at)); not attempts.
    pub expired: usize,
}

impl DrainReport {
    /// All attempts run (jobs that [`expired`](DrainReport::expired) ran none).
    pub fn attempts(&self) -> usize {
        self.succeeded + self.failed + self.dead + self.snoozed + self.cancelled
    }
}

/// Runs every due job of the builder's queues and types on the calling thread, through the
/// same claim, executor and completer code as a started worker, until none is due by the
/// queue's clock. Jobs past their deadline are cancelled first, as a worker's expiry sweep
/// would, and the waits on jobs that other programs ended by plain SQL are settled, as its
/// waits sweep would. Retries scheduled in the future stay: advance the
/// [`ManualClock`](crate::ManualClock) and drain again. Timeouts are not enforced (the
/// handler runs inline).
///
/// ```
/// use litejobs::{testing, JobError, ManualClock, NewJob, Queue, Worker, JobStatus};
/// use serde_json::json;
/// use std::time::Duration;
/// # fn main() -> litejobs::Result<()> {
/// let clock = ManualClock::starting_now();
/// let queue = Queue::builder().clock(clock.clone()).open_in_memory()?;
/// let worker = Worker::builder(&queue)
///     .handler("flaky", |ctx: &litejobs::JobContext| {
///         if ctx.attempt() < 2 { Err(JobError::retry("not yet")) } else { Ok(()) }
///     });
/// let id = queue.enqueue(NewJob::new("flaky", json!({})))?;
/// assert_eq!(testing::drain(&worker)?.failed, 1);
/// clock.advance(Duration::from_secs(60)); // past the backoff
/// assert_eq!(testing::drain(&worker)?.succeeded, 1);
/// assert_eq!(queue.job(id)?.map(|j| j.status), Some(JobStatus::Succeeded));
/// # Ok(())
/// # }
/// ```
pub fn drain(builder: &WorkerBuilder) -> Result<DrainReport> {
    let queue = builder.queue_handle();
    let registry = &builder.registry;
    let worker_id: Arc<str> = Arc::from(format!("drain:{}", std::process::id()));
    let grace_ms = builder.lease_grace_ms();
    let claimer = Claimer::new(
        registry,
        Arc::clone(&worker_id),
        grace_ms,
        queue.max_payload_bytes(),
    );
    let window_ms = duration_to_ms(queue.idempotency_window());
    let mut report = DrainReport::default();
    for _ in 0..DRAIN_MAX_ROUNDS {
        // What a worker's expiry sweep would have cancelled by now (the claim skips it).
        report.expired += queue.cancel_expired()?;
        // And what its waits sweep would have settled: waits on jobs another program ended.
        queue.settle_waits()?;
        let now = queue.now_ms();
        let mut refused = Vec::new();
        // The worker's own path: the rules are checked by the claim's reading.
        let claimed = queue.db().write_validated(|tx| {
            let mut all = Vec::new();
            for (name, _) in &builder.queues {
                let claimed = tx.claim(&claimer.request(name, DRAIN_BATCH), now)?;
                refused.extend(claimed.refused);
                all.extend(claimed.rows);
            }
            Ok(all)
        })?;
        for r in &refused {
            queue.events().refused(r);
        }
        report.dead += refused.len();
        if claimed.is_empty() {
            if refused.is_empty() {
                break;
            }
            continue;
        }
        let completions: Vec<Completion> = claimed
            .into_iter()
            .map(|row| {
                let row = Arc::new(row);
                let started_at = queue.now_ms();
                let (outcome, log) = run_attempt(
                    registry,
                    queue,
                    &row,
                    AttemptEnv {
                        worker_id: &worker_id,
                        lease_grace_ms: grace_ms,
                        keeper: LeaseKeeper::Direct,
                        stop: Arc::default(),
                        started_at,
                    },
                );
                Completion {
                    row,
                    started_at,
                    finished_at: queue.now_ms(),
                    outcome,
                    log,
                }
            })
            .collect();
        // Written through the worker's own completer, fences and events included.
        let mut batch = Completer::default();
        for c in completions {
            batch.push(WriterMsg::Complete(c));
        }
        let now = queue.now_ms();
        let applied = queue
            .db()
            .write(|tx| batch.write(tx, &worker_id, now, window_ms))?;
        for (c, ok) in batch.committed(applied, queue.events()) {
            if !ok {
                continue;
            }
            match completer::status_after(&c) {
                JobStatus::Succeeded => report.succeeded += 1,
                JobStatus::Failed => report.failed += 1,
                JobStatus::Dead => report.dead += 1,
                JobStatus::Cancelled => report.cancelled += 1,
                JobStatus::Queued | JobStatus::Running => report.snoozed += 1,
            }
        }
    }
    Ok(report)
}
