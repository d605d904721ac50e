//! Child processes for the process-level tests (`crash`, `multiprocess`).
//!
//! There is one test binary, so a child is the same binary run again with one test selected
//! (`--exact module::child_fn`) and a role in [`ROLE_VAR`]: that test function does the
//! child's work when the role is set and returns at once otherwise (so in a normal run it is
//! an empty, passing test). Everything a child needs (database path, log path, seed) goes
//! through environment variables of the spawned command, never of the test process.
//!
//! Also here: a bounded [`Deadline`], a seeded [`Prng`] for reproducible "random" moments, an
//! append-only line log that survives SIGKILL ([`AppendLog`]), and a [`LogTail`] that reads
//! the lines other processes appended since the last look.

use std::ffi::OsString;
use std::fmt::Display;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use litejobs::{JobStatus, Queue};

/// The child's role; a child test does nothing unless this is set to its role.
pub const ROLE_VAR: &str = "LITEJOBS_TEST_CHILD";
/// The database file a child opens.
pub const DB_VAR: &str = "LITEJOBS_TEST_DB";
/// The line log a child appends to.
pub const LOG_VAR: &str = "LITEJOBS_TEST_LOG";
/// A file whose existence tells a child something (go, stop, ...), per role.
pub const SIGNAL_VAR: &str = "LITEJOBS_TEST_SIGNAL";
/// A file a child creates to say it is ready.
pub const READY_VAR: &str = "LITEJOBS_TEST_READY";
/// A seed for a child's own PRNG; also read by the parent tests to replay a run.
pub const SEED_VAR: &str = "LITEJOBS_TEST_SEED";

/// How long any child lives at most, so an orphan (its parent test died) cannot linger.
pub const CHILD_LIFETIME_CAP: Duration = Duration::from_secs(110);

/// True when this process is a child running `role`.
pub fn is_child(role: &str) -> bool {
    std::env::var(ROLE_VAR).is_ok_and(|r| r == role)
}

/// A path given to this child through `var`.
pub fn env_path(var: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("child process: environment variable {var} is not set"))
}

/// A number given to this child through `var`.
pub fn env_u64(var: &str) -> u64 {
    let text = std::env::var(var)
        .unwrap_or_else(|_| panic!("child process: environment variable {var} is not set"));
    text.parse()
        .unwrap_or_else(|e| panic!("child process: {var}={text:?} is not a number: {e}"))
}

/// Nanoseconds since the Unix epoch by the wall clock, which every process on the machine
/// shares (so times written by different processes compare).
pub fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_nanos()
}

/// A wall-time cap on a whole test: every loop checks it, so nothing can hang.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    end: Instant,
    cap: Duration,
    test: &'static str,
}

impl Deadline {
    /// `cap` from now, for the test named `test` (used in the failure message).
    pub fn new(test: &'static str, cap: Duration) -> Deadline {
        Deadline {
            end: Instant::now() + cap,
            cap,
            test,
        }
    }

    /// Panics with a clear message when the cap is over; `doing` (called only then) says
    /// what was awaited.
    pub fn check<D: Display>(&self, doing: impl FnOnce() -> D) {
        if Instant::now() >= self.end {
            panic!(
                "{}: gave up after the global cap of {:?} while {}",
                self.test,
                self.cap,
                doing()
            );
        }
    }
}

/// splitmix64: a tiny seeded PRNG, so "random" choices replay from the printed seed.
#[derive(Debug, Clone)]
pub struct Prng(u64);

impl Prng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Prng {
        Prng(seed)
    }

    /// The seed for test `name`: [`SEED_VAR`] when set (to replay), else from the clock.
    /// Printed either way.
    pub fn seed_for(name: &str) -> u64 {
        let seed = match std::env::var(SEED_VAR) {
            Ok(text) => text
                .parse()
                .unwrap_or_else(|e| panic!("{SEED_VAR}={text:?} is not a number: {e}")),
            Err(_) => (unix_nanos() as u64) ^ u64::from(std::process::id()).rotate_left(32),
        };
        println!("{name}: seed {seed} (replay with {SEED_VAR}={seed})");
        seed
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "empty range {lo}..={hi}");
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// An append-only text log shared by threads and processes. Each line goes out in one
/// `write` on an `O_APPEND` file, so lines from different writers never interleave, and a
/// line whose `write` returned survives a SIGKILL of the writer (it is in the page cache).
#[derive(Debug)]
pub struct AppendLog(File);

impl AppendLog {
    /// Opens (creating) `path` for appending.
    pub fn open(path: &Path) -> AppendLog {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap_or_else(|e| panic!("opening the log {}: {e}", path.display()));
        AppendLog(file)
    }

    /// Appends `line` and a newline in one write.
    pub fn line(&self, line: &str) {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        (&self.0)
            .write_all(&buf)
            .unwrap_or_else(|e| panic!("appending to the log: {e}"));
    }
}

/// Reads the complete lines appended to a file since the last call.
#[derive(Debug)]
pub struct LogTail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl LogTail {
    /// Follows `path` from its start (it need not exist yet).
    pub fn new(path: &Path) -> LogTail {
        LogTail {
            path: path.to_path_buf(),
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// The lines completed since the last call (a line still being written waits).
    pub fn read_new(&mut self) -> Vec<String> {
        let Ok(mut file) = File::open(&self.path) else {
            return Vec::new();
        };
        file.seek(SeekFrom::Start(self.offset))
            .unwrap_or_else(|e| panic!("seeking in {}: {e}", self.path.display()));
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.path.display()));
        self.offset += bytes.len() as u64;
        self.partial.extend_from_slice(&bytes);
        let Some(last_newline) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return Vec::new();
        };
        let rest = self.partial.split_off(last_newline + 1);
        let complete = std::mem::replace(&mut self.partial, rest);
        String::from_utf8(complete)
            .unwrap_or_else(|e| panic!("{} is not UTF-8: {e}", self.path.display()))
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// Every line of a log file (empty when it does not exist). Panics on a torn last line.
pub fn read_lines(path: &Path) -> Vec<String> {
    let mut tail = LogTail::new(path);
    let lines = tail.read_new();
    assert!(
        tail.partial.is_empty(),
        "{} ends in an incomplete line {:?}",
        path.display(),
        String::from_utf8_lossy(&tail.partial)
    );
    lines
}

/// A spawned child test process. Dropping it kills (SIGKILL) and reaps a child that is
/// still running, so a failing parent test leaves nothing behind.
#[derive(Debug)]
pub struct ChildProc {
    child: Option<Child>,
    pid: u32,
    label: String,
    out_path: PathBuf,
}

impl ChildProc {
    /// Runs this test binary again with only `test` (e.g. `"crash::child_worker_process"`),
    /// the role `role` and the extra environment `envs`. Its stdout and stderr go to a file
    /// in `dir`, shown by [`ChildProc::output`].
    pub fn spawn(
        dir: &Path,
        label: &str,
        test: &str,
        role: &str,
        envs: &[(&str, OsString)],
    ) -> ChildProc {
        let exe = std::env::current_exe().expect("finding the test binary");
        let out_path = dir.join(format!("{label}.out"));
        let out = File::create(&out_path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", out_path.display()));
        let err = out.try_clone().expect("duplicating the output file handle");
        let mut cmd = Command::new(exe);
        cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(ROLE_VAR, role)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (key, value) in envs {
            cmd.env(key, value);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning child {label}: {e}"));
        let pid = child.id();
        ChildProc {
            child: Some(child),
            pid,
            label: label.to_string(),
            out_path,
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// SIGKILL (on Unix; `TerminateProcess` elsewhere), then reap it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // An error here means it already exited; wait() reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The exit status if it has exited (and reaps it), else `None`.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                Some(status)
            }
            Ok(None) => None,
            Err(e) => panic!("waiting for child {}: {e}", self.label),
        }
    }

    /// Waits for the child to exit on its own, bounded by `deadline`, and asserts it
    /// succeeded (its output is in the failure message).
    pub fn expect_success(&mut self, deadline: &Deadline) {
        loop {
            if let Some(status) = self.try_exit() {
                assert!(
                    status.success(),
                    "child {} (pid {}) failed with {status}; its output:\n{}",
                    self.label,
                    self.pid,
                    self.output()
                );
                return;
            }
            deadline.check(|| {
                format!(
                    "waiting for child {} (pid {}) to finish; its output so far:\n{}",
                    self.label,
                    self.pid,
                    self.output()
                )
            });
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The child's stdout and stderr so far (the last 4 KiB).
    pub fn output(&self) -> String {
        let text = std::fs::read(&self.out_path).unwrap_or_default();
        let start = text.len().saturating_sub(4096);
        String::from_utf8_lossy(&text[start..]).into_owned()
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits (bounded by `deadline`) until `queue` has no queued, failed or running jobs:
/// what a child worker does before its graceful shutdown. Killed workers' jobs count as
/// running until their leases expire and a reaper makes them due again.
pub fn wait_until_no_work(queue: &Queue, deadline: &Deadline) {
    loop {
        let stats = queue.stats().expect("reading stats");
        let left = stats.count(JobStatus::Queued)
            + stats.count(JobStatus::Failed)
            + stats.count(JobStatus::Running);
        if left == 0 {
            return;
        }
        deadline.check(|| format!("waiting for the last {left} jobs"));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded by `deadline`) until `path` exists.
pub fn wait_for_file(path: &Path, deadline: &Deadline) {
    while !path.exists() {
        deadline.check(|| format!("waiting for {}", path.display()));
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The body of a child process that takes the write lock again and again until the stop file
/// ([`SIGNAL_VAR`]) appears: `BEGIN IMMEDIATE`, a small insert, hold `hold_ms` (a seeded
/// random range), commit, let go for `gap_ms`. Creates the ready file ([`READY_VAR`]) after its
/// first cycle, so the parent starts its work under the storm.
pub fn hammer_write_lock(label: &str, hold_ms: std::ops::Range<u64>, gap_ms: std::ops::Range<u64>) {
    let deadline = Deadline::new("write-lock hammer child", CHILD_LIFETIME_CAP);
    let stop = env_path(SIGNAL_VAR);
    let ready = env_path(READY_VAR);
    let mut rng = Prng::new(env_u64(SEED_VAR));
    let mut conn = crate::support::raw_conn(&env_path(DB_VAR));
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS hammer (cycle INTEGER NOT NULL, held_ms INTEGER NOT NULL)",
    )
    .expect("locker: creating its table");
    let mut cycle: i64 = 0;
    while !stop.exists() {
        deadline
            .check(|| format!("{label}: holding the write lock (the parent never asked to stop)"));
        let hold = rng.range(hold_ms.start, hold_ms.end);
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("locker: BEGIN IMMEDIATE");
        tx.execute(
            "INSERT INTO hammer (cycle, held_ms) VALUES (?1, ?2)",
            rusqlite::params![cycle, hold as i64],
        )
        .expect("locker: insert");
        std::thread::sleep(Duration::from_millis(hold));
        tx.commit().expect("locker: COMMIT");
        cycle += 1;
        if cycle == 1 {
            std::fs::write(&ready, b"ready").expect("locker: writing ready file");
        }
        std::thread::sleep(Duration::from_millis(rng.range(gap_ms.start, gap_ms.end)));
    }
}
