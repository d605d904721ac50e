//! What one refresh of `litejobs top` reads: the overview `stats` prints, work finished
//! minute by minute, the jobs a person may act on (running, retrying, dead), and who is
//! working; and the queue table made from them. Read off the screen's thread, so a slow or
//! unreachable database never freezes the keys.

use std::collections::BTreeMap;
use std::time::Duration;

use litejobs::{ActivityBucket, JobFilter, JobRecord, JobStatus, Overview, Queue, WorkerInfo};

/// The failure figures' window and the throughput's span: the last quarter of an hour.
pub const MINUTES: usize = 15;
/// How many of the most common errors are read.
pub const ERRORS: usize = 20;
/// How many jobs of each kind (running, retrying, dead) are read.
pub const JOBS_PER_STATUS: usize = 100;

/// One refresh's figures.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When it was read, by the queue's clock (ms).
    pub at_ms: i64,
    /// Health, counts by queue, type and status, oldest due ages, the most common errors.
    pub overview: Overview,
    /// Work finished in each of the last [`MINUTES`] minutes, oldest first.
    pub minutes: Vec<ActivityBucket>,
    /// Running jobs, then retrying ones, then dead ones nobody requeued yet.
    pub jobs: Vec<JobRecord>,
    /// Who is working; `None` when the registry cannot be read (a file from before it).
    pub workers: Option<Vec<WorkerInfo>>,
    /// A row per queue, each followed by a row per job type in it.
    pub rows: Vec<QueueRow>,
}

/// A line of the queue table: a queue's totals, or one job type's in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRow {
    /// The queue.
    pub queue: String,
    /// The job type; `None` on the queue's own line.
    pub job_type: Option<String>,
    /// Jobs by status, in [`JobStatus::ALL`]'s order.
    pub counts: [i64; 6],
    /// Whether the queue is paused.
    pub paused: bool,
    /// How long the queue's oldest due job has waited past its run time (ms); queue lines
    /// only.
    pub oldest_due_ms: Option<i64>,
}

impl QueueRow {
    /// Jobs in `status`.
    pub fn count(&self, status: JobStatus) -> i64 {
        JobStatus::ALL
            .iter()
            .position(|s| *s == status)
            .map_or(0, |i| self.counts[i])
    }
}

impl Snapshot {
    /// Reads everything one screen shows.
    pub fn read(queue: &Queue) -> litejobs::Result<Snapshot> {
        let window = Duration::from_secs(60 * MINUTES as u64);
        let overview = queue.overview(window, ERRORS)?;
        let minutes = queue.activity(Duration::from_secs(60), MINUTES)?;
        let mut jobs = Vec::new();
        for status in [JobStatus::Running, JobStatus::Failed, JobStatus::Dead] {
            let filter = JobFilter::new().status(status).limit(JOBS_PER_STATUS);
            let mut listed = queue.list(&filter)?;
            // A requeued dead job has been dealt with; its stand-in is listed instead.
            listed.retain(|j| j.requeued_as.is_none());
            // Running: the longest-running first; retrying: the next due first; dead: the
            // latest death first.
            match status {
                JobStatus::Running => listed.sort_by_key(|j| (j.started_at, j.id)),
                JobStatus::Failed => listed.sort_by_key(|j| (j.run_at, j.id)),
                _ => listed.sort_by_key(|j| std::cmp::Reverse((j.finished_at, j.id))),
            }
            jobs.extend(listed);
        }
        let workers = queue.workers().ok();
        let rows = queue_rows(&overview);
        Ok(Snapshot {
            at_ms: overview.health.at_ms,
            overview,
            minutes,
            jobs,
            workers,
            rows,
        })
    }

    /// The same figures `now` (ms), nothing having been written since they were read: the
    /// oldest due jobs have waited that much longer.
    pub fn age_to(&mut self, now: i64) {
        let by = now - self.at_ms;
        if by <= 0 {
            return;
        }
        self.at_ms = now;
        let health = &mut self.overview.health;
        health.at_ms = now;
        if let Some(age) = &mut health.oldest_due_age_ms {
            *age += by;
        }
        for (_, age) in &mut self.overview.oldest_due_by_queue {
            *age += by;
        }
        for age in self
            .rows
            .iter_mut()
            .filter_map(|r| r.oldest_due_ms.as_mut())
        {
            *age += by;
        }
    }

    /// How many workers are alive; `None` without a registry.
    pub fn live_workers(&self) -> Option<usize> {
        let workers = self.workers.as_ref()?;
        Some(workers.iter().filter(|w| w.alive).count())
    }
}

/// The queue table: each queue (paused ones without jobs too) with its totals, followed by
/// its job types; by name.
pub fn queue_rows(overview: &Overview) -> Vec<QueueRow> {
    let paused = &overview.health.paused_queues;
    let mut queues: BTreeMap<&str, BTreeMap<&str, [i64; 6]>> = BTreeMap::new();
    for name in paused {
        queues.entry(name).or_default();
    }
    for c in &overview.counts {
        let i = JobStatus::ALL
            .iter()
            .position(|s| *s == c.status)
            .unwrap_or(0);
        queues
            .entry(&c.queue)
            .or_default()
            .entry(&c.job_type)
            .or_default()[i] += c.count;
    }
    let oldest: BTreeMap<&str, i64> = overview
        .oldest_due_by_queue
        .iter()
        .map(|(q, age)| (q.as_str(), *age))
        .collect();
    let mut rows = Vec::new();
    for (queue, types) in queues {
        let mut total = [0; 6];
        for counts in types.values() {
            for (t, c) in total.iter_mut().zip(counts) {
                *t += c;
            }
        }
        let is_paused = paused.iter().any(|p| p == queue);
        rows.push(QueueRow {
            queue: queue.to_string(),
            job_type: None,
            counts: total,
            paused: is_paused,
            oldest_due_ms: oldest.get(queue).copied(),
        });
        rows.extend(types.into_iter().map(|(job_type, counts)| QueueRow {
            queue: queue.to_string(),
            job_type: Some(job_type.to_string()),
            counts,
            paused: is_paused,
            oldest_due_ms: None,
        }));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_rows_total_each_queue_above_its_types_and_keep_empty_paused_queues() {
        let queue = Queue::open_in_memory().expect("queue");
        for (job_type, queue_name) in [("a", "default"), ("b", "default"), ("a", "default")] {
            queue
                .enqueue(litejobs::NewJob::new(job_type, serde_json::json!({})).queue(queue_name))
                .expect("enqueue");
        }
        queue
            .enqueue(litejobs::NewJob::new("r", serde_json::json!({})).queue("reports"))
            .expect("enqueue");
        queue.pause_queue("reports").expect("pause");
        queue.pause_queue("nightly").expect("pause");
        let rows = queue_rows(&queue.overview(Duration::from_secs(60), 1).expect("read"));
        let shown: Vec<(&str, Option<&str>, i64, bool)> = rows
            .iter()
            .map(|r| {
                (
                    r.queue.as_str(),
                    r.job_type.as_deref(),
                    r.count(JobStatus::Queued),
                    r.paused,
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("default", None, 3, false),
                ("default", Some("a"), 2, false),
                ("default", Some("b"), 1, false),
                ("nightly", None, 0, true),
                ("reports", None, 1, true),
                ("reports", Some("r"), 1, true),
            ]
        );
        assert!(rows[0].oldest_due_ms.is_some(), "{rows:?}");
        assert_eq!(rows[1].oldest_due_ms, None);
    }
}
