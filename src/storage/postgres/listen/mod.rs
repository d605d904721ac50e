//! A worker's `LISTEN` connection: the [`ChangeSignal`] on PostgreSQL. The schema's insert
//! trigger notifies at commit; a thread of the worker's own sleeps on the listening
//! connection's socket and, when a notification arrives, tells the dispatcher at once (the
//! signal's news), so a job from another host starts without waiting for a timed check and an
//! idle worker costs no wake-ups at all.
//!
//! When the connection is lost (a restart, a terminated backend, a failover) the thread makes
//! a new one, at once and then with back-off (100 ms doubling to 2 s); meanwhile the poll
//! interval finds other processes' jobs. The loss and the new connection each count as a
//! change, for commits made while nobody listened.
//!
//! Beside it, [`SnapshotWatch`]: the signal of every write (not only inserts) that a view
//! such as `litejobs top` re-reads by.

mod libpq;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use super::JOBS_CHANNEL;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::ChangeSignal;
use crate::system::outage::{Backoff, Outage, RETRY_CAP, RETRY_FIRST};
use libpq::{ListenConn, StopWatch, Stopper, Woken};

/// Opens listening connections.
pub(crate) struct Opener {
    /// The libpq URL, connection name included.
    pub(crate) url: String,
    /// The settings every connection gets first (the schema on the search path, the lock
    /// timeout).
    pub(crate) setup: String,
    /// litejobs' schema: the payload of its notifications (others are passed over).
    pub(crate) schema: String,
    pub(crate) outage: Arc<Outage>,
}

impl Opener {
    /// A listening connection, and the outage generation it was made in; or why not, as
    /// the server or libpq said it.
    fn open(&self) -> std::result::Result<(ListenConn, u64), String> {
        let generation = self.outage.generation();
        let listen = format!("LISTEN {JOBS_CHANNEL}");
        let conn = ListenConn::open(&self.url, &[&self.setup, &listen])?;
        Ok((conn, generation))
    }
}

/// [`ChangeSignal`] on PostgreSQL: whether a notification (or a lost connection) came since
/// the last look, as the listening thread found; its news wake the dispatcher.
pub(crate) struct Notifications {
    changed: Arc<AtomicBool>,
    news: Receiver<()>,
    /// Ends the listening thread when the worker goes.
    _stop: Stopper,
}

impl Notifications {
    /// Starts the listening thread, which connects at once and again whenever the
    /// connection is lost (never an error: the poll covers the meantime).
    pub(crate) fn start(opener: Opener) -> Result<Notifications> {
        let (stop, stopped) = libpq::stop_pair().map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot make the listening thread's stop signal: {e}"),
            )
        })?;
        let changed = Arc::new(AtomicBool::new(false));
        let (news_tx, news) = crossbeam_channel::bounded(1);
        let flag = Arc::clone(&changed);
        std::thread::Builder::new()
            .name("litejobs-listen".to_string())
            .spawn(move || listen(&opener, &flag, &news_tx, &stopped))
            .map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!("cannot start the thread that listens for new jobs: {e}"),
                )
            })?;
        Ok(Notifications {
            changed,
            news,
            _stop: stop,
        })
    }
}

impl ChangeSignal for Notifications {
    fn changed(&mut self) -> Result<bool> {
        Ok(self.changed.swap(false, Ordering::SeqCst))
    }

    fn news(&self) -> Option<Receiver<()>> {
        Some(self.news.clone())
    }
}

/// The listening thread: connects, waits for notifications and reports each, connects again
/// after a loss, until `stopped`.
fn listen(opener: &Opener, changed: &AtomicBool, news: &Sender<()>, stopped: &StopWatch) {
    let report = || {
        changed.store(true, Ordering::SeqCst);
        // Full: the dispatcher has news it has not read yet, which will do. Disconnected:
        // the worker is gone.
        !matches!(
            news.try_send(()),
            Err(crossbeam_channel::TrySendError::Disconnected(()))
        )
    };
    let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
    let mut failing = false;
    loop {
        let (mut conn, generation) = match opener.open() {
            Ok(opened) => opened,
            Err(e) => {
                opener.outage.failed(&e);
                failing = true;
                if stopped.stopped_within(backoff.failed()) {
                    return;
                }
                continue;
            }
        };
        if std::mem::take(&mut failing) {
            opener.outage.recovered();
        }
        backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
        // Commits made while nobody listened: look.
        if !report() {
            return;
        }
        loop {
            match conn.wait(&opener.schema, stopped) {
                Ok(Woken::Notified) => {
                    if !report() {
                        return;
                    }
                }
                Ok(Woken::Stopped) => return,
                Err(e) => {
                    // Made before the latest outage began (which the pool saw first): lost
                    // in that one, over already.
                    if generation == opener.outage.generation() {
                        opener.outage.failed(&e);
                    }
                    failing = true;
                    // Commits between the last notification and the loss were not heard.
                    if !report() {
                        return;
                    }
                    break;
                }
            }
        }
    }
}

/// [`ChangeSignal`](crate::storage::ChangeSignal) for every write on the server: its current
/// snapshot (`xmin:xmax:running xids`) changes when any transaction gets a transaction id,
/// which a write does first, and again when it ends. Asked on a pooled connection: one
/// round trip, no lock, nothing written.
pub(crate) struct SnapshotWatch {
    pool: super::pool::ServerPool,
    last: Option<String>,
}

impl SnapshotWatch {
    pub(crate) fn new(pool: super::pool::ServerPool) -> SnapshotWatch {
        SnapshotWatch { pool, last: None }
    }
}

impl crate::storage::ChangeSignal for SnapshotWatch {
    fn changed(&mut self) -> Result<bool> {
        use diesel::RunQueryDsl;
        let now = self.pool.run(|conn, started| {
            started.set(true);
            let row: super::sql::TextRow =
                diesel::sql_query("SELECT pg_current_snapshot()::text AS v").get_result(conn)?;
            Ok(row.v)
        })?;
        let changed = self.last.as_ref() != Some(&now);
        self.last = Some(now);
        Ok(changed)
    }
}

#[cfg(test)]
mod tests;
