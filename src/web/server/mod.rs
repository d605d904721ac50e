//! The blocking HTTP server: one accept thread, a thread per open connection (at most
//! `max_connections`, and `max_connections_per_client` per client; connections that have sent
//! nothing make room for new ones, see `slots`; past that one more is answered 503 at once), and at most `threads` requests answered at a time. A connection's thread reads
//! the request head (bounded in size and time, the first byte within `idle_timeout`), lets the
//! [`Service`] judge it (for the dashboard: host, token) before any body is read, reads the
//! body only when the service wants it, waits for a turn, has the service answer, and closes.
//!
//! Slow clients therefore hold only their own connection, never one of the turns that pages
//! are rendered with; answers waiting for clients that read slowly or not at all hold at most
//! [`ANSWER_BUDGET`] bytes between them; and the accept loop keeps going through accept
//! errors (EMFILE, ENFILE, ...), backing off while they last, so a process that ran out of
//! file descriptors for a moment serves again once they are back.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub(crate) mod conn;
pub(crate) mod http;
pub(crate) mod peer;
mod slots;

use crate::error::{Error, ErrorKind, Result};

use conn::Conn;
use http::{Method, Request, Response};
use slots::{Full, SlotId, Slots};

/// The first back-off after an accept error; it doubles while errors go on.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest back-off: a process that got its descriptors back serves within this.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The accept loop wakes at least this often to notice a stop, should the wake-up
/// connection of [`ServerHandle::stop`] fail.
const ACCEPT_WAKE: Duration = Duration::from_secs(1);
/// How long a stop waits for the requests being answered.
const STOP_WAIT: Duration = Duration::from_secs(10);
/// The bytes of answers being sent at a time, at most: an answer that would pass it is
/// replaced by a 503, unless no other is being sent. Clients that do not read their answers
/// hold no more memory than this between them (each for at most the timeout).
pub(crate) const ANSWER_BUDGET: usize = 64 << 20;

/// What a server serves: it judges each request by its head, before any body is read, then
/// answers it; and it may have lines for the log. The dashboard's routes are one.
pub(crate) trait Service: Send + Sync + 'static {
    /// What judging a request learned (who is asking), handed on to [`Service::answer`].
    type Admitted;

    /// Judges a request by its head alone: answers it at once, or lets it proceed. Needs
    /// no turn, so it must not render anything that reads the database.
    fn admit(&self, request: &Request) -> Admission<Self::Admitted>;

    /// The answer to a request [`Service::admit`] let through, its body read if asked for.
    fn answer(&self, request: &Request, admitted: Self::Admitted) -> Response;

    /// A line for the log that is due now; the accept loop asks at least every
    /// [`ACCEPT_WAKE`].
    fn log_due(&self, now: Instant) -> Option<String>;

    /// What is left to log when the server stops.
    fn log_pending(&self, now: Instant) -> Option<String>;
}

/// What [`Service::admit`] decided from a request's head.
pub(crate) enum Admission<A> {
    /// The answer; the body, if any, is never read.
    Answer(Response),
    /// Read the body when `body` says so, then answer with what was `admitted`.
    Proceed { admitted: A, body: bool },
}

/// How the server is bounded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Requests answered at the same time.
    pub(crate) threads: usize,
    /// Open connections at most.
    pub(crate) max_connections: usize,
    /// Open connections from one client (an IPv4 address, an IPv6 /64) at most.
    pub(crate) max_connections_per_client: usize,
    /// For receiving a request, and again for sending its answer.
    pub(crate) timeout: Duration,
    /// For receiving the first byte of the request.
    pub(crate) idle_timeout: Duration,
}

/// A running server. Dropping it stops the server, as [`stop`](ServerHandle::stop) does.
pub(crate) struct ServerHandle<S: Service> {
    addr: SocketAddr,
    shared: Arc<Shared<S>>,
    acceptor: Option<JoinHandle<()>>,
}

impl<S: Service> ServerHandle<S> {
    /// How the server is bounded.
    pub(crate) fn limits(&self) -> Limits {
        self.shared.limits
    }

    /// The address it listens on (with the real port when port 0 was asked for).
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops taking connections and closes the listening socket, ends the connections
    /// still waiting for a request, and waits (up to [`STOP_WAIT`]) for the requests being
    /// answered.
    pub(crate) fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(acceptor) = self.acceptor.take() else {
            return;
        };
        *lock(&self.shared.stopped) = true;
        self.shared.stop_signal.notify_all();
        // Wake the accept loop out of accept(); should this fail, it wakes within
        // ACCEPT_WAKE by itself.
        let _ = TcpStream::connect_timeout(&wake_addr(self.addr), Duration::from_secs(1));
        if acceptor.join().is_err() {
            log::warn!("litejobs web: the accept thread panicked");
        }
        if let Some(line) = self.shared.service.log_pending(Instant::now()) {
            log::warn!("{line}");
        }
        // Connections waiting for their request see its end; those being answered finish.
        let deadline = Instant::now() + STOP_WAIT;
        let mut open = lock(&self.shared.open);
        open.shutdown_reads();
        while open.len() > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                log::warn!(
                    "litejobs web: {} connection(s) still open after {STOP_WAIT:?}; leaving them",
                    open.len()
                );
                break;
            }
            open = self
                .shared
                .closed
                .wait_timeout(open, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        log::info!("litejobs web: stopped listening on {}", self.addr);
    }
}

impl<S: Service> Drop for ServerHandle<S> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The loopback address that reaches a listener bound to `addr` (an unspecified address
/// listens on loopback too).
fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// What the accept thread and the connection threads share.
struct Shared<S> {
    service: S,
    limits: Limits,
    stopped: Mutex<bool>,
    stop_signal: Condvar,
    open: Mutex<Slots>,
    /// Signalled when a connection closes.
    closed: Condvar,
    turns: Turns,
    /// Bytes of answers being sent.
    sending: Budget,
}

impl<S> Shared<S> {
    fn stopping(&self) -> bool {
        *lock(&self.stopped)
    }

    /// Waits `pause`, or less if the server is stopped meanwhile.
    fn pause(&self, pause: Duration) {
        let stopped = lock(&self.stopped);
        let _ = self
            .stop_signal
            .wait_timeout_while(stopped, pause, |stopped| !*stopped);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data behind these locks stays consistent at every await point; a panic elsewhere
    // must not take the server down with it.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// At most `threads` requests answered at once.
struct Turns {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Turns {
    fn take(&self) -> Turn<'_> {
        let mut free = lock(&self.free);
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        Turn(self)
    }
}

struct Turn<'t>(&'t Turns);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *lock(&self.0.free) += 1;
        self.0.freed.notify_one();
    }
}

/// A connection's place among the open ones, given back when dropped (before its socket is
/// closed, so a client that saw the close can count on the place being free).
struct Slot<'s, S> {
    shared: &'s Shared<S>,
    id: SlotId,
}

impl<S> Drop for Slot<'_, S> {
    fn drop(&mut self) {
        lock(&self.shared.open).remove(self.id);
        self.shared.closed.notify_all();
    }
}

/// Bytes being sent, at most `max` of them unless one answer alone is larger.
struct Budget {
    held: Mutex<usize>,
    max: usize,
}

impl Budget {
    fn new(max: usize) -> Budget {
        Budget {
            held: Mutex::new(0),
            max,
        }
    }

    /// Counts `bytes` until the guard is dropped, unless they would pass `max` while others
    /// are counted.
    fn take(&self, bytes: usize) -> Option<Held<'_>> {
        let mut held = lock(&self.held);
        if *held > 0 && held.saturating_add(bytes) > self.max {
            return None;
        }
        *held = held.saturating_add(bytes);
        Some(Held {
            budget: self,
            bytes,
        })
    }
}

/// Bytes counted in a [`Budget`] until dropped.
struct Held<'b> {
    budget: &'b Budget,
    bytes: usize,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut held = lock(&self.budget.held);
        *held = held.saturating_sub(self.bytes);
    }
}

/// Binds `addrs` (the first that works) and starts the accept thread.
pub(crate) fn start<S: Service>(
    addrs: &[SocketAddr],
    limits: Limits,
    make_service: impl FnOnce(SocketAddr) -> Result<S>,
) -> Result<ServerHandle<S>> {
    let listener = TcpListener::bind(addrs).map_err(|e| {
        let shown: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
        Error::new(
            ErrorKind::Io,
            format!("cannot listen on {}: {e}", shown.join(", ")),
        )
    })?;
    let addr = listener.local_addr().map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("the dashboard's socket has no address: {e}"),
        )
    })?;
    // Linux and the BSDs let SO_RCVTIMEO end a blocked accept(): see ACCEPT_WAKE.
    if let Err(e) = socket2::SockRef::from(&listener).set_read_timeout(Some(ACCEPT_WAKE)) {
        log::debug!("litejobs web: no receive timeout on the listener: {e}");
    }
    let shared = Arc::new(Shared {
        service: make_service(addr)?,
        limits,
        stopped: Mutex::new(false),
        stop_signal: Condvar::new(),
        open: Mutex::new(Slots::default()),
        closed: Condvar::new(),
        turns: Turns {
            free: Mutex::new(limits.threads),
            freed: Condvar::new(),
        },
        sending: Budget::new(ANSWER_BUDGET),
    });
    let accepting = shared.clone();
    let acceptor = std::thread::Builder::new()
        .name("litejobs-web-accept".into())
        .spawn(move || accept_loop(&listener, &accepting))
        .map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot start the dashboard's thread: {e}"),
            )
        })?;
    log::info!("litejobs web: listening on http://{addr}/");
    Ok(ServerHandle {
        addr,
        shared,
        acceptor: Some(acceptor),
    })
}

fn accept_loop<S: Service>(listener: &TcpListener, shared: &Arc<Shared<S>>) {
    let mut backoff = Duration::ZERO;
    loop {
        let accepted = listener.accept();
        if shared.stopping() {
            return;
        }
        // The accept loop wakes at least every ACCEPT_WAKE: the time to sum up failed
        // sign-ins in the log.
        if let Some(line) = shared.service.log_due(Instant::now()) {
            log::warn!("{line}");
        }
        match accepted {
            Ok((stream, peer)) => {
                if !backoff.is_zero() {
                    log::warn!("litejobs web: accepting connections again");
                    backoff = Duration::ZERO;
                }
                admit(shared, stream, peer);
            }
            // The listener's wake-up timeout, or a connection that went away while queued.
            Err(e) if is_transient(&e) => {}
            Err(e) => {
                // EMFILE/ENFILE (no file descriptor left), ENOBUFS, ENOMEM: the connection
                // stays queued, so trying again at once would spin. Wait, longer each time,
                // and keep going: a dead accept loop in a live process would be a dashboard
                // that never answers again.
                if backoff.is_zero() {
                    log::warn!(
                        "litejobs web: cannot accept connections: {e}; retrying (at least every \
                         {ACCEPT_BACKOFF_MAX:?}) until it works"
                    );
                } else {
                    log::debug!("litejobs web: accept failed again: {e}");
                }
                backoff = (backoff * 2).clamp(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX);
                shared.pause(backoff);
            }
        }
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        WouldBlock | TimedOut | Interrupted | ConnectionAborted | ConnectionReset
    )
}

/// Gives `stream` a thread of its own, or answers 503 when no place can be made for it.
fn admit<S: Service>(shared: &Arc<Shared<S>>, stream: TcpStream, peer: SocketAddr) {
    let stream = Arc::new(stream);
    let limits = &shared.limits;
    let admitted = lock(&shared.open).admit(
        stream.clone(),
        peer.ip(),
        limits.max_connections_per_client,
        limits.max_connections,
    );
    let (id, received) = match admitted {
        Ok(admitted) => admitted,
        Err(full) => {
            log::debug!("litejobs web: {peer} refused: {full:?} connection cap reached");
            refuse_busy(&stream, full);
            return;
        }
    };
    let serving = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("litejobs-web-conn".into())
        .spawn(move || {
            let slot = Slot {
                shared: &serving,
                id,
            };
            serve(&serving, &stream, &received, peer);
            drop(slot);
            drop(stream);
        });
    if let Err(e) = spawned {
        log::warn!("litejobs web: no thread for a connection from {peer}: {e}");
        let removed = lock(&shared.open).remove(id);
        if let Some(stream) = removed {
            refuse_busy(&stream, Full::Server);
        }
    }
}

/// 503 without waiting: the answer is small enough for an empty socket buffer, and a client
/// that does not take it loses only its own answer. Never blocks: the accept loop calls it.
fn refuse_busy(stream: &TcpStream, full: Full) {
    let message = match full {
        Full::Client => "litejobs: too many connections from your address; try again shortly\n",
        Full::Server => "litejobs: too many connections; try again shortly\n",
    };
    let answer = conn::encode(
        &Response::text(503, message).with_header("Retry-After", "1"),
        false,
    );
    if stream.set_nonblocking(true).is_ok() {
        let _ = std::io::Write::write(&mut &*stream, &answer);
        // Take what the client has sent already (its request): closing a socket with unread
        // input sends a reset, which can destroy the answer before the client reads it.
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            match std::io::Read::read(&mut &*stream, &mut sink) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
    }
}

/// One connection: one request, one answer.
fn serve<S: Service>(
    shared: &Shared<S>,
    stream: &TcpStream,
    received: &AtomicBool,
    peer: SocketAddr,
) {
    let _ = stream.set_nodelay(true);
    let limits = &shared.limits;
    let mut conn = Conn::new(stream, limits.timeout, limits.idle_timeout, received);
    let (response, head_only) = match conn.read_head() {
        Ok(None) => return,
        Err(refusal) => (refusal, false),
        Ok(Some(mut request)) => {
            request.peer = Some(peer.ip());
            let head_only = request.method == Method::Head;
            // A panic in a page becomes a 500, never a dead connection thread.
            let answered =
                catch_unwind(AssertUnwindSafe(|| answer(shared, &mut conn, &mut request)));
            let response = answered.unwrap_or_else(|_| {
                log::error!("litejobs web: a page panicked answering {}", request.url());
                Response::text(500, "litejobs: internal error\n")
            });
            (response, head_only)
        }
    };
    let bytes = if head_only { 0 } else { response.body.len() };
    let (response, _sending) = match shared.sending.take(bytes) {
        Some(sending) => (response, Some(sending)),
        None => {
            log::debug!(
                "litejobs web: answering {peer} 503: {bytes} more bytes would pass the {} MiB \
                 of answers being sent",
                ANSWER_BUDGET >> 20
            );
            drop(response);
            let busy = Response::text(503, "litejobs: busy sending other answers; try again\n")
                .with_header("Retry-After", "1");
            (busy, None)
        }
    };
    if let Err(e) = conn.respond(&response, head_only) {
        log::debug!("litejobs web: the client left before the answer: {e}");
    }
    conn.finish();
}

/// The answer to a request whose head is read: judged first, its body read only if the
/// service wants it, then answered in a turn.
fn answer<S: Service>(shared: &Shared<S>, conn: &mut Conn<'_>, request: &mut Request) -> Response {
    let (admitted, body) = match shared.service.admit(request) {
        Admission::Answer(response) => return response,
        Admission::Proceed { admitted, body } => (admitted, body),
    };
    if body {
        match conn.read_body() {
            Ok(body) => request.body = body,
            Err(refusal) => return refusal,
        }
    }
    let _turn = shared.turns.take();
    if shared.stopping() {
        return Response::text(503, "litejobs: the dashboard is stopping\n");
    }
    shared.service.answer(request, admitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_being_sent_stay_within_the_budget() {
        let budget = Budget::new(100);
        let first = budget.take(60);
        assert!(first.is_some());
        assert!(budget.take(50).is_none(), "60 + 50 passes 100");
        let second = budget.take(40);
        assert!(second.is_some(), "60 + 40 fits");
        drop(first);
        assert!(
            budget.take(60).is_some(),
            "40 + 60 fits once the first is sent"
        );
        drop(second);
        assert!(
            budget.take(1000).is_some(),
            "one answer alone is sent, whatever its size"
        );
    }
}
