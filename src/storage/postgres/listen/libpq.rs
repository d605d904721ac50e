//! The one place litejobs calls C itself: a libpq connection that listens, and blocks on its
//! socket until a notification arrives. diesel's `PgConnection` reads notifications only when
//! asked and does not give its socket out, so a worker would have to wake up to ask; this
//! connection lets the listening thread sleep in `poll(2)` instead, and wake the moment the
//! server sends a notification. Everything else, the listening connection's statements
//! included, goes through libpq's plain blocking calls, as diesel makes them.
//!
//! Each `unsafe` block says why it is sound. The connection is owned by one value and freed
//! once, on drop; the pointers libpq returns are used only while they live.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr::NonNull;
use std::time::Duration;

use pq_sys::{
    ConnStatusType, ExecStatusType, PGconn, PQclear, PQconnectdb, PQconsumeInput, PQerrorMessage,
    PQexec, PQfinish, PQfreemem, PQnotifies, PQresultErrorMessage, PQresultStatus,
    PQsetNoticeProcessor, PQsocket, PQstatus,
};

/// A connection of its own that receives notifications.
pub(super) struct ListenConn {
    conn: NonNull<PGconn>,
}

// SAFETY: libpq allows a connection to be used from any thread as long as one thread uses it
// at a time; a `ListenConn` is used only through `&mut self` or by its owner's drop.
unsafe impl Send for ListenConn {}

/// Why [`ListenConn::wait`] returned.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Woken {
    /// At least one notification arrived.
    Notified,
    /// The stop socket became readable (its other end was written to or dropped).
    Stopped,
}

impl ListenConn {
    /// Connects to `url` (a libpq URL or key=value string) and runs each of `statements` in
    /// turn (so the last one, the `LISTEN`, is what the server shows as the connection's query).
    pub(super) fn open(url: &str, statements: &[&str]) -> Result<ListenConn, String> {
        let url = CString::new(url).map_err(|_| "the server URL holds a NUL byte".to_string())?;
        // SAFETY: `url` is a NUL-terminated string alive for the call; the connection returned
        // is owned by the `ListenConn` below, which frees it once.
        let raw = unsafe { PQconnectdb(url.as_ptr()) };
        let conn = ListenConn {
            conn: NonNull::new(raw)
                .ok_or_else(|| "libpq could not allocate a connection".to_string())?,
        };
        // SAFETY: a live connection (owned by `conn`).
        if unsafe { PQstatus(conn.conn.as_ptr()) } != ConnStatusType::CONNECTION_OK {
            return Err(conn.error());
        }
        // Notices (warnings the server sends) would go to stderr: the library writes none.
        // SAFETY: a live connection; the processor ignores its arguments and lives forever.
        unsafe {
            PQsetNoticeProcessor(
                conn.conn.as_ptr(),
                Some(ignore_notice),
                std::ptr::null_mut(),
            )
        };
        for statement in statements {
            conn.exec(statement)?;
        }
        Ok(conn)
    }

    /// Runs `sql` (simple query protocol), failing with the server's message.
    fn exec(&self, sql: &str) -> Result<(), String> {
        let sql = CString::new(sql).map_err(|_| "a statement holds a NUL byte".to_string())?;
        // SAFETY: a live connection and a NUL-terminated string alive for the call.
        let result = unsafe { PQexec(self.conn.as_ptr(), sql.as_ptr()) };
        if result.is_null() {
            return Err(self.error());
        }
        // SAFETY: `result` is a live result until the PQclear below; the message it returns
        // is copied before that.
        let failed = unsafe {
            match PQresultStatus(result) {
                ExecStatusType::PGRES_COMMAND_OK
                | ExecStatusType::PGRES_TUPLES_OK
                | ExecStatusType::PGRES_EMPTY_QUERY => None,
                _ => Some(text(PQresultErrorMessage(result))),
            }
        };
        // SAFETY: frees the result once; it is not used after.
        unsafe { PQclear(result) };
        match failed {
            None => Ok(()),
            Some(message) => Err(message),
        }
    }

    /// The connection's latest error, as libpq words it.
    fn error(&self) -> String {
        // SAFETY: a live connection; the message is copied before any other call on it.
        let message = unsafe { text(PQerrorMessage(self.conn.as_ptr())) };
        if message.is_empty() {
            "the connection to the server failed".to_string()
        } else {
            message
        }
    }

    /// Blocks until a notification for `schema` has arrived (its payload names it, or is
    /// empty; every notification that arrived is taken), `stop` is told to stop, or the
    /// connection fails (its error).
    #[cfg(unix)]
    pub(super) fn wait(&mut self, schema: &str, stop: &StopWatch) -> Result<Woken, String> {
        use std::os::fd::AsRawFd;
        loop {
            if self.take_notifications(schema) {
                return Ok(Woken::Notified);
            }
            // SAFETY: a live connection.
            let socket = unsafe { PQsocket(self.conn.as_ptr()) };
            if socket < 0 {
                return Err(self.error());
            }
            let mut fds = [
                libc::pollfd {
                    fd: socket,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: stop.socket.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: `fds` is a live array of two pollfd for the call; both descriptors stay
            // open during it (the connection's and `stop`'s, both borrowed).
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if ready < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(format!("waiting for notifications failed: {e}"));
            }
            if fds[1].revents != 0 {
                return Ok(Woken::Stopped);
            }
            if fds[0].revents & libc::POLLNVAL != 0 {
                return Err("the connection's socket was closed".to_string());
            }
            if fds[0].revents != 0 {
                self.read_input()?;
            }
        }
    }

    /// Where there is no `poll(2)`: reads what arrived every few milliseconds.
    #[cfg(not(unix))]
    pub(super) fn wait(&mut self, schema: &str, stop: &StopWatch) -> Result<Woken, String> {
        loop {
            if self.take_notifications(schema) {
                return Ok(Woken::Notified);
            }
            if stop.stopped_within(Duration::from_millis(4)) {
                return Ok(Woken::Stopped);
            }
            self.read_input()?;
        }
    }

    /// Reads what the server sent (a closed socket fails here, or marks the connection bad).
    fn read_input(&mut self) -> Result<(), String> {
        // SAFETY: a live connection.
        let read = unsafe { PQconsumeInput(self.conn.as_ptr()) };
        // SAFETY: a live connection.
        let bad = unsafe { PQstatus(self.conn.as_ptr()) } != ConnStatusType::CONNECTION_OK;
        if read == 0 || bad {
            return Err(self.error());
        }
        Ok(())
    }

    /// True when libpq holds notifications already read for `schema` (their payload names
    /// it, or is empty); takes them all.
    fn take_notifications(&mut self, schema: &str) -> bool {
        let mut any = false;
        loop {
            // SAFETY: a live connection; a notification returned is ours to free, once.
            let notification = unsafe { PQnotifies(self.conn.as_ptr()) };
            if notification.is_null() {
                return any;
            }
            // SAFETY: a live notification; its payload is copied before it is freed.
            let payload = unsafe { text((*notification).extra) };
            // SAFETY: as above; not used after.
            unsafe { PQfreemem(notification.cast::<c_void>()) };
            any |= payload.is_empty() || payload == schema;
        }
    }
}

impl Drop for ListenConn {
    fn drop(&mut self) {
        // SAFETY: the connection is owned here and freed once; nothing uses it after.
        unsafe { PQfinish(self.conn.as_ptr()) };
    }
}

/// Tells a listening thread to stop: dropping it wakes the thread's [`StopWatch`].
pub(super) struct Stopper {
    #[cfg(unix)]
    _socket: std::os::unix::net::UnixStream,
    #[cfg(not(unix))]
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[cfg(not(unix))]
impl Drop for Stopper {
    fn drop(&mut self) {
        self.flag.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The listening thread's side of a [`Stopper`].
pub(super) struct StopWatch {
    #[cfg(unix)]
    socket: std::os::unix::net::UnixStream,
    #[cfg(not(unix))]
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// A stopper and the watch it wakes (on Unix, the two ends of a socket pair: the watch's end
/// reads end-of-file once the stopper's is closed, which `poll` sees).
pub(super) fn stop_pair() -> std::io::Result<(Stopper, StopWatch)> {
    #[cfg(unix)]
    {
        let (a, b) = std::os::unix::net::UnixStream::pair()?;
        Ok((Stopper { _socket: a }, StopWatch { socket: b }))
    }
    #[cfg(not(unix))]
    {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        Ok((
            Stopper {
                flag: std::sync::Arc::clone(&flag),
            },
            StopWatch { flag },
        ))
    }
}

impl StopWatch {
    /// Waits up to `wait`; true when told to stop (before or meanwhile).
    pub(super) fn stopped_within(&self, wait: Duration) -> bool {
        #[cfg(unix)]
        {
            use std::io::Read;
            // Nothing is ever written: a read ends at end-of-file (stopped) or the timeout.
            if self
                .socket
                .set_read_timeout(Some(wait.max(Duration::from_millis(1))))
                .is_err()
            {
                std::thread::sleep(wait);
                return false;
            }
            (&self.socket).read(&mut [0u8; 1]).is_ok()
        }
        #[cfg(not(unix))]
        {
            std::thread::sleep(wait);
            self.flag.load(std::sync::atomic::Ordering::SeqCst)
        }
    }
}

/// A notice processor that drops the notice.
extern "C" fn ignore_notice(_arg: *mut c_void, _message: *const c_char) {}

/// A copy of a C string libpq returned (trimmed: libpq's messages end with a newline).
///
/// # Safety
/// `ptr` is null or a NUL-terminated string alive for the call.
unsafe fn text(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .trim()
        .to_string()
}
