//! `litejobs web` as a real process: prints where it listens (port 0 picks a free one),
//! serves the dashboard, stops on SIGTERM with exit 0; refuses a public address without a
//! token, a short token and a missing database with exit 2 and one line; takes the token
//! from a file or the environment; logs failed sign-ins without the token, in a few lines
//! however many, and caps guesses from many addresses in all; and keeps serving after running
//! out of file descriptors.

#![cfg(feature = "cli")]

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Instant;

use super::*;

const BIN: &str = env!("CARGO_BIN_EXE_litejobs");

/// A running `litejobs web` and the lines of its stdout and stderr.
struct WebChild {
    child: crate::support::KillOnDrop,
    lines: Receiver<String>,
    errors: Receiver<String>,
}

/// Sends each line of `pipe` on a channel, from a thread of its own.
fn lines_of(pipe: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

impl WebChild {
    fn start(db: &Path, args: &[&str], envs: &[(&str, &str)]) -> WebChild {
        let mut cmd = Command::new(BIN);
        cmd.arg("--db").arg(db).arg("web").args(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        WebChild::spawn(cmd)
    }

    /// Runs `cmd` (a `litejobs web` command line) with its output piped.
    fn spawn(mut cmd: Command) -> WebChild {
        if !cmd.get_envs().any(|(k, _)| k == "LITEJOBS_WEB_TOKEN") {
            cmd.env_remove("LITEJOBS_WEB_TOKEN");
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("starting litejobs web");
        let lines = lines_of(child.stdout.take().expect("piped stdout"));
        let errors = lines_of(child.stderr.take().expect("piped stderr"));
        WebChild {
            child: crate::support::KillOnDrop(child),
            lines,
            errors,
        }
    }

    /// The URL from the first line, within 30 s.
    fn url(&mut self) -> String {
        let line = match self.lines.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => line,
            Err(e) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let stderr: Vec<String> = self.errors.try_iter().collect();
                panic!("litejobs web printed no address ({e}): {stderr:?}");
            }
        };
        assert!(
            line.starts_with("litejobs web: serving http://127.0.0.1:"),
            "{line}"
        );
        line.split_whitespace()
            .find(|w| w.starts_with("http://"))
            .expect("a URL")
            .to_string()
    }

    /// SIGTERM, then the exit code and the remaining stdout lines, within 30 s.
    fn terminate(self) -> (Option<i32>, Vec<String>) {
        let (code, lines, _) = self.terminate_with_stderr();
        (code, lines)
    }

    /// SIGTERM, then the exit code, the remaining stdout lines and all of stderr, within
    /// 30 s.
    fn terminate_with_stderr(mut self) -> (Option<i32>, Vec<String>, Vec<String>) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // The pipes are closed: the reader threads end after the last line.
                let lines: Vec<String> = self.lines.iter().collect();
                let errors: Vec<String> = self.errors.iter().collect();
                return (status.code(), lines, errors);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("litejobs web did not stop within 30 s of SIGTERM");
            }
            // Bounded polling of the child's exit; there is no event to wait on.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Runs `litejobs web` expecting a refusal within 30 s: exit 2, one stderr line.
fn refused(db: &Path, args: &[&str]) -> String {
    refused_with(db, args, &[])
}

/// [`refused`] with environment variables.
fn refused_with(db: &Path, args: &[&str], envs: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(BIN);
    cmd.arg("--db").arg(db).arg("web").args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut web = WebChild::spawn(cmd);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = web.child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = web.child.kill();
            let _ = web.child.wait();
            let served: Vec<String> = web.lines.try_iter().collect();
            panic!("litejobs web {args:?} was not refused within 30 s: {served:?}");
        }
        // Bounded polling of the child's exit; there is no event to wait on.
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout: Vec<String> = web.lines.iter().collect();
    let stderr: Vec<String> = web.errors.iter().collect();
    assert_eq!(status.code(), Some(2), "{stderr:?}");
    assert_eq!(stderr.len(), 1, "one line: {stderr:?}");
    assert!(stdout.is_empty(), "nothing served: {stdout:?}");
    stderr.join("\n")
}

#[test]
fn serves_the_dashboard_until_sigterm() {
    let env = setup();
    let s = seed(&env.queue);
    let mut web = WebChild::start(&env.path, &["--addr", "127.0.0.1:0"], &[]);
    let url = web.url();
    let mut c = Client::new(&url);
    assert!(c.get("/").expect(200).body.contains("Overview"));
    let job = c.get(&format!("/api/jobs/{}", s.dead)).expect(200).json();
    assert_eq!(job["job"]["payload"]["password"], json!("[masked]"));
    // Actions work from the binary too.
    let page = c.post_from("/", &format!("/jobs/{}/cancel", s.queued), &[]);
    page.redirect();
    assert_eq!(
        env.queue.job(s.queued).expect("read").map(|j| j.status),
        Some(litejobs::JobStatus::Cancelled)
    );
    let (code, lines) = web.terminate();
    assert_eq!(code, Some(0), "clean exit on SIGTERM: {lines:?}");
    assert!(
        lines.iter().any(|l| l == "litejobs web: stopped"),
        "{lines:?}"
    );
    // The port is closed.
    assert!(
        std::net::TcpStream::connect(url.trim_start_matches("http://").trim_end_matches('/'))
            .is_err()
    );
}

#[test]
fn token_and_read_only_flags_reach_the_dashboard() {
    let env = setup();
    let s = seed(&env.queue);
    let mut web = WebChild::start(
        &env.path,
        &["--addr", "127.0.0.1:0", "--read-only"],
        &[("LITEJOBS_WEB_TOKEN", "from-the-environment")],
    );
    let url = web.url();
    let mut c = Client::new(&url);
    c.get("/").expect(401);
    c.bearer = Some("from-the-environment".into());
    let page = c.get(&format!("/jobs/{}", s.dead)).expect(200);
    assert!(
        !page.body.contains("name=\"reason\""),
        "read-only: no requeue form"
    );
    let (code, _) = web.terminate();
    assert_eq!(code, Some(0));
}

#[test]
fn refuses_a_public_address_without_a_token_and_a_missing_database() {
    let env = setup();
    let line = refused(&env.path, &["--addr", "0.0.0.0:0"]);
    assert!(
        line.starts_with("litejobs: refusing to serve the dashboard on 0.0.0.0:0 without a token"),
        "{line}"
    );
    // The advice is a way that other users cannot read in `ps`.
    assert!(
        line.contains("--token-file") && !line.contains("pass --token"),
        "{line}"
    );
    let missing = env.dir.path().join("typo.db");
    let line = refused(&missing, &["--addr", "127.0.0.1:0"]);
    assert!(line.contains("does not exist"), "{line}");
    assert!(!missing.exists(), "no file was created");
    let line = refused(&env.path, &["--addr", "127.0.0.1:0", "--token", ""]);
    assert!(line.contains("token must not be empty"), "{line}");
}

#[test]
fn refuses_a_short_token_and_an_unreadable_token_file() {
    let env = setup();
    let line = refused(&env.path, &["--addr", "127.0.0.1:0", "--token", "short"]);
    assert!(line.contains("at least 16 characters"), "{line}");
    let short = env.dir.path().join("short-token");
    std::fs::write(&short, "short\n").expect("writing the token file");
    let short = short.to_str().expect("UTF-8 path");
    let line = refused(&env.path, &["--addr", "127.0.0.1:0", "--token-file", short]);
    assert!(line.contains("at least 16 characters"), "{line}");
    let missing = env.dir.path().join("no-such-file");
    let missing = missing.to_str().expect("UTF-8 path");
    let line = refused(
        &env.path,
        &["--addr", "127.0.0.1:0", "--token-file", missing],
    );
    assert!(
        line.contains("cannot read the token file") && line.contains("no-such-file"),
        "{line}"
    );
    // Two ways at once: neither silently wins.
    let line = refused_with(
        &env.path,
        &["--addr", "127.0.0.1:0", "--token-file", short],
        &[("LITEJOBS_WEB_TOKEN", "from-the-environment")],
    );
    assert!(line.contains("give the token one way"), "{line}");
}

#[test]
fn takes_the_token_from_a_file_and_logs_failed_sign_ins_without_it() {
    const TOKEN: &str = "from-a-file-0123456789";
    const GUESS: &str = "a-wrong-GUESS-0123456789";
    let env = setup();
    // Written by an editor or `echo`: the line end is not part of the token.
    let mut web = web_with_token_file(&env, &format!("{TOKEN}\n"));
    let url = web.url();
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", web.child.id())).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains(TOKEN),
        "the token is not on the command line"
    );
    let mut c = Client::new(&url);
    c.get("/").expect(401);
    let csrf = c.get("/login").expect(200).csrf();
    c.post_raw("/login", &[("csrf", &csrf), ("token", GUESS)])
        .expect(401);
    c.bearer = Some(TOKEN.into());
    c.get("/api/stats").expect(200);
    let (code, _, stderr) = web.terminate_with_stderr();
    assert_eq!(code, Some(0), "{stderr:?}");
    let failed: Vec<&String> = stderr
        .iter()
        .filter(|l| l.contains("failed sign-in"))
        .collect();
    assert_eq!(failed.len(), 1, "one failed sign-in logged: {stderr:?}");
    assert!(
        failed[0].contains("127.0.0.1"),
        "with the address: {failed:?}"
    );
    assert!(
        !stderr
            .iter()
            .any(|l| l.contains(GUESS) || l.contains(TOKEN)),
        "no token in the log: {stderr:?}"
    );
}

/// The status of `GET /api/stats` with `token` as a bearer token, from `source`.
fn bearer_status(addr: std::net::SocketAddr, source: [u8; 4], token: &str) -> u16 {
    let mut stream = super::connect_from(addr, source);
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    write!(
        stream,
        "GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .expect("sending");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line from {source:?}: {answer:?}"))
}

#[test]
fn guesses_from_many_addresses_are_capped_in_all_and_logged_in_a_few_lines() {
    const TOKEN: &str = "the-right-token-0123456789";
    /// Wrong tokens from all addresses within a minute that lock everybody out.
    const GLOBAL_CAP: usize = 30;
    let env = setup();
    let mut web = web_with_token_file(&env, TOKEN);
    let url = web.url();
    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("a socket address");
    // A script that uses the dashboard: its address is spared a lock-out of everybody.
    assert_eq!(bearer_status(addr, [127, 0, 0, 1], TOKEN), 200);
    // One guess from each of 100 networks (127.0.N.0/24): none reaches its own limit.
    let statuses: Vec<u16> = (1..=100u8)
        .map(|n| bearer_status(addr, [127, 0, n, 1], "a-wrong-guess-0123456789"))
        .collect();
    let refused = statuses.iter().filter(|s| **s == 401).count();
    assert_eq!(refused, GLOBAL_CAP, "guesses looked at: {statuses:?}");
    assert!(
        statuses[GLOBAL_CAP..].iter().all(|s| *s == 429),
        "the rest are refused unseen: {statuses:?}"
    );
    // Now even the right token from a new address waits; the script's address does not.
    assert_eq!(bearer_status(addr, [127, 1, 0, 1], TOKEN), 429);
    assert_eq!(bearer_status(addr, [127, 0, 0, 1], TOKEN), 200);
    let (code, _, stderr) = web.terminate_with_stderr();
    assert_eq!(code, Some(0), "{stderr:?}");
    let logged: Vec<&String> = stderr.iter().filter(|l| l.contains("sign-in")).collect();
    // The first guess, the lock-out of everybody, and the others summed up at the stop.
    assert_eq!(logged.len(), 3, "{logged:#?}");
    assert!(
        logged[0].contains("failed sign-in (bearer token) from 127.0.1.1"),
        "{logged:#?}"
    );
    assert!(
        logged[1].contains("every client is locked out"),
        "{logged:#?}"
    );
    assert!(
        logged[2].contains(&format!("{} more failed sign-in(s)", GLOBAL_CAP - 1))
            && logged[2].contains(&format!("from {} network(s)", GLOBAL_CAP - 1)),
        "{logged:#?}"
    );
}

#[test]
fn keeps_serving_after_running_out_of_file_descriptors() {
    let env = setup();
    seed(&env.queue);
    // 64 descriptors: a few for the database and the listener, the rest for connections.
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" \"$@\"")
        .arg(BIN)
        .arg("--db")
        .arg(&env.path)
        .args(["web", "--addr", "127.0.0.1:0"])
        .env("RUST_LOG", "warn");
    let mut web = WebChild::spawn(cmd);
    let url = web.url();
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let addr: std::net::SocketAddr = addr.parse().expect("a socket address");
    // More idle connections than the process has descriptors: those past the limit wait in
    // the listener's backlog while accept() fails with EMFILE. They come from 16 addresses,
    // so that the per-client cap does not close them first.
    let held: Vec<TcpStream> = (0..100u8)
        .map(|i| super::connect_from(addr, [127, 0, 0, 10 + i % 16]))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match web.errors.recv_timeout(left) {
            Ok(line) if line.contains("Too many open files") => break,
            Ok(line) => seen.push(line),
            Err(e) => panic!(
                "litejobs web logged no EMFILE within 30 s with 100 connections under \
                 `ulimit -n 64` ({e}); its stderr: {seen:?}"
            ),
        }
    }
    // The connections go; the dashboard must take new ones again.
    drop(held);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut resp = agent
        .get(format!("{url}api/stats"))
        .call()
        .unwrap_or_else(|e| {
            panic!("the dashboard no longer answers after running out of descriptors: {e}")
        });
    assert_eq!(resp.status().as_u16(), 200);
    let mut body = String::new();
    resp.body_mut()
        .as_reader()
        .read_to_string(&mut body)
        .expect("reading the answer");
    assert!(body.contains("\"counts\""), "{body}");
    let (code, _, stderr) = web.terminate_with_stderr();
    assert_eq!(code, Some(0), "clean exit on SIGTERM: {stderr:?}");
    assert!(
        !stderr.iter().any(|l| l.contains("panicked")),
        "nothing panicked: {stderr:?}"
    );
}

/// `litejobs web` on loopback with its token in a file holding `contents`, logging warnings.
fn web_with_token_file(env: &TestEnv, contents: &str) -> WebChild {
    let file = env.dir.path().join("web-token");
    std::fs::write(&file, contents).expect("writing the token file");
    let file = file.to_str().expect("UTF-8 path");
    WebChild::start(
        &env.path,
        &["--addr", "127.0.0.1:0", "--token-file", file],
        &[("RUST_LOG", "warn")],
    )
}
