//! The upkeep a worker's dispatcher does between its claim rounds, each step in short
//! transactions of its own (never inside a round: the write gate is not re-entrant):
//! scheduled pruning, one chunk at a time, and the stray sweep.

use std::time::Instant;

use super::every::Every;
use super::pruner::Pruner;
use super::strays::STRAY_SWEEP_INTERVAL;
use crate::error::{ErrorKind, Result};
use crate::events::Event;
use crate::Queue;

/// A worker's scheduled upkeep.
#[derive(Debug)]
pub(crate) struct Chores {
    pruner: Option<Pruner>,
    /// When the stray sweep is next due.
    strays: Every,
}

impl Chores {
    /// Pruning when a schedule is given; the stray sweep always (at once, then hourly).
    pub(crate) fn new(pruner: Option<Pruner>) -> Chores {
        Chores {
            pruner,
            strays: Every::new(STRAY_SWEEP_INTERVAL),
        }
    }

    /// Runs what is due. Failures are logged and tried again at the next turn of each; a
    /// server that is away is not logged (its outage is, once) but returned, so the caller
    /// backs off before the next step (a prune pass in progress is due at once).
    pub(crate) fn step(&mut self, queue: &Queue) -> Result<()> {
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
        if self.strays.due(now) {
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

    /// When the next step is due.
    pub(crate) fn next(&self) -> Instant {
        let strays = self.strays.next();
        self.pruner
            .as_ref()
            .map_or(strays, |p| p.next().min(strays))
    }
}
