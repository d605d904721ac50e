//! Errors that group: failures that differ only in the log lines before a traceback, in ids
//! or in quoted values are one group, shown by the line that matters; a list and a bulk
//! requeue narrow to a group; rows failed by another program group by their whole text.

use std::time::Duration;

use litejobs::{testing, Clock, JobContext, JobError, JobFilter, JobStatus, NewJob, Worker};
use serde_json::json;

use crate::support::{setup, TestEnv};

/// What a Python script's stderr looks like when its database is down: a log line naming
/// the order, then the traceback.
fn refused(order: i64) -> String {
    format!(
        "exit 1: 2026-12-05 10:{:02}:01 INFO syncing order {order}\n\
         Traceback (most recent call last):\n  File \"/app/sync.py\", line 12, in <module>\n    \
         main()\nConnectionError: [Errno 111] Connection refused",
        order % 60
    )
}

/// Runs every job once (one attempt each), failing each `sync` job with [`refused`] and
/// each `charge` job with an error naming its id.
fn run_failing(env: &TestEnv) {
    let builder = Worker::builder(&env.queue)
        .handler("sync", |ctx: &JobContext| {
            let order = ctx.payload()["order"].as_i64().unwrap_or(0);
            Err(JobError::retry(refused(order)))
        })
        .handler("charge", |ctx: &JobContext| {
            Err(JobError::permanent(format!(
                "card 'tok_{}' declined for charge {}",
                ctx.id() * 7919,
                ctx.id()
            )))
        });
    testing::drain(&builder).expect("drain");
}

fn enqueue(env: &TestEnv, job_type: &str, key: &str, n: i64) -> Vec<i64> {
    (0..n)
        .map(|i| {
            env.queue
                .enqueue(NewJob::new(job_type, json!({ key: 1000 + i })).max_attempts(1))
                .expect("enqueue")
        })
        .collect()
}

#[test]
fn failures_that_differ_in_log_lines_and_ids_are_one_group_shown_by_the_line_that_matters() {
    let env = setup();
    let syncs = enqueue(&env, "sync", "order", 3);
    let charges = enqueue(&env, "charge", "amount", 2);
    run_failing(&env);

    let groups = env.queue.error_groups(10).expect("error groups");
    assert_eq!(groups.len(), 2, "{groups:#?}");
    let sync = &groups[0];
    assert_eq!((sync.count, sync.dead, sync.failed), (3, 3, 0));
    assert_eq!(sync.job_types, vec!["sync".to_string()]);
    assert_eq!(
        sync.headline,
        "exit 1: ConnectionError: [Errno 111] Connection refused"
    );
    assert!(
        sync.error.contains("Traceback") && sync.error.contains("INFO syncing order"),
        "the whole text of the latest job: {}",
        sync.error
    );
    let charge = &groups[1];
    assert_eq!((charge.count, charge.dead), (2, 2));
    assert_eq!(charge.group, "card '…' declined for charge #");
    assert!(
        charge.headline.starts_with("card 'tok_") && charge.headline == charge.error,
        "a one-line error is its own headline: {charge:?}"
    );

    // A list narrowed to the group finds its jobs, and only them.
    let listed: Vec<i64> = env
        .queue
        .dead_jobs(&JobFilter::new().error_group(&sync.group))
        .expect("dead jobs of the group")
        .iter()
        .map(|j| j.id)
        .rev()
        .collect();
    assert_eq!(listed, syncs);
    let any_status = env
        .queue
        .list(&JobFilter::new().error_group(&charge.group))
        .expect("jobs of the group");
    assert_eq!(any_status.len(), 2);

    // The dry run names what the bulk requeue then takes: the group, in one transaction.
    let filter = JobFilter::new().job_type("sync").error_group(&sync.group);
    assert_eq!(
        env.queue
            .requeue_dead_where_dry_run(&filter)
            .expect("dry run"),
        syncs
    );
    let pairs = env
        .queue
        .requeue_dead_where(&filter, "ops@example.com", "database back")
        .expect("requeue the group");
    assert_eq!(
        pairs.iter().map(|p| p.0).collect::<Vec<_>>(),
        syncs,
        "every job of the group, oldest first"
    );
    for (_, new_id) in &pairs {
        let job = env.queue.job(*new_id).expect("read").expect("the new job");
        assert_eq!(job.status, JobStatus::Queued);
    }
    let left = env.queue.error_groups(10).expect("error groups");
    assert_eq!(left.len(), 1, "requeued jobs leave their group: {left:#?}");
    assert_eq!(left[0].group, charge.group);
    assert_eq!(
        env.queue
            .dead_jobs(&JobFilter::new())
            .expect("dead jobs")
            .iter()
            .filter(|j| charges.contains(&j.id))
            .count(),
        2,
        "the other group was not touched"
    );
}

#[test]
fn a_group_is_first_seen_at_the_earliest_attempt_that_failed_with_it() {
    let env = setup();
    let first = env
        .queue
        .enqueue(NewJob::new("sync", json!({"order": 1})).max_attempts(3))
        .expect("enqueue");
    // The first job fails once, then succeeds: its attempt is still the group's first
    // sighting once other jobs fail the same way.
    let builder = Worker::builder(&env.queue).handler("sync", move |ctx: &JobContext| {
        if ctx.id() == first && ctx.attempt() > 1 {
            return Ok(());
        }
        let order = ctx.payload()["order"].as_i64().unwrap_or(0);
        Err(JobError::retry(refused(order)))
    });
    testing::drain(&builder).expect("first attempt");
    let seen_at = env.clock.now_ms();
    env.clock.advance(Duration::from_secs(3600));
    testing::drain(&builder).expect("the retry succeeds");
    assert_eq!(
        env.queue.job(first).expect("read").expect("job").status,
        JobStatus::Succeeded
    );
    env.clock.advance(Duration::from_secs(3600));
    enqueue(&env, "sync", "order", 2);
    testing::drain(&builder).expect("two more fail");
    let groups = env.queue.error_groups(10).expect("error groups");
    assert_eq!(groups.len(), 1, "{groups:#?}");
    assert_eq!(groups[0].count, 2, "the succeeded job is not counted");
    assert_eq!(groups[0].first_seen_at, seen_at);
}

#[test]
fn a_row_another_program_failed_groups_by_its_whole_text() {
    let env = setup();
    let ids = enqueue(&env, "import", "file", 3);
    env.sql_exec(&format!(
        "UPDATE jobs SET status = 'dead', finished_at = updated_at,
                last_error = 'bad file ' || id WHERE id IN ({}, {});
         UPDATE jobs SET status = 'dead', finished_at = updated_at,
                last_error = 'bad file 0' WHERE id = {}",
        ids[0], ids[1], ids[2]
    ));
    let mut groups: Vec<(String, i64)> = env
        .queue
        .error_groups(10)
        .expect("error groups")
        .into_iter()
        .map(|g| (g.group, g.count))
        .collect();
    groups.sort();
    assert_eq!(
        groups,
        vec![
            ("bad file 0".to_string(), 1),
            (format!("bad file {}", ids[0]), 1),
            (format!("bad file {}", ids[1]), 1),
        ],
        "no fingerprint written: each text is its own group"
    );
    let pairs = env
        .queue
        .requeue_dead_where(
            &JobFilter::new().error_group(format!("bad file {}", ids[1])),
            "ops",
            "fixed the file",
        )
        .expect("requeue by the text's group");
    assert_eq!(pairs.iter().map(|p| p.0).collect::<Vec<_>>(), vec![ids[1]]);
}
