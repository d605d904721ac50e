//! Job type → handler, plus the per-type options (timeout, retry policy).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::duration_to_ms;
use crate::handler::Handler;
use crate::retry::RetryPolicy;
use crate::storage::jobs::ClaimedRow;

/// The handlers a worker runs and their options. Options may be set before or after the
/// handler itself.
#[derive(Clone)]
pub(crate) struct Registry {
    handlers: HashMap<String, Arc<dyn Handler>>,
    timeouts: HashMap<String, Duration>,
    retry: HashMap<String, RetryPolicy>,
    pub(crate) default_timeout: Duration,
    default_retry: RetryPolicy,
}

impl Registry {
    pub(crate) fn new(default_timeout: Duration) -> Registry {
        Registry {
            handlers: HashMap::new(),
            timeouts: HashMap::new(),
            retry: HashMap::new(),
            default_timeout,
            default_retry: RetryPolicy::default(),
        }
    }

    pub(crate) fn add_handler(&mut self, job_type: String, handler: Arc<dyn Handler>) {
        self.handlers.insert(job_type, handler);
    }

    pub(crate) fn set_timeout(&mut self, job_type: String, timeout: Duration) {
        self.timeouts.insert(job_type, timeout);
    }

    pub(crate) fn set_retry_policy(&mut self, job_type: String, policy: RetryPolicy) {
        self.retry.insert(job_type, policy);
    }

    pub(crate) fn set_default_retry_policy(&mut self, policy: RetryPolicy) {
        self.default_retry = policy;
    }

    pub(crate) fn handler(&self, job_type: &str) -> Option<&Arc<dyn Handler>> {
        self.handlers.get(job_type)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }

    /// The registered job types, sorted (so the claim statement's text is stable).
    pub(crate) fn job_types(&self) -> Vec<String> {
        let mut types: Vec<String> = self.handlers.keys().cloned().collect();
        types.sort();
        types
    }

    /// The timeout of a job type (its own or the worker's default), in ms.
    pub(crate) fn type_timeout_ms(&self, job_type: &str) -> i64 {
        duration_to_ms(*self.timeouts.get(job_type).unwrap_or(&self.default_timeout))
    }

    /// One attempt's time limit: the job's own, else its type's, else the worker default.
    pub(crate) fn timeout_for(&self, row: &ClaimedRow) -> Duration {
        match row.timeout_ms {
            Some(ms) if ms > 0 => Duration::from_millis(ms as u64),
            _ => *self
                .timeouts
                .get(&row.job_type)
                .unwrap_or(&self.default_timeout),
        }
    }

    pub(crate) fn retry_policy(&self, job_type: &str) -> &RetryPolicy {
        self.retry.get(job_type).unwrap_or(&self.default_retry)
    }
}
