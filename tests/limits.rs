//! Rate limits and circuit breakers by key as an engine feature: any handler uses
//! them through `JobContext`, a wait snoozes the job without spending an attempt, and the
//! state lives in the database, so separately opened queues (as other processes would)
//! share it. Time is a `ManualClock`.

use std::time::Duration;

use litejobs::limits::{Breaker, BreakerState, RateLimit, Verdict};
use litejobs::testing::drain;
use litejobs::{JobContext, JobError, JobStatus, NewJob, Worker};
use serde_json::json;

use crate::support::scripted::{history, job};
use crate::support::{setup, sqlite_only, START_MS};

#[test]
fn a_rate_limited_handler_snoozes_without_spending_attempts() {
    let env = setup();
    let builder = Worker::builder(&env.queue).handler(
        "call_api",
        |ctx: &JobContext| -> Result<(), JobError> {
            ctx.rate_limit("api:acme", &RateLimit::per_minute(2))?;
            Ok(())
        },
    );
    let ids = env
        .queue
        .enqueue_batch(
            (0..3)
                .map(|i| NewJob::new("call_api", json!({ "i": i })))
                .collect(),
        )
        .expect("enqueue");
    let first = drain(&builder).expect("drain");
    assert_eq!((first.succeeded, first.snoozed), (1, 2));
    for &id in &ids[1..] {
        let waiting = job(&env.queue, id);
        assert_eq!(waiting.status, JobStatus::Queued);
        assert_eq!(waiting.attempts, 0);
        assert_eq!(waiting.run_at, START_MS + 30_000, "the next slot");
        assert!(history(&env.queue, id).is_empty());
    }
    env.clock.set(START_MS + 30_000);
    assert_eq!(drain(&builder).expect("drain").succeeded, 1);
    env.clock.set(START_MS + 60_000);
    assert_eq!(drain(&builder).expect("drain").succeeded, 1);
    assert!(ids.iter().all(|&id| job(&env.queue, id).attempts == 1));
}

#[test]
fn limits_are_shared_by_queues_opened_separately_on_the_same_file() {
    let env = setup();
    let other = env.open_another();
    let limit = RateLimit::per_second(1);
    assert_eq!(
        limit.acquire(&env.queue, "smtp").expect("acquire"),
        Verdict::Go
    );
    assert_eq!(
        limit.acquire(&other, "smtp").expect("acquire"),
        Verdict::Wait(Duration::from_secs(1)),
        "the other queue sees the slot taken"
    );
    assert_eq!(
        limit.acquire(&other, "another-key").expect("acquire"),
        Verdict::Go
    );

    let breaker = Breaker::new()
        .failure_threshold(1)
        .cool_down(Duration::from_secs(30));
    assert_eq!(
        breaker
            .record_failure(&env.queue, "smtp", "421 try later")
            .expect("record"),
        BreakerState::Open
    );
    assert_eq!(
        breaker.allow(&other, "smtp").expect("allow"),
        Verdict::Wait(Duration::from_secs(30))
    );
    let listed = Breaker::list(&other).expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, "smtp");
    assert_eq!(listed[0].last_error.as_deref(), Some("421 try later"));
    assert!(RateLimit::reset(&other, "smtp").expect("reset"));
    assert_eq!(
        limit.acquire(&env.queue, "smtp").expect("acquire"),
        Verdict::Go
    );
}

#[test]
fn a_breaker_opened_by_one_job_type_defers_another_type_on_the_same_key() {
    let env = setup();
    let breaker = Breaker::new()
        .failure_threshold(2)
        .cool_down(Duration::from_secs(60));
    // "sync" calls the provider and fails while the payload says so; "notify" uses the
    // same provider key.
    let call = move |ctx: &JobContext| -> Result<(), JobError> {
        let call = ctx.breaker("provider:crm", &breaker)?;
        if ctx.payload()["fail"].as_bool().unwrap_or(false) {
            let message = "crm answered 503";
            call.failure(message);
            return Err(JobError::retry(message));
        }
        call.success();
        Ok(())
    };
    let builder = Worker::builder(&env.queue)
        .handler("sync", call)
        .handler("notify", call)
        .retry_policy(
            "sync",
            litejobs::RetryPolicy::schedule(vec![Duration::from_secs(600)]),
        );
    let failing = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("sync", json!({"fail": true})),
            NewJob::new("sync", json!({"fail": true})),
        ])
        .expect("enqueue");
    let notify = env
        .queue
        .enqueue(NewJob::new("notify", json!({})))
        .expect("enqueue");

    let report = drain(&builder).expect("drain");
    assert_eq!((report.failed, report.snoozed), (2, 1));
    let deferred = job(&env.queue, notify);
    assert_eq!(deferred.status, JobStatus::Queued);
    assert_eq!(deferred.attempts, 0, "an open breaker spends no attempt");
    assert_eq!(deferred.run_at, START_MS + 60_000);
    assert!(failing.iter().all(|&id| job(&env.queue, id).attempts == 1));

    // After the cool-down the notify job is the probe; its success closes the breaker.
    env.clock.set(START_MS + 60_000);
    assert_eq!(drain(&builder).expect("drain").succeeded, 1);
    assert_eq!(job(&env.queue, notify).status, JobStatus::Succeeded);
    let status = Breaker::status(&env.queue, "provider:crm")
        .expect("status")
        .expect("row");
    assert_eq!(status.state, BreakerState::Closed);
    assert_eq!(status.failures, 0);
}

/// Runs one job of `job_type` through `drain` on a queue whose busy timeout is 20 ms, with
/// `body` as its handler; returns the job afterwards.
fn run_one(
    env: &crate::support::TestEnv,
    body: impl Fn(&JobContext) -> Result<(), JobError> + Send + Sync + 'static,
) -> litejobs::JobRecord {
    let queue = litejobs::Queue::builder()
        .clock(env.clock.clone())
        .busy_timeout(Duration::from_millis(20))
        .open(&env.path)
        .expect("a second queue on the file");
    let id = queue
        .enqueue(NewJob::new("call", json!({})))
        .expect("enqueue");
    let builder = Worker::builder(&queue).handler("call", body);
    drain(&builder).expect("drain");
    job(&queue, id)
}

/// Holds the database's write lock from another connection while `check` runs.
fn with_lock_held<T>(path: &std::path::Path, check: impl FnOnce() -> T) -> T {
    let other = crate::support::raw_conn(path);
    other
        .execute_batch("BEGIN IMMEDIATE")
        .expect("another connection takes the write lock");
    let result = check();
    other.execute_batch("COMMIT").expect("and lets it go");
    result
}

/// A limit the database was too busy to check is no failure of the job: it snoozes a
/// second and keeps its attempt, for a rate limit and a breaker alike.
#[test]
fn a_busy_database_during_a_limit_check_snoozes_without_spending_an_attempt() {
    // SQLite's write lock, held by a raw connection's BEGIN IMMEDIATE.
    if sqlite_only() {
        return;
    }
    let env = setup();
    let path = env.path.clone();
    let rate = run_one(&env, move |ctx: &JobContext| {
        with_lock_held(&path, || ctx.rate_limit("api", &RateLimit::per_second(10)))
    });
    // A closed breaker is read without the write lock; an open one whose cool-down is
    // over needs it to let the probe go.
    let open = Breaker::new().failure_threshold(1);
    open.record_failure(&env.queue, "crm", "down")
        .expect("the breaker opens");
    env.clock
        .advance(open.cool_down_period() + Duration::from_secs(1));
    let path = env.path.clone();
    let breaker = run_one(&env, move |ctx: &JobContext| {
        with_lock_held(&path, || ctx.breaker("crm", &open).map(drop))
    });
    let later = START_MS + 61_000;
    for (j, now) in [(rate, START_MS), (breaker, later)] {
        assert_eq!(j.status, JobStatus::Queued, "{j:?}");
        assert_eq!(j.attempts, 0, "no attempt spent: {j:?}");
        assert_eq!(j.run_at, now + 1_000, "back in a second");
        assert!(history(&env.queue, j.id).is_empty());
    }
}

/// A rate limit that can never let a call go is a programming error: the job goes dead at
/// once with the reason, instead of retrying (or snoozing) forever.
#[test]
fn an_impossible_rate_limit_makes_the_job_dead_at_once() {
    let env = setup();
    let j = run_one(&env, |ctx: &JobContext| {
        ctx.rate_limit("api", &RateLimit::new(0, Duration::from_secs(1)))
    });
    assert_eq!((j.status, j.attempts), (JobStatus::Dead, 1));
    let error = j.last_error.unwrap_or_default();
    assert!(error.contains("at least 1 call per period"), "{error}");
}

/// Any other failure to check a limit (here its table is gone) fails the attempt like a
/// retryable error, naming the limit: the job is retried by its policy, never stuck.
#[test]
fn a_limit_check_that_fails_in_the_database_fails_the_attempt_and_retries() {
    let env = setup();
    env.sql_exec("DROP TABLE rate_limits; DROP TABLE circuit_breakers;");
    let rate = run_one(&env, |ctx: &JobContext| {
        ctx.rate_limit("api", &RateLimit::per_second(10))
    });
    let breaker = run_one(&env, |ctx: &JobContext| {
        ctx.breaker("crm", &Breaker::new()).map(drop)
    });
    for (j, what) in [
        (rate, "rate limit \"api\""),
        (breaker, "circuit breaker \"crm\""),
    ] {
        assert_eq!((j.status, j.attempts), (JobStatus::Failed, 1), "{j:?}");
        let error = j.last_error.unwrap_or_default();
        assert!(
            error.contains(&format!("could not check the {what}")),
            "{error}"
        );
    }
}

/// Healthy calls never queue for the write lock: a success on a closed breaker with no
/// failures reads and writes nothing more, even while another connection holds the lock.
#[test]
fn a_success_on_a_healthy_breaker_needs_no_write_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("jobs.db");
    let queue = litejobs::Queue::builder()
        .busy_timeout(Duration::from_millis(20))
        .open(&path)
        .expect("queue");
    let breaker = Breaker::new();
    breaker
        .record_failure(&queue, "k", "boom")
        .expect("failure");
    breaker
        .record_success(&queue, "k")
        .expect("success resets it");
    let other = rusqlite::Connection::open(&path).expect("another connection");
    other.execute_batch("BEGIN IMMEDIATE").expect("lock");
    assert_eq!(
        breaker.record_success(&queue, "k").ok(),
        Some(false),
        "no write was needed"
    );
    other.execute_batch("COMMIT").expect("unlock");
}
