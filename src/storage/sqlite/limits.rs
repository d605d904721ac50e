//! [`LimitStore`] on SQLite: the `rate_limits` and `circuit_breakers` rows.

use rusqlite::{params, OptionalExtension, Row};

use super::SqliteTx;
use crate::error::Result;
use crate::storage::limits::{BreakerRow, BreakerState, LimitStore};

const BREAKER_COLUMNS: &str = "key, state, failures, CAST(open_until AS INTEGER), \
     CAST(opened_at AS INTEGER), last_error, CAST(updated_at AS INTEGER)";

fn breaker_from_row(row: &Row<'_>) -> rusqlite::Result<BreakerRow> {
    Ok(BreakerRow {
        key: row.get(0)?,
        state: BreakerState::parse(&row.get::<_, String>(1)?),
        failures: row.get(2)?,
        open_until: row.get(3)?,
        opened_at: row.get(4)?,
        last_error: row.get(5)?,
        updated_at: row.get(6)?,
    })
}

impl LimitStore for SqliteTx<'_> {
    /// `next_at` of a rate-limit key, if the key has been used.
    fn rate_next_at(&self, key: &str) -> Result<Option<i64>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT CAST(next_at AS INTEGER) FROM rate_limits WHERE key = ?1")?;
        Ok(stmt.query_row([key], |row| row.get(0)).optional()?)
    }

    /// Stores `next_at` of a rate-limit key.
    fn set_rate_next_at(&self, key: &str, next_at: i64, now: i64) -> Result<()> {
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO rate_limits (key, next_at, updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (key) DO UPDATE SET next_at = excluded.next_at,
                                             updated_at = excluded.updated_at",
        )?;
        stmt.execute(params![key, next_at, now])?;
        Ok(())
    }

    /// Forgets a rate-limit key. True when it existed.
    fn delete_rate(&self, key: &str) -> Result<bool> {
        Ok(self
            .conn
            .execute("DELETE FROM rate_limits WHERE key = ?1", [key])?
            > 0)
    }

    /// The breaker of `key`, or `None` (closed, never failed).
    fn breaker(&self, key: &str) -> Result<Option<BreakerRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {BREAKER_COLUMNS} FROM circuit_breakers WHERE key = ?1"
        ))?;
        Ok(stmt.query_row([key], breaker_from_row).optional()?)
    }

    /// Every breaker with a row, by key.
    fn breakers(&self) -> Result<Vec<BreakerRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {BREAKER_COLUMNS} FROM circuit_breakers ORDER BY key"
        ))?;
        let rows = stmt.query_map([], breaker_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Stores a breaker's state.
    fn put_breaker(&self, row: &BreakerRow) -> Result<()> {
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO circuit_breakers (key, state, failures, open_until, opened_at, last_error,
                                           updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (key) DO UPDATE SET state = excluded.state, failures = excluded.failures,
                 open_until = excluded.open_until, opened_at = excluded.opened_at,
                 last_error = excluded.last_error, updated_at = excluded.updated_at",
        )?;
        stmt.execute(params![
            row.key,
            row.state.as_str(),
            row.failures,
            row.open_until,
            row.opened_at,
            row.last_error,
            row.updated_at,
        ])?;
        Ok(())
    }

    /// Forgets a breaker (closed again). True when it existed.
    fn delete_breaker(&self, key: &str) -> Result<bool> {
        Ok(self
            .conn
            .execute("DELETE FROM circuit_breakers WHERE key = ?1", [key])?
            > 0)
    }
}
