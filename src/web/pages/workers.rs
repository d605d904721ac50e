//! `GET /workers`: who is working, as the workers registry holds it: live workers in any
//! process or host with their queues, job types, latest sign of life and running jobs; then
//! those that stopped or died in the last day; and the waiting job types no live worker
//! serves.

use std::fmt::Write as _;

use crate::storage::workers::WorkerInfo;
use crate::web::app::{App, Ctx};
use crate::web::format::{ago, count, utc};
use crate::web::html::{esc, page, Nav};
use crate::web::server::http::{query_string, Response};

use super::error_response;

/// `GET /workers`.
pub(crate) fn render(app: &App, ctx: &Ctx) -> Response {
    let workers = match app.queue.workers() {
        Ok(w) => w,
        Err(e) => return error_response(ctx, &e),
    };
    let stats = match app.queue.stats() {
        Ok(s) => s,
        Err(e) => return error_response(ctx, &e),
    };
    let (live, gone): (Vec<&WorkerInfo>, Vec<&WorkerInfo>) = workers.iter().partition(|w| w.alive);
    let mut body = format!(
        "<div class=\"page-head\"><h1>Workers</h1><span class=\"muted\">{} alive · each writes its row when it starts and every reap interval</span></div>\n",
        count(live.len() as i64)
    );
    // What waits with nobody to run it: the usual reason for an old due job.
    let unserved = WorkerInfo::unserved(&workers, &stats.counts);
    if !unserved.is_empty() {
        body.push_str("<h2>Waiting, and no live worker serves them</h2><table class=\"grid\"><thead><tr><th>Queue</th><th>Type</th><th>Status</th><th class=\"num\">Jobs</th></tr></thead><tbody>\n");
        for c in unserved {
            let _ = writeln!(
                body,
                "<tr><td>{}</td><td><a href=\"/jobs{}\">{}</a></td><td>{}</td><td class=\"num\">{}</td></tr>",
                esc(&c.queue),
                esc(&query_string(&[
                    ("type", c.job_type.as_str()),
                    ("queue", c.queue.as_str()),
                    ("status", c.status.as_str())
                ])),
                esc(&c.job_type),
                c.status.as_str(),
                count(c.count)
            );
        }
        body.push_str("</tbody></table>\n");
    }
    body.push_str("<h2>Alive</h2>\n");
    table(
        &mut body,
        &live,
        ctx.now,
        "No live worker: nothing is claiming jobs.",
    );
    body.push_str("<h2>Stopped or gone in the last day</h2>\n");
    table(&mut body, &gone, ctx.now, "None.");
    Response::html(200, page(ctx, Nav::Workers, "Workers", "", &body))
}

fn table(out: &mut String, workers: &[&WorkerInfo], now: i64, empty: &str) {
    if workers.is_empty() {
        let _ = writeln!(out, "<p class=\"empty\">{empty}</p>");
        return;
    }
    out.push_str("<table class=\"grid\"><thead><tr><th>Worker</th><th>State</th><th>Host</th><th class=\"num\">PID</th><th>Version</th><th>Queues</th><th>Job types</th><th>Started</th><th>Last seen</th><th class=\"num\">Running</th></tr></thead><tbody>\n");
    let when = |ms: i64| {
        format!(
            "<span title=\"{}\">{}</span>",
            esc(&utc(ms)),
            esc(&ago(ms, now))
        )
    };
    for w in workers {
        let state = w.state();
        let queues: Vec<String> = w
            .queues
            .iter()
            .map(|(name, threads)| format!("{}×{threads}", esc(name)))
            .collect();
        let _ = writeln!(
            out,
            "<tr><td><code>{}</code></td><td>{state}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td class=\"wrap-cell\">{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            esc(&w.id),
            esc(&w.host),
            w.pid,
            esc(&w.version),
            queues.join(", "),
            esc(&w.job_types.join(", ")),
            when(w.started_at),
            when(w.heartbeat_at),
            count(w.running)
        );
    }
    out.push_str("</tbody></table>\n");
}
