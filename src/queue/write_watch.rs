//! [`Queue::watch_writes`]: has anything been written since I last looked? For a view that
//! refreshes often (`litejobs top`, a status bar) and should cost nothing while the queue
//! is idle.

use crate::error::Result;
use crate::storage::ChangeSignal;
use crate::Queue;

/// Tells whether anything may have been written to the database since the last ask. Made
/// by [`Queue::watch_writes`].
///
/// On SQLite it reads `PRAGMA data_version` on a connection of its own (shared memory, no
/// file read); on PostgreSQL it asks the server for its current snapshot (one round trip
/// on a pooled connection). Both see writes of any connection, this process's included,
/// and of programs writing by plain SQL. A `true` may be a write that changed nothing this
/// reader shows (a worker's heartbeat, a write to another database on the same server); a
/// `false` is never wrong.
pub struct WriteWatch {
    signal: Box<dyn ChangeSignal>,
    first: bool,
}

impl std::fmt::Debug for WriteWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteWatch").finish_non_exhaustive()
    }
}

impl WriteWatch {
    /// True when something may have been written since the previous call; the first call
    /// answers true.
    ///
    /// # Errors
    /// When the database cannot be asked (a server that went away); the next call asks
    /// again.
    pub fn changed(&mut self) -> Result<bool> {
        let changed = self.signal.changed()?;
        Ok(std::mem::take(&mut self.first) || changed)
    }
}

impl Queue {
    /// A [`WriteWatch`] on this database: re-read only when something changed.
    ///
    /// ```
    /// # fn main() -> litejobs::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let queue = litejobs::Queue::open(dir.path().join("app.db"))?;
    /// let mut watch = queue.watch_writes()?;
    /// assert!(watch.changed()?); // the first look always reads
    /// assert!(!watch.changed()?);
    /// queue.enqueue(litejobs::NewJob::new("send_email", serde_json::json!({})))?;
    /// assert!(watch.changed()?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// When the watch's connection cannot be opened.
    pub fn watch_writes(&self) -> Result<WriteWatch> {
        Ok(WriteWatch {
            signal: self.db().write_watch()?,
            first: true,
        })
    }
}
