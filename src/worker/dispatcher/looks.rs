//! How the dispatcher learns of work it was not handed: an in-process enqueue's wake-up,
//! another connection's commit (the
//! [`ChangeWatch`](crate::worker::change_watch::ChangeWatch)), the poll; and, in queues
//! holding slow jobs, a due job of a higher priority that goes ahead of them.

use std::time::{Duration, Instant};

use crate::error::ErrorKind;
use crate::storage::jobs::Waiting;
use crate::worker::change_watch::ChangeWatch;
use crate::worker::dispatcher::Dispatcher;

/// How often an idle worker polls when it is told of every write that leaves a job waiting
/// (PostgreSQL's notifications) and no job waits: a safety net for a notification lost in
/// transit, not the way jobs are found.
pub(super) const QUIET_POLL_INTERVAL: Duration = Duration::from_secs(5);

impl Dispatcher {
    /// True when some queue would claim more but does not know of due work, or holds slow
    /// jobs that a newer one of a higher priority would go ahead of: only then is a commit
    /// elsewhere worth a look.
    pub(super) fn watching(&self) -> bool {
        self.change.is_some()
            && self
                .queues
                .iter()
                .any(|q| (!q.maybe_more && q.wanted() > 0) || q.overtakable().is_some())
    }

    /// An in-process enqueue woke the dispatcher: every queue may have work, and the
    /// change watch hears of this process's own write.
    pub(super) fn woken(&mut self) {
        let wakes = self.shared.queue.wake_list();
        for q in &mut self.queues {
            q.maybe_more = true;
            if wakes.hinted(&q.name) {
                q.wake_if_idle();
            }
        }
        self.look_ahead();
        let watching = self.watching();
        if let Some(change) = &mut self.change {
            let now = Instant::now();
            change.local_write(now);
            change.set_watching(watching, now);
        }
    }

    /// Looks, when a look is due, whether another connection committed.
    pub(super) fn changed_elsewhere(&mut self, now: Instant) -> bool {
        self.change
            .as_mut()
            .is_some_and(|change| change.look_if_due(now))
    }

    /// Another connection committed: where the signal was told of the commit (a
    /// notification, sent by inserts and releases of waiting jobs), every idle queue claims
    /// at once, which costs a round trip as a look would and saves one on the way to the
    /// handler; elsewhere (a write to the database's files) a look tells which queues have
    /// work.
    pub(super) fn commit_seen(&mut self) {
        if !self.told() {
            // (The poll's own schedule stays as it was.)
            let _ = self.poll_due(Instant::now());
            return;
        }
        for q in self
            .queues
            .iter_mut()
            .filter(|q| !q.maybe_more && q.wanted() > 0)
        {
            q.maybe_more = true;
            q.wake_if_idle();
        }
    }

    /// Whether the change watch is told of commits (see [`ChangeWatch::told`]).
    fn told(&self) -> bool {
        self.change.as_ref().is_some_and(ChangeWatch::told)
    }

    /// Looks for due work in idle queues: jobs whose `run_at` came, and rows whose commit
    /// went unseen. Returns when the next poll is due: after the poll interval, or, where the
    /// change watch is told of every write that leaves a job waiting and no job waits at
    /// all in any queue, after [`QUIET_POLL_INTERVAL`] (nothing can become due unannounced
    /// but by a lost notification).
    pub(super) fn poll_due(&mut self, now: Instant) -> Instant {
        let interval = self.config.poll_interval;
        let mut quiet = self.told();
        let at_ms = self.shared.queue.now_ms();
        let types = self.claimer.job_types();
        let db = self.shared.queue.db();
        for q in &mut self.queues {
            if q.maybe_more || q.wanted() == 0 {
                quiet = false;
                continue;
            }
            self.activity.polled();
            match db.read_statement(|conn| conn.waiting(&q.name, types, at_ms)) {
                Ok(waiting) => {
                    let due = waiting == Waiting::Due;
                    quiet &= waiting == Waiting::Nothing;
                    q.maybe_more = due;
                    if due {
                        q.wake_if_idle();
                    }
                }
                // Logged once per outage where the connection failed; the next poll retries.
                Err(e) if e.kind() == ErrorKind::Unavailable => return now + interval,
                Err(e) => {
                    quiet = false;
                    log::warn!("litejobs: polling queue {:?} failed: {e}", q.name);
                }
            }
        }
        now + if quiet {
            interval.max(QUIET_POLL_INTERVAL)
        } else {
            interval
        }
    }

    /// Looks, in queues holding slow jobs that wait for a thread, for a due job of a higher
    /// priority than theirs; one found is claimed by the next round and goes ahead of them.
    /// A read of the due index's range above them: nothing is locked.
    pub(super) fn look_ahead(&mut self) {
        let now = self.shared.queue.now_ms();
        let types = self.claimer.job_types();
        let db = self.shared.queue.db();
        for q in self.queues.iter_mut().filter(|q| !q.overtake) {
            q.trim_prefetched();
            let Some((highest, _)) = q.overtakable() else {
                continue;
            };
            match db.read_statement(|conn| conn.any_due(&q.name, types, now, Some(highest))) {
                Ok(due) => q.overtake = due,
                Err(e) if e.kind() == ErrorKind::Unavailable => break,
                Err(e) => log::warn!("litejobs: looking ahead in queue {:?} failed: {e}", q.name),
            }
        }
    }
}
