//! Rate limits and circuit breakers by key (R15) as an engine feature: any handler uses
//! them through `JobContext`, a wait snoozes the job without spending an attempt, and the
//! state lives in the database, so separately opened queues (as other processes would)
//! share it. Time is a `ManualClock`.

use std::time::Duration;

use litejobs::limits::{Breaker, BreakerState, RateLimit, Verdict};
use litejobs::testing::drain;
use litejobs::{JobContext, JobError, JobStatus, NewJob, Worker};
use serde_json::json;

use crate::support::scripted::{history, job};
use crate::support::{setup, START_MS};

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
