//! Soak (not run by CI: `#[ignore]`; run it with `scripts/soak.sh [MINUTES] [JOBS]`): a
//! million jobs of 4 ms each on one file, worked by several worker processes that the test
//! kills with SIGKILL at seeded random moments (every 0.2–2 s, one at a time) and restarts at
//! once, until every job is done or the minutes are up (then the kills stop and the workers
//! finish what is left). With the defaults that is about ten minutes of kills.
//!
//! It reports jobs per second, enqueue-to-done latency, the maximum lease overrun (the
//! longest any job stayed `running` past its lease before a reaper made it due again, sampled
//! every 100 ms), and checks that nothing was lost or duplicated: every job is in the table
//! once and succeeded, no two runs of a job overlapped while the earlier one held a live
//! lease, and a job that ran to completion more than once did so only because the process of
//! the earlier run was killed before its outcome was written (at-least-once).
//!
//! Settings come from the environment: `SOAK_MINUTES` (default 10), `SOAK_JOBS` (default
//! 1 000 000), `SOAK_WORKERS` (worker processes, default 2), `SOAK_JOB_US` (time per job,
//! default 4000), `SOAK_PACED=1` (jobs arrive evenly over the run instead of all at once),
//! `LITEJOBS_TEST_SEED` (replays the kill schedule).

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use litejobs::{JobContext, JobError, NewJob, Queue, Worker};
use serde_json::json;

use crate::support::child::{
    self, AppendLog, ChildProc, Deadline, Prng, DB_VAR, LOG_VAR, SIGNAL_VAR,
};
use crate::support::{raw_conn, temp_dir};

const ROLE: &str = "soak-worker";
const CHILD_TEST: &str = "soak::child_soak_worker";
const JOB_TYPE: &str = "soak";
/// How long a soak child may live at most (beyond the kill phase, to finish the backlog).
const CAP_VAR: &str = "SOAK_CHILD_CAP_SECS";
/// Time per job, in microseconds.
const JOB_US_VAR: &str = "SOAK_JOB_US";
/// 4 ms per job: two worker processes of four threads get through a million jobs in about
/// ten minutes, busy the whole time.
const DEFAULT_JOB_US: u64 = 4000;
/// Each job may lose one attempt per kill of the process running it; attempts are plenty so
/// that no job can die of kills alone (a dead job would show up as lost).
const MAX_ATTEMPTS: u32 = 1000;
const ENQUEUE_BATCH: usize = 1_000;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
        Err(_) => default,
    }
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A soak worker process: short timeouts and a quick reaper, so a killed process's jobs come
/// back within about a second. Runs until the stop file appears and no work is left.
#[test]
fn child_soak_worker() {
    if !child::is_child(ROLE) {
        return;
    }
    let cap = Duration::from_secs(child::env_u64(CAP_VAR));
    let deadline = Deadline::new("soak child", cap);
    let queue = Queue::open(child::env_path(DB_VAR)).expect("child: opening the queue");
    let log = Arc::new(AppendLog::open(&child::env_path(LOG_VAR)));
    let stop = child::env_path(SIGNAL_VAR);
    let busy = Duration::from_micros(child::env_u64(JOB_US_VAR));
    let pid = std::process::id();
    let worker = Worker::builder(&queue)
        .handler(JOB_TYPE, move |ctx: &JobContext| -> Result<(), JobError> {
            let start = child::unix_nanos();
            // The job's own work: waiting, as an email or webhook job waits on the network.
            std::thread::sleep(busy);
            log.line(&format!(
                "{} {} {pid} {start} {}",
                ctx.id(),
                ctx.attempt(),
                child::unix_nanos()
            ));
            Ok(())
        })
        .concurrency(4)
        .default_timeout(Duration::from_secs(5))
        .lease_grace(Duration::from_millis(500))
        .reap_interval(Duration::from_millis(250))
        .poll_interval(Duration::from_millis(50))
        .start()
        .expect("child: starting the worker");
    child::wait_for_file(&stop, &deadline);
    child::wait_until_no_work(&queue, &deadline);
    worker
        .shutdown(Duration::from_secs(30))
        .expect("child: graceful shutdown");
}

/// One completed handler run, from the run log.
#[derive(Debug, Clone, Copy)]
struct Run {
    attempt: i64,
    pid: u32,
    start: u128,
    end: u128,
}

#[test]
#[ignore = "a soak of minutes: run scripts/soak.sh"]
fn soak_a_million_jobs_with_random_sigkills() {
    if child::is_child(ROLE) {
        return;
    }
    let minutes: f64 = env_or("SOAK_MINUTES", 10.0);
    let jobs: usize = env_or("SOAK_JOBS", 1_000_000);
    let workers: usize = env_or("SOAK_WORKERS", 2);
    let job_us: u64 = env_or(JOB_US_VAR, DEFAULT_JOB_US);
    let paced = std::env::var("SOAK_PACED").is_ok_and(|v| v == "1");
    let duration = Duration::from_secs_f64(minutes * 60.0);
    // By default every job is enqueued at once and the workers are busy until the end, so
    // every kill interrupts running and prefetched jobs. Paced: the jobs arrive evenly over
    // 90 % of the run (for latency under a steady stream).
    let produce_for = if paced {
        duration.mul_f64(0.9)
    } else {
        Duration::ZERO
    };
    let child_cap = duration + Duration::from_secs(1800);
    let deadline = Deadline::new("soak", child_cap + Duration::from_secs(60));
    let mut rng = Prng::new(Prng::seed_for("soak"));
    let dir = temp_dir();
    let db = dir.path().join("soak.db");
    let log_path = dir.path().join("runs.log");
    let stop = dir.path().join("stop");
    println!(
        "soak: {jobs} jobs ({}), {workers} worker processes killed for {minutes} min, {job_us} us \
         of work per job; files in {}",
        if paced {
            "enqueued evenly over 90 % of the run"
        } else {
            "all enqueued at the start"
        },
        dir.path().display()
    );
    let queue = Queue::open(&db).expect("opening the queue");

    // The lease monitor: the longest a running job has been past its lease.
    let overrun = Arc::new(AtomicI64::new(0));
    let monitoring = Arc::new(AtomicBool::new(true));
    let monitor = {
        let (overrun, monitoring, db) = (Arc::clone(&overrun), Arc::clone(&monitoring), db.clone());
        std::thread::spawn(move || {
            let conn = raw_conn(&db);
            while monitoring.load(Ordering::Relaxed) {
                let now = wall_ms();
                let worst: Option<i64> = conn
                    .query_row(
                        "SELECT MAX(?1 - locked_until) FROM jobs
                         WHERE status = 'running' AND locked_until < ?1",
                        [now],
                        |r| r.get(0),
                    )
                    .unwrap_or(None);
                if let Some(worst) = worst {
                    overrun.fetch_max(worst, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    let envs: Vec<(&str, OsString)> = vec![
        (DB_VAR, db.clone().into_os_string()),
        (LOG_VAR, log_path.clone().into_os_string()),
        (SIGNAL_VAR, stop.clone().into_os_string()),
        (CAP_VAR, child_cap.as_secs().to_string().into()),
        (JOB_US_VAR, job_us.to_string().into()),
    ];
    let mut spawned = 0;
    let mut spawn = |dir: &Path| {
        spawned += 1;
        ChildProc::spawn(dir, &format!("worker-{spawned}"), CHILD_TEST, ROLE, &envs)
    };
    let started = Instant::now();
    let producer = {
        let queue = queue.clone();
        std::thread::spawn(move || {
            let batches = jobs.div_ceil(ENQUEUE_BATCH);
            let mut first_id = None;
            for b in 0..batches {
                let due = started + produce_for.mul_f64(b as f64 / batches as f64);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                let from = b * ENQUEUE_BATCH;
                let to = (from + ENQUEUE_BATCH).min(jobs);
                let ids = queue
                    .enqueue_batch(
                        (from..to)
                            .map(|i| {
                                NewJob::new(JOB_TYPE, json!({ "n": i })).max_attempts(MAX_ATTEMPTS)
                            })
                            .collect(),
                    )
                    .expect("enqueueing a batch");
                first_id.get_or_insert(ids[0]);
            }
            (first_id.expect("at least one job"), started.elapsed())
        })
    };
    let mut procs: Vec<ChildProc> = (0..workers).map(|_| spawn(dir.path())).collect();
    let mut killed: HashSet<u32> = HashSet::new();
    let mut next_report = started + Duration::from_secs(10);
    let mut max_backlog = 0;
    let succeeded = |queue: &Queue| -> (i64, i64) {
        let stats = queue.stats().expect("stats");
        let done = stats.count(litejobs::JobStatus::Succeeded);
        let rows: i64 = stats.counts.iter().map(|c| c.count).sum();
        (done, rows - done)
    };
    while started.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(rng.range(200, 2000)));
        deadline.check(|| "the kill phase");
        let (done, backlog) = succeeded(&queue);
        max_backlog = max_backlog.max(backlog);
        if done == jobs as i64 {
            break;
        }
        let victim = rng.range(0, workers as u64 - 1) as usize;
        if let Some(status) = procs[victim].try_exit() {
            panic!(
                "soak worker pid {} exited by itself ({status}): {}",
                procs[victim].pid(),
                procs[victim].output()
            );
        }
        killed.insert(procs[victim].pid());
        procs[victim].kill();
        procs[victim] = spawn(dir.path());
        if Instant::now() >= next_report {
            println!(
                "soak: {:.0?} in: {} kills, {done} jobs done, {backlog} waiting or running",
                started.elapsed(),
                killed.len()
            );
            next_report += Duration::from_secs(10);
        }
    }
    let kills_ended = started.elapsed();
    let (first_id, enqueue_took) = producer.join().expect("the producer thread");
    let (_, left_at_end_of_kills) = succeeded(&queue);
    std::fs::write(&stop, b"stop").expect("writing the stop file");
    for p in &mut procs {
        p.expect_success(&deadline);
    }
    let elapsed = started.elapsed();
    monitoring.store(false, Ordering::Relaxed);
    monitor.join().expect("the monitor thread");

    // The table: every job there once, and succeeded; how long jobs took from enqueue to done.
    let conn = raw_conn(&db);
    let (rows, succeeded): (i64, i64) = conn
        .query_row(
            "SELECT COUNT(*), COALESCE(SUM(status = 'succeeded'), 0) FROM jobs",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("counting jobs");
    let lost = jobs as i64 - succeeded;
    let extra_rows = rows - jobs as i64;
    let latency = |share: f64| -> i64 {
        let offset = ((succeeded as f64 - 1.0) * share).max(0.0) as i64;
        conn.query_row(
            "SELECT finished_at - created_at FROM jobs WHERE status = 'succeeded'
             ORDER BY 1 LIMIT 1 OFFSET ?1",
            [offset],
            |r| r.get(0),
        )
        .unwrap_or(-1)
    };
    let (p50, p99, p_max) = (latency(0.5), latency(0.99), latency(1.0));
    let fenced: HashMap<(i64, i64), u128> = conn
        .prepare(
            "SELECT job_id, attempt, finished_at FROM job_attempts
             WHERE outcome IN ('lost', 'timed_out')",
        )
        .and_then(|mut s| {
            s.query_map([], |r| {
                Ok((
                    (r.get::<_, i64>(0)?, r.get::<_, i64>(1)?),
                    r.get::<_, i64>(2)? as u128 * 1_000_000,
                ))
            })?
            .collect::<rusqlite::Result<_>>()
        })
        .expect("reading reaped attempts");
    let lost_attempts = fenced.len();

    // The run log: completed runs per job.
    let mut runs_per_job = vec![0u32; jobs];
    let mut multi: HashMap<i64, Vec<Run>> = HashMap::new();
    let read_runs = |each: &mut dyn FnMut(i64, Run)| {
        let file = std::fs::File::open(&log_path).expect("opening the run log");
        for line in BufReader::new(file).lines() {
            let line = line.expect("reading the run log");
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 5, "malformed run log line {line:?}");
            let num = |i: usize| -> u128 {
                f[i].parse()
                    .unwrap_or_else(|e| panic!("field {i} of {line:?}: {e}"))
            };
            each(
                num(0) as i64,
                Run {
                    attempt: num(1) as i64,
                    pid: num(2) as u32,
                    start: num(3),
                    end: num(4),
                },
            );
        }
    };
    read_runs(&mut |id, _| {
        let slot = usize::try_from(id - first_id).unwrap_or(usize::MAX);
        assert!(slot < jobs, "a run of job {id}, which was never enqueued");
        runs_per_job[slot] += 1;
    });
    let never_ran = runs_per_job.iter().filter(|&&n| n == 0).count();
    read_runs(&mut |id, run| {
        if runs_per_job[(id - first_id) as usize] > 1 {
            multi.entry(id).or_default().push(run);
        }
    });
    let mut overlapping = Vec::new();
    let mut unexplained = Vec::new();
    for (&id, runs) in &mut multi {
        runs.sort_by_key(|r| r.start);
        for (i, earlier) in runs.iter().enumerate() {
            let lease_end = fenced
                .get(&(id, earlier.attempt))
                .map_or(earlier.end, |&f| f.min(earlier.end));
            if runs[i + 1..].iter().any(|later| later.start < lease_end) {
                overlapping.push((id, runs.clone()));
            }
        }
        let (_, before_last) = runs.split_last().expect("several runs");
        if before_last.iter().any(|r| !killed.contains(&r.pid)) {
            unexplained.push((id, runs.clone()));
        }
    }
    let reruns: usize = multi.values().map(|r| r.len() - 1).sum();

    println!(
        "soak: {jobs} jobs in {elapsed:.1?} with {workers} worker processes and {} SIGKILLs \
         over {kills_ended:.1?} ({left_at_end_of_kills} jobs left when the kills stopped; \
         enqueueing took {enqueue_took:.1?})",
        killed.len()
    );
    // With everything enqueued at once, enqueue-to-done is mostly time in the backlog.
    let latency_text = if paced {
        format!("; enqueue to done p50 {p50} ms, p99 {p99} ms, max {p_max} ms")
    } else {
        String::new()
    };
    println!(
        "soak: throughput {:.0} jobs/s{latency_text}; largest backlog seen {max_backlog}",
        jobs as f64 / elapsed.as_secs_f64(),
    );
    println!(
        "soak: maximum lease overrun {} ms (the longest a running job stayed past its lease \
         before a reaper took it); {lost_attempts} attempts reaped from killed workers",
        overrun.load(Ordering::Relaxed)
    );
    println!(
        "soak: lost {lost}, duplicated rows {extra_rows}, never ran {never_ran}, runs \
         overlapping a live lease {}, completed twice without a kill {}; re-runs after a kill \
         {reruns} (at-least-once: the run finished, then its process was killed before the \
         outcome was written)",
        overlapping.len(),
        unexplained.len()
    );
    assert_eq!(lost, 0, "jobs lost (not succeeded)");
    assert_eq!(extra_rows, 0, "rows that were never enqueued");
    assert_eq!(never_ran, 0, "succeeded jobs without a completed run");
    assert!(
        overlapping.is_empty(),
        "runs overlapping a live lease (first few): {:?}",
        &overlapping[..overlapping.len().min(3)]
    );
    assert!(
        unexplained.is_empty(),
        "jobs completed twice without a kill (first few): {:?}",
        &unexplained[..unexplained.len().min(3)]
    );
}
