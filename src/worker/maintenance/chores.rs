//! The upkeep a worker's dispatcher does between its claim rounds, each step in short
//! transactions of its own (never inside a round: the write gate is not re-entrant):
//! scheduled pruning, one chunk at a time, the expiry sweep, and the stray sweep. The sweep reads the whole
//! jobs table, so it waits for a moment when the worker has nothing to do (at start-up on a
//! quiet queue, at once), unless it is an interval late; measured, a sweep at the start of a
//! worker facing a million queued jobs took its first 10 000 jobs from 180 000 to 32 000 a
//! second.

use std::time::{Duration, Instant};

use super::every::Every;
use super::presence::Presence;
use super::pruner::Pruner;
use super::strays::STRAY_SWEEP_INTERVAL;
use crate::error::{ErrorKind, Result};
use crate::queue::events::Event;
use crate::Queue;

/// A worker's scheduled upkeep.
#[derive(Debug)]
pub(crate) struct Chores {
    pruner: Option<Pruner>,
    /// When the stray sweep is next due.
    strays: Every,
    /// When the expiry sweep is next due (on the reaper's schedule).
    expiry: Every,
    /// This worker's row in the workers registry, and when its next sign of life is due
    /// (on the reaper's schedule too).
    presence: Presence,
    beat: Every,
}

impl Chores {
    /// Pruning when a schedule is given; the stray sweep always (at once, then hourly); the
    /// expiry sweep and the worker's sign of life at once, then every `expiry_interval`.
    pub(crate) fn new(
        pruner: Option<Pruner>,
        expiry_interval: Duration,
        presence: Presence,
    ) -> Chores {
        Chores {
            pruner,
            strays: Every::new(STRAY_SWEEP_INTERVAL),
            expiry: Every::new(expiry_interval),
            presence,
            beat: Every::new(expiry_interval),
        }
    }

    /// Keeps the worker's row alive through a shutdown of up to `grace`.
    pub(crate) fn stopping(&self, queue: &Queue, grace: Duration) {
        self.presence.stopping(queue, grace);
    }

    /// Marks the worker stopped in the registry (at the end of its shutdown).
    pub(crate) fn stopped(&self, queue: &Queue) {
        self.presence.stopped(queue);
    }

    /// Runs what is due; the sweep only when `idle` (see [`Chores::next`]) or late. Failures are logged and tried again at the next turn of each; a
    /// server that is away is not logged (its outage is, once) but returned, so the caller
    /// backs off before the next step (a prune pass in progress is due at once).
    pub(crate) fn step(&mut self, queue: &Queue, idle: bool) -> Result<()> {
        let now = Instant::now();
        let mut away = Ok(());
        if let Some(pruner) = self.pruner.as_mut().filter(|p| p.due(now)) {
            match pruner.step(queue, now) {
                Ok(Some(report)) => queue.events().send(Event::Pruned {
                    jobs: report.jobs_deleted,
                }),
                Ok(None) => {}
                Err(e) if e.kind() == ErrorKind::Unavailable => away = Err(e),
                Err(e) => {
                    log::warn!("litejobs: scheduled prune step failed ({e}); it will be retried")
                }
            }
        }
        if self.expiry.due(now) {
            // It reads an index of the few jobs with a deadline: no need to wait for a quiet
            // moment. One batch per step; due again at once while more may wait, else an
            // interval later (also when it failed).
            self.expiry.ran(now);
            match queue.cancel_expired_batch(crate::storage::jobs::HeldRows::Skip) {
                Ok((_, true)) => self.expiry.again(),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Unavailable => away = Err(e),
                Err(e) => log::warn!(
                    "litejobs: cancelling jobs past their deadline failed ({e}); tried again \
                     at the next reap interval"
                ),
            }
            match queue.settle_waits() {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Unavailable => away = Err(e),
                Err(e) => log::warn!(
                    "litejobs: settling the waits of ended jobs failed ({e}); tried again at \
                     the next reap interval"
                ),
            }
        }
        if self.beat.due(now) {
            self.beat.ran(now);
            match self.presence.beat(queue) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Unavailable => away = Err(e),
                Err(e) => log::warn!(
                    "litejobs: writing this worker's row in the workers registry failed \
                     ({e}); tried again at the next reap interval"
                ),
            }
        }
        if self.strays.due(now) && (idle || now >= self.strays.overdue_at()) {
            // Tried again an interval later also when it failed, rather than on every loop.
            self.strays.ran(now);
            match queue.refuse_strays() {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Unavailable => away = Err(e),
                Err(e) => log::warn!(
                    "litejobs: looking for stray rows failed ({e}); tried again in an hour"
                ),
            }
        }
        away
    }

    /// When the next step is due, for a worker that is `idle` (has nothing claimed, and
    /// nothing due as far as it knows) or not.
    pub(crate) fn next(&self, idle: bool) -> Instant {
        let strays = if idle {
            self.strays.next()
        } else {
            self.strays.overdue_at()
        };
        let sweeps = strays.min(self.expiry.next()).min(self.beat.next());
        self.pruner
            .as_ref()
            .map_or(sweeps, |p| p.next().min(sweeps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sweep reads the whole table, so a busy worker leaves it for a quiet moment (and
    /// says so in its next wake-up), and a quiet one sweeps at once.
    #[test]
    fn the_stray_sweep_waits_for_a_quiet_moment() -> Result<()> {
        let dir = tempfile::tempdir().map_err(crate::Error::from)?;
        let path = dir.path().join("jobs.db");
        let queue = Queue::open(&path)?;
        let conn = rusqlite::Connection::open(&path)?;
        conn.execute_batch(
            "PRAGMA ignore_check_constraints = ON;
             INSERT INTO jobs (job_type, payload, status) VALUES ('t', '{}', 'bogus');",
        )?;
        let status = || -> Result<String> {
            Ok(conn.query_row("SELECT status FROM jobs", [], |r| r.get(0))?)
        };
        let start = Instant::now();
        let presence = Presence::new(&queue, "w", &[], Vec::new(), STRAY_SWEEP_INTERVAL * 2);
        let mut chores = Chores::new(None, STRAY_SWEEP_INTERVAL * 2, presence);
        chores.step(&queue, false)?;
        assert_eq!(status()?, "bogus", "a busy worker does not sweep");
        assert!(
            chores.next(false) >= start + STRAY_SWEEP_INTERVAL,
            "nor wakes up for it"
        );
        assert!(chores.next(true) <= Instant::now(), "a quiet one would");
        chores.step(&queue, true)?;
        assert_eq!(status()?, "dead");
        assert!(chores.next(true) >= start + STRAY_SWEEP_INTERVAL);
        Ok(())
    }

    /// A backlog of expired jobs is swept one transaction per step, the next step at once,
    /// so the worker's rounds go on between them.
    #[test]
    fn the_expiry_sweep_takes_one_batch_per_step() -> Result<()> {
        use std::time::Duration;
        let clock = crate::ManualClock::new(1_700_000_000_000);
        let queue = Queue::builder().clock(clock.clone()).open_in_memory()?;
        let jobs: Vec<crate::NewJob> = (0..1001)
            .map(|_| {
                crate::NewJob::new("t", serde_json::json!({})).expire_after(Duration::from_secs(1))
            })
            .collect();
        queue.enqueue_batch(jobs)?;
        clock.advance(Duration::from_secs(2));
        let hour = Duration::from_secs(3600);
        let start = Instant::now();
        let mut chores = Chores::new(
            None,
            hour,
            Presence::new(&queue, "w", &[], Vec::new(), hour),
        );
        let cancelled = || -> Result<i64> { Ok(queue.stats()?.count(crate::JobStatus::Cancelled)) };
        chores.step(&queue, false)?;
        assert_eq!(cancelled()?, 1000);
        assert!(
            chores.next(false) <= Instant::now(),
            "more wait: due again at once"
        );
        chores.step(&queue, false)?;
        assert_eq!(cancelled()?, 1001);
        // The busy worker's next upkeep: the stray sweep's, an hour after its start.
        assert!(chores.next(false) >= start + hour, "then an interval later");
        Ok(())
    }
}
