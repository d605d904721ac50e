//! Retry policies: the default exponential backoff with jitter, exact delays without
//! jitter and the cap, per-type schedules that apply to their type only, and jitter that
//! spreads many jobs failing at the same instant. Time is a `ManualClock`, so delays are
//! read off `run_at` exactly, never waited for.

use std::collections::BTreeSet;
use std::time::Duration;

use litejobs::{JobError, JobStatus, NewJob, RetryPolicy, Worker};
use serde_json::json;

use crate::support::scripted::{job, wait_all, Mode, Runner, ScriptedHandler, Step, MODES};
use crate::support::{setup, TestEnv, START_MS};

fn always_failing() -> ScriptedHandler {
    ScriptedHandler::always(Step::run(|ctx| {
        Err(JobError::retry(format!("attempt {} failed", ctx.attempt())))
    }))
}

/// Runs `attempts` failing attempts of each job in `ids` (moving the clock to the latest
/// `run_at` between rounds) and returns, per job, the delay each failure scheduled.
fn delays(env: &TestEnv, run: &mut Runner<'_>, ids: &[i64], attempts: usize) -> Vec<Vec<i64>> {
    let mut delays = vec![Vec::new(); ids.len()];
    for round in 0..attempts {
        let now = env.clock.now();
        let finished = run.attempt_all(ids);
        for (i, f) in finished.iter().enumerate() {
            assert_eq!(
                f.status,
                JobStatus::Failed,
                "[{:?}] round {round}: {f:?}",
                run.mode
            );
            delays[i].push(job(&env.queue, ids[i]).run_at - now);
        }
        let latest = ids
            .iter()
            .map(|&id| job(&env.queue, id).run_at)
            .max()
            .expect("at least one job");
        env.clock.set(latest);
    }
    delays
}

#[test]
fn the_default_policy_doubles_from_five_seconds_within_twenty_percent_jitter() {
    for mode in MODES {
        let env = setup();
        let id = env
            .queue
            .enqueue(NewJob::new("send_email", json!({})).max_attempts(10))
            .expect("enqueue");
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue).handler("send_email", always_failing()),
        );
        let got = delays(&env, &mut run, &[id], 5);
        run.finish();
        for (i, delay) in got[0].iter().enumerate() {
            let base = 5_000i64 << i;
            assert!(
                (base * 4 / 5..=base * 6 / 5).contains(delay),
                "[{mode:?}] delay after attempt {} was {delay} ms, expected {base} ms ± 20 %",
                i + 1
            );
        }
    }
}

#[test]
fn without_jitter_the_default_delays_are_exact_and_a_cap_holds() {
    for mode in MODES {
        let env = setup();
        let ids = env
            .queue
            .enqueue_batch(vec![
                NewJob::new("plain", json!({})).max_attempts(10),
                NewJob::new("capped", json!({})).max_attempts(10),
            ])
            .expect("enqueue_batch");
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue)
                .handler("plain", always_failing())
                .handler("capped", always_failing())
                .default_retry_policy(RetryPolicy::default().jitter(0.0))
                .retry_policy(
                    "capped",
                    RetryPolicy::exponential(Duration::from_secs(5))
                        .max_delay(Duration::from_secs(15))
                        .jitter(0.0),
                ),
        );
        let got = delays(&env, &mut run, &ids, 4);
        run.finish();
        assert_eq!(
            got[0],
            vec![5_000, 10_000, 20_000, 40_000],
            "[{mode:?}] 5 s, 10 s, 20 s, 40 s"
        );
        assert_eq!(
            got[1],
            vec![5_000, 10_000, 15_000, 15_000],
            "[{mode:?}] capped at 15 s"
        );
    }
}

#[test]
fn a_per_type_schedule_is_used_for_its_type_only() {
    for mode in MODES {
        let env = setup();
        let ids = env
            .queue
            .enqueue_batch(vec![
                NewJob::new("deliver_webhook", json!({})).max_attempts(10),
                NewJob::new("send_email", json!({})).max_attempts(10),
            ])
            .expect("enqueue_batch");
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue)
                .handler("deliver_webhook", always_failing())
                .handler("send_email", always_failing())
                .default_retry_policy(RetryPolicy::default().jitter(0.0))
                .retry_policy(
                    "deliver_webhook",
                    RetryPolicy::schedule(
                        [60, 300, 1800]
                            .into_iter()
                            .map(Duration::from_secs)
                            .collect(),
                    ),
                ),
        );
        let got = delays(&env, &mut run, &ids, 4);
        run.finish();
        assert_eq!(
            got[0],
            vec![60_000, 300_000, 1_800_000, 1_800_000],
            "[{mode:?}] the webhook schedule, its last entry repeating"
        );
        assert_eq!(
            got[1],
            vec![5_000, 10_000, 20_000, 40_000],
            "[{mode:?}] the email type keeps the default policy"
        );
    }
}

#[test]
fn jitter_spreads_fifty_jobs_failing_at_the_same_instant() {
    for mode in MODES {
        let env = setup();
        let ids = env
            .queue
            .enqueue_batch(
                (0..50)
                    .map(|n| NewJob::new("deliver_webhook", json!({ "n": n })))
                    .collect(),
            )
            .expect("enqueue_batch");
        let events = env.queue.subscribe();
        let builder = Worker::builder(&env.queue)
            .handler(
                "deliver_webhook",
                ScriptedHandler::always(Step::retry("503")),
            )
            .concurrency(4);
        let worker = match mode {
            Mode::Worker => Some(builder.start().expect("worker starts")),
            Mode::Drain => {
                let report = litejobs::testing::drain(&builder).expect("drain");
                assert_eq!(report.failed, 50, "{report:?}");
                None
            }
        };
        wait_all(&events, &ids, JobStatus::Failed);
        if let Some(worker) = worker {
            crate::support::scripted::stop(worker);
        }
        assert_eq!(
            env.clock.now(),
            START_MS,
            "every job failed at the same instant"
        );
        let run_ats: Vec<i64> = ids.iter().map(|&id| job(&env.queue, id).run_at).collect();
        for (id, run_at) in ids.iter().zip(&run_ats) {
            assert!(
                (START_MS + 4_000..=START_MS + 6_000).contains(run_at),
                "[{mode:?}] job {id}: retry at now + {} ms, outside 5 s ± 20 %",
                run_at - START_MS
            );
        }
        let distinct: BTreeSet<i64> = run_ats.iter().copied().collect();
        assert!(
            distinct.len() >= 40,
            "[{mode:?}] only {} distinct retry times among 50 jobs: {distinct:?}",
            distinct.len()
        );
        let spread = distinct.last().copied().unwrap_or_default()
            - distinct.first().copied().unwrap_or_default();
        assert!(
            spread >= 1_000,
            "[{mode:?}] retries spread over only {spread} ms"
        );
    }
}

/// Role of [`child_retry_delays_process`].
const DELAYS_ROLE: &str = "retry-delays";
/// Jobs each child fails together.
const CHILD_JOBS: usize = 32;

/// A child process: on its own database, with a manual clock standing still, fails
/// [`CHILD_JOBS`] jobs once each under the default policy and appends each retry's delay
/// (ms) to its log.
#[test]
fn child_retry_delays_process() {
    use crate::support::child::{self, AppendLog, DB_VAR, LOG_VAR};
    if !child::is_child(DELAYS_ROLE) {
        return;
    }
    let clock = litejobs::ManualClock::new(START_MS);
    let queue = litejobs::Queue::builder()
        .clock(clock)
        .open(child::env_path(DB_VAR))
        .expect("child: opening its queue");
    let ids = queue
        .enqueue_batch(
            (0..CHILD_JOBS)
                .map(|n| NewJob::new("flaky", json!({ "n": n })))
                .collect(),
        )
        .expect("child: enqueue");
    let builder = Worker::builder(&queue).handler("flaky", always_failing());
    litejobs::testing::drain(&builder).expect("child: drain");
    let log = AppendLog::open(&child::env_path(LOG_VAR));
    for id in ids {
        log.line(&(job(&queue, id).run_at - START_MS).to_string());
    }
}

/// Jitter exists so that jobs failing together do not retry together; with several worker
/// processes that must hold across processes too: each process draws its own jitter.
#[test]
fn jobs_failing_together_in_two_processes_retry_at_different_times() {
    use crate::support::child::{self, ChildProc, Deadline, DB_VAR, LOG_VAR};
    let dir = crate::support::temp_dir();
    let deadline = Deadline::new("two processes' jitter", Duration::from_secs(100));
    let delays: Vec<Vec<i64>> = (0..2)
        .map(|n| {
            let log = dir.path().join(format!("delays-{n}.log"));
            let envs = [
                (
                    DB_VAR,
                    dir.path().join(format!("jobs-{n}.db")).into_os_string(),
                ),
                (LOG_VAR, log.clone().into_os_string()),
            ];
            let mut proc = ChildProc::spawn(
                dir.path(),
                &format!("child-{n}"),
                "retry::child_retry_delays_process",
                DELAYS_ROLE,
                &envs,
            );
            proc.expect_success(&deadline);
            child::read_lines(&log)
                .iter()
                .map(|line| line.parse().expect("a delay in ms"))
                .collect()
        })
        .collect();
    for d in &delays {
        assert_eq!(d.len(), CHILD_JOBS);
        assert!(
            d.iter().all(|ms| (4_000..=6_000).contains(ms)),
            "5 s ± 20 %: {d:?}"
        );
        let distinct: BTreeSet<i64> = d.iter().copied().collect();
        assert!(
            distinct.len() > CHILD_JOBS / 2,
            "spread within a process: {d:?}"
        );
    }
    assert_ne!(
        delays[0], delays[1],
        "two processes drew the same jitter: their jobs would retry together"
    );
}
