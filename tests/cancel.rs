//! Cancelling jobs that wait or run: a running attempt is `cancelled` at once (who and why
//! kept, its history row written, its lease gone), its late outcome changes nothing, and
//! its worker tells the handler (`should_stop`, a heartbeat error naming who cancelled),
//! whether the cancel came through this process's queue or from elsewhere; a job cancelled
//! while it waited in a worker's channel never starts; bulk cancel by type and text, all
//! or nothing, with a dry run. Command handlers (`--exec`, `--serve`) are in [`exec`].

use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Sender};
use litejobs::{testing, ErrorKind, Event, JobContext, JobError, JobStatus, NewJob, Worker};
use serde_json::json;

use crate::support::scripted::{recv, wait_status, Latch, WAIT};
use crate::support::{setup, TestEnv};

#[cfg(all(unix, feature = "exec"))]
mod exec; // --exec: the process group stopped, the slot reused; --serve: the cancel line, honoured or not

/// What a handler that runs until it is told to stop saw when it was.
#[derive(Debug)]
struct Told {
    id: i64,
    heartbeat: String,
}

/// A handler that says it started, runs until `should_stop` turns true (bounded by
/// [`WAIT`]), then reports what its heartbeat says and ends as `end` says: the outcome a
/// cancelled attempt reports late.
fn runs_until_told(
    started: Sender<i64>,
    told: Sender<Told>,
    end: fn() -> Result<(), JobError>,
) -> impl Fn(&JobContext) -> Result<(), JobError> + Send + Sync + 'static {
    move |ctx: &JobContext| {
        let _ = started.send(ctx.id());
        let until = Instant::now() + WAIT;
        // `should_stop` is a flag to look at, as a handler between its steps would.
        while !ctx.should_stop() {
            assert!(
                Instant::now() < until,
                "job {} was never told to stop",
                ctx.id()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let heartbeat = match ctx.heartbeat() {
            Ok(()) => "heartbeat held".to_string(),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::InvalidState);
                e.to_string()
            }
        };
        ctx.set_result(json!("late result of a cancelled attempt"));
        let _ = told.send(Told {
            id: ctx.id(),
            heartbeat,
        });
        end()
    }
}

fn job(env: &TestEnv, id: i64) -> litejobs::JobRecord {
    env.queue.job(id).expect("job").expect("the job exists")
}

/// Waits (bounded) until `id` is `running` in the database: claimed by a worker.
fn wait_running(env: &TestEnv, id: i64) {
    let end = Instant::now() + WAIT;
    while job(env, id).status != JobStatus::Running {
        assert!(Instant::now() < end, "job {id} was never claimed");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The cancelled job as a person and a monitor see it afterwards: cancelled with who and
/// why, no result, no lease, one history row for the attempt that ran.
fn assert_cancelled_while_running(env: &TestEnv, id: i64, by: &str, reason: &str) {
    let j = job(env, id);
    assert_eq!(j.status, JobStatus::Cancelled, "{j:?}");
    assert_eq!(
        (j.cancelled_by.as_deref(), j.cancel_reason.as_deref()),
        (Some(by), Some(reason))
    );
    assert_eq!(j.result, None, "the late result was discarded");
    assert_eq!((j.locked_by.as_deref(), j.locked_until), (None, None));
    assert_eq!(j.last_error, None, "a person's cancel is not an error");
    let history = env.queue.attempts(id).expect("attempts");
    assert_eq!(
        history.len(),
        1,
        "one row, the cancelled attempt: {history:?}"
    );
    assert_eq!(history[0].attempt, 1);
    assert_eq!(history[0].outcome.as_str(), "cancelled");
    assert_eq!(
        history[0].error.as_deref(),
        Some(&*format!("cancelled by {by}: {reason}"))
    );
    assert!(history[0].worker.is_some(), "{history:?}");
}

/// In this process: the handler is told at once, its heartbeat says who cancelled and why,
/// and what it reports afterwards (a success, a failure, a panic) changes nothing.
#[test]
fn a_running_handler_is_told_and_its_late_outcome_changes_nothing() {
    let env = setup();
    let (started_tx, started) = unbounded();
    let (told_tx, told) = unbounded();
    let worker = Worker::builder(&env.queue)
        .concurrency(1)
        .handler(
            "ok",
            runs_until_told(started_tx.clone(), told_tx.clone(), || Ok(())),
        )
        .handler(
            "fails",
            runs_until_told(started_tx.clone(), told_tx.clone(), || {
                Err(JobError::retry("failed after the cancel"))
            }),
        )
        .handler(
            "panics",
            runs_until_told(started_tx, told_tx, || panic!("panicked after the cancel")),
        )
        .handler("quick", |_: &JobContext| Ok(()))
        .start()
        .expect("start");
    let events = env.queue.subscribe();
    for job_type in ["ok", "fails", "panics"] {
        let id = env
            .queue
            .enqueue(NewJob::new(job_type, json!({})))
            .expect("enqueue");
        assert_eq!(recv(&started, "the handler to start"), id);
        env.queue
            .cancel_as(id, "ops", "wrong list")
            .expect("cancel the running job");
        // Cancelled at once, before the handler has done anything.
        assert_eq!(job(&env, id).status, JobStatus::Cancelled);
        let finished = wait_status(&events, id, JobStatus::Cancelled);
        assert_eq!(finished.attempt, 1);
        assert_eq!(
            finished.error.as_deref(),
            Some("cancelled by ops: wrong list")
        );
        let seen = recv(&told, "the handler to be told");
        assert_eq!(seen.id, id);
        assert_eq!(
            seen.heartbeat,
            format!("job {id} was cancelled by ops: wrong list; stop this attempt")
        );
        // The next job runs on the same (only) thread once the cancelled one returned, and
        // outcomes are written in order: by its success the late one was written, fenced.
        let quick = env
            .queue
            .enqueue(NewJob::new("quick", json!({})))
            .expect("enqueue");
        let done = wait_status(&events, quick, JobStatus::Succeeded);
        assert_eq!(done.id, quick);
        assert_cancelled_while_running(&env, id, "ops", "wrong list");
    }
    worker.shutdown(Duration::from_secs(10)).expect("shutdown");
    // No other outcome of the cancelled jobs was ever announced.
    let late: Vec<Event> = events
        .try_iter()
        .filter(|e| matches!(e, Event::Finished { status, .. } if *status != JobStatus::Succeeded))
        .collect();
    assert!(late.is_empty(), "{late:?}");
    let stats = env.queue.stats().expect("stats");
    assert_eq!(stats.count(JobStatus::Cancelled), 3);
    assert_eq!(stats.count(JobStatus::Running), 0);
    assert_eq!(stats.count(JobStatus::Succeeded), 3);
}

/// A handler that ignores the cancel keeps its thread until its timeout, as a hung one
/// does; then its thread is replaced and the next job runs; whatever it returns at last
/// is discarded.
#[test]
fn a_handler_that_ignores_the_cancel_runs_on_until_its_timeout() {
    let env = setup();
    let gate = Latch::new();
    let (started_tx, started) = unbounded();
    let worker = Worker::builder(&env.queue)
        .concurrency(1)
        .handler("stubborn", {
            let gate = gate.clone();
            move |ctx: &JobContext| -> Result<(), JobError> {
                let _ = started_tx.send(ctx.id());
                assert!(gate.wait(WAIT), "the test never let the handler end");
                ctx.set_result(json!("ran to the end anyway"));
                Ok(())
            }
        })
        .handler("quick", |_: &JobContext| Ok(()))
        .start()
        .expect("start");
    let _open = gate.open_on_drop();
    let events = env.queue.subscribe();
    let id = env
        .queue
        .enqueue(NewJob::new("stubborn", json!({})).timeout(Duration::from_secs(1)))
        .expect("enqueue");
    assert_eq!(recv(&started, "the handler to start"), id);
    env.queue.cancel_as(id, "ops", "stop it").expect("cancel");
    // The only thread is taken until the attempt's timeout; then a new one runs this.
    let quick = env
        .queue
        .enqueue(NewJob::new("quick", json!({})))
        .expect("enqueue");
    wait_status(&events, quick, JobStatus::Succeeded);
    gate.open();
    worker.shutdown(Duration::from_secs(10)).expect("shutdown");
    assert_cancelled_while_running(&env, id, "ops", "stop it");
}

/// A cancel through another `Queue` (as another process or host would make it) reaches the
/// handler through the worker's look at the jobs it holds.
#[test]
fn a_cancel_from_elsewhere_reaches_the_running_handler() {
    let env = setup();
    let (started_tx, started) = unbounded();
    let (told_tx, told) = unbounded();
    let worker = Worker::builder(&env.queue)
        .concurrency(1)
        .handler("long", runs_until_told(started_tx, told_tx, || Ok(())))
        .start()
        .expect("start");
    let id = env
        .queue
        .enqueue(NewJob::new("long", json!({})))
        .expect("enqueue");
    assert_eq!(recv(&started, "the handler to start"), id);
    let elsewhere = env.open_another();
    elsewhere
        .cancel_as(id, "night shift", "runaway report")
        .expect("cancel from elsewhere");
    let seen = recv(&told, "the handler to be told");
    assert_eq!(
        seen.heartbeat,
        format!("job {id} was cancelled by night shift: runaway report; stop this attempt")
    );
    worker.shutdown(Duration::from_secs(10)).expect("shutdown");
    assert_cancelled_while_running(&env, id, "night shift", "runaway report");
}

/// A handler's heartbeat after a cancel it has not yet been told of (here: `drain`, which
/// has no worker to tell it) fails saying the job was cancelled, by whom and why.
#[test]
fn a_heartbeat_after_a_cancel_elsewhere_says_the_job_was_cancelled() {
    let env = setup();
    let id = env
        .queue
        .enqueue(NewJob::new("self_cancelling", json!({})))
        .expect("enqueue");
    let elsewhere = env.open_another();
    let (tx, rx) = unbounded();
    let builder = Worker::builder(&env.queue).handler(
        "self_cancelling",
        move |ctx: &JobContext| -> Result<(), JobError> {
            elsewhere
                .cancel_as(ctx.id(), "ana", "duplicate")
                .expect("cancel while it runs");
            let _ = tx.send(ctx.heartbeat().map_err(|e| e.to_string()));
            Ok(())
        },
    );
    testing::drain(&builder).expect("drain");
    assert_eq!(
        rx.try_recv().expect("the handler ran"),
        Err(format!(
            "job {id} was cancelled by ana: duplicate; stop this attempt"
        ))
    );
    let j = job(&env, id);
    assert_eq!(j.status, JobStatus::Cancelled);
    assert_eq!(j.cancelled_by.as_deref(), Some("ana"));
}

/// A job claimed ahead (waiting in the worker behind a long one) and cancelled there is
/// never started: its handler is not called, and the worker goes on with the next job.
#[test]
fn a_job_cancelled_while_it_waits_in_the_worker_never_starts() {
    let env = setup();
    let gate = Latch::new();
    let (ran_tx, ran) = unbounded::<i64>();
    let ids = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("blocker", json!({})),
            NewJob::new("waiter", json!({})),
        ])
        .expect("enqueue");
    let (blocker, waiter) = (ids[0], ids[1]);
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .concurrency(1)
        .handler("blocker", {
            let gate = gate.clone();
            let ran_tx = ran_tx.clone();
            move |ctx: &JobContext| -> Result<(), JobError> {
                let _ = ran_tx.send(ctx.id());
                assert!(gate.wait(WAIT), "the test never let the blocker finish");
                Ok(())
            }
        })
        .handler("waiter", move |ctx: &JobContext| -> Result<(), JobError> {
            let _ = ran_tx.send(ctx.id());
            Ok(())
        })
        .start()
        .expect("start");
    let _open = gate.open_on_drop();
    assert_eq!(recv(&ran, "the blocker to start"), blocker);
    // Claimed together with the blocker (the prefetch), it waits for the only thread.
    wait_running(&env, waiter);
    env.queue
        .cancel_as(waiter, "ops", "not needed")
        .expect("cancel the waiting job");
    gate.open();
    wait_status(&events, blocker, JobStatus::Succeeded);
    let next = env
        .queue
        .enqueue(NewJob::new("waiter", json!({})))
        .expect("enqueue");
    wait_status(&events, next, JobStatus::Succeeded);
    worker.shutdown(Duration::from_secs(10)).expect("shutdown");
    let calls: Vec<i64> = ran.try_iter().collect();
    assert_eq!(calls, vec![next], "the cancelled job never started");
    let j = job(&env, waiter);
    assert_eq!(j.status, JobStatus::Cancelled);
    assert_eq!(j.cancelled_by.as_deref(), Some("ops"));
}

/// Who and why are kept for a waiting job too; `Queue::cancel` says `app`; a handler's own
/// cancel says `handler` with its reason; finished and unknown jobs are refused, changing
/// nothing.
#[test]
fn who_cancelled_is_kept_and_finished_jobs_are_refused() {
    let env = setup();
    let enqueue = |job_type: &str| {
        env.queue
            .enqueue(NewJob::new(job_type, json!({})))
            .expect("enqueue")
    };
    let plain = enqueue("later");
    let named = enqueue("later");
    let by_handler = enqueue("gives_up");
    let succeeded = enqueue("fine");
    let builder = Worker::builder(&env.queue)
        .handler("gives_up", |_: &JobContext| {
            Err(JobError::cancel("the account was deleted"))
        })
        .handler("fine", |_: &JobContext| Ok(()));
    testing::drain(&builder).expect("drain");

    env.queue.cancel(plain).expect("cancel");
    env.queue.cancel_as(named, "ana", "").expect("cancel_as");
    let who = |id| {
        let j = job(&env, id);
        assert_eq!(j.status, JobStatus::Cancelled);
        (j.cancelled_by, j.cancel_reason)
    };
    assert_eq!(who(plain), (Some("app".into()), None));
    assert_eq!(
        who(named),
        (Some("ana".into()), None),
        "an empty reason is none"
    );
    assert_eq!(
        who(by_handler),
        (
            Some("handler".into()),
            Some("the account was deleted".into())
        )
    );
    assert!(env.queue.attempts(plain).expect("attempts").is_empty());

    for id in [succeeded, by_handler] {
        let before = job(&env, id);
        let err = env
            .queue
            .cancel_as(id, "ana", "again")
            .expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidState);
        assert!(
            err.to_string()
                .contains("only queued, failed or running jobs can be cancelled"),
            "{err}"
        );
        assert_eq!(job(&env, id), before, "nothing changed");
    }
    let err = env.queue.cancel(999_999).expect_err("unknown");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let stats = env.queue.stats().expect("stats");
    assert_eq!(stats.count(JobStatus::Cancelled), 3);
    assert_eq!(stats.count(JobStatus::Succeeded), 1);
}

/// Jobs of one type, some matching by their payload, one by its last error, one running,
/// next to ones that must not be touched (another type, finished ones).
struct Bulk {
    /// The jobs a cancel of `mail` matching "spring-7" takes, oldest first.
    matching: Vec<i64>,
    running: i64,
    others: Vec<i64>,
}

fn bulk_fixture(env: &TestEnv) -> Bulk {
    let enqueue = |job_type: &str, payload: serde_json::Value| {
        env.queue
            .enqueue(NewJob::new(job_type, payload))
            .expect("enqueue")
    };
    let by_payload = enqueue(
        "mail",
        json!({"campaign": "SPRING-7", "to": "a@example.com"}),
    );
    let by_error = enqueue("mail", json!({"campaign": "x", "to": "b@example.com"}));
    let running = enqueue(
        "mail",
        json!({"campaign": "spring-7", "to": "c@example.com"}),
    );
    let other_campaign = enqueue("mail", json!({"campaign": "autumn", "to": "d@example.com"}));
    let other_type = enqueue("sms", json!({"campaign": "spring-7"}));
    let finished = enqueue(
        "mail",
        json!({"campaign": "spring-7", "to": "e@example.com"}),
    );
    let now = env.queue.now_ms();
    env.sql_exec(&format!(
        "UPDATE jobs SET status = 'failed', attempts = 1, last_error = 'template spring-7 missing'
           WHERE id = {by_error};
         UPDATE jobs SET status = 'running', attempts = 1, locked_by = 'w9', started_at = {now},
                locked_until = {} WHERE id = {running};
         UPDATE jobs SET status = 'succeeded', attempts = 1, finished_at = {now}
           WHERE id = {finished};",
        now + 600_000
    ));
    Bulk {
        matching: vec![by_payload, by_error, running],
        running,
        others: vec![other_campaign, other_type, finished],
    }
}

/// `cancel_matching` takes every waiting or running job of the type whose payload or last
/// error holds the text (either case), in one transaction; its dry run names the same jobs
/// and changes nothing.
#[test]
fn bulk_cancel_takes_matching_waiting_and_running_jobs_and_a_dry_run_changes_nothing() {
    let env = setup();
    let b = bulk_fixture(&env);
    let before: Vec<_> = b.matching.iter().map(|&id| job(&env, id)).collect();
    let would = env
        .queue
        .cancel_matching_dry_run("mail", Some("Spring-7"))
        .expect("dry run");
    assert_eq!(would, b.matching);
    let after: Vec<_> = b.matching.iter().map(|&id| job(&env, id)).collect();
    assert_eq!(before, after, "a dry run changes nothing");
    assert!(env.queue.attempts(b.running).expect("attempts").is_empty());

    let cancelled = env
        .queue
        .cancel_matching("mail", Some("Spring-7"), "ops", "wrong campaign")
        .expect("bulk cancel");
    assert_eq!(cancelled, b.matching);
    for &id in &b.matching {
        let j = job(&env, id);
        assert_eq!(j.status, JobStatus::Cancelled, "job {id}");
        assert_eq!(j.cancel_reason.as_deref(), Some("wrong campaign"));
    }
    let history = env.queue.attempts(b.running).expect("attempts");
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].outcome.as_str(), "cancelled");
    for &id in &b.others {
        assert_ne!(job(&env, id).status, JobStatus::Cancelled, "job {id}");
    }
    assert_eq!(
        env.queue
            .cancel_matching("mail", Some("spring-7"), "ops", "again")
            .expect("nothing left"),
        Vec::<i64>::new()
    );
    // Without a text: every waiting or running job of the type.
    let all = env
        .queue
        .cancel_matching("mail", None, "ops", "all of it")
        .expect("bulk cancel");
    assert_eq!(all, vec![b.others[0]]);
    assert_eq!(
        env.queue
            .stats()
            .expect("stats")
            .count(JobStatus::Cancelled),
        4
    );
}

/// One job the database refuses to cancel (here a unique index someone added on the
/// attempt history, which the running job's cancelled row would break) and none is
/// cancelled; the dry run gives the same refusal.
#[test]
fn bulk_cancel_is_all_or_nothing() {
    let env = setup();
    let b = bulk_fixture(&env);
    env.sql_exec(&format!(
        "CREATE UNIQUE INDEX one_row_per_attempt ON job_attempts (job_id, attempt);
         INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome)
         VALUES ({}, 1, 'w9', 0, 0, 'lost');",
        b.running
    ));
    let before: Vec<_> = b.matching.iter().map(|&id| job(&env, id)).collect();
    let refused = env
        .queue
        .cancel_matching("mail", Some("spring-7"), "ops", "wrong campaign")
        .expect_err("refused");
    assert!(
        refused.to_string().starts_with(&format!(
            "bulk cancel refused at job {}, nothing was cancelled",
            b.running
        )),
        "{refused}"
    );
    let dry = env
        .queue
        .cancel_matching_dry_run("mail", Some("spring-7"))
        .expect_err("the dry run is refused the same way");
    assert_eq!(dry.to_string(), refused.to_string());
    let after: Vec<_> = b.matching.iter().map(|&id| job(&env, id)).collect();
    assert_eq!(before, after, "nothing was cancelled");
    assert_eq!(
        env.queue
            .stats()
            .expect("stats")
            .count(JobStatus::Cancelled),
        0
    );
}
