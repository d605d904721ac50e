//! The web dashboard (R25), behind the `web` feature: see and fix the queue from a browser.
//!
//! `litejobs web` serves it; [`Dashboard::start`] serves it from your own program, on
//! threads of its own, next to your workers. It is a blocking HTTP server (tiny_http, no
//! async runtime) whose pages are rendered on the server from the same read and admin
//! functions the `litejobs` command uses ([`Queue::list`], [`Queue::stats`],
//! [`Queue::health`], [`Queue::requeue_dead`], ...). Every page works without JavaScript; a
//! few lines of it refresh the overview's figures. Styles and script are compiled in, so it
//! works offline.
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
//!   address without a token.
//! - With a token, every request must carry it: `Authorization: Bearer TOKEN` from scripts,
//!   or the session cookie (HttpOnly, SameSite=Strict, signed, 12 hours) that the sign-in form
//!   sets in a browser. The cookie holds a signed expiry, not the token.
//! - Without a token, only loopback host names are answered (a DNS-rebinding page cannot
//!   read it). Anyone who can reach the port can use it: on a shared machine, set a token.
//! - Every state change is a POST carrying a CSRF token tied to the browser's own cookie;
//!   a POST without it, or with another's, is refused with 403 and changes nothing.
//! - All job data (payloads, errors, names) is HTML-escaped, and payload secrets are masked
//!   ([`redact`](crate::redact)). Every response carries a strict Content-Security-Policy (no
//!   inline script or style), `X-Frame-Options: DENY`, `nosniff` and `no-referrer`.
//! - [`DashboardOptions::read_only`] hides every action and refuses every POST.
//! - The signing key is random per process: a restart signs everyone out.

mod api;
mod app;
mod assets;
mod auth;
mod chart;
mod csrf;
mod flash;
mod format;
mod html;
mod http;
mod keys;
mod pages;
mod routes;
mod server;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::redact::Redactor;
use crate::Queue;

pub use server::DashboardHandle;

/// Where the dashboard listens unless told otherwise.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8080";
/// Handler threads unless told otherwise.
pub const DEFAULT_THREADS: usize = 4;

/// How the dashboard is served. Made by [`DashboardOptions::new`], then the setters.
///
/// ```
/// use litejobs::web::DashboardOptions;
/// let options = DashboardOptions::new()
///     .addr("0.0.0.0:8080")
///     .token("a long random string")
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
}

impl std::fmt::Debug for DashboardOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardOptions")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "[hidden]"))
            .field("read_only", &self.read_only)
            .field("threads", &self.threads)
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

    /// Requires this token on every request (bearer header, or the sign-in form). Defaults
    /// to none.
    pub fn token(mut self, token: impl Into<String>) -> DashboardOptions {
        self.token = Some(token.into());
        self
    }

    /// Hides every action and refuses every POST with 403. Defaults to false.
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

    /// Request handler threads (at least 1). Defaults to [`DEFAULT_THREADS`].
    pub fn threads(mut self, threads: usize) -> DashboardOptions {
        self.threads = threads;
        self
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
                     (pass --token, or listen on 127.0.0.1)"
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
    /// [`InvalidConfig`](crate::ErrorKind::InvalidConfig) for an address that does not
    /// resolve, an address that is not loopback without a token, an empty token, or 0
    /// threads; [`Io`](crate::ErrorKind::Io) when the address cannot be bound (e.g. in use).
    pub fn start(queue: &Queue, options: DashboardOptions) -> Result<DashboardHandle> {
        if options.threads == 0 {
            return Err(Error::invalid_config(
                "dashboard threads must be at least 1, got 0",
            ));
        }
        if let Some(token) = &options.token {
            if token.trim().is_empty() {
                return Err(Error::invalid_config("dashboard token must not be empty"));
            }
            if token.chars().any(char::is_control) {
                return Err(Error::invalid_config(
                    "dashboard token must not contain control characters",
                ));
            }
        }
        let addrs = options.resolve()?;
        let secret = keys::Secret::random()?;
        server::start(&addrs, options.threads, |addr| {
            Ok(app::App {
                queue: queue.clone(),
                token: options.token.clone(),
                read_only: options.read_only,
                redactor: options.redactor.clone(),
                secret,
                addr,
                live: Mutex::new(pages::overview::LiveCache::default()),
            })
        })
    }
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
            .token("t")
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
    fn options_never_print_the_token() {
        let shown = format!("{:?}", DashboardOptions::new().token("hunter2"));
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
