//! The one-line message a page shows after an action ("job 7 requeued as job 12"). It
//! travels in the redirect's query string, signed with the process key, so a link made
//! elsewhere cannot put words on the dashboard; it is HTML-escaped like everything else.

use super::keys::Secret;
use super::server::http::{query_string, Request, Response};

const DOMAIN: &str = "flash";

/// A message for the next page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Flash {
    /// Green for done, red for refused.
    pub(crate) ok: bool,
    pub(crate) message: String,
}

fn signed_data(ok: bool, message: &str) -> String {
    format!("{}\n{message}", if ok { "ok" } else { "error" })
}

/// The request's flash, when present and signed by this process.
pub(crate) fn from_request(secret: &Secret, req: &Request) -> Option<Flash> {
    let message = req.query("flash")?;
    let ok = req.query("flash_kind") != Some("error");
    let signature = req.query("flash_sig")?;
    secret
        .verify(DOMAIN, &signed_data(ok, message), signature)
        .then(|| Flash {
            ok,
            message: message.to_string(),
        })
}

/// 303 to `path` (a local path without a query) carrying `message`.
pub(crate) fn redirect(secret: &Secret, path: &str, ok: bool, message: &str) -> Response {
    let signature = secret.sign(DOMAIN, &signed_data(ok, message));
    let query = query_string(&[
        ("flash", message),
        ("flash_kind", if ok { "ok" } else { "error" }),
        ("flash_sig", &signature),
    ]);
    Response::see_other(&format!("{path}{query}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::server::http::Method;

    #[test]
    fn only_signed_messages_are_shown() -> crate::Result<()> {
        let secret = Secret::random()?;
        let resp = redirect(&secret, "/jobs/7", false, "job 7 is running <b>");
        assert_eq!(resp.status, 303);
        let location = resp
            .headers
            .iter()
            .find(|(k, _)| k == "Location")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        assert!(location.starts_with("/jobs/7?flash="), "{location}");
        let back = Request::new(Method::Get, &location, Vec::new(), Vec::new());
        assert_eq!(
            from_request(&secret, &back),
            Some(Flash {
                ok: false,
                message: "job 7 is running <b>".into()
            })
        );
        let forged = Request::new(
            Method::Get,
            &location.replace("running", "fine"),
            Vec::new(),
            Vec::new(),
        );
        assert_eq!(from_request(&secret, &forged), None);
        let flipped = Request::new(
            Method::Get,
            &location.replace("flash_kind=error", "flash_kind=ok"),
            Vec::new(),
            Vec::new(),
        );
        assert_eq!(from_request(&secret, &flipped), None);
        Ok(())
    }
}
