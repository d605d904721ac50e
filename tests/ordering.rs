//! Which job runs when: priority, then run time, then id; one running job
//! per group key, in order, while other keys run in parallel; named queues that do not wait
//! for each other; in-process enqueues wake an idle worker at once, and rows written by
//! other connections are found by polling.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use litejobs::{testing, JobStatus, NewJob, Worker};
use serde_json::json;

use crate::support::scripted::{
    at_ms, job, stop, wait_all, wait_finished, wait_finished_within, Latch, Rendezvous,
    ScriptedHandler, Step, WAIT,
};
use crate::support::{on_postgres, setup, TestEnv, START_MS};

/// Inserts a `t` job by plain SQL on a connection of its own, as another program would;
/// returns its id (the largest: nothing else inserts meanwhile).
fn insert_elsewhere(env: &TestEnv, payload: &str, run_at: i64) -> i64 {
    assert!(
        !payload.contains('\''),
        "insert_elsewhere quotes {payload:?}"
    );
    env.sql_exec(&format!(
        "INSERT INTO jobs (job_type, payload, run_at) VALUES ('t', '{payload}', {run_at})"
    ));
    env.sql_i64("SELECT MAX(id) FROM jobs")
}

/// How the jobs of an ordering test are run.
#[derive(Debug, Clone, Copy)]
enum Run {
    /// A worker with one thread and the default prefetch.
    Worker,
    /// A worker with one thread claiming one job at a time.
    WorkerNoPrefetch,
    /// `testing::drain`.
    Drain,
}

#[test]
fn jobs_run_by_priority_then_run_at_then_id() {
    for how in [Run::Worker, Run::WorkerNoPrefetch, Run::Drain] {
        let env = setup();
        // (priority, run_at offset from now in ms)
        let specs: [(i64, i64); 7] = [
            (0, -3_000),
            (5, 0),
            (5, -1_000),
            (0, -3_000),
            (-1, -10_000),
            (10, 0),
            (0, -5_000),
        ];
        let ids = env
            .queue
            .enqueue_batch(
                specs
                    .iter()
                    .enumerate()
                    .map(|(n, &(priority, offset))| {
                        NewJob::new("t", json!({ "n": n }))
                            .priority(priority)
                            .run_at(at_ms(START_MS + offset))
                    })
                    .collect(),
            )
            .expect("enqueue_batch");
        let expected: Vec<i64> = [5, 2, 1, 6, 0, 3, 4].iter().map(|&i| ids[i]).collect();
        let handler = ScriptedHandler::new();
        let events = env.queue.subscribe();
        let builder = Worker::builder(&env.queue)
            .handler("t", handler.clone())
            .concurrency(1);
        match how {
            Run::Drain => {
                let report = testing::drain(&builder).expect("drain");
                assert_eq!(report.succeeded, 7, "{report:?}");
            }
            Run::Worker | Run::WorkerNoPrefetch => {
                let builder = match how {
                    Run::WorkerNoPrefetch => builder.prefetch(0),
                    _ => builder,
                };
                let worker = builder.start().expect("worker starts");
                wait_all(&events, &ids, JobStatus::Succeeded);
                stop(worker);
            }
        }
        assert_eq!(
            handler.call_ids(),
            expected,
            "[{how:?}] order: priority DESC, run_at, id"
        );
        assert_eq!(
            handler.max_concurrent(),
            1,
            "[{how:?}] one thread, one job at a time"
        );
    }
}

/// Per group key: how many run now, the most that ran at once, and the order they ran in.
#[derive(Default)]
struct Groups {
    running: HashMap<String, usize>,
    max: HashMap<String, usize>,
    order: HashMap<String, Vec<i64>>,
    met: Vec<bool>,
}

fn locked(groups: &Mutex<Groups>) -> std::sync::MutexGuard<'_, Groups> {
    groups.lock().unwrap_or_else(|p| p.into_inner())
}

/// A handler that tracks group keys; jobs whose payload says `"meet": true` wait at the
/// rendezvous (which only works if they run at the same time).
fn group_tracker(groups: Arc<Mutex<Groups>>, meet: Rendezvous) -> ScriptedHandler {
    ScriptedHandler::always(Step::run(move |ctx| {
        let group = ctx.group_key().unwrap_or("none").to_string();
        {
            let mut g = locked(&groups);
            let now = {
                let running = g.running.entry(group.clone()).or_default();
                *running += 1;
                *running
            };
            let max = g.max.entry(group.clone()).or_default();
            *max = (*max).max(now);
            g.order.entry(group.clone()).or_default().push(ctx.id());
        }
        if ctx.payload()["meet"] == json!(true) {
            let met = meet.arrive(WAIT);
            locked(&groups).met.push(met);
        }
        *locked(&groups).running.entry(group).or_default() -= 1;
        Ok(())
    }))
}

#[test]
fn one_job_per_group_key_at_a_time_in_order_while_other_keys_run_in_parallel() {
    for use_worker in [true, false] {
        let env = setup();
        // (group, priority, run_at offset, meet)
        let specs: [(Option<&str>, i64, i64, bool); 11] = [
            (Some("user:1"), 0, -1_000, false),
            (Some("user:1"), 5, 0, true),
            (Some("user:1"), 0, -2_000, false),
            (Some("user:1"), 0, -1_000, false),
            (Some("user:2"), 0, 0, false),
            (Some("user:2"), 0, -500, false),
            (Some("user:2"), 1, -100, true),
            (None, 0, 0, false),
            (None, 0, 0, false),
            (None, 0, 0, false),
            (None, 0, 0, false),
        ];
        let ids = env
            .queue
            .enqueue_batch(
                specs
                    .iter()
                    .map(|&(group, priority, offset, meet)| {
                        // The rendezvous needs two threads: drain runs on one.
                        let job = NewJob::new("sync_user", json!({ "meet": meet && use_worker }))
                            .priority(priority)
                            .run_at(at_ms(START_MS + offset));
                        match group {
                            Some(key) => job.group_key(key),
                            None => job,
                        }
                    })
                    .collect(),
            )
            .expect("enqueue_batch");
        let groups = Arc::new(Mutex::new(Groups::default()));
        let handler = group_tracker(Arc::clone(&groups), Rendezvous::new(2));
        let events = env.queue.subscribe();
        let builder = Worker::builder(&env.queue)
            .handler("sync_user", handler)
            .concurrency(4);
        if use_worker {
            let worker = builder.start().expect("worker starts");
            wait_all(&events, &ids, JobStatus::Succeeded);
            stop(worker);
        } else {
            let report = testing::drain(&builder).expect("drain");
            assert_eq!(report.succeeded, 11, "{report:?}");
        }

        let g = locked(&groups);
        let mode = if use_worker { "worker" } else { "drain" };
        for key in ["user:1", "user:2"] {
            assert_eq!(
                g.max.get(key).copied(),
                Some(1),
                "[{mode}] jobs of {key} ran at the same time"
            );
        }
        assert_eq!(
            g.order.get("user:1"),
            Some(&vec![ids[1], ids[2], ids[0], ids[3]]),
            "[{mode}] user:1 runs in (priority, run_at, id) order"
        );
        assert_eq!(
            g.order.get("user:2"),
            Some(&vec![ids[6], ids[5], ids[4]]),
            "[{mode}] user:2 runs in (priority, run_at, id) order"
        );
        assert_eq!(g.order.get("none").map(Vec::len), Some(4));
        if use_worker {
            assert_eq!(
                g.met,
                vec![true, true],
                "the heads of user:1 and user:2 ran at the same time"
            );
        }
    }
}

#[test]
fn a_blocked_reports_queue_does_not_delay_the_default_queue() {
    let env = setup();
    let gate = Latch::new();
    let reports = ScriptedHandler::always(Step::Block(gate.clone()));
    let email = ScriptedHandler::new();
    let report_ids = env
        .queue
        .enqueue_batch(
            (0..3)
                .map(|n| NewJob::new("generate_report", json!({ "n": n })).queue("reports"))
                .collect(),
        )
        .expect("enqueue_batch");
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("generate_report", reports.clone())
        .handler("send_email", email.clone())
        .concurrency(1)
        .queue("reports", 1)
        .start()
        .expect("worker starts");
    let _release_on_failure = gate.open_on_drop();
    let first = reports.wait_started("the first report");
    assert_eq!(first.queue, "reports");

    let reset = env
        .queue
        .enqueue(NewJob::new(
            "send_email",
            json!({"template": "password_reset"}),
        ))
        .expect("enqueue");
    let done = wait_finished(&events, reset);
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(
        reports.call_count(),
        1,
        "the reports queue is still stuck on its first job"
    );
    assert_eq!(job(&env.queue, report_ids[0]).status, JobStatus::Running);

    gate.open();
    wait_all(&events, &report_ids, JobStatus::Succeeded);
    stop(worker);
    assert_eq!(email.call_ids(), vec![reset]);
    assert_eq!(reports.call_ids(), report_ids);
}

/// A row another program commits (plain SQL on its own connection, as another process
/// would) starts without waiting for the poll: the worker watches for commits.
#[test]
fn a_commit_by_another_connection_wakes_an_idle_worker_without_waiting_for_the_poll() {
    let env = setup();
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("t", ScriptedHandler::new())
        .poll_interval(Duration::from_secs(3600))
        .reap_interval(Duration::from_secs(3600))
        .start()
        .expect("worker starts");
    for n in 0..3 {
        let id = insert_elsewhere(&env, &json!({ "n": n }).to_string(), START_MS);
        assert_eq!(
            wait_finished_within(&events, id, Duration::from_secs(10)).status,
            JobStatus::Succeeded,
            "job {n} from another connection"
        );
    }
    stop(worker);
}

#[test]
fn an_in_process_enqueue_wakes_an_idle_worker_without_waiting_for_the_poll() {
    let env = setup();
    let events = env.queue.subscribe();
    // Neither the poll nor a timed change check comes within the test: the wake-up (or,
    // on Linux, the watch on the database's files) starts the job.
    let worker = Worker::builder(&env.queue)
        .handler("t", ScriptedHandler::new())
        .poll_interval(Duration::from_secs(3600))
        .change_check_interval(Duration::from_secs(3600))
        .reap_interval(Duration::from_secs(3600))
        .start()
        .expect("worker starts");
    let within = Duration::from_secs(10);

    let first = env
        .queue
        .enqueue(NewJob::new("t", json!({"n": 1})))
        .expect("enqueue");
    assert_eq!(
        wait_finished_within(&events, first, within).status,
        JobStatus::Succeeded
    );
    // The worker is idle now; the next enqueue (through a clone) must wake it.
    let second = env
        .queue
        .clone()
        .enqueue(NewJob::new("t", json!({"n": 2})))
        .expect("enqueue");
    assert_eq!(
        wait_finished_within(&events, second, within).status,
        JobStatus::Succeeded
    );
    // A job written in the caller's own transaction, then `notify` (`enqueue_in` takes a
    // rusqlite transaction: SQLite only).
    if !on_postgres() {
        let mut conn = env.raw();
        let tx = conn.transaction().expect("begin");
        let third = env
            .queue
            .enqueue_in(&tx, NewJob::new("t", json!({"n": 3})))
            .expect("enqueue_in");
        tx.commit().expect("commit");
        env.queue.notify();
        assert_eq!(
            wait_finished_within(&events, third, within).status,
            JobStatus::Succeeded
        );
    }
    stop(worker);
}

#[test]
fn rows_inserted_by_another_connection_are_found_by_polling() {
    let env = setup();
    let handler = ScriptedHandler::new();
    let events = env.queue.subscribe();
    // The change check is kept out of it: the poll alone must find them.
    let worker = Worker::builder(&env.queue)
        .handler("t", handler.clone())
        .poll_interval(Duration::from_millis(50))
        .change_check_interval(Duration::from_secs(3600))
        .start()
        .expect("worker starts");
    let insert = |payload: &str, run_at: i64| insert_elsewhere(&env, payload, run_at);
    let now = insert(r#"{"from": "python"}"#, START_MS);
    let later = insert(r#"{"from": "cron"}"#, START_MS + 60_000);
    assert_eq!(wait_finished(&events, now).status, JobStatus::Succeeded);
    assert_eq!(
        job(&env.queue, later).status,
        JobStatus::Queued,
        "not due by the queue's clock"
    );
    env.clock.advance(Duration::from_secs(60));
    assert_eq!(wait_finished(&events, later).status, JobStatus::Succeeded);
    stop(worker);
    assert_eq!(handler.call_ids(), vec![now, later]);
    assert_eq!(handler.calls()[0].payload, json!({"from": "python"}));
}

/// A worker claims at most its threads plus its prefetch: with one thread stuck, a backlog
/// stays queued for other workers instead of being taken (and its leases held) by this one.
#[test]
fn a_worker_holds_at_most_its_threads_plus_its_prefetch() {
    let env = setup();
    let gate = crate::support::scripted::Latch::new();
    let handler = ScriptedHandler::new().then(Step::run({
        let gate = gate.clone();
        move |_| {
            gate.wait(crate::support::scripted::WAIT);
            Ok(())
        }
    }));
    let _open_on_failure = gate.open_on_drop();
    let ids = env
        .queue
        .enqueue_batch(
            (0..20)
                .map(|n| NewJob::new("t", json!({ "n": n })))
                .collect(),
        )
        .expect("enqueue");
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("t", handler.clone())
        .concurrency(1)
        .prefetch(3)
        .poll_interval(Duration::from_millis(5))
        .start()
        .expect("worker starts");
    crate::support::scripted::wait_started(&events, ids[0]);
    // Watch the worker for a while (many of its rounds): a correct one never holds more.
    for _ in 0..50 {
        let running = env.queue.stats().expect("stats").count(JobStatus::Running);
        assert!(
            running <= 4,
            "one thread and a prefetch of 3 hold {running} jobs"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    gate.open();
    wait_all(&events, &ids, JobStatus::Succeeded);
    stop(worker);
}

/// Polls the count of running jobs every 2 ms until `done` says stop (or WAIT passes);
/// returns the most seen.
fn most_running_until(env: &TestEnv, done: impl Fn(i64) -> bool) -> i64 {
    let give_up = std::time::Instant::now() + WAIT;
    let mut most = 0;
    loop {
        let running = env.queue.stats().expect("stats").count(JobStatus::Running);
        most = most.max(running);
        if done(running) || std::time::Instant::now() > give_up {
            return most;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The default prefetch follows the jobs: jobs that each take longer than the prefetch span
/// (10 ms) are never hoarded: a worker holds one waiting job per thread, so other workers
/// share the backlog.
#[test]
fn long_jobs_are_prefetched_one_per_thread() {
    let env = setup();
    let ids = env
        .queue
        .enqueue_batch(
            (0..40)
                .map(|n| NewJob::new("slow", json!({ "n": n })))
                .collect(),
        )
        .expect("enqueue");
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("slow", |_: &litejobs::JobContext| {
            // At least 20 ms of run time per attempt, whatever the machine.
            std::thread::sleep(Duration::from_millis(20));
            Ok(())
        })
        .concurrency(2)
        .start()
        .expect("worker starts");
    let most = most_running_until(&env, |_| {
        env.queue
            .stats()
            .expect("stats")
            .count(JobStatus::Succeeded)
            == 40
    });
    wait_all(&events, &ids, JobStatus::Succeeded);
    stop(worker);
    assert!(
        most <= 4,
        "two threads running 20 ms jobs held {most} jobs at once (at most 2 running + 2 waiting)"
    );
}

/// Quick jobs make the prefetch grow up to its bound: once a queue has run a few jobs that
/// take no time, it claims far more than one per thread (fewer, bigger transactions).
#[test]
fn quick_jobs_grow_the_prefetch_up_to_its_bound() {
    let env = setup();
    let gate = Latch::new();
    // Twenty quick jobs run first (higher priority), then every "held" job waits on the gate.
    let quick = env
        .queue
        .enqueue_batch(
            (0..20)
                .map(|n| NewJob::new("t", json!({ "n": n })).priority(1))
                .collect(),
        )
        .expect("enqueue quick jobs");
    let held = env
        .queue
        .enqueue_batch(
            (0..300)
                .map(|n| NewJob::new("t", json!({ "hold": n })))
                .collect(),
        )
        .expect("enqueue held jobs");
    let events = env.queue.subscribe();
    let waiting = gate.clone();
    let worker = Worker::builder(&env.queue)
        .handler("t", move |ctx: &litejobs::JobContext| {
            if ctx.payload().get("hold").is_some() {
                waiting.wait(WAIT);
            }
            Ok(())
        })
        .concurrency(2)
        .prefetch(100)
        .start()
        .expect("worker starts");
    let _open_on_failure = gate.open_on_drop();
    wait_all(&events, &quick, JobStatus::Succeeded);
    // The prefetch follows the quick jobs' measured run times (2 threads × 10 ms ÷ the mean,
    // at most 100): 102 held on a quiet machine. A loaded one stretches a few of those runs
    // and holds fewer, but still far more than one waiting job per thread, and never more
    // than the bound. (The gauge's arithmetic has unit tests of its own.)
    let most = most_running_until(&env, |running| running >= 102);
    assert!(
        (5..=102).contains(&most),
        "after quick jobs, two threads and a prefetch of at most 100 held {most} jobs"
    );
    gate.open();
    wait_all(&events, &held, JobStatus::Succeeded);
    stop(worker);
}

/// The bound holds per queue while another queue of the same worker keeps finishing jobs:
/// those outcomes are counted against their own queue, never free a stuck queue's places.
#[test]
fn another_queues_finished_jobs_never_let_a_stuck_queue_claim_past_its_bound() {
    use crate::support::scripted::{wait_finished, wait_started, Latch, WAIT};
    let env = setup();
    let gate = Latch::new();
    let stuck: Vec<i64> = env
        .queue
        .enqueue_batch(
            (0..12)
                .map(|n| NewJob::new("slow", json!({ "n": n })))
                .collect(),
        )
        .expect("enqueue the stuck queue's backlog");
    let events = env.queue.subscribe();
    let held = gate.clone();
    let worker = Worker::builder(&env.queue)
        .handler("slow", move |_: &litejobs::JobContext| {
            held.wait(WAIT);
            Ok(())
        })
        .handler("quick", |_: &litejobs::JobContext| Ok(()))
        .concurrency(1)
        .queue("busy", 1)
        .prefetch(2)
        .start()
        .expect("worker starts");
    // Dropped before the worker if a check fails, so its shutdown does not wait on the gate.
    let _open_on_failure = gate.open_on_drop();
    wait_started(&events, stuck[0]);
    // Eight jobs of the other queue come and go, one at a time, each a few rounds.
    for n in 0..8 {
        let id = env
            .queue
            .enqueue(NewJob::new("quick", json!({ "n": n })).queue("busy"))
            .expect("enqueue a quick job");
        assert_eq!(wait_finished(&events, id).status, JobStatus::Succeeded);
    }
    let running = env
        .queue
        .list(
            &litejobs::JobFilter::new()
                .status(JobStatus::Running)
                .queue("default"),
        )
        .expect("list")
        .len();
    assert!(
        running <= 3,
        "one thread and a prefetch of 2 hold {running} jobs of the stuck default queue"
    );
    gate.open();
    wait_all(&events, &stuck, JobStatus::Succeeded);
    stop(worker);
}

/// A worker of one thread and a prefetch of 3 whose `slow` and `urgent` jobs wait at a gate,
/// started on `slow` jobs: its thread is busy in the first, the second waits for it.
struct OneBusyThread {
    gate: Latch,
    started: Arc<Mutex<Vec<i64>>>,
    slow: Vec<i64>,
    events: crossbeam_channel::Receiver<litejobs::Event>,
    worker: Worker,
    _open_on_failure: crate::support::scripted::OpenOnDrop,
}

impl OneBusyThread {
    fn start(env: &TestEnv, slow_jobs: usize) -> OneBusyThread {
        let gate = Latch::new();
        let started = Arc::new(Mutex::new(Vec::new()));
        let handler = {
            let (gate, started) = (gate.clone(), Arc::clone(&started));
            move |ctx: &litejobs::JobContext| -> Result<(), litejobs::JobError> {
                started
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(ctx.id());
                gate.wait(WAIT);
                Ok(())
            }
        };
        let slow = env
            .queue
            .enqueue_batch(
                (0..slow_jobs)
                    .map(|n| NewJob::new("slow", json!({ "n": n })))
                    .collect(),
            )
            .expect("enqueue");
        let events = env.queue.subscribe();
        let worker = Worker::builder(&env.queue)
            .handler("slow", handler.clone())
            .handler("urgent", handler)
            .concurrency(1)
            .prefetch(3)
            .poll_interval(Duration::from_secs(3600))
            .start()
            .expect("worker starts");
        crate::support::scripted::wait_started(&events, slow[0]);
        OneBusyThread {
            _open_on_failure: gate.open_on_drop(),
            gate,
            started,
            slow,
            events,
            worker,
        }
    }

    /// Opens the gate, waits for `all` to succeed and stops the worker: the jobs in the
    /// order they started.
    fn finish(self, all: &[i64]) -> Vec<i64> {
        self.gate.open();
        wait_all(&self.events, all, JobStatus::Succeeded);
        stop(self.worker);
        let started = self.started.lock().unwrap_or_else(|p| p.into_inner());
        started.clone()
    }
}

/// A job of a higher priority goes ahead of the jobs a worker has claimed and holds waiting
/// for a thread: with the one thread busy and a slow job waiting behind it, an urgent job
/// starts next, whether this process enqueued it or another program inserted it by plain
/// SQL. Without that, it would start only after the waiting job (the worker claims again
/// only once its prefetch runs low).
#[test]
fn a_higher_priority_job_goes_ahead_of_the_jobs_waiting_for_a_thread() {
    for elsewhere in [false, true] {
        let env = setup();
        let held = OneBusyThread::start(&env, 4);
        let slow = held.slow.clone();
        // The worker holds the first job running and the second waiting for the thread.
        assert_eq!(
            job(&env.queue, slow[1]).status,
            JobStatus::Running,
            "the second job is claimed (prefetched)"
        );
        let urgent = if elsewhere {
            env.sql_exec(&format!(
                "INSERT INTO jobs (job_type, payload, priority, run_at) \
                 VALUES ('urgent', '{{}}', 10, {START_MS})"
            ));
            env.sql_i64("SELECT MAX(id) FROM jobs")
        } else {
            env.queue
                .enqueue(NewJob::new("urgent", json!({})).priority(10))
                .expect("enqueue")
        };
        // Claimed while the first job still runs: the worker looked for it on the commit.
        let give_up = std::time::Instant::now() + WAIT;
        while job(&env.queue, urgent).status != JobStatus::Running {
            assert!(
                std::time::Instant::now() < give_up,
                "the urgent job was not claimed while slower jobs waited (elsewhere: {elsewhere})"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut all = slow.clone();
        all.push(urgent);
        let started = held.finish(&all);
        assert_eq!(
            started[..3],
            [slow[0], urgent, slow[1]],
            "the urgent job starts before the job that was waiting (elsewhere: {elsewhere})"
        );
    }
}

/// Jobs of a higher priority claimed to go ahead wait one per thread at most: a worker with
/// one busy thread does not hoard a run of urgent jobs (other workers start them), and the
/// ones waiting to go first start highest priority first.
#[test]
fn a_worker_holds_one_job_per_thread_to_go_ahead_and_runs_them_by_priority() {
    let env = setup();
    let held = OneBusyThread::start(&env, 2);
    let slow = held.slow.clone();
    // Three urgent jobs, each in its own commit: each commit is looked at.
    let fives: Vec<i64> = (0..3)
        .map(|n| {
            env.queue
                .enqueue(NewJob::new("urgent", json!({ "n": n })).priority(5))
                .expect("enqueue")
        })
        .collect();
    let give_up = std::time::Instant::now() + WAIT;
    while job(&env.queue, fives[0]).status != JobStatus::Running {
        assert!(
            std::time::Instant::now() < give_up,
            "the first urgent job was not claimed while slower jobs waited"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // Watch the worker for many of its looks: the running job, the waiting one, and one to
    // go ahead.
    for _ in 0..50 {
        let running = env.queue.stats().expect("stats").count(JobStatus::Running);
        assert!(running <= 3, "one thread held {running} jobs");
        std::thread::sleep(Duration::from_millis(2));
    }
    let ten = env
        .queue
        .enqueue(NewJob::new("urgent", json!({ "n": 10 })).priority(10))
        .expect("enqueue");
    let mut all = slow.clone();
    all.extend(&fives);
    all.push(ten);
    let started = held.finish(&all);
    let at = |id: i64| started.iter().position(|&s| s == id).expect("it started");
    assert_eq!(
        at(fives[0]),
        1,
        "the first urgent job went ahead: {started:?}"
    );
    assert!(
        at(ten) < at(fives[1]) && at(ten) < at(fives[2]),
        "the priority-10 job starts before the priority-5 jobs not yet claimed: {started:?}"
    );
}
