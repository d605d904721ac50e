//! Scheduled retention inside a worker (R17): `WorkerBuilder::prune` deletes old succeeded
//! and cancelled jobs between claims and never touches dead or waiting ones.

use std::time::Duration;

use litejobs::maintenance::PruneOptions;
use litejobs::{Event, JobContext, JobError, JobStatus, NewJob, Worker};
use serde_json::json;

use crate::support::{setup, START_MS};

const DAY_MS: i64 = 24 * 3600 * 1000;

#[test]
fn a_worker_prunes_old_finished_jobs_on_its_schedule_and_keeps_the_rest() {
    let env = setup();
    let ids: Vec<i64> = (0..6)
        .map(|i| {
            env.queue
                .enqueue(NewJob::new("other", json!({ "i": i })))
                .expect("enqueue")
        })
        .collect();
    // Age them by hand: two succeeded and one cancelled long ago, one succeeded recently,
    // one dead long ago, one still queued.
    let raw = env.raw();
    let old = START_MS - 30 * DAY_MS;
    for (id, status, finished) in [
        (ids[0], "succeeded", old),
        (ids[1], "succeeded", old),
        (ids[2], "cancelled", old),
        (ids[3], "succeeded", START_MS - 1000),
        (ids[4], "dead", old),
    ] {
        raw.execute(
            "UPDATE jobs SET status = ?1, finished_at = ?2, updated_at = ?2 WHERE id = ?3",
            rusqlite::params![status, finished, id],
        )
        .expect("age a job");
    }
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        // No handler for "other": the queued job must stay queued, not run.
        .handler("noop", |_: &JobContext| -> Result<(), JobError> { Ok(()) })
        .prune(
            PruneOptions::new(Duration::from_secs(7 * 24 * 3600)),
            Duration::from_secs(3600),
        )
        .start()
        .expect("worker starts");
    let deleted = loop {
        match events.recv_timeout(Duration::from_secs(30)) {
            Ok(Event::Pruned { jobs }) => break jobs,
            Ok(_) => continue,
            Err(e) => panic!("the worker's scheduled prune never reported: {e}"),
        }
    };
    worker.shutdown(Duration::from_secs(5)).expect("shutdown");
    assert_eq!(deleted, 3, "two old succeeded and one old cancelled job");
    for id in &ids[..3] {
        assert!(
            env.queue.job(*id).expect("read").is_none(),
            "job {id} pruned"
        );
    }
    for id in &ids[3..] {
        assert!(env.queue.job(*id).expect("read").is_some(), "job {id} kept");
    }
}

#[test]
fn prune_keeps_the_newest_job_until_a_newer_one_exists_so_ids_are_never_reused() {
    let env = setup();
    let ids: Vec<i64> = (0..3)
        .map(|i| {
            env.queue
                .enqueue(NewJob::new("other", json!({ "i": i })))
                .expect("enqueue")
        })
        .collect();
    let old = START_MS - 30 * DAY_MS;
    env.raw()
        .execute(
            "UPDATE jobs SET status = 'succeeded', finished_at = ?1, updated_at = ?1",
            [old],
        )
        .expect("age every job");
    let week = PruneOptions::new(Duration::from_secs(7 * 24 * 3600));
    let report = env.queue.prune(&week).expect("prune");
    assert_eq!(report.jobs_deleted, 2, "all but the newest");
    assert!(
        env.queue.job(ids[2]).expect("read").is_some(),
        "the newest stays"
    );
    assert_eq!(
        env.queue
            .stats()
            .expect("stats")
            .count(JobStatus::Succeeded),
        1
    );

    let next = env
        .queue
        .enqueue(NewJob::new("other", json!({})))
        .expect("enqueue after the prune");
    assert_eq!(
        next,
        ids[2] + 1,
        "the next id follows the newest ever handed out"
    );
    let report = env.queue.prune(&week).expect("prune again");
    assert_eq!(
        report.jobs_deleted, 1,
        "the old newest goes once a newer job exists"
    );
    assert!(env.queue.job(ids[2]).expect("read").is_none());
}
