//! Rows from outside. Other programs insert with plain SQL, and SQLite accepts any
//! type in any column: the schema's CHECK rules refuse a wrongly typed insert in the
//! inserting program, naming the rule; whatever still gets in (a row written before the
//! rules, with the checks switched off, invalid UTF-8 or JSON that SQLite 3.31 cannot check)
//! goes dead at the claim with an error naming the job and the column, while every other job
//! keeps flowing, and every reader shows such rows safely instead of failing. Migration 4
//! keeps every row of an older file; read-only opens never write.

use std::path::Path;
use std::process::Command;

use litejobs::{testing, ErrorKind, JobStatus, NewJob, Queue, Worker};
use rusqlite::Connection;
use serde_json::json;

use crate::support::scripted::{
    setup_wall_clock, stop, wait_each, Mode, Runner, ScriptedHandler, MODES,
};
use crate::support::{on_postgres, raw_conn, setup, temp_dir, user_version, START_MS};

/// Inserts by plain SQL that the schema must refuse, with the rule each must name.
const REFUSED: &[(&str, &str)] = &[
    // What Python's bytes and Go's []byte give.
    (
        "INSERT INTO jobs (job_type, payload) VALUES ('t', x'7b7d')",
        "jobs_payload_text",
    ),
    (
        "INSERT INTO jobs (job_type, payload, priority) VALUES ('t', '{}', 'high')",
        "jobs_priority_integer",
    ),
    (
        "INSERT INTO jobs (job_type, payload, priority) VALUES ('t', '{}', 1.5)",
        "jobs_priority_integer",
    ),
    (
        "INSERT INTO jobs (job_type, payload, max_attempts) VALUES ('t', '{}', 0)",
        "jobs_max_attempts_positive",
    ),
    (
        "INSERT INTO jobs (job_type, payload, max_attempts) VALUES ('t', '{}', 'five')",
        "jobs_max_attempts_positive",
    ),
    (
        "INSERT INTO jobs (job_type, payload, timeout_ms) VALUES ('t', '{}', 0)",
        "jobs_timeout_ms_positive",
    ),
    (
        "INSERT INTO jobs (job_type, payload, timeout_ms) VALUES ('t', '{}', '10s')",
        "jobs_timeout_ms_positive",
    ),
    (
        "INSERT INTO jobs (job_type, payload, timeout_ms) VALUES ('t', '{}', 2.5)",
        "jobs_timeout_ms_positive",
    ),
    // Text dates would silently never run (TEXT sorts after every number).
    (
        "INSERT INTO jobs (job_type, payload, run_at) VALUES ('t', '{}', '2020-01-01 00:00:00')",
        "jobs_run_at_ms",
    ),
    // Seconds would silently run at once.
    (
        "INSERT INTO jobs (job_type, payload, run_at) VALUES ('t', '{}', 1767225600)",
        "jobs_run_at_ms",
    ),
    // Microseconds would silently never run.
    (
        "INSERT INTO jobs (job_type, payload, run_at) VALUES ('t', '{}', 1767225600000000)",
        "jobs_run_at_ms",
    ),
    // Python's time.time() * 1000.
    (
        "INSERT INTO jobs (job_type, payload, run_at) VALUES ('t', '{}', 1767225600123.25)",
        "jobs_run_at_ms",
    ),
    (
        "INSERT INTO jobs (job_type, payload) VALUES ('', '{}')",
        "jobs_job_type_text",
    ),
    (
        "INSERT INTO jobs (job_type, payload) VALUES (x'74', '{}')",
        "jobs_job_type_text",
    ),
    (
        "INSERT INTO jobs (queue, job_type, payload) VALUES ('', 't', '{}')",
        "jobs_queue_text",
    ),
    (
        "INSERT INTO jobs (job_type, payload, attempts) VALUES ('t', '{}', -1)",
        "jobs_attempts_integer",
    ),
    (
        "INSERT INTO jobs (job_type, payload, created_at) VALUES ('t', '{}', '2026-01-01')",
        "jobs_times_ms",
    ),
    (
        "INSERT INTO jobs (job_type, payload, idempotency_key) VALUES ('t', '{}', x'6b')",
        "jobs_idempotency_key_text",
    ),
    (
        "INSERT INTO jobs (job_type, payload, group_key) VALUES ('t', '{}', x'67')",
        "jobs_group_key_text",
    ),
    (
        "INSERT INTO jobs (job_type, payload, status) VALUES ('t', '{}', 'done')",
        "jobs_status_valid",
    ),
];

/// Inserts by plain SQL that must be accepted: SQLite's column affinity turns them into the
/// documented types, or they are finished rows (exempt: they never run again).
const ACCEPTED: &[&str] = &[
    "INSERT INTO jobs (job_type, payload) VALUES ('t', '{\"ok\": 1}')",
    // '5' becomes the integer 5 in an INTEGER column; 1767225600000.0 becomes an integer.
    "INSERT INTO jobs (job_type, payload, priority, run_at) VALUES ('t', '{}', '5', 1767225600000.0)",
    // A number becomes the text '42' in the TEXT column: valid JSON.
    "INSERT INTO jobs (job_type, payload) VALUES ('t', 42)",
    "INSERT INTO jobs (job_type, payload, run_at, timeout_ms, group_key, idempotency_key)
     VALUES ('t', '{}', 1767225600000, 5000, 'g', 'k')",
    // Omitting run_at means now; a past time is due at once.
    "INSERT INTO jobs (job_type, payload, run_at) VALUES ('t', '{}', 1600000000000)",
    "INSERT INTO jobs (job_type, payload, status) VALUES ('t', x'00ff', 'dead')",
    // Every value as text, as PHP's PDO binds them: SQLite stores the numbers as integers.
    "INSERT INTO jobs (queue, job_type, payload, priority, max_attempts, run_at, timeout_ms)
     VALUES ('mail', 'send_email', '{}', '-2', '3', '1767225600000', '15000')",
    // A whole REAL, as a float time rounded in another language.
    "INSERT INTO jobs (job_type, payload, run_at, timeout_ms) VALUES ('t', '{}', 1767225600000.0, 100.0)",
];

#[test]
fn wrongly_typed_inserts_are_refused_at_the_door_naming_the_rule() {
    let env = setup_wall_clock();
    let conn = raw_conn(&env.path());
    for (sql, rule) in REFUSED {
        let err = conn
            .execute(sql, [])
            .expect_err(&format!("the schema must refuse: {sql}"));
        assert_eq!(
            err.sqlite_error_code(),
            Some(rusqlite::ErrorCode::ConstraintViolation),
            "{sql}: {err}"
        );
        assert!(
            err.to_string().contains(rule),
            "refusing {sql} must name {rule}: {err}"
        );
    }
    assert_eq!(crate::support::count_rows(&env.path(), "jobs"), 0);
    for sql in ACCEPTED {
        conn.execute(sql, [])
            .unwrap_or_else(|e| panic!("the schema must accept {sql}: {e}"));
    }
}

/// The refusals as another language meets them: Python's sqlite3 module, binding `bytes`,
/// seconds and a float time, gets an `IntegrityError` naming the rule.
#[test]
fn python_gets_an_integrity_error_naming_the_rule() {
    if !crate::support::have_tool("python3") {
        return;
    }
    let env = setup_wall_clock();
    let script = r#"
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1])
cases = [
    ("payload bytes", "insert into jobs(job_type, payload) values ('t', ?)", (b'{}',)),
    ("run_at seconds", "insert into jobs(job_type, payload, run_at) values ('t', '{}', ?)", (int(time.time()),)),
    ("run_at float", "insert into jobs(job_type, payload, run_at) values ('t', '{}', ?)", (time.time() * 1000,)),
    ("run_at text", "insert into jobs(job_type, payload, run_at) values ('t', '{}', ?)", ("2020-01-01 00:00:00",)),
    ("good", "insert into jobs(job_type, payload, run_at) values ('t', ?, ?)", ('{"n": 1}', int(time.time() * 1000))),
]
for name, sql, args in cases:
    try:
        c.execute(sql, args)
        c.commit()
        print(name, "ok")
    except sqlite3.IntegrityError as e:
        print(name, "IntegrityError", e)
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(env.path())
        .output()
        .expect("python3 runs (the machine's CPython, as an app in another language would)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "payload bytes IntegrityError CHECK constraint failed: jobs_payload_text",
            "run_at seconds IntegrityError CHECK constraint failed: jobs_run_at_ms",
            "run_at float IntegrityError CHECK constraint failed: jobs_run_at_ms",
            "run_at text IntegrityError CHECK constraint failed: jobs_run_at_ms",
            "good ok",
        ]
    );
}

/// Inserts rows the CHECK rules would refuse, as a file from before them (or a program that
/// switched them off) holds: the claim must cope with whatever is in the table.
fn insert_unchecked(conn: &Connection, sql: &str) -> i64 {
    conn.execute_batch("PRAGMA ignore_check_constraints = ON")
        .expect("switching the checks off");
    conn.execute(sql, [])
        .unwrap_or_else(|e| panic!("inserting {sql}: {e}"));
    let id = conn.last_insert_rowid();
    conn.execute_batch("PRAGMA ignore_check_constraints = OFF")
        .expect("switching the checks on");
    id
}

/// Bad rows that got in, with the column their error must name.
fn insert_bad_rows(conn: &Connection) -> Vec<(i64, &'static str)> {
    let oversized = format!(
        "INSERT INTO jobs (job_type, payload) VALUES ('t', '{{\"s\": \"{}\"}}')",
        "x".repeat(70 * 1024)
    );
    vec![
        (
            insert_unchecked(
                conn,
                "INSERT INTO jobs (job_type, payload) VALUES ('t', x'7b7d')",
            ),
            "column payload holds BLOB X'7B7D'",
        ),
        (
            insert_unchecked(
                conn,
                "INSERT INTO jobs (job_type, payload) VALUES ('t', CAST(x'7b22223affff7d' AS TEXT))",
            ),
            "column payload holds TEXT that is not valid UTF-8",
        ),
        (
            insert_unchecked(
                conn,
                "INSERT INTO jobs (job_type, payload) VALUES ('t', '{\"a\": NaN}')",
            ),
            "column payload is not valid JSON",
        ),
        (
            insert_unchecked(
                conn,
                "INSERT INTO jobs (job_type, payload, priority) VALUES ('t', '{}', 'high')",
            ),
            "column priority holds TEXT 'high'",
        ),
        (
            insert_unchecked(
                conn,
                "INSERT INTO jobs (job_type, payload, max_attempts) VALUES ('t', '{}', 'five')",
            ),
            "column max_attempts holds TEXT 'five'",
        ),
        (
            insert_unchecked(
                conn,
                "INSERT INTO jobs (job_type, payload, timeout_ms) VALUES ('t', '{}', '10s')",
            ),
            "column timeout_ms holds TEXT '10s'",
        ),
        (
            insert_unchecked(
                conn,
                "INSERT INTO jobs (job_type, payload, group_key) VALUES ('t', '{}', x'67')",
            ),
            "column group_key holds BLOB X'67'",
        ),
        (
            insert_unchecked(conn, &oversized),
            "over this worker's limit of 65536 bytes",
        ),
        // Attempts the claim cannot count from: the job must still go dead, not hold a
        // lease that no write matches.
        (
            insert_unchecked(
                conn,
                "INSERT INTO jobs (job_type, payload, attempts) VALUES ('t', '{}', 1.5)",
            ),
            "column attempts holds REAL 1.5",
        ),
        (
            insert_unchecked(
                conn,
                "INSERT INTO jobs (job_type, payload, attempts) VALUES ('t', '{}', -3)",
            ),
            "column attempts holds INTEGER -3",
        ),
        (
            insert_unchecked(
                conn,
                "INSERT INTO jobs (job_type, payload, attempts) VALUES ('t', '{}', 'two')",
            ),
            "column attempts holds TEXT 'two'",
        ),
    ]
}

/// An attempt history row as another program might write it: no value of the right type.
fn insert_odd_attempt(conn: &Connection, job_id: i64) {
    insert_unchecked(
        conn,
        &format!(
            "INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome,
                                       error, duration_ms)
             VALUES ({job_id}, 'second', x'00', 'a', 1700000000000, 'weird', x'ff', 'long')"
        ),
    );
}

fn insert_good_row(conn: &Connection, n: i64) -> i64 {
    conn.execute(
        "INSERT INTO jobs (job_type, payload) VALUES ('t', ?1)",
        [json!({ "n": n }).to_string()],
    )
    .expect("inserting a good row");
    conn.last_insert_rowid()
}

#[test]
fn bad_rows_that_got_in_go_dead_naming_job_and_column_and_good_rows_keep_flowing() {
    for mode in MODES {
        let env = setup_wall_clock();
        let conn = raw_conn(&env.path());
        // Good and bad rows interleaved: a bad row must not hold back the ones behind it.
        let mut good = vec![insert_good_row(&conn, 0)];
        let bad = insert_bad_rows(&conn);
        good.push(insert_good_row(&conn, 1));
        let handler = ScriptedHandler::new();
        let events = env.queue.subscribe();
        let builder = Worker::builder(&env.queue)
            .handler("t", handler.clone())
            .concurrency(2);
        let worker = match mode {
            Mode::Worker => Some(builder.start().expect("worker starts")),
            Mode::Drain => {
                let report = testing::drain(&builder).expect("drain");
                assert_eq!(
                    (report.succeeded, report.dead),
                    (good.len(), bad.len()),
                    "{report:?}"
                );
                None
            }
        };
        let ids: Vec<i64> = good
            .iter()
            .chain(bad.iter().map(|(id, _)| id))
            .copied()
            .collect();
        let done = wait_each(&events, &ids);
        if let Some(worker) = worker {
            stop(worker);
        }
        for f in &done[..good.len()] {
            assert_eq!(f.status, JobStatus::Succeeded, "[{mode:?}] {f:?}");
        }
        for (f, (id, column)) in done[good.len()..].iter().zip(&bad) {
            assert_eq!(f.status, JobStatus::Dead, "[{mode:?}] {f:?}");
            let job = env
                .queue
                .job(*id)
                .expect("job()")
                .expect("the bad row exists");
            let error = job.last_error.unwrap_or_default();
            assert!(
                error.starts_with(&format!("job {id}: ")) && error.contains(column),
                "[{mode:?}] job {id}'s error names the job and the column ({column}): {error}"
            );
            assert!(error.ends_with("dead without running"), "{error}");
        }
        let mut called = handler.call_ids();
        called.sort_unstable();
        assert_eq!(
            called, good,
            "[{mode:?}] only the good rows reached the handler"
        );
    }
}

/// Rows holding values no handler can use (a run time in seconds or past the year 5000,
/// attempts below zero or none left to count, no attempt at all, a timeout of 0 ms), let in
/// past the schema's rules, are refused at the claim alike on either backend: each goes dead
/// without running, with the same error naming the job, the column and the value, while a
/// good row runs. On SQLite the rules are switched off for the insert, as another program
/// can; on PostgreSQL, where no connection can switch them off, the test's own schema drops
/// them first. (The PostgreSQL pass of the test matrix runs this on PostgreSQL.)
#[test]
fn the_same_odd_rows_are_refused_alike_on_every_backend() {
    // A run time past the year 5000 is only due after it: the clock stands there.
    const PAST_5000: i64 = 100_000_000_000_001;
    let odd: &[(&str, &str, &str)] = &[
        (
            "run_at",
            "1700000000",
            "column run_at holds 1700000000, which looks like seconds, not milliseconds since 1970",
        ),
        (
            "run_at",
            "100000000000000",
            "column run_at holds 100000000000000, past the year 5000: microseconds or \
             nanoseconds, not milliseconds",
        ),
        (
            "attempts",
            "-3",
            "column attempts holds INTEGER -3, not an integer of at least 0",
        ),
        (
            "attempts",
            "9223372036854775807",
            "column attempts holds 9223372036854775807, no further attempt can be counted",
        ),
        (
            "max_attempts",
            "0",
            "column max_attempts holds INTEGER 0, not an integer of at least 1",
        ),
        (
            "timeout_ms",
            "0",
            "column timeout_ms holds INTEGER 0, not NULL or a positive integer",
        ),
    ];
    for mode in MODES {
        let env = setup();
        env.clock.set(PAST_5000);
        let unchecked = if on_postgres() {
            env.sql_exec(
                "ALTER TABLE jobs DROP CONSTRAINT jobs_run_at_ms,
                     DROP CONSTRAINT jobs_attempts_integer,
                     DROP CONSTRAINT jobs_max_attempts_positive,
                     DROP CONSTRAINT jobs_timeout_ms_positive",
            );
            ""
        } else {
            "PRAGMA ignore_check_constraints = ON; "
        };
        let insert = |column: &str, value: &str| -> i64 {
            let run_at = if column == "run_at" {
                value.to_string()
            } else {
                START_MS.to_string()
            };
            let (column, value) = if column == "run_at" {
                ("priority", "0")
            } else {
                (column, value)
            };
            env.sql_exec(&format!(
                "{unchecked}INSERT INTO jobs (job_type, payload, created_at, run_at, {column})
                 VALUES ('t', '{{}}', {START_MS}, {run_at}, {value})"
            ));
            env.sql_i64("SELECT max(id) FROM jobs")
        };
        let good = insert("priority", "0");
        let refused: Vec<(i64, &str)> = odd
            .iter()
            .map(|(column, value, message)| (insert(column, value), *message))
            .collect();
        let handler = ScriptedHandler::new();
        let mut runner = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue).handler("t", handler.clone()),
        );
        let ids: Vec<i64> = std::iter::once(good)
            .chain(refused.iter().map(|(id, _)| *id))
            .collect();
        let done = runner.attempt_all(&ids);
        runner.finish();
        assert_eq!(done[0].status, JobStatus::Succeeded, "[{mode:?}] {done:?}");
        assert_eq!(
            handler.call_ids(),
            vec![good],
            "[{mode:?}] only the good row ran"
        );
        for (f, (id, message)) in done[1..].iter().zip(&refused) {
            assert_eq!(f.status, JobStatus::Dead, "[{mode:?}] {f:?}");
            let job = env
                .queue
                .job(*id)
                .expect("job()")
                .expect("the odd row exists");
            assert_eq!(
                job.last_error.as_deref(),
                Some(format!("job {id}: {message}; dead without running").as_str()),
                "[{mode:?}]"
            );
        }
    }
}

/// Rows no claim or reaper can take (a status outside the six words, a text `run_at` that is
/// never due, a running row whose text lease never expires) are made dead by the worker's
/// sweep at start-up, naming job and column, and the counts agree with the rows afterwards.
#[test]
fn rows_no_claim_can_see_are_made_dead_by_the_workers_sweep() {
    let env = setup_wall_clock();
    let conn = raw_conn(&env.path());
    let strays = [
        (
            insert_unchecked(
                &conn,
                "INSERT INTO jobs (job_type, payload, status) VALUES ('t', '{}', 'bogus')",
            ),
            "column status holds TEXT 'bogus', not one of queued, running",
        ),
        (
            insert_unchecked(
                &conn,
                "INSERT INTO jobs (job_type, payload, run_at) VALUES ('t', '{}', 'yesterday')",
            ),
            "column run_at holds TEXT 'yesterday'",
        ),
        (
            insert_unchecked(
                &conn,
                "INSERT INTO jobs (job_type, payload, status, locked_by, locked_until)
                 VALUES ('t', '{}', 'running', 'elsewhere', 'never')",
            ),
            "column locked_until holds TEXT 'never'",
        ),
    ];
    let good = insert_good_row(&conn, 0);
    let handler = ScriptedHandler::new();
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("t", handler.clone())
        .start()
        .expect("worker starts");
    let ids: Vec<i64> = strays.iter().map(|(id, _)| *id).chain([good]).collect();
    let done = wait_each(&events, &ids);
    stop(worker);
    assert_eq!(done[3].status, JobStatus::Succeeded, "{:?}", done[3]);
    for (f, (id, column)) in done.iter().zip(&strays) {
        assert_eq!(f.status, JobStatus::Dead, "{f:?}");
        let job = env.queue.job(*id).expect("job()").expect("exists");
        assert_eq!(job.status, JobStatus::Dead);
        let error = job.last_error.unwrap_or_default();
        assert!(
            error.starts_with(&format!("job {id}: ")) && error.contains(column),
            "job {id}'s error names the job and the column ({column}): {error}"
        );
        assert!(error.ends_with("dead without running"), "{error}");
    }
    assert_eq!(
        handler.call_ids(),
        vec![good],
        "no stray reached the handler"
    );
    let stats = env.queue.stats().expect("stats");
    assert_eq!(stats.count(JobStatus::Dead), 3, "{stats:?}");
    let dead = env.queue.dead_jobs(&Default::default()).expect("dead_jobs");
    assert_eq!(dead.len(), 3, "the dead list and the counts agree");
}

#[test]
fn every_reader_shows_foreign_rows_safely_and_never_fails() {
    let env = setup_wall_clock();
    let conn = raw_conn(&env.path());
    let good = insert_good_row(&conn, 0);
    let blob = insert_unchecked(
        &conn,
        "INSERT INTO jobs (job_type, payload) VALUES ('t', x'7b7d')",
    );
    let text_priority = insert_unchecked(
        &conn,
        "INSERT INTO jobs (job_type, payload, priority) VALUES ('t', '{}', 'high')",
    );
    // A dead row keeping what an older version let in, with a terminal escape in its type,
    // its queue, its error and its payload.
    let dead = insert_unchecked(
        &conn,
        "INSERT INTO jobs (queue, job_type, payload, status, last_error, run_at, finished_at)
         VALUES (x'71', 't' || char(27) || '[31m', CAST(x'1b5b33316dff' AS TEXT), 'dead',
                 x'626164', 'soon', 'later')",
    );
    let q = &env.queue;

    let job = q
        .job(blob)
        .expect("job() of a BLOB payload")
        .expect("exists");
    assert_eq!(job.payload, json!("BLOB X'7B7D' (2 bytes)"));
    assert_eq!(
        job.problems,
        ["column payload holds BLOB X'7B7D' (2 bytes), not text"]
    );
    let job = q.job(text_priority).expect("job()").expect("exists");
    assert_eq!(job.priority, 0);
    assert_eq!(
        job.problems,
        ["column priority holds TEXT 'high', not an integer"]
    );
    let job = q
        .job(dead)
        .expect("job() of a mangled dead row")
        .expect("exists");
    assert_eq!(job.status, JobStatus::Dead);
    assert_eq!(job.job_type, "t\u{1b}[31m", "the type as stored");
    assert!(job.problems.len() >= 4, "{:?}", job.problems);
    for column in ["queue", "payload", "last_error", "run_at", "finished_at"] {
        assert!(
            job.problems
                .iter()
                .any(|p| p.starts_with(&format!("column {column} "))),
            "{column} is named among {:?}",
            job.problems
        );
    }
    assert!(q
        .job(good)
        .expect("job()")
        .expect("exists")
        .problems
        .is_empty());
    insert_odd_attempt(&conn, good);
    let attempts = q
        .attempts(good)
        .expect("attempts() of a foreign history row");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, litejobs::AttemptOutcome::Failed);
    for column in [
        "attempt",
        "worker",
        "started_at",
        "outcome",
        "error",
        "duration_ms",
    ] {
        assert!(
            attempts[0]
                .problems
                .iter()
                .any(|p| p.starts_with(&format!("column {column} "))),
            "{column} is named among {:?}",
            attempts[0].problems
        );
    }

    assert_eq!(q.list(&Default::default()).expect("list").len(), 4);
    assert_eq!(
        q.dead_jobs(&Default::default()).expect("dead_jobs").len(),
        1
    );
    let stats = q.stats().expect("stats");
    assert_eq!(stats.counts.iter().map(|c| c.count).sum::<i64>(), 4);
    q.health(std::time::Duration::from_secs(3600))
        .expect("health");
    let groups = q.error_groups(10).expect("error groups");
    assert_eq!(groups.len(), 1, "{groups:?}");
    let text = litejobs::metrics::prometheus_text(q).expect("metrics");
    assert!(!text.contains('\u{1b}'), "no raw escape in metrics: {text}");

    // A person cannot requeue or retry a row no handler could use: it would go dead again.
    for err in [
        q.requeue_dead(dead, "ops", "try again")
            .expect_err("requeue refused"),
        q.retry_now(dead).expect_err("retry refused"),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidState, "{err}");
        assert!(err.to_string().contains("column payload"), "{err}");
        assert!(err.to_string().contains("discard"), "{err}");
    }
    q.discard_dead(dead).expect("discarding it works");
}

// ---------------------------------------------------------------------------------------
// Migration 4 on a file of version 3
// ---------------------------------------------------------------------------------------

/// A database as litejobs with schema version 3 left it, from the frozen migration files.
fn create_version_3(path: &Path) {
    let root = env!("CARGO_MANIFEST_DIR");
    let conn = raw_conn(path);
    for file in [
        "0001_init.sql",
        "0002_webhooks.sql",
        "0003_reports_periodic.sql",
    ] {
        let sql = std::fs::read_to_string(format!("{root}/src/storage/sqlite/migrations/{file}"))
            .expect("reading a frozen migration");
        conn.execute_batch(&sql)
            .expect("applying a frozen migration");
    }
    conn.execute_batch("PRAGMA user_version = 3; PRAGMA journal_mode = WAL;")
        .expect("marking version 3");
}

#[test]
fn migration_4_keeps_every_row_and_makes_bad_live_rows_dead() {
    let dir = temp_dir();
    let path = dir.path().join("v3.db");
    create_version_3(&path);
    let conn = raw_conn(&path);
    let now: i64 = conn
        .query_row(
            "SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
            [],
            |r| r.get(0),
        )
        .expect("now");
    let insert = |sql: &str| {
        conn.execute(sql, [])
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        conn.last_insert_rowid()
    };
    let good = insert("INSERT INTO jobs (job_type, payload) VALUES ('t', '{\"n\": 1}')");
    let fractional = insert(
        "INSERT INTO jobs (job_type, payload, run_at, timeout_ms)
         VALUES ('t', '{}', 1767225600123.75, 1500.5)",
    );
    let blob = insert("INSERT INTO jobs (job_type, payload) VALUES ('t', x'7b7d')");
    let priority =
        insert("INSERT INTO jobs (job_type, payload, priority) VALUES ('t', '{}', 'high')");
    let seconds =
        insert("INSERT INTO jobs (job_type, payload, run_at) VALUES ('t', '{}', 1767225600)");
    let running = insert(&format!(
        "INSERT INTO jobs (job_type, payload, status, attempts, locked_by, locked_until, max_attempts)
         VALUES ('t', '{{}}', 'running', 1, 'old-worker', {}, 'x')",
        now + 60_000
    ));
    // Finished rows keep whatever they hold: they never run again.
    let cancelled =
        insert("INSERT INTO jobs (job_type, payload, status) VALUES ('t', x'00ff', 'cancelled')");
    let succeeded = insert(
        "INSERT INTO jobs (job_type, payload, status, run_at) VALUES ('t', '{}', 'succeeded', 1767225600)",
    );
    conn.execute(
        "INSERT INTO job_attempts (job_id, attempt, finished_at, outcome, error)
         VALUES (?1, 1, 1, 'failed', 'boom')",
        [good],
    )
    .expect("an attempt row");
    // The newest jobs were pruned: the id sequence is past the largest id left.
    let pruned = insert("INSERT INTO jobs (job_type, payload) VALUES ('t', '{}')");
    conn.execute("DELETE FROM jobs WHERE id = ?1", [pruned])
        .expect("pruning the newest job");
    drop(conn);

    let queue = Queue::open(&path).expect("a version 3 file migrates");
    assert_eq!(user_version(&path), litejobs::SCHEMA_VERSION);
    let get = |id| queue.job(id).expect("job()").expect("every row is kept");
    // The eight rows, and since the newest was pruned, migration 6's placeholder holding the
    // largest id handed out (ids are never reused).
    assert_eq!(queue.list(&Default::default()).expect("list").len(), 9);
    let placeholder = get(pruned);
    assert_eq!(
        (placeholder.status, placeholder.job_type.as_str()),
        (JobStatus::Cancelled, "litejobs.id_placeholder")
    );

    let j = get(good);
    assert_eq!((j.status, j.last_error.clone()), (JobStatus::Queued, None));
    assert_eq!(
        queue.attempts(good).expect("attempts").len(),
        1,
        "history kept"
    );
    let j = get(fractional);
    assert_eq!(j.status, JobStatus::Queued, "older versions ran REAL times");
    assert_eq!((j.run_at, j.timeout_ms), (1_767_225_600_123, Some(1500)));
    assert!(j.problems.is_empty(), "{:?}", j.problems);
    for (id, needle) in [
        (blob, "column payload holds BLOB X'7B7D'"),
        (priority, "column priority holds TEXT 'high'"),
        (
            seconds,
            "column run_at holds 1767225600, which looks like seconds",
        ),
        (running, "column max_attempts holds TEXT 'x'"),
    ] {
        let j = get(id);
        assert_eq!(j.status, JobStatus::Dead, "job {id}");
        let error = j.last_error.unwrap_or_default();
        assert!(
            error.starts_with(&format!("job {id}: ")) && error.contains(needle),
            "{error}"
        );
        assert_eq!((j.locked_by, j.locked_until), (None, None));
    }
    assert_eq!(get(cancelled).status, JobStatus::Cancelled);
    assert_eq!(get(cancelled).payload, json!("BLOB X'00FF' (2 bytes)"));
    assert_eq!(get(succeeded).status, JobStatus::Succeeded);

    let next = queue
        .enqueue(NewJob::new("t", json!({})))
        .expect("enqueue after the migration");
    assert_eq!(next, pruned + 1, "ids are never reused");
    // The attempt history still belongs to its job (the rebuild kept the reference).
    let fk: String = raw_conn(&path)
        .query_row(
            "SELECT \"table\" FROM pragma_foreign_key_list('job_attempts')",
            [],
            |r| r.get(0),
        )
        .expect("job_attempts' reference");
    assert_eq!(fk, "jobs");
    queue.discard_dead(blob).expect("discard");
}

// ---------------------------------------------------------------------------------------
// Reading never writes
// ---------------------------------------------------------------------------------------

/// Every byte of the file, and which of its -wal, -shm and -journal files exist.
fn file_state(path: &Path) -> (Vec<u8>, [bool; 3]) {
    let bytes = std::fs::read(path).expect("reading the file");
    (bytes, crate::support::side_files(path))
}

#[test]
fn open_read_only_refuses_a_file_without_the_schema_and_leaves_it_unchanged() {
    let dir = temp_dir();
    let app = dir.path().join("app.db");
    crate::support::create_app_database(&app);
    let before = file_state(&app);
    let err = Queue::open_read_only(&app).expect_err("no litejobs schema in it");
    assert_eq!(err.kind(), ErrorKind::Uninitialized);
    assert!(
        err.to_string().contains("not a litejobs database")
            && err.to_string().contains("litejobs init"),
        "{err}"
    );
    // Acting on jobs needs an existing queue too.
    let err = Queue::builder()
        .create(false)
        .open(&app)
        .expect_err("create(false) does not add the schema");
    assert_eq!(err.kind(), ErrorKind::Uninitialized);
    assert!(file_state(&app) == before, "the file was changed");

    let missing = dir.path().join("typo.db");
    let err = Queue::open_read_only(&missing).expect_err("no such file");
    assert_eq!(err.kind(), ErrorKind::Uninitialized);
    assert!(err.to_string().contains("does not exist"), "{err}");
    assert!(!missing.exists(), "a read-only open never creates a file");
}

#[test]
fn open_read_only_reads_an_older_file_without_migrating_it_and_refuses_every_write() {
    let dir = temp_dir();
    let path = dir.path().join("v3.db");
    create_version_3(&path);
    raw_conn(&path)
        .execute(
            "INSERT INTO jobs (job_type, payload) VALUES ('t', '{\"n\": 1}')",
            [],
        )
        .expect("a row written by an older litejobs");
    let before = file_state(&path);

    let queue = Queue::open_read_only(&path).expect("a version 3 file is readable");
    assert!(queue.is_read_only());
    assert_eq!(queue.list(&Default::default()).expect("list").len(), 1);
    queue.stats().expect("stats");
    for err in [
        queue
            .enqueue(NewJob::new("t", json!({})))
            .expect_err("enqueue"),
        queue.cancel(1).expect_err("cancel"),
        queue.pause_queue("default").expect_err("pause"),
        Worker::builder(&queue)
            .handler("t", ScriptedHandler::new())
            .start()
            .map(drop)
            .expect_err("a worker cannot start"),
    ] {
        assert_eq!(err.kind(), ErrorKind::ReadOnly, "{err}");
    }
    drop(queue);
    assert_eq!(
        user_version(&path),
        3,
        "not migrated under the older program"
    );
    assert!(file_state(&path).0 == before.0, "the file was changed");
}

/// The dashboard and its JSON API show rows another program wrote, escaped, never a 500.
#[cfg(feature = "web")]
#[test]
fn the_dashboard_shows_foreign_rows_and_never_fails() {
    use crate::web::Web;
    // Wrongly typed rows that only a SQLite file can hold.
    if crate::support::sqlite_only() {
        return;
    }
    let env = crate::support::setup();
    let conn = env.raw();
    let good = insert_good_row(&conn, 0);
    let blob = insert_unchecked(
        &conn,
        "INSERT INTO jobs (job_type, payload, priority) VALUES ('t', x'7b7d', 'high')",
    );
    let dead = insert_unchecked(
        &conn,
        "INSERT INTO jobs (queue, job_type, payload, status, last_error)
         VALUES (x'71', 't<script>', CAST(x'3cff3e' AS TEXT), 'dead', x'626164')",
    );
    insert_odd_attempt(&conn, good);
    let web = Web::start(env, litejobs::web::DashboardOptions::new());
    let mut client = web.client();
    for path in [
        "/".to_string(),
        "/jobs".to_string(),
        "/jobs?status=dead".to_string(),
        "/dead".to_string(),
        format!("/jobs/{good}"),
        format!("/jobs/{blob}"),
        format!("/jobs/{dead}"),
        "/api/jobs".to_string(),
        "/api/stats".to_string(),
        format!("/api/jobs/{blob}"),
        format!("/api/jobs/{good}"),
    ] {
        let page = client.get(&path).expect(200);
        if !path.starts_with("/api/") {
            assert!(
                !page.body.contains("<script>"),
                "{path} shows markup unescaped"
            );
        }
    }
    let page = client.get(&format!("/jobs/{blob}")).expect(200);
    assert!(
        page.body
            .contains("column payload holds BLOB X&#39;7B7D&#39;")
            || page.body.contains("column payload holds BLOB X'7B7D'"),
        "the job page names the problem: {}",
        page.body
    );
    let page = client.get(&format!("/jobs/{good}")).expect(200);
    assert!(
        page.body.contains("column outcome holds"),
        "the job page names the attempt's problem: {}",
        page.body
    );
}

/// sql.js 1.2.2: SQLite 3.31.1 compiled to JavaScript, from the npm registry, unpacked under
/// the target directory on first use. `None` (the test is skipped) where node or npm is
/// missing, except in CI, where they must be there.
pub(crate) fn sqlite_3_31() -> Option<std::path::PathBuf> {
    if !crate::support::have_tool("node") {
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sqljs-1.2.2");
    if dir.join("package/dist/sql-asm.js").exists() {
        return Some(dir);
    }
    let fetched = std::fs::create_dir_all(&dir).is_ok()
        && Command::new("npm")
            .args(["pack", "sql.js@1.2.2", "--silent"])
            .current_dir(&dir)
            .status()
            .is_ok_and(|s| s.success())
        && Command::new("tar")
            .args(["xzf", "sql.js-1.2.2.tgz"])
            .current_dir(&dir)
            .status()
            .is_ok_and(|s| s.success());
    if fetched {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must be able to fetch sql.js 1.2.2 with npm to check the schema in SQLite 3.31"
    );
    eprintln!("skipped: npm could not fetch sql.js 1.2.2 here");
    None
}

/// Runs `setup` then each case in SQLite 3.31.1; returns "ok" or "error: ..." per case.
pub(crate) fn run_in_sqlite_3_31(sqljs: &Path, setup: &[String], cases: &[&str]) -> Vec<String> {
    use std::io::Write;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/sqlite_3_31.js");
    let mut child = Command::new("node")
        .arg(script)
        .arg(sqljs)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("node runs");
    let scenario = json!({ "setup": setup, "cases": cases });
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(scenario.to_string().as_bytes())
        .expect("writing the scenario");
    let out = child.wait_with_output().expect("node finishes");
    assert!(
        out.status.success(),
        "SQLite 3.31 refused the setup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the script prints JSON");
    assert_eq!(result["version"], json!("3.31.1"));
    result["cases"]
        .as_array()
        .expect("a result per case")
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect()
}

/// The contract's promise to old system SQLite (Python's or PHP's on an older distribution):
/// schema.sql, and the schema the migrations build, load in SQLite 3.31, and there the same
/// inserts are refused by the same rules and the same are accepted.
#[test]
fn the_schema_and_its_rules_work_in_sqlite_3_31() {
    let Some(sqljs) = sqlite_3_31() else {
        return;
    };
    let cases: Vec<&str> = REFUSED
        .iter()
        .map(|(sql, _)| *sql)
        .chain(ACCEPTED.iter().copied())
        .collect();
    let check = |results: Vec<String>, what: &str| {
        for ((sql, rule), got) in REFUSED.iter().zip(&results) {
            assert!(
                got.starts_with("error: ") && got.contains(rule),
                "{what}: SQLite 3.31 must refuse {sql} naming {rule}, got {got}"
            );
        }
        for (sql, got) in ACCEPTED.iter().zip(&results[REFUSED.len()..]) {
            assert_eq!(got, "ok", "{what}: SQLite 3.31 must accept {sql}");
        }
    };
    check(
        run_in_sqlite_3_31(&sqljs, &[crate::support::SCHEMA_SQL.to_string()], &cases),
        "schema.sql",
    );
    // The same with the schema as litejobs' migrations left it in a real file.
    let env = setup_wall_clock();
    let migrated: Vec<String> = raw_conn(&env.path())
        .prepare(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'
             ORDER BY CASE type WHEN 'table' THEN 0 ELSE 1 END, rowid",
        )
        .and_then(|mut stmt| {
            stmt.query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()
        })
        .expect("the migrated schema");
    check(
        run_in_sqlite_3_31(&sqljs, &migrated, &cases),
        "the migrated schema",
    );
}
