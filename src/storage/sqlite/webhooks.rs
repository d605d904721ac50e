//! [`WebhookStore`] on SQLite: the `webhook_endpoints` table. Unused without the Cargo
//! feature `webhook` (see `storage/webhooks.rs` for why it is compiled anyway).
#![cfg_attr(not(feature = "webhook"), allow(dead_code))]

use rusqlite::{params, OptionalExtension, Row};

use super::SqliteTx;
use crate::error::Result;
use crate::storage::webhooks::{EndpointInsert, EndpointRow, WebhookStore};

const COLUMNS: &str =
    "id, url, secret, previous_secret, CAST(previous_secret_expires_at AS INTEGER), \
     enabled, disabled_reason, rate_limit, rate_period_ms, description, \
     CAST(created_at AS INTEGER), CAST(updated_at AS INTEGER)";

fn endpoint_from_row(row: &Row<'_>) -> rusqlite::Result<EndpointRow> {
    Ok(EndpointRow {
        id: row.get(0)?,
        url: row.get(1)?,
        secret: row.get(2)?,
        previous_secret: row.get(3)?,
        previous_secret_expires_at: row.get(4)?,
        enabled: row.get::<_, i64>(5)? != 0,
        disabled_reason: row.get(6)?,
        rate_limit: row.get(7)?,
        rate_period_ms: row.get(8)?,
        description: row.get(9)?,
        created_at: row.get(10)?,
        updated_at: row.get(11)?,
    })
}

impl WebhookStore for SqliteTx<'_> {
    fn insert_endpoint(&self, e: &EndpointInsert<'_>, now: i64) -> Result<i64> {
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO webhook_endpoints (url, secret, enabled, rate_limit, rate_period_ms,
                                            description, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
        )?;
        stmt.execute(params![
            e.url,
            e.secret,
            i64::from(e.enabled),
            e.rate_limit,
            e.rate_period_ms,
            e.description,
            now,
        ])?;
        Ok(self.conn.last_insert_rowid())
    }

    fn endpoint(&self, id: i64) -> Result<Option<EndpointRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM webhook_endpoints WHERE id = ?1"
        ))?;
        Ok(stmt.query_row([id], endpoint_from_row).optional()?)
    }

    fn endpoints(&self) -> Result<Vec<EndpointRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM webhook_endpoints ORDER BY id"
        ))?;
        let rows = stmt.query_map([], endpoint_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Each update returns false when no endpoint has the id.
    fn set_endpoint_url(&self, id: i64, url: &str, now: i64) -> Result<bool> {
        Ok(self.conn.execute(
            "UPDATE webhook_endpoints SET url = ?2, updated_at = ?3 WHERE id = ?1",
            params![id, url, now],
        )? > 0)
    }

    fn set_endpoint_enabled(
        &self,
        id: i64,
        enabled: bool,
        reason: Option<&str>,
        now: i64,
    ) -> Result<bool> {
        Ok(self.conn.execute(
            "UPDATE webhook_endpoints SET enabled = ?2, disabled_reason = ?3, updated_at = ?4
             WHERE id = ?1",
            params![id, i64::from(enabled), reason, now],
        )? > 0)
    }

    fn set_endpoint_rate_limit(
        &self,
        id: i64,
        rate_limit: Option<i64>,
        rate_period_ms: i64,
        now: i64,
    ) -> Result<bool> {
        Ok(self.conn.execute(
            "UPDATE webhook_endpoints SET rate_limit = ?2, rate_period_ms = ?3, updated_at = ?4
             WHERE id = ?1",
            params![id, rate_limit, rate_period_ms, now],
        )? > 0)
    }

    fn set_endpoint_description(&self, id: i64, description: &str, now: i64) -> Result<bool> {
        Ok(self.conn.execute(
            "UPDATE webhook_endpoints SET description = ?2, updated_at = ?3 WHERE id = ?1",
            params![id, description, now],
        )? > 0)
    }

    /// The current secret becomes the previous one (signed with until `previous_until`) and
    /// `secret` the current one.
    fn rotate_endpoint_secret(
        &self,
        id: i64,
        secret: &str,
        previous_until: i64,
        now: i64,
    ) -> Result<bool> {
        Ok(self.conn.execute(
            "UPDATE webhook_endpoints SET previous_secret = secret, previous_secret_expires_at = ?3,
                    secret = ?2, updated_at = ?4
             WHERE id = ?1",
            params![id, secret, previous_until, now],
        )? > 0)
    }

    fn delete_endpoint(&self, id: i64) -> Result<bool> {
        Ok(self
            .conn
            .execute("DELETE FROM webhook_endpoints WHERE id = ?1", [id])?
            > 0)
    }
}
