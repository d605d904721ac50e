//! The JSON API under `/api/`, for scripts. Each answer has the field names of the matching
//! `litejobs ... --json` output (payloads masked the same way):
//!
//! | route | like | shape |
//! | --- | --- | --- |
//! | `GET /api/stats` | `litejobs stats --json` | the health figures, `counts`, `top_errors` |
//! | `GET /api/jobs` | `litejobs list --json` | `{"jobs": [...]}`; filters `status`, `type`, `queue`, `search`, `before`, `limit` |
//! | `GET /api/jobs/{id}` | `litejobs show ID --json` | `{"job": {...}, "attempts": [...]}` |
//! | `GET /api/dead` | `litejobs dead list --json` | `{"jobs": [...]}`, dead jobs waiting for a person |
//! | `GET /api/workflows` | `litejobs workflow list --json` | `{"workflows": [...]}`, each with `ended` and `total`; `before`, `limit` |
//! | `GET /api/workflows/{id}` | `litejobs workflow show ID --json` | the workflow or batch with every job and wait |
//! | `GET /api/overview` | | the overview's live figures, by display key |
//!
//! Errors are `{"error": "..."}` with 400, 401, 404 or 500.
//!
//! Error texts of jobs, attempts and error groups (`last_error`, `error`) are cut to 8 KiB, ending with
//! `… (N more bytes)` when cut, so that no answer is made of a few huge ones.

use serde::Serialize;

use crate::error::{Error, ErrorKind};
use crate::human::{excerpt, ERROR_EXCERPT_BYTES};
use crate::job::{AttemptRecord, JobRecord};
use crate::queue::reads::DEFAULT_HEALTH_WINDOW;
use crate::storage::reads::DEFAULT_LIST_LIMIT;
use crate::workflow::WorkflowListing;

use super::app::App;
use super::pages::jobs::ListQuery;
use super::pages::overview;
use super::server::http::{Request, Response};

/// Most jobs one `/api/jobs` answer holds.
const MAX_LIMIT: usize = 1000;
/// Error groups in `/api/stats`, as `litejobs stats`.
const TOP_ERRORS: usize = 5;

#[derive(Serialize)]
struct JobsJson {
    jobs: Vec<JobRecord>,
}

/// A workflow in a listing, with its progress spelled out (as `workflow list --json`).
#[derive(Serialize)]
struct ListedJson {
    #[serde(flatten)]
    listing: WorkflowListing,
    ended: usize,
    total: usize,
}

#[derive(Serialize)]
struct WorkflowsJson {
    workflows: Vec<ListedJson>,
}

#[derive(Serialize)]
struct ShowJson<'a> {
    job: &'a JobRecord,
    attempts: &'a [AttemptRecord],
    /// What each attempt said, secret fields masked.
    logs: &'a [crate::job::AttemptLogRecord],
}

/// `text`, cut to [`ERROR_EXCERPT_BYTES`] when longer.
fn bounded(text: &mut Option<String>) {
    if let Some(error) = text {
        if error.len() > ERROR_EXCERPT_BYTES {
            *error = excerpt(error, ERROR_EXCERPT_BYTES).into_owned();
        }
    }
}

/// The job as the API shows it: secrets masked, its error cut.
fn shown(app: &App, job: &JobRecord) -> JobRecord {
    let mut job = app.redactor.mask_job(job);
    bounded(&mut job.last_error);
    job
}

fn error(e: &Error) -> Response {
    let status = match e.kind() {
        ErrorKind::NotFound => 404,
        ErrorKind::InvalidJob | ErrorKind::InvalidConfig => 400,
        ErrorKind::Busy | ErrorKind::Unavailable => 503,
        _ => 500,
    };
    Response::json_error(status, &e.to_string())
}

/// `GET /api/stats`.
pub(crate) fn stats(app: &App) -> Response {
    match app.queue.overview(DEFAULT_HEALTH_WINDOW, TOP_ERRORS) {
        Ok(mut overview) => {
            for group in &mut overview.top_errors {
                if group.error.len() > ERROR_EXCERPT_BYTES {
                    group.error = excerpt(&group.error, ERROR_EXCERPT_BYTES).into_owned();
                }
            }
            Response::json(200, &overview)
        }
        Err(e) => error(&e),
    }
}

fn limit(req: &Request) -> Result<usize, String> {
    match req.query("limit") {
        None => Ok(DEFAULT_LIST_LIMIT),
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
            _ => Err(format!(
                "limit must be a number from 1 to {MAX_LIMIT}, got {text:?}"
            )),
        },
    }
}

/// `GET /api/jobs` and `GET /api/dead`.
pub(crate) fn jobs(app: &App, req: &Request, dead_only: bool) -> Response {
    let (query, limit) = match ListQuery::parse(req).and_then(|q| Ok((q, limit(req)?))) {
        Ok(parsed) => parsed,
        Err(message) => return Response::json_error(400, &message),
    };
    let filter = query.filter(limit);
    let jobs = if dead_only {
        app.queue.dead_jobs(&filter)
    } else {
        app.queue.list(&filter)
    };
    match jobs {
        Ok(jobs) => Response::json(
            200,
            &JobsJson {
                jobs: jobs.iter().map(|j| shown(app, j)).collect(),
            },
        ),
        Err(e) => error(&e),
    }
}

/// `GET /api/jobs/{id}`.
pub(crate) fn job(app: &App, id: i64) -> Response {
    let read = || -> crate::Result<Response> {
        let Some(job) = app.queue.job(id)? else {
            return Ok(Response::json_error(404, &format!("no job with id {id}")));
        };
        let mut attempts = app.queue.attempts(id)?;
        for attempt in &mut attempts {
            bounded(&mut attempt.error);
        }
        let logs = app.redactor.mask_logs(&app.queue.attempt_logs(id)?);
        Ok(Response::json(
            200,
            &ShowJson {
                job: &shown(app, &job),
                attempts: &app.redactor.mask_attempts(&attempts),
                logs: &logs,
            },
        ))
    };
    read().unwrap_or_else(|e| error(&e))
}

/// `GET /api/workflows`.
pub(crate) fn workflows(app: &App, req: &Request) -> Response {
    let limit = match limit(req) {
        Ok(n) => n,
        Err(message) => return Response::json_error(400, &message),
    };
    let before = match req.query("before").map(str::parse::<i64>) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => return Response::json_error(400, "before must be a workflow id"),
    };
    match app.queue.workflows(limit, before) {
        Ok(listings) => Response::json(
            200,
            &WorkflowsJson {
                workflows: listings
                    .into_iter()
                    .map(|listing| ListedJson {
                        ended: listing.ended(),
                        total: listing.total(),
                        listing,
                    })
                    .collect(),
            },
        ),
        Err(e) => error(&e),
    }
}

/// `GET /api/workflows/{id}`: secrets masked, errors cut.
pub(crate) fn workflow(app: &App, id: i64) -> Response {
    match app.queue.workflow(id) {
        Ok(Some(info)) => {
            let mut info = info.masked(&app.redactor);
            for step in &mut info.steps {
                bounded(&mut step.last_error);
            }
            Response::json(200, &info)
        }
        Ok(None) => Response::json_error(404, &format!("no workflow or batch with id {id}")),
        Err(e) => error(&e),
    }
}

/// `GET /api/overview`.
pub(crate) fn live(app: &App) -> Response {
    match overview::live(app) {
        Ok(live) => Response::json(200, &live),
        Err(e) => error(&e),
    }
}
