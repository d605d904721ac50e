//! An endpoint's URL as the dashboard and `litejobs webhook list` show it: parsed by the
//! parser deliveries use (so the host shown is the host requests go to), without its
//! password, query string or fragment, which often carry tokens.

use ureq::http::Uri;

use crate::redact::mask_url_password;

/// `url` as people may see it: scheme, user (its password as `***`), host, port and path as
/// deliveries parse them, then `?…` for a query string and `#…` for a fragment, whose
/// contents are left out. A URL deliveries cannot parse shows as `(invalid URL)` and the
/// start of it, cut before any `?`, `#` or password.
///
/// ```
/// use litejobs::builtin::webhook::shown_url;
/// assert_eq!(
///     shown_url("https://u:pw@crm.example/hook?token=abc"),
///     "https://u:***@crm.example/hook?…"
/// );
/// // The fragment starts at `#`: deliveries go to 127.0.0.1, not to evil.example.
/// assert_eq!(
///     shown_url("http://127.0.0.1:18600#@evil.example/z"),
///     "http://127.0.0.1:18600/#…"
/// );
/// ```
pub fn shown_url(url: &str) -> String {
    // The fragment never reaches the server (nor the parser deliveries use).
    let (target, fragment) = match url.split_once('#') {
        Some((target, _)) => (target, "#…"),
        None => (url, ""),
    };
    let parsed = target.parse::<Uri>().ok().and_then(|uri| {
        let scheme = uri.scheme_str()?.to_string();
        let authority = uri.authority()?.as_str().to_string();
        let host_port = match authority.rsplit_once('@') {
            Some((userinfo, host_port)) => {
                let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
                let password = if userinfo.contains(':') { ":***" } else { "" };
                format!("{user}{password}@{host_port}")
            }
            None => authority,
        };
        let query = if uri.query().is_some() { "?…" } else { "" };
        Some(format!("{scheme}://{host_port}{}{query}", uri.path()))
    });
    match parsed {
        Some(shown) => format!("{shown}{fragment}"),
        None => {
            let masked = mask_url_password(target);
            let start = masked.split(['?', '#']).next().unwrap_or_default();
            format!("(invalid URL) {start}…")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_shown_is_the_host_deliveries_go_to() {
        for (url, shown) in [
            (
                "https://u:pw@crm.example/hook?token=abc",
                "https://u:***@crm.example/hook?…",
            ),
            ("https://crm.example/hook#x", "https://crm.example/hook#…"),
            ("http://127.0.0.1:8000/hooks", "http://127.0.0.1:8000/hooks"),
            (
                "http://127.0.0.1:18600#@evil.example/z",
                "http://127.0.0.1:18600/#…",
            ),
            (
                "http://127.0.0.1:18600?@evil.example/z",
                "http://127.0.0.1:18600/?…",
            ),
            (
                "https://hooks.example/x?access_token=secret#frag",
                "https://hooks.example/x?…#…",
            ),
            ("https://user@crm.example/", "https://user@crm.example/"),
        ] {
            assert_eq!(shown_url(url), shown, "{url}");
        }
        let bad = shown_url("http://u:pw@exa mple/x?token=secret");
        assert!(bad.starts_with("(invalid URL) "), "{bad}");
        assert!(!bad.contains("pw") && !bad.contains("secret"), "{bad}");
    }
}
