//! A real HTTP/1.1 server on 127.0.0.1 for the webhook tests: it records every request
//! (method, path, headers, raw body bytes) and answers with scripted [`Reply`]s, then a
//! fallback. A [`Reply::Hang`] holds the connection open without answering until the
//! server is dropped, to exercise client timeouts.
//!
//! One thread accepts; each connection gets its own thread, so a hanging reply never
//! blocks the next request. Every blocking step is bounded.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};

/// The bound of every wait for a request.
pub const WAIT: Duration = Duration::from_secs(30);
/// The longest a hanging reply holds its connection if the server is never dropped.
const HANG_CAP: Duration = Duration::from_secs(60);
/// Largest request accepted (headers plus body).
const MAX_REQUEST: usize = 1024 * 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST`, `GET`, ...
    pub method: String,
    /// The request target, e.g. `/hook?x=1`.
    pub path: String,
    /// Headers in order, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The raw body bytes.
    pub body: Vec<u8>,
}

impl Recorded {
    /// The first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A header that must be there.
    pub fn expect_header(&self, name: &str) -> &str {
        self.header(name)
            .unwrap_or_else(|| panic!("request has no {name} header: {self:?}"))
    }

    /// The body as text.
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What the server answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A response with this status, extra headers and body.
    Respond {
        /// Status code.
        status: u16,
        /// Extra headers.
        headers: Vec<(String, String)>,
        /// Body text.
        body: String,
    },
    /// No answer: the connection stays open until the server is dropped.
    Hang,
}

impl Reply {
    /// A response with `status` and an empty body.
    pub fn status(status: u16) -> Reply {
        Reply::Respond {
            status,
            headers: Vec::new(),
            body: String::new(),
        }
    }

    /// Adds a header (a `Respond` only).
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Respond { headers, .. } = &mut self {
            headers.push((name.to_string(), value.to_string()));
        }
        self
    }

    /// Sets the body (a `Respond` only).
    pub fn body(mut self, text: &str) -> Reply {
        if let Reply::Respond { body, .. } = &mut self {
            *body = text.to_string();
        }
        self
    }
}

struct Shared {
    script: Mutex<VecDeque<Reply>>,
    fallback: Reply,
    log: Mutex<Vec<Recorded>>,
    seen: Sender<Recorded>,
    stop: AtomicBool,
    /// Hanging replies wait on this; dropping the sender (server drop) releases them.
    release: Receiver<()>,
}

/// A loopback HTTP server for one test.
pub struct TestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    seen: Receiver<Recorded>,
    release: Option<Sender<()>>,
    acceptor: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Starts a server on 127.0.0.1 (a free port) answering `fallback` once the script is
    /// used up.
    pub fn start(fallback: Reply) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
        let addr = listener.local_addr().expect("the bound address");
        let (seen_tx, seen_rx) = unbounded();
        let (release_tx, release_rx) = unbounded();
        let shared = Arc::new(Shared {
            script: Mutex::new(VecDeque::new()),
            fallback,
            log: Mutex::new(Vec::new()),
            seen: seen_tx,
            stop: AtomicBool::new(false),
            release: release_rx,
        });
        let accept_shared = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name("test-http-accept".into())
            .spawn(move || accept_loop(&listener, &accept_shared))
            .expect("spawning the test server");
        TestServer {
            addr,
            shared,
            seen: seen_rx,
            release: Some(release_tx),
            acceptor: Some(acceptor),
        }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Queues replies for the next requests, in order (before the fallback).
    pub fn push(&self, reply: Reply) {
        lock(&self.shared.script).push_back(reply);
    }

    /// Waits (at most [`WAIT`]) for the next request not yet taken with this method.
    pub fn next_request(&self) -> Recorded {
        match self.seen.recv_timeout(WAIT) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => {
                panic!("the test server got no request within {WAIT:?}")
            }
            Err(RecvTimeoutError::Disconnected) => panic!("the test server stopped"),
        }
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.log).clone()
    }

    /// How many requests arrived so far.
    pub fn count(&self) -> usize {
        lock(&self.shared.log).len()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        drop(self.release.take());
        // Wake the acceptor so it sees the stop flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(handle) = self.acceptor.take() {
            let _ = handle.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = Arc::clone(shared);
        let _ = std::thread::Builder::new()
            .name("test-http-conn".into())
            .spawn(move || serve(stream, &shared));
    }
}

fn serve(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    let Some(request) = read_request(&mut stream) else {
        return;
    };
    lock(&shared.log).push(request.clone());
    let _ = shared.seen.send(request);
    let reply = lock(&shared.script)
        .pop_front()
        .unwrap_or_else(|| shared.fallback.clone());
    match reply {
        Reply::Hang => {
            // Returns when the server is dropped (the sender disconnects) or at the cap.
            let _ = shared.release.recv_timeout(HANG_CAP);
        }
        Reply::Respond {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} Scripted\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
            let _ = stream.flush();
        }
    }
}

/// Reads one request with a Content-Length body (what ureq sends for a byte body).
fn read_request(stream: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if buf.len() > MAX_REQUEST {
            return None;
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None; // e.g. the wake-up connection of Drop
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        if body.len() > MAX_REQUEST {
            return None;
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}
