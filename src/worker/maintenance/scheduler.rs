//! Periodic jobs: a [`Periodic`] schedule (a cron expression or a fixed interval) and a
//! job template; the [`Scheduler`] enqueues the template once per slot.
//!
//! **Exactly once per slot, across processes.** Each schedule's latest handled slot is kept
//! in the `periodic_schedules` table. A tick reads it and moves it forward in the same write
//! transaction that enqueues the slot's job, so of several schedulers on one file (threads of
//! one worker, or worker processes) exactly one enqueues each slot. The job also carries the
//! idempotency key `periodic:<name>:<slot_ms>`, which shows where it came from.
//!
//! **Missed slots.** A schedule seen for the first time starts with its next slot (nothing
//! from the past runs). After downtime (no scheduler ran while one or more slots passed),
//! the next tick enqueues **only the most recent missed slot, once**; older missed slots are
//! skipped and logged. A nightly report that missed three nights runs once, not three times
//! in a burst.
//!
//! **Time.** Slots are computed from the queue's clock ([`Queue::now_ms`]), so a
//! [`ManualClock`](crate::ManualClock) drives them in tests. Cron expressions are evaluated in
//! UTC; intervals are aligned to the Unix epoch (an hourly interval fires on the hour, in
//! every process alike).

use std::collections::HashSet;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{select, Receiver, Sender};
use serde::Serialize;

use super::periodic::Periodic;
use super::stored::{report_once, stored_periodics, Reported};
use crate::error::{Error, ErrorKind, Result};
use crate::job::NewJob;
use crate::queue::events::Event;
use crate::Queue;

/// The longest a scheduler thread sleeps before looking at the clock again, so a wall-clock
/// jump (NTP, suspend) delays a slot by at most this much.
const MAX_SLEEP_MS: i64 = 60_000;

/// How often a scheduler that runs stored schedules looks at them (a read), so that one
/// added, changed or removed by another process counts within this long.
const STORED_LOOK_MS: i64 = 5_000;

/// One slot a tick enqueued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EnqueuedSlot {
    /// The schedule's name.
    pub name: String,
    /// The slot's time (ms since the Unix epoch).
    pub slot_ms: i64,
    /// The job enqueued for it.
    pub job_id: i64,
    /// True when slots before this one were missed and skipped (downtime).
    pub skipped_earlier: bool,
}

/// What one [`Scheduler::tick`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TickReport {
    /// Slots enqueued by this tick (by this scheduler, not another).
    pub enqueued: Vec<EnqueuedSlot>,
    /// The earliest next slot of any schedule (ms), when the next tick is worth it.
    pub next_slot_at: Option<i64>,
}

/// Enqueues the slots of periodic schedules that are due by the queue's clock.
///
/// A worker runs one in a thread for the schedules given to
/// [`WorkerBuilder::periodic`](crate::WorkerBuilder::periodic). Tests (and programs with
/// their own timer) call [`tick`](Scheduler::tick) directly; several schedulers on one file
/// enqueue each slot once between them.
///
/// ```
/// use litejobs::{ManualClock, NewJob, Queue};
/// use litejobs::maintenance::{Periodic, Scheduler};
/// use serde_json::json;
/// use std::time::Duration;
/// # fn main() -> litejobs::Result<()> {
/// let clock = ManualClock::new(1_700_000_000_000);
/// let queue = Queue::builder().clock(clock.clone()).open_in_memory()?;
/// let hourly = Periodic::every(Duration::from_secs(3600), NewJob::new("tick", json!({})))?;
/// let scheduler = Scheduler::new(&queue, vec![hourly])?;
/// assert!(scheduler.tick()?.enqueued.is_empty()); // a new schedule starts with its next slot
/// clock.advance(Duration::from_secs(3600));
/// assert_eq!(scheduler.tick()?.enqueued.len(), 1);
/// assert!(scheduler.tick()?.enqueued.is_empty()); // once per slot
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Scheduler {
    queue: Queue,
    periodics: Vec<Periodic>,
    /// Also runs the schedules kept in the database ([`Scheduler::with_stored_schedules`]).
    stored: bool,
    reported: Reported,
}

impl Scheduler {
    /// A scheduler for `periodics` on `queue`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] when two schedules share a name;
    /// [`ErrorKind::InvalidJob`](crate::ErrorKind::InvalidJob) when a schedule's slot field
    /// cannot go into its payload (not a JSON object).
    pub fn new(queue: &Queue, periodics: Vec<Periodic>) -> Result<Scheduler> {
        let mut seen = HashSet::new();
        for p in &periodics {
            if p.name.trim().is_empty() {
                return Err(Error::invalid_config("periodic schedule name is empty"));
            }
            if !seen.insert(p.name.as_str()) {
                return Err(Error::invalid_config(format!(
                    "two periodic schedules are named {:?}; give one another name with .named()",
                    p.name
                )));
            }
            // A template its slot field cannot go into would fail at every slot: refused at
            // the start instead (the payload never changes).
            p.job_for(0).map(drop)?;
        }
        Ok(Scheduler {
            queue: queue.clone(),
            periodics,
            stored: false,
            reported: Reported::default(),
        })
    }

    /// Also runs the schedules kept in the database ([`Queue::add_schedule`], `litejobs
    /// schedule add`): each tick reads them, and enqueues their due slots with the others.
    /// A stored schedule named like one of this scheduler's own is left out (logged).
    pub fn with_stored_schedules(mut self) -> Scheduler {
        self.stored = true;
        self
    }

    /// The time (ms) of the earliest slot of any schedule, the stored ones as they are
    /// now (a read): now when one is due.
    fn next_due(&self) -> Result<Option<i64>> {
        let now = self.queue.now_ms();
        let stored = self.queue.db().read(|tx| {
            Ok(stored_periodics(tx, &self.periodics, &self.reported)?
                .iter()
                .filter_map(|(p, row)| {
                    let last = row.last_slot_at;
                    if p.latest_slot(last, now).is_some() {
                        Some(now)
                    } else {
                        p.next_slot_after(last.max(now))
                    }
                })
                .min())
        })?;
        let own = self
            .periodics
            .iter()
            .filter_map(|p| p.next_slot_after(now))
            .min();
        Ok(stored.into_iter().chain(own).min())
    }

    /// Enqueues every slot due by the queue's clock, in one write transaction, and says when
    /// the next one is due. Idempotent: a second tick at the same time enqueues nothing, in
    /// this process or another.
    ///
    /// # Errors
    /// Database errors ([`ErrorKind::Busy`], ...); nothing was enqueued then.
    pub fn tick(&self) -> Result<TickReport> {
        let now = self.queue.now_ms();
        let (enqueued, stored) = self.queue.db().write(|tx| {
            let stored = if self.stored {
                stored_periodics(tx, &self.periodics, &self.reported)?
            } else {
                Vec::new()
            };
            let mut enqueued = Vec::new();
            let own = self.periodics.iter().map(|p| (p, None));
            for (p, read) in own.chain(stored.iter().map(|(p, row)| (p, Some(row)))) {
                tx.lock_key(&format!("periodic:{}", p.name))?;
                let (schedule, last) = match read {
                    None => {
                        let schedule = p.describe();
                        let Some(last) = tx.last_slot(&p.name)? else {
                            tx.insert_baseline(
                                &p.name,
                                &schedule,
                                now,
                                p.next_slot_after(now),
                                now,
                            )?;
                            continue;
                        };
                        (schedule, last)
                    }
                    // Under the lock, a stored schedule is read again: one replaced or
                    // removed since the list was read is left to the next tick, which reads
                    // it as it is now (never a baseline for it: that would make a code
                    // schedule of it). Its text is written back as it was given.
                    Some(read) => match tx.schedule(&p.name)? {
                        Some(row) if row.schedule == read.schedule && row.job == read.job => {
                            (row.schedule, row.last_slot_at)
                        }
                        _ => continue,
                    },
                };
                let Some(slot) = p.latest_slot(last, now) else {
                    tx.set_next_slot(&p.name, &schedule, p.next_slot_after(last.max(now)), now)?;
                    continue;
                };
                let skipped_earlier = p.next_slot_after(last).is_some_and(|first| first < slot);
                let job_id = match p.job_for(slot).and_then(|job| self.queue.enqueue_on(tx, job)) {
                    Ok(id) => Some(id),
                    // A stored schedule this worker cannot enqueue now (its job type is
                    // marked encrypted and this worker holds no key): logged once, and left
                    // due for a worker that can, without holding up the other schedules.
                    Err(e) if read.is_some() && e.kind() == ErrorKind::InvalidConfig => {
                        report_once(
                            &self.reported,
                            &format!("{}\u{0}{e}", p.name),
                            &format!("litejobs: stored schedule {:?} not enqueued here: {e}", p.name),
                        );
                        continue;
                    }
                    // A template the queue refuses (e.g. over its payload limit) would be
                    // refused at every slot: log it, and count the slot as handled.
                    Err(e) if e.kind() == ErrorKind::InvalidJob => {
                        log::error!("litejobs: periodic {:?} slot {slot} not enqueued: {e}", p.name);
                        None
                    }
                    Err(e) => return Err(e),
                };
                let next = p.next_slot_after(slot.max(now));
                if !tx.advance_schedule(&p.name, &schedule, slot, job_id, next, now)? {
                    continue;
                }
                if skipped_earlier {
                    log::info!(
                        "litejobs: periodic {:?} missed slots between {last} and {slot} ms while no \
                         scheduler ran; enqueued only the latest",
                        p.name
                    );
                }
                if let Some(job_id) = job_id {
                    enqueued.push(EnqueuedSlot {
                        name: p.name.clone(),
                        slot_ms: slot,
                        job_id,
                        skipped_earlier,
                    });
                }
            }
            Ok((enqueued, stored))
        })?;
        let all = || self.periodics.iter().chain(stored.iter().map(|(p, _)| p));
        let jobs: Vec<(i64, &NewJob)> = enqueued
            .iter()
            .filter_map(|slot| {
                let p = all().find(|p| p.name == slot.name)?;
                Some((slot.job_id, &p.job))
            })
            .collect();
        self.queue.after_enqueue(&jobs);
        let next_slot_at = all().filter_map(|p| p.next_slot_after(now)).min();
        Ok(TickReport {
            enqueued,
            next_slot_at,
        })
    }
}

/// A worker's scheduler thread; stopped and joined by [`SchedulerThread::stop`].
#[derive(Debug)]
pub(crate) struct SchedulerThread {
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

impl SchedulerThread {
    /// Starts a thread that ticks `periodics` (and the schedules kept in the database, with
    /// `stored`) at each slot; `None` when there is nothing to run.
    pub(crate) fn start(
        queue: &Queue,
        periodics: Vec<Periodic>,
        stored: bool,
    ) -> Result<Option<SchedulerThread>> {
        if periodics.is_empty() && !stored {
            return Ok(None);
        }
        let mut scheduler = Scheduler::new(queue, periodics)?;
        if stored {
            scheduler = scheduler.with_stored_schedules();
        }
        let (stop, stopped) = crossbeam_channel::bounded(1);
        // Woken by in-process enqueues and `Queue::notify` too, so a test that moves a
        // ManualClock can make it look at once; a woken scheduler that finds nothing due
        // does no database work.
        let wake = queue.wake_list().register();
        let handle = std::thread::Builder::new()
            .name("litejobs-scheduler".to_string())
            .spawn(move || run(&scheduler, &stopped, &wake))?;
        Ok(Some(SchedulerThread { stop, handle }))
    }

    /// Stops the thread (after its current tick) and waits for it.
    pub(crate) fn stop(self) {
        let _ = self.stop.send(());
        if self.handle.join().is_err() {
            log::error!("litejobs: the scheduler thread panicked");
        }
    }
}

fn run(scheduler: &Scheduler, stopped: &Receiver<()>, wake: &Receiver<()>) {
    let mut next_due = i64::MIN;
    let mut next_look = i64::MIN;
    let mut failures: u32 = 0;
    loop {
        let now = scheduler.queue.now_ms();
        if scheduler.stored && failures == 0 && now >= next_look && now < next_due {
            // Another process may have added, changed or removed a stored schedule: a read
            // says whether one is due, and only then does a tick write.
            next_look = now.saturating_add(STORED_LOOK_MS);
            match scheduler.next_due() {
                Ok(due) => next_due = next_due.min(due.unwrap_or(i64::MAX)),
                Err(e) => log::debug!("litejobs: looking at the stored schedules failed ({e})"),
            }
        }
        if now >= next_due {
            match scheduler.tick() {
                Ok(report) => {
                    failures = 0;
                    next_due = report.next_slot_at.unwrap_or(i64::MAX);
                }
                Err(e) => {
                    // Nothing of the tick was written: the same slots are tried again.
                    failures = failures.saturating_add(1);
                    let backoff = 250i64 << failures.min(8);
                    // A server that is away is logged once per outage, where it failed.
                    if e.kind() != ErrorKind::Unavailable {
                        log::warn!(
                            "litejobs: periodic scheduler tick failed ({e}); retrying in \
                             {backoff} ms"
                        );
                    }
                    scheduler.queue.events().send(Event::PeriodicTickFailed {
                        error: e.to_string(),
                        retry_in: Duration::from_millis(backoff as u64),
                    });
                    next_due = now.saturating_add(backoff);
                }
            }
        }
        // After a failed tick, only its back-off counts: a look would find the same slot
        // due and undo it.
        let until = if scheduler.stored && failures == 0 {
            next_due.min(next_look)
        } else {
            next_due
        };
        let wait_ms = until
            .saturating_sub(scheduler.queue.now_ms())
            .clamp(1, MAX_SLEEP_MS);
        select! {
            recv(stopped) -> _ => return,
            recv(wake) -> _ => {},
            default(Duration::from_millis(wait_ms as u64)) => {},
        }
    }
}
