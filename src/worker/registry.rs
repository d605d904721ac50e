//! Job type → handler, plus the per-type options (timeout, retry policy).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::handler::Handler;
use crate::job::RetryPolicy;
use crate::storage::jobs::{ClaimRequest, ClaimedRow};
use crate::system::clock::duration_to_ms;

/// The handlers a worker runs and their options. Options may be set before or after the
/// handler itself.
#[derive(Clone)]
pub(crate) struct Registry {
    handlers: HashMap<String, Arc<dyn Handler>>,
    timeouts: HashMap<String, Duration>,
    retry: HashMap<String, RetryPolicy>,
    pub(crate) default_timeout: Duration,
    default_retry: RetryPolicy,
    /// Whether attempts' logs are kept (all types), and the types whose logs are not.
    keep_logs: bool,
    quiet: std::collections::HashSet<String>,
}

impl Registry {
    pub(crate) fn new(default_timeout: Duration) -> Registry {
        Registry {
            handlers: HashMap::new(),
            timeouts: HashMap::new(),
            retry: HashMap::new(),
            default_timeout,
            default_retry: RetryPolicy::default(),
            keep_logs: true,
            quiet: std::collections::HashSet::new(),
        }
    }

    /// Keeps attempts' logs (`on`) or not, for every type.
    pub(crate) fn set_keep_logs(&mut self, on: bool) {
        self.keep_logs = on;
    }

    /// Keeps the attempts' logs of `job_type` (`on`) or not.
    pub(crate) fn set_keep_logs_for(&mut self, job_type: String, on: bool) {
        if on {
            self.quiet.remove(&job_type);
        } else {
            self.quiet.insert(job_type);
        }
    }

    /// Whether the attempts' logs of `job_type` are kept.
    pub(crate) fn keeps_logs(&self, job_type: &str) -> bool {
        self.keep_logs && !self.quiet.contains(job_type)
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

/// What a worker claims with, the same for the dispatcher's rounds and for
/// [`drain`](crate::testing::drain): its job types (sorted, so the claim statement's text is
/// stable) with their timeouts, its id, its lease grace and the payload limit.
#[derive(Debug)]
pub(crate) struct Claimer {
    job_types: Vec<String>,
    type_timeouts_ms: Vec<i64>,
    worker_id: Arc<str>,
    lease_grace_ms: i64,
    max_payload_bytes: usize,
}

impl Claimer {
    pub(crate) fn new(
        registry: &Registry,
        worker_id: Arc<str>,
        lease_grace_ms: i64,
        max_payload_bytes: usize,
    ) -> Claimer {
        let job_types = registry.job_types();
        let type_timeouts_ms = job_types
            .iter()
            .map(|t| registry.type_timeout_ms(t))
            .collect();
        Claimer {
            job_types,
            type_timeouts_ms,
            worker_id,
            lease_grace_ms,
            max_payload_bytes,
        }
    }

    /// The job types claimed, sorted.
    pub(crate) fn job_types(&self) -> &[String] {
        &self.job_types
    }

    /// A claim of up to `limit` due jobs of `queue`.
    pub(crate) fn request<'a>(&'a self, queue: &'a str, limit: usize) -> ClaimRequest<'a> {
        ClaimRequest {
            queue,
            job_types: &self.job_types,
            type_timeouts_ms: &self.type_timeouts_ms,
            limit,
            above_priority: None,
            worker_id: &self.worker_id,
            lease_grace_ms: self.lease_grace_ms,
            max_payload_bytes: self.max_payload_bytes,
        }
    }
}
