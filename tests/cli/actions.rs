//! cancel (one job, keeping who and why), retry, and pause/resume honoured by a running
//! worker.

use super::*;

#[test]
fn cancel_takes_waiting_and_running_jobs_keeping_who_and_why_and_refuses_finished_ones() {
    let fx = Fx::new();
    let queued = fx.enqueue(NewJob::new("a", json!({})));
    let retrying = fx.enqueue(NewJob::new("b", json!({})));
    fx.fail_due("b", "default", "flaky", false);
    let done = fx.enqueue(NewJob::new("c", json!({})));
    fx.succeed_due("c", "default");
    let running = fx.enqueue(NewJob::new("d", json!({})));
    let anonymous = fx.enqueue(NewJob::new("e", json!({})));
    fx.sql_exec(&format!(
        "UPDATE jobs SET status = 'running', attempts = 1, locked_by = 'w', locked_until = {}
         WHERE id = {running}",
        SystemClock.now_ms() + DAY
    ));

    let as_user = |user: Option<&str>, args: &[&str]| {
        let mut cmd = litejobs(&fx.path);
        match user {
            Some(user) => cmd.env("USER", user),
            None => cmd.env_remove("USER"),
        };
        Run::from(cmd.args(args).output().expect("running litejobs"))
    };
    assert_eq!(
        as_user(Some("alice"), &["cancel", &queued.to_string()])
            .ok()
            .stdout,
        format!("job {queued} cancelled by alice\n")
    );
    assert_eq!(
        fx.run(&["cancel", &retrying.to_string(), "--json", "--by", "ops"])
            .json(),
        json!({"cancelled": retrying})
    );
    as_user(None, &["cancel", &anonymous.to_string()]).ok();
    let out = fx
        .run(&[
            "cancel",
            &running.to_string(),
            "--by",
            "ops",
            "--reason",
            "runaway report",
        ])
        .ok()
        .stdout;
    assert!(
        out.starts_with(&format!("job {running} cancelled by ops: runaway report\n"))
            && out.contains("it was running"),
        "{out}"
    );
    for (id, by, reason) in [
        (queued, "alice", None),
        (retrying, "ops", None),
        (anonymous, "cli", None),
        (running, "ops", Some("runaway report")),
    ] {
        let job = fx.job(id);
        assert_eq!(job.status, JobStatus::Cancelled);
        assert!(job.finished_at.is_some());
        assert_eq!(
            (job.cancelled_by.as_deref(), job.cancel_reason.as_deref()),
            (Some(by), reason),
            "job {id}"
        );
    }
    assert_eq!(fx.job(running).locked_by, None, "the lease is gone");
    let shown = fx.run(&["show", &running.to_string()]).ok().stdout;
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("cancelled ") && l.ends_with("  by ops: runaway report")),
        "show says who cancelled and why: {shown}"
    );
    assert!(
        shown.contains("cancelled by ops: runaway report"),
        "the attempt's history row says who and why: {shown}"
    );
    fx.run(&["cancel", &done.to_string()])
        .refused("is succeeded");
    fx.run(&["cancel", &running.to_string()])
        .refused("is cancelled");
    assert_eq!(fx.job(done).status, JobStatus::Succeeded);
}

#[test]
fn retry_makes_a_failed_job_due_now_and_gives_a_dead_job_one_more_attempt() {
    let fx = Fx::new();
    fx.ago(0);
    let failed = fx.enqueue(NewJob::new("flaky", json!({})));
    fx.fail_due("flaky", "default", "try later", false);
    let waiting = fx.job(failed);
    assert!(
        waiting.run_at > SystemClock.now_ms(),
        "the retry is in the future"
    );
    let out = fx.run(&["retry", &failed.to_string(), "--json"]).json();
    assert_has_fields(
        &out,
        &["id", "status", "run_at", "attempts", "max_attempts"],
    );
    assert_eq!(out["status"], json!("failed"));
    assert!(fx.job(failed).run_at <= SystemClock.now_ms(), "due now");

    let dead = fx.enqueue(NewJob::new("doomed", json!({})).max_attempts(2));
    fx.fail_due("doomed", "default", "boom", true);
    assert_eq!(fx.job(dead).status, JobStatus::Dead);
    let human = fx.run(&["retry", &dead.to_string()]).ok().stdout;
    assert_eq!(
        human,
        format!("job {dead} is due now (failed, 1 of 2 attempts spent)\n")
    );
    // It gets exactly one more attempt: failing again makes it dead again.
    fx.clock.set(SystemClock.now_ms());
    fx.fail_due("doomed", "default", "boom again", false);
    let job = fx.job(dead);
    assert_eq!(job.status, JobStatus::Dead, "{job:?}");
    assert_eq!(job.attempts, 2);
    assert_eq!(job.last_error.as_deref(), Some("boom again"));
    fx.run(&["retry", &dead.to_string()]).ok();
    fx.clock.set(SystemClock.now_ms());
    fx.succeed_due("doomed", "default");
    assert_eq!(fx.job(dead).status, JobStatus::Succeeded);
    fx.run(&["retry", &dead.to_string()])
        .refused("is succeeded");
}

#[test]
fn a_paused_queue_is_skipped_by_a_running_worker_until_resumed() {
    let dir = temp_dir();
    let (path, _pg) = new_db(dir.path(), "jobs.db");
    run(&path, &["init"]).ok();
    let queue = Queue::open(&path).expect("open");
    let events = queue.subscribe();
    let worker = Worker::builder(&queue)
        .handler("work", |_: &JobContext| -> Result<(), JobError> { Ok(()) })
        .concurrency(1)
        .queue("reports", 1)
        .start()
        .expect("worker");

    // Paused before its first job, so named with --create (a name nobody used is refused).
    let paused = run(&path, &["pause", "--create", "reports"]).ok().stdout;
    assert!(paused.starts_with("queue reports paused"), "{paused}");
    assert_eq!(
        queue.paused_queues().expect("paused"),
        vec!["reports".to_string()]
    );
    let waiting = queue
        .enqueue(NewJob::new("work", json!({})).queue("reports"))
        .expect("enqueue");
    let marker = queue
        .enqueue(NewJob::new("work", json!({})))
        .expect("enqueue");
    // The wake-up of the second enqueue makes the worker claim from every queue in one round;
    // the marker finishing proves that round ran after the paused job was waiting.
    wait_event_within(
        &events,
        Duration::from_secs(10),
        "the marker job to finish",
        |e| match e {
            Event::Finished { id, .. } if *id == waiting => {
                panic!("job {id} of a paused queue ran")
            }
            Event::Finished { id, .. } if *id == marker => Some(()),
            _ => None,
        },
    );
    let job = queue.job(waiting).expect("read").expect("exists");
    assert_eq!(
        (job.status, job.attempts),
        (JobStatus::Queued, 0),
        "waits, nothing spent"
    );
    let stats = run(&path, &["stats"]).ok().stdout;
    assert!(stats.contains("paused    reports"), "{stats}");

    let resumed = run(&path, &["resume", "reports", "--json"]).json();
    assert_eq!(resumed, json!({"queue": "reports", "paused": false}));
    // Another process resumed it: the worker finds the job at its next poll.
    wait_event_within(
        &events,
        Duration::from_secs(10),
        "the resumed job to finish",
        |e| match e {
            Event::Finished { id, status, .. } if *id == waiting => Some(*status),
            _ => None,
        },
    );
    assert_eq!(
        queue.job(waiting).expect("read").map(|j| j.status),
        Some(JobStatus::Succeeded)
    );
    worker.shutdown(Duration::from_secs(10)).expect("shutdown");
}
