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

use chrono::{DateTime, Utc};
use crossbeam_channel::{select, Receiver, Sender};
use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};
use crate::job::{validate, NewJob, Payload, DEFAULT_MAX_PAYLOAD_BYTES};
use crate::queue::events::Event;
use crate::system::clock::duration_to_ms;
use crate::Queue;

/// The shortest interval [`Periodic::every`] accepts.
pub const MIN_PERIODIC_INTERVAL: Duration = Duration::from_secs(1);

/// The longest a scheduler thread sleeps before looking at the clock again, so a wall-clock
/// jump (NTP, suspend) delays a slot by at most this much.
const MAX_SLEEP_MS: i64 = 60_000;

/// Search windows (ms) for the latest cron slot at or before now, smallest first: the first
/// window holding a slot bounds the forward walk to a few steps.
const CRON_WINDOWS_MS: [i64; 7] = [
    2_000,
    120_000,
    7_200_000,
    172_800_000,
    5_356_800_000,
    63_244_800_000,
    316_224_000_000,
];

/// Steps of one forward walk over cron slots at most.
const CRON_WALK_CAP: usize = 100_000;

/// When a periodic job runs: a cron expression or a fixed interval.
#[derive(Debug, Clone)]
enum Spec {
    Cron {
        cron: Box<croner::Cron>,
        expression: String,
    },
    Every {
        interval_ms: i64,
    },
}

/// A job enqueued on a schedule: once per slot, even with several schedulers on one file.
/// Register it on a worker with [`WorkerBuilder::periodic`](crate::WorkerBuilder::periodic).
///
/// ```
/// use litejobs::NewJob;
/// use litejobs::maintenance::Periodic;
/// use serde_json::json;
/// use std::time::Duration;
/// # fn main() -> litejobs::Result<()> {
/// // Every night at 02:00 UTC.
/// let nightly = Periodic::cron("0 2 * * *", NewJob::new("nightly_report", json!({})))?;
/// assert_eq!(nightly.name(), "nightly_report");
/// // Every 15 minutes, on the quarter hour, under its own name.
/// let sync = Periodic::every(Duration::from_secs(900), NewJob::new("sync", json!({})))?
///     .named("crm_sync");
/// assert_eq!(sync.next_slot_after(1_000), Some(900_000));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a Periodic does nothing until registered with WorkerBuilder::periodic"]
pub struct Periodic {
    name: String,
    spec: Spec,
    job: NewJob,
    slot_field: Option<String>,
}

impl Periodic {
    /// A job on a cron schedule: standard five fields (minute, hour, day of month, month, day
    /// of week), or six with seconds first; evaluated in UTC. The schedule's name is the job
    /// type until [`named`](Periodic::named) says otherwise.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] naming the expression when it does not parse or never
    /// matches; [`ErrorKind::InvalidJob`] when the template is not a valid job.
    pub fn cron(expression: &str, job: NewJob) -> Result<Periodic> {
        let cron = croner::Cron::new(expression)
            .with_seconds_optional()
            .parse()
            .map_err(|e| {
                Error::invalid_config(format!("cron expression {expression:?} is invalid: {e}"))
            })?;
        let periodic = Periodic::with_spec(
            Spec::Cron {
                cron: Box::new(cron),
                expression: expression.to_string(),
            },
            job,
        )?;
        if periodic.next_slot_after(0).is_none() {
            return Err(Error::invalid_config(format!(
                "cron expression {expression:?} never matches a time"
            )));
        }
        Ok(periodic)
    }

    /// A job every `interval` (at least [`MIN_PERIODIC_INTERVAL`]), on multiples of the
    /// interval since the Unix epoch, so every process agrees on the slots.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] for an interval under a second;
    /// [`ErrorKind::InvalidJob`] when the template is not a valid job.
    pub fn every(interval: Duration, job: NewJob) -> Result<Periodic> {
        if interval < MIN_PERIODIC_INTERVAL {
            return Err(Error::invalid_config(format!(
                "periodic interval must be at least 1 s, got {interval:?}"
            )));
        }
        Periodic::with_spec(
            Spec::Every {
                interval_ms: duration_to_ms(interval),
            },
            job,
        )
    }

    fn with_spec(spec: Spec, job: NewJob) -> Result<Periodic> {
        validate(&job, DEFAULT_MAX_PAYLOAD_BYTES)
            .map_err(|e| e.prefixed("periodic job template"))?;
        Ok(Periodic {
            name: job.job_type.clone(),
            spec,
            job,
            slot_field: None,
        })
    }

    /// Names the schedule (its row in `periodic_schedules` and its idempotency keys).
    /// Defaults to the job type; two schedules of one job type need different names.
    pub fn named(mut self, name: impl Into<String>) -> Periodic {
        self.name = name.into();
        self
    }

    /// Writes the slot time (ms since the Unix epoch) into the payload under `field`, so the
    /// job knows which slot it runs for (e.g. which night to report on). A dotted field
    /// (`params.night_ms`) goes into nested objects, created when missing. The payload must be
    /// a JSON object. Off by default.
    pub fn slot_field(mut self, field: impl Into<String>) -> Periodic {
        self.slot_field = Some(field.into());
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schedule as people write it: the cron expression, or `every <n> ms`.
    pub fn describe(&self) -> String {
        match &self.spec {
            Spec::Cron { expression, .. } => expression.clone(),
            Spec::Every { interval_ms } => format!("every {interval_ms} ms"),
        }
    }

    /// The first slot strictly after `ms` (ms since the Unix epoch), or `None` when there is
    /// none (a cron expression with no future match).
    pub fn next_slot_after(&self, ms: i64) -> Option<i64> {
        match &self.spec {
            Spec::Every { interval_ms } => {
                let d = *interval_ms;
                ms.div_euclid(d).checked_add(1)?.checked_mul(d)
            }
            Spec::Cron { cron, .. } => cron_next_after(cron, ms),
        }
    }

    /// The latest slot in `(after, now]`, if any.
    fn latest_slot(&self, after: i64, now: i64) -> Option<i64> {
        match &self.spec {
            Spec::Every { interval_ms } => {
                let slot = now.div_euclid(*interval_ms) * interval_ms;
                (slot > after).then_some(slot)
            }
            Spec::Cron { cron, .. } => cron_latest(cron, after, now),
        }
    }

    /// The job of one slot: the template with the slot's idempotency key (and slot field).
    fn job_for(&self, slot: i64) -> Result<NewJob> {
        let mut job = self.job.clone();
        job.idempotency_key = Some(format!("periodic:{}:{slot}", self.name));
        if let Some(field) = &self.slot_field {
            let mut payload = match &job.payload {
                Payload::Value(v) => v.clone(),
                Payload::Text(t) => serde_json::from_str(t).map_err(|e| {
                    Error::invalid_job(format!("periodic job template payload: {e}"))
                })?,
            };
            let not_object = || {
                Error::invalid_job(format!(
                    "periodic {:?}: slot_field {field:?} needs a JSON object payload",
                    self.name
                ))
            };
            let mut target = &mut payload;
            let mut parts = field.split('.').peekable();
            while let Some(part) = parts.next() {
                let object = target.as_object_mut().ok_or_else(not_object)?;
                if parts.peek().is_none() {
                    object.insert(part.to_string(), serde_json::Value::from(slot));
                    break;
                }
                target = object
                    .entry(part.to_string())
                    .or_insert_with(|| serde_json::Value::Object(Default::default()));
            }
            job.payload = Payload::Value(payload);
        }
        Ok(job)
    }
}

fn to_utc(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}

/// The first cron slot strictly after `ms`. Slots are whole seconds, so `ms` is floored to
/// its second and the search starts after it.
fn cron_next_after(cron: &croner::Cron, ms: i64) -> Option<i64> {
    let start = to_utc(ms.div_euclid(1000) * 1000)?;
    cron.find_next_occurrence(&start, false)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// The latest cron slot in `(after, now]`: croner only searches forward, so walk forward from
/// the smallest window before `now` that holds a slot.
fn cron_latest(cron: &croner::Cron, after: i64, now: i64) -> Option<i64> {
    let first = cron_next_after(cron, after)?;
    if first > now {
        return None;
    }
    let starts = CRON_WINDOWS_MS
        .iter()
        .map(|w| now.saturating_sub(*w))
        .filter(|start| *start > after)
        .chain(std::iter::once(after));
    for start in starts {
        let Some(mut latest) = cron_next_after(cron, start) else {
            continue;
        };
        if latest > now {
            continue;
        }
        for _ in 0..CRON_WALK_CAP {
            match cron_next_after(cron, latest) {
                Some(next) if next <= now => latest = next,
                _ => break,
            }
        }
        return Some(latest);
    }
    Some(first)
}

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

/// A schedule's stored state, shared by every process: see [`Queue::periodic_schedules`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ScheduleState {
    /// The schedule's name.
    pub name: String,
    /// The cron expression or interval.
    pub schedule: String,
    /// Slots up to this time (ms) are handled.
    pub last_slot_at: i64,
    /// The job enqueued for the latest slot.
    pub last_job_id: Option<i64>,
    /// The next slot (ms), as of the last tick.
    pub next_slot_at: Option<i64>,
    /// When a scheduler last changed the row (ms).
    pub updated_at: i64,
}

impl Queue {
    /// The stored state of every periodic schedule any process registered, by name.
    pub fn periodic_schedules(&self) -> Result<Vec<ScheduleState>> {
        let rows = self.db().read(|tx| tx.schedules())?;
        Ok(rows
            .into_iter()
            .map(|r| ScheduleState {
                name: r.name,
                schedule: r.schedule,
                last_slot_at: r.last_slot_at,
                last_job_id: r.last_job_id,
                next_slot_at: r.next_slot_at,
                updated_at: r.updated_at,
            })
            .collect())
    }
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
}

impl Scheduler {
    /// A scheduler for `periodics` on `queue`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] when two schedules share a name.
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
        }
        Ok(Scheduler {
            queue: queue.clone(),
            periodics,
        })
    }

    /// Enqueues every slot due by the queue's clock, in one write transaction, and says when
    /// the next one is due. Idempotent: a second tick at the same time enqueues nothing, in
    /// this process or another.
    ///
    /// # Errors
    /// Database errors ([`ErrorKind::Busy`], ...); nothing was enqueued then.
    pub fn tick(&self) -> Result<TickReport> {
        let now = self.queue.now_ms();
        let enqueued = self.queue.db().write(|tx| {
            let mut enqueued = Vec::new();
            for p in &self.periodics {
                tx.lock_key(&format!("periodic:{}", p.name))?;
                let schedule = p.describe();
                let Some(last) = tx.last_slot(&p.name)? else {
                    tx.insert_baseline(&p.name, &schedule, now, p.next_slot_after(now), now)?;
                    continue;
                };
                let Some(slot) = p.latest_slot(last, now) else {
                    tx.set_next_slot(&p.name, &schedule, p.next_slot_after(last.max(now)), now)?;
                    continue;
                };
                let skipped_earlier = p.next_slot_after(last).is_some_and(|first| first < slot);
                let job_id = match p.job_for(slot).and_then(|job| self.queue.enqueue_on(tx, job)) {
                    Ok(id) => Some(id),
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
            Ok(enqueued)
        })?;
        let jobs: Vec<(i64, &NewJob)> = enqueued
            .iter()
            .filter_map(|slot| {
                let p = self.periodics.iter().find(|p| p.name == slot.name)?;
                Some((slot.job_id, &p.job))
            })
            .collect();
        self.queue.after_enqueue(&jobs);
        let next_slot_at = self
            .periodics
            .iter()
            .filter_map(|p| p.next_slot_after(now))
            .min();
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
    /// Starts a thread that ticks `periodics` at each slot; `None` when there are none.
    pub(crate) fn start(
        queue: &Queue,
        periodics: Vec<Periodic>,
    ) -> Result<Option<SchedulerThread>> {
        if periodics.is_empty() {
            return Ok(None);
        }
        let scheduler = Scheduler::new(queue, periodics)?;
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
    let mut failures: u32 = 0;
    loop {
        let now = scheduler.queue.now_ms();
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
        let wait_ms = next_due
            .saturating_sub(scheduler.queue.now_ms())
            .clamp(1, MAX_SLEEP_MS);
        select! {
            recv(stopped) -> _ => return,
            recv(wake) -> _ => {},
            default(Duration::from_millis(wait_ms as u64)) => {},
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HOUR: i64 = 3_600_000;
    const DAY: i64 = 24 * HOUR;
    /// 2023-11-14T00:00:00Z.
    const MIDNIGHT: i64 = 1_699_920_000_000;

    fn nightly() -> Periodic {
        Periodic::cron("0 2 * * *", NewJob::new("nightly", json!({}))).expect("valid cron")
    }

    #[test]
    fn cron_slots_are_utc_times_of_the_expression() {
        let p = nightly();
        assert_eq!(p.next_slot_after(MIDNIGHT), Some(MIDNIGHT + 2 * HOUR));
        assert_eq!(
            p.next_slot_after(MIDNIGHT + 2 * HOUR),
            Some(MIDNIGHT + DAY + 2 * HOUR)
        );
        assert_eq!(
            p.next_slot_after(MIDNIGHT + 2 * HOUR - 1),
            Some(MIDNIGHT + 2 * HOUR)
        );
    }

    #[test]
    fn latest_cron_slot_after_long_downtime_is_the_most_recent_one() {
        let p = nightly();
        let now = MIDNIGHT + 30 * DAY + 5 * HOUR;
        assert_eq!(
            p.latest_slot(MIDNIGHT, now),
            Some(MIDNIGHT + 30 * DAY + 2 * HOUR)
        );
        assert_eq!(p.latest_slot(MIDNIGHT + 30 * DAY + 2 * HOUR, now), None);
        let every_second =
            Periodic::cron("* * * * * *", NewJob::new("s", json!({}))).expect("cron");
        let now = MIDNIGHT + 400 * DAY + 1_500;
        assert_eq!(
            every_second.latest_slot(MIDNIGHT, now),
            Some(MIDNIGHT + 400 * DAY + 1_000)
        );
    }

    #[test]
    fn interval_slots_are_aligned_to_the_epoch() {
        let p =
            Periodic::every(Duration::from_secs(3600), NewJob::new("h", json!({}))).expect("every");
        assert_eq!(p.next_slot_after(MIDNIGHT + 1), Some(MIDNIGHT + HOUR));
        assert_eq!(
            p.latest_slot(MIDNIGHT, MIDNIGHT + 5 * HOUR + 7),
            Some(MIDNIGHT + 5 * HOUR)
        );
        assert_eq!(
            p.latest_slot(MIDNIGHT + 5 * HOUR, MIDNIGHT + 5 * HOUR + 7),
            None
        );
    }

    #[test]
    fn bad_schedules_are_refused_with_the_value() {
        let err = Periodic::cron("61 * * * *", NewJob::new("x", json!({}))).err();
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("\"61 * * * *\""), "{msg}");
        let err = Periodic::every(Duration::from_millis(10), NewJob::new("x", json!({}))).err();
        assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::InvalidConfig));
        let err = Periodic::cron("0 0 31 2 *", NewJob::new("x", json!({}))).err();
        assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::InvalidConfig));
    }
}
