//! Signing in with the token (only when one is configured): `GET /login` shows the form,
//! `POST /login` checks the token and sets the session cookie, `POST /logout` clears it. A
//! page asked for without access answers 401 with the same form, which comes back to it.

use std::fmt::Write as _;

use crate::web::app::{App, Ctx};
use crate::web::auth::{self, Access};
use crate::web::html::{csrf_field, esc, page, Nav};
use crate::web::http::{Request, Response};

/// `next` if it is a path on this site, `/` otherwise (never another host: `//evil` or
/// `/\evil` would leave the site).
fn local_path(next: Option<&str>) -> &str {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n,
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
         <p class=\"muted small\">The token the dashboard was started with (<code>litejobs web --token</code>). \
         Scripts send it as <code>Authorization: Bearer TOKEN</code> instead.</p></section>",
        csrf_field(ctx),
        esc(local_path(Some(next)))
    );
    Response::html(status, page(ctx, Nav::None, "Sign in", "", &body))
}

/// `GET /login`.
pub(crate) fn show(app: &App, ctx: &Ctx, req: &Request) -> Response {
    if app.token.is_none() || ctx.access.allowed() {
        return Response::see_other(local_path(req.query("next")));
    }
    form(ctx, 200, local_path(req.query("next")), None)
}

/// `POST /login` (its CSRF token already checked).
pub(crate) fn submit(app: &App, ctx: &Ctx, req: &Request) -> Response {
    let form_data = req.form();
    let next = local_path(form_data.get("next")).to_string();
    let Some(token) = &app.token else {
        return Response::see_other(&next);
    };
    let given = form_data.get("token").unwrap_or("");
    if !auth::token_matches(token, given) {
        log::warn!("litejobs web: sign-in with a wrong token");
        return form(ctx, 401, &next, Some("Wrong token."));
    }
    match auth::new_session(&app.secret) {
        Ok(session) => {
            Response::see_other(&next).with_header("Set-Cookie", &auth::session_cookie(&session))
        }
        Err(e) => super::error_response(ctx, &e),
    }
}

/// `POST /logout`.
pub(crate) fn logout(_ctx: &Ctx) -> Response {
    Response::see_other("/login").with_header("Set-Cookie", &auth::cleared_session_cookie())
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
    }
}
