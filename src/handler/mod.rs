//! Running a job: what user code implements ([`Handler`], or [`Perform`] for a typed
//! [`Job`](crate::Job)), what it is handed ([`JobContext`]), and the closed set of outcomes
//! it returns ([`JobError`]).

pub(crate) mod attempt_log;
pub(crate) mod context;
pub(crate) mod error;
pub(crate) mod stop;
pub(crate) mod typed;
mod workflow;

pub use context::JobContext;
pub(crate) use error::{bounded_error, Action};
pub use error::{JobError, MAX_ERROR_BYTES};
pub use typed::Perform;
pub(crate) use workflow::Dependants;

/// Runs jobs of one type on a worker's blocking threads.
///
/// Closures `Fn(&JobContext) -> Result<(), JobError>` are handlers, so most code never
/// names this trait.
pub trait Handler: Send + Sync + 'static {
    /// Runs one attempt. `Ok(())` succeeds (with the result set by
    /// [`JobContext::set_result`], if any); an `Err` says what happens next.
    fn run(&self, ctx: &JobContext) -> Result<(), JobError>;
}

impl<F> Handler for F
where
    F: Fn(&JobContext) -> Result<(), JobError> + Send + Sync + 'static,
{
    fn run(&self, ctx: &JobContext) -> Result<(), JobError> {
        self(ctx)
    }
}
