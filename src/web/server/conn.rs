//! One connection's bytes: reading a request head (httparse, at most [`MAX_HEAD`] bytes), its
//! body (Content-Length only, at most [`MAX_BODY`], read only when the router asks for it),
//! writing the answer (every header checked, the security headers added, then
//! `Connection: close`), and closing without losing the answer.
//!
//! Every read and write is bounded by the connection's deadline, so a client that sends or
//! reads slowly holds its own connection for at most that long, and nothing else; a client
//! that sends nothing at all holds it for the shorter idle timeout only. An answer is written
//! from the response itself (its head, then its body), never copied whole.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::http::{Method, Request, Response};

/// The largest request head (request line and headers) read; past it the answer is 431 (or
/// 414 when the request line alone is longer).
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// The largest request body read (forms are a few hundred bytes); past it the answer is 413.
pub(crate) const MAX_BODY: usize = 64 * 1024;
/// Headers in one request at most; past it the answer is 431.
const MAX_HEADERS: usize = 64;
/// After answering without reading everything the client sent, how long and how much more
/// is read and thrown away before closing. Closing a socket with unread input makes the
/// kernel send a reset, which can destroy the answer before the client reads it; reading
/// for a moment lets the answer arrive first, and the bounds keep a bomb from being read.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 256 * 1024;
/// Bytes read from the socket at a time.
const CHUNK: usize = 4096;

/// Sent with every response.
const SECURITY_HEADERS: [(&str, &str); 5] = [
    (
        "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    // Not `no-referrer`: under it a browser sends `Origin: null` with our own forms, which
    // is what a hostile page can make its forms send too, so the Origin check could not
    // tell them apart. `same-origin` still sends nothing to other sites.
    ("Referrer-Policy", "same-origin"),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
];

/// One accepted connection, serving one request.
pub(crate) struct Conn<'s> {
    stream: &'s TcpStream,
    /// When reading the request must be over.
    deadline: Instant,
    /// When the first byte must have come.
    first_byte_deadline: Instant,
    /// Set once the client has sent a byte (shared with the connection table: a connection
    /// that has sent something never makes room for another).
    received: &'s AtomicBool,
    /// The limit on writing the answer.
    timeout: Duration,
    /// Bytes read and not yet consumed (after the head: the start of the body).
    buf: Vec<u8>,
    /// The body's declared length, once the head is read.
    content_length: usize,
    /// `Expect: 100-continue`: the client waits for a go-ahead before sending the body.
    expect_continue: bool,
    /// True once everything the client sent for this request has been read.
    drained: bool,
}

/// A refusal, before the request was understood.
fn refuse(status: u16, message: &str) -> Response {
    Response::text(status, &format!("litejobs: {message}\n"))
}

impl<'s> Conn<'s> {
    /// A connection whose request must start within `idle_timeout` and arrive within
    /// `timeout`, and whose answer must be written within `timeout` again; `received` is set
    /// on the first byte.
    pub(crate) fn new(
        stream: &'s TcpStream,
        timeout: Duration,
        idle_timeout: Duration,
        received: &'s AtomicBool,
    ) -> Conn<'s> {
        let now = Instant::now();
        Conn {
            stream,
            deadline: now + timeout,
            first_byte_deadline: now + idle_timeout.min(timeout),
            received,
            timeout,
            buf: Vec::with_capacity(CHUNK),
            content_length: 0,
            expect_continue: false,
            drained: false,
        }
    }

    /// Reads once from the socket into `buf`, at most `max` bytes, by the deadline.
    /// `Ok(0)` when the client closed its side.
    fn fill(&mut self, max: usize) -> std::io::Result<usize> {
        let deadline = if self.received.load(Ordering::Acquire) {
            self.deadline
        } else {
            self.first_byte_deadline
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        if !self.received.load(Ordering::Acquire) {
            // The first bytes are peeked at, marked received, and only then read: while a
            // connection makes room for another, a request its client sent is always either
            // waiting in the socket or marked (a read first left a moment with neither, and
            // the request was dropped).
            let peeked = loop {
                match self.stream.peek(&mut [0u8; 1]) {
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    other => break other?,
                }
            };
            if peeked == 0 {
                return Ok(0);
            }
            self.received.store(true, Ordering::Release);
        }
        let mut chunk = [0u8; CHUNK];
        let want = max.min(CHUNK);
        let n = loop {
            match (&*self.stream).read(&mut chunk[..want]) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// The request line and headers, as a [`Request`] with an empty body. `Ok(None)` when
    /// the client closed or went quiet without sending anything (a browser's spare
    /// connection); `Err` is the answer to give (400, 408, 411, 414, 431).
    pub(crate) fn read_head(&mut self) -> Result<Option<Request>, Response> {
        let mut scanned: usize = 0;
        loop {
            // Parse only once a blank line may have arrived, so that a client sending a
            // byte at a time does not make us parse the head again for every byte.
            let search_from = scanned.saturating_sub(3);
            if self.buf[search_from..].windows(2).any(|w| w == b"\n\n")
                || self.buf[search_from..].windows(4).any(|w| w == b"\r\n\r\n")
            {
                return self.parse_head().map(Some);
            }
            scanned = self.buf.len();
            if self.buf.len() >= MAX_HEAD {
                return Err(if self.buf.contains(&b'\n') {
                    refuse(431, "request headers too large")
                } else {
                    refuse(414, "request line too long")
                });
            }
            match self.fill(MAX_HEAD - self.buf.len()) {
                Ok(0) if self.buf.is_empty() => return Ok(None),
                Ok(0) => return Err(refuse(400, "the request ended early")),
                Ok(_) => {}
                Err(e) if is_timeout(&e) && self.buf.is_empty() => return Ok(None),
                Err(e) if is_timeout(&e) => {
                    return Err(refuse(408, "the request did not arrive in time"))
                }
                Err(e) => {
                    log::debug!("litejobs web: reading a request failed: {e}");
                    return Ok(None);
                }
            }
        }
    }

    fn parse_head(&mut self) -> Result<Request, Response> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut headers);
        let head_len = match parsed.parse(&self.buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Err(refuse(400, "malformed request")),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(refuse(431, "too many request headers"))
            }
            Err(e) => return Err(refuse(400, &format!("malformed request: {e}"))),
        };
        let (Some(method), Some(target)) = (parsed.method, parsed.path) else {
            return Err(refuse(400, "malformed request"));
        };
        if !target.starts_with('/') {
            return Err(refuse(400, "the request target must be a path"));
        }
        let mut lengths = Vec::new();
        let mut fields = Vec::with_capacity(parsed.headers.len());
        for header in parsed.headers.iter() {
            let value = String::from_utf8_lossy(header.value).trim().to_string();
            if header.name.eq_ignore_ascii_case("transfer-encoding") {
                return Err(refuse(
                    411,
                    "send the body with a Content-Length (no Transfer-Encoding)",
                ));
            }
            if header.name.eq_ignore_ascii_case("content-length") {
                lengths.push(value.clone());
            }
            if header.name.eq_ignore_ascii_case("expect") {
                self.expect_continue = value.eq_ignore_ascii_case("100-continue");
            }
            fields.push((header.name.to_string(), value));
        }
        self.content_length = content_length(&lengths)?;
        let request = Request::new(Method::parse(method), target, fields, Vec::new());
        self.buf.drain(..head_len);
        self.drained = self.content_length == 0;
        Ok(request)
    }

    /// The body announced by the head: at most [`MAX_BODY`] bytes, by the deadline. `Err`
    /// is the answer to give (413, 408, 400).
    pub(crate) fn read_body(&mut self) -> Result<Vec<u8>, Response> {
        let length = self.content_length;
        if length > MAX_BODY {
            return Err(refuse(
                413,
                &format!("request body too large (at most {MAX_BODY} bytes)"),
            ));
        }
        if self.expect_continue && self.buf.len() < length {
            self.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .map_err(|_| refuse(400, "the client went away"))?;
        }
        while self.buf.len() < length {
            match self.fill(length - self.buf.len()) {
                Ok(0) => return Err(refuse(400, "the request body ended early")),
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {
                    return Err(refuse(408, "the request body did not arrive in time"))
                }
                Err(_) => return Err(refuse(400, "the request body could not be read")),
            }
        }
        self.drained = true;
        let mut body = std::mem::take(&mut self.buf);
        body.truncate(length);
        Ok(body)
    }

    /// Writes `response` (without its body for a HEAD request), within the timeout.
    pub(crate) fn respond(&mut self, response: &Response, head_only: bool) -> std::io::Result<()> {
        let deadline = Instant::now() + self.timeout;
        let (head, body) = encode_parts(response, head_only);
        self.write_by(&head, deadline)?;
        self.write_by(body, deadline)
    }

    fn write_all(&self, bytes: &[u8]) -> std::io::Result<()> {
        self.write_by(bytes, Instant::now() + self.timeout)
    }

    fn write_by(&self, mut bytes: &[u8], deadline: Instant) -> std::io::Result<()> {
        while !bytes.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ErrorKind::TimedOut.into());
            }
            self.stream.set_write_timeout(Some(left))?;
            match (&*self.stream).write(bytes) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Ends the exchange. When the client's request was not read to its end (answered
    /// early: 401, 413, 431, ...), says so with a FIN, then reads and drops what still comes
    /// for a bounded moment, so the answer is not destroyed by a reset.
    pub(crate) fn finish(self) {
        if self.drained {
            return;
        }
        if self.stream.shutdown(Shutdown::Write).is_err() {
            return;
        }
        let until = Instant::now() + LINGER_TIME;
        let mut thrown = 0;
        let mut chunk = [0u8; CHUNK];
        while thrown < LINGER_BYTES {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || self.stream.set_read_timeout(Some(left)).is_err() {
                return;
            }
            match (&*self.stream).read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => thrown += n,
            }
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// The body length from the Content-Length headers: 0 without one; 400 for a value that is
/// not a number, or several that disagree (a request-smuggling trick).
fn content_length(values: &[String]) -> Result<usize, Response> {
    let mut length = None;
    for value in values {
        let parsed = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
            // A length too large for usize is over the limit anyway.
            value.parse::<usize>().unwrap_or(usize::MAX)
        } else {
            return Err(refuse(400, "Content-Length is not a number"));
        };
        match length {
            Some(previous) if previous != parsed => {
                return Err(refuse(400, "conflicting Content-Length headers"))
            }
            _ => length = Some(parsed),
        }
    }
    Ok(length.unwrap_or(0))
}

/// True for an HTTP token (RFC 9110 `tchar`s): what a header name may be made of.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// False for a header value holding any control character: CR and LF would end the header
/// and start another (response splitting), and the rest have no business in one either.
fn valid_value(value: &str) -> bool {
    !value.chars().any(char::is_control)
}

/// The bytes of `response`: see [`encode_parts`].
pub(crate) fn encode(response: &Response, head_only: bool) -> Vec<u8> {
    let (mut head, body) = encode_parts(response, head_only);
    head.extend_from_slice(body);
    head
}

/// The head of `response` (status line, its headers, the security headers,
/// `Cache-Control: no-store` unless it has one, `Content-Length`, `Connection: close`), and
/// the body to send after it (none for HEAD). Every response of the dashboard is written
/// through here, so this is where header injection is stopped for every page, present and
/// future: a header whose name or value could break the framing turns the whole answer into
/// a 500.
fn encode_parts(response: &Response, head_only: bool) -> (Vec<u8>, &[u8]) {
    const INTERNAL: &[u8] = b"litejobs: internal error (a header could not be sent)\n";
    let (head, body) = match response
        .headers
        .iter()
        .find(|(name, value)| !valid_name(name) || !valid_value(value))
    {
        Some((name, value)) => {
            log::error!(
                "litejobs web: refusing to send the header {name:?}: {value:?} (a control \
                 character or an invalid name); answering 500 instead"
            );
            let text = [(
                "Content-Type".to_string(),
                "text/plain; charset=utf-8".to_string(),
            )];
            (head_bytes(500, &text, INTERNAL.len()), INTERNAL)
        }
        None => (
            head_bytes(response.status, &response.headers, response.body.len()),
            response.body.as_slice(),
        ),
    };
    (head, if head_only { &[] } else { body })
}

/// The head of an answer whose headers are checked and whose body has `length` bytes.
fn head_bytes(status: u16, headers: &[(String, String)], length: usize) -> Vec<u8> {
    let has = |wanted: &str| {
        headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(wanted))
    };
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(format!("HTTP/1.1 {status} {}\r\n", reason(status)).as_bytes());
    let headers = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(SECURITY_HEADERS)
        .chain((!has("cache-control")).then_some(("Cache-Control", "no-store")));
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(
        format!("Content-Length: {length}\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    out
}

/// The reason phrase of the status codes the dashboard answers with.
fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }

    #[test]
    fn no_header_with_a_control_character_is_ever_written() {
        for bad in [
            "/\r\nSet-Cookie: x=1",
            "/\nx",
            "/\rx",
            "a\tb",
            "a\0b",
            "a\u{7f}",
            "a\u{85}",
        ] {
            let response = Response::see_other(bad);
            let out = text(&encode(&response, false));
            assert!(out.starts_with("HTTP/1.1 500 "), "{bad:?}: {out}");
            assert!(!out.contains("Set-Cookie: x"), "{out}");
            assert!(!out.contains("Location"), "{out}");
        }
        for bad_name in ["Set-Cookie\r\nX", "", "Bad Name", "X:Y"] {
            let out = text(&encode(
                &Response::text(200, "x").with_header(bad_name, "v"),
                false,
            ));
            assert!(out.starts_with("HTTP/1.1 500 "), "{bad_name:?}: {out}");
        }
        let out = text(&encode(&Response::see_other("/jobs?status=dead"), false));
        assert!(out.starts_with("HTTP/1.1 303 See Other\r\n"), "{out}");
        assert!(out.contains("\r\nLocation: /jobs?status=dead\r\n"), "{out}");
    }

    #[test]
    fn every_answer_has_its_length_the_security_headers_and_closes() {
        let out = text(&encode(&Response::text(200, "hello"), false));
        assert!(out.contains("\r\nContent-Length: 5\r\n"), "{out}");
        assert!(out.contains("\r\nConnection: close\r\n"), "{out}");
        assert!(out.contains("\r\nX-Frame-Options: DENY\r\n"), "{out}");
        assert!(out.contains("\r\nCache-Control: no-store\r\n"), "{out}");
        assert!(out.ends_with("\r\n\r\nhello"), "{out}");
        let head = text(&encode(&Response::text(200, "hello"), true));
        assert!(head.contains("\r\nContent-Length: 5\r\n"), "{head}");
        assert!(head.ends_with("\r\n\r\n"), "HEAD has no body: {head}");
        let cached = Response::text(200, "x").with_header("Cache-Control", "max-age=60");
        let out = text(&encode(&cached, false));
        assert!(!out.contains("no-store"), "{out}");
    }

    #[test]
    fn content_length_must_be_one_number() {
        let ok = |values: &[&str]| {
            content_length(&values.iter().map(|v| v.to_string()).collect::<Vec<_>>()).ok()
        };
        assert_eq!(ok(&[]), Some(0));
        assert_eq!(ok(&["12"]), Some(12));
        assert_eq!(ok(&["12", "12"]), Some(12));
        assert_eq!(ok(&["12", "13"]), None);
        assert_eq!(ok(&["-1"]), None);
        assert_eq!(ok(&["+5"]), None);
        assert_eq!(ok(&["1 2"]), None);
        assert_eq!(ok(&[""]), None);
        assert_eq!(ok(&["99999999999999999999999999"]), Some(usize::MAX));
    }
}
