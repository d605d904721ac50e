//! Rate limits and circuit breakers as stored: one row per key, shared by every
//! process on the database. The decisions are made in [`crate::limits`]; a store only loads
//! and saves state, inside the caller's write transaction (read-then-write under
//! [`Tx::lock_key`](super::Tx::lock_key)).

use std::fmt;

use serde::Serialize;

use crate::error::Result;

/// The state of a [`Breaker`](crate::limits::Breaker) key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Calls go.
    Closed,
    /// Calls wait until the cool-down ends.
    Open,
    /// One probe call is out; the others wait for its result.
    HalfOpen,
}

impl BreakerState {
    /// The word stored in the `state` column.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    pub(crate) fn parse(s: &str) -> BreakerState {
        match s {
            "open" => BreakerState::Open,
            "half_open" => BreakerState::HalfOpen,
            // The CHECK constraint allows nothing else; closed is the safe reading.
            _ => BreakerState::Closed,
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `circuit_breakers` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BreakerRow {
    pub(crate) key: String,
    pub(crate) state: BreakerState,
    pub(crate) failures: i64,
    pub(crate) open_until: Option<i64>,
    pub(crate) opened_at: Option<i64>,
    pub(crate) last_error: Option<String>,
    pub(crate) updated_at: i64,
}

/// Rate-limit and breaker state by key.
pub(crate) trait LimitStore {
    /// `next_at` of a rate-limit key, if the key has been used.
    fn rate_next_at(&self, key: &str) -> Result<Option<i64>>;

    /// Stores `next_at` of a rate-limit key.
    fn set_rate_next_at(&self, key: &str, next_at: i64, now: i64) -> Result<()>;

    /// Forgets a rate-limit key. True when it existed.
    fn delete_rate(&self, key: &str) -> Result<bool>;

    /// The breaker of `key`, or `None` (closed, never failed).
    fn breaker(&self, key: &str) -> Result<Option<BreakerRow>>;

    /// Every breaker with a row, by key.
    fn breakers(&self) -> Result<Vec<BreakerRow>>;

    /// Stores a breaker's state.
    fn put_breaker(&self, row: &BreakerRow) -> Result<()>;

    /// Forgets a breaker (closed again). True when it existed.
    fn delete_breaker(&self, key: &str) -> Result<bool>;
}
