//! Urgent jobs under a flood: report chunks (each handler sleeps 1 ms) drain while urgent
//! jobs arrive 100 a second from another connection by plain SQL (`INSERT INTO jobs`), as a
//! web app's password-reset emails would while a big report runs. Two set-ups:
//! - `own_queue`: the urgent jobs in a queue of their own (1 thread), the chunks in
//!   `reports` (2 threads);
//! - `priority`: both in one queue (2 threads), the urgent jobs at priority 10.
//!
//! For each, the urgent jobs' pickup (their commit's return → their handler's start, p50 and
//! p99) and the chunks' rate against the chunks alone, in alternating rounds of one run.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejobs::{JobContext, JobError, NewJob, Queue, Synchronous, Worker};
use rusqlite::Connection;
use serde_json::{json, Value};

use super::{discard, insert_medians, median, percentiles, Config, Res};

/// How long a chunk's handler works.
const CHUNK: Duration = Duration::from_millis(1);
/// The urgent jobs' arrival interval (100 a second).
const EVERY: Duration = Duration::from_millis(10);

#[derive(Clone, Copy, PartialEq)]
enum Setup {
    /// The chunks alone, in `reports` (2 threads).
    Alone,
    /// Urgent jobs in a queue of their own (1 thread).
    OwnQueue,
    /// Urgent jobs in the chunks' queue at a higher priority.
    Priority,
}

impl Setup {
    fn name(self) -> &'static str {
        match self {
            Setup::Alone => "alone",
            Setup::OwnQueue => "own_queue",
            Setup::Priority => "priority",
        }
    }
}

/// What one round measured.
struct Round {
    chunks_per_s: f64,
    /// The urgent jobs' pickups (ms), from their commit's return.
    pickups_ms: Vec<f64>,
}

fn round(path: &Path, sync: Synchronous, chunks: usize, setup: Setup) -> Res<Round> {
    let q = Queue::builder().synchronous(sync).open(path)?;
    let chunk_queue = if setup == Setup::Priority {
        "default"
    } else {
        "reports"
    };
    let mut i = 0;
    while i < chunks {
        q.enqueue_batch(
            (i..(i + 1000).min(chunks))
                .map(|i| NewJob::new("chunk", json!({ "chunk": i })).queue(chunk_queue))
                .collect(),
        )?;
        i += 1000;
    }
    let done = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&done);
    let (started_tx, started_rx) = crossbeam_channel::unbounded::<(u64, Instant)>();
    let mut builder = Worker::builder(&q)
        .handler("chunk", move |_: &JobContext| -> Result<(), JobError> {
            std::thread::sleep(CHUNK);
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .handler("urgent", move |ctx: &JobContext| -> Result<(), JobError> {
            let at = Instant::now();
            let sample = ctx.payload()["sample"].as_u64().unwrap_or(u64::MAX);
            let _ = started_tx.send((sample, at));
            Ok(())
        });
    builder = match setup {
        Setup::Alone | Setup::OwnQueue => builder.queue("reports", 2).queue("urgent", 1),
        Setup::Priority => builder.queue("default", 2),
    };
    let t = Instant::now();
    let worker = builder.start()?;
    let producing = Arc::new(AtomicBool::new(setup != Setup::Alone));
    let producer = {
        let producing = Arc::clone(&producing);
        let path = path.to_path_buf();
        let (queue, priority) = match setup {
            Setup::Priority => ("default", 10),
            _ => ("urgent", 0),
        };
        std::thread::spawn(move || -> Result<Vec<Instant>, String> {
            let conn = Connection::open(&path).map_err(|e| e.to_string())?;
            conn.busy_timeout(Duration::from_secs(5))
                .map_err(|e| e.to_string())?;
            let mut committed = Vec::new();
            let mut next = Instant::now();
            while producing.load(Ordering::Relaxed) {
                next += EVERY;
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                conn.execute(
                    "INSERT INTO jobs (job_type, queue, priority, payload) VALUES ('urgent', ?1, ?2, ?3)",
                    rusqlite::params![
                        queue,
                        priority,
                        json!({ "sample": committed.len() }).to_string()
                    ],
                )
                .map_err(|e| e.to_string())?;
                committed.push(Instant::now());
            }
            Ok(committed)
        })
    };
    let give_up = Instant::now() + Duration::from_secs(600);
    while done.load(Ordering::Relaxed) < chunks && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(1));
    }
    let chunks_per_s = chunks as f64 / t.elapsed().as_secs_f64();
    producing.store(false, Ordering::Relaxed);
    let committed = producer.join().map_err(|_| "producer panicked")??;
    // The last urgent jobs are picked up before the worker stops.
    let mut started = BTreeMap::new();
    while started.len() < committed.len() {
        let (sample, at) = started_rx.recv_timeout(Duration::from_secs(10))?;
        started.insert(sample, at);
    }
    worker.shutdown(Duration::from_secs(10))?;
    let pickups_ms = committed
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let at = started.get(&(i as u64))?;
            Some(at.saturating_duration_since(*c).as_secs_f64() * 1000.0)
        })
        .collect();
    Ok(Round {
        chunks_per_s,
        pickups_ms,
    })
}

/// The flood figures: per set-up, the urgent jobs' pickup p50 and p99 (every round's samples
/// together) and the chunks' rate (median of the rounds), with its ratio to the chunks alone.
pub(crate) fn figures(c: &Config, sync: Synchronous, dir: &Path) -> Res<BTreeMap<String, Value>> {
    let mut rates = BTreeMap::<String, Vec<f64>>::new();
    let mut pickups = BTreeMap::<&str, Vec<f64>>::new();
    let mut n = 0;
    for _ in 0..c.rounds.min(3) {
        for setup in [Setup::Alone, Setup::OwnQueue, Setup::Priority] {
            n += 1;
            let path = dir.join(format!("flood-{n:02}-{}.db", setup.name()));
            let r = round(&path, sync, c.flood, setup)?;
            rates
                .entry(format!("flood_chunks_{}_per_s", setup.name()))
                .or_default()
                .push(r.chunks_per_s);
            pickups
                .entry(setup.name())
                .or_default()
                .extend(r.pickups_ms);
            discard(&path);
        }
    }
    let mut f = BTreeMap::new();
    let alone = median(&rates["flood_chunks_alone_per_s"]);
    for setup in [Setup::OwnQueue, Setup::Priority] {
        let name = setup.name();
        let (p50, p99) = percentiles(pickups.remove(name).unwrap_or_default());
        f.insert(format!("flood_urgent_{name}_p50_ms"), json!(p50));
        f.insert(format!("flood_urgent_{name}_p99_ms"), json!(p99));
        let rate = median(&rates[&format!("flood_chunks_{name}_per_s")]);
        f.insert(
            format!("flood_chunks_{name}_vs_alone"),
            json!((rate / alone * 100.0).round() / 100.0),
        );
    }
    f.insert("flood_chunks".into(), json!(c.flood));
    insert_medians(&mut f, &rates);
    Ok(f)
}

/// The flood figures' lines, when they were measured.
pub(crate) fn print(figures: &serde_json::Map<String, Value>) {
    let Some(chunks) = figures.get("flood_chunks") else {
        return;
    };
    println!(
        "  urgent jobs under a flood of {chunks} 1 ms chunks (2 threads), 100 a second from \
         another connection"
    );
    println!(
        "  {:<44} {:>10} {:>10} {:>14}",
        "", "p50 ms", "p99 ms", "chunks ÷ alone"
    );
    for (label, name) in [
        ("urgent in a queue of its own (1 thread)", "own_queue"),
        ("urgent in the chunks' queue, priority 10", "priority"),
    ] {
        println!(
            "  {:<44} {:>10} {:>10} {:>14}",
            label,
            figures[&format!("flood_urgent_{name}_p50_ms")].to_string(),
            figures[&format!("flood_urgent_{name}_p99_ms")].to_string(),
            figures[&format!("flood_chunks_{name}_vs_alone")].to_string(),
        );
    }
}
