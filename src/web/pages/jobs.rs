//! `GET /jobs`: jobs newest first, filtered by `status`, `type`, `queue` and `search` (text
//! in the last error). Pages are keyset pages: `before=ID` lists jobs with smaller ids, so
//! the thousandth page costs what the first does, even with millions of rows (no OFFSET).
//! `page` is only the page number shown.

use std::fmt::Write as _;

use crate::job::{JobRecord, JobStatus};
use crate::storage::reads::JobFilter;
use crate::Queue;

use crate::web::app::{App, Ctx};
use crate::web::format::{clip, count, TITLE_CHARS};
use crate::web::html::{badge, esc, job_link, page, Nav};
use crate::web::server::http::{query_string, Request, Response};

use super::{error_response, when};

/// Jobs on one page.
pub(crate) const PAGE_SIZE: usize = 50;

/// The filters and position of a jobs list, from the query string.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListQuery {
    pub(crate) status: Option<JobStatus>,
    pub(crate) job_type: Option<String>,
    pub(crate) queue: Option<String>,
    pub(crate) search: Option<String>,
    /// An error group ([`crate::ErrorGroup::group`]), from the error tables' links.
    pub(crate) group: Option<String>,
    pub(crate) before: Option<i64>,
    pub(crate) page: u64,
}

impl ListQuery {
    /// Reads the query string; a bad `status` or `before` is an error naming it.
    pub(crate) fn parse(req: &Request) -> Result<ListQuery, String> {
        let status = req
            .query("status")
            .map(|s| s.parse::<JobStatus>().map_err(|e| e.to_string()))
            .transpose()?;
        let before = req
            .query("before")
            .map(|s| {
                s.parse::<i64>()
                    .map_err(|_| format!("before must be a job id, got {s:?}"))
            })
            .transpose()?;
        let page = req
            .query("page")
            .and_then(|p| p.parse::<u64>().ok())
            .filter(|p| *p >= 1)
            .unwrap_or(1);
        Ok(ListQuery {
            status,
            job_type: req.query("type").map(str::to_string),
            queue: req.query("queue").map(str::to_string),
            search: req.query("search").map(str::to_string),
            group: req.query("group").map(str::to_string),
            before,
            page: if before.is_some() { page } else { 1 },
        })
    }

    /// The library filter for these fields, returning at most `limit` jobs.
    pub(crate) fn filter(&self, limit: usize) -> JobFilter {
        let mut filter = JobFilter::new().limit(limit);
        if let Some(status) = self.status {
            filter = filter.status(status);
        }
        if let Some(t) = &self.job_type {
            filter = filter.job_type(t);
        }
        if let Some(q) = &self.queue {
            filter = filter.queue(q);
        }
        if let Some(s) = &self.search {
            filter = filter.search(s);
        }
        if let Some(g) = &self.group {
            filter = filter.error_group(g);
        }
        if let Some(id) = self.before {
            filter = filter.before_id(id);
        }
        filter
    }

    /// The query string of these filters with another position.
    pub(crate) fn link(&self, before: Option<i64>, page: u64) -> String {
        let before = before.map(|b| b.to_string()).unwrap_or_default();
        let page = if before.is_empty() {
            String::new()
        } else {
            page.to_string()
        };
        query_string(&[
            ("status", self.status.map_or("", JobStatus::as_str)),
            ("type", self.job_type.as_deref().unwrap_or("")),
            ("queue", self.queue.as_deref().unwrap_or("")),
            ("search", self.search.as_deref().unwrap_or("")),
            ("group", self.group.as_deref().unwrap_or("")),
            ("before", &before),
            ("page", &page),
        ])
    }
}

/// A page of jobs: at most `PAGE_SIZE`, and whether older ones follow.
pub(crate) fn fetch_page(
    queue: &Queue,
    filter: JobFilter,
    dead_only: bool,
) -> crate::Result<(Vec<JobRecord>, bool)> {
    // One more than shown tells whether an older page exists, without counting.
    let filter = filter.limit(PAGE_SIZE + 1);
    let mut jobs = if dead_only {
        queue.dead_jobs(&filter)?
    } else {
        queue.list(&filter)?
    };
    let more = jobs.len() > PAGE_SIZE;
    jobs.truncate(PAGE_SIZE);
    Ok((jobs, more))
}

/// `GET /jobs`.
pub(crate) fn render(app: &App, ctx: &Ctx, req: &Request) -> Response {
    let query = match ListQuery::parse(req) {
        Ok(q) => q,
        Err(message) => {
            return crate::web::html::error_page(ctx, 400, "Bad filter", &message);
        }
    };
    let (jobs, more) = match fetch_page(&app.queue, query.filter(PAGE_SIZE), false) {
        Ok(page) => page,
        Err(e) => return error_response(ctx, &e),
    };
    let mut body = String::from("<div class=\"page-head\"><h1>Jobs</h1></div>\n");
    filter_form(&mut body, "/jobs", &query, true);
    jobs_table(&mut body, app, ctx, &jobs, false);
    pager(&mut body, "/jobs", &query, &jobs, more);
    Response::html(200, page(ctx, Nav::Jobs, "Jobs", "", &body))
}

/// The filter form (a GET, so filters are bookmarkable and work without JavaScript).
pub(crate) fn filter_form(out: &mut String, action: &str, q: &ListQuery, with_status: bool) {
    let _ = write!(
        out,
        "<form method=\"get\" action=\"{action}\" class=\"filters\">"
    );
    if with_status {
        out.push_str("<label>Status <select name=\"status\"><option value=\"\">any</option>");
        for status in JobStatus::ALL {
            let selected = if q.status == Some(status) {
                " selected"
            } else {
                ""
            };
            let _ = write!(out, "<option{selected}>{}</option>", status.as_str());
        }
        out.push_str("</select></label>");
    }
    for (name, label, value, hint) in [
        ("type", "Type", &q.job_type, "e.g. send_email"),
        ("queue", "Queue", &q.queue, "e.g. default"),
        ("search", "Error text", &q.search, "text in the last error"),
    ] {
        let _ = write!(
            out,
            "<label>{label} <input name=\"{name}\" value=\"{}\" placeholder=\"{hint}\"></label>",
            esc(value.as_deref().unwrap_or(""))
        );
    }
    if let Some(group) = &q.group {
        // Kept through a change of the other filters; "clear" drops it.
        let _ = write!(
            out,
            "<input type=\"hidden\" name=\"group\" value=\"{}\"><span class=\"muted\">error group <code>{}</code></span> ",
            esc(group),
            esc(&clip(group, 80))
        );
    }
    let _ = writeln!(
        out,
        "<button class=\"btn\">Filter</button> <a href=\"{action}\" class=\"muted\">clear</a></form>"
    );
}

/// The jobs table; `died` shows the dead columns (death time, status code).
pub(crate) fn jobs_table(out: &mut String, app: &App, ctx: &Ctx, jobs: &[JobRecord], died: bool) {
    if jobs.is_empty() {
        out.push_str("<p class=\"empty\">No jobs match.</p>\n");
        return;
    }
    out.push_str("<table class=\"grid jobs\"><thead><tr><th class=\"num\">ID</th><th>Status</th><th>Type</th><th>Queue</th><th class=\"num\">Tries</th><th>When</th>");
    if died {
        out.push_str("<th class=\"num\">Code</th>");
    }
    out.push_str("<th>Last error</th><th>Payload</th></tr></thead><tbody>\n");
    for job in jobs {
        let masked = app.redactor.mask(&job.payload).to_string();
        // A succeeded job's last_error is an earlier attempt's failure (the job page keeps
        // it); in a list it would read as if the job had failed. A cancelled job shows why
        // (an expired one, its deadline).
        let error = match job.status {
            JobStatus::Succeeded => "",
            JobStatus::Cancelled => job
                .cancel_reason
                .as_deref()
                .or(job.last_error.as_deref())
                .unwrap_or(""),
            _ => job.last_error.as_deref().unwrap_or(""),
        };
        let _ = write!(
            out,
            "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}/{}</td><td class=\"when-cell\">{}</td>",
            job_link(job.id),
            badge(job.status),
            esc(&job.job_type),
            esc(&job.queue),
            job.attempts,
            job.max_attempts,
            esc(&when(job, ctx.now)),
        );
        if died {
            let _ = write!(
                out,
                "<td class=\"num\">{}</td>",
                job.last_status_code
                    .map_or_else(|| "–".to_string(), |c| c.to_string())
            );
        }
        // The line that matters (a traceback's last line, not the log lines before it).
        let _ = writeln!(
            out,
            "<td class=\"error-cell\" title=\"{}\">{}</td><td class=\"payload-cell\"><code>{}</code></td></tr>",
            esc(&clip(error, TITLE_CHARS)),
            esc(&clip(&crate::human::error_headline(error), 90)),
            esc(&clip(&masked, 70))
        );
    }
    out.push_str("</tbody></table>\n");
}

/// Newest / page N / older links.
pub(crate) fn pager(out: &mut String, path: &str, q: &ListQuery, jobs: &[JobRecord], more: bool) {
    out.push_str("<nav class=\"pager\">");
    if q.before.is_some() {
        let _ = write!(
            out,
            "<a href=\"{path}{}\">« Newest</a>",
            esc(&q.link(None, 1))
        );
    }
    let _ = write!(
        out,
        "<span class=\"muted\">page {} · {} shown</span>",
        q.page,
        count(jobs.len() as i64)
    );
    if let (true, Some(last)) = (more, jobs.last()) {
        let _ = write!(
            out,
            "<a href=\"{path}{}\" rel=\"next\">Older »</a>",
            esc(&q.link(Some(last.id), q.page + 1))
        );
    }
    out.push_str("</nav>\n");
}
