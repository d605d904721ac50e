//! Signing in with the token (only when one is configured): `GET /login` shows the form,
//! `POST /login` checks the token, starts a session and sets its cookie, `POST /logout` ends
//! the session on the server and clears the cookie. A page asked for without access answers
//! 401 with the same form, which comes back to it.

use std::fmt::Write as _;
use std::time::Instant;

use crate::web::app::{App, Ctx};
use crate::web::auth::{self, Access};
use crate::web::html::{csrf_field, esc, page, Nav};
use crate::web::server::http::{Request, Response};

/// `next` (already percent-decoded) if it is a plain path on this site, `/` otherwise. Never
/// another host: `//evil` and `/\evil` leave the site, and browsers drop tabs and line
/// breaks from a URL, so `/<TAB>/evil` does too; and never a control character, which in a
/// `Location` header would end it and start another.
fn local_path(next: Option<&str>) -> &str {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && !n.chars().any(char::is_control) =>
        {
            n
        }
        _ => "/",
    }
}

/// The sign-in page with `status` (200 when asked for, 401 when access was denied).
pub(crate) fn form(ctx: &Ctx, status: u16, next: &str, problem: Option<&str>) -> Response {
    let mut body = String::from("<section class=\"login\"><h1>Sign in</h1>\n");
    if let Some(problem) = problem {
        let _ = write!(body, "<p class=\"flash flash-error\">{}</p>", esc(problem));
    }
    let _ = write!(
        body,
        "<form method=\"post\" action=\"/login\">{}<input type=\"hidden\" name=\"next\" value=\"{}\">\
         <label>Token <input type=\"password\" name=\"token\" autocomplete=\"current-password\" required autofocus></label>\
         <button class=\"btn btn-primary\">Sign in</button></form>\
         <p class=\"muted small\">The token the dashboard was started with (<code>litejobs web --token-file</code>). \
         Scripts send it as <code>Authorization: Bearer TOKEN</code> instead.</p></section>",
        csrf_field(ctx),
        esc(local_path(Some(next)))
    );
    Response::html(status, page(ctx, Nav::None, "Sign in", "", &body))
}

/// `GET /login`.
pub(crate) fn show(app: &App, ctx: &Ctx, req: &Request) -> Response {
    if app.gate.token.is_none() || ctx.access.allowed() {
        return Response::see_other(local_path(req.query("next")));
    }
    form(ctx, 200, local_path(req.query("next")), None)
}

/// `POST /login` (its CSRF token already checked).
pub(crate) fn submit(app: &App, ctx: &Ctx, req: &Request) -> Response {
    let form_data = req.form();
    let next = local_path(form_data.get("next")).to_string();
    let Some(token) = &app.gate.token else {
        return Response::see_other(&next);
    };
    let now = Instant::now();
    if let Some(seconds) = auth::locked_out(&app.gate, req, now) {
        return too_many(ctx, seconds, false);
    }
    let given = form_data.get("token").unwrap_or("");
    if !auth::token_matches(token, given) {
        auth::failed_sign_in(&app.gate, req, now, "sign-in form");
        return form(ctx, 401, &next, Some("Wrong token."));
    }
    if let Some(ip) = req.peer {
        app.gate.throttle.succeeded(ip, now);
    }
    // A browser signing in again leaves its old session behind: end it.
    if let Access::Session(old) = ctx.access {
        app.gate.sessions.revoke(old);
    }
    match app.gate.sessions.create(now) {
        Ok((session, _)) => {
            Response::see_other(&next).with_header("Set-Cookie", &auth::session_cookie(&session))
        }
        Err(e) => super::error_response(ctx, &e),
    }
}

/// `POST /logout`: ends the session (its CSRF token already checked when it has one).
pub(crate) fn logout(app: &App, access: Access) -> Response {
    if let Access::Session(key) = access {
        app.gate.sessions.revoke(key);
    }
    Response::see_other("/login").with_header("Set-Cookie", &auth::cleared_session_cookie())
}

/// 429 for a client locked out for guessing the token (its network's guesses, or everyone's):
/// `seconds` until it may try again.
pub(crate) fn too_many(ctx: &Ctx, seconds: u64, api: bool) -> Response {
    let message = format!("too many wrong tokens; try again in {seconds}s");
    let resp = if api {
        Response::json_error(429, &message)
    } else {
        crate::web::html::error_page(ctx, 429, "Too many attempts", &message)
    };
    resp.with_header("Retry-After", &seconds.to_string())
}

/// The answer to a request without access: JSON for `/api/`, the sign-in form otherwise.
pub(crate) fn denied(ctx: &Ctx, req: &Request, reason: &str, api: bool) -> Response {
    let resp = if api {
        Response::json_error(401, &format!("unauthorized: {reason}"))
    } else {
        let next = if req.method.is_read() { req.url() } else { "/" };
        let problem = match ctx.access {
            Access::Denied("a token is required") => None,
            _ => Some(reason),
        };
        form(ctx, 401, next, problem)
    };
    resp.with_header("WWW-Authenticate", "Bearer realm=\"litejobs\"")
}

#[cfg(test)]
mod tests {
    use super::local_path;

    #[test]
    fn next_never_leaves_the_site() {
        assert_eq!(local_path(Some("/jobs?status=dead")), "/jobs?status=dead");
        assert_eq!(local_path(Some("//evil.example/")), "/");
        assert_eq!(local_path(Some("/\\evil.example")), "/");
        assert_eq!(local_path(Some("https://evil.example/")), "/");
        assert_eq!(local_path(None), "/");
        assert_eq!(local_path(Some("/\r\nSet-Cookie: x=1")), "/");
        assert_eq!(local_path(Some("/\t/evil.example:8080/x")), "/");
        assert_eq!(local_path(Some("/ok\u{0}")), "/");
        assert_eq!(local_path(Some("/ok\u{85}")), "/");
        assert_eq!(local_path(Some("/jobs/\\x")), "/");
        assert_eq!(local_path(Some("")), "/");
        assert_eq!(local_path(Some("/dead")), "/dead");
    }
}
