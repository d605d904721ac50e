//! [`JobContext`]: what a handler sees of its job and what it can tell the runtime.

use super::attempt_log::AttemptLog;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;

use super::error::JobError;
use super::stop::StopSignal;
use crate::encryption::Column;
use crate::error::{Error, ErrorKind, Result};
use crate::job::JobStatus;
use crate::storage::admin::cancelled_text;
use crate::storage::jobs::{ClaimedRow, Lease};
use crate::system::clock::{duration_to_ms, ms_to_system_time};
use crate::Queue;

/// How a handler's heartbeat reaches the database: implemented by the worker runtime (through
/// its writer thread, or directly when jobs run on the caller's thread in
/// [`drain`](crate::testing::drain)). Kept here so the context depends on no runtime type.
pub(crate) trait Heartbeat: Send + Sync {
    /// Moves the lease of `row`'s attempt under `worker_id` to `until`, saving `progress`
    /// if given. False when the lease is gone.
    fn extend(
        &self,
        queue: &Queue,
        row: &Arc<ClaimedRow>,
        worker_id: &str,
        until: i64,
        progress: Option<String>,
    ) -> crate::Result<bool>;
}

/// One attempt of one job, as its handler sees it: the payload, the attempt number, the
/// deadline, and ways to heartbeat, report progress, store a result and guard side effects.
pub struct JobContext {
    pub(crate) row: Arc<ClaimedRow>,
    payload: serde_json::Value,
    pub(crate) queue: Queue,
    timeout: Duration,
    deadline_ms: i64,
    /// The same deadline on the monotonic clock: how long storage calls may wait out a busy
    /// database (the queue's clock may be a stopped ManualClock).
    run_until: Instant,
    lease_grace_ms: i64,
    worker_id: Arc<str>,
    lease: Arc<dyn Heartbeat>,
    /// Set when the attempt should stop; says who cancelled the job when a person did.
    stop: Arc<StopSignal>,
    pub(crate) result: Mutex<Option<String>>,
    pub(crate) progress: Mutex<Option<String>>,
    /// The payload was an envelope: the result and progress are stored sealed too.
    sealed: bool,
    /// Its workflow and step name, read on first use.
    pub(crate) placement: std::sync::OnceLock<(Option<i64>, Option<String>)>,
    /// What the attempt said ([`JobContext::log_line`], captured `log` records, a command's
    /// stderr), kept with the attempt.
    pub(crate) log: Arc<Mutex<AttemptLog>>,
}

impl std::fmt::Debug for JobContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobContext")
            .field("id", &self.row.id)
            .field("job_type", &self.row.job_type)
            .field("attempt", &self.row.attempt)
            .finish()
    }
}

impl JobContext {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        row: Arc<ClaimedRow>,
        payload: serde_json::Value,
        queue: Queue,
        timeout: Duration,
        started_at_ms: i64,
        lease_grace_ms: i64,
        worker_id: Arc<str>,
        lease: Arc<dyn Heartbeat>,
        stop: Arc<StopSignal>,
    ) -> JobContext {
        JobContext {
            row,
            payload,
            queue,
            timeout,
            deadline_ms: started_at_ms.saturating_add(duration_to_ms(timeout)),
            run_until: Instant::now() + timeout,
            lease_grace_ms,
            worker_id,
            lease,
            stop,
            result: Mutex::new(None),
            progress: Mutex::new(None),
            sealed: false,
            placement: std::sync::OnceLock::new(),
            log: Arc::default(),
        }
    }

    /// Adds `text` (one line or more) to this attempt's log, which is kept with the attempt
    /// (its newest 32 KiB) and shown by `litejobs show ID` and the dashboard's job page,
    /// with secret fields masked as in payloads. `log` records emitted on the handler's
    /// thread go there too while a [`CaptureLogger`](crate::job_log::CaptureLogger) is the
    /// program's logger (the `litejobs` command installs one).
    ///
    /// ```
    /// use litejobs::{JobContext, JobError};
    /// fn import(ctx: &JobContext) -> Result<(), JobError> {
    ///     ctx.log_line("fetched 120 rows from the partner's API");
    ///     Ok(())
    /// }
    /// ```
    pub fn log_line(&self, text: impl AsRef<str>) {
        if let Ok(mut log) = self.log.lock() {
            log.push(text.as_ref());
        }
    }

    /// Adds a command's stderr to the log, counting the `dropped` bytes it lost before it.
    pub(crate) fn log_stderr(&self, stderr: &str, dropped: u64) {
        if let Ok(mut log) = self.log.lock() {
            log.left_out(dropped);
            log.push(stderr);
        }
    }

    /// Marks the job's payload as having come in an envelope: what the attempt writes back
    /// (result, progress) is sealed with the queue's first key.
    pub(crate) fn sealed(mut self, sealed: bool) -> JobContext {
        self.sealed = sealed;
        self
    }

    /// The text to store in `column` for `text`: itself, or its envelope for a sealed job.
    pub(crate) fn stored_output(
        &self,
        column: Column,
        text: Option<String>,
    ) -> Result<Option<String>> {
        match text {
            Some(text) if self.sealed => {
                Ok(Some(self.queue.seal_output(&self.row, column, &text)?))
            }
            other => Ok(other),
        }
    }

    /// serde's message about this job's payload, as an error to store: for an encrypted
    /// payload, without the values serde quotes (the error is stored in clear).
    pub(crate) fn payload_error(&self, message: &str) -> String {
        if self.sealed {
            crate::encryption::without_values(message)
        } else {
            message.to_string()
        }
    }

    /// The job's id.
    pub fn id(&self) -> i64 {
        self.row.id
    }

    /// The queue the job runs from, for code that reads more of the job's row (the email
    /// handler's kept Message-ID) or shares state through the database (rate limits).
    pub(crate) fn queue_handle(&self) -> &Queue {
        &self.queue
    }

    /// The job type.
    pub fn job_type(&self) -> &str {
        &self.row.job_type
    }

    /// The queue the job came from.
    pub fn queue_name(&self) -> &str {
        &self.row.queue
    }

    /// The JSON payload.
    pub fn payload(&self) -> &serde_json::Value {
        &self.payload
    }

    /// The payload as a typed value. A payload that does not fit `T` is a permanent error:
    /// retrying cannot fix it.
    pub fn payload_as<T: DeserializeOwned>(&self) -> std::result::Result<T, JobError> {
        T::deserialize(&self.payload).map_err(|e| {
            JobError::permanent(format!(
                "payload does not match the {} job's type: {}",
                self.row.job_type,
                self.payload_error(&e.to_string())
            ))
        })
    }

    /// This attempt's number, from 1.
    pub fn attempt(&self) -> u32 {
        u32::try_from(self.row.attempt).unwrap_or(u32::MAX)
    }

    /// The lease this attempt runs under, for the handler's own writes that must not land
    /// once the attempt has lost its job (a report chunk's rows).
    pub(crate) fn lease(&self) -> Lease<'_> {
        Lease {
            job_id: self.row.id,
            attempt: self.row.attempt,
            worker_id: &self.worker_id,
        }
    }

    /// Attempts the job gets in all.
    pub fn max_attempts(&self) -> u32 {
        u32::try_from(self.row.max_attempts).unwrap_or(u32::MAX)
    }

    /// True when this is the job's last attempt: a retryable error will make it dead.
    pub fn is_last_attempt(&self) -> bool {
        self.row.attempt >= self.row.max_attempts
    }

    /// The job's idempotency key, if it has one.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.row.idempotency_key.as_deref()
    }

    /// The job's group key, if it has one.
    pub fn group_key(&self) -> Option<&str> {
        self.row.group_key.as_deref()
    }

    /// This attempt's time limit.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// When this attempt is timed out (by the queue's clock). Past it the attempt is
    /// recorded as timed out, its thread is replaced, and its result is discarded.
    pub fn deadline(&self) -> std::time::SystemTime {
        ms_to_system_time(self.deadline_ms)
    }

    /// True once the attempt should stop: it timed out, the worker is shutting down and
    /// the grace period is over, or the job was cancelled while it ran
    /// ([`Queue::cancel`](crate::Queue::cancel): within about a second when cancelled from
    /// another process, at once from this one). Long handlers check this between steps;
    /// whatever the attempt returns after that is discarded.
    pub fn should_stop(&self) -> bool {
        self.stop.is_set()
    }

    /// "cancelled by WHO: WHY" once this worker has heard that the job was cancelled while
    /// this attempt ran.
    #[cfg_attr(not(feature = "exec"), allow(dead_code))]
    pub(crate) fn cancelled(&self) -> Option<&str> {
        self.stop.cancelled()
    }

    /// The signal [`should_stop`](JobContext::should_stop) reads, for a watcher on another
    /// thread (command handlers stop their process group when it is set).
    #[cfg(feature = "exec")]
    pub(crate) fn stop_signal(&self) -> Arc<StopSignal> {
        Arc::clone(&self.stop)
    }

    /// When this attempt's time is up, by the monotonic clock.
    #[cfg(feature = "exec")]
    pub(crate) fn run_until(&self) -> Instant {
        self.run_until
    }

    /// Extends the lease by the job's timeout plus the grace from now, and saves progress
    /// set with [`set_progress`](JobContext::set_progress). Long jobs call it now and then
    /// so the reaper knows they are alive.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidState`] when the lease is gone: the job was cancelled (the
    /// message says "job N was cancelled by WHO: WHY"), or it was reaped or timed out and
    /// may be running elsewhere. Either way the handler should stop.
    pub fn heartbeat(&self) -> Result<()> {
        if let Some(text) = self.stop.cancelled() {
            return Err(self.cancelled_error(text));
        }
        let until = self
            .queue
            .now_ms()
            .saturating_add(duration_to_ms(self.timeout))
            .saturating_add(self.lease_grace_ms);
        let progress = self.lock_progress().clone();
        let progress = self.stored_output(Column::Progress, progress)?;
        if self
            .lease
            .extend(&self.queue, &self.row, &self.worker_id, until, progress)?
        {
            return Ok(());
        }
        // Why the lease is gone: a cancel from another process is told as such before the
        // worker's own look at the job has come.
        if let Ok(Some(job)) = self.queue.job(self.row.id) {
            if job.status == JobStatus::Cancelled {
                let text =
                    cancelled_text(job.cancelled_by.as_deref(), job.cancel_reason.as_deref());
                return Err(self.cancelled_error(&text));
            }
        }
        Err(Error::new(
            ErrorKind::InvalidState,
            format!("job {} lost its lease; stop this attempt", self.row.id),
        ))
    }

    fn cancelled_error(&self, text: &str) -> Error {
        Error::new(
            ErrorKind::InvalidState,
            format!("job {} was {text}; stop this attempt", self.row.id),
        )
    }

    /// Records progress (JSON), saved at the next heartbeat and when the attempt ends (an
    /// encrypted job's sealed, as its result).
    pub fn set_progress(&self, progress: serde_json::Value) {
        *self.lock_progress() = Some(progress.to_string());
    }

    /// Stores a result (JSON) with the job when the attempt succeeds.
    ///
    /// A NaN or infinite float is already `null` in a `serde_json::Value` (`json!` and
    /// `serde_json::to_value` write it so): check such numbers before building the result.
    pub fn set_result(&self, result: serde_json::Value) {
        *self.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(result.to_string());
    }

    /// The key under which this job's side effect is recorded: its idempotency key, or its
    /// id when it has none.
    fn effect_key(&self) -> String {
        match &self.row.idempotency_key {
            Some(key) => format!("effect:{key}"),
            None => format!("effect:job:{}", self.row.id),
        }
    }

    /// True when an earlier attempt of this job (or of a job with the same idempotency key)
    /// recorded its side effect as done with [`mark_effect_done`](JobContext::mark_effect_done),
    /// e.g. before a crash kept it from writing its success back.
    pub fn effect_done(&self) -> Result<bool> {
        let key = self.effect_key();
        self.waiting_out_busy(|| {
            let now = self.queue.now_ms();
            self.queue.db().read(|conn| conn.key_remembered(&key, now))
        })
    }

    /// Records, in its own committed transaction, that this job's side effect happened. A
    /// database locked by another process is waited out until the attempt's deadline.
    pub fn mark_effect_done(&self) -> Result<()> {
        let key = self.effect_key();
        let window = duration_to_ms(self.queue.idempotency_window());
        let id = self.row.id;
        self.waiting_out_busy(|| {
            let now = self.queue.now_ms();
            self.queue
                .db()
                .write(|tx| tx.remember_key(&key, id, now, window))
        })
    }

    /// Retries `op` while the database is busy (or its server away), until this attempt's
    /// deadline (a busy database is waited out, never turned into a failure while there
    /// is time).
    fn waiting_out_busy<T>(&self, mut op: impl FnMut() -> Result<T>) -> Result<T> {
        let mut pause = Duration::from_millis(5);
        loop {
            match op() {
                Err(e)
                    if (e.is_busy() || e.kind() == crate::ErrorKind::Unavailable)
                        && Instant::now() + pause < self.run_until =>
                {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                other => return other,
            }
        }
    }

    /// Runs `effect` once across attempts: skipped (returning `Ok(false)`) when an earlier
    /// attempt already recorded it, otherwise run and recorded (`Ok(true)`). Use it for the
    /// one step that must not repeat, such as sending the email.
    ///
    /// The record is committed right after the effect, in its own transaction: a crash in
    /// the instant between the two still repeats the effect on the next attempt
    /// (at-least-once, as everywhere). Once the effect has run, a failure to record it is
    /// logged and the attempt still counts as done, so it is not retried for that reason.
    pub fn once(
        &self,
        effect: impl FnOnce() -> std::result::Result<(), JobError>,
    ) -> std::result::Result<bool, JobError> {
        if self.effect_done().map_err(storage_failure)? {
            return Ok(false);
        }
        effect()?;
        if let Err(e) = self.mark_effect_done() {
            log::warn!(
                "litejobs: job {} ran its side effect but could not record it: {e}",
                self.row.id
            );
        }
        Ok(true)
    }

    fn lock_progress(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn storage_failure(err: Error) -> JobError {
    JobError::retry(format!("could not check the side-effect record: {err}"))
}
