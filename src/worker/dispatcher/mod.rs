//! The dispatcher: the worker's one writer thread. Each round it writes the finished
//! attempts (the completer's batch), reaps when due, and claims as many due jobs as its
//! queues have free slots plus a bounded prefetch sized by how long their jobs take
//! ([`PrefetchGauge`](crate::worker::prefetch::PrefetchGauge)), all in one `BEGIN IMMEDIATE`
//! transaction; then it hands the claimed jobs to the executor threads. It sleeps until a
//! result arrives, an in-process enqueue wakes it, an attempt's deadline passes, or the
//! poll interval finds rows written by other processes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};

use crate::error::ErrorKind;
use crate::queue::events::Event;
use crate::storage::jobs::{Claimed, ClaimedRow};
use crate::system::clock::duration_to_ms;
use crate::worker::activity::WorkerActivity;
use crate::worker::cancels::CancelWatch;
use crate::worker::change_watch::ChangeWatch;
use crate::worker::completer::{Completer, Completion, Outcome, WriterMsg};
use crate::worker::executor::{self, ExecShared};
use crate::worker::feed::FeedSender;
use crate::worker::maintenance::chores::Chores;
use crate::worker::maintenance::every::Every;
use crate::worker::maintenance::presence::Presence;
use crate::worker::maintenance::pruner::Pruner;
use crate::worker::queue_runtime::QueueRuntime;
use crate::worker::registry::Claimer;
use crate::worker::renewal::Renewal;

mod looks;

/// While attempts run, the dispatcher looks at finished outcomes at least this often even if
/// no executor woke it (e.g. one of many long jobs finished).
const COLLECT_INTERVAL: Duration = Duration::from_millis(5);

/// On a server, a round with at least this many outcomes to write writes them while it
/// claims (see [`Dispatcher::round`]).
const OVERLAP_OUTCOMES: usize = 32;

/// Sent by [`Worker`](crate::Worker) to its dispatcher.
pub(crate) enum Control {
    Shutdown(Duration),
}

/// Timing knobs of a dispatcher.
#[derive(Debug)]
pub(crate) struct DispatchConfig {
    pub(crate) poll_interval: Duration,
    /// How often an idle dispatcher asks the [`ChangeSignal`] whether another connection
    /// committed.
    pub(crate) change_check_interval: Duration,
    pub(crate) reap_interval: Duration,
    /// Scheduled retention, one chunk per loop between claim rounds.
    pub(crate) pruner: Option<Pruner>,
    /// This worker's row in the workers registry, written on the reaper's schedule.
    pub(crate) presence: Presence,
}

pub(crate) struct Dispatcher {
    pub(crate) shared: Arc<ExecShared>,
    pub(crate) queues: Vec<QueueRuntime>,
    pub(crate) results: Receiver<WriterMsg>,
    pub(crate) nudge: Receiver<()>,
    pub(crate) wake: Receiver<()>,
    /// Cancels of jobs this worker holds.
    cancels: CancelWatch,
    pub(crate) control: Receiver<Control>,
    pub(crate) config: DispatchConfig,
    /// What this worker claims with.
    claimer: Claimer,
    /// The outcomes and heartbeats waiting to be written.
    completer: Completer,
    /// When the reaper is next due.
    reaper: Every,
    /// Scheduled pruning, the expiry sweep and the stray sweep.
    chores: Chores,
    /// Commits by other connections; `None` when it could not be made (polling still works).
    change: Option<ChangeWatch>,
    activity: WorkerActivity,
}

impl Dispatcher {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        shared: Arc<ExecShared>,
        queues: Vec<QueueRuntime>,
        results: Receiver<WriterMsg>,
        nudge: Receiver<()>,
        wake: Receiver<()>,
        cancels: CancelWatch,
        control: Receiver<Control>,
        mut config: DispatchConfig,
        activity: WorkerActivity,
    ) -> Dispatcher {
        let claimer = Claimer::new(
            &shared.registry,
            Arc::clone(&shared.worker_id),
            shared.lease_grace_ms,
            shared.queue.max_payload_bytes(),
        );
        let reap_interval = config.reap_interval;
        let reaper = Every::new(reap_interval);
        let config_pruner = config.pruner.take();
        let presence = config.presence.clone();
        let db = shared.queue.db();
        let change = match db.change_signal() {
            Ok(signal) => Some(ChangeWatch::new(
                signal,
                db.commit_files(),
                config.change_check_interval,
            )),
            Err(e) => {
                log::warn!(
                    "litejobs: jobs from other processes will wait for the poll interval: \
                     cannot watch the database for their commits ({e})"
                );
                None
            }
        };
        Dispatcher {
            shared,
            queues,
            results,
            nudge,
            wake,
            cancels,
            control,
            config,
            claimer,
            completer: Completer::default(),
            reaper,
            chores: Chores::new(config_pruner, reap_interval, presence),
            change,
            activity,
        }
    }

    /// Runs until shut down; returns how many attempts were still running after the grace.
    pub(crate) fn run(mut self) -> usize {
        let mut next_poll = Instant::now() + self.config.poll_interval;
        loop {
            self.activity.woke();
            self.collect();
            self.time_out_overdue();
            self.cancels.step(&self.shared.queue, &self.queues);
            match self.control.try_recv() {
                Ok(Control::Shutdown(grace)) => return self.shutdown(grace),
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    return self.shutdown(Duration::ZERO)
                }
                Err(crossbeam_channel::TryRecvError::Empty) => {}
            }
            // An in-process enqueue says where the work is: it goes before a look for other
            // processes' commits (its own commit is reported by the file watch too).
            if self.wake.try_recv().is_ok() {
                self.woken();
            }
            let now = Instant::now();
            if now >= next_poll {
                next_poll = self.poll_due(now);
                self.look_ahead();
            } else if self.changed_elsewhere(now) {
                self.commit_seen();
                self.look_ahead();
                // The commit may have left jobs for later: the next poll tells.
                next_poll = next_poll.min(now + self.config.poll_interval);
            }
            if self.completer.may_write(now) && self.has_work(now) {
                self.round(true);
            }
            if self.completer.may_write(Instant::now()) {
                if let Err(e) = self.chores.step(&self.shared.queue, self.idle()) {
                    // The server is away: the upkeep waits with the writes.
                    self.completer.failed(&e);
                }
            }
            if self.has_work(Instant::now()) && self.completer.retry_at().is_none() {
                continue;
            }
            let watching = self.watching();
            if let Some(change) = &mut self.change {
                change.set_watching(watching, Instant::now());
            }
            let wait = self
                .next_wake(next_poll)
                .saturating_duration_since(Instant::now());
            let hints = match &self.change {
                Some(change) => change.hints(),
                None => crossbeam_channel::never(),
            };
            // Outcomes are collected at the top of the loop; executors nudge when there is
            // something to decide, so a burst of outcomes costs one wake-up, not one each.
            select! {
                recv(self.nudge) -> _ => {},
                recv(self.wake) -> _ => self.woken(),
                recv(self.cancels.notices()) -> msg => if let Ok(notices) = msg {
                    self.cancels.received(notices, &self.queues);
                },
                recv(hints) -> msg => if let Some(change) = &mut self.change {
                    match msg {
                        Ok(()) => change.hinted(Instant::now()),
                        // A closed channel is always ready: stop waiting on it.
                        Err(_) => change.hints_ended(Instant::now()),
                    }
                },
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
            self.push_pending(msg);
        }
    }

    fn push_pending(&mut self, msg: WriterMsg) {
        if let WriterMsg::Complete(c) = &msg {
            if let Some(q) = self.queues.iter_mut().find(|q| q.name == c.row.queue) {
                q.finished_unwritten += 1;
            }
        }
        self.completer.push(msg);
    }

    /// Whether a write round is worth a transaction now: group commit collects outcomes
    /// while other attempts are still running, up to a batch or a short linger.
    fn has_work(&self, now: Instant) -> bool {
        let nothing_running = self.queues.iter().all(|q| q.in_flight() == 0);
        self.completer.due(now, nothing_running)
            || self.reaper.due(now)
            || self.queues.iter().any(|q| q.needs_claim() || q.overtake)
            || self.renewal_due()
    }

    /// True when a waiting job's lease is within half the grace of expiring.
    fn renewal_due(&self) -> bool {
        let now = self.shared.queue.now_ms();
        let grace = self.shared.lease_grace_ms;
        self.queues
            .iter()
            .filter_map(|q| q.prefetched.renew_due_at(grace))
            .any(|at| at <= now)
    }

    /// Nothing claimed, nothing to write, nothing known to be due: a moment for upkeep that
    /// reads much.
    fn idle(&self) -> bool {
        self.completer.is_empty() && self.queues.iter().all(QueueRuntime::idle)
    }

    fn next_wake(&self, next_poll: Instant) -> Instant {
        // While a failed write backs off, nothing is written before the retry: a reap, a
        // prune step, a linger or a renewal that came due meanwhile waits for it (waking for
        // them would spin).
        let writable = |when: Instant| match self.completer.retry_at() {
            Some(retry) => when.max(retry),
            None => when,
        };
        let mut at = next_poll.min(writable(self.reaper.next()));
        if let Some(check) = self.change.as_ref().and_then(ChangeWatch::next_check) {
            at = at.min(check);
        }
        at = at.min(writable(self.chores.next(self.idle())));
        if let Some(linger_ends) = self.completer.linger_ends() {
            at = at.min(writable(linger_ends));
        }
        if self.queues.iter().any(|q| q.in_flight() > 0) {
            at = at.min(Instant::now() + COLLECT_INTERVAL);
        }
        let grace = self.shared.lease_grace_ms;
        if let Some(renew) = self
            .queues
            .iter()
            .filter_map(|q| q.prefetched.renew_due_at(grace))
            .min()
        {
            let wait_ms = (renew - self.shared.queue.now_ms()).max(0) as u64;
            at = at.min(writable(Instant::now() + Duration::from_millis(wait_ms)));
        }
        if let Some(retry) = self.completer.retry_at() {
            at = at.min(retry);
        }
        if let Some(look) = self.cancels.next_look() {
            at = at.min(look);
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

    /// Abandons attempts past their deadline: a timed-out outcome is written, the stuck
    /// thread is left to finish on its own, and a new thread takes its place.
    fn time_out_overdue(&mut self) {
        let now = Instant::now();
        for qi in 0..self.queues.len() {
            for si in 0..self.queues[qi].slots.len() {
                let Some(running) = self.queues[qi].slots[si].take_if_overdue(now) else {
                    continue;
                };
                let row = running.row;
                // The stuck thread will not report; count its job as finished here.
                self.queues[qi]
                    .feed
                    .in_flight
                    .fetch_sub(1, Ordering::AcqRel);
                let at = self.shared.queue.now_ms();
                if let Some(text) = running.stop.cancelled() {
                    // Its job was cancelled: the outcome was written then; nothing to add.
                    log::warn!(
                        "litejobs: job {} ({}) was {text} but its handler still ran at its \
                         timeout; its thread is replaced",
                        row.id,
                        row.job_type
                    );
                    self.push_pending(release_as(row, running.started_at, at, Outcome::Dropped));
                    self.replace_thread(qi, si);
                    continue;
                }
                log::warn!(
                    "litejobs: job {} ({}) attempt {} timed out after {:?}; its thread is replaced",
                    row.id,
                    row.job_type,
                    row.attempt,
                    running.timeout
                );
                let outcome = executor::failure(
                    &self.shared.registry,
                    &row,
                    at,
                    format!("timed out after {} ms", duration_to_ms(running.timeout)),
                    None,
                    true,
                );
                self.push_pending(WriterMsg::Complete(Completion {
                    row,
                    started_at: running.started_at,
                    finished_at: at,
                    outcome,
                    log: None,
                }));
                self.replace_thread(qi, si);
            }
        }
    }

    fn replace_thread(&mut self, qi: usize, si: usize) {
        let q = &mut self.queues[qi];
        match executor::spawn(Arc::clone(&self.shared), Arc::clone(&q.feed), si) {
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
        // Per queue claimed from: how many jobs, and a bound on their priority.
        let plan: Vec<(usize, usize, Option<i64>)> = if claim {
            self.queues.iter_mut().for_each(|q| {
                q.resize_prefetch();
                q.trim_prefetched();
            });
            // Every queue that could use jobs rides along, not only the one that asked. A
            // queue with no room claims a job found to go ahead of those it holds (a claim
            // in claim order takes such a job first anyway).
            self.queues
                .iter_mut()
                .enumerate()
                .filter_map(|(i, q)| {
                    let overtake = std::mem::take(&mut q.overtake);
                    let want = if q.maybe_more { q.wanted() } else { 0 };
                    if want > 0 {
                        Some((i, want, None))
                    } else if overtake {
                        q.overtakable()
                            .map(|(highest, room)| (i, room, Some(highest)))
                    } else {
                        None
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let grace_ms = self.shared.lease_grace_ms;
        // Leases of claimed jobs still waiting for a thread, renewed before they run out.
        let renewals: Vec<Vec<Renewal>> = self
            .queues
            .iter_mut()
            .map(|q| {
                q.trim_prefetched();
                q.prefetched.due(now, grace_ms)
            })
            .collect();
        let worker_id: &str = &self.shared.worker_id;
        let window_ms = duration_to_ms(self.shared.queue.idempotency_window());
        let (completer, queues, claimer) = (&self.completer, &self.queues, &self.claimer);
        self.activity.wrote();
        // Claims alone (no outcome, renewal or reap to write with them) are single
        // statements, each correct on its own: where the database gains from it (a server),
        // they go without a transaction around them, saving its round trips on a pickup.
        let alone = completer.is_empty() && !reap && renewals.iter().all(Vec::is_empty);
        let outcomes = |tx: &dyn crate::storage::Tx| {
            let applied = completer.write(tx, worker_id, now, window_ms)?;
            for (q, due) in queues.iter().zip(&renewals) {
                q.prefetched.write(tx, due, worker_id, now)?;
            }
            let reaped = if reap {
                crate::worker::maintenance::reaper::reap(tx, now)?
            } else {
                0
            };
            Ok((applied, reaped))
        };
        let claims = |tx: &dyn crate::storage::Tx| {
            let mut claimed = Vec::with_capacity(plan.len());
            for &(qi, want, above) in &plan {
                let req = crate::storage::jobs::ClaimRequest {
                    above_priority: above,
                    ..claimer.request(&queues[qi].name, want)
                };
                claimed.push(tx.claim(&req, now)?);
            }
            Ok(claimed)
        };
        let db = self.shared.queue.db();
        let (written, claimed) = if db.is_server() {
            // A server: the outcomes in one transaction, the claims in statements of their
            // own (on SQLite one transaction for both measured fastest; on a server the
            // claim's own statement saves the round trips of a savepoint and a commit). With
            // a batch of outcomes big enough for the server's time to count, and claims too,
            // they go at once on two connections: each mostly waits for the server, which
            // works on both. They touch different rows (the outcomes ours, running; the
            // claims waiting ones), so neither waits for the other. (Meanwhile the table shows
            // the finished jobs running beside the new ones: with slow jobs, which come a
            // few at a time, the two go one after the other and it never holds more running
            // jobs than threads and prefetch.)
            let write_outcomes = || {
                if alone {
                    Ok((Vec::new(), 0))
                } else {
                    db.write(outcomes)
                }
            };
            let write_claims = || {
                if plan.is_empty() {
                    return Vec::new();
                }
                db.write_statements(claims).unwrap_or_else(|e| {
                    // The claim is tried again later.
                    if e.kind() != ErrorKind::Unavailable {
                        log::warn!("litejobs: claim failed ({e}); trying again later");
                    }
                    plan.iter().map(|_| Claimed::default()).collect()
                })
            };
            if completer.len() < OVERLAP_OUTCOMES || plan.is_empty() {
                (write_outcomes(), write_claims())
            } else {
                std::thread::scope(|s| {
                    let writing = s.spawn(write_outcomes);
                    let claimed = write_claims();
                    let written = writing
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                    (written, claimed)
                })
            }
        } else {
            let both = |tx: &dyn crate::storage::Tx| {
                let (applied, reaped) = outcomes(tx)?;
                Ok((applied, reaped, claims(tx)?))
            };
            // Everything written here is litejobs' own (the claim checks each row it takes
            // against the schema's rules in code): the rules' CHECKs are skipped, measured
            // with callgrind at 14 % of the instructions per job.
            match db.write_validated(both) {
                Ok((applied, reaped, claimed)) => (Ok((applied, reaped)), claimed),
                Err(e) => {
                    // Nothing was written: the completer keeps its batch and backs off.
                    self.completer.failed(&e);
                    return;
                }
            }
        };
        match written {
            Ok((applied, reaped)) => self.written(&renewals, applied, reap, reaped),
            // Nothing of it was written: the completer keeps its batch and backs off (the
            // claims, made on their own, are handed out all the same).
            Err(e) => self.completer.failed(&e),
        }
        let events = self.shared.queue.events();
        for ((qi, want, above), claimed) in plan.into_iter().zip(claimed) {
            let rows = claimed.rows;
            for refused in &claimed.refused {
                events.refused(refused);
            }
            let q = &mut self.queues[qi];
            if above.is_none() {
                q.maybe_more = rows.len() == want || !claimed.refused.is_empty();
            }
            let registry = &self.shared.registry;
            q.hand_out(rows, |row| {
                duration_to_ms(registry.timeout_for(row)) + grace_ms
            });
        }
    }

    /// After the outcomes, renewals and reap of a round were committed: the completer's
    /// batch is done, its slots free, the leases renewed.
    fn written(
        &mut self,
        renewals: &[Vec<Renewal>],
        applied: Vec<bool>,
        reap: bool,
        reaped: usize,
    ) {
        for (q, due) in self.queues.iter_mut().zip(renewals) {
            q.prefetched.renewed(due);
        }
        let events = self.shared.queue.events();
        for (c, _) in self.completer.committed(applied, events) {
            if let Some(q) = self.queues.iter_mut().find(|q| q.name == c.row.queue) {
                q.outstanding = q.outstanding.saturating_sub(1);
                q.finished_unwritten = q.finished_unwritten.saturating_sub(1);
                // A finished job frees a slot and may release its group key.
                q.maybe_more = true;
            }
        }
        if reap {
            self.reaper.ran(Instant::now());
            if reaped > 0 {
                // The reaped jobs are due again now.
                self.queues.iter_mut().for_each(|q| q.maybe_more = true);
                log::info!("litejobs: reaped {reaped} jobs whose lease had expired");
                events.send(Event::Reaped { count: reaped });
            }
        }
    }

    /// Stops claiming, lets running attempts finish within `grace`, releases what is left,
    /// writes everything back and joins the executor threads. Returns how many attempts
    /// were still running after the grace.
    fn shutdown(mut self, grace: Duration) -> usize {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.chores.stopping(&self.shared.queue, grace);
        let deadline = Instant::now() + grace;
        // Prefetched jobs nobody started go back at once.
        let unstarted: Vec<Arc<ClaimedRow>> = self
            .queues
            .iter()
            .flat_map(|q| {
                let taken = q
                    .job_tx
                    .as_ref()
                    .map(FeedSender::take_back)
                    .unwrap_or_default();
                q.feed.in_flight.fetch_sub(taken.len(), Ordering::AcqRel);
                taken
            })
            .collect();
        for row in unstarted {
            let now = self.shared.queue.now_ms();
            self.push_pending(release(row, now));
        }
        loop {
            self.activity.woke();
            self.collect();
            self.time_out_overdue();
            let now = Instant::now();
            if !self.completer.is_empty() && self.completer.may_write(now) {
                self.round(false);
            }
            let idle = self.queues.iter().all(|q| q.outstanding == 0);
            if (idle && self.completer.is_empty()) || now >= deadline {
                break;
            }
            let wait = deadline
                .min(self.completer.retry_at().unwrap_or(deadline))
                .min(now + Duration::from_millis(100))
                .saturating_duration_since(now);
            select! {
                recv(self.results) -> msg => if let Ok(msg) = msg { self.push_pending(msg) },
                recv(self.nudge) -> _ => {},
                default(wait) => {},
            }
        }
        let abandoned: Vec<(Arc<ClaimedRow>, i64)> = self
            .queues
            .iter()
            .flat_map(|q| q.slots.iter().map(move |slot| (q, slot)))
            .filter_map(|(q, slot)| {
                let running = slot.abandon()?;
                q.feed.in_flight.fetch_sub(1, Ordering::AcqRel);
                Some((running.row, running.started_at))
            })
            .collect();
        let still_running = abandoned.len();
        for (row, started_at) in abandoned {
            log::warn!(
                job_id = row.id,
                job_type = row.job_type.as_str(),
                attempt = row.attempt;
                "litejobs: job {} ({}) attempt {} still running after the shutdown grace; \
                 released, due again at once",
                row.id,
                row.job_type,
                row.attempt
            );
            let now = self.shared.queue.now_ms();
            // The attempt ran from its start until now: its history says so.
            self.push_pending(release_as(row, started_at, now, Outcome::Released));
        }
        self.collect();
        for _ in 0..50 {
            if self.completer.is_empty() {
                break;
            }
            if let Some(at) = self.completer.retry_at() {
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
            }
            self.round(false);
        }
        if !self.completer.is_empty() {
            log::error!(
                "litejobs: {} outcomes could not be written at shutdown; their leases will expire \
                 and the reaper will make the jobs due again",
                self.completer.len()
            );
        }
        for q in &mut self.queues {
            q.job_tx = None;
        }
        self.chores.stopped(&self.shared.queue);
        // Dropping the last receiver discards unanswered heartbeats, so an executor still
        // waiting for a lease reply wakes up and ends instead of blocking the join.
        self.results = crossbeam_channel::never();
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
    release_as(row, now, now, Outcome::Released)
}

fn release_as(row: Arc<ClaimedRow>, started_at: i64, now: i64, outcome: Outcome) -> WriterMsg {
    WriterMsg::Complete(Completion {
        row,
        started_at,
        finished_at: now,
        outcome,
        log: None,
    })
}
