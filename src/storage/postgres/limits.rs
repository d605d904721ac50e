//! [`LimitStore`] on PostgreSQL: the `rate_limits` and `circuit_breakers` rows.
//!
//! Every write is one statement (`INSERT … ON CONFLICT DO UPDATE`, `DELETE`); the
//! read-then-write decisions of [`crate::limits`] take [`Tx::lock_key`](crate::storage::Tx)
//! on `rate-limit:<key>` or `breaker:<key>` before they read, so two processes never decide
//! on the same stale state. Listings are in byte order (`COLLATE "C"`), as on SQLite,
//! whatever the database's collation.

use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::QueryableByName;

use super::sql::{query, IntRow};
use super::PgTx;
use crate::error::Result;
use crate::storage::limits::{BreakerRow, BreakerState, LimitStore};

/// A `circuit_breakers` row as read.
#[derive(QueryableByName)]
struct Breaker {
    #[diesel(sql_type = Text)]
    key: String,
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = BigInt)]
    failures: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    open_until: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    opened_at: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    last_error: Option<String>,
    #[diesel(sql_type = BigInt)]
    updated_at: i64,
}

impl From<Breaker> for BreakerRow {
    fn from(b: Breaker) -> BreakerRow {
        BreakerRow {
            key: b.key,
            state: BreakerState::parse(&b.state),
            failures: b.failures,
            open_until: b.open_until,
            opened_at: b.opened_at,
            last_error: b.last_error,
            updated_at: b.updated_at,
        }
    }
}

const BREAKER_COLUMNS: &str = "key, state, failures, open_until, opened_at, last_error, updated_at";

impl LimitStore for PgTx<'_> {
    fn rate_next_at(&self, key: &str) -> Result<Option<i64>> {
        let row: Option<IntRow> =
            self.row(query("SELECT next_at AS v FROM rate_limits WHERE key = $1").text(key))?;
        Ok(row.map(|r| r.v))
    }

    fn set_rate_next_at(&self, key: &str, next_at: i64, now: i64) -> Result<()> {
        self.execute(
            query(
                "INSERT INTO rate_limits (key, next_at, updated_at) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO UPDATE SET next_at = excluded.next_at,
                                                 updated_at = excluded.updated_at",
            )
            .text(key)
            .int(next_at)
            .int(now),
        )?;
        Ok(())
    }

    fn delete_rate(&self, key: &str) -> Result<bool> {
        Ok(self.execute(query("DELETE FROM rate_limits WHERE key = $1").text(key))? > 0)
    }

    fn breaker(&self, key: &str) -> Result<Option<BreakerRow>> {
        let row: Option<Breaker> = self.row(
            query(&format!(
                "SELECT {BREAKER_COLUMNS} FROM circuit_breakers WHERE key = $1"
            ))
            .text(key),
        )?;
        Ok(row.map(BreakerRow::from))
    }

    fn breakers(&self) -> Result<Vec<BreakerRow>> {
        let rows: Vec<Breaker> = self.rows(query(&format!(
            "SELECT {BREAKER_COLUMNS} FROM circuit_breakers ORDER BY key COLLATE \"C\""
        )))?;
        Ok(rows.into_iter().map(BreakerRow::from).collect())
    }

    fn put_breaker(&self, row: &BreakerRow) -> Result<()> {
        self.execute(
            query(
                "INSERT INTO circuit_breakers (key, state, failures, open_until, opened_at,
                                               last_error, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (key) DO UPDATE SET state = excluded.state,
                     failures = excluded.failures, open_until = excluded.open_until,
                     opened_at = excluded.opened_at, last_error = excluded.last_error,
                     updated_at = excluded.updated_at",
            )
            .text(&row.key)
            .text(row.state.as_str())
            .int(row.failures)
            .opt_int(row.open_until)
            .opt_int(row.opened_at)
            .opt_text(row.last_error.as_deref())
            .int(row.updated_at),
        )?;
        Ok(())
    }

    fn delete_breaker(&self, key: &str) -> Result<bool> {
        Ok(self.execute(query("DELETE FROM circuit_breakers WHERE key = $1").text(key))? > 0)
    }
}
