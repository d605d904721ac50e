//! Reads and writes behind the library's back: a raw rusqlite connection on the SQLite
//! pass, a raw diesel connection in the test's schema on the PostgreSQL pass.

use super::*;

/// A connection of the test's own on the queue's database.
pub(super) enum Raw {
    Sqlite(Connection),
    #[cfg(feature = "postgres")]
    Pg(diesel::PgConnection),
}

/// A job's row as its handler reads it: status, lease holder, attempts, group key.
pub(super) type OwnRow = (String, Option<String>, i64, Option<String>);

impl Raw {
    /// The handler's view of its own row.
    pub(super) fn own_row(&mut self, id: i64) -> OwnRow {
        match self {
            Raw::Sqlite(raw) => raw
                .query_row(
                    "SELECT status, locked_by, attempts, group_key FROM jobs WHERE id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .expect("handler: reading its own row"),
            #[cfg(feature = "postgres")]
            Raw::Pg(conn) => {
                let rows: Vec<pg::OwnRow> = diesel::sql_query(
                    "SELECT status, locked_by, attempts, group_key FROM jobs WHERE id = $1",
                )
                .bind::<BigInt, _>(id)
                .load(conn)
                .expect("handler: reading its own row");
                let r = rows
                    .into_iter()
                    .next()
                    .expect("handler: reading its own row: no row");
                (r.status, r.locked_by, r.attempts, r.group_key)
            }
        }
    }

    /// Running jobs of `group` other than `id`.
    pub(super) fn group_others_running(&mut self, group: Option<String>, id: i64) -> i64 {
        match self {
            Raw::Sqlite(raw) => raw
                .query_row(
                    "SELECT COUNT(*) FROM jobs WHERE group_key = ?1 AND status = 'running'
                       AND id != ?2",
                    params![group, id],
                    |r| r.get(0),
                )
                .expect("handler: reading its group"),
            #[cfg(feature = "postgres")]
            Raw::Pg(conn) => {
                let rows: Vec<pg::N> = diesel::sql_query(
                    "SELECT COUNT(*) AS n FROM jobs WHERE group_key = $1 AND status = 'running'
                       AND id != $2",
                )
                .bind::<Nullable<Text>, _>(group)
                .bind::<BigInt, _>(id)
                .load(conn)
                .expect("handler: reading its group");
                rows.first().map_or(0, |r| r.n)
            }
        }
    }

    /// A worker's claim of job `id` (its attempts now `attempts`), as `CRASHED`, leased
    /// until `until`, at `now`. Returns the rows changed.
    pub(super) fn crash_claim(
        &mut self,
        id: i64,
        attempts: i64,
        until: Option<i64>,
        now: i64,
    ) -> usize {
        match self {
            Raw::Sqlite(check) => check
                .execute(
                    "UPDATE jobs SET status = 'running', attempts = attempts + 1,
                            locked_by = ?1, locked_until = ?2, started_at = ?3, updated_at = ?3
                     WHERE id = ?4 AND status IN ('queued', 'failed') AND attempts = ?5",
                    params![CRASHED, until, now, id, attempts],
                )
                .expect("claiming as the crashed worker"),
            #[cfg(feature = "postgres")]
            Raw::Pg(conn) => diesel::sql_query(
                "UPDATE jobs SET status = 'running', attempts = attempts + 1,
                        locked_by = $1, locked_until = $2, started_at = $3, updated_at = $3
                 WHERE id = $4 AND status IN ('queued', 'failed') AND attempts = $5",
            )
            .bind::<Text, _>(CRASHED)
            .bind::<Nullable<BigInt>, _>(until)
            .bind::<BigInt, _>(now)
            .bind::<BigInt, _>(id)
            .bind::<BigInt, _>(attempts)
            .execute(conn)
            .expect("claiming as the crashed worker"),
        }
    }

    /// The single integer `sql` selects.
    pub(super) fn count(&mut self, sql: &str) -> i64 {
        match self {
            Raw::Sqlite(conn) => conn
                .query_row(sql, [], |r| r.get(0))
                .unwrap_or_else(|e| panic!("{sql}: {e}")),
            #[cfg(feature = "postgres")]
            Raw::Pg(conn) => {
                let rows: Vec<pg::N> = diesel::sql_query(format!("SELECT ({sql})::bigint AS n"))
                    .load(conn)
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                rows.first().map_or(0, |r| r.n)
            }
        }
    }

    /// `Some(id)` while job `id` is in the table.
    pub(super) fn job_id(&mut self, id: i64) -> Option<i64> {
        match self {
            Raw::Sqlite(conn) => conn
                .query_row("SELECT id FROM jobs WHERE id = ?1", [id], |r| r.get(0))
                .optional()
                .expect("looking for a deleted job"),
            #[cfg(feature = "postgres")]
            Raw::Pg(conn) => {
                let rows: Vec<pg::N> = diesel::sql_query("SELECT id AS n FROM jobs WHERE id = $1")
                    .bind::<BigInt, _>(id)
                    .load(conn)
                    .expect("looking for a deleted job");
                rows.first().map(|r| r.n)
            }
        }
    }

    /// Job `id` as the checks compare it, with its lease holder and `updated_at`.
    pub(super) fn job(&mut self, id: i64) -> Option<(Row, Option<String>, i64)> {
        match self {
            Raw::Sqlite(conn) => conn
                .query_row(
                    "SELECT status, attempts, max_attempts, priority, CAST(run_at AS INTEGER),
                            locked_until, requeued_as, locked_by, updated_at
                     FROM jobs WHERE id = ?1",
                    [id],
                    |r| {
                        let row = Row {
                            status: r.get(0)?,
                            attempts: r.get(1)?,
                            max_attempts: r.get(2)?,
                            priority: r.get(3)?,
                            run_at: r.get(4)?,
                            locked_until: r.get(5)?,
                            requeued_as: r.get(6)?,
                        };
                        Ok((row, r.get::<_, Option<String>>(7)?, r.get::<_, i64>(8)?))
                    },
                )
                .optional()
                .expect("reading a job"),
            #[cfg(feature = "postgres")]
            Raw::Pg(conn) => {
                let rows: Vec<pg::JobRow> = diesel::sql_query(
                    "SELECT status, attempts, max_attempts, priority, run_at,
                            locked_until, requeued_as, locked_by, updated_at
                     FROM jobs WHERE id = $1",
                )
                .bind::<BigInt, _>(id)
                .load(conn)
                .expect("reading a job");
                rows.into_iter().next().map(|r| {
                    let row = Row {
                        status: r.status,
                        attempts: r.attempts,
                        max_attempts: r.max_attempts,
                        priority: r.priority,
                        run_at: r.run_at,
                        locked_until: r.locked_until,
                        requeued_as: r.requeued_as,
                    };
                    (row, r.locked_by, r.updated_at)
                })
            }
        }
    }

    /// The recorded changes after `seq`, in order.
    pub(super) fn changes_since(&mut self, seq: i64) -> Vec<Change> {
        match self {
            Raw::Sqlite(check) => check
                .prepare(
                    "SELECT seq, job_id, old_status, new_status, old_locked_by, new_locked_by,
                            old_attempts, new_attempts
                     FROM model_changes WHERE seq > ?1 ORDER BY seq",
                )
                .and_then(|mut s| {
                    s.query_map([seq], |r| {
                        Ok((
                            r.get(0)?,
                            r.get(1)?,
                            r.get(2)?,
                            r.get(3)?,
                            r.get(4)?,
                            r.get(5)?,
                            r.get(6)?,
                            r.get(7)?,
                        ))
                    })?
                    .collect::<rusqlite::Result<_>>()
                })
                .expect("reading the recorded changes"),
            #[cfg(feature = "postgres")]
            Raw::Pg(conn) => {
                let rows: Vec<pg::ChangeRow> = diesel::sql_query(
                    "SELECT seq, job_id, old_status, new_status, old_locked_by, new_locked_by,
                            old_attempts, new_attempts
                     FROM model_changes WHERE seq > $1 ORDER BY seq",
                )
                .bind::<BigInt, _>(seq)
                .load(conn)
                .expect("reading the recorded changes");
                rows.into_iter()
                    .map(|r| {
                        (
                            r.seq,
                            r.job_id,
                            r.old_status,
                            r.new_status,
                            r.old_locked_by,
                            r.new_locked_by,
                            r.old_attempts,
                            r.new_attempts,
                        )
                    })
                    .collect()
            }
        }
    }
}

#[cfg(feature = "postgres")]
use diesel::sql_types::{BigInt, Nullable, Text};
#[cfg(feature = "postgres")]
use diesel::RunQueryDsl;

/// What the checks read from PostgreSQL.
#[cfg(feature = "postgres")]
mod pg {
    use diesel::sql_types::{BigInt, Nullable, Text};
    use diesel::QueryableByName;

    #[derive(QueryableByName)]
    pub(super) struct N {
        #[diesel(sql_type = BigInt)]
        pub(super) n: i64,
    }

    #[derive(QueryableByName)]
    pub(super) struct OwnRow {
        #[diesel(sql_type = Text)]
        pub(super) status: String,
        #[diesel(sql_type = Nullable<Text>)]
        pub(super) locked_by: Option<String>,
        #[diesel(sql_type = BigInt)]
        pub(super) attempts: i64,
        #[diesel(sql_type = Nullable<Text>)]
        pub(super) group_key: Option<String>,
    }

    #[derive(QueryableByName)]
    pub(super) struct JobRow {
        #[diesel(sql_type = Text)]
        pub(super) status: String,
        #[diesel(sql_type = BigInt)]
        pub(super) attempts: i64,
        #[diesel(sql_type = BigInt)]
        pub(super) max_attempts: i64,
        #[diesel(sql_type = BigInt)]
        pub(super) priority: i64,
        #[diesel(sql_type = BigInt)]
        pub(super) run_at: i64,
        #[diesel(sql_type = Nullable<BigInt>)]
        pub(super) locked_until: Option<i64>,
        #[diesel(sql_type = Nullable<BigInt>)]
        pub(super) requeued_as: Option<i64>,
        #[diesel(sql_type = Nullable<Text>)]
        pub(super) locked_by: Option<String>,
        #[diesel(sql_type = BigInt)]
        pub(super) updated_at: i64,
    }

    #[derive(QueryableByName)]
    pub(super) struct ChangeRow {
        #[diesel(sql_type = BigInt)]
        pub(super) seq: i64,
        #[diesel(sql_type = BigInt)]
        pub(super) job_id: i64,
        #[diesel(sql_type = Nullable<Text>)]
        pub(super) old_status: Option<String>,
        #[diesel(sql_type = Nullable<Text>)]
        pub(super) new_status: Option<String>,
        #[diesel(sql_type = Nullable<Text>)]
        pub(super) old_locked_by: Option<String>,
        #[diesel(sql_type = Nullable<Text>)]
        pub(super) new_locked_by: Option<String>,
        #[diesel(sql_type = Nullable<BigInt>)]
        pub(super) old_attempts: Option<i64>,
        #[diesel(sql_type = Nullable<BigInt>)]
        pub(super) new_attempts: Option<i64>,
    }
}

/// The PostgreSQL twin of [`CHANGE_TRIGGERS`]: row-level triggers on the jobs of `schema`
/// writing the same `model_changes` rows, every name qualified with the test's schema (the
/// library's connections run the triggers with their own search path).
#[cfg(feature = "postgres")]
pub(super) fn pg_change_triggers(schema: &str) -> String {
    let s = format!("\"{schema}\"");
    format!(
        "
CREATE TABLE {s}.model_changes (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id BIGINT NOT NULL,
    old_status TEXT, new_status TEXT, old_locked_by TEXT, new_locked_by TEXT,
    old_attempts BIGINT, new_attempts BIGINT);
CREATE FUNCTION {s}.model_jobs_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {s}.model_changes (job_id, new_status, new_locked_by, new_attempts)
        VALUES (NEW.id, NEW.status, NEW.locked_by, NEW.attempts);
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO {s}.model_changes (job_id, old_status, new_status, old_locked_by,
                                       new_locked_by, old_attempts, new_attempts)
        VALUES (NEW.id, OLD.status, NEW.status, OLD.locked_by, NEW.locked_by, OLD.attempts,
                NEW.attempts);
    ELSE
        INSERT INTO {s}.model_changes (job_id, old_status, old_locked_by, old_attempts)
        VALUES (OLD.id, OLD.status, OLD.locked_by, OLD.attempts);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER model_jobs_insert AFTER INSERT ON {s}.jobs
    FOR EACH ROW EXECUTE FUNCTION {s}.model_jobs_change();
CREATE TRIGGER model_jobs_update AFTER UPDATE ON {s}.jobs
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.locked_by IS DISTINCT FROM NEW.locked_by
          OR OLD.attempts IS DISTINCT FROM NEW.attempts)
    EXECUTE FUNCTION {s}.model_jobs_change();
CREATE TRIGGER model_jobs_delete AFTER DELETE ON {s}.jobs
    FOR EACH ROW EXECUTE FUNCTION {s}.model_jobs_change();
"
    )
}
