//! [`PeriodicStore`] on SQLite: the `periodic_schedules` table.

use rusqlite::{params, OptionalExtension};

use super::SqliteTx;
use crate::error::Result;
use crate::storage::periodic::{PeriodicStore, ScheduleRow, StoredJobRow, StoredSchedule};

/// `?1`–`?10` of an insert or replace: name, schedule, handled until, next slot, now, and
/// the job's type, payload, queue, priority and attempts.
fn stored_params<'a>(s: &'a StoredSchedule<'_>, now: &'a i64) -> [&'a dyn rusqlite::ToSql; 10] {
    [
        &s.name,
        &s.schedule,
        &s.handled_until,
        &s.next_slot_at,
        now,
        &s.job.job_type,
        &s.job.payload,
        &s.job.queue,
        &s.job.priority,
        &s.job.max_attempts,
    ]
}

/// The columns [`schedule_row`] reads.
const SCHEDULE_COLUMNS: &str = "SELECT name, schedule, last_slot_at, last_job_id, next_slot_at,
        updated_at, job_type, payload, queue, priority, max_attempts FROM periodic_schedules";

/// A row of [`SCHEDULE_COLUMNS`]. The job's columns are read as they are: another program
/// may have written a number as text into the file, and that row (not every read of the
/// table) is then refused, with the reason.
fn schedule_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<ScheduleRow> {
    use rusqlite::types::Value;
    let job = match row.get::<_, Value>(6)? {
        Value::Null => None,
        job_type => {
            let mut defects = Vec::new();
            let mut text = |v: Value, column: &str| match v {
                Value::Text(t) => t,
                _ => {
                    defects.push(format!("{column} is not text"));
                    String::new()
                }
            };
            let job_type = text(job_type, "job_type");
            let payload = text(row.get(7)?, "payload");
            let queue = text(row.get(8)?, "queue");
            let mut int = |v: Value, column: &str| match v {
                Value::Integer(n) => n,
                _ => {
                    defects.push(format!("{column} is not an integer"));
                    0
                }
            };
            let priority = int(row.get(9)?, "priority");
            let max_attempts = int(row.get(10)?, "max_attempts");
            Some(StoredJobRow {
                job_type,
                payload,
                queue,
                priority,
                max_attempts,
                defect: (!defects.is_empty()).then(|| defects.join(", ")),
            })
        }
    };
    Ok(ScheduleRow {
        name: row.get(0)?,
        schedule: row.get(1)?,
        last_slot_at: row.get(2)?,
        last_job_id: row.get(3)?,
        next_slot_at: row.get(4)?,
        updated_at: row.get(5)?,
        job,
    })
}

impl PeriodicStore for SqliteTx<'_> {
    /// Slots up to this time are handled for `name`, or `None` for a schedule never seen.
    fn last_slot(&self, name: &str) -> Result<Option<i64>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT last_slot_at FROM periodic_schedules WHERE name = ?1")?;
        Ok(stmt.query_row([name], |row| row.get(0)).optional()?)
    }

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
    ) -> Result<()> {
        self.conn.prepare_cached(
            "INSERT INTO periodic_schedules (name, schedule, last_slot_at, next_slot_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (name) DO NOTHING",
        )?
        .execute(params![name, schedule, handled_until, next_slot_at, now])?;
        Ok(())
    }

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
    ) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE periodic_schedules
                 SET last_slot_at = ?1, last_job_id = ?2, next_slot_at = ?3, schedule = ?4,
                     updated_at = ?5
                 WHERE name = ?6 AND last_slot_at < ?1",
            )?
            .execute(params![slot, job_id, next_slot_at, schedule, now, name])?;
        Ok(n == 1)
    }

    /// Updates the next slot shown for people (no slot was due).
    fn set_next_slot(
        &self,
        name: &str,
        schedule: &str,
        next_slot_at: Option<i64>,
        now: i64,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE periodic_schedules SET next_slot_at = ?1, schedule = ?2, updated_at = ?3
             WHERE name = ?4 AND (next_slot_at IS NOT ?1 OR schedule <> ?2)",
            )?
            .execute(params![next_slot_at, schedule, now, name])?;
        Ok(())
    }

    /// Every stored schedule, by name.
    fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("{SCHEDULE_COLUMNS} ORDER BY name"))?;
        let rows = stmt
            .query_map([], schedule_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn schedule(&self, name: &str) -> Result<Option<ScheduleRow>> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("{SCHEDULE_COLUMNS} WHERE name = ?1"))?;
        Ok(stmt.query_row([name], schedule_row).optional()?)
    }

    fn insert_stored_schedule(&self, s: &StoredSchedule<'_>, now: i64) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO periodic_schedules (name, schedule, last_slot_at, next_slot_at,
                     updated_at, job_type, payload, queue, priority, max_attempts)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?
            .execute(stored_params(s, &now))?;
        Ok(())
    }

    fn replace_stored_schedule(&self, s: &StoredSchedule<'_>, now: i64) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE periodic_schedules
                 SET schedule = ?2, last_slot_at = ?3, next_slot_at = ?4, updated_at = ?5,
                     job_type = ?6, payload = ?7, queue = ?8, priority = ?9, max_attempts = ?10
                 WHERE name = ?1 AND job_type IS NOT NULL",
            )?
            .execute(stored_params(s, &now))?;
        Ok(n == 1)
    }

    fn delete_stored_schedule(&self, name: &str) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached(
                "DELETE FROM periodic_schedules WHERE name = ?1 AND job_type IS NOT NULL",
            )?
            .execute([name])?;
        Ok(n == 1)
    }
}
