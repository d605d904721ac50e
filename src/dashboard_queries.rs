//! `impl Queue` reads for dashboards (litejobs' own, and any a user builds): finished work
//! per time bucket, and each queue's oldest due job.

use std::time::Duration;

use serde::Serialize;

use crate::clock::duration_to_ms;
use crate::error::{Error, Result};
use crate::Queue;

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

impl Queue {
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
        Ok(rows
            .into_iter()
            .map(|(queue, run_at)| (queue, (now - run_at).max(0)))
            .collect())
    }
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
