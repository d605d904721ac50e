//! Jobs that wait for other jobs: workflows (steps that wait for each other), batches
//! (callbacks once every member ended), a dependency that ends dead or cancelled, a requeue
//! that brings the cancelled back, steps added at run time. Run with `testing::drain`, so
//! every round is deterministic. On both backends (`LITEJOBS_TEST_BACKEND=postgres`).

use std::sync::{Arc, Mutex};

use litejobs::workflow::{WaitState, WorkflowKind};
use litejobs::{
    testing, Batch, ErrorKind, JobContext, JobError, JobStatus, NewJob, Step, Worker, Workflow,
};
use serde_json::{json, Value};

use crate::support::scripted::job;
use crate::support::{setup, TestEnv};

/// Handlers for the types the tests use: each records its job's type in `ran`; `fail_*`
/// types fail permanently; `echo` stores its payload as its result.
fn worker(env: &TestEnv, ran: &Arc<Mutex<Vec<String>>>) -> litejobs::WorkerBuilder {
    let mut builder = Worker::builder(&env.queue);
    for name in [
        "charge",
        "ship",
        "receipt",
        "cleanup",
        "echo",
        "fail_charge",
        "chunk",
        "finish",
        "mail",
        "plan",
        "member",
        "fail_member",
        "on_success",
        "on_complete",
    ] {
        let ran = Arc::clone(ran);
        builder = builder.handler(name, move |ctx: &JobContext| -> Result<(), JobError> {
            ran.lock().expect("lock").push(ctx.job_type().to_string());
            if ctx.job_type().starts_with("fail_") {
                return Err(JobError::permanent("declined"));
            }
            if ctx.job_type() == "echo" {
                ctx.set_result(ctx.payload().clone());
            }
            Ok(())
        });
    }
    builder
}

fn status(env: &TestEnv, id: i64) -> JobStatus {
    job(&env.queue, id).status
}

#[test]
fn steps_run_in_the_order_their_waits_say_and_only_then() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let flow = Workflow::new("purchase 1042")
        .step(Step::new("receipt", NewJob::new("receipt", json!({}))).after("ship"))
        .step(Step::new("ship", NewJob::new("ship", json!({}))).after("charge"))
        .step(Step::new("charge", NewJob::new("charge", json!({}))));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    let ship = job(&env.queue, ids.step("ship").expect("ship"));
    assert_eq!((ship.status, ship.waiting_for), (JobStatus::Queued, 1));
    // A held job never reads as due: its run time is the one it asked for.
    assert!(ship.run_at <= env.queue.now_ms());
    assert_eq!(ship.status_time().0, "waiting");
    let report = testing::drain(&worker(&env, &ran)).expect("drain");
    assert_eq!(report.succeeded, 3);
    assert_eq!(*ran.lock().expect("lock"), ["charge", "ship", "receipt"]);
    let info = env
        .queue
        .workflow(ids.workflow_id)
        .expect("read")
        .expect("the workflow");
    assert_eq!(info.kind, WorkflowKind::Workflow);
    assert!(info.is_finished());
    let receipt = info
        .steps
        .iter()
        .find(|s| s.step.as_deref() == Some("receipt"))
        .expect("receipt");
    assert_eq!(receipt.waits_for.len(), 1);
    assert_eq!(receipt.waits_for[0].state, WaitState::Done);
}

#[test]
fn a_dead_dependency_cancels_its_dependants_transitively_but_not_a_cleanup_step() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let flow = Workflow::new("purchase")
        .step(Step::new("charge", NewJob::new("fail_charge", json!({}))))
        .step(Step::new("ship", NewJob::new("ship", json!({}))).after("charge"))
        .step(Step::new("receipt", NewJob::new("receipt", json!({}))).after("ship"))
        .step(Step::new("cleanup", NewJob::new("cleanup", json!({}))).after_any_outcome("charge"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    testing::drain(&worker(&env, &ran)).expect("drain");
    assert_eq!(*ran.lock().expect("lock"), ["fail_charge", "cleanup"]);
    let charge = ids.step("charge").expect("charge");
    assert_eq!(status(&env, charge), JobStatus::Dead);
    for step in ["ship", "receipt"] {
        let j = job(&env.queue, ids.step(step).expect("step"));
        assert_eq!(j.status, JobStatus::Cancelled, "{step}");
        assert_eq!(j.cancelled_by.as_deref(), Some("dependency"), "{step}");
    }
    let ship = job(&env.queue, ids.step("ship").expect("ship"));
    assert_eq!(
        ship.cancel_reason.as_deref(),
        Some(format!("dependency job {charge} (step charge) ended dead").as_str())
    );
    assert_eq!(
        status(&env, ids.step("cleanup").expect("cleanup")),
        JobStatus::Succeeded
    );
}

#[test]
fn a_requeued_dependency_that_succeeds_lets_its_cancelled_dependants_run() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let flow = Workflow::new("purchase")
        .step(Step::new("charge", NewJob::new("fail_charge", json!({}))))
        .step(Step::new("ship", NewJob::new("ship", json!({}))).after("charge"))
        .step(Step::new("receipt", NewJob::new("receipt", json!({}))).after("ship"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    let builder = worker(&env, &ran);
    testing::drain(&builder).expect("drain");
    let charge = ids.step("charge").expect("charge");
    // The card is fixed; the requeued job is of a type that succeeds.
    env.sql_exec(&format!(
        "UPDATE jobs SET job_type = 'charge' WHERE id = {charge}"
    ));
    let new_id = env
        .queue
        .requeue_dead(charge, "ops", "card fixed")
        .expect("requeue");
    for step in ["ship", "receipt"] {
        let j = job(&env.queue, ids.step(step).expect("step"));
        assert_eq!((j.status, j.waiting_for), (JobStatus::Queued, 1), "{step}");
    }
    assert_eq!(job(&env.queue, new_id).step.as_deref(), Some("charge"));
    testing::drain(&builder).expect("drain");
    assert_eq!(
        *ran.lock().expect("lock"),
        ["fail_charge", "charge", "ship", "receipt"]
    );
    // Done as if nothing had happened: the requeued job stands for the dead one.
    let all_succeeded = std::collections::BTreeMap::from([(JobStatus::Succeeded, 3)]);
    let info = env
        .queue
        .workflow(ids.workflow_id)
        .expect("read")
        .expect("the workflow");
    assert!(info.is_finished());
    assert_eq!((info.ended(), info.total()), (3, 3));
    assert_eq!(info.counts(), all_succeeded);
    let dead = info
        .steps
        .iter()
        .find(|s| s.id == charge)
        .expect("the dead job is still shown");
    assert_eq!(dead.requeued_as, Some(new_id));
    assert!(
        dead.problem()
            .starts_with(&format!("requeued as job {new_id}; ")),
        "{}",
        dead.problem()
    );
    let listed = env.queue.workflows(10, None).expect("list");
    assert_eq!(listed[0].counts, all_succeeded);
}

#[test]
fn a_step_reads_the_results_of_the_steps_it_waited_for() {
    let env = setup();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_in = Arc::clone(&seen);
    let builder = Worker::builder(&env.queue)
        .handler("echo", |ctx: &JobContext| -> Result<(), JobError> {
            ctx.set_result(ctx.payload().clone());
            Ok(())
        })
        .handler("mail", move |ctx: &JobContext| -> Result<(), JobError> {
            let file = ctx
                .dependency_result("report")
                .map_err(|e| JobError::permanent(e.to_string()))?;
            seen_in.lock().expect("lock").push(file);
            Ok(())
        });
    let flow = Workflow::new("report")
        .step(Step::new(
            "report",
            NewJob::new("echo", json!({"file": "r.csv"})),
        ))
        .step(Step::new("mail", NewJob::new("mail", json!({}))).after("report"));
    env.queue.enqueue_workflow(flow).expect("enqueue");
    testing::drain(&builder).expect("drain");
    assert_eq!(
        *seen.lock().expect("lock"),
        [Some(json!({"file": "r.csv"}))]
    );
}

#[test]
fn a_running_step_adds_a_fan_out_and_its_dependants_wait_for_it() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let ran_plan = Arc::clone(&ran);
    let builder = worker(&env, &ran).handler("plan", move |ctx: &JobContext| {
        ran_plan.lock().expect("lock").push("plan".into());
        let mut steps: Vec<Step> = (0..3)
            .map(|i| Step::new(format!("chunk {i}"), NewJob::new("chunk", json!({"i": i}))))
            .collect();
        let finish = (0..3).fold(
            Step::new("finish", NewJob::new("finish", json!({}))),
            |s, i| s.after(format!("chunk {i}")),
        );
        steps.push(finish);
        ctx.add_steps_before_dependants(steps)
            .map_err(|e| JobError::permanent(e.to_string()))?;
        Ok(())
    });
    let flow = Workflow::new("report")
        .step(Step::new("plan", NewJob::new("plan", json!({}))))
        .step(Step::new("mail", NewJob::new("mail", json!({}))).after("plan"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    testing::drain(&builder).expect("drain");
    let ran = ran.lock().expect("lock").clone();
    assert_eq!(ran.first().map(String::as_str), Some("plan"));
    assert_eq!(ran.iter().filter(|t| *t == "chunk").count(), 3);
    let pos = |t: &str| ran.iter().position(|r| r == t).expect("ran");
    assert!(pos("finish") > ran.iter().rposition(|r| r == "chunk").expect("chunks"));
    assert_eq!(ran.last().map(String::as_str), Some("mail"));
    let info = env
        .queue
        .workflow(ids.workflow_id)
        .expect("read")
        .expect("workflow");
    assert_eq!(info.steps.len(), 6);
    assert!(info.is_finished());
}

#[test]
fn a_batch_callback_is_released_once_with_the_counts_after_it_is_closed() {
    let env = setup();
    let summaries = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&summaries);
    let ran = Arc::new(Mutex::new(Vec::new()));
    let builder = worker(&env, &ran).handler("report_run", move |ctx: &JobContext| {
        let summary = ctx
            .batch()
            .map_err(|e| JobError::permanent(e.to_string()))?
            .expect("a batch callback");
        seen.lock().expect("lock").push((
            summary.succeeded,
            summary.dead,
            summary.cancelled,
            summary.members.len(),
        ));
        Ok(())
    });
    let batch = env
        .queue
        .open_batch(
            Batch::new("invoices")
                .on_complete(NewJob::new("report_run", json!({})))
                .on_success(NewJob::new("on_success", json!({}))),
        )
        .expect("open");
    env.queue
        .add_to_batch(
            batch.batch_id,
            vec![
                NewJob::new("member", json!({"n": 1})),
                NewJob::new("fail_member", json!({"n": 2})),
            ],
        )
        .expect("add");
    testing::drain(&builder).expect("drain");
    // Open: the members ran, the callback waits for the closing.
    assert!(summaries.lock().expect("lock").is_empty());
    env.queue
        .add_to_batch(batch.batch_id, vec![NewJob::new("member", json!({"n": 3}))])
        .expect("add");
    env.queue.close_batch(batch.batch_id).expect("close");
    let e = env
        .queue
        .add_to_batch(batch.batch_id, vec![NewJob::new("member", json!({}))])
        .expect_err("closed");
    assert_eq!(e.kind(), ErrorKind::InvalidState);
    testing::drain(&builder).expect("drain");
    testing::drain(&builder).expect("drain again");
    assert_eq!(*summaries.lock().expect("lock"), [(2, 1, 0, 3)]);
    // A member ended dead: the success callback is cancelled.
    let on_success = job(&env.queue, batch.on_success.expect("asked for"));
    assert_eq!(on_success.status, JobStatus::Cancelled);
}

#[test]
fn an_empty_batch_closed_runs_its_callback_at_once() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let ids = env
        .queue
        .submit_batch(
            Batch::new("nothing").on_complete(NewJob::new("on_complete", json!({}))),
            vec![],
        )
        .expect("submit");
    testing::drain(&worker(&env, &ran)).expect("drain");
    assert_eq!(*ran.lock().expect("lock"), ["on_complete"]);
    assert_eq!(
        status(&env, ids.on_complete.expect("asked")),
        JobStatus::Succeeded
    );
}

#[test]
fn a_cycle_or_an_unknown_step_is_refused_before_anything_is_written() {
    let env = setup();
    let cycle = Workflow::new("w")
        .step(Step::new("a", NewJob::new("echo", json!({}))).after("b"))
        .step(Step::new("b", NewJob::new("echo", json!({}))).after("a"));
    let e = env.queue.enqueue_workflow(cycle).expect_err("a cycle");
    assert_eq!(e.kind(), ErrorKind::InvalidJob);
    let unknown =
        Workflow::new("w").step(Step::new("a", NewJob::new("echo", json!({}))).after_job(999_999));
    let e = env
        .queue
        .enqueue_workflow(unknown)
        .expect_err("no such job");
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert_eq!(env.count_jobs(), 0);
    assert!(env.queue.workflows(10, None).expect("list").is_empty());
}

#[test]
fn cancelling_a_workflow_cancels_every_step_not_ended() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let flow = Workflow::new("purchase")
        .step(Step::new("charge", NewJob::new("charge", json!({}))))
        .step(Step::new("ship", NewJob::new("ship", json!({}))).after("charge"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    let cancelled = env
        .queue
        .cancel_workflow(ids.workflow_id, "ops", "order withdrawn")
        .expect("cancel");
    assert_eq!(cancelled.len(), 2);
    assert_eq!(
        testing::drain(&worker(&env, &ran))
            .expect("drain")
            .succeeded,
        0
    );
    let listing = env.queue.workflows(10, None).expect("list");
    assert_eq!(listing[0].ended(), 2);
    let _: Value = json!(listing[0].counts.len());
}

#[test]
fn a_retry_now_of_a_held_job_is_refused() {
    let env = setup();
    let flow = Workflow::new("w")
        .step(Step::new("a", NewJob::new("charge", json!({}))))
        .step(Step::new("b", NewJob::new("ship", json!({}))).after("a"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    let e = env
        .queue
        .retry_now(ids.step("b").expect("b"))
        .expect_err("held");
    assert_eq!(e.kind(), ErrorKind::InvalidState);
}

#[test]
fn a_workflow_enqueued_in_the_callers_transaction_commits_with_it_and_runs_in_order() {
    if crate::support::sqlite_only() {
        return;
    }
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let dead = env
        .queue
        .enqueue(NewJob::new("fail_charge", json!({})))
        .expect("enqueue");
    testing::drain(&worker(&env, &ran)).expect("drain");
    // The caller's own connection, with the schema's triggers on as any program's are.
    let mut conn = env.raw();
    let tx = conn.transaction().expect("begin");
    tx.execute_batch(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY); INSERT INTO orders DEFAULT VALUES",
    )
    .expect("the caller's own write");
    let flow = Workflow::new("purchase")
        .step(Step::new("charge", NewJob::new("charge", json!({}))))
        .step(Step::new("ship", NewJob::new("ship", json!({}))).after("charge"))
        .step(Step::new("late", NewJob::new("ship", json!({}))).after_job(dead));
    let ids = env.queue.enqueue_workflow_in(&tx, flow).expect("enqueue");
    tx.commit().expect("commit");
    let ship = job(&env.queue, ids.step("ship").expect("ship"));
    assert_eq!((ship.status, ship.waiting_for), (JobStatus::Queued, 1));
    // A wait for a job already dead cancels at once, counted once.
    assert_eq!(
        status(&env, ids.step("late").expect("late")),
        JobStatus::Cancelled
    );
    assert_eq!(
        env.queue
            .stats()
            .expect("stats")
            .count(JobStatus::Cancelled),
        1
    );

    testing::drain(&worker(&env, &ran)).expect("drain");
    assert_eq!(
        *ran.lock().expect("lock"),
        ["fail_charge", "charge", "ship"]
    );
    assert_eq!(
        status(&env, ids.step("ship").expect("ship")),
        JobStatus::Succeeded
    );
}

#[test]
fn a_requeued_step_reads_the_results_of_the_steps_it_waited_for() {
    let env = setup();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_in = Arc::clone(&seen);
    let crm_up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let up = Arc::clone(&crm_up);
    let builder = Worker::builder(&env.queue)
        .handler("echo", |ctx: &JobContext| -> Result<(), JobError> {
            ctx.set_result(ctx.payload().clone());
            Ok(())
        })
        .handler("crm", move |ctx: &JobContext| -> Result<(), JobError> {
            let account = ctx
                .dependency_result("account")
                .map_err(|e| JobError::permanent(e.to_string()))?;
            if !up.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(JobError::permanent("CRM is down"));
            }
            seen_in.lock().expect("lock").push(account);
            Ok(())
        });
    let flow = Workflow::new("signup")
        .step(Step::new(
            "account",
            NewJob::new("echo", json!({"account_id": 1001})),
        ))
        .step(Step::new("crm", NewJob::new("crm", json!({}))).after("account"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    testing::drain(&builder).expect("drain");
    let crm = ids.step("crm").expect("crm");
    assert_eq!(status(&env, crm), JobStatus::Dead);
    crm_up.store(true, std::sync::atomic::Ordering::SeqCst);
    let new_id = env
        .queue
        .requeue_dead(crm, "ops", "CRM is back")
        .expect("requeue");
    let requeued = job(&env.queue, new_id);
    assert_eq!(
        (requeued.step.as_deref(), requeued.waiting_for),
        (Some("crm"), 0)
    );
    testing::drain(&builder).expect("drain");
    assert_eq!(status(&env, new_id), JobStatus::Succeeded);
    assert_eq!(
        *seen.lock().expect("lock"),
        [Some(json!({"account_id": 1001}))]
    );
}

#[test]
fn a_held_job_waits_with_a_run_at_far_away_and_is_never_due() {
    let env = setup();
    let flow = Workflow::new("w")
        .step(Step::new("a", NewJob::new("charge", json!({}))))
        .step(Step::new("b", NewJob::new("ship", json!({}))).after("a"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    let b = ids.step("b").expect("b");
    env.clock.advance(std::time::Duration::from_secs(3600));
    // In the database: queued, run_at far away, the time it asked for kept beside it.
    assert_eq!(
        env.sql_i64(&format!(
            "SELECT COUNT(*) FROM jobs WHERE id = {b} AND status = 'queued' AND waiting_for = 1
               AND run_at = 99999999999999 AND held_run_at = {}",
            crate::support::START_MS
        )),
        1
    );
    // Through the API: the time it asked for.
    assert_eq!(job(&env.queue, b).run_at, crate::support::START_MS);
    // Only "a" is due, an hour late; "b" is not counted as due.
    let health = env
        .queue
        .health(std::time::Duration::from_secs(3600))
        .expect("health");
    assert_eq!(health.due_now, 1);
}

#[test]
fn a_dependency_ended_by_plain_sql_releases_its_dependants_at_the_sweep_on_sqlite_at_once_on_postgres(
) {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let flow = Workflow::new("w")
        .step(Step::new("a", NewJob::new("charge", json!({}))))
        .step(Step::new("b", NewJob::new("ship", json!({}))).after("a"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    let (a, b) = (ids.step("a").expect("a"), ids.step("b").expect("b"));
    // Another program ends "a" by hand.
    env.sql_exec(&format!(
        "UPDATE jobs SET status = 'succeeded', attempts = 1, finished_at = {now}, updated_at = {now}
         WHERE id = {a}",
        now = crate::support::START_MS
    ));
    if crate::support::on_postgres() {
        // The schema's triggers settle its waits in that statement.
        assert_eq!(job(&env.queue, b).waiting_for, 0);
        assert_eq!(env.queue.settle_waits().expect("sweep"), 0);
    } else {
        // Nothing settles them in that statement: the sweep does.
        assert_eq!(job(&env.queue, b).waiting_for, 1);
        assert_eq!(env.queue.settle_waits().expect("sweep"), 1);
        assert_eq!(job(&env.queue, b).waiting_for, 0);
    }
    testing::drain(&worker(&env, &ran)).expect("drain");
    assert_eq!(*ran.lock().expect("lock"), ["ship"]);
}

#[test]
fn a_held_step_past_its_deadline_is_cancelled_and_so_are_the_steps_after_it() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let quarter = std::time::Duration::from_secs(15 * 60);
    let flow = Workflow::new("w")
        // No handler for "slow" in this worker: it never runs.
        .step(Step::new("a", NewJob::new("slow", json!({}))))
        .step(Step::new("b", NewJob::new("ship", json!({})).expire_after(quarter)).after("a"))
        .step(Step::new("c", NewJob::new("receipt", json!({}))).after("b"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    env.clock
        .advance(quarter + std::time::Duration::from_secs(60));
    let report = testing::drain(&worker(&env, &ran)).expect("drain");
    assert_eq!(report.expired, 1);
    let b = job(&env.queue, ids.step("b").expect("b"));
    assert_eq!(
        (b.status, b.cancelled_by.as_deref()),
        (JobStatus::Cancelled, Some("deadline"))
    );
    let c = job(&env.queue, ids.step("c").expect("c"));
    assert_eq!(
        (c.status, c.cancelled_by.as_deref()),
        (JobStatus::Cancelled, Some("dependency"))
    );
    assert!(ran.lock().expect("lock").is_empty());
}

#[test]
fn a_fan_out_passes_over_a_dependant_cancelled_meanwhile() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let builder = worker(&env, &ran).handler("plan", |ctx: &JobContext| {
        let steps = vec![
            Step::new("chunk 0", NewJob::new("chunk", json!({}))),
            Step::new("finish", NewJob::new("finish", json!({}))).after("chunk 0"),
        ];
        ctx.add_steps_before_dependants(steps)
            .map_err(|e| JobError::permanent(e.to_string()))?;
        Ok(())
    });
    let flow = Workflow::new("report")
        .step(Step::new("plan", NewJob::new("plan", json!({}))))
        .step(Step::new("mail", NewJob::new("mail", json!({}))).after("plan"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    env.queue
        .cancel_as(ids.step("mail").expect("mail"), "ops", "no mail")
        .expect("cancel");
    let report = testing::drain(&builder).expect("drain");
    assert_eq!((report.succeeded, report.dead), (3, 0), "{report:?}");
    assert_eq!(*ran.lock().expect("lock"), ["chunk", "finish"]);
}

#[test]
fn pruning_a_finished_workflow_takes_its_waits_and_its_row_with_it() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let flow = Workflow::new("old")
        .step(Step::new("a", NewJob::new("charge", json!({}))))
        .step(Step::new("b", NewJob::new("ship", json!({}))).after("a"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    testing::drain(&worker(&env, &ran)).expect("drain");
    // A newer job: the newest row is never pruned (it keeps ids from being reused).
    env.queue
        .enqueue(NewJob::new("charge", json!({})))
        .expect("enqueue");
    env.clock
        .advance(std::time::Duration::from_secs(8 * 24 * 3600));
    env.queue
        .prune(&litejobs::maintenance::PruneOptions::new(
            std::time::Duration::from_secs(7 * 24 * 3600),
        ))
        .expect("prune");
    assert!(env.queue.workflow(ids.workflow_id).expect("read").is_none());
    assert_eq!(env.sql_i64("SELECT COUNT(*) FROM job_deps"), 0);
}

/// A running worker (not a drain): the fan-in runs once, after every chunk, without a poll
/// interval's wait being needed to find it (its release is in the chunk's own write).
#[test]
fn a_running_worker_runs_a_fan_in_once_after_every_chunk() {
    use crate::support::scripted::{stop, wait_finished};
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let events = env.queue.subscribe();
    let chunks: Vec<Step> = (0..50)
        .map(|i| Step::new(format!("c{i}"), NewJob::new("chunk", json!({"i": i}))))
        .collect();
    let finish = (0..50).fold(
        Step::new("finish", NewJob::new("finish", json!({}))),
        |s, i| s.after(format!("c{i}")),
    );
    let flow = chunks
        .into_iter()
        .fold(Workflow::new("fan"), Workflow::step)
        .step(finish);
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    let worker = worker(&env, &ran)
        .concurrency(4)
        // Far longer than the test may take: a release found only by polling would hang.
        .poll_interval(std::time::Duration::from_secs(3600))
        .start()
        .expect("start");
    let finished = wait_finished(&events, ids.step("finish").expect("finish"));
    assert_eq!(finished.status, JobStatus::Succeeded);
    stop(worker);
    let ran = ran.lock().expect("lock").clone();
    assert_eq!(ran.iter().filter(|t| *t == "finish").count(), 1);
    assert_eq!(ran.last().map(String::as_str), Some("finish"));
    assert_eq!(ran.len(), 51);
}

#[test]
fn a_job_enqueued_after_another_by_id_waits_for_it_and_a_missing_one_is_refused() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let charge = env
        .queue
        .enqueue(NewJob::new("charge", json!({})))
        .expect("enqueue");
    let ship = env
        .queue
        .enqueue(NewJob::new("ship", json!({})).after(charge))
        .expect("enqueue");
    let batch = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("receipt", json!({})).after(ship),
            NewJob::new("cleanup", json!({})).after_any_outcome(charge),
        ])
        .expect("batch");
    assert_eq!(job(&env.queue, ship).waiting_for, 1);
    assert_eq!(job(&env.queue, batch[0]).waiting_for, 1);
    let before = env.count_jobs();
    let e = env
        .queue
        .enqueue(NewJob::new("ship", json!({})).after(987_654))
        .expect_err("no such job");
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert_eq!(env.count_jobs(), before, "nothing was written");
    testing::drain(&worker(&env, &ran)).expect("drain");
    let ran = ran.lock().expect("lock").clone();
    assert_eq!(ran[0], "charge");
    let pos = |t: &str| ran.iter().position(|r| r == t).expect("ran");
    assert!(pos("ship") < pos("receipt"));
    assert!(pos("charge") < pos("cleanup"));
}

#[test]
fn a_job_enqueued_after_another_in_the_callers_transaction_runs_after_it() {
    if crate::support::sqlite_only() {
        return;
    }
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let charge = env
        .queue
        .enqueue(NewJob::new("charge", json!({})))
        .expect("enqueue");
    // The caller's own connection, with the schema's triggers on as any program's are.
    let mut conn = env.raw();
    let tx = conn.transaction().expect("begin");
    let ship = env
        .queue
        .enqueue_in(&tx, NewJob::new("ship", json!({})).after(charge))
        .expect("enqueue_in");
    let receipt = litejobs::enqueue_in(&tx, NewJob::new("receipt", json!({})).after(ship))
        .expect("the free enqueue_in");
    tx.commit().expect("commit");
    assert_eq!(job(&env.queue, ship).waiting_for, 1);
    assert_eq!(job(&env.queue, receipt).waiting_for, 1);
    testing::drain(&worker(&env, &ran)).expect("drain");
    assert_eq!(*ran.lock().expect("lock"), ["charge", "ship"]);
    // Released by ship's end, due at its own time (the free function's clock is the
    // system's, later than this test's).
    let receipt = job(&env.queue, receipt);
    assert_eq!(
        (receipt.status, receipt.waiting_for),
        (JobStatus::Queued, 0)
    );
}

#[test]
fn on_success_brought_back_by_a_requeue_still_waits_for_members_added_after_its_cancel() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let builder = worker(&env, &ran);
    let batch = env
        .queue
        .open_batch(Batch::new("invoices").on_success(NewJob::new("on_success", json!({}))))
        .expect("open");
    let first = env
        .queue
        .add_to_batch(batch.batch_id, vec![NewJob::new("fail_member", json!({}))])
        .expect("add")[0];
    testing::drain(&builder).expect("drain");
    let on_success = batch.on_success.expect("asked for");
    assert_eq!(status(&env, on_success), JobStatus::Cancelled);
    // Added while on_success stands cancelled: it must wait for this one too if it comes
    // back.
    let late = env
        .queue
        .add_to_batch(batch.batch_id, vec![NewJob::new("fail_member", json!({}))])
        .expect("add")[0];
    env.sql_exec(&format!(
        "UPDATE jobs SET job_type = 'member' WHERE id = {first}"
    ));
    env.queue
        .requeue_dead(first, "ops", "fixed")
        .expect("requeue");
    env.queue.close_batch(batch.batch_id).expect("close");
    let held = job(&env.queue, on_success);
    assert_eq!((held.status, held.waiting_for), (JobStatus::Queued, 2));
    testing::drain(&builder).expect("drain");
    // The late member ended dead: on_success does not run.
    assert_eq!(status(&env, late), JobStatus::Dead);
    assert!(
        !ran.lock()
            .expect("lock")
            .contains(&"on_success".to_string()),
        "on_success ran though a member ended dead: {:?}",
        ran.lock().expect("lock")
    );
    assert_eq!(status(&env, on_success), JobStatus::Cancelled);
}

/// A worker whose `tidy` handler (a clean-up step) records the status of every job it
/// waited for, as it sees them when it starts.
fn tidy_worker(
    env: &TestEnv,
    ran: &Arc<Mutex<Vec<String>>>,
    seen: &Arc<Mutex<Vec<Vec<JobStatus>>>>,
) -> litejobs::WorkerBuilder {
    let seen = Arc::clone(seen);
    worker(env, ran).handler("tidy", move |ctx: &JobContext| -> Result<(), JobError> {
        let deps = ctx
            .dependencies()
            .map_err(|e| JobError::permanent(e.to_string()))?;
        seen.lock()
            .expect("lock")
            .push(deps.iter().map(|d| d.status).collect());
        Ok(())
    })
}

fn ended(status: JobStatus) -> bool {
    matches!(
        status,
        JobStatus::Succeeded | JobStatus::Dead | JobStatus::Cancelled
    )
}

#[test]
fn a_cleanup_step_not_yet_started_waits_again_for_a_step_a_requeue_brings_back() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let builder = tidy_worker(&env, &ran, &seen);
    // charge fails; ship (after charge) is cancelled, and so is cleanup (after charge), its
    // wait on ship (any outcome) counted as done.
    let flow = Workflow::new("purchase")
        .step(Step::new("charge", NewJob::new("fail_charge", json!({}))))
        .step(Step::new("ship", NewJob::new("ship", json!({}))).after("charge"))
        .step(
            Step::new("cleanup", NewJob::new("tidy", json!({})))
                .after("charge")
                .after_any_outcome("ship"),
        );
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    testing::drain(&builder).expect("drain");
    let charge = ids.step("charge").expect("charge");
    env.sql_exec(&format!(
        "UPDATE jobs SET job_type = 'charge' WHERE id = {charge}"
    ));
    env.queue
        .requeue_dead(charge, "ops", "card fixed")
        .expect("requeue");
    // ship is back, so cleanup waits for it again, not only for the new charge.
    let cleanup = job(&env.queue, ids.step("cleanup").expect("cleanup"));
    assert_eq!(
        (cleanup.status, cleanup.waiting_for),
        (JobStatus::Queued, 2)
    );
    testing::drain(&builder).expect("drain");
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1, "cleanup ran once");
    assert!(
        seen[0].iter().all(|&s| ended(s)),
        "cleanup started while a job it waits for had not ended: {seen:?}"
    );
}

#[test]
fn a_cleanup_step_not_yet_started_waits_again_for_a_dead_step_retried_now() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let builder = tidy_worker(&env, &ran, &seen);
    // cleanup waits for charge on any outcome, and asks to run a minute after it is free.
    let flow = Workflow::new("purchase")
        .step(Step::new("charge", NewJob::new("fail_charge", json!({}))))
        .step(
            Step::new(
                "cleanup",
                NewJob::new("tidy", json!({})).delay(std::time::Duration::from_secs(60)),
            )
            .after_any_outcome("charge"),
        );
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    testing::drain(&builder).expect("drain");
    let charge = ids.step("charge").expect("charge");
    assert_eq!(status(&env, charge), JobStatus::Dead);
    // Released, not yet due; then charge runs again: cleanup waits for that end.
    env.queue.retry_now(charge).expect("retry");
    let cleanup = job(&env.queue, ids.step("cleanup").expect("cleanup"));
    assert_eq!(
        (cleanup.status, cleanup.waiting_for),
        (JobStatus::Queued, 1)
    );
    env.clock.advance(std::time::Duration::from_secs(61));
    testing::drain(&builder).expect("drain");
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1, "cleanup ran once");
    assert!(
        seen[0].iter().all(|&s| ended(s)),
        "cleanup started while a job it waits for had not ended: {seen:?}"
    );
}

#[test]
fn a_job_the_reaper_makes_dead_settles_its_dependants_in_the_same_transaction() {
    let env = setup();
    let flow = Workflow::new("purchase")
        .step(Step::new(
            "charge",
            NewJob::new("charge", json!({})).max_attempts(1),
        ))
        .step(Step::new("ship", NewJob::new("ship", json!({}))).after("charge"))
        .step(Step::new("cleanup", NewJob::new("cleanup", json!({}))).after_any_outcome("charge"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    let charge = ids.step("charge").expect("charge");
    // A worker claimed charge (its only attempt) and died; its lease has run out.
    let now = env.queue.now_ms();
    env.sql_exec(&format!(
        "UPDATE jobs SET status = 'running', attempts = 1, locked_by = 'gone',
                locked_until = {}, started_at = {now} WHERE id = {charge}",
        now - 1
    ));
    assert_eq!(env.queue.reap_expired_leases().expect("reap"), 1);
    assert_eq!(status(&env, charge), JobStatus::Dead);
    let ship = job(&env.queue, ids.step("ship").expect("ship"));
    assert_eq!(
        (ship.status, ship.cancelled_by.as_deref()),
        (JobStatus::Cancelled, Some("dependency"))
    );
    let cleanup = job(&env.queue, ids.step("cleanup").expect("cleanup"));
    assert_eq!(
        (cleanup.status, cleanup.waiting_for),
        (JobStatus::Queued, 0)
    );
    assert!(cleanup.run_at <= env.queue.now_ms(), "due at once");
}

#[test]
fn a_held_job_cancelled_by_a_person_keeps_the_run_time_it_asked_for() {
    let env = setup();
    let flow = Workflow::new("w")
        .step(Step::new("a", NewJob::new("charge", json!({}))))
        .step(Step::new("b", NewJob::new("ship", json!({}))).after("a"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    let b = ids.step("b").expect("b");
    let asked = job(&env.queue, b).run_at;
    env.queue.cancel(b).expect("cancel");
    let cancelled = job(&env.queue, b);
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    assert_eq!(
        cancelled.run_at, asked,
        "not the far-future mark of a held job"
    );
    assert_eq!(
        env.sql_i64(&format!(
            "SELECT count(*) FROM jobs WHERE id = {b} AND held_run_at IS NULL"
        )),
        1
    );
}

#[test]
fn cancelling_an_open_batch_takes_the_batch_hold_off_its_callbacks() {
    let env = setup();
    let batch = env
        .queue
        .open_batch(Batch::new("b").on_complete(NewJob::new("on_complete", json!({}))))
        .expect("open");
    let cancelled = env
        .queue
        .cancel_workflow(batch.batch_id, "ops", "not needed")
        .expect("cancel");
    let callback = batch.on_complete.expect("asked for");
    assert_eq!(cancelled, [callback]);
    let info = env
        .queue
        .workflow(batch.batch_id)
        .expect("read")
        .expect("batch");
    assert!(!info.open);
    let callback = job(&env.queue, callback);
    // waiting_for counts one for an open batch: this one is closed.
    assert_eq!(
        (callback.status, callback.waiting_for),
        (JobStatus::Cancelled, 0)
    );
}

#[test]
fn a_batch_callback_counts_a_requeued_member_once_as_its_new_job() {
    let env = setup();
    let summaries = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&summaries);
    let ran = Arc::new(Mutex::new(Vec::new()));
    let builder = worker(&env, &ran).handler("report_run", move |ctx: &JobContext| {
        let summary = ctx
            .batch()
            .map_err(|e| JobError::permanent(e.to_string()))?
            .expect("a batch callback");
        seen.lock().expect("lock").push(summary);
        Ok(())
    });
    let ids = env
        .queue
        .submit_batch(
            Batch::new("invoices").on_success(NewJob::new("report_run", json!({}))),
            vec![
                NewJob::new("member", json!({"n": 1})),
                NewJob::new("fail_member", json!({"n": 2})),
            ],
        )
        .expect("submit");
    testing::drain(&builder).expect("drain");
    assert!(summaries.lock().expect("lock").is_empty(), "a member died");
    let dead = ids.members[1];
    env.sql_exec(&format!(
        "UPDATE jobs SET job_type = 'member' WHERE id = {dead}"
    ));
    let new = env
        .queue
        .requeue_dead(dead, "ops", "fixed")
        .expect("requeue");
    testing::drain(&builder).expect("drain");
    let summaries = summaries.lock().expect("lock").clone();
    assert_eq!(summaries.len(), 1, "on_success ran once");
    let s = &summaries[0];
    assert_eq!((s.succeeded, s.dead, s.cancelled), (2, 0, 0));
    assert_eq!(s.members, [ids.members[0], new]);
}

#[test]
fn a_dependency_ended_by_an_enqueue_of_its_key_past_its_deadline_settles_its_dependants() {
    let env = setup();
    let flow = Workflow::new("reset")
        .step(Step::new(
            "mail",
            NewJob::new("echo", json!({}))
                .idempotency_key("reset:42")
                .expire_after(std::time::Duration::from_secs(60)),
        ))
        .step(Step::new("log", NewJob::new("ship", json!({}))).after("mail"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    env.clock.advance(std::time::Duration::from_secs(61));
    // The same key again: the old job never ran by its deadline, so it ends and a new one
    // is made.
    let again = env
        .queue
        .enqueue(NewJob::new("echo", json!({})).idempotency_key("reset:42"))
        .expect("enqueue");
    let mail = job(&env.queue, ids.step("mail").expect("mail"));
    assert_ne!(again, mail.id);
    assert_eq!(
        (mail.status, mail.cancelled_by.as_deref()),
        (JobStatus::Cancelled, Some("deadline"))
    );
    let log = job(&env.queue, ids.step("log").expect("log"));
    assert_eq!(
        (log.status, log.cancelled_by.as_deref()),
        (JobStatus::Cancelled, Some("dependency"))
    );
}

#[test]
fn a_workflow_enqueued_in_the_callers_transaction_waits_once_per_wait() {
    if crate::support::sqlite_only() {
        return;
    }
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    // The app's own connection, with the schema's triggers on as for any program.
    let mut conn = env.raw();
    let tx = conn.transaction().expect("begin");
    let flow = Workflow::new("purchase")
        .step(Step::new("charge", NewJob::new("charge", json!({}))))
        .step(Step::new("ship", NewJob::new("ship", json!({}))).after("charge"));
    let ids = env.queue.enqueue_workflow_in(&tx, flow).expect("enqueue");
    tx.commit().expect("commit");
    let ship = job(&env.queue, ids.step("ship").expect("ship"));
    assert_eq!((ship.status, ship.waiting_for), (JobStatus::Queued, 1));
    testing::drain(&worker(&env, &ran)).expect("drain");
    assert_eq!(*ran.lock().expect("lock"), ["charge", "ship"]);
}

#[test]
fn a_step_cancelled_by_its_first_wait_still_counts_the_others_and_a_requeue_brings_it_back_waiting_for_all(
) {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let builder = worker(&env, &ran);
    let dead = env
        .queue
        .enqueue(NewJob::new("fail_charge", json!({})))
        .expect("enqueue");
    testing::drain(&builder).expect("drain");
    assert_eq!(status(&env, dead), JobStatus::Dead);
    // "ship" waits for the dead job (declared first) and for "pack", not yet run.
    let flow = Workflow::new("purchase")
        .step(
            Step::new("ship", NewJob::new("ship", json!({})))
                .after_job(dead)
                .after("pack"),
        )
        .step(Step::new(
            "pack",
            NewJob::new("charge", json!({})).delay(std::time::Duration::from_secs(60)),
        ));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    let ship = job(&env.queue, ids.step("ship").expect("ship"));
    assert_eq!(
        (ship.status, ship.cancelled_by.as_deref(), ship.waiting_for),
        (JobStatus::Cancelled, Some("dependency"), 1),
        "cancelled by the dead job, still counting its wait for pack"
    );
    env.sql_exec(&format!(
        "UPDATE jobs SET job_type = 'charge' WHERE id = {dead}"
    ));
    env.queue
        .requeue_dead(dead, "ops", "fixed")
        .expect("requeue");
    let ship = job(&env.queue, ids.step("ship").expect("ship"));
    assert_eq!((ship.status, ship.waiting_for), (JobStatus::Queued, 2));
    // The requeued job succeeds; ship still waits for pack.
    ran.lock().expect("lock").clear();
    testing::drain(&builder).expect("drain");
    assert_eq!(*ran.lock().expect("lock"), ["charge"]);
    env.clock.advance(std::time::Duration::from_secs(61));
    testing::drain(&builder).expect("drain");
    assert_eq!(*ran.lock().expect("lock"), ["charge", "charge", "ship"]);
}

/// The waits a job asks for as it is enqueued are counted as it goes in: one named twice is
/// one wait, one on a job already succeeded is no wait, one on a job already dead cancels
/// it (naming that job) unless any outcome will do, one on a job that does not exist is
/// refused, and a batch mixing plain and waiting jobs holds only the waiting ones. None is
/// left held for a wait that will never end.
#[test]
fn waits_asked_at_enqueue_that_are_repeated_or_already_ended_hold_nothing() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let charge = env
        .queue
        .enqueue(NewJob::new("charge", json!({})))
        .expect("enqueue");
    let declined = env
        .queue
        .enqueue(NewJob::new("fail_charge", json!({})))
        .expect("enqueue");
    testing::drain(&worker(&env, &ran)).expect("drain");
    let pending = env
        .queue
        .enqueue(NewJob::new("member", json!({})))
        .expect("enqueue");
    let twice = env
        .queue
        .enqueue(NewJob::new("ship", json!({})).after(pending).after(pending))
        .expect("enqueue");
    let on_ended = env
        .queue
        .enqueue(NewJob::new("receipt", json!({})).after(charge))
        .expect("enqueue");
    let batch = env
        .queue
        .enqueue_batch(vec![
            NewJob::new("echo", json!({"plain": 1})),
            NewJob::new("cleanup", json!({}))
                .after(charge)
                .after(pending),
            NewJob::new("echo", json!({"plain": 2})),
            NewJob::new("mail", json!({})).after(declined),
            NewJob::new("ship", json!({})).after(pending).after(pending),
        ])
        .expect("batch");
    assert_eq!(job(&env.queue, twice).waiting_for, 1);
    assert_eq!(
        job(&env.queue, batch[4]).waiting_for,
        1,
        "one wait, named twice"
    );
    assert_eq!(job(&env.queue, on_ended).waiting_for, 0);
    assert_eq!(status(&env, on_ended), JobStatus::Queued);
    assert!(job(&env.queue, on_ended).run_at < 99_999_999_999_999);
    assert_eq!(job(&env.queue, batch[1]).waiting_for, 1);
    assert_eq!(job(&env.queue, batch[0]).waiting_for, 0);
    assert_eq!(status(&env, batch[3]), JobStatus::Cancelled);
    // Alone (on PostgreSQL one statement, which the schema's triggers settle): a job
    // waiting for a dead one is cancelled naming it, unless any outcome will do.
    let on_dead = env
        .queue
        .enqueue(
            NewJob::new("receipt", json!({}))
                .after(charge)
                .after(declined),
        )
        .expect("enqueue");
    let tidy = env
        .queue
        .enqueue(NewJob::new("cleanup", json!({})).after_any_outcome(declined))
        .expect("enqueue");
    let on_dead = job(&env.queue, on_dead);
    assert_eq!(on_dead.status, JobStatus::Cancelled);
    assert_eq!(
        on_dead.cancel_reason.as_deref(),
        Some(format!("dependency job {declined} ended dead").as_str())
    );
    assert_eq!(job(&env.queue, tidy).waiting_for, 0);
    // A wait for a job that does not exist is refused in the same words on both backends.
    let before = env.count_jobs();
    let e = env
        .queue
        .enqueue(NewJob::new("ship", json!({})).after(charge).after(987_654))
        .expect_err("no such job");
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert_eq!(
        e.to_string(),
        "there is no job 987654 to wait for; nothing was written"
    );
    assert_eq!(env.count_jobs(), before, "nothing was written");
    // The held ones keep the time they asked for, and run once `pending` succeeded.
    testing::drain(&worker(&env, &ran)).expect("drain");
    for id in [
        pending, twice, on_ended, batch[0], batch[1], batch[2], batch[4], tidy,
    ] {
        assert_eq!(status(&env, id), JobStatus::Succeeded, "job {id}");
    }
}

/// A step that names the same step twice, and a batch's member and callback that wait for
/// a job by id, wait once for it and run after it.
#[test]
fn a_step_naming_a_step_twice_and_batch_jobs_waiting_by_id_wait_once_and_run_after() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let charge = env
        .queue
        .enqueue(NewJob::new("charge", json!({})))
        .expect("enqueue");
    let flow = Workflow::new("twice")
        .step(Step::new("ship", NewJob::new("ship", json!({}))))
        .step(
            Step::new("receipt", NewJob::new("receipt", json!({})).after(charge))
                .after("ship")
                .after("ship"),
        );
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    assert_eq!(job(&env.queue, ids.steps["receipt"]).waiting_for, 2);
    let batch = env
        .queue
        .open_batch(
            Batch::new("after charge")
                .on_success(NewJob::new("on_success", json!({})).after(charge)),
        )
        .expect("open");
    let members = env
        .queue
        .add_to_batch(
            batch.batch_id,
            vec![NewJob::new("member", json!({})).after(charge)],
        )
        .expect("add");
    assert_eq!(job(&env.queue, members[0]).waiting_for, 1);
    env.queue.close_batch(batch.batch_id).expect("close");
    testing::drain(&worker(&env, &ran)).expect("drain");
    let ran = ran.lock().expect("lock").clone();
    let pos = |t: &str| ran.iter().position(|r| r == t).expect(t);
    assert!(pos("charge") < pos("member"), "{ran:?}");
    assert!(pos("ship") < pos("receipt") && pos("charge") < pos("receipt"));
    assert!(pos("member") < pos("on_success"), "{ran:?}");
    assert_eq!(ran.iter().filter(|t| *t == "receipt").count(), 1);
}

/// A job waited for that another program deletes will never succeed: its dependants are
/// cancelled, naming it, and a clean-up step that runs on any outcome runs (at once on
/// PostgreSQL, whose trigger sees the delete; at the next sweep on SQLite). None waits forever.
#[test]
fn a_dependency_deleted_by_plain_sql_cancels_its_dependants_and_releases_a_cleanup() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let flow = Workflow::new("w")
        .step(Step::new("a", NewJob::new("charge", json!({}))))
        .step(Step::new("b", NewJob::new("ship", json!({}))).after("a"))
        .step(Step::new("c", NewJob::new("receipt", json!({}))).after("b"))
        .step(Step::new("tidy", NewJob::new("cleanup", json!({}))).after_any_outcome("a"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    let step = |name: &str| ids.step(name).expect(name);
    env.sql_exec(&format!("DELETE FROM jobs WHERE id = {}", step("a")));
    if !crate::support::on_postgres() {
        assert_eq!(
            status(&env, step("b")),
            JobStatus::Queued,
            "until the sweep"
        );
        assert_eq!(env.queue.settle_waits().expect("sweep"), 3);
    }
    let b = job(&env.queue, step("b"));
    assert_eq!(b.status, JobStatus::Cancelled);
    assert_eq!(
        b.cancel_reason.as_deref(),
        Some(format!("dependency job {} was deleted", step("a")).as_str())
    );
    assert_eq!(status(&env, step("c")), JobStatus::Cancelled);
    assert_eq!(job(&env.queue, step("tidy")).waiting_for, 0);
    testing::drain(&worker(&env, &ran)).expect("drain");
    assert_eq!(*ran.lock().expect("lock"), ["cleanup"]);
}

/// A job's waits on jobs far apart and on jobs next to each other (read two ways), and a
/// wait asked for twice, which is one wait.
#[test]
fn a_job_waits_once_for_each_job_it_names_near_or_far() {
    let env = setup();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let charge = env
        .queue
        .enqueue(NewJob::new("charge", json!({})))
        .expect("enqueue");
    let others = env
        .queue
        .enqueue_batch(
            (0..20)
                .map(|i| NewJob::new("cleanup", json!({ "i": i })))
                .collect(),
        )
        .expect("batch");
    let far = *others.last().expect("a job");
    let ship = env
        .queue
        .enqueue(
            NewJob::new("ship", json!({}))
                .after(charge)
                .after(far)
                .after(charge),
        )
        .expect("enqueue");
    let receipt = env
        .queue
        .enqueue(NewJob::new("receipt", json!({})).after(ship).after(far))
        .expect("enqueue");
    assert_eq!(job(&env.queue, ship).waiting_for, 2);
    assert_eq!(job(&env.queue, receipt).waiting_for, 2);
    testing::drain(&worker(&env, &ran)).expect("drain");
    let ran = ran.lock().expect("lock").clone();
    assert_eq!(ran.len(), 23, "{ran:?}");
    assert_eq!(ran[21..], ["ship", "receipt"], "{ran:?}");
}

/// A job given its own id to wait for (guessed ahead of time) is refused, in a batch big
/// enough to go in with the schema's rules off too, and nothing of the batch is written.
#[test]
fn a_job_in_a_big_batch_waiting_for_itself_is_refused() {
    let env = setup();
    let first = env
        .queue
        .enqueue(NewJob::new("charge", json!({})))
        .expect("enqueue");
    let before = env.count_jobs();
    // Ids are handed out in order: the job at index 150 gets first + 151.
    let jobs: Vec<NewJob> = (0..200_i64)
        .map(|i| {
            let job = NewJob::new("ship", json!({ "i": i }));
            if i == 150 {
                job.after(first + 1 + i)
            } else {
                job.after(first)
            }
        })
        .collect();
    let e = env.queue.enqueue_batch(jobs).expect_err("waits for itself");
    assert_eq!(e.kind(), ErrorKind::InvalidJob, "{e}");
    assert!(e.to_string().contains("cannot wait for itself"), "{e}");
    assert_eq!(env.count_jobs(), before, "nothing was written");
}
