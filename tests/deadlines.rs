//! Deadlines (`expires_at`): a job not started by its deadline never starts and ends
//! `cancelled` by `deadline`; the claim skips it before any sweep, an idle worker does not
//! spin on it, an expired job at the head of its group does not hold the group; a retry,
//! snooze or reaped attempt that would fall after the deadline ends the job the same way; an
//! attempt already running is not cut short; the API's checks, typed jobs' windows and
//! idempotency keys. Time is a `ManualClock`: deadlines are passed by moving it, never
//! waited for. On both backends (`LITEJOBS_TEST_BACKEND=postgres`).

use std::time::Duration;

use crossbeam_channel::Receiver;
use litejobs::{
    testing, ErrorKind, Event, Job, JobError, JobOptions, JobStatus, NewJob, Perform, Worker,
    WorkerBuilder,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::support::scripted::{
    at_ms, history, job, stop, wait_event, wait_finished, wait_status, Runner, ScriptedHandler,
    Step, MODES,
};
use crate::support::{setup, sqlite_only, TestEnv, START_MS};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
/// 2023-11-14T22:13:20Z, the test clock's start, as the reasons write it.
const START_RFC3339: &str = "2023-11-14T22:13:20Z";

fn minutes(n: u64) -> Duration {
    MINUTE * u32::try_from(n).expect("a few minutes")
}

/// The job's cancellation as `(status, cancelled_by, cancel_reason)`.
fn ended(env: &TestEnv, id: i64) -> (JobStatus, Option<String>, Option<String>) {
    let j = job(&env.queue, id);
    (j.status, j.cancelled_by, j.cancel_reason)
}

#[test]
fn a_job_not_started_by_its_deadline_never_starts_and_ends_cancelled_by_the_deadline() {
    for mode in MODES {
        let env = setup();
        let late = env
            .queue
            .enqueue(NewJob::new("reset_email", json!({"user": 1})).expire_after(minutes(15)))
            .expect("enqueue");
        let stored = job(&env.queue, late);
        assert_eq!(stored.expires_at, Some(START_MS + 15 * 60_000));
        assert!(!stored.expired());
        let keeps = env
            .queue
            .enqueue(NewJob::new("reset_email", json!({"user": 2})))
            .expect("enqueue");
        // No worker ran for 16 minutes.
        env.clock.advance(minutes(16));
        let handler = ScriptedHandler::new();
        let run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue)
                .handler("reset_email", handler.clone())
                .reap_interval(Duration::from_millis(20)),
        );
        if let Some(builder) = &run.builder {
            let report = testing::drain(builder).expect("drain");
            assert_eq!((report.expired, report.succeeded), (1, 1), "{report:?}");
        }
        let cancelled = wait_status(&run.events, late, JobStatus::Cancelled);
        assert_eq!(
            cancelled.error.as_deref(),
            Some("expired: not started by its deadline 2023-11-14T22:28:20Z")
        );
        assert_eq!(
            wait_finished(&run.events, keeps).status,
            JobStatus::Succeeded
        );
        run.finish();
        assert_eq!(
            handler.call_ids(),
            vec![keeps],
            "[{mode:?}] the late job never ran"
        );
        let j = job(&env.queue, late);
        assert_eq!(
            (
                j.status,
                j.cancelled_by.as_deref(),
                j.cancel_reason.as_deref()
            ),
            (
                JobStatus::Cancelled,
                Some("deadline"),
                Some("expired: not started by its deadline 2023-11-14T22:28:20Z")
            ),
            "[{mode:?}]"
        );
        assert!(j.expired());
        assert_eq!(
            (j.attempts, j.finished_at),
            (0, Some(START_MS + 16 * 60_000))
        );
        assert!(history(&env.queue, late).is_empty(), "no attempt ran");
        // Counted as cancelled, not as a failure.
        let stats = env.queue.stats().expect("stats");
        assert_eq!(
            (
                stats.count(JobStatus::Cancelled),
                stats.count(JobStatus::Queued)
            ),
            (1, 0),
            "[{mode:?}] {stats:?}"
        );
        let health = env.queue.health(HOUR).expect("health");
        assert_eq!(
            (
                health.dead,
                health.failed_attempts,
                health.expired_last_hour
            ),
            (0, 0, 1),
            "[{mode:?}] {health:?}"
        );
    }
}

/// A worker whose reaper (and so its expiry sweep) runs only at its start, with a `marker`
/// job run to prove its first sweep is over; `gated` jobs are due only later.
fn worker_past_its_first_sweep(env: &TestEnv, builder: WorkerBuilder) -> (Worker, Receiver<Event>) {
    let events = env.queue.subscribe();
    let worker = builder
        .reap_interval(HOUR)
        .poll_interval(Duration::from_millis(10))
        .start()
        .expect("worker starts");
    let marker = env
        .queue
        .enqueue(NewJob::new("marker", json!({})))
        .expect("enqueue");
    // The marker's outcome is written in the round after the one that claimed it, and the
    // upkeep (the expiry sweep) runs between them.
    assert_eq!(wait_finished(&events, marker).status, JobStatus::Succeeded);
    (worker, events)
}

#[test]
fn the_claim_skips_a_job_past_its_deadline_before_any_sweep_and_an_idle_worker_does_not_spin() {
    let env = setup();
    let handler = ScriptedHandler::new();
    // Due in 10 s, to start by 11 s: neither when the worker starts.
    let late = env
        .queue
        .enqueue(
            NewJob::new("t", json!({}))
                .priority(9)
                .delay(Duration::from_secs(10))
                .expire_after(Duration::from_secs(1)),
        )
        .expect("enqueue");
    let (worker, events) = worker_past_its_first_sweep(
        &env,
        Worker::builder(&env.queue)
            .handler("t", handler.clone())
            .handler("marker", ScriptedHandler::new()),
    );
    env.clock.advance(Duration::from_secs(20));
    // Polled every 10 ms: were the expired row taken for due work, each poll would run a
    // write round that claims nothing.
    let activity = worker.activity();
    let rounds = activity.write_rounds();
    std::thread::sleep(Duration::from_millis(300));
    let spun = activity.write_rounds() - rounds;
    assert!(
        spun <= 2,
        "{spun} write rounds in 300 ms for a job past its deadline that no claim may take"
    );
    // A job enqueued now runs; the late one, first in claim order, was passed over.
    let now = env
        .queue
        .enqueue(NewJob::new("t", json!({})))
        .expect("enqueue");
    assert_eq!(wait_finished(&events, now).status, JobStatus::Succeeded);
    assert_eq!(handler.call_ids(), vec![now]);
    assert_eq!(
        job(&env.queue, late).status,
        JobStatus::Queued,
        "no sweep yet"
    );
    stop(worker);
    assert_eq!(env.queue.cancel_expired().expect("sweep"), 1);
    assert_eq!(
        ended(&env, late),
        (
            JobStatus::Cancelled,
            Some("deadline".to_string()),
            Some("expired: not started by its deadline 2023-11-14T22:13:31Z".to_string())
        )
    );
    assert_eq!(env.queue.cancel_expired().expect("sweep"), 0);
}

#[test]
fn an_expired_job_at_the_head_of_its_group_does_not_hold_the_group() {
    let env = setup();
    let handler = ScriptedHandler::new();
    let ids = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("t", json!({"n": 1}))
                .group_key("endpoint:1")
                .delay(Duration::from_secs(10))
                .expire_after(Duration::from_secs(1)),
            NewJob::new("t", json!({"n": 2}))
                .group_key("endpoint:1")
                .delay(Duration::from_secs(10)),
        ])
        .expect("enqueue");
    let (worker, events) = worker_past_its_first_sweep(
        &env,
        Worker::builder(&env.queue)
            .handler("t", handler.clone())
            .handler("marker", ScriptedHandler::new()),
    );
    env.clock.advance(Duration::from_secs(20));
    env.queue.notify();
    assert_eq!(wait_finished(&events, ids[1]).status, JobStatus::Succeeded);
    assert_eq!(handler.call_ids(), vec![ids[1]]);
    stop(worker);
}

#[test]
fn a_retry_that_would_fall_after_the_deadline_ends_the_job_expired_instead() {
    for mode in MODES {
        let env = setup();
        let id = env
            .queue
            .enqueue(NewJob::new("t", json!({})).expire_after(minutes(10)))
            .expect("enqueue");
        let handler = ScriptedHandler::new()
            .then(Step::fail(|| {
                JobError::retry_after(minutes(4), "smtp 451").with_status_code(451)
            }))
            .then(Step::fail(|| {
                JobError::retry_after(minutes(6), "smtp 451 again")
            }));
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue).handler("t", handler),
        );
        // 4 minutes after the first attempt is before the deadline: a retry as usual.
        let first = run.attempt(id);
        assert_eq!(first.status, JobStatus::Failed, "[{mode:?}]");
        run.advance(minutes(4));
        // The second asks for 6 more minutes: past the deadline at 10.
        let second = run.attempt(id);
        assert_eq!(second.status, JobStatus::Cancelled, "[{mode:?}]");
        run.finish();
        let reason = "expired: its retry at 2023-11-14T22:23:20Z would not start before its \
                      deadline 2023-11-14T22:23:20Z";
        assert_eq!(second.error.as_deref(), Some(reason));
        let j = job(&env.queue, id);
        assert_eq!(
            (
                j.status,
                j.cancelled_by.as_deref(),
                j.cancel_reason.as_deref()
            ),
            (JobStatus::Cancelled, Some("deadline"), Some(reason)),
            "[{mode:?}]"
        );
        assert_eq!(j.last_error.as_deref(), Some("smtp 451 again"));
        assert_eq!((j.attempts, j.locked_by), (2, None));
        assert_eq!(j.finished_at, Some(START_MS + 4 * 60_000));
        let attempts: Vec<(i64, String, Option<String>)> = history(&env.queue, id)
            .into_iter()
            .map(|a| (a.attempt, a.outcome.to_string(), a.error))
            .collect();
        assert_eq!(
            attempts,
            vec![
                (1, "failed".to_string(), Some("smtp 451".to_string())),
                (2, "failed".to_string(), Some("smtp 451 again".to_string())),
            ],
            "[{mode:?}] the attempt's own failure is kept"
        );
        assert_eq!(
            env.queue
                .stats()
                .expect("stats")
                .count(JobStatus::Cancelled),
            1,
            "[{mode:?}]"
        );
    }
}

#[test]
fn a_snooze_past_the_deadline_ends_the_job_expired() {
    for mode in MODES {
        let env = setup();
        let id = env
            .queue
            .enqueue(NewJob::new("t", json!({})).expire_after(minutes(10)))
            .expect("enqueue");
        let handler = ScriptedHandler::always(Step::fail(|| JobError::snooze(minutes(10))));
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue).handler("t", handler),
        );
        let f = run.attempt(id);
        run.finish();
        assert_eq!(f.status, JobStatus::Cancelled, "[{mode:?}]");
        let reason = "expired: snoozed until 2023-11-14T22:23:20Z, not before its deadline \
                      2023-11-14T22:23:20Z";
        assert_eq!(
            ended(&env, id),
            (
                JobStatus::Cancelled,
                Some("deadline".to_string()),
                Some(reason.to_string())
            )
        );
        assert_eq!(
            history(&env.queue, id)
                .into_iter()
                .map(|a| (a.outcome.to_string(), a.error))
                .collect::<Vec<_>>(),
            vec![("cancelled".to_string(), Some(reason.to_string()))]
        );
    }
}

#[test]
fn an_attempt_already_running_is_not_cut_short_by_the_deadline() {
    for mode in MODES {
        let env = setup();
        let id = env
            .queue
            .enqueue(NewJob::new("t", json!({})).expire_after(minutes(15)))
            .expect("enqueue");
        let clock = env.clock.clone();
        // The attempt runs past the deadline (the clock moves while it runs), heartbeats,
        // and succeeds.
        let handler = ScriptedHandler::always(Step::run(move |ctx| {
            clock.advance(minutes(20));
            ctx.heartbeat()
                .map_err(|e| JobError::retry(format!("heartbeat: {e}")))?;
            ctx.set_result(json!({"sent": true}));
            Ok(())
        }));
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue)
                .handler("t", handler)
                .reap_interval(Duration::from_millis(20)),
        );
        assert_eq!(run.attempt(id).status, JobStatus::Succeeded, "[{mode:?}]");
        run.finish();
        let j = job(&env.queue, id);
        assert_eq!((j.status, j.cancelled_by), (JobStatus::Succeeded, None));
        assert_eq!(j.result, Some(json!({"sent": true})));
    }
}

#[test]
fn a_reaped_attempt_after_the_deadline_ends_the_job_expired() {
    let env = setup();
    let id = env
        .queue
        .enqueue(NewJob::new("t", json!({})).expire_after(minutes(15)))
        .expect("enqueue");
    // Its worker claimed it, then died.
    env.sql_exec(&format!(
        "UPDATE jobs SET status = 'running', attempts = 1, locked_by = 'gone',
                started_at = {START_MS}, locked_until = {} WHERE id = {id}",
        START_MS + 60_000
    ));
    env.clock.advance(minutes(20));
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("t", ScriptedHandler::new())
        .reap_interval(Duration::from_millis(20))
        .start()
        .expect("worker starts");
    let f = wait_status(&events, id, JobStatus::Cancelled);
    stop(worker);
    let reason = "expired: attempt 2 not started by its deadline 2023-11-14T22:28:20Z";
    assert_eq!(f.error.as_deref(), Some(reason));
    assert_eq!(
        ended(&env, id),
        (
            JobStatus::Cancelled,
            Some("deadline".to_string()),
            Some(reason.to_string())
        )
    );
    let outcomes: Vec<String> = history(&env.queue, id)
        .into_iter()
        .map(|a| a.outcome.to_string())
        .collect();
    assert_eq!(
        outcomes,
        vec!["lost"],
        "the lost attempt, and no second one"
    );
}

#[test]
fn a_deadline_the_job_could_never_meet_is_refused_at_enqueue() {
    let env = setup();
    let err = env
        .queue
        .enqueue(NewJob::new("t", json!({})).expires_at(at_ms(START_MS)))
        .expect_err("a deadline that is already here");
    assert_eq!(err.kind(), ErrorKind::InvalidJob);
    assert_eq!(
        err.to_string(),
        format!(
            "expires_at {START_RFC3339} is not after the enqueue time {START_RFC3339}: the job \
             could never start; give a later deadline, or none"
        )
    );
    let err = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("t", json!({})),
            NewJob::new("t", json!({}))
                .delay(minutes(30))
                .expires_at(at_ms(START_MS + 60_000)),
        ])
        .expect_err("a deadline before the run time");
    assert_eq!(err.kind(), ErrorKind::InvalidJob);
    assert!(
        err.to_string()
            .contains("is not after its run time 2023-11-14T22:43:20Z"),
        "{err}"
    );
    assert_eq!(env.count_jobs(), 0, "the batch went in whole or not at all");

    // A window counts from when the job is due; the last setting wins.
    let ids = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("t", json!({}))
                .delay(minutes(30))
                .expire_after(minutes(15)),
            NewJob::new("t", json!({}))
                .expire_after(minutes(15))
                .expires_at(at_ms(START_MS + 1)),
            NewJob::new("t", json!({})),
        ])
        .expect("enqueue_batch");
    let deadlines: Vec<Option<i64>> = ids
        .iter()
        .map(|&id| job(&env.queue, id).expires_at)
        .collect();
    assert_eq!(
        deadlines,
        vec![Some(START_MS + 45 * 60_000), Some(START_MS + 1), None]
    );
}

#[test]
fn a_batch_big_enough_to_skip_the_rules_stores_each_deadline() {
    let env = setup();
    let jobs: Vec<NewJob> = (0..300u64)
        .map(|n| {
            let job = NewJob::new("t", json!({ "n": n }));
            if n % 2 == 0 {
                job.expire_after(Duration::from_secs(n + 1))
            } else {
                job
            }
        })
        .collect();
    let ids = env.queue.enqueue_batch(jobs).expect("enqueue_batch");
    for (n, id) in ids.iter().enumerate() {
        let want = (n % 2 == 0).then(|| START_MS + (n as i64 + 1) * 1000);
        assert_eq!(job(&env.queue, *id).expires_at, want, "job {n}");
    }
    env.clock.advance(Duration::from_secs(100));
    assert_eq!(env.queue.cancel_expired().expect("sweep"), 50);
}

#[derive(Serialize, Deserialize)]
struct ResetEmail {
    user_id: i64,
}

impl Job for ResetEmail {
    const TYPE: &'static str = "password_reset_email";
    fn options() -> JobOptions {
        JobOptions::new().queue("mail").expire_after(minutes(15))
    }
}

impl Perform for ResetEmail {
    fn perform(self, _ctx: &litejobs::JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[test]
fn a_typed_job_carries_its_types_window_unless_the_job_sets_its_own() {
    let env = setup();
    let typed = env
        .queue
        .enqueue(ResetEmail { user_id: 1 })
        .expect("enqueue");
    let own = env
        .queue
        .enqueue(
            NewJob::from_job(&ResetEmail { user_id: 2 })
                .expect("a payload")
                .expire_after(minutes(60)),
        )
        .expect("enqueue");
    assert_eq!(
        job(&env.queue, typed).expires_at,
        Some(START_MS + 15 * 60_000)
    );
    assert_eq!(
        job(&env.queue, own).expires_at,
        Some(START_MS + 60 * 60_000)
    );
    env.clock.advance(minutes(30));
    let builder = Worker::builder(&env.queue).register::<ResetEmail>();
    let report = testing::drain(&builder).expect("drain");
    assert_eq!((report.expired, report.succeeded), (1, 1), "{report:?}");
    assert!(job(&env.queue, typed).expired());
}

#[test]
fn an_expired_job_releases_its_idempotency_key() {
    let env = setup();
    let key = "reset:user:7";
    let first = env
        .queue
        .enqueue(
            NewJob::new("t", json!({}))
                .idempotency_key(key)
                .expire_after(minutes(15)),
        )
        .expect("enqueue");
    assert_eq!(
        env.queue
            .enqueue(NewJob::new("t", json!({})).idempotency_key(key))
            .expect("enqueue"),
        first,
        "the key is held while the job waits"
    );
    env.clock.advance(minutes(16));
    assert_eq!(env.queue.cancel_expired().expect("sweep"), 1);
    let second = env
        .queue
        .enqueue(NewJob::new("t", json!({})).idempotency_key(key))
        .expect("enqueue");
    assert_ne!(second, first, "an expired job holds its key no more");
}

/// Before any sweep: a job past its deadline will never run, so an enqueue with its key ends
/// it (as the sweep would) and makes the new job, rather than answering with the dead end.
#[test]
fn an_enqueue_with_the_key_of_a_job_past_its_deadline_ends_that_job_and_makes_a_new_one() {
    let env = setup();
    let key = "reset:user:8";
    let first = env
        .queue
        .enqueue(
            NewJob::new("t", json!({}))
                .idempotency_key(key)
                .expire_after(minutes(15)),
        )
        .expect("enqueue");
    env.clock.advance(minutes(16));
    let second = env
        .queue
        .enqueue(NewJob::new("t", json!({})).idempotency_key(key))
        .expect("enqueue");
    assert_ne!(second, first, "no sweep ran, the key is free all the same");
    let (status, by, reason) = ended(&env, first);
    assert_eq!(status, JobStatus::Cancelled);
    assert_eq!(by.as_deref(), Some("deadline"));
    assert!(
        reason.is_some_and(|r| r.starts_with("expired: not started by its deadline")),
        "the sweep's reason"
    );
    assert_eq!(job(&env.queue, second).status, JobStatus::Queued);
    assert_eq!(
        env.queue
            .enqueue(NewJob::new("t", json!({})).idempotency_key(key))
            .expect("enqueue"),
        second,
        "the new job holds the key"
    );
    assert_eq!(
        env.queue
            .stats()
            .expect("stats")
            .count(JobStatus::Cancelled),
        1,
        "counted once as finished"
    );
}

#[test]
fn events_tell_of_each_expired_job() {
    let env = setup();
    let ids = env
        .queue
        .enqueue_batch(
            (1..=3)
                .map(|n| NewJob::new("t", json!({})).expire_after(minutes(n)))
                .collect(),
        )
        .expect("enqueue");
    let events = env.queue.subscribe();
    env.clock.advance(Duration::from_secs(150));
    assert_eq!(env.queue.cancel_expired().expect("sweep"), 2);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        seen.push(wait_event(&events, "expired jobs", |e| match e {
            Event::Finished {
                id,
                status: JobStatus::Cancelled,
                ..
            } => Some(*id),
            _ => None,
        }));
    }
    assert_eq!(seen, ids[..2].to_vec(), "earliest deadline first");
    assert_eq!(job(&env.queue, ids[2]).status, JobStatus::Queued);
}

#[test]
fn enqueue_in_the_callers_transaction_stores_the_deadline() {
    // `enqueue_in` takes the caller's rusqlite transaction: SQLite only (PostgreSQL's
    // `enqueue_in_pg` is in tests/postgres/enqueue_in.rs).
    if sqlite_only() {
        return;
    }
    let env = setup();
    let mut conn = env.raw();
    let tx = conn.transaction().expect("begin");
    let by_queue = env
        .queue
        .enqueue_in(&tx, NewJob::new("t", json!({})).expire_after(minutes(15)))
        .expect("Queue::enqueue_in");
    let free = litejobs::enqueue_in(&tx, NewJob::new("t", json!({})).expire_after(minutes(15)))
        .expect("enqueue_in");
    let refused = env
        .queue
        .enqueue_in(
            &tx,
            NewJob::new("t", json!({})).expires_at(at_ms(START_MS - 1)),
        )
        .expect_err("a deadline already past");
    assert_eq!(refused.kind(), ErrorKind::InvalidJob);
    tx.commit().expect("commit");
    assert_eq!(
        job(&env.queue, by_queue).expires_at,
        Some(START_MS + 15 * 60_000),
        "by the queue's clock"
    );
    let j = job(&env.queue, free);
    assert_eq!(
        j.expires_at.map(|at| at - j.run_at),
        Some(15 * 60_000),
        "by the wall clock"
    );
}

#[test]
fn each_slot_of_a_periodic_template_with_a_window_gets_its_own_deadline() {
    let env = setup();
    let digest = litejobs::maintenance::Periodic::every(
        HOUR,
        NewJob::new("digest", json!({})).expire_after(minutes(30)),
    )
    .expect("a schedule");
    let scheduler =
        litejobs::maintenance::Scheduler::new(&env.queue, vec![digest]).expect("a scheduler");
    scheduler.tick().expect("tick");
    let mut deadlines = Vec::new();
    for _ in 0..2 {
        env.clock.advance(HOUR);
        let report = scheduler.tick().expect("tick");
        let slot = &report.enqueued[0];
        deadlines.push((
            job(&env.queue, slot.job_id).expires_at,
            env.clock.now() + 30 * 60_000,
        ));
    }
    for (got, want) in deadlines {
        assert_eq!(
            got,
            Some(want),
            "each slot's job: 30 minutes from its enqueue"
        );
    }
}
