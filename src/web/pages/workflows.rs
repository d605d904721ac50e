//! `GET /workflows`: workflows and batches, newest first, each with how many of its jobs
//! have ended (a bar and `3 of 4`) and its jobs by status. Keyset pages like `/jobs`:
//! `before=ID` lists older ones.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::job::JobStatus;
use crate::workflow::WorkflowListing;

use crate::web::app::{App, Ctx};
use crate::web::format::{ago, count, utc};
use crate::web::html::{badge, error_page, esc, page, Nav};
use crate::web::server::http::{query_string, Request, Response};

use super::error_response;

/// Workflows on one page.
const PAGE_SIZE: usize = 50;

/// The state word of a workflow and the badge class it shows with: `open` (a batch taking
/// jobs), `in progress`, `finished` (red when a job ended dead or cancelled).
pub(crate) fn state_badge(open: bool, counts: &BTreeMap<JobStatus, usize>) -> String {
    let total: usize = counts.values().sum();
    let failed = counts.get(&JobStatus::Dead).copied().unwrap_or(0)
        + counts.get(&JobStatus::Cancelled).copied().unwrap_or(0);
    let ended = failed + counts.get(&JobStatus::Succeeded).copied().unwrap_or(0);
    let (word, class) = if open {
        ("open", "queued")
    } else if ended < total {
        ("in progress", "running")
    } else if failed > 0 {
        ("finished", "dead")
    } else {
        ("finished", "succeeded")
    };
    format!("<span class=\"badge badge-{class} state\">{word}</span>")
}

/// A progress bar and `3 of 4 ended`.
pub(crate) fn progress(ended: usize, total: usize) -> String {
    format!(
        "<progress max=\"{}\" value=\"{ended}\"></progress> <span class=\"muted small\">{} of {} ended</span>",
        total.max(1),
        count(ended as i64),
        count(total as i64)
    )
}

/// Jobs by status as small badges with counts, in the order statuses go.
pub(crate) fn count_badges(counts: &BTreeMap<JobStatus, usize>) -> String {
    let mut out = String::new();
    for status in JobStatus::ALL {
        if let Some(n) = counts.get(&status).filter(|n| **n > 0) {
            let _ = write!(
                out,
                "<span class=\"count-badge\">{} {}</span> ",
                count(*n as i64),
                badge(status)
            );
        }
    }
    out
}

/// `GET /workflows`.
pub(crate) fn render(app: &App, ctx: &Ctx, req: &Request) -> Response {
    let before = match req.query("before").map(str::parse::<i64>) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => {
            return error_page(ctx, 400, "Bad filter", "before must be a workflow id");
        }
    };
    // One more than shown tells whether an older page exists.
    let mut listings = match app.queue.workflows(PAGE_SIZE + 1, before) {
        Ok(l) => l,
        Err(e) => return error_response(ctx, &e),
    };
    let more = listings.len() > PAGE_SIZE;
    listings.truncate(PAGE_SIZE);
    let mut body = String::from(
        "<div class=\"page-head\"><h1>Workflows &amp; batches</h1><span class=\"muted\">jobs that wait for other jobs</span></div>\n",
    );
    if listings.is_empty() {
        body.push_str("<p class=\"empty\">No workflows or batches yet: <code>Queue::enqueue_workflow</code> and <code>Queue::submit_batch</code> make them.</p>\n");
    } else {
        table(&mut body, ctx, &listings);
    }
    body.push_str("<nav class=\"pager\">");
    if before.is_some() {
        body.push_str("<a href=\"/workflows\">« Newest</a>");
    }
    let _ = write!(
        body,
        "<span class=\"muted\">{} shown</span>",
        count(listings.len() as i64)
    );
    if let (true, Some(last)) = (more, listings.last()) {
        let _ = write!(
            body,
            "<a href=\"/workflows{}\" rel=\"next\">Older »</a>",
            esc(&query_string(&[("before", &last.id.to_string())]))
        );
    }
    body.push_str("</nav>\n");
    Response::html(200, page(ctx, Nav::Workflows, "Workflows", "", &body))
}

fn table(out: &mut String, ctx: &Ctx, listings: &[WorkflowListing]) {
    out.push_str("<table class=\"grid workflows\"><thead><tr><th class=\"num\">ID</th><th>Kind</th><th>Name</th><th>State</th><th>Progress</th><th>Jobs</th><th>Created</th></tr></thead><tbody>\n");
    for w in listings {
        let _ = writeln!(
            out,
            "<tr><td class=\"num\"><a href=\"/workflows/{id}\">#{id}</a></td><td>{}</td><td class=\"wrap-cell\"><a href=\"/workflows/{id}\">{}</a></td><td>{}</td><td class=\"when-cell\">{}</td><td>{}</td><td class=\"when-cell\"><span title=\"{}\">{}</span></td></tr>",
            esc(w.kind.as_str()),
            esc(&super::flow_parts::shown_name(&w.name)),
            state_badge(w.open, &w.counts),
            progress(w.ended(), w.total()),
            count_badges(&w.counts),
            esc(&utc(w.created_at)),
            esc(&ago(w.created_at, ctx.now)),
            id = w.id,
        );
    }
    out.push_str("</tbody></table>\n");
}
