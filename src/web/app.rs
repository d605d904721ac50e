//! What every request handler shares ([`App`]) and what one page is rendered with ([`Ctx`]).

use std::net::SocketAddr;
use std::sync::Mutex;

use crate::error::Result;
use crate::redact::Redactor;
use crate::Queue;

use super::auth::{Access, Gate};
use super::csrf;
use super::flash::{self, Flash};
use super::keys::Secret;
use super::live::LiveCache;
use super::server::http::{Request, Response};

/// The dashboard's state, shared by its handler threads.
pub(crate) struct App {
    pub(crate) queue: Queue,
    /// Who may come in: the token, the signed-in browsers, the wrong tokens by address.
    pub(crate) gate: Gate,
    pub(crate) read_only: bool,
    pub(crate) redactor: Redactor,
    pub(crate) secret: Secret,
    /// The address the server listens on.
    pub(crate) addr: SocketAddr,
    /// The overview's live figures, shared by every polling browser for a moment.
    pub(crate) live: Mutex<LiveCache>,
}

/// What a page needs besides its data.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    /// The token every form of this response carries.
    pub(crate) csrf: String,
    /// Cookies this response sets.
    pub(crate) set_cookies: Vec<String>,
    /// Actions are hidden and refused.
    pub(crate) read_only: bool,
    /// How the request got in (a session shows the sign-out button).
    pub(crate) access: Access,
    /// The message of the action that led here.
    pub(crate) flash: Option<Flash>,
    /// Now, by the queue's clock.
    pub(crate) now: i64,
}

impl Ctx {
    /// The context of one request.
    pub(crate) fn new(app: &App, req: &Request, access: Access) -> Result<Ctx> {
        let csrf = csrf::for_request(&app.secret, req, access)?;
        Ok(Ctx {
            csrf: csrf.token,
            set_cookies: csrf.set_cookie.into_iter().collect(),
            read_only: app.read_only,
            access,
            flash: flash::from_request(&app.secret, req),
            now: app.queue.now_ms(),
        })
    }

    /// Adds this context's cookies to a response.
    pub(crate) fn finish(&self, mut resp: Response) -> Response {
        for cookie in &self.set_cookies {
            resp.headers.push(("Set-Cookie".into(), cookie.clone()));
        }
        resp
    }
}
