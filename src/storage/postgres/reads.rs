//! [`ReadStore`] on PostgreSQL.

#![allow(unused_variables)]

use super::PgTx;
use crate::error::Result;
use crate::job::{AttemptRecord, JobRecord, JobStatus};
use crate::storage::reads::*;

impl ReadStore for PgTx<'_> {
    fn job(&self, id: i64) -> Result<Option<JobRecord>> {
        Err(super::pending("job"))
    }

    fn attempts(&self, job_id: i64) -> Result<Vec<AttemptRecord>> {
        Err(super::pending("attempts"))
    }

    fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        Err(super::pending("list_jobs"))
    }

    fn status_counts(&self, now: i64) -> Result<(Vec<StatusCount>, LiveSummary)> {
        Err(super::pending("status_counts"))
    }

    fn dead_since(&self, since: i64) -> Result<i64> {
        Err(super::pending("dead_since"))
    }

    fn error_groups(&self, limit: usize) -> Result<Vec<ErrorGroup>> {
        Err(super::pending("error_groups"))
    }

    fn health(&self, now: i64, since: i64, count_live: bool) -> Result<HealthRow> {
        Err(super::pending("health"))
    }

    fn oldest_due_by_queue(&self, now: i64) -> Result<Vec<(String, i64)>> {
        Err(super::pending("oldest_due_by_queue"))
    }

    fn attempt_outcomes(&self) -> Result<Vec<(String, String, i64)>> {
        Err(super::pending("attempt_outcomes"))
    }

    fn activity(
        &self,
        since: i64,
        bucket_ms: i64,
    ) -> Result<(BucketCounts, BucketCounts, BucketCounts)> {
        Err(super::pending("activity"))
    }
}
