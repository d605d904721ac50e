//! Waits under SIGKILL: a workflow of 2 000 chunks and one fan-in step that waits for all of
//! them. Four worker processes complete chunks at once, each completion settling one of the
//! fan-in's waits in the transaction that ends the chunk; at seeded moments (half of them
//! near the end, where the last completions release the fan-in) one of three of them is
//! killed with SIGKILL and another started in its place. The fan-in's type is run only by
//! the fourth, which is never killed, so no kill cuts the fan-in's own run short: it must
//! run exactly once, and as soon as it is released.
//!
//! Every handler run appends `start` and `end` lines (kind, job, attempt, pid) to a log;
//! the fan-in also writes, when it starts, how many of the jobs it waits for have succeeded.
//! At the end: every job succeeded and none was lost or added; every chunk ran; the fan-in
//! ran exactly once, after all 2 000 chunks had succeeded; every wait is settled (`done`),
//! the fan-in waits for nothing, and no row is left held.

use std::collections::HashSet;
use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use litejobs::{
    JobContext, JobError, JobStatus, NewJob, Queue, Step, Worker, WorkerBuilder, Workflow,
};
use serde_json::json;

use crate::support::child::{
    self, AppendLog, ChildProc, Deadline, LogTail, Prng, CHILD_LIFETIME_CAP, DB_VAR, LOG_VAR,
    SIGNAL_VAR,
};
use crate::support::{on_postgres, setup, temp_dir};

/// Chunks of the fan-out.
const CHUNKS: usize = 2000;
/// Worker processes that complete chunks only (and are killed), besides the one that also
/// runs the fan-in.
const WORKERS: usize = 3;
/// Kills.
const KILLS: usize = 6;
/// Of those, how many land near the end, where the last completions release the fan-in.
const LATE_KILLS: usize = 3;
/// A chunk may lose an attempt per kill; a few more make "dead" impossible.
const MAX_ATTEMPTS: u32 = KILLS as u32 + 3;
/// The whole test, children included.
const TEST_CAP: Duration = Duration::from_secs(150);

const CHUNK_ROLE: &str = "workflow-crash-chunks";
const FAN_IN_ROLE: &str = "workflow-crash-fan-in";
const CHILD_TEST: &str = "workflow_crash::child_worker_process";
const CHUNK_TYPE: &str = "chunk";
const FANIN_TYPE: &str = "fan_in";

/// A worker with short leases, so that the jobs a killed one held are reaped within a
/// second by the others.
fn worker(queue: &Queue, log: &Arc<AppendLog>) -> WorkerBuilder {
    let pid = std::process::id();
    let chunk_log = Arc::clone(log);
    Worker::builder(queue)
        .handler(
            CHUNK_TYPE,
            move |ctx: &JobContext| -> Result<(), JobError> {
                let (id, attempt) = (ctx.id(), ctx.attempt());
                chunk_log.line(&format!("start chunk {id} {attempt} {pid}"));
                // The chunk's own work.
                std::thread::sleep(Duration::from_millis(1));
                chunk_log.line(&format!("end chunk {id} {attempt} {pid}"));
                Ok(())
            },
        )
        .concurrency(4)
        .default_timeout(Duration::from_secs(2))
        .lease_grace(Duration::from_millis(500))
        .reap_interval(Duration::from_millis(200))
        .poll_interval(Duration::from_millis(50))
}

/// A child: `CHUNK_ROLE` completes chunks until the fan-in waits for none (every chunk has
/// ended), then shuts down gracefully; `FAN_IN_ROLE` also runs the fan-in, until no work is
/// left.
#[test]
fn child_worker_process() {
    let fan_in_role = child::is_child(FAN_IN_ROLE);
    if !fan_in_role && !child::is_child(CHUNK_ROLE) {
        return;
    }
    let deadline = Deadline::new("workflow crash child", CHILD_LIFETIME_CAP);
    let queue = Queue::open(child::env_path(DB_VAR)).expect("child: opening the queue");
    let log = Arc::new(AppendLog::open(&child::env_path(LOG_VAR)));
    let fan_in: i64 = child::env_u64(SIGNAL_VAR) as i64;
    let mut builder = worker(&queue, &log);
    if fan_in_role {
        let pid = std::process::id();
        builder = builder.handler(
            FANIN_TYPE,
            move |ctx: &JobContext| -> Result<(), JobError> {
                let (id, attempt) = (ctx.id(), ctx.attempt());
                log.line(&format!("start fan_in {id} {attempt} {pid}"));
                let deps = ctx
                    .dependencies()
                    .map_err(|e| JobError::retry(e.to_string()))?;
                let succeeded = deps
                    .iter()
                    .filter(|d| d.status == JobStatus::Succeeded)
                    .count();
                log.line(&format!("deps {id} {} {succeeded} {pid}", deps.len()));
                log.line(&format!("end fan_in {id} {attempt} {pid}"));
                Ok(())
            },
        );
    }
    let worker = builder.start().expect("child: starting the worker");
    if fan_in_role {
        child::wait_until_no_work(&queue, &deadline);
    } else {
        loop {
            let held = queue
                .job(fan_in)
                .expect("child: reading the fan-in")
                .expect("child: the fan-in")
                .waiting_for;
            if held == 0 {
                break;
            }
            deadline.check(|| format!("waiting for the fan-in's last {held} waits"));
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    worker
        .shutdown(Duration::from_secs(10))
        .expect("child: graceful shutdown");
}

/// The chunks whose `end` line is in `lines`.
fn ended_chunks(lines: &[String], ended: &mut HashSet<i64>) {
    for line in lines {
        let f: Vec<&str> = line.split(' ').collect();
        if f[0] == "end" && f[1] == "chunk" {
            ended.insert(f[2].parse().expect("a job id"));
        }
    }
}

#[test]
fn sigkill_while_chunks_release_a_fan_in_runs_it_exactly_once_after_every_chunk() {
    if child::is_child(CHUNK_ROLE) || child::is_child(FAN_IN_ROLE) {
        return;
    }
    let deadline = Deadline::new("workflow crash test", TEST_CAP);
    let mut rng = Prng::new(Prng::seed_for("workflow crash test"));
    // On the PostgreSQL pass the test's schema (its URL, which the children open too).
    let env = on_postgres().then(setup);
    let dir = temp_dir();
    let db = match &env {
        Some(env) => env.path.clone(),
        None => dir.path().join("jobs.db"),
    };
    let log_path = dir.path().join("runs.log");
    let queue = Queue::open(&db).expect("opening the queue");
    let chunk = |i: usize| format!("chunk {i}");
    let mut flow = Workflow::new("report");
    let mut fan_in = Step::new("fan_in", NewJob::new(FANIN_TYPE, json!({})));
    for i in 0..CHUNKS {
        flow = flow.step(Step::new(
            chunk(i),
            NewJob::new(CHUNK_TYPE, json!({ "chunk": i })).max_attempts(MAX_ATTEMPTS),
        ));
        fan_in = fan_in.after(chunk(i));
    }
    let ids = queue
        .enqueue_workflow(flow.step(fan_in))
        .expect("enqueueing the workflow");
    let fan_in = ids.step("fan_in").expect("the fan-in");
    let chunks: HashSet<i64> = (0..CHUNKS)
        .map(|i| ids.step(&chunk(i)).expect("a chunk"))
        .collect();
    assert_eq!(
        queue.job(fan_in).expect("read").expect("job").waiting_for,
        CHUNKS as i64
    );

    let envs: Vec<(&str, OsString)> = vec![
        (DB_VAR, db.clone().into_os_string()),
        (LOG_VAR, log_path.clone().into_os_string()),
        (SIGNAL_VAR, fan_in.to_string().into()),
    ];
    let mut spawned = 0;
    let mut spawn = |role: &str| {
        spawned += 1;
        ChildProc::spawn(
            dir.path(),
            &format!("worker-{spawned}"),
            CHILD_TEST,
            role,
            &envs,
        )
    };
    let mut fan_in_worker = spawn(FAN_IN_ROLE);
    let mut workers: Vec<ChildProc> = (0..WORKERS).map(|_| spawn(CHUNK_ROLE)).collect();
    // Where the kills land, in chunks ended: spread out, then near the end.
    let mut targets = Vec::with_capacity(KILLS);
    for k in 0..KILLS {
        targets.push(if k < KILLS - LATE_KILLS {
            rng.range(1, CHUNKS as u64 - 100)
        } else {
            rng.range(CHUNKS as u64 - 60, CHUNKS as u64 - 1)
        });
    }
    targets.sort_unstable();
    let mut tail = LogTail::new(&log_path);
    let mut ended = HashSet::new();
    let mut killed = Vec::new();
    let mut while_held = 0;
    // Workers that ended cleanly because every chunk had ended (their work done): on a quick
    // machine the last chunks can end before the parent reaches its last kill targets.
    let mut finished = HashSet::new();
    'kills: for (k, &target) in targets.iter().enumerate() {
        while (ended.len() as u64) < target {
            ended_chunks(&tail.read_new(), &mut ended);
            for w in workers.iter_mut().chain([&mut fan_in_worker]) {
                if let Some(status) = w.try_exit() {
                    // A chunk's end line is written before its outcome, so a worker that
                    // left after the last release finds every end line in the log.
                    ended_chunks(&tail.read_new(), &mut ended);
                    if status.success() && ended.len() == CHUNKS {
                        println!(
                            "workflow crash test: every chunk ended before kill {k}; the \
                             kills left have nothing to land on"
                        );
                        finished.insert(w.pid());
                        break 'kills;
                    }
                    panic!(
                        "a worker (pid {}) exited ({status}) before the kills were over; its \
                         output:\n{}",
                        w.pid(),
                        w.output()
                    );
                }
            }
            deadline.check(|| {
                format!(
                    "waiting for {target} chunks to end ({} so far)",
                    ended.len()
                )
            });
            std::thread::sleep(Duration::from_millis(1));
        }
        // A seeded sliver of extra time, so the kill lands at varied points of a write.
        std::thread::sleep(Duration::from_micros(rng.range(0, 3000)));
        let victim = rng.range(0, WORKERS as u64 - 1) as usize;
        let held = queue.job(fan_in).expect("read").expect("job").waiting_for;
        let pid = workers[victim].pid();
        workers[victim].kill();
        if held > 0 {
            while_held += 1;
        }
        killed.push(pid);
        println!(
            "workflow crash test: kill {k} of pid {pid} after {} chunks ended, the fan-in \
             waiting for {held}",
            ended.len()
        );
        workers[victim] = spawn(CHUNK_ROLE);
    }
    for w in workers.iter_mut().chain([&mut fan_in_worker]) {
        if !finished.contains(&w.pid()) {
            w.expect_success(&deadline);
        }
    }

    // Nothing lost, nothing added, everything succeeded.
    assert_eq!(
        queue.stats().expect("stats").count(JobStatus::Succeeded),
        (CHUNKS + 1) as i64,
        "every chunk and the fan-in succeeded"
    );
    let info = queue
        .workflow(ids.workflow_id)
        .expect("read")
        .expect("the workflow");
    assert_eq!(info.steps.len(), CHUNKS + 1, "no job lost or added");
    assert!(info.is_finished());
    let fan_in_step = info
        .steps
        .iter()
        .find(|s| s.id == fan_in)
        .expect("the fan-in step");
    assert_eq!(fan_in_step.waiting_for, 0);
    assert_eq!(fan_in_step.waits_for.len(), CHUNKS);
    assert!(
        fan_in_step
            .waits_for
            .iter()
            .all(|w| w.state == litejobs::workflow::WaitState::Done),
        "every wait settled done"
    );
    let held_rows = info.steps.iter().filter(|s| s.waiting_for != 0).count();
    assert_eq!(held_rows, 0, "no job is left counting waits");

    let lines = child::read_lines(&log_path);
    let mut ran = HashSet::new();
    ended_chunks(&lines, &mut ran);
    assert_eq!(ran, chunks, "every chunk ran to its end");
    let fan_in_runs: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("start fan_in "))
        .collect();
    assert_eq!(
        fan_in_runs.len(),
        1,
        "the fan-in ran exactly once: {fan_in_runs:?}"
    );
    let deps: Vec<&String> = lines.iter().filter(|l| l.starts_with("deps ")).collect();
    assert_eq!(deps.len(), 1);
    let f: Vec<&str> = deps[0].split(' ').collect();
    assert_eq!(
        (f[2], f[3]),
        (CHUNKS.to_string().as_str(), CHUNKS.to_string().as_str()),
        "when the fan-in started, all its {CHUNKS} chunks had succeeded: {}",
        deps[0]
    );
    assert!(
        while_held > 0,
        "no kill landed while chunks were still releasing the fan-in"
    );
    let reruns = lines
        .iter()
        .filter(|l| l.starts_with("start chunk "))
        .count()
        - CHUNKS;
    println!(
        "workflow crash test: {} of {KILLS} kills (pids {killed:?}), {while_held} while the \
         fan-in still waited; {reruns} chunk runs repeated after a kill; the fan-in ran once",
        killed.len()
    );
}
