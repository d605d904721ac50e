//! Timeouts, deadlines and heartbeats: an overrunning attempt is recorded as
//! timed out and retried by policy while a new thread keeps the worker's concurrency, and
//! its late result is discarded; a job's own timeout wins over its type's; handlers see
//! their deadline; heartbeats extend the lease and save progress, and fail once the lease
//! was reaped.

use std::time::{Duration, SystemTime};

use crossbeam_channel::{unbounded, Receiver, Sender};
use litejobs::{ErrorKind, JobError, JobStatus, NewJob, RetryPolicy, Worker};
use serde_json::{json, Value};

use crate::support::scripted::{
    at_ms, history, job, outcomes, recv, signal_on_thread_exit, stop, wait_each, wait_finished,
    wait_status, Latch, Runner, ScriptedHandler, Step, MODES, WAIT,
};
use crate::support::{setup, START_MS};

/// What the overrunning handler saw.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Start {
        deadline: SystemTime,
        timeout: Duration,
        should_stop: bool,
    },
    Late {
        should_stop: bool,
        heartbeat: Result<(), ErrorKind>,
    },
}

#[test]
fn an_overrunning_attempt_is_timed_out_retried_and_its_thread_replaced() {
    let env = setup();
    let gate = Latch::new();
    let (seen_tx, seen_rx) = unbounded::<Seen>();
    let (exit_tx, exit_rx) = unbounded::<()>();
    let slow = ScriptedHandler::new()
        .then(Step::run({
            let gate = gate.clone();
            move |ctx| {
                signal_on_thread_exit(exit_tx.clone());
                let _ = seen_tx.send(Seen::Start {
                    deadline: ctx.deadline(),
                    timeout: ctx.timeout(),
                    should_stop: ctx.should_stop(),
                });
                gate.wait(WAIT * 2);
                let _ = seen_tx.send(Seen::Late {
                    should_stop: ctx.should_stop(),
                    heartbeat: ctx.heartbeat().map_err(|e| e.kind()),
                });
                ctx.set_result(json!("stale result of the timed-out attempt"));
                Ok(())
            }
        }))
        .then(Step::SucceedWith(json!("second attempt")));
    let fast = ScriptedHandler::new();
    let ids = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("slow", json!({})),
            NewJob::new("fast", json!({})),
        ])
        .expect("enqueue_batch");
    let (slow_id, fast_id) = (ids[0], ids[1]);
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("slow", slow.clone())
        .handler("fast", fast.clone())
        .concurrency(1)
        .timeout("slow", Duration::from_millis(200))
        .retry_policy("slow", RetryPolicy::schedule(vec![Duration::from_secs(30)]))
        .start()
        .expect("worker starts");
    let _release_on_failure = gate.open_on_drop();

    let start = recv(&seen_rx, "the slow handler to start");
    assert_eq!(
        start,
        Seen::Start {
            deadline: at_ms(START_MS + 200),
            timeout: Duration::from_millis(200),
            should_stop: false,
        },
        "the deadline is the attempt's start plus its timeout"
    );

    // With one thread, the fast job can only run if the stuck thread was replaced.
    let done = wait_each(&events, &[slow_id, fast_id]);
    let (timed_out, fast_done) = (&done[0], &done[1]);
    assert_eq!(
        (timed_out.status, timed_out.attempt),
        (JobStatus::Failed, 1)
    );
    assert_eq!(timed_out.error.as_deref(), Some("timed out after 200 ms"));
    assert_eq!(fast_done.status, JobStatus::Succeeded);
    assert!(
        seen_rx.try_recv().is_err(),
        "the slow handler is still blocked while the fast job ran"
    );

    let j = job(&env.queue, slow_id);
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!(j.attempts, 1);
    assert_eq!(j.run_at, START_MS + 30_000, "retried by the type's policy");
    assert_eq!(j.last_error.as_deref(), Some("timed out after 200 ms"));
    assert_eq!((j.locked_by, j.locked_until), (None, None));
    let rows = history(&env.queue, slow_id);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].outcome.as_str(), "timed_out");
    assert_eq!(rows[0].error.as_deref(), Some("timed out after 200 ms"));

    gate.open();
    let late = recv(&seen_rx, "the released slow handler to report");
    assert_eq!(
        late,
        Seen::Late {
            should_stop: true,
            heartbeat: Err(ErrorKind::InvalidState),
        },
        "after its timeout an attempt is told to stop and has no lease"
    );
    recv(
        &exit_rx,
        "the replaced thread to end once its handler returned",
    );
    let j = job(&env.queue, slow_id);
    assert_eq!(j.status, JobStatus::Failed, "the late result was discarded");
    assert_eq!(j.result, None, "the late result was discarded");

    env.clock.advance(Duration::from_secs(30));
    env.queue.notify();
    let second = wait_finished(&events, slow_id);
    stop(worker);
    assert_eq!((second.status, second.attempt), (JobStatus::Succeeded, 2));
    assert_eq!(
        job(&env.queue, slow_id).result,
        Some(json!("second attempt"))
    );
    assert_eq!(
        outcomes(&env.queue, slow_id),
        vec![(1, "timed_out".to_string()), (2, "succeeded".to_string())]
    );
    assert_eq!(fast.call_ids(), vec![fast_id]);
}

#[test]
fn a_jobs_own_timeout_wins_over_its_types() {
    let env = setup();
    let gate = Latch::new();
    let handler = ScriptedHandler::always(Step::Block(gate.clone()));
    let id = env
        .queue
        .enqueue(
            NewJob::new("report_chunk", json!({"chunk": 3})).timeout(Duration::from_millis(200)),
        )
        .expect("enqueue");
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("report_chunk", handler.clone())
        .timeout("report_chunk", Duration::from_secs(3600))
        .start()
        .expect("worker starts");
    let _release_on_failure = gate.open_on_drop();
    let done = wait_finished(&events, id);
    assert_eq!(done.status, JobStatus::Failed);
    assert_eq!(done.error.as_deref(), Some("timed out after 200 ms"));
    assert_eq!(outcomes(&env.queue, id), vec![(1, "timed_out".to_string())]);
    gate.open();
    stop(worker);
    assert_eq!(job(&env.queue, id).status, JobStatus::Failed);
}

#[test]
fn handlers_see_their_timeout_and_deadline() {
    for mode in MODES {
        let env = setup();
        let (tx, rx) = unbounded::<(i64, SystemTime, Duration, bool)>();
        let handler = ScriptedHandler::always(Step::run(move |ctx| {
            let _ = tx.send((ctx.id(), ctx.deadline(), ctx.timeout(), ctx.should_stop()));
            Ok(())
        }));
        let ids = env
            .queue
            .enqueue_batch(vec![
                NewJob::new("report_chunk", json!({})),
                NewJob::new("report_chunk", json!({})).timeout(Duration::from_secs(45)),
            ])
            .expect("enqueue_batch");
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue)
                .handler("report_chunk", handler)
                .timeout("report_chunk", Duration::from_secs(90)),
        );
        run.attempt_all(&ids);
        run.finish();
        let mut seen: Vec<_> = rx.try_iter().collect();
        seen.sort_by_key(|s| s.0);
        assert_eq!(
            seen,
            vec![
                (
                    ids[0],
                    at_ms(START_MS + 90_000),
                    Duration::from_secs(90),
                    false
                ),
                (
                    ids[1],
                    at_ms(START_MS + 45_000),
                    Duration::from_secs(45),
                    false
                ),
            ],
            "[{mode:?}] deadline = start + timeout (the job's own, else its type's)"
        );
    }
}

/// What the test tells the long-running handler.
enum Cmd {
    /// `set_progress(value)` then `heartbeat()`, replying with the result.
    Heartbeat(Value),
    /// `set_progress(value)` only.
    Progress(Value),
    /// Return `Ok(())`.
    Finish,
}

/// A handler that does what the test commands, replying to heartbeats.
fn commanded(cmds: Receiver<Cmd>, replies: Sender<Result<(), ErrorKind>>) -> ScriptedHandler {
    ScriptedHandler::always(Step::run(move |ctx| loop {
        match cmds.recv_timeout(WAIT * 2) {
            Ok(Cmd::Heartbeat(progress)) => {
                ctx.set_progress(progress);
                let _ = replies.send(ctx.heartbeat().map_err(|e| e.kind()));
            }
            Ok(Cmd::Progress(progress)) => ctx.set_progress(progress),
            Ok(Cmd::Finish) => return Ok(()),
            Err(_) => return Err(JobError::retry("the test never finished the job")),
        }
    }))
}

#[test]
fn heartbeat_extends_the_lease_and_saves_progress() {
    let env = setup();
    let (cmd_tx, cmd_rx) = unbounded();
    let (reply_tx, reply_rx) = unbounded();
    let handler = commanded(cmd_rx, reply_tx);
    let id = env
        .queue
        .enqueue(NewJob::new("report_chunk", json!({"chunk": 1})))
        .expect("enqueue");
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("report_chunk", handler.clone())
        .worker_id("hb-worker")
        .default_timeout(Duration::from_secs(60))
        .lease_grace(Duration::from_secs(10))
        .reap_interval(Duration::from_secs(3600))
        .start()
        .expect("worker starts");
    handler.wait_started("the report chunk");

    let j = job(&env.queue, id);
    assert_eq!(j.status, JobStatus::Running);
    assert_eq!(j.locked_by.as_deref(), Some("hb-worker"));
    assert_eq!(
        j.locked_until,
        Some(START_MS + 70_000),
        "lease = timeout + grace"
    );

    env.clock.advance(Duration::from_secs(30));
    cmd_tx
        .send(Cmd::Heartbeat(json!({"rows": 100})))
        .expect("handler listening");
    assert_eq!(recv(&reply_rx, "the heartbeat's result"), Ok(()));
    let j = job(&env.queue, id);
    assert_eq!(j.status, JobStatus::Running);
    assert_eq!(
        j.locked_until,
        Some(START_MS + 30_000 + 70_000),
        "extended to now + timeout + grace"
    );
    assert_eq!(
        j.progress,
        Some(json!({"rows": 100})),
        "saved at the heartbeat"
    );

    cmd_tx
        .send(Cmd::Progress(json!({"rows": 250})))
        .expect("handler listening");
    cmd_tx.send(Cmd::Finish).expect("handler listening");
    let done = wait_finished(&events, id);
    stop(worker);
    assert_eq!(done.status, JobStatus::Succeeded);
    let j = job(&env.queue, id);
    assert_eq!(
        j.progress,
        Some(json!({"rows": 250})),
        "progress is saved when the attempt ends"
    );
    assert!(history(&env.queue, id).is_empty());
}

#[test]
fn heartbeat_after_the_lease_was_reaped_is_an_invalid_state_error() {
    let env = setup();
    let (cmd_tx, cmd_rx) = unbounded();
    let (reply_tx, reply_rx) = unbounded();
    let handler = commanded(cmd_rx, reply_tx);
    let id = env
        .queue
        .enqueue(NewJob::new("report_chunk", json!({"chunk": 2})))
        .expect("enqueue");
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("report_chunk", handler.clone())
        .concurrency(1)
        .default_timeout(Duration::from_secs(60))
        .lease_grace(Duration::from_secs(10))
        .reap_interval(Duration::from_secs(3600))
        .start()
        .expect("worker starts");
    let first = handler.wait_started("attempt 1");
    assert_eq!(first.attempt, 1);

    // The handler hangs past its lease (by the queue's clock); a reaper takes the job back.
    env.clock.advance(Duration::from_secs(71));
    assert_eq!(
        env.queue.reap_expired_leases().expect("reap"),
        1,
        "the expired lease is reaped"
    );
    // Due again at once, so the worker may already have claimed it as attempt 2.
    let j = job(&env.queue, id);
    assert!(
        matches!(
            (j.status, j.attempts),
            (JobStatus::Failed, 1) | (JobStatus::Running, 2)
        ),
        "due again after the reap: {:?}",
        (j.status, j.attempts)
    );
    assert_eq!(outcomes(&env.queue, id), vec![(1, "lost".to_string())]);

    cmd_tx
        .send(Cmd::Heartbeat(json!({"rows": 1})))
        .expect("handler listening");
    assert_eq!(
        recv(&reply_rx, "the heartbeat's result"),
        Err(ErrorKind::InvalidState),
        "a heartbeat without a lease tells the handler to stop"
    );
    cmd_tx.send(Cmd::Finish).expect("handler listening");

    // The job is due again and runs as attempt 2; attempt 1's late success is not written.
    let second = handler.wait_started("attempt 2 after the reap");
    assert_eq!(second.attempt, 2);
    cmd_tx.send(Cmd::Finish).expect("handler listening");
    let done = wait_finished(&events, id);
    stop(worker);
    assert_eq!(
        (done.status, done.attempt),
        (JobStatus::Succeeded, 2),
        "the first outcome written is attempt 2's"
    );
    assert_eq!(
        outcomes(&env.queue, id),
        vec![(1, "lost".to_string()), (2, "succeeded".to_string())]
    );
    assert_eq!(
        job(&env.queue, id).progress,
        None,
        "the stale heartbeat saved nothing"
    );
}

#[test]
fn a_prefetched_job_waiting_behind_a_long_one_is_not_charged_an_attempt_it_never_ran() {
    let env = setup();
    let gate = Latch::new();
    let chunk_handler = ScriptedHandler::always(Step::Block(gate.clone()));
    let email_handler = ScriptedHandler::new();
    let ids = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("report_chunk", json!({"chunk": 1})),
            NewJob::new("send_email", json!({"user_id": 3})).max_attempts(1),
        ])
        .expect("enqueue_batch");
    let (chunk, email) = (ids[0], ids[1]);
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("report_chunk", chunk_handler.clone())
        .handler("send_email", email_handler.clone())
        .handler("ping", ScriptedHandler::new())
        .concurrency(1)
        .queue("other", 1)
        .timeout("report_chunk", Duration::from_secs(3600))
        .timeout("send_email", Duration::from_secs(20))
        .lease_grace(Duration::from_secs(10))
        .reap_interval(Duration::from_secs(3600))
        .start()
        .expect("worker starts");
    let _release_on_failure = gate.open_on_drop();
    chunk_handler.wait_started("the long report chunk");
    let e = job(&env.queue, email);
    assert_eq!(
        e.status,
        JobStatus::Running,
        "the email was claimed with the chunk (prefetch) and waits for the one thread"
    );

    // A minute passes while the chunk runs (well within its hour); the worker stays alive
    // and busy: each step it writes the outcome of a job in its other queue.
    for _ in 0..6 {
        env.clock.advance(Duration::from_secs(10));
        let ping = env
            .queue
            .enqueue(NewJob::new("ping", json!({})).queue("other"))
            .expect("enqueue ping");
        assert_eq!(wait_finished(&events, ping).status, JobStatus::Succeeded);
    }
    // The reaper of another process on the same file looks at the leases.
    env.queue.reap_expired_leases().expect("reap");
    let e = job(&env.queue, email);
    let rows = history(&env.queue, email);
    assert!(
        e.status != JobStatus::Dead && rows.iter().all(|a| a.outcome.as_str() != "lost"),
        "the email never started, its worker is alive, yet it was reaped as lost \
         (status {}, last error {:?}, history {rows:?})",
        e.status,
        e.last_error
    );

    gate.open();
    assert_eq!(wait_finished(&events, chunk).status, JobStatus::Succeeded);
    let done = wait_status(&events, email, JobStatus::Succeeded);
    stop(worker);
    assert_eq!(done.attempt, 1);
    assert_eq!(email_handler.call_ids(), vec![email]);
}

#[test]
fn heartbeat_and_progress_also_work_under_drain() {
    let env = setup();
    let (tx, rx) = unbounded::<(Result<(), ErrorKind>, Option<i64>, Option<Value>)>();
    let handler = ScriptedHandler::always(Step::run({
        let (queue, clock) = (env.queue.clone(), env.clock.clone());
        move |ctx| {
            clock.advance(Duration::from_secs(30));
            ctx.set_progress(json!({"rows": 10}));
            let beat = ctx.heartbeat().map_err(|e| e.kind());
            let row = queue
                .job(ctx.id())
                .map_err(|e| JobError::retry(e.to_string()))?
                .ok_or_else(|| JobError::retry("job vanished"))?;
            let _ = tx.send((beat, row.locked_until, row.progress));
            Ok(())
        }
    }));
    let id = env
        .queue
        .enqueue(NewJob::new("report_chunk", json!({})))
        .expect("enqueue");
    let builder = Worker::builder(&env.queue)
        .handler("report_chunk", handler)
        .default_timeout(Duration::from_secs(60))
        .lease_grace(Duration::from_secs(10));
    let report = litejobs::testing::drain(&builder).expect("drain");
    assert_eq!(report.succeeded, 1, "{report:?}");
    let (beat, locked_until, progress) = recv(&rx, "the handler's report");
    assert_eq!(beat, Ok(()));
    assert_eq!(locked_until, Some(START_MS + 30_000 + 70_000));
    assert_eq!(progress, Some(json!({"rows": 10})));
    assert_eq!(job(&env.queue, id).progress, Some(json!({"rows": 10})));
}

/// A job prefetched behind a long one waited in the channel while its claim-time lease ran
/// down; when a thread takes it, its lease is first moved to cover the whole attempt (the
/// timeout plus the grace from now), so the reaper cannot take it back while it runs.
#[test]
fn a_prefetched_job_starts_with_a_lease_covering_its_whole_attempt() {
    let env = setup();
    let (first, second) = (Latch::new(), Latch::new());
    let handler = ScriptedHandler::new()
        .then(Step::run({
            let gate = first.clone();
            move |_| {
                gate.wait(WAIT);
                Ok(())
            }
        }))
        .then(Step::run({
            let gate = second.clone();
            move |_| {
                gate.wait(WAIT);
                Ok(())
            }
        }));
    let _open_on_failure = (first.open_on_drop(), second.open_on_drop());
    let ids = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("t", json!({ "n": 1 })),
            NewJob::new("t", json!({ "n": 2 })),
        ])
        .expect("enqueue");
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("t", handler.clone())
        .concurrency(1)
        .timeout("t", Duration::from_secs(60))
        .lease_grace(Duration::from_secs(10))
        // Only the test reaps here.
        .reap_interval(Duration::from_secs(3600))
        .start()
        .expect("worker starts");
    crate::support::scripted::wait_started(&events, ids[0]);
    // The second job, prefetched at START_MS, holds a lease to START_MS + 70 s: it would not
    // be renewed yet (that happens within half the grace of its end).
    assert_eq!(
        job(&env.queue, ids[1]).locked_until,
        Some(START_MS + 70_000)
    );
    env.clock.advance(Duration::from_secs(30));
    first.open();
    crate::support::scripted::wait_started(&events, ids[1]);
    let started = job(&env.queue, ids[1]);
    assert_eq!(
        started.locked_until,
        Some(START_MS + 30_000 + 60_000 + 10_000),
        "started at +30 s: its lease covers the 60 s timeout and the 10 s grace"
    );
    env.clock.set(START_MS + 97_000);
    assert_eq!(
        env.queue.reap_expired_leases().expect("reap"),
        0,
        "the running job's lease is live"
    );
    second.open();
    let done = wait_finished(&events, ids[1]);
    stop(worker);
    assert_eq!((done.status, done.attempt), (JobStatus::Succeeded, 1));
    assert!(
        history(&env.queue, ids[1]).is_empty(),
        "it ran as soon as its lease was moved, without being given back first"
    );
}

/// A job prefetched behind a long one keeps its lease while it waits: the worker renews it
/// before it runs out (within half the grace of its end), on its own, so the reaper of any
/// process never takes back (and charges) a job that has not run yet.
#[test]
fn a_waiting_prefetched_job_has_its_lease_renewed_before_it_runs_out() {
    let env = setup();
    let gate = Latch::new();
    let handler = ScriptedHandler::new().then(Step::run({
        let gate = gate.clone();
        move |_| {
            gate.wait(WAIT);
            Ok(())
        }
    }));
    let _open_on_failure = gate.open_on_drop();
    let ids = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("t", json!({ "n": 1 })),
            NewJob::new("t", json!({ "n": 2 })),
        ])
        .expect("enqueue");
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("t", handler.clone())
        .concurrency(1)
        .timeout("t", Duration::from_secs(60))
        .lease_grace(Duration::from_secs(10))
        .reap_interval(Duration::from_secs(3600))
        .handler("probe", |_: &litejobs::JobContext| Ok(()))
        .queue("probe", 1)
        .start()
        .expect("worker starts");
    crate::support::scripted::wait_started(&events, ids[0]);
    let claimed = job(&env.queue, ids[1]).locked_until;
    assert_eq!(
        claimed,
        Some(START_MS + 70_000),
        "claimed with a 70 s lease"
    );
    // More than half the grace before its end, a round of the worker (seen through a job of
    // another queue finishing) leaves the lease alone: renewing early costs a write per
    // waiting job per round.
    env.clock.set(START_MS + 64_000);
    let probe = env
        .queue
        .enqueue(NewJob::new("probe", json!({})).queue("probe"))
        .expect("enqueue the probe");
    assert_eq!(
        crate::support::scripted::wait_finished(&events, probe).status,
        JobStatus::Succeeded
    );
    assert_eq!(
        job(&env.queue, ids[1]).locked_until,
        claimed,
        "not renewed 6 s before its end, with a grace of 10 s"
    );
    // Within half the grace of its end: the worker renews it by itself, for a whole lease.
    env.clock.set(START_MS + 66_000);
    let deadline = std::time::Instant::now() + WAIT;
    let renewed = loop {
        let until = job(&env.queue, ids[1]).locked_until;
        if until != claimed {
            break until;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the waiting job's lease was not renewed within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(renewed, Some(START_MS + 66_000 + 70_000));
    // Renewed once: the next rounds know the lease now ends later and leave it alone.
    env.clock.set(START_MS + 67_000);
    let probe = env
        .queue
        .enqueue(NewJob::new("probe", json!({})).queue("probe"))
        .expect("enqueue the second probe");
    assert_eq!(
        crate::support::scripted::wait_finished(&events, probe).status,
        JobStatus::Succeeded
    );
    assert_eq!(
        job(&env.queue, ids[1]).locked_until,
        renewed,
        "renewed once, not at every round"
    );
    env.clock.set(START_MS + 75_000);
    assert_eq!(
        env.queue.reap_expired_leases().expect("reap"),
        1,
        "only the first job's lease (running, not heartbeating) ran out"
    );
    assert_eq!(job(&env.queue, ids[1]).status, JobStatus::Running);
    gate.open();
    drop(worker);
}
