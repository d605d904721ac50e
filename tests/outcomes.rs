//! Attempt outcomes and their history: success with a result, retryable and permanent
//! errors, retry-after, snooze, cancel, status codes, exhausted attempts, panicking handlers,
//! rows with invalid JSON, and job types this worker has no handler for. Each outcome is
//! checked through a started worker and through `testing::drain`, which share the
//! production path.

use std::time::Duration;

use litejobs::{testing, JobError, JobStatus, NewJob, RetryPolicy, Worker};
use serde_json::json;

use crate::support::scripted::{
    history, job, outcomes, setup_wall_clock, stop, wait_all, wait_each, wait_finished, Mode,
    Runner, ScriptedHandler, Step, MODES,
};
use crate::support::{setup, TestEnv, START_MS};

fn enqueue(env: &TestEnv, new: NewJob) -> i64 {
    env.queue.enqueue(new).expect("enqueue")
}

fn email() -> NewJob {
    NewJob::new("send_email", json!({"user_id": 42}))
}

#[test]
fn success_stores_the_result_and_writes_no_history_row() {
    for mode in MODES {
        let env = setup();
        let handler =
            ScriptedHandler::always(Step::SucceedWith(json!({"message_id": "<42@example.com>"})));
        let id = enqueue(&env, email());
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue).handler("send_email", handler.clone()),
        );
        let done = run.attempt(id);
        run.finish();

        assert_eq!(
            (done.status, done.attempt),
            (JobStatus::Succeeded, 1),
            "[{mode:?}]"
        );
        let j = job(&env.queue, id);
        assert_eq!(j.status, JobStatus::Succeeded, "[{mode:?}]");
        assert_eq!(j.attempts, 1);
        assert_eq!(j.result, Some(json!({"message_id": "<42@example.com>"})));
        assert_eq!(j.started_at, Some(START_MS));
        assert_eq!(j.finished_at, Some(START_MS));
        assert_eq!((j.locked_by, j.locked_until), (None, None), "lease cleared");
        assert_eq!(j.last_error, None);
        assert!(
            history(&env.queue, id).is_empty(),
            "[{mode:?}] a first-try success is recorded on the job row only"
        );
        let calls = handler.calls();
        assert_eq!(calls.len(), 1, "[{mode:?}] {calls:?}");
        assert_eq!(calls[0].attempt, 1);
        assert_eq!(calls[0].payload, json!({"user_id": 42}));
        assert_eq!(calls[0].queue, "default");
    }
}

#[test]
fn retryable_error_fails_the_attempt_and_schedules_the_policy_delay() {
    for mode in MODES {
        let env = setup();
        let handler = ScriptedHandler::new().then(Step::retry("smtp timeout"));
        let id = enqueue(&env, email());
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue)
                .handler("send_email", handler.clone())
                .retry_policy(
                    "send_email",
                    RetryPolicy::exponential(Duration::from_secs(5)).jitter(0.0),
                ),
        );
        let first = run.attempt(id);
        assert_eq!(first.status, JobStatus::Failed, "[{mode:?}]");
        assert_eq!(first.attempt, 1);
        assert_eq!(first.error.as_deref(), Some("smtp timeout"));

        let j = job(&env.queue, id);
        assert_eq!(j.status, JobStatus::Failed, "[{mode:?}]");
        assert_eq!(j.attempts, 1);
        assert_eq!(
            j.run_at,
            START_MS + 5_000,
            "[{mode:?}] now + 5 s, no jitter"
        );
        assert_eq!(j.last_error.as_deref(), Some("smtp timeout"));
        assert_eq!((j.locked_by, j.locked_until), (None, None));
        assert_eq!(j.finished_at, None, "a failed job is not finished");

        let rows = history(&env.queue, id);
        assert_eq!(rows.len(), 1, "[{mode:?}] {rows:?}");
        assert_eq!(rows[0].attempt, 1);
        assert_eq!(rows[0].outcome.as_str(), "failed");
        assert_eq!(rows[0].error.as_deref(), Some("smtp timeout"));
        assert_eq!(rows[0].started_at, Some(START_MS));
        assert_eq!(rows[0].finished_at, START_MS);
        run.assert_worker(rows[0].worker.as_deref());

        run.assert_nothing_due();
        run.advance(Duration::from_secs(5));
        let second = run.attempt(id);
        run.finish();
        assert_eq!(
            (second.status, second.attempt),
            (JobStatus::Succeeded, 2),
            "[{mode:?}]"
        );
        assert_eq!(handler.call_count(), 2);
    }
}

/// Errors of any text are written, however long and however random: an error the database
/// cannot store (on PostgreSQL, an index entry over its size limit) would leave the outcome
/// unwritten and the batch it rides in stuck.
#[test]
fn a_long_error_of_random_text_is_kept_cut_to_the_limit() {
    // Hex of pseudo-random bytes: nothing for a compressor to find.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let random: String = (0..40_000)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            char::from_digit((seed % 16) as u32, 16).unwrap_or('0')
        })
        .collect();
    for mode in MODES {
        let env = setup();
        let handler = ScriptedHandler::new()
            .then(Step::retry(&random))
            .then(Step::permanent(&random));
        let id = enqueue(&env, email().max_attempts(2));
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue).handler("send_email", handler.clone()),
        );
        let first = run.attempt(id);
        assert_eq!(first.status, JobStatus::Failed, "[{mode:?}]");
        run.advance(Duration::from_secs(3600));
        let second = run.attempt(id);
        run.finish();
        assert_eq!(second.status, JobStatus::Dead, "[{mode:?}]");
        let j = job(&env.queue, id);
        let kept = j.last_error.unwrap_or_default();
        assert!(
            kept.len() <= litejobs::defaults::MAX_ERROR_BYTES && random.starts_with(&kept[..1000]),
            "[{mode:?}] the head of the error, within the limit: {} bytes",
            kept.len()
        );
        let attempts = env.queue.attempts(id).expect("attempts");
        assert_eq!(attempts.len(), 2, "[{mode:?}] both failures in the history");
        assert!(attempts.iter().all(|a| a
            .error
            .as_deref()
            .is_some_and(|e| e.len() <= litejobs::defaults::MAX_ERROR_BYTES)));
    }
}

#[test]
fn permanent_error_is_dead_after_one_attempt() {
    for mode in MODES {
        let env = setup();
        let handler = ScriptedHandler::always(Step::permanent("no such address"));
        let id = enqueue(&env, email().max_attempts(8));
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue).handler("send_email", handler.clone()),
        );
        let done = run.attempt(id);
        run.assert_nothing_due();
        run.finish();

        assert_eq!(
            (done.status, done.attempt),
            (JobStatus::Dead, 1),
            "[{mode:?}]"
        );
        assert_eq!(done.error.as_deref(), Some("no such address"));
        let j = job(&env.queue, id);
        assert_eq!(j.status, JobStatus::Dead, "[{mode:?}]");
        assert_eq!(j.attempts, 1, "attempts left are not spent");
        assert_eq!(j.last_error.as_deref(), Some("no such address"));
        assert_eq!(j.finished_at, Some(START_MS));
        let rows = history(&env.queue, id);
        assert_eq!(rows.len(), 1, "[{mode:?}] {rows:?}");
        assert_eq!(rows[0].error.as_deref(), Some("no such address"));
        assert_eq!(handler.call_count(), 1);
    }
}

#[test]
fn retry_after_sets_the_next_run_exactly_and_ignores_the_policy() {
    for mode in MODES {
        let env = setup();
        let handler = ScriptedHandler::always(Step::fail(|| {
            JobError::retry_after(Duration::from_secs(120), "429 Too Many Requests")
        }));
        let id = enqueue(&env, NewJob::new("deliver_webhook", json!({"event": 7})));
        let last = enqueue(
            &env,
            NewJob::new("deliver_webhook", json!({"event": 8})).max_attempts(1),
        );
        let mut run = Runner::start(
            &env,
            mode,
            // The default policy has jitter: an exact run_at proves it was not used.
            Worker::builder(&env.queue).handler("deliver_webhook", handler),
        );
        // Both jobs are due: one round runs both, in whatever order they finish.
        let done = run.attempt_all(&[id, last]);
        run.finish();
        let (first, on_last) = (&done[0], &done[1]);

        assert_eq!(first.status, JobStatus::Failed, "[{mode:?}]");
        let j = job(&env.queue, id);
        assert_eq!(j.status, JobStatus::Failed);
        assert_eq!(j.attempts, 1);
        assert_eq!(
            j.run_at,
            START_MS + 120_000,
            "[{mode:?}] now + Retry-After exactly"
        );
        assert_eq!(j.last_error.as_deref(), Some("429 Too Many Requests"));
        assert_eq!(outcomes(&env.queue, id), vec![(1, "failed".to_string())]);

        assert_eq!(
            on_last.status,
            JobStatus::Dead,
            "[{mode:?}] retry-after on the last attempt is dead"
        );
        assert_eq!(job(&env.queue, last).status, JobStatus::Dead);
    }
}

#[test]
fn snooze_requeues_without_spending_an_attempt_or_writing_history() {
    for mode in MODES {
        let env = setup();
        let handler =
            ScriptedHandler::new().then(Step::fail(|| JobError::snooze(Duration::from_secs(90))));
        let id = enqueue(&env, email().max_attempts(1));
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue).handler("send_email", handler.clone()),
        );
        let snoozed = run.attempt(id);
        assert_eq!(snoozed.status, JobStatus::Queued, "[{mode:?}]");

        let j = job(&env.queue, id);
        assert_eq!(j.status, JobStatus::Queued, "[{mode:?}]");
        assert_eq!(j.attempts, 0, "[{mode:?}] a snooze gives the attempt back");
        assert_eq!(j.run_at, START_MS + 90_000);
        assert_eq!((j.locked_by, j.locked_until), (None, None));
        assert!(
            history(&env.queue, id).is_empty(),
            "[{mode:?}] no history row"
        );

        run.assert_nothing_due();
        run.advance(Duration::from_secs(90));
        // max_attempts(1): had the snooze spent the attempt, a second run would not happen.
        let done = run.attempt(id);
        run.finish();
        assert_eq!(
            (done.status, done.attempt),
            (JobStatus::Succeeded, 1),
            "[{mode:?}]"
        );
        let attempts: Vec<u32> = handler.calls().iter().map(|c| c.attempt).collect();
        assert_eq!(
            attempts,
            vec![1, 1],
            "[{mode:?}] the snoozed call was attempt 1 too"
        );
        assert_eq!(job(&env.queue, id).attempts, 1);
    }
}

#[test]
fn cancel_makes_the_job_cancelled_with_the_reason() {
    for mode in MODES {
        let env = setup();
        let handler = ScriptedHandler::always(Step::fail(|| {
            JobError::cancel("the user deleted their account")
        }));
        let id = enqueue(&env, email());
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue).handler("send_email", handler.clone()),
        );
        let done = run.attempt(id);
        run.assert_nothing_due();
        run.finish();

        assert_eq!(done.status, JobStatus::Cancelled, "[{mode:?}]");
        assert_eq!(
            done.error.as_deref(),
            Some("the user deleted their account"),
            "[{mode:?}] the Finished event carries the reason"
        );
        let j = job(&env.queue, id);
        assert_eq!(j.status, JobStatus::Cancelled, "[{mode:?}]");
        assert_eq!(
            j.last_error.as_deref(),
            Some("the user deleted their account")
        );
        assert_eq!(j.finished_at, Some(START_MS));
        let rows = history(&env.queue, id);
        assert_eq!(rows.len(), 1, "[{mode:?}] {rows:?}");
        assert_eq!(rows[0].outcome.as_str(), "cancelled");
        assert_eq!(
            rows[0].error.as_deref(),
            Some("the user deleted their account")
        );
        assert_eq!(handler.call_count(), 1);
    }
}

#[test]
fn status_codes_are_kept_on_the_job_and_in_each_attempt_row() {
    for mode in MODES {
        let env = setup();
        let handler = ScriptedHandler::new()
            .then(Step::fail(|| {
                JobError::retry("HTTP 503").with_status_code(503)
            }))
            .then(Step::fail(|| {
                JobError::permanent("HTTP 410 Gone").with_status_code(410)
            }));
        let id = enqueue(&env, NewJob::new("deliver_webhook", json!({"event": 1})));
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue)
                .handler("deliver_webhook", handler)
                .retry_policy(
                    "deliver_webhook",
                    RetryPolicy::schedule(vec![Duration::from_secs(1)]),
                ),
        );
        run.attempt(id);
        let j = job(&env.queue, id);
        assert_eq!(j.last_status_code, Some(503), "[{mode:?}]");
        assert_eq!(history(&env.queue, id)[0].status_code, Some(503));

        run.advance(Duration::from_secs(1));
        let done = run.attempt(id);
        run.finish();
        assert_eq!(done.status, JobStatus::Dead, "[{mode:?}]");
        let j = job(&env.queue, id);
        assert_eq!(j.last_status_code, Some(410), "[{mode:?}]");
        assert_eq!(j.last_error.as_deref(), Some("HTTP 410 Gone"));
        let codes: Vec<Option<i64>> = history(&env.queue, id)
            .iter()
            .map(|a| a.status_code)
            .collect();
        assert_eq!(codes, vec![Some(503), Some(410)], "[{mode:?}]");
    }
}

#[test]
fn exhausted_attempts_make_the_job_dead_with_every_attempt_in_history() {
    for mode in MODES {
        let env = setup();
        let handler = ScriptedHandler::always(Step::run(|ctx| {
            Err(JobError::retry(format!("attempt {} failed", ctx.attempt())))
        }));
        let id = enqueue(&env, email().max_attempts(3));
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue)
                .handler("send_email", handler.clone())
                .retry_policy(
                    "send_email",
                    RetryPolicy::schedule(vec![Duration::from_secs(1)]),
                ),
        );
        let mut statuses = Vec::new();
        for attempt in 1..=3 {
            if attempt > 1 {
                run.advance(Duration::from_secs(1));
            }
            let f = run.attempt(id);
            assert_eq!(f.attempt, attempt, "[{mode:?}]");
            statuses.push(f.status);
        }
        run.assert_nothing_due();
        run.finish();

        assert_eq!(
            statuses,
            vec![JobStatus::Failed, JobStatus::Failed, JobStatus::Dead],
            "[{mode:?}]"
        );
        let j = job(&env.queue, id);
        assert_eq!(j.status, JobStatus::Dead);
        assert_eq!(j.attempts, 3);
        assert_eq!(j.last_error.as_deref(), Some("attempt 3 failed"));
        assert_eq!(j.finished_at, Some(START_MS + 2_000));
        let rows = history(&env.queue, id);
        let summary: Vec<(i64, &str, Option<&str>)> = rows
            .iter()
            .map(|a| (a.attempt, a.outcome.as_str(), a.error.as_deref()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (1, "failed", Some("attempt 1 failed")),
                (2, "failed", Some("attempt 2 failed")),
                (3, "failed", Some("attempt 3 failed")),
            ],
            "[{mode:?}] every attempt of a dead job is kept"
        );
        assert_eq!(handler.call_count(), 3);
    }
}

#[test]
fn a_success_after_failures_is_recorded_in_the_history() {
    for mode in MODES {
        let env = setup();
        let handler = ScriptedHandler::new()
            .then(Step::retry("connection reset"))
            .then(Step::SucceedWith(json!({"ok": true})));
        let id = enqueue(&env, email());
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue)
                .handler("send_email", handler)
                .retry_policy(
                    "send_email",
                    RetryPolicy::schedule(vec![Duration::from_secs(10)]),
                ),
        );
        run.attempt(id);
        run.advance(Duration::from_secs(10));
        let done = run.attempt(id);
        run.finish();

        assert_eq!(
            (done.status, done.attempt),
            (JobStatus::Succeeded, 2),
            "[{mode:?}]"
        );
        let j = job(&env.queue, id);
        assert_eq!(j.status, JobStatus::Succeeded);
        assert_eq!(j.result, Some(json!({"ok": true})));
        let rows = history(&env.queue, id);
        let summary: Vec<(i64, &str, Option<&str>)> = rows
            .iter()
            .map(|a| (a.attempt, a.outcome.as_str(), a.error.as_deref()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (1, "failed", Some("connection reset")),
                (2, "succeeded", None)
            ],
            "[{mode:?}]"
        );
        assert_eq!(rows[1].started_at, Some(START_MS + 10_000));
    }
}

#[test]
fn a_panicking_handler_is_a_failed_attempt_with_the_panic_message() {
    for mode in MODES {
        let env = setup();
        let boom = ScriptedHandler::always(Step::Panic("boom: smtp client exploded".into()));
        let literal = ScriptedHandler::always(Step::run(|_| panic!("a static panic message")));
        let a = enqueue(&env, NewJob::new("boom", json!({})));
        let b = enqueue(&env, NewJob::new("literal", json!({})));
        let events = env.queue.subscribe();
        let builder = Worker::builder(&env.queue)
            .handler("boom", boom)
            .handler("literal", literal);
        let worker = match mode {
            Mode::Worker => Some(builder.start().expect("worker starts")),
            Mode::Drain => {
                let report = testing::drain(&builder).expect("drain survives panics");
                assert_eq!(report.failed, 2, "{report:?}");
                None
            }
        };
        let done = wait_all(&events, &[a, b], JobStatus::Failed);
        if let Some(worker) = worker {
            stop(worker);
        }
        assert_eq!(done.len(), 2);
        for (id, message) in [
            (a, "boom: smtp client exploded"),
            (b, "a static panic message"),
        ] {
            let j = job(&env.queue, id);
            assert_eq!(j.status, JobStatus::Failed, "[{mode:?}] job {id}");
            assert_eq!(j.attempts, 1);
            let error = j.last_error.unwrap_or_default();
            assert!(
                error.contains("handler panicked") && error.contains(message),
                "[{mode:?}] error of job {id}: {error:?}"
            );
            let rows = history(&env.queue, id);
            assert_eq!(rows.len(), 1);
            assert_eq!(rows[0].outcome.as_str(), "failed");
            assert!(rows[0]
                .error
                .as_deref()
                .unwrap_or_default()
                .contains(message));
        }
    }
}

#[test]
fn panics_do_not_shrink_the_worker_a_later_job_still_runs() {
    let env = setup();
    let handler = ScriptedHandler::new()
        .then(Step::Panic("first".into()))
        .then(Step::Panic("second".into()))
        .then(Step::Panic("third".into()))
        .then(Step::SucceedWith(json!("after the panics")));
    let ids = env
        .queue
        .enqueue_batch((0..4).map(|i| NewJob::new("t", json!({"n": i}))).collect())
        .expect("enqueue_batch");
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("t", handler.clone())
        .concurrency(1)
        .start()
        .expect("worker starts");
    let done = wait_each(&events, &ids);
    stop(worker);

    let statuses: Vec<JobStatus> = done.iter().map(|f| f.status).collect();
    assert_eq!(
        statuses,
        vec![
            JobStatus::Failed,
            JobStatus::Failed,
            JobStatus::Failed,
            JobStatus::Succeeded
        ],
        "the one thread still runs jobs after three panics"
    );
    assert_eq!(handler.call_ids(), ids, "run in order on the one thread");
    assert_eq!(
        job(&env.queue, ids[3]).result,
        Some(json!("after the panics"))
    );
}

#[test]
fn a_row_with_invalid_json_from_plain_sql_goes_dead_with_a_clear_error() {
    for mode in MODES {
        let env = setup_wall_clock();
        let conn = crate::support::raw_conn(&env.path());
        conn.execute(
            "INSERT INTO jobs (job_type, payload) VALUES ('t', '{not json')",
            [],
        )
        .expect("raw insert of a broken row");
        let bad = conn.last_insert_rowid();
        conn.execute(
            "INSERT INTO jobs (job_type, payload) VALUES ('t', '{\"ok\": true}')",
            [],
        )
        .expect("raw insert of a good row");
        let good = conn.last_insert_rowid();
        let handler = ScriptedHandler::new();
        let events = env.queue.subscribe();
        let builder = Worker::builder(&env.queue).handler("t", handler.clone());
        let worker = match mode {
            Mode::Worker => Some(builder.start().expect("worker starts")),
            Mode::Drain => {
                let report = testing::drain(&builder).expect("drain");
                assert_eq!((report.dead, report.succeeded), (1, 1), "{report:?}");
                None
            }
        };
        let done = wait_each(&events, &[bad, good]);
        let (dead, ok) = (&done[0], &done[1]);
        if let Some(worker) = worker {
            stop(worker);
        }

        assert_eq!(dead.status, JobStatus::Dead, "[{mode:?}]");
        assert_eq!(
            ok.status,
            JobStatus::Succeeded,
            "[{mode:?}] the good row still runs"
        );
        let j = job(&env.queue, bad);
        assert_eq!(j.status, JobStatus::Dead);
        assert_eq!(j.attempts, 1);
        let error = j.last_error.unwrap_or_default();
        assert!(
            error.starts_with(&format!("job {bad}: column payload is not valid JSON")),
            "[{mode:?}] the error names the job and the column: {error:?}"
        );
        assert_eq!(
            handler.call_ids(),
            vec![good],
            "[{mode:?}] the handler never sees a broken payload"
        );
        assert_eq!(handler.calls()[0].payload, json!({"ok": true}));
    }
}

#[test]
fn a_job_type_without_a_handler_is_left_for_a_worker_that_has_one() {
    let env = setup();
    let mut jobs = vec![NewJob::new("mystery", json!({"n": 0}))];
    jobs.extend((1..=3).map(|n| NewJob::new("known", json!({ "n": n }))));
    let ids = env.queue.enqueue_batch(jobs).expect("enqueue_batch");
    let (mystery, known) = (ids[0], &ids[1..]);
    let events = env.queue.subscribe();

    // Drain without the handler: nothing happens to it.
    let drain_builder = Worker::builder(&env.queue).handler("known", ScriptedHandler::new());
    let report = testing::drain(&drain_builder).expect("drain");
    assert_eq!(report.succeeded, 3, "{report:?}");
    assert_eq!(report.attempts(), 3, "{report:?}");
    let more = env
        .queue
        .enqueue_batch(
            (4..=6)
                .map(|n| NewJob::new("known", json!({ "n": n })))
                .collect(),
        )
        .expect("enqueue_batch");

    let first = Worker::builder(&env.queue)
        .handler("known", ScriptedHandler::new())
        .concurrency(2)
        .start()
        .expect("first worker starts");
    wait_all(&events, &more, JobStatus::Succeeded);

    let j = job(&env.queue, mystery);
    assert_eq!(
        j.status,
        JobStatus::Queued,
        "never claimed by a worker without its handler"
    );
    assert_eq!(j.attempts, 0, "no attempt burned");
    assert_eq!((j.locked_by, j.started_at), (None, None));
    assert!(history(&env.queue, mystery).is_empty());
    for &id in known {
        assert_eq!(job(&env.queue, id).status, JobStatus::Succeeded);
    }

    let handler = ScriptedHandler::new();
    let second = Worker::builder(&env.queue)
        .handler("mystery", handler.clone())
        .start()
        .expect("second worker starts");
    let done = wait_finished(&events, mystery);
    stop(second);
    stop(first);
    assert_eq!((done.status, done.attempt), (JobStatus::Succeeded, 1));
    assert_eq!(handler.call_ids(), vec![mystery]);
}

#[test]
fn a_snooze_after_a_failed_attempt_is_reported_with_the_status_it_left() {
    for mode in MODES {
        let env = setup();
        let handler = ScriptedHandler::new()
            .then(Step::retry("first try failed"))
            .then(Step::fail(|| JobError::snooze(Duration::from_secs(60))));
        let id = enqueue(&env, email());
        let mut run = Runner::start(
            &env,
            mode,
            Worker::builder(&env.queue)
                .handler("send_email", handler)
                .retry_policy(
                    "send_email",
                    RetryPolicy::schedule(vec![Duration::from_secs(1)]),
                ),
        );
        run.attempt(id);
        run.advance(Duration::from_secs(1));
        let snoozed = run.attempt(id);
        run.finish();

        let j = job(&env.queue, id);
        assert_eq!(
            j.attempts, 1,
            "[{mode:?}] the snoozed attempt 2 is given back"
        );
        assert_eq!(j.run_at, START_MS + 1_000 + 60_000, "[{mode:?}]");
        assert_eq!(
            outcomes(&env.queue, id),
            vec![(1, "failed".to_string())],
            "[{mode:?}] the snooze writes no history row"
        );
        assert_eq!(
            snoozed.status, j.status,
            "[{mode:?}] Event::Finished says the job is {} but the row says {}",
            snoozed.status, j.status
        );
    }
}

#[test]
fn worker_builder_refuses_configurations_that_cannot_run() {
    let env = setup();
    let no_handlers = Worker::builder(&env.queue)
        .start()
        .expect_err("a worker without handlers");
    assert_eq!(no_handlers.kind(), litejobs::ErrorKind::InvalidConfig);
    assert!(no_handlers.to_string().contains("handler"), "{no_handlers}");

    let no_threads = Worker::builder(&env.queue)
        .handler("t", ScriptedHandler::new())
        .concurrency(0)
        .start()
        .expect_err("a worker without threads");
    assert_eq!(no_threads.kind(), litejobs::ErrorKind::InvalidConfig);

    let zero_poll = Worker::builder(&env.queue)
        .handler("t", ScriptedHandler::new())
        .poll_interval(Duration::ZERO)
        .start()
        .expect_err("a zero poll interval");
    assert_eq!(zero_poll.kind(), litejobs::ErrorKind::InvalidConfig);
    assert!(
        zero_poll.to_string().contains("poll_interval"),
        "{zero_poll}"
    );
    let zero_check = Worker::builder(&env.queue)
        .handler("t", ScriptedHandler::new())
        .change_check_interval(Duration::ZERO)
        .start()
        .expect_err("a zero change check interval");
    assert_eq!(zero_check.kind(), litejobs::ErrorKind::InvalidConfig);
    assert!(
        zero_check.to_string().contains("change_check_interval"),
        "{zero_check}"
    );

    // Concurrency 0 for the default queue is fine when another queue has threads.
    let handler = ScriptedHandler::new();
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("t", handler.clone())
        .concurrency(0)
        .queue("reports", 1)
        .start()
        .expect("a worker for the reports queue only");
    let id = enqueue(&env, NewJob::new("t", json!({})).queue("reports"));
    assert_eq!(wait_finished(&events, id).status, JobStatus::Succeeded);
    stop(worker);
    assert_eq!(handler.calls()[0].queue, "reports");
}

/// A finished job's outcome is committed at once even while another job keeps running:
/// outcomes are written in batches, but a batch never waits for a neighbour that is still
/// busy (a crash meanwhile would run the finished job again).
#[test]
fn a_finished_job_is_recorded_while_another_job_still_runs() {
    use crate::support::scripted::{self, Latch};
    use litejobs::JobContext;
    let env = setup();
    let gate = Latch::new();
    let (started_tx, started_rx) = crossbeam_channel::unbounded();
    let held = gate.clone();
    let long = enqueue(&env, NewJob::new("long", json!({})));
    let worker = Worker::builder(&env.queue)
        .handler("long", move |_: &JobContext| {
            let _ = started_tx.send(());
            if held.wait(scripted::wait_bound()) {
                Ok(())
            } else {
                Err(JobError::retry("the test never opened the gate"))
            }
        })
        .handler("quick", |_: &JobContext| Ok(()))
        .concurrency(2)
        .start()
        .expect("starting the worker");
    let open_gate = gate.open_on_drop();
    scripted::recv(&started_rx, "the long job to start");
    let events = env.queue.subscribe();
    let quick = enqueue(&env, NewJob::new("quick", json!({})));
    let done = wait_finished(&events, quick);
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(
        job(&env.queue, quick).status,
        JobStatus::Succeeded,
        "the quick job's success is committed"
    );
    assert_eq!(
        job(&env.queue, long).status,
        JobStatus::Running,
        "while the long job still runs"
    );
    drop(open_gate);
    assert_eq!(wait_finished(&events, long).status, JobStatus::Succeeded);
    stop(worker);
}
