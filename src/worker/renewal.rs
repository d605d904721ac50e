//! Leases of prefetched jobs: a claim takes a few jobs more than the free handler threads
//! (the prefetch), and those wait in their queue's channel until a thread is free. Their
//! leases are renewed while they wait, so a job prefetched behind a long one is never reaped
//! (and charged an attempt) before it ran. The renewals ride in the dispatcher's write round.

use std::collections::VecDeque;

use crate::error::Result;
use crate::storage::jobs::{ClaimedRow, Lease};
use crate::storage::Tx;

/// A claimed job waiting in a queue's channel.
#[derive(Debug)]
struct Waiting {
    id: i64,
    attempt: i64,
    locked_until: i64,
    lease_ms: i64,
}

/// One lease to renew: the waiting job's place and its new expiry (ms).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewal {
    index: usize,
    until: i64,
}

/// The jobs of one queue claimed and sent to its channel but not yet taken by a thread, in
/// the order they were sent.
#[derive(Debug, Default)]
pub(crate) struct Prefetched {
    waiting: VecDeque<Waiting>,
    /// How many sent jobs executors had taken when `waiting` was last trimmed.
    taken_seen: usize,
}

impl Prefetched {
    /// A job sent to the channel, whose lease lasts `lease_ms` from each renewal.
    pub(crate) fn sent(&mut self, row: &ClaimedRow, lease_ms: i64) {
        self.waiting.push_back(Waiting {
            id: row.id,
            attempt: row.attempt,
            locked_until: row.locked_until,
            lease_ms,
        });
    }

    /// Forgets the jobs executors have taken: `taken` counts every job taken so far.
    pub(crate) fn trim(&mut self, taken: usize) {
        while self.taken_seen < taken {
            if self.waiting.pop_front().is_none() {
                break;
            }
            self.taken_seen += 1;
        }
    }

    /// The ids of the waiting jobs (and of some just taken, until the next trim).
    pub(crate) fn ids(&self) -> impl Iterator<Item = i64> + '_ {
        self.waiting.iter().map(|w| w.id)
    }

    /// When the first waiting job's lease needs renewing (queue clock, ms): half the grace
    /// before it expires.
    pub(crate) fn renew_due_at(&self, grace_ms: i64) -> Option<i64> {
        self.waiting
            .iter()
            .map(|w| w.locked_until - grace_ms / 2)
            .min()
    }

    /// The leases within half the grace of expiring at `now`, each renewed for its job's
    /// whole lease.
    pub(crate) fn due(&self, now: i64, grace_ms: i64) -> Vec<Renewal> {
        self.waiting
            .iter()
            .enumerate()
            .filter(|(_, w)| w.locked_until - grace_ms / 2 <= now)
            .map(|(index, w)| Renewal {
                index,
                until: now + w.lease_ms,
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
            let w = &self.waiting[r.index];
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
            self.waiting[r.index].locked_until = r.until;
        }
    }
}
