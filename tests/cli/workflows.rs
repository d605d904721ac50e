//! `litejobs workflow list | show | cancel`, and what `show`, `list`, `stats`, `check` and
//! `metrics` say of jobs that wait for other jobs: a workflow with a failed step (the cancel
//! cascade shown), a batch open then closed, cancels with the reason and who, refusals,
//! the JSON shapes, masked errors.

use litejobs::{Batch, BatchIds, Step, Workflow, WorkflowIds};

use super::*;

/// Runs every due job once: `fail_*` types fail for good with an error holding a secret,
/// every other type succeeds.
fn drain(fx: &Fx) {
    let mut builder = Worker::builder(&fx.queue);
    for name in [
        "charge",
        "fail_charge",
        "ship",
        "receipt",
        "cleanup",
        "invoice",
        "tell",
    ] {
        builder = builder.handler(name, |ctx: &JobContext| -> Result<(), JobError> {
            if ctx.job_type().starts_with("fail_") {
                return Err(JobError::permanent(
                    "declined by https://shop:hunter2@bank.example/pay?token=tok-999",
                ));
            }
            Ok(())
        });
    }
    testing::drain(&builder).expect("drain");
}

/// charge (fails) ← ship ← receipt, and a clean-up step that runs whatever charge did; the
/// workflow's name and one step's name are markup.
fn failed_purchase(fx: &Fx) -> WorkflowIds {
    let flow = Workflow::new("purchase <b>1042</b>")
        .step(Step::new("charge", NewJob::new("fail_charge", json!({}))))
        .step(Step::new("ship", NewJob::new("ship", json!({}))).after("charge"))
        .step(Step::new("receipt", NewJob::new("receipt", json!({}))).after("ship"))
        .step(
            Step::new("<clean-up>", NewJob::new("cleanup", json!({}))).after_any_outcome("charge"),
        );
    let ids = fx
        .queue
        .enqueue_workflow(flow)
        .expect("enqueue the workflow");
    drain(fx);
    ids
}

/// The line of `text` whose first word (after any indent) is `word`.
fn line_of<'t>(text: &'t str, word: &str) -> &'t str {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(word))
        .unwrap_or_else(|| panic!("no line for {word:?} in:\n{text}"))
}

fn position(text: &str, word: &str) -> usize {
    let line = line_of(text, word);
    text.find(line).expect("the line is in the text")
}

#[test]
fn workflow_show_lists_each_step_after_its_waits_with_the_cascade_and_masked_errors() {
    let fx = Fx::new();
    let ids = failed_purchase(&fx);
    let id = ids.workflow_id.to_string();
    let shown = fx.run(&["workflow", "show", &id]).ok().stdout;
    assert!(
        shown.starts_with(&format!("workflow  {id} purchase <b>1042</b>\n")),
        "{shown}"
    );
    assert!(
        shown.contains("state     finished: 4 of 4 jobs ended (1 succeeded, 1 dead, 2 cancelled)"),
        "{shown}"
    );
    // Reading order: each step after what it waits for, indented by depth.
    assert!(position(&shown, "charge") < position(&shown, "ship"));
    assert!(position(&shown, "ship") < position(&shown, "receipt"));
    let charge = line_of(&shown, "charge");
    assert!(charge.contains("dead"), "{charge}");
    assert!(
        charge.contains("declined by https://shop:***@bank.example/pay?token=[masked]"),
        "{charge}"
    );
    assert!(
        !shown.contains("hunter2") && !shown.contains("tok-999"),
        "{shown}"
    );
    let ship = line_of(&shown, "ship");
    assert!(ship.starts_with("  ship"), "depth 1 is indented: {ship:?}");
    assert!(
        ship.contains("cancelled") && ship.contains("charge ✗"),
        "{ship}"
    );
    let charge_id = ids.step("charge").expect("charge");
    assert!(
        ship.contains(&format!(
            "cancelled: dependency job {charge_id} (step charge) ended dead"
        )),
        "{ship}"
    );
    assert!(line_of(&shown, "receipt").starts_with("    receipt"));
    assert!(line_of(&shown, "receipt").contains("ship ✗"));
    let cleanup = line_of(&shown, "<clean-up>");
    assert!(
        cleanup.contains("succeeded") && cleanup.contains("charge ✓ (any outcome)"),
        "{cleanup}"
    );

    // --json: the workflow as the library reads it, errors masked.
    let json = fx.run(&["workflow", "show", &id, "--json"]).json();
    assert_has_fields(
        &json,
        &[
            "id",
            "kind",
            "name",
            "open",
            "created_at",
            "closed_at",
            "steps",
        ],
    );
    assert_eq!(json["kind"], json!("workflow"));
    assert_eq!(json["name"], json!("purchase <b>1042</b>"));
    let steps = json["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 4);
    for step in steps {
        assert_has_fields(
            step,
            &[
                "id",
                "step",
                "job_type",
                "queue",
                "status",
                "attempts",
                "waiting_for",
                "last_error",
                "cancel_reason",
                "created_at",
                "finished_at",
                "waits_for",
            ],
        );
    }
    let ship_json = steps
        .iter()
        .find(|s| s["step"] == json!("ship"))
        .expect("ship");
    assert_eq!(
        ship_json["waits_for"],
        json!([{"job_id": charge_id, "any_outcome": false, "state": "failed"}])
    );
    assert_eq!(ship_json["status"], json!("cancelled"));
    let text = json.to_string();
    assert!(
        text.contains("[masked]") && !text.contains("hunter2"),
        "{text}"
    );

    // Unknown ids: exit 2, one line.
    fx.run(&["workflow", "show", "9999"])
        .refused("no workflow or batch with id 9999");
    fx.run(&["workflow", "show", "nine"]).refused("nine");
}

#[test]
fn a_batch_open_then_closed_in_list_show_stats_metrics_and_check() {
    let fx = Fx::new();
    // Opened ten minutes ago: held jobs that old must never read as overdue.
    fx.ago(10 * MINUTE);
    let batch: BatchIds = fx
        .queue
        .open_batch(
            Batch::new("invoices 2026-12")
                .on_success(NewJob::new("tell", json!({"what": "all paid"})))
                .on_complete(NewJob::new("tell", json!({"what": "run over"}))),
        )
        .expect("open the batch");
    let members = fx
        .queue
        .add_to_batch(
            batch.batch_id,
            (1..=3)
                .map(|n| NewJob::new("invoice", json!({"n": n})))
                .collect(),
        )
        .expect("add to the batch");
    let on_success = batch.on_success.expect("asked for");
    let id = batch.batch_id.to_string();

    let listed = fx.run(&["workflow", "list"]).ok().stdout;
    let row = line_of(&listed, &id);
    assert!(
        row.contains("batch")
            && row.contains("invoices 2026-12")
            && row.contains("open")
            && row.contains("0 of 5 ended")
            && row.contains("5 queued"),
        "{listed}"
    );
    let json = fx.run(&["workflow", "list", "--json"]).json();
    let listing = &json["workflows"][0];
    assert_has_fields(
        listing,
        &[
            "id",
            "kind",
            "name",
            "open",
            "created_at",
            "counts",
            "ended",
            "total",
        ],
    );
    assert_eq!(
        (
            &listing["kind"],
            &listing["open"],
            &listing["ended"],
            &listing["total"]
        ),
        (&json!("batch"), &json!(true), &json!(0), &json!(5))
    );
    assert_eq!(listing["counts"], json!({"queued": 5}));

    let shown = fx.run(&["workflow", "show", &id]).ok().stdout;
    let callback = line_of(&shown, "on_success");
    assert!(
        callback.contains("waiting for 4") && callback.ends_with("; the batch to close"),
        "{callback}"
    );
    assert!(
        callback.contains(&format!("#{} …", members[0])),
        "{callback}"
    );
    assert!(
        line_of(&shown, "on_complete").contains("(any outcome); the batch to close"),
        "{shown}"
    );
    let job = fx.run(&["show", &on_success.to_string()]).ok().stdout;
    assert!(
        job.contains("status     queued, waiting for 4 other job(s) to end (attempt 0 of"),
        "{job}"
    );
    assert!(
        job.contains(&format!(
            "workflow   batch {id} (invoices 2026-12, open), step on_success"
        )),
        "{job}"
    );
    assert!(
        job.contains("held until the jobs it waits for end"),
        "{job}"
    );
    let list = fx.run(&["list", "--status", "queued"]).ok().stdout;
    let row = line_of(&list, &on_success.to_string());
    assert!(
        row.contains("waiting for 4 job(s)") && row.contains(&format!("{id} on_success")),
        "{list}"
    );
    assert!(line_of(&list, &members[0].to_string()).contains(&format!("{id} member")));

    // Two jobs wait for others: said apart, not scheduled, not due, not overdue.
    let stats = fx.run(&["stats"]).ok().stdout;
    assert!(
        stats.starts_with(
            "waiting   3 due now, 0 scheduled, 2 waiting for other jobs, 0 running; oldest due job waiting"
        ),
        "{stats}"
    );
    let figures = fx.run(&["stats", "--json"]).json();
    assert_eq!(
        (
            &figures["due_now"],
            &figures["scheduled"],
            &figures["waiting_dependants"]
        ),
        (&json!(3), &json!(0), &json!(2))
    );
    let metrics = fx.run(&["metrics"]).ok().stdout;
    assert!(
        metrics.contains("# TYPE litejobs_waiting_dependants gauge\n")
            && metrics.contains("litejobs_waiting_dependants{queue=\"default\"} 2\n"),
        "{metrics}"
    );

    // The members run: the callbacks still wait for the batch to close, and are still not
    // overdue for it.
    drain(&fx);
    fx.run(&["check", "--max-oldest-age", "1m"]).ok();
    let shown = fx.run(&["workflow", "show", &id]).ok().stdout;
    assert!(
        line_of(&shown, "on_success").contains("waiting for 1")
            && shown.contains("state    open: 3 of 5 jobs ended"),
        "{shown}"
    );

    // Closed: the callbacks are due, then run.
    fx.queue.close_batch(batch.batch_id).expect("close");
    let shown = fx.run(&["workflow", "show", &id]).ok().stdout;
    assert!(shown.contains("\nclosed   "), "{shown}");
    assert!(
        !shown.contains("the batch to close") && line_of(&shown, "on_success").contains("queued"),
        "{shown}"
    );
    assert!(fx
        .run(&["stats"])
        .ok()
        .stdout
        .starts_with("waiting   2 due now, 0 scheduled, 0 running"));
    drain(&fx);
    let listed = fx.run(&["workflow", "list"]).ok().stdout;
    let row = line_of(&listed, &id);
    assert!(
        row.contains("finished") && row.contains("5 of 5 ended") && row.contains("5 succeeded"),
        "{listed}"
    );
    let metrics = fx.run(&["metrics"]).ok().stdout;
    assert!(
        metrics.contains("litejobs_waiting_dependants{queue=\"default\"} 0\n"),
        "{metrics}"
    );
}

#[test]
fn workflow_cancel_cancels_what_has_not_ended_with_the_reason_and_who() {
    let fx = Fx::new();
    let flow = Workflow::new("signup 7")
        .step(Step::new("create", NewJob::new("ship", json!({}))))
        .step(Step::new("welcome", NewJob::new("ship", json!({}))).after("create"))
        .step(Step::new("crm", NewJob::new("ship", json!({}))).after("create"));
    let ids = fx.queue.enqueue_workflow(flow).expect("enqueue");
    let id = ids.workflow_id.to_string();
    let out = litejobs(&fx.path)
        .args(["workflow", "cancel", &id, "--reason", "user withdrew"])
        .env("USER", "alice")
        .output()
        .expect("running the binary");
    let run = Run::from(out).ok();
    assert!(
        run.stdout.ends_with(&format!(
            "workflow {id}: cancelled 3 job(s) by alice: user withdrew\n"
        )),
        "{run:#?}"
    );
    for step in ["create", "welcome", "crm"] {
        let job = fx.job(ids.step(step).expect("step"));
        assert_eq!(job.status, JobStatus::Cancelled, "{step}");
        assert_eq!(job.cancelled_by.as_deref(), Some("alice"), "{step}");
        assert_eq!(
            job.cancel_reason.as_deref(),
            Some("user withdrew"),
            "{step}"
        );
        assert!(
            run.stdout.contains(&format!("job {} cancelled\n", job.id)),
            "{run:#?}"
        );
    }
    // Again: nothing left to cancel; --json says which (none) with --by.
    let again = fx
        .run(&["workflow", "cancel", &id, "--by", "ops", "--json"])
        .json();
    assert_eq!(
        again,
        json!({"workflow_id": ids.workflow_id, "cancelled": []})
    );
    assert_eq!(
        fx.run(&["workflow", "cancel", &id]).ok().stdout,
        format!("nothing to cancel: every job of workflow {id} had ended\n")
    );
    let shown = fx.run(&["workflow", "show", &id]).ok().stdout;
    assert!(
        line_of(&shown, "welcome").contains("cancelled: user withdrew"),
        "{shown}"
    );
    fx.run(&["workflow", "cancel", "9999"])
        .refused("there is no workflow or batch 9999");
}

#[test]
fn an_empty_database_has_no_workflows_and_a_page_ends_with_the_next_one() {
    let fx = Fx::new();
    assert_eq!(
        fx.run(&["workflow", "list"]).ok().stdout,
        "no workflows or batches\n"
    );
    assert_eq!(
        fx.run(&["workflow", "list", "--json"]).json(),
        json!({"workflows": []})
    );
    let ids: Vec<i64> = (1..=3)
        .map(|n| {
            fx.queue
                .enqueue_workflow(
                    Workflow::new(format!("flow {n}"))
                        .step(Step::new("only", NewJob::new("ship", json!({})))),
                )
                .expect("enqueue")
                .workflow_id
        })
        .collect();
    let page = fx.run(&["workflow", "list", "--limit", "2"]).ok().stdout;
    assert!(
        page.ends_with(&format!(
            "(first 2 shown; next page: --before {})\n",
            ids[1]
        )),
        "{page}"
    );
    let next = fx
        .run(&[
            "workflow",
            "list",
            "--before",
            &ids[1].to_string(),
            "--json",
        ])
        .json();
    assert_eq!(next["workflows"][0]["id"], json!(ids[0]));
    assert_eq!(next["workflows"].as_array().map(Vec::len), Some(1));

    // Names another program wrote cannot drive the terminal: control characters escaped.
    let hostile = fx
        .queue
        .enqueue_workflow(
            Workflow::new("clear \u{1b}[2J")
                .step(Step::new("red \u{1b}[31m", NewJob::new("ship", json!({})))),
        )
        .expect("enqueue")
        .workflow_id
        .to_string();
    for args in [vec!["workflow", "show", &hostile], vec!["workflow", "list"]] {
        let out = fx.run(&args).ok().stdout;
        assert!(!out.contains('\u{1b}'), "{args:?}: {out:?}");
        assert!(out.contains("clear \\u{1b}[2J"), "{args:?}: {out}");
    }
}
