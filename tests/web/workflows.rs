//! Workflows and batches on the dashboard: the list with progress, a workflow's page with
//! its graph (inline SVG, each box a link to its job, a line per wait), the cancel cascade
//! shown, hostile names escaped, a job's page naming its workflow and what it waits for,
//! the cancel form (CSRF, read-only), and the JSON under /api/workflows.

use litejobs::{Batch, JobStatus, Step, Workflow, WorkflowIds};

use super::*;

/// A step name and a workflow name made to break out of the page.
const HOSTILE_STEP: &str = "<img src=x onerror=alert(1)>";
const HOSTILE_NAME: &str = "purchase <script>alert('x')</script> & co";

/// charge (fails with a secret in its error) ← ship ← receipt; a clean-up step after charge
/// whatever it did; all run once.
fn failed_purchase(queue: &Queue) -> WorkflowIds {
    let flow = Workflow::new(HOSTILE_NAME)
        .step(Step::new("charge", NewJob::new("charge", json!({}))))
        .step(Step::new("ship", NewJob::new("ship", json!({}))).after("charge"))
        .step(Step::new("receipt", NewJob::new("receipt", json!({}))).after("ship"))
        .step(
            Step::new(HOSTILE_STEP, NewJob::new("cleanup", json!({}))).after_any_outcome("charge"),
        );
    let ids = queue.enqueue_workflow(flow).expect("enqueue the workflow");
    let worker = Worker::builder(queue)
        .handler("charge", |_: &JobContext| -> Result<(), JobError> {
            Err(JobError::permanent(
                "declined: https://shop:hunter2@bank.example/pay",
            ))
        })
        .handler("cleanup", |_: &JobContext| -> Result<(), JobError> {
            Ok(())
        });
    testing::drain(&worker).expect("drain");
    ids
}

/// The `<svg class="flow" ...>...</svg>` of a page.
fn svg_of(body: &str) -> &str {
    let start = body
        .find("<svg class=\"flow\"")
        .unwrap_or_else(|| panic!("no graph on the page: {body}"));
    let end = body[start..].find("</svg>").expect("the graph ends") + start + "</svg>".len();
    &body[start..end]
}

#[test]
fn workflow_pages_show_progress_the_graph_and_the_cascade_with_names_escaped() {
    let web = Web::open();
    let ids = failed_purchase(web.queue());
    let (charge, ship, receipt, cleanup) = (
        ids.step("charge").expect("charge"),
        ids.step("ship").expect("ship"),
        ids.step("receipt").expect("receipt"),
        ids.step(HOSTILE_STEP).expect("cleanup"),
    );
    let mut c = web.client();

    let list = c.get("/workflows").expect(200);
    assert!(list
        .body
        .contains("<a href=\"/workflows\" class=\"active\">Workflows</a>"));
    assert!(
        list.body.contains(&format!(
            "<a href=\"/workflows/{0}\">purchase &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; co</a>",
            ids.workflow_id
        )),
        "{}",
        list.body
    );
    assert!(list
        .body
        .contains("<progress max=\"4\" value=\"4\"></progress>"));
    assert!(list.body.contains("4 of 4 ended"));
    assert!(!list.body.contains("<script>alert"), "{}", list.body);
    // Every page links to the list.
    assert!(c.get("/").expect(200).body.contains("href=\"/workflows\""));

    let page = c
        .get(&format!("/workflows/{}", ids.workflow_id))
        .expect(200);
    let body = &page.body;
    assert!(body.contains(&format!("<h1>Workflow #{} ", ids.workflow_id)));
    assert!(
        !body.contains("<script>alert") && !body.contains("<img src=x"),
        "{body}"
    );
    assert!(
        body.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{body}"
    );
    // The graph: a box per job linking to it, a line per wait, coloured by where it stands.
    let svg = svg_of(body);
    for (id, class) in [
        (charge, "dead"),
        (ship, "cancelled"),
        (receipt, "cancelled"),
        (cleanup, "succeeded"),
    ] {
        assert!(
            svg.contains(&format!(
                "<a href=\"/jobs/{id}\" class=\"node node-{class}\" data-job=\"{id}\">"
            )),
            "job {id} as {class}: {svg}"
        );
    }
    assert_eq!(svg.matches("<path class=\"edge").count(), 3, "{svg}");
    assert_eq!(svg.matches("edge edge-failed\"").count(), 2, "{svg}");
    assert_eq!(svg.matches("edge edge-done edge-any\"").count(), 1, "{svg}");
    // The table: reading order, the cascade's reason, the error masked.
    let at = |needle: &str| {
        body.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} on the page: {body}"))
    };
    assert!(
        at(&format!("<a href=\"/jobs/{charge}\">#{charge}</a>"))
            < at(&format!("<a href=\"/jobs/{ship}\">#{ship}</a>"))
    );
    assert!(
        at(&format!("<a href=\"/jobs/{ship}\">#{ship}</a>"))
            < at(&format!("<a href=\"/jobs/{receipt}\">#{receipt}</a>"))
    );
    assert!(body.contains(&format!(
        "cancelled: dependency job {charge} (step charge) ended dead"
    )));
    assert!(body.contains("https://shop:***@bank.example/pay") && !body.contains("hunter2"));
    assert!(body.contains(&format!(
        "<a href=\"/jobs/{charge}\">charge</a> <span class=\"mark mark-failed\" title=\"failed\">✗</span>"
    )));
    // Every job has ended: nothing to cancel, no form.
    assert!(!body.contains("/cancel\""), "{body}");

    // A job's page names its workflow and what it waits for.
    let job = c.get(&format!("/jobs/{ship}")).expect(200);
    assert!(
        job.body.contains(&format!(
            "<a href=\"/workflows/{0}\" class=\"workflow-link\">#{0} purchase &lt;script&gt;",
            ids.workflow_id
        )),
        "{}",
        job.body
    );
    assert!(job.body.contains("step <code>ship</code>"));
    assert!(job
        .body
        .contains(&format!("<a href=\"/jobs/{charge}\">charge</a>")));

    // The JSON: the listing with its progress, the workflow with its jobs, errors masked.
    let listed = c.get("/api/workflows").expect(200).json();
    let first = &listed["workflows"][0];
    assert_eq!(first["id"], json!(ids.workflow_id));
    assert_eq!((&first["ended"], &first["total"]), (&json!(4), &json!(4)));
    assert_eq!(
        first["counts"],
        json!({"succeeded": 1, "dead": 1, "cancelled": 2})
    );
    let one = c
        .get(&format!("/api/workflows/{}", ids.workflow_id))
        .expect(200)
        .json();
    assert_eq!(one["name"], json!(HOSTILE_NAME));
    assert_eq!(one["steps"].as_array().map(Vec::len), Some(4));
    let text = one.to_string();
    assert!(
        text.contains("shop:***@bank") && !text.contains("hunter2"),
        "{text}"
    );

    c.get("/workflows/999999").expect(404);
    c.get("/api/workflows/999999").expect(404);
    c.get("/workflows/abc").expect(404);
    c.get("/workflows?before=x").expect(400);
    c.post_raw(&format!("/api/workflows/{}", ids.workflow_id), &[])
        .expect(403);
}

#[test]
fn an_open_batch_shows_its_held_callbacks_which_cannot_be_run_now() {
    let web = Web::open();
    let batch = web
        .queue()
        .open_batch(Batch::new("invoices").on_success(NewJob::new("tell", json!({}))))
        .expect("open");
    let members = web
        .queue()
        .add_to_batch(
            batch.batch_id,
            (1..=30)
                .map(|n| NewJob::new("invoice", json!({"n": n})))
                .collect(),
        )
        .expect("add");
    let callback = batch.on_success.expect("asked for");
    let mut c = web.client();
    let page = c.get(&format!("/workflows/{}", batch.batch_id)).expect(200);
    assert!(page
        .body
        .contains(&format!("<h1>Batch #{} ", batch.batch_id)));
    assert!(page.body.contains(">open</span>"));
    assert!(page.body.contains("0 of 31 ended"));
    // Thirty members: the graph draws twenty and counts the rest; the table says how the
    // callback's 30 waits stand.
    let svg = svg_of(&page.body);
    assert!(svg.contains("… and 10 more"), "{svg}");
    assert!(
        svg.contains(&format!("#{callback} · waiting for 31")),
        "{svg}"
    );
    assert!(page.body.contains("30 jobs: 0 "), "{}", page.body);
    assert!(page.body.contains("; the batch to close"));
    assert!(page.body.contains(&format!(
        "<a href=\"/jobs/{}\">#{}</a>",
        members[29], members[29]
    )));

    // The overview counts it apart from the scheduled jobs, live too.
    let overview = c.get("/").expect(200);
    assert!(
        overview
            .body
            .contains("<span data-key=\"scheduled\">0</span>")
            && overview
                .body
                .contains("<span data-key=\"waiting_dependants\">1</span>"),
        "{}",
        overview.body
    );
    let live = c.get("/api/overview").expect(200).json();
    assert_eq!(live["values"]["waiting_dependants"], json!("1"));

    // The callback's page: held, so no "Run now" (the library refuses it: 409).
    let job = c.get(&format!("/jobs/{callback}")).expect(200);
    assert!(
        job.body.contains("waiting for 31 other job(s) to end"),
        "{}",
        job.body
    );
    assert!(job.body.contains(&format!(
        "<a href=\"/workflows/{0}\" class=\"workflow-link\">#{0} invoices</a> (open), step <code>on_success</code>",
        batch.batch_id
    )));
    assert!(!job
        .body
        .contains(&format!("action=\"/jobs/{callback}/retry\"")));
    assert!(job
        .body
        .contains(&format!("action=\"/jobs/{callback}/cancel\"")));
    c.post_from(
        &format!("/jobs/{callback}"),
        &format!("/jobs/{callback}/retry"),
        &[],
    )
    .expect(409);
}

#[test]
fn cancel_workflow_through_the_form_with_csrf_and_the_reason() {
    let web = Web::open();
    let ids = web
        .queue()
        .enqueue_workflow(
            Workflow::new("signup 7")
                .step(Step::new("create", NewJob::new("ship", json!({}))))
                .step(Step::new("welcome", NewJob::new("ship", json!({}))).after("create")),
        )
        .expect("enqueue");
    let from = format!("/workflows/{}", ids.workflow_id);
    let action = format!("/workflows/{}/cancel", ids.workflow_id);
    let mut c = web.client();
    let page = c.get(&from).expect(200);
    assert!(
        page.body.contains(&format!("action=\"{action}\"")),
        "{}",
        page.body
    );
    // The page's CSRF token, kept for the posts once the form is gone.
    let csrf = page.csrf();

    // Without the form's CSRF token: refused, nothing changed.
    c.post_raw(&action, &[("reason", "no csrf")]).expect(403);
    let status = |step: &str| {
        web.queue()
            .job(ids.step(step).expect("step"))
            .expect("read")
            .expect("the job")
    };
    assert_eq!(status("create").status, JobStatus::Queued);

    let done = c.post_from(
        &from,
        &action,
        &[("reason", "user withdrew"), ("by", "ops")],
    );
    let location = done.redirect().to_string();
    assert!(location.starts_with(&from), "{location}");
    let next = c.get(&location).expect(200);
    assert!(
        next.body.contains(&format!(
            "Workflow {}: 2 job(s) cancelled by ops: user withdrew.",
            ids.workflow_id
        )),
        "{}",
        next.body
    );
    for step in ["create", "welcome"] {
        let job = status(step);
        assert_eq!(job.status, JobStatus::Cancelled, "{step}");
        assert_eq!(job.cancelled_by.as_deref(), Some("ops"));
        assert_eq!(job.cancel_reason.as_deref(), Some("user withdrew"));
    }
    // Finished now: no form; posting again cancels nothing and says so.
    assert!(!next.body.contains(&format!("action=\"{action}\"")));
    let again = c.post_raw(&action, &[("csrf", &csrf), ("reason", "again")]);
    let location = again.redirect().to_string();
    let next = c.get(&location).expect(200);
    assert!(next.body.contains("Nothing to cancel"), "{}", next.body);
    c.post_raw(
        "/workflows/999999/cancel",
        &[("csrf", &csrf), ("reason", "x")],
    )
    .expect(404);
    c.get(&action).expect(405);
}

#[test]
fn a_read_only_dashboard_shows_workflows_and_refuses_their_cancel() {
    let web = Web::start(
        setup(),
        DashboardOptions::new()
            .read_only(true)
            .token("read-only-token-123"),
    );
    let ids = web
        .queue()
        .enqueue_workflow(
            Workflow::new("signup 8").step(Step::new("create", NewJob::new("ship", json!({})))),
        )
        .expect("enqueue");
    let mut c = web.client();
    let csrf = c.get("/login").expect(200).csrf();
    c.post_raw(
        "/login",
        &[("csrf", &csrf), ("token", "read-only-token-123")],
    )
    .redirect();
    let from = format!("/workflows/{}", ids.workflow_id);
    let page = c.get(&from).expect(200);
    assert!(!page.body.contains("/cancel\""), "{}", page.body);
    assert!(page.body.contains("<svg class=\"flow\""));
    let csrf = page.csrf();
    let refused = c
        .post_raw(
            &format!("{from}/cancel"),
            &[("csrf", &csrf), ("reason", "x")],
        )
        .expect(403);
    assert!(refused.body.contains("read-only"), "{}", refused.body);
    let job = web
        .queue()
        .job(ids.step("create").expect("create"))
        .expect("read")
        .expect("the job");
    assert_eq!(job.status, JobStatus::Queued, "nothing changed");
}
