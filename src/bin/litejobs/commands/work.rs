//! `litejobs work`: run the built-in job handlers (webhook delivery, ...) as a sidecar, so
//! programs in any language can insert rows and let litejobs run them. Stops
//! gracefully on SIGINT or SIGTERM: no new claims, running handlers get the grace
//! period, unfinished jobs are released for another worker.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use litejobs::builtin::{self, BuiltinOptions};
use litejobs::{ErrorKind, Worker};

use super::{work_commands as commands, work_startup, CliError, Ctx, Exit};
use crate::duration::human_ms;
use crate::work_args::WorkArgs;

/// Starts the worker and serves until a signal.
pub fn run(ctx: &Ctx, args: &WorkArgs, _out: &mut dyn Write) -> Result<Exit, CliError> {
    // First of all, before the first line is logged: whoever reads those lines may answer
    // with a signal, which must then stop the worker, not kill the process.
    let signals = install_signal_handler()?;
    let options = BuiltinOptions::from_env()?;
    // Every flag and program checked before the database is opened: a refusal creates and
    // changes nothing.
    let queues = args.queue_threads().map_err(CliError::new)?;
    let prepared = commands::prepare(args, ctx, &queues)?;
    let served = prepared.served();
    let queue = ctx.open_or_create()?;
    // Schedules kept in the database (`litejobs schedule add`) run in every `work`.
    let mut builder = Worker::builder(&queue)
        .stored_schedules()
        .job_logs(!args.no_job_logs);
    for (name, threads) in &queues {
        builder = builder.queue(name, *threads);
    }
    let builder = builtin::register(builder, &options)?;
    let builder = commands::register(builder, args, prepared);
    super::work_outcomes::log_outcomes(&queue);
    let worker = builder.start().map_err(|e| {
        let mut message = format!("cannot start the worker: {e}");
        if message.contains("no handlers registered") {
            // The library's advice is for Rust code; a sidecar's is a flag or a variable.
            message = "cannot start the worker: no handlers registered: give --exec \
                           TYPE=COMMAND or --serve TYPE=COMMAND, or turn on a built-in kind \
                           (LITEJOBS_WEBHOOK_ENABLED=1, LITEJOBS_SMTP_URL)"
                .to_string();
        }
        CliError::new(message)
    })?;
    log::info!(
        "litejobs work: worker {} running on {}; stop with SIGINT or SIGTERM",
        worker.id(),
        ctx.shown_db()?
    );
    // Which periodic jobs kept in the database this worker enqueues (it also sees those
    // added later); a read that fails here only costs these lines.
    let schedules = queue.periodic_schedules().unwrap_or_default();
    let stored: Vec<&str> = schedules
        .iter()
        .filter(|s| s.job.is_some())
        .map(|s| s.name.as_str())
        .collect();
    if !stored.is_empty() {
        log::info!(
            "litejobs work: enqueues the schedules kept in the database ({}); \
             `litejobs schedule list` shows them",
            stored.join(", ")
        );
    }
    if let Err(e) = work_startup::report(&queue, &options, &served, &queues, &schedules) {
        log::warn!("litejobs work: cannot read which job types wait: {e}");
    }
    let activity = worker.activity();
    super::systemd::feed_watchdog(move || activity.wakeups());
    super::systemd::ready(&format!("worker {} running", worker.id()));
    serve(worker, &signals, args.grace, args.kill_grace)
}

/// Waits for the first signal, then shuts the worker down within `grace`. A worker whose
/// handlers outlive the grace still exits 0: their jobs were released, nothing is lost.
pub fn serve(
    worker: Worker,
    signals: &Receiver<()>,
    grace: Duration,
    kill_grace: Duration,
) -> Result<Exit, CliError> {
    // An Err means every sender is gone, which cannot happen while the handler is installed;
    // shutting down is the safe answer either way.
    let _ = signals.recv();
    super::systemd::stopping();
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    log::info!(
        "litejobs work: shutting down, running handlers get up to {}",
        human_ms(grace_ms)
    );
    let stopped = worker.shutdown(grace);
    // Commands still running past the grace were told to stop (SIGTERM, then SIGKILL after
    // the kill grace); exiting before they are gone would leave them orphaned.
    #[cfg(unix)]
    if !litejobs::exec::wait_for_commands(kill_grace + Duration::from_secs(1)) {
        log::warn!("litejobs work: some commands were still running at exit");
    }
    #[cfg(not(unix))]
    let _ = kill_grace;
    match stopped {
        Ok(()) => {
            log::info!("litejobs work: stopped cleanly");
            Ok(Exit::Ok)
        }
        Err(e) if e.kind() == ErrorKind::ShutdownTimeout => {
            log::warn!("litejobs work: {e}");
            Ok(Exit::Ok)
        }
        Err(e) => Err(e.into()),
    }
}

/// SIGINT, SIGTERM (and SIGHUP) send on the returned channel; a second signal exits at once
/// (running jobs are then reaped when their leases expire).
fn install_signal_handler() -> Result<Receiver<()>, CliError> {
    let (tx, rx) = mpsc::channel();
    let seen = AtomicUsize::new(0);
    ctrlc::set_handler(move || {
        if seen.fetch_add(1, Ordering::SeqCst) > 0 {
            eprintln!(
                "litejobs: second signal, exiting without waiting for handlers (commands \
                 killed; their jobs come back when their leases expire)"
            );
            #[cfg(unix)]
            litejobs::exec::kill_all_commands();
            std::process::exit(130);
        }
        let _ = tx.send(());
    })
    .map_err(|e| CliError::new(format!("cannot install the signal handler: {e}")))?;
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use litejobs::{Event, JobContext, JobError, JobStatus, NewJob, Queue};
    use serde_json::json;

    #[test]
    fn serve_runs_jobs_until_the_signal_then_shuts_down_cleanly() {
        let queue = Queue::open_in_memory().expect("in-memory queue");
        let events = queue.subscribe();
        let worker = Worker::builder(&queue)
            .handler("noop", |_: &JobContext| -> Result<(), JobError> { Ok(()) })
            .start()
            .expect("worker start");
        let id = queue
            .enqueue(NewJob::new("noop", json!({})))
            .expect("enqueue");
        let (tx, rx) = mpsc::channel();
        let server = std::thread::spawn(move || {
            serve(worker, &rx, Duration::from_secs(5), Duration::from_secs(1))
        });
        loop {
            match events.recv_timeout(Duration::from_secs(10)) {
                Ok(Event::Finished {
                    id: done, status, ..
                }) if done == id => {
                    assert_eq!(status, JobStatus::Succeeded);
                    break;
                }
                Ok(_) => {}
                Err(e) => panic!("job {id} did not finish while serving: {e}"),
            }
        }
        tx.send(()).expect("the server listens");
        let exit = server.join().expect("serve did not panic");
        assert_eq!(exit.ok(), Some(Exit::Ok));
    }
}
