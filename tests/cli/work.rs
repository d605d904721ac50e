//! work: the built-in handlers until SIGTERM, or a clear refusal when there are none or
//! their settings are bad.
//!
//! Which built-in kinds a build enables is the library's business: each test asks the
//! library (with the same variables it gives the child) whether any handler registers, and
//! holds the binary to the matching behaviour.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};

use super::*;

/// Whether the built-in kinds register a handler with these variables set on top of the
/// process environment (the same check `work` makes).
fn builtins_register_a_handler(vars: &[(&str, &str)]) -> bool {
    let queue = Queue::open_in_memory().expect("in-memory queue");
    let lookup = |name: &str| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
            .or_else(|| std::env::var(name).ok())
    };
    let options = litejobs::builtin::BuiltinOptions::from_lookup(&lookup).expect("builtin options");
    let builder = litejobs::builtin::register(Worker::builder(&queue), &options)
        .expect("builtin registration");
    match builder.start() {
        Ok(worker) => {
            worker.shutdown(Duration::from_secs(5)).expect("shutdown");
            true
        }
        Err(e) if e.to_string().contains("no handlers registered") => false,
        Err(e) => panic!("starting the built-ins failed: {e}"),
    }
}

/// A `litejobs work` child and the lines of its stderr.
pub(super) struct WorkChild {
    pub(super) child: crate::support::KillOnDrop,
    lines: Receiver<String>,
    pub(super) seen: Vec<String>,
    deadline: Instant,
}

impl WorkChild {
    fn start(db: &Path, vars: &[(&str, &str)]) -> WorkChild {
        let args = [
            "--concurrency",
            "2",
            "--queue",
            "webhooks=1",
            "--grace",
            "5s",
        ];
        WorkChild::start_with(db, &args, vars)
    }

    /// `litejobs work ARGS` with `vars` set.
    pub(super) fn start_with(db: &Path, args: &[&str], vars: &[(&str, &str)]) -> WorkChild {
        let mut cmd = litejobs(db);
        cmd.arg("work")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("starting litejobs work");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        WorkChild {
            child: crate::support::KillOnDrop(child),
            lines: rx,
            seen: Vec::new(),
            deadline: Instant::now() + Duration::from_secs(30),
        }
    }

    /// `litejobs work ARGS`, once it says it is running.
    pub(super) fn running(db: &Path, args: &[&str]) -> WorkChild {
        let mut work = WorkChild::start_with(db, args, &[]);
        assert!(work.wait_for_line("running on"), "{:?}", work.seen);
        work
    }

    /// Reads stderr until a line contains `needle` (true) or stderr closes (false).
    pub(super) fn wait_for_line(&mut self, needle: &str) -> bool {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(needle);
                    self.seen.push(line);
                    if found {
                        return true;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return false,
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!("litejobs work: no {needle:?} within 30 s: {:?}", self.seen);
                }
            }
        }
    }

    /// Waits for the exit: reads stderr until the process closes it (bounded by the
    /// deadline), then reaps the process.
    pub(super) fn exit_code(mut self) -> (Option<i32>, Vec<String>) {
        const NEVER: &str = "\u{0}never printed\u{0}";
        while self.wait_for_line(NEVER) {}
        let status = self.child.wait().expect("waiting for litejobs work");
        (status.code(), self.seen)
    }
}

pub(super) fn initialized_db(dir: &TempDir) -> (PathBuf, PgGuard) {
    let (db, pg) = new_db(dir.path(), "sidecar.db");
    run(&db, &["init"]).ok();
    (db, pg)
}

#[test]
fn work_runs_the_builtins_and_stops_cleanly_on_sigterm() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let mut work = WorkChild::start(&db, &[]);
    if !builtins_register_a_handler(&[]) {
        let (code, lines) = work.exit_code();
        assert_eq!(code, Some(2), "{lines:?}");
        assert!(
            lines.iter().any(|l| l.contains("no handlers registered")),
            "{lines:?}"
        );
        return;
    }
    assert!(
        work.wait_for_line("running on"),
        "work should start: {:?}",
        work.seen
    );
    let pid = work.child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "clean exit on SIGTERM: {lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("shutting down")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("stopped cleanly")),
        "{lines:?}"
    );
}

#[test]
fn work_without_builtins_exits_2_with_one_clear_line() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let off = [("LITEJOBS_WEBHOOK_ENABLED", "0")];
    let mut work = WorkChild::start(&db, &off);
    if builtins_register_a_handler(&off) {
        // A build whose other kinds run without webhooks: it must start like any other.
        assert!(work.wait_for_line("running on"), "{:?}", work.seen);
        let _ = work.child.kill();
        return;
    }
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(2), "{lines:?}");
    assert_eq!(lines.len(), 1, "one stderr line: {lines:?}");
    assert!(lines[0].starts_with("litejobs: "), "{lines:?}");
    assert!(lines[0].contains("no handlers registered"), "{lines:?}");
}

#[test]
fn work_refuses_a_bad_builtin_setting_before_touching_the_database() {
    let dir = temp_dir();
    let (db, _pg) = new_db(dir.path(), "never.db");
    let work = WorkChild::start(&db, &[("LITEJOBS_WEBHOOK_TIMEOUT", "soon")]);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(2), "{lines:?}");
    assert_eq!(lines.len(), 1, "one stderr line: {lines:?}");
    assert!(lines[0].contains("LITEJOBS_WEBHOOK_TIMEOUT"), "{lines:?}");
    #[cfg(feature = "postgres")]
    if let Some(schema) = &_pg {
        let created = schema.first_i64(&format!(
            "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = '{}'",
            schema.name
        ));
        assert_eq!(created, 0, "no schema was created");
        return;
    }
    assert!(!db.exists(), "no database was created");
}
