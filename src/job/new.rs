//! A job to enqueue ([`NewJob`]): its options, when it is due, and the checks it passes
//! before any row is written.

use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::system::clock::{duration_to_ms, system_time_to_ms};

/// The queue a job goes to unless [`NewJob::queue`] says otherwise.
pub const DEFAULT_QUEUE: &str = "default";
/// Attempts a job gets unless [`NewJob::max_attempts`] says otherwise (the schema's default).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 6;
/// The largest payload [`Queue::enqueue`](crate::Queue::enqueue) accepts unless configured
/// otherwise: 64 KiB of JSON text.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// A job to enqueue: a job type, a JSON payload, and options.
///
/// ```
/// use litejobs::NewJob;
/// use serde_json::json;
/// use std::time::Duration;
/// let job = NewJob::new("deliver_webhook", json!({"event_id": 7}))
///     .queue("webhooks")
///     .priority(10)
///     .max_attempts(8)
///     .delay(Duration::from_secs(60))
///     .timeout(Duration::from_secs(10))
///     .idempotency_key("webhook:order:123:event:paid")
///     .group_key("endpoint:crm");
/// assert_eq!(job.job_type(), "deliver_webhook");
/// ```
#[derive(Debug, Clone)]
#[must_use = "a NewJob does nothing until it is enqueued"]
pub struct NewJob {
    pub(crate) job_type: String,
    pub(crate) payload: Payload,
    pub(crate) queue: String,
    pub(crate) priority: i64,
    pub(crate) max_attempts: i64,
    pub(crate) run_at: Option<RunAt>,
    pub(crate) timeout_ms: Option<i64>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) group_key: Option<String>,
    /// The deadline ([`NewJob::expires_at`], [`NewJob::expire_after`]).
    pub(crate) expires: Option<Expiry>,
    /// Stored as an encrypted envelope ([`NewJob::encrypted`]).
    pub(crate) encrypted: bool,
    /// Jobs it waits for, by id, and whether any outcome of each will do
    /// ([`NewJob::after`], [`NewJob::after_any_outcome`]).
    pub(crate) after: Vec<(i64, bool)>,
    /// Waits the transaction inserting this job adds besides `after` (a workflow step's
    /// waits by step name): an insert that holds the job at once counts them too.
    pub(crate) extra_waits: usize,
    /// The workflow the job goes into and its step name there (a workflow's steps): the
    /// row goes in placed, where placing it after its insert wrote every step's row twice.
    pub(crate) placed: Option<(i64, String)>,
}

#[derive(Debug, Clone)]
pub(crate) enum Payload {
    Value(serde_json::Value),
    /// JSON text from outside (CLI, stdin), checked at enqueue.
    Text(String),
}

/// The latest `run_at` the schema accepts (ms; in the year 5138): anything later is taken
/// for micro- or nanoseconds written by mistake (schema rule `jobs_run_at_ms`).
pub(crate) const MAX_RUN_AT_MS: i64 = 99_999_999_999_999;

/// A `run_at` computed by litejobs (a retry, a snooze), cut to what the schema accepts: a
/// delay that long means "not in this millennium" either way.
pub(crate) fn clamp_run_at(ms: i64) -> i64 {
    ms.min(MAX_RUN_AT_MS)
}

impl RunAt {
    /// When a job enqueued at `now` is due. A time before `now / 100` (the schema's test for
    /// seconds written as milliseconds) means "already due" and is stored as that floor.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidJob`](crate::ErrorKind::InvalidJob) for a time past
    /// [`MAX_RUN_AT_MS`].
    pub(crate) fn resolve(run_at: Option<RunAt>, now: i64) -> Result<i64> {
        let at = match run_at {
            None => now,
            Some(RunAt::At(at)) => at,
            Some(RunAt::After(delay)) => now.saturating_add(delay),
        };
        if at > MAX_RUN_AT_MS {
            return Err(Error::invalid_job(format!(
                "run_at {at} ms is after the year 5000 (the latest is {MAX_RUN_AT_MS} ms); \
                 give a shorter delay or an earlier time"
            )));
        }
        Ok(at.max(now / 100))
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum RunAt {
    At(i64),
    After(i64),
}

/// A deadline as given to a [`NewJob`] (`job/expiry.rs`): a time, or a span counted from
/// when the job is due.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Expiry {
    At(i64),
    After(i64),
}

impl NewJob {
    /// A job of `job_type` with a JSON payload, for the default queue, priority 0, due now.
    ///
    /// JSON has no NaN or Infinity, and serde_json has already turned them into `null` by
    /// the time litejobs sees the value: `json!({"ratio": f64::NAN})` is
    /// `{"ratio": null}`. For values that may be non-finite, use [`NewJob::typed`], which
    /// refuses them instead.
    pub fn new(job_type: impl Into<String>, payload: serde_json::Value) -> NewJob {
        NewJob::with_payload(job_type.into(), Payload::Value(payload))
    }

    /// A job whose payload is JSON text, e.g. read from a command line or another program.
    /// The text is checked at enqueue: invalid JSON is refused with
    /// [`ErrorKind::InvalidJob`](crate::ErrorKind::InvalidJob).
    pub fn from_json_text(job_type: impl Into<String>, payload: impl Into<String>) -> NewJob {
        NewJob::with_payload(job_type.into(), Payload::Text(payload.into()))
    }

    /// A job whose payload is any serde-serializable value.
    ///
    /// ```
    /// use litejobs::{ErrorKind, NewJob};
    /// #[derive(serde::Serialize)]
    /// struct Resize { image_id: u64, ratio: f64 }
    ///
    /// let job = NewJob::typed("resize", &Resize { image_id: 7, ratio: 0.5 })?;
    /// let err = NewJob::typed("resize", &Resize { image_id: 7, ratio: f64::NAN }).unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::InvalidJob);
    /// assert_eq!(
    ///     err.to_string(),
    ///     "payload field `ratio` is NaN; JSON has no NaN or Infinity"
    /// );
    /// # let _ = job;
    /// # Ok::<(), litejobs::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::InvalidJob`](crate::ErrorKind::InvalidJob) if the value cannot be
    /// represented as JSON: a map with non-string keys, or a float that is NaN or infinite
    /// (serde_json would store it as `null`), named with its path (`points[2].y`).
    pub fn typed<T: Serialize>(job_type: impl Into<String>, payload: &T) -> Result<NewJob> {
        let value = crate::job::finite::to_json_value(payload, "payload")?;
        Ok(NewJob::new(job_type, value))
    }

    fn with_payload(job_type: String, payload: Payload) -> NewJob {
        NewJob {
            job_type,
            payload,
            queue: DEFAULT_QUEUE.to_string(),
            priority: 0,
            max_attempts: i64::from(DEFAULT_MAX_ATTEMPTS),
            run_at: None,
            timeout_ms: None,
            idempotency_key: None,
            group_key: None,
            expires: None,
            encrypted: false,
            after: Vec::new(),
            extra_waits: 0,
            placed: None,
        }
    }

    /// The job type given to [`NewJob::new`].
    pub fn job_type(&self) -> &str {
        &self.job_type
    }

    /// The named queue. Defaults to `"default"`.
    pub fn queue(mut self, queue: impl Into<String>) -> NewJob {
        self.queue = queue.into();
        self
    }

    /// Higher runs first within its queue. Defaults to 0; negative values are allowed.
    pub fn priority(mut self, priority: i64) -> NewJob {
        self.priority = priority;
        self
    }

    /// Attempts before the job is dead. Must be at least 1. Defaults to
    /// [`DEFAULT_MAX_ATTEMPTS`].
    pub fn max_attempts(mut self, max_attempts: u32) -> NewJob {
        self.max_attempts = i64::from(max_attempts);
        self
    }

    /// Due `delay` after enqueue (by the queue's clock). Replaces an earlier `run_at`.
    pub fn delay(mut self, delay: Duration) -> NewJob {
        self.run_at = Some(RunAt::After(duration_to_ms(delay)));
        self
    }

    /// Due at `when`. Replaces an earlier `delay`.
    pub fn run_at(mut self, when: SystemTime) -> NewJob {
        self.run_at = Some(RunAt::At(system_time_to_ms(when)));
        self
    }

    /// Per-attempt time limit. Defaults to the job type's timeout in the worker.
    pub fn timeout(mut self, timeout: Duration) -> NewJob {
        self.timeout_ms = Some(duration_to_ms(timeout));
        self
    }

    /// Deduplication key: while a queued, running, failed or succeeded job holds it (and
    /// for the remembered-key window after success), enqueue returns that job's id and
    /// inserts nothing.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> NewJob {
        self.idempotency_key = Some(key.into());
        self
    }

    /// At most one job with this key runs at a time, in (priority, run time, id) order.
    pub fn group_key(mut self, key: impl Into<String>) -> NewJob {
        self.group_key = Some(key.into());
        self
    }

    /// Stores the payload encrypted, with the queue's first key (see
    /// [`encryption`](crate::encryption)); the worker encrypts the result and progress it
    /// writes back for the job too. Job types marked with
    /// [`Queue::set_type_encrypted`](crate::Queue::set_type_encrypted) are encrypted without
    /// it. The idempotency and group keys stay in clear: keep secrets out of them.
    ///
    /// Enqueueing fails with [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig),
    /// writing nothing, on a queue without encryption keys.
    pub fn encrypted(mut self) -> NewJob {
        self.encrypted = true;
        self
    }

    /// Waits for job `id` to succeed before it runs: until then it stays `queued`, held
    /// ([`JobRecord::waiting_for`](crate::JobRecord::waiting_for)), and if that job ends dead
    /// or cancelled this one is cancelled instead (see [`Workflow`](crate::Workflow) for
    /// named steps). May be called for several jobs.
    ///
    /// ```
    /// use litejobs::{NewJob, Queue};
    /// use serde_json::json;
    /// # fn main() -> litejobs::Result<()> {
    /// let queue = Queue::open_in_memory()?;
    /// let charge = queue.enqueue(NewJob::new("charge_card", json!({"order": 7})))?;
    /// let ship = queue.enqueue(NewJob::new("ship_order", json!({"order": 7})).after(charge))?;
    /// assert_eq!(queue.job(ship)?.map(|j| j.waiting_for), Some(1));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Enqueueing fails with [`ErrorKind::NotFound`](crate::ErrorKind::NotFound), writing
    /// nothing, when there is no job `id`.
    pub fn after(mut self, id: i64) -> NewJob {
        self.after.push((id, false));
        self
    }

    /// Waits for job `id` to end, however it ends (succeeded, dead or cancelled): for
    /// clean-up that must run anyway.
    pub fn after_any_outcome(mut self, id: i64) -> NewJob {
        self.after.push((id, true));
        self
    }

    /// True when the job was marked [`encrypted`](NewJob::encrypted).
    pub fn is_encrypted(&self) -> bool {
        self.encrypted
    }
}

/// Checks a job against the limits and returns its payload as JSON text.
pub(crate) fn validate(job: &NewJob, max_payload_bytes: usize) -> Result<String> {
    if job.job_type.trim().is_empty() {
        return Err(Error::invalid_job("job_type must not be empty"));
    }
    if job.queue.trim().is_empty() {
        return Err(Error::invalid_job("queue must not be empty"));
    }
    if job.max_attempts < 1 {
        return Err(Error::invalid_job(format!(
            "max_attempts must be at least 1, got {}",
            job.max_attempts
        )));
    }
    if let Some(timeout) = job.timeout_ms {
        if timeout < 1 {
            return Err(Error::invalid_job("timeout must be at least 1 ms"));
        }
    }
    if job.idempotency_key.as_deref().is_some_and(str::is_empty) {
        return Err(Error::invalid_job("idempotency_key must not be empty"));
    }
    if job.group_key.as_deref().is_some_and(str::is_empty) {
        return Err(Error::invalid_job("group_key must not be empty"));
    }
    let text = match &job.payload {
        Payload::Value(value) => serde_json::to_string(value)
            .map_err(|e| Error::invalid_job(format!("payload cannot be serialized: {e}")))?,
        Payload::Text(text) => text.clone(),
    };
    if text.len() > max_payload_bytes {
        return Err(Error::invalid_job(format!(
            "payload is {} bytes, over the limit of {} bytes",
            text.len(),
            max_payload_bytes
        )));
    }
    // Checked the way the executor will parse it: text that is only syntactically JSON (a
    // number out of range, a lone surrogate, nesting past serde_json's depth limit) would
    // otherwise be accepted here and go dead unread. A `Value` can only fail on depth, which
    // is cheaper to measure than to re-parse (enqueue is a hot path).
    let readable = match &job.payload {
        Payload::Value(value) => {
            if depth_exceeds(value, MAX_PAYLOAD_DEPTH) {
                Err(format!("nested deeper than {MAX_PAYLOAD_DEPTH} levels"))
            } else {
                Ok(())
            }
        }
        Payload::Text(_) => serde_json::from_str::<serde_json::Value>(&text)
            .map(drop)
            .map_err(|e| e.to_string()),
    };
    if let Err(e) = readable {
        return Err(Error::invalid_job(format!(
            "payload is not valid JSON: {e}"
        )));
    }
    Ok(text)
}

/// serde_json's parser refuses nesting past 128 levels; a payload must stay below it.
const MAX_PAYLOAD_DEPTH: usize = 127;

fn depth_exceeds(value: &serde_json::Value, budget: usize) -> bool {
    match value {
        serde_json::Value::Array(items) => {
            budget == 0 || items.iter().any(|child| depth_exceeds(child, budget - 1))
        }
        serde_json::Value::Object(map) => {
            budget == 0 || map.values().any(|child| depth_exceeds(child, budget - 1))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use serde_json::json;

    #[test]
    fn validation_names_the_field_and_the_limit() {
        let err = validate(&NewJob::new("", json!({})), 100)
            .err()
            .map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("job_type must not be empty"));

        let big = NewJob::new("t", json!({"s": "x".repeat(200)}));
        let err = validate(&big, 100).err().map(|e| (e.kind(), e.to_string()));
        let (kind, msg) = err.expect("oversized payload must be refused");
        assert_eq!(kind, ErrorKind::InvalidJob);
        assert!(msg.contains("over the limit of 100 bytes"), "{msg}");

        let zero = NewJob::new("t", json!({})).max_attempts(0);
        let msg = validate(&zero, 100)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.contains("max_attempts must be at least 1"), "{msg}");

        let bad = NewJob::from_json_text("t", "{not json");
        let msg = validate(&bad, 100)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.starts_with("payload is not valid JSON"), "{msg}");
    }
}
