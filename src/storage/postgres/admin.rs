//! [`AdminStore`] on PostgreSQL.

#![allow(unused_variables)]

use super::PgTx;
use crate::error::Result;
use crate::storage::admin::*;

impl AdminStore for PgTx<'_> {
    fn cancel(&self, id: i64, now: i64) -> Result<()> {
        Err(super::pending("cancel"))
    }

    fn retry_now(&self, id: i64, now: i64) -> Result<()> {
        Err(super::pending("retry_now"))
    }

    fn set_paused(&self, queue: &str, paused: bool, now: i64) -> Result<()> {
        Err(super::pending("set_paused"))
    }

    fn paused_queues(&self) -> Result<Vec<String>> {
        Err(super::pending("paused_queues"))
    }
}
