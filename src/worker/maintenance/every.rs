//! A chore's turn: due at once (a worker's start), then every interval after it last ran.

use std::time::{Duration, Instant};

/// When a recurring chore (reaping, the stray sweep) is next due.
#[derive(Debug)]
pub(crate) struct Every {
    interval: Duration,
    next: Instant,
}

impl Every {
    /// Due at once, then every `interval`.
    pub(crate) fn new(interval: Duration) -> Every {
        Every {
            interval,
            next: Instant::now(),
        }
    }

    pub(crate) fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    pub(crate) fn next(&self) -> Instant {
        self.next
    }

    /// When a chore that waits for a quiet moment runs anyway: a whole interval late.
    pub(crate) fn overdue_at(&self) -> Instant {
        self.next + self.interval
    }

    /// The chore ran (or was tried) at `now`: next due an interval later.
    pub(crate) fn ran(&mut self, now: Instant) {
        self.next = now + self.interval;
    }

    /// The chore has more to do: due again at once.
    pub(crate) fn again(&mut self) {
        self.next = Instant::now();
    }
}
