//! Registering typed jobs ([`Job`], [`Perform`]) on a [`WorkerBuilder`], with the options
//! their type declares.

use crate::handler::typed::TypedHandler;
use crate::handler::{JobContext, JobError, Perform};
use crate::job::Job;

use super::{WorkerBuilder, DEFAULT_CONCURRENCY};

impl WorkerBuilder {
    /// Registers the [`Job`] type `J`, run by its [`Perform::perform`], with its options:
    /// its timeout and retry policy (as [`timeout`](WorkerBuilder::timeout) and
    /// [`retry_policy`](WorkerBuilder::retry_policy); later calls for `J::TYPE` win), and
    /// its queue, worked with [`DEFAULT_CONCURRENCY`] threads unless this builder already
    /// works it (set its threads with [`queue`](WorkerBuilder::queue), before or after).
    ///
    /// See [`Job`] for an example.
    pub fn register<J: Perform>(self) -> Self {
        self.job(|job: J, ctx: &JobContext| job.perform(ctx))
    }

    /// Registers the [`Job`] type `J` with a closure that gets the deserialized payload,
    /// applying `J`'s options as [`register`](WorkerBuilder::register) does.
    ///
    /// ```
    /// use litejobs::{testing, Job, JobContext, Queue, Worker};
    /// use serde::{Deserialize, Serialize};
    /// use std::sync::mpsc;
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Ping { n: u32 }
    /// impl Job for Ping { const TYPE: &'static str = "ping"; }
    ///
    /// # fn main() -> litejobs::Result<()> {
    /// let queue = Queue::open_in_memory()?;
    /// let (seen, got) = mpsc::channel();
    /// let worker = Worker::builder(&queue).job(move |ping: Ping, _ctx: &JobContext| {
    ///     seen.send(ping.n).map_err(|e| litejobs::JobError::retry(e.to_string()))
    /// });
    /// queue.enqueue(Ping { n: 7 })?;
    /// testing::drain(&worker)?;
    /// assert_eq!(got.try_recv().ok(), Some(7));
    /// # Ok(())
    /// # }
    /// ```
    pub fn job<J, F>(self, run: F) -> Self
    where
        J: Job,
        F: Fn(J, &JobContext) -> std::result::Result<(), JobError> + Send + Sync + 'static,
    {
        let options = J::options();
        let mut builder = self.handler(J::TYPE, TypedHandler::new(run));
        if let Some(timeout) = options.timeout {
            builder = builder.timeout(J::TYPE, timeout);
        }
        if let Some(policy) = options.retry_policy {
            builder = builder.retry_policy(J::TYPE, policy);
        }
        if let Some(queue) = options.queue {
            if !builder.queues.iter().any(|(name, _)| *name == queue) {
                builder = builder.queue(queue, DEFAULT_CONCURRENCY);
            }
        }
        builder
    }
}
