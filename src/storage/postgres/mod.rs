//! The PostgreSQL implementation of the storage interface (feature `postgres`): [`PgDb`] (an
//! r2d2 pool of diesel `PgConnection`s, each with the queue's schema on its search path)
//! hands out [`PgTx`]s, which implement every store of [`crate::storage`] in this folder's
//! files, by raw SQL through diesel's `sql_query` (no ORM schema).
//!
//! What SQLite's single writer gave for free is spelled out here: claims lock their rows
//! with `FOR UPDATE SKIP LOCKED`, one running job per group key is a unique index,
//! read-then-write paths take a transaction-level advisory lock on their key
//! ([`Tx::lock_key`]), and the counts of finished jobs and attempts are kept by the schema's
//! statement-level triggers for every writer alike.

mod admin;
pub(crate) mod copy;
mod dead_letter;
mod encryption;
mod job_logs;
pub(crate) mod job_row;
mod jobs;
mod limits;
mod listen;
pub(crate) mod migrate;
mod periodic;
mod pool;
pub(crate) mod reads;
mod reports;
mod retention;
pub(crate) mod sql;
mod strays;
#[cfg(test)]
mod tests_on_server;
mod webhooks;
mod workers;
mod workflows;

use std::cell::RefCell;
use std::sync::Arc;

use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::r2d2::CustomizeConnection;
use diesel::Connection;

use crate::error::{Error, ErrorKind, Result};
use crate::storage::{Backend, ChangeSignal, CommitFiles, DbConfig, Tx};
use crate::system::outage::Outage;
use listen::{Notifications, Opener};
use pool::ServerPool;

/// The PostgreSQL schema litejobs' tables live in unless the queue is opened with another.
pub(crate) const DEFAULT_SCHEMA: &str = "litejobs";

/// The channel the schema's insert trigger notifies (at commit) and workers listen on.
pub(crate) const JOBS_CHANNEL: &str = "litejobs_jobs";

/// A schema name as an SQL identifier, refused unless it is a plain name (letters, digits,
/// `_`; not starting with a digit), so it can be quoted into statements safely.
pub(crate) fn quoted_schema(name: &str) -> Result<String> {
    let plain = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !plain {
        return Err(Error::new(
            ErrorKind::InvalidConfig,
            format!(
                "PostgreSQL schema name {name:?}: use letters, digits and '_' (at most 63, not \
                 starting with a digit)"
            ),
        ));
    }
    Ok(format!("\"{name}\""))
}

/// Splits litejobs' own `schema=NAME` query parameter off a URL (libpq refuses parameters it
/// does not know): the URL for libpq, and the schema if one was named.
pub(crate) fn split_schema(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), None);
    };
    let mut schema = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("schema=") {
            Some(name) => {
                schema = Some(name.to_string());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    let url = if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    (url, schema)
}

/// The URL without its password (in the user part, or a `password=` parameter), for
/// messages.
pub(crate) fn redacted(url: &str) -> String {
    crate::redact::mask_url_password(url)
}

/// Settings every pooled connection gets when it is made: the schema on the search path,
/// and the busy timeout as the longest wait for a row or advisory lock.
#[derive(Debug)]
struct ConnectionSetup {
    setup: String,
}

impl CustomizeConnection<PgConnection, diesel::r2d2::Error> for ConnectionSetup {
    fn on_acquire(&self, conn: &mut PgConnection) -> std::result::Result<(), diesel::r2d2::Error> {
        conn.batch_execute(&self.setup)
            .map_err(diesel::r2d2::Error::QueryError)
    }
}

/// A pooled PostgreSQL database in one schema.
pub(crate) struct PgDb {
    pool: ServerPool,
    /// The libpq URL, with the connection name.
    url: String,
    setup: String,
    /// The server's outages, shared by the pool and the listening connections.
    outage: Arc<Outage>,
    read_only: bool,
    /// The server's clock less this host's, measured at open.
    clock_offset_ms: i64,
    /// The schema litejobs' tables live in.
    schema: String,
}

impl std::fmt::Debug for PgDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDb")
            .field("url", &self.outage.server())
            .field("read_only", &self.read_only)
            .finish()
    }
}

/// Refuses a URL whose path holds an `@`: what a password with an unescaped `@` or `/`
/// leaves behind. libpq would end the password at its first `@` or `/`, take the rest for
/// the host or the database, and print that part of the password in its error. The error
/// names no part of the URL.
fn check_unescaped_password(url: &str) -> Result<()> {
    let Some((_, rest)) = url.split_once("://") else {
        return Ok(());
    };
    let before_query = rest.split(['?', '#']).next().unwrap_or_default();
    let path = before_query.split_once('/').map_or("", |(_, path)| path);
    if path.contains('@') {
        return Err(Error::new(
            ErrorKind::InvalidConfig,
            "the PostgreSQL URL's database name holds '@': a password (or user name) with '@' \
             or '/' must be percent-encoded ('@' as %40, '/' as %2F); the URL is not shown, \
             as it may hold the password",
        ));
    }
    Ok(())
}

impl PgDb {
    /// Connects, creates or migrates the schema (refusing a newer one), and builds the pool.
    pub(crate) fn open(url: &str, config: &DbConfig) -> Result<PgDb> {
        PgDb::connect(url, config, false)
    }

    /// Connects to an existing litejobs schema for reading only.
    pub(crate) fn open_read_only(url: &str, config: &DbConfig) -> Result<PgDb> {
        PgDb::connect(url, config, true)
    }

    fn connect(url: &str, config: &DbConfig, read_only: bool) -> Result<PgDb> {
        check_unescaped_password(url)?;
        let (url, in_url) = split_schema(url);
        let url = url.as_str();
        let schema = match (config.pg_schema.as_deref(), in_url.as_deref()) {
            (Some(given), Some(named)) if given != named => {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "two PostgreSQL schemas given: {given:?} (pg_schema) and {named:?} (the \
                         URL's schema=); give one"
                    ),
                ))
            }
            (Some(given), _) => given,
            (None, Some(named)) => named,
            (None, None) => DEFAULT_SCHEMA,
        };
        let quoted = quoted_schema(schema)?;
        let lock_ms = config.busy_timeout.as_millis().max(1);
        // Prepared statements keep one generic plan from their first run. Left to `auto`,
        // PostgreSQL switched plans after five runs and about one processing run in six
        // then ran at a third of the speed; custom plans for every run avoided that but cost
        // about 1 ms of planning per claim (pickup p50 1.6 -> 2.5 ms with a 1 ms change check).
        let setup = format!(
            "SET search_path TO {quoted}; SET lock_timeout = {lock_ms}; SET TIME ZONE 'UTC'; \
             SET plan_cache_mode = force_generic_plan"
        );
        let shown = redacted(url);
        let name = format!(
            "{} ({}:{})",
            config.application_name.as_deref().unwrap_or("litejobs"),
            crate::system::host::name(),
            std::process::id()
        );
        let url = &pool::named_url(url, &name);
        let mut first = PgConnection::establish(url).map_err(|e| {
            let e = e.to_string();
            let message = pool::connect_error(&shown, &e);
            let kind = if pool::is_unreachable(&e) {
                ErrorKind::Unavailable
            } else {
                ErrorKind::Database
            };
            Error::new(kind, message)
        })?;
        if read_only {
            migrate::check_current(&mut first, schema)?;
        } else {
            migrate::migrate(&mut first, schema, config.create)?;
        }
        let clock_offset_ms = measure_clock_offset(&mut first)?;
        drop(first);
        let outage = Arc::new(Outage::new(shown));
        let pool = ServerPool::new(
            url,
            config.pool_size,
            config.busy_timeout,
            Box::new(ConnectionSetup {
                setup: setup.clone(),
            }),
            Arc::clone(&outage),
        );
        Ok(PgDb {
            pool,
            url: url.to_string(),
            setup,
            outage,
            read_only,
            clock_offset_ms,
            schema: schema.to_string(),
        })
    }
}

impl Backend for PgDb {
    /// A `REPEATABLE READ, READ ONLY` transaction: every statement sees one snapshot.
    fn read_tx(&self, f: &mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()> {
        self.pool.run(|conn, started| {
            conn.build_transaction()
                .repeatable_read()
                .read_only()
                .run(|c| {
                    started.set(true);
                    f(&PgTx::new(c))
                })
        })
    }

    /// A `READ COMMITTED` transaction, committed when `f` returns `Ok`. Row locks and
    /// [`Tx::lock_key`] wait up to the busy timeout (`lock_timeout`), then
    /// [`ErrorKind::Busy`].
    fn write_tx(&self, f: &mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()> {
        if self.read_only {
            return Err(Error::new(
                ErrorKind::ReadOnly,
                "this queue was opened read-only (Queue::open_read_only); nothing was written",
            ));
        }
        // Run again only when the connection was cut before `f` began: once it has, the
        // commit may have happened, and the caller decides (the worker keeps its outcomes
        // and retries them).
        self.pool.run(|conn, started| {
            conn.transaction(|c| {
                started.set(true);
                f(&PgTx::new(c))
            })
        })
    }

    fn is_server(&self) -> bool {
        true
    }

    /// One statement on its own: one round trip instead of three.
    fn read_statement(&self, f: &mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()> {
        self.pool.run(|conn, started| {
            started.set(true);
            f(&PgTx::autocommit(conn))
        })
    }

    /// Each statement commits on its own (autocommit): one round trip per statement.
    fn write_statements(&self, f: &mut dyn FnMut(&dyn Tx) -> Result<()>) -> Result<()> {
        if self.read_only {
            return self.write_tx(f);
        }
        self.pool.run(|conn, started| {
            started.set(true);
            f(&PgTx::autocommit(conn))
        })
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// `LISTEN` on a connection of its own (made again whenever it is lost): the schema's
    /// insert trigger notifies at commit.
    fn change_signal(&self) -> Result<Box<dyn ChangeSignal>> {
        Ok(Box::new(Notifications::start(Opener {
            url: self.url.clone(),
            setup: self.setup.clone(),
            schema: self.schema.clone(),
            outage: Arc::clone(&self.outage),
        })?))
    }

    fn write_watch(&self) -> Result<Box<dyn ChangeSignal>> {
        Ok(Box::new(listen::SnapshotWatch::new(self.pool.clone())))
    }

    fn schema_version(&self) -> i64 {
        migrate::SCHEMA_VERSION
    }

    fn clock_offset_ms(&self) -> Option<i64> {
        Some(self.clock_offset_ms)
    }

    fn pg_schema(&self) -> Option<&str> {
        Some(&self.schema)
    }

    /// A server has no files to watch.
    fn commit_files(&self) -> Option<CommitFiles> {
        None
    }
}

/// The server's clock less this host's (ms): the fastest of three round trips, the server's
/// reading set against the middle of its round trip.
fn measure_clock_offset(conn: &mut PgConnection) -> Result<i64> {
    let local = || crate::system::clock::Clock::now_ms(&crate::system::clock::SystemClock);
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..3 {
        let before = local();
        let tx = PgTx::new(conn);
        let server = tx
            .row::<sql::IntRow>(sql::query(
                "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS v",
            ))?
            .map_or(before, |r| r.v);
        let after = local();
        let round_trip = after - before;
        let offset = server - (before + round_trip / 2);
        if best.is_none_or(|(rt, _)| round_trip < rt) {
            best = Some((round_trip, offset));
        }
    }
    Ok(best.map_or(0, |(_, offset)| offset))
}

/// The storage interface on one PostgreSQL connection, inside the transaction the [`PgDb`]
/// opened.
pub(crate) struct PgTx<'c> {
    pub(crate) conn: RefCell<&'c mut PgConnection>,
    /// False when each statement commits on its own ([`Backend::write_statements`]).
    pub(crate) in_transaction: bool,
}

impl<'c> PgTx<'c> {
    /// The interface on `conn`, e.g. the caller's own transaction (`enqueue_in`).
    pub(crate) fn new(conn: &'c mut PgConnection) -> PgTx<'c> {
        PgTx {
            conn: RefCell::new(conn),
            in_transaction: true,
        }
    }

    /// The interface on `conn` outside any transaction: each statement commits on its own.
    fn autocommit(conn: &'c mut PgConnection) -> PgTx<'c> {
        PgTx {
            conn: RefCell::new(conn),
            in_transaction: false,
        }
    }
}

impl Tx for PgTx<'_> {
    /// A transaction-level advisory lock on the key's hash: held until commit or rollback.
    fn lock_key(&self, key: &str) -> Result<()> {
        self.execute(
            sql::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))").text(key),
        )?;
        Ok(())
    }
}

/// Runs `f` on the caller's connection, inside the caller's transaction, with litejobs'
/// schema first on the search path; the caller's own search path is back when `f` returns
/// (also on an error).
pub(crate) fn in_callers_transaction<T>(
    conn: &mut PgConnection,
    schema: &str,
    f: impl FnOnce(&PgTx<'_>) -> Result<T>,
) -> Result<T> {
    let quoted = quoted_schema(schema)?;
    let tx = PgTx::new(conn);
    let old = tx
        .row::<sql::TextRow>(sql::query("SELECT current_setting('search_path') AS v"))?
        .map(|r| r.v)
        .unwrap_or_default();
    let path = if old.trim().is_empty() {
        quoted
    } else {
        format!("{quoted}, {old}")
    };
    tx.execute(sql::query("SELECT set_config('search_path', $1, true)").text(&path))?;
    let out = f(&tx);
    let restored = tx.execute(sql::query("SELECT set_config('search_path', $1, true)").text(&old));
    let out = out?;
    restored?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_with_an_unescaped_at_sign_is_refused_without_showing_it() {
        let err = check_unescaped_password("postgres://app:s3c@ret/pw@127.0.0.1:1/app")
            .expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        let text = err.to_string();
        assert!(!text.contains("ret") && !text.contains("s3c"), "{text}");
        for fine in [
            "postgres://app:s3c%40ret%2Fpw@127.0.0.1:1/app",
            "postgres://app@127.0.0.1/app?options=-c%20x@y",
            "postgres:///app",
            "host=127.0.0.1 user=app",
        ] {
            assert!(check_unescaped_password(fine).is_ok(), "{fine}");
        }
    }

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert_eq!(
            quoted_schema("litejobs").ok().as_deref(),
            Some("\"litejobs\"")
        );
        for bad in ["", "a\"b", "a b", "1abc", "a;drop"] {
            assert!(quoted_schema(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_schema_parameter_is_taken_off_the_url() {
        assert_eq!(
            split_schema("postgres://u@h/db?schema=jobs_a"),
            ("postgres://u@h/db".to_string(), Some("jobs_a".to_string()))
        );
        assert_eq!(
            split_schema("postgres://u@h/db?sslmode=disable&schema=x&connect_timeout=5"),
            (
                "postgres://u@h/db?sslmode=disable&connect_timeout=5".to_string(),
                Some("x".to_string())
            )
        );
        assert_eq!(
            split_schema("postgres://u@h/db"),
            ("postgres://u@h/db".to_string(), None)
        );
    }

    #[test]
    fn passwords_are_left_out_of_messages() {
        assert_eq!(
            redacted("postgres://app:s3cr:et@db.local:5432/jobs"),
            "postgres://app:***@db.local:5432/jobs"
        );
        assert_eq!(redacted("postgres://app@db/jobs"), "postgres://app@db/jobs");
        // Unencoded `/`, `?` and `@` in the password, several hosts, a query password.
        assert_eq!(
            redacted(
                "postgres://app:s3/c?r@t@h1:5432,h2:5433/jobs?target_session_attrs=read-write"
            ),
            "postgres://app:***@h1:5432,h2:5433/jobs?target_session_attrs=read-write"
        );
        assert_eq!(
            redacted("postgres://app@db/jobs?sslmode=disable&password=s3/c?r&sslpassword=k"),
            "postgres://app@db/jobs?sslmode=disable&password=[masked]&sslpassword=[masked]"
        );
        assert_eq!(
            redacted("postgres://app@db/jobs?password=a@b/c&x=1"),
            "postgres://app@db/jobs?password=[masked]&x=1"
        );
        // Both kinds, and an `@` in the query: more is hidden than needed, nothing shown.
        let shown = redacted("postgres://app:p?w@db/jobs?password=a@b");
        assert!(!shown.contains("p?w") && !shown.contains("=a"), "{shown}");
    }
}
