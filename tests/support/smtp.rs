//! A small SMTP server on 127.0.0.1 for the email tests: it speaks enough SMTP for lettre
//! (EHLO/HELO, AUTH PLAIN, MAIL FROM, RCPT TO, DATA, RSET, NOOP, QUIT; no TLS), records every
//! message it accepts and every user and password it is given, and can be scripted to answer a given code at RCPT or after DATA, or to stay
//! silent after accepting a connection (so the client times out).
//!
//! Each connection runs on its own thread with read timeouts, so nothing outlives the test:
//! dropping the [`SmtpSink`] stops accepting and joins every thread.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a connection waits for the client's next line before giving up.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a scripted answer is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Instead of the greeting: the server says nothing until the client hangs up.
    Stall,
    /// The reply to `RCPT TO`.
    Rcpt,
    /// The reply after the message data (the end of `DATA`).
    Data,
}

/// A scripted answer, used once by the next connection that reaches its stage.
#[derive(Debug, Clone)]
struct Fault {
    stage: Stage,
    code: u16,
    text: String,
}

/// One message the sink accepted.
#[derive(Debug, Clone)]
pub struct Received {
    /// The envelope sender (`MAIL FROM`).
    pub mail_from: String,
    /// The envelope recipients (`RCPT TO`).
    pub rcpt_to: Vec<String>,
    /// The message as sent (dot-unstuffed), headers and body.
    pub data: String,
}

impl Received {
    /// The value of the first header `name` (case-insensitive), unfolded.
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.data.split("\r\n\r\n").next().unwrap_or("");
        let mut value: Option<String> = None;
        for line in head.split("\r\n") {
            if let Some(v) = value.as_mut() {
                if line.starts_with(' ') || line.starts_with('\t') {
                    v.push(' ');
                    v.push_str(line.trim());
                    continue;
                }
                break;
            }
            if let Some((n, v)) = line.split_once(':') {
                if n.eq_ignore_ascii_case(name) {
                    value = Some(v.trim().to_string());
                }
            }
        }
        value
    }

    /// The body after the headers.
    pub fn body(&self) -> &str {
        self.data.split_once("\r\n\r\n").map_or("", |(_, b)| b)
    }
}

#[derive(Default)]
struct State {
    messages: Vec<Received>,
    faults: VecDeque<Fault>,
    connections: usize,
    /// Every SMTP command line received, in order (for assertions on the conversation).
    commands: Vec<String>,
    /// The (user, password) of every `AUTH PLAIN`, decoded.
    logins: Vec<(String, String)>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next scripted fault for `stage`, if the first one waiting is for it.
    fn take_fault(&self, stage: Stage) -> Option<Fault> {
        let mut state = self.lock();
        if state.faults.front().is_some_and(|f| f.stage == stage) {
            return state.faults.pop_front();
        }
        None
    }
}

/// The running server; stopped when dropped.
pub struct SmtpSink {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<Vec<JoinHandle<()>>>>,
}

impl SmtpSink {
    /// Starts a sink on a free port of 127.0.0.1.
    pub fn start() -> SmtpSink {
        let listener =
            TcpListener::bind("127.0.0.1:0").expect("binding the SMTP sink to 127.0.0.1");
        let addr = listener.local_addr().expect("the SMTP sink's address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let acceptor_shared = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name("smtp-sink".to_string())
            .spawn(move || accept_loop(&listener, &acceptor_shared))
            .expect("starting the SMTP sink thread");
        SmtpSink {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// The sink's port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// An `smtp://` URL for it: no TLS, and a short client timeout for the stall tests.
    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}?tls=none&timeout=2s", self.port())
    }

    /// Scripts the next answer at `stage`: e.g. `(Stage::Rcpt, 451, "4.3.0 try later")`.
    /// Scripted answers are used in the order given.
    pub fn fail_next(&self, stage: Stage, code: u16, text: &str) {
        self.shared.lock().faults.push_back(Fault {
            stage,
            code,
            text: text.to_string(),
        });
    }

    /// The messages accepted so far.
    pub fn messages(&self) -> Vec<Received> {
        self.shared.lock().messages.clone()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.lock().connections
    }

    /// The command lines received so far (e.g. `MAIL FROM:<a@b>`), across connections.
    pub fn commands(&self) -> Vec<String> {
        self.shared.lock().commands.clone()
    }

    /// The (user, password) pairs clients authenticated with (`AUTH PLAIN`, any accepted).
    pub fn logins(&self) -> Vec<(String, String)> {
        self.shared.lock().logins.clone()
    }

    /// Waits until at least `n` messages arrived, at most `within`; returns them.
    pub fn wait_messages(&self, n: usize, within: Duration) -> Vec<Received> {
        let deadline = Instant::now() + within;
        let mut state = self.shared.lock();
        while state.messages.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the SMTP sink got {} messages, expected {n} within {within:?}",
                state.messages.len()
            );
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        state.messages.clone()
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Unblock accept().
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            if let Ok(connections) = acceptor.join() {
                for c in connections {
                    let _ = c.join();
                }
            }
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) -> Vec<JoinHandle<()>> {
    let mut threads = Vec::new();
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        shared.lock().connections += 1;
        let conn_shared = Arc::clone(shared);
        if let Ok(handle) = std::thread::Builder::new()
            .name("smtp-sink-conn".to_string())
            .spawn(move || {
                let _ = serve(stream, &conn_shared);
            })
        {
            threads.push(handle);
        }
    }
    threads
}

fn serve(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut out = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let reply = |out: &mut TcpStream, text: &str| out.write_all(format!("{text}\r\n").as_bytes());
    if shared.take_fault(Stage::Stall).is_some() {
        // Say nothing; wait for the client to give up (or the read timeout).
        let mut line = String::new();
        while !shared.stop.load(Ordering::SeqCst) && reader.read_line(&mut line)? > 0 {
            line.clear();
        }
        return Ok(());
    }
    reply(&mut out, "220 sink.test ESMTP ready")?;
    let mut mail_from = String::new();
    let mut rcpt_to: Vec<String> = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let command = line.trim_end_matches(['\r', '\n']).to_string();
        shared.lock().commands.push(command.clone());
        let upper = command.to_ascii_uppercase();
        if upper.starts_with("EHLO") {
            out.write_all(
                b"250-sink.test\r\n250-8BITMIME\r\n250-SMTPUTF8\r\n250-AUTH PLAIN\r\n250 SIZE 10485760\r\n",
            )?;
        } else if upper.starts_with("HELO") || upper.starts_with("NOOP") {
            reply(&mut out, "250 OK")?;
        } else if upper.starts_with("AUTH PLAIN ") {
            // RFC 4616: base64 of authzid NUL user NUL password, sent with the command.
            match plain_login(&command["AUTH PLAIN ".len()..]) {
                Some(login) => {
                    shared.lock().logins.push(login);
                    reply(&mut out, "235 2.7.0 Authentication successful")?;
                }
                None => reply(&mut out, "501 5.5.2 malformed AUTH PLAIN")?,
            }
        } else if upper.starts_with("MAIL FROM:") {
            mail_from = address_of(&command["MAIL FROM:".len()..]);
            rcpt_to.clear();
            reply(&mut out, "250 2.1.0 OK")?;
        } else if upper.starts_with("RCPT TO:") {
            match shared.take_fault(Stage::Rcpt) {
                Some(f) => reply(&mut out, &format!("{} {}", f.code, f.text))?,
                None => {
                    rcpt_to.push(address_of(&command["RCPT TO:".len()..]));
                    reply(&mut out, "250 2.1.5 OK")?;
                }
            }
        } else if upper == "DATA" {
            reply(&mut out, "354 End data with <CR><LF>.<CR><LF>")?;
            let mut data = String::new();
            loop {
                let mut l = String::new();
                if reader.read_line(&mut l)? == 0 {
                    return Ok(());
                }
                if l == ".\r\n" || l == ".\n" {
                    break;
                }
                // Dot-unstuffing (RFC 5321 4.5.2).
                data.push_str(l.strip_prefix('.').unwrap_or(&l));
            }
            match shared.take_fault(Stage::Data) {
                Some(f) => reply(&mut out, &format!("{} {}", f.code, f.text))?,
                None => {
                    let n = {
                        let mut state = shared.lock();
                        state.messages.push(Received {
                            mail_from: mail_from.clone(),
                            rcpt_to: rcpt_to.clone(),
                            data: data.trim_end_matches("\r\n").to_string() + "\r\n",
                        });
                        state.messages.len()
                    };
                    shared.changed.notify_all();
                    reply(&mut out, &format!("250 2.0.0 Ok: queued as SINK-{n}"))?;
                }
            }
        } else if upper.starts_with("RSET") {
            mail_from.clear();
            rcpt_to.clear();
            reply(&mut out, "250 OK")?;
        } else if upper.starts_with("QUIT") {
            reply(&mut out, "221 2.0.0 Bye")?;
            return Ok(());
        } else {
            reply(&mut out, "500 5.5.2 command not recognized")?;
        }
    }
}

/// The (user, password) of an `AUTH PLAIN` initial response.
fn plain_login(response: &str) -> Option<(String, String)> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(response.trim())
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let mut parts = text.splitn(3, '\0');
    let (_authzid, user, password) = (parts.next()?, parts.next()?, parts.next()?);
    Some((user.to_string(), password.to_string()))
}

/// `<a@b> SIZE=..` → `a@b`.
fn address_of(arg: &str) -> String {
    let arg = arg.trim();
    match (arg.find('<'), arg.find('>')) {
        (Some(open), Some(close)) if close > open => arg[open + 1..close].to_string(),
        _ => arg.split_whitespace().next().unwrap_or("").to_string(),
    }
}
