//! The workers registry: a worker writes its row when it starts (host, pid, version, queues,
//! job types), counts the jobs it runs, marks itself stopped when it shuts down, and reads as
//! gone once its sign of life is old; rows gone for a day go at the next worker's beat.

use std::time::{Duration, Instant};

use litejobs::{Clock, JobContext, JobError, NewJob, Worker, WorkerInfo};
use serde_json::json;

use crate::support::scripted::{Latch, ScriptedHandler, Step, WAIT};
use crate::support::{setup, TestEnv};

const HOUR: Duration = Duration::from_secs(3600);

/// The registry's rows once `n` of them are there (a worker writes its row from its
/// dispatcher thread, right after it starts).
fn workers_once(env: &TestEnv, n: usize) -> Vec<WorkerInfo> {
    let deadline = Instant::now() + WAIT;
    loop {
        let rows = env.queue.workers().expect("workers");
        if rows.len() >= n {
            return rows;
        }
        assert!(Instant::now() < deadline, "no worker registered: {rows:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_worker_registers_what_it_serves_counts_its_running_jobs_and_marks_its_stop() {
    let env = setup();
    let latch = Latch::new();
    let handler = ScriptedHandler::always(Step::Block(latch.clone()));
    let worker = Worker::builder(&env.queue)
        .handler("resize", handler.clone())
        .handler("send_email", |_: &JobContext| -> Result<(), JobError> {
            Ok(())
        })
        .queue("emails", 2)
        .concurrency(3)
        .reap_interval(HOUR)
        .start()
        .expect("start");
    let rows = workers_once(&env, 1);
    let w = &rows[0];
    assert_eq!(w.id, worker.id());
    assert!(w.alive && w.stopped_at.is_none(), "{w:?}");
    assert_eq!(w.pid, i64::from(std::process::id()));
    assert_eq!(w.version, env!("CARGO_PKG_VERSION"));
    assert!(!w.host.is_empty());
    assert_eq!(
        w.queues
            .iter()
            .map(|(q, t)| (q.as_str(), *t))
            .collect::<Vec<_>>(),
        vec![("default", 3), ("emails", 2)]
    );
    assert_eq!(
        w.job_types,
        vec!["resize".to_string(), "send_email".to_string()]
    );
    assert!(w.serves("emails", "send_email") && !w.serves("reports", "send_email"));
    assert_eq!(w.running, 0);

    let id = env
        .queue
        .enqueue(NewJob::new("resize", json!({})))
        .expect("enqueue");
    handler.wait_started("the resize job");
    let running = env.queue.workers().expect("workers");
    assert_eq!(running[0].running, 1, "job {id} runs under its lease");
    latch.open();
    worker.shutdown(WAIT).expect("shutdown");
    let stopped = env.queue.workers().expect("workers");
    assert_eq!(stopped.len(), 1);
    assert!(!stopped[0].alive, "{stopped:?}");
    assert_eq!(stopped[0].stopped_at, Some(env.clock.now_ms()));
    assert_eq!(stopped[0].running, 0);
}

#[test]
fn a_worker_with_no_sign_of_life_reads_as_gone_and_its_row_goes_after_a_day() {
    let env = setup();
    // A worker that "dies": stopped, then its row made to look as if it never said so (a
    // killed process leaves it that way); the queue's clock moves on.
    let first = Worker::builder(&env.queue)
        .handler("t", |_: &JobContext| -> Result<(), JobError> { Ok(()) })
        .reap_interval(HOUR)
        .start()
        .expect("start");
    let first_id = first.id().to_string();
    let rows = workers_once(&env, 1);
    // Alive for three reap intervals after its beat.
    assert_eq!(rows[0].alive_until, rows[0].heartbeat_at + 3 * 3_600_000);
    first.shutdown(WAIT).expect("shutdown");
    env.sql_exec("UPDATE workers SET stopped_at = NULL, alive_until = heartbeat_at + 10800000");
    env.clock.advance(3 * HOUR + Duration::from_millis(1));
    let gone = env.queue.workers().expect("workers");
    assert!(
        !gone[0].alive,
        "no sign of life for three intervals: {gone:?}"
    );
    assert_eq!(gone[0].stopped_at, None, "it never said it stopped");

    // A day later the row is no longer shown, and the next worker's first beat deletes it.
    env.clock.advance(Duration::from_secs(24 * 3600));
    assert!(env.queue.workers().expect("workers").is_empty());
    assert_eq!(
        env.sql_i64("SELECT COUNT(*) FROM workers"),
        1,
        "still there"
    );
    let second = Worker::builder(&env.queue)
        .handler("t", |_: &JobContext| -> Result<(), JobError> { Ok(()) })
        .worker_id("second")
        .reap_interval(HOUR)
        .start()
        .expect("start");
    let deadline = Instant::now() + WAIT;
    loop {
        let ids: Vec<String> = env
            .queue
            .workers()
            .expect("workers")
            .into_iter()
            .map(|w| w.id)
            .collect();
        if ids == vec!["second".to_string()] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dead worker {first_id}'s row stays: {ids:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    second.shutdown(WAIT).expect("shutdown");
}

/// A worker restarted under the same id (`WorkerBuilder::worker_id`) while the old process
/// still shuts down, as in a rolling deploy: the row says what the new one serves, and the
/// old one's stop does not mark the new one stopped.
#[test]
fn a_worker_id_reused_by_a_newer_process_keeps_the_newer_row() {
    let env = setup();
    let start = |job_type: &str| {
        Worker::builder(&env.queue)
            .handler(job_type, |_: &JobContext| -> Result<(), JobError> {
                Ok(())
            })
            .worker_id("web-1")
            .reap_interval(HOUR)
            .start()
            .expect("start")
    };
    let old = start("old_type");
    workers_once(&env, 1);
    env.clock.advance(Duration::from_secs(1));
    let new = start("new_type");
    let deadline = Instant::now() + WAIT;
    while env.queue.workers().expect("workers")[0].job_types != vec!["new_type".to_string()] {
        assert!(
            Instant::now() < deadline,
            "the newer process never wrote its row"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    old.shutdown(WAIT).expect("the old process stops");
    let rows = env.queue.workers().expect("workers");
    assert_eq!(rows.len(), 1);
    assert!(rows[0].alive && rows[0].stopped_at.is_none(), "{rows:?}");
    new.shutdown(WAIT).expect("the new one stops");
    assert!(!env.queue.workers().expect("workers")[0].alive);
}
