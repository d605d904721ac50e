//! litejobs benchmark: litejobs against the bare-rusqlite ceiling, in one run, on one machine.
//!
//! `cargo run --release --example bench` (a few minutes on 2 cores), `-- --json` for one JSON
//! object, `-- --quick` for the CI smoke run, `-- --help` for the sizes; `-- --encryption-only`
//! `-- --workflows-only`, `-- --job-logs-only` and `-- --flood-only` for one part; `-- --workflows-only --pg
//! URL` (built with `--features postgres`) measures that part on a PostgreSQL server instead.
//!
//! Every figure is measured on a fresh file-backed WAL database in a temp dir, with the same
//! pragmas for litejobs and for the ceiling: a minimal queue table driven by bare rusqlite
//! loops, with no framework, run in this process. Ratios are
//! litejobs ÷ ceiling from the same run; absolute numbers move with the machine's noise,
//! ratios much less. The same loops on litejobs' own schema show what the schema costs.
//! The enqueue and processing figures and their ceilings are measured in `--rounds`
//! alternating rounds (5 by default): each figure is the median of its rounds, so one noisy
//! second on a shared machine moves neither side of a ratio alone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejobs::{JobContext, JobError, NewJob, Queue, Synchronous, Worker};
use rusqlite::{params, Connection};
use serde_json::{json, Value};

#[cfg(feature = "encryption")]
#[path = "bench/encryption.rs"]
mod encryption;
#[path = "bench/flood.rs"]
mod flood;
#[path = "bench/job_logs.rs"]
mod job_logs;
#[path = "bench/workflows.rs"]
mod workflows;

#[derive(Debug, Clone)]
struct Config {
    single: usize,
    batched: usize,
    process: usize,
    steady: usize,
    latency_samples: usize,
    backlog: usize,
    read_rows: usize,
    idle_secs: u64,
    rounds: usize,
    json: bool,
    syncs: Vec<Synchronous>,
    /// Only the encrypted-against-plain figures (`--encryption-only`).
    encryption_only: bool,
    /// Only the figures of jobs that wait for other jobs (`--workflows-only`).
    workflows_only: bool,
    /// Only the figures of handlers that log (`--job-logs-only`).
    job_logs_only: bool,
    /// Only the figures of urgent jobs under a flood of chunks (`--flood-only`).
    flood_only: bool,
    /// Chunks in each round of the flood figures.
    flood: usize,
    /// Steps of the fan-out that one fan-in step waits for.
    fan_out: usize,
    /// A PostgreSQL server to measure the workflow figures on (`--pg URL`).
    pg: Option<String>,
}

impl Config {
    fn from_args() -> Config {
        let mut c = Config {
            // The ceiling's sizes (N = 20 000): litejobs is measured on the same sizes, so the
            // ratios compare like with like.
            single: 2_000,
            batched: 20_000,
            process: 20_000,
            steady: 50_000,
            latency_samples: 1000,
            backlog: 1_000_000,
            read_rows: 1_000_000,
            idle_secs: 10,
            rounds: 5,
            json: false,
            syncs: vec![Synchronous::Normal, Synchronous::Full],
            encryption_only: false,
            workflows_only: false,
            job_logs_only: false,
            flood_only: false,
            flood: 20_000,
            pg: None,
            fan_out: 10_000,
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut i = 0;
        while i < args.len() {
            let value = |i: usize| -> usize {
                args.get(i + 1)
                    .and_then(|v| v.replace('_', "").parse().ok())
                    .unwrap_or_else(|| usage(&format!("{} needs a number", args[i])))
            };
            match args[i].as_str() {
                "--json" => c.json = true,
                "--quick" => {
                    c = Config {
                        single: 200,
                        batched: 5_000,
                        process: 2_000,
                        steady: 2_000,
                        latency_samples: 20,
                        backlog: 20_000,
                        read_rows: 20_000,
                        idle_secs: 1,
                        rounds: 1,
                        json: c.json,
                        syncs: vec![Synchronous::Normal],
                        encryption_only: c.encryption_only,
                        workflows_only: c.workflows_only,
                        job_logs_only: c.job_logs_only,
                        flood_only: c.flood_only,
                        flood: 1_000,
                        pg: c.pg.clone(),
                        fan_out: 1_000,
                    }
                }
                "--single" => {
                    c.single = value(i);
                    i += 1
                }
                "--batched" => {
                    c.batched = value(i);
                    i += 1
                }
                "--process" => {
                    c.process = value(i);
                    i += 1
                }
                "--steady" => {
                    c.steady = value(i);
                    i += 1
                }
                "--latency-samples" => {
                    c.latency_samples = value(i);
                    i += 1
                }
                "--backlog" => {
                    c.backlog = value(i);
                    i += 1
                }
                "--read-rows" => {
                    c.read_rows = value(i);
                    i += 1
                }
                "--idle-secs" => {
                    c.idle_secs = value(i) as u64;
                    i += 1
                }
                "--flood" => {
                    c.flood = value(i).max(1);
                    i += 1
                }
                "--fan-out" => {
                    c.fan_out = value(i).max(1);
                    i += 1
                }
                "--rounds" => {
                    c.rounds = value(i).max(1);
                    i += 1
                }
                "--normal-only" => c.syncs = vec![Synchronous::Normal],
                "--encryption-only" => c.encryption_only = true,
                "--workflows-only" => c.workflows_only = true,
                "--job-logs-only" => c.job_logs_only = true,
                "--flood-only" => c.flood_only = true,
                "--pg" => {
                    c.pg = Some(
                        args.get(i + 1)
                            .cloned()
                            .unwrap_or_else(|| usage("--pg needs a PostgreSQL URL")),
                    );
                    i += 1
                }
                "--help" | "-h" => usage(""),
                other => usage(&format!("unknown argument {other}")),
            }
            i += 1;
        }
        if c.pg.is_some() && !c.workflows_only {
            usage("--pg measures the workflow figures only: add --workflows-only");
        }
        // The big-backlog run processes `min(process, 10 000)` jobs once per round and once
        // more in the memory child, so the backlog must hold them all.
        if c.backlog < (c.rounds + 1) * c.process.min(10_000) {
            usage("--backlog must be at least (--rounds + 1) × min(--process, 10000)");
        }
        c
    }
}

fn usage(problem: &str) -> ! {
    if !problem.is_empty() {
        eprintln!("bench: {problem}");
    }
    eprintln!(
        "usage: cargo run --release --example bench -- [--json] [--quick] [--normal-only]\n\
         \x20 [--encryption-only] [--workflows-only] [--job-logs-only] [--flood-only]\n\
         \x20 [--single N] [--batched N] [--process N] [--steady N] [--latency-samples N]\n\
         \x20 [--backlog N] [--read-rows N] [--idle-secs S] [--rounds N] [--fan-out N]\n\
         \x20 [--flood N]"
    );
    std::process::exit(if problem.is_empty() { 0 } else { 2 })
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    // The memory figure comes from a fresh process that only runs a worker (the parent's own
    // RSS also holds what it allocated to enqueue the backlog).
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--worker-rss-child") {
        return worker_rss_child(&args);
    }
    let config = Config::from_args();
    let root = tempfile::tempdir()?;
    let mut report = BTreeMap::<String, Value>::new();
    report.insert("machine".into(), json!(machine()));
    report.insert("config".into(), json!(format!("{config:?}")));
    if let Some(url) = &config.pg {
        let target = workflows::Target::Server { url };
        let figures = workflows::figures(&config, &target)?;
        report.insert(
            "postgresql".into(),
            Value::Object(figures.into_iter().collect()),
        );
    }
    for &sync in config.syncs.iter().filter(|_| config.pg.is_none()) {
        let name = match sync {
            Synchronous::Full => "full",
            _ => "normal",
        };
        let dir = root.path().join(name);
        std::fs::create_dir_all(&dir)?;
        let figures = run_all(&config, sync, &dir)?;
        report.insert(
            format!("synchronous_{name}"),
            Value::Object(figures.into_iter().collect()),
        );
    }
    if config.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

fn run_all(c: &Config, sync: Synchronous, dir: &Path) -> Res<BTreeMap<String, Value>> {
    // 9. encrypted 1 KiB payloads against plain ones, and 10. jobs that wait for other jobs
    // (the rest is skipped with --encryption-only or --workflows-only).
    let mut f = BTreeMap::<String, Value>::new();
    if c.job_logs_only {
        f.extend(job_logs::figures(c, sync, dir)?);
        return Ok(f);
    }
    if c.flood_only {
        f.extend(flood::figures(c, sync, dir)?);
        return Ok(f);
    }
    #[cfg(feature = "encryption")]
    if !c.workflows_only || c.encryption_only {
        f.extend(encryption::figures(c, sync, dir)?);
    }
    if !c.encryption_only || c.workflows_only {
        f.extend(workflows::figures(
            c,
            &workflows::Target::File { dir, sync },
        )?);
    }
    if c.encryption_only || c.workflows_only {
        return Ok(f);
    }
    // 11. handlers that log a line, their logs kept or not, against silent ones.
    f.extend(job_logs::figures(c, sync, dir)?);
    // 12. urgent jobs from another connection while a flood of chunks drains.
    f.extend(flood::figures(c, sync, dir)?);
    let mut n = 0;
    let mut fresh = |label: &str| -> PathBuf {
        n += 1;
        dir.join(format!("{n:02}-{label}.db"))
    };
    let pragma_sync = if sync == Synchronous::Full {
        "FULL"
    } else {
        "NORMAL"
    };

    // Rounds of: the ceiling (its loops on its minimal table), the
    // same loops on litejobs' schema (what the schema costs), with the same pragmas, then
    // litejobs on the same workloads. Each database is deleted once measured.
    let mut rounds = BTreeMap::<String, Vec<f64>>::new();
    let mut sample = |name: String, rate: f64| rounds.entry(name).or_default().push(rate);
    for _ in 0..c.rounds {
        for (prefix, table) in [
            ("ceiling", Table::Minimal),
            ("schema_ceiling", Table::Litejobs),
        ] {
            let path = fresh(prefix);
            let single = ceiling_single(&path, pragma_sync, table, c.single)?;
            discard(&path);
            let path = fresh(prefix);
            let batched = ceiling_batched(&path, pragma_sync, table, c.batched)?;
            discard(&path);
            let path = fresh(prefix);
            let process = ceiling_process(&path, pragma_sync, table, c.process)?;
            discard(&path);
            sample(format!("{prefix}_enqueue_single_per_s"), single);
            sample(format!("{prefix}_enqueue_batched_per_s"), batched);
            sample(format!("{prefix}_process_per_s"), process);
        }

        // 1. single enqueue, each its own transaction.
        let path = fresh("single");
        let q = open(&path, sync)?;
        let t = Instant::now();
        for i in 0..c.single {
            q.enqueue(NewJob::new("noop", json!({ "i": i })))?;
        }
        sample(
            "enqueue_single_per_s".into(),
            c.single as f64 / t.elapsed().as_secs_f64(),
        );
        drop(q);
        discard(&path);

        // 2. batched enqueue, 1 000 per call.
        let path = fresh("batched");
        let q = open(&path, sync)?;
        let t = Instant::now();
        enqueue_noops(&q, c.batched)?;
        sample(
            "enqueue_batched_per_s".into(),
            c.batched as f64 / t.elapsed().as_secs_f64(),
        );
        drop(q);
        discard(&path);

        // 3. process queued no-op jobs with 1, 2 and 4 handler threads.
        for threads in [1usize, 2, 4] {
            let path = fresh(&format!("process{threads}"));
            let q = open(&path, sync)?;
            enqueue_noops(&q, c.process)?;
            let rate = process(&q, c.process, threads)?;
            sample(format!("process_{threads}_threads_per_s"), rate);
            drop(q);
            discard(&path);
        }
    }
    insert_medians(&mut f, &rounds);
    f.insert("rounds".into(), json!(c.rounds));
    let figure = |f: &BTreeMap<String, Value>, k: &str| f[k].as_f64().unwrap_or(f64::NAN);
    let ceil_process = figure(&f, "ceiling_process_per_s");
    for (ours, ceiling, name) in [
        (
            "enqueue_single_per_s",
            "ceiling_enqueue_single_per_s",
            "ratio_enqueue_single",
        ),
        (
            "enqueue_batched_per_s",
            "ceiling_enqueue_batched_per_s",
            "ratio_enqueue_batched",
        ),
    ] {
        let r = ratio(figure(&f, ours), figure(&f, ceiling));
        f.insert(name.into(), r);
    }
    for threads in [1usize, 2, 4] {
        let rate = figure(&f, &format!("process_{threads}_threads_per_s"));
        f.insert(
            format!("ratio_process_{threads}_threads"),
            ratio(rate, ceil_process),
        );
    }

    // 4. steady state: one thread enqueues (batches of 100) while 4 handler threads work.
    let q = open(&fresh("steady"), sync)?;
    let (rate, max_backlog) = steady(&q, c.steady)?;
    f.insert("steady_process_per_s".into(), json!(rate.round()));
    f.insert("steady_max_backlog".into(), json!(max_backlog));

    // 5. pickup latency with an idle worker.
    let path = fresh("latency");
    let q = open(&path, sync)?;
    let (p50, p99) = latency_in_process(&q, c.latency_samples)?;
    f.insert("latency_in_process_p50_ms".into(), json!(p50));
    f.insert("latency_in_process_p99_ms".into(), json!(p99));
    let poll = litejobs::defaults::DEFAULT_POLL_INTERVAL;
    let ((p50, p99), (c50, c99)) =
        latency_other_connection(&q, &path, c.latency_samples.min(40), poll)?;
    f.insert("latency_other_connection_p50_ms".into(), json!(p50));
    f.insert("latency_other_connection_p99_ms".into(), json!(p99));
    f.insert("latency_other_commit_p50_ms".into(), json!(c50));
    f.insert("latency_other_commit_p99_ms".into(), json!(c99));
    f.insert("poll_interval_ms".into(), json!(poll.as_millis()));

    // 6 and 7. a large backlog: claim cost must not grow with it; memory; file size.
    let path = fresh("backlog");
    let q = open(&path, sync)?;
    let small = c.process.min(10_000);
    enqueue_noops(&q, c.backlog)?;
    let bytes = file_bytes(&path);
    // Alternating rounds, as above: `small` jobs from a fresh file, then `small` jobs from
    // the big backlog.
    let (mut smalls, mut bigs) = (Vec::new(), Vec::new());
    for _ in 0..c.rounds {
        let small_path = fresh("backlog-small");
        let q_small = open(&small_path, sync)?;
        enqueue_noops(&q_small, small)?;
        smalls.push(process(&q_small, small, 4)?);
        drop(q_small);
        discard(&small_path);
        bigs.push(process(&q, small, 4)?);
    }
    let (rate_small, rate_big) = (median(&smalls), median(&bigs));
    let rounded = |rates: &[f64]| json!(rates.iter().map(|r| r.round()).collect::<Vec<_>>());
    f.insert(
        "process_4_threads_small_backlog_per_s_rounds".into(),
        rounded(&smalls),
    );
    f.insert(
        "process_4_threads_big_backlog_per_s_rounds".into(),
        rounded(&bigs),
    );
    drop(q);
    let worker_peak_rss = worker_rss(&path, small)?;
    f.insert(
        "process_4_threads_small_backlog_per_s".into(),
        json!(rate_small.round()),
    );
    f.insert(
        "process_4_threads_big_backlog_per_s".into(),
        json!(rate_big.round()),
    );
    f.insert("backlog_jobs".into(), json!(c.backlog));
    f.insert(
        "ratio_big_backlog_to_small".into(),
        ratio(rate_big, rate_small),
    );
    f.insert(
        "db_bytes_per_job".into(),
        json!((bytes as f64 / c.backlog as f64).round()),
    );
    f.insert(
        "worker_peak_rss_kib_with_backlog".into(),
        json!(worker_peak_rss),
    );
    f.insert("bench_process_peak_rss_kib".into(), json!(peak_rss_kib()));
    // 8. the read side at scale: 10 % of the rows live (queued or failed), the rest finished.
    let path = fresh("read-side");
    let q = open(&path, sync)?;
    fill_finished(&path, c.read_rows)?;
    for (name, ms) in read_side_ms(&q)? {
        f.insert(format!("{name}_ms_at_read_rows"), json!(ms));
    }
    f.insert("read_rows".into(), json!(c.read_rows));
    drop(q);

    let idle = idle_cpu(
        &open(&fresh("idle"), sync)?,
        Duration::from_secs(c.idle_secs),
    )?;
    f.insert(
        "idle_worker_cpu_percent".into(),
        json!((idle * 1000.0).round() / 1000.0),
    );
    Ok(f)
}

/// Fills a queue with `rows` jobs by plain SQL, as a long-lived queue looks: 9 % queued,
/// 1 % failed, 88 % succeeded, 2 % dead, spread over three queues, seven types and a day;
/// with their history: one failed attempt per failed job, six attempts per dead one.
fn fill_finished(path: &Path, rows: usize) -> Res<()> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    let start = now_ms() - 86_400_000;
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
         INSERT INTO jobs (queue, job_type, payload, status, attempts, run_at, created_at,
                           updated_at, finished_at, last_error)
         SELECT CASE i % 3 WHEN 0 THEN 'default' WHEN 1 THEN 'mail' ELSE 'hooks' END,
                't' || (i % 7), '{\"n\":' || i || '}', s,
                CASE s WHEN 'queued' THEN 0 WHEN 'dead' THEN 6 ELSE 1 END,
                t, t, t, CASE WHEN s IN ('succeeded', 'dead') THEN t END,
                CASE WHEN s IN ('failed', 'dead') THEN 'boom ' || (i % 5) END
         FROM (SELECT i, ?2 + i * 86400000 / ?1 AS t,
                      CASE WHEN i % 100 < 9 THEN 'queued' WHEN i % 100 = 9 THEN 'failed'
                           WHEN i % 100 < 12 THEN 'dead' ELSE 'succeeded' END AS s
               FROM n)",
        params![rows as i64, start],
    )?;
    conn.execute(
        "WITH RECURSIVE k(a) AS (SELECT 1 UNION ALL SELECT a + 1 FROM k WHERE a < 6)
         INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome,
                                   error, duration_ms)
         SELECT j.id, k.a, 'bench', j.updated_at - (7 - k.a) * 60000,
                j.updated_at - (6 - k.a) * 60000,
                CASE WHEN j.status = 'dead' AND k.a = 6 THEN 'dead' ELSE 'failed' END,
                j.last_error, 5
         FROM jobs j JOIN k ON k.a <= j.attempts
         WHERE j.status IN ('failed', 'dead')",
        [],
    )?;
    Ok(())
}

/// The read side's calls, each the median of five, in ms: what `stats`, `metrics`, `check`
/// and the dashboard's overview cost on this queue.
fn read_side_ms(q: &Queue) -> Res<Vec<(&'static str, f64)>> {
    type Call = fn(&Queue) -> litejobs::Result<()>;
    let calls: [(&str, Call); 4] = [
        ("stats", |q| q.stats().map(drop)),
        ("overview", |q| {
            q.overview(Duration::from_secs(3600), 5).map(drop)
        }),
        ("metrics", |q| {
            litejobs::metrics::prometheus_text(q).map(drop)
        }),
        ("health", |q| q.health(Duration::from_secs(3600)).map(drop)),
    ];
    let mut out = Vec::new();
    for (name, call) in calls {
        let mut samples = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            call(q)?;
            samples.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        samples.sort_by(f64::total_cmp);
        out.push((name, (samples[2] * 10.0).round() / 10.0));
    }
    Ok(out)
}

fn open(path: &Path, sync: Synchronous) -> Res<Queue> {
    Ok(Queue::builder().synchronous(sync).open(path)?)
}

fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Deletes a measured database with its log and shared memory.
fn discard(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
}

fn ratio(a: f64, b: f64) -> Value {
    json!(((a / b) * 100.0).round() / 100.0)
}

fn enqueue_noops(q: &Queue, n: usize) -> Res<()> {
    let mut i = 0;
    while i < n {
        let batch = (i..(i + 1000).min(n))
            .map(|i| NewJob::new("noop", json!({ "i": i })))
            .collect();
        q.enqueue_batch(batch)?;
        i += 1000;
    }
    Ok(())
}

fn noop_worker(q: &Queue, threads: usize, done: Arc<AtomicUsize>) -> Res<Worker> {
    Ok(Worker::builder(q)
        .handler("noop", move |_: &JobContext| -> Result<(), JobError> {
            done.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .concurrency(threads)
        .start()?)
}

/// Jobs a second from the start of `worker` to its last write-back, once its handlers have
/// counted `n` jobs in `done` (ten minutes at most); then all `n` jobs of `q` must have
/// succeeded. The parts' processing figures use it.
/// Each figure's median of its rounds, and the rounds themselves (`NAME_rounds`), rounded
/// to whole units.
fn insert_medians(f: &mut BTreeMap<String, Value>, rounds: &BTreeMap<String, Vec<f64>>) {
    for (name, rates) in rounds {
        f.insert(name.clone(), json!(median(rates).round()));
        f.insert(
            format!("{name}_rounds"),
            json!(rates.iter().map(|r| r.round()).collect::<Vec<_>>()),
        );
    }
}

fn drain_rate(
    q: &Queue,
    n: usize,
    done: &AtomicUsize,
    worker: litejobs::WorkerBuilder,
) -> Res<f64> {
    let t = Instant::now();
    let worker = worker.start()?;
    let give_up = Instant::now() + Duration::from_secs(600);
    while done.load(Ordering::Relaxed) < n && Instant::now() < give_up {
        std::thread::sleep(Duration::from_micros(200));
    }
    worker.shutdown(Duration::from_secs(10))?;
    let rate = n as f64 / t.elapsed().as_secs_f64();
    let ok = q.stats()?.count(litejobs::JobStatus::Succeeded);
    assert_eq!(ok, n as i64, "only {ok} of {n} jobs succeeded");
    Ok(rate)
}

/// Jobs per second from the worker's start to the last write-back (shutdown writes the
/// final batch and returns once it is committed).
fn process(q: &Queue, n: usize, threads: usize) -> Res<f64> {
    let done = Arc::new(AtomicUsize::new(0));
    let t = Instant::now();
    let worker = noop_worker(q, threads, Arc::clone(&done))?;
    let give_up = Instant::now() + Duration::from_secs(600);
    while done.load(Ordering::Relaxed) < n && Instant::now() < give_up {
        std::thread::sleep(Duration::from_micros(200));
    }
    worker.shutdown(Duration::from_secs(10))?;
    let rate = n as f64 / t.elapsed().as_secs_f64();
    // The newest job must be done (a full stats() scan would distort the worker's memory).
    let newest = q.list(&litejobs::JobFilter::new().limit(1))?;
    let succeeded = q
        .list(
            &litejobs::JobFilter::new()
                .status(litejobs::JobStatus::Succeeded)
                .limit(n),
        )?
        .len();
    assert!(
        succeeded >= n && !newest.is_empty(),
        "only {succeeded} of {n} jobs succeeded"
    );
    Ok(rate)
}

fn steady(q: &Queue, n: usize) -> Res<(f64, i64)> {
    let done = Arc::new(AtomicUsize::new(0));
    let worker = noop_worker(q, 4, Arc::clone(&done))?;
    let t = Instant::now();
    let producer = {
        let q = q.clone();
        std::thread::spawn(move || -> Result<(), litejobs::Error> {
            let mut i = 0;
            while i < n {
                let batch = (i..(i + 100).min(n))
                    .map(|i| NewJob::new("noop", json!({ "i": i })))
                    .collect();
                q.enqueue_batch(batch)?;
                i += 100;
            }
            Ok(())
        })
    };
    let mut max_backlog = 0i64;
    let give_up = Instant::now() + Duration::from_secs(600);
    while done.load(Ordering::Relaxed) < n && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(20));
        let backlog = q.stats()?.count(litejobs::JobStatus::Queued);
        max_backlog = max_backlog.max(backlog);
    }
    producer.join().map_err(|_| "producer panicked")??;
    worker.shutdown(Duration::from_secs(10))?;
    Ok((n as f64 / t.elapsed().as_secs_f64(), max_backlog))
}

fn percentiles(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    (round(at(0.5)), round(at(0.99)))
}

/// Enqueue → handler start, one job at a time, through the same `Queue`.
fn latency_in_process(q: &Queue, samples: usize) -> Res<(f64, f64)> {
    let (tx, rx) = crossbeam_channel::unbounded::<Instant>();
    let worker = Worker::builder(q)
        .handler("ping", move |_: &JobContext| -> Result<(), JobError> {
            let _ = tx.send(Instant::now());
            Ok(())
        })
        .concurrency(1)
        .start()?;
    let mut lat = Vec::with_capacity(samples);
    std::thread::sleep(Duration::from_millis(50)); // let the worker go idle
    for i in 0..samples {
        let t = Instant::now();
        q.enqueue(NewJob::new("ping", json!({ "i": i })))?;
        let started = rx.recv_timeout(Duration::from_secs(10))?;
        lat.push(started.duration_since(t).as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(2)); // idle again
    }
    worker.shutdown(Duration::from_secs(5))?;
    Ok(percentiles(lat))
}

/// Enqueue by a plain INSERT on another connection (as another process would, with SQLite's
/// default `synchronous`) → handler start: from before the INSERT (its commit's own fsync
/// included), and from the commit's return.
fn latency_other_connection(
    q: &Queue,
    path: &Path,
    samples: usize,
    poll: Duration,
) -> Res<((f64, f64), (f64, f64))> {
    let (tx, rx) = crossbeam_channel::unbounded::<Instant>();
    let worker = Worker::builder(q)
        .handler("pong", move |_: &JobContext| -> Result<(), JobError> {
            let _ = tx.send(Instant::now());
            Ok(())
        })
        .concurrency(1)
        .poll_interval(poll)
        .start()?;
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    let mut lat = Vec::with_capacity(samples);
    let mut after_commit = Vec::with_capacity(samples);
    for i in 0..samples {
        // Spread the inserts over the poll cycle.
        std::thread::sleep(Duration::from_millis(7 * (i as u64 % 11) + 3));
        let t = Instant::now();
        conn.execute(
            "INSERT INTO jobs (job_type, payload) VALUES ('pong', ?1)",
            [json!({ "i": i }).to_string()],
        )?;
        let committed = Instant::now();
        let started = rx.recv_timeout(Duration::from_secs(10))?;
        lat.push(started.duration_since(t).as_secs_f64() * 1000.0);
        after_commit.push(started.saturating_duration_since(committed).as_secs_f64() * 1000.0);
    }
    worker.shutdown(Duration::from_secs(5))?;
    Ok((percentiles(lat), percentiles(after_commit)))
}

fn idle_cpu(q: &Queue, span: Duration) -> Res<f64> {
    // An empty queue: the worker only polls.
    let worker = noop_worker(q, 4, Arc::new(AtomicUsize::new(0)))?;
    std::thread::sleep(Duration::from_millis(200));
    let before = cpu_seconds();
    let t = Instant::now();
    std::thread::sleep(span);
    let used = cpu_seconds() - before;
    let wall = t.elapsed().as_secs_f64();
    worker.shutdown(Duration::from_secs(5))?;
    Ok(used / wall * 100.0)
}

// ---- the ceiling: bare rusqlite loops on a minimal table, run here in the same process ----

/// The ceiling's minimal queue table: what bare SQLite allows a job queue, with no
/// framework and no guarantees beyond the claim (litejobs is judged as ratios to it).
const CEILING_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY, queue TEXT NOT NULL DEFAULT 'default', job_type TEXT NOT NULL,
    payload TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'queued', priority INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL DEFAULT 5,
    run_at INTEGER NOT NULL, locked_until INTEGER, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
  CREATE INDEX IF NOT EXISTS jobs_due ON jobs (queue, priority DESC, run_at, id) WHERE status IN ('queued','failed');";

/// Which table the ceiling loops run on: its minimal one, or
/// litejobs' own schema (the same loops; the difference is what the schema costs).
#[derive(Clone, Copy)]
enum Table {
    Minimal,
    Litejobs,
}

fn ceiling_conn(path: &Path, sync: &str, table: Table) -> Res<Connection> {
    let conn = Connection::open(path)?;
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))?;
    conn.pragma_update(None, "synchronous", sync)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.execute_batch(match table {
        Table::Minimal => CEILING_SCHEMA,
        Table::Litejobs => include_str!("../schema.sql"),
    })?;
    if let Table::Litejobs = table {
        // As litejobs' own connections: the schema's counting triggers are for other
        // programs; litejobs keeps those counts in code, in batches.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER,
            false,
        )?;
    }
    Ok(conn)
}

const CEIL_INSERT: &str = "INSERT INTO jobs (job_type, payload, run_at, created_at, updated_at) \
     VALUES ('noop', ?1, ?2, ?2, ?2)";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The ceiling's single loop: each insert its own (autocommit) transaction.
fn ceiling_single(path: &Path, sync: &str, table: Table, n: usize) -> Res<f64> {
    let conn = ceiling_conn(path, sync, table)?;
    let t = Instant::now();
    let mut ins = conn.prepare_cached(CEIL_INSERT)?;
    for i in 0..n {
        ins.execute(params![format!("{{\"n\":{i}}}"), now_ms()])?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

fn ceiling_insert_batched(conn: &mut Connection, n: usize) -> Res<()> {
    let mut i = 0;
    while i < n {
        let tx = conn.transaction()?;
        {
            let mut ins = tx.prepare_cached(CEIL_INSERT)?;
            let now = now_ms();
            for j in i..(i + 1000).min(n) {
                ins.execute(params![format!("{{\"n\":{j}}}"), now])?;
            }
        }
        tx.commit()?;
        i += 1000;
    }
    Ok(())
}

/// The ceiling's batch loop: 1 000 inserts per transaction.
fn ceiling_batched(path: &Path, sync: &str, table: Table, n: usize) -> Res<f64> {
    let mut conn = ceiling_conn(path, sync, table)?;
    let t = Instant::now();
    ceiling_insert_batched(&mut conn, n)?;
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// The ceiling's process loop: one thread claims 64 due rows with one
/// `UPDATE … RETURNING` in a `BEGIN IMMEDIATE` transaction, parses each payload, and marks
/// the 64 succeeded in a second transaction, until the queue is empty.
fn ceiling_process(path: &Path, sync: &str, table: Table, n: usize) -> Res<f64> {
    // On litejobs' schema the due index leads with (queue, waiting_for): a claim names
    // waiting_for = 0, as litejobs' own does, or it sorts every due row.
    let waiting = match table {
        Table::Minimal => "",
        Table::Litejobs => " AND waiting_for = 0",
    };
    let mut conn = ceiling_conn(path, sync, table)?;
    ceiling_insert_batched(&mut conn, n)?;
    let t = Instant::now();
    let mut done = 0;
    loop {
        let now = now_ms();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let claimed: Vec<(i64, String, String)> = tx
            .prepare_cached(&format!(
                "UPDATE jobs SET status='running', attempts=attempts+1, locked_until=?1, updated_at=?2
                 WHERE id IN (SELECT id FROM jobs WHERE queue='default'{waiting}
                              AND status IN ('queued','failed')
                              AND run_at <= ?2 ORDER BY priority DESC, run_at, id LIMIT 64)
                 RETURNING id, job_type, payload",
            ))?
            .query_map(params![now + 30_000, now], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        tx.commit()?;
        if claimed.is_empty() {
            break;
        }
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        {
            let mut up = tx.prepare_cached(
                "UPDATE jobs SET status='succeeded', locked_until=NULL, updated_at=?2 WHERE id=?1",
            )?;
            for (id, _, payload) in &claimed {
                let _v: Value = serde_json::from_str(payload)?;
                up.execute(params![id, now])?;
            }
        }
        tx.commit()?;
        done += claimed.len();
    }
    assert_eq!(done, n, "the ceiling loop completed every job");
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

// ---- measurements of the process ----

fn proc_status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Runs a worker in a fresh child process on the database with the backlog, processing `n`
/// jobs, and returns the child's peak RSS in KiB.
fn worker_rss(path: &Path, n: usize) -> Res<u64> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .arg("--worker-rss-child")
        .arg(path)
        .arg(n.to_string())
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "worker child failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}

fn worker_rss_child(args: &[String]) -> Res<()> {
    let path = args.get(2).ok_or("missing db path")?;
    let n: usize = args.get(3).ok_or("missing job count")?.parse()?;
    let q = Queue::open(path)?;
    // The parent's run may have taken a few more than its share (prefetched jobs finish
    // after it stops counting): process what is left, up to n.
    let left = q
        .list(
            &litejobs::JobFilter::new()
                .status(litejobs::JobStatus::Queued)
                .limit(n),
        )?
        .len();
    process(&q, left, 4)?;
    println!("{}", peak_rss_kib());
    Ok(())
}

fn peak_rss_kib() -> u64 {
    proc_status_kib("VmHWM:")
}

fn cpu_seconds() -> f64 {
    // utime + stime in clock ticks (fields 14 and 15 of /proc/self/stat); 100 Hz on Linux.
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1;
            let fields: Vec<&str> = after.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / 100.0)
        })
        .unwrap_or(0.0)
}

fn file_bytes(path: &Path) -> u64 {
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
        + std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0)
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    format!("{cpu}, {cores} cores, {}", std::env::consts::OS)
}

fn print_table(report: &BTreeMap<String, Value>) {
    println!(
        "litejobs bench — {}",
        report["machine"].as_str().unwrap_or("")
    );
    for (key, value) in report {
        let Value::Object(figures) = value else {
            continue;
        };
        println!("\n{key}");
        #[cfg(feature = "encryption")]
        encryption::print(figures);
        workflows::print(figures);
        job_logs::print(figures);
        flood::print(figures);
        // Only some parts ran (--encryption-only, --workflows-only).
        if !figures.contains_key("rounds") {
            continue;
        }
        let rows: [(&str, &str, &str); 8] = [
            (
                "enqueue, 1 per transaction (jobs/s)",
                "enqueue_single_per_s",
                "ceiling_enqueue_single_per_s",
            ),
            (
                "enqueue, batches of 1000 (jobs/s)",
                "enqueue_batched_per_s",
                "ceiling_enqueue_batched_per_s",
            ),
            (
                "process no-op, 1 thread (jobs/s)",
                "process_1_threads_per_s",
                "ceiling_process_per_s",
            ),
            (
                "process no-op, 2 threads (jobs/s)",
                "process_2_threads_per_s",
                "ceiling_process_per_s",
            ),
            (
                "process no-op, 4 threads (jobs/s)",
                "process_4_threads_per_s",
                "ceiling_process_per_s",
            ),
            (
                "process, 4 threads, big backlog (jobs/s)",
                "process_4_threads_big_backlog_per_s",
                "process_4_threads_small_backlog_per_s",
            ),
            (
                "steady state enqueue+process (jobs/s)",
                "steady_process_per_s",
                "",
            ),
            ("", "", ""),
        ];
        println!(
            "  {:<44} {:>12} {:>12} {:>7}",
            "measure", "litejobs", "ceiling", "ratio"
        );
        for (label, ours, theirs) in rows.iter().filter(|r| !r.0.is_empty()) {
            let a = figures
                .get(*ours)
                .and_then(Value::as_f64)
                .unwrap_or(f64::NAN);
            let b = figures.get(*theirs).and_then(Value::as_f64);
            match b {
                Some(b) => println!("  {label:<44} {a:>12.0} {b:>12.0} {:>7.2}", a / b),
                None => println!("  {label:<44} {a:>12.0}"),
            }
        }
        for (label, k) in [
            ("rounds (enqueue, process: medians)", "rounds"),
            (
                "process no-op, 4 threads, each round",
                "process_4_threads_per_s_rounds",
            ),
            (
                "ceiling process, each round",
                "ceiling_process_per_s_rounds",
            ),
            ("steady state max backlog (jobs)", "steady_max_backlog"),
            (
                "pickup latency in-process p50 (ms)",
                "latency_in_process_p50_ms",
            ),
            (
                "pickup latency in-process p99 (ms)",
                "latency_in_process_p99_ms",
            ),
            (
                "pickup latency other connection p50 (ms)",
                "latency_other_connection_p50_ms",
            ),
            (
                "pickup latency other connection p99 (ms)",
                "latency_other_connection_p99_ms",
            ),
            (
                "  from its commit's return, p50 (ms)",
                "latency_other_commit_p50_ms",
            ),
            (
                "  from its commit's return, p99 (ms)",
                "latency_other_commit_p99_ms",
            ),
            ("poll interval (ms)", "poll_interval_ms"),
            ("backlog for the big-backlog run (jobs)", "backlog_jobs"),
            (
                "worker process peak RSS, backlog queued (KiB)",
                "worker_peak_rss_kib_with_backlog",
            ),
            (
                "peak RSS of the bench process (KiB)",
                "bench_process_peak_rss_kib",
            ),
            ("database bytes per job", "db_bytes_per_job"),
            (
                "bench-ceiling loops on litejobs' schema: single",
                "schema_ceiling_enqueue_single_per_s",
            ),
            (
                "bench-ceiling loops on litejobs' schema: batch",
                "schema_ceiling_enqueue_batched_per_s",
            ),
            (
                "bench-ceiling loops on litejobs' schema: process",
                "schema_ceiling_process_per_s",
            ),
            ("rows for the read-side figures", "read_rows"),
            ("stats() at read_rows (ms)", "stats_ms_at_read_rows"),
            ("overview() at read_rows (ms)", "overview_ms_at_read_rows"),
            ("metrics text at read_rows (ms)", "metrics_ms_at_read_rows"),
            ("health() at read_rows (ms)", "health_ms_at_read_rows"),
            ("idle worker CPU (% of one core)", "idle_worker_cpu_percent"),
        ] {
            println!(
                "  {label:<44} {:>12}",
                figures.get(k).map(|v| v.to_string()).unwrap_or_default()
            );
        }
    }
}
