//! The read side: filtered lists with pagination, stats, and the Queue's trait bounds.

use std::time::Duration;

use litejobs::{JobFilter, JobRecord, JobStatus, NewJob, Queue, Stats};
use serde_json::json;

use crate::support::{on_postgres, raw_conn, setup, TestEnv};

const _: () = {
    const fn assert_clone_send_sync<T: Clone + Send + Sync + 'static>() {}
    assert_clone_send_sync::<Queue>();
    assert_clone_send_sync::<JobRecord>();
    assert_clone_send_sync::<JobFilter>();
    assert_clone_send_sync::<Stats>();
};

#[test]
fn queue_is_clone_send_sync_static() {
    fn assert_bounds<T: Clone + Send + Sync + 'static>() {}
    fn assert_error<T: std::error::Error + Send + Sync + 'static>() {}
    assert_bounds::<Queue>();
    assert_error::<litejobs::Error>();
}

fn ids(jobs: &[JobRecord]) -> Vec<i64> {
    jobs.iter().map(|j| j.id).collect()
}

fn list(env: &TestEnv, filter: &JobFilter) -> Vec<i64> {
    ids(&env
        .queue
        .list(filter)
        .unwrap_or_else(|e| panic!("list {filter:?}: {e}")))
}

fn enqueue(env: &TestEnv, job: NewJob) -> i64 {
    env.queue.enqueue(job).expect("enqueue")
}

/// `s` as an SQL string literal.
pub(crate) fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Every row of `sql`, read behind the library's back on either backend, each row as the
/// JSON array of its columns deserialized into `T` (a tuple, e.g. `(String, i64)`). Keep
/// `sql` portable, like `TestEnv::sql_i64`'s. (A candidate for tests/support: the matrix
/// has a portable single value, `sql_i64`, but no portable rows.)
pub(crate) fn sql_rows<T: serde::de::DeserializeOwned>(env: &TestEnv, sql: &str) -> Vec<T> {
    let rows: Vec<serde_json::Value> = sql_rows_json(env, sql);
    rows.into_iter()
        .map(|row| {
            serde_json::from_value(row.clone())
                .unwrap_or_else(|e| panic!("{sql}: row {row} does not fit: {e}"))
        })
        .collect()
}

fn sql_rows_json(env: &TestEnv, sql: &str) -> Vec<serde_json::Value> {
    #[cfg(feature = "postgres")]
    if let Some(schema) = &env.pg {
        use diesel::sql_types::Text;
        use diesel::{sql_query, QueryableByName, RunQueryDsl};
        #[derive(QueryableByName)]
        struct Row {
            #[diesel(sql_type = Text)]
            row: String,
        }
        // Each row as a JSON array of its columns, in their order.
        let wrapped = format!(
            "SELECT (SELECT json_agg(e.value ORDER BY e.n)
                       FROM json_each(row_to_json(t)) WITH ORDINALITY AS e (key, value, n))::text
                    AS row
               FROM ({sql}) AS t"
        );
        return sql_query(&wrapped)
            .load::<Row>(&mut schema.raw())
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .into_iter()
            .map(|r| serde_json::from_str(&r.row).expect("a row as JSON"))
            .collect();
    }
    use rusqlite::types::ValueRef;
    let conn = raw_conn(&env.path);
    let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let columns = stmt.column_count();
    stmt.query_map([], |r| {
        (0..columns)
            .map(|i| {
                Ok(match r.get_ref(i)? {
                    ValueRef::Null => serde_json::Value::Null,
                    ValueRef::Integer(v) => json!(v),
                    ValueRef::Real(v) => json!(v),
                    ValueRef::Text(t) => json!(String::from_utf8_lossy(t)),
                    ValueRef::Blob(b) => panic!("{sql}: a BLOB in column {i}: {b:?}"),
                })
            })
            .collect::<rusqlite::Result<Vec<_>>>()
            .map(serde_json::Value::Array)
    })
    .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
    .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Moves a job to `status` at time `at` behind the library's back, as a worker would:
/// last_error and updated_at set, finished_at set for the final statuses.
fn set_row(env: &TestEnv, id: i64, status: &str, last_error: Option<&str>, at: i64) {
    assert_eq!(
        env.sql_i64(&format!("SELECT COUNT(*) FROM jobs WHERE id = {id}")),
        1,
        "job {id} not found"
    );
    let finished_at = if ["succeeded", "dead", "cancelled"].contains(&status) {
        at.to_string()
    } else {
        "NULL".to_string()
    };
    env.sql_exec(&format!(
        "UPDATE jobs SET status = {}, last_error = {}, updated_at = {at},
             finished_at = {finished_at}
         WHERE id = {id}",
        lit(status),
        last_error.map_or("NULL".to_string(), lit),
    ));
}

struct Fixture {
    env: TestEnv,
    /// mail/send_email, queued
    mail_queued: i64,
    /// mail/send_email, dead, "SMTP timeout after 10s"
    mail_dead: i64,
    /// webhooks/deliver_webhook, failed, "HTTP 503 from endpoint"
    hook_failed: i64,
    /// webhooks/deliver_webhook, dead, "connection TIMEOUT"
    hook_dead: i64,
    /// reports/report_chunk, succeeded
    report_done: i64,
    /// default/send_email, dead, "100% of retries spent"
    default_dead: i64,
}

fn fixture() -> Fixture {
    let env = setup();
    let now = env.clock.now();
    let mail = |t: &str| NewJob::new(t, json!({})).queue("mail");
    let hook = |t: &str| NewJob::new(t, json!({})).queue("webhooks");
    let mail_queued = enqueue(&env, mail("send_email"));
    let mail_dead = enqueue(&env, mail("send_email"));
    let hook_failed = enqueue(&env, hook("deliver_webhook"));
    let hook_dead = enqueue(&env, hook("deliver_webhook"));
    let report_done = enqueue(
        &env,
        NewJob::new("report_chunk", json!({})).queue("reports"),
    );
    let default_dead = enqueue(&env, NewJob::new("send_email", json!({})));
    set_row(&env, mail_dead, "dead", Some("SMTP timeout after 10s"), now);
    set_row(
        &env,
        hook_failed,
        "failed",
        Some("HTTP 503 from endpoint"),
        now,
    );
    set_row(&env, hook_dead, "dead", Some("connection TIMEOUT"), now);
    set_row(&env, report_done, "succeeded", None, now);
    set_row(
        &env,
        default_dead,
        "dead",
        Some("100% of retries spent"),
        now,
    );
    Fixture {
        env,
        mail_queued,
        mail_dead,
        hook_failed,
        hook_dead,
        report_done,
        default_dead,
    }
}

#[test]
fn list_filters_by_status_type_queue_and_error_text() {
    let f = fixture();
    let env = &f.env;
    let all = list(env, &JobFilter::new());
    assert_eq!(
        all,
        vec![
            f.default_dead,
            f.report_done,
            f.hook_dead,
            f.hook_failed,
            f.mail_dead,
            f.mail_queued
        ],
        "newest first"
    );

    assert_eq!(
        list(env, &JobFilter::new().status(JobStatus::Dead)),
        vec![f.default_dead, f.hook_dead, f.mail_dead]
    );
    assert_eq!(
        list(env, &JobFilter::new().status(JobStatus::Queued)),
        vec![f.mail_queued]
    );
    assert!(list(env, &JobFilter::new().status(JobStatus::Running)).is_empty());
    assert_eq!(
        list(env, &JobFilter::new().job_type("deliver_webhook")),
        vec![f.hook_dead, f.hook_failed]
    );
    assert_eq!(
        list(env, &JobFilter::new().queue("mail")),
        vec![f.mail_dead, f.mail_queued]
    );
    assert_eq!(
        list(env, &JobFilter::new().queue("default")),
        vec![f.default_dead]
    );
    assert!(list(env, &JobFilter::new().queue("nope")).is_empty());

    // Combined filters are ANDed.
    assert_eq!(
        list(
            env,
            &JobFilter::new()
                .status(JobStatus::Dead)
                .job_type("send_email")
        ),
        vec![f.default_dead, f.mail_dead]
    );
    assert_eq!(
        list(env, &JobFilter::new().status(JobStatus::Dead).queue("mail")),
        vec![f.mail_dead]
    );

    // Search matches the last error, case-insensitively, as plain text.
    assert_eq!(
        list(env, &JobFilter::new().search("timeout")),
        vec![f.hook_dead, f.mail_dead]
    );
    assert_eq!(
        list(env, &JobFilter::new().search("smtp TIMEOUT")),
        vec![f.mail_dead]
    );
    assert_eq!(
        list(env, &JobFilter::new().search("%")),
        vec![f.default_dead],
        "% is text, not a wildcard"
    );
    assert_eq!(
        list(env, &JobFilter::new().search("_")),
        Vec::<i64>::new(),
        "_ is text, not a wildcard"
    );
    assert_eq!(
        list(env, &JobFilter::new().search("timeout").queue("webhooks")),
        vec![f.hook_dead]
    );
    assert!(list(env, &JobFilter::new().search("no such error")).is_empty());

    // The records are complete.
    let failed = env
        .queue
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
        env.queue.job(f.hook_failed).expect("job").as_ref()
    );
}

#[test]
fn list_limit_and_before_id_page_newest_first() {
    let env = setup();
    let mut all: Vec<i64> = (0..7)
        .map(|i| enqueue(&env, NewJob::new("t", json!({ "i": i }))))
        .collect();
    all.reverse();

    assert_eq!(list(&env, &JobFilter::new().limit(3)), all[..3].to_vec());
    assert!(list(&env, &JobFilter::new().limit(0)).is_empty());
    assert_eq!(list(&env, &JobFilter::new().limit(100)), all);

    let mut pages = Vec::new();
    let mut filter = JobFilter::new().limit(3);
    loop {
        let page = list(&env, &filter);
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 3);
        filter = filter.before_id(*page.last().expect("non-empty page"));
        pages.push(page);
        assert!(pages.len() <= 3, "pagination does not end: {pages:?}");
    }
    assert_eq!(pages.len(), 3);
    assert_eq!(pages.concat(), all);

    // before_id is exclusive and combines with other filters.
    assert_eq!(
        list(&env, &JobFilter::new().before_id(all[0])),
        all[1..].to_vec()
    );
    assert!(list(&env, &JobFilter::new().before_id(all[6])).is_empty());
    assert!(list(&env, &JobFilter::new().before_id(all[0]).job_type("x")).is_empty());
}

fn count_of(stats: &Stats, queue: &str, job_type: &str, status: JobStatus) -> i64 {
    stats
        .counts
        .iter()
        .filter(|c| c.queue == queue && c.job_type == job_type && c.status == status)
        .map(|c| c.count)
        .sum()
}

#[test]
fn stats_count_by_queue_type_and_status() {
    let f = fixture();
    let env = &f.env;
    enqueue(env, NewJob::new("send_email", json!({})).queue("mail"));
    let stats = env.queue.stats().expect("stats");

    assert_eq!(count_of(&stats, "mail", "send_email", JobStatus::Queued), 2);
    assert_eq!(count_of(&stats, "mail", "send_email", JobStatus::Dead), 1);
    assert_eq!(
        count_of(&stats, "webhooks", "deliver_webhook", JobStatus::Failed),
        1
    );
    assert_eq!(
        count_of(&stats, "webhooks", "deliver_webhook", JobStatus::Dead),
        1
    );
    assert_eq!(
        count_of(&stats, "reports", "report_chunk", JobStatus::Succeeded),
        1
    );
    assert_eq!(
        count_of(&stats, "default", "send_email", JobStatus::Dead),
        1
    );
    assert!(
        stats.counts.iter().all(|c| c.count > 0),
        "only non-zero counts: {stats:?}"
    );
    assert_eq!(stats.counts.len(), 6, "{stats:?}");

    assert_eq!(stats.count(JobStatus::Queued), 2);
    assert_eq!(stats.count(JobStatus::Dead), 3);
    assert_eq!(stats.count(JobStatus::Failed), 1);
    assert_eq!(stats.count(JobStatus::Succeeded), 1);
    assert_eq!(stats.count(JobStatus::Running), 0);
    assert_eq!(stats.count(JobStatus::Cancelled), 0);
    let total: i64 = stats.counts.iter().map(|c| c.count).sum();
    assert_eq!(total, 7);
}

#[test]
fn stats_on_an_empty_database() {
    let env = setup();
    let stats = env.queue.stats().expect("stats");
    assert!(stats.counts.is_empty());
    assert_eq!(stats.oldest_due_age_ms, None);
    assert_eq!(stats.dead_last_hour, 0);
    for status in JobStatus::ALL {
        assert_eq!(stats.count(status), 0);
    }
}

#[test]
fn oldest_due_age_follows_the_queue_clock() {
    let env = setup();
    // Only a job that is not due yet: nothing is due.
    enqueue(
        &env,
        NewJob::new("later", json!({})).delay(Duration::from_secs(3600)),
    );
    assert_eq!(env.queue.stats().expect("stats").oldest_due_age_ms, None);

    let due = enqueue(&env, NewJob::new("now", json!({})));
    assert_eq!(env.queue.stats().expect("stats").oldest_due_age_ms, Some(0));

    env.clock.advance(Duration::from_secs(90));
    assert_eq!(
        env.queue.stats().expect("stats").oldest_due_age_ms,
        Some(90_000)
    );

    // A younger due job does not change the oldest age.
    enqueue(&env, NewJob::new("now", json!({})));
    assert_eq!(
        env.queue.stats().expect("stats").oldest_due_age_ms,
        Some(90_000)
    );

    // Finished jobs are not waiting; a failed job waiting for its retry is.
    set_row(&env, due, "succeeded", None, env.clock.now());
    assert_eq!(env.queue.stats().expect("stats").oldest_due_age_ms, Some(0));
    let retry = enqueue(&env, NewJob::new("retry", json!({})));
    env.sql_exec(&format!(
        "UPDATE jobs SET status = 'failed', run_at = {} WHERE id = {retry}",
        env.clock.now() - 30_000
    ));
    assert_eq!(
        env.queue.stats().expect("stats").oldest_due_age_ms,
        Some(30_000)
    );

    // When the delayed job becomes due an hour after the start, it is the oldest due one.
    env.clock.advance(Duration::from_secs(3600));
    let age = env.queue.stats().expect("stats").oldest_due_age_ms;
    assert_eq!(age, Some(3_600_000 + 30_000));
}

#[test]
fn dead_last_hour_counts_recent_dead_jobs_only() {
    let env = setup();
    let now = env.clock.now();
    let recent = enqueue(&env, NewJob::new("a", json!({})));
    let old = enqueue(&env, NewJob::new("b", json!({})));
    let edge = enqueue(&env, NewJob::new("c", json!({})));
    let cancelled = enqueue(&env, NewJob::new("d", json!({})));
    set_row(&env, recent, "dead", Some("boom"), now - 10 * 60_000);
    set_row(&env, old, "dead", Some("boom"), now - 2 * 3_600_000);
    set_row(&env, edge, "dead", Some("boom"), now - 3_600_000);
    set_row(&env, cancelled, "cancelled", None, now);

    let stats = env.queue.stats().expect("stats");
    assert_eq!(stats.count(JobStatus::Dead), 3);
    assert_eq!(stats.dead_last_hour, 2, "10 minutes and exactly 1 hour ago");

    env.clock.advance(Duration::from_secs(3600));
    assert_eq!(env.queue.stats().expect("stats").dead_last_hour, 0);
}

/// Every (queue, type, status) count as a full scan of the table gives it.
fn counted_by_scan(env: &TestEnv) -> Vec<(String, String, String, i64)> {
    sql_rows(
        env,
        "SELECT queue, job_type, status, COUNT(*) FROM jobs
         GROUP BY queue, job_type, status ORDER BY 1, 2, 3",
    )
}

/// Attempt outcomes by job type as a join of the whole history gives them (successes as
/// the metrics count them: one per succeeded job).
fn attempts_by_scan(env: &TestEnv) -> Vec<(String, String, i64)> {
    sql_rows(
        env,
        "SELECT j.job_type, a.outcome, COUNT(*) FROM job_attempts a
         JOIN jobs j ON j.id = a.job_id
         WHERE a.outcome != 'succeeded' GROUP BY 1, 2
         UNION ALL
         SELECT job_type, 'succeeded', COUNT(*) FROM jobs WHERE status = 'succeeded'
         GROUP BY 1
         ORDER BY 1, 2",
    )
}

fn attempts_by_metrics(env: &TestEnv) -> Vec<(String, String, i64)> {
    let mut counts: Vec<_> = env
        .queue
        .metrics_snapshot()
        .expect("metrics")
        .attempts
        .into_iter()
        .map(|a| (a.job_type, a.outcome, a.count))
        .collect();
    counts.sort();
    counts
}

fn counted_by_stats(env: &TestEnv) -> Vec<(String, String, String, i64)> {
    let mut counts: Vec<_> = env
        .queue
        .stats()
        .expect("stats")
        .counts
        .into_iter()
        .map(|c| (c.queue, c.job_type, c.status.as_str().to_string(), c.count))
        .collect();
    counts.sort();
    counts
}

/// Stats read finished jobs from counts kept as they finish, not from a scan: through every
/// way a job finishes, is deleted or comes back (worker outcomes, cancel, retry of a dead
/// job, discard, prune, reaping) and through another program's plain SQL, the counts equal
/// a full scan of the table.
#[test]
fn kept_counts_equal_a_full_count_through_every_path() {
    use litejobs::maintenance::PruneOptions;
    use litejobs::{testing, JobContext, JobError, Worker};
    let env = setup();
    let check = |step: &str| {
        assert_eq!(
            counted_by_stats(&env),
            counted_by_scan(&env),
            "job counts after {step}"
        );
        assert_eq!(
            attempts_by_metrics(&env),
            attempts_by_scan(&env),
            "attempt counts after {step}"
        );
        let dead_awaiting =
            env.sql_i64("SELECT COUNT(*) FROM jobs WHERE status = 'dead' AND requeued_as IS NULL");
        assert_eq!(
            env.queue
                .health(Duration::from_secs(3600))
                .expect("health")
                .dead,
            dead_awaiting,
            "dead awaiting a person after {step}"
        );
        // The live figures, read in the same pass as the counts, equal a scan too.
        let now = env.queue.now_ms();
        let live: (i64, i64, i64) = (
            env.sql_i64(&format!(
                "SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'failed') AND run_at <= {now}"
            )),
            env.sql_i64(&format!(
                "SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'failed') AND run_at > {now}"
            )),
            env.sql_i64("SELECT COUNT(*) FROM jobs WHERE status = 'running'"),
        );
        let oldest: Vec<(String, i64)> = sql_rows(
            &env,
            &format!(
                "SELECT queue, {now} - MIN(run_at) FROM jobs
                 WHERE status IN ('queued', 'failed') AND run_at <= {now}
                 GROUP BY queue ORDER BY queue"
            ),
        );
        let overview = env
            .queue
            .overview(Duration::from_secs(3600), 0)
            .expect("overview");
        let h = &overview.health;
        assert_eq!(
            (h.due_now, h.scheduled, h.running),
            live,
            "due, scheduled and running after {step}"
        );
        assert_eq!(
            overview.oldest_due_by_queue, oldest,
            "oldest due job per queue after {step}"
        );
        assert_eq!(
            env.queue.stats().expect("stats").oldest_due_age_ms,
            oldest.iter().map(|(_, age)| *age).max(),
            "the oldest due job's age after {step}"
        );
    };
    let q = &env.queue;
    for n in 0..6 {
        q.enqueue(NewJob::new("ok", json!({ "n": n })).queue("mail"))
            .expect("enqueue");
    }
    for kind in ["dead", "cancel", "retry"] {
        q.enqueue(NewJob::new(kind, json!({})).max_attempts(1))
            .expect("enqueue");
    }
    // Fails once, then succeeds: a history row for the failure and one for the success.
    q.enqueue(NewJob::new("flaky", json!({})).max_attempts(3))
        .expect("enqueue");
    // Nobody runs these: one due after an hour, one due in two queues' past.
    q.enqueue(NewJob::new("later", json!({})).delay(Duration::from_secs(60)))
        .expect("enqueue");
    env.clock.advance(Duration::from_secs(5));
    q.enqueue(NewJob::new("later", json!({})).queue("mail"))
        .expect("enqueue");
    q.enqueue(NewJob::new("later", json!({})).queue("mail"))
        .expect("enqueue");
    check("enqueues");
    let worker = Worker::builder(q)
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
    env.clock.advance(Duration::from_secs(3600));
    testing::drain(&worker).expect("drain the retry");
    check("worker outcomes");

    let waiting = q.enqueue(NewJob::new("ok", json!({}))).expect("enqueue");
    q.cancel(waiting).expect("cancel");
    check("cancel");

    let dead: Vec<i64> = q
        .list(&JobFilter::new().status(JobStatus::Dead))
        .expect("list")
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(dead.len(), 2, "a permanent failure and a spent retry");
    q.retry_now(dead[0]).expect("retry a dead job");
    check("retry_now of a dead job");
    let copy = q
        .requeue_dead(dead[1], "ops", "fixed")
        .expect("requeue a dead job");
    check("requeue of a dead job");
    q.cancel(copy).expect("cancel the copy");
    q.discard_dead(dead[1]).expect("discard");
    check("discard");

    // A running job whose worker died, with its attempts spent: the reaper makes it dead.
    let lost = q
        .enqueue(NewJob::new("ok", json!({})).max_attempts(1))
        .expect("enqueue");
    env.sql_exec(&format!(
        "UPDATE jobs SET status = 'running', attempts = 1, locked_by = 'gone',
                locked_until = 1 WHERE id = {lost}"
    ));
    check("a job left running");
    q.reap_expired_leases().expect("reap");
    check("reaping");

    // Another program inserts, changes and deletes finished rows by plain SQL. (SQLite
    // enforces foreign keys only where a connection asks; PostgreSQL always does.)
    let foreign_keys = if on_postgres() {
        ""
    } else {
        "PRAGMA foreign_keys = ON;"
    };
    env.sql_exec(
        "INSERT INTO jobs (job_type, payload, status, finished_at) VALUES ('import', '{}', 'succeeded', 1);
         INSERT INTO jobs (job_type, payload, status, finished_at) VALUES ('import', '{}', 'dead', 1);
         UPDATE jobs SET status = 'cancelled' WHERE job_type = 'import' AND status = 'dead';
         UPDATE jobs SET queue = 'other' WHERE job_type = 'ok' AND status = 'succeeded' AND id = (SELECT MIN(id) FROM jobs);
         DELETE FROM jobs WHERE job_type = 'import' AND status = 'cancelled';",
    );
    check("plain SQL on jobs from another program");
    // ... and on the history: an attempt added, one changed, a job renamed, a job deleted
    // with its history by the foreign key's cascade, and one attempt deleted alone.
    env.sql_exec(&format!(
        "{foreign_keys}
         INSERT INTO jobs (job_type, payload) VALUES ('import', '{{}}');
         INSERT INTO job_attempts (job_id, attempt, finished_at, outcome, error)
             VALUES ((SELECT MAX(id) FROM jobs), 1, 1, 'failed', 'x');
         INSERT INTO job_attempts (job_id, attempt, finished_at, outcome, error)
             VALUES ((SELECT MAX(id) FROM jobs), 2, 2, 'failed', 'y');
         INSERT INTO job_attempts (job_id, attempt, finished_at, outcome, error)
             VALUES ((SELECT MAX(id) FROM jobs), 3, 3, 'failed', 'z');
         UPDATE job_attempts SET outcome = 'timed_out' WHERE error = 'y';
         UPDATE jobs SET job_type = 'import2' WHERE id = (SELECT MAX(id) FROM jobs);
         DELETE FROM job_attempts WHERE error = 'z';"
    ));
    check("plain SQL on the history");
    // A row that got in with the checks switched off is refused (made dead) at the claim.
    // (SQLite only: a PostgreSQL column cannot hold a BLOB key, nor its checks be switched off.)
    if !on_postgres() {
        let conn = env.raw();
        conn.execute_batch(
            "PRAGMA ignore_check_constraints = ON;
             INSERT INTO jobs (job_type, payload, idempotency_key, run_at) VALUES ('ok', '{}', x'01', 0);
             PRAGMA ignore_check_constraints = OFF;",
        )
        .expect("a rule-breaking row");
        testing::drain(&worker).expect("drain the rule breaker");
        let refused: String = conn
            .query_row(
                "SELECT status FROM jobs WHERE typeof(idempotency_key) = 'blob'",
                [],
                |r| r.get(0),
            )
            .expect("the rule breaker");
        assert_eq!(refused, "dead");
        check("a rule-breaking row refused at the claim");
    }
    let flaky = env.sql_i64("SELECT id FROM jobs WHERE job_type = 'flaky'");
    assert!(flaky > 0, "the flaky job");
    env.sql_exec(&format!(
        "{foreign_keys} DELETE FROM jobs WHERE id = {flaky}"
    ));
    check("plain SQL from another program");

    env.clock.advance(Duration::from_secs(30 * 86_400));
    let report = q
        .prune(&PruneOptions::new(Duration::from_secs(86_400)))
        .expect("prune");
    assert!(report.jobs_deleted > 0, "{report:?}");
    check("prune");
}

/// Error groups, as the dashboard and `stats` show them: failed and dead jobs by last error,
/// requeued dead jobs left out, and "first seen" the earliest attempt in the history that
/// failed with that error (any job's), or the group's earliest change when that is sooner.
#[test]
fn error_groups_count_failing_jobs_and_say_when_each_error_first_appeared() {
    let env = setup();
    let job = |t: &str| enqueue(&env, NewJob::new(t, json!({})));
    let attempt = |id: i64, n: i64, at: i64, outcome: &str, error: &str| {
        env.sql_exec(&format!(
            "INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at,
                                       outcome, error)
             VALUES ({id}, {n}, 'w', {at}, {at}, {}, {})",
            lit(outcome),
            lit(error)
        ));
    };
    let smtp = "SMTP timeout after 10s";
    // A job that later succeeded: its failed attempt is the first sighting of the error.
    let recovered = job("send_email");
    attempt(recovered, 1, 500, "failed", smtp);
    set_row(&env, recovered, "succeeded", None, 700);
    let dead = job("send_email");
    attempt(dead, 1, 1_000, "failed", smtp);
    attempt(dead, 2, 2_000, "failed", smtp);
    set_row(&env, dead, "dead", Some(smtp), 3_000);
    let retrying = job("deliver_webhook");
    set_row(&env, retrying, "failed", Some(smtp), 1_500);
    // Dead without any attempt (refused at the claim): seen when it changed.
    let refused = job("report");
    set_row(
        &env,
        refused,
        "dead",
        Some("payload is not valid JSON"),
        4_000,
    );
    // A requeued dead job is no longer anybody's problem.
    let requeued = job("report");
    set_row(&env, requeued, "dead", Some("gone"), 5_000);
    env.sql_exec(&format!(
        "UPDATE jobs SET requeued_as = {recovered} WHERE id = {requeued}"
    ));

    let groups = env.queue.error_groups(10).expect("error groups");
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
        env.queue.error_groups(1).expect("the top group").len(),
        1,
        "the limit keeps the most common"
    );
}

#[test]
fn held_jobs_are_counted_apart_from_due_and_scheduled_by_every_reading() {
    let env = setup();
    // Held: two steps wait for the first; one job is delayed, one due.
    let flow = litejobs::Workflow::new("held")
        .step(litejobs::Step::new("first", NewJob::new("t", json!({}))))
        .step(litejobs::Step::new("second", NewJob::new("t", json!({}))).after("first"))
        .step(
            litejobs::Step::new("third", NewJob::new("t", json!({})).queue("other")).after("first"),
        );
    env.queue
        .enqueue_workflow(flow)
        .expect("enqueue the workflow");
    enqueue(
        &env,
        NewJob::new("t", json!({})).delay(Duration::from_secs(60)),
    );
    let window = Duration::from_secs(3600);
    let health = env.queue.health(window).expect("health");
    let overview = env.queue.overview(window, 5).expect("overview");
    for h in [&health, &overview.health] {
        assert_eq!(
            (h.due_now, h.scheduled, h.waiting_dependants),
            (1, 1, 2),
            "{h:?}"
        );
    }
    let snapshot = env.queue.metrics_snapshot().expect("metrics");
    assert_eq!(
        snapshot.waiting_dependants,
        vec![("default".to_string(), 1), ("other".to_string(), 1)]
    );
    assert_eq!(snapshot.health.waiting_dependants, 2);
    // Never overdue, however long they wait: the queue holding only a held job has no due
    // job to be late.
    env.clock.advance(Duration::from_secs(86_400));
    let oldest = env.queue.oldest_due_by_queue().expect("oldest due");
    assert_eq!(
        oldest.iter().map(|(q, _)| q.as_str()).collect::<Vec<_>>(),
        ["default"]
    );
}

/// `Queue::watch_writes` sees an enqueue, an admin change and a plain SQL update by another
/// program, each once. On SQLite it also stays quiet through reads; on the PostgreSQL pass
/// the server's other tests write too, so only the `true`s can be asserted there.
#[test]
fn a_write_watch_sees_every_write_once() {
    let env = setup();
    let mut watch = env.queue.watch_writes().expect("a watch");
    let mut changed = || watch.changed().expect("asking the watch");
    assert!(changed(), "the first look always reads");
    let quiet = |changed: &mut dyn FnMut() -> bool| {
        if !on_postgres() {
            assert!(!changed(), "nothing was written");
        }
    };
    quiet(&mut changed);
    env.queue
        .overview(Duration::from_secs(60), 5)
        .expect("reading");
    env.queue.list(&JobFilter::new()).expect("listing");
    quiet(&mut changed);

    let id = enqueue(&env, NewJob::new("send_email", json!({})));
    assert!(changed(), "an enqueue");
    quiet(&mut changed);
    env.queue.pause_queue("default").expect("pause");
    assert!(changed(), "a pause");
    quiet(&mut changed);
    env.sql_exec(&format!("UPDATE jobs SET priority = 5 WHERE id = {id}"));
    assert!(changed(), "another program's update");
    quiet(&mut changed);
}
