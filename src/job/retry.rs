//! [`RetryPolicy`]: when a failed attempt runs again. The maths is pure: it never reads
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

/// A jitter sample in `0..1`. fastrand's generator (wyrand) is seeded randomly per thread,
/// so every thread, and every process, draws its own sequence: jobs failing together on
/// different workers do not retry together.
pub(crate) fn jitter_sample() -> f64 {
    fastrand::f64()
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

    /// Every thread (and so every process) draws its own sequence: jobs failing together
    /// on different workers must not retry together.
    #[test]
    fn each_thread_draws_its_own_jitter_sequence() {
        let draw = || (0..16).map(|_| jitter_sample()).collect::<Vec<f64>>();
        let here = draw();
        let there = std::thread::spawn(draw).join().expect("the other thread");
        assert_ne!(here, there);
    }

    /// Samples cover 0..1 evenly (each tenth gets its share), so delays spread over the
    /// whole jitter range instead of bunching.
    #[test]
    fn jitter_samples_spread_evenly_over_zero_to_one() {
        const N: usize = 20_000;
        let mut tenths = [0usize; 10];
        for _ in 0..N {
            let x = jitter_sample();
            assert!((0.0..1.0).contains(&x), "{x}");
            tenths[(x * 10.0) as usize] += 1;
        }
        // Each tenth expects 2 000 (standard deviation about 42): 1 700 to 2 300 is seven
        // deviations away, never crossed by an even generator.
        for (i, count) in tenths.iter().enumerate() {
            assert!(
                (1_700..=2_300).contains(count),
                "tenth {i} got {count} of {N}: {tenths:?}"
            );
        }
    }

    #[test]
    fn max_delay_caps_an_exponential_policy_and_leaves_a_schedule_alone() {
        let p = RetryPolicy::exponential(Duration::from_secs(1))
            .max_delay(Duration::from_secs(4))
            .jitter(0.0);
        let secs: Vec<u64> = (1..=5).map(|a| p.delay(a, 0.9).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 4, 4]);
        let s = RetryPolicy::schedule(vec![Duration::from_secs(60)]).max_delay(Duration::ZERO);
        assert_eq!(s.delay(1, 0.5), Duration::from_secs(60));
    }

    #[test]
    fn schedule_repeats_its_last_entry() {
        let p = RetryPolicy::schedule(vec![Duration::from_secs(60), Duration::from_secs(300)]);
        assert_eq!(p.delay(1, 0.9), Duration::from_secs(60));
        assert_eq!(p.delay(5, 0.1), Duration::from_secs(300));
        assert_eq!(RetryPolicy::schedule(vec![]).delay(3, 0.5), Duration::ZERO);
    }
}
