//! [`PeriodicStore`] on PostgreSQL: the `periodic_schedules` table.
//!
//! Each slot is enqueued once with schedulers in several processes: the scheduler takes
//! [`Tx::lock_key`](crate::storage::Tx::lock_key) on `periodic:<name>` before it reads the
//! last slot, and [`advance_schedule`](PeriodicStore::advance_schedule) is itself a
//! conditional `UPDATE` that only moves `last_slot_at` forward, so a stale reader changes
//! nothing even without the lock. A first sighting is `INSERT … ON CONFLICT DO NOTHING`.

use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::QueryableByName;

use super::sql::{query, IntRow};
use super::PgTx;
use crate::error::Result;
use crate::storage::periodic::{PeriodicStore, ScheduleRow, StoredJobRow, StoredSchedule};

/// A `periodic_schedules` row as read.
#[derive(QueryableByName)]
struct Schedule {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    schedule: String,
    #[diesel(sql_type = BigInt)]
    last_slot_at: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    last_job_id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    next_slot_at: Option<i64>,
    #[diesel(sql_type = BigInt)]
    updated_at: i64,
    #[diesel(sql_type = Nullable<Text>)]
    job_type: Option<String>,
    #[diesel(sql_type = Text)]
    payload: String,
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = BigInt)]
    priority: i64,
    #[diesel(sql_type = BigInt)]
    max_attempts: i64,
}

/// The columns a [`Schedule`] reads.
const SCHEDULE_COLUMNS: &str = "SELECT name, schedule, last_slot_at, last_job_id, next_slot_at,
        updated_at, job_type, payload, queue, priority, max_attempts FROM periodic_schedules";

impl From<Schedule> for ScheduleRow {
    fn from(r: Schedule) -> ScheduleRow {
        ScheduleRow {
            name: r.name,
            schedule: r.schedule,
            last_slot_at: r.last_slot_at,
            last_job_id: r.last_job_id,
            next_slot_at: r.next_slot_at,
            updated_at: r.updated_at,
            job: r.job_type.map(|job_type| StoredJobRow {
                job_type,
                payload: r.payload,
                queue: r.queue,
                priority: r.priority,
                max_attempts: r.max_attempts,
                defect: None,
            }),
        }
    }
}

/// `$1`–`$10` of an insert or replace: name, schedule, handled until, next slot, now, and
/// the job's type, payload, queue, priority and attempts.
fn stored_query(sql: &str, s: &StoredSchedule<'_>, now: i64) -> super::sql::Query<'static> {
    query(sql)
        .text(s.name)
        .text(s.schedule)
        .int(s.handled_until)
        .opt_int(s.next_slot_at)
        .int(now)
        .text(&s.job.job_type)
        .text(&s.job.payload)
        .text(&s.job.queue)
        .int(s.job.priority)
        .int(s.job.max_attempts)
}

impl PeriodicStore for PgTx<'_> {
    fn last_slot(&self, name: &str) -> Result<Option<i64>> {
        let row: Option<IntRow> = self.row(
            query("SELECT last_slot_at AS v FROM periodic_schedules WHERE name = $1").text(name),
        )?;
        Ok(row.map(|r| r.v))
    }

    fn insert_baseline(
        &self,
        name: &str,
        schedule: &str,
        handled_until: i64,
        next_slot_at: Option<i64>,
        now: i64,
    ) -> Result<()> {
        self.execute(
            query(
                "INSERT INTO periodic_schedules
                     (name, schedule, last_slot_at, next_slot_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (name) DO NOTHING",
            )
            .text(name)
            .text(schedule)
            .int(handled_until)
            .opt_int(next_slot_at)
            .int(now),
        )?;
        Ok(())
    }

    fn advance_schedule(
        &self,
        name: &str,
        schedule: &str,
        slot: i64,
        job_id: Option<i64>,
        next_slot_at: Option<i64>,
        now: i64,
    ) -> Result<bool> {
        // READ COMMITTED re-checks `last_slot_at < $1` on the latest row version after
        // waiting for a concurrent writer of the row: only one of two can move it to `slot`.
        let n = self.execute(
            query(
                "UPDATE periodic_schedules
                 SET last_slot_at = $1, last_job_id = $2, next_slot_at = $3, schedule = $4,
                     updated_at = $5
                 WHERE name = $6 AND last_slot_at < $1",
            )
            .int(slot)
            .opt_int(job_id)
            .opt_int(next_slot_at)
            .text(schedule)
            .int(now)
            .text(name),
        )?;
        Ok(n == 1)
    }

    fn set_next_slot(
        &self,
        name: &str,
        schedule: &str,
        next_slot_at: Option<i64>,
        now: i64,
    ) -> Result<()> {
        self.execute(
            query(
                "UPDATE periodic_schedules SET next_slot_at = $1, schedule = $2, updated_at = $3
                 WHERE name = $4 AND (next_slot_at IS DISTINCT FROM $1 OR schedule <> $2)",
            )
            .opt_int(next_slot_at)
            .text(schedule)
            .int(now)
            .text(name),
        )?;
        Ok(())
    }

    fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        let rows: Vec<Schedule> = self.rows(query(&format!(
            "{SCHEDULE_COLUMNS} ORDER BY name COLLATE \"C\""
        )))?;
        Ok(rows.into_iter().map(ScheduleRow::from).collect())
    }

    fn schedule(&self, name: &str) -> Result<Option<ScheduleRow>> {
        let row: Option<Schedule> =
            self.row(query(&format!("{SCHEDULE_COLUMNS} WHERE name = $1")).text(name))?;
        Ok(row.map(ScheduleRow::from))
    }

    fn insert_stored_schedule(&self, s: &StoredSchedule<'_>, now: i64) -> Result<()> {
        self.execute(stored_query(
            "INSERT INTO periodic_schedules (name, schedule, last_slot_at, next_slot_at,
                 updated_at, job_type, payload, queue, priority, max_attempts)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            s,
            now,
        ))?;
        Ok(())
    }

    fn replace_stored_schedule(&self, s: &StoredSchedule<'_>, now: i64) -> Result<bool> {
        let n = self.execute(stored_query(
            "UPDATE periodic_schedules
             SET schedule = $2, last_slot_at = $3, next_slot_at = $4, updated_at = $5,
                 job_type = $6, payload = $7, queue = $8, priority = $9, max_attempts = $10
             WHERE name = $1 AND job_type IS NOT NULL",
            s,
            now,
        ))?;
        Ok(n == 1)
    }

    fn delete_stored_schedule(&self, name: &str) -> Result<bool> {
        let n = self.execute(
            query("DELETE FROM periodic_schedules WHERE name = $1 AND job_type IS NOT NULL")
                .text(name),
        )?;
        Ok(n == 1)
    }
}
