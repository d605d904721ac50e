//! `GET /dead`: dead jobs waiting for a person. First grouped by error (one real outage
//! shows as one big group), each group with a bulk requeue per job type; then the jobs
//! themselves, filtered and paged like `/jobs`.

use std::fmt::Write as _;

use crate::web::app::{App, Ctx};
use crate::web::format::{ago, clip, count, group_field};
use crate::web::html::{csrf_field, error_page, esc, page, Nav};
use crate::web::server::http::{Request, Response};

use super::error_response;
use super::job::DEFAULT_REQUEUED_BY;
use super::jobs::{fetch_page, filter_form, jobs_table, pager, ListQuery};

/// Error groups shown.
const GROUPS: usize = 20;

/// `GET /dead`.
pub(crate) fn render(app: &App, ctx: &Ctx, req: &Request) -> Response {
    let mut query = match ListQuery::parse(req) {
        Ok(q) => q,
        Err(message) => return error_page(ctx, 400, "Bad filter", &message),
    };
    // Dead jobs only: a status in the query means nothing here.
    query.status = None;
    let groups = match app.queue.error_groups(GROUPS) {
        Ok(groups) => groups,
        Err(e) => return error_response(ctx, &e),
    };
    let (jobs, more) = match fetch_page(&app.queue, query.filter(0), true) {
        Ok(page) => page,
        Err(e) => return error_response(ctx, &e),
    };
    let waiting = match app.queue.health(crate::defaults::DEFAULT_HEALTH_WINDOW) {
        Ok(h) => h.dead,
        Err(e) => return error_response(ctx, &e),
    };
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<div class=\"page-head\"><h1>Dead jobs</h1><span class=\"muted\">{} waiting for a person · <a href=\"/jobs?status=dead\">all dead jobs, requeued ones too</a></span></div>",
        count(waiting)
    );

    body.push_str("<h2>By error</h2>\n");
    let dead_groups: Vec<_> = groups.iter().filter(|g| g.dead > 0).collect();
    if dead_groups.is_empty() {
        body.push_str("<p class=\"empty\">No dead jobs. Nothing to do.</p>\n");
    } else {
        body.push_str("<table class=\"grid groups\"><thead><tr><th>Error</th><th class=\"num\">Dead</th><th class=\"num\">Retrying</th><th>First seen</th><th>Last seen</th><th>Requeue</th></tr></thead><tbody>\n");
        for g in dead_groups {
            let _ = write!(
                body,
                "<tr><td class=\"error-cell wrap-cell\"><a href=\"/dead{}\">{}</a></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>",
                esc(&crate::web::server::http::query_string(&[group_field(&g.group)])),
                esc(&clip(&g.headline, 300)),
                count(g.dead),
                count(g.failed),
                esc(&ago(g.first_seen_at, ctx.now)),
                esc(&ago(g.last_seen_at, ctx.now)),
            );
            if ctx.read_only {
                body.push_str("<span class=\"muted\">read-only</span>");
            }
            for job_type in &g.job_types {
                if ctx.read_only {
                    break;
                }
                let _ = write!(
                    body,
                    "<form method=\"post\" action=\"/dead/requeue\" class=\"bulk\">{}\
                     <input type=\"hidden\" name=\"type\" value=\"{}\">\
                     <input type=\"hidden\" name=\"{}\" value=\"{}\">\
                     <input type=\"hidden\" name=\"by\" value=\"{}\">\
                     <input name=\"reason\" required maxlength=\"500\" placeholder=\"reason\" aria-label=\"reason\">\
                     <button class=\"btn btn-small\">Requeue dead {}</button></form>",
                    csrf_field(ctx),
                    esc(job_type),
                    group_field(&g.group).0,
                    esc(group_field(&g.group).1),
                    esc(DEFAULT_REQUEUED_BY),
                    esc(job_type)
                );
            }
            body.push_str("</td></tr>\n");
        }
        let _ = write!(
            body,
            "</tbody></table>\n<p class=\"muted small\">Jobs are grouped by the line of their error that matters, with numbers, ids and quoted values set aside, so one failure is one group however each job's text differs. A bulk requeue takes every dead job of that type in the group, in one transaction: all of them or none. Each becomes a new job; the dead one stays, marked with who, when, why and the new id.</p>\n");
    }

    body.push_str("<h2>Dead jobs</h2>\n");
    filter_form(&mut body, "/dead", &query, false);
    jobs_table(&mut body, app, ctx, &jobs, true);
    pager(&mut body, "/dead", &query, &jobs, more);
    Response::html(200, page(ctx, Nav::Dead, "Dead jobs", "", &body))
}
