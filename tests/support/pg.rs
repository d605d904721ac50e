//! A PostgreSQL fixture (feature `postgres`): each test gets a schema of its own on the
//! server named by `LITEJOBS_TEST_PG` (`.ci/run` starts a throwaway one), dropped when the
//! test ends. Without the variable the test is skipped with a note, except under `CI=true`,
//! where a missing server fails the test rather than hiding it.

use std::sync::atomic::{AtomicU64, Ordering};

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use litejobs::{ManualClock, Queue};

use super::{temp_dir, TestEnv, START_MS};

/// The test server's URL, or `None` (skip) outside CI.
pub fn server() -> Option<String> {
    match std::env::var("LITEJOBS_TEST_PG") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "CI=true but LITEJOBS_TEST_PG is not set: the PostgreSQL tests need the server \
                 .ci/run starts"
            );
            eprintln!("skipped: set LITEJOBS_TEST_PG=postgres://… to run the PostgreSQL tests");
            None
        }
    }
}

/// A schema of its own for one test, dropped (with everything in it) when this is dropped.
pub struct PgSchema {
    pub url: String,
    pub name: String,
}

impl PgSchema {
    /// A fresh, unique schema name on the test server (not yet created).
    pub fn new(url: &str) -> PgSchema {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let schema = PgSchema {
            url: url.to_string(),
            name,
        };
        schema.drop_schema();
        schema
    }

    /// A raw diesel connection with this schema on its search path.
    pub fn raw(&self) -> PgConnection {
        let mut conn = PgConnection::establish(&self.url).expect("connecting to the test server");
        conn.batch_execute(&format!("SET search_path TO \"{}\"", self.name))
            .expect("setting the search path");
        conn
    }

    /// A queue in this schema, on `clock`.
    pub fn queue(&self, clock: &ManualClock) -> Queue {
        Queue::builder()
            .clock(clock.clone())
            .pg_schema(&self.name)
            .open(&self.url)
            .expect("Queue::open on the test server")
    }

    fn drop_schema(&self) {
        if let Ok(mut conn) = PgConnection::establish(&self.url) {
            let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name));
        }
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        self.drop_schema();
    }
}

/// A queue in a fresh schema on a `ManualClock` at [`START_MS`], or `None` (skip).
pub fn setup() -> Option<(PgSchema, Queue, ManualClock)> {
    let url = server()?;
    let schema = PgSchema::new(&url);
    let clock = ManualClock::new(START_MS);
    let queue = schema.queue(&clock);
    Some((schema, queue, clock))
}

impl PgSchema {
    /// A single `bigint` (named `n`) read by `sql` in this schema.
    pub fn count(&self, sql: &str) -> i64 {
        use diesel::sql_types::BigInt;
        use diesel::{sql_query, QueryableByName, RunQueryDsl};
        #[derive(QueryableByName)]
        struct N {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        let mut conn = self.raw();
        sql_query(sql)
            .load::<N>(&mut conn)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .first()
            .map_or(0, |r| r.n)
    }
}

impl PgSchema {
    /// The first column of the first row of `sql`, cast to bigint (0 without a row).
    pub fn first_i64(&self, sql: &str) -> i64 {
        self.count(&format!(
            "SELECT coalesce((SELECT ({sql}))::bigint, 0) AS n"
        ))
    }

    /// Runs `sql` (one or more statements).
    pub fn exec(&self, sql: &str) {
        self.raw()
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// The PostgreSQL pass of the test matrix: a [`TestEnv`] whose queue lives in a fresh
/// schema on the test server (`path` holds the URL; `dir` is an empty temp dir for files a
/// test writes beside the database).
pub fn matrix_env() -> TestEnv {
    let url = std::env::var("LITEJOBS_TEST_PG")
        .ok()
        .filter(|u| !u.is_empty())
        .expect("LITEJOBS_TEST_BACKEND=postgres needs LITEJOBS_TEST_PG=postgres://… (.ci/run sets both)");
    let schema = PgSchema::new(&url);
    let clock = ManualClock::new(START_MS);
    let queue = schema.queue(&clock);
    // The schema rides in the URL, so that everything opening `path` (the CLI, child
    // processes, the dashboard's tests) lands in this test's schema.
    let sep = if url.contains('?') { '&' } else { '?' };
    TestEnv {
        dir: temp_dir(),
        path: std::path::PathBuf::from(format!("{url}{sep}schema={}", schema.name)),
        queue,
        clock,
        pg: Some(schema),
    }
}
