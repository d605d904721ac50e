//! Leases of prefetched jobs: a claim takes a few jobs more than the free handler threads
//! (the prefetch), and those wait in their queue's feed until a thread is free. Their
//! leases are renewed while they wait, so a job prefetched behind a long one is never reaped
//! (and charged an attempt) before it ran. The renewals ride in the dispatcher's write round.
//! The waiting jobs' priorities also say which way a new job goes
//! ([`QueueRuntime::hand_out`](super::queue_runtime::QueueRuntime::hand_out)).

use std::collections::VecDeque;

use crate::error::Result;
use crate::storage::jobs::{ClaimedRow, Lease};
use crate::storage::Tx;
use crate::worker::feed::Lane;

/// A claimed job waiting in a queue's feed.
#[derive(Debug)]
struct Waiting {
    id: i64,
    priority: i64,
    attempt: i64,
    locked_until: i64,
    lease_ms: i64,
}

/// One lease to renew: the waiting job's lane and place, and its new expiry (ms).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewal {
    lane: Lane,
    index: usize,
    until: i64,
}

/// The jobs of one queue claimed and sent to its feed but not yet taken by a thread, per
/// [`Lane`], each in the order sent.
#[derive(Debug, Default)]
pub(crate) struct Prefetched {
    /// Sent to the channel, which executors take from in the order sent.
    in_order: VecDeque<Waiting>,
    /// How many jobs executors had taken from the channel when `in_order` was last trimmed.
    taken_seen: usize,
    /// Sent to go first, which executors take from by priority (forgotten by id).
    first: VecDeque<Waiting>,
}

impl Prefetched {
    fn lane(&self, lane: Lane) -> &VecDeque<Waiting> {
        match lane {
            Lane::InOrder => &self.in_order,
            Lane::First => &self.first,
        }
    }

    fn lane_mut(&mut self, lane: Lane) -> &mut VecDeque<Waiting> {
        match lane {
            Lane::InOrder => &mut self.in_order,
            Lane::First => &mut self.first,
        }
    }

    /// How many jobs wait in claim order.
    pub(crate) fn in_order(&self) -> usize {
        self.in_order.len()
    }

    /// The highest priority of the jobs waiting in claim order, if any wait.
    pub(crate) fn highest_in_order(&self) -> Option<i64> {
        self.in_order.iter().map(|w| w.priority).max()
    }

    /// A job sent by `lane`, whose lease lasts `lease_ms` from each renewal.
    pub(crate) fn sent(&mut self, row: &ClaimedRow, lane: Lane, lease_ms: i64) {
        self.lane_mut(lane).push_back(Waiting {
            id: row.id,
            priority: row.priority,
            attempt: row.attempt,
            locked_until: row.locked_until,
            lease_ms,
        });
    }

    /// Forgets the jobs executors have taken from the channel, which they take in the
    /// order sent: `taken` counts every job taken from it so far.
    pub(crate) fn trim_in_order(&mut self, taken: usize) {
        while self.taken_seen < taken {
            if self.in_order.pop_front().is_none() {
                break;
            }
            self.taken_seen += 1;
        }
    }

    /// Forgets the jobs that went first and were taken (by id: that lane is taken from by
    /// priority, not in the order sent).
    pub(crate) fn forget_first(&mut self, taken: &[i64]) {
        if !taken.is_empty() {
            self.first.retain(|w| !taken.contains(&w.id));
        }
    }

    /// How many jobs wait to go first.
    pub(crate) fn first(&self) -> usize {
        self.first.len()
    }

    fn all(&self) -> impl Iterator<Item = &Waiting> + '_ {
        self.in_order.iter().chain(self.first.iter())
    }

    /// The ids of the waiting jobs (and of some just taken, until the next trim).
    pub(crate) fn ids(&self) -> impl Iterator<Item = i64> + '_ {
        self.all().map(|w| w.id)
    }

    /// When the first waiting job's lease needs renewing (queue clock, ms): half the grace
    /// before it expires.
    pub(crate) fn renew_due_at(&self, grace_ms: i64) -> Option<i64> {
        self.all().map(|w| w.locked_until - grace_ms / 2).min()
    }

    /// The leases within half the grace of expiring at `now`, each renewed for its job's
    /// whole lease.
    pub(crate) fn due(&self, now: i64, grace_ms: i64) -> Vec<Renewal> {
        [Lane::InOrder, Lane::First]
            .into_iter()
            .flat_map(|lane| {
                self.lane(lane)
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| w.locked_until - grace_ms / 2 <= now)
                    .map(move |(index, w)| Renewal {
                        lane,
                        index,
                        until: now + w.lease_ms,
                    })
            })
            .collect()
    }

    /// Writes `renewals` (from [`Prefetched::due`]) in the round's transaction. A job whose
    /// lease is gone (reaped meanwhile) is left alone: the fence refuses the write.
    pub(crate) fn write(
        &self,
        tx: &dyn Tx,
        renewals: &[Renewal],
        worker_id: &str,
        now: i64,
    ) -> Result<()> {
        for r in renewals {
            let w = &self.lane(r.lane)[r.index];
            let lease = Lease {
                job_id: w.id,
                attempt: w.attempt,
                worker_id,
            };
            tx.extend_lease(lease, r.until, None, now)?;
        }
        Ok(())
    }

    /// After the round committed: the renewed leases now end later.
    pub(crate) fn renewed(&mut self, renewals: &[Renewal]) {
        for r in renewals {
            self.lane_mut(r.lane)[r.index].locked_until = r.until;
        }
    }
}
