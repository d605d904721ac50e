//! Schedules kept in the database rather than in a worker's code: added by `litejobs
//! schedule add`, [`Queue::add_schedule`] or a row another program inserts into
//! `periodic_schedules`, and run by every worker that runs stored schedules
//! ([`WorkerBuilder::stored_schedules`](crate::WorkerBuilder::stored_schedules); `litejobs
//! work` does), once per slot between them, exactly as a worker's own [`Periodic`]s.
//!
//! A stored schedule keeps its job's type, payload, queue, priority and attempts; a job
//! that needs more (a timeout, a group key, a deadline, the slot in its payload) is a
//! [`Periodic`] in a worker's code.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::periodic::Periodic;
use crate::error::{Error, ErrorKind, Result};
use crate::job::{NewJob, Payload, DEFAULT_QUEUE};
use crate::storage::periodic::{PeriodicStore, ScheduleRow, StoredJobRow, StoredSchedule};
use crate::Queue;

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
    /// The job of a schedule kept in the database ([`Queue::add_schedule`]); `None` for
    /// one a worker's code defines ([`WorkerBuilder::periodic`](crate::WorkerBuilder::periodic)).
    pub job: Option<StoredJob>,
}

impl Queue {
    /// The stored state of every periodic schedule, by name: those any worker's code
    /// registered, and those kept in the database ([`Queue::add_schedule`]).
    pub fn periodic_schedules(&self) -> Result<Vec<ScheduleState>> {
        let rows = self.db().read(|tx| tx.schedules())?;
        Ok(rows.into_iter().map(ScheduleState::from).collect())
    }
}

/// The job a schedule kept in the database enqueues at each slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct StoredJob {
    /// The job type.
    pub job_type: String,
    /// The payload, as JSON text.
    pub payload: String,
    /// The queue.
    pub queue: String,
    /// The priority (higher runs first).
    pub priority: i64,
    /// Attempts before the job is dead.
    pub max_attempts: i64,
}

impl From<StoredJobRow> for StoredJob {
    fn from(row: StoredJobRow) -> StoredJob {
        StoredJob {
            job_type: row.job_type,
            payload: row.payload,
            queue: row.queue,
            priority: row.priority,
            max_attempts: row.max_attempts,
        }
    }
}

impl From<ScheduleRow> for ScheduleState {
    fn from(r: ScheduleRow) -> ScheduleState {
        ScheduleState {
            name: r.name,
            schedule: r.schedule,
            last_slot_at: r.last_slot_at,
            last_job_id: r.last_job_id,
            next_slot_at: r.next_slot_at,
            updated_at: r.updated_at,
            job: r.job.map(StoredJob::from),
        }
    }
}

impl Periodic {
    /// The job as a stored schedule keeps it. Refused ([`ErrorKind::InvalidJob`]) when the
    /// schedule or its job carries what is not kept.
    fn stored_job(&self) -> Result<StoredJobRow> {
        let job = &self.job;
        let not_kept = [
            (self.slot_field.is_some(), "a slot field"),
            (job.run_at.is_some(), "a delay or run time"),
            (job.timeout_ms.is_some(), "a timeout"),
            (job.idempotency_key.is_some(), "an idempotency key"),
            (job.group_key.is_some(), "a group key"),
            (job.expires.is_some(), "a deadline"),
            (
                job.encrypted,
                "encryption (mark the job type with `litejobs keys encrypt-type`)",
            ),
            (
                !job.after.is_empty() || job.extra_waits > 0,
                "waits for other jobs",
            ),
        ];
        if let Some((_, what)) = not_kept.iter().find(|(set, _)| *set) {
            return Err(Error::invalid_job(format!(
                "schedule {:?}: a schedule kept in the database keeps its job's type, payload, \
                 queue, priority and attempts, not {what}; give such a schedule in a worker's \
                 code (WorkerBuilder::periodic)",
                self.name
            )));
        }
        // Checked JSON already: a Periodic's template went through `validate` when it was made.
        let payload = match &job.payload {
            Payload::Value(v) => v.to_string(),
            Payload::Text(t) => t.clone(),
        };
        Ok(StoredJobRow {
            job_type: job.job_type.clone(),
            payload,
            queue: job.queue.clone(),
            priority: job.priority,
            max_attempts: job.max_attempts,
            defect: None,
        })
    }

    /// The [`Periodic`] of a schedule kept in the database.
    fn from_stored(name: &str, schedule: &str, job: &StoredJobRow) -> Result<Periodic> {
        if let Some(defect) = &job.defect {
            return Err(Error::invalid_job(defect.clone()));
        }
        let max_attempts = u32::try_from(job.max_attempts).map_err(|_| {
            Error::invalid_job(format!("max_attempts {} is out of range", job.max_attempts))
        })?;
        let template = NewJob::from_json_text(&job.job_type, &job.payload)
            .queue(if job.queue.is_empty() {
                DEFAULT_QUEUE
            } else {
                &job.queue
            })
            .priority(job.priority)
            .max_attempts(max_attempts);
        // `parse` checks the template as every Periodic's: a payload that is not JSON is
        // refused there.
        Ok(Periodic::parse(schedule, template)?.named(name))
    }
}

/// The schedules kept in the database, as [`Periodic`]s with their rows as read, except
/// those named by a worker's own schedules (`code`): a row that cannot run (a cron
/// expression another program wrote wrong, a number stored as text) is logged once per
/// scheduler (`reported`) and left out.
pub(crate) fn stored_periodics<T: PeriodicStore + ?Sized>(
    tx: &T,
    code: &[Periodic],
    reported: &Mutex<HashSet<String>>,
) -> Result<Vec<(Periodic, ScheduleRow)>> {
    let mut periodics = Vec::new();
    for row in tx.schedules()? {
        let Some(job) = &row.job else { continue };
        let problem = if code.iter().any(|p| p.name() == row.name) {
            Err(format!(
                "a worker's code defines a schedule of that name too; the worker's runs (rename \
                 one: `litejobs schedule remove {}`)",
                row.name
            ))
        } else {
            Periodic::from_stored(&row.name, &row.schedule, job).map_err(|e| e.to_string())
        };
        match problem {
            Ok(p) => periodics.push((p, row)),
            Err(why) => report_once(
                reported,
                &format!("{}\u{0}{}\u{0}{job:?}", row.name, row.schedule),
                &format!(
                    "litejobs: stored schedule {:?} does not run: {why}",
                    row.name
                ),
            ),
        }
    }
    Ok(periodics)
}

/// Logs `line` as an error the first time this scheduler meets `key`.
pub(crate) fn report_once(reported: &Mutex<HashSet<String>>, key: &str, line: &str) {
    let first = reported
        .lock()
        .map(|mut r| r.insert(key.to_string()))
        .unwrap_or(true);
    if first {
        log::error!("{line}");
    }
}

/// The rows a scheduler has already logged as unable to run, shared by its clones.
pub(crate) type Reported = Arc<Mutex<HashSet<String>>>;

impl Queue {
    /// Keeps `periodic` in the database: every worker that runs stored schedules
    /// ([`WorkerBuilder::stored_schedules`](crate::WorkerBuilder::stored_schedules);
    /// `litejobs work` does) enqueues its job once per slot between them, starting with the
    /// first slot after now. Returns the schedule as stored.
    ///
    /// ```
    /// use litejobs::maintenance::Periodic;
    /// use litejobs::{NewJob, Queue};
    /// use serde_json::json;
    /// # fn main() -> litejobs::Result<()> {
    /// let queue = Queue::builder().open_in_memory()?;
    /// let nightly = Periodic::parse("0 2 * * *", NewJob::new("nightly_report", json!({})))?;
    /// let stored = queue.add_schedule(&nightly)?;
    /// assert_eq!(stored.job.map(|j| j.job_type).as_deref(), Some("nightly_report"));
    /// assert!(queue.add_schedule(&nightly).is_err()); // the name is taken
    /// assert!(queue.remove_schedule("nightly_report")?);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::InvalidState`] when a schedule of that name exists (use
    /// [`Queue::replace_schedule`] to change a stored one); [`ErrorKind::InvalidJob`] when
    /// the job carries what a stored schedule does not keep (see [`StoredJob`]).
    pub fn add_schedule(&self, periodic: &Periodic) -> Result<ScheduleState> {
        self.store_schedule(periodic, false)
    }

    /// Keeps `periodic` in the database as [`Queue::add_schedule`] does, replacing the
    /// stored schedule of that name if there is one (its slots start again after now).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidState`] when a worker's code defines a schedule of that name; as
    /// [`Queue::add_schedule`] otherwise.
    pub fn replace_schedule(&self, periodic: &Periodic) -> Result<ScheduleState> {
        self.store_schedule(periodic, true)
    }

    /// Removes the schedule kept in the database under `name`: no worker enqueues it after
    /// this (jobs already enqueued stay). False when there is none.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidState`] when the schedule of that name is one a worker's code
    /// defines (it comes back with that worker's next tick).
    pub fn remove_schedule(&self, name: &str) -> Result<bool> {
        self.db().write(|tx| {
            // The lock a tick takes before it writes the schedule's row.
            tx.lock_key(&format!("periodic:{name}"))?;
            let existing = tx.schedule(name)?;
            match existing {
                None => Ok(false),
                Some(row) if row.job.is_none() => Err(defined_in_code(name)),
                Some(_) => tx.delete_stored_schedule(name),
            }
        })
    }

    fn store_schedule(&self, periodic: &Periodic, replace: bool) -> Result<ScheduleState> {
        if periodic.name().trim().is_empty() {
            return Err(Error::invalid_config("a schedule's name is empty"));
        }
        let job = periodic.stored_job()?;
        self.validate_template(&periodic.job)?;
        let now = self.now_ms();
        let schedule = periodic.describe();
        let stored = StoredSchedule {
            name: periodic.name(),
            schedule: &schedule,
            job: &job,
            handled_until: now,
            next_slot_at: periodic.next_slot_after(now),
        };
        self.db().write(|tx| {
            tx.lock_key(&format!("periodic:{}", periodic.name()))?;
            let existing = tx.schedule(periodic.name())?;
            match existing {
                None => tx.insert_stored_schedule(&stored, now)?,
                Some(row) if row.job.is_none() => return Err(defined_in_code(periodic.name())),
                Some(_) if !replace => {
                    return Err(Error::new(
                        ErrorKind::InvalidState,
                        format!(
                            "schedule {:?} exists already; replace it (`litejobs schedule add \
                             --replace`, Queue::replace_schedule) or remove it first",
                            periodic.name()
                        ),
                    ))
                }
                Some(_) => {
                    tx.replace_stored_schedule(&stored, now)?;
                }
            }
            tx.schedule(periodic.name())?
                .map(ScheduleState::from)
                .ok_or_else(|| Error::new(ErrorKind::NotFound, "the schedule just stored"))
        })
    }

    /// The template goes through the queue's own checks (payload limit, job type), so a
    /// schedule that could never enqueue is refused when it is added.
    fn validate_template(&self, job: &NewJob) -> Result<()> {
        crate::job::validate(job, self.max_payload_bytes()).map(|_| ())
    }
}

fn defined_in_code(name: &str) -> Error {
    Error::new(
        ErrorKind::InvalidState,
        format!(
            "schedule {name:?} is defined in a worker's code (WorkerBuilder::periodic), not kept \
             in the database; pick another name"
        ),
    )
}
