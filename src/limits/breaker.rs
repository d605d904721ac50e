//! [`Breaker`]: a circuit breaker by key, shared by every process on the database; its
//! state as read ([`BreakerStatus`]) and a call it let through ([`BreakerCall`]).

use std::time::Duration;

use serde::Serialize;

use crate::error::Result;
use crate::storage::limits::{BreakerRow, BreakerState};
use crate::system::clock::duration_to_ms;
use crate::Queue;

use super::{wait_ms, Verdict};

/// Failures in a row that open a [`Breaker`] unless configured otherwise.
pub const DEFAULT_BREAKER_FAILURES: u32 = 5;
/// How long an open [`Breaker`] makes calls wait unless configured otherwise.
pub const DEFAULT_BREAKER_COOL_DOWN: Duration = Duration::from_secs(60);
/// How long a half-open [`Breaker`]'s probe call may take before another call may probe,
/// unless configured otherwise (covers a probe whose worker crashed).
pub const DEFAULT_BREAKER_PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// A breaker key's stored state, as read by [`Breaker::status`] and [`Breaker::list`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BreakerStatus {
    /// The key.
    pub key: String,
    /// Closed, open or half-open.
    pub state: BreakerState,
    /// Failures in a row.
    pub failures: i64,
    /// Open: when the cool-down ends; half-open: when the probe's turn lapses (ms).
    pub open_until: Option<i64>,
    /// When it last opened (ms).
    pub opened_at: Option<i64>,
    /// The latest failure's message.
    pub last_error: Option<String>,
    /// When the state last changed (ms).
    pub updated_at: i64,
}

impl From<BreakerRow> for BreakerStatus {
    fn from(row: BreakerRow) -> BreakerStatus {
        BreakerStatus {
            state: row.state,
            key: row.key,
            failures: row.failures,
            open_until: row.open_until,
            opened_at: row.opened_at,
            last_error: row.last_error,
            updated_at: row.updated_at,
        }
    }
}

/// A circuit breaker by key, shared by every process on the file.
///
/// ```text
/// closed ──failure_threshold failures in a row──► open ──cool_down over──► half_open (one probe)
///   ▲                                               ▲                          │
///   └──────────────── probe succeeds ───────────────┼──────────────────────────┤
///                                                   └────── probe fails ───────┘
/// ```
///
/// The configuration is given at each call, the state is in the `circuit_breakers` table.
///
/// ```
/// use litejobs::limits::{Breaker, BreakerState, Verdict};
/// use litejobs::{ManualClock, Queue};
/// use std::time::Duration;
/// # fn main() -> litejobs::Result<()> {
/// let clock = ManualClock::new(1_000_000);
/// let queue = Queue::builder().clock(clock.clone()).open_in_memory()?;
/// let breaker = Breaker::new().failure_threshold(2).cool_down(Duration::from_secs(30));
/// breaker.record_failure(&queue, "crm", "HTTP 503")?;
/// assert_eq!(breaker.record_failure(&queue, "crm", "HTTP 503")?, BreakerState::Open);
/// assert_eq!(breaker.allow(&queue, "crm")?, Verdict::Wait(Duration::from_secs(30)));
/// clock.advance(Duration::from_secs(30));
/// assert_eq!(breaker.allow(&queue, "crm")?, Verdict::Go); // the probe
/// assert!(breaker.record_success(&queue, "crm")?); // the probe succeeded: closed again
/// assert_eq!(Breaker::status(&queue, "crm")?.map(|s| s.state), Some(BreakerState::Closed));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breaker {
    failure_threshold: u32,
    cool_down: Duration,
    probe_timeout: Duration,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker::new()
    }
}

impl Breaker {
    /// A breaker with the defaults: opens after [`DEFAULT_BREAKER_FAILURES`] failures in a
    /// row, cools down for [`DEFAULT_BREAKER_COOL_DOWN`], gives a probe
    /// [`DEFAULT_BREAKER_PROBE_TIMEOUT`].
    pub fn new() -> Breaker {
        Breaker {
            failure_threshold: DEFAULT_BREAKER_FAILURES,
            cool_down: DEFAULT_BREAKER_COOL_DOWN,
            probe_timeout: DEFAULT_BREAKER_PROBE_TIMEOUT,
        }
    }

    /// Failures in a row that open the breaker (at least 1). Defaults to
    /// [`DEFAULT_BREAKER_FAILURES`].
    pub fn failure_threshold(mut self, failures: u32) -> Breaker {
        self.failure_threshold = failures.max(1);
        self
    }

    /// How long an open breaker makes calls wait before a probe. Defaults to
    /// [`DEFAULT_BREAKER_COOL_DOWN`].
    pub fn cool_down(mut self, cool_down: Duration) -> Breaker {
        self.cool_down = cool_down;
        self
    }

    /// How long the probe call has before another call may probe instead (its worker may
    /// have crashed). Set it to about the call's time limit. Defaults to
    /// [`DEFAULT_BREAKER_PROBE_TIMEOUT`].
    pub fn probe_timeout(mut self, timeout: Duration) -> Breaker {
        self.probe_timeout = timeout;
        self
    }

    /// The configured failures in a row that open the breaker.
    pub fn threshold(&self) -> u32 {
        self.failure_threshold
    }

    /// The configured cool-down.
    pub fn cool_down_period(&self) -> Duration {
        self.cool_down
    }

    /// May a call under `key` go now? [`Verdict::Go`] while closed, and for the one probe
    /// when the cool-down is over (the breaker turns half-open); [`Verdict::Wait`] until
    /// the cool-down ends (open) or the probe's turn lapses (half-open).
    pub fn allow(&self, queue: &Queue, key: &str) -> Result<Verdict> {
        // The common case (closed) is a read; only an open breaker needs the write lock.
        let row = queue.db().read(|conn| conn.breaker(key))?;
        if row.is_none_or(|r| r.state == BreakerState::Closed) {
            return Ok(Verdict::Go);
        }
        let now = queue.now_ms();
        let probe_ms = duration_to_ms(self.probe_timeout).max(1);
        queue.db().write(|tx| {
            tx.lock_key(&format!("breaker:{key}"))?;
            let Some(mut row) = tx.breaker(key)? else {
                return Ok(Verdict::Go);
            };
            match row.state {
                BreakerState::Closed => Ok(Verdict::Go),
                BreakerState::Open | BreakerState::HalfOpen => {
                    let until = row.open_until.unwrap_or(now);
                    if now < until {
                        return Ok(wait_ms(until - now));
                    }
                    // Cool-down over (or the last probe lapsed): this call is the probe.
                    row.state = BreakerState::HalfOpen;
                    row.open_until = Some(now.saturating_add(probe_ms));
                    row.updated_at = now;
                    tx.put_breaker(&row)?;
                    Ok(Verdict::Go)
                }
            }
        })
    }

    /// A call under `key` succeeded: the breaker closes and its failure count resets.
    /// Returns true when this success closed an open or half-open breaker (the endpoint
    /// recovered). A success on a closed breaker with no failures writes nothing, so healthy
    /// calls never wait for the write lock.
    pub fn record_success(&self, queue: &Queue, key: &str) -> Result<bool> {
        let row = queue.db().read(|tx| tx.breaker(key))?;
        if row.is_none_or(|r| r.state == BreakerState::Closed && r.failures == 0) {
            return Ok(false);
        }
        let now = queue.now_ms();
        queue.db().write(|tx| {
            tx.lock_key(&format!("breaker:{key}"))?;
            let Some(mut row) = tx.breaker(key)? else {
                return Ok(false);
            };
            let closed_it = row.state != BreakerState::Closed;
            if closed_it {
                log::info!("litejobs: circuit breaker {key:?} closed");
            }
            row.state = BreakerState::Closed;
            row.failures = 0;
            row.open_until = None;
            row.updated_at = now;
            tx.put_breaker(&row)?;
            Ok(closed_it)
        })
    }

    /// A call under `key` failed: counts it, and opens the breaker when the failures in a
    /// row reach the threshold or when the failed call was the probe. Returns the state
    /// after.
    pub fn record_failure(&self, queue: &Queue, key: &str, error: &str) -> Result<BreakerState> {
        let now = queue.now_ms();
        let cool_down = duration_to_ms(self.cool_down);
        let threshold = i64::from(self.failure_threshold.max(1));
        queue.db().write(|tx| {
            tx.lock_key(&format!("breaker:{key}"))?;
            let mut row = tx.breaker(key)?.unwrap_or_else(|| BreakerRow {
                key: key.to_string(),
                state: BreakerState::Closed,
                failures: 0,
                open_until: None,
                opened_at: None,
                last_error: None,
                updated_at: now,
            });
            row.failures = row.failures.saturating_add(1);
            row.last_error = Some(error.to_string());
            row.updated_at = now;
            let before = row.state;
            let opens = match before {
                BreakerState::Closed => row.failures >= threshold,
                BreakerState::HalfOpen => true,
                // A call that started before the breaker opened: the cool-down stands.
                BreakerState::Open => false,
            };
            if opens {
                row.state = BreakerState::Open;
                row.opened_at = Some(now);
                row.open_until = Some(now.saturating_add(cool_down));
                log::warn!(
                    "litejobs: circuit breaker {key:?} opened after {} failures in a row \
                     (latest: {error}); calls wait {:?}",
                    row.failures,
                    self.cool_down
                );
            }
            tx.put_breaker(&row)?;
            Ok(row.state)
        })
    }

    /// The stored state of `key`; `None` when it never failed (closed).
    pub fn status(queue: &Queue, key: &str) -> Result<Option<BreakerStatus>> {
        Ok(queue
            .db()
            .read(|conn| conn.breaker(key))?
            .map(BreakerStatus::from))
    }

    /// Every breaker with stored state, by key.
    pub fn list(queue: &Queue) -> Result<Vec<BreakerStatus>> {
        Ok(queue
            .db()
            .read(|tx| tx.breakers())?
            .into_iter()
            .map(BreakerStatus::from)
            .collect())
    }

    /// Closes the breaker of `key` by hand (e.g. after fixing the endpoint). True when it
    /// had state.
    pub fn reset(queue: &Queue, key: &str) -> Result<bool> {
        queue.db().write(|tx| tx.delete_breaker(key))
    }
}

/// A call a [`Breaker`] let through from a handler ([`JobContext::breaker`](crate::JobContext::breaker)): report how
/// it went with [`success`](BreakerCall::success) or [`failure`](BreakerCall::failure).
/// Dropping it reports nothing (e.g. when the call never happened); a probe that reports
/// nothing lapses after the breaker's probe timeout.
#[derive(Debug)]
#[must_use = "report the call's result with success() or failure()"]
pub struct BreakerCall<'a> {
    pub(super) queue: &'a Queue,
    pub(super) key: String,
    pub(super) breaker: Breaker,
}

impl BreakerCall<'_> {
    /// The call succeeded: the breaker closes. A database error is logged, not returned:
    /// the call's own result matters more than its bookkeeping.
    pub fn success(self) {
        if let Err(e) = self.breaker.record_success(self.queue, &self.key) {
            log::warn!(
                "litejobs: could not record a success on breaker {:?}: {e}",
                self.key
            );
        }
    }

    /// The call failed: counted against the breaker. Returns the state after (closed when
    /// the failure could not be recorded; the error is logged).
    pub fn failure(self, error: &str) -> BreakerState {
        match self.breaker.record_failure(self.queue, &self.key, error) {
            Ok(state) => state,
            Err(e) => {
                log::warn!(
                    "litejobs: could not record a failure on breaker {:?}: {e}",
                    self.key
                );
                BreakerState::Closed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    fn queue_at(ms: i64) -> (Queue, ManualClock) {
        let clock = ManualClock::new(ms);
        let queue = Queue::builder()
            .clock(clock.clone())
            .open_in_memory()
            .expect("in-memory queue");
        (queue, clock)
    }

    #[test]
    fn a_failed_probe_opens_the_breaker_again() {
        let (queue, clock) = queue_at(50_000);
        let breaker = Breaker::new()
            .failure_threshold(1)
            .cool_down(Duration::from_secs(10))
            .probe_timeout(Duration::from_secs(3));
        assert_eq!(
            breaker.record_failure(&queue, "k", "boom").expect("record"),
            BreakerState::Open
        );
        clock.advance(Duration::from_secs(10));
        assert!(breaker.allow(&queue, "k").expect("allow").is_go(), "probe");
        // While the probe is out, others wait for the probe's turn to lapse.
        assert_eq!(
            breaker.allow(&queue, "k").expect("allow"),
            Verdict::Wait(Duration::from_secs(3))
        );
        assert_eq!(
            breaker
                .record_failure(&queue, "k", "still down")
                .expect("record"),
            BreakerState::Open
        );
        assert_eq!(
            breaker.allow(&queue, "k").expect("allow"),
            Verdict::Wait(Duration::from_secs(10))
        );
        let status = Breaker::status(&queue, "k").expect("status").expect("row");
        assert_eq!(status.failures, 2);
        assert_eq!(status.last_error.as_deref(), Some("still down"));
        assert!(Breaker::reset(&queue, "k").expect("reset"));
        assert!(breaker.allow(&queue, "k").expect("allow").is_go());
    }

    #[test]
    fn a_lapsed_probe_lets_another_call_probe() {
        let (queue, clock) = queue_at(0);
        let breaker = Breaker::new()
            .failure_threshold(1)
            .cool_down(Duration::from_secs(5))
            .probe_timeout(Duration::from_secs(2));
        let _ = breaker.record_failure(&queue, "k", "x").expect("record");
        clock.advance(Duration::from_secs(5));
        assert!(breaker.allow(&queue, "k").expect("allow").is_go());
        clock.advance(Duration::from_secs(2));
        assert!(
            breaker.allow(&queue, "k").expect("allow").is_go(),
            "the first probe never reported; a second one goes"
        );
    }

    /// "Failures in a row": a success in between starts the count again, so an endpoint
    /// that fails now and then is never cut off.
    #[test]
    fn a_success_resets_the_failures_in_a_row() {
        let (queue, _clock) = queue_at(1_000_000);
        let breaker = Breaker::new().failure_threshold(3);
        for _ in 0..2 {
            breaker
                .record_failure(&queue, "k", "boom")
                .expect("failure");
        }
        assert!(
            !breaker.record_success(&queue, "k").expect("success"),
            "it was closed already"
        );
        for _ in 0..2 {
            assert_eq!(
                breaker
                    .record_failure(&queue, "k", "boom")
                    .expect("failure"),
                BreakerState::Closed
            );
        }
        let status = Breaker::status(&queue, "k")
            .expect("status")
            .expect("a row");
        assert_eq!((status.state, status.failures), (BreakerState::Closed, 2));
        assert_eq!(
            breaker
                .record_failure(&queue, "k", "boom")
                .expect("failure"),
            BreakerState::Open,
            "the third in a row opens it"
        );
        assert!(!breaker.allow(&queue, "k").expect("allow").is_go());
    }

    #[test]
    fn settings_read_back_and_states_print_their_stored_word() {
        let breaker = Breaker::new()
            .failure_threshold(3)
            .cool_down(Duration::from_secs(7));
        assert_eq!(breaker.threshold(), 3);
        assert_eq!(breaker.cool_down_period(), Duration::from_secs(7));
        assert_eq!(Breaker::new().threshold(), DEFAULT_BREAKER_FAILURES);
        assert_eq!(Breaker::new().cool_down_period(), DEFAULT_BREAKER_COOL_DOWN);
        let limit = crate::limits::RateLimit::per_minute(30);
        assert_eq!(
            (limit.limit(), limit.period()),
            (30, Duration::from_secs(60))
        );
        let words: Vec<String> = [
            BreakerState::Closed,
            BreakerState::Open,
            BreakerState::HalfOpen,
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(words, ["closed", "open", "half_open"]);
    }

    #[test]
    fn a_success_that_closes_an_open_breaker_says_so() {
        let (queue, clock) = queue_at(1_000_000);
        let breaker = Breaker::new()
            .failure_threshold(1)
            .cool_down(Duration::from_secs(10));
        breaker
            .record_failure(&queue, "k", "boom")
            .expect("failure");
        clock.advance(Duration::from_secs(11));
        assert!(breaker.allow(&queue, "k").expect("probe").is_go());
        assert!(breaker.record_success(&queue, "k").expect("success"));
        assert!(!breaker.record_success(&queue, "k").expect("success"));
    }
}
