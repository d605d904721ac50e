//! Many processes on one file: two worker processes share one backlog and each job
//! runs exactly once; another process hammering SQLite's write lock causes waits, never job
//! failures or failed enqueues.

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejobs::{ErrorKind, JobContext, JobError, JobStatus, NewJob, Queue, Worker};
use serde_json::json;

use crate::support::child::{
    self, AppendLog, ChildProc, Deadline, Prng, CHILD_LIFETIME_CAP, DB_VAR, LOG_VAR, READY_VAR,
    SEED_VAR, SIGNAL_VAR,
};
use crate::support::{on_postgres, raw_conn, setup, sqlite_only, temp_dir};

/// The whole of each test, children included.
const TEST_CAP: Duration = Duration::from_secs(120);

const WORKER_ROLE: &str = "multiprocess-worker";
const WORKER_TEST: &str = "multiprocess::child_worker_process";
const LOCKER_ROLE: &str = "multiprocess-locker";
const LOCKER_TEST: &str = "multiprocess::child_locker_process";

/// Jobs shared by the two worker processes.
const SHARED_JOBS: usize = 10_000;
/// Jobs the in-process worker runs while another process hammers the lock.
const BUSY_JOBS: usize = 1000;
/// `enqueue` calls made while the lock is hammered.
const BUSY_ENQUEUES: usize = 200;

/// A worker process: says it is ready, waits for the go file (so both processes start on
/// an equal footing), runs jobs until none are left, then shuts down gracefully. Each run
/// appends `start <job> <attempt> <pid>` to the shared log. Its handlers hold their first
/// jobs until both processes have started one: quick jobs would otherwise all go to
/// whichever process started first on a loaded machine, and the test means to see two
/// processes share a backlog.
#[test]
fn child_worker_process() {
    if !child::is_child(WORKER_ROLE) {
        return;
    }
    let deadline = Deadline::new("multiprocess worker child", CHILD_LIFETIME_CAP);
    let queue = Queue::open(child::env_path(DB_VAR)).expect("child: opening the queue");
    let log = Arc::new(AppendLog::open(&child::env_path(LOG_VAR)));
    let pid = std::process::id();
    std::fs::write(child::env_path(READY_VAR), b"ready").expect("child: writing ready file");
    child::wait_for_file(&child::env_path(SIGNAL_VAR), &deadline);
    let dir = child::env_path(LOG_VAR)
        .parent()
        .expect("the log's directory")
        .to_path_buf();
    let both_started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = Worker::builder(&queue)
        .handler("shared", move |ctx: &JobContext| -> Result<(), JobError> {
            log.line(&format!("start {} {} {pid}", ctx.id(), ctx.attempt()));
            if !both_started.load(std::sync::atomic::Ordering::Acquire) {
                let mine = dir.join(format!("started-{pid}"));
                if !mine.exists() {
                    std::fs::write(&mine, b"").expect("child: writing its started file");
                }
                let end = Instant::now() + CHILD_LIFETIME_CAP / 2;
                while started_workers(&dir) < 2 {
                    assert!(
                        Instant::now() < end,
                        "child: the other worker never started a job"
                    );
                    std::thread::sleep(Duration::from_millis(2));
                }
                both_started.store(true, std::sync::atomic::Ordering::Release);
            }
            Ok(())
        })
        .concurrency(2)
        .poll_interval(Duration::from_millis(50))
        .start()
        .expect("child: starting the worker");
    child::wait_until_no_work(&queue, &deadline);
    worker
        .shutdown(Duration::from_secs(10))
        .expect("child: graceful shutdown");
}

/// How many worker processes have started a job (their `started-<pid>` files in `dir`).
fn started_workers(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("started-"))
                .count()
        })
        .unwrap_or(0)
}

/// A process that hammers the write lock until the stop file appears: `BEGIN IMMEDIATE`,
/// a small insert, hold the lock 1–50 ms, commit, let go for 5–25 ms (all by its own seeded
/// PRNG). Creates the ready file after its first cycle.
#[test]
fn child_locker_process() {
    if !child::is_child(LOCKER_ROLE) {
        return;
    }
    child::hammer_write_lock("multiprocess locker", 1..50, 5..25);
}

#[test]
fn two_worker_processes_share_ten_thousand_jobs_and_each_runs_exactly_once() {
    if child::is_child(WORKER_ROLE) {
        return;
    }
    let deadline = Deadline::new("two-process test", TEST_CAP);
    // On the PostgreSQL pass the test's schema (its URL, which the children open too);
    // else a new file.
    let env = on_postgres().then(setup);
    let dir = temp_dir();
    let db = match &env {
        Some(env) => env.path.clone(),
        None => dir.path().join("jobs.db"),
    };
    let log_path = dir.path().join("runs.log");
    let go = dir.path().join("go");
    let queue = Queue::open(&db).expect("opening the queue");
    let ids = queue
        .enqueue_batch(
            (0..SHARED_JOBS)
                .map(|i| NewJob::new("shared", json!({ "n": i })))
                .collect(),
        )
        .expect("enqueueing the jobs");

    let started = Instant::now();
    let mut workers: Vec<ChildProc> = (0..2)
        .map(|i| {
            let envs: Vec<(&str, OsString)> = vec![
                (DB_VAR, db.clone().into_os_string()),
                (LOG_VAR, log_path.clone().into_os_string()),
                (SIGNAL_VAR, go.clone().into_os_string()),
                (
                    READY_VAR,
                    dir.path().join(format!("ready-{i}")).into_os_string(),
                ),
            ];
            ChildProc::spawn(
                dir.path(),
                &format!("worker-{i}"),
                WORKER_TEST,
                WORKER_ROLE,
                &envs,
            )
        })
        .collect();
    for i in 0..2 {
        child::wait_for_file(&dir.path().join(format!("ready-{i}")), &deadline);
    }
    std::fs::write(&go, b"go").expect("writing the go file");
    for worker in &mut workers {
        worker.expect_success(&deadline);
    }
    let elapsed = started.elapsed();

    let mut runs_by_job: HashMap<i64, Vec<String>> = HashMap::new();
    let mut runs_by_pid: HashMap<u32, usize> = HashMap::new();
    let lines = child::read_lines(&log_path);
    for line in &lines {
        let f: Vec<&str> = line.split(' ').collect();
        assert!(
            f.len() == 4 && f[0] == "start",
            "malformed log line {line:?}"
        );
        let job: i64 = f[1].parse().expect("job id");
        let pid: u32 = f[3].parse().expect("pid");
        runs_by_job.entry(job).or_default().push(line.clone());
        *runs_by_pid.entry(pid).or_default() += 1;
    }
    let duplicated: Vec<_> = runs_by_job
        .values()
        .filter(|runs| runs.len() > 1)
        .take(5)
        .collect();
    assert!(
        duplicated.is_empty(),
        "jobs ran more than once (first few): {duplicated:?}"
    );
    assert_eq!(lines.len(), SHARED_JOBS, "one run per job in all");
    for &id in &ids {
        assert!(runs_by_job.contains_key(&id), "job {id} never ran");
        let job = queue.job(id).expect("reading a job").expect("job exists");
        assert_eq!(
            (job.status, job.attempts),
            (JobStatus::Succeeded, 1),
            "job {id} must have succeeded in its one attempt; last error {:?}",
            job.last_error
        );
    }
    for worker in &workers {
        let done = runs_by_pid.get(&worker.pid()).copied().unwrap_or(0);
        assert!(
            done > 0,
            "worker pid {} ran no jobs: {runs_by_pid:?}",
            worker.pid()
        );
    }
    println!(
        "two-process test: {SHARED_JOBS} jobs in {elapsed:?}, split between pids {runs_by_pid:?}"
    );
}

#[test]
fn another_process_hammering_the_write_lock_causes_waits_not_failures() {
    // SQLite's write lock, taken by another process's BEGIN IMMEDIATE.
    if child::is_child(LOCKER_ROLE) || sqlite_only() {
        return;
    }
    let deadline = Deadline::new("busy-lock test", TEST_CAP);
    let seed = Prng::seed_for("busy-lock test");
    let dir = temp_dir();
    let db = dir.path().join("jobs.db");
    let stop = dir.path().join("stop");
    let ready = dir.path().join("ready");
    let queue = Queue::open(&db).expect("opening the queue");
    let mut ids = queue
        .enqueue_batch(
            (0..BUSY_JOBS)
                .map(|i| NewJob::new("busy", json!({ "n": i })))
                .collect(),
        )
        .expect("enqueueing the jobs");

    let envs: Vec<(&str, OsString)> = vec![
        (DB_VAR, db.clone().into_os_string()),
        (SIGNAL_VAR, stop.clone().into_os_string()),
        (READY_VAR, ready.clone().into_os_string()),
        (SEED_VAR, seed.to_string().into()),
    ];
    let mut locker = ChildProc::spawn(dir.path(), "locker", LOCKER_TEST, LOCKER_ROLE, &envs);
    child::wait_for_file(&ready, &deadline);

    let started = Instant::now();
    let worker = Worker::builder(&queue)
        .handler("busy", |_: &JobContext| -> Result<(), JobError> {
            // The job's own work; it keeps the worker writing through the whole hammering.
            std::thread::sleep(Duration::from_millis(1));
            Ok(())
        })
        .concurrency(4)
        .poll_interval(Duration::from_millis(50))
        .start()
        .expect("starting the worker");
    let mut refused = Vec::new();
    let mut slowest = Duration::ZERO;
    let mut waited = 0;
    let mut pace = Prng::new(seed ^ 0x5eed);
    for i in 0..BUSY_ENQUEUES {
        // Spread the calls over the hammering (seeded gaps), so that many of them meet a
        // held lock instead of all fitting in one of the locker's pauses.
        std::thread::sleep(Duration::from_millis(pace.range(0, 8)));
        let t = Instant::now();
        match queue.enqueue(NewJob::new("busy", json!({ "late": i }))) {
            Ok(id) => ids.push(id),
            Err(e) => refused.push((e.kind(), e.to_string())),
        }
        let took = t.elapsed();
        slowest = slowest.max(took);
        if took >= Duration::from_millis(1) {
            waited += 1;
        }
        deadline.check(|| "enqueueing while the lock is hammered");
    }
    let enqueued_in = started.elapsed();
    let other_errors: Vec<_> = refused
        .iter()
        .filter(|(kind, _)| *kind != ErrorKind::Busy)
        .collect();
    assert!(
        other_errors.is_empty(),
        "enqueue may only fail with ErrorKind::Busy under a busy lock: {other_errors:?}"
    );
    assert!(
        refused.is_empty(),
        "with the default 5 s busy timeout every enqueue must wait its turn and succeed: \
         {} of {BUSY_ENQUEUES} were refused as busy: {refused:?}",
        refused.len()
    );

    let total = ids.len() as i64;
    loop {
        let stats = queue.stats().expect("reading stats");
        let succeeded = stats.count(JobStatus::Succeeded);
        if succeeded == total {
            break;
        }
        deadline.check(|| {
            format!(
                "waiting for all {total} jobs to succeed ({succeeded} so far; counts {:?})",
                stats.counts
            )
        });
        std::thread::sleep(Duration::from_millis(20));
    }
    let ran_in = started.elapsed();
    std::fs::write(&stop, b"stop").expect("writing the stop file");
    locker.expect_success(&deadline);
    worker
        .shutdown(Duration::from_secs(10))
        .expect("graceful shutdown");

    for &id in &ids {
        let job = queue.job(id).expect("reading a job").expect("job exists");
        assert_eq!(
            (job.status, job.attempts, job.last_error.as_deref()),
            (JobStatus::Succeeded, 1, None),
            "job {id}: a busy database must never cost an attempt"
        );
        for a in queue.attempts(id).expect("reading the history") {
            let error = a.error.unwrap_or_default().to_lowercase();
            assert!(
                !error.contains("locked") && !error.contains("busy"),
                "job {id}: attempt {} recorded a lock error: {error:?}",
                a.attempt
            );
        }
    }
    let cycles: i64 = raw_conn(&db)
        .query_row("SELECT COUNT(*) FROM hammer", [], |r| r.get(0))
        .expect("counting the locker's cycles");
    assert!(cycles > 0, "the locker process never took the lock");
    println!(
        "busy-lock test: {total} jobs succeeded in {ran_in:?} ({BUSY_ENQUEUES} enqueues took \
         {enqueued_in:?}, {waited} waited 1 ms or more, slowest {slowest:?}) while another \
         process took the write lock {cycles} times"
    );
}
