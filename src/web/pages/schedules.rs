//! `GET /schedules`: periodic schedules (the job of one kept in the database, the latest slot
//! enqueued, the next one) and report runs with their progress.

use std::fmt::Write as _;

use crate::builtin::report::ReportState;

use crate::web::app::{App, Ctx};
use crate::web::format::{ago, count, utc};
use crate::web::html::{esc, job_link, page, Nav};
use crate::web::server::http::Response;

use super::error_response;

/// Report runs shown, newest first.
const RUNS: usize = 50;

/// `GET /schedules`.
pub(crate) fn render(app: &App, ctx: &Ctx) -> Response {
    let schedules = match app.queue.periodic_schedules() {
        Ok(s) => s,
        Err(e) => return error_response(ctx, &e),
    };
    let runs = match app.queue.report_runs(None, RUNS) {
        Ok(r) => r,
        Err(e) => return error_response(ctx, &e),
    };
    let now = ctx.now;
    let when = |ms: i64| {
        format!(
            "<span title=\"{}\">{}</span>",
            esc(&utc(ms)),
            esc(&ago(ms, now))
        )
    };
    let mut body = String::from(
        "<div class=\"page-head\"><h1>Schedules &amp; reports</h1></div>\n<h2>Periodic jobs</h2>\n",
    );
    if schedules.is_empty() {
        body.push_str("<p class=\"empty\">No periodic schedules yet: a worker registers them with <code>WorkerBuilder::periodic</code>, and <code>litejobs schedule add</code> keeps one in the database for every <code>litejobs work</code>.</p>\n");
    } else {
        body.push_str("<table class=\"grid\"><thead><tr><th>Name</th><th>Schedule</th><th>Job</th><th>Last slot</th><th>Last job</th><th>Next slot</th></tr></thead><tbody>\n");
        for s in &schedules {
            let _ = writeln!(
                body,
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&s.name),
                esc(&s.schedule),
                // The payload is left out: it may hold what the job pages mask.
                s.job.as_ref().map_or_else(
                    || "<span class=\"muted\">in a worker's code</span>".to_string(),
                    |job| format!(
                        "<code>{}</code> in {} <span class=\"muted\">(kept in the database)</span>",
                        esc(&job.job_type),
                        esc(&job.queue)
                    )
                ),
                when(s.last_slot_at),
                s.last_job_id.map_or_else(|| "–".to_string(), job_link),
                s.next_slot_at.map_or_else(|| "–".to_string(), when)
            );
        }
        body.push_str("</tbody></table>\n");
    }

    body.push_str("<h2>Report runs</h2>\n");
    if runs.is_empty() {
        body.push_str("<p class=\"empty\">No report runs yet.</p>\n");
    } else {
        body.push_str("<table class=\"grid\"><thead><tr><th class=\"num\">Run</th><th>Kind</th><th>State</th><th>Progress</th><th class=\"num\">Rows</th><th>Requested</th><th>Result</th></tr></thead><tbody>\n");
        for r in &runs {
            let state_class = match r.state {
                ReportState::Processing => "badge-running",
                ReportState::Ready => "badge-succeeded",
                ReportState::Failed => "badge-dead",
            };
            let chunks = if r.chunks_total > 0 {
                format!("{} of {} chunks", r.chunks_done, r.chunks_total)
            } else {
                "planning".to_string()
            };
            let result = match (&r.result_path, &r.error) {
                (_, Some(error)) => format!("<span class=\"error-text\">{}</span>", esc(error)),
                (Some(path), None) => format!("<code>{}</code>", esc(&path.display().to_string())),
                (None, None) if r.state == ReportState::Ready => {
                    "<span class=\"muted\">rows kept in the database</span>".to_string()
                }
                (None, None) => "–".to_string(),
            };
            let _ = writeln!(
                body,
                "<tr><td class=\"num\">{}</td><td>{}</td><td><span class=\"badge {state_class}\">{}</span></td>\
                 <td><progress max=\"1000\" value=\"{}\"></progress> <span class=\"muted small\">{}</span></td>\
                 <td class=\"num\">{}</td><td>{}</td><td class=\"wrap-cell\">{}</td></tr>",
                r.id,
                esc(&r.kind),
                r.state.as_str(),
                (r.fraction_done() * 1000.0).round() as i64,
                esc(&chunks),
                count(r.result_rows.unwrap_or(r.rows_done)),
                when(r.created_at),
                result
            );
        }
        body.push_str("</tbody></table>\n");
    }
    Response::html(
        200,
        page(ctx, Nav::Schedules, "Schedules & reports", "", &body),
    )
}
