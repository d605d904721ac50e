//! What keeping attempts' logs costs: processing with 4 handler threads of jobs whose
//! handler logs one line (`JobContext::log_line`) with the logs kept, the same with them
//! off (`WorkerBuilder::job_logs(false)`), and jobs whose handler says nothing, in
//! alternating rounds of the same run, each figure the median of its rounds.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use litejobs::{JobContext, JobError, NewJob, Queue, Synchronous, Worker};
use serde_json::{json, Value};

use super::{discard, drain_rate, insert_medians, median, ratio, Config, Res};

/// Which handler a figure is of.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Says nothing.
    Silent,
    /// Logs a line, kept with the attempt.
    Logged,
    /// Logs a line, the worker keeping none.
    LoggedOff,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Silent => "silent",
            Kind::Logged => "logged",
            Kind::LoggedOff => "logged_off",
        }
    }
}

fn process(path: &Path, sync: Synchronous, n: usize, kind: Kind) -> Res<f64> {
    let q = Queue::builder().synchronous(sync).open(path)?;
    let mut i = 0;
    while i < n {
        q.enqueue_batch(
            (i..(i + 1000).min(n))
                .map(|i| NewJob::new("charge", json!({ "order": i })))
                .collect(),
        )?;
        i += 1000;
    }
    let done = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&done);
    let worker = Worker::builder(&q)
        .handler("charge", move |ctx: &JobContext| -> Result<(), JobError> {
            if kind != Kind::Silent {
                ctx.log_line(format!(
                    "charged order {} through the payment provider",
                    ctx.payload()["order"]
                ));
            }
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .job_logs(kind != Kind::LoggedOff)
        .concurrency(4);
    drain_rate(&q, n, &done, worker)
}

/// The log figures, with their rounds and ratios (to the silent handler).
pub(crate) fn figures(c: &Config, sync: Synchronous, dir: &Path) -> Res<BTreeMap<String, Value>> {
    let mut rounds = BTreeMap::<String, Vec<f64>>::new();
    let mut n = 0;
    for _ in 0..c.rounds {
        for kind in [Kind::Silent, Kind::Logged, Kind::LoggedOff] {
            n += 1;
            let path = dir.join(format!("log-{n:02}-{}.db", kind.name()));
            let rate = process(&path, sync, c.process, kind)?;
            rounds
                .entry(format!("process_4_threads_{}_per_s", kind.name()))
                .or_default()
                .push(rate);
            discard(&path);
        }
    }
    let mut f = BTreeMap::new();
    insert_medians(&mut f, &rounds);
    let get = |kind: Kind| median(&rounds[&format!("process_4_threads_{}_per_s", kind.name())]);
    f.insert(
        "ratio_process_logged_to_silent".into(),
        ratio(get(Kind::Logged), get(Kind::Silent)),
    );
    f.insert(
        "ratio_process_logged_off_to_silent".into(),
        ratio(get(Kind::LoggedOff), get(Kind::Silent)),
    );
    Ok(f)
}

/// The figures' lines of the table.
pub(crate) fn print(figures: &serde_json::Map<String, Value>) {
    let get = |kind: &str| {
        figures
            .get(&format!("process_4_threads_{kind}_per_s"))
            .and_then(Value::as_f64)
    };
    let (Some(silent), Some(logged), Some(off)) = (get("silent"), get("logged"), get("logged_off"))
    else {
        return;
    };
    println!(
        "  {:<44} {:>12} {:>12} {:>7}",
        "a handler that logs one line", "jobs/s", "silent", "ratio"
    );
    println!(
        "  {:<44} {logged:>12.0} {silent:>12.0} {:>7.2}",
        "process, 4 threads, logs kept",
        logged / silent
    );
    println!(
        "  {:<44} {off:>12.0} {silent:>12.0} {:>7.2}",
        "process, 4 threads, logs off",
        off / silent
    );
}
