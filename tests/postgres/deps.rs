//! Jobs that wait for other jobs, on PostgreSQL, where the schema's triggers hold, release
//! and cancel them for every writer: waits inserted by plain SQL (the header's transaction
//! from `schema.pg.sql` in a `psql -X` session, and single rows on a raw connection), run by
//! the worker's own claim and completion code (`testing::drain`). Jobs are inserted by SQL
//! with the server's clock; the queue's `ManualClock` is then set to the server's time, so
//! they are due.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::{sql_query, PgConnection, QueryableByName, RunQueryDsl};
use litejobs::{testing, JobContext, JobError, JobStatus, ManualClock, Queue, Worker};

use super::plain_sql::{header_statements, psql};
use crate::support::pg::{server, PgSchema};
use crate::support::scripted::{job, WAIT};
use crate::support::START_MS;

/// `run_at` of a held job.
const HELD: i64 = 99_999_999_999_999;

#[derive(QueryableByName)]
struct Int {
    #[diesel(sql_type = BigInt)]
    v: i64,
}

#[derive(QueryableByName, Debug, PartialEq, Eq)]
struct Hold {
    #[diesel(sql_type = BigInt)]
    waiting_for: i64,
    #[diesel(sql_type = BigInt)]
    run_at: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    held_run_at: Option<i64>,
}

#[derive(QueryableByName)]
struct State {
    #[diesel(sql_type = Text)]
    state: String,
}

/// A queue in a fresh schema, and a raw connection on it for the plain SQL.
struct Fixture {
    schema: PgSchema,
    queue: Queue,
    clock: ManualClock,
    sql: PgConnection,
}

fn fixture() -> Option<Fixture> {
    let url = server()?;
    let schema = PgSchema::new(&url);
    let clock = ManualClock::new(START_MS);
    let queue = schema.queue(&clock);
    let sql = schema.raw();
    Some(Fixture {
        schema,
        queue,
        clock,
        sql,
    })
}

fn int(conn: &mut PgConnection, sql: &str) -> i64 {
    sql_query(sql)
        .get_result::<Int>(conn)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .v
}

impl Fixture {
    /// Inserts a job of `job_type` as another program would (defaults for the rest).
    fn insert(&mut self, job_type: &str) -> i64 {
        int(
            &mut self.sql,
            &format!(
                "INSERT INTO jobs (job_type, payload) VALUES ('{job_type}', '{{}}') RETURNING id AS v"
            ),
        )
    }

    /// `job` waits for `on` (a `job_deps` row inserted by plain SQL).
    fn wait(&mut self, job: i64, on: i64, any_outcome: bool) {
        let any = i64::from(any_outcome);
        self.sql
            .batch_execute(&format!(
                "INSERT INTO job_deps (job_id, depends_on, any_outcome) VALUES ({job}, {on}, {any})"
            ))
            .unwrap_or_else(|e| panic!("job {job} waits for {on}: {e}"));
    }

    fn hold(&mut self, id: i64) -> Hold {
        sql_query(format!(
            "SELECT waiting_for, run_at, held_run_at FROM jobs WHERE id = {id}"
        ))
        .get_result(&mut self.sql)
        .expect("reading the hold")
    }

    fn state(&mut self, job: i64, on: i64) -> String {
        sql_query(format!(
            "SELECT state FROM job_deps WHERE job_id = {job} AND depends_on = {on}"
        ))
        .get_result::<State>(&mut self.sql)
        .expect("reading the wait")
        .state
    }

    /// The queue's clock to the server's time: every job inserted so far is due.
    fn catch_up(&mut self) {
        let now = int(
            &mut self.sql,
            "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS v",
        );
        self.clock.set(now);
    }

    /// The finished-job counts the triggers keep agree with the rows.
    fn assert_counts_kept(&mut self) {
        let kept = int(
            &mut self.sql,
            "SELECT COALESCE(SUM(n), 0)::bigint AS v FROM job_counts WHERE status = 'cancelled'",
        );
        let rows = int(
            &mut self.sql,
            "SELECT COUNT(*) AS v FROM jobs WHERE status = 'cancelled'",
        );
        assert_eq!(kept, rows, "job_counts' cancelled against the rows");
    }
}

/// Handlers for `ok` (succeeds), `boom` (dead at once) and `after` (succeeds), recording
/// the order jobs ran in.
fn worker(queue: &Queue, ran: &Arc<Mutex<Vec<i64>>>) -> litejobs::WorkerBuilder {
    let record = |ran: &Arc<Mutex<Vec<i64>>>| {
        let ran = Arc::clone(ran);
        move |ctx: &JobContext| {
            ran.lock().expect("the record").push(ctx.id());
            Ok(())
        }
    };
    let boom = Arc::clone(ran);
    Worker::builder(queue)
        .handler("ok", record(ran))
        .handler("after", record(ran))
        .handler("boom", move |ctx: &JobContext| {
            boom.lock().expect("the record").push(ctx.id());
            Err(JobError::permanent("boom"))
        })
}

/// The schema guide's PostgreSQL transaction with waits (the ```sql block opening with
/// `BEGIN;`), on one line, pointed at `schema`.
fn guide_block(schema: &str) -> String {
    let guide = include_str!("../../docs/schema.md");
    let start = guide.find("```sql\nBEGIN;").expect("the guide's block") + "```sql\n".len();
    let block = &guide[start..];
    let block = &block[..block.find("```").expect("its end")];
    block
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("litejobs.", &format!("\"{schema}\"."))
}

#[test]
fn the_headers_transaction_holds_the_job_until_its_dependencies_succeed() {
    let Some(mut f) = fixture() else { return };
    let first = f.insert("ok");
    let second = f.insert("ok");
    // The header's transaction as a `psql -X` user pastes it, each statement in turn in one
    // session, the dependencies' ids in place of 41 and 42.
    let statements: Vec<String> = header_statements(&f.schema.name)
        .into_iter()
        .skip_while(|s| s != "BEGIN;")
        .take_while(|s| s != "COMMIT;")
        .chain(["COMMIT;".to_string()])
        .map(|s| s.replace("ARRAY[41, 42]", &format!("ARRAY[{first}, {second}]")))
        .collect();
    assert_eq!(
        statements.len(),
        4,
        "BEGIN, two inserts, COMMIT: {statements:?}"
    );
    assert_eq!(
        guide_block(&f.schema.name),
        statements
            .join(" ")
            .replace(&format!("ARRAY[{first}, {second}]"), "ARRAY[41, 42]"),
        "docs/schema.md shows the header's transaction"
    );
    let mut args = Vec::new();
    for s in &statements {
        args.extend(["-c", s.as_str()]);
    }
    let Some(out) = psql(&f.schema.url, &args) else {
        return;
    };
    out.unwrap_or_else(|e| panic!("the header's transaction: {e}"));
    let receipt = int(&mut f.sql, "SELECT max(id) AS v FROM jobs");
    let hold = f.hold(receipt);
    assert_eq!((hold.waiting_for, hold.run_at), (2, HELD), "{hold:?}");
    let asked = hold.held_run_at.expect("its own run_at is kept");
    f.catch_up();

    // Held: a worker that runs its type finds nothing due, and nothing reads it as due.
    let ran = Arc::new(Mutex::new(Vec::new()));
    let only_receipt = Worker::builder(&f.queue).handler("send_receipt", |_: &JobContext| {
        panic!("a held job must not run")
    });
    let report = testing::drain(&only_receipt).expect("drain");
    assert_eq!(report.attempts(), 0, "{report:?}");
    let health = f.queue.health(Duration::from_secs(3600)).expect("health");
    assert_eq!(health.due_now, 2, "the two dependencies only: {health:?}");
    let record = Arc::clone(&ran);
    let order = Arc::clone(&ran);
    let builder = worker(&f.queue, &ran).handler("send_receipt", move |ctx: &JobContext| {
        record.lock().expect("the record").push(ctx.id());
        Ok(())
    });
    let report = testing::drain(&builder).expect("drain");
    assert_eq!(report.succeeded, 3, "{report:?}");
    let order = order.lock().expect("the record").clone();
    assert_eq!(
        order.last(),
        Some(&receipt),
        "the waiting job ran last: {order:?}"
    );
    let done = job(&f.queue, receipt);
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(done.run_at, asked, "its run_at was put back");
    assert_eq!(f.hold(receipt).held_run_at, None);
}

#[test]
fn a_held_job_is_neither_due_nor_overdue() {
    let Some(mut f) = fixture() else { return };
    let later = f.insert("ok");
    let waiting = f.insert("after");
    f.wait(waiting, later, false);
    // The dependency is an hour out; the waiting job's own time has long passed.
    f.catch_up();
    let now = f.queue.now_ms();
    f.sql
        .batch_execute(&format!(
            "UPDATE jobs SET run_at = {} WHERE id = {later}",
            now + 3_600_000
        ))
        .expect("scheduling the dependency");
    f.clock.set(now + 600_000);
    let health = f.queue.health(Duration::from_secs(3600)).expect("health");
    assert_eq!(
        (health.due_now, health.oldest_due_age_ms),
        (0, None),
        "{health:?}"
    );
    assert!(f.queue.oldest_due_by_queue().expect("ages").is_empty());
    let ran = Arc::new(Mutex::new(Vec::new()));
    let report = testing::drain(&worker(&f.queue, &ran)).expect("drain");
    assert_eq!(report.attempts(), 0, "{report:?}");

    f.clock.set(now + 3_600_000);
    let report = testing::drain(&worker(&f.queue, &ran)).expect("drain");
    assert_eq!(report.succeeded, 2, "{report:?}");
    assert_eq!(*ran.lock().expect("the record"), vec![later, waiting]);
}

#[test]
fn a_dependency_that_ends_dead_cancels_its_dependants_down_the_chain() {
    let Some(mut f) = fixture() else { return };
    let a = f.insert("boom");
    let b = f.insert("after");
    let c = f.insert("after");
    f.wait(b, a, false);
    f.wait(c, b, false);
    f.catch_up();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let report = testing::drain(&worker(&f.queue, &ran)).expect("drain");
    assert_eq!((report.dead, report.succeeded), (1, 0), "{report:?}");
    assert_eq!(
        *ran.lock().expect("the record"),
        vec![a],
        "b and c never ran"
    );
    for (id, reason) in [
        (b, format!("dependency job {a} ended dead")),
        (c, format!("dependency job {b} ended cancelled")),
    ] {
        let cancelled = job(&f.queue, id);
        assert_eq!(cancelled.status, JobStatus::Cancelled, "job {id}");
        assert_eq!(cancelled.cancelled_by.as_deref(), Some("dependency"));
        assert_eq!(cancelled.cancel_reason, Some(reason));
        assert!(cancelled.run_at < HELD, "its run_at was put back");
        assert_eq!(cancelled.finished_at, Some(f.queue.now_ms()));
    }
    assert_eq!(
        (f.state(b, a), f.state(c, b)),
        ("failed".into(), "failed".into())
    );
    assert_eq!(f.hold(c).waiting_for, 0);
    let stats = f.queue.stats().expect("stats");
    assert_eq!(stats.count(JobStatus::Cancelled), 2, "counted once each");
    f.assert_counts_kept();
}

#[test]
fn a_wait_for_any_outcome_runs_after_a_dead_dependency() {
    let Some(mut f) = fixture() else { return };
    let a = f.insert("boom");
    let cleanup = f.insert("after");
    f.wait(cleanup, a, true);
    f.catch_up();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let report = testing::drain(&worker(&f.queue, &ran)).expect("drain");
    assert_eq!((report.dead, report.succeeded), (1, 1), "{report:?}");
    assert_eq!(*ran.lock().expect("the record"), vec![a, cleanup]);
    assert_eq!(f.state(cleanup, a), "done");
}

#[test]
fn a_wait_for_a_job_already_ended_settles_at_once() {
    let Some(mut f) = fixture() else { return };
    let ok = f.insert("ok");
    let boom = f.insert("boom");
    f.catch_up();
    let ran = Arc::new(Mutex::new(Vec::new()));
    testing::drain(&worker(&f.queue, &ran)).expect("drain");
    // Succeeded: not held at all.
    let after_ok = f.insert("after");
    let before = f.hold(after_ok);
    f.wait(after_ok, ok, false);
    assert_eq!(f.hold(after_ok), before, "not held");
    assert_eq!(f.state(after_ok, ok), "done");
    // Dead: cancelled by the insert itself.
    let after_boom = f.insert("after");
    f.wait(after_boom, boom, false);
    let cancelled = job(&f.queue, after_boom);
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    assert_eq!(
        cancelled.cancel_reason,
        Some(format!("dependency job {boom} ended dead"))
    );
    f.catch_up();
    ran.lock().expect("the record").clear();
    let report = testing::drain(&worker(&f.queue, &ran)).expect("drain");
    assert_eq!(report.succeeded, 1, "{report:?}");
    assert_eq!(*ran.lock().expect("the record"), vec![after_ok]);
    f.assert_counts_kept();
}

#[test]
fn waits_that_cannot_hold_are_refused_by_name() {
    let Some(mut f) = fixture() else { return };
    let a = f.insert("ok");
    let b = f.insert("ok");
    f.wait(b, a, false);
    f.sql
        .batch_execute(&format!(
            "UPDATE jobs SET status = 'running' WHERE id = {a}"
        ))
        .expect("a runs");
    for (sql, expected) in [
        (
            format!("({a}, {a})"),
            format!("job {a} cannot wait for itself"),
        ),
        (
            format!("({a}, 999999)"),
            "the job waited for (depends_on 999999) does not exist".to_string(),
        ),
        (
            format!("(999999, {a})"),
            "the waiting job (job_id 999999) does not exist".to_string(),
        ),
        (
            format!("({a}, {b})"),
            format!("job {a} is running: only a queued job can wait for another"),
        ),
    ] {
        let err = f
            .sql
            .batch_execute(&format!(
                "INSERT INTO job_deps (job_id, depends_on) VALUES {sql}"
            ))
            .expect_err("refused");
        assert!(err.to_string().contains(&expected), "{err}");
    }
    // A circle: c waits for b, which waits for a; a (queued again) may not wait for c.
    f.sql
        .batch_execute(&format!("UPDATE jobs SET status = 'queued' WHERE id = {a}"))
        .expect("a queued again");
    let c = f.insert("ok");
    f.wait(c, b, false);
    let err = f
        .sql
        .batch_execute(&format!(
            "INSERT INTO job_deps (job_id, depends_on) VALUES ({a}, {c})"
        ))
        .expect_err("a circle is refused");
    assert!(err.to_string().contains("round in a circle"), "{err}");
    assert_eq!(f.hold(a).waiting_for, 0, "nothing held by the refused rows");
}

/// Waits (bounded) until the backend `pid` waits for a lock.
fn until_blocked(watcher: &mut PgConnection, pid: i64, what: &str) {
    let deadline = Instant::now() + WAIT;
    while int(
        watcher,
        &format!("SELECT COUNT(*) AS v FROM pg_locks WHERE pid = {pid} AND NOT granted"),
    ) == 0
    {
        assert!(
            Instant::now() < deadline,
            "{what} never waited for the lock"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Two dependencies of one job end in two transactions at once, as two hosts' workers
/// would: the second waits for the first's lock on the waiting job, then reads its count
/// as the first left it, so the job is released once, by whichever ends last.
#[test]
fn two_dependencies_ending_at_once_release_their_dependant_once() {
    let Some(mut f) = fixture() else { return };
    let a = f.insert("ok");
    let b = f.insert("ok");
    let c = f.insert("after");
    f.wait(c, a, false);
    f.wait(c, b, false);
    let asked = f.hold(c).held_run_at.expect("held");
    let mut first = f.schema.raw();
    let mut second = f.schema.raw();
    let second_pid = int(&mut second, "SELECT pg_backend_pid()::bigint AS v");
    first
        .batch_execute(&format!(
            "BEGIN; UPDATE jobs SET status = 'succeeded' WHERE id = {a}"
        ))
        .expect("the first ends a");
    let ending_b = std::thread::spawn(move || {
        second.batch_execute(&format!(
            "BEGIN; UPDATE jobs SET status = 'succeeded' WHERE id = {b}; COMMIT"
        ))
    });
    until_blocked(&mut f.sql, second_pid, "the second transaction");
    assert_eq!(f.hold(c).waiting_for, 2, "nothing committed yet");
    first.batch_execute("COMMIT").expect("the first commits");
    ending_b
        .join()
        .expect("the second thread")
        .expect("the second commits");
    let hold = f.hold(c);
    assert_eq!(
        hold,
        Hold {
            waiting_for: 0,
            run_at: asked,
            held_run_at: None
        }
    );
    assert_eq!(
        (f.state(c, a), f.state(c, b)),
        ("done".into(), "done".into())
    );
    f.catch_up();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let report = testing::drain(&worker(&f.queue, &ran)).expect("drain");
    assert_eq!(report.succeeded, 1, "{report:?}");
    assert_eq!(*ran.lock().expect("the record"), vec![c]);
}

/// A wait inserted while its dependency ends in another transaction is never lost: the
/// insert locks the dependency, so the ending waits for the insert's commit and then
/// settles the new row (without the lock the ending saw no row and the job waited for ever).
#[test]
fn a_wait_inserted_while_its_dependency_ends_is_settled() {
    let Some(mut f) = fixture() else { return };
    let a = f.insert("ok");
    // Another job waits already: the ending settles both waits.
    let earlier = f.insert("after");
    f.wait(earlier, a, false);
    let mut inserting = f.schema.raw();
    let mut ending = f.schema.raw();
    let ending_pid = int(&mut ending, "SELECT pg_backend_pid()::bigint AS v");
    inserting.batch_execute("BEGIN").expect("begin");
    let c = int(
        &mut inserting,
        "INSERT INTO jobs (job_type, payload) VALUES ('after', '{}') RETURNING id AS v",
    );
    inserting
        .batch_execute(&format!(
            "INSERT INTO job_deps (job_id, depends_on) VALUES ({c}, {a})"
        ))
        .expect("the wait");
    let ended = std::thread::spawn(move || {
        ending.batch_execute(&format!(
            "UPDATE jobs SET status = 'succeeded' WHERE id = {a}"
        ))
    });
    until_blocked(&mut f.sql, ending_pid, "the ending of the dependency");
    inserting.batch_execute("COMMIT").expect("commit");
    ended
        .join()
        .expect("the ending thread")
        .expect("the dependency ends");
    for waiting in [earlier, c] {
        assert_eq!(f.state(waiting, a), "done");
        let hold = f.hold(waiting);
        assert_eq!((hold.waiting_for, hold.held_run_at), (0, None), "{hold:?}");
        assert!(hold.run_at < HELD, "released: {hold:?}");
    }
}

/// litejobs' own enqueue of a job with a wait (one statement, outside a transaction) while
/// its dependency is ending in another transaction: the statement's lock waits for that
/// transaction, then reads the dependency as it ended, and the new job goes in released at
/// once (the ending, which did not see the wait, never would release it).
#[test]
fn a_job_enqueued_while_its_dependency_ends_is_released_at_once() {
    let Some(mut f) = fixture() else { return };
    let a = f.insert("ok");
    let mut ending = f.schema.raw();
    ending.batch_execute("BEGIN").expect("begin");
    ending
        .batch_execute(&format!(
            "UPDATE jobs SET status = 'succeeded' WHERE id = {a}"
        ))
        .expect("the dependency ends, not yet committed");
    let queue = f.queue.clone();
    let enqueued = std::thread::spawn(move || {
        queue.enqueue(litejobs::NewJob::new("after", serde_json::json!({})).after(a))
    });
    // A backend waiting while it holds a tuple lock on this schema's jobs: the enqueue,
    // queued behind the ending's row lock.
    let deadline = Instant::now() + WAIT;
    while int(
        &mut f.sql,
        "SELECT COUNT(*) AS v FROM pg_locks w WHERE NOT w.granted AND w.pid IN (
             SELECT t.pid FROM pg_locks t
             WHERE t.locktype = 'tuple' AND t.relation = 'jobs'::regclass)",
    ) == 0
    {
        assert!(
            Instant::now() < deadline,
            "the enqueue never waited for the lock"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    ending.batch_execute("COMMIT").expect("commit");
    let c = enqueued
        .join()
        .expect("the enqueue thread")
        .expect("enqueued");
    assert_eq!(f.state(c, a), "done");
    let hold = f.hold(c);
    assert_eq!((hold.waiting_for, hold.held_run_at), (0, None), "{hold:?}");
    assert!(hold.run_at < HELD, "released: {hold:?}");
}
