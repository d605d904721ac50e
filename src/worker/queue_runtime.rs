//! One worked queue, as its worker's dispatcher keeps it: the queue's executor threads, the
//! jobs claimed and not yet written back, whether a claim may find more, and how far ahead
//! to claim ([`PrefetchGauge`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;

use crate::error::Result;
use crate::worker::executor::{self, ExecShared, FeedMsg, QueueFeed, Slot};
use crate::worker::prefetch::PrefetchGauge;
use crate::worker::renewal::Prefetched;

/// How far a queue's jobs in flight may fall before the next claim: half the prefetch left.
fn claim_threshold(concurrency: usize, prefetch: usize) -> usize {
    concurrency + prefetch / 2
}

/// One worked queue: its executor threads and what is claimed but not yet written back.
pub(crate) struct QueueRuntime {
    pub(crate) name: String,
    pub(crate) concurrency: usize,
    pub(super) job_tx: Option<Sender<FeedMsg>>,
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
        let (job_tx, job_rx) = crossbeam_channel::unbounded();
        let prefetch = PrefetchGauge::new(concurrency, prefetch);
        let feed = Arc::new(QueueFeed {
            name: name.clone(),
            jobs: job_rx,
            in_flight: AtomicUsize::new(0),
            taken: AtomicUsize::new(0),
            wake_at: AtomicUsize::new(claim_threshold(concurrency, prefetch.current())),
            ran: AtomicU64::new(0),
            busy_micros: AtomicU64::new(0),
        });
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
