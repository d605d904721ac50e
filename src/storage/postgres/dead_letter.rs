//! [`DeadLetterStore`] on PostgreSQL.

#![allow(unused_variables)]

use super::PgTx;
use crate::dead_letter::Discarded;
use crate::error::Result;
use crate::job::JobRecord;
use crate::storage::dead_letter::*;
use crate::storage::reads::JobFilter;

impl DeadLetterStore for PgTx<'_> {
    fn requeue_dead(&self, id: i64, by: &str, reason: &str, now: i64) -> Result<i64> {
        Err(super::pending("requeue_dead"))
    }

    fn discard_dead(&self, id: i64, now: i64) -> Result<Discarded> {
        Err(super::pending("discard_dead"))
    }

    fn dead_awaiting(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        Err(super::pending("dead_awaiting"))
    }

    fn requeue_dead_matching(
        &self,
        job_type: &str,
        search: Option<&str>,
        by: &str,
        reason: &str,
        now: i64,
    ) -> Result<Vec<(i64, i64)>> {
        Err(super::pending("requeue_dead_matching"))
    }
}
