//! Stopping, crashing and contention: graceful shutdown lets running handlers
//! finish within the grace and releases the rest (prefetched jobs at once); after shutdown
//! nothing runs; the reaper makes a crashed worker's jobs due again (or dead when their
//! attempts are spent) and never touches a live lease; a database locked by another
//! connection makes the worker wait, never fail a job.

use std::time::Duration;

use crossbeam_channel::unbounded;
use litejobs::{testing, ErrorKind, JobError, JobStatus, NewJob, Queue, RetryPolicy, Worker};
use serde_json::json;

use crate::support::scripted::{
    history, job, outcomes, recv, signal_on_thread_exit, stop, wait_all, wait_bound, wait_finished,
    wait_reaped, wait_started, wait_status, Latch, ScriptedHandler, Step, WAIT,
};
use crate::support::{setup, sqlite_only, TestEnv, START_MS};

fn released_rows(env: &TestEnv, id: i64) -> Vec<(i64, String, Option<String>)> {
    history(&env.queue, id)
        .into_iter()
        .map(|a| (a.attempt, a.outcome.to_string(), a.error))
        .collect()
}

fn assert_released(env: &TestEnv, id: i64) {
    let j = job(&env.queue, id);
    assert_eq!(j.status, JobStatus::Queued, "job {id} is back to queued");
    assert_eq!(j.attempts, 0, "job {id}: a released attempt is not spent");
    assert_eq!(
        (j.locked_by, j.locked_until),
        (None, None),
        "job {id}: lease gone"
    );
    let rows = released_rows(env, id);
    assert_eq!(rows.len(), 1, "job {id}: {rows:?}");
    assert_eq!((rows[0].0, rows[0].1.as_str()), (1, "released"), "job {id}");
}

#[test]
fn shutdown_waits_for_a_running_handler_and_releases_prefetched_jobs_at_once() {
    let env = setup();
    let gate = Latch::new();
    let (exit_tx, exit_rx) = unbounded::<()>();
    let handler = ScriptedHandler::new().then(Step::run({
        let gate = gate.clone();
        move |_| {
            signal_on_thread_exit(exit_tx.clone());
            gate.wait(WAIT * 2);
            Ok(())
        }
    }));
    let ids = env
        .queue
        .enqueue_batch(
            (0..6)
                .map(|n| NewJob::new("t", json!({ "n": n })))
                .collect(),
        )
        .expect("enqueue_batch");
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("t", handler.clone())
        .concurrency(1)
        .start()
        .expect("worker starts");
    let _release_on_failure = gate.open_on_drop();
    let running = handler.wait_started("the first job");
    assert_eq!(running.id, ids[0]);
    let due_at = job(&env.queue, ids[1]).run_at;
    env.clock.advance(Duration::from_secs(10));

    let stopping = std::thread::spawn(move || worker.shutdown(wait_bound()));
    // Shutdown gives the claimed-but-unstarted job back before waiting for the handler (a
    // thread starts with one job waiting for it); the other four were never claimed.
    wait_all(&events, &ids[1..2], JobStatus::Queued);
    assert_eq!(job(&env.queue, ids[0]).status, JobStatus::Running);
    gate.open();
    let result = stopping.join().expect("the shutdown thread did not panic");
    assert!(result.is_ok(), "finished within the grace: {result:?}");
    assert!(
        exit_rx.try_recv().is_ok(),
        "shutdown returns once the handler threads have ended (it joins them)"
    );

    assert_eq!(wait_finished(&events, ids[0]).status, JobStatus::Succeeded);
    assert_eq!(job(&env.queue, ids[0]).status, JobStatus::Succeeded);
    assert_released(&env, ids[1]);
    assert_eq!(
        job(&env.queue, ids[1]).run_at,
        due_at,
        "a released job keeps its run time, and so its place in line"
    );
    for &id in &ids[2..] {
        let untouched = job(&env.queue, id);
        assert_eq!(
            (untouched.status, untouched.attempts),
            (JobStatus::Queued, 0)
        );
    }
    assert_eq!(handler.call_ids(), vec![ids[0]], "nothing else ran");
    // Released jobs run normally later, with their first attempt.
    let report =
        testing::drain(&Worker::builder(&env.queue).handler("t", handler.clone())).expect("drain");
    assert_eq!(report.succeeded, 5, "{report:?}");
    assert!(handler.calls()[1..].iter().all(|c| c.attempt == 1));
    assert_eq!(
        handler.call_ids()[1..],
        ids[1..],
        "the released job runs first again"
    );
}

#[test]
fn a_handler_still_running_after_the_grace_is_released_and_shutdown_reports_it() {
    let env = setup();
    let gate = Latch::new();
    let (late_tx, late_rx) = unbounded::<bool>();
    let (exit_tx, exit_rx) = unbounded::<()>();
    let handler = ScriptedHandler::new().then(Step::run({
        let gate = gate.clone();
        move |ctx| {
            signal_on_thread_exit(exit_tx.clone());
            gate.wait(WAIT * 2);
            let _ = late_tx.send(ctx.should_stop());
            ctx.set_result(json!("late"));
            Ok(())
        }
    }));
    let id = env
        .queue
        .enqueue(NewJob::new("t", json!({})))
        .expect("enqueue");
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("t", handler.clone())
        .concurrency(1)
        .start()
        .expect("worker starts");
    let _release_on_failure = gate.open_on_drop();
    handler.wait_started("the job");
    env.clock.advance(Duration::from_secs(7));

    let err = worker
        .shutdown(Duration::from_millis(200))
        .expect_err("a handler still running after the grace is reported");
    assert_eq!(err.kind(), ErrorKind::ShutdownTimeout, "{err}");
    assert!(
        late_rx.try_recv().is_err(),
        "shutdown returned after the grace, without waiting for the stuck handler"
    );
    assert_eq!(wait_finished(&events, id).status, JobStatus::Queued);
    assert_released(&env, id);
    let rows = released_rows(&env, id);
    assert!(
        rows[0]
            .2
            .as_deref()
            .unwrap_or_default()
            .contains("shutdown"),
        "{rows:?}"
    );
    let attempt = &history(&env.queue, id)[0];
    assert_eq!(
        (attempt.started_at, attempt.duration_ms),
        (Some(START_MS), Some(7_000)),
        "the released attempt's history says how long it ran: {attempt:?}"
    );

    gate.open();
    assert!(
        recv(&late_rx, "the abandoned handler to return"),
        "should_stop() is true once the grace is over"
    );
    recv(&exit_rx, "the abandoned handler's thread to end");
    let j = job(&env.queue, id);
    assert_eq!(j.status, JobStatus::Queued, "the late result was discarded");
    assert_eq!(j.result, None, "the late result was discarded");

    // Another worker takes the released job; its attempt was not spent.
    let events = env.queue.subscribe();
    let next = Worker::builder(&env.queue)
        .handler("t", handler.clone())
        .start()
        .expect("second worker starts");
    let done = wait_finished(&events, id);
    stop(next);
    assert_eq!((done.status, done.attempt), (JobStatus::Succeeded, 1));
}

#[test]
fn after_shutdown_or_drop_no_worker_thread_runs_handlers() {
    for use_drop in [false, true] {
        let env = setup();
        let handler = ScriptedHandler::new();
        let events = env.queue.subscribe();
        let worker = Worker::builder(&env.queue)
            .handler("t", handler.clone())
            .concurrency(2)
            .queue("reports", 1)
            .poll_interval(Duration::from_millis(20))
            .start()
            .expect("worker starts");
        let first = env
            .queue
            .enqueue(NewJob::new("t", json!({})))
            .expect("enqueue");
        assert_eq!(wait_finished(&events, first).status, JobStatus::Succeeded);
        if use_drop {
            drop(worker);
        } else {
            stop(worker);
        }

        let after = env
            .queue
            .enqueue_batch(vec![
                NewJob::new("t", json!({})),
                NewJob::new("t", json!({})).queue("reports"),
            ])
            .expect("enqueue after shutdown");
        env.queue.notify();
        for &id in &after {
            let j = job(&env.queue, id);
            assert_eq!(
                (j.status, j.attempts),
                (JobStatus::Queued, 0),
                "[drop: {use_drop}]"
            );
        }
        // Claimed here, on the test thread: no worker thread took them meanwhile.
        let report = testing::drain(
            &Worker::builder(&env.queue)
                .handler("t", handler.clone())
                .queue("reports", 1),
        )
        .expect("drain");
        assert_eq!(report.succeeded, 2, "[drop: {use_drop}] {report:?}");
        let me = std::thread::current().name().map(str::to_string);
        let calls = handler.calls();
        assert_eq!(calls.len(), 3, "[drop: {use_drop}] {calls:?}");
        assert!(
            calls[1..].iter().all(|c| c.thread == me),
            "[drop: {use_drop}] after shutdown only drain ran handlers: {calls:?}"
        );
    }
}

/// Makes job `id` look like a crashed worker's: running under `by`'s lease until
/// `locked_until`, with `attempts` spent.
fn crash(env: &TestEnv, id: i64, by: &str, locked_until: i64, attempts: i64) {
    assert_eq!(
        env.sql_i64(&format!("SELECT COUNT(*) FROM jobs WHERE id = {id}")),
        1
    );
    env.sql_exec(&format!(
        "UPDATE jobs SET status = 'running', locked_by = '{by}', locked_until = {locked_until},
                         attempts = {attempts}, started_at = {}
         WHERE id = {id}",
        START_MS - 70_000
    ));
}

#[test]
fn the_reaper_makes_expired_leases_due_again_or_dead_and_leaves_live_ones() {
    let env = setup();
    let ids = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("t", json!({"case": "crashed"})),
            NewJob::new("t", json!({"case": "spent"})).max_attempts(3),
            NewJob::new("t", json!({"case": "live"})),
        ])
        .expect("enqueue_batch");
    let (crashed, spent, live) = (ids[0], ids[1], ids[2]);
    crash(&env, crashed, "dead-worker", START_MS - 1, 1);
    crash(&env, spent, "dead-worker", START_MS - 1, 3);
    crash(&env, live, "busy-worker", START_MS + 60_000, 1);

    assert_eq!(env.queue.reap_expired_leases().expect("reap"), 2);

    let j = job(&env.queue, crashed);
    assert_eq!(j.status, JobStatus::Failed, "due again");
    assert_eq!(j.run_at, START_MS, "due at once");
    assert_eq!(j.attempts, 1, "the lost attempt counts");
    assert_eq!((j.locked_by, j.locked_until), (None, None));
    let rows = history(&env.queue, crashed);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0].attempt, rows[0].outcome.as_str()), (1, "lost"));
    assert_eq!(rows[0].worker.as_deref(), Some("dead-worker"));
    assert!(
        rows[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("dead-worker"),
        "{rows:?}"
    );

    let j = job(&env.queue, spent);
    assert_eq!(j.status, JobStatus::Dead, "attempts spent: no crash loop");
    assert_eq!(j.finished_at, Some(START_MS));
    let error = j.last_error.unwrap_or_default();
    assert!(error.contains("worker died"), "{error:?}");
    assert_eq!(outcomes(&env.queue, spent), vec![(3, "lost".to_string())]);

    let j = job(&env.queue, live);
    assert_eq!(j.status, JobStatus::Running, "a live lease is never taken");
    assert_eq!(j.locked_by.as_deref(), Some("busy-worker"));
    assert_eq!(j.locked_until, Some(START_MS + 60_000));
    assert!(history(&env.queue, live).is_empty());

    assert_eq!(
        env.queue.reap_expired_leases().expect("reap"),
        0,
        "idempotent"
    );
    let handler = ScriptedHandler::new();
    let report =
        testing::drain(&Worker::builder(&env.queue).handler("t", handler.clone())).expect("drain");
    assert_eq!(report.succeeded, 1, "only the reaped job runs: {report:?}");
    assert_eq!(handler.call_ids(), vec![crashed]);
    assert_eq!(handler.calls()[0].attempt, 2);
}

#[test]
fn a_started_worker_reaps_at_start_up() {
    let env = setup();
    let id = env
        .queue
        .enqueue(NewJob::new("t", json!({})))
        .expect("enqueue");
    crash(&env, id, "dead-worker", START_MS - 1, 1);
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("t", ScriptedHandler::new())
        .reap_interval(Duration::from_secs(3600))
        .start()
        .expect("worker starts");
    assert_eq!(wait_reaped(&events), 1);
    assert_eq!(
        wait_started(&events, id),
        2,
        "due again and run as attempt 2"
    );
    let done = wait_finished(&events, id);
    stop(worker);
    assert_eq!((done.status, done.attempt), (JobStatus::Succeeded, 2));
    assert_eq!(
        outcomes(&env.queue, id),
        vec![(1, "lost".to_string()), (2, "succeeded".to_string())]
    );
}

#[test]
fn a_started_worker_reaps_periodically_but_never_a_live_lease() {
    let env = setup();
    let ids = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("t", json!({"case": "held elsewhere"})),
            NewJob::new("t", json!({"case": "normal"})),
        ])
        .expect("enqueue_batch");
    let (held, normal) = (ids[0], ids[1]);
    crash(&env, held, "other-worker", START_MS + 1_000, 1);
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("t", ScriptedHandler::new())
        .reap_interval(Duration::from_millis(20))
        .poll_interval(Duration::from_millis(20))
        .start()
        .expect("worker starts");
    // The start-up round (reap, then claim) is over once the normal job ran.
    assert_eq!(wait_finished(&events, normal).status, JobStatus::Succeeded);
    let j = job(&env.queue, held);
    assert_eq!(j.status, JobStatus::Running, "a live lease is left alone");
    assert_eq!(j.locked_by.as_deref(), Some("other-worker"));

    env.clock.advance(Duration::from_secs(2));
    assert_eq!(wait_reaped(&events), 1, "reaped by the periodic reaper");
    let done = wait_finished(&events, held);
    stop(worker);
    assert_eq!((done.status, done.attempt), (JobStatus::Succeeded, 2));
}

/// A queue on the test file with a short busy timeout (its own pool and write gate, like
/// another process would have).
fn short_busy_queue(env: &TestEnv) -> Queue {
    Queue::builder()
        .clock(env.clock.clone())
        .busy_timeout(Duration::from_millis(100))
        .open(&env.path)
        .expect("opening a queue with a short busy timeout")
}

/// Shows that the write lock is held: writes with a 100 ms busy timeout fail `n` times in a
/// row (so the lock was held for at least `n` × 100 ms, long enough for the worker's own
/// 100 ms busy timeout to run out while it tried to write).
fn assert_locked(probe: &Queue, n: usize) {
    for i in 0..n {
        let err = probe
            .enqueue(NewJob::new("probe", json!({})))
            .expect_err("the database is locked by the raw connection");
        assert!(err.is_busy(), "probe {i}: {err:?}");
    }
}

#[test]
fn a_database_locked_by_another_connection_delays_jobs_but_never_fails_them() {
    // SQLite's write lock, held by a raw connection's BEGIN IMMEDIATE.
    if sqlite_only() {
        return;
    }
    let env = setup();
    let queue = short_busy_queue(&env);
    let probe = short_busy_queue(&env);
    let events = queue.subscribe();
    let first = queue
        .enqueue_batch(
            (0..5)
                .map(|n| NewJob::new("t", json!({ "n": n })))
                .collect(),
        )
        .expect("enqueue_batch");
    let gate = Latch::new();
    let (returned_tx, returned_rx) = unbounded::<i64>();
    let blocked = ScriptedHandler::always(Step::run({
        let gate = gate.clone();
        move |ctx| {
            gate.wait(WAIT * 2);
            let _ = returned_tx.send(ctx.id());
            Ok(())
        }
    }));
    let handler = ScriptedHandler::new();

    // 1. Locked before the worker starts: its claims fail with busy and are retried.
    let locker = env.raw();
    locker
        .execute_batch("BEGIN IMMEDIATE")
        .expect("raw BEGIN IMMEDIATE");
    let worker = Worker::builder(&queue)
        .handler("t", handler.clone())
        .handler("blocked", blocked.clone())
        .concurrency(3)
        .start()
        .expect("worker starts");
    let _release_on_failure = gate.open_on_drop();
    assert_locked(&probe, 5);
    for &id in &first {
        assert_eq!(
            job(&queue, id).status,
            JobStatus::Queued,
            "nothing claimed yet"
        );
    }
    assert_eq!(handler.call_count(), 0);
    locker.execute_batch("COMMIT").expect("raw COMMIT");
    wait_all(&events, &first, JobStatus::Succeeded);

    // 2. Locked while handlers run: their outcomes cannot be written until the lock goes.
    let second = queue
        .enqueue_batch(
            (0..3)
                .map(|n| NewJob::new("blocked", json!({ "n": n })))
                .collect(),
        )
        .expect("enqueue_batch");
    for _ in &second {
        blocked.wait_started("the three blocked jobs");
    }
    locker
        .execute_batch("BEGIN IMMEDIATE")
        .expect("raw BEGIN IMMEDIATE");
    gate.open();
    for _ in &second {
        recv(&returned_rx, "the blocked handlers to return");
    }
    assert_locked(&probe, 5);
    for &id in &second {
        assert_eq!(
            job(&queue, id).status,
            JobStatus::Running,
            "outcomes wait for the lock"
        );
    }
    locker.execute_batch("COMMIT").expect("raw COMMIT");
    wait_all(&events, &second, JobStatus::Succeeded);
    stop(worker);

    for &id in first.iter().chain(&second) {
        let j = job(&queue, id);
        assert_eq!(
            (j.status, j.attempts),
            (JobStatus::Succeeded, 1),
            "job {id}"
        );
    }
    let mentions: i64 = env
        .raw()
        .query_row(
            "SELECT COUNT(*) FROM job_attempts
             WHERE lower(error) LIKE '%locked%' OR lower(error) LIKE '%busy%'",
            [],
            |row| row.get(0),
        )
        .expect("counting attempt rows");
    assert_eq!(mentions, 0, "a busy database never becomes a job failure");
}

#[test]
fn ctx_once_waits_out_a_locked_database_instead_of_failing_the_attempt() {
    // SQLite's write lock, held by a raw connection's BEGIN IMMEDIATE.
    if sqlite_only() {
        return;
    }
    let env = setup();
    let queue = short_busy_queue(&env);
    let probe = short_busy_queue(&env);
    let events = queue.subscribe();
    let gate = Latch::new();
    let effects = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (effect_tx, effect_rx) = unbounded::<()>();
    let (once_tx, once_rx) = unbounded::<Result<bool, String>>();
    let handler = ScriptedHandler::always(Step::run({
        let (gate, effects) = (gate.clone(), effects.clone());
        move |ctx| {
            let ran = ctx.once(|| {
                effects.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = effect_tx.send(());
                gate.wait(WAIT * 2);
                Ok(())
            });
            let _ = once_tx.send(match &ran {
                Ok(ran) => Ok(*ran),
                Err(e) => Err(e.message().to_string()),
            });
            ran.map(|_| ())
        }
    }));
    let worker = Worker::builder(&queue)
        .handler("send_email", handler)
        .retry_policy(
            "send_email",
            RetryPolicy::schedule(vec![Duration::from_secs(1)]),
        )
        .start()
        .expect("worker starts");
    let _release_on_failure = gate.open_on_drop();
    let id = queue
        .enqueue(NewJob::new("send_email", json!({"user_id": 7})))
        .expect("enqueue");
    recv(&effect_rx, "the side effect to start");

    // Another process holds the write lock while the effect is being recorded.
    let locker = env.raw();
    locker
        .execute_batch("BEGIN IMMEDIATE")
        .expect("raw BEGIN IMMEDIATE");
    gate.open();
    assert_locked(&probe, 5);
    locker.execute_batch("COMMIT").expect("raw COMMIT");

    let first = recv(&once_rx, "ctx.once to return");
    let mut done = wait_finished(&events, id);
    if done.status == JobStatus::Failed {
        // Let the retry run, to see whether the side effect repeats.
        env.clock.advance(Duration::from_secs(1));
        queue.notify();
        done = wait_status(&events, id, JobStatus::Succeeded);
    }
    stop(worker);
    let rows = history(&queue, id);
    assert_eq!(
        effects.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the side effect ran more than once because recording it met a busy database; \
         ctx.once returned {first:?}; history: {rows:?}"
    );
    assert_eq!(first, Ok(true), "ctx.once ran and recorded the effect");
    assert_eq!((done.status, done.attempt), (JobStatus::Succeeded, 1));
    assert!(
        rows.is_empty(),
        "no attempt failed because of the lock: {rows:?}"
    );
}

#[test]
fn an_idle_worker_shuts_down_cleanly_even_with_a_zero_grace() {
    let env = setup();
    let worker = Worker::builder(&env.queue)
        .handler("t", |_: &litejobs::JobContext| -> Result<(), JobError> {
            Ok(())
        })
        .start()
        .expect("worker starts");
    worker
        .shutdown(Duration::ZERO)
        .expect("nothing was running, so even a zero grace is enough");
}

/// Shutdown ends as soon as nothing runs and every outcome is written, however long the
/// grace: a service restart must not wait out a grace meant for slow handlers.
#[test]
fn shutdown_returns_once_the_work_is_written_without_waiting_out_a_long_grace() {
    let env = setup();
    let events = env.queue.subscribe();
    let id = env
        .queue
        .enqueue(NewJob::new("t", json!({})))
        .expect("enqueue");
    let worker = Worker::builder(&env.queue)
        .handler("t", |_: &litejobs::JobContext| -> Result<(), JobError> {
            Ok(())
        })
        .start()
        .expect("worker starts");
    assert_eq!(wait_finished(&events, id).status, JobStatus::Succeeded);
    let (done_tx, done_rx) = unbounded();
    std::thread::spawn(move || {
        let _ = done_tx.send(worker.shutdown(Duration::from_secs(24 * 3600)));
    });
    recv(&done_rx, "shutdown with a day of grace to return once idle").expect("a clean shutdown");
}

#[test]
fn a_retry_released_at_shutdown_keeps_its_earlier_attempts_and_is_queued_again() {
    let env = setup();
    let gate = Latch::new();
    let handler = ScriptedHandler::new()
        .then(Step::retry("first try failed"))
        .then(Step::Block(gate.clone()));
    let id = env
        .queue
        .enqueue(NewJob::new("t", json!({})))
        .expect("enqueue");
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("t", handler.clone())
        .retry_policy("t", RetryPolicy::schedule(vec![Duration::from_secs(1)]))
        .start()
        .expect("worker starts");
    let _release_on_failure = gate.open_on_drop();
    assert_eq!(wait_finished(&events, id).status, JobStatus::Failed);
    env.clock.advance(Duration::from_secs(1));
    env.queue.notify();
    let second = handler.wait_started("attempt 1");
    let second = if second.attempt == 1 {
        handler.wait_started("attempt 2")
    } else {
        second
    };
    assert_eq!(second.attempt, 2);

    let err = worker
        .shutdown(Duration::from_millis(100))
        .expect_err("attempt 2 is still running");
    assert_eq!(err.kind(), ErrorKind::ShutdownTimeout);
    let released = wait_finished(&events, id);
    let j = job(&env.queue, id);
    assert_eq!(j.attempts, 1, "the released attempt 2 is not spent");
    assert_eq!(
        j.status,
        JobStatus::Queued,
        "released jobs wait as queued, with their earlier attempts kept"
    );
    assert_eq!(j.run_at, START_MS + 1_000, "due at once");
    assert_eq!(
        released.status, j.status,
        "the event tells the written status"
    );
    assert_eq!(
        outcomes(&env.queue, id),
        vec![(1, "failed".to_string()), (2, "released".to_string())]
    );
    gate.open();
}
