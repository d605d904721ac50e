//! The pool of connections to the server, and what it does when the server goes away
//! (restarted, stopped, a backend terminated, no connection slot left):
//!
//! - a connection libpq reports as bad is dropped when it comes back to the pool, not handed
//!   out again (diesel's pool keeps one that failed outside a transaction);
//! - once an outage has been seen, connections made before it are asked `SELECT 1` before
//!   their next use, and a dead one is dropped; a transaction whose connection turns out cut
//!   at its `BEGIN` runs again on another, so a restart costs a caller one error at most (a
//!   single statement on a connection nobody knew was cut);
//! - while the server is away a caller fails within [`SLICE`] with
//!   [`ErrorKind::Unavailable`] instead of waiting out the pool's timeout, and the pool keeps
//!   reconnecting in its own thread, no more often than the outage's back-off allows;
//! - its failures go to the database's [`Outage`], which logs one warning when an outage
//!   starts and one line when it ends, instead of one error per try.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::pg::PgConnection;
use diesel::r2d2::event::AcquireEvent;
use diesel::r2d2::{
    ConnectionManager, CustomizeConnection, HandleError, HandleEvent, ManageConnection, Pool,
    PooledConnection, R2D2Connection,
};

use crate::error::{Error, ErrorKind, Result};
use crate::system::outage::Outage;

/// How long a caller waits for the pool at a time: between two slices it finds out whether
/// a connection attempt failed meanwhile, and gives up at once if so.
const SLICE: Duration = Duration::from_millis(50);

/// The longest a caller waits for a free connection while the server is up (the busy
/// timeout, within 1 to 5 s). The pool retries a failed connection attempt at half this at
/// most, so a server that is back is found within 2.5 s.
const MAX_WAIT: Duration = Duration::from_secs(5);

/// The pool's connections, each made by [`Manager`].
pub(crate) type Pooled = PooledConnection<Manager>;

/// What a connection attempt the back-off held back says (never sent to the server).
const HELD_BACK: &str = "litejobs: waiting to try again";

/// Makes the pool's connections (diesel's manager), no more often than the outage's
/// back-off allows while the server is away (the pool retries each pending connection on
/// its own timer, and may have several), and tells which ones are broken.
#[derive(Debug)]
pub(crate) struct Manager {
    inner: ConnectionManager<PgConnection>,
    outage: Arc<Outage>,
}

impl ManageConnection for Manager {
    type Connection = PgConnection;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> std::result::Result<PgConnection, Self::Error> {
        if !self.outage.may_try() {
            return Err(diesel::r2d2::Error::ConnectionError(
                diesel::ConnectionError::BadConnection(HELD_BACK.to_string()),
            ));
        }
        self.inner.connect()
    }

    fn is_valid(&self, conn: &mut PgConnection) -> std::result::Result<(), Self::Error> {
        self.inner.is_valid(conn)
    }

    /// Diesel's test (a transaction left open or failed), or libpq's: a connection whose
    /// server went away has no server version any more (`PQserverVersion` is 0).
    fn has_broken(&self, conn: &mut PgConnection) -> bool {
        self.inner.has_broken(conn) || conn.version().is_err()
    }
}

/// The pool's failed connection attempts, told to the [`Outage`] instead of logged one by one.
#[derive(Debug)]
struct ToOutage(Arc<Outage>);

impl HandleError<diesel::r2d2::Error> for ToOutage {
    fn handle_error(&self, error: diesel::r2d2::Error) {
        let text = error.to_string();
        if !text.contains(HELD_BACK) {
            self.0.failed(&text);
        }
    }
}

impl HandleEvent for ToOutage {
    /// A new connection was made (and set up): the server is there.
    fn handle_acquire(&self, _event: AcquireEvent) {
        self.0.recovered();
    }
}

/// Which outage a pooled connection was last checked in ([`Outage::generation`]).
struct Generation(u64);

/// A pool of connections to one server, with its outages. Its clones share the connections.
#[derive(Clone)]
pub(crate) struct ServerPool {
    pool: Pool<Manager>,
    outage: Arc<Outage>,
    /// How long a caller waits for a free connection while the server is up.
    wait: Duration,
}

impl ServerPool {
    /// A pool of up to `size` connections to `url`, each set up by `setup` when made; a
    /// caller waits up to `busy_timeout` (within 1 to 5 s) for a free one.
    pub(crate) fn new(
        url: &str,
        size: u32,
        busy_timeout: Duration,
        setup: Box<dyn CustomizeConnection<PgConnection, diesel::r2d2::Error>>,
        outage: Arc<Outage>,
    ) -> ServerPool {
        let wait = busy_timeout.clamp(Duration::from_secs(1), MAX_WAIT);
        let pool = Pool::builder()
            .max_size(size.max(2))
            .min_idle(Some(0))
            // No `SELECT 1` before every transaction (a round trip per enqueue): a
            // connection that broke fails its transaction with an error and is not reused.
            .test_on_check_out(false)
            .connection_timeout(wait)
            .connection_customizer(setup)
            .error_handler(Box::new(ToOutage(Arc::clone(&outage))))
            .event_handler(Box::new(ToOutage(Arc::clone(&outage))))
            .build_unchecked(Manager {
                inner: ConnectionManager::new(url),
                outage: Arc::clone(&outage),
            });
        ServerPool { pool, outage, wait }
    }

    /// A connection: at once when one is idle (checked first if it predates the latest
    /// outage), else within the busy timeout; [`ErrorKind::Unavailable`] within [`SLICE`]
    /// when the server cannot be reached or has no slot.
    pub(crate) fn get(&self) -> Result<Pooled> {
        let deadline = Instant::now() + self.wait;
        loop {
            match self.pool.get_timeout(SLICE) {
                Ok(mut conn) => {
                    if self.is_stale(&mut conn) {
                        // Bad now: dropped by the pool when `conn` goes back.
                        continue;
                    }
                    return Ok(conn);
                }
                Err(e) => {
                    // The pool says why when a connection attempt failed meanwhile.
                    let text = e.to_string();
                    let failed = text.strip_prefix("timed out waiting for connection: ");
                    if let Some(cause) = failed.filter(|c| !c.contains(HELD_BACK)) {
                        self.outage.failed(cause);
                    }
                    if failed.is_some() || self.outage.is_down() {
                        return Err(self.unavailable());
                    }
                    if Instant::now() >= deadline {
                        return Err(Error::new(
                            ErrorKind::Busy,
                            format!(
                                "no PostgreSQL connection free for {:?}: all {} of the pool \
                                 are in use",
                                self.wait,
                                self.pool.max_size()
                            ),
                        ));
                    }
                }
            }
        }
    }

    /// True when `conn` was last checked before the latest outage began and does not answer
    /// now. Tags it as checked.
    fn is_stale(&self, conn: &mut Pooled) -> bool {
        let current = self.outage.generation();
        let seen = PooledConnection::extensions(conn)
            .get::<Generation>()
            .map(|g| g.0);
        PooledConnection::extensions_mut(conn).insert(Generation(current));
        match seen {
            Some(seen) if seen < current => conn.ping().is_err(),
            _ => false,
        }
    }

    /// Runs `op` on a connection, telling the outage how it went. `op` sets `started` when
    /// its caller's work begins; a connection found cut before that (its `BEGIN` failed: the
    /// first use after a restart) ran nothing, and `op` runs once more on another.
    pub(crate) fn run<T>(
        &self,
        mut op: impl FnMut(&mut PgConnection, &Cell<bool>) -> Result<T>,
    ) -> Result<T> {
        let started = Cell::new(false);
        let mut conn = self.get()?;
        let first = op(&mut conn, &started);
        drop(conn);
        let out = match first {
            Err(e) if !started.get() && e.kind() == ErrorKind::Unavailable => {
                self.outage.failed(&e.to_string());
                let mut conn = self.get()?;
                op(&mut conn, &started)
            }
            other => other,
        };
        match out {
            Ok(value) => {
                self.outage.recovered();
                Ok(value)
            }
            Err(e) if e.kind() == ErrorKind::Unavailable => {
                let cause = e.to_string();
                let cause = cause.trim_start_matches("PostgreSQL: ");
                self.outage.failed(cause);
                Err(unavailable(self.outage.server(), cause))
            }
            Err(e) => Err(e),
        }
    }

    fn unavailable(&self) -> Error {
        unavailable(self.outage.server(), &self.outage.cause())
    }
}

/// [`ErrorKind::Unavailable`] for `server` (named without a password), saying why.
pub(crate) fn unavailable(server: &str, cause: &str) -> Error {
    let cause = cause.lines().map(str::trim).filter(|l| !l.is_empty());
    let cause = cause.collect::<Vec<_>>().join(" ");
    let what = if crate::system::outage::is_no_slot(&cause) {
        "no connection slot at"
    } else {
        "cannot reach"
    };
    Error::new(
        ErrorKind::Unavailable,
        format!("{what} the PostgreSQL server {server}: {cause}"),
    )
}

/// Why a first connection to `shown` (the URL without its password) failed, from libpq's
/// message: a URL libpq cannot read is said so without quoting it (libpq quotes the part it
/// choked on, which may be a piece of a password holding a `?` or `/`).
pub(crate) fn connect_error(shown: &str, libpq: &str) -> String {
    let libpq = libpq.trim_end();
    let unreadable = ["URI", "percent-encoded", "invalid port number", "key/value"]
        .iter()
        .any(|word| libpq.contains(word));
    if unreadable {
        let what = libpq.split(':').next().unwrap_or(libpq).trim();
        return format!(
            "cannot connect to {shown}: libpq cannot read this URL ({what}); a password \
             holding `/`, `?`, `#`, `@`, `:` or `%` must be percent-encoded (`/` as `%2F`, `?` \
             as `%3F`, ...)"
        );
    }
    let mut message = format!("cannot connect to {shown}: {libpq}");
    if crate::system::outage::is_no_slot(libpq) {
        message.push_str(" (no connection slot: the server's max_connections is reached)");
    }
    message
}

/// True when a failed connection attempt says the server is away, busy starting or
/// stopping, or out of connection slots: worth trying again later, unlike a refused password
/// or a missing database.
pub(crate) fn is_unreachable(error: &str) -> bool {
    crate::system::outage::is_no_slot(error)
        || [
            "Connection refused",
            "could not connect",
            "timeout expired",
            "No route to host",
            "Network is unreachable",
            "the database system is starting up",
            "the database system is shutting down",
            "the database system is in recovery mode",
            "server closed the connection",
        ]
        .iter()
        .any(|text| error.contains(text))
}

/// `url` (litejobs' own parameters taken off) with a connection name for
/// `pg_stat_activity`: libpq's `fallback_application_name`, which the URL's own
/// `application_name` and the `PGAPPNAME` variable override.
pub(crate) fn named_url(url: &str, name: &str) -> String {
    if url.contains("fallback_application_name=") {
        return url.to_string();
    }
    let encoded: String = name
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}fallback_application_name={encoded}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_name_goes_in_as_a_fallback() {
        assert_eq!(
            named_url("postgres://u@h/db", "litejobs work (vm:12)"),
            "postgres://u@h/db?fallback_application_name=litejobs%20work%20%28vm%3A12%29"
        );
        assert_eq!(
            named_url("postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write", "x"),
            "postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write&fallback_application_name=x"
        );
        let own = "postgres://u@h/db?fallback_application_name=mine";
        assert_eq!(named_url(own, "x"), own);
    }

    #[test]
    fn a_url_libpq_cannot_read_is_not_quoted() {
        let libpq = "missing key/value separator \"=\" in URI query parameter: \"xyz@h:5/db\"";
        let message = connect_error("postgres://u:***@h:5/db", libpq);
        assert!(!message.contains("xyz"), "{message}");
        assert!(message.contains("percent-encoded"), "{message}");
        let refused = connect_error(
            "postgres://u@h/db",
            "FATAL:  sorry, too many clients already\n",
        );
        assert!(refused.ends_with("(no connection slot: the server's max_connections is reached)"));
    }

    #[test]
    fn an_unavailable_server_is_named_with_the_cause_on_one_line() {
        let e = unavailable(
            "postgres://app:***@db/jobs",
            "connection refused\n\tIs the server running?\n",
        );
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert_eq!(
            e.to_string(),
            "cannot reach the PostgreSQL server postgres://app:***@db/jobs: connection refused \
             Is the server running?"
        );
        let e = unavailable("db", "FATAL:  sorry, too many clients already");
        assert!(e
            .to_string()
            .starts_with("no connection slot at the PostgreSQL server db"));
    }
}
