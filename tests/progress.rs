//! Progress of the long operations (what `litejobs` draws its bars from): retention, a bulk
//! requeue and key rotation call the function given after each chunk, counting up to what
//! their report says in the end.

use std::time::Duration;

use litejobs::encryption::Keyring;
use litejobs::maintenance::PruneOptions;
use litejobs::progress::Progress;
use litejobs::{testing, JobContext, JobError, JobFilter, NewJob, Queue, Worker};
use serde_json::json;

use crate::support::{on_postgres, setup, TestEnv};

/// Runs `jobs` jobs of type `t` to the outcome `ok` says.
fn run(env: &TestEnv, jobs: usize, ok: bool) {
    let batch = (0..jobs)
        .map(|i| NewJob::new("t", json!({ "i": i })).max_attempts(1))
        .collect();
    env.queue.enqueue_batch(batch).expect("enqueue");
    let builder = Worker::builder(&env.queue).handler("t", move |_: &JobContext| {
        if ok {
            Ok(())
        } else {
            Err(JobError::permanent("nope"))
        }
    });
    testing::drain(&builder).expect("drain");
}

/// The calls `f` made, checked to count up.
fn counted(calls: &[Progress]) -> Vec<u64> {
    let done: Vec<u64> = calls.iter().map(|p| p.done).collect();
    assert!(done.windows(2).all(|w| w[0] <= w[1]), "counts up: {done:?}");
    done
}

#[test]
fn prune_tells_the_jobs_deleted_after_each_chunk() {
    let env = setup();
    run(&env, 25, true);
    env.clock.advance(Duration::from_secs(2 * 86_400));
    let mut calls = Vec::new();
    let report = env
        .queue
        .prune_with_progress(
            &PruneOptions::new(Duration::from_secs(86_400)).chunk_size(10),
            &mut |p| calls.push(p),
        )
        .expect("prune");
    // On SQLite the newest job stays, keeping ids from being reused (PostgreSQL's sequence
    // does that there).
    let deleted = if on_postgres() { 25 } else { 24 };
    assert_eq!(report.jobs_deleted, deleted);
    let done = counted(&calls);
    assert!(done.contains(&10) && done.contains(&20), "{done:?}");
    assert_eq!(done.last(), Some(&deleted));
    assert!(calls.iter().all(|p| p.total.is_none()));
}

#[test]
fn a_bulk_requeue_tells_how_many_of_how_many() {
    let env = setup();
    run(&env, 5, false);
    let mut calls = Vec::new();
    let pairs = env
        .queue
        .requeue_dead_where_with_progress(
            &JobFilter::new().job_type("t"),
            "ops",
            "fixed",
            &mut |p| calls.push(p),
        )
        .expect("requeue");
    assert_eq!(pairs.len(), 5);
    assert_eq!(counted(&calls), vec![1, 2, 3, 4, 5]);
    assert!(calls.iter().all(|p| p.total == Some(5)));
}

#[test]
fn key_rotation_tells_the_jobs_looked_at() {
    let env = setup();
    let queue: Queue = env.open_with(Queue::builder().encryption_keys(
        Keyring::parse("k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").expect("key"),
    ));
    queue
        .enqueue_batch(
            (0..7)
                .map(|i| NewJob::new("t", json!({ "i": i })).encrypted())
                .collect(),
        )
        .expect("enqueue");
    let mut calls = Vec::new();
    let report = queue
        .rotate_keys_with_progress(&mut |p| calls.push(p))
        .expect("rotate");
    assert_eq!(report.jobs, 7);
    assert_eq!(counted(&calls).last(), Some(&7));
}
