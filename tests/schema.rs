//! The schema contract: `schema.sql` equals what the migrations build, other programs'
//! rows are run as written, foreign/newer/non-SQLite files are refused untouched, older
//! files are migrated, and open turns on WAL.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Barrier;
use std::time::{SystemTime, UNIX_EPOCH};

use litejobs::defaults::{DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE};
use litejobs::{ErrorKind, JobStatus, NewJob, Queue, Synchronous, SCHEMA_VERSION};
use rusqlite::Connection;
use serde_json::json;

use crate::support::{
    count_rows, create_from_schema_sql, create_from_sql, raw_conn, setup, sqlite_only, temp_dir,
    user_version, TestEnv, SCHEMA_SQL,
};

/// SQL without `--` comments, with runs of whitespace collapsed to one space, trimmed.
fn normalize_sql(sql: &str) -> String {
    sql.lines()
        .map(|line| line.find("--").map_or(line, |at| &line[..at]))
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ")
}

/// One column as `PRAGMA table_info` describes it: cid, name, type, notnull, default, pk.
type Column = (i64, String, String, i64, Option<String>, i64);

/// Everything about a database's schema that a program writing rows into it could notice.
#[derive(Debug, PartialEq, Eq)]
struct SchemaSnapshot {
    user_version: i64,
    /// name -> (type, table, normalized SQL), for every table and index not named `sqlite_%`.
    objects: BTreeMap<String, (String, String, String)>,
    /// table -> its columns.
    columns: BTreeMap<String, Vec<Column>>,
}

impl SchemaSnapshot {
    fn has(&self, kind: &str, name: &str) -> bool {
        self.objects.get(name).is_some_and(|(k, _, _)| k == kind)
    }
}

fn snapshot(path: &Path) -> SchemaSnapshot {
    let conn = raw_conn(path);
    snapshot_conn(&conn)
}

fn snapshot_conn(conn: &Connection) -> SchemaSnapshot {
    let user_version = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .expect("reading user_version");
    let mut stmt = conn
        .prepare(
            "SELECT type, name, tbl_name, sql FROM sqlite_master
             WHERE type IN ('table', 'index', 'trigger') AND name NOT LIKE 'sqlite_%'",
        )
        .expect("preparing the sqlite_master query");
    let objects: BTreeMap<String, (String, String, String)> = stmt
        .query_map([], |row| {
            let sql: Option<String> = row.get(3)?;
            Ok((
                row.get::<_, String>(1)?,
                (
                    row.get(0)?,
                    row.get(2)?,
                    normalize_sql(sql.as_deref().unwrap_or("")),
                ),
            ))
        })
        .expect("querying sqlite_master")
        .collect::<rusqlite::Result<_>>()
        .expect("reading sqlite_master");
    let mut columns = BTreeMap::new();
    for (name, (kind, _, _)) in &objects {
        if kind != "table" {
            continue;
        }
        let mut stmt = conn
            .prepare(
                "SELECT cid, name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1)",
            )
            .expect("preparing table_info");
        let cols = stmt
            .query_map([name], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                ))
            })
            .expect("querying table_info")
            .collect::<rusqlite::Result<Vec<Column>>>()
            .expect("reading table_info");
        columns.insert(name.clone(), cols);
    }
    SchemaSnapshot {
        user_version,
        objects,
        columns,
    }
}

#[test]
fn normalizer_strips_comments_and_whitespace_only() {
    let sql =
        "CREATE TABLE t (\n    -- a comment\n    a   INTEGER NOT NULL, -- trailing\n\tb TEXT\n)  ";
    assert_eq!(
        normalize_sql(sql),
        "CREATE TABLE t ( a INTEGER NOT NULL, b TEXT )"
    );
    assert_ne!(
        normalize_sql("CREATE TABLE t (a INTEGER)"),
        normalize_sql("CREATE TABLE t (a TEXT)")
    );
}

#[test]
fn schema_sql_and_migrations_build_the_same_schema() {
    let dir = temp_dir();
    let from_sql = dir.path().join("from_schema_sql.db");
    let from_open = dir.path().join("from_open.db");
    create_from_schema_sql(&from_sql);
    drop(Queue::open(&from_open).expect("Queue::open on a new file"));

    let a = snapshot(&from_sql);
    let b = snapshot(&from_open);

    // The normalizer and the queries must see the real schema, or equality proves nothing.
    for snap in [&a, &b] {
        for table in [
            "jobs",
            "job_attempts",
            "idempotency_keys",
            "queues",
            "job_counts",
        ] {
            assert!(snap.has("table", table), "table {table} missing: {snap:#?}");
            assert!(
                snap.columns.get(table).is_some_and(|c| !c.is_empty()),
                "no columns read for {table}"
            );
        }
        for index in [
            "jobs_due_idx",
            "jobs_idempotency_key_idx",
            "jobs_group_key_idx",
            "jobs_running_lease_idx",
            "jobs_finished_idx",
            "job_attempts_job_idx",
        ] {
            assert!(snap.has("index", index), "index {index} missing: {snap:#?}");
        }
        for trigger in [
            "jobs_counted_insert",
            "jobs_counted_update",
            "jobs_counted_delete",
        ] {
            assert!(
                snap.has("trigger", trigger),
                "trigger {trigger} missing: {snap:#?}"
            );
        }
        let (_, _, jobs_sql) = &snap.objects["jobs"];
        assert!(
            !jobs_sql.contains("--") && !jobs_sql.contains('\n') && !jobs_sql.contains("  "),
            "SQL not normalized: {jobs_sql}"
        );
        assert!(jobs_sql.contains("job_type TEXT NOT NULL,"), "{jobs_sql}");
    }
    assert_eq!(a.user_version, SCHEMA_VERSION);
    assert_eq!(
        a, b,
        "schema.sql (left) and the migrations (right) disagree"
    );
}

#[test]
fn schema_comparison_notices_a_changed_column_or_index() {
    let dir = temp_dir();
    let reference = dir.path().join("reference.db");
    create_from_schema_sql(&reference);
    let reference = snapshot(&reference);

    let changes = [
        (
            "priority INTEGER NOT NULL DEFAULT 0",
            "priority INTEGER NOT NULL DEFAULT 1",
        ),
        ("WHERE status IN ('queued', 'failed');", ";"),
        (
            "    duration_ms INTEGER\n",
            "    duration_ms INTEGER, extra TEXT\n",
        ),
        (
            &format!("PRAGMA user_version = {SCHEMA_VERSION};"),
            "PRAGMA user_version = 0;",
        ),
    ];
    for (i, (from, to)) in changes.iter().enumerate() {
        assert!(
            SCHEMA_SQL.contains(from),
            "sanity check is stale: schema.sql no longer contains {from:?}"
        );
        let path = dir.path().join(format!("changed_{i}.db"));
        create_from_sql(&path, &SCHEMA_SQL.replacen(from, to, 1));
        assert_ne!(
            snapshot(&path),
            reference,
            "replacing {from:?} with {to:?} went unnoticed"
        );
    }
}

#[test]
fn schema_sql_uses_no_functions_newer_than_sqlite_3_31() {
    // unixepoch() (3.38), ->/->> (3.38), STRICT tables (3.37), RETURNING (3.35),
    // DROP COLUMN (3.35), generated columns (3.31 is fine but keep defaults plain).
    let body = normalize_sql(SCHEMA_SQL).to_lowercase();
    for newer in [
        "unixepoch(",
        "->",
        " strict",
        "returning",
        "drop column",
        "generated always",
        "iif(",
    ] {
        assert!(
            !body.contains(newer),
            "schema.sql uses {newer:?}, newer than SQLite 3.31"
        );
    }
}

#[test]
fn file_created_from_schema_sql_opens_as_current() {
    let dir = temp_dir();
    let path = dir.path().join("app.db");
    create_from_schema_sql(&path);
    let before = snapshot(&path);
    assert_eq!(before.user_version, SCHEMA_VERSION);

    let queue = Queue::open(&path).expect("a file made from schema.sql opens as current");
    let id = queue
        .enqueue(NewJob::new("send_email", json!({"user_id": 42})))
        .expect("enqueue into a file made from schema.sql");
    let job = queue
        .job(id)
        .expect("reading the job back")
        .expect("the job exists");
    assert_eq!(job.status, JobStatus::Queued);
    assert_eq!(job.payload, json!({"user_id": 42}));
    drop(queue);

    assert_eq!(user_version(&path), SCHEMA_VERSION);
    assert_eq!(snapshot(&path), before, "opening changed the schema");
}

/// Opens `path`, expects a refusal, and checks the file kept every byte and got no
/// journal, WAL or shared-memory file beside it.
fn open_refused(path: &Path) -> litejobs::Error {
    let before = std::fs::read(path).expect("reading the fixture before open");
    let err = Queue::open(path).expect_err("Queue::open must refuse this file");
    let after = std::fs::read(path).expect("reading the fixture after open");
    assert!(
        before == after,
        "the refused file was changed ({} bytes before, {} after): {err}",
        before.len(),
        after.len()
    );
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        assert!(
            !Path::new(&side).exists(),
            "refusing the file left {} behind",
            Path::new(&side).display()
        );
    }
    err
}

/// A rusqlite fixture in rollback-journal mode, closed before its bytes are taken.
fn sqlite_fixture(path: &Path, sql: &str) {
    let conn = raw_conn(path);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .expect("reading journal_mode");
    assert_eq!(mode, "delete", "fixtures must be in rollback-journal mode");
    conn.execute_batch(sql).expect("building the fixture");
    conn.close()
        .map_err(|(_, e)| e)
        .expect("closing the fixture");
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_untouched() {
    let dir = temp_dir();
    let path = dir.path().join("notes.txt");
    let text = "These are my notes, not a database.\n".repeat(8 * 1024 / 36 + 1);
    std::fs::write(&path, &text.as_bytes()[..8 * 1024]).expect("writing the text file");

    let err = open_refused(&path);
    assert_eq!(err.kind(), ErrorKind::NotADatabase, "{err}");
    assert!(
        err.to_string().contains("notes.txt"),
        "the message should name the file: {err}"
    );
}

#[test]
fn another_programs_jobs_table_is_refused_untouched() {
    let dir = temp_dir();
    let path = dir.path().join("todo.db");
    sqlite_fixture(
        &path,
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY, title TEXT);
         INSERT INTO jobs (title) VALUES ('paint the fence');",
    );

    let err = open_refused(&path);
    assert_eq!(err.kind(), ErrorKind::ForeignDatabase, "{err}");
    assert!(err.to_string().contains("jobs"), "{err}");
}

#[test]
fn a_file_from_a_newer_litejobs_is_refused_untouched() {
    let dir = temp_dir();
    let path = dir.path().join("newer.db");
    let newer = SCHEMA_VERSION + 1;
    sqlite_fixture(
        &path,
        &format!("{SCHEMA_SQL}\nPRAGMA user_version = {newer};"),
    );
    assert_eq!(user_version(&path), newer);

    let err = open_refused(&path);
    assert_eq!(err.kind(), ErrorKind::NewerSchema, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&newer.to_string()),
        "the message should name the file's version {newer}: {msg}"
    );
}

#[test]
fn a_newer_file_in_wal_mode_is_refused_with_its_main_file_untouched() {
    // Real files from a newer litejobs are in WAL mode; the refusal must not write either.
    let dir = temp_dir();
    let path = dir.path().join("newer_wal.db");
    drop(Queue::open(&path).expect("creating a litejobs file"));
    let conn = raw_conn(&path);
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .expect("bumping user_version");
    // Into the main file now: a checkpoint left to whichever connection closes last could
    // land between the two reads below (a pooled connection of the first open may close
    // late on a loaded machine), and the test would blame the refusal for it.
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
    conn.close().map_err(|(_, e)| e).expect("closing");

    let before = std::fs::read(&path).expect("reading before");
    let err = Queue::open(&path).expect_err("a newer file must be refused");
    assert_eq!(err.kind(), ErrorKind::NewerSchema, "{err}");
    let after = std::fs::read(&path).expect("reading after");
    assert!(before == after, "the refused WAL-mode file was changed");
    assert_eq!(user_version(&path), SCHEMA_VERSION + 1);
}

#[test]
fn a_file_with_a_user_version_but_no_jobs_table_is_refused_untouched() {
    let dir = temp_dir();
    let path = dir.path().join("other_app.db");
    sqlite_fixture(
        &path,
        "CREATE TABLE settings (k TEXT PRIMARY KEY, v TEXT);
         INSERT INTO settings VALUES ('theme', 'dark');
         PRAGMA user_version = 7;",
    );

    let err = open_refused(&path);
    assert_eq!(err.kind(), ErrorKind::ForeignDatabase, "{err}");
    assert!(err.to_string().contains('7'), "{err}");
}

#[test]
fn an_application_file_without_our_tables_is_migrated() {
    let dir = temp_dir();
    let path = dir.path().join("app.db");
    sqlite_fixture(
        &path,
        "CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT NOT NULL);
         INSERT INTO users (email) VALUES ('ada@example.com'), ('grace@example.com');",
    );
    assert_eq!(user_version(&path), 0);

    let queue = Queue::open(&path).expect("an application's file is migrated on open");
    let id = queue
        .enqueue(NewJob::new("send_email", json!({"user_id": 1})))
        .expect("enqueue after migration");
    assert!(queue.job(id).expect("read back").is_some());
    drop(queue);

    assert_eq!(user_version(&path), SCHEMA_VERSION);
    assert_eq!(
        count_rows(&path, "users"),
        2,
        "the application's rows must stay"
    );
    let emails: Vec<String> = {
        let conn = raw_conn(&path);
        let mut stmt = conn
            .prepare("SELECT email FROM users ORDER BY id")
            .expect("preparing");
        let rows = stmt
            .query_map([], |row| row.get(0))
            .expect("querying users");
        rows.collect::<rusqlite::Result<_>>()
            .expect("reading users")
    };
    assert_eq!(emails, ["ada@example.com", "grace@example.com"]);
    let snap = snapshot(&path);
    assert!(snap.has("table", "users"));
    for table in ["jobs", "job_attempts", "idempotency_keys", "queues"] {
        assert!(snap.has("table", table), "{table} not created");
    }

    // Migrated once: opening again is a no-op.
    let again = Queue::open(&path).expect("reopening the migrated file");
    assert_eq!(again.list(&Default::default()).expect("list").len(), 1);
}

#[test]
fn concurrent_first_opens_of_a_new_file_all_succeed() {
    // Several processes starting at once on a new file: one migrates, the others wait
    // and find it current. Separate Queues have separate connections and write gates, as
    // separate processes would. The race window is small, so it is tried many times: each
    // round is a new file opened by 8 threads at once.
    let dir = temp_dir();
    let n = 8;
    for round in 0..25 {
        let path = dir.path().join(format!("fresh_{round}.db"));
        let barrier = Barrier::new(n);
        let results: Vec<litejobs::Result<Queue>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        Queue::open(&path)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("opening thread panicked"))
                .collect()
        });
        let failures: Vec<String> = results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().err().map(|e| format!("open #{i}: {e:?}")))
            .collect();
        assert!(
            failures.is_empty(),
            "round {round}: {} of {n} concurrent opens of a new file failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
        for (i, q) in results.into_iter().flatten().enumerate() {
            q.enqueue(NewJob::new("noop", json!({ "i": i })))
                .expect("enqueue after concurrent open");
        }
        assert_eq!(user_version(&path), SCHEMA_VERSION);
        assert_eq!(count_rows(&path, "jobs"), n as i64);
    }
}

#[test]
fn opening_an_unmigrated_file_while_it_is_locked_gives_busy_and_changes_nothing() {
    let dir = temp_dir();
    let path = dir.path().join("app.db");
    sqlite_fixture(
        &path,
        "CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT NOT NULL);
         INSERT INTO users (email) VALUES ('ada@example.com');",
    );
    let before = std::fs::read(&path).expect("reading the fixture");
    let app = raw_conn(&path);
    app.execute_batch("BEGIN IMMEDIATE; INSERT INTO users (email) VALUES ('bob@example.com');")
        .expect("the application holds the write lock");

    let err = Queue::builder()
        .busy_timeout(std::time::Duration::from_millis(200))
        .open(&path)
        .expect_err("migration cannot take the lock");
    assert_eq!(err.kind(), ErrorKind::Busy, "{err:?}");
    assert!(err.is_busy());

    app.execute_batch("ROLLBACK")
        .expect("the application rolls back");
    drop(app);
    let after = std::fs::read(&path).expect("reading the fixture again");
    assert!(before == after, "a refused (busy) open changed the file");
    assert_eq!(user_version(&path), 0);

    let queue = Queue::open(&path).expect("open once the lock is gone");
    queue
        .enqueue(NewJob::new("send_email", json!({"user_id": 1})))
        .expect("enqueue");
    drop(queue);
    assert_eq!(user_version(&path), SCHEMA_VERSION);
    assert_eq!(count_rows(&path, "users"), 1);
}

#[test]
fn open_turns_on_wal_mode() {
    if sqlite_only() {
        return;
    }
    let env = setup();
    let mode: String = env
        .raw()
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .expect("reading journal_mode");
    assert_eq!(mode, "wal");
    env.queue
        .enqueue(NewJob::new("t", json!({})))
        .expect("enqueue");
    assert!(
        env.dir.path().join("jobs.db-wal").exists(),
        "a write in WAL mode leaves a -wal file while the queue is open"
    );
}

#[test]
fn open_with_synchronous_full_works() {
    let dir = temp_dir();
    let path = dir.path().join("full.db");
    let queue = Queue::builder()
        .synchronous(Synchronous::Full)
        .open(&path)
        .expect("open with synchronous FULL");
    let id = queue
        .enqueue(NewJob::new("send_email", json!({})))
        .expect("enqueue with synchronous FULL");
    assert_eq!(
        queue.job(id).expect("read back").map(|j| j.status),
        Some(JobStatus::Queued)
    );
    let mode: String = raw_conn(&path)
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .expect("reading journal_mode");
    assert_eq!(mode, "wal");
}

fn wall_clock_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the wall clock is after 1970");
    i64::try_from(since.as_millis()).expect("ms fit in i64")
}

#[test]
fn a_row_inserted_by_plain_sql_gets_the_documented_defaults() {
    let env = setup();
    let before = wall_clock_ms();
    // The smallest valid job from schema.sql's (and schema.pg.sql's) comment.
    env.sql_exec(
        r#"INSERT INTO jobs (job_type, payload) VALUES ('deliver_webhook', '{"event_id": 7}')"#,
    );
    let id = env.sql_i64("SELECT MAX(id) FROM jobs");
    let after = wall_clock_ms();

    let job = env
        .queue
        .job(id)
        .expect("reading a row written by plain SQL")
        .expect("the row exists");
    assert_eq!(job.id, id);
    assert_eq!(job.job_type, "deliver_webhook");
    assert_eq!(job.payload, json!({"event_id": 7}));
    assert_eq!(job.status, JobStatus::Queued);
    assert_eq!(job.queue, DEFAULT_QUEUE);
    assert_eq!(job.queue, "default");
    assert_eq!(job.priority, 0);
    assert_eq!(job.attempts, 0);
    assert_eq!(job.max_attempts, i64::from(DEFAULT_MAX_ATTEMPTS));
    // SQL defaults read the database's clock, not the queue's: compare with a generous
    // margin.
    let margin = 60_000;
    for (name, at) in [
        ("run_at", job.run_at),
        ("created_at", job.created_at),
        ("updated_at", job.updated_at),
    ] {
        assert!(
            at >= before - margin && at <= after + margin,
            "{name} = {at} is not near the wall clock ({before}..{after}): not milliseconds?"
        );
    }
    assert_eq!(job.started_at, None);
    assert_eq!(job.finished_at, None);
    assert_eq!(job.locked_by, None);
    assert_eq!(job.locked_until, None);
    assert_eq!(job.last_error, None);
    assert_eq!(job.idempotency_key, None);
    assert_eq!(job.group_key, None);
    assert_eq!(job.timeout_ms, None);
    assert_eq!(job.result, None);
}

#[test]
fn a_plain_sql_delete_keeps_the_newest_job_so_ids_are_never_reused() {
    // schema.sql's jobs_newest_kept rule; PostgreSQL's ids come from a sequence instead.
    if sqlite_only() {
        return;
    }
    let env = setup();
    let conn = env.raw();
    for _ in 0..3 {
        conn.execute(
            "INSERT INTO jobs (job_type, payload, status) VALUES ('t', '{}', 'succeeded')",
            [],
        )
        .expect("a finished job by plain SQL");
    }
    let newest = conn.last_insert_rowid();
    conn.execute(
        "INSERT INTO job_attempts (job_id, attempt, finished_at, outcome) VALUES (?1, 1, 1, 'failed')",
        [newest],
    )
    .expect("an attempt of the newest job");
    let deleted = conn
        .execute("DELETE FROM jobs", [])
        .expect("deleting every job by plain SQL");
    assert_eq!(
        deleted, 2,
        "the newest row is skipped, the statement goes on"
    );
    let left: Vec<i64> = conn
        .prepare("SELECT id FROM jobs")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .expect("ids left");
    assert_eq!(left, vec![newest]);
    // The triggers' counts follow what was really deleted.
    let stats = env.queue.stats().expect("stats");
    assert_eq!(stats.count(JobStatus::Succeeded), 1);
    let metrics = litejobs::metrics::prometheus_text(&env.queue).expect("metrics");
    assert!(
        metrics.contains(r#"litejobs_attempts{job_type="t",outcome="failed"} 1"#),
        "{metrics}"
    );
    conn.execute(
        "INSERT INTO jobs (job_type, payload) VALUES ('t', '{}')",
        [],
    )
    .expect("a new job");
    assert_eq!(
        conn.last_insert_rowid(),
        newest + 1,
        "no id is handed out twice"
    );
}

#[test]
fn a_row_whose_payload_is_not_json_is_still_readable() {
    let env = setup();
    env.sql_exec("INSERT INTO jobs (job_type, payload) VALUES ('legacy', 'plain text')");
    let id = env.sql_i64("SELECT MAX(id) FROM jobs");
    let job = env
        .queue
        .job(id)
        .expect("a non-JSON payload must not make the row unreadable")
        .expect("the row exists");
    assert_eq!(job.payload, json!("plain text"));
    assert_eq!(env.queue.list(&Default::default()).expect("list").len(), 1);
}

#[test]
fn a_row_with_a_fractional_time_from_another_program_does_not_break_reads() {
    // A natural mistake in another language: run_at = time.time() * 1000 (a REAL). The
    // INTEGER column keeps a REAL that has a fraction. Either the schema refuses such a row
    // at INSERT with a clear error, or litejobs reads it; one bad row must not make every
    // list fail. (SQLite only: a PostgreSQL bigint column rounds the value at INSERT.)
    if sqlite_only() {
        return;
    }
    let env = setup();
    env.queue
        .enqueue(NewJob::new("good", json!({})))
        .expect("enqueue");
    let conn = env.raw();
    let inserted = conn.execute(
        "INSERT INTO jobs (job_type, payload, run_at) VALUES ('py', '{}', 1700000000123.5)",
        [],
    );
    if let Err(err) = inserted {
        assert_eq!(
            err.sqlite_error_code(),
            Some(rusqlite::ErrorCode::ConstraintViolation),
            "refused, but not by a constraint: {err}"
        );
        return;
    }
    let id = conn.last_insert_rowid();
    let all = env
        .queue
        .list(&Default::default())
        .expect("list with one REAL run_at row");
    assert_eq!(all.len(), 2);
    let job = env
        .queue
        .job(id)
        .expect("job() of the REAL run_at row")
        .expect("exists");
    assert!(
        (job.run_at - 1_700_000_000_123).abs() <= 1,
        "{}",
        job.run_at
    );
    env.queue.stats().expect("stats with one REAL run_at row");
}

/// Runs `sql` behind the library's back, which a CHECK constraint must refuse (`what` says
/// why it must), and returns the error's text.
fn refused_by_a_check(env: &TestEnv, sql: &str, what: &str) -> String {
    #[cfg(feature = "postgres")]
    if let Some(schema) = &env.pg {
        use diesel::connection::SimpleConnection;
        use diesel::result::{DatabaseErrorKind, Error};
        let err = schema.raw().batch_execute(sql).expect_err(what);
        assert!(
            matches!(
                err,
                Error::DatabaseError(DatabaseErrorKind::CheckViolation, _)
            ),
            "{err:?}"
        );
        return err.to_string();
    }
    let err = env.raw().execute(sql, []).expect_err(what);
    assert_eq!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::ConstraintViolation),
        "{err}"
    );
    err.to_string()
}

#[test]
fn an_invalid_status_is_refused_by_the_check_constraint() {
    let env = setup();
    let err = refused_by_a_check(
        &env,
        "INSERT INTO jobs (job_type, payload, status) VALUES ('t', '{}', 'done')",
        "status 'done' must violate the CHECK constraint",
    );
    assert!(err.contains("jobs_status_valid"), "{err}");
    assert_eq!(env.count_jobs(), 0);

    for status in JobStatus::ALL {
        env.sql_exec(&format!(
            "INSERT INTO jobs (job_type, payload, status) VALUES ('t', '{{}}', '{status}')"
        ));
    }
    assert_eq!(env.count_jobs(), JobStatus::ALL.len() as i64);
}
