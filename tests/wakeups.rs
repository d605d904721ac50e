//! What a worker costs while it waits: the dispatcher wakes for a reason (a finished job, an
//! enqueue, a lease or a deadline coming due), never in a loop. Each test watches
//! [`Worker::activity`] over a window in which nothing is due and bounds the wake-ups and
//! write transactions by what the worker's timers allow. The bounds hold however slow the
//! machine is (a slower machine only wakes less often); a loop that spins breaks them by
//! orders of magnitude. The manual clock stands still, so no lease, retry or slot comes due.

use std::time::{Duration, Instant};

use litejobs::{
    ErrorKind, JobContext, JobError, JobStatus, NewJob, Worker, WorkerActivity, WorkerBuilder,
};
use serde_json::json;

use crate::support::scripted::{
    job, stop, wait_all, wait_bound, wait_finished, Latch, ScriptedHandler, Step, WAIT,
};
use crate::support::{on_postgres, setup, TestEnv, START_MS};

const HOUR: Duration = Duration::from_secs(3600);
/// How long each test watches the worker.
const WINDOW: Duration = Duration::from_millis(300);
/// While attempts run, the dispatcher looks for finished outcomes this often at most
/// (its COLLECT_INTERVAL).
const COLLECT_MS: u128 = 5;

/// A worker whose only timers are an hour away: no polling, no timed change checks, no
/// reaping.
fn quiet(env: &TestEnv, handler: &ScriptedHandler, threads: usize) -> WorkerBuilder {
    Worker::builder(&env.queue)
        .handler("t", handler.clone())
        .concurrency(threads)
        .poll_interval(HOUR)
        .change_check_interval(HOUR)
        .reap_interval(HOUR)
}

fn quiet_worker(env: &TestEnv, handler: ScriptedHandler, threads: usize) -> Worker {
    quiet(env, &handler, threads)
        .start()
        .expect("worker starts")
}

/// Wake-ups and write rounds during `window`, and how long it really lasted.
fn watch(activity: &WorkerActivity, window: Duration) -> (u64, u64, Duration) {
    let (wakeups, rounds) = (activity.wakeups(), activity.write_rounds());
    let started = Instant::now();
    std::thread::sleep(window);
    (
        activity.wakeups() - wakeups,
        activity.write_rounds() - rounds,
        started.elapsed(),
    )
}

/// A handler that blocks until `gate` opens, except for jobs whose payload says `fast`.
fn gated(gate: &Latch) -> ScriptedHandler {
    let gate = gate.clone();
    ScriptedHandler::always(Step::run(move |ctx: &JobContext| {
        if ctx.payload()["fast"] != json!(true) {
            gate.wait(WAIT * 2);
        }
        Ok::<(), JobError>(())
    }))
}

#[test]
fn an_idle_worker_barely_wakes() {
    let env = setup();
    let worker = quiet_worker(&env, ScriptedHandler::new(), 2);
    let activity = worker.activity();
    let (wakeups, rounds, elapsed) = watch(&activity, WINDOW);
    // Its first passes (one claim round that finds nothing) may fall in the window, with
    // the file watch's looks after its start-up writes and their checkpoint (up to 16 looks
    // a write, most in its first millisecond); after them nothing is due for an hour. A loop
    // that woke every few ms would count 60 here.
    assert!(
        wakeups <= 24 && rounds <= 3,
        "an idle worker woke {wakeups} times and wrote {rounds} times in {elapsed:?}"
    );
    stop(worker);
}

#[test]
fn a_prefetched_job_waiting_for_a_thread_costs_no_writes_until_its_lease_needs_renewing() {
    let env = setup();
    let gate = Latch::new();
    let _open_on_failure = gate.open_on_drop();
    let ids = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("t", json!({"n": 1})),
            NewJob::new("t", json!({"n": 2})),
        ])
        .expect("enqueue");
    let events = env.queue.subscribe();
    let handler = gated(&gate);
    // Timeout and grace alike: the waiting job's lease (claim + 20 s) needs renewing at
    // claim + 15 s, and the clock stands at the claim.
    let worker = quiet(&env, &handler, 1)
        .default_timeout(Duration::from_secs(10))
        .lease_grace(Duration::from_secs(10))
        .start()
        .expect("worker starts");
    let activity = worker.activity();
    assert_eq!(handler.wait_started("the first job").id, ids[0]);
    assert_eq!(
        job(&env.queue, ids[1]).status,
        JobStatus::Running,
        "the second job was claimed with the first and waits for the one thread"
    );

    let (wakeups, rounds, elapsed) = watch(&activity, WINDOW);
    // While an attempt runs the dispatcher looks for outcomes every 5 ms; it has nothing
    // to write, so no transaction (one may have begun just before the window).
    // A tenth more for a loaded machine: a timer that fires late can be followed by one that
    // is already due (seen: 64 against 63 while the PostgreSQL tests ran alongside). A loop
    // that woke every few milliseconds still counts far more.
    let expected = elapsed.as_millis() / COLLECT_MS;
    // The file watch is on while a job waits that a more urgent one could pass: the claim's
    // own commit and its checkpoint are each looked at up to 16 times.
    let allowed = expected + expected / 10 + 3 + 16;
    assert!(
        rounds <= 1,
        "{rounds} write rounds in {elapsed:?} while a prefetched job waited with its lease \
         far from due"
    );
    assert!(
        u128::from(wakeups) <= allowed,
        "{wakeups} wake-ups in {elapsed:?} (at most {allowed}) while a job ran and another waited"
    );

    gate.open();
    wait_all(&events, &ids, JobStatus::Succeeded);
    stop(worker);
}

#[test]
fn an_outcome_no_executor_announces_is_written_while_its_neighbours_run() {
    let env = setup();
    let gate = Latch::new();
    let _open_on_failure = gate.open_on_drop();
    // Ten jobs claimed at once for two threads: finishing one leaves nine in flight, above
    // the point where an executor wakes the dispatcher (it wakes it only when the queue
    // runs low). The dispatcher must find the outcome by itself.
    let mut jobs = vec![NewJob::new("t", json!({"fast": true}))];
    jobs.extend((0..9).map(|n| NewJob::new("t", json!({ "n": n }))));
    let ids = env.queue.enqueue_batch(jobs).expect("enqueue");
    let events = env.queue.subscribe();
    let handler = gated(&gate);
    let worker = quiet(&env, &handler, 2)
        .prefetch(8)
        .start()
        .expect("worker starts");

    let first = wait_finished(&events, ids[0]);
    assert_eq!(first.status, JobStatus::Succeeded);
    assert_eq!(
        job(&env.queue, ids[0]).status,
        JobStatus::Succeeded,
        "committed, not only announced"
    );
    assert_eq!(
        job(&env.queue, ids[1]).status,
        JobStatus::Running,
        "its neighbour still runs"
    );

    gate.open();
    wait_all(&events, &ids[1..], JobStatus::Succeeded);
    stop(worker);
}

#[test]
fn a_shutdown_waiting_on_a_stuck_handler_does_not_spin() {
    let env = setup();
    let gate = Latch::new();
    let _open_on_failure = gate.open_on_drop();
    let id = env
        .queue
        .enqueue(NewJob::new("t", json!({})))
        .expect("enqueue");
    let events = env.queue.subscribe();
    let handler = gated(&gate);
    let worker = quiet_worker(&env, handler.clone(), 1);
    let activity = worker.activity();
    handler.wait_started("the job");

    let (wakeups, rounds) = (activity.wakeups(), activity.write_rounds());
    let started = Instant::now();
    let grace = Duration::from_millis(500);
    let err = worker
        .shutdown(grace)
        .expect_err("the handler is still running after the grace");
    let elapsed = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::ShutdownTimeout, "{err}");
    assert!(elapsed < wait_bound(), "shutdown took {elapsed:?}");
    let (wakeups, rounds) = (
        activity.wakeups() - wakeups,
        activity.write_rounds() - rounds,
    );
    // Nothing to write while it waits: it looks at most every 100 ms, and writes once, the
    // release of the stuck job after the grace.
    let allowed = elapsed.as_millis() / 100 + 3;
    assert!(
        u128::from(wakeups) <= allowed,
        "{wakeups} wake-ups (at most {allowed}) during a shutdown of {elapsed:?}"
    );
    assert!(
        rounds <= 2,
        "{rounds} write rounds during a shutdown with one job to release"
    );
    assert_eq!(wait_finished(&events, id).status, JobStatus::Queued);
    gate.open();
}

/// Waits until the dispatcher has gone to sleep: no wake-up for 50 ms (its timers are an
/// hour away). Fails after the wait bound, e.g. when a loop spins.
fn wait_idle(activity: &WorkerActivity) {
    let deadline = Instant::now() + wait_bound();
    let mut last = activity.wakeups();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = activity.wakeups();
        if now == last {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the worker kept waking up ({now} wake-ups)"
        );
        last = now;
    }
}

/// Inserts a due `t` job through a plain connection, as another program would.
/// (Its id is the largest: nothing else inserts meanwhile.)
fn insert_elsewhere(env: &TestEnv) -> i64 {
    insert_elsewhere_at(env, START_MS)
}

/// [`insert_elsewhere`] for a job due at `run_at`.
fn insert_elsewhere_at(env: &TestEnv, run_at: i64) -> i64 {
    env.sql_exec(&format!(
        "INSERT INTO jobs (job_type, payload, run_at) VALUES ('t', '{{}}', {run_at})"
    ));
    env.sql_i64("SELECT MAX(id) FROM jobs")
}

/// A one-thread worker without prefetch whose timers are an hour away, once idle: only a
/// commit it hears of (or this process's enqueue) can make it look for jobs.
fn idle_quiet_worker(env: &TestEnv, handler: &ScriptedHandler) -> (Worker, WorkerActivity) {
    let worker = quiet(env, handler, 1)
        .prefetch(0)
        .start()
        .expect("worker starts");
    let activity = worker.activity();
    wait_idle(&activity);
    (worker, activity)
}

#[cfg(target_os = "linux")]
#[test]
fn a_row_another_program_commits_wakes_an_idle_worker_whose_timers_are_an_hour_away() {
    // The wake-up comes from the watch on the database's files (SQLite) or from the
    // insert trigger's notification, which the worker's listening thread waits for
    // (PostgreSQL).
    let env = setup();
    let gate = Latch::new();
    let _open_on_failure = gate.open_on_drop();
    let handler = gated(&gate);
    let worker = quiet(&env, &handler, 1)
        .prefetch(0)
        .start()
        .expect("worker starts");
    let events = env.queue.subscribe();
    let activity = worker.activity();
    // Only the watch on the database's files (on PostgreSQL, its LISTEN for the insert
    // trigger's notification) can tell the worker of this row.
    wait_idle(&activity);
    let first = insert_elsewhere(&env);
    assert_eq!(
        handler.wait_started("the row another program inserted").id,
        first
    );
    // Busy for a while (its one thread taken), the worker stops watching; when the job is
    // done it watches again, and a row committed then is seen as soon.
    std::thread::sleep(Duration::from_millis(100));
    gate.open();
    assert_eq!(wait_finished(&events, first).status, JobStatus::Succeeded);
    wait_idle(&activity);
    let second = insert_elsewhere(&env);
    assert_eq!(handler.wait_started("the next row").id, second);
    assert_eq!(wait_finished(&events, second).status, JobStatus::Succeeded);
    stop(worker);
}

#[test]
fn a_plain_sql_update_that_makes_a_job_due_wakes_an_idle_worker_whose_timers_are_an_hour_away() {
    // A job for later (its insert is seen, and nothing is due), then a program makes it due
    // by an UPDATE: the file watch sees the write (SQLite), the update trigger notifies
    // (PostgreSQL), as it does for a retry or a job another worker gives back.
    let env = setup();
    let handler = ScriptedHandler::new();
    let (worker, activity) = idle_quiet_worker(&env, &handler);
    let id = insert_elsewhere_at(&env, START_MS + 3_600_000);
    wait_idle(&activity);
    assert_eq!(handler.calls().len(), 0, "not due for an hour");
    env.sql_exec(&format!(
        "UPDATE jobs SET run_at = {START_MS} WHERE id = {id}"
    ));
    assert_eq!(handler.wait_started("the job made due").id, id);
    stop(worker);
}

#[test]
fn resuming_a_paused_queue_wakes_an_idle_worker_whose_timers_are_an_hour_away() {
    // The resume is a write the file watch sees (SQLite) or that notifies (PostgreSQL).
    let env = setup();
    env.queue.pause_queue("default").expect("pause");
    let handler = ScriptedHandler::new();
    let (worker, activity) = idle_quiet_worker(&env, &handler);
    let id = insert_elsewhere(&env);
    wait_idle(&activity);
    assert_eq!(handler.calls().len(), 0, "its queue is paused");
    // From another handle on the database, as `litejobs resume` would.
    let other = env.open_another();
    other.resume_queue("default").expect("resume");
    assert_eq!(handler.wait_started("the job of the resumed queue").id, id);
    stop(worker);
}

#[test]
fn a_worker_told_of_commits_polls_rarely_while_no_job_waits_and_on_time_for_a_later_one() {
    let env = setup();
    let handler = ScriptedHandler::new();
    let worker = quiet(&env, &handler, 1)
        .poll_interval(Duration::from_millis(20))
        .start()
        .expect("worker starts");
    let activity = worker.activity();
    let quiet_since = activity.polls();
    std::thread::sleep(Duration::from_millis(400));
    let quiet_polls = activity.polls() - quiet_since;
    if on_postgres() {
        // Told of every write that leaves a job waiting (notifications), an idle worker
        // with no job waiting polls every few seconds, not every 20 ms: its start's poll and
        // the one after its first notification at most.
        assert!(quiet_polls <= 2, "{quiet_polls} polls with no job waiting");
    }
    // A job for later: the worker polls at its interval again, and starts it once due.
    let id = insert_elsewhere_at(&env, START_MS + 60_000);
    let since = activity.polls();
    let deadline = Instant::now() + wait_bound();
    // Ten polls take 200 ms at the interval, and 50 s at the quiet one.
    while activity.polls() - since < 10 {
        assert!(
            Instant::now() < deadline,
            "{} polls with a job waiting for later",
            activity.polls() - since
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(handler.calls().len(), 0, "not due yet");
    env.clock.advance(Duration::from_secs(60));
    assert_eq!(handler.wait_started("the job once due").id, id);
    stop(worker);
}

#[test]
fn an_in_process_enqueue_wakes_an_idle_worker_that_nothing_else_would_wake() {
    // In memory there is no file to watch, and the poll and timed checks are an hour away:
    // only the enqueue's own wake-up can start the job.
    let queue = litejobs::Queue::open_in_memory().expect("in-memory queue");
    let events = queue.subscribe();
    let worker = Worker::builder(&queue)
        .handler("t", ScriptedHandler::new())
        .poll_interval(HOUR)
        .change_check_interval(HOUR)
        .reap_interval(HOUR)
        .start()
        .expect("worker starts");
    wait_idle(&worker.activity());
    let id = queue.enqueue(NewJob::new("t", json!({}))).expect("enqueue");
    assert_eq!(wait_finished(&events, id).status, JobStatus::Succeeded);
    stop(worker);
}
