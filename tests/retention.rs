//! Scheduled retention inside a worker: `WorkerBuilder::prune` deletes old succeeded
//! and cancelled jobs between claims and never touches dead or waiting ones.

use std::time::Duration;

use litejobs::maintenance::PruneOptions;
use litejobs::{Event, JobContext, JobError, JobStatus, NewJob, Worker};
use serde_json::json;

use crate::support::{setup, sqlite_only, TestEnv, START_MS};

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
    let old = START_MS - 30 * DAY_MS;
    for (id, status, finished) in [
        (ids[0], "succeeded", old),
        (ids[1], "succeeded", old),
        (ids[2], "cancelled", old),
        (ids[3], "succeeded", START_MS - 1000),
        (ids[4], "dead", old),
    ] {
        env.sql_exec(&format!(
            "UPDATE jobs SET status = '{status}', finished_at = {finished}, updated_at = {finished}
             WHERE id = {id}"
        ));
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
    // SQLite's id rule (schema.sql's jobs_newest_kept); PostgreSQL's ids come from a
    // sequence and its prune deletes the newest job too.
    if sqlite_only() {
        return;
    }
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

/// Commits do not checkpoint (that cost every hundredth enqueue or claim a copy and an
/// fsync); litejobs' own thread copies the write-ahead log into the database soon after, and
/// the last connection to close leaves no log behind.
#[test]
fn the_write_ahead_log_is_checkpointed_in_the_background_and_removed_at_close() {
    if sqlite_only() {
        return;
    }
    let env = setup();
    let db_size = || {
        std::fs::metadata(&env.path)
            .map(|m| m.len())
            .expect("db size")
    };
    let before = db_size();
    let text = "x".repeat(8_000);
    for i in 0..300 {
        env.queue
            .enqueue(NewJob::new("other", json!({ "i": i, "text": text })))
            .expect("enqueue");
    }
    // 2.4 MB of payloads reach the database file only through a checkpoint; nobody here
    // asks for one. Bounded wait: the thread checkpoints a quarter of a second after writes.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while db_size() < before + 2_000_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint within 20 s: the database file is {} bytes",
            db_size()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let wal = env.path.with_file_name("jobs.db-wal");
    let TestEnv { dir, queue, .. } = env;
    drop(queue);
    assert!(
        std::fs::metadata(&wal).is_err(),
        "the last connection's close checkpoints and removes the log"
    );
    drop(dir);
}

/// A burst of writes can leave a long log behind. Its file is not cut while writes go on (the
/// commit that cut it paid for it), but once they stop the checkpoint thread empties it, and
/// every job is still there.
#[test]
fn a_long_write_ahead_log_is_emptied_once_writes_stop() {
    if sqlite_only() {
        return;
    }
    let env = setup();
    let wal = env.path.with_file_name("jobs.db-wal");
    let wal_len = || std::fs::metadata(&wal).map_or(0, |m| m.len());
    let text = "x".repeat(50_000);
    // One commit of 70 MB: the log passes 64 MiB before any checkpoint.
    let jobs: Vec<NewJob> = (0..1400)
        .map(|i| NewJob::new("other", json!({ "i": i, "text": text })))
        .collect();
    env.queue.enqueue_batch(jobs).expect("enqueue a batch");
    assert!(
        wal_len() > 64 << 20,
        "the log holds the batch: {} bytes",
        wal_len()
    );
    // Bounded wait: the thread empties the file after a second without writes.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while wal_len() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the log file still holds {} bytes 20 s after the last write",
            wal_len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = env.queue.stats().expect("stats");
    assert_eq!(
        stats.count(JobStatus::Queued),
        1400,
        "every job is still there"
    );
}
