//! Time, read in one place so tests can move it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where litejobs reads the time. Every component takes the queue's clock, so a
/// [`ManualClock`] controls backoff, leases and schedules in tests.
///
/// Times are milliseconds since the Unix epoch, the unit of every time column in
/// `schema.sql`.
pub trait Clock: Send + Sync + 'static {
    /// Now, in milliseconds since 1970-01-01 UTC.
    fn now_ms(&self) -> i64;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        system_time_to_ms(SystemTime::now())
    }
}

/// The wall clock moved by a fixed offset: a database server's clock, as measured when a
/// queue opened on it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OffsetClock {
    pub(crate) offset_ms: i64,
}

impl Clock for OffsetClock {
    fn now_ms(&self) -> i64 {
        system_time_to_ms(SystemTime::now()).saturating_add(self.offset_ms)
    }
}

/// A clock that stands still until told to move. Clones share one time.
///
/// ```
/// use litejobs::ManualClock;
/// use std::time::Duration;
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(clock.now(), 6_000);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock showing `start_ms` (milliseconds since the Unix epoch).
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock {
            now: Arc::new(AtomicI64::new(start_ms)),
        }
    }

    /// A clock showing the current wall-clock time, frozen there.
    pub fn starting_now() -> ManualClock {
        ManualClock::new(SystemClock.now_ms())
    }

    /// The time it shows, in milliseconds since the Unix epoch.
    pub fn now(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(duration_to_ms(by), Ordering::SeqCst);
    }

    /// Sets the clock to `ms` (may move it backwards, as a real clock sometimes does).
    pub fn set(&self, ms: i64) {
        self.now.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now()
    }
}

/// Milliseconds since the epoch of a `SystemTime` (negative before 1970).
pub(crate) fn system_time_to_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => duration_to_ms(d),
        Err(e) => -duration_to_ms(e.duration()),
    }
}

/// A duration in whole milliseconds, saturating at `i64::MAX`.
pub(crate) fn duration_to_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A `SystemTime` from milliseconds since the epoch.
pub(crate) fn ms_to_system_time(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_time() {
        let a = ManualClock::new(10);
        let b = a.clone();
        a.advance(Duration::from_millis(5));
        assert_eq!(b.now_ms(), 15);
        b.set(3);
        assert_eq!(a.now(), 3);
    }

    #[test]
    fn system_time_round_trips_through_ms() {
        let t = ms_to_system_time(1_614_265_330_123);
        assert_eq!(system_time_to_ms(t), 1_614_265_330_123);
        assert_eq!(system_time_to_ms(ms_to_system_time(-5)), -5);
    }
}
