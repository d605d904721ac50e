//! Crash safety: a worker process running thousands of
//! short jobs is killed with SIGKILL at seeded random moments and restarted, several times;
//! then a last worker runs everything to the end and shuts down gracefully.
//!
//! Every handler run appends `start` and `end` lines (job, attempt, pid, run number, wall
//! time in ns) to a log file, and jobs with an idempotency key append an `effect` line from
//! inside `ctx.once`. From the log and the database the parent proves: every job succeeded
//! and none was lost; no two runs of one job overlapped while the earlier one still held a
//! live lease; runs that never ended belong to killed processes and were reaped (`lost`);
//! and keyed side effects happened at least once, repeated only after a kill.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use litejobs::{AttemptRecord, JobContext, JobError, JobStatus, NewJob, Queue, Worker};
use serde_json::json;

use crate::support::child::{
    self, AppendLog, ChildProc, Deadline, LogTail, Prng, CHILD_LIFETIME_CAP, DB_VAR, LOG_VAR,
};
use crate::support::{count_rows, temp_dir};

/// Jobs enqueued.
const JOBS: usize = 3000;
/// Every this many jobs carries an idempotency key and guards its side effect with `once`.
const KEYED_EVERY: usize = 10;
/// Worker processes killed with SIGKILL before the last one runs to the end.
const KILLS: usize = 5;
/// A killed worker is killed after this many more finished handler runs (seeded random).
/// `KILLS * MAX_PROGRESS` stays well below `JOBS`, so no killed worker can run out of work.
const MIN_PROGRESS: u64 = 1;
const MAX_PROGRESS: u64 = 400;
/// Each job may lose at most one attempt per kill; a few more make "dead" impossible.
const MAX_ATTEMPTS: u32 = KILLS as u32 + 3;
/// The whole test, children included.
const TEST_CAP: Duration = Duration::from_secs(120);

const ROLE: &str = "crash-worker";
const CHILD_TEST: &str = "crash::child_worker_process";
const JOB_TYPE: &str = "work";

/// The child: a worker with short timeouts and leases, so the next child reaps the jobs a
/// killed one held within a few seconds. Runs until no work is left, then shuts down.
#[test]
fn child_worker_process() {
    if !child::is_child(ROLE) {
        return;
    }
    let deadline = Deadline::new("crash child", CHILD_LIFETIME_CAP);
    let queue = Queue::open(child::env_path(DB_VAR)).expect("child: opening the queue");
    let log = Arc::new(AppendLog::open(&child::env_path(LOG_VAR)));
    let pid = std::process::id();
    let runs = Arc::new(AtomicU64::new(0));
    let worker = Worker::builder(&queue)
        .handler(JOB_TYPE, move |ctx: &JobContext| -> Result<(), JobError> {
            let run = runs.fetch_add(1, Ordering::Relaxed);
            let (id, attempt) = (ctx.id(), ctx.attempt());
            log.line(&format!(
                "start {id} {attempt} {pid} {run} {}",
                child::unix_nanos()
            ));
            // The job's own work.
            std::thread::sleep(Duration::from_millis(1));
            let outcome = if ctx.idempotency_key().is_some() {
                ctx.once(|| {
                    log.line(&format!(
                        "effect {id} {attempt} {pid} {run} {}",
                        child::unix_nanos()
                    ));
                    Ok(())
                })
                .map(|_| ())
            } else {
                Ok(())
            };
            log.line(&format!(
                "end {id} {attempt} {pid} {run} {}",
                child::unix_nanos()
            ));
            outcome
        })
        .concurrency(4)
        .default_timeout(Duration::from_secs(2))
        .lease_grace(Duration::from_millis(500))
        .reap_interval(Duration::from_millis(200))
        .poll_interval(Duration::from_millis(50))
        .start()
        .expect("child: starting the worker");
    child::wait_until_no_work(&queue, &deadline);
    worker
        .shutdown(Duration::from_secs(10))
        .expect("child: graceful shutdown");
}

#[test]
fn sigkill_at_random_moments_loses_nothing_and_never_runs_a_job_twice_under_a_live_lease() {
    if child::is_child(ROLE) {
        return;
    }
    let deadline = Deadline::new("crash test", TEST_CAP);
    let mut rng = Prng::new(Prng::seed_for("crash test"));
    let dir = temp_dir();
    let db = dir.path().join("jobs.db");
    let log_path = dir.path().join("runs.log");
    let queue = Queue::open(&db).expect("opening the queue");
    let jobs = (0..JOBS)
        .map(|i| {
            let job = NewJob::new(JOB_TYPE, json!({ "n": i })).max_attempts(MAX_ATTEMPTS);
            if i % KEYED_EVERY == 0 {
                job.idempotency_key(format!("crash:effect:{i}"))
            } else {
                job
            }
        })
        .collect();
    let ids = queue.enqueue_batch(jobs).expect("enqueueing the jobs");
    assert_eq!(ids.len(), JOBS);
    let keyed: HashSet<i64> = ids.iter().step_by(KEYED_EVERY).copied().collect();

    let envs: Vec<(&str, OsString)> = vec![
        (DB_VAR, db.clone().into_os_string()),
        (LOG_VAR, log_path.clone().into_os_string()),
    ];
    let mut tail = LogTail::new(&log_path);
    let mut killed: HashSet<u32> = HashSet::new();
    for k in 0..KILLS {
        let target = rng.range(MIN_PROGRESS, MAX_PROGRESS);
        let extra_micros = rng.range(0, 2000);
        let mut worker =
            ChildProc::spawn(dir.path(), &format!("worker-{k}"), CHILD_TEST, ROLE, &envs);
        let pid = worker.pid();
        let pid_text = pid.to_string();
        let mut ended = 0;
        while ended < target {
            ended += tail
                .read_new()
                .iter()
                .filter(|line| {
                    let f: Vec<&str> = line.split(' ').collect();
                    f[0] == "end" && f.get(3) == Some(&pid_text.as_str())
                })
                .count() as u64;
            if let Some(status) = worker.try_exit() {
                panic!(
                    "worker {k} (pid {pid}) exited ({status}) after {ended} runs, before its \
                     kill at {target}; its output:\n{}",
                    worker.output()
                );
            }
            deadline.check(|| {
                format!(
                    "waiting for worker {k} (pid {pid}) to finish {target} runs ({ended} so \
                     far); its output:\n{}",
                    worker.output()
                )
            });
            std::thread::sleep(Duration::from_millis(1));
        }
        // A seeded sliver of extra time, so the kill lands at varied points of a run.
        std::thread::sleep(Duration::from_micros(extra_micros));
        worker.kill();
        killed.insert(pid);
        println!("crash test: killed worker {k} (pid {pid}) after {ended} finished runs");
    }
    let mut last = ChildProc::spawn(dir.path(), "worker-last", CHILD_TEST, ROLE, &envs);
    let last_pid = last.pid();
    last.expect_success(&deadline);

    // Nothing lost, nothing dead, nothing added.
    assert_eq!(
        count_rows(&db, "jobs"),
        JOBS as i64,
        "the jobs table must hold exactly the enqueued jobs"
    );
    let mut records = HashMap::new();
    let mut histories: HashMap<i64, Vec<AttemptRecord>> = HashMap::new();
    for &id in &ids {
        let job = queue
            .job(id)
            .expect("reading a job")
            .unwrap_or_else(|| panic!("job {id} was lost: its row is gone"));
        assert_eq!(
            job.status,
            JobStatus::Succeeded,
            "job {id} must end succeeded; it is {:?} after {} attempts, last error {:?}",
            job.status,
            job.attempts,
            job.last_error
        );
        records.insert(id, job);
        histories.insert(id, queue.attempts(id).expect("reading the attempt history"));
    }

    let log = parse_log(&child::read_lines(&log_path));
    let summary = check_runs(&log, &records, &histories, &killed);
    check_effects(&log, &records, &keyed, &killed);
    let lost_rows = check_lost_history(&histories, &killed);
    let (cut_keyed, cut_after_effect, repeated) = effect_counts(&log, &keyed);
    println!(
        "crash test: {KILLS} kills (pids {killed:?}), last worker pid {last_pid}; {} runs of \
         {JOBS} jobs, {} reruns, {} runs cut by a kill, {lost_rows} attempts reaped as lost; \
         {cut_keyed} keyed runs cut by a kill, {cut_after_effect} of them after their side \
         effect; {repeated} side effects repeated (a kill between the effect and its record)",
        summary.runs, summary.reruns, summary.unfinished,
    );
}

/// One handler run, from its `start` line and (unless its process died) its `end` line.
#[derive(Debug, Clone)]
struct Run {
    job: i64,
    attempt: i64,
    pid: u32,
    start: u128,
    end: Option<u128>,
}

#[derive(Debug, Clone)]
struct Effect {
    job: i64,
    pid: u32,
    /// The run (per process) that did it.
    run: u64,
    at: u128,
}

#[derive(Debug, Default)]
struct RunLog {
    runs: Vec<Run>,
    /// The same runs by (pid, run number).
    by_key: HashMap<(u32, u64), Run>,
    effects: Vec<Effect>,
}

fn parse_log(lines: &[String]) -> RunLog {
    let mut runs: BTreeMap<(u32, u64), Run> = BTreeMap::new();
    let mut effects = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 6, "malformed run log line {line:?}");
        let num = |i: usize| -> u128 {
            f[i].parse()
                .unwrap_or_else(|e| panic!("field {i} of run log line {line:?}: {e}"))
        };
        let (job, attempt, pid, run, at) = (
            num(1) as i64,
            num(2) as i64,
            num(3) as u32,
            num(4) as u64,
            num(5),
        );
        match f[0] {
            "start" => {
                let old = runs.insert(
                    (pid, run),
                    Run {
                        job,
                        attempt,
                        pid,
                        start: at,
                        end: None,
                    },
                );
                assert!(old.is_none(), "run {run} of pid {pid} started twice");
            }
            "end" => {
                let r = runs
                    .get_mut(&(pid, run))
                    .unwrap_or_else(|| panic!("{line:?} has no start line"));
                assert_eq!(
                    (r.job, r.attempt),
                    (job, attempt),
                    "{line:?} ends another run"
                );
                assert!(r.end.is_none(), "run {run} of pid {pid} ended twice");
                assert!(at >= r.start, "{line:?} ends before it started");
                r.end = Some(at);
            }
            "effect" => effects.push(Effect { job, pid, run, at }),
            other => panic!("unknown run log record {other:?} in {line:?}"),
        }
    }
    for e in &effects {
        let r = runs
            .get(&(e.pid, e.run))
            .unwrap_or_else(|| panic!("side effect {e:?} outside any run"));
        assert_eq!(
            r.job, e.job,
            "side effect {e:?} inside a run of another job"
        );
    }
    RunLog {
        by_key: runs.clone().into_iter().collect(),
        runs: runs.into_values().collect(),
        effects,
    }
}

struct RunSummary {
    runs: usize,
    reruns: usize,
    unfinished: usize,
}

/// For the summary: keyed runs cut by a kill, how many of those had already done their
/// side effect, and side effects beyond the first of each job.
fn effect_counts(log: &RunLog, keyed: &HashSet<i64>) -> (usize, usize, usize) {
    let with_effect: HashSet<(u32, u64)> = log.effects.iter().map(|e| (e.pid, e.run)).collect();
    let cut: Vec<(u32, u64)> = log
        .by_key
        .iter()
        .filter(|(_, r)| r.end.is_none() && keyed.contains(&r.job))
        .map(|(k, _)| *k)
        .collect();
    let cut_after_effect = cut.iter().filter(|k| with_effect.contains(k)).count();
    let mut per_job: HashMap<i64, usize> = HashMap::new();
    for e in &log.effects {
        *per_job.entry(e.job).or_default() += 1;
    }
    let repeated = per_job.values().map(|n| n - 1).sum();
    (cut.len(), cut_after_effect, repeated)
}

/// When the attempt's lease ended if its run did not end it: the history row that fenced
/// it (`lost` from the reaper, `timed_out` from the dispatcher), in ns.
fn fenced_at(history: &[AttemptRecord], attempt: i64) -> Option<u128> {
    history
        .iter()
        .find(|a| {
            a.attempt == attempt
                && (a.outcome.as_str() == "lost" || a.outcome.as_str() == "timed_out")
        })
        .map(|a| a.finished_at as u128 * 1_000_000)
}

fn check_runs(
    log: &RunLog,
    records: &HashMap<i64, litejobs::JobRecord>,
    histories: &HashMap<i64, Vec<AttemptRecord>>,
    killed: &HashSet<u32>,
) -> RunSummary {
    let mut by_job: HashMap<i64, Vec<&Run>> = HashMap::new();
    for run in &log.runs {
        assert!(
            records.contains_key(&run.job),
            "a run of job {} that was never enqueued",
            run.job
        );
        by_job.entry(run.job).or_default().push(run);
    }
    let mut unfinished = 0;
    for (&id, job) in records {
        let history = &histories[&id];
        let mut runs = by_job.remove(&id).unwrap_or_default();
        assert!(
            !runs.is_empty(),
            "job {id} succeeded without any recorded run"
        );
        assert!(
            runs.len() as i64 <= job.attempts,
            "job {id}: {} runs recorded but only {} attempts counted: {runs:?}",
            runs.len(),
            job.attempts
        );
        let mut attempts_seen = HashSet::new();
        for run in &runs {
            assert!(
                attempts_seen.insert(run.attempt),
                "job {id}: attempt {} ran more than once: {runs:?}",
                run.attempt
            );
            if run.end.is_none() {
                unfinished += 1;
                assert!(
                    killed.contains(&run.pid),
                    "job {id}: a run in pid {} never ended, but that process was not killed \
                     (it shut down gracefully): {run:?}",
                    run.pid
                );
                assert!(
                    fenced_at(history, run.attempt).is_some(),
                    "job {id}: attempt {} died with pid {} but was never reaped as lost; \
                     history: {history:?}",
                    run.attempt,
                    run.pid
                );
            }
        }
        assert!(
            runs.iter()
                .any(|r| r.attempt == job.attempts && r.end.is_some()),
            "job {id} succeeded in attempt {} but no run of that attempt finished: {runs:?}",
            job.attempts
        );
        // No overlap under a live lease: each run's lease lasted until its run ended, or
        // until its attempt was fenced (reaped as lost, or timed out), whichever came first;
        // every later run of the job must start after that.
        runs.sort_by_key(|r| r.start);
        for (i, earlier) in runs.iter().enumerate() {
            let lease_end = match (earlier.end, fenced_at(history, earlier.attempt)) {
                (Some(end), Some(fenced)) => end.min(fenced),
                (Some(end), None) => end,
                (None, Some(fenced)) => fenced,
                (None, None) => unreachable!("checked above"),
            };
            for later in &runs[i + 1..] {
                assert!(
                    later.start >= lease_end,
                    "job {id} ran twice at once under a live lease: {later:?} started {} ns \
                     before the lease of {earlier:?} ended; history: {history:?}",
                    lease_end - later.start
                );
            }
        }
    }
    let runs = log.runs.len();
    RunSummary {
        runs,
        reruns: runs - records.len(),
        unfinished,
    }
}

/// Keyed jobs: the side effect happened at least once; a repeat only follows a kill between
/// the effect and its record (the documented at-least-once edge), never a graceful run.
fn check_effects(
    log: &RunLog,
    records: &HashMap<i64, litejobs::JobRecord>,
    keyed: &HashSet<i64>,
    killed: &HashSet<u32>,
) {
    let mut by_job: HashMap<i64, Vec<&Effect>> = HashMap::new();
    for effect in &log.effects {
        assert!(
            keyed.contains(&effect.job),
            "job {} has no idempotency key but logged a side effect",
            effect.job
        );
        by_job.entry(effect.job).or_default().push(effect);
    }
    for &id in keyed {
        let mut effects = by_job.remove(&id).unwrap_or_default();
        assert!(
            !effects.is_empty(),
            "keyed job {id} succeeded but its side effect never happened"
        );
        effects.sort_by_key(|e| e.at);
        if effects.len() > 1 {
            assert!(
                records[&id].attempts > 1,
                "keyed job {id}: side effect repeated within one attempt: {effects:?}"
            );
            let (_, before_last) = effects.split_last().expect("not empty");
            for e in before_last {
                // `once` records the effect before returning, so a run that went on to its
                // `end` line had recorded it: only a run cut by a kill may leave it unrecorded.
                let run = &log.by_key[&(e.pid, e.run)];
                assert!(
                    killed.contains(&e.pid) && run.end.is_none(),
                    "keyed job {id}: the side effect was repeated although an earlier one ran \
                     in a run that was not cut by a kill (so `once` had recorded it): \
                     {effects:?}, earlier run {run:?}"
                );
            }
        }
    }
}

/// Every reaped (`lost`) attempt belonged to a killed worker: the reaper never took a job
/// from a live one. Returns how many there were.
fn check_lost_history(
    histories: &HashMap<i64, Vec<AttemptRecord>>,
    killed: &HashSet<u32>,
) -> usize {
    let mut lost = 0;
    for (id, history) in histories {
        for a in history.iter().filter(|a| a.outcome.as_str() == "lost") {
            lost += 1;
            let worker = a.worker.as_deref().unwrap_or_default();
            // Worker ids are host:pid:random.
            let pid: Option<u32> = worker.rsplit(':').nth(1).and_then(|p| p.parse().ok());
            assert!(
                pid.is_some_and(|p| killed.contains(&p)),
                "job {id}: attempt {} was reaped from worker {worker:?}, which was not killed",
                a.attempt
            );
        }
        for a in history {
            // `timed_out` is legitimate (a 1 ms job stalled past 2 s on a loaded machine);
            // `failed` or `released` would mean a kill or a busy database became a failure.
            assert!(
                matches!(a.outcome.as_str(), "lost" | "succeeded" | "timed_out"),
                "job {id}: unexpected attempt outcome {:?} ({:?}); history: {history:?}",
                a.outcome,
                a.error
            );
        }
    }
    lost
}
