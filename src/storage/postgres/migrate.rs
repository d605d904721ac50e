//! Schema versions on PostgreSQL: a one-row `schema_version` table in litejobs' schema,
//! migrated in one transaction under an advisory lock, so that processes starting together
//! migrate once. A schema from a newer litejobs, or a schema whose `jobs` table is not
//! litejobs', is refused and left untouched.

use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::Connection;

use super::sql::{query, BoolRow, IntRow};
use super::{quoted_schema, PgTx};
use crate::error::{Error, ErrorKind, Result};

/// Migration `n` (1-based) is `MIGRATIONS[n - 1]`; frozen once released. `schema.pg.sql` is
/// kept equal to the result of all of them (tests/postgres.rs proves it).
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_init.sql"),
    include_str!("migrations/0002_trigger_search_path.sql"),
    include_str!("migrations/0003_cancel_deadline_encryption.sql"),
    include_str!("migrations/0004_workflows.sql"),
    include_str!("migrations/0005_stored_schedules.sql"),
    include_str!("migrations/0006_error_groups.sql"),
    include_str!("migrations/0007_workers.sql"),
    include_str!("migrations/0008_job_logs.sql"),
    include_str!("migrations/0009_due_notifications.sql"),
];

/// The schema version this build writes and understands.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The schema's version: `None` when it has no litejobs tables.
fn version(tx: &PgTx<'_>, schema: &str) -> Result<Option<i64>> {
    let has = |table: &str| -> Result<bool> {
        Ok(tx
            .row::<BoolRow>(
                query("SELECT to_regclass(quote_ident($1) || '.' || $2) IS NOT NULL AS v")
                    .text(schema)
                    .text(table),
            )?
            .is_some_and(|r| r.v))
    };
    if has("schema_version")? {
        let v = tx.row::<IntRow>(query("SELECT version AS v FROM schema_version"))?;
        return match v {
            Some(v) => Ok(Some(v.v)),
            None => Err(foreign(schema, "its schema_version table is empty")),
        };
    }
    if has("jobs")? {
        return Err(foreign(schema, "it has a jobs table but no schema_version"));
    }
    Ok(None)
}

fn foreign(schema: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::ForeignDatabase,
        format!(
            "PostgreSQL schema {schema:?} is not litejobs': {why} (another program's tables?); \
             nothing was changed — open the queue with another schema"
        ),
    )
}

fn newer(schema: &str, v: i64) -> Error {
    Error::new(
        ErrorKind::NewerSchema,
        format!(
            "PostgreSQL schema {schema:?} is at litejobs schema version {v}, newer than this \
             build's {SCHEMA_VERSION}; upgrade litejobs (nothing was changed)"
        ),
    )
}

fn no_tables(schema: &str) -> Error {
    Error::new(
        ErrorKind::Uninitialized,
        format!(
            "PostgreSQL schema {schema:?} has no litejobs tables; create them with \
             `litejobs init`"
        ),
    )
}

/// Creates the schema or brings it to [`SCHEMA_VERSION`].
pub(crate) fn migrate(conn: &mut PgConnection, schema: &str, create: bool) -> Result<()> {
    let quoted = quoted_schema(schema)?;
    conn.transaction(|c| {
        c.batch_execute(&format!("SET LOCAL search_path TO {quoted}"))?;
        {
            let tx = PgTx::new(c);
            tx.execute(
                query(
                    "SELECT pg_advisory_xact_lock(hashtextextended('litejobs migrate ' || $1, 0))",
                )
                .text(schema),
            )?;
        }
        let current = version(&PgTx::new(c), schema)?;
        let from = match current {
            Some(v) if v > SCHEMA_VERSION => return Err(newer(schema, v)),
            Some(v) => v,
            None if !create => return Err(no_tables(schema)),
            None => {
                c.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {quoted}"))?;
                0
            }
        };
        for (i, migration) in MIGRATIONS.iter().enumerate().skip(from as usize) {
            c.batch_execute(migration)
                .map_err(|e| Error::from(e).prefixed(&format!("migration {}", i + 1)))?;
            if i > 0 {
                PgTx::new(c)
                    .execute(query("UPDATE schema_version SET version = $1").int(i as i64 + 1))?;
            }
        }
        Ok(())
    })
}

/// Checks that the schema exists at a version this build reads, writing nothing.
pub(crate) fn check_current(conn: &mut PgConnection, schema: &str) -> Result<()> {
    let quoted = quoted_schema(schema)?;
    conn.build_transaction().read_only().run(|c| {
        c.batch_execute(&format!("SET LOCAL search_path TO {quoted}"))?;
        match version(&PgTx::new(c), schema)? {
            Some(v) if v > SCHEMA_VERSION => Err(newer(schema, v)),
            Some(_) => Ok(()),
            None => Err(no_tables(schema)),
        }
    })
}
