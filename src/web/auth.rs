//! Token access. Without a token the dashboard is open to whoever reaches its loopback
//! address. With one, every request but the sign-in page and the static assets must carry it:
//! as `Authorization: Bearer TOKEN` (scripts), or as the session cookie the sign-in form sets
//! (browsers). The cookie names a session kept on the server (`sessions`), never the
//! token itself. Wrong tokens are counted per network and in all (`throttle`) and logged
//! with the address, never with what was sent.

use std::time::Instant;

use super::keys::constant_time_eq;
use super::server::http::Request;
use super::sessions::{SessionKey, Sessions, SESSION_TTL};
use super::throttle::Throttle;

/// The session cookie set by the sign-in form.
pub(crate) const SESSION_COOKIE: &str = "litejobs_session";

/// Who is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// No token is configured.
    Open,
    /// The right bearer token.
    Bearer,
    /// A live session from the sign-in form.
    Session(SessionKey),
    /// Neither: the reason, for the 401 answer.
    Denied(&'static str),
    /// A token was sent from an address locked out for guessing: seconds left.
    Throttled(u64),
}

impl Access {
    pub(crate) fn allowed(self) -> bool {
        matches!(self, Access::Open | Access::Bearer | Access::Session(_))
    }
}

/// Who may come in: what [`check`] judges a request against.
pub(crate) struct Gate {
    /// The token; none: the dashboard is open (on loopback only).
    pub(crate) token: Option<String>,
    /// Signed-in browsers.
    pub(crate) sessions: Sessions,
    /// Wrong tokens by client address.
    pub(crate) throttle: Throttle,
}

/// Judges a request against the configured token (counting a wrong bearer token).
pub(crate) fn check(gate: &Gate, req: &Request) -> Access {
    let Some(token) = gate.token.as_deref() else {
        return Access::Open;
    };
    let now = Instant::now();
    if let Some(header) = req.header("authorization") {
        let given = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "));
        let Some(given) = given else {
            return Access::Denied("the Authorization header must be `Bearer TOKEN`");
        };
        if let Some(left) = locked_out(gate, req, now) {
            return Access::Throttled(left);
        }
        if token_matches(token, given.trim()) {
            if let Some(ip) = req.peer {
                gate.throttle.succeeded(ip, now);
            }
            return Access::Bearer;
        }
        failed_sign_in(gate, req, now, "bearer token");
        return Access::Denied("wrong token");
    }
    match req.cookie(SESSION_COOKIE) {
        Some(value) => match gate.sessions.find(value, now) {
            Some(key) => Access::Session(key),
            None => Access::Denied("the session ended; sign in again"),
        },
        None => Access::Denied("a token is required"),
    }
}

/// Seconds left of the lock-out of the request's address, if it is locked out.
pub(crate) fn locked_out(gate: &Gate, req: &Request, now: Instant) -> Option<u64> {
    let left = gate.throttle.locked(req.peer?, now)?;
    // Rounded up: a client that waits this long is let in.
    Some(left.as_secs() + u64::from(left.subsec_nanos() > 0))
}

/// Counts a wrong token (`how`: "bearer token", "sign-in form") and logs what the throttle
/// says to (a bounded number of lines, however many come). The log has the client's address
/// and never what it sent.
pub(crate) fn failed_sign_in(gate: &Gate, req: &Request, now: Instant, how: &str) {
    let Some(ip) = req.peer else {
        log::warn!("litejobs web: failed sign-in ({how}) from an unknown address");
        return;
    };
    for line in gate.throttle.failed(ip, now, how) {
        log::warn!("{line}");
    }
}

/// The configured token equals the given one (constant time).
pub(crate) fn token_matches(token: &str, given: &str) -> bool {
    constant_time_eq(token.as_bytes(), given.as_bytes())
}

/// The `Set-Cookie` value for a session.
pub(crate) fn session_cookie(value: &str) -> String {
    format!(
        "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_TTL.as_secs()
    )
}

/// The `Set-Cookie` value that signs a browser out.
pub(crate) fn cleared_session_cookie() -> String {
    format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::server::http::Method;
    use crate::web::test_app;

    fn get(headers: &[(&str, &str)]) -> Request {
        let headers = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut req = Request::new(Method::Get, "/", headers, Vec::new());
        req.peer = Some(std::net::IpAddr::from([192, 0, 2, 7]));
        req
    }

    #[test]
    fn bearer_tokens_and_sessions() -> crate::Result<()> {
        let open = test_app(None)?;
        assert_eq!(check(&open.gate, &get(&[])), Access::Open);
        let app = test_app(Some("s3cret-s3cret-s3cret"))?;
        assert_eq!(
            check(
                &app.gate,
                &get(&[("Authorization", "Bearer s3cret-s3cret-s3cret")])
            ),
            Access::Bearer
        );
        assert!(!check(&app.gate, &get(&[("Authorization", "Bearer s3cret")])).allowed());
        assert!(!check(
            &app.gate,
            &get(&[("Authorization", "s3cret-s3cret-s3cret")])
        )
        .allowed());
        assert!(!check(&app.gate, &get(&[])).allowed());

        let (value, key) = app.gate.sessions.create(Instant::now())?;
        let cookie = format!("{SESSION_COOKIE}={value}");
        assert_eq!(
            check(&app.gate, &get(&[("Cookie", &cookie)])),
            Access::Session(key)
        );
        let forged = format!("{SESSION_COOKIE}={}", "A".repeat(43));
        assert!(!check(&app.gate, &get(&[("Cookie", &forged)])).allowed());
        let other = test_app(Some("s3cret-s3cret-s3cret"))?;
        assert!(!check(&other.gate, &get(&[("Cookie", &cookie)])).allowed());
        app.gate.sessions.revoke(key);
        assert!(!check(&app.gate, &get(&[("Cookie", &cookie)])).allowed());
        Ok(())
    }

    #[test]
    fn a_locked_out_address_is_not_even_checked() -> crate::Result<()> {
        let app = test_app(Some("s3cret-s3cret-s3cret"))?;
        let wrong = get(&[("Authorization", "Bearer wrong")]);
        for _ in 0..crate::web::throttle::MAX_FAILURES {
            assert_eq!(check(&app.gate, &wrong), Access::Denied("wrong token"));
        }
        let right = get(&[("Authorization", "Bearer s3cret-s3cret-s3cret")]);
        assert!(matches!(check(&app.gate, &right), Access::Throttled(s) if s > 0));
        Ok(())
    }
}
