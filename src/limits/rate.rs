//! [`RateLimit`]: at most `limit` calls per `period` under a key, spaced evenly (the generic
//! cell rate algorithm), shared by every process on the database.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::system::clock::duration_to_ms;
use crate::Queue;

use super::{wait_ms, Verdict};

/// At most `limit` calls per `period` under a key, shared by every process on the file.
///
/// Calls are spaced evenly (one every `period / limit`), so no window of length `period`
/// sees more than `limit` calls; [`burst`](RateLimit::burst) lets a few go at once after a
/// quiet spell. The limit is given at each check, so changing it takes effect at once.
///
/// ```
/// use litejobs::limits::{RateLimit, Verdict};
/// use litejobs::{ManualClock, Queue};
/// use std::time::Duration;
/// # fn main() -> litejobs::Result<()> {
/// let clock = ManualClock::new(1_000_000);
/// let queue = Queue::builder().clock(clock.clone()).open_in_memory()?;
/// let limit = RateLimit::new(2, Duration::from_secs(1)); // one every 500 ms
/// assert_eq!(limit.acquire(&queue, "api")?, Verdict::Go);
/// assert_eq!(limit.acquire(&queue, "api")?, Verdict::Wait(Duration::from_millis(500)));
/// clock.advance(Duration::from_millis(500));
/// assert_eq!(limit.acquire(&queue, "api")?, Verdict::Go);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    limit: u32,
    period: Duration,
    burst: u32,
}

impl RateLimit {
    /// `limit` calls per `period`. A limit of 0 or an empty period is refused when used,
    /// with [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig).
    pub fn new(limit: u32, period: Duration) -> RateLimit {
        RateLimit {
            limit,
            period,
            burst: 1,
        }
    }

    /// `limit` calls per second.
    pub fn per_second(limit: u32) -> RateLimit {
        RateLimit::new(limit, Duration::from_secs(1))
    }

    /// `limit` calls per minute.
    pub fn per_minute(limit: u32) -> RateLimit {
        RateLimit::new(limit, Duration::from_secs(60))
    }

    /// Lets up to `calls` go at once after a quiet spell (at least 1, at most `limit`).
    /// Defaults to 1: calls evenly spaced.
    pub fn burst(mut self, calls: u32) -> RateLimit {
        self.burst = calls;
        self
    }

    /// Calls per period.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The time between two evenly spaced calls, in ms (rounded up, so the limit holds).
    fn interval_ms(&self) -> Result<i64> {
        let period = duration_to_ms(self.period);
        if self.limit == 0 || period <= 0 {
            return Err(Error::invalid_config(format!(
                "rate limit must allow at least 1 call per period of at least 1 ms, got {} per {:?}",
                self.limit, self.period
            )));
        }
        let limit = i64::from(self.limit);
        Ok(((period + limit - 1) / limit).max(1))
    }

    /// Takes one call's slot under `key` if one is free now ([`Verdict::Go`]); otherwise
    /// says how long until the next slot ([`Verdict::Wait`]) and takes nothing.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for a limit of 0 or an empty period; database errors
    /// ([`ErrorKind::Busy`](crate::ErrorKind::Busy) when another process held the lock past the busy timeout).
    pub fn acquire(&self, queue: &Queue, key: &str) -> Result<Verdict> {
        let interval = self.interval_ms()?;
        let burst = i64::from(self.burst.clamp(1, self.limit.max(1)));
        let tolerance = interval.saturating_mul(burst - 1);
        let now = queue.now_ms();
        queue.db().write(|tx| {
            tx.lock_key(&format!("rate-limit:{key}"))?;
            // GCRA: `next_at` is when the next call would be due if calls were evenly
            // spaced; a call may go while it is no further ahead than the burst allows.
            let next_at = tx.rate_next_at(key)?.unwrap_or(now).max(now);
            if next_at - now > tolerance {
                return Ok(wait_ms(next_at - tolerance - now));
            }
            tx.set_rate_next_at(key, next_at.saturating_add(interval), now)?;
            Ok(Verdict::Go)
        })
    }

    /// Forgets the state of `key`: its next call goes at once. True when it had state.
    pub fn reset(queue: &Queue, key: &str) -> Result<bool> {
        queue.db().write(|tx| tx.delete_rate(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ErrorKind, ManualClock};

    fn queue_at(ms: i64) -> (Queue, ManualClock) {
        let clock = ManualClock::new(ms);
        let queue = Queue::builder()
            .clock(clock.clone())
            .open_in_memory()
            .expect("in-memory queue");
        (queue, clock)
    }

    #[test]
    fn rate_limit_spaces_calls_and_bursts_when_asked() {
        let (queue, clock) = queue_at(10_000);
        let limit = RateLimit::new(3, Duration::from_millis(900));
        assert!(limit.acquire(&queue, "k").expect("acquire").is_go());
        assert_eq!(
            limit.acquire(&queue, "k").expect("acquire"),
            Verdict::Wait(Duration::from_millis(300))
        );
        // Another key is independent.
        assert!(limit.acquire(&queue, "other").expect("acquire").is_go());
        clock.advance(Duration::from_millis(300));
        assert!(limit.acquire(&queue, "k").expect("acquire").is_go());

        let bursty = RateLimit::new(3, Duration::from_millis(900)).burst(3);
        clock.advance(Duration::from_secs(10));
        for _ in 0..3 {
            assert!(bursty.acquire(&queue, "b").expect("acquire").is_go());
        }
        assert_eq!(
            bursty.acquire(&queue, "b").expect("acquire"),
            Verdict::Wait(Duration::from_millis(300))
        );
    }

    #[test]
    fn a_zero_rate_limit_is_refused_with_a_clear_error() {
        let (queue, _) = queue_at(0);
        let err = RateLimit::per_second(0)
            .acquire(&queue, "k")
            .expect_err("a limit of 0 must be refused");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("at least 1 call"), "{err}");
    }

    #[test]
    fn verdicts_say_go_or_how_long_to_wait() {
        let (queue, _clock) = queue_at(1_000_000);
        let limit = RateLimit::new(1, Duration::from_secs(2));
        let go = limit.acquire(&queue, "k").expect("acquire");
        assert!(go.is_go());
        assert_eq!(go.wait(), None);
        let wait = limit.acquire(&queue, "k").expect("acquire");
        assert!(!wait.is_go());
        assert_eq!(wait.wait(), Some(Duration::from_secs(2)));
    }
}
