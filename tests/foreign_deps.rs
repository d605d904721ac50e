//! Waits by plain SQL from other languages: the statements of docs/schema.md ("Jobs that
//! wait for other jobs"), copied from the guide and run as a user runs them, by Python's
//! sqlite3 in a fresh session (no settings), in one transaction; then a litejobs worker runs
//! the jobs. A job made to wait runs only after its dependency succeeded, once; one whose
//! dependency ends dead is cancelled (at once when it had ended already), and a clean-up that
//! waits on any outcome runs anyway; a wait on a job that does not exist is refused with the
//! trigger's message and nothing is committed. A workflow and a batch inserted by plain SQL
//! are read by their handlers (`dependency_result`, `batch`) as litejobs' own are. The same
//! statements hold and settle alike in SQLite 3.31.

use std::process::Command;
use std::sync::{Arc, Mutex};

use litejobs::{testing, JobContext, JobError, JobStatus, NewJob, Queue, Worker, WorkerBuilder};
use serde_json::{json, Value};

use crate::foreign_expiry::guide_statements;
use crate::foreign_rows::{run_in_sqlite_3_31, sqlite_3_31};
use crate::support::{count_rows, raw_conn, sqlite_only, temp_dir};

const WAIT: &str = "Ship order 1042 once job :charge has succeeded";
const WORKFLOW: &str = "A workflow of two steps";
const BATCH: &str = "A batch of two invoices";

/// Runs `statements` in one transaction with Python's sqlite3 on a fresh connection to `db`,
/// binding `params` by name. With `group`, the first statement runs alone and its
/// `cursor.lastrowid` is bound as `group` for the others (the guide's `:workflow`, `:batch`).
/// `Ok` with that id, or the error Python got (its class and message).
fn python(
    db: &str,
    statements: &[String],
    params: Value,
    group: Option<&str>,
) -> Result<i64, String> {
    const SCRIPT: &str = r#"
import json, sqlite3, sys
db, statements, params = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
group = sys.argv[4] if len(sys.argv) > 4 else None
c = sqlite3.connect(db)
try:
    with c:
        if group:
            params[group] = c.execute(statements[0]).lastrowid
            statements = statements[1:]
        for s in statements:
            c.execute(s, params)
    print(json.dumps({"ok": params.get(group, 0)}))
except sqlite3.Error as e:
    print(json.dumps({"error": type(e).__name__ + ": " + str(e)}))
"#;
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(SCRIPT)
        .arg(db)
        .arg(serde_json::to_string(statements).expect("JSON"))
        .arg(params.to_string());
    if let Some(group) = group {
        cmd.arg(group);
    }
    let out = cmd.output().expect("python3 runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("the script prints JSON");
    match answer.get("ok") {
        Some(id) => Ok(id.as_i64().expect("an id")),
        None => Err(answer["error"].as_str().expect("an error").to_string()),
    }
}

/// A database litejobs created, on the wall clock (the SQL defaults read it too).
fn fresh() -> (tempfile::TempDir, String, Queue) {
    let dir = temp_dir();
    let path = dir.path().join("app.db");
    let queue = Queue::open(&path).expect("creating the database");
    let db = path.to_str().expect("a UTF-8 path").to_string();
    (dir, db, queue)
}

/// Each start: the job's type, and the statuses of the jobs it waits for.
type Starts = Arc<Mutex<Vec<(String, Vec<JobStatus>)>>>;

/// Handlers that record each start (type, and the statuses of the jobs it waits for);
/// `fails` fail for good.
fn worker(queue: &Queue, starts: &Starts, fails: &[&str]) -> WorkerBuilder {
    let mut builder = Worker::builder(queue);
    for job_type in ["charge_card", "ship_order", "release_hold", "send_invoice"] {
        let starts = Arc::clone(starts);
        let fail = fails.contains(&job_type);
        builder = builder.handler(job_type, move |ctx: &JobContext| -> Result<(), JobError> {
            let deps = ctx
                .dependencies()
                .map_err(|e| JobError::permanent(e.to_string()))?;
            starts.lock().expect("lock").push((
                ctx.job_type().to_string(),
                deps.iter().map(|d| d.status).collect(),
            ));
            if fail {
                return Err(JobError::permanent("declined"));
            }
            if ctx.job_type() == "charge_card" {
                ctx.set_result(json!({"charged": ctx.payload()["order_id"]}));
            }
            Ok(())
        });
    }
    builder
}

fn job(queue: &Queue, id: i64) -> litejobs::JobRecord {
    queue.job(id).expect("read").expect("the job")
}

fn raw_run_at(db: &str, id: i64) -> (i64, Option<i64>) {
    raw_conn(std::path::Path::new(db))
        .query_row(
            "SELECT run_at, held_run_at FROM jobs WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("reading the row")
}

#[test]
fn a_job_python_makes_wait_runs_once_its_dependency_succeeded() {
    if sqlite_only() || !crate::support::have_tool("python3") {
        return;
    }
    let (_dir, db, queue) = fresh();
    let charge = queue
        .enqueue(NewJob::new("charge_card", json!({"order_id": 1042})))
        .expect("enqueue");
    python(
        &db,
        &guide_statements(WAIT),
        json!({"charge": charge}),
        None,
    )
    .expect("the inserts");
    let (ship, release) = (charge + 1, charge + 2);
    for id in [ship, release] {
        let held = job(&queue, id);
        assert_eq!((held.status, held.waiting_for), (JobStatus::Queued, 1));
        assert!(held.run_at <= queue.now_ms(), "the time it asked for");
        let (run_at, held_run_at) = raw_run_at(&db, id);
        assert_eq!(
            (run_at, held_run_at),
            (99_999_999_999_999, Some(held.run_at))
        );
    }
    let starts = Arc::new(Mutex::new(Vec::new()));
    let report = testing::drain(&worker(&queue, &starts, &[])).expect("drain");
    assert_eq!(report.succeeded, 3);
    let starts = starts.lock().expect("lock").clone();
    assert_eq!(starts[0], ("charge_card".to_string(), vec![]));
    let mut after: Vec<_> = starts[1..].to_vec();
    after.sort();
    assert_eq!(
        after,
        [
            ("release_hold".to_string(), vec![JobStatus::Succeeded]),
            ("ship_order".to_string(), vec![JobStatus::Succeeded]),
        ],
        "each ran once, after the charge succeeded"
    );
    assert_eq!(raw_run_at(&db, ship).1, None);
}

#[test]
fn a_dependency_that_ends_dead_cancels_the_job_python_made_wait_but_not_the_clean_up() {
    if sqlite_only() || !crate::support::have_tool("python3") {
        return;
    }
    let (_dir, db, queue) = fresh();
    let charge = queue
        .enqueue(NewJob::new("charge_card", json!({"order_id": 1042})))
        .expect("enqueue");
    python(
        &db,
        &guide_statements(WAIT),
        json!({"charge": charge}),
        None,
    )
    .expect("the inserts");
    let starts = Arc::new(Mutex::new(Vec::new()));
    testing::drain(&worker(&queue, &starts, &["charge_card"])).expect("drain");
    assert_eq!(job(&queue, charge).status, JobStatus::Dead);
    let ship = job(&queue, charge + 1);
    assert_eq!(
        (ship.status, ship.cancelled_by.as_deref()),
        (JobStatus::Cancelled, Some("dependency"))
    );
    assert_eq!(
        ship.cancel_reason.as_deref(),
        Some(format!("dependency job {charge} ended dead").as_str())
    );
    assert_eq!(job(&queue, charge + 2).status, JobStatus::Succeeded);
    let types: Vec<String> = starts
        .lock()
        .expect("lock")
        .iter()
        .map(|s| s.0.clone())
        .collect();
    assert_eq!(types, ["charge_card", "release_hold"]);
}

#[test]
fn a_dependency_already_dead_cancels_at_once_and_a_missing_one_is_refused_with_nothing_kept() {
    if sqlite_only() || !crate::support::have_tool("python3") {
        return;
    }
    let (_dir, db, queue) = fresh();
    let charge = queue
        .enqueue(NewJob::new("charge_card", json!({"order_id": 1042})))
        .expect("enqueue");
    let starts = Arc::new(Mutex::new(Vec::new()));
    testing::drain(&worker(&queue, &starts, &["charge_card"])).expect("drain");
    assert_eq!(job(&queue, charge).status, JobStatus::Dead);
    python(
        &db,
        &guide_statements(WAIT),
        json!({"charge": charge}),
        None,
    )
    .expect("the inserts");
    // Settled in Python's own transaction, by the trigger.
    let ship = job(&queue, charge + 1);
    assert_eq!(
        (ship.status, ship.cancelled_by.as_deref(), ship.waiting_for),
        (JobStatus::Cancelled, Some("dependency"), 0)
    );
    assert!(ship.run_at < 99_999_999_999_999);
    let release = job(&queue, charge + 2);
    assert_eq!(
        (release.status, release.waiting_for),
        (JobStatus::Queued, 0)
    );
    assert_eq!(raw_run_at(&db, release.id).1, None, "not held");

    let before = count_rows(std::path::Path::new(&db), "jobs");
    let refused = python(
        &db,
        &guide_statements(WAIT),
        json!({"charge": 999_999}),
        None,
    );
    assert_eq!(
        refused,
        Err("IntegrityError: job_deps: the job waited for (depends_on) does not exist".into())
    );
    assert_eq!(
        count_rows(std::path::Path::new(&db), "jobs"),
        before,
        "rolled back: the job is not kept without its wait"
    );
}

#[test]
fn a_workflow_python_inserts_runs_in_order_and_its_step_reads_the_result_by_name() {
    if sqlite_only() || !crate::support::have_tool("python3") {
        return;
    }
    let (_dir, db, queue) = fresh();
    let workflow = python(
        &db,
        &guide_statements(WORKFLOW),
        json!({}),
        Some("workflow"),
    )
    .expect("the inserts");
    let info = queue
        .workflow(workflow)
        .expect("read")
        .expect("the workflow");
    let names: Vec<Option<&str>> = info.steps.iter().map(|s| s.step.as_deref()).collect();
    assert_eq!(names, [Some("charge"), Some("ship")]);
    assert!(info.steps[1].is_held());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_in = Arc::clone(&seen);
    let starts = Arc::new(Mutex::new(Vec::new()));
    let builder = worker(&queue, &starts, &[]).handler(
        "ship_order",
        move |ctx: &JobContext| -> Result<(), JobError> {
            let charged = ctx
                .dependency_result("charge")
                .map_err(|e| JobError::permanent(e.to_string()))?;
            seen_in.lock().expect("lock").push(charged);
            Ok(())
        },
    );
    testing::drain(&builder).expect("drain");
    assert_eq!(
        *seen.lock().expect("lock"),
        [Some(json!({"charged": 1042}))]
    );
    let info = queue
        .workflow(workflow)
        .expect("read")
        .expect("the workflow");
    assert!(info.is_finished());
    assert_eq!(info.counts().get(&JobStatus::Succeeded), Some(&2));
}

#[test]
fn a_batch_python_inserts_whole_calls_back_once_with_its_counts() {
    if sqlite_only() || !crate::support::have_tool("python3") {
        return;
    }
    let (_dir, db, queue) = fresh();
    let batch =
        python(&db, &guide_statements(BATCH), json!({}), Some("batch")).expect("the inserts");
    let summaries = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&summaries);
    let starts = Arc::new(Mutex::new(Vec::new()));
    let builder = worker(&queue, &starts, &[]).handler(
        "tell_finance",
        move |ctx: &JobContext| -> Result<(), JobError> {
            let s = ctx
                .batch()
                .map_err(|e| JobError::permanent(e.to_string()))?
                .expect("a batch callback");
            seen.lock()
                .expect("lock")
                .push((s.succeeded, s.dead, s.cancelled, s.members.len()));
            Ok(())
        },
    );
    // The second invoice fails for good.
    let builder = builder.handler("send_invoice", |ctx: &JobContext| -> Result<(), JobError> {
        if ctx.payload()["invoice"] == json!(2) {
            return Err(JobError::permanent("no address"));
        }
        Ok(())
    });
    testing::drain(&builder).expect("drain");
    assert_eq!(*summaries.lock().expect("lock"), [(1, 1, 0, 2)]);
    let info = queue.workflow(batch).expect("read").expect("the batch");
    assert_eq!(info.kind, litejobs::workflow::WorkflowKind::Batch);
    assert!(info.is_finished());
}

/// The guide's statements in SQLite 3.31.1, after schema.sql: each case is one statement, and
/// a check is an insert into a table whose CHECK fails unless the state is right.
#[test]
fn the_guides_waits_hold_and_settle_in_sqlite_3_31() {
    let Some(sqljs) = sqlite_3_31() else {
        return;
    };
    let setup = vec![
        crate::support::SCHEMA_SQL.to_string(),
        // Job 1 waits to run; job 2 ended dead.
        "INSERT INTO jobs (job_type, payload) VALUES ('charge_card', '{}')".to_string(),
        "INSERT INTO jobs (job_type, payload, status) VALUES ('charge_card', '{}', 'dead')"
            .to_string(),
        "CREATE TABLE expect (what TEXT, ok INTEGER CHECK (ok = 1))".to_string(),
    ];
    let wait_on = |charge: &str| -> Vec<String> {
        guide_statements(WAIT)
            .into_iter()
            .map(|s| s.replace(":charge", charge))
            .collect()
    };
    let expect = |what: &str, cond: &str| format!("INSERT INTO expect VALUES ('{what}', ({cond}))");
    let mut cases: Vec<String> = Vec::new();
    // Jobs 3 and 4 wait for job 1, still to run: held.
    cases.extend(wait_on("1"));
    cases.push(expect(
        "held",
        "SELECT count(*) = 2 FROM jobs WHERE id IN (3, 4) AND status = 'queued'
             AND waiting_for = 1 AND run_at = 99999999999999 AND held_run_at IS NOT NULL",
    ));
    // Jobs 5 and 6 wait for job 2, dead: 5 cancelled at once, 6 (any outcome) free.
    cases.extend(wait_on("2"));
    cases.push(expect(
        "settled",
        "SELECT (SELECT status = 'cancelled' AND cancelled_by = 'dependency'
                        AND run_at < 99999999999999 FROM jobs WHERE id = 5)
            AND (SELECT status = 'queued' AND waiting_for = 0 AND held_run_at IS NULL
                 FROM jobs WHERE id = 6)",
    ));
    // A wait on a job that does not exist.
    cases.extend(wait_on("999"));
    // A workflow and a batch (the first ids of a fresh table: 1).
    cases.extend(
        guide_statements(WORKFLOW)
            .into_iter()
            .map(|s| s.replace(":workflow", "1")),
    );
    cases.push(expect(
        "workflow",
        "SELECT waiting_for = 1 FROM jobs WHERE workflow_id = 1 AND step = 'ship'",
    ));
    cases.extend(
        guide_statements(BATCH)
            .into_iter()
            .map(|s| s.replace(":batch", "2")),
    );
    cases.push(expect(
        "batch",
        "SELECT waiting_for = 2 FROM jobs WHERE workflow_id = 2 AND step = 'on_complete'",
    ));
    let refs: Vec<&str> = cases.iter().map(String::as_str).collect();
    let results = run_in_sqlite_3_31(&sqljs, &setup, &refs);
    for (case, got) in cases.iter().zip(&results) {
        if case.contains("999") && case.contains("job_deps") {
            assert_eq!(
                got, "error: job_deps: the job waited for (depends_on) does not exist",
                "{case}"
            );
        } else {
            assert_eq!(got, "ok", "SQLite 3.31 on {case}");
        }
    }
}

#[test]
fn a_dependency_python_cancels_by_plain_sql_is_settled_by_the_waits_sweep() {
    if sqlite_only() || !crate::support::have_tool("python3") {
        return;
    }
    let (_dir, db, queue) = fresh();
    let charge = queue
        .enqueue(NewJob::new("charge_card", json!({"order_id": 1042})))
        .expect("enqueue");
    python(
        &db,
        &guide_statements(WAIT),
        json!({"charge": charge}),
        None,
    )
    .expect("the inserts");
    // The app gives up on the charge by plain SQL: nothing of litejobs runs in that write.
    python(
        &db,
        &[
            "UPDATE jobs SET status = 'cancelled', cancelled_by = 'shop' WHERE id = :charge"
                .to_string(),
        ],
        json!({"charge": charge}),
        None,
    )
    .expect("the update");
    assert_eq!(job(&queue, charge + 1).waiting_for, 1, "not settled yet");
    assert_eq!(queue.settle_waits().expect("the sweep"), 2);
    let ship = job(&queue, charge + 1);
    assert_eq!(
        (ship.status, ship.cancelled_by.as_deref()),
        (JobStatus::Cancelled, Some("dependency"))
    );
    let release = job(&queue, charge + 2);
    assert_eq!(
        (release.status, release.waiting_for),
        (JobStatus::Queued, 0)
    );
    let starts = Arc::new(Mutex::new(Vec::new()));
    testing::drain(&worker(&queue, &starts, &[])).expect("drain");
    assert_eq!(job(&queue, charge + 2).status, JobStatus::Succeeded);
}

#[test]
fn drain_settles_the_waits_on_a_job_ended_by_plain_sql_as_a_workers_sweep_would() {
    if sqlite_only() || !crate::support::have_tool("python3") {
        return;
    }
    let (_dir, db, queue) = fresh();
    let charge = queue
        .enqueue(NewJob::new("charge_card", json!({"order_id": 1042})))
        .expect("enqueue");
    python(
        &db,
        &guide_statements(WAIT),
        json!({"charge": charge}),
        None,
    )
    .expect("the inserts");
    python(
        &db,
        &[
            "UPDATE jobs SET status = 'cancelled', cancelled_by = 'shop' WHERE id = :charge"
                .to_string(),
        ],
        json!({"charge": charge}),
        None,
    )
    .expect("the update");
    let starts = Arc::new(Mutex::new(Vec::new()));
    testing::drain(&worker(&queue, &starts, &[])).expect("drain");
    assert_eq!(job(&queue, charge + 1).status, JobStatus::Cancelled);
    assert_eq!(job(&queue, charge + 2).status, JobStatus::Succeeded);
}
