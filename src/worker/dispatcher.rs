//! The dispatcher: the worker's one writer thread. Each round it writes the finished
//! attempts (the completer's batch), reaps when due, and claims as many due jobs as its
//! queues have free slots plus a bounded prefetch, all in one `BEGIN IMMEDIATE`
//! transaction; then it hands the claimed jobs to the executor threads. It sleeps until a
//! result arrives, an in-process enqueue wakes it, an attempt's deadline passes, or the
//! poll interval finds rows written by other processes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};

use crate::clock::duration_to_ms;
use crate::error::Result;
use crate::events::Event;
use crate::maintenance::reaper::Reaper;
use crate::storage::jobs::{self, ClaimRequest, ClaimedRow, Lease};
use crate::worker::completer::{self, Completion, Outcome, WriterMsg};
use crate::worker::executor::{self, ExecShared, Slot};

/// Sent by [`Worker`](crate::Worker) to its dispatcher.
pub(crate) enum Control {
    Shutdown(Duration),
}

/// Timing knobs of a dispatcher.
#[derive(Debug, Clone)]
pub(crate) struct DispatchConfig {
    pub(crate) prefetch: usize,
    pub(crate) poll_interval: Duration,
    pub(crate) reap_interval: Duration,
}

/// One worked queue: its executor threads and what is claimed but not yet written back.
pub(crate) struct QueueRuntime {
    pub(crate) name: String,
    pub(crate) concurrency: usize,
    job_tx: Option<Sender<Arc<ClaimedRow>>>,
    job_rx: Receiver<Arc<ClaimedRow>>,
    slots: Vec<Arc<Slot>>,
    threads: Vec<Option<JoinHandle<()>>>,
    /// Claimed and not yet completed (running or waiting in the channel).
    outstanding: usize,
    /// A claim may find work (woken, polled, or the last claim came back full).
    maybe_more: bool,
}

impl QueueRuntime {
    pub(crate) fn start(
        shared: &Arc<ExecShared>,
        name: String,
        concurrency: usize,
    ) -> Result<QueueRuntime> {
        let (job_tx, job_rx) = crossbeam_channel::unbounded();
        let mut runtime = QueueRuntime {
            name,
            concurrency,
            job_tx: Some(job_tx),
            job_rx,
            slots: Vec::with_capacity(concurrency),
            threads: Vec::with_capacity(concurrency),
            outstanding: 0,
            maybe_more: true,
        };
        for index in 0..concurrency {
            let (slot, thread) = executor::spawn(
                Arc::clone(shared),
                &runtime.name,
                index,
                runtime.job_rx.clone(),
            )?;
            runtime.slots.push(slot);
            runtime.threads.push(Some(thread));
        }
        Ok(runtime)
    }

    fn wanted(&self, prefetch: usize) -> usize {
        (self.concurrency + prefetch).saturating_sub(self.outstanding)
    }
}

pub(crate) struct Dispatcher {
    pub(crate) shared: Arc<ExecShared>,
    pub(crate) queues: Vec<QueueRuntime>,
    pub(crate) results: Receiver<WriterMsg>,
    pub(crate) wake: Receiver<()>,
    pub(crate) control: Receiver<Control>,
    pub(crate) config: DispatchConfig,
    pub(crate) job_types: Vec<String>,
    pub(crate) type_timeouts_ms: Vec<i64>,
    pending: Vec<WriterMsg>,
    reaper: Reaper,
    /// After a failed write (busy, disk full): no new round before this.
    retry_at: Option<Instant>,
    failures: u32,
}

impl Dispatcher {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        shared: Arc<ExecShared>,
        queues: Vec<QueueRuntime>,
        results: Receiver<WriterMsg>,
        wake: Receiver<()>,
        control: Receiver<Control>,
        config: DispatchConfig,
    ) -> Dispatcher {
        let job_types = shared.registry.job_types();
        let type_timeouts_ms = job_types
            .iter()
            .map(|t| shared.registry.type_timeout_ms(t))
            .collect();
        let reaper = Reaper::new(config.reap_interval);
        Dispatcher {
            shared,
            queues,
            results,
            wake,
            control,
            config,
            job_types,
            type_timeouts_ms,
            pending: Vec::new(),
            reaper,
            retry_at: None,
            failures: 0,
        }
    }

    /// Runs until shut down; returns how many attempts were still running after the grace.
    pub(crate) fn run(mut self) -> usize {
        let mut next_poll = Instant::now() + self.config.poll_interval;
        loop {
            self.collect();
            self.time_out_overdue();
            match self.control.try_recv() {
                Ok(Control::Shutdown(grace)) => return self.shutdown(grace),
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    return self.shutdown(Duration::ZERO)
                }
                Err(crossbeam_channel::TryRecvError::Empty) => {}
            }
            let now = Instant::now();
            if now >= next_poll {
                self.poll_due();
                next_poll = now + self.config.poll_interval;
            }
            if self.retry_at.is_none_or(|at| now >= at) && self.has_work(now) {
                self.round(true);
            }
            if self.has_work(Instant::now()) && self.retry_at.is_none() {
                continue;
            }
            let wait = self
                .next_wake(next_poll)
                .saturating_duration_since(Instant::now());
            select! {
                recv(self.results) -> msg => if let Ok(msg) = msg { self.pending.push(msg) },
                recv(self.wake) -> _ => self.queues.iter_mut().for_each(|q| q.maybe_more = true),
                recv(self.control) -> msg => match msg {
                    Ok(Control::Shutdown(grace)) => return self.shutdown(grace),
                    Err(_) => return self.shutdown(Duration::ZERO),
                },
                default(wait) => {},
            }
        }
    }

    fn collect(&mut self) {
        while let Ok(msg) = self.results.try_recv() {
            self.pending.push(msg);
        }
    }

    fn has_work(&self, now: Instant) -> bool {
        !self.pending.is_empty()
            || self.reaper.due(now)
            || self
                .queues
                .iter()
                .any(|q| q.maybe_more && q.wanted(self.config.prefetch) > 0)
    }

    fn next_wake(&self, next_poll: Instant) -> Instant {
        let mut at = next_poll.min(self.reaper.next());
        if let Some(retry) = self.retry_at {
            at = at.min(retry);
        }
        for deadline in self
            .queues
            .iter()
            .flat_map(|q| q.slots.iter())
            .filter_map(|s| s.deadline())
        {
            at = at.min(deadline);
        }
        at
    }

    /// Rows from other processes are not announced: look for due work in idle queues.
    fn poll_due(&mut self) {
        let now = self.shared.queue.now_ms();
        let prefetch = self.config.prefetch;
        let types = &self.job_types;
        let db = self.shared.queue.db();
        for q in self
            .queues
            .iter_mut()
            .filter(|q| !q.maybe_more && q.wanted(prefetch) > 0)
        {
            match db.read(|conn| jobs::any_due(conn, &q.name, types, now)) {
                Ok(due) => q.maybe_more = due,
                Err(e) => log::warn!("litejobs: polling queue {:?} failed: {e}", q.name),
            }
        }
    }

    /// Abandons attempts past their deadline: a timed-out outcome is written, the stuck
    /// thread is left to finish on its own, and a new thread takes its place (R7).
    fn time_out_overdue(&mut self) {
        let now = Instant::now();
        for qi in 0..self.queues.len() {
            for si in 0..self.queues[qi].slots.len() {
                let Some(running) = self.queues[qi].slots[si].take_if_overdue(now) else {
                    continue;
                };
                let row = running.row;
                log::warn!(
                    "litejobs: job {} ({}) attempt {} timed out after {:?}; its thread is replaced",
                    row.id,
                    row.job_type,
                    row.attempt,
                    running.timeout
                );
                let at = self.shared.queue.now_ms();
                let outcome = executor::failure(
                    &self.shared.registry,
                    &row,
                    at,
                    format!("timed out after {} ms", duration_to_ms(running.timeout)),
                    None,
                    true,
                );
                self.pending.push(WriterMsg::Complete(Completion {
                    row,
                    started_at: running.started_at,
                    finished_at: at,
                    outcome,
                }));
                self.replace_thread(qi, si);
            }
        }
    }

    fn replace_thread(&mut self, qi: usize, si: usize) {
        let q = &mut self.queues[qi];
        match executor::spawn(Arc::clone(&self.shared), &q.name, si, q.job_rx.clone()) {
            Ok((slot, thread)) => {
                q.slots[si] = slot;
                // The stuck thread is detached; it ends when its handler returns.
                q.threads[si] = Some(thread);
            }
            Err(e) => log::error!("litejobs: could not start a replacement executor thread: {e}"),
        }
    }

    /// One write transaction: pending outcomes and heartbeats, the reaper when due, and (if
    /// `claim`) a claim per queue with free slots.
    fn round(&mut self, claim: bool) {
        let now = self.shared.queue.now_ms();
        let started = Instant::now();
        let reap = claim && self.reaper.due(started);
        let prefetch = self.config.prefetch;
        let plan: Vec<(usize, usize)> = if claim {
            self.queues
                .iter()
                .enumerate()
                .filter(|(_, q)| q.maybe_more)
                .map(|(i, q)| (i, q.wanted(prefetch)))
                .filter(|&(_, want)| want > 0)
                .collect()
        } else {
            Vec::new()
        };
        let worker_id: &str = &self.shared.worker_id;
        let window_ms = duration_to_ms(self.shared.queue.idempotency_window());
        let grace_ms = self.shared.lease_grace_ms;
        let (pending, queues, types, timeouts) = (
            &self.pending,
            &self.queues,
            &self.job_types,
            &self.type_timeouts_ms,
        );
        let written = self.shared.queue.db().write(|tx| {
            let mut applied = Vec::with_capacity(pending.len());
            for msg in pending {
                applied.push(match msg {
                    WriterMsg::Complete(c) => {
                        completer::write_completion(tx, worker_id, c, now, window_ms)?
                    }
                    WriterMsg::Extend {
                        row,
                        until,
                        progress,
                        ..
                    } => {
                        let lease = Lease {
                            job_id: row.id,
                            attempt: row.attempt,
                            worker_id,
                        };
                        jobs::extend_lease(tx, lease, *until, progress.as_deref(), now)?
                    }
                });
            }
            let reaped = if reap {
                jobs::reap_expired(tx, now)?
            } else {
                0
            };
            let mut claimed = Vec::with_capacity(plan.len());
            for &(qi, want) in &plan {
                let req = ClaimRequest {
                    queue: &queues[qi].name,
                    job_types: types,
                    type_timeouts_ms: timeouts,
                    limit: want,
                    worker_id,
                    lease_grace_ms: grace_ms,
                };
                claimed.push(jobs::claim(tx, &req, now)?);
            }
            Ok((applied, reaped, claimed))
        });
        let (applied, reaped, claimed) = match written {
            Ok(written) => written,
            Err(e) => {
                // Busy beyond the timeout, disk full, I/O: nothing was written. Keep the
                // outcomes and try again after a backoff; never turn this into job failures.
                self.failures += 1;
                let backoff = Duration::from_millis(25u64 << self.failures.min(6));
                log::warn!("litejobs: write failed ({e}); retrying in {backoff:?}");
                self.retry_at = Some(Instant::now() + backoff);
                return;
            }
        };
        self.failures = 0;
        self.retry_at = None;
        let events = self.shared.queue.events();
        for (msg, ok) in self.pending.drain(..).zip(applied) {
            match msg {
                WriterMsg::Complete(c) => {
                    if let Some(q) = self.queues.iter_mut().find(|q| q.name == c.row.queue) {
                        q.outstanding = q.outstanding.saturating_sub(1);
                        // A finished job frees a slot and may release its group key.
                        q.maybe_more = true;
                    }
                    if ok {
                        completer::announce(events, &c);
                    } else {
                        log::debug!(
                            "litejobs: late result of job {} attempt {} discarded (lease gone)",
                            c.row.id,
                            c.row.attempt
                        );
                    }
                }
                WriterMsg::Extend { reply, .. } => {
                    let _ = reply.send(ok);
                }
            }
        }
        if reap {
            self.reaper.ran(Instant::now());
            if reaped > 0 {
                log::info!("litejobs: reaped {reaped} jobs whose lease had expired");
                events.send(Event::Reaped { count: reaped });
            }
        }
        for ((qi, want), rows) in plan.into_iter().zip(claimed) {
            let q = &mut self.queues[qi];
            q.maybe_more = rows.len() == want;
            let Some(tx) = &q.job_tx else { continue };
            for row in rows {
                q.outstanding += 1;
                let _ = tx.send(Arc::new(row));
            }
        }
    }

    /// Stops claiming, lets running attempts finish within `grace`, releases what is left,
    /// writes everything back and joins the executor threads. Returns how many attempts
    /// were still running after the grace.
    fn shutdown(mut self, grace: Duration) -> usize {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + grace;
        // Prefetched jobs nobody started go back at once.
        for q in &self.queues {
            while let Ok(row) = q.job_rx.try_recv() {
                let now = self.shared.queue.now_ms();
                self.pending.push(release(row, now));
            }
        }
        loop {
            self.collect();
            self.time_out_overdue();
            let now = Instant::now();
            if !self.pending.is_empty() && self.retry_at.is_none_or(|at| now >= at) {
                self.round(false);
            }
            let idle = self.queues.iter().all(|q| q.outstanding == 0);
            if (idle && self.pending.is_empty()) || now >= deadline {
                break;
            }
            let wait = deadline
                .min(self.retry_at.unwrap_or(deadline))
                .min(now + Duration::from_millis(100))
                .saturating_duration_since(now);
            select! {
                recv(self.results) -> msg => if let Ok(msg) = msg { self.pending.push(msg) },
                default(wait) => {},
            }
        }
        let mut still_running = 0;
        for q in &self.queues {
            for slot in &q.slots {
                if let Some(running) = slot.abandon() {
                    still_running += 1;
                    log::warn!(
                        "litejobs: job {} still running after the shutdown grace; released",
                        running.row.id
                    );
                    let now = self.shared.queue.now_ms();
                    self.pending.push(release(running.row, now));
                }
            }
        }
        self.collect();
        for _ in 0..50 {
            if self.pending.is_empty() {
                break;
            }
            if let Some(at) = self.retry_at {
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
            }
            self.round(false);
        }
        if !self.pending.is_empty() {
            log::error!(
                "litejobs: {} outcomes could not be written at shutdown; their leases will expire \
                 and the reaper will make the jobs due again",
                self.pending.len()
            );
        }
        for q in &mut self.queues {
            q.job_tx = None;
        }
        for q in &mut self.queues {
            for (slot, thread) in q.slots.iter().zip(q.threads.iter_mut()) {
                if let Some(handle) = thread.take() {
                    if !slot.is_abandoned() {
                        let _ = handle.join();
                    }
                }
            }
        }
        still_running
    }
}

fn release(row: Arc<ClaimedRow>, now: i64) -> WriterMsg {
    WriterMsg::Complete(Completion {
        row,
        started_at: now,
        finished_at: now,
        outcome: Outcome::Released,
    })
}
