//! How many jobs a queue claims beyond its free handler slots, sized by how long its jobs
//! take. Fast jobs come in big batches (each claim and write-back is a transaction, and on
//! SQLite the one writer thread is what limits no-op jobs), while slow jobs are not hoarded:
//! a worker that prefetched minutes of work would keep it from other workers and charge a
//! crash an attempt on every job it held.

use std::time::Duration;

/// A queue holds about this much of its threads' work in prefetched jobs.
pub(crate) const PREFETCH_SPAN: Duration = Duration::from_millis(10);

/// Attempts measured before the prefetch is resized: a few, so one odd job does not swing it.
const SAMPLE: u64 = 16;

/// The prefetch of one queue: it starts at one job per thread (or the configured most, if
/// smaller) and follows the mean run time of the queue's recent attempts.
#[derive(Debug, Clone)]
pub(crate) struct PrefetchGauge {
    /// The configured most (`WorkerBuilder::prefetch`).
    most: usize,
    /// The fewest: one job waiting per thread, within `most`.
    least: usize,
    concurrency: usize,
    current: usize,
    /// The attempt counters at the last resize (see [`QueueFeed`](super::executor::QueueFeed)).
    ran: u64,
    busy_micros: u64,
}

impl PrefetchGauge {
    pub(crate) fn new(concurrency: usize, most: usize) -> PrefetchGauge {
        let least = concurrency.max(1).min(most);
        PrefetchGauge {
            most,
            least,
            concurrency,
            current: least,
            ran: 0,
            busy_micros: 0,
        }
    }

    /// Jobs to claim beyond the free slots now.
    pub(crate) fn current(&self) -> usize {
        self.current
    }

    /// Takes the queue's running totals of finished attempts and the time their handlers
    /// ran; resizes once enough new attempts were measured. True when the size changed.
    pub(crate) fn observe(&mut self, ran: u64, busy_micros: u64) -> bool {
        let new_runs = ran.saturating_sub(self.ran);
        if new_runs < SAMPLE {
            return false;
        }
        let busy = busy_micros.saturating_sub(self.busy_micros);
        self.ran = ran;
        self.busy_micros = busy_micros;
        let span = PREFETCH_SPAN.as_micros() as u64;
        // Work the threads get through in the span, in jobs: threads × span ÷ mean run time.
        let fits = (self.concurrency as u64)
            .saturating_mul(span)
            .saturating_mul(new_runs)
            / busy.max(1);
        let next = usize::try_from(fits)
            .unwrap_or(usize::MAX)
            .clamp(self.least, self.most);
        let changed = next != self.current;
        self.current = next;
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `runs` attempts of `each` to the gauge and returns its size.
    fn after(
        gauge: &mut PrefetchGauge,
        total: &mut (u64, u64),
        runs: u64,
        each: Duration,
    ) -> usize {
        total.0 += runs;
        total.1 += runs * each.as_micros() as u64;
        gauge.observe(total.0, total.1);
        gauge.current()
    }

    #[test]
    fn starts_at_one_job_per_thread_and_grows_for_fast_jobs() {
        let mut g = PrefetchGauge::new(4, 256);
        let mut total = (0, 0);
        assert_eq!(g.current(), 4);
        // Fewer than a sample: unchanged.
        assert_eq!(after(&mut g, &mut total, 10, Duration::ZERO), 4);
        // No-op jobs: the most.
        assert_eq!(after(&mut g, &mut total, 10, Duration::ZERO), 256);
        // 1 ms jobs on 4 threads: 10 ms of work is 40 jobs.
        assert_eq!(after(&mut g, &mut total, 20, Duration::from_millis(1)), 40);
        // Long jobs: back to one waiting per thread.
        assert_eq!(after(&mut g, &mut total, 16, Duration::from_secs(2)), 4);
    }

    #[test]
    fn never_leaves_the_configured_bounds() {
        let mut g = PrefetchGauge::new(8, 3);
        let mut total = (0, 0);
        assert_eq!(g.current(), 3, "the most bounds the start too");
        assert_eq!(after(&mut g, &mut total, 100, Duration::from_secs(1)), 3);
        assert_eq!(after(&mut g, &mut total, 100, Duration::ZERO), 3);
        let mut none = PrefetchGauge::new(2, 0);
        assert_eq!(none.current(), 0);
        assert_eq!(after(&mut none, &mut (0, 0), 100, Duration::ZERO), 0);
    }
}
