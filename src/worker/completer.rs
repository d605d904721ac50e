//! The completer: owns the batch of attempt outcomes (and heartbeats) waiting to be written,
//! decides when the batch is worth a transaction (group commit), writes it with every write
//! fenced by the lease, and after the commit announces what was written and answers the
//! heartbeats. A failed write (busy beyond the timeout, a full disk) keeps the batch and
//! backs off: it never becomes a job failure.
//!
//! It is not a thread of its own: its batch rides in the dispatcher's transaction together
//! with the next claim (completing one batch and claiming the next in one transaction
//! measured fastest, and one writer per process avoids busy sleeps). [`drain`] uses the same
//! code on the caller's thread.
//!
//! [`drain`]: crate::testing::drain

use crate::handler::attempt_log::AttemptLog;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Sender};

use crate::error::{Error, ErrorKind, Result};
use crate::job::{AttemptOutcome, JobStatus};
use crate::queue::events::{Event, EventHub};
use crate::storage::jobs::AttemptRow;
use crate::storage::jobs::{AfterFailure, ClaimedRow, Lease, Success};
use crate::storage::Tx;
use crate::system::outage::{Backoff, RETRY_CAP, RETRY_FIRST};
use crate::worker::deadline::{self, Expiry};
use crate::Queue;

/// How an attempt ended.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    Succeeded {
        result: Option<String>,
        progress: Option<String>,
    },
    Failed {
        after: AfterFailure,
        error: String,
        status_code: Option<i64>,
        timed_out: bool,
    },
    Snoozed {
        until: i64,
    },
    Cancelled {
        reason: String,
    },
    /// Given back unfinished (shutdown): due again at once, attempt not spent.
    Released,
    /// Not run: the job was cancelled while it waited in this worker. Nothing is written;
    /// the job's slot in the worker's counts is freed.
    Dropped,
    /// The retry or snooze the attempt asked for would fall at or after the job's deadline:
    /// the job ends cancelled as expired instead (see `worker/deadline.rs`).
    Expired(Expiry),
}

impl Outcome {
    /// True when writing this outcome ends the job (succeeded, dead or cancelled).
    fn ends_job(&self) -> bool {
        matches!(
            self.status(),
            JobStatus::Succeeded | JobStatus::Dead | JobStatus::Cancelled
        )
    }

    /// The job's status once this outcome is written.
    fn status(&self) -> JobStatus {
        match self {
            Outcome::Succeeded { .. } => JobStatus::Succeeded,
            Outcome::Failed {
                after: AfterFailure::RetryAt(_),
                ..
            } => JobStatus::Failed,
            Outcome::Failed {
                after: AfterFailure::Dead,
                ..
            } => JobStatus::Dead,
            Outcome::Snoozed { .. } | Outcome::Released => JobStatus::Queued,
            Outcome::Cancelled { .. } | Outcome::Dropped | Outcome::Expired(_) => {
                JobStatus::Cancelled
            }
        }
    }
}

/// One finished attempt, on its way to the database.
#[derive(Debug, Clone)]
pub(crate) struct Completion {
    pub(crate) row: Arc<ClaimedRow>,
    pub(crate) started_at: i64,
    pub(crate) finished_at: i64,
    pub(crate) outcome: Outcome,
    /// What the attempt said, kept with it when its outcome is written.
    pub(crate) log: Option<AttemptLog>,
}

/// Outcomes that make a write round worth it even while other attempts still run.
const WRITE_BATCH: usize = 64;
/// The longest an outcome waits for company before it is written alone.
const LINGER: Duration = Duration::from_millis(2);

/// The batch of outcomes and heartbeats waiting to be written.
#[derive(Debug)]
pub(crate) struct Completer {
    pending: Vec<WriterMsg>,
    /// When the oldest pending message arrived.
    pending_since: Option<Instant>,
    /// A heartbeat waits for its reply: write at once.
    urgent: bool,
    /// After a failed write: no new write before this.
    retry_at: Option<Instant>,
    /// Waits after failed writes: a busy or full database, a server that is away.
    busy: Backoff,
    away: Backoff,
}

impl Default for Completer {
    fn default() -> Completer {
        Completer {
            pending: Vec::new(),
            pending_since: None,
            urgent: false,
            retry_at: None,
            busy: Backoff::new(Duration::from_millis(50), Duration::from_millis(1600)),
            away: Backoff::new(RETRY_FIRST, RETRY_CAP),
        }
    }
}

impl Completer {
    /// Adds a finished attempt or a heartbeat to the batch.
    pub(crate) fn push(&mut self, msg: WriterMsg) {
        if matches!(msg, WriterMsg::Extend { .. }) {
            self.urgent = true;
        }
        if self.pending.is_empty() {
            self.pending_since = Some(Instant::now());
        }
        self.pending.push(msg);
    }

    /// Messages waiting to be written.
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// True when nothing waits to be written.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether the batch should be written now: a heartbeat waits for its answer, the batch
    /// is full, no other attempt is running (no company will come), or the oldest outcome
    /// has lingered long enough.
    pub(crate) fn due(&self, now: Instant, nothing_running: bool) -> bool {
        !self.pending.is_empty()
            && (self.urgent
                || self.pending.len() >= WRITE_BATCH
                || nothing_running
                || self
                    .pending_since
                    .is_some_and(|since| now >= since + LINGER))
    }

    /// False while backing off after a failed write.
    pub(crate) fn may_write(&self, now: Instant) -> bool {
        self.retry_at.is_none_or(|at| now >= at)
    }

    /// When a failed write may be tried again, while backing off (`None` once that time
    /// has come).
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        self.retry_at.filter(|&at| at > Instant::now())
    }

    /// When the batch needs a look without any other wake-up: the end of the linger.
    pub(crate) fn linger_ends(&self) -> Option<Instant> {
        self.pending_since.map(|since| since + LINGER)
    }

    /// Writes every message of the batch in `tx`: per message, whether it applied (false: the
    /// lease was gone, a late result changed nothing).
    pub(crate) fn write(
        &self,
        tx: &dyn Tx,
        worker_id: &str,
        now: i64,
        idempotency_window_ms: i64,
    ) -> Result<Vec<bool>> {
        let mut applied = Vec::with_capacity(self.pending.len());
        // Successes in a row are written together (one statement for many jobs); anything
        // else is written in its place, so the order of writes stays the order of outcomes.
        let mut successes: Vec<(&Completion, Success<'_>)> = Vec::new();
        let flush = |successes: &mut Vec<(&Completion, Success<'_>)>,
                     applied: &mut Vec<bool>|
         -> Result<()> {
            applied.extend(write_successes(
                tx,
                worker_id,
                successes,
                now,
                idempotency_window_ms,
            )?);
            successes.clear();
            Ok(())
        };
        for msg in &self.pending {
            if let WriterMsg::Complete(c) = msg {
                if let Some(success) = success_of(c, worker_id) {
                    if successes.iter().all(|(s, _)| s.row.id != c.row.id) {
                        successes.push((c, success));
                        continue;
                    }
                }
            }
            flush(&mut successes, &mut applied)?;
            applied.push(match msg {
                WriterMsg::Complete(c) => {
                    write_completion(tx, worker_id, c, now, idempotency_window_ms)?
                }
                WriterMsg::Extend {
                    row,
                    until,
                    progress,
                    ..
                } => tx.extend_lease(lease_of(row, worker_id), *until, progress.as_deref(), now)?,
            });
        }
        flush(&mut successes, &mut applied)?;
        // What each attempt said goes with its outcome, when that applied.
        for (msg, &ok) in self.pending.iter().zip(&applied) {
            if let (WriterMsg::Complete(c), true) = (msg, ok) {
                if let Some(log) = &c.log {
                    let cut = i64::try_from(log.cut).unwrap_or(i64::MAX);
                    tx.insert_attempt_log(c.row.id, c.row.attempt, &log.text, cut, now)?;
                }
            }
        }
        // Jobs that waited for the ones that just ended are released or cancelled in this
        // same transaction: never twice, never forgotten.
        let ended: Vec<i64> = self
            .pending
            .iter()
            .zip(&applied)
            .filter_map(|(msg, &ok)| match msg {
                WriterMsg::Complete(c) if ok && c.outcome.ends_job() => Some(c.row.id),
                _ => None,
            })
            .collect();
        if !ended.is_empty() {
            tx.settle_dependants_unread(&ended, now)?;
        }
        Ok(applied)
    }

    /// After the batch's transaction committed (`applied` from [`Completer::write`]): tells
    /// subscribers what was written, answers the heartbeats, and empties the batch. Returns
    /// each completion with whether it applied, so the caller can free its slot.
    pub(crate) fn committed(
        &mut self,
        applied: Vec<bool>,
        events: &EventHub,
    ) -> Vec<(Completion, bool)> {
        self.busy.succeeded();
        self.away.succeeded();
        self.retry_at = None;
        self.pending_since = None;
        self.urgent = false;
        let mut done = Vec::new();
        for (msg, ok) in self.pending.drain(..).zip(applied) {
            match msg {
                WriterMsg::Complete(c) => {
                    if ok {
                        announce(events, &c);
                    } else {
                        log::debug!(
                            "litejobs: late result of job {} attempt {} discarded (lease gone)",
                            c.row.id,
                            c.row.attempt
                        );
                    }
                    done.push((c, ok));
                }
                WriterMsg::Extend { reply, .. } => {
                    let _ = reply.send(ok);
                }
            }
        }
        done
    }

    /// After the batch's transaction failed (busy beyond the timeout, disk full, I/O, the
    /// server away): nothing was written; keeps the batch and backs off (50 ms doubling, up
    /// to 1.6 s; for a server that is away 100 ms to 2 s, and quietly: its outage is logged
    /// once, where the connection failed).
    pub(crate) fn failed(&mut self, e: &Error) {
        let backoff = if e.kind() == ErrorKind::Unavailable {
            let backoff = self.away.failed();
            log::debug!("litejobs: write failed ({e}); retrying in {backoff:?}");
            backoff
        } else {
            let backoff = self.busy.failed();
            log::warn!("litejobs: write failed ({e}); retrying in {backoff:?}");
            backoff
        };
        self.retry_at = Some(Instant::now() + backoff);
    }
}

/// Messages to the dispatcher thread, the process's one writer.
#[derive(Debug)]
pub(crate) enum WriterMsg {
    Complete(Completion),
    /// Heartbeat: extend the lease (and save progress); the reply says whether it held.
    Extend {
        row: Arc<ClaimedRow>,
        until: i64,
        progress: Option<String>,
        reply: Sender<bool>,
    },
}

/// The executors' way to the writer: outcomes go on a channel the dispatcher drains in
/// batches; the dispatcher is only woken (`nudge`) when it has something to decide, not for
/// every outcome (a wake-up per job cost more than the job's SQL).
#[derive(Debug, Clone)]
pub(crate) struct WriterHandle {
    pub(crate) messages: Sender<WriterMsg>,
    pub(crate) nudge: Sender<()>,
}

impl WriterHandle {
    /// Wakes the dispatcher (one pending wake-up is enough).
    pub(crate) fn nudge(&self) {
        let _ = self.nudge.try_send(());
    }
}

/// How a handler's heartbeat reaches the database: through the worker's writer thread, or
/// directly when jobs run on the caller's thread ([`drain`](crate::testing::drain)).
#[derive(Debug, Clone)]
pub(crate) enum LeaseKeeper {
    Writer(WriterHandle),
    Direct,
}

impl crate::handler::context::Heartbeat for LeaseKeeper {
    fn extend(
        &self,
        queue: &Queue,
        row: &Arc<ClaimedRow>,
        worker_id: &str,
        until: i64,
        progress: Option<String>,
    ) -> Result<bool> {
        match self {
            LeaseKeeper::Writer(writer) => {
                let (reply, answer) = bounded(1);
                let msg = WriterMsg::Extend {
                    row: Arc::clone(row),
                    until,
                    progress,
                    reply,
                };
                let stopped = || Error::new(ErrorKind::InvalidState, "the worker has stopped");
                writer.messages.send(msg).map_err(|_| stopped())?;
                writer.nudge();
                answer.recv().map_err(|_| stopped())
            }
            LeaseKeeper::Direct => {
                let now = queue.now_ms();
                let lease = lease_of(row, worker_id);
                queue
                    .db()
                    .write(|tx| tx.extend_lease(lease, until, progress.as_deref(), now))
            }
        }
    }
}

fn lease_of<'a>(row: &ClaimedRow, worker_id: &'a str) -> Lease<'a> {
    Lease {
        job_id: row.id,
        attempt: row.attempt,
        worker_id,
    }
}

/// The history row of `c`'s attempt.
fn attempt_row<'a>(
    c: &'a Completion,
    worker_id: &'a str,
    outcome: AttemptOutcome,
    error: Option<&'a str>,
) -> AttemptRow<'a> {
    AttemptRow {
        job_id: c.row.id,
        attempt: c.row.attempt,
        worker: worker_id,
        started_at: c.started_at,
        finished_at: c.finished_at,
        outcome,
        error,
        status_code: None,
    }
}

/// The success to write for `c`, if it succeeded.
fn success_of<'a>(c: &'a Completion, worker_id: &'a str) -> Option<Success<'a>> {
    match &c.outcome {
        Outcome::Succeeded { result, progress } => Some(Success {
            lease: lease_of(&c.row, worker_id),
            result: result.as_deref(),
            progress: progress.as_deref(),
            queue: &c.row.queue,
            job_type: &c.row.job_type,
        }),
        _ => None,
    }
}

/// Writes successes (of distinct jobs) together, then what each that applied brings along:
/// the history row of a success after failures, the remembered idempotency key. Returns,
/// in order, whether each applied.
fn write_successes(
    tx: &dyn Tx,
    worker_id: &str,
    successes: &[(&Completion, Success<'_>)],
    now: i64,
    idempotency_window_ms: i64,
) -> Result<Vec<bool>> {
    if successes.is_empty() {
        return Ok(Vec::new());
    }
    let jobs: Vec<Success<'_>> = successes.iter().map(|&(_, s)| s).collect();
    let applied = tx.succeed(&jobs, now)?;
    for ((c, _), _) in successes.iter().zip(&applied).filter(|(_, &ok)| ok) {
        if c.row.attempt > 1 {
            // A success after failures belongs in the history; a first-try success is
            // recorded on the job row alone (the fast path writes one row).
            tx.insert_attempt(&attempt_row(c, worker_id, AttemptOutcome::Succeeded, None))?;
        }
        if let Some(key) = &c.row.idempotency_key {
            tx.remember_key(key, c.row.id, now, idempotency_window_ms)?;
        }
    }
    Ok(applied)
}

/// Writes one completion. Returns false when the lease was gone (a late result after a
/// timeout, a reap or a release: nothing changed).
pub(crate) fn write_completion(
    tx: &dyn Tx,
    worker_id: &str,
    c: &Completion,
    now: i64,
    idempotency_window_ms: i64,
) -> Result<bool> {
    let lease = lease_of(&c.row, worker_id);
    match &c.outcome {
        Outcome::Succeeded { result, progress } => {
            let success = Success {
                lease,
                result: result.as_deref(),
                progress: progress.as_deref(),
                queue: &c.row.queue,
                job_type: &c.row.job_type,
            };
            let applied =
                write_successes(tx, worker_id, &[(c, success)], now, idempotency_window_ms)?;
            return Ok(applied == [true]);
        }
        Outcome::Failed {
            after,
            error,
            status_code,
            timed_out,
        } => {
            if !tx.fail(lease, *after, error, *status_code, now)? {
                return Ok(false);
            }
            let outcome = if *timed_out {
                AttemptOutcome::TimedOut
            } else {
                AttemptOutcome::Failed
            };
            tx.insert_attempt(&AttemptRow {
                status_code: *status_code,
                ..attempt_row(c, worker_id, outcome, Some(error))
            })?;
        }
        Outcome::Snoozed { until } => {
            return tx.put_back(lease, Some(*until), now);
        }
        Outcome::Cancelled { reason } => {
            if !tx.cancel_running(lease, reason, now)? {
                return Ok(false);
            }
            tx.insert_attempt(&attempt_row(
                c,
                worker_id,
                AttemptOutcome::Cancelled,
                Some(reason),
            ))?;
        }
        Outcome::Dropped => return Ok(false),
        Outcome::Expired(expiry) => {
            let attempt = attempt_row(c, worker_id, AttemptOutcome::Cancelled, None);
            return deadline::write_expired(tx, lease, &attempt, expiry, now);
        }
        Outcome::Released => {
            // Back in its place: its run time as it was, so that it goes before the jobs of
            // its priority that were due after it.
            if !tx.put_back(lease, None, now)? {
                return Ok(false);
            }
            tx.insert_attempt(&attempt_row(
                c,
                worker_id,
                AttemptOutcome::Released,
                Some("released unfinished at worker shutdown"),
            ))?;
        }
    }
    Ok(true)
}

/// The job's status once `c` is written.
pub(crate) fn status_after(c: &Completion) -> JobStatus {
    c.outcome.status()
}

/// Tells subscribers what was written (after the commit).
pub(crate) fn announce(events: &EventHub, c: &Completion) {
    if !events.has_subscribers() {
        return;
    }
    let error = match &c.outcome {
        Outcome::Failed { error, .. } => Some(error.clone()),
        Outcome::Cancelled { reason } => Some(reason.clone()),
        Outcome::Expired(expiry) => Some(expiry.reason.clone()),
        _ => None,
    };
    events.send(Event::Finished {
        id: c.row.id,
        job_type: c.row.job_type.clone(),
        queue: c.row.queue.clone(),
        attempt: c.row.attempt,
        status: status_after(c),
        error,
    });
}
