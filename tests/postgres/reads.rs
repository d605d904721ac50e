//! ReadStore and RetentionStore on PostgreSQL: one job and its attempts, filtered lists with
//! pagination, counts (finished ones kept by the schema's triggers), health, error groups,
//! activity, metrics; pruning of finished jobs and remembered keys, also by two processes at
//! once. Rows are put in the states needed by plain SQL, as another program would.

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::sql_types::{BigInt, Text};
use diesel::{sql_query, PgConnection, QueryableByName, RunQueryDsl};
use litejobs::maintenance::{CheckpointMode, PruneOptions};
use litejobs::{AttemptOutcome, JobFilter, JobStatus, Queue};
use serde_json::json;

use crate::support::pg::{setup, PgSchema};
use crate::support::START_MS;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

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

/// Inserts a job by SQL: type 't' in queue 'default', payload `{}`, due, created and changed
/// at START_MS, with `cols` (column, SQL literal) overriding or adding columns.
fn insert(conn: &mut PgConnection, cols: &[(&str, &str)]) -> i64 {
    let start = START_MS.to_string();
    let mut all: Vec<(&str, &str)> = vec![
        ("job_type", "'t'"),
        ("payload", "'{}'"),
        ("run_at", &start),
        ("created_at", &start),
        ("updated_at", &start),
    ];
    for &(c, v) in cols {
        match all.iter_mut().find(|(name, _)| *name == c) {
            Some(entry) => entry.1 = v,
            None => all.push((c, v)),
        }
    }
    let names: Vec<&str> = all.iter().map(|(c, _)| *c).collect();
    let values: Vec<&str> = all.iter().map(|(_, v)| *v).collect();
    int(
        conn,
        &format!(
            "INSERT INTO jobs ({}) VALUES ({}) RETURNING id AS v",
            names.join(", "),
            values.join(", ")
        ),
    )
}

/// A finished job (`status` at `at`) of `queue` and `job_type` with `last_error`.
fn finished(
    conn: &mut PgConnection,
    queue: &str,
    job_type: &str,
    status: &str,
    error: Option<&str>,
    at: i64,
) -> i64 {
    let (q, t, s, e, a) = (
        format!("'{queue}'"),
        format!("'{job_type}'"),
        format!("'{status}'"),
        error.map_or("NULL".to_string(), |e| format!("'{e}'")),
        at.to_string(),
    );
    let fin = if ["succeeded", "dead", "cancelled"].contains(&status) {
        a.clone()
    } else {
        "NULL".to_string()
    };
    insert(
        conn,
        &[
            ("queue", &q),
            ("job_type", &t),
            ("status", &s),
            ("last_error", &e),
            ("updated_at", &a),
            ("finished_at", &fin),
        ],
    )
}

fn attempt(conn: &mut PgConnection, job: i64, n: i64, at: i64, outcome: &str, error: &str) {
    exec(
        conn,
        &format!(
            "INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome,
                                       error, duration_ms)
             VALUES ({job}, {n}, 'w', {at}, {at}, '{outcome}', '{error}', 0)"
        ),
    );
}

fn list(queue: &Queue, filter: &JobFilter) -> Vec<i64> {
    queue
        .list(filter)
        .unwrap_or_else(|e| panic!("list {filter:?}: {e}"))
        .iter()
        .map(|j| j.id)
        .collect()
}

#[test]
fn list_filters_by_status_type_queue_and_error_text_and_pages_newest_first() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let now = START_MS;
    let mail_queued = insert(&mut c, &[("queue", "'mail'"), ("job_type", "'send_email'")]);
    let mail_dead = finished(
        &mut c,
        "mail",
        "send_email",
        "dead",
        Some("SMTP timeout after 10s"),
        now,
    );
    let hook_failed = finished(
        &mut c,
        "webhooks",
        "deliver_webhook",
        "failed",
        Some("HTTP 503 from endpoint"),
        now,
    );
    let hook_dead = finished(
        &mut c,
        "webhooks",
        "deliver_webhook",
        "dead",
        Some("connection TIMEOUT"),
        now,
    );
    let report_done = finished(&mut c, "reports", "report_chunk", "succeeded", None, now);
    let default_dead = finished(
        &mut c,
        "default",
        "send_email",
        "dead",
        Some("100% of retries spent"),
        now,
    );
    // Only ASCII letters match either case, as on SQLite.
    let accented = finished(
        &mut c,
        "other",
        "x",
        "cancelled",
        Some("ÉCHEC of delivery"),
        now,
    );
    let running = insert(
        &mut c,
        &[
            ("status", "'running'"),
            ("locked_by", "'w1'"),
            ("locked_until", "1"),
        ],
    );

    let q = &queue;
    assert_eq!(
        list(q, &JobFilter::new()),
        vec![
            running,
            accented,
            default_dead,
            report_done,
            hook_dead,
            hook_failed,
            mail_dead,
            mail_queued
        ],
        "newest first"
    );
    assert_eq!(
        list(q, &JobFilter::new().status(JobStatus::Dead)),
        vec![default_dead, hook_dead, mail_dead]
    );
    assert_eq!(
        list(q, &JobFilter::new().status(JobStatus::Queued)),
        vec![mail_queued]
    );
    assert_eq!(
        list(q, &JobFilter::new().status(JobStatus::Failed)),
        vec![hook_failed]
    );
    assert_eq!(
        list(q, &JobFilter::new().status(JobStatus::Running)),
        vec![running]
    );
    assert_eq!(
        list(q, &JobFilter::new().status(JobStatus::Succeeded)),
        vec![report_done]
    );
    assert_eq!(
        list(q, &JobFilter::new().status(JobStatus::Cancelled)),
        vec![accented]
    );
    assert_eq!(
        list(q, &JobFilter::new().job_type("deliver_webhook")),
        vec![hook_dead, hook_failed]
    );
    assert_eq!(
        list(q, &JobFilter::new().queue("mail")),
        vec![mail_dead, mail_queued]
    );
    assert!(list(q, &JobFilter::new().queue("nope")).is_empty());
    assert_eq!(
        list(
            q,
            &JobFilter::new()
                .status(JobStatus::Dead)
                .job_type("send_email")
        ),
        vec![default_dead, mail_dead],
        "filters are ANDed"
    );

    // Search: the last error contains the text, ASCII letters in either case, no wildcards.
    assert_eq!(
        list(q, &JobFilter::new().search("timeout")),
        vec![hook_dead, mail_dead]
    );
    assert_eq!(
        list(q, &JobFilter::new().search("smtp TIMEOUT")),
        vec![mail_dead]
    );
    assert_eq!(
        list(q, &JobFilter::new().search("%")),
        vec![default_dead],
        "% is text"
    );
    assert!(
        list(q, &JobFilter::new().search("_")).is_empty(),
        "_ is text"
    );
    assert!(list(q, &JobFilter::new().search("'; DROP TABLE jobs; --")).is_empty());
    assert_eq!(list(q, &JobFilter::new().search("ÉCHEC")), vec![accented]);
    assert_eq!(
        list(q, &JobFilter::new().search("éCHEC")),
        Vec::<i64>::new(),
        "É is not ASCII"
    );
    assert_eq!(
        list(q, &JobFilter::new().search("Échec OF")),
        vec![accented]
    );
    assert_eq!(
        list(q, &JobFilter::new().search("timeout").queue("webhooks")),
        vec![hook_dead]
    );

    // Pages: limit and an exclusive before_id, combined with the other filters.
    let all = list(q, &JobFilter::new());
    assert_eq!(list(q, &JobFilter::new().limit(3)), all[..3].to_vec());
    assert!(list(q, &JobFilter::new().limit(0)).is_empty());
    assert_eq!(
        list(q, &JobFilter::new().limit(usize::MAX)),
        all,
        "no limit"
    );
    let mut pages = Vec::new();
    let mut filter = JobFilter::new().limit(3);
    loop {
        let page = list(q, &filter);
        if page.is_empty() {
            break;
        }
        filter = filter.before_id(*page.last().expect("a page"));
        pages.push(page);
        assert!(pages.len() <= 3, "pagination ends: {pages:?}");
    }
    assert_eq!(pages.concat(), all);
    assert_eq!(
        list(q, &JobFilter::new().before_id(all[0])),
        all[1..].to_vec()
    );
    assert_eq!(
        list(
            q,
            &JobFilter::new()
                .before_id(hook_dead)
                .status(JobStatus::Dead)
        ),
        vec![mail_dead]
    );

    // The records are complete, and equal to what job() reads.
    let failed = queue
        .list(&JobFilter::new().status(JobStatus::Failed))
        .expect("list failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].queue, "webhooks");
    assert_eq!(failed[0].job_type, "deliver_webhook");
    assert_eq!(
        failed[0].last_error.as_deref(),
        Some("HTTP 503 from endpoint")
    );
    assert_eq!(
        Some(&failed[0]),
        queue.job(hook_failed).expect("job").as_ref()
    );
    assert_eq!(queue.job(999_999).expect("an unknown id is no error"), None);
}

#[test]
fn a_job_reads_every_column_and_shows_text_that_is_not_json_as_a_string() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let id = insert(
        &mut c,
        &[
            ("queue", "'mail'"),
            ("job_type", "'send_email'"),
            ("payload", r#"'{"to": "a@example.com", "n": [1, 2]}'"#),
            ("status", "'running'"),
            ("priority", "7"),
            ("attempts", "2"),
            ("max_attempts", "4"),
            ("started_at", &(START_MS + 5).to_string()),
            ("locked_by", "'host:1'"),
            ("locked_until", &(START_MS + 60_000).to_string()),
            ("last_error", "'first try failed'"),
            ("last_status_code", "503"),
            ("idempotency_key", "'welcome:1'"),
            ("group_key", "'user:1'"),
            ("timeout_ms", "10000"),
            ("result", "'not json'"),
            ("progress", r#"'{"done": 3}'"#),
        ],
    );
    let job = queue.job(id).expect("read").expect("the job");
    assert_eq!(job.id, id);
    assert_eq!(
        (job.queue.as_str(), job.job_type.as_str()),
        ("mail", "send_email")
    );
    assert_eq!(job.payload, json!({"to": "a@example.com", "n": [1, 2]}));
    assert_eq!(job.status, JobStatus::Running);
    assert_eq!((job.priority, job.attempts, job.max_attempts), (7, 2, 4));
    assert_eq!(
        (job.run_at, job.created_at, job.updated_at),
        (START_MS, START_MS, START_MS)
    );
    assert_eq!(job.started_at, Some(START_MS + 5));
    assert_eq!(job.finished_at, None);
    assert_eq!(job.locked_by.as_deref(), Some("host:1"));
    assert_eq!(job.locked_until, Some(START_MS + 60_000));
    assert_eq!(job.last_error.as_deref(), Some("first try failed"));
    assert_eq!(job.last_status_code, Some(503));
    assert_eq!(job.idempotency_key.as_deref(), Some("welcome:1"));
    assert_eq!(job.group_key.as_deref(), Some("user:1"));
    assert_eq!(job.timeout_ms, Some(10_000));
    assert_eq!(job.result, Some(json!("not json")), "shown as a string");
    assert_eq!(job.progress, Some(json!({"done": 3})));
    assert_eq!(
        (
            job.requeued_by,
            job.requeued_at,
            job.requeue_reason,
            job.requeued_as
        ),
        (None, None, None, None)
    );
    assert!(job.problems.is_empty(), "{:?}", job.problems);

    // Another program's payload that is not JSON: shown as text, and named as a problem.
    let bad = insert(&mut c, &[("payload", "'{oops'")]);
    let job = queue.job(bad).expect("read").expect("the job");
    assert_eq!(job.payload, json!("{oops"));
    assert_eq!(job.problems.len(), 1, "{:?}", job.problems);
    assert!(
        job.problems[0].contains("payload is not valid JSON"),
        "{:?}",
        job.problems
    );
}

#[test]
fn attempts_come_oldest_first_with_every_field() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let id = insert(&mut c, &[("status", "'failed'"), ("attempts", "3")]);
    let other = insert(&mut c, &[]);
    // Inserted out of order: read by attempt number.
    attempt(&mut c, id, 2, START_MS + 2_000, "timed_out", "too slow");
    attempt(&mut c, id, 1, START_MS + 1_000, "failed", "boom");
    attempt(&mut c, other, 1, START_MS, "failed", "elsewhere");
    exec(
        &mut c,
        &format!(
            "INSERT INTO job_attempts (job_id, attempt, finished_at, outcome, status_code)
             VALUES ({id}, 3, {}, 'lost', 502)",
            START_MS + 3_000
        ),
    );
    let history = queue.attempts(id).expect("attempts");
    let seen: Vec<_> = history
        .iter()
        .map(|a| {
            (
                a.job_id,
                a.attempt,
                a.outcome,
                a.error.as_deref(),
                a.finished_at,
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                id,
                1,
                AttemptOutcome::Failed,
                Some("boom"),
                START_MS + 1_000
            ),
            (
                id,
                2,
                AttemptOutcome::TimedOut,
                Some("too slow"),
                START_MS + 2_000
            ),
            (id, 3, AttemptOutcome::Lost, None, START_MS + 3_000),
        ]
    );
    assert_eq!(history[0].worker.as_deref(), Some("w"));
    assert_eq!(history[0].started_at, Some(START_MS + 1_000));
    assert_eq!(history[0].duration_ms, Some(0));
    assert_eq!(
        (history[2].worker.as_deref(), history[2].started_at),
        (None, None)
    );
    assert_eq!(history[2].status_code, Some(502));
    assert!(queue
        .attempts(999_999)
        .expect("no job, no attempts")
        .is_empty());
}

/// What a full scan of the table says, to compare with the figures litejobs reads from the
/// counts the triggers keep.
#[derive(QueryableByName, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Counted {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn counted_by_scan(conn: &mut PgConnection) -> Vec<(String, String, String, i64)> {
    let mut rows: Vec<Counted> =
        sql_query("SELECT queue, job_type, status, COUNT(*) AS n FROM jobs GROUP BY 1, 2, 3")
            .load(conn)
            .expect("scan");
    rows.sort();
    rows.into_iter()
        .map(|r| (r.queue, r.job_type, r.status, r.n))
        .collect()
}

#[derive(QueryableByName)]
struct Outcome {
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    outcome: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn attempts_by_scan(conn: &mut PgConnection) -> Vec<(String, String, i64)> {
    let rows: Vec<Outcome> = sql_query(
        "SELECT j.job_type, a.outcome, COUNT(*) AS n FROM job_attempts a
         JOIN jobs j ON j.id = a.job_id WHERE a.outcome <> 'succeeded' GROUP BY 1, 2
         UNION ALL
         SELECT job_type, 'succeeded', COUNT(*) FROM jobs WHERE status = 'succeeded' GROUP BY 1",
    )
    .load(conn)
    .expect("scan");
    let mut rows: Vec<_> = rows
        .into_iter()
        .map(|r| (r.job_type, r.outcome, r.n))
        .collect();
    rows.sort();
    rows
}

#[derive(QueryableByName)]
struct QueueAge {
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = BigInt)]
    age: i64,
}

/// Stats, health, the overview and the metrics against full scans of the tables.
fn check_figures(queue: &Queue, conn: &mut PgConnection, step: &str) {
    let now = queue.now_ms();
    let mut stats: Vec<_> = queue
        .stats()
        .expect("stats")
        .counts
        .into_iter()
        .map(|c| (c.queue, c.job_type, c.status.as_str().to_string(), c.count))
        .collect();
    let sorted = {
        let mut s = stats.clone();
        s.sort();
        s
    };
    assert_eq!(stats, sorted, "counts come sorted after {step}");
    stats.sort();
    assert_eq!(stats, counted_by_scan(conn), "job counts after {step}");
    let mut attempts: Vec<_> = queue
        .metrics_snapshot()
        .expect("metrics")
        .attempts
        .into_iter()
        .map(|a| (a.job_type, a.outcome, a.count))
        .collect();
    attempts.sort();
    assert_eq!(
        attempts,
        attempts_by_scan(conn),
        "attempt counts after {step}"
    );

    let scan = |conn: &mut PgConnection, cond: &str| {
        int(
            conn,
            &format!("SELECT COUNT(*) AS v FROM jobs WHERE {cond}"),
        )
    };
    let due = scan(
        conn,
        &format!("status IN ('queued', 'failed') AND run_at <= {now}"),
    );
    let scheduled = scan(
        conn,
        &format!("status IN ('queued', 'failed') AND run_at > {now}"),
    );
    let running = scan(conn, "status = 'running'");
    let dead = scan(conn, "status = 'dead' AND requeued_as IS NULL");
    let dead_last_hour = scan(
        conn,
        &format!("status = 'dead' AND finished_at >= {}", now - HOUR_MS),
    );
    let succeeded = scan(
        conn,
        &format!("status = 'succeeded' AND finished_at >= {}", now - HOUR_MS),
    );
    let failed_attempts = int(
        conn,
        &format!(
            "SELECT COUNT(*) AS v FROM job_attempts WHERE finished_at >= {}
               AND outcome IN ('failed', 'timed_out', 'lost')",
            now - HOUR_MS
        ),
    );
    let mut oldest: Vec<(String, i64)> = sql_query(format!(
        "SELECT queue, {now} - MIN(run_at) AS age FROM jobs
         WHERE status IN ('queued', 'failed') AND run_at <= {now} GROUP BY queue"
    ))
    .load::<QueueAge>(conn)
    .expect("oldest due")
    .into_iter()
    .map(|r| (r.queue, r.age))
    .collect();
    oldest.sort();

    let health = queue.health(Duration::from_secs(3600)).expect("health");
    let overview = queue
        .overview(Duration::from_secs(3600), 3)
        .expect("overview");
    for (what, h) in [("health", &health), ("overview", &overview.health)] {
        assert_eq!(
            (h.due_now, h.scheduled, h.running, h.dead, h.dead_last_hour),
            (due, scheduled, running, dead, dead_last_hour),
            "{what}: due, scheduled, running, dead, dead in the last hour after {step}"
        );
        assert_eq!(
            (h.failed_attempts, h.succeeded),
            (failed_attempts, succeeded),
            "{what}: the window's attempts after {step}"
        );
        assert_eq!(
            h.oldest_due_age_ms,
            oldest.iter().map(|(_, a)| *a).max(),
            "{what}: oldest due age after {step}"
        );
    }
    assert_eq!(
        overview.oldest_due_by_queue, oldest,
        "per queue after {step}"
    );
    assert_eq!(
        queue.oldest_due_by_queue().expect("oldest"),
        oldest,
        "after {step}"
    );
    let stats = queue.stats().expect("stats");
    assert_eq!(stats.dead_last_hour, dead_last_hour);
    assert_eq!(
        stats.oldest_due_age_ms,
        oldest.iter().map(|(_, a)| *a).max()
    );
}

/// Finished jobs and attempt outcomes are read from the counts the schema's triggers keep:
/// through every kind of change by plain SQL (inserts, status changes, moves between queues
/// and types, deletes with their history by the foreign key's cascade) they equal a scan.
#[test]
fn stats_health_and_metrics_equal_a_full_scan_through_plain_sql_changes() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    check_figures(&queue, &mut c, "nothing");
    let stats = queue.stats().expect("stats");
    assert!(stats.counts.is_empty());
    assert_eq!((stats.oldest_due_age_ms, stats.dead_last_hour), (None, 0));

    let now = START_MS;
    insert(&mut c, &[("queue", "'mail'"), ("job_type", "'send_email'")]);
    insert(
        &mut c,
        &[
            ("queue", "'mail'"),
            ("job_type", "'send_email'"),
            ("run_at", &(now - 30_000).to_string()),
        ],
    );
    insert(
        &mut c,
        &[("queue", "'b'"), ("run_at", &(now + HOUR_MS).to_string())],
    );
    insert(
        &mut c,
        &[
            ("queue", "'a'"),
            ("status", "'failed'"),
            ("run_at", &(now - 5_000).to_string()),
        ],
    );
    insert(
        &mut c,
        &[
            ("status", "'running'"),
            ("locked_by", "'w'"),
            ("locked_until", "1"),
        ],
    );
    let ok = finished(
        &mut c,
        "mail",
        "send_email",
        "succeeded",
        None,
        now - 10_000,
    );
    finished(
        &mut c,
        "mail",
        "send_email",
        "succeeded",
        None,
        now - 2 * HOUR_MS,
    );
    let dead = finished(
        &mut c,
        "default",
        "report",
        "dead",
        Some("boom"),
        now - 10 * 60_000,
    );
    finished(
        &mut c,
        "default",
        "report",
        "dead",
        Some("boom"),
        now - HOUR_MS,
    );
    finished(
        &mut c,
        "default",
        "report",
        "dead",
        Some("boom"),
        now - 2 * HOUR_MS,
    );
    let cancelled = finished(&mut c, "default", "t", "cancelled", None, now);
    attempt(&mut c, ok, 1, now - 20_000, "failed", "once");
    attempt(&mut c, ok, 2, now - 10_000, "succeeded", "");
    attempt(&mut c, dead, 1, now - 2 * HOUR_MS, "timed_out", "slow");
    attempt(&mut c, dead, 2, now - 10 * 60_000, "lost", "gone");
    attempt(&mut c, dead, 3, now - 10 * 60_000, "released", "shutdown");
    check_figures(&queue, &mut c, "inserts");
    assert_eq!(
        queue.stats().expect("stats").dead_last_hour,
        2,
        "10 minutes and exactly 1 hour ago"
    );

    // A requeued dead job is not awaiting anybody, and still counts as dead.
    exec(
        &mut c,
        &format!("UPDATE jobs SET requeued_as = {ok} WHERE id = {dead}"),
    );
    check_figures(&queue, &mut c, "a requeue mark");
    exec(
        &mut c,
        &format!(
            "UPDATE jobs SET status = 'succeeded', finished_at = {now} WHERE status = 'running';
             UPDATE jobs SET status = 'dead', finished_at = {now} WHERE id = {cancelled};
             UPDATE jobs SET queue = 'other' WHERE job_type = 'send_email';
             UPDATE jobs SET job_type = 'renamed' WHERE id = {dead};
             UPDATE job_attempts SET outcome = 'failed' WHERE outcome = 'released';"
        ),
    );
    check_figures(&queue, &mut c, "updates");
    exec(
        &mut c,
        &format!(
            "DELETE FROM job_attempts WHERE outcome = 'lost';
             DELETE FROM jobs WHERE id = {ok};
             DELETE FROM jobs WHERE id = {dead};"
        ),
    );
    check_figures(&queue, &mut c, "deletes");

    // The clock moves: scheduled jobs become due, the window moves on.
    clock.advance(Duration::from_secs(2 * 3600));
    check_figures(&queue, &mut c, "two hours");
    let health = queue.health(Duration::from_secs(3600)).expect("health");
    assert_eq!(health.scheduled, 0);
    assert_eq!(health.due_now, 4, "{health:?}");
    assert_eq!(health.failure_rate, None);
}

#[test]
fn paused_queues_show_in_health_sorted() {
    let Some((_schema, queue, _clock)) = setup() else {
        return;
    };
    for name in ["mail", "Zed", "alpha", "mail"] {
        queue.pause_queue(name).expect("pause");
    }
    queue.resume_queue("alpha").expect("resume");
    queue
        .resume_queue("never-paused")
        .expect("resume an unknown queue");
    assert_eq!(
        queue.paused_queues().expect("paused"),
        ["Zed", "mail"],
        "byte order"
    );
    let health = queue.health(Duration::from_secs(60)).expect("health");
    assert_eq!(health.paused_queues, ["Zed", "mail"]);
}

/// Error groups: failed and dead jobs by last error, requeued dead jobs left out, "first
/// seen" the earliest attempt in the history that failed with that error (any job's), or
/// the group's earliest change when that is sooner.
#[test]
fn error_groups_count_failing_jobs_and_say_when_each_error_first_appeared() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let smtp = "SMTP timeout after 10s";
    let recovered = finished(&mut c, "default", "send_email", "succeeded", None, 700);
    attempt(&mut c, recovered, 1, 500, "failed", smtp);
    let dead = finished(&mut c, "default", "send_email", "dead", Some(smtp), 3_000);
    attempt(&mut c, dead, 1, 1_000, "failed", smtp);
    attempt(&mut c, dead, 2, 2_000, "failed", smtp);
    finished(
        &mut c,
        "default",
        "deliver_webhook",
        "failed",
        Some(smtp),
        1_500,
    );
    finished(
        &mut c,
        "default",
        "report",
        "dead",
        Some("payload is not valid JSON"),
        4_000,
    );
    let requeued = finished(&mut c, "default", "report", "dead", Some("gone"), 5_000);
    exec(
        &mut c,
        &format!("UPDATE jobs SET requeued_as = {recovered} WHERE id = {requeued}"),
    );
    // Queued and succeeded jobs with a last error are not failing.
    finished(&mut c, "default", "x", "queued", Some(smtp), 6_000);

    let groups = queue.error_groups(10).expect("error groups");
    let seen: Vec<_> = groups
        .iter()
        .map(|g| {
            (
                g.error.as_str(),
                g.count,
                g.failed,
                g.dead,
                g.job_types.clone(),
                g.first_seen_at,
                g.last_seen_at,
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                smtp,
                2,
                1,
                1,
                vec!["deliver_webhook".to_string(), "send_email".to_string()],
                500,
                3_000
            ),
            (
                "payload is not valid JSON",
                1,
                0,
                1,
                vec!["report".to_string()],
                4_000,
                4_000
            ),
        ]
    );
    assert_eq!(
        queue.error_groups(1).expect("top").len(),
        1,
        "the limit keeps the most common"
    );
    assert_eq!(queue.error_groups(1).expect("top")[0].error, smtp);
    assert!(queue.error_groups(0).expect("none").is_empty());
    assert_eq!(queue.error_groups(usize::MAX).expect("all").len(), 2);
}

#[test]
fn activity_counts_finished_work_per_bucket() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    // START_MS is 22:13:20 UTC; hour buckets start on the hour.
    let hour = START_MS.div_euclid(HOUR_MS) * HOUR_MS;
    let ok = finished(&mut c, "default", "t", "succeeded", None, hour + 1);
    finished(&mut c, "default", "t", "succeeded", None, hour - 1);
    finished(
        &mut c,
        "default",
        "t",
        "succeeded",
        None,
        hour - 3 * HOUR_MS,
    );
    finished(
        &mut c,
        "default",
        "t",
        "succeeded",
        None,
        START_MS + HOUR_MS,
    );
    let dead = finished(&mut c, "default", "t", "dead", Some("x"), hour - HOUR_MS);
    exec(
        &mut c,
        &format!("UPDATE jobs SET requeued_as = {ok} WHERE id = {dead}"),
    );
    attempt(&mut c, ok, 1, hour, "failed", "a");
    attempt(&mut c, ok, 2, hour - 2 * HOUR_MS, "timed_out", "b");
    attempt(&mut c, ok, 3, hour - 2 * HOUR_MS + 5, "lost", "c");
    attempt(&mut c, ok, 4, hour, "released", "not a failure");

    let buckets = queue
        .activity(Duration::from_secs(3600), 3)
        .expect("activity");
    let seen: Vec<_> = buckets
        .iter()
        .map(|b| (b.start_ms, b.succeeded, b.failed_attempts, b.dead))
        .collect();
    assert_eq!(
        seen,
        vec![
            (hour - 2 * HOUR_MS, 0, 2, 0),
            (hour - HOUR_MS, 1, 0, 1),
            (hour, 1, 1, 0),
        ],
        "the job finished in the future and the one before the window are left out"
    );
    let days = queue
        .activity(Duration::from_secs(86_400), 2)
        .expect("days");
    assert_eq!(
        days.iter().map(|b| b.succeeded).collect::<Vec<_>>(),
        [0, 4],
        "today's bucket holds the job stamped an hour ahead of the clock"
    );
}

/// Retention: old succeeded and cancelled jobs go with their history, waiting, running and
/// dead ones stay, and on PostgreSQL the newest job goes too (ids come from a sequence).
#[test]
fn prune_deletes_old_finished_jobs_with_their_history_and_expired_keys() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let old = START_MS - 30 * DAY_MS;
    let gone = [
        finished(&mut c, "default", "t", "succeeded", None, old),
        finished(&mut c, "default", "t", "cancelled", None, old),
        finished(&mut c, "default", "t", "succeeded", None, old + 1),
    ];
    attempt(&mut c, gone[0], 1, old, "failed", "x");
    attempt(&mut c, gone[0], 2, old, "succeeded", "");
    let kept = [
        finished(&mut c, "default", "t", "succeeded", None, START_MS - 1_000),
        finished(&mut c, "default", "t", "dead", Some("x"), old),
        finished(&mut c, "default", "t", "failed", Some("x"), old),
        insert(&mut c, &[]),
        insert(&mut c, &[("status", "'running'")]),
    ];
    attempt(&mut c, kept[1], 1, old, "failed", "x");
    let newest = finished(&mut c, "default", "t", "succeeded", None, old);
    exec(
        &mut c,
        &format!(
            "INSERT INTO idempotency_keys (key, job_id, completed_at, expires_at) VALUES
                ('expired', 1, {old}, {}),
                ('old', 2, {old}, {}),
                ('fresh', 3, {}, {});",
            START_MS - 1,
            START_MS + DAY_MS,
            START_MS - 1_000,
            START_MS + DAY_MS
        ),
    );

    let report = queue
        .prune(
            &PruneOptions::new(Duration::from_secs(7 * 86_400))
                .keys_older_than(Duration::from_secs(86_400))
                .chunk_size(2)
                .checkpoint(CheckpointMode::Passive),
        )
        .expect("prune");
    assert_eq!(report.cutoff_ms, START_MS - 7 * DAY_MS);
    assert_eq!(
        report.jobs_deleted, 4,
        "three old ones and the newest: {report:?}"
    );
    assert_eq!(report.attempts_deleted, 2, "{report:?}");
    assert_eq!(
        report.keys_deleted, 2,
        "the expired and the old key: {report:?}"
    );
    assert_eq!(report.transactions, 3 + 2, "chunks of two: {report:?}");
    let checkpoint = report.checkpoint.expect("a checkpoint report");
    assert!(!checkpoint.busy);
    assert_eq!(
        (checkpoint.wal_frames, checkpoint.checkpointed_frames),
        (-1, -1),
        "no WAL"
    );
    for id in gone.iter().chain([&newest]) {
        assert!(queue.job(*id).expect("read").is_none(), "job {id} pruned");
        assert!(queue.attempts(*id).expect("attempts").is_empty());
    }
    for id in &kept {
        assert!(queue.job(*id).expect("read").is_some(), "job {id} kept");
    }
    assert_eq!(queue.attempts(kept[1]).expect("attempts").len(), 1);
    assert_eq!(
        int(
            &mut c,
            "SELECT COUNT(*) AS v FROM idempotency_keys WHERE key = 'fresh'"
        ),
        1
    );
    check_figures(&queue, &mut c, "prune");
    assert_eq!(
        queue
            .checkpoint(CheckpointMode::Truncate)
            .expect("checkpoint")
            .map(|r| r.wal_frames),
        Some(-1)
    );
    assert_eq!(queue.checkpoint(CheckpointMode::Skip).expect("skip"), None);

    // Ids are never reused.
    let next = insert(&mut c, &[]);
    assert!(next > newest);
}

/// Two processes pruning at once delete every old job once between them, without waiting
/// for each other or failing.
#[test]
fn two_processes_prune_at_once_and_delete_each_job_once() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    let old = START_MS - 30 * DAY_MS;
    exec(
        &mut c,
        &format!(
            "INSERT INTO jobs (job_type, payload, status, run_at, created_at, updated_at, finished_at)
             SELECT 't', '{{}}', CASE WHEN i % 2 = 0 THEN 'succeeded' ELSE 'cancelled' END,
                    {old}, {old}, {old}, {old}
             FROM generate_series(1, 600) AS i;
             INSERT INTO job_attempts (job_id, attempt, finished_at, outcome)
             SELECT id, 1, {old}, 'failed' FROM jobs;"
        ),
    );
    let other = schema.queue(&clock);
    let options = PruneOptions::new(Duration::from_secs(86_400)).chunk_size(50);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| queue.prune(&options));
        let b = s.spawn(|| other.prune(&options));
        (a.join().expect("thread"), b.join().expect("thread"))
    });
    let (a, b) = (a.expect("prune a"), b.expect("prune b"));
    // A pass may stop early at a chunk the other process held; the next pass finishes.
    let c2 = queue.prune(&options).expect("prune again");
    assert_eq!(
        a.jobs_deleted + b.jobs_deleted + c2.jobs_deleted,
        600,
        "{a:?} {b:?} {c2:?}"
    );
    assert_eq!(
        a.attempts_deleted + b.attempts_deleted + c2.attempts_deleted,
        600
    );
    assert_eq!(int(&mut c, "SELECT COUNT(*) AS v FROM jobs"), 0);
    assert!(
        queue.stats().expect("stats").counts.is_empty(),
        "the counts follow"
    );
    check_figures(&queue, &mut c, "two prunes");
}

/// A schema another test never touches: the figures are per schema.
#[test]
fn figures_are_per_schema() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let Some(url) = crate::support::pg::server() else {
        return;
    };
    let neighbour = PgSchema::new(&url);
    let their_queue = neighbour.queue(&clock);
    finished(
        &mut neighbour.raw(),
        "default",
        "t",
        "dead",
        Some("x"),
        START_MS,
    );
    finished(
        &mut schema.raw(),
        "default",
        "t",
        "succeeded",
        None,
        START_MS,
    );
    assert_eq!(queue.stats().expect("stats").count(JobStatus::Dead), 0);
    assert_eq!(queue.stats().expect("stats").count(JobStatus::Succeeded), 1);
    assert_eq!(
        their_queue.stats().expect("stats").count(JobStatus::Dead),
        1
    );
    assert_eq!(their_queue.error_groups(5).expect("groups").len(), 1);
    assert!(queue.error_groups(5).expect("groups").is_empty());
}

/// The same figures through litejobs' own paths: worker outcomes, cancel, retry of a dead
/// job, requeue, discard, reaping and prune.
#[test]
fn figures_equal_a_full_scan_through_every_library_path() {
    use litejobs::{testing, JobContext, JobError, NewJob, Worker};
    let Some((schema, q, clock)) = setup() else {
        return;
    };
    let mut c = schema.raw();
    for n in 0..4 {
        q.enqueue(NewJob::new("ok", json!({ "n": n })).queue("mail"))
            .expect("enqueue");
    }
    for kind in ["dead", "dead", "cancel", "retry"] {
        q.enqueue(NewJob::new(kind, json!({})).max_attempts(1))
            .expect("enqueue");
    }
    q.enqueue(NewJob::new("flaky", json!({})).max_attempts(3))
        .expect("enqueue");
    q.enqueue(NewJob::new("later", json!({})).delay(Duration::from_secs(60)))
        .expect("enqueue");
    clock.advance(Duration::from_secs(5));
    check_figures(&q, &mut c, "enqueues");
    let worker = Worker::builder(&q)
        .handler("ok", |_: &JobContext| Ok(()))
        .handler("dead", |_: &JobContext| Err(JobError::permanent("no")))
        .handler("cancel", |_: &JobContext| Err(JobError::cancel("stop")))
        .handler("retry", |_: &JobContext| Err(JobError::retry("later")))
        .handler("flaky", |ctx: &JobContext| {
            if ctx.attempt() == 1 {
                Err(JobError::retry("once"))
            } else {
                Ok(())
            }
        })
        .queue("mail", 2);
    testing::drain(&worker).expect("drain");
    check_figures(&q, &mut c, "first outcomes");
    clock.advance(Duration::from_secs(3600));
    testing::drain(&worker).expect("drain the retry");
    check_figures(&q, &mut c, "worker outcomes");
    let groups = q.error_groups(5).expect("groups");
    assert!(
        groups.iter().any(|g| g.error == "no" && g.dead == 2),
        "{groups:?}"
    );

    let waiting = q.enqueue(NewJob::new("ok", json!({}))).expect("enqueue");
    q.cancel(waiting).expect("cancel");
    check_figures(&q, &mut c, "cancel");
    let dead: Vec<i64> = q
        .dead_jobs(&JobFilter::new())
        .expect("dead")
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(dead.len(), 3, "two permanent failures and a spent retry");
    q.retry_now(dead[0]).expect("retry a dead job");
    check_figures(&q, &mut c, "retry_now of a dead job");
    let copy = q.requeue_dead(dead[1], "ops", "fixed").expect("requeue");
    check_figures(&q, &mut c, "requeue");
    q.cancel(copy).expect("cancel the copy");
    assert_eq!(
        q.discard_dead(dead[2]).expect("discard"),
        litejobs::Discarded::Deleted
    );
    check_figures(&q, &mut c, "discard");

    let lost = q
        .enqueue(NewJob::new("ok", json!({})).max_attempts(1))
        .expect("enqueue");
    exec(
        &mut c,
        &format!(
            "UPDATE jobs SET status = 'running', attempts = 1, locked_by = 'gone',
                    locked_until = 1 WHERE id = {lost}"
        ),
    );
    check_figures(&q, &mut c, "a job left running");
    q.reap_expired_leases().expect("reap");
    check_figures(&q, &mut c, "reaping");

    clock.advance(Duration::from_secs(30 * 86_400));
    let report = q
        .prune(&PruneOptions::new(Duration::from_secs(86_400)))
        .expect("prune");
    assert!(report.jobs_deleted >= 7, "{report:?}");
    check_figures(&q, &mut c, "prune");
}
