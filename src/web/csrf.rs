//! Cross-site request forgery defence for every POST.
//!
//! Each browser gets a random `litejobs_csrf` cookie (HttpOnly, SameSite=Strict) on its first
//! page; every form carries a hidden token that is the process key's HMAC of that cookie. A
//! POST is accepted only when its token matches its own cookie. A page on another origin
//! (another port of localhost included, which counts as the same *site*) can make a browser
//! send the cookie, but can neither read it nor read our pages, so it cannot know the token;
//! and a token taken from one browser is worthless with another browser's cookie.

use crate::error::Result;

use super::http::Request;
use super::keys::{random_text, Secret};

/// The cookie holding the browser's CSRF value.
pub(crate) const COOKIE: &str = "litejobs_csrf";
/// The hidden form field holding the token.
pub(crate) const FIELD: &str = "csrf";
const DOMAIN: &str = "csrf";
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

/// The token for this request's browser, making it a cookie first if it has none.
pub(crate) fn for_request(secret: &Secret, req: &Request) -> Result<Csrf> {
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

/// True when the POSTed form's token belongs to the cookie the browser sent with it.
pub(crate) fn verify(secret: &Secret, req: &Request) -> bool {
    let form = req.form();
    match (cookie_value(req), form.get(FIELD)) {
        (Some(cookie), Some(token)) => secret.verify(DOMAIN, cookie, token),
        _ => false,
    }
}

/// False for a request the browser itself marks as sent by another site (`Sec-Fetch-Site`),
/// checked before the token as a second, independent line. Clients that do not send the
/// header (older browsers, scripts) are judged by the token alone.
pub(crate) fn same_origin(req: &Request) -> bool {
    !matches!(req.header("sec-fetch-site"), Some(site) if site != "same-origin" && site != "none")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::http::Method;

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
        let first = for_request(&secret, &post(None, None))?;
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
        let again = for_request(&secret, &post(Some(&cookie), None))?;
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
