//! What the forms post to. By the time one of these runs, the router has checked access,
//! read-only mode and the CSRF token. Each calls one of the library's admin functions and
//! answers 303 to the page to look at next, with a flash message saying what happened; a
//! refusal (wrong status, bad input) is a page with the library's one-line reason.

use crate::web::app::{App, Ctx};
use crate::web::flash;
use crate::web::html::error_page;
use crate::web::server::http::{Request, Response};
use crate::Discarded;

use super::error_response;
use super::job::DEFAULT_REQUEUED_BY;

/// Longest reason or name kept from a form, in characters (the forms' `maxlength`).
const MAX_TEXT: usize = 500;

/// The page refusing a `by` or `reason` longer than [`MAX_TEXT`], if one is.
fn too_long(ctx: &Ctx, by: &str, reason: &str) -> Option<Response> {
    let over = |text: &str| text.chars().count() > MAX_TEXT;
    (over(by) || over(reason)).then(|| {
        error_page(
            ctx,
            400,
            "Too long",
            &format!("reason and by must be at most {MAX_TEXT} characters"),
        )
    })
}

/// `": reason"` for a flash message, or nothing for a blank reason.
fn because(reason: &str) -> String {
    if reason.trim().is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    }
}

/// A job action: `retry`, `cancel`, `requeue` or `discard`.
pub(crate) fn job_action(app: &App, ctx: &Ctx, req: &Request, id: i64, action: &str) -> Response {
    let back = format!("/jobs/{id}");
    let done = |message: String| flash::redirect(&app.secret, &back, true, &message);
    let result = match action {
        "retry" => app
            .queue
            .retry_now(id)
            .map(|()| done(format!("Job {id} is due now."))),
        "cancel" => {
            let form = req.form();
            let reason = form.get("reason").unwrap_or("");
            let by = form.get("by").unwrap_or(DEFAULT_REQUEUED_BY);
            if let Some(refused) = too_long(ctx, by, reason) {
                return refused;
            }
            let why = because(reason);
            app.queue
                .cancel_as(id, by, reason)
                .map(|()| done(format!("Job {id} cancelled by {by}{why}.")))
        }
        "discard" => app.queue.discard_dead(id).map(|discarded| {
            let message = match discarded {
                Discarded::Deleted => format!("Dead job {id} discarded."),
                Discarded::KeptCancelled => format!(
                    "Dead job {id} discarded: as the newest job (it keeps ids from being \
                     reused) it is cancelled, not deleted."
                ),
            };
            flash::redirect(&app.secret, "/dead", true, &message)
        }),
        "requeue" => {
            let form = req.form();
            let Some(reason) = form.get("reason") else {
                return error_page(
                    ctx,
                    400,
                    "Reason needed",
                    "a requeue needs a reason (it is kept on the dead job)",
                );
            };
            let by = form.get("by").unwrap_or(DEFAULT_REQUEUED_BY);
            if let Some(refused) = too_long(ctx, by, reason) {
                return refused;
            }
            app.queue.requeue_dead(id, by, reason).map(|new_id| {
                flash::redirect(
                    &app.secret,
                    &format!("/jobs/{new_id}"),
                    true,
                    &format!("Dead job {id} requeued as job {new_id} by {by}: {reason}"),
                )
            })
        }
        _ => return error_page(ctx, 404, "Not found", "no such action"),
    };
    result.unwrap_or_else(|e| error_response(ctx, &e))
}

/// `POST /workflows/{id}/cancel`: every job of the workflow or batch that has not ended.
pub(crate) fn workflow_cancel(app: &App, ctx: &Ctx, req: &Request, id: i64) -> Response {
    let form = req.form();
    let reason = form.get("reason").unwrap_or("");
    let by = form.get("by").unwrap_or(DEFAULT_REQUEUED_BY);
    if let Some(refused) = too_long(ctx, by, reason) {
        return refused;
    }
    match app.queue.cancel_workflow(id, by, reason) {
        Ok(cancelled) => {
            let message = if cancelled.is_empty() {
                format!("Nothing to cancel: every job of workflow {id} had ended.")
            } else {
                let why = because(reason);
                format!(
                    "Workflow {id}: {} job(s) cancelled by {by}{why}.",
                    cancelled.len()
                )
            };
            flash::redirect(&app.secret, &format!("/workflows/{id}"), true, &message)
        }
        Err(e) => error_response(ctx, &e),
    }
}

/// `POST /dead/requeue`: every dead job of one type whose last error contains a text, or is
/// in an error group.
pub(crate) fn bulk_requeue(app: &App, ctx: &Ctx, req: &Request) -> Response {
    let form = req.form();
    let (Some(job_type), Some(reason)) = (form.get("type"), form.get("reason")) else {
        return error_page(
            ctx,
            400,
            "Missing fields",
            "a bulk requeue needs a job type and a reason",
        );
    };
    let mut filter = crate::JobFilter::new().job_type(job_type);
    if let Some(search) = form.get("search") {
        filter = filter.search(search);
    }
    if let Some(group) = form.get("group") {
        filter = filter.error_group(group);
    }
    let by = form.get("by").unwrap_or(DEFAULT_REQUEUED_BY);
    if let Some(refused) = too_long(ctx, by, reason) {
        return refused;
    }
    match app.queue.requeue_dead_where(&filter, by, reason) {
        Ok(pairs) => flash::redirect(
            &app.secret,
            "/dead",
            true,
            &format!(
                "Requeued {} dead {job_type} job(s) as new jobs by {by}: {reason}",
                pairs.len()
            ),
        ),
        Err(e) => error_response(ctx, &e),
    }
}

/// `POST /queues/{name}/pause` and `/resume`.
pub(crate) fn queue_switch(app: &App, ctx: &Ctx, name: &str, pause: bool) -> Response {
    let result = if pause {
        app.queue.pause_queue(name)
    } else {
        app.queue.resume_queue(name)
    };
    match result {
        Ok(()) => flash::redirect(
            &app.secret,
            "/",
            true,
            &format!(
                "Queue {name} {}.",
                if pause {
                    "paused in every worker process"
                } else {
                    "resumed"
                }
            ),
        ),
        Err(e) => error_response(ctx, &e),
    }
}
