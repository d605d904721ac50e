//! `GET /jobs/{id}`: one job, every field, its masked payload, result and progress, its
//! attempt history, and the actions its status allows.

use std::fmt::Write as _;

use crate::job::{JobRecord, JobStatus};
use crate::workflow::{WorkflowInfo, MEMBER_LABEL};

use crate::web::app::{App, Ctx};
use crate::web::format::{
    ago, count, excerpt, human_ms, utc, ATTEMPT_ERROR_BYTES, ERROR_EXCERPT_BYTES,
};
use crate::web::html::{
    action_button, badge, csrf_field, error_page, esc, job_link, json_block, page, Nav,
};
use crate::web::server::http::{query_string, Response};

use super::error_response;
use super::flow_parts::{shown_name, waits_html};

/// The `by` a requeue or a cancel records unless the form says otherwise.
pub(crate) const DEFAULT_REQUEUED_BY: &str = "web dashboard";
/// Attempts in the page's table at most, the newest (`/api/jobs/{id}` has them all).
const ATTEMPTS_SHOWN: usize = 100;

/// `GET /jobs/{id}`.
pub(crate) fn render(app: &App, ctx: &Ctx, id: i64) -> Response {
    let job = match app.queue.job(id) {
        Ok(Some(job)) => app.redactor.mask_job(&job),
        Ok(None) => return error_page(ctx, 404, "Not found", &format!("no job with id {id}")),
        Err(e) => return error_response(ctx, &e),
    };
    let attempts = match app.queue.attempts(id) {
        Ok(a) => app.redactor.mask_attempts(&a),
        Err(e) => return error_response(ctx, &e),
    };
    let now = ctx.now;
    let at = |ms: i64| {
        format!(
            "{} <span class=\"muted\">({})</span>",
            esc(&utc(ms)),
            esc(&ago(ms, now))
        )
    };
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<div class=\"page-head\"><h1>Job #{} {}</h1><span class=\"muted\">{} in queue <a href=\"/jobs{}\">{}</a>{}</span></div>",
        job.id,
        badge(job.status),
        esc(&job.job_type),
        esc(&query_string(&[("queue", &job.queue)])),
        esc(&job.queue),
        if job.status == JobStatus::Queued && job.waiting_for > 0 {
            format!(
                " · <span class=\"held-note\">waiting for {} other job(s) to end</span>",
                job.waiting_for
            )
        } else {
            String::new()
        }
    );
    actions(&mut body, ctx, &job);

    let held = job.status == JobStatus::Queued && job.waiting_for > 0;
    let mut fields: Vec<(&str, String)> = vec![
        (
            "Attempts",
            format!("{} of {}", job.attempts, job.max_attempts),
        ),
        ("Priority", job.priority.to_string()),
        ("Created", at(job.created_at)),
        (
            "Run at",
            if held {
                format!("{}, held until the jobs it waits for end", at(job.run_at))
            } else {
                at(job.run_at)
            },
        ),
    ];
    if let Some(workflow_id) = job.workflow_id {
        match app.queue.workflow(workflow_id) {
            Ok(info) => workflow_fields(&mut fields, &job, workflow_id, info.as_ref()),
            Err(e) => return error_response(ctx, &e),
        }
    }
    if let Some(ms) = job.started_at {
        fields.push(("Started", at(ms)));
    }
    if let Some(ms) = job.finished_at {
        fields.push(("Finished", at(ms)));
    }
    if let (Some(by), Some(until)) = (&job.locked_by, job.locked_until) {
        fields.push(("Lease", format!("held by {} until {}", esc(by), at(until))));
    }
    if let Some(ms) = job.timeout_ms {
        fields.push(("Timeout", esc(&human_ms(ms))));
    }
    if let Some(ms) = job.expires_at {
        fields.push(("Expires", at(ms)));
    }
    if job.cancelled_by.is_some() || job.cancel_reason.is_some() {
        fields.push((
            "Cancelled",
            format!(
                "by {}: {}",
                esc(job.cancelled_by.as_deref().unwrap_or("–")),
                esc(job.cancel_reason.as_deref().unwrap_or("–"))
            ),
        ));
    }
    if let Some(key) = &job.idempotency_key {
        fields.push(("Idempotency key", format!("<code>{}</code>", esc(key))));
    }
    if let Some(key) = &job.group_key {
        fields.push(("Group key", format!("<code>{}</code>", esc(key))));
    }
    if let Some(code) = job.last_status_code {
        fields.push(("Last status code", code.to_string()));
    }
    if let Some(key) = &job.encryption_key {
        let shown = if !app.queue.keyring().contains(key) {
            "not held by this dashboard"
        } else if job.shows_sealed() {
            "a key of that name is held here, but it does not open this job's values"
        } else {
            "shown decrypted"
        };
        fields.push((
            "Encrypted",
            format!("at rest, with key <code>{}</code> ({shown})", esc(key)),
        ));
    }
    if let Some(new_id) = job.requeued_as {
        fields.push((
            "Requeued",
            format!(
                "as {} by {} {}: {}",
                job_link(new_id),
                esc(job.requeued_by.as_deref().unwrap_or("–")),
                job.requeued_at.map_or_else(String::new, at),
                esc(job.requeue_reason.as_deref().unwrap_or("–"))
            ),
        ));
    }
    body.push_str("<dl class=\"fields\">");
    for (name, value) in fields {
        let _ = write!(body, "<dt>{name}</dt><dd>{value}</dd>");
    }
    body.push_str("</dl>\n");

    if let Some(error) = &job.last_error {
        // The line that matters first (a traceback's exception line), then the whole text.
        let headline = crate::human::error_headline(error);
        body.push_str("<h2>Last error</h2>");
        if headline.trim() != error.trim() {
            let _ = write!(
                body,
                "<p class=\"error-text error-headline\"><strong>{}</strong></p>",
                esc(&headline)
            );
        }
        let _ = writeln!(
            body,
            "<pre class=\"code error-text\">{}</pre>",
            esc(&excerpt(error, ERROR_EXCERPT_BYTES))
        );
    }
    // A row another program wrote with values litejobs cannot use says what is wrong.
    if !job.problems.is_empty() {
        body.push_str("<h2>Problems with this row</h2><ul class=\"error-text\">");
        for problem in &job.problems {
            let _ = write!(body, "<li>{}</li>", esc(problem));
        }
        body.push_str("</ul>\n");
    }
    body.push_str("<h2>Payload <span class=\"muted small\">(secret fields masked)</span></h2>");
    body.push_str(&json_block(&job.payload));
    if let Some(result) = &job.result {
        body.push_str("<h2>Result</h2>");
        body.push_str(&json_block(result));
    }
    if let Some(progress) = &job.progress {
        body.push_str("<h2>Progress</h2>");
        body.push_str(&json_block(progress));
    }

    body.push_str("<h2>Attempts</h2>\n");
    if attempts.is_empty() && job.attempts == 0 {
        body.push_str("<p class=\"empty\">No attempts yet.</p>\n");
    } else if attempts.is_empty() {
        body.push_str("<p class=\"empty\">No attempt history (a first-try success is recorded on the job row only).</p>\n");
    } else {
        let earlier = attempts.len().saturating_sub(ATTEMPTS_SHOWN);
        if earlier > 0 {
            let _ = writeln!(
                body,
                "<p class=\"muted small\">The newest {ATTEMPTS_SHOWN}; {earlier} earlier \
                 attempts are not shown (<a href=\"/api/jobs/{}\">the JSON</a> has them all).</p>",
                job.id
            );
        }
        body.push_str("<table class=\"grid\"><thead><tr><th class=\"num\">#</th><th>Outcome</th><th>Finished</th><th class=\"num\">Duration</th><th class=\"num\">Code</th><th>Worker</th><th>Error</th></tr></thead><tbody>\n");
        for a in &attempts[earlier..] {
            let _ = writeln!(
                body,
                "<tr><td class=\"num\">{}</td><td><span class=\"outcome outcome-{}\">{}</span></td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"error-cell wrap-cell\">{}</td></tr>",
                a.attempt,
                esc(a.outcome.as_str()),
                esc(a.outcome.as_str()),
                esc(&utc(a.finished_at)),
                a.duration_ms.map_or_else(|| "–".to_string(), human_ms),
                a.status_code.map_or_else(|| "–".to_string(), |c| c.to_string()),
                esc(a.worker.as_deref().unwrap_or("–")),
                esc(&excerpt(a.error.as_deref().unwrap_or(""), ATTEMPT_ERROR_BYTES))
            );
        }
        body.push_str("</tbody></table>\n");
        let odd: Vec<String> = attempts[earlier..]
            .iter()
            .filter(|a| !a.problems.is_empty())
            .map(|a| {
                format!(
                    "<li>attempt {}: {}</li>",
                    a.attempt,
                    esc(&a.problems.join("; "))
                )
            })
            .collect();
        if !odd.is_empty() {
            let _ = writeln!(
                body,
                "<h3>Problems with these rows</h3><ul class=\"error-text\">{}</ul>",
                odd.concat()
            );
        }
    }
    // What each attempt said, secret fields masked; the newest attempt first.
    match app.queue.attempt_logs(id) {
        Ok(logs) => {
            let logs = app.redactor.mask_logs(&logs);
            for log in logs.iter().rev() {
                let cut = if log.cut_bytes > 0 {
                    format!(
                        " <span class=\"muted\">(its first {} bytes left out)</span>",
                        count(log.cut_bytes)
                    )
                } else {
                    String::new()
                };
                let _ = writeln!(
                    body,
                    "<h3>Log of attempt {}{cut}</h3><pre class=\"code job-log\">{}</pre>",
                    log.attempt,
                    esc(&log.text)
                );
            }
        }
        Err(e) => return error_response(ctx, &e),
    }
    Response::html(
        200,
        page(ctx, Nav::Jobs, &format!("Job #{}", job.id), "", &body),
    )
}

/// The buttons and forms this job's status allows; none in read-only mode.
fn actions(out: &mut String, ctx: &Ctx, job: &JobRecord) {
    if ctx.read_only {
        return;
    }
    let base = format!("/jobs/{}", job.id);
    let waiting = matches!(job.status, JobStatus::Queued | JobStatus::Failed);
    // A held job runs once the jobs it waits for allow it: there is no running it now.
    let held = job.status == JobStatus::Queued && job.waiting_for > 0;
    let running = job.status == JobStatus::Running;
    let dead_waiting = job.status == JobStatus::Dead && job.requeued_as.is_none();
    if !waiting && !running && job.status != JobStatus::Dead {
        return;
    }
    out.push_str("<section class=\"actions-panel\">");
    if waiting && !held {
        out.push_str(&action_button(
            ctx,
            &format!("{base}/retry"),
            "Run now",
            "",
            None,
        ));
    }
    if waiting || running {
        let confirm = if running {
            "Cancel this running job? Its worker is told to stop it, and what the attempt reports is discarded."
        } else {
            "Cancel this job? No worker will run it."
        };
        let _ = write!(
            out,
            "<form method=\"post\" action=\"{base}/cancel\" class=\"cancel\" id=\"cancel-form\" data-confirm=\"{}\">{}\
             <label>Reason <input name=\"reason\" required maxlength=\"500\" placeholder=\"why (kept on the job)\"></label>\
             <label>By <input name=\"by\" maxlength=\"200\" value=\"{}\"></label>\
             <button class=\"btn btn-danger\">Cancel</button></form>",
            esc(confirm),
            csrf_field(ctx),
            esc(DEFAULT_REQUEUED_BY)
        );
    }
    if dead_waiting {
        let _ = write!(
            out,
            "<form method=\"post\" action=\"{base}/requeue\" class=\"requeue\" id=\"requeue-form\">{}\
             <label>Reason <input name=\"reason\" required maxlength=\"500\" placeholder=\"why (kept on the dead job)\"></label>\
             <label>By <input name=\"by\" maxlength=\"200\" value=\"{}\"></label>\
             <button class=\"btn btn-primary\">Requeue as a new job</button></form>",
            csrf_field(ctx),
            esc(DEFAULT_REQUEUED_BY)
        );
        out.push_str(&action_button(
            ctx,
            &format!("{base}/retry"),
            "Retry once more",
            "btn-quiet",
            None,
        ));
    }
    if job.status == JobStatus::Dead {
        out.push_str(&action_button(
            ctx,
            &format!("{base}/discard"),
            "Discard",
            "btn-danger",
            Some("Delete this dead job and its history for good?"),
        ));
    }
    out.push_str("</section>\n");
}

/// The job's workflow (a link, its step) and what it waits for there.
fn workflow_fields(
    fields: &mut Vec<(&str, String)>,
    job: &JobRecord,
    workflow_id: i64,
    info: Option<&WorkflowInfo>,
) {
    let role = match &job.step {
        Some(step) => format!("step <code>{}</code>", esc(step)),
        None => MEMBER_LABEL.to_string(),
    };
    let Some(info) = info else {
        fields.push((
            "Workflow",
            format!("#{workflow_id} (no longer stored), {role}"),
        ));
        return;
    };
    fields.push((
        if info.is_batch() { "Batch" } else { "Workflow" },
        format!(
            "<a href=\"/workflows/{workflow_id}\" class=\"workflow-link\">#{workflow_id} {}</a> ({}), {role}",
            esc(&shown_name(&info.name)),
            esc(info.state())
        ),
    ));
    if let Some(step) = info.steps.iter().find(|s| s.id == job.id) {
        let waits = waits_html(info, step);
        if waits != "–" {
            fields.push(("Waits for", waits));
        }
    }
}
