//! `impl Queue` for everything people and tools read: jobs by filter, counts, health
//! figures, grouped errors, activity over time, each queue's oldest due job, and the
//! snapshot behind the metrics. Each figure comes from one store query
//! ([`ReadStore`](crate::storage::reads::ReadStore)), so the CLI, the dashboard and the
//! metrics can never disagree on it.

use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::job::JobRecord;
use crate::storage::reads::{
    ErrorGroup, ExpiredCount, HealthRow, JobFilter, LiveSummary, Stats, StatusCount,
};
use crate::storage::Tx;
use crate::system::clock::duration_to_ms;
use crate::Queue;

/// Failed attempts of the last this-long count toward [`Health::failure_rate`] unless
/// another window is asked for: one hour.
pub const DEFAULT_HEALTH_WINDOW: Duration = Duration::from_secs(3600);

/// The three questions of the morning after, answered at once: how many jobs wait, how many
/// fail, how old the oldest due job is. Made by [`Queue::health`]; read in one snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Health {
    /// When it was read, by the queue's clock (ms).
    pub at_ms: i64,
    /// Queued or failed jobs whose run time has come.
    pub due_now: i64,
    /// Queued or failed jobs due later (retries in backoff, delayed jobs).
    pub scheduled: i64,
    /// Queued jobs held until jobs they wait for end (workflow steps, batch callbacks):
    /// neither due nor scheduled, and never counted as overdue.
    pub waiting_dependants: i64,
    /// Jobs running under a lease.
    pub running: i64,
    /// How long the oldest due job has waited past its run time (ms); `None` when nothing is
    /// due. It grows when nobody picks jobs up (no worker, a paused queue, a stuck worker).
    pub oldest_due_age_ms: Option<i64>,
    /// Dead jobs nobody has requeued or discarded yet.
    pub dead: i64,
    /// Jobs that became dead in the last hour (requeued ones included).
    pub dead_last_hour: i64,
    /// Jobs that expired (cancelled because they were not started by their deadline) in the
    /// last hour; not failures.
    pub expired_last_hour: i64,
    /// The window of the attempt figures below (ms).
    pub window_ms: i64,
    /// Attempts that failed, timed out or were lost in the window.
    pub failed_attempts: i64,
    /// Jobs that succeeded in the window.
    pub succeeded: i64,
    /// `failed_attempts / (failed_attempts + succeeded)`; `None` when neither happened.
    pub failure_rate: Option<f64>,
    /// Queues paused with [`Queue::pause_queue`].
    pub paused_queues: Vec<String>,
}

/// The most buckets [`Queue::activity`] returns at once.
pub const MAX_ACTIVITY_BUCKETS: usize = 1000;

/// Work finished in one time bucket. Made by [`Queue::activity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ActivityBucket {
    /// When the bucket starts (ms since the Unix epoch); it lasts the bucket length asked for.
    pub start_ms: i64,
    /// Jobs that succeeded in it (jobs pruned since are not counted).
    pub succeeded: i64,
    /// Attempts that failed, timed out or were lost in it.
    pub failed_attempts: i64,
    /// Jobs that became dead in it (requeued ones included).
    pub dead: i64,
}

/// The queue at a glance, as `litejobs stats --json` and the dashboard's `/api/stats` both
/// answer it: the [`Health`] figures (flattened), the counts by queue, type and status, and
/// the most common errors. Made by [`Queue::overview`], read in one snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Overview {
    /// How many jobs wait and fail, and how old the oldest due job is.
    #[serde(flatten)]
    pub health: Health,
    /// Counts by queue, job type and status (only non-zero ones).
    pub counts: Vec<StatusCount>,
    /// Per queue with due jobs, how long its oldest due job has waited past its run time
    /// (ms); in JSON an object by queue name.
    #[serde(serialize_with = "as_object")]
    pub oldest_due_by_queue: Vec<(String, i64)>,
    /// The most common last errors of failed and dead jobs, most frequent first.
    pub top_errors: Vec<ErrorGroup>,
}

fn as_object<S: serde::Serializer>(
    pairs: &[(String, i64)],
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    serializer.collect_map(pairs.iter().map(|(k, v)| (k, v)))
}

impl Overview {
    /// Jobs in `status`, across queues and types.
    pub fn count(&self, status: crate::JobStatus) -> i64 {
        self.counts
            .iter()
            .filter(|c| c.status == status)
            .map(|c| c.count)
            .sum()
    }
}

/// Jobs that became dead less than this long ago count in `dead_last_hour`.
const HOUR_MS: i64 = 3_600_000;

/// The figures of [`Stats`] and [`Health`] read in one snapshot.
struct Figures {
    counts: Vec<StatusCount>,
    /// Due, scheduled and running counts (0 from [`Figures::read_without_counts`], whose
    /// caller counts them in its health row) and the oldest due job per queue.
    live: LiveSummary,
    dead_last_hour: i64,
    /// Jobs that expired in the last hour, by queue and type.
    expired: Vec<ExpiredCount>,
}

impl Figures {
    /// The counts and the live summary in one pass over the live jobs.
    fn read(tx: &dyn Tx, now: i64) -> Result<Figures> {
        let (counts, live) = tx.status_counts(now)?;
        Ok(Figures {
            counts,
            live,
            dead_last_hour: tx.dead_since(now - HOUR_MS)?,
            expired: tx.expired_counts(now - HOUR_MS)?,
        })
    }

    /// What [`Figures::health`] needs: everything but the counts by type, whose reading of
    /// the live jobs is the costly part on a big backlog (the health row counts them with
    /// three index counts instead).
    fn read_without_counts(tx: &dyn Tx, now: i64) -> Result<Figures> {
        Ok(Figures {
            counts: Vec::new(),
            live: LiveSummary {
                oldest_due: tx.oldest_due_by_queue(now)?,
                ..LiveSummary::default()
            },
            dead_last_hour: tx.dead_since(now - HOUR_MS)?,
            expired: tx.expired_counts(now - HOUR_MS)?,
        })
    }

    /// Jobs that expired in the last hour.
    fn expired_last_hour(&self) -> i64 {
        self.expired.iter().map(|e| e.count).sum()
    }

    /// The health row from `since`, with the live counts this reading already has.
    fn health_row(&self, tx: &dyn Tx, now: i64, since: i64) -> Result<HealthRow> {
        Ok(HealthRow {
            due_now: self.live.due_now,
            scheduled: self.live.scheduled,
            running: self.live.running,
            held: self.live.held.iter().map(|(_, n)| n).sum(),
            ..tx.health(now, since, false)?
        })
    }

    /// How long each queue's oldest due job has waited past its run time (ms).
    fn oldest_due_ages(&self, now: i64) -> Vec<(String, i64)> {
        ages(&self.live.oldest_due, now)
    }

    fn oldest_due_age_ms(&self, now: i64) -> Option<i64> {
        self.live
            .oldest_due
            .iter()
            .map(|(_, run_at)| *run_at)
            .min()
            .map(|at| (now - at).max(0))
    }

    fn stats(&self, now: i64) -> Stats {
        Stats {
            counts: self.counts.clone(),
            oldest_due_age_ms: self.oldest_due_age_ms(now),
            dead_last_hour: self.dead_last_hour,
            expired_last_hour: self.expired_last_hour(),
        }
    }

    fn health(&self, now: i64, window_ms: i64, row: HealthRow, paused: Vec<String>) -> Health {
        let attempts = row.failed_attempts + row.succeeded;
        Health {
            at_ms: now,
            due_now: row.due_now,
            scheduled: row.scheduled,
            waiting_dependants: row.held,
            running: row.running,
            oldest_due_age_ms: self.oldest_due_age_ms(now),
            dead: row.dead_awaiting,
            dead_last_hour: self.dead_last_hour,
            expired_last_hour: self.expired_last_hour(),
            window_ms,
            failed_attempts: row.failed_attempts,
            succeeded: row.succeeded,
            failure_rate: (attempts > 0).then(|| row.failed_attempts as f64 / attempts as f64),
            paused_queues: paused,
        }
    }
}

/// How many attempts of one job type ended one way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AttemptCount {
    /// Job type.
    pub job_type: String,
    /// `succeeded`, `failed`, `timed_out`, `lost`, `released` or `cancelled`.
    pub outcome: String,
    /// Attempts.
    pub count: i64,
}

/// Everything [`metrics::render`](crate::metrics::render) prints, read from the database. Made by
/// [`Queue::metrics_snapshot`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// Counts by queue, type and status.
    pub stats: Stats,
    /// Waiting, dead and failure figures.
    pub health: Health,
    /// Per queue with due jobs: the oldest due job's age (ms).
    pub oldest_due_age_ms: Vec<(String, i64)>,
    /// Per queue with held jobs: how many wait for other jobs to end
    /// ([`Health::waiting_dependants`]).
    pub waiting_dependants: Vec<(String, i64)>,
    /// Attempt outcomes by job type.
    pub attempts: Vec<AttemptCount>,
    /// Jobs that expired in the last hour, by queue and type.
    pub expired: Vec<ExpiredCount>,
}

impl Queue {
    /// Jobs matching `filter`, newest first; encrypted ones shown as [`Queue::job`] shows
    /// them.
    pub fn list(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        let jobs = self.db().read(|tx| tx.list_jobs(filter))?;
        Ok(self.reveal_all(jobs))
    }

    /// Counts by queue, type and status; the oldest due job's age; dead and expired jobs in
    /// the last hour.
    pub fn stats(&self) -> Result<Stats> {
        let now = self.now_ms();
        self.db().read(|tx| Ok(Figures::read(tx, now)?.stats(now)))
    }

    /// How many jobs wait, how many fail, how old the oldest due job is; failure figures
    /// over the last `window`. See [`Health`].
    pub fn health(&self, window: Duration) -> Result<Health> {
        let now = self.now_ms();
        let window_ms = duration_to_ms(window);
        self.db().read(|tx| {
            let row = tx.health(now, now.saturating_sub(window_ms), true)?;
            let figures = Figures::read_without_counts(tx, now)?;
            Ok(figures.health(now, window_ms, row, tx.paused_queues()?))
        })
    }

    /// The `limit` most common last errors among failed and dead jobs (dead jobs already
    /// requeued are left out), most frequent first.
    pub fn error_groups(&self, limit: usize) -> Result<Vec<ErrorGroup>> {
        self.db().read(|conn| conn.error_groups(limit))
    }

    /// Work finished in the last `count` buckets of length `bucket`, oldest first; the last
    /// bucket holds now. Buckets are aligned to multiples of `bucket` since the Unix epoch, so
    /// an hour bucket starts on the hour and a day bucket at 00:00 UTC.
    ///
    /// ```
    /// use litejobs::Queue;
    /// use std::time::Duration;
    /// # fn main() -> litejobs::Result<()> {
    /// let queue = Queue::open_in_memory()?;
    /// let hours = queue.activity(Duration::from_secs(3600), 24)?;
    /// assert_eq!(hours.len(), 24);
    /// assert!(hours.iter().all(|b| b.succeeded == 0));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`InvalidConfig`](crate::ErrorKind::InvalidConfig) for a bucket under one millisecond
    /// or a count of 0 or over [`MAX_ACTIVITY_BUCKETS`].
    pub fn activity(&self, bucket: Duration, count: usize) -> Result<Vec<ActivityBucket>> {
        let bucket_ms = duration_to_ms(bucket);
        if bucket_ms < 1 {
            return Err(Error::invalid_config(format!(
                "activity bucket must be at least 1 ms, got {bucket:?}"
            )));
        }
        if count == 0 || count > MAX_ACTIVITY_BUCKETS {
            return Err(Error::invalid_config(format!(
                "activity bucket count must be between 1 and {MAX_ACTIVITY_BUCKETS}, got {count}"
            )));
        }
        let now = self.now_ms();
        let span = bucket_ms.saturating_mul(count as i64 - 1);
        let since = now.div_euclid(bucket_ms) * bucket_ms - span;
        let (succeeded, failed, dead) = self.db().read(|conn| conn.activity(since, bucket_ms))?;
        let mut buckets: Vec<ActivityBucket> = (0..count as i64)
            .map(|i| ActivityBucket {
                start_ms: since + i * bucket_ms,
                succeeded: 0,
                failed_attempts: 0,
                dead: 0,
            })
            .collect();
        // Rows stamped after now (another process's clock ahead of ours) fall outside and
        // are left out rather than piled into the last bucket.
        let mut add = |counts: Vec<(i64, i64)>, pick: fn(&mut ActivityBucket) -> &mut i64| {
            for (index, n) in counts {
                if let Some(b) = usize::try_from(index).ok().and_then(|i| buckets.get_mut(i)) {
                    *pick(b) += n;
                }
            }
        };
        add(succeeded, |b| &mut b.succeeded);
        add(failed, |b| &mut b.failed_attempts);
        add(dead, |b| &mut b.dead);
        Ok(buckets)
    }

    /// Per queue with due jobs: how long its oldest due job has waited past its run time
    /// (ms), by queue name. A growing age means nobody picks that queue's jobs up.
    pub fn oldest_due_by_queue(&self) -> Result<Vec<(String, i64)>> {
        let now = self.now_ms();
        let rows = self.db().read(|conn| conn.oldest_due_by_queue(now))?;
        Ok(ages(&rows, now))
    }

    /// The queue at a glance: health figures over the last `window`, counts, and the `errors`
    /// most common errors; see [`Overview`].
    pub fn overview(&self, window: Duration, errors: usize) -> Result<Overview> {
        let now = self.now_ms();
        let window_ms = duration_to_ms(window);
        self.db().read(|tx| {
            let figures = Figures::read(tx, now)?;
            let row = figures.health_row(tx, now, now.saturating_sub(window_ms))?;
            Ok(Overview {
                health: figures.health(now, window_ms, row, tx.paused_queues()?),
                oldest_due_by_queue: figures.oldest_due_ages(now),
                counts: figures.counts,
                top_errors: tx.error_groups(errors)?,
            })
        })
    }

    /// The figures behind [`metrics::render`](crate::metrics::render), read in one snapshot.
    pub fn metrics_snapshot(&self) -> Result<MetricsSnapshot> {
        let now = self.now_ms();
        let window_ms = duration_to_ms(DEFAULT_HEALTH_WINDOW);
        self.db().read(|tx| {
            let figures = Figures::read(tx, now)?;
            let row = figures.health_row(tx, now, now.saturating_sub(window_ms))?;
            let health = figures.health(now, window_ms, row, tx.paused_queues()?);
            Ok(MetricsSnapshot {
                stats: figures.stats(now),
                health,
                oldest_due_age_ms: figures.oldest_due_ages(now),
                waiting_dependants: figures.live.held.clone(),
                expired: figures.expired.clone(),
                attempts: tx
                    .attempt_outcomes()?
                    .into_iter()
                    .map(|(job_type, outcome, count)| AttemptCount {
                        job_type,
                        outcome,
                        count,
                    })
                    .collect(),
            })
        })
    }
}

/// Oldest due run times per queue as ages at `now` (ms, never negative).
fn ages(oldest_due: &[(String, i64)], now: i64) -> Vec<(String, i64)> {
    oldest_due
        .iter()
        .map(|(queue, run_at)| (queue.clone(), (now - run_at).max(0)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JobError, ManualClock, NewJob, Worker};
    use serde_json::json;

    #[test]
    fn activity_counts_each_figure_in_its_bucket() -> Result<()> {
        const HOUR: i64 = 3_600_000;
        // 10:30 on some day: the current hour bucket starts at 10:00.
        let clock = ManualClock::new(1_700_000_000_000 / HOUR * HOUR + HOUR / 2);
        let queue = Queue::builder().clock(clock.clone()).open_in_memory()?;
        let worker = Worker::builder(&queue).handler("t", |ctx: &crate::JobContext| {
            match ctx.payload()["do"].as_str() {
                Some("ok") => Ok(()),
                Some("retry") => Err(JobError::retry("not yet")),
                _ => Err(JobError::permanent("no")),
            }
        });
        queue.enqueue(NewJob::new("t", json!({"do": "ok"})))?;
        queue.enqueue(NewJob::new("t", json!({"do": "retry"})))?;
        crate::testing::drain(&worker)?;
        clock.advance(Duration::from_millis(HOUR as u64));
        queue.enqueue(NewJob::new("t", json!({"do": "dead"})))?;
        queue.enqueue(NewJob::new("t", json!({"do": "ok"})))?;
        crate::testing::drain(&worker)?;

        let hours = queue.activity(Duration::from_secs(3600), 3)?;
        assert_eq!(hours.len(), 3);
        assert_eq!(hours[2].start_ms, queue.now_ms() / HOUR * HOUR);
        assert_eq!(hours[1].start_ms, hours[2].start_ms - HOUR);
        let figures: Vec<(i64, i64, i64)> = hours
            .iter()
            .map(|b| (b.succeeded, b.failed_attempts, b.dead))
            .collect();
        // The retry job failed once in the first hour and once more (due again) in the
        // second, beside the job that failed for good.
        assert_eq!(figures, vec![(0, 0, 0), (1, 1, 0), (1, 2, 1)]);
        Ok(())
    }

    #[test]
    fn activity_refuses_empty_buckets() -> Result<()> {
        let queue = Queue::open_in_memory()?;
        assert!(queue.activity(Duration::ZERO, 3).is_err());
        assert!(queue.activity(Duration::from_secs(60), 0).is_err());
        assert!(queue
            .activity(Duration::from_secs(60), MAX_ACTIVITY_BUCKETS + 1)
            .is_err());
        Ok(())
    }
}
