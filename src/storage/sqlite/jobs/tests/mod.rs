//! Unit tests of the job stores on SQLite, one file per concern beside its subject, on a
//! private in-memory database with the current schema; the fixtures they share are here.

mod claim;
mod complete;
mod expire;
mod insert;
mod reap;
mod row_rules;

use rusqlite::{Connection, Transaction, TransactionBehavior};

use crate::error::Result;
use crate::storage::jobs::{ClaimRequest, ClaimStore, ClaimedRow, Lease, Success};
use crate::storage::sqlite::SqliteTx;

/// Marks one job succeeded under `lease`; true when the lease held.
pub(super) fn succeed_one(
    tx: &SqliteTx<'_>,
    lease: Lease<'_>,
    result: Option<&str>,
    now: i64,
) -> Result<bool> {
    let success = Success {
        lease,
        result,
        progress: None,
        queue: "default",
        job_type: "t",
    };
    Ok(tx.write_successes(&[success], now)?[0].is_some())
}

/// A private database with the current schema.
pub(super) fn db() -> Connection {
    let conn = Connection::open_in_memory().expect("in-memory database");
    crate::storage::sqlite::migrate::check_and_migrate(
        &conn,
        false,
        std::time::Duration::from_secs(5),
        true,
    )
    .expect("migrations");
    crate::storage::sqlite::keep_counts_in_code(&conn).expect("triggers off");
    conn
}

/// Runs `f` on the storage interface in one write transaction and commits it.
pub(super) fn write<T>(conn: &Connection, f: impl FnOnce(&SqliteTx<'_>) -> Result<T>) -> Result<T> {
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    let value = f(&SqliteTx::new(&tx))?;
    tx.commit()?;
    Ok(value)
}

pub(super) const T0: i64 = 1_700_000_000_000;

/// A claim of one `t` job of the default queue by `worker`.
pub(super) fn t_jobs<'a>(types: &'a [String], worker: &'a str) -> ClaimRequest<'a> {
    ClaimRequest {
        queue: "default",
        job_types: types,
        type_timeouts_ms: &[1_000],
        limit: 1,
        above_priority: None,
        worker_id: worker,
        lease_grace_ms: 500,
        max_payload_bytes: 1 << 16,
    }
}

pub(super) fn claim_one(tx: &SqliteTx<'_>, worker: &str, now: i64) -> ClaimedRow {
    let types = ["t".to_string()];
    let req = t_jobs(&types, worker);
    let mut claimed = tx.claim(&req, now).expect("claim");
    assert!(claimed.refused.is_empty());
    claimed.rows.pop().expect("a due job to claim")
}

/// Every column of the job, to compare before and after a write.
pub(super) fn snapshot(tx: &SqliteTx<'_>, id: i64) -> Vec<rusqlite::types::Value> {
    tx.conn
        .query_row("SELECT * FROM jobs WHERE id = ?1", [id], |row| {
            (0..row.as_ref().column_count())
                .map(|i| row.get::<_, rusqlite::types::Value>(i))
                .collect()
        })
        .expect("the job row")
}

pub(super) fn attempt_rows(tx: &SqliteTx<'_>, id: i64) -> i64 {
    tx.conn
        .query_row(
            "SELECT COUNT(*) FROM job_attempts WHERE job_id = ?1",
            [id],
            |r| r.get(0),
        )
        .expect("counting attempts")
}
