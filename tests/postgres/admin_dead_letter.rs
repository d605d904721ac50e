//! AdminStore and DeadLetterStore on PostgreSQL: cancel, retry now, pause; requeue (one, or
//! by type and error text, all or nothing), discard and list dead jobs, with the refusals of
//! the SQLite backend; and what a single writer gave for free on SQLite: two processes
//! requeueing the same dead job at once make one new job, not two.

use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::sql_types::BigInt;
use diesel::{sql_query, PgConnection, QueryableByName, RunQueryDsl};
use litejobs::{
    testing, Discarded, ErrorKind, JobContext, JobError, JobFilter, JobStatus, ManualClock, NewJob,
    Queue, Worker,
};
use serde_json::json;

use crate::support::pg::{setup, PgSchema};
use crate::support::START_MS;

#[derive(QueryableByName)]
struct V {
    #[diesel(sql_type = BigInt)]
    v: i64,
}

fn exec(conn: &mut PgConnection, sql: &str) {
    conn.batch_execute(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn int(conn: &mut PgConnection, sql: &str) -> i64 {
    let rows: Vec<V> = sql_query(sql)
        .load(conn)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.first()
        .map(|r| r.v)
        .unwrap_or_else(|| panic!("{sql}: no row"))
}

/// Inserts a job by SQL, created, changed and due at START_MS, with the given columns (SQL
/// literals) after `job_type` and `payload`.
fn insert(conn: &mut PgConnection, job_type: &str, cols: &str, vals: &str) -> i64 {
    let (cols, vals) = if cols.is_empty() {
        (String::new(), String::new())
    } else {
        (format!(", {cols}"), format!(", {vals}"))
    };
    int(
        conn,
        &format!(
            "INSERT INTO jobs (job_type, payload, run_at, created_at, updated_at{cols})
             VALUES ('{job_type}', '{{\"n\": 1}}', {START_MS}, {START_MS}, {START_MS}{vals})
             RETURNING id AS v"
        ),
    )
}

/// A dead job of `job_type` with `error`, two attempts spent, one in its history.
fn dead(conn: &mut PgConnection, job_type: &str, error: &str) -> i64 {
    let id = insert(
        conn,
        job_type,
        "status, attempts, max_attempts, last_error, last_status_code, finished_at",
        &format!("'dead', 2, 2, '{error}', 500, {START_MS}"),
    );
    exec(
        conn,
        &format!(
            "INSERT INTO job_attempts (job_id, attempt, finished_at, outcome, error)
             VALUES ({id}, 2, {START_MS}, 'failed', '{error}')"
        ),
    );
    id
}

fn count(conn: &mut PgConnection, cond: &str) -> i64 {
    int(
        conn,
        &format!("SELECT COUNT(*) AS v FROM jobs WHERE {cond}"),
    )
}

fn job(queue: &Queue, id: i64) -> litejobs::JobRecord {
    queue
        .job(id)
        .expect("read a job")
        .unwrap_or_else(|| panic!("job {id} exists"))
}

fn refused(result: litejobs::Result<impl std::fmt::Debug>, kind: ErrorKind, text: &str) {
    let err = result.expect_err("refused");
    assert_eq!(err.kind(), kind, "{err}");
    assert!(err.to_string().contains(text), "{err:?} names {text:?}");
}

#[test]
fn cancel_takes_waiting_and_running_jobs_and_releases_their_key() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let queued = insert(&mut c, "t", "idempotency_key", "'k:1'");
    let failed = insert(&mut c, "t", "status, last_error", "'failed', 'x'");
    let running = insert(
        &mut c,
        "t",
        "status, attempts, locked_by, locked_until, started_at",
        &format!("'running', 1, 'w', {}, {START_MS}", START_MS + 600_000),
    );
    let succeeded = insert(&mut c, "t", "status, finished_at", "'succeeded', 1");
    let dead = dead(&mut c, "t", "boom");
    clock.advance(Duration::from_secs(60));
    let now = START_MS + 60_000;

    queue.cancel(queued).expect("cancel a queued job");
    queue.cancel(failed).expect("cancel a failed job");
    queue
        .cancel_as(running, "ops", "runaway")
        .expect("cancel a running job");
    for id in [queued, failed, running] {
        let j = job(&queue, id);
        assert_eq!(j.status, JobStatus::Cancelled);
        assert_eq!((j.finished_at, j.updated_at), (Some(now), now));
    }
    assert_eq!(job(&queue, queued).cancelled_by.as_deref(), Some("app"));
    let stopped = job(&queue, running);
    assert_eq!(
        (
            stopped.cancelled_by.as_deref(),
            stopped.cancel_reason.as_deref()
        ),
        (Some("ops"), Some("runaway"))
    );
    assert_eq!((stopped.locked_by, stopped.locked_until), (None, None));
    let history = queue.attempts(running).expect("attempts");
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].outcome.as_str(), "cancelled");
    assert_eq!(history[0].worker.as_deref(), Some("w"));
    assert_eq!(history[0].duration_ms, Some(60_000));
    assert_eq!(
        history[0].error.as_deref(),
        Some("cancelled by ops: runaway")
    );
    assert_eq!(queue.stats().expect("stats").count(JobStatus::Cancelled), 3);
    // The key is free for a new job.
    insert(&mut c, "t", "idempotency_key", "'k:1'");

    refused(
        queue.cancel(succeeded),
        ErrorKind::InvalidState,
        "is succeeded",
    );
    refused(
        queue.cancel(dead),
        ErrorKind::InvalidState,
        "only queued, failed or running",
    );
    refused(
        queue.cancel(queued),
        ErrorKind::InvalidState,
        "is cancelled",
    );
    refused(queue.cancel(999_999), ErrorKind::NotFound, "999999");
    assert_eq!(job(&queue, dead).status, JobStatus::Dead, "untouched");
}

#[test]
fn retry_now_makes_waiting_jobs_due_and_gives_a_dead_job_one_more_attempt() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let later = START_MS + 3_600_000;
    let failed = insert(&mut c, "t", "status, attempts", "'failed', 1");
    let delayed = insert(&mut c, "t", "", "");
    exec(
        &mut c,
        &format!("UPDATE jobs SET run_at = {later} WHERE id IN ({failed}, {delayed})"),
    );
    let d = dead(&mut c, "t", "boom");
    clock.advance(Duration::from_secs(5));
    let now = START_MS + 5_000;

    for id in [failed, delayed] {
        queue.retry_now(id).expect("retry a waiting job");
        let j = job(&queue, id);
        assert_eq!((j.run_at, j.updated_at), (now, now));
    }
    assert_eq!(job(&queue, failed).status, JobStatus::Failed, "status kept");
    assert_eq!(queue.stats().expect("stats").count(JobStatus::Dead), 1);
    queue.retry_now(d).expect("retry a dead job");
    let j = job(&queue, d);
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!((j.run_at, j.finished_at), (now, None));
    assert_eq!(
        (j.attempts, j.max_attempts),
        (2, 3),
        "exactly one more attempt"
    );
    assert_eq!(
        queue.stats().expect("stats").count(JobStatus::Dead),
        0,
        "out of the counts"
    );
    assert_eq!(
        queue.health(Duration::from_secs(60)).expect("health").dead,
        0
    );

    let succeeded = insert(&mut c, "t", "status, finished_at", "'succeeded', 1");
    let cancelled = insert(&mut c, "t", "status, finished_at", "'cancelled', 1");
    let running = insert(&mut c, "t", "status", "'running'");
    refused(
        queue.retry_now(succeeded),
        ErrorKind::InvalidState,
        "is succeeded",
    );
    refused(
        queue.retry_now(cancelled),
        ErrorKind::InvalidState,
        "is cancelled",
    );
    refused(
        queue.retry_now(running),
        ErrorKind::InvalidState,
        "only queued, failed or dead",
    );
    refused(queue.retry_now(999_999), ErrorKind::NotFound, "999999");

    // A requeued dead job: retry the new one instead.
    let requeued = dead(&mut c, "t", "boom");
    let new_id = queue
        .requeue_dead(requeued, "ops", "fixed")
        .expect("requeue");
    refused(
        queue.retry_now(requeued),
        ErrorKind::InvalidState,
        &format!("requeued as job {new_id}"),
    );

    // A dead job whose key another live job holds now.
    let keyed = dead(&mut c, "t", "boom");
    exec(
        &mut c,
        &format!("UPDATE jobs SET idempotency_key = 'k:2' WHERE id = {keyed}"),
    );
    insert(&mut c, "t", "idempotency_key", "'k:2'");
    refused(
        queue.retry_now(keyed),
        ErrorKind::InvalidState,
        "idempotency key is held",
    );
    assert_eq!(
        job(&queue, keyed).status,
        JobStatus::Dead,
        "nothing changed"
    );

    // A dead job another program wrote with a payload no handler can read.
    let garbled = dead(&mut c, "t", "payload is not valid JSON");
    exec(
        &mut c,
        &format!("UPDATE jobs SET payload = '{{oops' WHERE id = {garbled}"),
    );
    refused(
        queue.retry_now(garbled),
        ErrorKind::InvalidState,
        "not valid JSON",
    );
    assert_eq!(job(&queue, garbled).status, JobStatus::Dead);
}

#[test]
fn requeue_creates_a_new_job_and_marks_the_dead_one() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let id = insert(
        &mut c,
        "deliver_webhook",
        "queue, status, priority, attempts, max_attempts, timeout_ms, group_key, \
         idempotency_key, last_error, last_status_code, finished_at, result, progress",
        &format!(
            "'webhooks', 'dead', 7, 2, 2, 10000, 'endpoint:crm', 'evt:7', 'HTTP 410 Gone', 410, \
             {START_MS}, '{{\"partial\": true}}', '{{\"step\": 1}}'"
        ),
    );
    exec(
        &mut c,
        &format!(
            "INSERT INTO job_attempts (job_id, attempt, finished_at, outcome, error)
             VALUES ({id}, 2, {START_MS}, 'failed', 'HTTP 410 Gone')"
        ),
    );
    clock.advance(Duration::from_secs(3600));
    let now = START_MS + 3_600_000;
    let new_id = queue
        .requeue_dead(id, "ops@example.com", "endpoint fixed")
        .expect("requeue");
    assert!(new_id > id, "a new job, with a new id");

    let old = job(&queue, id);
    assert_eq!(old.status, JobStatus::Dead, "the dead job stays dead");
    assert_eq!(old.requeued_by.as_deref(), Some("ops@example.com"));
    assert_eq!(old.requeued_at, Some(now));
    assert_eq!(old.requeue_reason.as_deref(), Some("endpoint fixed"));
    assert_eq!(old.requeued_as, Some(new_id));
    assert_eq!(old.updated_at, now);
    assert_eq!(
        (old.last_error.as_deref(), old.last_status_code),
        (Some("HTTP 410 Gone"), Some(410))
    );
    assert_eq!(old.finished_at, Some(START_MS), "kept");
    assert_eq!(
        queue.attempts(id).expect("history").len(),
        1,
        "its history is kept"
    );

    let new = job(&queue, new_id);
    assert_eq!(new.status, JobStatus::Queued);
    assert_eq!(
        (new.job_type.as_str(), new.queue.as_str()),
        ("deliver_webhook", "webhooks")
    );
    assert_eq!(new.payload, old.payload);
    assert_eq!((new.priority, new.attempts, new.max_attempts), (7, 0, 2));
    assert_eq!(new.timeout_ms, Some(10_000));
    assert_eq!(new.group_key.as_deref(), Some("endpoint:crm"));
    assert_eq!(
        new.idempotency_key.as_deref(),
        Some("evt:7"),
        "the key goes with it"
    );
    assert_eq!(
        (new.run_at, new.created_at, new.updated_at),
        (now, now, now),
        "due at once"
    );
    assert_eq!(
        (
            new.last_error,
            new.last_status_code,
            new.result,
            new.progress
        ),
        (None, None, None, None)
    );
    assert_eq!(
        (new.requeued_by, new.requeued_as, new.finished_at),
        (None, None, None)
    );
    assert!(queue.attempts(new_id).expect("history").is_empty());
    // The dead job is out of the dead letter, and still counted as dead.
    assert!(queue.dead_jobs(&JobFilter::new()).expect("dead").is_empty());
    let health = queue.health(Duration::from_secs(60)).expect("health");
    assert_eq!((health.dead, health.due_now), (0, 1));
    assert_eq!(queue.stats().expect("stats").count(JobStatus::Dead), 1);
    assert!(
        queue.error_groups(5).expect("groups").is_empty(),
        "requeued: nobody's problem"
    );
}

#[test]
fn requeue_refuses_jobs_not_dead_unknown_already_requeued_or_unusable() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let queued = insert(&mut c, "t", "", "");
    let succeeded = insert(&mut c, "t", "status, finished_at", "'succeeded', 1");
    let d = dead(&mut c, "t", "boom");
    let keyed = insert(
        &mut c,
        "t",
        "status, idempotency_key, finished_at",
        &format!("'dead', 'k:1', {START_MS}"),
    );
    insert(
        &mut c,
        "t",
        "status, idempotency_key, finished_at",
        "'succeeded', 'k:1', 1",
    );
    let garbled = dead(&mut c, "t", "boom");
    exec(
        &mut c,
        &format!("UPDATE jobs SET payload = 'not json' WHERE id = {garbled}"),
    );
    let before = count(&mut c, "TRUE");

    refused(
        queue.requeue_dead(queued, "ops", "x"),
        ErrorKind::InvalidState,
        "is queued, not dead",
    );
    refused(
        queue.requeue_dead(succeeded, "ops", "x"),
        ErrorKind::InvalidState,
        "succeeded",
    );
    refused(
        queue.requeue_dead(999_999, "ops", "x"),
        ErrorKind::NotFound,
        "999999",
    );
    refused(
        queue.requeue_dead(keyed, "ops", "x"),
        ErrorKind::InvalidState,
        "idempotency key is held",
    );
    refused(
        queue.requeue_dead(garbled, "ops", "x"),
        ErrorKind::InvalidState,
        "not valid JSON",
    );
    assert_eq!(count(&mut c, "TRUE"), before, "refusals insert nothing");
    assert_eq!(job(&queue, keyed).requeued_as, None, "nor mark anything");

    let new_id = queue.requeue_dead(d, "ops", "first time").expect("requeue");
    refused(
        queue.requeue_dead(d, "ops", "second time"),
        ErrorKind::InvalidState,
        &format!("already requeued as job {new_id}"),
    );
    assert_eq!(count(&mut c, "TRUE"), before + 1);
    assert_eq!(job(&queue, d).requeue_reason.as_deref(), Some("first time"));
}

/// Polls until `n` sessions wait, directly or behind each other, for a lock the session
/// `holder` holds (bounded).
fn wait_for_waiters(conn: &mut PgConnection, holder: i64, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting = int(
            conn,
            &format!(
                "WITH RECURSIVE blocked(pid) AS (
                     SELECT pid FROM pg_stat_activity WHERE {holder} = ANY(pg_blocking_pids(pid))
                     UNION
                     SELECT a.pid FROM pg_stat_activity a JOIN blocked b
                       ON b.pid = ANY(pg_blocking_pids(a.pid)))
                 SELECT COUNT(*) AS v FROM blocked"
            ),
        );
        if waiting >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{waiting} of {n} sessions wait for the lock"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A second queue on the schema, as another process would open it, that waits long for locks.
fn another_process(schema: &PgSchema, clock: &ManualClock) -> Queue {
    Queue::builder()
        .clock(clock.clone())
        .pg_schema(&schema.name)
        .busy_timeout(Duration::from_secs(30))
        .open(&schema.url)
        .expect("another queue on the schema")
}

/// Two processes requeue the same dead job at the same moment (both start while a third
/// connection holds the row, so both have read nothing yet): one new job, one refusal.
#[test]
fn two_processes_requeueing_the_same_dead_job_make_one_new_job() {
    let Some((schema, _queue, clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let d = dead(&mut c, "t", "boom");
    let (a, b) = (
        another_process(&schema, &clock),
        another_process(&schema, &clock),
    );
    let mut holder = schema.raw();
    let holder_pid = int(&mut holder, "SELECT pg_backend_pid()::bigint AS v");
    exec(
        &mut holder,
        &format!("BEGIN; SELECT 1 FROM jobs WHERE id = {d} FOR UPDATE"),
    );
    let (ra, rb) = std::thread::scope(|s| {
        let ta = s.spawn(|| a.requeue_dead(d, "ops-a", "a"));
        let tb = s.spawn(|| b.requeue_dead(d, "ops-b", "b"));
        wait_for_waiters(&mut c, holder_pid, 2);
        exec(&mut holder, "COMMIT");
        (ta.join().expect("thread a"), tb.join().expect("thread b"))
    });
    let (new_id, err) = match (ra, rb) {
        (Ok(id), Err(e)) | (Err(e), Ok(id)) => (id, e),
        other => panic!("exactly one requeue succeeds: {other:?}"),
    };
    assert_eq!(err.kind(), ErrorKind::InvalidState, "{err}");
    assert!(
        err.to_string()
            .contains(&format!("already requeued as job {new_id}")),
        "{err}"
    );
    assert_eq!(count(&mut c, &format!("id <> {d}")), 1, "one new job");
    assert_eq!(job(&a, d).requeued_as, Some(new_id));
}

#[test]
fn discard_deletes_a_dead_job_with_its_history_also_the_newest() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let older = dead(&mut c, "t", "boom");
    let queued = insert(&mut c, "t", "", "");
    let newest = dead(&mut c, "t", "boom");
    refused(
        queue.discard_dead(queued),
        ErrorKind::InvalidState,
        "is queued, not dead",
    );
    refused(queue.discard_dead(999_999), ErrorKind::NotFound, "999999");
    assert_eq!(queue.stats().expect("stats").count(JobStatus::Dead), 2);

    // No "newest row is kept" rule: ids come from a sequence and are never reused.
    assert_eq!(
        queue.discard_dead(newest).expect("discard"),
        Discarded::Deleted
    );
    assert_eq!(
        queue.discard_dead(older).expect("discard"),
        Discarded::Deleted
    );
    for id in [older, newest] {
        assert_eq!(queue.job(id).expect("read"), None);
        assert!(queue.attempts(id).expect("history").is_empty());
    }
    assert_eq!(int(&mut c, "SELECT COUNT(*) AS v FROM job_attempts"), 0);
    refused(queue.discard_dead(newest), ErrorKind::NotFound, "no job");
    let stats = queue.stats().expect("stats");
    assert_eq!(
        (stats.count(JobStatus::Dead), stats.count(JobStatus::Queued)),
        (0, 1)
    );
    assert!(
        queue
            .metrics_snapshot()
            .expect("metrics")
            .attempts
            .is_empty(),
        "attempts uncounted"
    );
    assert!(insert(&mut c, "t", "", "") > newest, "ids are not reused");
}

#[test]
fn dead_jobs_lists_those_awaiting_a_person_with_the_filter() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let mail = dead(&mut c, "send_email", "SMTP timeout");
    let hook = dead(&mut c, "deliver_webhook", "connection TIMEOUT");
    exec(
        &mut c,
        &format!("UPDATE jobs SET queue = 'webhooks' WHERE id = {hook}"),
    );
    let other = dead(&mut c, "send_email", "bad address");
    let requeued = dead(&mut c, "send_email", "SMTP timeout");
    queue.requeue_dead(requeued, "ops", "x").expect("requeue");
    insert(
        &mut c,
        "send_email",
        "status, last_error",
        "'failed', 'SMTP timeout'",
    );

    let ids = |f: &JobFilter| -> Vec<i64> {
        queue
            .dead_jobs(f)
            .expect("dead jobs")
            .iter()
            .map(|j| j.id)
            .collect()
    };
    assert_eq!(
        ids(&JobFilter::new()),
        vec![other, hook, mail],
        "newest first, requeued left out"
    );
    assert_eq!(
        ids(&JobFilter::new().status(JobStatus::Queued)),
        vec![other, hook, mail],
        "status ignored"
    );
    assert_eq!(
        ids(&JobFilter::new().job_type("send_email")),
        vec![other, mail]
    );
    assert_eq!(ids(&JobFilter::new().queue("webhooks")), vec![hook]);
    assert_eq!(ids(&JobFilter::new().search("timeout")), vec![hook, mail]);
    assert_eq!(
        ids(&JobFilter::new().search("smtp").job_type("send_email")),
        vec![mail]
    );
    assert_eq!(ids(&JobFilter::new().limit(2)), vec![other, hook]);
    assert_eq!(ids(&JobFilter::new().before_id(hook)), vec![mail]);
    assert!(ids(&JobFilter::new().limit(0)).is_empty());
    // Queue::list with the dead status shows the requeued one too.
    assert_eq!(
        queue
            .list(&JobFilter::new().status(JobStatus::Dead))
            .expect("list")
            .len(),
        4
    );
}

#[test]
fn requeue_dead_matching_requeues_by_type_and_error_oldest_first_all_or_nothing() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let a = dead(&mut c, "send_email", "SMTP timeout");
    let b = dead(&mut c, "send_email", "smtp TIMEOUT again");
    let other_error = dead(&mut c, "send_email", "bad address");
    let other_type = dead(&mut c, "report", "SMTP timeout");
    let pairs = queue
        .requeue_dead_matching("send_email", Some("Smtp Timeout"), "ops", "smtp back")
        .expect("bulk requeue");
    assert_eq!(
        pairs.iter().map(|p| p.0).collect::<Vec<_>>(),
        vec![a, b],
        "oldest first"
    );
    assert!(pairs[0].1 < pairs[1].1);
    for (dead_id, new_id) in &pairs {
        let old = job(&queue, *dead_id);
        assert_eq!(old.requeued_as, Some(*new_id));
        assert_eq!(old.requeue_reason.as_deref(), Some("smtp back"));
        assert_eq!(job(&queue, *new_id).status, JobStatus::Queued);
    }
    for id in [other_error, other_type] {
        assert_eq!(job(&queue, id).requeued_as, None, "job {id} does not match");
    }
    assert!(queue
        .requeue_dead_matching("send_email", Some("timeout"), "ops", "again")
        .expect("nothing left")
        .is_empty());

    // One refusal fails them all: nothing is requeued, and the error names the job.
    let c1 = dead(&mut c, "import", "x");
    let c2 = dead(&mut c, "import", "x");
    let c3 = dead(&mut c, "import", "x");
    exec(
        &mut c,
        &format!("UPDATE jobs SET idempotency_key = 'imp' WHERE id = {c2}"),
    );
    insert(&mut c, "import", "idempotency_key", "'imp'");
    let before = count(&mut c, "TRUE");
    let err = queue
        .requeue_dead_matching("import", None, "ops", "all")
        .expect_err("one job cannot be requeued");
    assert_eq!(err.kind(), ErrorKind::InvalidState, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("nothing was requeued") && text.contains(&format!("job {c2}")),
        "{text}"
    );
    assert_eq!(count(&mut c, "TRUE"), before, "nothing inserted");
    for id in [c1, c2, c3] {
        assert_eq!(job(&queue, id).requeued_as, None, "nothing marked");
    }
}

/// Two processes bulk-requeue the same dead jobs at once: each job is requeued once.
#[test]
fn two_processes_bulk_requeueing_at_once_requeue_each_job_once() {
    let Some((schema, _queue, clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let ids: Vec<i64> = (0..5).map(|_| dead(&mut c, "import", "x")).collect();
    let (a, b) = (
        another_process(&schema, &clock),
        another_process(&schema, &clock),
    );
    let mut holder = schema.raw();
    let holder_pid = int(&mut holder, "SELECT pg_backend_pid()::bigint AS v");
    exec(
        &mut holder,
        &format!("BEGIN; SELECT 1 FROM jobs WHERE id = {} FOR UPDATE", ids[0]),
    );
    let (ra, rb) = std::thread::scope(|s| {
        let ta = s.spawn(|| a.requeue_dead_matching("import", None, "a", "a"));
        let tb = s.spawn(|| b.requeue_dead_matching("import", None, "b", "b"));
        wait_for_waiters(&mut c, holder_pid, 2);
        exec(&mut holder, "COMMIT");
        (ta.join().expect("thread a"), tb.join().expect("thread b"))
    });
    let (ra, rb) = (ra.expect("bulk a"), rb.expect("bulk b"));
    let mut requeued: Vec<i64> = ra.iter().chain(&rb).map(|p| p.0).collect();
    requeued.sort();
    assert_eq!(requeued, ids, "each dead job once: {ra:?} {rb:?}");
    assert_eq!(count(&mut c, "status = 'queued'"), 5, "five new jobs");
}

/// Through a worker: a job dies, is requeued and the new job runs; a dead job retried gets
/// its one more attempt; a paused queue is not worked.
#[test]
fn requeued_and_retried_dead_jobs_run_again_and_paused_queues_wait() {
    let Some((_schema, queue, clock)) = setup() else {
        return;
    };
    let first = queue
        .enqueue(NewJob::new("flaky", json!({"n": 1})).max_attempts(1))
        .expect("enqueue");
    let second = queue
        .enqueue(NewJob::new("flaky", json!({"n": 2})).max_attempts(1))
        .expect("enqueue");
    let fixed = std::sync::atomic::AtomicBool::new(false);
    let builder = Worker::builder(&queue).handler("flaky", move |_: &JobContext| {
        if fixed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            Ok(())
        } else {
            Err(JobError::permanent("down"))
        }
    });
    let report = testing::drain(&builder).expect("drain");
    assert_eq!((report.dead, report.succeeded), (1, 1), "{report:?}");
    let dead_id = if job(&queue, first).status == JobStatus::Dead {
        first
    } else {
        second
    };
    let new_id = queue
        .requeue_dead(dead_id, "ops", "fixed")
        .expect("requeue");
    queue.pause_queue("default").expect("pause");
    assert_eq!(
        testing::drain(&builder).expect("drain").succeeded,
        0,
        "paused"
    );
    queue.resume_queue("default").expect("resume");
    clock.advance(Duration::from_secs(1));
    assert_eq!(testing::drain(&builder).expect("drain").succeeded, 1);
    assert_eq!(job(&queue, new_id).status, JobStatus::Succeeded);

    let doomed = queue
        .enqueue(NewJob::new("doomed", json!({})).max_attempts(1))
        .expect("enqueue");
    let builder = Worker::builder(&queue).handler("doomed", |_: &JobContext| {
        Err(JobError::retry("still down"))
    });
    assert_eq!(testing::drain(&builder).expect("drain").dead, 1);
    queue.retry_now(doomed).expect("retry the dead job");
    assert_eq!(
        testing::drain(&builder).expect("drain").dead,
        1,
        "dead again after one more"
    );
    let j = job(&queue, doomed);
    assert_eq!(
        (j.status, j.attempts, j.max_attempts),
        (JobStatus::Dead, 2, 2)
    );
    assert_eq!(queue.attempts(doomed).expect("history").len(), 2);
}
