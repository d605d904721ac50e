//! The web dashboard, behind the `web` feature: see and fix the queue from a browser.
//!
//! `litejobs web` serves it; [`Dashboard::start`] serves it from your own program, on
//! threads of its own, next to your workers. It is a small blocking HTTP/1.1 server of our
//! own (std sockets, requests parsed by `httparse`, no async runtime) whose pages are rendered
//! on the server from the same read and admin functions the `litejobs` command uses
//! ([`Queue::list`], [`Queue::stats`], [`Queue::health`], [`Queue::requeue_dead`], ...).
//! Every page works without JavaScript; a few lines of it refresh the overview's figures.
//! Styles and script are compiled in, so it works offline.
//!
//! ```no_run
//! use litejobs::web::{Dashboard, DashboardOptions};
//! use litejobs::Queue;
//! # fn main() -> litejobs::Result<()> {
//! let queue = Queue::open("app.db")?;
//! let dashboard = Dashboard::start(&queue, DashboardOptions::new().addr("127.0.0.1:8080"))?;
//! println!("dashboard on {}", dashboard.url());
//! // ... your program runs; the dashboard stops when `dashboard` is dropped or stopped.
//! dashboard.stop();
//! # Ok(())
//! # }
//! ```
//!
//! ## Security model
//! - It listens on loopback (`127.0.0.1:8080`) by default, and refuses to start on any other
//!   address without a token. A token has at least [`MIN_TOKEN_LEN`] characters.
//! - With a token, every request must carry it: `Authorization: Bearer TOKEN` from scripts,
//!   or the session cookie (HttpOnly, SameSite=Strict, 12 hours) that the sign-in form sets
//!   in a browser. The cookie names a session kept in the dashboard's memory (at most 1024;
//!   the oldest goes first), not the token: signing out ends the session on the server, so a
//!   copied cookie stops working at once.
//! - Wrong tokens (form or bearer header) are logged at `warn` with the client's address,
//!   never with what was sent: the first after a quiet spell at once, the next ones summed
//!   up in one line a minute. After 5 from one network within a minute (an IPv4 /24, an IPv6
//!   /64), that network gets 429 with `Retry-After` for any token it sends, for 30 s,
//!   doubling with each lock-out up to 15 minutes. After 30 from all networks within a
//!   minute, every client does, but for addresses that gave the right token in the last
//!   12 hours. Browsers already signed in are not affected. Behind a reverse proxy every
//!   client has the proxy's address, so they share one count.
//! - Without a token, only loopback host names are answered (a DNS-rebinding page cannot
//!   read it). Anyone who can reach the port can use it: on a shared machine, set a token.
//! - Every state change is a POST carrying a CSRF token tied to the browser's session (or,
//!   before signing in and without a token, to a cookie of its own); a POST without it, with
//!   another session's, with a foreign `Origin` header, or marked cross-site by the browser
//!   is refused with 403 and changes nothing.
//! - All job data (payloads, errors, names) is HTML-escaped, and payload secrets are masked
//!   ([`redact`](crate::redact)). Every response carries a strict Content-Security-Policy (no
//!   inline script or style), `X-Frame-Options: DENY`, `nosniff` and `Referrer-Policy: same-origin` (nothing to other sites). No
//!   response header is ever written with a control character in it: the one place that
//!   writes responses answers 500 instead, so no page can be made to inject a header; and a
//!   sign-in's `next` is followed only when it is a plain local path.
//! - [`DashboardOptions::read_only`] hides every action and refuses every POST.
//! - The signing key and the sessions live in the process: a restart signs everyone out.
//!
//! ## Limits
//! Served from inside your program, the dashboard must never be what takes it down, so every
//! client is bounded:
//! - at most [`DashboardOptions::max_connections`] open connections, each on a thread of its
//!   own, and [`DashboardOptions::max_connections_per_client`] from one client (an IPv4
//!   address, an IPv6 /64). A connection that has sent nothing yet makes room for a new
//!   one (the oldest first, the client's own when the client is at its cap), so idle
//!   sockets, however many, never lock out a client that sends its request, and a request
//!   that was sent is never dropped; when every connection in the way has sent something,
//!   the new one is answered `503` at once and closed, never queued;
//! - a connection must send its first byte within [`DashboardOptions::idle_timeout`] or it
//!   is closed without an answer;
//! - at most [`DashboardOptions::threads`] requests answered at the same time; a slow client
//!   holds its own connection only, never one of these;
//! - a request's head is at most 16 KiB (`431`, or `414` for the request line alone) and
//!   64 headers; its body at most 64 KiB (`413`), sent with `Content-Length` (a
//!   `Transfer-Encoding` is answered `411`); the whole request must arrive within
//!   [`DashboardOptions::timeout`] (`408`), and the answer is written within it again;
//! - the token is checked before any body is read: without it a POST is answered `401` at
//!   once, whatever body it announces;
//! - every response has `Connection: close` (no keep-alive: a connection serves one
//!   request);
//! - answers being sent hold at most 64 MiB between them: one more that would pass it is
//!   answered `503` (a client that does not read holds its answer for the timeout at most);
//! - error texts are shown cut: a few hundred characters in lists, 8 KiB on a job's page and
//!   in the JSON API, each with how many bytes were left out;
//! - when accepting a connection fails (no file descriptor left, EMFILE or ENFILE), the
//!   failure is logged at `warn` and the server tries again after a pause that grows to 1 s,
//!   then serves as soon as descriptors are back.

mod api;
mod app;
mod assets;
mod auth;
mod chart;
mod csrf;
mod flash;
mod format;
mod graph;
mod html;
mod keys;
mod live;
mod pages;
mod routes;
mod server;
mod sessions;
mod throttle;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::redact::Redactor;
use crate::Queue;

/// A running dashboard. Dropping it stops the server, as [`stop`](DashboardHandle::stop)
/// does.
#[must_use = "the dashboard stops when its handle is dropped"]
pub struct DashboardHandle {
    server: server::ServerHandle<app::App>,
}

impl std::fmt::Debug for DashboardHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardHandle")
            .field("addr", &self.server.addr())
            .field("limits", &self.server.limits())
            .finish()
    }
}

impl DashboardHandle {
    /// The address it listens on (with the real port when port 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `http://ADDR/`, for printing and for tests.
    pub fn url(&self) -> String {
        format!("http://{}/", self.server.addr())
    }

    /// Stops taking connections and closes the listening socket, ends the connections
    /// still waiting for a request, and waits (up to 10 s) for the requests being answered.
    pub fn stop(self) {
        self.server.stop();
    }
}

/// Where the dashboard listens unless told otherwise.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8080";
/// Requests answered at the same time unless told otherwise.
pub const DEFAULT_THREADS: usize = 4;
/// Open connections at most unless told otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;
/// Open connections from one client (an IPv4 address, an IPv6 /64) at most unless told
/// otherwise. A browser opens up to 6 to one host.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 8;
/// The time a client has to send its request (and again to take the answer) unless told
/// otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The time a client has to send the first byte of its request unless told otherwise.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// The shortest token accepted, in characters: a short token is guessed, lock-outs or not.
pub const MIN_TOKEN_LEN: usize = 16;

/// How the dashboard is served. Made by [`DashboardOptions::new`], then the setters.
///
/// ```
/// use litejobs::web::DashboardOptions;
/// let options = DashboardOptions::new()
///     .addr("0.0.0.0:8080")
///     .token("a long random string, 16 characters at least")
///     .read_only(true)
///     .secret_field("ssn");
/// ```
#[derive(Clone)]
#[must_use = "options do nothing until passed to Dashboard::start"]
pub struct DashboardOptions {
    addr: String,
    token: Option<String>,
    read_only: bool,
    redactor: Redactor,
    threads: usize,
    max_connections: usize,
    max_connections_per_client: usize,
    timeout: Duration,
    idle_timeout: Duration,
}

impl std::fmt::Debug for DashboardOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardOptions")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "[hidden]"))
            .field("read_only", &self.read_only)
            .field("threads", &self.threads)
            .field("max_connections", &self.max_connections)
            .field(
                "max_connections_per_client",
                &self.max_connections_per_client,
            )
            .field("timeout", &self.timeout)
            .field("idle_timeout", &self.idle_timeout)
            .finish()
    }
}

impl Default for DashboardOptions {
    fn default() -> Self {
        DashboardOptions {
            addr: DEFAULT_ADDR.to_string(),
            token: None,
            read_only: false,
            redactor: Redactor::from_env(),
            threads: DEFAULT_THREADS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            timeout: DEFAULT_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

impl DashboardOptions {
    /// The defaults: loopback port 8080, no token, actions allowed, the default secret
    /// fields plus `LITEJOBS_SECRET_FIELDS`.
    pub fn new() -> DashboardOptions {
        DashboardOptions::default()
    }

    /// `host:port` to listen on; port 0 picks a free port (see [`DashboardHandle::addr`]).
    /// An address that is not loopback needs a [`token`](DashboardOptions::token). Defaults
    /// to [`DEFAULT_ADDR`].
    pub fn addr(mut self, addr: impl Into<String>) -> DashboardOptions {
        self.addr = addr.into();
        self
    }

    /// Requires this token on every request (bearer header, or the sign-in form): at least
    /// [`MIN_TOKEN_LEN`] characters, no control characters, no space at either end. Defaults
    /// to none.
    pub fn token(mut self, token: impl Into<String>) -> DashboardOptions {
        self.token = Some(token.into());
        self
    }

    /// Hides every action and refuses every POST with 403. Defaults to false; always on for a
    /// queue opened with [`Queue::open_read_only`](crate::Queue::open_read_only).
    pub fn read_only(mut self, read_only: bool) -> DashboardOptions {
        self.read_only = read_only;
        self
    }

    /// Masks one more payload field name in every view, matched by its words like the
    /// defaults: `ssn` also masks `customer.ssn` (see [`redact`](crate::redact)).
    pub fn secret_field(mut self, name: impl AsRef<str>) -> DashboardOptions {
        self.redactor = self.redactor.with_field(name);
        self
    }

    /// Masks payload fields with this redactor instead. Defaults to
    /// [`Redactor::from_env`].
    pub fn redactor(mut self, redactor: Redactor) -> DashboardOptions {
        self.redactor = redactor;
        self
    }

    /// How many requests are answered at the same time (at least 1): pages read the
    /// database, and this bounds how many do at once. A request that arrives while all are
    /// busy waits for one, holding only its connection. Defaults to [`DEFAULT_THREADS`].
    pub fn threads(mut self, threads: usize) -> DashboardOptions {
        self.threads = threads;
        self
    }

    /// Open connections at most (at least 1), each served by a thread of its own while it
    /// is open. When they are all taken, the oldest connection that has sent nothing yet is
    /// closed to make room; when all of them have sent something, one more is answered
    /// `503 Service Unavailable` at once and closed. Defaults to
    /// [`DEFAULT_MAX_CONNECTIONS`].
    pub fn max_connections(mut self, max_connections: usize) -> DashboardOptions {
        self.max_connections = max_connections;
        self
    }

    /// Open connections from one client at most (at least 1): an IPv4 address, or an IPv6
    /// /64. Past it, the client's oldest connection that has sent nothing yet is closed to
    /// make room, or, when all of them have sent something, the new one is answered `503`.
    /// Behind a reverse proxy every client has the proxy's address: raise it there. Defaults
    /// to [`DEFAULT_MAX_CONNECTIONS_PER_CLIENT`].
    pub fn max_connections_per_client(mut self, max: usize) -> DashboardOptions {
        self.max_connections_per_client = max;
        self
    }

    /// The time a client has, from connecting, to send its whole request (else `408` and
    /// the connection is closed), and again to take the answer. Defaults to
    /// [`DEFAULT_TIMEOUT`] (10 s).
    pub fn timeout(mut self, timeout: Duration) -> DashboardOptions {
        self.timeout = timeout;
        self
    }

    /// The time a client has, from connecting, to send the first byte of its request; a
    /// connection that stays silent longer is closed without an answer (browsers open spare
    /// connections and drop them when closed). The [`timeout`](DashboardOptions::timeout)
    /// still bounds the whole request. Defaults to [`DEFAULT_IDLE_TIMEOUT`] (5 s).
    pub fn idle_timeout(mut self, idle_timeout: Duration) -> DashboardOptions {
        self.idle_timeout = idle_timeout;
        self
    }

    /// Checks every option but the address (which [`Dashboard::start`] resolves).
    ///
    /// # Errors
    /// [`InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the option: 0 threads, 0
    /// connections (in all or per client), a zero timeout or idle timeout, or a token that is empty, shorter than
    /// [`MIN_TOKEN_LEN`] characters, has a control character or a space at either end.
    pub fn validate(&self) -> Result<()> {
        if self.threads == 0 {
            return Err(Error::invalid_config(
                "dashboard threads must be at least 1, got 0",
            ));
        }
        if self.max_connections == 0 {
            return Err(Error::invalid_config(
                "dashboard max_connections must be at least 1, got 0",
            ));
        }
        if self.max_connections_per_client == 0 {
            return Err(Error::invalid_config(
                "dashboard max_connections_per_client must be at least 1, got 0",
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::invalid_config(
                "dashboard timeout must be more than 0",
            ));
        }
        if self.idle_timeout.is_zero() {
            return Err(Error::invalid_config(
                "dashboard idle_timeout must be more than 0",
            ));
        }
        if let Some(token) = &self.token {
            if token.trim().is_empty() {
                return Err(Error::invalid_config("dashboard token must not be empty"));
            }
            if token.chars().any(char::is_control) {
                return Err(Error::invalid_config(
                    "dashboard token must not contain control characters",
                ));
            }
            if token.trim() != token {
                return Err(Error::invalid_config(
                    "dashboard token must not start or end with a space",
                ));
            }
            let length = token.chars().count();
            if length < MIN_TOKEN_LEN {
                return Err(Error::invalid_config(format!(
                    "dashboard token must be at least {MIN_TOKEN_LEN} characters, got {length} \
                     (a short token is quickly guessed; make one with e.g. `openssl rand -hex 16`)"
                )));
            }
        }
        Ok(())
    }

    /// The addresses to bind, checked against the token rule.
    fn resolve(&self) -> Result<Vec<SocketAddr>> {
        let addrs: Vec<SocketAddr> = self
            .addr
            .to_socket_addrs()
            .map_err(|e| {
                Error::invalid_config(format!(
                    "dashboard address {:?} is not host:port: {e}",
                    self.addr
                ))
            })?
            .collect();
        if addrs.is_empty() {
            return Err(Error::invalid_config(format!(
                "dashboard address {:?} resolves to no address",
                self.addr
            )));
        }
        if self.token.is_none() {
            if let Some(open) = addrs.iter().find(|a| !a.ip().is_loopback()) {
                return Err(Error::invalid_config(format!(
                    "refusing to serve the dashboard on {open} without a token: it is not a \
                     loopback address, so anyone who can reach it could act on your jobs \
                     (give a token with --token-file FILE or LITEJOBS_WEB_TOKEN, which other \
                     users cannot see in `ps` as they can --token; or listen on 127.0.0.1)"
                )));
            }
        }
        Ok(addrs)
    }
}

/// The dashboard. See the [module docs](self).
#[derive(Debug)]
pub struct Dashboard {
    _private: (),
}

impl Dashboard {
    /// Starts serving `queue`'s dashboard on threads of its own and returns at once.
    ///
    /// # Errors
    /// [`InvalidConfig`](crate::ErrorKind::InvalidConfig) for an option
    /// [`validate`](DashboardOptions::validate) refuses, an address that does not resolve, or
    /// an address that is not loopback without a token; [`Io`](crate::ErrorKind::Io) when
    /// the address cannot be bound (e.g. in use).
    pub fn start(queue: &Queue, options: DashboardOptions) -> Result<DashboardHandle> {
        options.validate()?;
        let addrs = options.resolve()?;
        let limits = server::Limits {
            threads: options.threads,
            max_connections: options.max_connections,
            max_connections_per_client: options.max_connections_per_client,
            timeout: options.timeout,
            idle_timeout: options.idle_timeout,
        };
        let server = server::start(&addrs, limits, |addr| app_for(queue, &options, addr))?;
        Ok(DashboardHandle { server })
    }
}

/// The state the dashboard's threads share.
fn app_for(queue: &Queue, options: &DashboardOptions, addr: SocketAddr) -> Result<app::App> {
    Ok(app::App {
        queue: queue.clone(),
        gate: auth::Gate {
            token: options.token.clone(),
            sessions: sessions::Sessions::default(),
            throttle: throttle::Throttle::default(),
        },
        // A queue opened read-only cannot act: serve it without actions.
        read_only: options.read_only || queue.is_read_only(),
        redactor: options.redactor.clone(),
        secret: keys::Secret::random()?,
        addr,
        live: Mutex::new(live::LiveCache::default()),
    })
}

/// An [`app::App`] over an in-memory queue, for unit tests.
#[cfg(test)]
pub(crate) fn test_app(token: Option<&str>) -> Result<app::App> {
    let mut options = DashboardOptions::new();
    if let Some(token) = token {
        options = options.token(token);
    }
    app_for(
        &Queue::open_in_memory()?,
        &options,
        SocketAddr::from(([127, 0, 0, 1], 8080)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn only_loopback_without_a_token() {
        let open = DashboardOptions::new().addr("0.0.0.0:0").resolve();
        let e = open.err().map(|e| (e.kind(), e.to_string()));
        assert!(
            matches!(&e, Some((ErrorKind::InvalidConfig, m)) if m.contains("without a token")),
            "{e:?}"
        );
        assert!(DashboardOptions::new()
            .addr("0.0.0.0:0")
            .token("sixteen-chars-ok")
            .resolve()
            .is_ok());
        assert!(DashboardOptions::new()
            .addr("127.0.0.1:0")
            .resolve()
            .is_ok());
        assert!(DashboardOptions::new().addr("[::1]:0").resolve().is_ok());
        assert!(DashboardOptions::new().addr("no port").resolve().is_err());
    }

    #[test]
    fn validate_names_the_bad_option() {
        let refused = |options: DashboardOptions| {
            options
                .validate()
                .err()
                .map(|e| (e.kind(), e.to_string()))
                .unwrap_or((ErrorKind::Io, "accepted".into()))
        };
        let (kind, message) = refused(DashboardOptions::new().token("0123456789abcde"));
        assert_eq!(kind, ErrorKind::InvalidConfig);
        assert!(
            message.contains("at least 16 characters, got 15"),
            "{message}"
        );
        assert!(refused(DashboardOptions::new().threads(0))
            .1
            .contains("threads"));
        assert!(refused(DashboardOptions::new().max_connections(0))
            .1
            .contains("max_connections"));
        assert!(refused(DashboardOptions::new().timeout(Duration::ZERO))
            .1
            .contains("timeout"));
        assert!(
            refused(DashboardOptions::new().max_connections_per_client(0))
                .1
                .contains("max_connections_per_client")
        );
        assert!(
            refused(DashboardOptions::new().idle_timeout(Duration::ZERO))
                .1
                .contains("idle_timeout")
        );
        assert!(refused(DashboardOptions::new().token(" sixteen-chars-ok"))
            .1
            .contains("space"));
        assert!(refused(DashboardOptions::new().token("sixteen\nchars-ok"))
            .1
            .contains("control"));
        assert!(DashboardOptions::new()
            .token("0123456789abcdef")
            .validate()
            .is_ok());
    }

    #[test]
    fn options_never_print_the_token() {
        let shown = format!("{:?}", DashboardOptions::new().token("hunter2"));
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
