//! [`WebhookStore`] on PostgreSQL.

#![allow(unused_variables)]

use super::PgTx;
use crate::error::Result;
use crate::storage::webhooks::*;

impl WebhookStore for PgTx<'_> {
    fn insert_endpoint(&self, e: &EndpointInsert<'_>, now: i64) -> Result<i64> {
        Err(super::pending("insert_endpoint"))
    }

    fn endpoint(&self, id: i64) -> Result<Option<EndpointRow>> {
        Err(super::pending("endpoint"))
    }

    fn endpoints(&self) -> Result<Vec<EndpointRow>> {
        Err(super::pending("endpoints"))
    }

    fn set_endpoint_url(&self, id: i64, url: &str, now: i64) -> Result<bool> {
        Err(super::pending("set_endpoint_url"))
    }

    fn set_endpoint_enabled(
        &self,
        id: i64,
        enabled: bool,
        reason: Option<&str>,
        now: i64,
    ) -> Result<bool> {
        Err(super::pending("set_endpoint_enabled"))
    }

    fn set_endpoint_rate_limit(
        &self,
        id: i64,
        rate_limit: Option<i64>,
        rate_period_ms: i64,
        now: i64,
    ) -> Result<bool> {
        Err(super::pending("set_endpoint_rate_limit"))
    }

    fn set_endpoint_description(&self, id: i64, description: &str, now: i64) -> Result<bool> {
        Err(super::pending("set_endpoint_description"))
    }

    fn rotate_endpoint_secret(
        &self,
        id: i64,
        secret: &str,
        previous_until: i64,
        now: i64,
    ) -> Result<bool> {
        Err(super::pending("rotate_endpoint_secret"))
    }

    fn delete_endpoint(&self, id: i64) -> Result<bool> {
        Err(super::pending("delete_endpoint"))
    }
}
