//! What a job is, as data: the job to enqueue ([`NewJob`]), a stored row ([`JobRecord`]) and
//! its status and attempt history, a typed payload ([`Job`]) and the retry policy its type
//! may declare ([`RetryPolicy`]). Nothing here reads a database or runs a handler.

mod expiry;
pub(crate) mod finite;
mod new;
mod record;
mod retry;
mod typed;

pub(crate) use expiry::{
    not_started_reason, resolve_expiry, retry_reason, snooze_reason, EXPIRED_BY,
};
pub(crate) use new::{clamp_run_at, validate, Payload, RunAt, MAX_RUN_AT_MS};
pub use new::{NewJob, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_QUEUE};
pub use record::{
    AttemptLogRecord, AttemptOutcome, AttemptRecord, Discarded, JobRecord, JobStatus,
};
pub(crate) use retry::jitter_sample;
pub use retry::{RetryPolicy, DEFAULT_RETRY_BASE, DEFAULT_RETRY_JITTER, DEFAULT_RETRY_MAX_DELAY};
pub use typed::{IntoNewJob, Job, JobOptions};
