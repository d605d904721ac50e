//! [`PeriodicStore`] on PostgreSQL.

#![allow(unused_variables)]

use super::PgTx;
use crate::error::Result;
use crate::storage::periodic::*;

impl PeriodicStore for PgTx<'_> {
    fn last_slot(&self, name: &str) -> Result<Option<i64>> {
        Err(super::pending("last_slot"))
    }

    fn insert_baseline(
        &self,
        name: &str,
        schedule: &str,
        handled_until: i64,
        next_slot_at: Option<i64>,
        now: i64,
    ) -> Result<()> {
        Err(super::pending("insert_baseline"))
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
        Err(super::pending("advance_schedule"))
    }

    fn set_next_slot(
        &self,
        name: &str,
        schedule: &str,
        next_slot_at: Option<i64>,
        now: i64,
    ) -> Result<()> {
        Err(super::pending("set_next_slot"))
    }

    fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        Err(super::pending("schedules"))
    }
}
