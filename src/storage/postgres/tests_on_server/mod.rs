//! Unit tests of the PostgreSQL stores that the integration tests cannot reach through the
//! public API, each in a schema of its own on the server named by `LITEJOBS_TEST_PG`;
//! skipped without it, except under `CI=true`.

mod deps;
mod workflows;

use std::sync::atomic::{AtomicU64, Ordering};

use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::Connection;

use super::sql::{query, IntRow, TextRow};
use super::PgTx;
use crate::error::Result;
use crate::storage::jobs::deps::{DependencyStore, Edge, Settled};

pub(super) const NOW: i64 = 1_700_000_000_000;

/// A fresh schema at the current version, dropped afterwards.
pub(super) struct Pg {
    conn: PgConnection,
    schema: String,
}

impl Pg {
    pub(super) fn new() -> Option<Pg> {
        let Ok(url) = std::env::var("LITEJOBS_TEST_PG") else {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "CI=true but LITEJOBS_TEST_PG is not set"
            );
            return None;
        };
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let schema = format!(
            "deps{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut conn = PgConnection::establish(&url).expect("connecting to the test server");
        crate::storage::postgres::migrate::migrate(&mut conn, &schema, true).expect("migrations");
        conn.batch_execute(&format!("SET search_path TO \"{schema}\""))
            .expect("search path");
        Some(Pg { conn, schema })
    }

    /// Runs `f` in one transaction, committed when it returns `Ok`.
    pub(super) fn write<T>(&mut self, f: impl FnOnce(&PgTx<'_>) -> Result<T>) -> Result<T> {
        self.conn.transaction(|c| f(&PgTx::new(c)))
    }

    pub(super) fn int(&mut self, sql: &str) -> i64 {
        self.write(|tx| tx.row::<IntRow>(query(sql)))
            .expect(sql)
            .map_or(0, |r| r.v)
    }

    pub(super) fn exec(&mut self, sql: &str) {
        self.conn.batch_execute(sql).expect(sql);
    }

    pub(super) fn job(&mut self) -> i64 {
        self.int(&format!(
            "INSERT INTO jobs (job_type, payload, run_at, created_at, updated_at)
             VALUES ('t', '{{}}', {NOW}, {NOW}, {NOW}) RETURNING id AS v"
        ))
    }

    pub(super) fn status(&mut self, id: i64) -> String {
        self.write(|tx| {
            tx.row::<TextRow>(query("SELECT status AS v FROM jobs WHERE id = $1").int(id))
        })
        .expect("status")
        .map(|r| r.v)
        .unwrap_or_default()
    }

    pub(super) fn waiting_for(&mut self, id: i64) -> i64 {
        self.int(&format!(
            "SELECT waiting_for AS v FROM jobs WHERE id = {id}"
        ))
    }

    pub(super) fn run_at(&mut self, id: i64) -> i64 {
        self.int(&format!("SELECT run_at AS v FROM jobs WHERE id = {id}"))
    }

    /// Ends `id` as litejobs' writes do: the status and its finishing time.
    pub(super) fn end(&mut self, id: i64, status: &str, at: i64) {
        self.exec(&format!(
            "UPDATE jobs SET status = '{status}', finished_at = {at}, updated_at = {at} WHERE id = {id}"
        ));
    }

    pub(super) fn add(&mut self, edges: &[(i64, i64, bool)], now: i64) -> Result<Settled> {
        let edges: Vec<Edge> = edges
            .iter()
            .map(|&(job_id, depends_on, any_outcome)| Edge {
                job_id,
                depends_on,
                any_outcome,
                counted: false,
            })
            .collect();
        self.write(|tx| tx.add_dependencies(&edges, now))
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = self.conn.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            self.schema
        ));
    }
}
