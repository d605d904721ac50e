//! The `litejobs` binary, run as a real process against real database
//! files: every command, its JSON field names, the refusals (exit 2, one line on stderr,
//! nothing changed), `check`'s exit codes, all-or-nothing bulk requeue, retention, pause
//! honoured by a running worker, Prometheus text, masked secrets, and `work` on SIGTERM.
//!
//! The binary reads the wall clock, so fixtures write their rows through a queue whose
//! `ManualClock` is set relative to the wall clock (e.g. ten minutes ago).
//!
//! On the PostgreSQL pass of the test matrix (`LITEJOBS_TEST_BACKEND=postgres`) every
//! database is a fresh schema on the test server instead (`--db postgres://…?schema=NAME`,
//! dropped when the test ends); tests of what only a SQLite file has return at once.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use litejobs::{
    testing, Clock, Event, JobContext, JobError, JobStatus, ManualClock, NewJob, Queue,
    SystemClock, Worker,
};
use serde_json::{json, Value};
use tempfile::TempDir;

use crate::support::scripted::wait_event_within;
use crate::support::{count_rows, raw_conn, temp_dir};

mod actions; // cancel, retry, pause/resume with a running worker
mod after; // enqueue --after: a job that waits for others
#[cfg(unix)]
mod cancel; // cancel by type and text (dry run, all or nothing); running commands in two other worker processes
mod dead; // dead list, requeue (one, bulk, all or nothing), discard
mod deadlines; // enqueue --expire-after / --expires-at; show, list, stats, metrics and check of expired jobs
#[cfg(feature = "encryption")]
mod encryption; // enqueue --encrypt, keys encrypt-type, views with and without keys, work's refusal, keys new and rotate, the Python example
#[cfg(unix)]
mod exec; // work --exec/--serve: scripts per job, shutdown mid-job, refusals, the Python example
mod foreign; // rows from outside next to a running worker, read commands that never write
mod frictions; // pause/resume of unknown queues, LAST ERROR of succeeded jobs, schema.sql's WAL
mod monitoring; // check's exit codes, Prometheus text
mod refusals; // init, enqueue, refusals (exit 2, one line, nothing changed)
mod retention; // prune in chunks, remembered keys, WAL checkpoint
mod schedule; // schedule add, list, remove: periodic jobs kept in the database, run by every work
mod systemd; // work and web tell systemd when ready and stopping, work feeds its watchdog; the unit files verify
#[cfg(unix)]
mod top; // top in a real terminal (tmux): the counts on screen, keys that act, SIGTERM restores the terminal
mod views; // stats, list, show, masked secrets
mod webhook; // webhook endpoints: add, list, show, enable, disable, rotate, remove; secrets shown once
mod work; // work until SIGTERM
mod work_help; // work --help lists every LITEJOBS_* variable the source reads
mod workers; // workers: who is working; stats, check and enqueue naming what no live worker serves
mod workflows; // workflow list, show, cancel; held jobs in show, list, stats, metrics and check

const BIN: &str = env!("CARGO_BIN_EXE_litejobs");
const MINUTE: i64 = 60_000;
const DAY: i64 = 24 * 60 * MINUTE;

/// What a run of the binary gave.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn from(output: Output) -> Run {
        Run {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Asserts exit 0 and returns self.
    fn ok(self) -> Run {
        assert_eq!(self.code, Some(0), "expected success: {self:#?}");
        self
    }

    /// Asserts exit 0 and parses stdout as JSON.
    fn json(self) -> Value {
        let run = self.ok();
        serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {run:#?}"))
    }

    /// Asserts exit 2, nothing on stdout, and exactly one line on stderr containing `needle`.
    fn refused(self, needle: &str) -> Run {
        assert_eq!(self.code, Some(2), "expected exit 2: {self:#?}");
        assert_eq!(self.stdout, "", "nothing on stdout when refused: {self:#?}");
        assert_eq!(self.stderr.lines().count(), 1, "one stderr line: {self:#?}");
        assert!(
            self.stderr.contains(needle),
            "stderr should say {needle:?}: {self:#?}"
        );
        self
    }
}

/// The binary with `--db` and a clean environment.
fn litejobs(db: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--db")
        .arg(db)
        .env_remove("LITEJOBS_DB")
        .env_remove("LITEJOBS_SECRET_FIELDS")
        .env_remove("LITEJOBS_RETRY")
        .env_remove("RUST_LOG")
        .env_remove("LITEJOBS_ENCRYPTION_KEYS")
        .env_remove("LITEJOBS_ENCRYPTION_KEYS_FILE")
        .env_remove("LITEJOBS_LOG_FORMAT")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .stdin(Stdio::null());
    cmd
}

fn run(db: &Path, args: &[&str]) -> Run {
    Run::from(
        litejobs(db)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {BIN}: {e}")),
    )
}

fn run_with_stdin(db: &Path, args: &[&str], input: &str) -> Run {
    let mut child = litejobs(db)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {BIN}: {e}"));
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(input.as_bytes())
        .expect("writing stdin");
    Run::from(child.wait_with_output().expect("waiting for the binary"))
}

/// On the PostgreSQL pass: the schema of a test's database, dropped when this is.
#[cfg(feature = "postgres")]
type PgGuard = Option<crate::support::pg::PgSchema>;
#[cfg(not(feature = "postgres"))]
type PgGuard = ();

/// A database nobody has created yet: `file` in `dir`, or on the PostgreSQL pass the URL of
/// a fresh schema on the test server (`…?schema=NAME`), with the guard that drops it.
fn new_db(dir: &Path, file: &str) -> (PathBuf, PgGuard) {
    if crate::support::on_postgres() {
        #[cfg(feature = "postgres")]
        {
            let url = std::env::var("LITEJOBS_TEST_PG")
                .ok()
                .filter(|u| !u.is_empty())
                .expect("LITEJOBS_TEST_BACKEND=postgres needs LITEJOBS_TEST_PG=postgres://…");
            let schema = crate::support::pg::PgSchema::new(&url);
            let sep = if url.contains('?') { '&' } else { '?' };
            let path = PathBuf::from(format!("{url}{sep}schema={}", schema.name));
            return (path, Some(schema));
        }
        #[cfg(not(feature = "postgres"))]
        panic!("LITEJOBS_TEST_BACKEND=postgres needs --features postgres");
    }
    (dir.join(file), PgGuard::default())
}

/// A database (file, or schema on the PostgreSQL pass) with a queue whose clock the test
/// sets relative to the wall clock.
struct Fx {
    _dir: TempDir,
    path: PathBuf,
    clock: ManualClock,
    queue: Queue,
    /// Last, so the schema is dropped after the queue is closed.
    _pg: PgGuard,
}

impl Fx {
    fn new() -> Fx {
        let dir = temp_dir();
        let (path, pg) = new_db(dir.path(), "jobs.db");
        let clock = ManualClock::starting_now();
        let queue = Queue::builder()
            .clock(clock.clone())
            .open(&path)
            .expect("opening the fixture database");
        Fx {
            _dir: dir,
            path,
            clock,
            queue,
            _pg: pg,
        }
    }

    /// The first column of the first row of `sql` as an integer (0 without a row), read
    /// behind the library's back on either backend (keep `sql` portable).
    fn sql_i64(&self, sql: &str) -> i64 {
        #[cfg(feature = "postgres")]
        if let Some(schema) = &self._pg {
            return schema.first_i64(sql);
        }
        raw_conn(&self.path)
            .query_row(sql, [], |row| row.get::<_, Option<i64>>(0))
            .map(|v| v.unwrap_or(0))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs `sql` behind the library's back on either backend (keep it portable).
    fn sql_exec(&self, sql: &str) {
        #[cfg(feature = "postgres")]
        if let Some(schema) = &self._pg {
            schema.exec(sql);
            return;
        }
        raw_conn(&self.path)
            .execute_batch(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Sets the fixture clock to `ms` before the wall clock's now.
    fn ago(&self, ms: i64) {
        self.clock.set(SystemClock.now_ms() - ms);
    }

    fn run(&self, args: &[&str]) -> Run {
        run(&self.path, args)
    }

    fn enqueue(&self, job: NewJob) -> i64 {
        self.queue.enqueue(job).expect("enqueue")
    }

    fn job(&self, id: i64) -> litejobs::JobRecord {
        self.queue
            .job(id)
            .expect("reading a job")
            .unwrap_or_else(|| panic!("job {id} exists"))
    }

    /// Runs every due job of `job_type` in `queue` once, each attempt failing with
    /// `error`: permanently (straight to dead), or retryably with the next attempt an hour
    /// later by the fixture clock.
    fn fail_due(&self, job_type: &str, queue: &str, error: &str, permanent: bool) {
        let error = error.to_string();
        let builder = Worker::builder(&self.queue)
            .handler(job_type, move |_: &JobContext| -> Result<(), JobError> {
                Err(if permanent {
                    JobError::permanent(error.clone())
                } else {
                    JobError::retry_after(Duration::from_secs(3600), error.clone())
                })
            })
            .queue(queue, 1);
        testing::drain(&builder).expect("drain");
    }

    /// Runs every due job of `job_type` in `queue` once, successfully.
    fn succeed_due(&self, job_type: &str, queue: &str) {
        let builder = Worker::builder(&self.queue)
            .handler(job_type, |_: &JobContext| -> Result<(), JobError> {
                Ok(())
            })
            .queue(queue, 1);
        testing::drain(&builder).expect("drain");
    }

    /// Dead webhook jobs, ten minutes ago: three to a dead endpoint ("connection
    /// refused") and one rejected by another ("HTTP 422"), each with a secret in its payload.
    fn dead_webhooks(&self) -> (Vec<i64>, i64) {
        self.ago(10 * MINUTE);
        let refused: Vec<i64> = (1..=3)
            .map(|n| {
                self.enqueue(
                    NewJob::new(
                        "deliver_webhook",
                        json!({"url": "https://crm.example/hook", "event_id": n,
                               "password": "hunter2", "nested": {"api_key": "k-123"}}),
                    )
                    .queue("webhooks"),
                )
            })
            .collect();
        self.fail_due(
            "deliver_webhook",
            "webhooks",
            "connect error: connection refused (crm.example:443)",
            true,
        );
        let rejected = self.enqueue(
            NewJob::new(
                "deliver_webhook",
                json!({"url": "https://billing.example/hook", "event_id": 9}),
            )
            .queue("webhooks"),
        );
        self.fail_due(
            "deliver_webhook",
            "webhooks",
            "HTTP 422 Unprocessable",
            true,
        );
        (refused, rejected)
    }
}

fn file_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The names of a JSON object's fields.
fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("expected an object: {value}"))
        .keys()
        .cloned()
        .collect()
}

fn assert_has_fields(value: &Value, fields: &[&str]) {
    let have = keys(value);
    for field in fields {
        assert!(
            have.contains(*field),
            "field {field:?} missing from {value:#}"
        );
    }
}

const JOB_FIELDS: &[&str] = &[
    "id",
    "queue",
    "job_type",
    "payload",
    "status",
    "priority",
    "attempts",
    "max_attempts",
    "run_at",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "locked_by",
    "locked_until",
    "last_error",
    "last_status_code",
    "idempotency_key",
    "group_key",
    "timeout_ms",
    "result",
    "progress",
    "requeued_by",
    "requeued_at",
    "requeue_reason",
    "requeued_as",
];
