//! Webhook endpoints as stored: where deliveries go and the secrets they are signed
//! with. `builtin::webhook::Endpoints` validates and reads them as
//! `builtin::webhook::Endpoint`s.
//!
//! Compiled in every build, used only with the Cargo feature `webhook`: the
//! `webhook_endpoints` table is part of the schema whatever the features (schema.sql is a
//! contract, and another process on the same file may deliver webhooks), and the storage
//! interface a backend implements is the same in every build.
#![cfg_attr(not(feature = "webhook"), allow(dead_code))]

use crate::error::Result;

/// A validated endpoint to insert.
#[derive(Debug)]
pub(crate) struct EndpointInsert<'a> {
    pub(crate) url: &'a str,
    pub(crate) secret: &'a str,
    pub(crate) enabled: bool,
    pub(crate) rate_limit: Option<i64>,
    pub(crate) rate_period_ms: i64,
    pub(crate) description: &'a str,
}

/// A `webhook_endpoints` row.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct EndpointRow {
    pub(crate) id: i64,
    pub(crate) url: String,
    pub(crate) secret: String,
    pub(crate) previous_secret: Option<String>,
    pub(crate) previous_secret_expires_at: Option<i64>,
    pub(crate) enabled: bool,
    pub(crate) disabled_reason: Option<String>,
    pub(crate) rate_limit: Option<i64>,
    pub(crate) rate_period_ms: i64,
    pub(crate) description: String,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

/// Webhook endpoints by id.
pub(crate) trait WebhookStore {
    fn insert_endpoint(&self, e: &EndpointInsert<'_>, now: i64) -> Result<i64>;

    fn endpoint(&self, id: i64) -> Result<Option<EndpointRow>>;

    fn endpoints(&self) -> Result<Vec<EndpointRow>>;

    /// Each update returns false when no endpoint has the id.
    fn set_endpoint_url(&self, id: i64, url: &str, now: i64) -> Result<bool>;

    fn set_endpoint_enabled(
        &self,
        id: i64,
        enabled: bool,
        reason: Option<&str>,
        now: i64,
    ) -> Result<bool>;

    fn set_endpoint_rate_limit(
        &self,
        id: i64,
        rate_limit: Option<i64>,
        rate_period_ms: i64,
        now: i64,
    ) -> Result<bool>;

    fn set_endpoint_description(&self, id: i64, description: &str, now: i64) -> Result<bool>;

    /// The current secret becomes the previous one (signed with until `previous_until`) and
    /// `secret` the current one.
    fn rotate_endpoint_secret(
        &self,
        id: i64,
        secret: &str,
        previous_until: i64,
        now: i64,
    ) -> Result<bool>;

    fn delete_endpoint(&self, id: i64) -> Result<bool>;
}
