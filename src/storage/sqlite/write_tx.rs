//! litejobs' write transactions on SQLite: `BEGIN IMMEDIATE` and `COMMIT` through cached
//! statements, and a first wait for the write lock in short steps.

use std::time::Duration;

use rusqlite::Connection;

use crate::error::Result;

/// While another connection holds the write lock (another program's commit, its fsync
/// included, takes a few hundred microseconds), `BEGIN IMMEDIATE` first retries every this
/// long for [`BRIEF_TRIES`] tries: SQLite's own busy handler sleeps 1 ms at its first try,
/// then 2, 5, 10 ms… Measured with an urgent job inserted every 10 ms by another program
/// while a worker drained 1 ms chunks: its pickup p99 went from 0.65–4.9 ms to 0.37–0.44 ms.
const BRIEF_STEP: Duration = Duration::from_micros(50);

/// Short steps before SQLite's own busy handler takes over (about 2 ms of them).
const BRIEF_TRIES: i32 = 40;

/// A `BEGIN IMMEDIATE` transaction through cached statements: rusqlite's `Transaction`
/// parses `BEGIN` and `COMMIT` anew each time, measured at 4 % of a single-job enqueue.
/// Dropped without [`WriteTx::commit`] (an error, a panic), it rolls back.
pub(super) struct WriteTx<'conn> {
    conn: &'conn Connection,
    open: bool,
}

impl<'conn> WriteTx<'conn> {
    /// Begins; a lock held elsewhere is waited for in short steps first, then by SQLite's
    /// busy handler up to `busy_timeout` (the connection's own setting, put back at once).
    pub(super) fn begin(conn: &'conn Connection, busy_timeout: Duration) -> Result<WriteTx<'conn>> {
        let mut begin = conn.prepare_cached("BEGIN IMMEDIATE")?;
        conn.busy_handler(Some(brief_busy))?;
        let first = begin.execute([]);
        conn.busy_timeout(busy_timeout)?;
        match first {
            Ok(_) => {}
            Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => {
                begin.execute([])?;
            }
            Err(e) => return Err(e.into()),
        }
        Ok(WriteTx { conn, open: true })
    }

    pub(super) fn commit(mut self) -> Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.open = false;
        Ok(())
    }
}

/// The busy handler of the first wait: [`BRIEF_TRIES`] steps of [`BRIEF_STEP`].
fn brief_busy(tries: i32) -> bool {
    if tries < BRIEF_TRIES {
        std::thread::sleep(BRIEF_STEP);
        true
    } else {
        false
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        // SQLite may have rolled back already (some errors end the transaction).
        if self.open && !self.conn.is_autocommit() {
            if let Err(e) = self.conn.execute_batch("ROLLBACK") {
                log::warn!("litejobs: rolling back a failed write: {e}");
            }
        }
    }
}
