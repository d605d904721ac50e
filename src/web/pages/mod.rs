//! One file per page (and one for the actions its forms post to). Each renders from the
//! library's own read functions; none reads the database any other way.

pub(crate) mod actions;
pub(crate) mod dead;
#[cfg(feature = "webhook")]
pub(crate) mod endpoints;
pub(crate) mod flow_parts;
pub(crate) mod job;
pub(crate) mod jobs;
pub(crate) mod login;
pub(crate) mod overview;
pub(crate) mod schedules;
pub(crate) mod workers;
pub(crate) mod workflow;
pub(crate) mod workflows;

use crate::error::{Error, ErrorKind};
use crate::job::{JobRecord, JobStatus};

use super::app::Ctx;
use super::format::ago;
use super::html::error_page;
use super::server::http::Response;

/// The time that matters for a job in its status, relative to now, and a waiting job's
/// deadline (as `litejobs list`).
pub(crate) fn when(job: &JobRecord, now: i64) -> String {
    let (word, at) = job.status_time();
    match job.expires_at {
        Some(deadline) if matches!(job.status, JobStatus::Queued | JobStatus::Failed) => {
            format!("{word} {}, expires {}", ago(at, now), ago(deadline, now))
        }
        _ => format!("{word} {}", ago(at, now)),
    }
}

/// A library error as a page: 404 for an unknown id, 409 for an action the job's status
/// does not allow, 400 for bad input, 503 while the database is busy or its server away,
/// 500 otherwise.
pub(crate) fn error_response(ctx: &Ctx, e: &Error) -> Response {
    let (status, title) = match e.kind() {
        ErrorKind::NotFound => (404, "Not found"),
        ErrorKind::InvalidState => (409, "Not possible now"),
        ErrorKind::InvalidJob | ErrorKind::InvalidConfig => (400, "Bad request"),
        ErrorKind::Busy => (503, "Database busy"),
        ErrorKind::Unavailable => (503, "Database unavailable"),
        _ => (500, "Something went wrong"),
    };
    // A server that is away is logged once per outage, not once per page.
    if status >= 500 && e.kind() != ErrorKind::Unavailable {
        log::warn!("litejobs web: {e}");
    }
    error_page(ctx, status, title, &e.to_string())
}

/// A job id from a path segment.
pub(crate) fn parse_id(segment: &str) -> Option<i64> {
    segment.parse::<i64>().ok().filter(|id| *id > 0)
}
