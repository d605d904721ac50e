//! The dead letter: a dead job keeps its payload, error, status code and history;
//! requeue makes a **new** job (new id, same type, payload and options, attempts from 0)
//! and marks the dead one with who, when, why and the new id; refusals for jobs that are
//! not dead, unknown or already requeued; the requeued job then runs normally.

use std::time::Duration;

use litejobs::{testing, ErrorKind, JobError, JobStatus, NewJob, Worker};
use serde_json::json;

use crate::support::scripted::{history, job, stop, wait_finished, ScriptedHandler, Step};
use crate::support::{setup, TestEnv, START_MS};

/// Enqueues a webhook job with every option set and lets it die with a 410.
fn dead_webhook(env: &TestEnv) -> i64 {
    let id = env
        .queue
        .enqueue(
            NewJob::new(
                "deliver_webhook",
                json!({"event_id": 7, "url": "https://crm.example/hook"}),
            )
            .queue("webhooks")
            .priority(7)
            .max_attempts(2)
            .timeout(Duration::from_secs(10))
            .group_key("endpoint:crm"),
        )
        .expect("enqueue");
    let builder = Worker::builder(&env.queue)
        .handler(
            "deliver_webhook",
            ScriptedHandler::always(Step::fail(|| {
                JobError::permanent("HTTP 410 Gone").with_status_code(410)
            })),
        )
        .queue("webhooks", 1);
    let report = testing::drain(&builder).expect("drain");
    assert_eq!(report.dead, 1, "{report:?}");
    id
}

#[test]
fn requeue_creates_a_new_job_and_marks_the_dead_one() {
    let env = setup();
    let dead = dead_webhook(&env);
    env.clock.advance(Duration::from_secs(3600));
    let now = START_MS + 3_600_000;

    let new_id = env
        .queue
        .requeue_dead(dead, "ops@example.com", "endpoint fixed")
        .expect("requeue a dead job");
    assert_ne!(new_id, dead, "a new job, with a new id");
    assert!(new_id > dead);

    let old = job(&env.queue, dead);
    assert_eq!(old.status, JobStatus::Dead, "the dead job stays dead");
    assert_eq!(old.requeued_by.as_deref(), Some("ops@example.com"));
    assert_eq!(old.requeued_at, Some(now));
    assert_eq!(old.requeue_reason.as_deref(), Some("endpoint fixed"));
    assert_eq!(old.requeued_as, Some(new_id));
    assert_eq!(old.last_error.as_deref(), Some("HTTP 410 Gone"), "kept");
    assert_eq!(old.last_status_code, Some(410), "kept");
    assert_eq!(old.finished_at, Some(START_MS), "kept");
    assert_eq!(history(&env.queue, dead).len(), 1, "its history is kept");

    let new = job(&env.queue, new_id);
    assert_eq!(new.status, JobStatus::Queued);
    assert_eq!(new.attempts, 0, "attempts start over");
    assert_eq!(new.job_type, old.job_type);
    assert_eq!(new.payload, old.payload);
    assert_eq!(new.queue, "webhooks");
    assert_eq!(new.priority, 7);
    assert_eq!(new.max_attempts, 2);
    assert_eq!(new.timeout_ms, Some(10_000));
    assert_eq!(new.group_key.as_deref(), Some("endpoint:crm"));
    assert_eq!(new.run_at, now, "due at once");
    assert_eq!(new.created_at, now);
    assert_eq!((new.last_error, new.last_status_code), (None, None));
    assert_eq!(
        (new.requeued_by, new.requeued_as),
        (None, None),
        "the new job is not marked"
    );
    assert!(history(&env.queue, new_id).is_empty());

    // The endpoint is fixed: a worker delivers the new job.
    let handler = ScriptedHandler::new();
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("deliver_webhook", handler.clone())
        .queue("webhooks", 1)
        .start()
        .expect("worker starts");
    let done = wait_finished(&events, new_id);
    stop(worker);
    assert_eq!((done.status, done.attempt), (JobStatus::Succeeded, 1));
    assert_eq!(handler.call_ids(), vec![new_id]);
    assert_eq!(handler.calls()[0].payload, old.payload);
    assert_eq!(job(&env.queue, dead).status, JobStatus::Dead);
}

#[test]
fn requeue_refuses_jobs_that_are_not_dead_unknown_or_already_requeued() {
    let env = setup();
    let dead = dead_webhook(&env);
    let queued = env
        .queue
        .enqueue(NewJob::new("send_email", json!({})))
        .expect("enqueue");
    let succeeded = env
        .queue
        .enqueue(NewJob::new("noop", json!({})))
        .expect("enqueue");
    let report =
        testing::drain(&Worker::builder(&env.queue).handler("noop", ScriptedHandler::new()))
            .expect("drain");
    assert_eq!(report.succeeded, 1);
    let jobs_before = env.count_jobs();

    for (id, what) in [(queued, "queued"), (succeeded, "succeeded")] {
        let err = env
            .queue
            .requeue_dead(id, "ops", "why not")
            .expect_err("only dead jobs can be requeued");
        assert_eq!(err.kind(), ErrorKind::InvalidState, "{what}: {err}");
        assert!(err.to_string().contains(what), "{err}");
    }
    let err = env
        .queue
        .requeue_dead(999_999, "ops", "typo")
        .expect_err("unknown id");
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert_eq!(env.count_jobs(), jobs_before, "refusals insert nothing");

    let new_id = env
        .queue
        .requeue_dead(dead, "ops", "first time")
        .expect("first requeue");
    let err = env
        .queue
        .requeue_dead(dead, "ops", "second time")
        .expect_err("a dead job is requeued once");
    assert_eq!(err.kind(), ErrorKind::InvalidState, "{err}");
    assert!(
        err.to_string().contains(&new_id.to_string()),
        "names the new job: {err}"
    );
    assert_eq!(env.count_jobs(), jobs_before + 1);
    let old = job(&env.queue, dead);
    assert_eq!(
        old.requeue_reason.as_deref(),
        Some("first time"),
        "unchanged"
    );
    assert_eq!(old.requeued_as, Some(new_id));
}

#[test]
fn a_requeued_job_keeps_its_idempotency_key_and_gets_all_its_attempts_again() {
    let env = setup();
    let id = env
        .queue
        .enqueue(
            NewJob::new("send_email", json!({"user_id": 1}))
                .max_attempts(2)
                .idempotency_key("welcome:1"),
        )
        .expect("enqueue");
    let failing = ScriptedHandler::always(Step::retry("smtp down"));
    let builder = Worker::builder(&env.queue).handler("send_email", failing.clone());
    testing::drain(&builder).expect("drain");
    env.clock.advance(Duration::from_secs(3600));
    let report = testing::drain(&builder).expect("drain");
    assert_eq!(report.dead, 1, "attempts exhausted: {report:?}");
    assert_eq!(history(&env.queue, id).len(), 2);

    let new_id = env
        .queue
        .requeue_dead(id, "ops", "smtp back")
        .expect("requeue");
    assert_eq!(
        job(&env.queue, new_id).idempotency_key.as_deref(),
        Some("welcome:1")
    );
    assert_eq!(
        env.queue
            .enqueue(NewJob::new("send_email", json!({"user_id": 1})).idempotency_key("welcome:1"))
            .expect("enqueue with the same key"),
        new_id,
        "the requeued job holds the key now"
    );

    // Still failing: the new job gets both of its attempts before it is dead again.
    let report = testing::drain(&builder).expect("drain");
    assert_eq!(report.failed, 1, "{report:?}");
    env.clock.advance(Duration::from_secs(3600));
    let report = testing::drain(&builder).expect("drain");
    assert_eq!(report.dead, 1, "{report:?}");
    let attempts: Vec<(i64, u32)> = failing.calls().iter().map(|c| (c.id, c.attempt)).collect();
    assert_eq!(attempts, vec![(id, 1), (id, 2), (new_id, 1), (new_id, 2)]);
}
