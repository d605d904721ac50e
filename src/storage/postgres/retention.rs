//! [`RetentionStore`] on PostgreSQL.

#![allow(unused_variables)]

use super::PgTx;
use crate::error::Result;
use crate::storage::retention::*;

impl RetentionStore for PgTx<'_> {
    fn prunable_jobs(&self, cutoff: i64, limit: usize) -> Result<Vec<i64>> {
        Err(super::pending("prunable_jobs"))
    }

    fn delete_finished(&self, ids: &[i64]) -> Result<(u64, u64)> {
        Err(super::pending("delete_finished"))
    }

    fn delete_keys(&self, now: i64, completed_before: Option<i64>, limit: usize) -> Result<u64> {
        Err(super::pending("delete_keys"))
    }

    fn wal_checkpoint(&self, mode: &str) -> Result<(bool, i64, i64)> {
        Err(super::pending("wal_checkpoint"))
    }
}
