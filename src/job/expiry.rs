//! Deadlines: a job not started by its `expires_at` never starts. Here, how a [`NewJob`]
//! gets one ([`NewJob::expires_at`], [`NewJob::expire_after`]), the check it passes at
//! enqueue, and the words of an expired job's `cancel_reason`, written once for every place
//! that ends a job this way (the sweep of waiting jobs, a retry or snooze that would fall
//! after the deadline).

use std::time::{Duration, SystemTime};

use super::new::{Expiry, NewJob, MAX_RUN_AT_MS};
use super::record::{JobRecord, JobStatus};
use crate::error::{Error, Result};
use crate::system::clock::{duration_to_ms, system_time_to_ms};

/// The `cancelled_by` of a job that expired.
pub(crate) const EXPIRED_BY: &str = "deadline";

impl NewJob {
    /// The job must start by `when`: one not started by then never starts, and ends
    /// `cancelled` with `cancelled_by` `deadline` and a `cancel_reason` saying it expired. A
    /// retry or snooze that would fall at or after `when` ends it the same way; an attempt
    /// already running is not cut short (its timeout does that). Replaces an earlier
    /// [`NewJob::expire_after`].
    ///
    /// Enqueue refuses a deadline that is not after both the job's run time and the enqueue
    /// time: such a job could never start.
    pub fn expires_at(mut self, when: SystemTime) -> NewJob {
        self.expires = Some(Expiry::At(system_time_to_ms(when)));
        self
    }

    /// The job must start within `window` of being due: its deadline is its run time (the
    /// enqueue time, or later after [`NewJob::delay`] or [`NewJob::run_at`]) plus
    /// `window`, as Sidekiq's `expires_in` counts. See [`NewJob::expires_at`]. Replaces an
    /// earlier `expires_at`.
    ///
    /// ```
    /// use litejobs::{testing, JobStatus, ManualClock, NewJob, Queue, Worker};
    /// use serde_json::json;
    /// use std::time::Duration;
    /// # fn main() -> litejobs::Result<()> {
    /// let clock = ManualClock::starting_now();
    /// let queue = Queue::builder().clock(clock.clone()).open_in_memory()?;
    /// let id = queue.enqueue(
    ///     NewJob::new("password_reset_email", json!({"user_id": 42}))
    ///         .expire_after(Duration::from_secs(15 * 60)),
    /// )?;
    /// clock.advance(Duration::from_secs(16 * 60)); // no worker ran meanwhile
    /// let worker = Worker::builder(&queue).handler("password_reset_email", |_ctx: &litejobs::JobContext| Ok(()));
    /// assert_eq!(testing::drain(&worker)?.expired, 1);
    /// let job = queue.job(id)?.expect("kept");
    /// assert_eq!(job.status, JobStatus::Cancelled);
    /// assert!(job.expired());
    /// # Ok(())
    /// # }
    /// ```
    pub fn expire_after(mut self, window: Duration) -> NewJob {
        self.expires = Some(Expiry::After(duration_to_ms(window)));
        self
    }
}

impl JobRecord {
    /// True for a job that ended `cancelled` because it was not started by its deadline
    /// ([`NewJob::expires_at`]).
    pub fn expired(&self) -> bool {
        self.status == JobStatus::Cancelled && self.cancelled_by.as_deref() == Some(EXPIRED_BY)
    }
}

/// The deadline (ms) to store for `job`, due at `run_at` and enqueued at `now`; `None` for
/// none.
///
/// # Errors
/// [`ErrorKind::InvalidJob`](crate::ErrorKind::InvalidJob) for a deadline the job could
/// never meet (not after its run time or the enqueue time, or a window under 1 ms), or one
/// past the year 5000.
pub(crate) fn resolve_expiry(job: &NewJob, run_at: i64, now: i64) -> Result<Option<i64>> {
    let Some(expiry) = job.expires else {
        return Ok(None);
    };
    let due = run_at.max(now);
    let at = match expiry {
        Expiry::At(at) => {
            if at <= due {
                let what = if run_at > now {
                    format!("its run time {}", rfc3339(run_at))
                } else {
                    format!("the enqueue time {}", rfc3339(now))
                };
                return Err(Error::invalid_job(format!(
                    "expires_at {} is not after {what}: the job could never start; give a \
                     later deadline, or none",
                    rfc3339(at)
                )));
            }
            at
        }
        Expiry::After(window) => {
            if window < 1 {
                return Err(Error::invalid_job("expire_after must be at least 1 ms"));
            }
            due.saturating_add(window)
        }
    };
    if at > MAX_RUN_AT_MS {
        return Err(Error::invalid_job(format!(
            "expires_at {at} ms is after the year 5000 (the latest is {MAX_RUN_AT_MS} ms); \
             give a shorter window or an earlier time"
        )));
    }
    Ok(Some(at))
}

/// A time as RFC 3339 in UTC, to the second unless it has milliseconds:
/// `2026-12-05T03:15:00Z`.
pub(crate) fn rfc3339(ms: i64) -> String {
    let pattern = if ms.rem_euclid(1000) == 0 {
        "%Y-%m-%dT%H:%M:%SZ"
    } else {
        "%Y-%m-%dT%H:%M:%S%.3fZ"
    };
    crate::human::utc_pattern(ms, pattern)
}

/// Why a waiting job expired: `attempts` ran before (a retry that was not started in time).
pub(crate) fn not_started_reason(deadline: i64, attempts: i64) -> String {
    if attempts > 0 {
        format!(
            "expired: attempt {} not started by its deadline {}",
            attempts.saturating_add(1),
            rfc3339(deadline)
        )
    } else {
        format!("expired: not started by its deadline {}", rfc3339(deadline))
    }
}

/// Why a job whose attempt failed expired instead of retrying at `retry_at`.
pub(crate) fn retry_reason(retry_at: i64, deadline: i64) -> String {
    format!(
        "expired: its retry at {} would not start before its deadline {}",
        rfc3339(retry_at),
        rfc3339(deadline)
    )
}

/// Why a job whose handler snoozed until `until` expired instead.
pub(crate) fn snooze_reason(until: i64, deadline: i64) -> String {
    format!(
        "expired: snoozed until {}, not before its deadline {}",
        rfc3339(until),
        rfc3339(deadline)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_796_440_500_000; // 2026-12-05T03:15:00Z

    fn job() -> NewJob {
        NewJob::new("t", json!({}))
    }

    #[test]
    fn a_window_counts_from_when_the_job_is_due() {
        let window = Duration::from_secs(900);
        assert_eq!(resolve_expiry(&job(), NOW, NOW).ok(), Some(None));
        let now = resolve_expiry(&job().expire_after(window), NOW, NOW);
        assert_eq!(now.ok(), Some(Some(NOW + 900_000)));
        let delayed = resolve_expiry(&job().expire_after(window), NOW + 60_000, NOW);
        assert_eq!(delayed.ok(), Some(Some(NOW + 960_000)));
        // A run time in the past: due at once, so counted from now.
        let past = resolve_expiry(&job().expire_after(window), NOW - 60_000, NOW);
        assert_eq!(past.ok(), Some(Some(NOW + 900_000)));
    }

    #[test]
    fn a_deadline_the_job_could_never_meet_is_refused() {
        let at = |ms: i64| std::time::UNIX_EPOCH + Duration::from_millis(ms as u64);
        let message = |job: NewJob, run_at: i64| {
            resolve_expiry(&job, run_at, NOW)
                .err()
                .map(|e| (e.kind(), e.to_string()))
        };
        assert_eq!(
            message(job().expires_at(at(NOW)), NOW),
            Some((
                crate::ErrorKind::InvalidJob,
                "expires_at 2026-12-05T03:15:00Z is not after the enqueue time \
                 2026-12-05T03:15:00Z: the job could never start; give a later deadline, or none"
                    .to_string()
            ))
        );
        let before_run = message(job().expires_at(at(NOW + 1_000)), NOW + 60_000);
        assert!(
            before_run
                .as_ref()
                .is_some_and(|(_, m)| m.contains("is not after its run time 2026-12-05T03:16:00Z")),
            "{before_run:?}"
        );
        assert_eq!(
            resolve_expiry(&job().expires_at(at(NOW + 1)), NOW, NOW).ok(),
            Some(Some(NOW + 1))
        );
        let zero = message(job().expire_after(Duration::ZERO), NOW);
        assert!(zero.is_some_and(|(_, m)| m == "expire_after must be at least 1 ms"));
        let far = message(job().expire_after(Duration::MAX), NOW);
        assert!(far.is_some_and(|(_, m)| m.contains("after the year 5000")));
    }

    #[test]
    fn reasons_name_the_deadline_in_rfc3339() {
        assert_eq!(
            not_started_reason(NOW, 0),
            "expired: not started by its deadline 2026-12-05T03:15:00Z"
        );
        assert_eq!(
            not_started_reason(NOW + 5, 2),
            "expired: attempt 3 not started by its deadline 2026-12-05T03:15:00.005Z"
        );
        assert_eq!(
            retry_reason(NOW + 60_000, NOW),
            "expired: its retry at 2026-12-05T03:16:00Z would not start before its deadline \
             2026-12-05T03:15:00Z"
        );
    }
}
