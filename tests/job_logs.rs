//! What a job said while it ran, kept with each attempt: lines its handler gives
//! `JobContext::log_line` and `log` records on its thread (with a `CaptureLogger`
//! installed), bounded to the newest 32 KiB, and deleted with the job.

use std::sync::OnceLock;
use std::time::Duration;

use litejobs::job_log::{CaptureLogger, ATTEMPT_LOG_BYTES};
use litejobs::maintenance::PruneOptions;
use litejobs::{testing, JobContext, JobError, NewJob, Worker};
use serde_json::json;

use crate::support::{setup, TestEnv};

/// A logger that would write info and above, and writes nothing: the capture alone is
/// under test (it keeps what the inner logger would write).
struct Silent;

impl log::Log for Silent {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }
    fn log(&self, _: &log::Record<'_>) {}
    fn flush(&self) {}
}

/// Installs the capture as this test process's logger, once.
fn capture_installed() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        log::set_boxed_logger(Box::new(CaptureLogger::new(Silent)))
            .expect("no other logger in the test process");
        log::set_max_level(log::LevelFilter::Info);
    });
}

fn drain(
    env: &TestEnv,
    handler: impl Fn(&JobContext) -> Result<(), JobError> + Send + Sync + 'static,
) {
    let builder = Worker::builder(&env.queue).handler("t", handler);
    testing::drain(&builder).expect("drain");
}

#[test]
fn each_attempt_keeps_its_handler_s_lines_and_log_records() {
    capture_installed();
    let env = setup();
    let id = env
        .queue
        .enqueue(NewJob::new("t", json!({"order": 1042})))
        .expect("enqueue");
    let handler = |ctx: &JobContext| -> Result<(), JobError> {
        if ctx.attempt() == 1 {
            ctx.log_line("fetching order 1042");
            log::info!(target: "shop::sync", "calling the partner's API");
            // A record of another thread is not this attempt's.
            std::thread::spawn(|| log::info!(target: "elsewhere", "not the job's"))
                .join()
                .expect("thread");
            return Err(JobError::retry_after(Duration::from_secs(1), "HTTP 503"));
        }
        ctx.log_line("done\n");
        Ok(())
    };
    drain(&env, handler);
    env.clock.advance(Duration::from_secs(2));
    drain(&env, handler);
    let logs = env.queue.attempt_logs(id).expect("logs");
    let texts: Vec<(i64, &str, i64)> = logs
        .iter()
        .map(|l| (l.attempt, l.text.as_str(), l.cut_bytes))
        .collect();
    assert_eq!(
        texts,
        vec![
            (
                1,
                "fetching order 1042\nINFO shop::sync: calling the partner's API\n",
                0
            ),
            (2, "done\n", 0),
        ]
    );
}

#[test]
fn an_attempt_that_says_nothing_keeps_no_log_and_a_long_one_its_newest_bytes() {
    let env = setup();
    let quiet = env
        .queue
        .enqueue(NewJob::new("t", json!({"say": 0})))
        .expect("enqueue");
    let chatty = env
        .queue
        .enqueue(NewJob::new("t", json!({"say": 1000})))
        .expect("enqueue");
    drain(&env, |ctx| {
        let lines = ctx.payload()["say"].as_u64().unwrap_or(0);
        for i in 0..lines {
            ctx.log_line(format!("line {i:04} {}", "x".repeat(40)));
        }
        Ok(())
    });
    assert!(env.queue.attempt_logs(quiet).expect("logs").is_empty());
    let logs = env.queue.attempt_logs(chatty).expect("logs");
    assert_eq!(logs.len(), 1);
    let log = &logs[0];
    assert!(log.text.len() <= ATTEMPT_LOG_BYTES, "{}", log.text.len());
    assert!(log
        .text
        .ends_with(&format!("line 0999 {}\n", "x".repeat(40))));
    let total = 1000 * ("line 0000 ".len() + 40 + 1);
    assert_eq!(log.cut_bytes as usize + log.text.len(), total);
}

#[test]
fn logs_go_with_their_job() {
    let env = setup();
    let kept = env
        .queue
        .enqueue(NewJob::new("t", json!({})))
        .expect("enqueue");
    let pruned = env
        .queue
        .enqueue(NewJob::new("t", json!({})))
        .expect("enqueue");
    let dead = env
        .queue
        .enqueue(NewJob::new("t", json!({})).max_attempts(1))
        .expect("enqueue");
    drain(&env, move |ctx| {
        ctx.log_line("said something");
        if ctx.id() == dead {
            return Err(JobError::permanent("no"));
        }
        Ok(())
    });
    for id in [kept, pruned, dead] {
        assert_eq!(env.queue.attempt_logs(id).expect("logs").len(), 1);
    }
    // A newer job keeps ids from being reused (the newest row is never deleted), so the
    // others can go.
    let newest = env
        .queue
        .enqueue(NewJob::new("t", json!({})).delay(Duration::from_secs(86_400 * 10)))
        .expect("enqueue");
    env.queue.discard_dead(dead).expect("discard");
    assert!(env.queue.attempt_logs(dead).expect("logs").is_empty());
    env.clock.advance(Duration::from_secs(2 * 86_400));
    let report = env
        .queue
        .prune(&PruneOptions::new(Duration::from_secs(86_400)))
        .expect("prune");
    assert_eq!(report.jobs_deleted, 2, "{report:?}");
    for id in [kept, pruned] {
        assert!(env.queue.attempt_logs(id).expect("logs").is_empty());
    }
    assert!(env.queue.job(newest).expect("read").is_some());
}

#[test]
fn a_worker_keeps_no_logs_of_a_type_it_was_told_not_to() {
    let env = setup();
    let quiet = env
        .queue
        .enqueue(NewJob::new("t", json!({})))
        .expect("enqueue");
    let kept = env
        .queue
        .enqueue(NewJob::new("u", json!({})))
        .expect("enqueue");
    let say = |ctx: &JobContext| -> Result<(), JobError> {
        ctx.log_line("hello");
        Ok(())
    };
    let builder = Worker::builder(&env.queue)
        .handler("t", say)
        .handler("u", say)
        .job_logs_for("t", false);
    testing::drain(&builder).expect("drain");
    assert!(env.queue.attempt_logs(quiet).expect("logs").is_empty());
    assert_eq!(env.queue.attempt_logs(kept).expect("logs").len(), 1);
}

#[test]
fn a_snoozed_run_keeps_no_log_and_a_nul_is_shown_not_stored() {
    let env = setup();
    let snoozed = env
        .queue
        .enqueue(NewJob::new("t", json!({"snooze": true})))
        .expect("enqueue");
    let nul = env
        .queue
        .enqueue(NewJob::new("t", json!({"snooze": false})))
        .expect("enqueue");
    drain(&env, |ctx| {
        ctx.log_line("a\0b");
        if ctx.payload()["snooze"] == json!(true) {
            return Err(JobError::snooze(Duration::from_secs(60)));
        }
        Ok(())
    });
    assert!(
        env.queue.attempt_logs(snoozed).expect("logs").is_empty(),
        "a snooze is not an attempt: the next run has its number"
    );
    let logs = env.queue.attempt_logs(nul).expect("logs");
    assert_eq!(logs[0].text, "a\\0b\n", "PostgreSQL's text holds no NUL");
}
