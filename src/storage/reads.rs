//! What people and tools read: one job and its history, filtered lists, counts, health
//! figures, grouped errors, activity over time and metrics figures. The public value types
//! ([`JobFilter`], [`Stats`], [`ErrorGroup`], ...) live here, below the stores that return
//! them.

use serde::Serialize;

use crate::error::Result;
use crate::job::{AttemptRecord, JobRecord, JobStatus};

/// Rows a list returns unless [`JobFilter::limit`] says otherwise.
pub const DEFAULT_LIST_LIMIT: usize = 100;

/// Which jobs [`Queue::list`](crate::Queue::list) returns, newest first.
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
    pub(crate) error_group: Option<String>,
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
            error_group: None,
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

    /// Only jobs whose last error is in this group ([`ErrorGroup::group`]): the same failure
    /// however each job's text differs.
    pub fn error_group(mut self, group: impl Into<String>) -> JobFilter {
        self.error_group = Some(group.into());
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
    /// Jobs that expired (cancelled, not started by their deadline) in the last hour.
    pub expired_last_hour: i64,
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

/// Jobs of one queue and type that expired in the last hour: cancelled because they were
/// not started by their deadline ([`NewJob::expires_at`](crate::NewJob::expires_at)).
/// Counted from the jobs cancelled in the hour, so the cost follows them, not the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ExpiredCount {
    /// Queue name.
    pub queue: String,
    /// Job type.
    pub job_type: String,
    /// Jobs that expired in the last hour.
    pub count: i64,
}

/// Jobs failing the same way: the usual sign of one real outage rather than many bad jobs.
/// Made by [`Queue::error_groups`](crate::Queue::error_groups).
///
/// Jobs are grouped by their error's fingerprint (`jobs.error_group`, written with each
/// error): the line that matters (a Python traceback's exception line, the line above a
/// stack of `at …` frames, else the last line, after a command's `exit N`) with numbers,
/// UUIDs, long hexadecimal ids and quoted values blanked, but codes after `HTTP`, `exit`,
/// `status`, `code`, `signal` and `errno` kept. So log lines before a traceback, or an id in
/// the message, do not split one failure into a group per job. A row with no fingerprint
/// (written before litejobs kept them, or by another program) groups by its whole text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ErrorGroup {
    /// The group's key: the fingerprint, or the whole error of rows without one. Narrow a
    /// list or a bulk requeue to the group with [`JobFilter::error_group`].
    pub group: String,
    /// The line that matters of [`error`](Self::error), as [`human::error_headline`](crate::human::error_headline)
    /// picks it: what to show for the group.
    pub headline: String,
    /// The whole error of the group's latest job (its first 64 KiB).
    pub error: String,
    /// Jobs whose last error it is (failed plus dead).
    pub count: i64,
    /// Of those, jobs still retrying (`failed`).
    pub failed: i64,
    /// Of those, dead jobs nobody has requeued yet.
    pub dead: i64,
    /// The job types involved, sorted.
    pub job_types: Vec<String>,
    /// When this error was first seen (ms): the earliest attempt still in the history that
    /// failed with it (any job's, also one that has since succeeded or been requeued), or
    /// the earliest change of these jobs when that is sooner (a row refused at the claim
    /// has no attempt).
    pub first_seen_at: i64,
    /// When the latest of these jobs last changed (ms).
    pub last_seen_at: i64,
}

impl ErrorGroup {
    /// A group read from the database: its key, its latest job's error, its counts (jobs,
    /// failed, dead), types and when it was first and last seen.
    pub(crate) fn new(
        group: String,
        error: String,
        (count, failed, dead): (i64, i64, i64),
        job_types: Vec<String>,
        (first_seen_at, last_seen_at): (i64, i64),
    ) -> ErrorGroup {
        ErrorGroup {
            headline: crate::fingerprint::headline(&error).into_owned(),
            group,
            error,
            count,
            failed,
            dead,
            job_types,
            first_seen_at,
            last_seen_at,
        }
    }
}

/// Counts for health checks: waiting, running and dead jobs now; failed attempts and
/// successes in a window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HealthRow {
    pub(crate) due_now: i64,
    pub(crate) scheduled: i64,
    pub(crate) running: i64,
    /// Queued jobs held until jobs they wait for end (neither due nor scheduled).
    pub(crate) held: i64,
    pub(crate) dead_awaiting: i64,
    pub(crate) failed_attempts: i64,
    pub(crate) succeeded: i64,
}

/// Counts per time bucket: (bucket index, count).
pub(crate) type BucketCounts = Vec<(i64, i64)>;

/// What the live jobs (queued, failed awaiting a retry, running) add up to at one moment,
/// read in the same pass as their counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LiveSummary {
    /// Queued or failed jobs whose run time has come.
    pub(crate) due_now: i64,
    /// Queued or failed jobs whose run time is still ahead (held jobs left out).
    pub(crate) scheduled: i64,
    pub(crate) running: i64,
    /// Per queue with due jobs, the oldest due job's run time (ms), by queue name.
    pub(crate) oldest_due: Vec<(String, i64)>,
    /// Per queue with held jobs (queued, waiting for other jobs to end: their run time is
    /// [`HELD_RUN_AT`](crate::storage::jobs::deps::HELD_RUN_AT)), how many, by queue name.
    pub(crate) held: Vec<(String, i64)>,
}

/// Reads for people and tools. None of them writes.
/// Counts as (queue, job type, status, count) rows, in that order, as [`StatusCount`]s (a
/// status litejobs does not know is left out).
pub(crate) fn status_counts_of(mut rows: Vec<(String, String, String, i64)>) -> Vec<StatusCount> {
    rows.sort();
    rows.into_iter()
        .filter_map(|(queue, job_type, status, count)| {
            let status = status.parse().ok()?;
            Some(StatusCount {
                queue,
                job_type,
                status,
                count,
            })
        })
        .collect()
}

pub(crate) trait ReadStore {
    /// One job by id.
    fn job(&self, id: i64) -> Result<Option<JobRecord>>;

    /// A job's attempt history, oldest first.
    fn attempts(&self, job_id: i64) -> Result<Vec<AttemptRecord>>;

    /// Jobs matching a filter, newest first.
    fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<JobRecord>>;

    /// How many jobs of each queue and type are in each status (only non-zero counts).
    /// Counts by queue, type and status, and the live jobs' summary at `now`, in one pass
    /// over the live jobs.
    fn status_counts(&self, now: i64) -> Result<(Vec<StatusCount>, LiveSummary)>;

    /// Jobs that became dead at `since` or later (requeued ones included).
    fn dead_since(&self, since: i64) -> Result<i64>;

    /// Jobs that expired (cancelled by their deadline) at `since` or later, by queue and
    /// type, in that order. Reads the jobs cancelled since then only.
    fn expired_counts(&self, since: i64) -> Result<Vec<ExpiredCount>>;

    /// The most common last errors among failed and dead jobs (requeued dead jobs left out).
    fn error_groups(&self, limit: usize) -> Result<Vec<ErrorGroup>>;

    /// Waiting, running and dead counts now; failed attempts and successes since `since`.
    /// Without `count_live` the waiting, held and running counts are left at 0, for a caller
    /// that has them from [`ReadStore::status_counts`].
    fn health(&self, now: i64, since: i64, count_live: bool) -> Result<HealthRow>;

    /// The oldest due job's run time per queue (only queues with due jobs).
    fn oldest_due_by_queue(&self, now: i64) -> Result<Vec<(String, i64)>>;

    /// Attempt outcomes by job type: history rows, plus one success per succeeded job (a
    /// first-try success has no history row; a later success has one, counted once here).
    fn attempt_outcomes(&self) -> Result<Vec<(String, String, i64)>>;

    /// Finished work since `since` in buckets of `bucket_ms`: `(succeeded, failed attempts,
    /// dead)`, each as `(bucket index, count)` pairs for the buckets that have any.
    fn activity(
        &self,
        since: i64,
        bucket_ms: i64,
    ) -> Result<(BucketCounts, BucketCounts, BucketCounts)>;
}
