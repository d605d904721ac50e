//! Token access. Without a token the dashboard is open to whoever reaches its loopback
//! address. With one, every request but the login page and the static assets must carry it:
//! as `Authorization: Bearer TOKEN` (scripts), or as the session cookie the login form sets
//! (browsers). The cookie holds a signed expiry, never the token itself.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::Result;

use super::http::Request;
use super::keys::{constant_time_eq, random_text, Secret};

/// The session cookie set by the login form.
pub(crate) const SESSION_COOKIE: &str = "litejobs_session";
/// How long a login lasts: 12 hours.
pub(crate) const SESSION_TTL_MS: i64 = 12 * 3_600_000;
const DOMAIN: &str = "session";

/// Who is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// No token is configured.
    Open,
    /// The right bearer token.
    Bearer,
    /// A valid session cookie from the login form.
    Session,
    /// Neither: the reason, for the 401 answer.
    Denied(&'static str),
}

impl Access {
    pub(crate) fn allowed(self) -> bool {
        !matches!(self, Access::Denied(_))
    }
}

/// Judges a request against the configured token.
pub(crate) fn check(token: Option<&str>, secret: &Secret, req: &Request) -> Access {
    let Some(token) = token else {
        return Access::Open;
    };
    if let Some(header) = req.header("authorization") {
        let given = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "));
        return match given {
            Some(given) if token_matches(token, given.trim()) => Access::Bearer,
            Some(_) => Access::Denied("wrong token"),
            None => Access::Denied("the Authorization header must be `Bearer TOKEN`"),
        };
    }
    match req.cookie(SESSION_COOKIE) {
        Some(value) if session_valid(secret, value, wall_clock_ms()) => Access::Session,
        Some(_) => Access::Denied("the session expired; sign in again"),
        None => Access::Denied("a token is required"),
    }
}

/// The configured token equals the given one (constant time).
pub(crate) fn token_matches(token: &str, given: &str) -> bool {
    constant_time_eq(token.as_bytes(), given.as_bytes())
}

/// A new session value: `expiry.nonce.signature`, valid for [`SESSION_TTL_MS`].
pub(crate) fn new_session(secret: &Secret) -> Result<String> {
    let data = format!(
        "{}.{}",
        wall_clock_ms().saturating_add(SESSION_TTL_MS),
        random_text(16)?
    );
    let signature = secret.sign(DOMAIN, &data);
    Ok(format!("{data}.{signature}"))
}

/// True for a session value this process signed that has not expired by `now_ms`.
pub(crate) fn session_valid(secret: &Secret, value: &str, now_ms: i64) -> bool {
    let Some((data, signature)) = value.rsplit_once('.') else {
        return false;
    };
    if !secret.verify(DOMAIN, data, signature) {
        return false;
    }
    data.split('.')
        .next()
        .and_then(|expiry| expiry.parse::<i64>().ok())
        .is_some_and(|expiry| now_ms < expiry)
}

/// The `Set-Cookie` value for a session.
pub(crate) fn session_cookie(value: &str) -> String {
    format!(
        "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_TTL_MS / 1000
    )
}

/// The `Set-Cookie` value that signs a browser out.
pub(crate) fn cleared_session_cookie() -> String {
    format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// Sessions expire by the wall clock, whatever clock the queue runs on.
fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::http::Method;

    fn get(headers: &[(&str, &str)]) -> Request {
        let headers = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Request::new(Method::Get, "/", headers, Vec::new())
    }

    #[test]
    fn bearer_tokens_and_sessions() -> Result<()> {
        let secret = Secret::random()?;
        assert_eq!(check(None, &secret, &get(&[])), Access::Open);
        let t = Some("s3cret");
        assert_eq!(
            check(t, &secret, &get(&[("Authorization", "Bearer s3cret")])),
            Access::Bearer
        );
        assert!(!check(t, &secret, &get(&[("Authorization", "Bearer s3cre")])).allowed());
        assert!(!check(t, &secret, &get(&[("Authorization", "s3cret")])).allowed());
        assert!(!check(t, &secret, &get(&[])).allowed());

        let session = new_session(&secret)?;
        assert!(!session.contains("s3cret"));
        let cookie = format!("{SESSION_COOKIE}={session}");
        assert_eq!(
            check(t, &secret, &get(&[("Cookie", &cookie)])),
            Access::Session
        );
        let forged = format!("{SESSION_COOKIE}=99999999999999.x.{}", "A".repeat(43));
        assert!(!check(t, &secret, &get(&[("Cookie", &forged)])).allowed());
        let other = Secret::random()?;
        assert!(!check(t, &other, &get(&[("Cookie", &cookie)])).allowed());
        Ok(())
    }

    #[test]
    fn sessions_expire() -> Result<()> {
        let secret = Secret::random()?;
        let session = new_session(&secret)?;
        let now = wall_clock_ms();
        assert!(session_valid(&secret, &session, now));
        assert!(!session_valid(&secret, &session, now + SESSION_TTL_MS + 1));
        Ok(())
    }
}
