//! A worker's `LISTEN` connection: the [`ChangeSignal`] on PostgreSQL. The schema's insert
//! trigger notifies at commit; the dispatcher reads what arrived every change check, which
//! costs no round trip.
//!
//! When the connection is lost (a restart, a terminated backend, a failover) a thread of its
//! own makes a new one, at once and then with back-off (100 ms doubling to 2 s), so the
//! dispatcher never waits on a connect; meanwhile the signal says "no change" and the poll
//! interval finds other processes' jobs. The loss and the new connection each count as a
//! change, for commits made while nobody listened.
//!
//! Beside it, [`SnapshotWatch`]: the signal of every write (not only inserts) that a view
//! such as `litejobs top` re-reads by.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::Connection;

use super::JOBS_CHANNEL;
use crate::error::Result;
use crate::storage::ChangeSignal;
use crate::system::outage::{Backoff, Outage, RETRY_CAP, RETRY_FIRST};

/// Opens listening connections.
pub(crate) struct Opener {
    /// The libpq URL, connection name included.
    pub(crate) url: String,
    /// The settings every connection gets first (the schema on the search path, the lock
    /// timeout).
    pub(crate) setup: String,
    pub(crate) outage: Arc<Outage>,
}

impl Opener {
    /// A listening connection, and the outage generation it was made in; or why not, as
    /// the server or libpq said it.
    fn open(&self) -> std::result::Result<(PgConnection, u64), String> {
        let generation = self.outage.generation();
        let mut conn = PgConnection::establish(&self.url).map_err(|e| e.to_string())?;
        conn.batch_execute(&self.setup)
            .and_then(|()| conn.batch_execute(&format!("LISTEN {JOBS_CHANNEL}")))
            .map_err(|e| e.to_string())?;
        Ok((conn, generation))
    }
}

/// [`ChangeSignal`] on PostgreSQL: notifications already received on the listening
/// connection, which is made again whenever it is lost.
pub(crate) struct Notifications {
    /// The connection, and the outage generation it was made in.
    conn: Option<(PgConnection, u64)>,
    opener: Arc<Opener>,
    reconnect: Option<Reconnect>,
    /// When a reconnecting thread that could not be started may be tried again.
    respawn_at: Instant,
}

/// A thread making a new listening connection; dropping this ends it.
struct Reconnect {
    fresh: Receiver<(PgConnection, u64)>,
    _stop: Sender<()>,
}

impl Notifications {
    /// Listens on a new connection; when it cannot be made now, it is made in the background
    /// as soon as the server lets it (never an error: polling covers the meantime).
    pub(crate) fn start(opener: Opener) -> Notifications {
        let opener = Arc::new(opener);
        let mut signal = Notifications {
            conn: None,
            opener,
            reconnect: None,
            respawn_at: Instant::now(),
        };
        match signal.opener.open() {
            Ok(conn) => signal.conn = Some(conn),
            Err(e) => {
                signal.opener.outage.failed(&e);
                signal.start_reconnect();
            }
        }
        signal
    }

    fn start_reconnect(&mut self) {
        let now = Instant::now();
        if now < self.respawn_at {
            return;
        }
        self.respawn_at = now + RETRY_CAP;
        let (fresh_tx, fresh) = crossbeam_channel::bounded(1);
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let opener = Arc::clone(&self.opener);
        let started = std::thread::Builder::new()
            .name("litejobs-listen".to_string())
            .spawn(move || reconnect(&opener, &fresh_tx, &stopped));
        match started {
            Ok(_) => self.reconnect = Some(Reconnect { fresh, _stop: stop }),
            Err(e) => log::warn!(
                "litejobs: cannot start the thread that listens again for new jobs ({e}); \
                 trying again in {RETRY_CAP:?}, polling meanwhile"
            ),
        }
    }
}

impl ChangeSignal for Notifications {
    fn changed(&mut self) -> Result<bool> {
        if let Some((conn, generation)) = &mut self.conn {
            match drain(conn) {
                Ok(any) => return Ok(any),
                Err(e) => {
                    // Made before the latest outage began (which the pool saw first, while
                    // the worker was too busy to look here): lost in that one, over already.
                    if *generation == self.opener.outage.generation() {
                        self.opener.outage.failed(&e.to_string());
                    }
                    self.conn = None;
                    self.start_reconnect();
                    // Commits between the last look and the loss were not heard: look.
                    return Ok(true);
                }
            }
        }
        let fresh = self.reconnect.as_ref().map(|r| r.fresh.try_recv());
        match fresh {
            Some(Ok(conn)) => {
                self.conn = Some(conn);
                self.reconnect = None;
                // Commits made while nobody listened: look.
                Ok(true)
            }
            Some(Err(TryRecvError::Empty)) => Ok(false),
            Some(Err(TryRecvError::Disconnected)) | None => {
                self.reconnect = None;
                self.start_reconnect();
                Ok(false)
            }
        }
    }
}

/// True when a notification arrived since the last call.
fn drain(conn: &mut PgConnection) -> Result<bool> {
    let mut any = false;
    for n in conn.notifications_iter() {
        n?;
        any = true;
    }
    Ok(any)
}

/// Makes a listening connection, at once and then after each back-off, until one is made
/// (sent on `fresh`) or `stopped` is dropped.
fn reconnect(opener: &Opener, fresh: &Sender<(PgConnection, u64)>, stopped: &Receiver<()>) {
    let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
    let mut wait = Duration::ZERO;
    loop {
        match stopped.recv_timeout(wait) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        match opener.open() {
            Ok(conn) => {
                opener.outage.recovered();
                let _ = fresh.send(conn);
                return;
            }
            Err(e) => {
                opener.outage.failed(&e);
                wait = backoff.failed();
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
