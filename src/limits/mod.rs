//! Rate limits and circuit breakers by key: an engine feature any job type can use,
//! kept in the database so every process on the file shares them.
//!
//! - [`RateLimit`]: at most `limit` calls per `period` under one key (e.g. one webhook
//!   endpoint, one SMTP provider), spaced evenly.
//! - [`Breaker`]: after `failure_threshold` failures in a row the key's breaker *opens*:
//!   calls wait for a cool-down; then one *probe* call goes (half-open); its success closes
//!   the breaker, its failure opens it again.
//!
//! Both answer with a [`Verdict`]: [`Verdict::Go`] or [`Verdict::Wait`] with how long.
//! Inside a handler, [`JobContext::rate_limit`](crate::JobContext::rate_limit) and [`JobContext::breaker`](crate::JobContext::breaker) turn a wait into
//! [`JobError::snooze`]: the job comes back later and **no attempt is spent**.
//!
//! ```
//! use litejobs::limits::{Breaker, RateLimit};
//! use litejobs::{JobContext, JobError};
//! use std::time::Duration;
//!
//! fn call_provider(ctx: &JobContext) -> Result<(), JobError> {
//!     let breaker = Breaker::new().failure_threshold(5).cool_down(Duration::from_secs(60));
//!     ctx.rate_limit("provider:acme", &RateLimit::per_second(10))?; // snoozes when over
//!     let call = ctx.breaker("provider:acme", &breaker)?; // snoozes while open
//!     match do_the_call() {
//!         Ok(()) => { call.success(); Ok(()) }
//!         Err(e) => { call.failure(&e); Err(JobError::retry(e)) }
//!     }
//! }
//! # fn do_the_call() -> Result<(), String> { Ok(()) }
//! ```
//!
//! Keys are free text; built-in job types use prefixes such as `webhook-endpoint:`.

mod breaker;
mod rate;

use std::time::Duration;

use crate::error::{Error, ErrorKind};
use crate::handler::{JobContext, JobError};

pub use crate::storage::limits::BreakerState;
pub use breaker::{
    Breaker, BreakerCall, BreakerStatus, DEFAULT_BREAKER_COOL_DOWN, DEFAULT_BREAKER_FAILURES,
    DEFAULT_BREAKER_PROBE_TIMEOUT,
};
pub use rate::RateLimit;

/// How long a handler snoozes when the database was too busy to check a limit.
const BUSY_SNOOZE: Duration = Duration::from_secs(1);

/// What a rate limit or a breaker says about a call now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a Verdict says whether the call may go"]
pub enum Verdict {
    /// Go ahead.
    Go,
    /// Not now: ask again after this long.
    Wait(Duration),
}

impl Verdict {
    /// True for [`Verdict::Go`].
    pub fn is_go(self) -> bool {
        self == Verdict::Go
    }

    /// The wait of a [`Verdict::Wait`].
    pub fn wait(self) -> Option<Duration> {
        match self {
            Verdict::Go => None,
            Verdict::Wait(d) => Some(d),
        }
    }
}

fn wait_ms(ms: i64) -> Verdict {
    Verdict::Wait(Duration::from_millis(ms.max(1) as u64))
}

/// A limit check that failed in the database: a busy database (or a server that is away)
/// snoozes the job (no attempt spent); anything else is a retryable failure.
fn limit_failure(what: &str, key: &str, err: Error) -> JobError {
    if matches!(err.kind(), ErrorKind::Busy | ErrorKind::Unavailable) {
        log::warn!(
            "litejobs: could not check the {what} {key:?} ({}); snoozing",
            err.kind()
        );
        JobError::snooze(BUSY_SNOOZE)
    } else {
        JobError::retry(format!("could not check the {what} {key:?}: {err}"))
    }
}

/// Rate limits and circuit breakers from inside a handler: a wait becomes a snooze, which
/// does not spend an attempt.
impl JobContext {
    /// Takes a slot of the rate limit `limit` under `key`, shared by every process on the
    /// file. Over the limit, returns [`JobError::snooze`] until the next slot: pass it
    /// on with `?` and the job comes back then, **without spending an attempt**.
    ///
    /// See [`limits`](crate::limits) for an example.
    pub fn rate_limit(&self, key: &str, limit: &RateLimit) -> std::result::Result<(), JobError> {
        match limit.acquire(self.queue_handle(), key) {
            Ok(Verdict::Go) => Ok(()),
            Ok(Verdict::Wait(wait)) => Err(JobError::snooze(wait)),
            Err(e) if e.kind() == ErrorKind::InvalidConfig => {
                Err(JobError::permanent(e.to_string()))
            }
            Err(e) => Err(limit_failure("rate limit", key, e)),
        }
    }

    /// Asks the circuit breaker of `key` whether a call may go. While it is open (or
    /// its one probe call is out), returns [`JobError::snooze`] until it may: pass it on with
    /// `?` and the job comes back then, **without spending an attempt**. Otherwise report the
    /// call's result on the returned [`BreakerCall`](crate::limits::BreakerCall).
    ///
    /// See [`limits`](crate::limits) for an example.
    pub fn breaker(
        &self,
        key: &str,
        breaker: &Breaker,
    ) -> std::result::Result<BreakerCall<'_>, JobError> {
        let queue = self.queue_handle();
        match breaker.allow(queue, key) {
            Ok(Verdict::Go) => Ok(BreakerCall {
                queue,
                key: key.to_string(),
                breaker: *breaker,
            }),
            Ok(Verdict::Wait(wait)) => Err(JobError::snooze(wait)),
            Err(e) => Err(limit_failure("circuit breaker", key, e)),
        }
    }
}
