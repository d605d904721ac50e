//! The `periodic_schedules` table (R21): the latest slot enqueued per schedule, shared by
//! every process on the file. The scheduler reads and advances it inside one write
//! transaction, so two schedulers never enqueue the same slot.

use rusqlite::{params, Connection, OptionalExtension};

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
}

/// Slots up to this time are handled for `name`, or `None` for a schedule never seen.
pub(crate) fn last_slot(conn: &Connection, name: &str) -> Result<Option<i64>> {
    let mut stmt =
        conn.prepare_cached("SELECT last_slot_at FROM periodic_schedules WHERE name = ?1")?;
    Ok(stmt.query_row([name], |row| row.get(0)).optional()?)
}

/// Records a schedule seen for the first time: slots up to `handled_until` count as handled
/// (a new schedule starts with its next slot). Does nothing if another process got there
/// first.
pub(crate) fn insert_baseline(
    conn: &Connection,
    name: &str,
    schedule: &str,
    handled_until: i64,
    next_slot_at: Option<i64>,
    now: i64,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO periodic_schedules (name, schedule, last_slot_at, next_slot_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (name) DO NOTHING",
    )?
    .execute(params![name, schedule, handled_until, next_slot_at, now])?;
    Ok(())
}

/// Moves `name` on to `slot` (enqueued as `job_id`, if it was). Only moves forward: returns false,
/// changing nothing, when the stored slot is already at or past `slot`.
pub(crate) fn advance(
    conn: &Connection,
    name: &str,
    schedule: &str,
    slot: i64,
    job_id: Option<i64>,
    next_slot_at: Option<i64>,
    now: i64,
) -> Result<bool> {
    let n = conn
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
pub(crate) fn set_next(
    conn: &Connection,
    name: &str,
    schedule: &str,
    next_slot_at: Option<i64>,
    now: i64,
) -> Result<()> {
    conn.prepare_cached(
        "UPDATE periodic_schedules SET next_slot_at = ?1, schedule = ?2, updated_at = ?3
         WHERE name = ?4 AND (next_slot_at IS NOT ?1 OR schedule <> ?2)",
    )?
    .execute(params![next_slot_at, schedule, now, name])?;
    Ok(())
}

/// Every stored schedule, by name.
pub(crate) fn list(conn: &Connection) -> Result<Vec<ScheduleRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, schedule, last_slot_at, last_job_id, next_slot_at, updated_at
         FROM periodic_schedules ORDER BY name",
    )?;
    let rows = stmt
        .query_map([], |row| {
            Ok(ScheduleRow {
                name: row.get(0)?,
                schedule: row.get(1)?,
                last_slot_at: row.get(2)?,
                last_job_id: row.get(3)?,
                next_slot_at: row.get(4)?,
                updated_at: row.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}
