//! `GET /endpoints`: the webhook endpoints (Cargo feature `webhook`), each with its state,
//! circuit breaker (closed, open until when, half-open), failures in a row, latest failure
//! and rate limit; and `POST /endpoints/{id}/enable` · `/disable`, the page's two buttons.
//!
//! Secrets never reach the page: [`Endpoint`] keeps them behind a method this file never
//! calls. URLs show as [`shown_url`] makes them: the host requests go to, without the
//! password, query string and fragment, which often carry tokens.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::builtin::webhook::{limit_key, shown_url, Endpoint, Endpoints, JOB_TYPE};
use crate::limits::{Breaker, BreakerState, BreakerStatus};

use crate::web::app::{App, Ctx};
use crate::web::flash;
use crate::web::format::{ago, clip, count, utc};
use crate::web::html::{action_button, esc, page, Nav};
use crate::web::server::http::{query_string, Response};

use super::error_response;

/// Why an endpoint disabled with the page's button is disabled (kept on the endpoint and
/// in the error of each delivery that goes dead meanwhile).
const DISABLED_HERE: &str = "disabled from the dashboard";

/// `GET /endpoints`.
pub(crate) fn render(app: &App, ctx: &Ctx) -> Response {
    let endpoints = match Endpoints::new(&app.queue).list() {
        Ok(e) => e,
        Err(e) => return error_response(ctx, &e),
    };
    // One read for every breaker; an endpoint's is under `limit_key(id)`.
    let breakers: HashMap<String, BreakerStatus> = match Breaker::list(&app.queue) {
        Ok(list) => list.into_iter().map(|b| (b.key.clone(), b)).collect(),
        Err(e) => return error_response(ctx, &e),
    };
    let now = ctx.now;
    let deliveries = |status: &str| {
        format!(
            "/jobs{}",
            query_string(&[("type", JOB_TYPE), ("status", status)])
        )
    };
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<div class=\"page-head\"><h1>Webhook endpoints</h1><span class=\"muted\">{} registered · \
         <a href=\"{}\">retrying deliveries</a> · <a href=\"{}\">dead deliveries</a></span></div>",
        count(i64::try_from(endpoints.len()).unwrap_or(i64::MAX)),
        esc(&deliveries("failed")),
        esc(&deliveries("dead")),
    );
    if endpoints.is_empty() {
        body.push_str(
            "<p class=\"empty\">No webhook endpoints yet: add one with \
             <code>litejobs webhook add URL</code> or <code>Endpoints::add</code>.</p>\n",
        );
    } else {
        body.push_str(
            "<table class=\"grid endpoints\"><thead><tr><th class=\"num\">Id</th><th>URL</th>\
             <th>State</th><th>Circuit breaker</th><th class=\"num\">Failures in a row</th>\
             <th>Latest failure</th><th>Rate limit</th><th></th></tr></thead><tbody>\n",
        );
        for endpoint in &endpoints {
            let breaker = breakers.get(&limit_key(endpoint.id));
            row(&mut body, ctx, endpoint, breaker, now);
        }
        body.push_str(
            "</tbody></table>\n<p class=\"muted small\">While a breaker is open, the \
             endpoint's deliveries wait without spending attempts; when its cool-down ends one \
             delivery probes, and its result closes or reopens the breaker. A disabled \
             endpoint's deliveries go dead at once.</p>\n",
        );
    }
    Response::html(
        200,
        page(ctx, Nav::Endpoints, "Webhook endpoints", "", &body),
    )
}

/// One endpoint's row.
fn row(
    body: &mut String,
    ctx: &Ctx,
    endpoint: &Endpoint,
    breaker: Option<&BreakerStatus>,
    now: i64,
) {
    let when = |ms: i64| {
        format!(
            "<span title=\"{}\">{}</span>",
            esc(&utc(ms)),
            esc(&ago(ms, now))
        )
    };
    let description = if endpoint.description.is_empty() {
        String::new()
    } else {
        format!(
            "<div class=\"muted small\">{}</div>",
            esc(&clip(&endpoint.description, 200))
        )
    };
    let state = if endpoint.enabled {
        "<span class=\"badge badge-active\">enabled</span>".to_string()
    } else {
        format!(
            "<span class=\"badge badge-paused\">disabled</span> <span class=\"muted small\">{}</span>",
            esc(&clip(
                endpoint
                    .disabled_reason
                    .as_deref()
                    .unwrap_or("no reason given"),
                200
            ))
        )
    };
    let breaker_cell = match breaker.map(|b| (b.state, b.open_until)) {
        None | Some((BreakerState::Closed, _)) => {
            "<span class=\"badge badge-active\">closed</span>".to_string()
        }
        Some((BreakerState::Open, Some(until))) if until > now => format!(
            "<span class=\"badge badge-dead\">open</span> until {}",
            when(until)
        ),
        Some((BreakerState::Open, _)) => "<span class=\"badge badge-dead\">open</span> \
             <span class=\"muted small\">cool-down over: the next delivery probes</span>"
            .to_string(),
        Some((BreakerState::HalfOpen, until)) => format!(
            "<span class=\"badge badge-failed\">half-open</span> <span class=\"muted small\">\
             one delivery probes{}</span>",
            until.map_or_else(String::new, |u| format!(", its turn lapses {}", when(u)))
        ),
    };
    let latest = match breaker.and_then(|b| b.last_error.as_deref().map(|e| (e, b))) {
        Some((error, b)) => format!(
            "<span class=\"error-text\">{}</span> <span class=\"muted small\">({})</span>",
            esc(&clip(error, 200)),
            when(b.updated_at)
        ),
        None => "–".to_string(),
    };
    let action = format!("/endpoints/{}", endpoint.id);
    let button = if endpoint.enabled {
        action_button(
            ctx,
            &format!("{action}/disable"),
            "Disable",
            "btn-small btn-quiet",
            Some("Disable this endpoint? Its deliveries go dead until it is enabled again."),
        )
    } else {
        action_button(
            ctx,
            &format!("{action}/enable"),
            "Enable",
            "btn-small",
            None,
        )
    };
    let _ = writeln!(
        body,
        "<tr><td class=\"num\">{}</td><td class=\"wrap-cell\"><code>{}</code>{description}</td>\
         <td>{state}</td><td>{breaker_cell}</td><td class=\"num\">{}</td>\
         <td class=\"wrap-cell\">{latest}</td><td>{}</td><td>{button}</td></tr>",
        endpoint.id,
        esc(&shown_url(&endpoint.url)),
        count(breaker.map_or(0, |b| b.failures)),
        esc(&endpoint.rate_text()),
    );
}

/// `POST /endpoints/{id}/enable` and `/disable`.
pub(crate) fn switch(app: &App, ctx: &Ctx, id: i64, enable: bool) -> Response {
    let endpoints = Endpoints::new(&app.queue);
    let result = if enable {
        endpoints.enable(id)
    } else {
        endpoints.disable(id, DISABLED_HERE)
    };
    match result {
        Ok(()) => flash::redirect(
            &app.secret,
            "/endpoints",
            true,
            &if enable {
                format!("Webhook endpoint {id} enabled.")
            } else {
                format!(
                    "Webhook endpoint {id} disabled: its deliveries go dead until it is \
                     enabled again."
                )
            },
        ),
        Err(e) => error_response(ctx, &e),
    }
}
