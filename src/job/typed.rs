//! Typed jobs, the enqueue side: a payload struct that knows its job type name and default
//! options ([`Job`]) and is enqueued as is ([`IntoNewJob`]). A layer over the string-typed
//! API: the row stored is the same [`NewJob`] with the struct as its JSON payload, so other
//! programs and the command line see nothing new. [`Perform`](crate::Perform) runs one.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::new::NewJob;
use super::retry::RetryPolicy;
use crate::error::Result;

/// A payload type tied to its job type name and default options, so the name is written
/// once and the struct is what code enqueues and handles.
///
/// The payload is the struct serialized as JSON. Rename or remove a field only with
/// `#[serde(alias = "...")]` or `#[serde(default)]` while old rows may still wait: a stored
/// payload that no longer deserializes makes its job `dead` at once (retrying cannot fix
/// it), with an error naming the job type, the Rust type and serde's message.
///
/// ```
/// use litejobs::{testing, Job, JobContext, JobError, JobOptions, JobStatus, Perform, Queue, Worker};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct WelcomeEmail {
///     user_id: i64,
/// }
///
/// impl Job for WelcomeEmail {
///     const TYPE: &'static str = "welcome_email";
///     fn options() -> JobOptions {
///         JobOptions::new().queue("mail").max_attempts(5)
///     }
/// }
///
/// impl Perform for WelcomeEmail {
///     fn perform(self, ctx: &JobContext) -> Result<(), JobError> {
///         ctx.set_result(serde_json::json!({ "sent_to": self.user_id }));
///         Ok(())
///     }
/// }
///
/// # fn main() -> litejobs::Result<()> {
/// let queue = Queue::open_in_memory()?;
/// let id = queue.enqueue(WelcomeEmail { user_id: 42 })?; // the type's defaults
/// let stored = queue.job(id)?.expect("just enqueued");
/// assert_eq!((stored.job_type.as_str(), stored.queue.as_str()), ("welcome_email", "mail"));
/// assert_eq!(stored.max_attempts, 5);
///
/// // Works the "mail" queue too, with the type's timeout and retry policy.
/// let worker = Worker::builder(&queue).register::<WelcomeEmail>();
/// assert_eq!(testing::drain(&worker)?.succeeded, 1);
/// assert_eq!(queue.job(id)?.map(|j| j.status), Some(JobStatus::Succeeded));
/// # Ok(())
/// # }
/// ```
pub trait Job: Serialize + DeserializeOwned + 'static {
    /// The job type name stored in the `job_type` column. Keep it stable: rows already
    /// enqueued carry it.
    const TYPE: &'static str;

    /// The type's defaults: queue, priority, max attempts and the deadline's window are
    /// stored with each job at enqueue; timeout and retry policy are applied by the worker that registers the type.
    /// Defaults to [`JobOptions::new`] (the string API's defaults).
    fn options() -> JobOptions {
        JobOptions::new()
    }
}

/// A [`Job`] type's defaults, returned by [`Job::options`]. Each one unset keeps the
/// string API's default; a job's own setting (on a [`NewJob`] from [`NewJob::from_job`])
/// wins over the type's.
///
/// ```
/// use litejobs::{JobOptions, RetryPolicy};
/// use std::time::Duration;
/// let options = JobOptions::new()
///     .queue("mail")
///     .priority(5)
///     .max_attempts(3)
///     .timeout(Duration::from_secs(20))
///     .retry_policy(RetryPolicy::exponential(Duration::from_secs(30)))
///     .expire_after(Duration::from_secs(15 * 60));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use = "JobOptions do nothing unless returned from Job::options"]
pub struct JobOptions {
    pub(crate) queue: Option<String>,
    priority: Option<i64>,
    max_attempts: Option<u32>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) retry_policy: Option<RetryPolicy>,
    expire_after: Option<Duration>,
    encrypted: bool,
}

impl JobOptions {
    /// No settings: the `"default"` queue, priority 0, the default max attempts, the
    /// worker's default timeout and retry policy.
    pub fn new() -> JobOptions {
        JobOptions::default()
    }

    /// The queue jobs of this type go to. A worker that registers the type works this queue
    /// too (with [`DEFAULT_CONCURRENCY`](crate::defaults::DEFAULT_CONCURRENCY) threads unless it already does).
    pub fn queue(mut self, queue: impl Into<String>) -> JobOptions {
        self.queue = Some(queue.into());
        self
    }

    /// Priority within the queue; higher runs first.
    pub fn priority(mut self, priority: i64) -> JobOptions {
        self.priority = Some(priority);
        self
    }

    /// Attempts before a job of this type is dead (at least 1, checked at enqueue).
    pub fn max_attempts(mut self, max_attempts: u32) -> JobOptions {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// The attempt time limit, set on the worker that registers the type (as
    /// [`WorkerBuilder::timeout`](crate::WorkerBuilder::timeout)); a job's own [`NewJob::timeout`] wins.
    pub fn timeout(mut self, timeout: Duration) -> JobOptions {
        self.timeout = Some(timeout);
        self
    }

    /// The retry policy, set on the worker that registers the type (as
    /// [`WorkerBuilder::retry_policy`](crate::WorkerBuilder::retry_policy)).
    pub fn retry_policy(mut self, policy: RetryPolicy) -> JobOptions {
        self.retry_policy = Some(policy);
        self
    }

    /// Each job of this type must start within `window` of being due, or it expires (see
    /// [`NewJob::expire_after`], stored with each job at enqueue); a job's own
    /// [`NewJob::expires_at`] or `expire_after` wins.
    pub fn expire_after(mut self, window: Duration) -> JobOptions {
        self.expire_after = Some(window);
        self
    }

    /// Stores the payloads of this type encrypted, as [`NewJob::encrypted`] does for one
    /// job. Only enqueues of the typed value know it: other programs and the command line
    /// encrypt a type when it is marked in the database
    /// ([`Queue::set_type_encrypted`](crate::Queue::set_type_encrypted)).
    pub fn encrypted(mut self) -> JobOptions {
        self.encrypted = true;
        self
    }

    /// The options stored with each job, applied to `job`.
    fn apply_to(&self, mut job: NewJob) -> NewJob {
        if self.encrypted {
            job = job.encrypted();
        }
        if let Some(queue) = &self.queue {
            job = job.queue(queue.clone());
        }
        if let Some(priority) = self.priority {
            job = job.priority(priority);
        }
        if let Some(max_attempts) = self.max_attempts {
            job = job.max_attempts(max_attempts);
        }
        if let Some(window) = self.expire_after {
            job = job.expire_after(window);
        }
        job
    }
}

impl NewJob {
    /// A job of `J`'s type with `job` as its payload and `J`'s stored defaults (queue,
    /// priority, max attempts, the deadline's window), to change before enqueueing.
    ///
    /// ```
    /// # use litejobs::{Job, NewJob, Queue};
    /// # use std::time::Duration;
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # struct WelcomeEmail { user_id: i64 }
    /// # impl Job for WelcomeEmail { const TYPE: &'static str = "welcome_email"; }
    /// # fn main() -> litejobs::Result<()> {
    /// # let queue = Queue::open_in_memory()?;
    /// let job = NewJob::from_job(&WelcomeEmail { user_id: 42 })?
    ///     .delay(Duration::from_secs(600))
    ///     .idempotency_key("welcome:42");
    /// queue.enqueue(job)?;
    /// // Many at once, in one transaction:
    /// let jobs = [WelcomeEmail { user_id: 1 }, WelcomeEmail { user_id: 2 }];
    /// let batch = jobs.iter().map(NewJob::from_job).collect::<litejobs::Result<Vec<_>>>()?;
    /// assert_eq!(queue.enqueue_batch(batch)?.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::InvalidJob`](crate::ErrorKind::InvalidJob), naming the job type, when
    /// `job` cannot be represented as JSON (see [`NewJob::typed`]).
    pub fn from_job<J: Job>(job: &J) -> Result<NewJob> {
        let new_job = NewJob::typed(J::TYPE, job).map_err(|e| e.prefixed(J::TYPE))?;
        Ok(J::options().apply_to(new_job))
    }
}

/// What [`Queue::enqueue`](crate::Queue::enqueue) and [`enqueue_in`](crate::enqueue_in)
/// accept: a [`NewJob`], or any [`Job`] value (with its type's defaults). Converting may
/// fail (a value JSON cannot represent), so this is not `Into<NewJob>`.
pub trait IntoNewJob {
    /// The job to enqueue.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidJob`](crate::ErrorKind::InvalidJob) when the value cannot be
    /// serialized as JSON.
    fn into_new_job(self) -> Result<NewJob>;
}

impl IntoNewJob for NewJob {
    fn into_new_job(self) -> Result<NewJob> {
        Ok(self)
    }
}

impl<J: Job> IntoNewJob for J {
    fn into_new_job(self) -> Result<NewJob> {
        NewJob::from_job(&self)
    }
}
