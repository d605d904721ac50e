//! `impl Queue` for people and tools: filtered lists and stats.

use serde::Serialize;

use crate::error::Result;
use crate::job::{JobRecord, JobStatus};
use crate::storage;
use crate::Queue;

/// Rows a list returns unless [`JobFilter::limit`] says otherwise.
pub const DEFAULT_LIST_LIMIT: usize = 100;

/// Which jobs [`Queue::list`] returns, newest first.
///
/// ```
/// use litejobs::{JobFilter, JobStatus};
/// let filter = JobFilter::new().status(JobStatus::Dead).search("timeout").limit(20);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct JobFilter {
    pub(crate) status: Option<JobStatus>,
    pub(crate) job_type: Option<String>,
    pub(crate) queue: Option<String>,
    pub(crate) search: Option<String>,
    pub(crate) before_id: Option<i64>,
    pub(crate) limit: usize,
}

impl Default for JobFilter {
    fn default() -> Self {
        JobFilter {
            status: None,
            job_type: None,
            queue: None,
            search: None,
            before_id: None,
            limit: DEFAULT_LIST_LIMIT,
        }
    }
}

impl JobFilter {
    /// Every job, up to [`DEFAULT_LIST_LIMIT`].
    pub fn new() -> JobFilter {
        JobFilter::default()
    }

    /// Only jobs in this status.
    pub fn status(mut self, status: JobStatus) -> JobFilter {
        self.status = Some(status);
        self
    }

    /// Only jobs of this type.
    pub fn job_type(mut self, job_type: impl Into<String>) -> JobFilter {
        self.job_type = Some(job_type.into());
        self
    }

    /// Only jobs in this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> JobFilter {
        self.queue = Some(queue.into());
        self
    }

    /// Only jobs whose last error contains this text (ASCII letters match either case).
    pub fn search(mut self, text: impl Into<String>) -> JobFilter {
        self.search = Some(text.into());
        self
    }

    /// Only jobs with a smaller id: the next page after a page whose last id this is.
    pub fn before_id(mut self, id: i64) -> JobFilter {
        self.before_id = Some(id);
        self
    }

    /// At most this many rows. Defaults to [`DEFAULT_LIST_LIMIT`].
    pub fn limit(mut self, limit: usize) -> JobFilter {
        self.limit = limit;
        self
    }
}

/// How many jobs of one queue and type are in one status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct StatusCount {
    /// Queue name.
    pub queue: String,
    /// Job type.
    pub job_type: String,
    /// Status.
    pub status: JobStatus,
    /// Number of jobs.
    pub count: i64,
}

/// The queue at a glance: counts, the oldest due job's age, recent dead jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Stats {
    /// Counts by queue, job type and status (only non-zero ones).
    pub counts: Vec<StatusCount>,
    /// How long the oldest due job has waited past its run time, in ms; `None` when nothing
    /// is due. A growing age means nobody is picking jobs up.
    pub oldest_due_age_ms: Option<i64>,
    /// Jobs that became dead in the last hour.
    pub dead_last_hour: i64,
}

impl Stats {
    /// Jobs in `status`, across queues and types.
    pub fn count(&self, status: JobStatus) -> i64 {
        self.counts
            .iter()
            .filter(|c| c.status == status)
            .map(|c| c.count)
            .sum()
    }
}

impl Queue {
    /// Jobs matching `filter`, newest first.
    pub fn list(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        self.db().read(|conn| storage::read::list(conn, filter))
    }

    /// Counts by queue, type and status; the oldest due job's age; dead jobs in the last hour.
    pub fn stats(&self) -> Result<Stats> {
        let now = self.now_ms();
        self.db().read(|conn| storage::read::stats(conn, now))
    }
}
