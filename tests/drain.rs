//! `testing::drain` and run-time idempotency: drain reports what each attempt
//! did, leaves future retries for after `clock.advance`, honours the builder's queues and
//! types, works on an in-memory queue; `ctx.once` runs a side effect once across attempts,
//! and a succeeded job's idempotency key outlives its row.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use litejobs::testing::{self, DrainReport};
use litejobs::{JobError, JobStatus, ManualClock, NewJob, Queue, Worker};
use serde_json::json;

use crate::support::scripted::{job, ScriptedHandler, Step};
use crate::support::{setup, START_MS};

#[test]
fn drain_reports_each_outcome_and_retries_need_the_clock_to_move() {
    let env = setup();
    let ids = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("ok", json!({})),
            NewJob::new("flaky", json!({})),
            NewJob::new("broken", json!({})),
            NewJob::new("later", json!({})),
            NewJob::new("unwanted", json!({})),
        ])
        .expect("enqueue_batch");
    let builder = Worker::builder(&env.queue)
        .handler("ok", ScriptedHandler::new())
        .handler(
            "flaky",
            ScriptedHandler::new().then(Step::retry("try again")),
        )
        .handler(
            "broken",
            ScriptedHandler::always(Step::permanent("bad input")),
        )
        .handler(
            "later",
            ScriptedHandler::new().then(Step::fail(|| JobError::snooze(Duration::from_secs(30)))),
        )
        .handler(
            "unwanted",
            ScriptedHandler::always(Step::fail(|| JobError::cancel("not needed"))),
        );

    let report = testing::drain(&builder).expect("drain");
    assert_eq!(
        (
            report.succeeded,
            report.failed,
            report.dead,
            report.snoozed,
            report.cancelled
        ),
        (1, 1, 1, 1, 1),
        "{report:?}"
    );
    assert_eq!(report.attempts(), 5);

    assert_eq!(
        testing::drain(&builder).expect("drain"),
        DrainReport::default(),
        "the retry and the snooze are not due yet"
    );
    let statuses: Vec<JobStatus> = ids.iter().map(|&id| job(&env.queue, id).status).collect();
    assert_eq!(
        statuses,
        vec![
            JobStatus::Succeeded,
            JobStatus::Failed,
            JobStatus::Dead,
            JobStatus::Queued,
            JobStatus::Cancelled
        ]
    );

    env.clock.advance(Duration::from_secs(60));
    let report = testing::drain(&builder).expect("drain");
    assert_eq!(
        report.succeeded, 2,
        "the retry and the snoozed job: {report:?}"
    );
    assert_eq!(report.attempts(), 2, "{report:?}");
    assert_eq!(job(&env.queue, ids[1]).attempts, 2);
    assert_eq!(job(&env.queue, ids[3]).attempts, 1);
}

#[test]
fn drain_runs_only_due_jobs_of_the_builders_queues_and_types() {
    let env = setup();
    let ids = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("t", json!({"case": "due"})),
            NewJob::new("t", json!({"case": "in ten minutes"})).delay(Duration::from_secs(600)),
            NewJob::new("t", json!({"case": "reports queue"})).queue("reports"),
            NewJob::new("other", json!({"case": "no handler"})),
        ])
        .expect("enqueue_batch");
    let handler = ScriptedHandler::new();

    let default_only = Worker::builder(&env.queue).handler("t", handler.clone());
    let report = testing::drain(&default_only).expect("drain");
    assert_eq!(report.succeeded, 1, "{report:?}");
    assert_eq!(handler.call_ids(), vec![ids[0]]);

    let with_reports = Worker::builder(&env.queue)
        .handler("t", handler.clone())
        .queue("reports", 1);
    let report = testing::drain(&with_reports).expect("drain");
    assert_eq!(report.succeeded, 1, "{report:?}");
    assert_eq!(handler.calls()[1].queue, "reports");

    env.clock.advance(Duration::from_secs(600));
    let report = testing::drain(&with_reports).expect("drain");
    assert_eq!(report.succeeded, 1, "{report:?}");
    assert_eq!(handler.call_ids(), vec![ids[0], ids[2], ids[1]]);
    let other = job(&env.queue, ids[3]);
    assert_eq!((other.status, other.attempts), (JobStatus::Queued, 0));
}

#[test]
fn drain_works_on_an_in_memory_queue() {
    let clock = ManualClock::new(START_MS);
    let queue = Queue::builder()
        .clock(clock.clone())
        .open_in_memory()
        .expect("in-memory queue");
    let id = queue
        .enqueue(NewJob::new("t", json!({"n": 1})))
        .expect("enqueue");
    let handler = ScriptedHandler::new()
        .then(Step::retry("once more"))
        .then(Step::SucceedWith(json!({"done": true})));
    let builder = Worker::builder(&queue).handler("t", handler.clone());
    assert_eq!(testing::drain(&builder).expect("drain").failed, 1);
    clock.advance(Duration::from_secs(3600));
    assert_eq!(testing::drain(&builder).expect("drain").succeeded, 1);
    let j = job(&queue, id);
    assert_eq!(j.status, JobStatus::Succeeded);
    assert_eq!(j.result, Some(json!({"done": true})));
    assert_eq!(handler.call_count(), 2);
}

#[test]
fn ctx_once_runs_the_side_effect_once_across_attempts() {
    let env = setup();
    let effects = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = crossbeam_channel::unbounded::<(u32, bool)>();
    let handler = ScriptedHandler::always(Step::run({
        let effects = Arc::clone(&effects);
        move |ctx| {
            let ran = ctx.once(|| {
                effects.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })?;
            let _ = tx.send((ctx.attempt(), ran));
            if ctx.attempt() == 1 {
                // The email went out, then something after it failed.
                return Err(JobError::retry("could not update the CRM"));
            }
            Ok(())
        }
    }));
    let id = env
        .queue
        .enqueue(NewJob::new("send_email", json!({"user_id": 5})))
        .expect("enqueue");
    let builder = Worker::builder(&env.queue).handler("send_email", handler);
    assert_eq!(testing::drain(&builder).expect("drain").failed, 1);
    env.clock.advance(Duration::from_secs(3600));
    assert_eq!(testing::drain(&builder).expect("drain").succeeded, 1);

    assert_eq!(
        rx.try_iter().collect::<Vec<_>>(),
        vec![(1, true), (2, false)],
        "attempt 2 sees the effect as done"
    );
    assert_eq!(
        effects.load(Ordering::SeqCst),
        1,
        "the side effect ran once"
    );
    assert_eq!(job(&env.queue, id).status, JobStatus::Succeeded);
}

#[test]
fn ctx_once_retries_an_effect_that_failed() {
    let env = setup();
    let effects = Arc::new(AtomicUsize::new(0));
    let handler = ScriptedHandler::always(Step::run({
        let effects = Arc::clone(&effects);
        move |ctx| {
            ctx.once(|| {
                let n = effects.fetch_add(1, Ordering::SeqCst) + 1;
                if n == 1 {
                    Err(JobError::retry("smtp 451"))
                } else {
                    Ok(())
                }
            })?;
            Ok(())
        }
    }));
    let id = env
        .queue
        .enqueue(NewJob::new("send_email", json!({})).idempotency_key("welcome:9"))
        .expect("enqueue");
    let builder = Worker::builder(&env.queue).handler("send_email", handler);
    assert_eq!(testing::drain(&builder).expect("drain").failed, 1);
    assert_eq!(job(&env.queue, id).last_error.as_deref(), Some("smtp 451"));
    env.clock.advance(Duration::from_secs(3600));
    assert_eq!(testing::drain(&builder).expect("drain").succeeded, 1);
    assert_eq!(
        effects.load(Ordering::SeqCst),
        2,
        "a failed effect is not recorded, so it is tried again"
    );
}

#[test]
fn a_succeeded_jobs_idempotency_key_is_remembered_after_its_row_is_gone() {
    let env = setup();
    let key = "report:2024-01:user:3";
    let id = env
        .queue
        .enqueue(NewJob::new("generate_report", json!({"month": "2024-01"})).idempotency_key(key))
        .expect("enqueue");
    // A newer job, so that the keyed one is not the newest row (which is never deleted).
    env.queue
        .enqueue(NewJob::new("generate_report", json!({"month": "2024-02"})))
        .expect("enqueue a newer job");
    let builder = Worker::builder(&env.queue).handler("generate_report", ScriptedHandler::new());
    assert_eq!(testing::drain(&builder).expect("drain").succeeded, 2);

    let remembered = |column: &str| {
        env.sql_i64(&format!(
            "SELECT {column} FROM idempotency_keys WHERE key = '{key}'"
        ))
    };
    assert_eq!(
        env.sql_i64(&format!(
            "SELECT COUNT(*) FROM idempotency_keys WHERE key = '{key}'"
        )),
        1,
        "the key of the succeeded job is remembered"
    );
    assert_eq!(
        (remembered("job_id"), remembered("completed_at")),
        (id, START_MS)
    );

    // Pruned (or deleted by hand): the key still answers with the old job.
    env.sql_exec(&format!("DELETE FROM jobs WHERE id = {id}"));
    assert_eq!(env.count_jobs(), 1);
    let again = env
        .queue
        .enqueue(NewJob::new("generate_report", json!({"month": "2024-01"})).idempotency_key(key))
        .expect("enqueue with the same key");
    assert_eq!(again, id, "the old id is returned");
    assert_eq!(env.count_jobs(), 1, "nothing was inserted");
    assert_eq!(
        testing::drain(&builder).expect("drain"),
        DrainReport::default()
    );
}
