//! A periodic schedule: a cron expression or a fixed interval, and the job each of its slots
//! enqueues ([`Periodic`]). The [`Scheduler`](super::Scheduler) enqueues the slots.
//!
//! **Time.** Slots are computed from the queue's clock ([`Queue::now_ms`](crate::Queue::now_ms)),
//! so a [`ManualClock`](crate::ManualClock) drives them in tests. Cron expressions are
//! evaluated in UTC; intervals are aligned to the Unix epoch (an hourly interval fires on the
//! hour, in every process alike).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::job::{validate, NewJob, Payload, DEFAULT_MAX_PAYLOAD_BYTES};
use crate::system::clock::duration_to_ms;

/// The shortest interval [`Periodic::every`] accepts.
pub const MIN_PERIODIC_INTERVAL: Duration = Duration::from_secs(1);

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
        /// As people wrote it ([`Periodic::parse`]: `every 15m`), kept for display.
        text: Option<String>,
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
    pub(super) name: String,
    spec: Spec,
    pub(super) job: NewJob,
    pub(super) slot_field: Option<String>,
}

impl Periodic {
    /// A job on a cron schedule: standard five fields (minute, hour, day of month, month, day
    /// of week), or six with seconds first; evaluated in UTC. The schedule's name is the job
    /// type until [`named`](Periodic::named) says otherwise.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the expression when it does not parse or never
    /// matches; [`ErrorKind::InvalidJob`](crate::ErrorKind::InvalidJob) when the template is not a valid job.
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

    /// A job on a schedule as people write it: `every <duration>` (`every 15m`, `every
    /// 900000 ms`, as [`describe`](Periodic::describe) writes it) or a cron expression (as
    /// [`Periodic::cron`]).
    ///
    /// # Errors
    /// As [`Periodic::cron`] and [`Periodic::every`]; an interval that does not parse names
    /// the forms expected.
    pub fn parse(schedule: &str, job: NewJob) -> Result<Periodic> {
        let text = schedule.trim();
        let Some(interval) = text.strip_prefix("every ") else {
            // The cron crate's own words ("Pattern must consist of five or six fields") say
            // nothing of the other form, nor of UTC.
            return Periodic::cron(text, job).map_err(|e| {
                if e.kind() != crate::ErrorKind::InvalidConfig {
                    return e;
                }
                Error::invalid_config(format!(
                    "{}; a schedule is a cron expression in UTC (five fields, or six with \
                     seconds first; no time zone) or `every <duration>` such as `every 15m`",
                    e.to_string().trim_end_matches('.')
                ))
            });
        };
        let interval = interval.trim();
        let parsed = match interval
            .strip_suffix(" ms")
            .map(|n| n.trim().parse::<u64>())
        {
            Some(Ok(ms)) => Ok(Duration::from_millis(ms)),
            _ => crate::human::parse_duration(interval),
        };
        let duration = parsed.map_err(|e| {
            Error::invalid_config(format!(
                "schedule {schedule:?}: {e} (or give a cron expression)"
            ))
        })?;
        let mut periodic = Periodic::every(duration, job)?;
        if let Spec::Every { text, .. } = &mut periodic.spec {
            *text = Some(format!("every {interval}"));
        }
        Ok(periodic)
    }

    /// A job every `interval` (at least [`MIN_PERIODIC_INTERVAL`]), on multiples of the
    /// interval since the Unix epoch, so every process agrees on the slots.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for an interval under a second;
    /// [`ErrorKind::InvalidJob`](crate::ErrorKind::InvalidJob) when the template is not a valid job.
    pub fn every(interval: Duration, job: NewJob) -> Result<Periodic> {
        if interval < MIN_PERIODIC_INTERVAL {
            return Err(Error::invalid_config(format!(
                "periodic interval must be at least 1 s, got {interval:?}"
            )));
        }
        Periodic::with_spec(
            Spec::Every {
                interval_ms: duration_to_ms(interval),
                text: None,
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
    /// a JSON object: a worker given a schedule whose payload is not refuses to start
    /// ([`ErrorKind::InvalidJob`](crate::ErrorKind::InvalidJob)). Off by default.
    pub fn slot_field(mut self, field: impl Into<String>) -> Periodic {
        self.slot_field = Some(field.into());
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schedule as people write it: the cron expression, or the interval as
    /// [`Periodic::parse`] was given it (`every 15m`), else `every <n> ms`.
    pub fn describe(&self) -> String {
        match &self.spec {
            Spec::Cron { expression, .. } => expression.clone(),
            Spec::Every {
                text: Some(text), ..
            } => text.clone(),
            Spec::Every { interval_ms, .. } => format!("every {interval_ms} ms"),
        }
    }

    /// The first slot strictly after `ms` (ms since the Unix epoch), or `None` when there is
    /// none (a cron expression with no future match).
    pub fn next_slot_after(&self, ms: i64) -> Option<i64> {
        match &self.spec {
            Spec::Every { interval_ms, .. } => {
                let d = *interval_ms;
                ms.div_euclid(d).checked_add(1)?.checked_mul(d)
            }
            Spec::Cron { cron, .. } => cron_next_after(cron, ms),
        }
    }

    /// The latest slot in `(after, now]`, if any.
    pub(super) fn latest_slot(&self, after: i64, now: i64) -> Option<i64> {
        match &self.spec {
            Spec::Every { interval_ms, .. } => {
                let slot = now.div_euclid(*interval_ms) * interval_ms;
                (slot > after).then_some(slot)
            }
            Spec::Cron { cron, .. } => cron_latest(cron, after, now),
        }
    }

    /// The job of one slot: the template with the slot's idempotency key (and slot field).
    pub(super) fn job_for(&self, slot: i64) -> Result<NewJob> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
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
