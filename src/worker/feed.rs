//! How claimed jobs reach a queue's executor threads: a channel in claim order, and beside it
//! a short lane for jobs of a higher priority than any waiting in the channel, which the
//! threads look at first, highest priority first. A password-reset email claimed while a
//! report's chunks wait for a thread so starts next, not after the chunks already claimed.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::storage::jobs::ClaimedRow;
use crate::worker::completer::WriterHandle;

/// What the dispatcher puts in a queue's channel.
pub(crate) enum FeedMsg {
    /// A claimed job to run.
    Job(Arc<ClaimedRow>),
    /// A job is likely on its way (an in-process enqueue woke an idle worker): the thread
    /// that takes this wakes now and watches for it for [`READY_WATCH`], so that its own
    /// wake-up overlaps the claim's transaction instead of following it.
    Ready,
    /// A job went to the lane of jobs that go first: a sleeping thread wakes to take it.
    /// Threads that are busy find the job there before they read the channel again.
    Overtaking,
}

/// How long an executor pre-woken by [`FeedMsg::Ready`] watches for its job before going
/// back to sleep: longer than a one-job claim takes (about 60–80 µs on a small VM), short
/// enough that a claim that finds nothing (another worker took the job) costs little.
const READY_WATCH: Duration = Duration::from_micros(200);

/// Which way a job went to the executors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// The channel, in claim order.
    InOrder,
    /// Ahead of every job waiting in the channel, by priority (then as sent).
    First,
}

/// The jobs that go first: highest priority first, then in the order they were sent; and the
/// ids of those taken since the dispatcher last asked (it renews the leases of the others).
#[derive(Default)]
struct FirstLane {
    waiting: VecDeque<Arc<ClaimedRow>>,
    taken: Vec<i64>,
}

/// What the executor threads of one queue read from: claimed jobs, and the count of jobs
/// claimed but not finished, which tells them when to wake the dispatcher.
pub(crate) struct QueueFeed {
    pub(crate) name: String,
    jobs: Receiver<FeedMsg>,
    /// Jobs that go before those in `jobs`; `first_waiting` counts them so that a thread
    /// looks without taking the lock when there are none (nearly always).
    first: Mutex<FirstLane>,
    first_waiting: AtomicUsize,
    pub(crate) in_flight: AtomicUsize,
    /// Jobs taken from `jobs` by executors so far: the dispatcher renews the leases of the
    /// ones still waiting behind them.
    taken_in_order: AtomicUsize,
    /// Wake the dispatcher when `in_flight` falls to this: time to claim more (or, at 0,
    /// to write the outcomes of a queue gone quiet). It moves with the prefetch.
    pub(crate) wake_at: AtomicUsize,
    /// Attempts run to the end, and the time their handlers took: the dispatcher sizes the
    /// prefetch from them ([`PrefetchGauge`](super::prefetch::PrefetchGauge)).
    pub(crate) ran: AtomicU64,
    pub(crate) busy_micros: AtomicU64,
}

/// The dispatcher's end of a queue's feed. Dropping it closes the channel: the threads end
/// once they have taken what was sent.
pub(crate) struct FeedSender {
    tx: Sender<FeedMsg>,
    feed: Arc<QueueFeed>,
}

/// A queue's feed: the dispatcher's end and the threads' end.
pub(crate) fn feed(name: String, wake_at: usize) -> (FeedSender, Arc<QueueFeed>) {
    let (tx, jobs) = crossbeam_channel::unbounded();
    let feed = Arc::new(QueueFeed {
        name,
        jobs,
        first: Mutex::new(FirstLane::default()),
        first_waiting: AtomicUsize::new(0),
        in_flight: AtomicUsize::new(0),
        taken_in_order: AtomicUsize::new(0),
        wake_at: AtomicUsize::new(wake_at),
        ran: AtomicU64::new(0),
        busy_micros: AtomicU64::new(0),
    });
    let sender = FeedSender {
        tx,
        feed: Arc::clone(&feed),
    };
    (sender, feed)
}

impl FeedSender {
    /// Hands a claimed job to the threads by `lane`.
    pub(crate) fn send(&self, row: Arc<ClaimedRow>, lane: Lane) {
        match lane {
            Lane::InOrder => {
                let _ = self.tx.send(FeedMsg::Job(row));
            }
            Lane::First => {
                let mut first = lock(&self.feed.first);
                let at = first
                    .waiting
                    .iter()
                    .position(|w| w.priority < row.priority)
                    .unwrap_or(first.waiting.len());
                first.waiting.insert(at, row);
                drop(first);
                self.feed.first_waiting.fetch_add(1, Ordering::Release);
                let _ = self.tx.send(FeedMsg::Overtaking);
            }
        }
    }

    /// Wakes a sleeping thread to watch for a job on its way ([`FeedMsg::Ready`]).
    pub(crate) fn ready(&self) {
        let _ = self.tx.send(FeedMsg::Ready);
    }

    /// Takes back every job no thread has taken (at shutdown), in no particular order.
    pub(crate) fn take_back(&self) -> Vec<Arc<ClaimedRow>> {
        let mut rows: Vec<Arc<ClaimedRow>> = self
            .feed
            .jobs
            .try_iter()
            .filter_map(|msg| match msg {
                FeedMsg::Job(row) => Some(row),
                FeedMsg::Ready | FeedMsg::Overtaking => None,
            })
            .collect();
        let mut first = lock(&self.feed.first);
        self.feed.first_waiting.store(0, Ordering::Release);
        rows.extend(first.waiting.drain(..));
        rows
    }
}

impl QueueFeed {
    /// One job of this queue is finished (its outcome is on its way to the writer).
    pub(crate) fn finished_one(&self, writer: &WriterHandle) {
        let before = self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if before <= self.wake_at.load(Ordering::Relaxed) + 1 {
            writer.nudge();
        }
    }

    /// Jobs executors have taken from the channel so far.
    pub(crate) fn taken_in_order(&self) -> usize {
        self.taken_in_order.load(Ordering::Acquire)
    }

    /// The ids of the jobs that went first and were taken since the last call.
    pub(crate) fn taken_first(&self) -> Vec<i64> {
        std::mem::take(&mut lock(&self.first).taken)
    }

    /// The next job for a thread, waiting for one to come: first the jobs that go first,
    /// then the channel. `None` once the channel is closed and empty.
    pub(crate) fn next(&self) -> Option<Arc<ClaimedRow>> {
        loop {
            if let Some(row) = self.take_first() {
                return Some(row);
            }
            match self.jobs.recv() {
                Ok(FeedMsg::Job(row)) => return Some(self.took_in_order(row)),
                Ok(FeedMsg::Ready) => {
                    if let Some(row) = self.watch_for_job() {
                        return Some(row);
                    }
                }
                Ok(FeedMsg::Overtaking) => {}
                Err(_) => return self.take_first(),
            }
        }
    }

    fn take_first(&self) -> Option<Arc<ClaimedRow>> {
        if self.first_waiting.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut first = lock(&self.first);
        let row = first.waiting.pop_front()?;
        first.taken.push(row.id);
        self.first_waiting.fetch_sub(1, Ordering::AcqRel);
        Some(row)
    }

    fn took_in_order(&self, row: Arc<ClaimedRow>) -> Arc<ClaimedRow> {
        self.taken_in_order.fetch_add(1, Ordering::AcqRel);
        row
    }

    /// After a [`FeedMsg::Ready`]: the job that follows within [`READY_WATCH`], if any.
    /// Spins briefly, then yields its core between looks (the dispatcher may need it).
    fn watch_for_job(&self) -> Option<Arc<ClaimedRow>> {
        let until = Instant::now() + READY_WATCH;
        let mut looks = 0u32;
        loop {
            if let Some(row) = self.take_first() {
                return Some(row);
            }
            match self.jobs.try_recv() {
                Ok(FeedMsg::Job(row)) => return Some(self.took_in_order(row)),
                Ok(FeedMsg::Ready | FeedMsg::Overtaking) => {}
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) => {
                    if Instant::now() >= until {
                        return None;
                    }
                    looks += 1;
                    if looks < 64 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        }
    }
}

/// The lock of the jobs that go first; a thread that panicked holding it left the queue
/// whole (each change is one push or pop).
fn lock(first: &Mutex<FirstLane>) -> std::sync::MutexGuard<'_, FirstLane> {
    first
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: i64) -> Arc<ClaimedRow> {
        at_priority(id, 0)
    }

    fn at_priority(id: i64, priority: i64) -> Arc<ClaimedRow> {
        Arc::new(ClaimedRow {
            id,
            queue: "default".to_string(),
            job_type: "t".to_string(),
            payload: "{}".to_string(),
            priority,
            attempt: 1,
            max_attempts: 6,
            timeout_ms: None,
            locked_until: 0,
            idempotency_key: None,
            group_key: None,
            expires_at: None,
            defect: None,
        })
    }

    /// A pre-woken executor takes the job that follows, passing over further wake-ups; with
    /// none coming it goes back to sleep by itself, and when the worker stops.
    #[test]
    fn a_pre_woken_executor_takes_the_next_job_or_gives_up() {
        let (tx, feed) = feed("default".to_string(), 0);
        tx.ready();
        tx.send(job(7), Lane::InOrder);
        assert_eq!(feed.next().map(|row| row.id), Some(7));
        tx.ready();
        assert!(feed.watch_for_job().is_none(), "nothing came: it gives up");
        tx.send(job(8), Lane::InOrder);
        drop(tx);
        assert_eq!(
            feed.next().map(|row| row.id),
            Some(8),
            "a job sent before the worker stopped is still taken"
        );
        assert!(feed.next().is_none(), "the worker stopped");
    }

    /// Jobs sent to go first are taken before the jobs already waiting in the channel, the
    /// highest priority first (then as sent), and the dispatcher hears which were taken;
    /// what nobody took is taken back at shutdown.
    #[test]
    fn a_job_sent_to_go_first_overtakes_the_waiting_ones() {
        let (tx, feed) = feed("default".to_string(), 0);
        for id in [1, 2, 3] {
            tx.send(job(id), Lane::InOrder);
        }
        assert_eq!(feed.next().map(|row| row.id), Some(1));
        tx.send(at_priority(10, 5), Lane::First);
        tx.send(at_priority(11, 5), Lane::First);
        tx.send(at_priority(13, 10), Lane::First);
        let order: Vec<i64> = (0..4)
            .filter_map(|_| feed.next())
            .map(|row| row.id)
            .collect();
        assert_eq!(order, [13, 10, 11, 2]);
        assert_eq!(feed.taken_in_order(), 2);
        assert_eq!(feed.taken_first(), [13, 10, 11]);
        assert!(feed.taken_first().is_empty(), "each taken id is told once");
        tx.send(job(12), Lane::First);
        let mut back: Vec<i64> = tx.take_back().iter().map(|row| row.id).collect();
        back.sort_unstable();
        assert_eq!(back, [3, 12]);
        assert!(feed.take_first().is_none());
    }

    /// A thread asleep on an empty channel wakes for a job sent to go first; a thread that
    /// finds the channel closed still takes what went first.
    #[test]
    fn a_sleeping_thread_wakes_for_a_job_sent_to_go_first() {
        let (tx, feed) = feed("default".to_string(), 0);
        let reader = {
            let feed = Arc::clone(&feed);
            std::thread::spawn(move || feed.next().map(|row| row.id))
        };
        tx.send(job(5), Lane::First);
        assert_eq!(reader.join().ok().flatten(), Some(5));
        tx.send(job(6), Lane::First);
        drop(tx);
        assert_eq!(feed.next().map(|row| row.id), Some(6));
        assert!(feed.next().is_none());
    }
}
