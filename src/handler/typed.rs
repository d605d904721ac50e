//! Typed jobs, the running side: a [`Job`] that runs itself ([`Perform`]), and the handler
//! that deserializes its payload first.

use std::any::type_name;
use std::marker::PhantomData;

use super::context::JobContext;
use super::error::JobError;
use super::Handler;
use crate::job::Job;

/// How a [`Job`] runs: registered with [`WorkerBuilder::register`](crate::WorkerBuilder::register). For a handler that
/// needs state of its own (a connection pool, a client), use the closure form
/// [`WorkerBuilder::job`](crate::WorkerBuilder::job) instead.
///
/// ```
/// use litejobs::{testing, Job, JobContext, JobError, Perform, Queue, Worker};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Resize { image_id: u64 }
///
/// impl Job for Resize {
///     const TYPE: &'static str = "resize";
/// }
///
/// impl Perform for Resize {
///     fn perform(self, _ctx: &JobContext) -> Result<(), JobError> {
///         if self.image_id == 0 {
///             return Err(JobError::permanent("no image 0"));
///         }
///         Ok(())
///     }
/// }
///
/// # fn main() -> litejobs::Result<()> {
/// let queue = Queue::open_in_memory()?;
/// queue.enqueue(Resize { image_id: 0 })?;
/// let report = testing::drain(&Worker::builder(&queue).register::<Resize>())?;
/// assert_eq!(report.dead, 1);
/// # Ok(())
/// # }
/// ```
pub trait Perform: Job {
    /// Runs one attempt with the deserialized payload; the outcomes are a handler's
    /// ([`Handler::run`]).
    fn perform(self, ctx: &JobContext) -> std::result::Result<(), JobError>;
}

/// Runs jobs of type `J` with `run`, after deserializing the payload.
pub(crate) struct TypedHandler<J, F> {
    run: F,
    /// `fn() -> J`: the handler is `Send + Sync` whatever `J` is.
    job: PhantomData<fn() -> J>,
}

impl<J, F> Handler for TypedHandler<J, F>
where
    J: Job,
    F: Fn(J, &JobContext) -> std::result::Result<(), JobError> + Send + Sync + 'static,
{
    fn run(&self, ctx: &JobContext) -> std::result::Result<(), JobError> {
        // A payload that does not fit is permanent: the same bytes fail every attempt.
        let job = J::deserialize(ctx.payload()).map_err(|e| {
            JobError::permanent(format!(
                "payload does not match the {} job's type {}: {}",
                ctx.job_type(),
                type_name::<J>(),
                ctx.payload_error(&e.to_string())
            ))
        })?;
        (self.run)(job, ctx)
    }
}

impl<J, F> TypedHandler<J, F> {
    /// A handler that deserializes each payload as `J` and runs `run` with it.
    pub(crate) fn new(run: F) -> TypedHandler<J, F> {
        TypedHandler {
            run,
            job: PhantomData,
        }
    }
}
