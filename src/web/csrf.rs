//! Cross-site request forgery defence for every POST, in three independent lines:
//!
//! 1. A signed-in browser's forms carry a token that is the process key's HMAC of its
//!    session, so a token is good only with the session it was made for: one taken from
//!    another session (another browser, or the same browser before it signed in again) is
//!    refused. Other browsers (no token configured, or not signed in yet) get a random
//!    `litejobs_csrf` cookie (HttpOnly, SameSite=Strict) on their first page, and their
//!    token is the HMAC of that cookie. A POST is accepted only when its token matches. A
//!    page on another origin (another port of localhost included, which counts as the same
//!    *site*) can make a browser send the cookies, but can neither read them nor read our
//!    pages, so it cannot know the token.
//! 2. A POST whose `Origin` header names another origin is refused ([`origin_allowed`]).
//! 3. A POST the browser marks as cross-site (`Sec-Fetch-Site`) is refused ([`same_origin`]).
//!
//! A POST with the right `Authorization: Bearer` token needs no form token (line 1): a
//! browser never sends that header unless a page's script sets it, and a page on another
//! origin can neither know the token nor send the header here without a CORS grant, which
//! the dashboard never gives. Lines 2 and 3 still apply.

use crate::error::Result;

use super::auth::Access;
use super::keys::{random_text, Secret};
use super::server::http::Request;

/// The cookie holding the browser's CSRF value.
pub(crate) const COOKIE: &str = "litejobs_csrf";
/// The hidden form field holding the token.
pub(crate) const FIELD: &str = "csrf";
const DOMAIN: &str = "csrf";
const SESSION_DOMAIN: &str = "csrf-session";
/// Random bytes in a cookie value (43 characters of base64).
const COOKIE_BYTES: usize = 32;

/// The token to put in this response's forms, and the cookie to set when the browser had none.
#[derive(Debug, Clone)]
pub(crate) struct Csrf {
    pub(crate) token: String,
    pub(crate) set_cookie: Option<String>,
}

/// The browser's cookie value, when it has a well-formed one.
fn cookie_value(req: &Request) -> Option<&str> {
    req.cookie(COOKIE).filter(|v| {
        v.len() == 43
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// The token for this request's session or browser, making the browser a cookie first if it
/// needs one and has none.
pub(crate) fn for_request(secret: &Secret, req: &Request, access: Access) -> Result<Csrf> {
    if let Access::Session(key) = access {
        return Ok(Csrf {
            token: secret.sign(SESSION_DOMAIN, &key.as_text()),
            set_cookie: None,
        });
    }
    if let Some(value) = cookie_value(req) {
        return Ok(Csrf {
            token: secret.sign(DOMAIN, value),
            set_cookie: None,
        });
    }
    let value = random_text(COOKIE_BYTES)?;
    Ok(Csrf {
        token: secret.sign(DOMAIN, &value),
        set_cookie: Some(format!(
            "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict"
        )),
    })
}

/// True when the POSTed form's token belongs to the session (or, without one, to the
/// cookie) the browser sent with it.
pub(crate) fn verify(secret: &Secret, req: &Request, access: Access) -> bool {
    let form = req.form();
    let Some(token) = form.get(FIELD) else {
        return false;
    };
    match access {
        Access::Session(key) => secret.verify(SESSION_DOMAIN, &key.as_text(), token),
        _ => cookie_value(req).is_some_and(|cookie| secret.verify(DOMAIN, cookie, token)),
    }
}

/// False for a request the browser itself marks as sent by another site (`Sec-Fetch-Site`),
/// checked before the token as a second, independent line. Clients that do not send the
/// header (older browsers, scripts) are judged by the token alone.
pub(crate) fn same_origin(req: &Request) -> bool {
    !matches!(req.header("sec-fetch-site"), Some(site) if site != "same-origin" && site != "none")
}

/// False for a request whose `Origin` header names another origin than the one it was sent
/// to (its `Host`, or `bound` without one): browsers send it with every POST, and a page
/// elsewhere cannot forge it. `null` (sandboxed frames, some redirects) is refused too.
/// Without the header (scripts, older browsers) the token decides alone. The scheme is not
/// compared: behind a TLS proxy the browser says `https` to a server that speaks `http`.
pub(crate) fn origin_allowed(req: &Request, bound: &str) -> bool {
    let Some(origin) = req.header("origin") else {
        return true;
    };
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    let Some(authority) = authority else {
        return false;
    };
    let host = req.header("host").unwrap_or(bound);
    authority.eq_ignore_ascii_case(host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::server::http::Method;

    fn post(cookie: Option<&str>, token: Option<&str>) -> Request {
        let headers = cookie
            .map(|c| vec![("Cookie".to_string(), format!("{COOKIE}={c}"))])
            .unwrap_or_default();
        let body = token.map(|t| format!("{FIELD}={t}")).unwrap_or_default();
        Request::new(Method::Post, "/jobs/1/retry", headers, body.into_bytes())
    }

    #[test]
    fn a_token_is_good_only_with_its_own_cookie() -> Result<()> {
        let secret = Secret::random()?;
        let anon = Access::Denied("a token is required");
        let verify = |secret: &Secret, req: &Request| verify(secret, req, anon);
        let first = for_request(&secret, &post(None, None), anon)?;
        let cookie = first
            .set_cookie
            .as_deref()
            .and_then(|c| c.split(';').next())
            .and_then(|c| c.split_once('='))
            .map(|(_, v)| v.to_string())
            .unwrap_or_default();
        assert!(first
            .set_cookie
            .as_deref()
            .is_some_and(|c| c.contains("HttpOnly") && c.contains("SameSite=Strict")));
        // The same browser keeps its cookie and gets the same token.
        let again = for_request(&secret, &post(Some(&cookie), None), anon)?;
        assert!(again.set_cookie.is_none());
        assert_eq!(again.token, first.token);

        assert!(verify(&secret, &post(Some(&cookie), Some(&first.token))));
        assert!(!verify(&secret, &post(Some(&cookie), None)));
        assert!(!verify(&secret, &post(None, Some(&first.token))));
        assert!(!verify(&secret, &post(Some(&cookie), Some("forged"))));
        let other = "A".repeat(43);
        assert!(!verify(&secret, &post(Some(&other), Some(&first.token))));
        assert!(!verify(
            &Secret::random()?,
            &post(Some(&cookie), Some(&first.token))
        ));
        Ok(())
    }

    #[test]
    fn a_session_token_is_good_only_with_its_session() -> Result<()> {
        let secret = Secret::random()?;
        let sessions = crate::web::sessions::Sessions::default();
        let now = std::time::Instant::now();
        let (_, alice) = sessions.create(now)?;
        let (_, mallory) = sessions.create(now)?;
        let alice_token = for_request(&secret, &post(None, None), Access::Session(alice))?;
        assert!(alice_token.set_cookie.is_none(), "the session is enough");
        let with = |token: &str| post(None, Some(token));
        assert!(verify(
            &secret,
            &with(&alice_token.token),
            Access::Session(alice)
        ));
        assert!(!verify(
            &secret,
            &with(&alice_token.token),
            Access::Session(mallory)
        ));
        // A token of the cookie kind is no good for a session, and the other way round.
        let cookie = "B".repeat(43);
        let cookie_token = secret.sign(DOMAIN, &cookie);
        let both = post(Some(&cookie), Some(&cookie_token));
        assert!(!verify(&secret, &both, Access::Session(alice)));
        let both = post(Some(&cookie), Some(&alice_token.token));
        assert!(!verify(&secret, &both, Access::Open));
        Ok(())
    }

    #[test]
    fn a_foreign_origin_is_refused() {
        let with = |headers: &[(&str, &str)]| {
            let headers = headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Request::new(Method::Post, "/", headers, Vec::new())
        };
        let bound = "127.0.0.1:8080";
        assert!(origin_allowed(&with(&[]), bound));
        assert!(origin_allowed(
            &with(&[
                ("Host", "localhost:8080"),
                ("Origin", "http://localhost:8080")
            ]),
            bound
        ));
        assert!(origin_allowed(
            &with(&[("Host", "jobs.example"), ("Origin", "https://Jobs.example")]),
            bound
        ));
        assert!(origin_allowed(
            &with(&[("Origin", "http://127.0.0.1:8080")]),
            bound
        ));
        for foreign in [
            "http://evil.example",
            "http://localhost:8081",
            "null",
            "file://",
            "http://localhost:8080.evil.example",
        ] {
            assert!(
                !origin_allowed(
                    &with(&[("Host", "localhost:8080"), ("Origin", foreign)]),
                    bound
                ),
                "{foreign}"
            );
        }
    }

    #[test]
    fn cross_site_fetch_metadata_is_refused() {
        let with = |site: &str| {
            Request::new(
                Method::Post,
                "/",
                vec![("Sec-Fetch-Site".into(), site.into())],
                Vec::new(),
            )
        };
        assert!(same_origin(&with("same-origin")));
        assert!(same_origin(&with("none")));
        assert!(!same_origin(&with("same-site")));
        assert!(!same_origin(&with("cross-site")));
        assert!(same_origin(&Request::new(
            Method::Post,
            "/",
            Vec::new(),
            Vec::new()
        )));
    }
}
