//! One worked queue, as its worker's dispatcher keeps it: the queue's executor threads, the
//! jobs claimed and not yet written back, whether a claim may find more, and how far ahead
//! to claim ([`PrefetchGauge`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::Result;
use crate::storage::jobs::ClaimedRow;
use crate::worker::executor::{self, ExecShared, Slot};
use crate::worker::feed::{self, FeedSender, Lane, QueueFeed};
use crate::worker::prefetch::PrefetchGauge;
use crate::worker::renewal::Prefetched;

/// Below this wait for a thread behind the jobs a queue holds, a job of a higher priority is
/// not looked for between claims: it would gain less than the looks cost (fast jobs).
const WAIT_WORTH_OVERTAKING: Duration = Duration::from_millis(1);

/// How far a queue's jobs in flight may fall before the next claim: half the prefetch left.
fn claim_threshold(concurrency: usize, prefetch: usize) -> usize {
    concurrency + prefetch / 2
}

/// One worked queue: its executor threads and what is claimed but not yet written back.
pub(crate) struct QueueRuntime {
    pub(crate) name: String,
    pub(crate) concurrency: usize,
    /// `None` once the worker stops: the threads end when they have taken what was sent.
    pub(super) job_tx: Option<FeedSender>,
    pub(super) feed: Arc<QueueFeed>,
    pub(super) slots: Vec<Arc<Slot>>,
    pub(super) threads: Vec<Option<JoinHandle<()>>>,
    /// Claimed and not yet written back (running, waiting in the channel, or finished with
    /// the outcome pending).
    pub(super) outstanding: usize,
    /// Outcomes of this queue waiting in the dispatcher's pending batch.
    pub(super) finished_unwritten: usize,
    /// A claim may find work (woken, polled, or the last claim came back full).
    pub(super) maybe_more: bool,
    /// Claimed jobs not yet taken by an executor, whose leases are renewed while they wait.
    pub(super) prefetched: Prefetched,
    /// How many jobs to claim beyond the free slots.
    pub(super) prefetch: PrefetchGauge,
    /// A job that goes ahead of those waiting for a thread is due ([`Self::overtakable`]):
    /// the next round claims it.
    pub(super) overtake: bool,
}

impl QueueRuntime {
    pub(crate) fn start(
        shared: &Arc<ExecShared>,
        name: String,
        concurrency: usize,
        prefetch: usize,
    ) -> Result<QueueRuntime> {
        // Unbounded in type, bounded in practice: the dispatcher sends only what it claimed,
        // and it never claims more than the queue's concurrency plus the prefetch in flight.
        let prefetch = PrefetchGauge::new(concurrency, prefetch);
        let (job_tx, feed) = feed::feed(
            name.clone(),
            claim_threshold(concurrency, prefetch.current()),
        );
        let mut runtime = QueueRuntime {
            name,
            concurrency,
            job_tx: Some(job_tx),
            feed,
            slots: Vec::with_capacity(concurrency),
            threads: Vec::with_capacity(concurrency),
            outstanding: 0,
            finished_unwritten: 0,
            maybe_more: true,
            prefetched: Prefetched::default(),
            prefetch,
            overtake: false,
        };
        for index in 0..concurrency {
            let (slot, thread) =
                executor::spawn(Arc::clone(shared), Arc::clone(&runtime.feed), index)?;
            runtime.slots.push(slot);
            runtime.threads.push(Some(thread));
        }
        Ok(runtime)
    }

    /// Jobs claimed and not yet finished.
    pub(super) fn in_flight(&self) -> usize {
        self.outstanding.saturating_sub(self.finished_unwritten)
    }

    /// Nothing claimed and nothing known to be due.
    pub(super) fn idle(&self) -> bool {
        self.outstanding == 0 && !self.maybe_more
    }

    /// How many jobs a claim now would take: free slots plus the prefetch.
    pub(super) fn wanted(&self) -> usize {
        (self.concurrency + self.prefetch.current()).saturating_sub(self.in_flight())
    }

    /// Claim once half the prefetch is used up, so the executors never run dry while the
    /// claims stay batched (a claim per freed slot would mean a transaction per job).
    pub(super) fn needs_claim(&self) -> bool {
        self.maybe_more
            && self.wanted() > 0
            && self.in_flight() <= claim_threshold(self.concurrency, self.prefetch.current())
    }

    /// Hands claimed jobs (in claim order) to the threads, each leased for `lease_ms(row)`.
    /// A job of a higher priority than every job waiting for a thread goes ahead of them:
    /// an urgent job claimed while slower ones wait starts at the next free thread.
    pub(super) fn hand_out(
        &mut self,
        rows: Vec<ClaimedRow>,
        lease_ms: impl Fn(&ClaimedRow) -> i64,
    ) {
        let Some(tx) = &self.job_tx else { return };
        self.outstanding += rows.len();
        self.feed.in_flight.fetch_add(rows.len(), Ordering::AcqRel);
        self.prefetched.trim_in_order(self.feed.taken_in_order());
        let mut highest = self.prefetched.highest_in_order();
        for row in rows {
            let lane = match highest {
                Some(h) if row.priority > h => Lane::First,
                _ => {
                    highest = Some(highest.map_or(row.priority, |h| h.max(row.priority)));
                    Lane::InOrder
                }
            };
            self.prefetched.sent(&row, lane, lease_ms(&row));
            tx.send(Arc::new(row), lane);
        }
    }

    /// While jobs wait for a thread long enough that a newer job of a higher priority would
    /// gain by going ahead of them (slow jobs; see [`WAIT_WORTH_OVERTAKING`]): the highest
    /// priority among them, and how many such jobs may still be claimed to go first. Such a
    /// job is looked for on each commit seen, not only when the queue claims again, which may
    /// be many jobs later. At most one per thread waits to go first, so a worker never
    /// hoards a backlog of urgent jobs that other workers could start.
    pub(super) fn overtakable(&self) -> Option<(i64, usize)> {
        let waiting = self.prefetched.in_order() as u64;
        let room = self.concurrency.saturating_sub(self.prefetched.first());
        if waiting == 0 || room == 0 {
            return None;
        }
        let ran = self.feed.ran.load(Ordering::Relaxed);
        let busy_micros = self.feed.busy_micros.load(Ordering::Relaxed);
        // Nothing measured yet: the jobs may be slow.
        let wait_micros = match busy_micros.checked_div(ran) {
            Some(mean) => waiting.saturating_mul(mean) / self.concurrency.max(1) as u64,
            None => u64::MAX,
        };
        if wait_micros < WAIT_WORTH_OVERTAKING.as_micros() as u64 {
            return None;
        }
        self.prefetched
            .highest_in_order()
            .map(|highest| (highest, room))
    }

    /// Forgets the waiting jobs the threads have taken.
    pub(super) fn trim_prefetched(&mut self) {
        self.prefetched.trim_in_order(self.feed.taken_in_order());
        self.prefetched.forget_first(&self.feed.taken_first());
    }

    /// Wakes the queue's executor, when none of its jobs is out, ahead of a claim that will
    /// hand it one: its wake-up (40 µs on a small VM) overlaps the claim's round.
    pub(super) fn wake_if_idle(&self) {
        if self.outstanding == 0 {
            if let Some(tx) = &self.job_tx {
                tx.ready();
            }
        }
    }

    /// Resizes the prefetch from the run times of the attempts finished since the last look.
    pub(super) fn resize_prefetch(&mut self) {
        let ran = self.feed.ran.load(Ordering::Relaxed);
        let busy = self.feed.busy_micros.load(Ordering::Relaxed);
        if self.prefetch.observe(ran, busy) {
            let wake_at = claim_threshold(self.concurrency, self.prefetch.current());
            self.feed.wake_at.store(wake_at, Ordering::Relaxed);
        }
    }
}
