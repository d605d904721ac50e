//! Periodic schedules as stored: the latest slot enqueued per schedule, shared by
//! every process on the file. The scheduler reads and advances it inside one write
//! transaction, so two schedulers never enqueue the same slot. A schedule kept in the
//! database (rather than in a worker's code) also keeps the job it enqueues.

use crate::error::Result;

/// One schedule's stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScheduleRow {
    pub(crate) name: String,
    pub(crate) schedule: String,
    pub(crate) last_slot_at: i64,
    pub(crate) last_job_id: Option<i64>,
    pub(crate) next_slot_at: Option<i64>,
    pub(crate) updated_at: i64,
    /// The job of a schedule kept in the database; `None` for one a worker's code defines.
    pub(crate) job: Option<StoredJobRow>,
}

/// The job a schedule kept in the database enqueues at each slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredJobRow {
    pub(crate) job_type: String,
    /// JSON text.
    pub(crate) payload: String,
    pub(crate) queue: String,
    pub(crate) priority: i64,
    pub(crate) max_attempts: i64,
    /// Why the row cannot run as read (a column of the wrong type, written by another
    /// program into a SQLite file); `None` for a sound one.
    pub(crate) defect: Option<String>,
}

/// A schedule kept in the database, as written by `add` or `replace`: its name, the
/// schedule as people write it, its job, and where its slots start (slots up to
/// `handled_until` count as handled, so a new or changed schedule starts with its next slot).
pub(crate) struct StoredSchedule<'a> {
    pub(crate) name: &'a str,
    pub(crate) schedule: &'a str,
    pub(crate) job: &'a StoredJobRow,
    pub(crate) handled_until: i64,
    pub(crate) next_slot_at: Option<i64>,
}

/// The latest slot handled per schedule, shared by every process.
pub(crate) trait PeriodicStore {
    /// Slots up to this time are handled for `name`, or `None` for a schedule never seen.
    fn last_slot(&self, name: &str) -> Result<Option<i64>>;

    /// Records a schedule seen for the first time: slots up to `handled_until` count as handled
    /// (a new schedule starts with its next slot). Does nothing if another process got there
    /// first.
    fn insert_baseline(
        &self,
        name: &str,
        schedule: &str,
        handled_until: i64,
        next_slot_at: Option<i64>,
        now: i64,
    ) -> Result<()>;

    /// Moves `name` on to `slot` (enqueued as `job_id`, if it was). Only moves forward: returns false,
    /// changing nothing, when the stored slot is already at or past `slot`.
    fn advance_schedule(
        &self,
        name: &str,
        schedule: &str,
        slot: i64,
        job_id: Option<i64>,
        next_slot_at: Option<i64>,
        now: i64,
    ) -> Result<bool>;

    /// Updates the next slot shown for people (no slot was due).
    fn set_next_slot(
        &self,
        name: &str,
        schedule: &str,
        next_slot_at: Option<i64>,
        now: i64,
    ) -> Result<()>;

    /// Every stored schedule, by name.
    fn schedules(&self) -> Result<Vec<ScheduleRow>>;

    /// The schedule stored under `name`, if any.
    fn schedule(&self, name: &str) -> Result<Option<ScheduleRow>>;

    /// Inserts a schedule kept in the database. The caller has checked that the name is
    /// free (in this transaction).
    fn insert_stored_schedule(&self, schedule: &StoredSchedule<'_>, now: i64) -> Result<()>;

    /// Replaces the schedule and job of the schedule kept in the database under that name;
    /// false when there is none (a schedule a worker's code defines is never replaced).
    fn replace_stored_schedule(&self, schedule: &StoredSchedule<'_>, now: i64) -> Result<bool>;

    /// Deletes the schedule kept in the database under `name`; false when there is none.
    fn delete_stored_schedule(&self, name: &str) -> Result<bool>;
}
