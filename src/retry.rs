//! [`RetryPolicy`]: when a failed attempt runs again (R6). The maths is pure: it never reads
//! the clock or a random source itself.

use std::time::Duration;

/// The base delay of the default policy: 5 s, doubling per attempt.
pub const DEFAULT_RETRY_BASE: Duration = Duration::from_secs(5);
/// The cap of the default policy: 1 hour.
pub const DEFAULT_RETRY_MAX_DELAY: Duration = Duration::from_secs(3600);
/// The jitter of the default policy: ±20 %.
pub const DEFAULT_RETRY_JITTER: f64 = 0.2;

/// When a failed attempt runs again, per job type.
///
/// ```
/// use litejobs::RetryPolicy;
/// use std::time::Duration;
/// // 5 s, 10 s, 20 s, ... capped at an hour, ±20 % jitter (the default).
/// let policy = RetryPolicy::exponential(Duration::from_secs(5))
///     .max_delay(Duration::from_secs(3600))
///     .jitter(0.2);
/// // Without randomness (jitter sample 0.5 is the midpoint):
/// assert_eq!(policy.delay(3, 0.5), Duration::from_secs(20));
///
/// // 1 m, 5 m, 30 m, 2 h, then 2 h for every later attempt.
/// let schedule = RetryPolicy::schedule(
///     [60, 300, 1800, 7200].into_iter().map(Duration::from_secs).collect());
/// assert_eq!(schedule.delay(2, 0.5), Duration::from_secs(300));
/// assert_eq!(schedule.delay(9, 0.5), Duration::from_secs(7200));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    shape: Shape,
    jitter: f64,
}

#[derive(Debug, Clone, PartialEq)]
enum Shape {
    Exponential { base: Duration, max_delay: Duration },
    Schedule(Vec<Duration>),
}

impl Default for RetryPolicy {
    /// Exponential from [`DEFAULT_RETRY_BASE`], capped at [`DEFAULT_RETRY_MAX_DELAY`], with
    /// [`DEFAULT_RETRY_JITTER`].
    fn default() -> Self {
        RetryPolicy::exponential(DEFAULT_RETRY_BASE)
    }
}

impl RetryPolicy {
    /// `base`, then doubling per attempt (`base × 2^(attempt-1)`), capped at
    /// [`DEFAULT_RETRY_MAX_DELAY`] unless [`max_delay`](RetryPolicy::max_delay) says
    /// otherwise. Jitter defaults to [`DEFAULT_RETRY_JITTER`].
    pub fn exponential(base: Duration) -> RetryPolicy {
        RetryPolicy {
            shape: Shape::Exponential {
                base,
                max_delay: DEFAULT_RETRY_MAX_DELAY,
            },
            jitter: DEFAULT_RETRY_JITTER,
        }
    }

    /// An explicit schedule: the delay after attempt `n` is `delays[n-1]`, and the last
    /// entry repeats. Jitter defaults to 0 (the schedule is taken as written). An empty
    /// schedule retries at once.
    pub fn schedule(delays: Vec<Duration>) -> RetryPolicy {
        RetryPolicy {
            shape: Shape::Schedule(delays),
            jitter: 0.0,
        }
    }

    /// Caps an exponential policy's delay (no effect on a schedule).
    pub fn max_delay(mut self, max: Duration) -> RetryPolicy {
        if let Shape::Exponential { max_delay, .. } = &mut self.shape {
            *max_delay = max;
        }
        self
    }

    /// Spreads each delay by up to ± `fraction` of it (clamped to 0..=1), so a thousand jobs
    /// failing together do not retry in the same second.
    pub fn jitter(mut self, fraction: f64) -> RetryPolicy {
        self.jitter = if fraction.is_finite() {
            fraction.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self
    }

    /// The delay after failed attempt `attempt` (from 1). `random` is a sample in `0..1`;
    /// 0.5 gives the delay without jitter.
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        let attempt = attempt.max(1);
        let raw = match &self.shape {
            Shape::Exponential { base, max_delay } => {
                let factor = 2f64.powi(attempt.saturating_sub(1).min(62) as i32);
                base.mul_f64(factor.min(1e12)).min(*max_delay)
            }
            Shape::Schedule(delays) => delays
                .get(attempt as usize - 1)
                .or(delays.last())
                .copied()
                .unwrap_or(Duration::ZERO),
        };
        let random = if random.is_finite() {
            random.clamp(0.0, 1.0)
        } else {
            0.5
        };
        raw.mul_f64(1.0 + self.jitter * (2.0 * random - 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_doubles_from_five_seconds_and_caps_at_an_hour() {
        let p = RetryPolicy::default();
        let secs: Vec<u64> = (1..=6).map(|a| p.delay(a, 0.5).as_secs()).collect();
        assert_eq!(secs, vec![5, 10, 20, 40, 80, 160]);
        assert_eq!(p.delay(40, 0.5), DEFAULT_RETRY_MAX_DELAY);
    }

    #[test]
    fn jitter_stays_within_its_fraction() {
        let p = RetryPolicy::exponential(Duration::from_secs(100)).jitter(0.2);
        assert_eq!(p.delay(1, 0.0), Duration::from_secs(80));
        assert_eq!(p.delay(1, 1.0), Duration::from_secs(120));
        let distinct: std::collections::BTreeSet<u128> = (0..10)
            .map(|i| p.delay(1, i as f64 / 10.0).as_millis())
            .collect();
        assert_eq!(distinct.len(), 10, "different samples spread the retries");
    }

    #[test]
    fn schedule_repeats_its_last_entry() {
        let p = RetryPolicy::schedule(vec![Duration::from_secs(60), Duration::from_secs(300)]);
        assert_eq!(p.delay(1, 0.9), Duration::from_secs(60));
        assert_eq!(p.delay(5, 0.1), Duration::from_secs(300));
        assert_eq!(RetryPolicy::schedule(vec![]).delay(3, 0.5), Duration::ZERO);
    }
}

thread_local! {
    static RNG: std::cell::Cell<u64> = std::cell::Cell::new(seed());
}

fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded randomly per process; hashing the thread id spreads threads.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(format!("{:?}", std::thread::current().id()).len() as u64);
    h.finish() | 1
}

/// A jitter sample in `0..1` (xorshift64*; quality is ample for spreading retries).
pub(crate) fn jitter_sample() -> f64 {
    RNG.with(|cell| {
        let mut x = cell.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        cell.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    })
}
