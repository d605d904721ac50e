//! Typed jobs: a serde struct tied to its job type and defaults (`Job`), enqueued as is,
//! run by `register::<T>()` (its `Perform`) or the closure form `job(|t: T, ctx| ..)`, with
//! the type's queue, timeout and retry policy; a stored payload that no longer fits the type
//! goes dead at once, and a value JSON cannot hold is refused at enqueue. Each run is checked
//! through a started worker and through `testing::drain`.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use litejobs::{
    ErrorKind, Job, JobContext, JobError, JobOptions, JobStatus, NewJob, Perform, RetryPolicy,
    Worker,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::support::scripted::{job, Runner, MODES};
use crate::support::{setup, sqlite_only, START_MS};

/// A job with every stored default set, in a queue of its own.
#[derive(Debug, Serialize, Deserialize)]
struct WelcomeEmail {
    user_id: i64,
}

impl Job for WelcomeEmail {
    const TYPE: &'static str = "welcome_email";
    fn options() -> JobOptions {
        JobOptions::new().queue("mail").priority(3).max_attempts(5)
    }
}

impl Perform for WelcomeEmail {
    fn perform(self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.set_result(json!({"sent_to": self.user_id, "queue": ctx.queue_name()}));
        Ok(())
    }
}

/// A job with no options: the string API's defaults.
#[derive(Debug, Serialize, Deserialize)]
struct Plain {
    n: u32,
}

impl Job for Plain {
    const TYPE: &'static str = "plain";
}

/// Always fails, saying what time limit its attempt had; its type sets a timeout and an
/// exact retry schedule.
#[derive(Debug, Serialize, Deserialize)]
struct Flaky {}

impl Job for Flaky {
    const TYPE: &'static str = "flaky";
    fn options() -> JobOptions {
        JobOptions::new()
            .timeout(Duration::from_secs(7))
            .retry_policy(RetryPolicy::schedule(vec![Duration::from_secs(9)]))
    }
}

impl Perform for Flaky {
    fn perform(self, ctx: &JobContext) -> Result<(), JobError> {
        let deadline_ms = ctx
            .deadline()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        Err(JobError::retry(format!(
            "timeout {} ms, deadline {deadline_ms}",
            ctx.timeout().as_millis()
        )))
    }
}

/// Serializes to a map with non-string keys, which JSON cannot hold.
#[derive(Debug, Serialize, Deserialize)]
struct Grid {
    cells: BTreeMap<(i32, i32), String>,
}

impl Job for Grid {
    const TYPE: &'static str = "grid";
}

#[test]
fn enqueue_stores_the_types_defaults_and_a_new_job_from_it_overrides_them() {
    let env = setup();
    let id = env
        .queue
        .enqueue(WelcomeEmail { user_id: 42 })
        .expect("enqueue a typed job");
    let stored = job(&env.queue, id);
    assert_eq!(stored.job_type, "welcome_email");
    assert_eq!(stored.payload, json!({"user_id": 42}));
    assert_eq!(
        (stored.queue.as_str(), stored.priority, stored.max_attempts),
        ("mail", 3, 5)
    );
    assert_eq!(stored.status, JobStatus::Queued);

    let plain = job(
        &env.queue,
        env.queue.enqueue(Plain { n: 1 }).expect("enqueue"),
    );
    assert_eq!(
        (plain.queue.as_str(), plain.priority, plain.max_attempts),
        ("default", 0, 6),
        "a type without options gets the string API's defaults"
    );

    let new = NewJob::from_job(&WelcomeEmail { user_id: 7 })
        .expect("serializable")
        .priority(9)
        .delay(Duration::from_secs(60));
    let overridden = job(&env.queue, env.queue.enqueue(new).expect("enqueue"));
    assert_eq!(
        (
            overridden.queue.as_str(),
            overridden.priority,
            overridden.max_attempts
        ),
        ("mail", 9, 5),
        "the job's own setting wins, the rest stay the type's"
    );
    assert_eq!(overridden.run_at, START_MS + 60_000);

    let batch = [WelcomeEmail { user_id: 1 }, WelcomeEmail { user_id: 2 }]
        .iter()
        .map(NewJob::from_job)
        .collect::<litejobs::Result<Vec<_>>>()
        .expect("serializable");
    let ids = env.queue.enqueue_batch(batch).expect("enqueue a batch");
    for (id, user_id) in ids.into_iter().zip([1, 2]) {
        let j = job(&env.queue, id);
        assert_eq!(
            (j.queue.as_str(), j.payload),
            ("mail", json!({ "user_id": user_id }))
        );
    }
}

#[test]
fn typed_jobs_enqueue_in_the_callers_transaction() {
    if sqlite_only() {
        return;
    }
    let env = setup();
    let mut conn = env.raw();
    let tx = conn.transaction().expect("begin");
    let a = litejobs::enqueue_in(&tx, WelcomeEmail { user_id: 1 }).expect("enqueue_in");
    let b = env
        .queue
        .enqueue_in(&tx, WelcomeEmail { user_id: 2 })
        .expect("Queue::enqueue_in");
    tx.commit().expect("commit");
    for id in [a, b] {
        let j = job(&env.queue, id);
        assert_eq!(
            (j.job_type.as_str(), j.queue.as_str()),
            ("welcome_email", "mail")
        );
    }
}

#[test]
fn register_runs_the_job_from_its_own_queue() {
    for mode in MODES {
        let env = setup();
        let id = env
            .queue
            .enqueue(WelcomeEmail { user_id: 42 })
            .expect("enqueue");
        // The builder works only the default queue until the type adds "mail".
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue).register::<WelcomeEmail>(),
        );
        let done = run.attempt(id);
        run.finish();
        assert_eq!(done.status, JobStatus::Succeeded, "[{mode:?}] {done:?}");
        assert_eq!(
            job(&env.queue, id).result,
            Some(json!({"sent_to": 42, "queue": "mail"})),
            "[{mode:?}]"
        );
    }
}

#[test]
fn register_adds_the_types_queue_unless_the_builder_already_works_it() {
    let env = setup();
    let added = format!(
        "{:?}",
        Worker::builder(&env.queue).register::<WelcomeEmail>()
    );
    assert!(
        added.contains(r#"("mail", 4)"#),
        "the type's queue with the default concurrency: {added}"
    );
    for builder in [
        Worker::builder(&env.queue)
            .queue("mail", 1)
            .register::<WelcomeEmail>(),
        Worker::builder(&env.queue)
            .register::<WelcomeEmail>()
            .queue("mail", 1),
    ] {
        let kept = format!("{builder:?}");
        assert!(
            kept.contains(r#"("mail", 1)"#),
            "the builder's own threads: {kept}"
        );
    }
}

#[test]
fn the_closure_form_gets_the_deserialized_payload() {
    for mode in MODES {
        let env = setup();
        let (seen, got) = crossbeam_channel::unbounded();
        let id = env.queue.enqueue(Plain { n: 7 }).expect("enqueue");
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue).job(move |plain: Plain, ctx: &JobContext| {
                seen.send((plain.n, ctx.job_type().to_string()))
                    .map_err(|e| JobError::retry(e.to_string()))
            }),
        );
        let done = run.attempt(id);
        run.finish();
        assert_eq!(done.status, JobStatus::Succeeded, "[{mode:?}] {done:?}");
        assert_eq!(
            got.try_recv().ok(),
            Some((7, "plain".to_string())),
            "[{mode:?}]"
        );
    }
}

#[test]
fn the_types_timeout_and_retry_policy_apply_and_later_builder_calls_win() {
    for mode in MODES {
        let env = setup();
        let id = env.queue.enqueue(Flaky {}).expect("enqueue");
        let mut run = Runner::start(&env, mode, Worker::builder(&env.queue).register::<Flaky>());
        let done = run.attempt(id);
        assert_eq!(done.status, JobStatus::Failed, "[{mode:?}] {done:?}");
        assert_eq!(
            done.error.as_deref(),
            Some(format!("timeout 7000 ms, deadline {}", START_MS + 7000).as_str()),
            "[{mode:?}] the type's timeout"
        );
        assert_eq!(
            job(&env.queue, id).run_at,
            START_MS + 9000,
            "[{mode:?}] the type's retry schedule, not the default backoff"
        );
        run.finish();
    }

    let env = setup();
    let id = env.queue.enqueue(Flaky {}).expect("enqueue");
    let mut run = Runner::start(
        &env,
        MODES[1],
        Worker::builder(&env.queue)
            .register::<Flaky>()
            .timeout(Flaky::TYPE, Duration::from_secs(3))
            .retry_policy(
                Flaky::TYPE,
                RetryPolicy::schedule(vec![Duration::from_secs(2)]),
            ),
    );
    let done = run.attempt(id);
    run.finish();
    assert_eq!(
        done.error.as_deref(),
        Some(format!("timeout 3000 ms, deadline {}", START_MS + 3000).as_str())
    );
    assert_eq!(job(&env.queue, id).run_at, START_MS + 2000);
}

#[test]
fn a_payload_that_no_longer_fits_the_type_goes_dead_at_once_naming_it() {
    for mode in MODES {
        let env = setup();
        // As after renaming `user_id`: a row of the type with the old field name.
        let id = env
            .queue
            .enqueue(
                NewJob::new("welcome_email", json!({"userId": 42}))
                    .queue("mail")
                    .max_attempts(5),
            )
            .expect("enqueue through the string API");
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue).register::<WelcomeEmail>(),
        );
        let done = run.attempt(id);
        run.finish();
        assert_eq!(
            (done.status, done.attempt),
            (JobStatus::Dead, 1),
            "[{mode:?}] {done:?}"
        );
        let error = job(&env.queue, id).last_error.unwrap_or_default();
        for part in ["welcome_email", "WelcomeEmail", "missing field `user_id`"] {
            assert!(
                error.contains(part),
                "[{mode:?}] {part:?} missing in {error:?}"
            );
        }
    }
}

#[test]
fn a_value_json_cannot_hold_is_an_error_at_enqueue_not_a_panic() {
    let env = setup();
    let grid = || Grid {
        cells: BTreeMap::from([((0, 0), "origin".to_string())]),
    };
    let err = env.queue.enqueue(grid()).expect_err("non-string map keys");
    assert_eq!(err.kind(), ErrorKind::InvalidJob);
    let message = err.to_string();
    assert!(
        message.starts_with("grid: ") && message.contains("key must be a string"),
        "{message}"
    );
    let err = NewJob::from_job(&grid()).expect_err("the same through from_job");
    assert_eq!(err.kind(), ErrorKind::InvalidJob);
    assert_eq!(env.count_jobs(), 0, "nothing written");
}
