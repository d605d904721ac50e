//! `GET /workflows/{id}`: one workflow or batch: its progress, its jobs as a graph (columns
//! by depth, lines for waits, each box a link to its job), the same jobs as a table in
//! reading order with what each waits for, its last error (masked) and why it was
//! cancelled, and the form that cancels what has not ended.

use std::fmt::Write as _;

use crate::workflow::WorkflowInfo;

use crate::web::app::{App, Ctx};
use crate::web::format::{ago, clip, count, utc, TITLE_CHARS};
use crate::web::graph;
use crate::web::html::{csrf_field, error_page, esc, job_link, page, Nav};
use crate::web::server::http::Response;

use super::error_response;
use super::flow_parts::{shown_name, status_html, waits_html};
use super::job::DEFAULT_REQUEUED_BY;
use super::workflows::{count_badges, progress, state_badge};

/// Rows of the jobs table at most (`/api/workflows/{id}` has them all).
const ROWS: usize = 500;

/// `GET /workflows/{id}`.
pub(crate) fn render(app: &App, ctx: &Ctx, id: i64) -> Response {
    let info = match app.queue.workflow(id) {
        Ok(Some(info)) => info.masked(&app.redactor),
        Ok(None) => {
            return error_page(
                ctx,
                404,
                "Not found",
                &format!("no workflow or batch with id {id}"),
            )
        }
        Err(e) => return error_response(ctx, &e),
    };
    let kind = if info.is_batch() { "Batch" } else { "Workflow" };
    let counts = info.counts();
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<div class=\"page-head\"><h1>{kind} #{} {}</h1><span class=\"muted wf-name\">{}</span></div>",
        info.id,
        state_badge(info.open, &counts),
        esc(&shown_name(&info.name))
    );
    let held = info.steps.iter().filter(|s| s.is_held()).count();
    let _ = write!(
        body,
        "<section class=\"wf-progress\">{} {}",
        progress(info.ended(), info.total()),
        count_badges(&counts)
    );
    if held > 0 {
        let _ = write!(
            body,
            "<span class=\"muted small\">{} waiting for other jobs</span>",
            count(held as i64)
        );
    }
    let _ = write!(
        body,
        "<span class=\"muted small\">created {}</span>",
        esc(&ago(info.created_at, ctx.now))
    );
    if let Some(closed) = info.closed_at {
        let _ = write!(
            body,
            "<span class=\"muted small\" title=\"{}\">closed {}</span>",
            esc(&utc(closed)),
            esc(&ago(closed, ctx.now))
        );
    }
    body.push_str("</section>\n");
    cancel_form(&mut body, ctx, &info);

    if info.steps.is_empty() {
        body.push_str("<p class=\"empty\">No jobs yet.</p>\n");
    } else {
        body.push_str("<h2>Graph</h2>\n<p class=\"legend\">Each job after the jobs it waits for; a line per wait: <span class=\"line-key line-done\"></span>done <span class=\"line-key line-failed\"></span>failed <span class=\"line-key line-pending\"></span>pending, dashed for any outcome. Click a job to open it.</p>\n<div class=\"graph\">");
        body.push_str(&graph::workflow(&info));
        body.push_str("</div>\n");
        jobs_table(&mut body, &info);
    }
    Response::html(
        200,
        page(
            ctx,
            Nav::Workflows,
            &format!("{kind} #{}", info.id),
            "",
            &body,
        ),
    )
}

/// The cancel form while a job has not ended or the batch is open; none in read-only mode.
fn cancel_form(out: &mut String, ctx: &Ctx, info: &WorkflowInfo) {
    if ctx.read_only || info.is_finished() {
        return;
    }
    let _ = writeln!(
        out,
        "<section class=\"actions-panel\"><form method=\"post\" action=\"/workflows/{}/cancel\" class=\"cancel\" id=\"cancel-workflow-form\" data-confirm=\"Cancel every job of this {} that has not ended? Running ones are told to stop.\">{}\
         <label>Reason <input name=\"reason\" required maxlength=\"500\" placeholder=\"why (kept on each job)\"></label>\
         <label>By <input name=\"by\" maxlength=\"200\" value=\"{}\"></label>\
         <button class=\"btn btn-danger\">Cancel {}</button></form></section>",
        info.id,
        info.kind.as_str(),
        csrf_field(ctx),
        esc(DEFAULT_REQUEUED_BY),
        info.kind.as_str()
    );
}

fn jobs_table(out: &mut String, info: &WorkflowInfo) {
    let ordered = info.in_order();
    out.push_str("<h2>Jobs</h2>\n");
    if ordered.len() > ROWS {
        let _ = writeln!(
            out,
            "<p class=\"muted small\">The first {ROWS} of {} jobs in this order; <a href=\"/api/workflows/{}\">the JSON</a> has them all.</p>",
            count(ordered.len() as i64),
            info.id
        );
    }
    out.push_str("<table class=\"grid wf-jobs\"><thead><tr><th>Step</th><th class=\"num\">Job</th><th>Type</th><th>Status</th><th class=\"num\">Tries</th><th>Waits for</th><th>Error or reason</th></tr></thead><tbody>\n");
    for (depth, step) in ordered.into_iter().take(ROWS) {
        let error = step.problem();
        let _ = writeln!(
            out,
            "<tr><td class=\"step-cell depth-{}\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"error-cell\" title=\"{}\">{}</td></tr>",
            depth.min(8),
            esc(&clip(step.label(), 60)),
            job_link(step.id),
            esc(&step.job_type),
            status_html(step),
            step.attempts,
            waits_html(info, step),
            esc(&clip(&error, TITLE_CHARS)),
            esc(&clip(&error, 90))
        );
    }
    out.push_str("</tbody></table>\n");
}
