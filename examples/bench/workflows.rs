//! What waiting for other jobs costs, in alternating rounds of the same run, each figure the
//! median of its rounds:
//!
//! - enqueue of jobs in pairs, the second waiting for the first (a workflow of two steps),
//!   against plain jobs: one pair (or two plain jobs) per transaction, and 500 pairs (a
//!   workflow of 1 000 steps) against batches of 1 000 plain jobs;
//! - processing with 4 handler threads of such pairs against plain jobs;
//! - the same three for jobs with one wait by id (`NewJob::after`, no workflow): one job per
//!   transaction each waiting for the one before, batches of 1 000 each waiting for a job of
//!   the batch before, and processing of jobs half of which wait for the other half;
//! - a fan-out of 10 000 steps with one fan-in step that waits for all of them: the time from
//!   the commit of the last fan-out step's outcome (its `Finished` event, sent right after
//!   the commit; negative when the event thread read it after the fan-in started), and from
//!   the last fan-out handler's return, to the fan-in's handler starting, and the whole run from the worker's start
//!   to the fan-in's start; with the fan-in in the fan-out's queue, and in a queue of its own.
//!
//! On SQLite each measurement has a fresh file; with `--pg URL` (feature `postgres`) a fresh
//! schema on that server instead, dropped after it (through `psql`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver};
use litejobs::{Event, JobContext, JobError, NewJob, Queue, Step, Synchronous, Worker, Workflow};
use serde_json::{json, Value};

use super::{discard, drain_rate, median, ratio, Config, Res};

/// Steps per workflow when pairs are enqueued in batches: 500 pairs, as many jobs as a batch
/// of plain jobs.
const BATCH: usize = 1000;

/// Where the measured queues live.
pub(crate) enum Target<'a> {
    /// Files in `dir`, written with `sync`.
    File { dir: &'a Path, sync: Synchronous },
    /// Schemas of their own on the PostgreSQL server at `url`.
    Server { url: &'a str },
}

/// One measurement's queue: a fresh file, or a fresh schema on the server.
enum Place {
    File(PathBuf, Synchronous),
    Schema { url: String, schema: String },
}

impl Target<'_> {
    /// The place of the `n`th measurement.
    fn place(&self, n: usize, label: &str) -> Place {
        match self {
            Target::File { dir, sync } => {
                Place::File(dir.join(format!("wf-{n:02}-{label}.db")), *sync)
            }
            Target::Server { url } => Place::Schema {
                url: url.to_string(),
                schema: format!("bench_wf_{}_{n:02}", std::process::id()),
            },
        }
    }
}

impl Place {
    fn open(&self) -> Res<Queue> {
        Ok(match self {
            Place::File(path, sync) => Queue::builder().synchronous(*sync).open(path)?,
            Place::Schema { url, schema } => Queue::builder().pg_schema(schema).open(url)?,
        })
    }

    fn discard(&self) {
        match self {
            Place::File(path, _) => discard(path),
            // Through psql, as examples/peer_pg.rs: litejobs has no "drop everything" call.
            Place::Schema { url, schema } => {
                let _ = std::process::Command::new("psql")
                    .env("PGOPTIONS", "-c client_min_messages=warning")
                    .args(["-X", "-q", url, "-c"])
                    .arg(format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                    .status();
            }
        }
    }
}

fn job(i: usize) -> NewJob {
    NewJob::new("noop", json!({ "i": i }))
}

/// `pairs` pairs of steps: `b{i}` waits for `a{i}`.
fn pairs(from: usize, pairs: usize) -> Workflow {
    (from..from + pairs).fold(Workflow::new("pairs"), |flow, i| {
        flow.step(Step::new(format!("a{i}"), job(2 * i)))
            .step(Step::new(format!("b{i}"), job(2 * i + 1)).after(format!("a{i}")))
    })
}

/// Enqueues `n` jobs (rounded down to pairs) as pairs, `per_tx` jobs per transaction.
fn enqueue_pairs(q: &Queue, n: usize, per_tx: usize) -> Res<()> {
    let (total, per) = (n / 2, (per_tx / 2).max(1));
    let mut i = 0;
    while i < total {
        let count = per.min(total - i);
        q.enqueue_workflow(pairs(i, count))?;
        i += count;
    }
    Ok(())
}

/// Enqueues `n` plain jobs, `per_tx` per transaction.
fn enqueue_plain(q: &Queue, n: usize, per_tx: usize) -> Res<()> {
    let mut i = 0;
    while i < n {
        let count = per_tx.min(n - i);
        q.enqueue_batch((i..i + count).map(job).collect())?;
        i += count;
    }
    Ok(())
}

/// Jobs a second, enqueueing `n` jobs with one wait each by id (`NewJob::after`, no
/// workflow): one job per transaction waiting for the one before (`per_tx` 1), or batches
/// of `per_tx` whose jobs each wait for a job of the batch before; `waits` false enqueues
/// the same jobs plain.
fn enqueue_after_rate(place: &Place, n: usize, per_tx: usize, waits: bool) -> Res<f64> {
    let q = place.open()?;
    // The first jobs waited for are there before the clock starts.
    let mut previous: Vec<i64> = q.enqueue_batch((0..per_tx).map(job).collect())?;
    let t = Instant::now();
    let mut i = 0;
    while i < n {
        let count = per_tx.min(n - i);
        let jobs: Vec<NewJob> = (0..count)
            .map(|k| {
                let j = job(i + k);
                if waits {
                    j.after(previous[k % previous.len()])
                } else {
                    j
                }
            })
            .collect();
        previous = if count == 1 {
            vec![q.enqueue(jobs.into_iter().next().ok_or("a job")?)?]
        } else {
            q.enqueue_batch(jobs)?
        };
        i += count;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Jobs a second processed by 4 threads, of `n` jobs: half plain, half each waiting for
/// one of those by id (`waits`), or all plain.
fn process_after_rate(place: &Place, n: usize, waits: bool) -> Res<f64> {
    let q = place.open()?;
    let half = n / 2;
    let mut i = 0;
    while i < half {
        let count = BATCH.min(half - i);
        let first = q.enqueue_batch((i..i + count).map(job).collect())?;
        let second: Vec<NewJob> = first
            .iter()
            .enumerate()
            .map(|(k, &id)| {
                let j = job(half + i + k);
                if waits {
                    j.after(id)
                } else {
                    j
                }
            })
            .collect();
        q.enqueue_batch(second)?;
        i += count;
    }
    run_noops(&q, half * 2)
}

/// Jobs a second, enqueueing `n` of them `per_tx` per transaction, as pairs or plain.
fn enqueue_rate(place: &Place, n: usize, per_tx: usize, paired: bool) -> Res<f64> {
    let q = place.open()?;
    let t = Instant::now();
    if paired {
        enqueue_pairs(&q, n, per_tx)?;
    } else {
        enqueue_plain(&q, n, per_tx)?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Jobs a second processed by 4 handler threads, from the worker's start to the last
/// write-back, of `n` jobs enqueued beforehand as pairs or plain.
fn process_rate(place: &Place, n: usize, paired: bool) -> Res<f64> {
    let q = place.open()?;
    let n = if paired { n / 2 * 2 } else { n };
    if paired {
        enqueue_pairs(&q, n, BATCH)?;
    } else {
        enqueue_plain(&q, n, BATCH)?;
    }
    run_noops(&q, n)
}

/// Runs the `n` no-op jobs of `q` with 4 threads; jobs a second from the worker's start to
/// the last write-back.
fn run_noops(q: &Queue, n: usize) -> Res<f64> {
    let done = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&done);
    let worker = Worker::builder(q)
        .handler("noop", move |_: &JobContext| -> Result<(), JobError> {
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .concurrency(4);
    drain_rate(q, n, &done, worker)
}

/// One fan-out and fan-in run.
struct FanIn {
    /// Enqueueing the workflow (ms).
    enqueue_ms: f64,
    /// The last fan-out step's outcome committed (its `Finished` event read) → the fan-in's
    /// handler started (ms); negative when the event was read after the fan-in started.
    release_ms: f64,
    /// The last fan-out step's handler returned → the fan-in's handler started (ms): the
    /// outcome's way to the writer, its transaction and commit, and the fan-in's claim.
    handler_to_handler_ms: f64,
    /// The worker's start → the fan-in's handler started (ms).
    total_ms: f64,
}

/// Instants at which the `n`-th `Finished` event of type `chunk` arrived, read on a thread of
/// its own so that they are taken as the events are sent.
fn last_finished(events: Receiver<Event>, n: usize) -> std::thread::JoinHandle<Option<Instant>> {
    std::thread::spawn(move || {
        let mut seen = 0;
        while let Ok(event) = events.recv_timeout(Duration::from_secs(600)) {
            if let Event::Finished { job_type, .. } = &event {
                if job_type == "chunk" {
                    seen += 1;
                    if seen == n {
                        return Some(Instant::now());
                    }
                }
            }
        }
        None
    })
}

/// A workflow of `n` fan-out steps and a fan-in step after all of them, worked by 4 threads
/// (the fan-in in the fan-out's queue, or in a queue of its own with one thread).
fn fan_in(place: &Place, n: usize, own_queue: bool) -> Res<FanIn> {
    let q = place.open()?;
    let mut flow = Workflow::new("fan-out");
    let mut fan_in = Step::new(
        "fan-in",
        NewJob::new("fan_in", json!({})).queue(if own_queue { "fan_in" } else { "default" }),
    );
    for i in 0..n {
        let name = format!("chunk {i}");
        flow = flow.step(Step::new(
            name.clone(),
            NewJob::new("chunk", json!({ "i": i })),
        ));
        fan_in = fan_in.after(name);
    }
    let flow = flow.step(fan_in);
    let t = Instant::now();
    q.enqueue_workflow(flow)?;
    let enqueue_ms = t.elapsed().as_secs_f64() * 1000.0;

    let last = last_finished(q.subscribe(), n);
    let (started_tx, started) = unbounded::<Instant>();
    // When each fan-out handler returned, as nanoseconds after `epoch`: the latest wins.
    let epoch = Instant::now();
    let returned = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let returned_in = Arc::clone(&returned);
    let builder = Worker::builder(&q)
        .handler("chunk", move |_: &JobContext| -> Result<(), JobError> {
            let at = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
            returned_in.fetch_max(at, Ordering::Relaxed);
            Ok(())
        })
        .handler("fan_in", move |_: &JobContext| -> Result<(), JobError> {
            let _ = started_tx.send(Instant::now());
            Ok(())
        })
        .concurrency(4);
    let builder = if own_queue {
        builder.queue("fan_in", 1)
    } else {
        builder
    };
    let t = Instant::now();
    let worker = builder.start()?;
    let start = started.recv_timeout(Duration::from_secs(600))?;
    let total_ms = start.duration_since(t).as_secs_f64() * 1000.0;
    worker.shutdown(Duration::from_secs(10))?;
    let last = last
        .join()
        .map_err(|_| "the event reader panicked")?
        .ok_or("the fan-out's events did not all arrive")?;
    let signed_ms = |later: Instant, earlier: Instant| match later.checked_duration_since(earlier) {
        Some(d) => d.as_secs_f64() * 1000.0,
        None => -(earlier.duration_since(later).as_secs_f64() * 1000.0),
    };
    let last_returned = epoch + Duration::from_nanos(returned.load(Ordering::Relaxed));
    Ok(FanIn {
        enqueue_ms,
        release_ms: signed_ms(start, last),
        handler_to_handler_ms: signed_ms(start, last_returned),
        total_ms,
    })
}

/// The workflow figures, with their rounds and ratios (with a dependency ÷ plain).
pub(crate) fn figures(c: &Config, target: &Target<'_>) -> Res<BTreeMap<String, Value>> {
    let mut rounds = BTreeMap::<String, Vec<f64>>::new();
    let mut sample =
        |name: &str, value: f64| rounds.entry(name.to_string()).or_default().push(value);
    let mut n = 0;
    let mut fresh = |label: &str| {
        n += 1;
        target.place(n, label)
    };
    for _ in 0..c.rounds {
        for (kind, paired) in [("plain", false), ("paired", true)] {
            let place = fresh(&format!("single-{kind}"));
            sample(
                &format!("enqueue_single_{kind}_per_s"),
                enqueue_rate(&place, c.single, 2, paired)?,
            );
            place.discard();
            let place = fresh(&format!("batched-{kind}"));
            sample(
                &format!("enqueue_batched_{kind}_per_s"),
                enqueue_rate(&place, c.batched, BATCH, paired)?,
            );
            place.discard();
            let place = fresh(&format!("process-{kind}"));
            sample(
                &format!("process_4_threads_{kind}_per_s"),
                process_rate(&place, c.process, paired)?,
            );
            place.discard();
        }
        for (kind, waits) in [("plain", false), ("after", true)] {
            let place = fresh(&format!("after-single-{kind}"));
            sample(
                &format!("one_wait_single_{kind}_per_s"),
                enqueue_after_rate(&place, c.single, 1, waits)?,
            );
            place.discard();
            let place = fresh(&format!("after-batched-{kind}"));
            sample(
                &format!("one_wait_batched_{kind}_per_s"),
                enqueue_after_rate(&place, c.batched, BATCH, waits)?,
            );
            place.discard();
            let place = fresh(&format!("after-process-{kind}"));
            sample(
                &format!("one_wait_process_4_threads_{kind}_per_s"),
                process_after_rate(&place, c.process, waits)?,
            );
            place.discard();
        }
        for (label, own_queue) in [("fan_in", false), ("fan_in_own_queue", true)] {
            let place = fresh(label);
            let run = fan_in(&place, c.fan_out, own_queue)?;
            sample(&format!("{label}_release_ms"), run.release_ms);
            sample(
                &format!("{label}_handler_to_handler_ms"),
                run.handler_to_handler_ms,
            );
            sample(&format!("{label}_total_ms"), run.total_ms);
            sample(&format!("{label}_enqueue_ms"), run.enqueue_ms);
            place.discard();
        }
    }
    let mut f = BTreeMap::new();
    let round = |x: f64| (x * 100.0).round() / 100.0;
    for (name, values) in &rounds {
        f.insert(format!("wf_{name}"), json!(round(median(values))));
        f.insert(
            format!("wf_{name}_rounds"),
            json!(values.iter().map(|v| round(*v)).collect::<Vec<_>>()),
        );
    }
    for what in ["enqueue_single", "enqueue_batched", "process_4_threads"] {
        let get = |kind: &str| median(&rounds[&format!("{what}_{kind}_per_s")]);
        f.insert(
            format!("wf_ratio_{what}_paired_to_plain"),
            ratio(get("paired"), get("plain")),
        );
    }
    for what in [
        "one_wait_single",
        "one_wait_batched",
        "one_wait_process_4_threads",
    ] {
        let get = |kind: &str| median(&rounds[&format!("{what}_{kind}_per_s")]);
        f.insert(
            format!("wf_ratio_{what}_after_to_plain"),
            ratio(get("after"), get("plain")),
        );
    }
    f.insert("wf_fan_out_steps".into(), json!(c.fan_out));
    f.insert("wf_rounds".into(), json!(c.rounds));
    Ok(f)
}

/// The figures' lines of the table.
pub(crate) fn print(figures: &serde_json::Map<String, Value>) {
    if !figures.contains_key("wf_enqueue_single_plain_per_s") {
        return;
    }
    let get = |k: &str| {
        figures
            .get(&format!("wf_{k}"))
            .and_then(Value::as_f64)
            .unwrap_or(f64::NAN)
    };
    let spread = |k: &str| {
        let values: Vec<f64> = figures
            .get(&format!("wf_{k}_rounds"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{lo:.0}–{hi:.0}")
    };
    println!(
        "  {:<44} {:>12} {:>12} {:>7}",
        "jobs in pairs (the second waits for the first)", "paired", "plain", "ratio"
    );
    for (label, what) in [
        ("enqueue, 1 pair per transaction (jobs/s)", "enqueue_single"),
        (
            "enqueue, 500 pairs per transaction (jobs/s)",
            "enqueue_batched",
        ),
        ("process, 4 threads (jobs/s)", "process_4_threads"),
    ] {
        let (a, b) = (
            get(&format!("{what}_paired_per_s")),
            get(&format!("{what}_plain_per_s")),
        );
        println!(
            "  {label:<44} {a:>12.0} {b:>12.0} {:>7.2}   rounds {} / {}",
            a / b,
            spread(&format!("{what}_paired_per_s")),
            spread(&format!("{what}_plain_per_s"))
        );
    }
    println!(
        "  {:<44} {:>12} {:>12} {:>7}",
        "jobs with one wait by id (NewJob::after)", "one wait", "plain", "ratio"
    );
    for (label, what) in [
        ("enqueue, 1 job per transaction (jobs/s)", "one_wait_single"),
        (
            "enqueue, 1 000 per transaction (jobs/s)",
            "one_wait_batched",
        ),
        (
            "process, 4 threads, half waiting (jobs/s)",
            "one_wait_process_4_threads",
        ),
    ] {
        let (a, b) = (
            get(&format!("{what}_after_per_s")),
            get(&format!("{what}_plain_per_s")),
        );
        println!(
            "  {label:<44} {a:>12.0} {b:>12.0} {:>7.2}   rounds {} / {}",
            a / b,
            spread(&format!("{what}_after_per_s")),
            spread(&format!("{what}_plain_per_s"))
        );
    }
    let steps = figures
        .get("wf_fan_out_steps")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    for (label, what) in [
        ("fan-in in the fan-out's queue", "fan_in"),
        ("fan-in in a queue of its own", "fan_in_own_queue"),
    ] {
        println!("  {steps} steps fanned in, {label}:");
        println!(
            "  {:<44} {:>12.2}   rounds {}",
            "  last outcome committed → fan-in starts (ms)",
            get(&format!("{what}_release_ms")),
            format_rounds(figures, &format!("wf_{what}_release_ms_rounds"))
        );
        println!(
            "  {:<44} {:>12.2}   rounds {}",
            "  last fan-out handler returned → fan-in (ms)",
            get(&format!("{what}_handler_to_handler_ms")),
            format_rounds(figures, &format!("wf_{what}_handler_to_handler_ms_rounds"))
        );
        println!(
            "  {:<44} {:>12.0}   rounds {}",
            "  worker start → fan-in starts (ms)",
            get(&format!("{what}_total_ms")),
            spread(&format!("{what}_total_ms"))
        );
        println!(
            "  {:<44} {:>12.0}",
            "  enqueue of the workflow (ms)",
            get(&format!("{what}_enqueue_ms")),
        );
    }
}

fn format_rounds(figures: &serde_json::Map<String, Value>, key: &str) -> String {
    figures
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_f64)
                .map(|v| format!("{v:.2}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}
