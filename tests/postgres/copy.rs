//! `litejobs copy-to URL`: a queue moves from its SQLite file to PostgreSQL with its live and
//! dead jobs, history, endpoints, schedules, paused queues and remembered keys, ids kept.

use std::process::Command;

use diesel::connection::SimpleConnection;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::{sql_query, QueryableByName, RunQueryDsl};
use litejobs::{JobError, NewJob, Worker};
use serde_json::json;

use crate::support::pg::{server, PgSchema};
use crate::support::{raw_conn, temp_dir, START_MS};

#[derive(QueryableByName, Debug, PartialEq, Eq)]
struct JobRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
    #[diesel(sql_type = Nullable<Text>)]
    locked_by: Option<String>,
}

#[derive(QueryableByName, Debug)]
struct N {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn count(conn: &mut diesel::PgConnection, sql: &str) -> i64 {
    sql_query(sql)
        .load::<N>(conn)
        .expect("counting")
        .first()
        .map_or(-1, |r| r.n)
}

#[test]
fn copy_to_moves_the_live_state_with_its_ids() {
    let Some(url) = server() else { return };
    // The source is always a SQLite file, also on the test matrix's PostgreSQL pass.
    let dir = temp_dir();
    let path = dir.path().join("app.db");
    let clock = litejobs::ManualClock::new(START_MS);
    let queue = litejobs::Queue::builder()
        .clock(clock.clone())
        .open(&path)
        .expect("the SQLite queue");
    let q = &queue;
    // Finished history that stays behind, a dead job with attempts, live jobs of each kind.
    let done = q
        .enqueue(NewJob::new("done", json!({})).idempotency_key("once"))
        .expect("enqueue");
    raw_conn(&path)
        .execute_batch(
            "INSERT INTO webhook_endpoints (id, url, secret) VALUES (7, 'https://crm.example/hook', 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0');
             INSERT INTO periodic_schedules (name, schedule, last_slot_at) VALUES ('nightly', '0 3 * * *', 1700000000000);
             INSERT INTO periodic_schedules (name, schedule, last_slot_at, job_type, payload, queue, priority, max_attempts)
                 VALUES ('sync', 'every 15m', 1700000000000, 'crm_sync', '{\"full\": true}', 'ops', 2, 3);",
        )
        .expect("an endpoint and a schedule");
    let dead = q
        .enqueue(NewJob::new("flaky", json!({"n": 1})).max_attempts(2))
        .expect("enqueue");
    let worker = |q: &litejobs::Queue| {
        Worker::builder(q)
            .handler("done", |_ctx: &litejobs::JobContext| Ok(()))
            .handler("flaky", |_ctx: &litejobs::JobContext| {
                Err(JobError::retry("boom"))
            })
    };
    litejobs::testing::drain(&worker(q)).expect("first attempts");
    clock.advance(std::time::Duration::from_secs(3600));
    litejobs::testing::drain(&worker(q)).expect("second attempts");
    let queued = q
        .enqueue(
            NewJob::new("later", json!({"x": "y"}))
                .idempotency_key("k-1")
                .expire_after(std::time::Duration::from_secs(7200)),
        )
        .expect("enqueue");
    // Who ended a job and why travel with it too (set here on the dead row, as a program
    // that cancels by plain SQL would on a live one).
    raw_conn(&path)
        .execute(
            "UPDATE jobs SET cancelled_by = 'ops', cancel_reason = 'no longer wanted' WHERE id = ?1",
            [dead],
        )
        .expect("who and why");
    let grouped = q
        .enqueue(NewJob::new("later", json!({})).queue("mail").group_key("g"))
        .expect("enqueue");
    q.pause_queue("mail").expect("pause");
    assert_eq!(
        q.job(dead).expect("job").map(|j| j.status),
        Some(litejobs::JobStatus::Dead)
    );

    let target = PgSchema::new(&url);
    let out = Command::new(env!("CARGO_BIN_EXE_litejobs"))
        .args(["--db"])
        .arg(&path)
        .args(["--pg-schema", &target.name, "--json", "copy-to", &url])
        .output()
        .expect("running litejobs copy-to");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["live_jobs"], 2, "{report}");
    assert_eq!(report["dead_jobs"], 1, "{report}");
    assert_eq!(
        report["attempts"], 2,
        "the dead job's two attempts: {report}"
    );
    assert_eq!(report["paused_queues"], 1, "{report}");
    assert_eq!(report["endpoints"], 1, "{report}");
    assert_eq!(
        report["schedules"], 2,
        "one from code, one kept in the file: {report}"
    );
    assert_eq!(
        report["remembered_keys"], 1,
        "the succeeded job's key: {report}"
    );

    let mut conn = target.raw();
    let jobs: Vec<JobRow> =
        sql_query("SELECT id, job_type, status, attempts, locked_by FROM jobs ORDER BY id")
            .load(&mut conn)
            .expect("reading the copied jobs");
    let summary: Vec<(i64, &str, &str)> = jobs
        .iter()
        .map(|j| (j.id, j.job_type.as_str(), j.status.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (dead, "flaky", "dead"),
            (queued, "later", "queued"),
            (grouped, "later", "queued")
        ],
        "the succeeded job {done} stays behind, the rest keep their ids"
    );
    assert_eq!(jobs[0].attempts, 2);
    assert_eq!(
        count(
            &mut conn,
            &format!("SELECT expires_at AS n FROM jobs WHERE id = {queued}")
        ),
        START_MS + 3 * 3_600_000,
        "the deadline is copied"
    );
    assert_eq!(
        count(
            &mut conn,
            &format!(
                "SELECT count(*) AS n FROM jobs WHERE id = {dead} AND cancelled_by = 'ops' \
                 AND cancel_reason = 'no longer wanted'"
            )
        ),
        1,
        "who cancelled it and why are copied"
    );
    assert_eq!(
        count(
            &mut conn,
            "SELECT count(*) AS n FROM queues WHERE paused = 1"
        ),
        1
    );
    assert_eq!(
        count(
            &mut conn,
            "SELECT SUM(n)::bigint AS n FROM job_counts WHERE status = 'dead'"
        ),
        1,
        "the counting triggers saw the copied dead job"
    );
    assert_eq!(
        count(
            &mut conn,
            "SELECT sum(n)::bigint AS n FROM attempt_counts WHERE job_type = 'flaky'"
        ),
        2,
        "the counting triggers saw the copied attempts"
    );
    assert_eq!(
        count(
            &mut conn,
            "SELECT id AS n FROM webhook_endpoints WHERE secret LIKE 'whsec_%'"
        ),
        7,
        "the endpoint keeps its id and secret"
    );
    assert_eq!(
        count(
            &mut conn,
            "SELECT last_slot_at AS n FROM periodic_schedules WHERE name = 'nightly'"
        ),
        1_700_000_000_000
    );
    // The schedule kept in the file keeps its job: the server's workers run it.
    let copied = target.queue(&litejobs::ManualClock::new(START_MS));
    let stored = copied
        .periodic_schedules()
        .expect("schedules")
        .into_iter()
        .find(|s| s.name == "sync")
        .and_then(|s| s.job)
        .expect("the stored schedule's job");
    assert_eq!(
        (
            stored.job_type.as_str(),
            stored.payload.as_str(),
            stored.queue.as_str(),
            stored.priority,
            stored.max_attempts
        ),
        ("crm_sync", r#"{"full": true}"#, "ops", 2, 3)
    );
    assert_eq!(
        count(
            &mut conn,
            "SELECT job_id AS n FROM idempotency_keys WHERE key = 'once'"
        ),
        done
    );
    // New rows continue after every id the file handed out.
    conn.batch_execute("INSERT INTO jobs (job_type, payload) VALUES ('new', '{}')")
        .expect("a plain insert");
    assert_eq!(
        count(&mut conn, "SELECT max(id) AS n FROM jobs"),
        grouped + 1
    );

    // A second copy into the same schema is refused and writes nothing.
    let again = Command::new(env!("CARGO_BIN_EXE_litejobs"))
        .arg("--db")
        .arg(&path)
        .args(["--pg-schema", &target.name, "copy-to", &url])
        .output()
        .expect("running litejobs copy-to again");
    assert_eq!(
        again.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already holds jobs"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(count(&mut conn, "SELECT count(*) AS n FROM jobs"), 4);
}

/// A job waiting for another arrives held, waiting for the same job, in its workflow; the
/// triggers do not hold it a second time, and it runs once its dependency has.
#[test]
fn copy_to_keeps_waiting_jobs_held_and_their_workflows() {
    let Some(url) = server() else { return };
    let dir = temp_dir();
    let path = dir.path().join("app.db");
    let clock = litejobs::ManualClock::new(START_MS);
    let queue = litejobs::Queue::builder()
        .clock(clock.clone())
        .open(&path)
        .expect("the SQLite queue");
    let first = queue
        .enqueue(NewJob::new("first", json!({})))
        .expect("enqueue");
    let second = queue
        .enqueue(NewJob::new("second", json!({})))
        .expect("enqueue");
    // As another program writes them to the file (its triggers hold `second`).
    raw_conn(&path)
        .execute_batch(&format!(
            "INSERT INTO workflows (id, kind, name) VALUES (5, 'workflow', 'order 1042');
             UPDATE jobs SET workflow_id = 5, step = 'step-' || id WHERE id IN ({first}, {second});
             INSERT INTO job_deps (job_id, depends_on) VALUES ({second}, {first});
             INSERT INTO job_logs (job_id, attempt, log, cut, written_at)
                 VALUES ({first}, 1, 'said something', 0, {START_MS});"
        ))
        .expect("a workflow whose second step waits for the first");
    let target = PgSchema::new(&url);
    let mut calls = Vec::new();
    let report = litejobs::copy_sqlite_to_postgres_with_progress(
        &path,
        &url,
        Some(&target.name),
        &mut |p| calls.push(p),
    )
    .expect("copy-to");
    assert_eq!(
        (report.live_jobs, report.workflows, report.dependencies),
        (2, 1, 1),
        "{report:?}"
    );
    // Progress counts every row copied, of all of them counted first: 2 jobs, 1 attempt's
    // log, 1 workflow, 1 wait.
    let last = calls.last().expect("progress was told");
    assert_eq!((last.done, last.total), (5, Some(5)), "{calls:?}");
    assert_eq!(report.attempt_logs, 1);
    let mut conn = target.raw();
    assert_eq!(
        count(
            &mut conn,
            &format!(
                "SELECT count(*) AS n FROM jobs WHERE id = {second} AND waiting_for = 1 \
                 AND run_at = 99999999999999 AND held_run_at = {START_MS} AND workflow_id = 5"
            )
        ),
        1,
        "held once, as in the file"
    );
    let pg = target.queue(&clock);
    let ran = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = |ran: &std::sync::Arc<std::sync::Mutex<Vec<i64>>>| {
        let ran = std::sync::Arc::clone(ran);
        move |ctx: &litejobs::JobContext| {
            ran.lock().expect("the record").push(ctx.id());
            Ok(())
        }
    };
    let builder = Worker::builder(&pg)
        .handler("first", record(&ran))
        .handler("second", record(&ran));
    let drained = litejobs::testing::drain(&builder).expect("drain");
    assert_eq!(drained.succeeded, 2, "{drained:?}");
    assert_eq!(*ran.lock().expect("the record"), vec![first, second]);
    assert_eq!(
        count(
            &mut conn,
            "SELECT nextval(pg_get_serial_sequence('workflows', 'id')) AS n"
        ),
        6,
        "new workflows continue after the copied ids"
    );
}
