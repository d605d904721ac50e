//! The workers registry from the worker's side: each worker writes its row (id, host, pid,
//! version, queues, job types) when it starts and again on the reaper's schedule, as a sign
//! of life, and marks it stopped when it shuts down. A worker that dies leaves its row,
//! which reads as gone once its `alive_until` has passed. [`Queue::workers`] reads them all.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::Result;
use crate::storage::workers::{WorkerInfo, WorkerRow, GONE_KEPT_MS};
use crate::Queue;

/// A worker with no sign of life for this long, or for three of its reap intervals if
/// longer, reads as gone.
const MIN_ALIVE_WINDOW: Duration = Duration::from_secs(30);

/// One worker's row in the registry.
#[derive(Debug, Clone)]
pub(crate) struct Presence {
    row: WorkerRow,
    /// How long a beat keeps the worker alive.
    window_ms: i64,
}

impl Presence {
    /// The row of worker `id` working `queues` (name, threads) for `job_types`, which beats
    /// every `every` (its reap interval).
    pub(crate) fn new(
        queue: &Queue,
        id: &str,
        queues: &[(String, usize)],
        mut job_types: Vec<String>,
        every: Duration,
    ) -> Presence {
        let worked: BTreeMap<&str, usize> = queues
            .iter()
            .filter(|(_, threads)| *threads > 0)
            .map(|(name, threads)| (name.as_str(), *threads))
            .collect();
        job_types.sort();
        job_types.dedup();
        let window = (every.saturating_mul(3)).max(MIN_ALIVE_WINDOW);
        Presence {
            row: WorkerRow {
                id: id.to_string(),
                host: crate::system::host::name(),
                pid: i64::from(std::process::id()),
                version: env!("CARGO_PKG_VERSION").to_string(),
                queues: serde_json::to_string(&worked).unwrap_or_else(|_| "{}".into()),
                job_types: serde_json::to_string(&job_types).unwrap_or_else(|_| "[]".into()),
                started_at: queue.now_ms(),
            },
            window_ms: i64::try_from(window.as_millis()).unwrap_or(i64::MAX),
        }
    }

    /// Writes the row as alive for another window.
    pub(crate) fn beat(&self, queue: &Queue) -> Result<()> {
        let now = queue.now_ms();
        let until = now.saturating_add(self.window_ms);
        queue.db().write(|tx| tx.worker_beat(&self.row, now, until))
    }

    /// Keeps the row alive through a shutdown of up to `grace`, during which the worker
    /// beats no more; a failure is logged (the row may then read as gone before the end).
    pub(crate) fn stopping(&self, queue: &Queue, grace: Duration) {
        let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let until = queue
            .now_ms()
            .saturating_add(self.window_ms)
            .saturating_add(grace_ms);
        if let Err(e) = queue.db().write(|tx| tx.worker_stopping(&self.row, until)) {
            log::debug!(
                "litejobs: worker {} shutting down, registry not updated: {e}",
                self.row.id
            );
        }
    }

    /// Marks the row stopped; a failure is logged (the row then reads as gone after its
    /// window).
    pub(crate) fn stopped(&self, queue: &Queue) {
        let now = queue.now_ms();
        if let Err(e) = queue.db().write(|tx| tx.worker_stopped(&self.row, now)) {
            log::warn!(
                "litejobs: worker {} could not mark itself stopped in the registry ({e}); it \
                 reads as gone once its last sign of life is old",
                self.row.id
            );
        }
    }
}

impl Queue {
    /// The workers of this database, in this process or any other: those running now and
    /// those that stopped or died in the last day, the latest started first, each with what
    /// it works and serves, its latest sign of life and the jobs it runs now. A worker writes
    /// its row when it starts and every reap interval
    /// ([`WorkerBuilder::reap_interval`](crate::WorkerBuilder::reap_interval)); it reads as
    /// alive until three intervals (at least 30 s) pass without one, or until it stops.
    ///
    /// ```
    /// # fn main() -> litejobs::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let queue = litejobs::Queue::open(dir.path().join("app.db"))?;
    /// use litejobs::{JobContext, JobError, Worker};
    /// let worker = Worker::builder(&queue)
    ///     .handler("send_email", |_: &JobContext| -> Result<(), JobError> { Ok(()) })
    ///     .start()?;
    /// # let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    /// # while queue.workers()?.is_empty() && std::time::Instant::now() < deadline {
    /// #     std::thread::sleep(std::time::Duration::from_millis(5));
    /// # }
    /// let live: Vec<_> = queue.workers()?.into_iter().filter(|w| w.alive).collect();
    /// assert!(live[0].serves("default", "send_email"));
    /// worker.shutdown(std::time::Duration::from_secs(5))?;
    /// assert!(!queue.workers()?[0].alive, "stopped");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A database error.
    pub fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let now = self.now_ms();
        let rows = self.db().read(|tx| tx.workers())?;
        // Rows gone for over a day wait for the next worker's beat to be deleted; they are
        // not shown meanwhile.
        Ok(rows
            .into_iter()
            .filter(|r| r.alive_until >= now.saturating_sub(GONE_KEPT_MS))
            .map(|r| {
                let queues: BTreeMap<String, i64> =
                    serde_json::from_str(&r.row.queues).unwrap_or_default();
                let mut job_types: Vec<String> =
                    serde_json::from_str(&r.row.job_types).unwrap_or_default();
                job_types.sort();
                WorkerInfo {
                    alive: r.stopped_at.is_none() && r.alive_until >= now,
                    id: r.row.id,
                    host: r.row.host,
                    pid: r.row.pid,
                    version: r.row.version,
                    queues,
                    job_types,
                    started_at: r.row.started_at,
                    heartbeat_at: r.heartbeat_at,
                    alive_until: r.alive_until,
                    stopped_at: r.stopped_at,
                    running: r.running,
                }
            })
            .collect())
    }
}
