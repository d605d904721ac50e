//! Executor threads: run one handler at a time, catch panics, enforce the deadline with the
//! dispatcher's help, and hand each outcome to the writer.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::encryption::envelope::key_in_damaged;
use crate::encryption::Column;
use crate::handler::attempt_log::{self, AttemptLog};
use crate::handler::context::{Heartbeat, JobContext};
use crate::handler::stop::StopSignal;
use crate::handler::{Action, JobError};
use crate::job::jitter_sample;
use crate::queue::cancel_board::CancelBoard;
use crate::queue::events::Event;
use crate::storage::jobs::{AfterFailure, ClaimedRow};
use crate::system::clock::duration_to_ms;
use crate::worker::completer::{Completion, LeaseKeeper, Outcome, WriterHandle, WriterMsg};
use crate::worker::deadline::{self, Expiry};
use crate::worker::feed::QueueFeed;
use crate::worker::registry::Registry;
use crate::Queue;

/// What every executor thread of a worker shares.
pub(crate) struct ExecShared {
    pub(crate) queue: Queue,
    pub(crate) registry: Arc<Registry>,
    pub(crate) worker_id: Arc<str>,
    pub(crate) writer: WriterHandle,
    /// Set at shutdown: jobs taken from the channel now are released, not run.
    pub(crate) stopping: AtomicBool,
    pub(crate) lease_grace_ms: i64,
    /// Cancelled jobs not to start (see [`CancelBoard`]).
    pub(crate) cancelled: Arc<CancelBoard>,
}

/// One executor thread's current attempt, shared with the dispatcher so it can time the
/// attempt out. Whoever moves it out of `Running` first decides the outcome.
#[derive(Default)]
pub(crate) struct Slot {
    state: Mutex<SlotState>,
}

#[derive(Default)]
enum SlotState {
    #[default]
    Idle,
    Running(Running),
    /// Timed out or given up at shutdown: the thread's late result is discarded and the
    /// thread ends; a replacement took its place.
    Abandoned,
}

/// An attempt in progress.
pub(crate) struct Running {
    pub(crate) row: Arc<ClaimedRow>,
    pub(crate) deadline: Instant,
    pub(crate) timeout: Duration,
    pub(crate) started_at: i64,
    /// Set to stop the attempt (timed out, a shutdown past its grace, cancelled: see
    /// [`Slot::cancel`]).
    pub(crate) stop: Arc<StopSignal>,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn start(&self, running: Running) {
        *self.lock() = SlotState::Running(running);
    }

    /// Back to idle; false when the dispatcher abandoned the attempt first.
    fn finish(&self) -> bool {
        let mut state = self.lock();
        match *state {
            SlotState::Abandoned => false,
            _ => {
                *state = SlotState::Idle;
                true
            }
        }
    }

    /// The running attempt's deadline.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match &*self.lock() {
            SlotState::Running(r) => Some(r.deadline),
            _ => None,
        }
    }

    /// Abandons the attempt if it is past its deadline.
    pub(crate) fn take_if_overdue(&self, now: Instant) -> Option<Running> {
        let mut state = self.lock();
        match &*state {
            SlotState::Running(r) if r.deadline <= now => self.abandon_locked(&mut state),
            _ => None,
        }
    }

    /// Abandons the running attempt, if any (shutdown past its grace).
    pub(crate) fn abandon(&self) -> Option<Running> {
        let mut state = self.lock();
        self.abandon_locked(&mut state)
    }

    fn abandon_locked(&self, state: &mut SlotState) -> Option<Running> {
        match std::mem::replace(state, SlotState::Abandoned) {
            SlotState::Running(r) => {
                r.stop.set();
                Some(r)
            }
            other => {
                *state = other;
                None
            }
        }
    }

    pub(crate) fn is_abandoned(&self) -> bool {
        matches!(*self.lock(), SlotState::Abandoned)
    }

    /// The job of the running attempt, unless it was already told it is cancelled.
    pub(crate) fn running_job(&self) -> Option<i64> {
        match &*self.lock() {
            SlotState::Running(r) if r.stop.cancelled().is_none() => Some(r.row.id),
            _ => None,
        }
    }

    /// Tells the running attempt of job `id`, if this slot runs it, that the job was
    /// cancelled (`text`: "cancelled by WHO: WHY"): its handler's `should_stop` turns true.
    /// Returns the attempt's job type and number when it was told now. The attempt keeps
    /// its thread until it returns or its deadline passes, as any other.
    pub(crate) fn cancel(&self, id: i64, text: &str) -> Option<(String, i64)> {
        match &*self.lock() {
            SlotState::Running(r) if r.row.id == id && r.stop.cancel(text) => {
                Some((r.row.job_type.clone(), r.row.attempt))
            }
            _ => None,
        }
    }
}

/// Starts one executor thread reading claimed jobs from `feed`.
pub(crate) fn spawn(
    shared: Arc<ExecShared>,
    feed: Arc<QueueFeed>,
    index: usize,
) -> std::io::Result<(Arc<Slot>, JoinHandle<()>)> {
    let slot = Arc::new(Slot::default());
    let thread_slot = Arc::clone(&slot);
    let handle = std::thread::Builder::new()
        .name(format!("litejobs-{}-{index}", feed.name))
        .spawn(move || executor_loop(&shared, &feed, &thread_slot))?;
    Ok((slot, handle))
}

fn executor_loop(shared: &ExecShared, feed: &QueueFeed, slot: &Slot) {
    loop {
        let Some(row) = feed.next() else { return };
        let now = shared.queue.now_ms();
        if shared.stopping.load(Ordering::SeqCst) {
            if send_outcome(shared, feed, row, now, Outcome::Released, None).is_err() {
                return;
            }
            continue;
        }
        let timeout = shared.registry.timeout_for(&row);
        // A prefetched job may have waited in the channel: make sure its lease covers this
        // whole attempt before starting, or leave it if another worker took it meanwhile.
        let needed = now
            .saturating_add(duration_to_ms(timeout))
            .saturating_add(shared.lease_grace_ms / 2);
        if row.locked_until < needed {
            let until = needed.saturating_add(shared.lease_grace_ms / 2);
            let keeper = LeaseKeeper::Writer(shared.writer.clone());
            match keeper.extend(&shared.queue, &row, &shared.worker_id, until, None) {
                // Shutdown began while this waited for its lease: give the job back.
                Ok(true) if shared.stopping.load(Ordering::SeqCst) => {
                    if send_outcome(shared, feed, row, now, Outcome::Released, None).is_err() {
                        return;
                    }
                    continue;
                }
                Ok(true) => {}
                Ok(false) => {
                    log::warn!(
                        "litejobs: job {} lost its lease while waiting to start; skipped",
                        row.id
                    );
                    // Fenced, so this writes nothing; it frees the dispatcher's slot count.
                    if send_outcome(shared, feed, row, now, Outcome::Released, None).is_err() {
                        return;
                    }
                    continue;
                }
                Err(_) => return,
            }
        }
        let stop = Arc::new(StopSignal::default());
        slot.start(Running {
            row: Arc::clone(&row),
            deadline: Instant::now() + timeout,
            timeout,
            started_at: now,
            stop: Arc::clone(&stop),
        });
        // Looked at after the slot shows the job running: a cancel the dispatcher posts
        // meanwhile is either seen here or finds the running slot.
        if let Some(text) = cancelled_before_start(&shared.cancelled, row.id, &stop) {
            if !slot.finish() {
                return;
            }
            log::info!(
                "litejobs: job {} was {text} before it started; not run",
                row.id
            );
            if send_outcome(shared, feed, row, now, Outcome::Dropped, None).is_err() {
                return;
            }
            continue;
        }
        if shared.queue.events().has_subscribers() {
            shared.queue.events().send(Event::Started {
                id: row.id,
                job_type: row.job_type.clone(),
                queue: row.queue.clone(),
                attempt: row.attempt,
            });
        }
        let keeper = LeaseKeeper::Writer(shared.writer.clone());
        let began = Instant::now();
        let (outcome, log) = run_attempt(
            &shared.registry,
            &shared.queue,
            &row,
            AttemptEnv {
                worker_id: &shared.worker_id,
                lease_grace_ms: shared.lease_grace_ms,
                keeper,
                stop,
                started_at: now,
            },
        );
        let micros = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
        feed.busy_micros.fetch_add(micros, Ordering::Relaxed);
        feed.ran.fetch_add(1, Ordering::Relaxed);
        if !slot.finish() {
            // Timed out (or given up at shutdown) and replaced: the result is discarded. At
            // shutdown the dispatcher has said the job was released: once is enough.
            let level = if shared.stopping.load(Ordering::SeqCst) {
                log::Level::Debug
            } else {
                log::Level::Warn
            };
            log::log!(
                level,
                job_id = row.id,
                job_type = row.job_type.as_str(),
                attempt = row.attempt;
                "litejobs: job {} attempt {} returned after it was given up (past its deadline, \
                 or past the shutdown grace); its result is discarded",
                row.id,
                row.attempt
            );
            return;
        }
        if send_outcome(shared, feed, row, now, outcome, log).is_err() {
            return;
        }
    }
}

fn send_outcome(
    shared: &ExecShared,
    feed: &QueueFeed,
    row: Arc<ClaimedRow>,
    started_at: i64,
    outcome: Outcome,
    log: Option<AttemptLog>,
) -> Result<(), ()> {
    let completion = Completion {
        row,
        started_at,
        finished_at: shared.queue.now_ms(),
        outcome,
        log,
    };
    shared
        .writer
        .messages
        .send(WriterMsg::Complete(completion))
        .map_err(|_| ())?;
    feed.finished_one(&shared.writer);
    Ok(())
}

/// What an attempt needs beyond the job itself.
pub(crate) struct AttemptEnv<'a> {
    pub(crate) worker_id: &'a Arc<str>,
    pub(crate) lease_grace_ms: i64,
    pub(crate) keeper: LeaseKeeper,
    pub(crate) stop: Arc<StopSignal>,
    pub(crate) started_at: i64,
}

/// Runs one attempt on the calling thread and decides its outcome. Shared by the executor
/// threads and [`drain`](crate::testing::drain), so tests exercise the production path.
pub(crate) fn run_attempt(
    registry: &Registry,
    queue: &Queue,
    row: &Arc<ClaimedRow>,
    env: AttemptEnv<'_>,
) -> (Outcome, Option<AttemptLog>) {
    let Some(handler) = registry.handler(&row.job_type) else {
        // The claim only takes registered types; this would be a bug, so keep the job.
        return (Outcome::Released, None);
    };
    // A row another program wrote that no handler can use goes dead without running, with
    // an error naming the job, the column and what it held.
    let unusable = |what: String| Outcome::Failed {
        after: AfterFailure::Dead,
        error: format!("job {}: {what}; dead without running", row.id),
        status_code: None,
        timed_out: false,
    };
    if let Some(defect) = &row.defect {
        return (unusable(defect.clone()), None);
    }
    let payload = match serde_json::from_str(&row.payload) {
        Ok(payload) => payload,
        Err(e) => {
            return (
                unusable(match key_in_damaged(&row.payload) {
                    Some(key) => format!(
                        "payload is a damaged envelope (key {key}), cut short or altered: \
                         not valid JSON ({e})"
                    ),
                    None => format!("column payload is not valid JSON ({e})"),
                }),
                None,
            )
        }
    };
    // An envelope is opened here, on the executor's thread, before the handler runs; one
    // that cannot be opened (no key, a wrong one, altered, moved) makes the job dead.
    let (payload, sealed) = match queue.open_claimed(row, payload) {
        Ok(opened) => opened,
        Err(why) => return (unusable(why), None),
    };
    let ctx = JobContext::new(
        Arc::clone(row),
        payload,
        queue.clone(),
        registry.timeout_for(row),
        env.started_at,
        env.lease_grace_ms,
        Arc::clone(env.worker_id),
        Arc::new(env.keeper),
        env.stop,
    )
    .sealed(sealed);
    let keep_log = registry.keeps_logs(&row.job_type);
    let result = {
        // `log` records of the handler's thread go to its attempt's log meanwhile.
        let _capture = keep_log.then(|| attempt_log::capture(&ctx.log));
        catch_unwind(AssertUnwindSafe(|| handler.run(&ctx)))
    };
    let now = queue.now_ms();
    let log = ctx
        .log
        .lock()
        .map(|mut log| std::mem::take(&mut *log))
        .ok()
        .filter(|log| !log.is_empty() && keep_log)
        .map(AttemptLog::bounded);
    let outcome = match result {
        Ok(Ok(())) => {
            let taken = |m: &std::sync::Mutex<Option<String>>| {
                m.lock().unwrap_or_else(|p| p.into_inner()).take()
            };
            match (
                ctx.stored_output(Column::Result, taken(&ctx.result)),
                ctx.stored_output(Column::Progress, taken(&ctx.progress)),
            ) {
                (Ok(result), Ok(progress)) => Outcome::Succeeded { result, progress },
                // Never written in clear: the attempt is retried (no random bytes, say).
                (Err(e), _) | (_, Err(e)) => failure(
                    registry,
                    row,
                    now,
                    format!("cannot encrypt the job's result or progress: {e}"),
                    None,
                    false,
                ),
            }
        }
        Ok(Err(err)) => outcome_of_error(registry, row, err, now),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_string());
            failure(
                registry,
                row,
                now,
                crate::handler::bounded_error(format!("handler panicked: {message}")),
                None,
                false,
            )
        }
    };
    // A snooze or a release does not count as an attempt: the next run has its number, and
    // its log.
    let log = log.filter(|_| !matches!(outcome, Outcome::Snoozed { .. } | Outcome::Released));
    (outcome, log)
}

fn outcome_of_error(registry: &Registry, row: &ClaimedRow, err: JobError, now: i64) -> Outcome {
    let JobError {
        action,
        message,
        status_code,
    } = err;
    match action {
        Action::Retry => failure(registry, row, now, message, status_code, false),
        Action::RetryAfter(delay) => {
            let after = if row.attempt >= row.max_attempts {
                AfterFailure::Dead
            } else {
                AfterFailure::RetryAt(now.saturating_add(duration_to_ms(delay)))
            };
            failed(row, after, message, status_code, false)
        }
        Action::Permanent => Outcome::Failed {
            after: AfterFailure::Dead,
            error: message,
            status_code,
            timed_out: false,
        },
        Action::Snooze(delay) => {
            let until = now.saturating_add(duration_to_ms(delay));
            match deadline::snooze_expires(row, until) {
                Some(reason) => Outcome::Expired(Expiry {
                    reason,
                    error: None,
                    status_code: None,
                    timed_out: false,
                }),
                None => Outcome::Snoozed { until },
            }
        }
        Action::Cancel => Outcome::Cancelled { reason: message },
    }
}

/// A spent attempt: retried by the type's policy, or dead when it was the last.
pub(crate) fn failure(
    registry: &Registry,
    row: &ClaimedRow,
    now: i64,
    error: String,
    status_code: Option<i64>,
    timed_out: bool,
) -> Outcome {
    let after = if row.attempt >= row.max_attempts {
        AfterFailure::Dead
    } else {
        let attempt = u32::try_from(row.attempt).unwrap_or(u32::MAX);
        let delay = registry
            .retry_policy(&row.job_type)
            .delay(attempt, jitter_sample());
        AfterFailure::RetryAt(now.saturating_add(duration_to_ms(delay)))
    };
    failed(row, after, error, status_code, timed_out)
}

/// A failed attempt's outcome: as `after` says, unless its retry would fall at or after the
/// job's deadline, which ends the job expired instead.
fn failed(
    row: &ClaimedRow,
    after: AfterFailure,
    error: String,
    status_code: Option<i64>,
    timed_out: bool,
) -> Outcome {
    let expired = match after {
        AfterFailure::RetryAt(at) => deadline::retry_expires(row, at),
        AfterFailure::Dead => None,
    };
    match expired {
        Some(reason) => Outcome::Expired(Expiry {
            reason,
            error: Some(error),
            status_code,
            timed_out,
        }),
        None => Outcome::Failed {
            after,
            error,
            status_code,
            timed_out,
        },
    }
}

/// Why job `id`, just put in its slot, must not start: it was cancelled while it waited in
/// the channel. Posted on the board; or found in the slot by the dispatcher, which then took
/// the post back and told the attempt's stop signal. Both count, or a job cancelled while it
/// waited would start after all when the dispatcher came between the slot and the board.
fn cancelled_before_start(board: &CancelBoard, id: i64, stop: &StopSignal) -> Option<String> {
    board
        .take(id)
        .or_else(|| stop.cancelled().map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order a loaded machine can give: a job cancelled while it waits is posted; the
    /// executor puts it in its slot; the dispatcher, hearing of the cancel, finds it there,
    /// tells its stop signal and takes the post back; then the executor looks. The job must
    /// still not start.
    #[test]
    fn a_job_the_dispatcher_finds_in_its_slot_after_a_cancel_does_not_start() {
        let board = CancelBoard::default();
        let stop = StopSignal::default();
        let text = "cancelled by ops: not needed";
        board.post(2, text, Instant::now());
        assert!(stop.cancel(text), "the dispatcher tells the slot's attempt");
        assert!(board.take(2).is_some(), "and takes the post back");
        assert_eq!(
            cancelled_before_start(&board, 2, &stop).as_deref(),
            Some(text)
        );
        board.post(4, text, Instant::now());
        assert_eq!(
            cancelled_before_start(&board, 4, &StopSignal::default()).as_deref(),
            Some(text),
            "a post the executor sees first"
        );
        assert_eq!(
            cancelled_before_start(&board, 3, &StopSignal::default()),
            None
        );
    }
}
