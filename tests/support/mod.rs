//! Fixtures shared by the integration tests: a real database file in a temp dir, a queue on
//! a `ManualClock`, and raw rusqlite connections for looking behind the library's back.

use std::path::{Path, PathBuf};
use std::time::Duration;

use litejobs::{ManualClock, Queue};
use rusqlite::Connection;
use tempfile::TempDir;

/// Where every test's `ManualClock` starts: 2023-11-14T22:13:20Z, in ms since the epoch.
pub const START_MS: i64 = 1_700_000_000_000;

/// The schema contract, as shipped at the top of the repository.
pub const SCHEMA_SQL: &str = include_str!("../../schema.sql");

/// A queue on a fresh database file, with the clock that drives it.
pub struct TestEnv {
    /// Keeps the directory (and the database) alive for the test.
    pub dir: TempDir,
    /// The database file.
    pub path: PathBuf,
    /// Opened with `Queue::builder().clock(clock.clone())`.
    pub queue: Queue,
    /// The queue's clock, standing at [`START_MS`] until moved.
    pub clock: ManualClock,
    /// On the PostgreSQL pass of the test matrix: the test's schema (dropped at the end);
    /// `path` then holds the server's URL.
    #[cfg(feature = "postgres")]
    pub pg: Option<pg::PgSchema>,
}

impl TestEnv {
    /// A second, separately opened `Queue` on the same file and clock (its own pool and
    /// write gate, as another process would have).
    pub fn open_another(&self) -> Queue {
        #[cfg(feature = "postgres")]
        if let Some(schema) = &self.pg {
            return schema.queue(&self.clock);
        }
        Queue::builder()
            .clock(self.clock.clone())
            .open(&self.path)
            .expect("opening a second Queue on the test database")
    }

    /// Another queue on the same database and clock, opened with `builder`'s options (its
    /// encryption keys, say), as another process would open it.
    #[cfg_attr(not(feature = "encryption"), allow(dead_code))]
    pub fn open_with(&self, builder: litejobs::QueueBuilder) -> Queue {
        builder
            .clock(self.clock.clone())
            .open(&self.path)
            .expect("opening another Queue on the test database")
    }

    /// A raw connection on the test database (SQLite only: a test that needs one returns
    /// early on the PostgreSQL pass, see [`sqlite_only`]).
    pub fn raw(&self) -> Connection {
        #[cfg(feature = "postgres")]
        assert!(
            self.pg.is_none(),
            "a SQLite-only test ran on the PostgreSQL pass: start it with `if sqlite_only() {{ return; }}`"
        );
        raw_conn(&self.path)
    }

    /// Rows in the `jobs` table, counted behind the library's back.
    pub fn count_jobs(&self) -> i64 {
        #[cfg(feature = "postgres")]
        if let Some(schema) = &self.pg {
            return schema.count("SELECT count(*) AS n FROM jobs");
        }
        count_rows(&self.path, "jobs")
    }
}

impl TestEnv {
    /// The first column of the first row of `sql` as an integer (0 when there is no row),
    /// read behind the library's back on either backend. Keep `sql` portable (plain
    /// `SELECT count(*) …`, no SQLite-only functions).
    pub fn sql_i64(&self, sql: &str) -> i64 {
        #[cfg(feature = "postgres")]
        if let Some(schema) = &self.pg {
            return schema.first_i64(sql);
        }
        raw_conn(&self.path)
            .query_row(sql, [], |row| row.get::<_, Option<i64>>(0))
            .map(|v| v.unwrap_or(0))
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(0),
                e => Err(e),
            })
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs `sql` (one or more statements) behind the library's back on either backend.
    pub fn sql_exec(&self, sql: &str) {
        #[cfg(feature = "postgres")]
        if let Some(schema) = &self.pg {
            schema.exec(sql);
            return;
        }
        raw_conn(&self.path)
            .execute_batch(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// The test matrix: `LITEJOBS_TEST_BACKEND=postgres` runs the backend-agnostic tests on
/// PostgreSQL (`.ci/run` does, after the SQLite pass); unset, they run on SQLite files.
pub fn on_postgres() -> bool {
    std::env::var("LITEJOBS_TEST_BACKEND").is_ok_and(|v| v == "postgres")
}

/// The bytes of a huge error text a test can store: 4 MiB on SQLite; 128 KiB on PostgreSQL,
/// whose index of failed jobs' errors holds at most about 2.7 KB per row after compression
/// (128 KiB of one letter compresses to about 1.5 KB).
#[cfg(any(feature = "web", feature = "cli"))]
pub fn huge_error_bytes() -> usize {
    if on_postgres() {
        128 << 10
    } else {
        4 << 20
    }
}

/// An SQL expression for `n` `x`s then `TAIL` (`n + 4` bytes), on the backend of this pass:
/// a huge text written behind the library's back, as another program (or an older version)
/// could have written it.
#[cfg(any(feature = "web", feature = "cli"))]
pub fn sql_huge_text(n: usize) -> String {
    if on_postgres() {
        format!("(repeat('x', {n}) || 'TAIL')")
    } else {
        // hex() of a zeroblob of k bytes is 2k zeros.
        format!(
            "(replace(hex(zeroblob({})), '0', 'x') || '{}TAIL')",
            n / 2,
            "x".repeat(n % 2)
        )
    }
}

/// True (the test should return at once) on the PostgreSQL pass, for a test of something
/// only a SQLite file has (its bytes, WAL, raw connections, `schema.sql`).
pub fn sqlite_only() -> bool {
    on_postgres()
}

/// A fresh temp dir with `jobs.db` opened by a queue on a `ManualClock` at [`START_MS`].
pub fn setup() -> TestEnv {
    if on_postgres() {
        #[cfg(feature = "postgres")]
        return pg::matrix_env();
        #[cfg(not(feature = "postgres"))]
        panic!("LITEJOBS_TEST_BACKEND=postgres needs --features postgres");
    }
    let dir = temp_dir();
    let path = dir.path().join("jobs.db");
    let clock = ManualClock::new(START_MS);
    let queue = Queue::builder()
        .clock(clock.clone())
        .open(&path)
        .expect("Queue::open on a fresh file in a temp dir");
    TestEnv {
        dir,
        path,
        queue,
        clock,
        #[cfg(feature = "postgres")]
        pg: None,
    }
}

/// A fresh temp dir.
pub fn temp_dir() -> TempDir {
    tempfile::tempdir().expect("creating a temp dir")
}

/// A plain rusqlite connection (with a busy timeout, so it waits for the library's writes
/// like any other well-behaved program would).
pub fn raw_conn(path: &Path) -> Connection {
    let conn = Connection::open(path)
        .unwrap_or_else(|e| panic!("raw connection to {}: {e}", path.display()));
    conn.busy_timeout(Duration::from_secs(10))
        .expect("setting the raw connection's busy timeout");
    conn
}

/// Creates `path` from `schema.sql` exactly as another language would (`sqlite3 app.db <
/// schema.sql`); its last statement switches the file to WAL mode.
pub fn create_from_schema_sql(path: &Path) {
    create_from_sql(path, SCHEMA_SQL);
}

/// Creates `path` by running `sql` on a new file, then closes the connection.
pub fn create_from_sql(path: &Path, sql: &str) {
    let conn = raw_conn(path);
    conn.execute_batch(sql)
        .unwrap_or_else(|e| panic!("applying SQL to {}: {e}", path.display()));
    conn.close()
        .unwrap_or_else(|(_, e)| panic!("closing {}: {e}", path.display()));
}

/// `PRAGMA user_version` of the file.
pub fn user_version(path: &Path) -> i64 {
    raw_conn(path)
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .expect("reading PRAGMA user_version")
}

/// `SELECT COUNT(*) FROM table`.
pub fn count_rows(path: &Path, table: &str) -> i64 {
    raw_conn(path)
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
            row.get(0)
        })
        .unwrap_or_else(|e| panic!("counting rows of {table}: {e}"))
}

/// Runs an example binary with `args`; returns its stdout, failing with its output if it
/// failed. `cargo test` builds the examples beside this test binary; run alone (e.g.
/// `cargo test --test integration NAME`) the example is built here first, in a target dir of
/// its own (the running `cargo test` holds the lock on its own).
pub fn run_example(name: &str, args: &[&std::ffi::OsStr]) -> String {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let mut path = profile_dir.join("examples").join(name);
    if !path.exists() {
        path = build_example(name, profile_dir);
    }
    let out = std::process::Command::new(&path)
        .args(args)
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "example {name} failed with {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Builds example `name` with cargo into `<target>/test-examples` and returns its path.
fn build_example(name: &str, profile_dir: &Path) -> PathBuf {
    let target = profile_dir
        .parent()
        .expect("target dir")
        .join("test-examples");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = std::process::Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args(["build", "--quiet", "--example", name, "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("running cargo to build the example");
    assert!(
        out.status.success(),
        "building example {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = target.join("debug").join("examples").join(name);
    assert!(path.exists(), "cargo built no {}", path.display());
    path
}

/// Which of the file's `-wal`, `-shm` and `-journal` companions exist.
pub fn side_files(path: &Path) -> [bool; 3] {
    ["-wal", "-shm", "-journal"].map(|suffix| {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        Path::new(&p).exists()
    })
}

/// Another application's SQLite file at `path`: a `users` table with one row, no litejobs
/// schema.
pub fn create_app_database(path: &Path) {
    create_from_sql(
        path,
        "CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT);
         INSERT INTO users (email) VALUES ('a@example.com');",
    );
}

/// Writes an executable script (a command handler under test) into `dir`.
#[cfg(unix)]
pub fn write_script(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writing a script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// A child process killed (and reaped) when dropped, so a test that fails or is stopped
/// half-way never leaves a `litejobs work` or `web` running behind it.
#[derive(Debug)]
pub struct KillOnDrop(pub std::process::Child);

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// True when the program `name` runs here (`name --version`). When it does not, says so
/// and returns false so the test can skip, except in CI (`CI` set), where the test fails:
/// `.ci/run` installs what the tests need.
pub fn have_tool(name: &str) -> bool {
    let runs = std::process::Command::new(name)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !runs {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is needed by this test and must be installed in CI"
        );
        eprintln!("skipped: {name} is not installed here");
    }
    runs
}

/// Child processes for the process-level tests (crash, multiprocess).
/// CPU time (user and system) this process has used so far, from `/proc/self/stat` (in
/// clock ticks, 100 per second on Linux).
pub fn process_cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("reading /proc/self/stat");
    // The fields after the command name (which may hold spaces) start at state, field 3;
    // utime and stime are fields 14 and 15.
    let after_name = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields[11..13]
        .iter()
        .map(|f| f.parse::<u64>().expect("a tick count in /proc/self/stat"))
        .sum();
    Duration::from_millis(ticks * 10)
}

pub mod child;
#[cfg(feature = "webhook")]
pub mod http;
#[cfg(feature = "postgres")]
pub mod pg;
#[cfg(feature = "postgres")]
pub mod pg_server;
pub mod scripted;
#[cfg(feature = "email")]
pub mod smtp;
