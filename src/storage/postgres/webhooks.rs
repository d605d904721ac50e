//! [`WebhookStore`] on PostgreSQL: the `webhook_endpoints` table. Every change is one
//! statement on one row (a rotation moves `secret` to `previous_secret` inside its
//! `UPDATE`), so concurrent writers need no lock of their own. Unused without the Cargo
//! feature `webhook` (see `storage/webhooks.rs` for why it is compiled anyway).
#![cfg_attr(not(feature = "webhook"), allow(dead_code))]

use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel::QueryableByName;

use super::sql::{query, IntRow};
use super::PgTx;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::webhooks::{EndpointInsert, EndpointRow, WebhookStore};

/// A `webhook_endpoints` row as read.
#[derive(QueryableByName)]
struct Endpoint {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    url: String,
    #[diesel(sql_type = Text)]
    secret: String,
    #[diesel(sql_type = Nullable<Text>)]
    previous_secret: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    previous_secret_expires_at: Option<i64>,
    #[diesel(sql_type = Bool)]
    enabled: bool,
    #[diesel(sql_type = Nullable<Text>)]
    disabled_reason: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    rate_limit: Option<i64>,
    #[diesel(sql_type = BigInt)]
    rate_period_ms: i64,
    #[diesel(sql_type = Text)]
    description: String,
    #[diesel(sql_type = BigInt)]
    created_at: i64,
    #[diesel(sql_type = BigInt)]
    updated_at: i64,
}

impl From<Endpoint> for EndpointRow {
    fn from(e: Endpoint) -> EndpointRow {
        EndpointRow {
            id: e.id,
            url: e.url,
            secret: e.secret,
            previous_secret: e.previous_secret,
            previous_secret_expires_at: e.previous_secret_expires_at,
            enabled: e.enabled,
            disabled_reason: e.disabled_reason,
            rate_limit: e.rate_limit,
            rate_period_ms: e.rate_period_ms,
            description: e.description,
            created_at: e.created_at,
            updated_at: e.updated_at,
        }
    }
}

const COLUMNS: &str = "id, url, secret, previous_secret, previous_secret_expires_at, \
     enabled <> 0 AS enabled, disabled_reason, rate_limit, rate_period_ms, description, \
     created_at, updated_at";

impl WebhookStore for PgTx<'_> {
    fn insert_endpoint(&self, e: &EndpointInsert<'_>, now: i64) -> Result<i64> {
        let row: Option<IntRow> = self.row(
            query(
                "INSERT INTO webhook_endpoints (url, secret, enabled, rate_limit, rate_period_ms,
                                                description, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
                 RETURNING id AS v",
            )
            .text(e.url)
            .text(e.secret)
            .int(i64::from(e.enabled))
            .opt_int(e.rate_limit)
            .int(e.rate_period_ms)
            .text(e.description)
            .int(now),
        )?;
        row.map(|r| r.v).ok_or_else(|| {
            Error::new(
                ErrorKind::Database,
                "PostgreSQL: inserting a webhook endpoint returned no id",
            )
        })
    }

    fn endpoint(&self, id: i64) -> Result<Option<EndpointRow>> {
        let row: Option<Endpoint> = self.row(
            query(&format!(
                "SELECT {COLUMNS} FROM webhook_endpoints WHERE id = $1"
            ))
            .int(id),
        )?;
        Ok(row.map(EndpointRow::from))
    }

    fn endpoints(&self) -> Result<Vec<EndpointRow>> {
        let rows: Vec<Endpoint> = self.rows(query(&format!(
            "SELECT {COLUMNS} FROM webhook_endpoints ORDER BY id"
        )))?;
        Ok(rows.into_iter().map(EndpointRow::from).collect())
    }

    fn set_endpoint_url(&self, id: i64, url: &str, now: i64) -> Result<bool> {
        Ok(self.execute(
            query("UPDATE webhook_endpoints SET url = $2, updated_at = $3 WHERE id = $1")
                .int(id)
                .text(url)
                .int(now),
        )? > 0)
    }

    fn set_endpoint_enabled(
        &self,
        id: i64,
        enabled: bool,
        reason: Option<&str>,
        now: i64,
    ) -> Result<bool> {
        Ok(self.execute(
            query(
                "UPDATE webhook_endpoints SET enabled = $2, disabled_reason = $3, updated_at = $4
                 WHERE id = $1",
            )
            .int(id)
            .int(i64::from(enabled))
            .opt_text(reason)
            .int(now),
        )? > 0)
    }

    fn set_endpoint_rate_limit(
        &self,
        id: i64,
        rate_limit: Option<i64>,
        rate_period_ms: i64,
        now: i64,
    ) -> Result<bool> {
        Ok(self.execute(
            query(
                "UPDATE webhook_endpoints SET rate_limit = $2, rate_period_ms = $3,
                                              updated_at = $4
                 WHERE id = $1",
            )
            .int(id)
            .opt_int(rate_limit)
            .int(rate_period_ms)
            .int(now),
        )? > 0)
    }

    fn set_endpoint_description(&self, id: i64, description: &str, now: i64) -> Result<bool> {
        Ok(self.execute(
            query("UPDATE webhook_endpoints SET description = $2, updated_at = $3 WHERE id = $1")
                .int(id)
                .text(description)
                .int(now),
        )? > 0)
    }

    fn rotate_endpoint_secret(
        &self,
        id: i64,
        secret: &str,
        previous_until: i64,
        now: i64,
    ) -> Result<bool> {
        Ok(self.execute(
            query(
                "UPDATE webhook_endpoints SET previous_secret = secret,
                        previous_secret_expires_at = $3, secret = $2, updated_at = $4
                 WHERE id = $1",
            )
            .int(id)
            .text(secret)
            .int(previous_until)
            .int(now),
        )? > 0)
    }

    fn delete_endpoint(&self, id: i64) -> Result<bool> {
        Ok(self.execute(query("DELETE FROM webhook_endpoints WHERE id = $1").int(id))? > 0)
    }
}
