//! The dashboard's own request and response types, independent of the server crate: routes
//! and pages are plain functions from [`Request`] to [`Response`], which keeps them easy to
//! read and to test.

use std::net::IpAddr;

use serde::Serialize;

/// The methods the dashboard answers; anything else is refused with 405.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Head,
    Post,
    Other,
}

impl Method {
    pub(crate) fn parse(method: &str) -> Method {
        match method {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            _ => Method::Other,
        }
    }

    /// GET or HEAD: reads that change nothing.
    pub(crate) fn is_read(self) -> bool {
        matches!(self, Method::Get | Method::Head)
    }
}

/// One HTTP request: the head, and the body once the router has let it be read (bodies are
/// small forms).
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) method: Method,
    /// Path and query as sent.
    url: String,
    /// The path as sent, still percent-encoded.
    path: String,
    query: Vec<(String, String)>,
    /// Header names in lower case.
    headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    /// The client's address (for the sign-in throttle and the log), when known.
    pub(crate) peer: Option<IpAddr>,
}

impl Request {
    /// A request for `url` (path and query, as on the request line).
    pub(crate) fn new(
        method: Method,
        url: &str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Request {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        Request {
            method,
            url: url.to_string(),
            path: path.to_string(),
            query: parse_urlencoded(query),
            headers: headers
                .into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect(),
            body,
            peer: None,
        }
    }

    /// Path and query as sent (for a link back here).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The path's segments, percent-decoded; empty segments (`//`, a trailing `/`) dropped.
    pub(crate) fn segments(&self) -> Vec<String> {
        self.path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| percent_decode(s, false))
            .collect()
    }

    /// The first header of this name (case-insensitive).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A cookie's value, from every `Cookie` header.
    pub(crate) fn cookie(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k == "cookie")
            .flat_map(|(_, v)| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.trim())
    }

    /// A query parameter, trimmed; `None` when absent or blank (an empty filter box).
    pub(crate) fn query(&self, name: &str) -> Option<&str> {
        lookup(&self.query, name)
    }

    /// The `application/x-www-form-urlencoded` body as pairs.
    pub(crate) fn form(&self) -> Form {
        Form(parse_urlencoded(&String::from_utf8_lossy(&self.body)))
    }
}

/// A submitted form.
#[derive(Debug, Clone, Default)]
pub(crate) struct Form(Vec<(String, String)>);

impl Form {
    /// A field, trimmed; `None` when absent or blank.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        lookup(&self.0, name)
    }
}

fn lookup<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.trim())
        .filter(|v| !v.is_empty())
}

/// An HTTP response, built whole.
#[derive(Debug, Clone)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Response {
    /// A response with a body of this content type.
    pub(crate) fn bytes(status: u16, content_type: &str, body: Vec<u8>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body,
        }
    }

    /// An HTML page.
    pub(crate) fn html(status: u16, body: String) -> Response {
        Response::bytes(status, "text/html; charset=utf-8", body.into_bytes())
    }

    /// JSON, pretty-printed like the command line's `--json`.
    pub(crate) fn json(status: u16, value: &impl Serialize) -> Response {
        match serde_json::to_vec_pretty(value) {
            Ok(mut body) => {
                body.push(b'\n');
                Response::bytes(status, "application/json", body)
            }
            Err(e) => Response::json_error(500, &format!("cannot encode the answer: {e}")),
        }
    }

    /// `{"error": message}`.
    pub(crate) fn json_error(status: u16, message: &str) -> Response {
        let body = serde_json::json!({ "error": message }).to_string() + "\n";
        Response::bytes(status, "application/json", body.into_bytes())
    }

    /// Plain text.
    pub(crate) fn text(status: u16, body: &str) -> Response {
        Response::bytes(
            status,
            "text/plain; charset=utf-8",
            body.as_bytes().to_vec(),
        )
    }

    /// 303 See Other: after a POST, the browser GETs `location` (so a reload repeats nothing).
    pub(crate) fn see_other(location: &str) -> Response {
        Response {
            status: 303,
            headers: vec![("Location".into(), location.into())],
            body: Vec::new(),
        }
    }

    /// Adds a header.
    pub(crate) fn with_header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// Parses `a=1&b=two+words`; names and values percent-decoded, `+` read as a space.
pub(crate) fn parse_urlencoded(text: &str) -> Vec<(String, String)> {
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

/// Decodes `%XX` escapes (and `+` as a space in form data); invalid escapes are kept as
/// they are and invalid UTF-8 becomes U+FFFD.
pub(crate) fn percent_decode(text: &str, plus_is_space: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus_is_space => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, for a query value or a
/// path segment.
pub(crate) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `?a=1&b=2` from pairs, leaving out empty values; `""` when none is left.
pub(crate) fn query_string(pairs: &[(&str, &str)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_paths_queries_and_forms() {
        let req = Request::new(
            Method::Get,
            "/queues/web%20hooks/pause/?search=conn+refused&status=dead&empty=&bad=%zz%4",
            vec![("Cookie".into(), "a=1; litejobs_csrf=xyz".into())],
            b"reason=endpoint+fixed%21&csrf=t".to_vec(),
        );
        assert_eq!(req.segments(), vec!["queues", "web hooks", "pause"]);
        assert_eq!(req.query("search"), Some("conn refused"));
        assert_eq!(req.query("status"), Some("dead"));
        assert_eq!(req.query("empty"), None);
        assert_eq!(req.query("bad"), Some("%zz%4"));
        assert_eq!(req.cookie("litejobs_csrf"), Some("xyz"));
        assert_eq!(req.cookie("nope"), None);
        assert_eq!(req.header("COOKIE"), Some("a=1; litejobs_csrf=xyz"));
        assert_eq!(req.form().get("reason"), Some("endpoint fixed!"));
    }

    #[test]
    fn percent_encoding_round_trips() {
        for text in ["plain", "a b&c=d/é?<x>", "100%", ""] {
            assert_eq!(percent_decode(&percent_encode(text), false), text);
        }
        assert_eq!(
            query_string(&[("status", "dead"), ("type", ""), ("search", "a&b")]),
            "?status=dead&search=a%26b"
        );
        assert_eq!(query_string(&[("type", "")]), "");
    }
}
