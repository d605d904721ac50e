//! Throughput of command handlers beside the in-process Rust handler, in one run:
//! no-op jobs through a Rust closure, through `--exec /bin/true` (a process per job) and
//! through `--serve` with the Python example (`examples/serve_worker.py`).
//!
//! ```sh
//! cargo run --release --example bench_exec            # 20 000 / 2 000 / 20 000 jobs
//! cargo run --release --example bench_exec -- --quick # a smoke run (CI)
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejobs::exec::{Command, Serve};
use litejobs::{Handler, JobContext, JobError, NewJob, Queue, Synchronous, Worker};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const THREADS: usize = 4;

fn main() -> Res<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let (n_rust, n_exec, n_serve) = if quick {
        (2_000, 100, 1_000)
    } else {
        (20_000, 2_000, 20_000)
    };
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/serve_worker.py");

    let rust = rate(n_rust, |_: &JobContext| -> Result<(), JobError> { Ok(()) })?;
    let exec = rate(n_exec, Command::new("/bin/true"))?;
    let serve = rate(
        n_serve,
        Serve::new("python3").args([example]).processes(THREADS),
    )?;

    println!("no-op jobs per second, {THREADS} handler threads, one run:");
    println!("  in-process Rust handler      {rust:>9.0}/s ({n_rust} jobs)");
    println!(
        "  --exec /bin/true             {exec:>9.0}/s ({n_exec} jobs)  {:.4} of Rust  (goal >= 500/s)",
        exec / rust
    );
    println!(
        "  --serve serve_worker.py      {serve:>9.0}/s ({n_serve} jobs)  {:.3} of Rust  (goal >= 10 000/s)",
        serve / rust
    );
    Ok(())
}

/// Jobs per second from the worker's start until `n` jobs were handled and written back.
fn rate(n: usize, handler: impl Handler) -> Res<f64> {
    let dir = tempfile::tempdir()?;
    let queue = Queue::builder()
        .synchronous(Synchronous::Normal)
        .open(dir.path().join("bench.db"))?;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob::new("bench", json!({ "text": format!("job number {i}") })))
        .collect();
    for chunk in jobs.chunks(1000) {
        queue.enqueue_batch(chunk.to_vec())?;
    }
    let done = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&done);
    let started = Instant::now();
    let worker = Worker::builder(&queue)
        .handler("bench", move |ctx: &JobContext| {
            let outcome = handler.run(ctx);
            counted.fetch_add(1, Ordering::Relaxed);
            outcome
        })
        .concurrency(THREADS)
        .start()?;
    let give_up = Instant::now() + Duration::from_secs(600);
    while done.load(Ordering::Relaxed) < n && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(1));
    }
    worker.shutdown(Duration::from_secs(10))?;
    let elapsed = started.elapsed().as_secs_f64();
    let succeeded = queue.stats()?.count(litejobs::JobStatus::Succeeded);
    if succeeded < n as i64 {
        return Err(format!("only {succeeded} of {n} jobs succeeded").into());
    }
    Ok(n as f64 / elapsed)
}
