//! [`LimitStore`] on PostgreSQL.

#![allow(unused_variables)]

use super::PgTx;
use crate::error::Result;
use crate::storage::limits::*;

impl LimitStore for PgTx<'_> {
    fn rate_next_at(&self, key: &str) -> Result<Option<i64>> {
        Err(super::pending("rate_next_at"))
    }

    fn set_rate_next_at(&self, key: &str, next_at: i64, now: i64) -> Result<()> {
        Err(super::pending("set_rate_next_at"))
    }

    fn delete_rate(&self, key: &str) -> Result<bool> {
        Err(super::pending("delete_rate"))
    }

    fn breaker(&self, key: &str) -> Result<Option<BreakerRow>> {
        Err(super::pending("breaker"))
    }

    fn breakers(&self) -> Result<Vec<BreakerRow>> {
        Err(super::pending("breakers"))
    }

    fn put_breaker(&self, row: &BreakerRow) -> Result<()> {
        Err(super::pending("put_breaker"))
    }

    fn delete_breaker(&self, key: &str) -> Result<bool> {
        Err(super::pending("delete_breaker"))
    }
}
