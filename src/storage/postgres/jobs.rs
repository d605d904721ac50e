//! [`JobStore`] on PostgreSQL.

#![allow(unused_variables)]

use super::PgTx;
use crate::error::Result;
use crate::job::{AttemptOutcome, NewJob};
use crate::storage::jobs::*;

impl JobStore for PgTx<'_> {
    fn insert_job(&self, job: &NewJob, payload: &str, now: i64) -> Result<Inserted> {
        Err(super::pending("insert_job"))
    }

    fn insert_jobs(&self, jobs: &[NewJob], payloads: &[String], now: i64) -> Result<Vec<Inserted>> {
        Err(super::pending("insert_jobs"))
    }

    fn claim(&self, req: &ClaimRequest<'_>, now: i64) -> Result<Claimed> {
        Err(super::pending("claim"))
    }

    fn any_due(&self, queue: &str, job_types: &[String], now: i64) -> Result<bool> {
        Err(super::pending("any_due"))
    }

    fn extend_lease(
        &self,
        lease: Lease<'_>,
        until: i64,
        progress: Option<&str>,
        now: i64,
    ) -> Result<bool> {
        Err(super::pending("extend_lease"))
    }

    fn succeed(&self, jobs: &[Success<'_>], now: i64) -> Result<Vec<bool>> {
        Err(super::pending("succeed"))
    }

    fn fail(
        &self,
        lease: Lease<'_>,
        after: AfterFailure,
        error: &str,
        status_code: Option<i64>,
        now: i64,
    ) -> Result<bool> {
        Err(super::pending("fail"))
    }

    fn put_back(&self, lease: Lease<'_>, run_at: i64, now: i64) -> Result<bool> {
        Err(super::pending("put_back"))
    }

    fn cancel_running(&self, lease: Lease<'_>, reason: &str, now: i64) -> Result<bool> {
        Err(super::pending("cancel_running"))
    }

    fn remember_key(&self, key: &str, job_id: i64, now: i64, window_ms: i64) -> Result<()> {
        Err(super::pending("remember_key"))
    }

    fn key_remembered(&self, key: &str, now: i64) -> Result<bool> {
        Err(super::pending("key_remembered"))
    }

    fn insert_attempt(&self, row: &AttemptRow<'_>) -> Result<()> {
        Err(super::pending("insert_attempt"))
    }

    fn reap_expired(&self, now: i64) -> Result<usize> {
        Err(super::pending("reap_expired"))
    }
}
