//! Several hosts, simulated: four worker processes on one PostgreSQL schema share 20 000 short
//! jobs while the parent kills a random one with SIGKILL every 0.2–2 s (seeded) and starts a
//! new one in its place, until every job has succeeded; then the four are stopped gracefully.
//! A tenth of the jobs carry one of 20 group keys, one in 21 an idempotency key whose side
//! effect runs inside `ctx.once`.
//!
//! As in tests/crash.rs, every handler run appends `start` and `end` lines (job, attempt, pid,
//! run number, group key, wall time in ns) to a log file that survives SIGKILL, and keyed
//! jobs an `effect` line. Each child also logs its queue clock's offset from the wall clock
//! (on PostgreSQL a queue's clock is the server's, measured at open), so the lease times in
//! the database can be set against the log's wall times exactly. From the log and the
//! database the parent proves: every job succeeded and none was lost or added; no two runs
//! of one job overlapped while the earlier held a live lease; for each group key no two runs
//! of its jobs overlapped, except that a run cut by a kill (or a timeout) lets the key go
//! once its attempt was fenced (reaped as `lost`, or `timed_out`), never earlier; runs that
//! never ended belong to killed processes and were reaped; no attempt was reaped before its
//! lease ended, nor twice, and every attempt but the last is in the history as reaped or
//! timed out; keyed side effects happened, repeated only after a kill.
//!
//! The assertions are about order and counts, never speed: a slow machine makes the test
//! slower (within its caps), not wrong. A live worker may lose a waiting job's lease when
//! its rounds are slow; that is counted, not refused (the run checks cover it), while every
//! `lost` row must span more than the whole lease.
//!
//! Why a tenth have group keys: jobs of one key run one after another, so a larger share
//! makes the run longer without making it more thorough (a quarter: 19 s of work instead of
//! 6 s). Before the counts were kept in shards and the next due job of a key had an index,
//! every host's rounds queued on one `job_counts` row and a claim sorted each free key's
//! backlog: two fifths grouped did not finish in 110 s.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::{sql_query, PgConnection, QueryableByName, RunQueryDsl};
use litejobs::{JobContext, JobError, JobStatus, NewJob, Queue, RetryPolicy, Worker};
use serde_json::json;

use crate::support::child::{self, AppendLog, ChildProc, Deadline, Prng, LOG_VAR, SIGNAL_VAR};
use crate::support::pg::{server, PgSchema};
use crate::support::temp_dir;

/// Jobs enqueued.
const JOBS: usize = 20_000;
/// Every this many jobs carries an idempotency key and guards its side effect with `once`
/// (953 jobs, 95 of them with a group key too).
const KEYED_EVERY: usize = 21;
/// Every this many jobs carries a group key (2000 jobs); why not more: the module docs.
const GROUPED_EVERY: usize = 10;
/// Group keys, shared round-robin by the grouped jobs (100 jobs each).
const GROUP_KEYS: usize = 20;
/// Worker processes kept running.
const WORKERS: usize = 4;
/// The gap between two kills, seeded random in this range (ms).
const MIN_KILL_GAP_MS: u64 = 200;
const MAX_KILL_GAP_MS: u64 = 2000;
/// A job loses at most one attempt per kill (or timeout), and within the cap there are at
/// most `TEST_CAP / MIN_KILL_GAP_MS` kills: "dead" is impossible.
const MAX_ATTEMPTS: u32 = 1000;
/// The workers' attempt time limit and lease grace: a killed worker's jobs are reaped
/// `LEASE_MS` after their claim (and the next reaper round, every 200 ms).
const JOB_TIMEOUT: Duration = Duration::from_secs(2);
const LEASE_GRACE: Duration = Duration::from_millis(500);
const LEASE_MS: i64 = 2500;
const _: () = assert!(JOB_TIMEOUT.as_millis() + LEASE_GRACE.as_millis() == LEASE_MS as u128);
/// The whole test, children included.
const TEST_CAP: Duration = Duration::from_secs(150);

const ROLE: &str = "pg-hosts-worker";
const CHILD_TEST: &str = "postgres::hosts::child_worker_process";
const JOB_TYPE: &str = "work";
/// The server URL and schema a child opens (set on the spawned command only).
const URL_VAR: &str = "LITEJOBS_TEST_HOSTS_URL";
const SCHEMA_VAR: &str = "LITEJOBS_TEST_HOSTS_SCHEMA";

/// A text given to this child through `var`.
fn env_text(var: &str) -> String {
    std::env::var(var)
        .unwrap_or_else(|_| panic!("child process: environment variable {var} is not set"))
}

/// How far `queue`'s clock is from the wall clock (ms), exactly: the queue's clock is the
/// wall clock in whole ms plus a fixed offset, so a reading taken between two wall readings
/// of the same millisecond gives it.
fn clock_offset_ms(queue: &Queue) -> i64 {
    let wall_ms = || (child::unix_nanos() / 1_000_000) as i64;
    loop {
        let before = wall_ms();
        let queue_ms = queue.now_ms();
        if wall_ms() == before {
            return queue_ms - before;
        }
    }
}

/// The child: a worker with short timeouts, leases and retries, so that the jobs a killed
/// one held are reaped by the others within about three seconds. Logs its clock offset,
/// runs until the stop file appears, then shuts down gracefully.
#[test]
fn child_worker_process() {
    if !child::is_child(ROLE) {
        return;
    }
    // The parent's cap: its deadline message (with its progress) comes first; should the
    // parent die, this ends the child.
    let deadline = Deadline::new("pg hosts child", TEST_CAP);
    let queue = Queue::builder()
        .pg_schema(env_text(SCHEMA_VAR))
        .open(env_text(URL_VAR))
        .expect("child: opening the queue");
    let log = Arc::new(AppendLog::open(&child::env_path(LOG_VAR)));
    let pid = std::process::id();
    // Before the worker (and its reaper) starts, so every time it writes has its offset.
    log.line(&format!("clock {pid} {}", clock_offset_ms(&queue)));
    let runs = Arc::new(AtomicU64::new(0));
    let handler_log = Arc::clone(&log);
    let worker = Worker::builder(&queue)
        .handler(JOB_TYPE, move |ctx: &JobContext| -> Result<(), JobError> {
            let log = &handler_log;
            let run = runs.fetch_add(1, Ordering::Relaxed);
            let (id, attempt) = (ctx.id(), ctx.attempt());
            let group = ctx.payload()["group"].as_str().unwrap_or("-").to_string();
            let line = |kind: &str| {
                log.line(&format!(
                    "{kind} {id} {attempt} {pid} {run} {group} {}",
                    child::unix_nanos()
                ));
            };
            line("start");
            // The job's own work: 1 to 4 ms, so that kills often land in a run.
            let work_ms = ctx.payload()["n"].as_u64().unwrap_or(0) % 4 + 1;
            std::thread::sleep(Duration::from_millis(work_ms));
            let outcome = if ctx.idempotency_key().is_some() {
                ctx.once(|| {
                    line("effect");
                    Ok(())
                })
                .map(|_| ())
            } else {
                Ok(())
            };
            line("end");
            outcome
        })
        .concurrency(4)
        .default_timeout(JOB_TIMEOUT)
        .lease_grace(LEASE_GRACE)
        .reap_interval(Duration::from_millis(200))
        .poll_interval(Duration::from_millis(50))
        .default_retry_policy(
            RetryPolicy::exponential(Duration::from_millis(50))
                .max_delay(Duration::from_millis(200)),
        )
        .start()
        .expect("child: starting the worker");
    child::wait_for_file(&child::env_path(SIGNAL_VAR), &deadline);
    worker
        .shutdown(Duration::from_secs(10))
        .expect("child: graceful shutdown");
}

#[test]
fn four_worker_processes_on_one_schema_killed_at_random_lose_nothing_and_keep_leases_and_group_keys(
) {
    if child::is_child(ROLE) {
        return;
    }
    let Some(url) = server() else {
        return;
    };
    let began = Instant::now();
    let deadline = Deadline::new("pg hosts test", TEST_CAP);
    let mut rng = Prng::new(Prng::seed_for("pg hosts test"));
    let schema = PgSchema::new(&url);
    let dir = temp_dir();
    let log_path = dir.path().join("runs.log");
    let stop_path = dir.path().join("stop");
    let queue = Queue::builder()
        .pg_schema(&schema.name)
        .open(&url)
        .expect("creating the queue's schema");

    let jobs = (0..JOBS)
        .map(|i| {
            let group =
                (i % GROUPED_EVERY == 1).then(|| format!("g{}", (i / GROUPED_EVERY) % GROUP_KEYS));
            let mut job =
                NewJob::new(JOB_TYPE, json!({ "n": i, "group": group })).max_attempts(MAX_ATTEMPTS);
            if let Some(group) = group {
                job = job.group_key(group);
            }
            if i % KEYED_EVERY == 0 {
                job = job.idempotency_key(format!("hosts:effect:{i}"));
            }
            job
        })
        .collect();
    let ids = queue.enqueue_batch(jobs).expect("enqueueing the jobs");
    assert_eq!(ids.len(), JOBS);
    let keyed: HashSet<i64> = ids.iter().step_by(KEYED_EVERY).copied().collect();
    let enqueued_in = began.elapsed();

    let envs: Vec<(&str, OsString)> = vec![
        (URL_VAR, url.clone().into()),
        (SCHEMA_VAR, schema.name.clone().into()),
        (LOG_VAR, log_path.clone().into_os_string()),
        (SIGNAL_VAR, stop_path.clone().into_os_string()),
    ];
    let mut spawned = 0;
    let mut spawn = |slot: usize| {
        spawned += 1;
        let label = format!("worker-{slot}-{spawned}");
        ChildProc::spawn(dir.path(), &label, CHILD_TEST, ROLE, &envs)
    };
    let mut workers: Vec<ChildProc> = (0..WORKERS).map(&mut spawn).collect();
    let mut killed: HashSet<u32> = HashSet::new();
    let mut next_kill =
        Instant::now() + Duration::from_millis(rng.range(MIN_KILL_GAP_MS, MAX_KILL_GAP_MS));
    let work_began = Instant::now();
    let mut next_look = Instant::now();
    let mut succeeded = 0;
    loop {
        // Counting is a query of its own: every 100 ms is enough, and spares the 2 cores.
        if Instant::now() >= next_look {
            let stats = queue.stats().expect("reading stats");
            succeeded = stats.count(JobStatus::Succeeded);
            assert_eq!(
                stats.count(JobStatus::Dead) + stats.count(JobStatus::Cancelled),
                0,
                "jobs went dead or cancelled ({succeeded} succeeded, {} kills)",
                killed.len()
            );
            if succeeded == JOBS as i64 {
                break;
            }
            next_look = Instant::now() + Duration::from_millis(100);
        }
        for w in &mut workers {
            if let Some(status) = w.try_exit() {
                panic!(
                    "worker pid {} exited ({status}) before it was told to stop; its output:\n{}",
                    w.pid(),
                    w.output()
                );
            }
        }
        deadline.check(|| {
            format!(
                "waiting for all jobs to succeed ({succeeded} of {JOBS} so far, {} kills)",
                killed.len()
            )
        });
        if Instant::now() >= next_kill {
            let slot = rng.range(0, WORKERS as u64 - 1) as usize;
            let pid = workers[slot].pid();
            workers[slot].kill();
            killed.insert(pid);
            workers[slot] = spawn(slot);
            println!(
                "pg hosts test: {:>6.2} s: killed worker {slot} (pid {pid}) at about \
                 {succeeded} succeeded; started pid {}",
                work_began.elapsed().as_secs_f64(),
                workers[slot].pid()
            );
            next_kill =
                Instant::now() + Duration::from_millis(rng.range(MIN_KILL_GAP_MS, MAX_KILL_GAP_MS));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let worked_for = work_began.elapsed();
    std::fs::write(&stop_path, b"stop").expect("writing the stop file");
    for w in &mut workers {
        w.expect_success(&deadline);
    }
    let last_pids: Vec<u32> = workers.iter().map(ChildProc::pid).collect();

    // The database: exactly the enqueued jobs, all succeeded.
    let mut conn = schema.raw();
    let rows: Vec<JobRow> = load(
        &mut conn,
        "SELECT id, status, attempts, group_key FROM jobs ORDER BY id",
    );
    assert_eq!(
        rows.len(),
        JOBS,
        "the jobs table must hold exactly the enqueued jobs"
    );
    let mut records: HashMap<i64, JobRow> = HashMap::new();
    for row in rows {
        assert_eq!(
            row.status, "succeeded",
            "job {} must end succeeded: {row:?}",
            row.id
        );
        records.insert(row.id, row);
    }
    for id in &ids {
        assert!(
            records.contains_key(id),
            "job {id} was lost: its row is gone"
        );
    }
    let duplicate_lost = count(
        &mut conn,
        "SELECT COUNT(*) AS n FROM (SELECT job_id, attempt FROM job_attempts
             WHERE outcome = 'lost' GROUP BY job_id, attempt HAVING COUNT(*) > 1) d",
    );
    assert_eq!(
        duplicate_lost, 0,
        "job_attempts holds (job_id, attempt) pairs reaped as lost more than once"
    );
    let mut histories: HashMap<i64, Vec<AttemptRow>> = HashMap::new();
    for a in load::<AttemptRow>(
        &mut conn,
        "SELECT job_id, attempt, worker, started_at, finished_at, outcome, error FROM job_attempts
         ORDER BY job_id, attempt, id",
    ) {
        histories.entry(a.job_id).or_default().push(a);
    }

    let log = parse_log(&child::read_lines(&log_path));
    let max_offset_ms = *log
        .clock_offsets
        .values()
        .max()
        .expect("no worker logged its clock");
    let fences = Fences {
        histories: &histories,
        max_offset_ms,
    };
    let history = check_history(&records, &histories, &killed);
    let summary = check_runs(&log, &records, &fences, &killed);
    let grouped_runs = check_group_keys(&log, &records, &fences);
    check_effects(&log, &records, &keyed, &killed);
    println!(
        "pg hosts test: {JOBS} jobs enqueued in {:.2} s, all succeeded {:.2} s later; {} kills, \
         {spawned} worker processes in all (last {last_pids:?}); {} runs, {} reruns, {} cut by \
         a kill; attempts reaped as lost: {} from killed workers, {} from live ones; {} timed \
         out; {grouped_runs} runs of grouped jobs; clock offsets {:?} ms; {:.2} s in all",
        enqueued_in.as_secs_f64(),
        worked_for.as_secs_f64(),
        killed.len(),
        summary.runs,
        summary.reruns,
        summary.unfinished,
        history.lost_from_killed,
        history.lost_from_live,
        history.timed_out,
        log.clock_offsets
            .values()
            .collect::<std::collections::BTreeSet<_>>(),
        began.elapsed().as_secs_f64(),
    );
}

#[derive(QueryableByName, Debug)]
struct JobRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
    #[diesel(sql_type = Nullable<Text>)]
    group_key: Option<String>,
}

#[derive(QueryableByName, Debug)]
struct AttemptRow {
    #[diesel(sql_type = BigInt)]
    job_id: i64,
    #[diesel(sql_type = BigInt)]
    attempt: i64,
    #[diesel(sql_type = Nullable<Text>)]
    worker: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    started_at: Option<i64>,
    #[diesel(sql_type = BigInt)]
    finished_at: i64,
    #[diesel(sql_type = Text)]
    outcome: String,
    #[diesel(sql_type = Nullable<Text>)]
    error: Option<String>,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn load<T: QueryableByName<diesel::pg::Pg> + 'static>(
    conn: &mut PgConnection,
    sql: &str,
) -> Vec<T> {
    sql_query(sql)
        .load(conn)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn count(conn: &mut PgConnection, sql: &str) -> i64 {
    load::<Count>(conn, sql)
        .first()
        .unwrap_or_else(|| panic!("{sql}: no row"))
        .n
}

/// One handler run, from its `start` line and (unless its process died) its `end` line.
#[derive(Debug, Clone)]
struct Run {
    job: i64,
    attempt: i64,
    pid: u32,
    group: Option<String>,
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
    /// Each worker process's queue clock less the wall clock (ms).
    clock_offsets: HashMap<u32, i64>,
}

fn parse_log(lines: &[String]) -> RunLog {
    let mut runs: BTreeMap<(u32, u64), Run> = BTreeMap::new();
    let mut effects = Vec::new();
    let mut clock_offsets = HashMap::new();
    for line in lines {
        let f: Vec<&str> = line.split(' ').collect();
        if f[0] == "clock" {
            assert_eq!(f.len(), 3, "malformed clock line {line:?}");
            let pid: u32 = f[1].parse().expect("clock line: pid");
            let offset: i64 = f[2].parse().expect("clock line: offset");
            assert!(
                clock_offsets.insert(pid, offset).is_none(),
                "pid {pid} logged its clock twice"
            );
            continue;
        }
        assert_eq!(f.len(), 7, "malformed run log line {line:?}");
        let num = |i: usize| -> u128 {
            f[i].parse()
                .unwrap_or_else(|e| panic!("field {i} of run log line {line:?}: {e}"))
        };
        let (job, attempt, pid, run, at) = (
            num(1) as i64,
            num(2) as i64,
            num(3) as u32,
            num(4) as u64,
            num(6),
        );
        let group = (f[5] != "-").then(|| f[5].to_string());
        match f[0] {
            "start" => {
                let old = runs.insert(
                    (pid, run),
                    Run {
                        job,
                        attempt,
                        pid,
                        group,
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
    for r in runs.values() {
        assert!(
            clock_offsets.contains_key(&r.pid),
            "pid {} ran jobs but never logged its clock",
            r.pid
        );
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
        clock_offsets,
    }
}

/// Where the attempt histories say leases ended.
struct Fences<'a> {
    histories: &'a HashMap<i64, Vec<AttemptRow>>,
    /// The largest worker clock offset: a time a worker's clock wrote, less this, is a
    /// wall time no later than the moment it was written.
    max_offset_ms: i64,
}

impl Fences<'_> {
    /// When attempt `attempt` of job `job` lost its lease if its run did not end it: the
    /// history row that fenced it (`lost` from a reaper, `timed_out` from its dispatcher),
    /// as a wall time in ns no later than the commit that fenced it. A worker writes the
    /// row's time by its own clock before it commits, and every later claim of the job (or
    /// of its group key) comes after that commit.
    fn fenced_at(&self, job: i64, attempt: i64) -> Option<u128> {
        self.histories
            .get(&job)?
            .iter()
            .find(|a| a.attempt == attempt && (a.outcome == "lost" || a.outcome == "timed_out"))
            .map(|a| (a.finished_at - self.max_offset_ms).max(0) as u128 * 1_000_000)
    }

    /// Until when `run` held its job (and group key) at the latest: its end, or its fence,
    /// whichever came first. Runs that never ended were checked to have a fence.
    fn lease_end(&self, run: &Run) -> u128 {
        match (run.end, self.fenced_at(run.job, run.attempt)) {
            (Some(end), Some(fenced)) => end.min(fenced),
            (Some(end), None) => end,
            (None, Some(fenced)) => fenced,
            (None, None) => unreachable!("checked in check_runs: {run:?}"),
        }
    }
}

#[derive(Debug, Default)]
struct HistoryCounts {
    lost_from_killed: usize,
    lost_from_live: usize,
    timed_out: usize,
}

/// The attempt histories: every attempt before the last was reaped (`lost`, never before
/// its lease ended) or timed out, each exactly once; the last is the success.
fn check_history(
    records: &HashMap<i64, JobRow>,
    histories: &HashMap<i64, Vec<AttemptRow>>,
    killed: &HashSet<u32>,
) -> HistoryCounts {
    let mut counts = HistoryCounts::default();
    for (id, history) in histories {
        let job = records
            .get(id)
            .unwrap_or_else(|| panic!("attempt history of job {id}, which is not in the table"));
        let mut seen = HashSet::new();
        for a in history {
            assert!(
                seen.insert(a.attempt),
                "job {id}: attempt {} has more than one history row: {history:?}",
                a.attempt
            );
            assert!(
                a.attempt >= 1 && a.attempt <= job.attempts,
                "job {id}: history row of attempt {} of {}: {history:?}",
                a.attempt,
                job.attempts
            );
            // `timed_out` is legitimate (a 1 ms job stalled past 2 s on a loaded machine);
            // `failed` or `released` would mean a kill became a failure, or a graceful stop
            // found work left.
            let expected = if a.attempt == job.attempts {
                "succeeded"
            } else {
                "lost or timed_out"
            };
            assert!(
                expected.contains(a.outcome.as_str()),
                "job {id}: attempt {} ended {:?} ({:?}), expected {expected}; history: \
                 {history:?}",
                a.attempt,
                a.outcome,
                a.error
            );
            if a.outcome == "lost" {
                // The claim set the lease to its start plus the timeout and the grace (both
                // by the claimer's clock, in the row), renewals only lengthen it, and the
                // reaper takes a lease that ended before its own now: so whatever the
                // clocks, a reaped attempt's row spans more than the whole lease.
                let started = a
                    .started_at
                    .unwrap_or_else(|| panic!("job {id}: lost attempt without a start: {a:?}"));
                assert!(
                    a.finished_at > started + LEASE_MS,
                    "job {id}: attempt {} was reaped {} ms after its claim, before its lease of \
                     {LEASE_MS} ms could end: {a:?}",
                    a.attempt,
                    a.finished_at - started
                );
                let worker = a.worker.as_deref().unwrap_or_default();
                // Worker ids are host:pid:random.
                let pid: Option<u32> = worker.rsplit(':').nth(1).and_then(|p| p.parse().ok());
                if pid.is_some_and(|p| killed.contains(&p)) {
                    counts.lost_from_killed += 1;
                } else {
                    // A live worker that could not renew a waiting job's lease in time (a
                    // slow round): legitimate, and fenced like any other; counted.
                    counts.lost_from_live += 1;
                }
            }
            if a.outcome == "timed_out" {
                counts.timed_out += 1;
            }
        }
    }
    for (id, job) in records {
        let history = histories.get(id).map_or(&[][..], Vec::as_slice);
        // A first-try success is recorded on the job row alone; a later one has its row.
        assert_eq!(
            history.len() as i64,
            if job.attempts == 1 { 0 } else { job.attempts },
            "job {id}: {} attempts, but the history accounts for other ones: {history:?}",
            job.attempts
        );
    }
    counts
}

struct RunSummary {
    runs: usize,
    reruns: usize,
    unfinished: usize,
}

/// Per job: runs match the database, a run that never ended was in a killed process and
/// was fenced, and no run started before the lease of an earlier run of the job ended.
fn check_runs(
    log: &RunLog,
    records: &HashMap<i64, JobRow>,
    fences: &Fences<'_>,
    killed: &HashSet<u32>,
) -> RunSummary {
    let mut by_job: HashMap<i64, Vec<&Run>> = HashMap::new();
    for run in &log.runs {
        let job = records
            .get(&run.job)
            .unwrap_or_else(|| panic!("a run of job {} that was never enqueued", run.job));
        assert_eq!(
            run.group, job.group_key,
            "a run of job {} logged another group key than the job's",
            run.job
        );
        by_job.entry(run.job).or_default().push(run);
    }
    let mut unfinished = 0;
    for (&id, job) in records {
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
                    fences.fenced_at(id, run.attempt).is_some(),
                    "job {id}: attempt {} died with pid {} but was never reaped as lost; \
                     history: {:?}",
                    run.attempt,
                    run.pid,
                    fences.histories.get(&id)
                );
            }
        }
        assert!(
            runs.iter()
                .any(|r| r.attempt == job.attempts && r.end.is_some()),
            "job {id} succeeded in attempt {} but no run of that attempt finished: {runs:?}",
            job.attempts
        );
        runs.sort_by_key(|r| r.start);
        for (i, earlier) in runs.iter().enumerate() {
            let lease_end = fences.lease_end(earlier);
            for later in &runs[i + 1..] {
                assert!(
                    later.start >= lease_end,
                    "job {id} ran twice at once under a live lease: {later:?} started {} ns \
                     before the lease of {earlier:?} ended; history: {:?}",
                    lease_end - later.start,
                    fences.histories.get(&id)
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

/// Per group key: in start order, every run started after every earlier run of the key's
/// jobs held its job no longer (its end, or its fence when a kill or a timeout cut it).
/// Returns how many runs had a group key.
fn check_group_keys(log: &RunLog, records: &HashMap<i64, JobRow>, fences: &Fences<'_>) -> usize {
    let mut by_key: HashMap<&str, Vec<&Run>> = HashMap::new();
    for run in &log.runs {
        if let Some(key) = &run.group {
            by_key.entry(key).or_default().push(run);
        }
    }
    let keys_in_table: HashSet<&str> = records
        .values()
        .filter_map(|j| j.group_key.as_deref())
        .collect();
    assert_eq!(
        by_key.len(),
        keys_in_table.len(),
        "runs of every group key were logged"
    );
    let mut grouped = 0;
    for (key, mut runs) in by_key {
        grouped += runs.len();
        runs.sort_by_key(|r| r.start);
        // The run whose hold on the key ended last among those started so far.
        let mut holder: Option<(&Run, u128)> = None;
        for run in runs {
            if let Some((earlier, until)) = holder {
                assert!(
                    run.start >= until,
                    "group key {key}: two jobs ran at once: {run:?} started {} ns before \
                     {earlier:?} let the key go; histories: {:?} and {:?}",
                    until - run.start,
                    fences.histories.get(&earlier.job),
                    fences.histories.get(&run.job)
                );
            }
            let until = fences.lease_end(run);
            if holder.is_none_or(|(_, u)| until > u) {
                holder = Some((run, until));
            }
        }
    }
    grouped
}

/// Keyed jobs: the side effect happened at least once; a repeat only follows a kill between
/// the effect and its record (the documented at-least-once edge), never a graceful run.
fn check_effects(
    log: &RunLog,
    records: &HashMap<i64, JobRow>,
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
