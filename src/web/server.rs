//! The blocking HTTP server: tiny_http accepts connections and parses requests on its own
//! threads; a few handler threads of ours take whole requests from it, answer them through
//! the routes, and add the security headers to every response.

use std::io::Read;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::{Error, ErrorKind, Result};

use super::app::App;
use super::http::{Method, Request, Response};
use super::routes;

/// The largest request body read (forms are a few hundred bytes).
const MAX_BODY: usize = 64 * 1024;

/// Sent with every response.
const SECURITY_HEADERS: [(&str, &str); 5] = [
    (
        "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
];

/// A running dashboard. Dropping it stops the server, as [`stop`](DashboardHandle::stop)
/// does.
#[must_use = "the dashboard stops when its handle is dropped"]
pub struct DashboardHandle {
    addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    stopping: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for DashboardHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardHandle")
            .field("addr", &self.addr)
            .field("threads", &self.threads.len())
            .finish()
    }
}

impl DashboardHandle {
    /// The address it listens on (with the real port when port 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/`, for printing and for tests.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Stops taking requests, lets the handler threads finish the ones they are answering,
    /// and closes the listening socket.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if self.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        // Each unblock wakes one thread waiting in recv().
        for _ in &self.threads {
            self.server.unblock();
        }
        for thread in self.threads.drain(..) {
            if thread.join().is_err() {
                log::warn!("litejobs web: a handler thread panicked");
            }
        }
        log::info!("litejobs web: stopped listening on {}", self.addr);
    }
}

impl Drop for DashboardHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Binds `addrs` (the first that works) and starts `threads` handler threads.
pub(crate) fn start(
    addrs: &[SocketAddr],
    threads: usize,
    make_app: impl FnOnce(SocketAddr) -> Result<App>,
) -> Result<DashboardHandle> {
    let server = tiny_http::Server::http(addrs).map_err(|e| {
        let shown: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
        Error::new(
            ErrorKind::Io,
            format!("cannot listen on {}: {e}", shown.join(", ")),
        )
    })?;
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| Error::new(ErrorKind::Io, "the dashboard's socket has no IP address"))?;
    let app = Arc::new(make_app(addr)?);
    let server = Arc::new(server);
    let stopping = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::with_capacity(threads);
    for i in 0..threads {
        let (srv, app, stop) = (server.clone(), app.clone(), stopping.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("litejobs-web-{i}"))
            .spawn(move || serve(&srv, &app, &stop));
        match spawned {
            Ok(handle) => handles.push(handle),
            Err(e) => {
                // Stop the threads already started before reporting.
                drop(DashboardHandle {
                    addr,
                    server,
                    stopping,
                    threads: handles,
                });
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("cannot start a dashboard thread: {e}"),
                ));
            }
        }
    }
    log::info!("litejobs web: listening on http://{addr}/");
    Ok(DashboardHandle {
        addr,
        server,
        stopping,
        threads: handles,
    })
}

fn serve(server: &tiny_http::Server, app: &App, stopping: &AtomicBool) {
    loop {
        match server.recv() {
            Ok(request) => answer(app, request),
            Err(e) => {
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                log::debug!("litejobs web: receiving a request failed: {e}");
            }
        }
        if stopping.load(Ordering::SeqCst) {
            return;
        }
    }
}

/// Reads one request, answers it (a panic in a page becomes a 500, never a dead thread).
fn answer(app: &App, mut raw: tiny_http::Request) {
    let response = match read_request(&mut raw) {
        Ok(request) => catch_unwind(AssertUnwindSafe(|| routes::handle(app, &request)))
            .unwrap_or_else(|_| {
                log::error!("litejobs web: a page panicked answering {}", raw.url());
                Response::text(500, "litejobs: internal error\n")
            }),
        Err(response) => response,
    };
    let status = response.status;
    let mut out = tiny_http::Response::from_data(response.body).with_status_code(status);
    let headers = response
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(SECURITY_HEADERS)
        .chain(
            (!response_has(&response.headers, "cache-control"))
                .then_some(("Cache-Control", "no-store")),
        );
    for (name, value) in headers {
        match tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            Ok(header) => out.add_header(header),
            Err(()) => log::warn!("litejobs web: header {name} could not be sent"),
        }
    }
    if let Err(e) = raw.respond(out) {
        log::debug!("litejobs web: the client left before the answer: {e}");
    }
}

fn response_has(headers: &[(String, String)], name: &str) -> bool {
    headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name))
}

fn read_request(raw: &mut tiny_http::Request) -> std::result::Result<Request, Response> {
    if raw.body_length().is_some_and(|n| n > MAX_BODY) {
        return Err(Response::text(413, "litejobs: request body too large\n"));
    }
    let mut body = Vec::new();
    raw.as_reader()
        .take(MAX_BODY as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| Response::text(400, &format!("litejobs: cannot read the request: {e}\n")))?;
    if body.len() > MAX_BODY {
        return Err(Response::text(413, "litejobs: request body too large\n"));
    }
    let headers = raw
        .headers()
        .iter()
        .map(|h| (h.field.as_str().to_string(), h.value.as_str().to_string()))
        .collect();
    Ok(Request::new(
        Method::parse(raw.method().as_str()),
        raw.url(),
        headers,
        body,
    ))
}
