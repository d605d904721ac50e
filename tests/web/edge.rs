//! The HTTP edge, spoken over raw sockets so that every byte the
//! server sends is seen: `next` cannot inject a header or leave the site; a header bomb is
//! answered at the head limit; slow bodies hold no handler thread; an unauthenticated POST
//! is answered before its body; chunked bodies are refused; idle connections make room for
//! new ones, from the same client or another, and are closed after the idle timeout;
//! connections over the caps that are all busy get 503, and the server serves again once
//! they close.
//!
//! Every wait is bounded by [`WAIT`] and fails with a message naming what did not come.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Instant;

use super::*;

/// The bound of every wait for an answer (which comes in milliseconds). A server that
/// waited for what a test withholds would answer with another status (408 after its 10 s
/// request timeout), or, where the test sets a longer timeout, not within this bound.
const WAIT: Duration = Duration::from_secs(30);

/// A raw connection to the dashboard whose reads and writes give up after [`WAIT`].
fn connect(web: &Web) -> TcpStream {
    let stream = TcpStream::connect(web.handle.addr()).expect("connecting to the dashboard");
    stream.set_read_timeout(Some(WAIT)).expect("read timeout");
    stream.set_write_timeout(Some(WAIT)).expect("write timeout");
    stream
}

/// [`connect`] from another loopback address, as a second client on the same machine.
fn connect_from(web: &Web, source: [u8; 4]) -> TcpStream {
    let stream = super::connect_from(web.handle.addr(), source);
    stream.set_read_timeout(Some(WAIT)).expect("read timeout");
    stream.set_write_timeout(Some(WAIT)).expect("write timeout");
    stream
}

/// Makes `stream` a connection whose request is being read: a POST to the open dashboard
/// announcing a 2000-byte body. Returns once the server's go-ahead for the body
/// (`100 Continue`) shows that it has the head; the body is not sent.
fn busy(stream: &mut TcpStream) {
    stream
        .write_all(
            b"POST /jobs/1/retry HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n\
              Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 2000\r\n\r\n",
        )
        .expect("sending a head whose body is not sent");
    let mut go_ahead = [0u8; 25];
    stream
        .read_exact(&mut go_ahead)
        .expect("the go-ahead within WAIT");
    assert_eq!(&go_ahead, b"HTTP/1.1 100 Continue\r\n\r\n");
}

/// True when the server has closed `stream` without an answer (end of stream, or a reset).
fn closed_silently(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(n) => panic!(
            "an answer on an idle connection: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        Err(e) => panic!("reading an idle connection: {e}"),
    }
}

/// The answer on `stream`, read until the server closes, as text. Panics, saying `what`
/// was awaited, when the server sends nothing within [`WAIT`].
fn answer(stream: &mut TcpStream, what: &str) -> String {
    let start = Instant::now();
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            // A reset after the answer arrived (the server closed with input unread).
            Err(e) if e.kind() == ErrorKind::ConnectionReset && !bytes.is_empty() => break,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!(
                    "{what}: no complete answer within {:?} (got {} bytes: {:?})",
                    start.elapsed(),
                    bytes.len(),
                    String::from_utf8_lossy(&bytes)
                )
            }
            Err(e) => panic!("{what}: reading the answer failed: {e}"),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Sends `request` on a new connection and returns the whole answer.
fn exchange(web: &Web, request: &str, what: &str) -> String {
    let mut stream = connect(web);
    stream
        .write_all(request.as_bytes())
        .unwrap_or_else(|e| panic!("{what}: sending the request: {e}"));
    answer(&mut stream, what)
}

/// The answer's head (status line and headers), lines without their CRLF.
fn head_lines(answer: &str) -> Vec<&str> {
    let head = answer.split("\r\n\r\n").next().unwrap_or("");
    head.split("\r\n").collect()
}

fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"))
}

/// A GET on a new connection answers 200 within [`WAIT`].
fn serves(web: &Web, what: &str) {
    let got = exchange(
        web,
        "GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        what,
    );
    assert_eq!(status_of(&got), 200, "{what}: {got}");
}

#[test]
fn next_can_neither_inject_a_header_nor_leave_the_site() {
    let web = Web::open();
    let port = web.handle.addr().port();
    for (next, expected) in [
        ("/%0d%0aSet-Cookie:%20x=1", "/"),
        ("/%0aSet-Cookie:%20x=1", "/"),
        (&*format!("/%09/127.0.0.2:{port}/x"), "/"),
        ("/%5c%5cevil.example/", "/"),
        ("%2f%2fevil.example/", "/"),
        ("/%00", "/"),
        ("/%7f", "/"),
        ("/%c2%85x", "/"),
        ("https://evil.example/", "/"),
        ("/jobs%3Fstatus%3Ddead", "/jobs?status=dead"),
    ] {
        let got = exchange(
            &web,
            &format!("GET /login?next={next} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
            next,
        );
        let lines = head_lines(&got);
        assert_eq!(status_of(&got), 303, "{next}: {got}");
        assert!(
            lines.contains(&&*format!("Location: {expected}")),
            "{next} redirects to {expected}: {got:?}"
        );
        assert!(
            !lines
                .iter()
                .any(|l| l.to_ascii_lowercase().starts_with("set-cookie: x=")),
            "{next} injected a cookie: {got:?}"
        );
        for line in &lines {
            assert!(
                !line.chars().any(char::is_control),
                "{next}: a control character in the header line {line:?}"
            );
        }
    }

    // The sign-in form's `next` is held to the same rule.
    const TOKEN: &str = "sixteen-plus-token";
    let web = Web::start(setup(), DashboardOptions::new().token(TOKEN));
    let mut browser = web.client();
    let csrf = browser.get("/login").expect(200).csrf();
    let page = browser.post_raw(
        "/login",
        &[
            ("csrf", &csrf),
            ("token", TOKEN),
            ("next", "/\r\nSet-Cookie: x=1"),
        ],
    );
    assert_eq!(page.redirect(), "/");
    assert!(!browser.cookies.contains_key("x"), "{page:#?}");
}

#[test]
fn a_header_bomb_is_answered_at_the_head_limit_without_reading_it_all() {
    let web = Web::open();
    // 32 KiB of one header line, never finished: a server that answers has not read the
    // rest, whatever it is.
    let mut stream = connect(&web);
    let mut bomb = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bomb: ".to_vec();
    bomb.resize(32 * 1024, b'a');
    stream.write_all(&bomb).expect("sending 32 KiB of header");
    let got = answer(
        &mut stream,
        "the answer to an unfinished 32 KiB header line",
    );
    assert_eq!(status_of(&got), 431, "{got}");

    // A 64 MiB header line is cut off too: the server closes the connection long before the
    // client has written it all (what fits in the socket buffers is a few MiB).
    let mut stream = connect(&web);
    let writer = stream.try_clone().expect("cloning the stream");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut writer = writer;
        let mut sent = 0usize;
        let chunk = vec![b'a'; 64 * 1024];
        let result = writer
            .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bomb: ")
            .and_then(|()| {
                while sent < 64 << 20 {
                    writer.write_all(&chunk)?;
                    sent += chunk.len();
                }
                Ok(())
            });
        let _ = tx.send((sent, result.err().map(|e| e.kind())));
    });
    let got = answer(&mut stream, "the answer to a 64 MiB header line");
    assert_eq!(status_of(&got), 431, "{got}");
    let (sent, error) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the writer stopped within 30 s");
    // Closed by the server (not merely stalled: that would be a write timeout).
    assert!(
        matches!(
            error,
            Some(ErrorKind::BrokenPipe | ErrorKind::ConnectionReset)
        ) && sent < 32 << 20,
        "the server took {sent} bytes of header ({error:?}) instead of closing the connection"
    );
    serves(&web, "a GET after the header bombs");
}

#[test]
fn slow_bodies_do_not_hold_up_other_requests() {
    let threads = 2;
    // A request timeout past WAIT: a server whose threads waited for the bodies would not
    // answer the GET within WAIT.
    let web = Web::start(
        setup(),
        DashboardOptions::new()
            .threads(threads)
            .timeout(Duration::from_secs(120)),
    );
    // More connections than handler threads, each declaring a body it never sends.
    let mut slow = Vec::new();
    for i in 0..threads + 3 {
        let mut stream = connect(&web);
        write!(
            stream,
            "POST /jobs/1/retry HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: \
             application/x-www-form-urlencoded\r\nContent-Length: 2000\r\n\r\ncsrf=x"
        )
        .unwrap_or_else(|e| panic!("slow connection {i}: {e}"));
        slow.push(stream);
    }
    let start = Instant::now();
    serves(&web, "a GET while slow bodies are being sent");
    assert!(
        start.elapsed() < WAIT,
        "the GET waited {:?} for the slow bodies",
        start.elapsed()
    );
    drop(slow);
}

#[test]
fn an_unauthenticated_post_is_refused_before_its_body() {
    let web = Web::start(setup(), DashboardOptions::new().token("sixteen-plus-token"));
    for declared in [60_000u64, 100_000_000] {
        let mut stream = connect(&web);
        write!(
            stream,
            "POST /jobs/1/retry HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: \
             application/x-www-form-urlencoded\r\nContent-Length: {declared}\r\n\r\n"
        )
        .expect("sending the head");
        let got = answer(
            &mut stream,
            &format!("a 401 before a {declared}-byte body is sent"),
        );
        assert_eq!(status_of(&got), 401, "{declared}: {got}");
    }
    // A wrong bearer token is refused before the body too.
    let got = exchange(
        &web,
        "POST /jobs/1/retry HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer wrong\r\n\
         Content-Length: 2000\r\n\r\n",
        "a 401 for a wrong bearer token before the body",
    );
    assert_eq!(status_of(&got), 401, "{got}");
}

#[test]
fn bodies_need_a_content_length_within_the_limit() {
    let web = Web::open();
    let got = exchange(
        &web,
        "POST /jobs/1/retry HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n\
         5\r\ncsrf=\r\n0\r\n\r\n",
        "the answer to a chunked body",
    );
    assert_eq!(status_of(&got), 411, "{got}");
    let got = exchange(
        &web,
        "POST /jobs/1/retry HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n",
        "the answer to a body over the limit",
    );
    assert_eq!(status_of(&got), 413, "{got}");
    let got = exchange(
        &web,
        "POST /jobs/1/retry HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\
         Content-Length: 6\r\n\r\ncsrf=x",
        "the answer to two Content-Lengths",
    );
    assert_eq!(status_of(&got), 400, "{got}");
    serves(&web, "a GET after the refusals");
}

#[test]
fn connections_over_the_cap_get_503_when_busy_and_the_server_serves_again_once_they_close() {
    let cap = 3;
    let web = Web::start(
        setup(),
        DashboardOptions::new()
            .max_connections(cap)
            .timeout(Duration::from_secs(120)),
    );
    // Busy connections take every place, from three clients (under the per-client cap).
    let mut held: Vec<TcpStream> = (0..cap)
        .map(|i| {
            let mut stream = connect_from(&web, [127, 0, 0, 10 + i as u8]);
            busy(&mut stream);
            stream
        })
        .collect();
    for _ in 0..2 {
        let mut over = connect(&web);
        let got = answer(&mut over, "the answer to a connection over the cap");
        assert_eq!(status_of(&got), 503, "{got}");
        assert!(head_lines(&got).contains(&"Retry-After: 1"), "{got}");
    }
    // Each gives its place back before it is closed, so once the client sees the close the
    // place is free.
    for (i, mut stream) in held.drain(..).enumerate() {
        let mut body = b"csrf=x".to_vec();
        body.resize(2000, b'x');
        stream.write_all(&body).expect("sending the body");
        let got = answer(&mut stream, "the answer on a connection within the cap");
        assert_eq!(
            status_of(&got),
            403,
            "busy connection {i} (no CSRF cookie): {got}"
        );
    }
    for _ in 0..cap + 1 {
        serves(&web, "a GET after the connections over the cap closed");
    }
}

#[test]
fn idle_sockets_from_one_client_never_lock_out_a_client_that_sends_its_request() {
    const TOKEN: &str = "sixteen-plus-token";
    let web = Web::start(setup(), DashboardOptions::new().token(TOKEN));
    // Every place taken by one client's sockets that never send a byte (the default cap).
    let mut idle: Vec<TcpStream> = (0..litejobs::web::DEFAULT_MAX_CONNECTIONS)
        .map(|_| connect(&web))
        .collect();
    // A client with the token, from the same address and from another, is served: each new
    // connection closes the oldest idle one of the client at its cap.
    let request = format!(
        "GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    );
    for source in [[127, 0, 0, 1], [127, 0, 0, 2]] {
        let mut stream = connect_from(&web, source);
        stream.write_all(request.as_bytes()).expect("sending");
        let got = answer(&mut stream, "the answer next to 64 idle sockets");
        assert_eq!(status_of(&got), 200, "from {source:?}: {got}");
    }
    // One client keeps at most its cap: every idle socket before the last ones of the cap
    // was closed, without an answer, to make room.
    let per_client = litejobs::web::DEFAULT_MAX_CONNECTIONS_PER_CLIENT;
    let made_room = idle.len() - per_client + 1;
    for (i, stream) in idle.iter_mut().take(made_room).enumerate() {
        assert!(closed_silently(stream), "idle socket {i} is still open");
    }
}

#[test]
fn a_burst_from_one_client_gets_an_answer_to_every_request_it_sent() {
    let web = Web::open();
    // Twice the per-client cap, each request sent at once: a connection whose request was
    // sent is never closed to make room, so each gets its page or a 503, never nothing.
    let burst = 2 * litejobs::web::DEFAULT_MAX_CONNECTIONS_PER_CLIENT;
    let mut streams: Vec<TcpStream> = (0..burst)
        .map(|i| {
            let mut stream = connect(&web);
            stream
                .write_all(b"GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                .unwrap_or_else(|e| panic!("sending request {i}: {e}"));
            stream
        })
        .collect();
    let statuses: Vec<u16> = streams
        .iter_mut()
        .enumerate()
        .map(|(i, stream)| status_of(&answer(stream, &format!("the answer to request {i}"))))
        .collect();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 503),
        "{statuses:?}"
    );
    assert!(
        statuses.iter().filter(|s| **s == 200).count()
            >= litejobs::web::DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
        "{statuses:?}"
    );
}

#[test]
fn a_silent_connection_is_closed_after_the_idle_timeout() {
    // A request timeout past WAIT: only the idle timeout can close it within WAIT.
    let web = Web::start(
        setup(),
        DashboardOptions::new()
            .idle_timeout(Duration::from_millis(200))
            .timeout(Duration::from_secs(120)),
    );
    let mut silent = connect(&web);
    assert!(
        closed_silently(&mut silent),
        "a connection that sent nothing is still open after {WAIT:?}"
    );
    // A client that sends its request within the idle timeout is answered.
    serves(&web, "a GET after the silent connection");
}

#[test]
fn one_client_with_its_cap_of_busy_connections_does_not_lock_out_another() {
    let web = Web::start(
        setup(),
        DashboardOptions::new()
            .max_connections_per_client(2)
            .timeout(Duration::from_secs(120)),
    );
    let mut held: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut stream = connect(&web);
            busy(&mut stream);
            stream
        })
        .collect();
    let mut third = connect(&web);
    let got = answer(
        &mut third,
        "the answer to a third connection from one client",
    );
    assert_eq!(status_of(&got), 503, "{got}");
    assert!(
        got.contains("too many connections from your address"),
        "{got}"
    );
    let mut other = connect_from(&web, [127, 0, 0, 2]);
    other
        .write_all(b"GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("sending");
    let got = answer(&mut other, "the answer to another client");
    assert_eq!(status_of(&got), 200, "{got}");
    held.clear();
}

#[test]
fn stop_ends_idle_connections_and_closes_the_port_promptly() {
    let web = Web::open();
    let addr = web.handle.addr();
    let idle: Vec<TcpStream> = (0..3).map(|_| connect(&web)).collect();
    serves(&web, "a GET next to idle connections");
    let Web { env: _env, handle } = web;
    let start = Instant::now();
    handle.stop();
    // It takes milliseconds; a stop that waited for the idle connections instead of ending
    // them would take the server's 10 s request timeout at least.
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "stop took {:?} with idle connections open",
        start.elapsed()
    );
    assert!(TcpStream::connect(addr).is_err(), "the port is closed");
    for mut stream in idle {
        let mut buf = [0u8; 16];
        // The server closed them: end of stream (or a reset), not a timeout.
        match stream.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => panic!("unexpected bytes on an idle connection: {:?}", &buf[..n]),
            Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
        }
    }
}

#[test]
fn a_long_request_line_and_too_many_headers_are_refused() {
    let web = Web::open();
    let long = format!(
        "GET /jobs?search={} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        "a".repeat(20 * 1024)
    );
    let got = exchange(&web, &long, "the answer to a 20 KiB request line");
    assert_eq!(status_of(&got), 414, "{got}");
    let mut many = String::from("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for i in 0..100 {
        many.push_str(&format!("X-Header-{i}: {i}\r\n"));
    }
    many.push_str("\r\n");
    let got = exchange(&web, &many, "the answer to 100 headers");
    assert_eq!(status_of(&got), 431, "{got}");
    serves(&web, "a GET after the refusals");
}

#[test]
fn expect_100_continue_gets_a_go_ahead_only_when_the_body_is_wanted() {
    // Open dashboard: the body is wanted, so the client is told to send it.
    let web = Web::open();
    let mut stream = connect(&web);
    stream
        .write_all(
            b"POST /jobs/1/retry HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n\
              Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 6\r\n\r\n",
        )
        .expect("sending the head");
    let mut go_ahead = [0u8; 25];
    stream
        .read_exact(&mut go_ahead)
        .expect("the go-ahead within WAIT");
    assert_eq!(&go_ahead, b"HTTP/1.1 100 Continue\r\n\r\n");
    stream.write_all(b"csrf=x").expect("sending the body");
    let got = answer(&mut stream, "the answer after the body");
    assert_eq!(status_of(&got), 403, "no CSRF cookie: {got}");

    // Without the token there is no go-ahead: the answer is 401 at once.
    let web = Web::start(setup(), DashboardOptions::new().token("sixteen-plus-token"));
    let got = exchange(
        &web,
        "POST /jobs/1/retry HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n\
         Content-Length: 6\r\n\r\n",
        "the answer to an unauthenticated POST expecting 100-continue",
    );
    assert!(got.starts_with("HTTP/1.1 401 "), "{got}");
}
