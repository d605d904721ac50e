//! litejobs on PostgreSQL through the public API only, on the workload of the comparison with
//! other PostgreSQL queues (graphile-worker, pg-boss and a raw `pg` ceiling; see
//! docs/benchmarks.md).
//!
//! ```sh
//! cargo build --release --features postgres --example peer_pg
//! PG_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!     target/release/examples/peer_pg --n 20000 --w 4 --phases ABCD
//! ```
//!
//! Prints one JSON line with the peers' fields. Each phase works in a schema of its own
//! (`bench_litejobs_<pid>_<phase>`), dropped at the end.
//! - A: N × `queue.enqueue(..)`, each its own transaction;
//! - B: `queue.enqueue_batch(..)` in chunks of 1 000;
//! - C: one `Worker` with W handler threads drains the N jobs of A, timed from `start()`
//!   until the database shows all N `succeeded`;
//! - D: an idle worker (W threads); a separate process enqueues 200 jobs 5 ms apart, each
//!   handler records now − the time taken just before its enqueue.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use litejobs::{JobContext, JobError, JobStatus, NewJob, Queue, Worker};
use serde_json::json;

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn arg(name: &str, default: &str) -> String {
    let argv: Vec<String> = std::env::args().collect();
    argv.iter()
        .position(|a| a == name)
        .and_then(|i| argv.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn schema(phase: char) -> String {
    // The D producer is a process of its own: it is given the parent's pid.
    let pid = std::env::var("PEER_PG_PARENT").unwrap_or_else(|_| std::process::id().to_string());
    format!("bench_litejobs_{pid}_{}", phase.to_ascii_lowercase())
}

fn open(url: &str, phase: char) -> Res<Queue> {
    Ok(Queue::builder().pg_schema(schema(phase)).open(url)?)
}

fn drop_schemas(url: &str) -> Res<()> {
    // Through psql, which the harness has anyway (litejobs has no "drop everything" call).
    for phase in ['a', 'b', 'd'] {
        let _ = Command::new("psql")
            .args(["-X", "-q", url, "-c"])
            .env("PGOPTIONS", "-c client_min_messages=warning")
            .arg(format!("DROP SCHEMA IF EXISTS {} CASCADE", schema(phase)))
            .status();
    }
    Ok(())
}

/// The D producer: a process of its own, enqueueing 200 jobs on a 5 ms grid.
fn producer(url: &str) -> Res<()> {
    let q = open(url, 'D')?;
    let start = Instant::now();
    for k in 0..200u64 {
        if let Some(wait) = Duration::from_millis(5 * k).checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        q.enqueue(NewJob::new("ping", json!({ "t_us": now_us() })))?;
    }
    Ok(())
}

fn main() -> Res<()> {
    let url = std::env::var("PG_URL").map_err(|_| "set PG_URL=postgres://…")?;
    if std::env::args().any(|a| a == "--producer") {
        return producer(&url);
    }
    let n: usize = arg("--n", "20000").parse()?;
    let w: usize = arg("--w", "4").parse()?;
    let phases = arg("--phases", "ABCD").to_uppercase();
    let mut out = json!({"peer": "litejobs", "version": env!("CARGO_PKG_VERSION"), "n": n,
        "n_process": n, "w": w, "enqueue_single_per_s": null, "enqueue_batch_per_s": null,
        "process_per_s": null, "pickup_p50_ms": null, "pickup_p99_ms": null,
        "checks": {}, "notes": "public API, default options; one Worker with W handler threads"});
    let result = run(&url, n, w, &phases, &mut out);
    drop_schemas(&url)?;
    result?;
    println!("{out}");
    Ok(())
}

fn run(url: &str, n: usize, w: usize, phases: &str, out: &mut serde_json::Value) -> Res<()> {
    let qa = open(url, 'A')?;
    if phases.contains('A') || phases.contains('C') {
        let t = Instant::now();
        for i in 0..n {
            qa.enqueue(NewJob::new("noop", json!({ "i": i })))?;
        }
        out["enqueue_single_per_s"] = json!((n as f64 / t.elapsed().as_secs_f64()).round());
        out["checks"]["a_rows"] = json!(qa.stats()?.counts.iter().map(|c| c.count).sum::<i64>());
    }
    if phases.contains('B') {
        let qb = open(url, 'B')?;
        let t = Instant::now();
        let all: Vec<usize> = (0..n).collect();
        for chunk in all.chunks(1000) {
            qb.enqueue_batch(
                chunk
                    .iter()
                    .map(|i| NewJob::new("noop", json!({ "i": i })))
                    .collect::<Vec<_>>(),
            )?;
        }
        out["enqueue_batch_per_s"] = json!((n as f64 / t.elapsed().as_secs_f64()).round());
        out["checks"]["b_rows"] = json!(qb.stats()?.counts.iter().map(|c| c.count).sum::<i64>());
    }
    if phases.contains('C') {
        let ran = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&ran);
        let t = Instant::now();
        let mut builder = Worker::builder(&qa);
        if let Ok(n) = arg("--prefetch", "").parse::<usize>() {
            builder = builder.prefetch(n);
        }
        let worker = builder
            .handler("noop", move |_ctx: &JobContext| -> Result<(), JobError> {
                r.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .concurrency(w)
            .start()?;
        let cap = Instant::now() + Duration::from_secs(900);
        // Every handler ran (no database reads meanwhile, which would take the server's
        // time from the work measured), then every completion is committed.
        while ran.load(Ordering::Relaxed) < n {
            if Instant::now() > cap {
                return Err("phase C did not finish within 900 s".into());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        while qa.stats()?.count(JobStatus::Succeeded) < n as i64 {
            if Instant::now() > cap {
                return Err("phase C did not finish within 900 s".into());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        out["process_per_s"] = json!((n as f64 / t.elapsed().as_secs_f64()).round());
        worker.shutdown(Duration::from_secs(10))?;
        let handled = ran.load(Ordering::Relaxed);
        out["checks"]["c_completed_in_db"] = json!(n);
        out["checks"]["c_handled_unique"] = json!(handled.min(n));
        out["checks"]["c_handled_twice"] = json!(handled.saturating_sub(n));
        if handled != n {
            return Err(format!("phase C: {handled} handler runs for {n} jobs").into());
        }
    }
    if phases.contains('D') {
        let qd = open(url, 'D')?;
        let lat = Arc::new(Mutex::new(Vec::<f64>::new()));
        let l = Arc::clone(&lat);
        let mut builder = Worker::builder(&qd);
        if let Ok(ms) = arg("--check-ms", "").parse::<u64>() {
            builder = builder.change_check_interval(Duration::from_millis(ms));
        }
        let worker = builder
            .handler("ping", move |ctx: &JobContext| -> Result<(), JobError> {
                let sent = ctx.payload()["t_us"].as_i64().unwrap_or(0);
                if let Ok(mut v) = l.lock() {
                    v.push((now_us() - sent) as f64 / 1000.0);
                }
                Ok(())
            })
            .concurrency(w)
            .start()?;
        std::thread::sleep(Duration::from_secs(1));
        let status = Command::new(std::env::current_exe()?)
            .arg("--producer")
            .env("PEER_PG_PARENT", std::process::id().to_string())
            .status()?;
        if !status.success() {
            return Err("the D producer failed".into());
        }
        let t = Instant::now();
        while lat.lock().map_or(0, |v| v.len()) < 200 && t.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(5));
        }
        worker.shutdown(Duration::from_secs(10))?;
        let mut v = lat.lock().map(|v| v.clone()).unwrap_or_default();
        out["checks"]["d_handled_unique"] = json!(v.len());
        v.sort_by(f64::total_cmp);
        if !v.is_empty() {
            let rank =
                |p: f64| v[(((p * v.len() as f64).ceil() as usize).max(1) - 1).min(v.len() - 1)];
            out["pickup_p50_ms"] = json!((rank(0.50) * 1000.0).round() / 1000.0);
            out["pickup_p99_ms"] = json!((rank(0.99) * 1000.0).round() / 1000.0);
        }
    }
    if phases.contains('I') {
        // Not a peers-pg phase: what an idle worker costs (CPU of this process over 10 s).
        let qi = open(url, 'D')?;
        let mut builder = Worker::builder(&qi);
        if let Ok(ms) = arg("--check-ms", "").parse::<u64>() {
            builder = builder.change_check_interval(Duration::from_millis(ms));
        }
        let worker = builder
            .handler("ping", |_ctx: &JobContext| -> Result<(), JobError> {
                Ok(())
            })
            .concurrency(w)
            .start()?;
        std::thread::sleep(Duration::from_secs(1));
        let (cpu0, t0) = (cpu_ticks(), Instant::now());
        std::thread::sleep(Duration::from_secs(10));
        let (cpu1, t1) = (cpu_ticks(), Instant::now());
        worker.shutdown(Duration::from_secs(10))?;
        // Clock ticks are 1/100 s on Linux.
        let share = cpu1.saturating_sub(cpu0) as f64 / 100.0 / (t1 - t0).as_secs_f64();
        out["idle_cpu_percent"] = json!((share * 1000.0).round() / 10.0);
    }
    Ok(())
}

/// utime + stime of this process, in clock ticks.
fn cpu_ticks() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest: Vec<String> = s
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .map(str::to_string)
                .collect();
            Some(rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0)
}
