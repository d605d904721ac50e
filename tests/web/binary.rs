//! `litejobs web` as a real process: prints where it listens (port 0 picks a free one),
//! serves the dashboard, stops on SIGTERM with exit 0; refuses a public address without a
//! token and a missing database with exit 2 and one line.

#![cfg(feature = "cli")]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Instant;

use super::*;

const BIN: &str = env!("CARGO_BIN_EXE_litejobs");

/// A running `litejobs web` and the lines of its stdout.
struct WebChild {
    child: Child,
    lines: Receiver<String>,
}

impl WebChild {
    fn start(db: &Path, args: &[&str], envs: &[(&str, &str)]) -> WebChild {
        let mut cmd = Command::new(BIN);
        cmd.arg("--db")
            .arg(db)
            .arg("web")
            .args(args)
            .env_remove("LITEJOBS_WEB_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("starting litejobs web");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        WebChild { child, lines: rx }
    }

    /// The URL from the first line, within 30 s.
    fn url(&mut self) -> String {
        let line = match self.lines.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => line,
            Err(e) => {
                let _ = self.child.kill();
                let mut stderr = String::new();
                if let Some(mut pipe) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
                }
                let _ = self.child.wait();
                panic!("litejobs web printed no address ({e}): {stderr}");
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
    fn terminate(mut self) -> (Option<i32>, Vec<String>) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let lines: Vec<String> = self.lines.try_iter().collect();
                return (status.code(), lines);
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

/// Runs `litejobs web` expecting a refusal: exit 2, one stderr line.
fn refused(db: &Path, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("--db")
        .arg(db)
        .arg("web")
        .args(args)
        .env_remove("LITEJOBS_WEB_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("running litejobs web");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(out.stdout.is_empty(), "nothing served");
    stderr
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
        &[("LITEJOBS_WEB_TOKEN", "from-env")],
    );
    let url = web.url();
    let mut c = Client::new(&url);
    c.get("/").expect(401);
    c.bearer = Some("from-env".into());
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
    let missing = env.dir.path().join("typo.db");
    let line = refused(&missing, &["--addr", "127.0.0.1:0"]);
    assert!(line.contains("does not exist"), "{line}");
    assert!(!missing.exists(), "no file was created");
    let line = refused(&env.path, &["--addr", "127.0.0.1:0", "--token", ""]);
    assert!(line.contains("token must not be empty"), "{line}");
}
