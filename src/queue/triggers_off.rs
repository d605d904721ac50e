//! The schema's triggers on a caller's own SQLite connection, off while litejobs writes
//! waits there.
//!
//! The triggers hold a job for each wait inserted (and count the jobs a failed dependency
//! cancels) for programs that write by plain SQL. litejobs does the same in code, and its
//! own connections run with triggers off; a caller's connection runs them, so a wait
//! written there would be held twice (and never released) and a cancel counted twice.

use rusqlite::config::DbConfig;
use rusqlite::Connection;

use crate::error::Result;
use crate::job::NewJob;

/// Triggers off on a connection until dropped, then as they were.
pub(crate) struct TriggersOff<'c> {
    conn: &'c Connection,
    were_on: bool,
}

impl<'c> TriggersOff<'c> {
    /// Turns the triggers of `conn` off (if they were on) until the guard is dropped.
    pub(crate) fn on(conn: &'c Connection) -> Result<TriggersOff<'c>> {
        let were_on = conn.db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER)?;
        if were_on {
            conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false)?;
        }
        Ok(TriggersOff { conn, were_on })
    }

    /// [`TriggersOff::on`] when `job` waits for other jobs; nothing to do otherwise (turning
    /// them off makes SQLite prepare the connection's statements again).
    pub(crate) fn for_waits_of(
        conn: &'c Connection,
        job: &NewJob,
    ) -> Result<Option<TriggersOff<'c>>> {
        if job.after.is_empty() {
            return Ok(None);
        }
        TriggersOff::on(conn).map(Some)
    }
}

impl Drop for TriggersOff<'_> {
    fn drop(&mut self) {
        if self.were_on {
            if let Err(e) = self
                .conn
                .set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, true)
            {
                log::warn!("litejobs: could not turn the caller's triggers back on: {e}");
            }
        }
    }
}
