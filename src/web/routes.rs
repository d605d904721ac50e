//! The routes, and the checks every request passes first. [`admit`] judges the head alone,
//! before any body is read (so a client without the token cannot make the server wait for,
//! or hold, a body); [`handle`] answers once the body is in. In this order:
//!
//! 1. Without a token, the `Host` header must name a loopback host, so a web page whose
//!    domain an attacker points at 127.0.0.1 (DNS rebinding) cannot read the dashboard.
//! 2. Static assets (`/assets/...`) are public, so the sign-in page is styled.
//! 3. With a token, the request must carry it (bearer header or session cookie): 401. An
//!    address locked out for guessing gets 429 for any token it sends (see `throttle`).
//! 4. Only then is a POST's body read (Content-Length only, at most 64 KiB).
//! 5. A POST must come from our own pages: its `Origin` (when sent) ours, `Sec-Fetch-Site`
//!    not cross-site, and the form's CSRF token that of its session (or cookie): 403,
//!    nothing changed.
//! 6. In read-only mode every POST but sign-in and sign-out is refused: 403.
//!
//! | route | what |
//! | --- | --- |
//! | `GET /` | overview |
//! | `GET /jobs?status=&type=&queue=&search=&before=&page=` | jobs, newest first |
//! | `GET /jobs/{id}` | one job |
//! | `POST /jobs/{id}/retry` · `/cancel` · `/requeue` · `/discard` | act on a job |
//! | `GET /dead?type=&queue=&search=&before=` | dead jobs by error, with bulk requeue |
//! | `POST /dead/requeue` | bulk requeue (type, error text, reason) |
//! | `POST /queues/{name}/pause` · `/resume` | pause or resume a queue |
//! | `GET /workflows?before=` | workflows and batches, newest first |
//! | `GET /workflows/{id}` | one workflow or batch: its graph and its jobs |
//! | `POST /workflows/{id}/cancel` | cancel every job of it that has not ended |
//! | `GET /schedules` | periodic schedules and report runs |
//! | `GET /workers` | the workers registry: who is working, and what waits with nobody to run it |
//! | `GET /endpoints` | webhook endpoints and their breakers (feature `webhook`) |
//! | `POST /endpoints/{id}/enable` · `/disable` | enable or disable an endpoint (feature `webhook`) |
//! | `GET /metrics` | Prometheus text |
//! | `GET /api/...` | JSON (see the api module) |
//! | `GET /login` · `POST /login` · `POST /logout` | token sign-in |

use std::time::Instant;

use crate::queue::metrics;

use super::api;
use super::app::{App, Ctx};
use super::assets;
use super::auth::{self, Access};
use super::csrf;
use super::html::error_page;
use super::pages::{self, actions, parse_id};
use super::server::http::{Method, Request, Response};
use super::server::{Admission, Service};

/// The dashboard as the server sees it.
impl Service for App {
    type Admitted = Access;

    fn admit(&self, request: &Request) -> Admission<Access> {
        admit(self, request)
    }

    fn answer(&self, request: &Request, access: Access) -> Response {
        handle(self, request, access)
    }

    // The accept loop sums up failed sign-ins in the log.
    fn log_due(&self, now: Instant) -> Option<String> {
        self.gate.throttle.log_due(now)
    }

    fn log_pending(&self, now: Instant) -> Option<String> {
        self.gate.throttle.log_pending(now)
    }
}

/// Judges a request by its head alone: host, assets, access. Renders nothing that reads the
/// database, so it needs no turn.
pub(crate) fn admit(app: &App, req: &Request) -> Admission<Access> {
    if !host_allowed(app, req) {
        return Admission::Answer(Response::text(
            421,
            "litejobs: this dashboard answers only to a loopback host name (localhost, 127.0.0.1, [::1]); start it with --token to serve other names\n",
        ));
    }
    let segments = req.segments();
    let path: Vec<&str> = segments.iter().map(String::as_str).collect();
    if let ["assets", name] = path.as_slice() {
        return Admission::Answer(if req.method.is_read() {
            assets::serve(name)
        } else {
            method_not_allowed("GET")
        });
    }
    let api = path.first() == Some(&"api");
    let access = auth::check(&app.gate, req);
    let post = req.method == Method::Post;
    let with_ctx = |render: &dyn Fn(&Ctx) -> Response| match Ctx::new(app, req, access) {
        Ok(ctx) => Admission::Answer(ctx.finish(render(&ctx))),
        Err(e) => Admission::Answer(Response::text(500, &format!("litejobs: {e}\n"))),
    };
    match (access, path.as_slice()) {
        (Access::Throttled(seconds), _) => {
            with_ctx(&|ctx| pages::login::too_many(ctx, seconds, api))
        }
        // Signing in: a locked-out address is answered before its form is read.
        (_, ["login"]) if post => {
            match app
                .gate
                .token
                .as_ref()
                .and(auth::locked_out(&app.gate, req, Instant::now()))
            {
                Some(seconds) => with_ctx(&|ctx| pages::login::too_many(ctx, seconds, false)),
                None => Admission::Proceed {
                    admitted: access,
                    body: true,
                },
            }
        }
        // Signing out without a session revokes nothing: no form to check.
        (Access::Open | Access::Bearer | Access::Denied(_), ["logout"]) if post => {
            Admission::Answer(pages::login::logout(app, access))
        }
        (Access::Denied(reason), p) if !matches!(p, ["login"] | ["logout"]) => {
            with_ctx(&|ctx| pages::login::denied(ctx, req, reason, api))
        }
        _ => Admission::Proceed {
            admitted: access,
            body: post,
        },
    }
}

/// The answer to a request [`admit`] let through, its body read (security headers are
/// added by the server).
pub(crate) fn handle(app: &App, req: &Request, access: Access) -> Response {
    let segments = req.segments();
    let path: Vec<&str> = segments.iter().map(String::as_str).collect();
    let ctx = match Ctx::new(app, req, access) {
        Ok(ctx) => ctx,
        Err(e) => return Response::text(500, &format!("litejobs: {e}\n")),
    };
    let resp = route(app, &ctx, req, &path);
    ctx.finish(resp)
}

fn route(app: &App, ctx: &Ctx, req: &Request, path: &[&str]) -> Response {
    let api = path.first() == Some(&"api");
    if req.method == Method::Post {
        if !csrf::origin_allowed(req, &app.addr.to_string()) {
            return refused(
                ctx,
                api,
                "cross-origin request refused (its Origin is not this dashboard)",
            );
        }
        if !csrf::same_origin(req) {
            return refused(ctx, api, "cross-site request refused");
        }
        // A request carrying the bearer token is a script's: no browser attaches an
        // `Authorization: Bearer` header on its own, so another site cannot forge one.
        if !matches!(ctx.access, Access::Bearer) && !csrf::verify(&app.secret, req, ctx.access) {
            return refused(
                ctx,
                api,
                "the form's CSRF token is missing or wrong (reload the page and try again)",
            );
        }
    }
    match (req.method, path) {
        (Method::Get | Method::Head, ["login"]) => return pages::login::show(app, ctx, req),
        (Method::Post, ["login"]) => return pages::login::submit(app, ctx, req),
        (Method::Post, ["logout"]) => return pages::login::logout(app, ctx.access),
        _ => {}
    }
    // admit() answered every request without access but these.
    if !ctx.access.allowed() {
        return pages::login::denied(ctx, req, "a token is required", api);
    }
    if req.method == Method::Post && app.read_only {
        return refused(ctx, api, "the dashboard is read-only");
    }
    let read = req.method.is_read();
    let post = req.method == Method::Post;
    match path {
        [] if read => {
            pages::overview::render(app, ctx).unwrap_or_else(|e| pages::error_response(ctx, &e))
        }
        ["jobs"] if read => pages::jobs::render(app, ctx, req),
        ["jobs", id] if read => match parse_id(id) {
            Some(id) => pages::job::render(app, ctx, id),
            None => not_found(ctx, api),
        },
        ["jobs", id, action @ ("retry" | "cancel" | "requeue" | "discard")] if post => {
            match parse_id(id) {
                Some(id) => actions::job_action(app, ctx, req, id, action),
                None => not_found(ctx, api),
            }
        }
        ["dead"] if read => pages::dead::render(app, ctx, req),
        ["dead", "requeue"] if post => actions::bulk_requeue(app, ctx, req),
        ["queues", name, switch @ ("pause" | "resume")] if post => {
            actions::queue_switch(app, ctx, name, *switch == "pause")
        }
        ["workflows"] if read => pages::workflows::render(app, ctx, req),
        ["workflows", id] if read => match parse_id(id) {
            Some(id) => pages::workflow::render(app, ctx, id),
            None => not_found(ctx, api),
        },
        ["workflows", id, "cancel"] if post => match parse_id(id) {
            Some(id) => actions::workflow_cancel(app, ctx, req, id),
            None => not_found(ctx, api),
        },
        ["schedules"] if read => pages::schedules::render(app, ctx),
        ["workers"] if read => pages::workers::render(app, ctx),
        #[cfg(feature = "webhook")]
        ["endpoints"] if read => pages::endpoints::render(app, ctx),
        #[cfg(feature = "webhook")]
        ["endpoints", id, switch @ ("enable" | "disable")] if post => match parse_id(id) {
            Some(id) => pages::endpoints::switch(app, ctx, id, *switch == "enable"),
            None => not_found(ctx, api),
        },
        ["metrics"] if read => match metrics::prometheus_text(&app.queue) {
            Ok(text) => Response::bytes(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                text.into_bytes(),
            ),
            Err(e) => Response::text(500, &format!("litejobs: {e}\n")),
        },
        ["api", "stats"] if read => api::stats(app),
        ["api", "overview"] if read => api::live(app),
        ["api", "jobs"] if read => api::jobs(app, req, false),
        ["api", "dead"] if read => api::jobs(app, req, true),
        ["api", "jobs", id] if read => match parse_id(id) {
            Some(id) => api::job(app, id),
            None => not_found(ctx, api),
        },
        ["api", "workflows"] if read => api::workflows(app, req),
        ["api", "workflows", id] if read => match parse_id(id) {
            Some(id) => api::workflow(app, id),
            None => not_found(ctx, api),
        },
        []
        | ["jobs"]
        | ["jobs", _]
        | ["dead"]
        | ["workflows"]
        | ["workflows", _]
        | ["schedules"]
        | ["workers"]
        | ["metrics"]
        | ["api", "stats" | "overview" | "jobs" | "dead" | "workflows"]
        | ["api", "jobs" | "workflows", _] => method_not_allowed("GET, HEAD"),
        ["jobs", _, _]
        | ["workflows", _, "cancel"]
        | ["dead", "requeue"]
        | ["queues", _, _]
        | ["login"]
        | ["logout"] => method_not_allowed("POST"),
        #[cfg(feature = "webhook")]
        ["endpoints"] => method_not_allowed("GET, HEAD"),
        #[cfg(feature = "webhook")]
        ["endpoints", _, "enable" | "disable"] => method_not_allowed("POST"),
        _ => not_found(ctx, api),
    }
}

fn refused(ctx: &Ctx, api: bool, reason: &str) -> Response {
    if api {
        Response::json_error(403, reason)
    } else {
        error_page(ctx, 403, "Refused", reason)
    }
}

fn not_found(ctx: &Ctx, api: bool) -> Response {
    if api {
        Response::json_error(404, "no such page")
    } else {
        error_page(ctx, 404, "Not found", "There is no such page.")
    }
}

fn method_not_allowed(allow: &str) -> Response {
    Response::text(405, "litejobs: method not allowed\n").with_header("Allow", allow)
}

/// Without a token, only loopback host names (or the bound address) are served: see the
/// module docs. A request without `Host` (HTTP/1.0 from a local script) is let through: a
/// browser always sends one.
fn host_allowed(app: &App, req: &Request) -> bool {
    if app.gate.token.is_some() {
        return true;
    }
    let Some(host) = req.header("host") else {
        return true;
    };
    let name = match host.rsplit_once(':') {
        // `[::1]:8080`, `127.0.0.1:8080`, `localhost:8080`; a bare `::1` has colons too.
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !name.ends_with(':') => {
            name
        }
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match name.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback() || ip == app.addr.ip(),
        Err(_) => false,
    }
}
