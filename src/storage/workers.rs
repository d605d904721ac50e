//! The workers registry: each running worker's row (who, where, what it serves, its latest
//! sign of life), written by the worker on its reap schedule and read by people.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::Result;
use crate::job::JobStatus;
use crate::storage::reads::StatusCount;

/// A worker as registered: a [`crate::Worker`] in this or another process, running now or
/// seen in the last day. Made by [`Queue::workers`](crate::Queue::workers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// Its id: `locked_by` of the jobs it runs (host:pid:random, or the id it was given).
    pub id: String,
    /// The host it runs on, and its process id.
    pub host: String,
    /// Process id.
    pub pid: i64,
    /// The litejobs version it runs.
    pub version: String,
    /// The queues it works, with their handler threads.
    pub queues: BTreeMap<String, i64>,
    /// The job types it serves, sorted.
    pub job_types: Vec<String>,
    /// When it started (ms).
    pub started_at: i64,
    /// Its latest sign of life (ms): at start, then every reap interval.
    pub heartbeat_at: i64,
    /// Until when it counts as alive without another sign of life (ms).
    pub alive_until: i64,
    /// When it stopped cleanly (ms); `None` while it runs, or when it died.
    pub stopped_at: Option<i64>,
    /// Whether it is alive now: not stopped, and its latest sign of life recent enough.
    pub alive: bool,
    /// Jobs it is running now (`running` jobs whose `locked_by` is its id).
    pub running: i64,
}

impl WorkerInfo {
    /// `alive`, `stopped` (it said so at shutdown) or `gone` (no sign of life for too long:
    /// it died, or its host or its connection to the database did).
    pub fn state(&self) -> &'static str {
        match (self.alive, self.stopped_at) {
            (true, _) => "alive",
            (false, Some(_)) => "stopped",
            (false, None) => "gone",
        }
    }

    /// Whether it works `queue` and serves `job_type`.
    pub fn serves(&self, queue: &str, job_type: &str) -> bool {
        self.queues.get(queue).is_some_and(|&threads| threads > 0)
            && self.job_types.iter().any(|t| t == job_type)
    }

    /// The counts of waiting jobs (queued or failed, as in
    /// [`Stats::counts`](crate::Stats::counts)) that none of the live `workers` serves:
    /// the usual reason a due job grows old while a worker runs.
    pub fn unserved<'a>(workers: &[WorkerInfo], counts: &'a [StatusCount]) -> Vec<&'a StatusCount> {
        counts
            .iter()
            .filter(|c| matches!(c.status, JobStatus::Queued | JobStatus::Failed) && c.count > 0)
            .filter(|c| {
                !workers
                    .iter()
                    .any(|w| w.alive && w.serves(&c.queue, &c.job_type))
            })
            .collect()
    }
}

/// A worker's row as it writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerRow {
    pub(crate) id: String,
    pub(crate) host: String,
    pub(crate) pid: i64,
    pub(crate) version: String,
    /// JSON object text: queue name to threads.
    pub(crate) queues: String,
    /// JSON array text.
    pub(crate) job_types: String,
    pub(crate) started_at: i64,
}

/// A row as read, with the jobs its worker runs now.
#[derive(Debug, Clone)]
pub(crate) struct RegisteredRow {
    pub(crate) row: WorkerRow,
    pub(crate) heartbeat_at: i64,
    pub(crate) alive_until: i64,
    pub(crate) stopped_at: Option<i64>,
    pub(crate) running: i64,
}

/// How long the row of a worker that stopped or died stays to be seen: a day.
pub(crate) const GONE_KEPT_MS: i64 = 24 * 3_600_000;

/// The registry.
pub(crate) trait WorkerStore {
    /// Writes the worker's row as alive until `alive_until` (inserting it at its first
    /// beat, clearing a stop), and deletes the rows of workers gone for over
    /// [`GONE_KEPT_MS`].
    fn worker_beat(&self, row: &WorkerRow, now: i64, alive_until: i64) -> Result<()>;

    /// Marks the worker stopped now: the row of this run of it (its id and start), not that
    /// of a newer process given the same id.
    fn worker_stopped(&self, row: &WorkerRow, now: i64) -> Result<()>;

    /// Keeps the worker alive until at least `alive_until` while it shuts down (its
    /// handlers may run for the whole grace, and it beats no more).
    fn worker_stopping(&self, row: &WorkerRow, alive_until: i64) -> Result<()>;

    /// Every row, the latest started first, with the jobs each worker runs now.
    fn workers(&self) -> Result<Vec<RegisteredRow>>;
}
