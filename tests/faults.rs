//! Injected faults: a storm of another process's long write locks, a full disk,
//! and a poison pill that aborts its worker process on every attempt.
//!
//! Each test runs real processes on a real file: the lock storm comes from a child process
//! holding `BEGIN IMMEDIATE` for 1–200 ms at a time; the full disk is a small tmpfs mounted
//! in a private mount namespace of a child process (`unshare -m`, or `unshare -rm` as a
//! plain user), so nothing leaks into the machine's mounts even if the test is killed; the
//! poison pill runs in worker processes the test restarts until the pill is dead.
#![cfg(unix)]

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Sender};
use litejobs::maintenance::CheckpointMode;
use litejobs::{ErrorKind, JobContext, JobError, JobStatus, NewJob, Queue, Worker};
use serde_json::json;

use crate::support::child::{
    self, AppendLog, Deadline, Prng, CHILD_LIFETIME_CAP, DB_VAR, LOG_VAR, READY_VAR, ROLE_VAR,
    SEED_VAR, SIGNAL_VAR,
};
use crate::support::scripted::{self, Latch};
use crate::support::{count_rows, process_cpu_time, raw_conn, temp_dir};

/// The whole of each test, children included.
const TEST_CAP: Duration = Duration::from_secs(100);

// ---------------------------------------------------------------------------------------
// Child processes with a command prefix
// ---------------------------------------------------------------------------------------

/// A child run of this test binary (one test selected, a role set, as
/// [`ChildProc`](crate::support::child::ChildProc) does) behind a command prefix such as
/// `unshare -m` or a shell that turns core dumps off, in `dir` as its working directory.
/// Dropping it kills (SIGKILL) and reaps a child that is still running.
struct PrefixedChild {
    child: Option<Child>,
    label: String,
    out_path: PathBuf,
}

impl PrefixedChild {
    fn spawn(
        dir: &Path,
        prefix: &[&str],
        label: &str,
        test: &str,
        role: &str,
        envs: &[(&str, OsString)],
    ) -> PrefixedChild {
        let exe = std::env::current_exe().expect("finding the test binary");
        let out_path = dir.join(format!("{label}.out"));
        let out = File::create(&out_path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", out_path.display()));
        let err = out.try_clone().expect("duplicating the output file handle");
        let (program, before) = prefix
            .split_first()
            .map_or((exe.as_os_str(), &[][..]), |(p, rest)| (p.as_ref(), rest));
        let mut cmd = Command::new(program);
        cmd.args(before);
        if !prefix.is_empty() {
            cmd.arg(&exe);
        }
        cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(ROLE_VAR, role)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (key, value) in envs {
            cmd.env(key, value);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning child {label} ({prefix:?}): {e}"));
        PrefixedChild {
            child: Some(child),
            label: label.to_string(),
            out_path,
        }
    }

    /// Waits for the child to exit, bounded by `deadline`.
    fn wait(&mut self, deadline: &Deadline) -> ExitStatus {
        loop {
            let child = self.child.as_mut().expect("the child was already reaped");
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.child = None;
                    return status;
                }
                Ok(None) => {}
                Err(e) => panic!("waiting for child {}: {e}", self.label),
            }
            deadline.check(|| {
                format!(
                    "waiting for child {} to exit; its output so far:\n{}",
                    self.label,
                    self.output()
                )
            });
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The child's stdout and stderr (the last 6 KiB).
    fn output(&self) -> String {
        let text = std::fs::read(&self.out_path).unwrap_or_default();
        let start = text.len().saturating_sub(6144);
        String::from_utf8_lossy(&text[start..]).into_owned()
    }
}

impl Drop for PrefixedChild {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Busy storm
// ---------------------------------------------------------------------------------------

const STORM_LOCKER_ROLE: &str = "faults-storm-locker";
const STORM_LOCKER_TEST: &str = "faults::child_storm_locker";
/// Jobs the worker runs through the storm.
const STORM_JOBS: usize = 5000;
/// `enqueue` calls made during the storm.
const STORM_ENQUEUES: usize = 60;
/// The longest hold of the write lock, ms (the shortest is 1 ms).
const STORM_MAX_HOLD_MS: u64 = 200;
/// The locker lets go for 1 ms up to this between holds. A writer that never lets go would
/// starve every other writer by SQLite's design (its busy handler polls; it does not
/// queue): the point here is long waits, not a database nobody else may ever write.
const STORM_MAX_GAP_MS: u64 = 40;
/// The queue's busy timeout in the storm: an enqueue that waits longer fails with
/// `ErrorKind::Busy`.
const STORM_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Takes the write lock again and again until the stop file appears: `BEGIN IMMEDIATE`, a
/// small insert, hold 1–200 ms, commit, let go 1–40 ms (by its own seeded PRNG). Creates
/// the ready file after its first cycle.
#[test]
fn child_storm_locker() {
    if !child::is_child(STORM_LOCKER_ROLE) {
        return;
    }
    child::hammer_write_lock("storm locker", 1..STORM_MAX_HOLD_MS, 1..STORM_MAX_GAP_MS);
}

#[test]
fn a_storm_of_long_write_locks_from_another_process_costs_waits_never_attempts() {
    if child::is_child(STORM_LOCKER_ROLE) {
        return;
    }
    let deadline = Deadline::new("busy storm test", TEST_CAP);
    let seed = Prng::seed_for("busy storm test");
    let dir = temp_dir();
    let db = dir.path().join("jobs.db");
    let stop = dir.path().join("stop");
    let ready = dir.path().join("ready");
    let queue = Queue::builder()
        .busy_timeout(STORM_BUSY_TIMEOUT)
        .open(&db)
        .expect("opening the queue");
    let mut ids = queue
        .enqueue_batch(
            (0..STORM_JOBS)
                .map(|i| NewJob::new("storm", json!({ "n": i })))
                .collect(),
        )
        .expect("enqueueing the jobs");

    let envs: Vec<(&str, OsString)> = vec![
        (DB_VAR, db.clone().into_os_string()),
        (SIGNAL_VAR, stop.clone().into_os_string()),
        (READY_VAR, ready.clone().into_os_string()),
        (SEED_VAR, seed.to_string().into()),
    ];
    let mut locker = PrefixedChild::spawn(
        dir.path(),
        &[],
        "locker",
        STORM_LOCKER_TEST,
        STORM_LOCKER_ROLE,
        &envs,
    );
    child::wait_for_file(&ready, &deadline);

    let started = Instant::now();
    let worker = Worker::builder(&queue)
        .handler("storm", |_: &JobContext| -> Result<(), JobError> { Ok(()) })
        .concurrency(4)
        // Bigger batches: each write round waits out the storm once, whatever its size.
        .prefetch(256)
        .poll_interval(Duration::from_millis(50))
        .start()
        .expect("starting the worker");

    // Enqueue during the storm, at seeded moments: each call waits its turn and succeeds,
    // or gives up with Busy once the busy timeout has passed (and then wrote nothing).
    let mut pace = Prng::new(seed ^ 0x5eed);
    let mut refused = Vec::new();
    let mut slowest = Duration::ZERO;
    for i in 0..STORM_ENQUEUES {
        std::thread::sleep(Duration::from_millis(pace.range(0, 60)));
        let t = Instant::now();
        let result = if i % 4 == 3 {
            // Some batches too: all three or none.
            queue
                .enqueue_batch(
                    (0..3)
                        .map(|k| NewJob::new("storm", json!({ "late": i, "k": k })))
                        .collect(),
                )
                .map(|batch| (batch, 3))
        } else {
            queue
                .enqueue(NewJob::new("storm", json!({ "late": i })))
                .map(|id| (vec![id], 1))
        };
        let took = t.elapsed();
        slowest = slowest.max(took);
        match result {
            Ok((new_ids, n)) => {
                assert_eq!(new_ids.len(), n);
                ids.extend(new_ids);
            }
            Err(e) => {
                assert_eq!(
                    e.kind(),
                    ErrorKind::Busy,
                    "enqueue {i} may only fail with ErrorKind::Busy during a lock storm: {e}"
                );
                assert!(
                    took >= STORM_BUSY_TIMEOUT,
                    "enqueue {i} gave up as busy after {took:?}, before the configured busy \
                     timeout of {STORM_BUSY_TIMEOUT:?}"
                );
                refused.push(i);
            }
        }
        deadline.check(|| "enqueueing during the storm");
    }
    let enqueued_in = started.elapsed();

    let total = ids.len() as i64;
    loop {
        let stats = queue.stats().expect("reading stats");
        let succeeded = stats.count(JobStatus::Succeeded);
        if succeeded == total {
            break;
        }
        deadline.check(|| {
            format!(
                "waiting for all {total} jobs to succeed during the storm ({succeeded} so far; \
                 counts {:?})",
                stats.counts
            )
        });
        std::thread::sleep(Duration::from_millis(50));
    }
    let ran_in = started.elapsed();
    // The storm lasted the whole run: stop it only now.
    std::fs::write(&stop, b"stop").expect("writing the stop file");
    let status = locker.wait(&deadline);
    assert!(
        status.success(),
        "the locker failed ({status}); its output:\n{}",
        locker.output()
    );
    worker
        .shutdown(Duration::from_secs(10))
        .expect("graceful shutdown");

    let conn = raw_conn(&db);
    let (rows, succeeded_first_try, with_error): (i64, i64, i64) = conn
        .query_row(
            "SELECT COUNT(*), SUM(status = 'succeeded' AND attempts = 1),
                    SUM(last_error IS NOT NULL) FROM jobs",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("reading the jobs");
    assert_eq!(
        rows, total,
        "the jobs table holds exactly the accepted jobs"
    );
    assert_eq!(
        succeeded_first_try, total,
        "every job succeeded in its first attempt: the storm never cost an attempt"
    );
    assert_eq!(with_error, 0, "no job recorded an error");
    let lock_errors: Vec<(i64, String)> = conn
        .prepare(
            "SELECT job_id, error FROM job_attempts
             WHERE lower(error) LIKE '%locked%' OR lower(error) LIKE '%busy%'",
        )
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()
        })
        .expect("reading the attempt history");
    assert!(
        lock_errors.is_empty(),
        "attempts recorded lock errors: {lock_errors:?}"
    );
    assert_eq!(
        count_rows(&db, "job_attempts"),
        0,
        "no attempt failed at all"
    );
    // Nothing partial: a refused call left no row; an accepted batch left all of its rows.
    for i in 0..STORM_ENQUEUES {
        let n: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM jobs WHERE json_extract(payload, '$.late') = ?1",
                [i as i64],
                |r| r.get(0),
            )
            .expect("counting a call's rows");
        let expected = match (refused.contains(&i), i % 4 == 3) {
            (true, _) => 0,
            (false, true) => 3,
            (false, false) => 1,
        };
        assert_eq!(n, expected, "enqueue call {i} left {n} rows");
    }
    let (cycles, held_ms): (i64, i64) = conn
        .query_row("SELECT COUNT(*), SUM(held_ms) FROM hammer", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .expect("counting the locker's cycles");
    let held_share = held_ms as f64 / ran_in.as_millis().max(1) as f64;
    assert!(cycles > 0, "the locker never took the lock");
    println!(
        "busy storm: {total} jobs succeeded in {ran_in:?} while another process held the write \
         lock {cycles} times for 1-{STORM_MAX_HOLD_MS} ms ({:.0} % of the run); \
         {STORM_ENQUEUES} enqueue calls in {enqueued_in:?}, {} refused as busy after the \
         {STORM_BUSY_TIMEOUT:?} bound, slowest {slowest:?}",
        held_share * 100.0,
        refused.len(),
    );
}

// ---------------------------------------------------------------------------------------
// Full disk
// ---------------------------------------------------------------------------------------

const FULL_DISK_ROLE: &str = "faults-full-disk";
const FULL_DISK_TEST: &str = "faults::child_full_disk";
/// Where the child mounts its small file system.
const MOUNT_VAR: &str = "LITEJOBS_TEST_MOUNT";
/// The small file system: room for the database and its WAL, and for the filler file.
const FULL_DISK_SIZE: &str = "size=4m";
/// Jobs claimed and running when the disk fills up.
const FULL_DISK_JOBS: usize = 120;
const FULL_DISK_THREADS: usize = 4;
/// Failed write rounds to see (each retried after a backoff) before space is freed.
const FULL_DISK_FAILED_ROUNDS: usize = 5;

/// Log lines of this process, for the full-disk child to see the worker's retried writes.
/// Passes each warning on with the moment it was logged.
struct CaptureLog(Mutex<Sender<(Instant, String)>>);

impl log::Log for CaptureLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let at = Instant::now();
            let line = format!("{} {}", record.level(), record.args());
            eprintln!("{line}");
            let _ = self
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .send((at, line));
        }
    }

    fn flush(&self) {}
}

/// The back-off a "write failed (...); retrying in 25ms" warning announces.
fn announced_backoff(line: &str) -> Duration {
    let text = line
        .rsplit("retrying in ")
        .next()
        .unwrap_or_else(|| panic!("no back-off in the warning: {line}"));
    let number = |s: &str| -> f64 {
        s.parse()
            .unwrap_or_else(|_| panic!("unreadable back-off {text:?} in: {line}"))
    };
    if let Some(ms) = text.strip_suffix("ms") {
        Duration::from_micros((number(ms) * 1e3).round() as u64)
    } else if let Some(s) = text.strip_suffix('s') {
        Duration::from_micros((number(s) * 1e6).round() as u64)
    } else {
        panic!("unreadable back-off {text:?} in: {line}")
    }
}

/// Fills the file system under `dir` with a filler file until writes fail with ENOSPC.
/// Returns the file (delete it to free the space) and how many bytes it holds.
fn fill_disk(dir: &Path) -> (PathBuf, u64) {
    let path = dir.join("filler");
    let mut file = File::create(&path).expect("creating the filler file");
    let mut written = 0u64;
    for chunk in [64 * 1024, 4096, 512, 1] {
        let buf = vec![0xA5u8; chunk];
        loop {
            match file.write(&buf) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                Err(e) => panic!("filling the disk: unexpected error {e}"),
            }
            if written > 64 * 1024 * 1024 {
                panic!("the small file system never filled up: is it mounted?");
            }
        }
    }
    let _ = file.flush();
    (path, written)
}

/// Runs inside its own mount namespace: mounts a 4 MiB tmpfs, runs a worker on a database
/// there, fills the disk while jobs run, and checks what enqueue and the worker do; then
/// frees the space and checks that every job completes.
#[test]
fn child_full_disk() {
    if !child::is_child(FULL_DISK_ROLE) {
        return;
    }
    let deadline = Deadline::new("full-disk child", CHILD_LIFETIME_CAP);
    // A failed check ends the child at once: unwinding would first wait out the worker's
    // graceful shutdown, retrying writes on a disk that is still full.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("child: {info}");
        std::process::exit(101);
    }));
    let (log_tx, log_rx) = unbounded();
    log::set_boxed_logger(Box::new(CaptureLog(Mutex::new(log_tx))))
        .expect("child: installing the log capture");
    log::set_max_level(log::LevelFilter::Warn);

    let fs = child::env_path(MOUNT_VAR);
    std::fs::create_dir_all(&fs).expect("child: creating the mount point");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", FULL_DISK_SIZE, "tmpfs"])
        .arg(&fs)
        .status()
        .expect("child: running mount");
    assert!(mounted.success(), "child: mount -t tmpfs failed: {mounted}");
    let db = fs.join("jobs.db");
    let queue = Queue::open(&db).expect("child: opening the queue");
    let events = queue.subscribe();

    let gate = Latch::new();
    let (started_tx, started_rx) = unbounded();
    let handler_gate = gate.clone();
    let ids = queue
        .enqueue_batch(
            (0..FULL_DISK_JOBS)
                .map(|i| NewJob::new("work", json!({ "n": i })))
                .collect(),
        )
        .expect("child: enqueueing the jobs");
    let worker = Worker::builder(&queue)
        .handler("work", move |ctx: &JobContext| -> Result<(), JobError> {
            let _ = started_tx.send(ctx.id());
            if handler_gate.wait(scripted::WAIT) {
                Ok(())
            } else {
                Err(JobError::retry("the test never opened the gate"))
            }
        })
        .concurrency(FULL_DISK_THREADS)
        .poll_interval(Duration::from_millis(50))
        .start()
        .expect("child: starting the worker");
    let _open_gate = gate.open_on_drop();
    for _ in 0..FULL_DISK_THREADS {
        scripted::recv(&started_rx, "a handler to start before the disk fills up");
    }

    // An empty WAL, so that every write from now on needs new space.
    queue
        .checkpoint(CheckpointMode::Truncate)
        .expect("child: checkpointing before the disk fills up");
    let (filler, filled) = fill_disk(&fs);
    println!("full disk: filler of {filled} bytes; the file system is full");

    // Enqueue: a clear error, and nothing written.
    let before = count_rows(&db, "jobs");
    let err = queue
        .enqueue(NewJob::new("work", json!({ "refused": 1 })))
        .expect_err("enqueue on a full disk must fail");
    assert_eq!(err.kind(), ErrorKind::DiskFull, "{err:?}");
    assert!(
        err.to_string().contains("database or disk is full"),
        "the message says what happened: {err}"
    );
    let err = queue
        .enqueue_batch(
            (0..50)
                .map(|i| NewJob::new("work", json!({ "refused": 2, "i": i })))
                .collect(),
        )
        .expect_err("a batch on a full disk must fail");
    assert_eq!(err.kind(), ErrorKind::DiskFull, "{err:?}");
    assert_eq!(
        count_rows(&db, "jobs"),
        before,
        "a refused enqueue wrote nothing, not even part of a batch"
    );

    // The running jobs finish; their outcomes cannot be written, and are retried.
    gate.open();
    // Each retry waits out the back-off the previous failure announced: a full disk fails
    // every write at once, and retrying without pause would spin a core and flood the log.
    let mut failed_rounds = 0;
    let mut previous: Option<(Instant, Duration)> = None;
    let mut first_failure: Option<(Instant, Duration)> = None;
    while failed_rounds < FULL_DISK_FAILED_ROUNDS {
        deadline.check(|| "waiting for the worker's failed writes");
        let (at, line) = log_rx.recv_timeout(scripted::WAIT).unwrap_or_else(|_| {
            panic!("child: the worker logged no failed write while the disk was full")
        });
        if line.contains("write failed") {
            assert!(
                line.contains("database or disk is full"),
                "the retried write names the cause: {line}"
            );
            let announced = announced_backoff(&line);
            if let Some((before, backoff)) = previous {
                assert!(
                    at.duration_since(before) >= backoff,
                    "a write was retried {:?} after a failure that announced a back-off of \
                     {backoff:?}: {line}",
                    at.duration_since(before)
                );
                assert!(
                    announced > backoff,
                    "the back-off grows while the failures go on: {backoff:?}, then {line}"
                );
            }
            previous = Some((at, announced));
            first_failure.get_or_insert((at, process_cpu_time()));
            failed_rounds += 1;
        }
    }
    // Backing off is waiting, not spinning: between the first and the last failure (50 ms
    // to 800 ms of back-offs) the process used the CPU for well under a quarter of the time
    // (measured: a few percent; a loop that wakes for nothing, a third or more).
    if let (Some((first_at, first_cpu)), Some((last_at, _))) = (first_failure, previous) {
        let wall = last_at.duration_since(first_at);
        let cpu = process_cpu_time().saturating_sub(first_cpu);
        println!("full disk: {cpu:?} of CPU in {wall:?} of back-off");
        assert!(
            cpu < wall / 4,
            "the worker used {cpu:?} of CPU in {wall:?} while backing off"
        );
    }
    let conn = raw_conn(&db);
    let statuses: Vec<(String, i64)> = conn
        .prepare("SELECT status, COUNT(*) FROM jobs GROUP BY status ORDER BY status")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()
        })
        .expect("child: reading statuses on a full disk");
    assert!(
        statuses
            .iter()
            .all(|(status, _)| status == "queued" || status == "running"),
        "while the disk is full no outcome is written and no job fails: {statuses:?}"
    );
    assert_eq!(
        count_rows(&db, "job_attempts"),
        0,
        "no attempt was recorded"
    );

    // Free the space: every job completes, each in its one attempt.
    std::fs::remove_file(&filler).expect("child: deleting the filler");
    println!("full disk: space freed after {failed_rounds} failed write rounds");
    scripted::wait_all(&events, &ids, JobStatus::Succeeded);
    for &id in &ids {
        let job = queue.job(id).expect("reading a job").expect("job exists");
        assert_eq!(
            (job.status, job.attempts, job.last_error.as_deref()),
            (JobStatus::Succeeded, 1, None),
            "job {id}: a full disk must not cost an attempt or lose an outcome"
        );
    }
    assert_eq!(count_rows(&db, "job_attempts"), 0);
    assert_eq!(count_rows(&db, "jobs"), FULL_DISK_JOBS as i64);
    let later = queue
        .enqueue(NewJob::new("work", json!({ "after": true })))
        .expect("enqueue works again once there is space");
    scripted::wait_status(&events, later, JobStatus::Succeeded);
    worker
        .shutdown(Duration::from_secs(10))
        .expect("child: graceful shutdown");
    println!(
        "full disk: {} jobs succeeded after the disk was freed; enqueue refused with {err}",
        ids.len() + 1
    );
}

/// A command prefix that runs a program in a private mount namespace where it may mount a
/// tmpfs: `unshare -m` as root, `unshare -r -m` (a user namespace) otherwise. `None` when
/// neither works here. The probe mounts on `probe_dir`, inside its own namespace.
fn mount_namespace_prefix(probe_dir: &Path) -> Option<&'static [&'static str]> {
    const CANDIDATES: [&[&str]; 2] = [&["unshare", "-m"], &["unshare", "-r", "-m"]];
    CANDIDATES.into_iter().find(|prefix| {
        Command::new(prefix[0])
            .args(&prefix[1..])
            .args(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(probe_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

#[test]
fn a_full_disk_refuses_enqueues_cleanly_and_delays_outcomes_until_space_is_freed() {
    if child::is_child(FULL_DISK_ROLE) {
        return;
    }
    let dir = temp_dir();
    let Some(prefix) = mount_namespace_prefix(dir.path()) else {
        // CI runs as root, where `unshare -m` works: there this test must run.
        assert!(
            std::env::var_os("CI").is_none(),
            "the full-disk test needs `unshare -m` (root) or unprivileged user namespaces \
             (`unshare -r -m`) to mount a small tmpfs"
        );
        println!(
            "full disk: SKIPPED: cannot mount a small tmpfs here (needs `unshare -m` as root or \
             `unshare -r -m`); it runs in CI"
        );
        return;
    };
    let deadline = Deadline::new("full-disk test", TEST_CAP);
    let envs: Vec<(&str, OsString)> = vec![(MOUNT_VAR, dir.path().join("fs").into_os_string())];
    let mut child = PrefixedChild::spawn(
        dir.path(),
        prefix,
        "full-disk",
        FULL_DISK_TEST,
        FULL_DISK_ROLE,
        &envs,
    );
    let status = child.wait(&deadline);
    let output = child.output();
    assert!(
        status.success(),
        "the full-disk child ({prefix:?}) failed with {status}; its output:\n{output}"
    );
    assert!(
        output.contains("jobs succeeded after the disk was freed"),
        "the child ran its checks; its output:\n{output}"
    );
    for line in output
        .lines()
        .filter_map(|l| l.find("full disk:").map(|at| &l[at..]))
    {
        println!("{line}");
    }
}

// ---------------------------------------------------------------------------------------
// Poison pill
// ---------------------------------------------------------------------------------------

const PILL_ROLE: &str = "faults-poison-pill";
const PILL_TEST: &str = "faults::child_poison_pill_worker";
/// Attempts of the pill: each one kills a worker process.
const PILL_ATTEMPTS: u32 = 3;
/// Other jobs, enqueued around the pill.
const PILL_OTHER_JOBS: usize = 60;
/// Each crash may cost an in-flight job one attempt.
const PILL_OTHER_ATTEMPTS: u32 = PILL_ATTEMPTS + 3;
/// Core dumps off, so an aborting child leaves no `core` file behind.
const NO_CORE_DUMPS: &[&str] = &["sh", "-c", "ulimit -c 0 && exec \"$0\" \"$@\""];

/// A worker process with short timeouts, leases and reap interval. Jobs of type `pill`
/// abort the whole process; `work` jobs log their end and succeed. Runs until no work is
/// left, then shuts down gracefully (exit 0).
#[test]
fn child_poison_pill_worker() {
    if !child::is_child(PILL_ROLE) {
        return;
    }
    let deadline = Deadline::new("poison-pill child", CHILD_LIFETIME_CAP);
    let queue = Queue::open(child::env_path(DB_VAR)).expect("child: opening the queue");
    let log = Arc::new(AppendLog::open(&child::env_path(LOG_VAR)));
    let pid = std::process::id();
    let worker = Worker::builder(&queue)
        .handler("pill", |_: &JobContext| -> Result<(), JobError> {
            std::process::abort()
        })
        .handler("work", move |ctx: &JobContext| -> Result<(), JobError> {
            std::thread::sleep(Duration::from_millis(5));
            log.line(&format!("end {} {} {pid}", ctx.id(), ctx.attempt()));
            Ok(())
        })
        .concurrency(2)
        .prefetch(4)
        .default_timeout(Duration::from_secs(1))
        .lease_grace(Duration::from_millis(300))
        .reap_interval(Duration::from_millis(100))
        .poll_interval(Duration::from_millis(50))
        .start()
        .expect("child: starting the worker");
    child::wait_until_no_work(&queue, &deadline);
    worker
        .shutdown(Duration::from_secs(10))
        .expect("child: graceful shutdown");
}

#[test]
fn a_poison_pill_that_aborts_its_worker_every_time_ends_dead_and_the_rest_completes() {
    if child::is_child(PILL_ROLE) {
        return;
    }
    let deadline = Deadline::new("poison-pill test", TEST_CAP);
    let dir = temp_dir();
    let db = dir.path().join("jobs.db");
    let log_path = dir.path().join("runs.log");
    let queue = Queue::open(&db).expect("opening the queue");
    let half = PILL_OTHER_JOBS / 2;
    let work = |i: usize| NewJob::new("work", json!({ "n": i })).max_attempts(PILL_OTHER_ATTEMPTS);
    let mut others = queue
        .enqueue_batch((0..half).map(work).collect())
        .expect("enqueueing work");
    let pill = queue
        .enqueue(NewJob::new("pill", json!({})).max_attempts(PILL_ATTEMPTS))
        .expect("enqueueing the pill");
    others.extend(
        queue
            .enqueue_batch((half..PILL_OTHER_JOBS).map(work).collect())
            .expect("enqueueing work"),
    );

    let envs: Vec<(&str, OsString)> = vec![
        (DB_VAR, db.clone().into_os_string()),
        (LOG_VAR, log_path.clone().into_os_string()),
    ];
    // Restart the worker after every crash, as a supervisor (systemd, a container runtime)
    // would; bounded, so a worker that crashes forever fails the test instead of hanging it.
    let max_runs = PILL_ATTEMPTS as usize + 3;
    let mut crashes = 0;
    let mut clean_exit = false;
    for run in 0..max_runs {
        let mut worker = PrefixedChild::spawn(
            dir.path(),
            NO_CORE_DUMPS,
            &format!("worker-{run}"),
            PILL_TEST,
            PILL_ROLE,
            &envs,
        );
        let status = worker.wait(&deadline);
        if status.success() {
            clean_exit = true;
            break;
        }
        assert_eq!(
            status.signal(),
            Some(6),
            "worker run {run} must end by the pill's abort (SIGABRT), not {status}; its \
             output:\n{}",
            worker.output()
        );
        crashes += 1;
        println!("poison pill: worker run {run} aborted by the pill");
    }
    assert!(
        clean_exit,
        "the worker still crashed after {max_runs} restarts: the pill was never retired"
    );
    assert_eq!(
        crashes, PILL_ATTEMPTS as usize,
        "the pill kills one worker per attempt, and no more once its attempts are spent"
    );

    let job = queue
        .job(pill)
        .expect("reading the pill")
        .expect("pill exists");
    assert_eq!(job.status, JobStatus::Dead, "{job:?}");
    assert_eq!(job.attempts, i64::from(PILL_ATTEMPTS));
    let error = job.last_error.unwrap_or_default();
    assert!(
        error.contains("worker died") && error.contains("lease expired"),
        "the pill's error says its worker died while running it: {error:?}"
    );
    let history = queue.attempts(pill).expect("reading the pill's history");
    assert_eq!(history.len(), PILL_ATTEMPTS as usize, "{history:?}");
    for (i, a) in history.iter().enumerate() {
        assert_eq!((a.attempt, a.outcome.as_str()), (i as i64 + 1, "lost"));
        assert!(
            a.error
                .as_deref()
                .is_some_and(|e| e.contains("died or hung")),
            "{a:?}"
        );
    }
    let ended: Vec<String> = child::read_lines(&log_path);
    for &id in &others {
        let job = queue.job(id).expect("reading a job").expect("job exists");
        assert_eq!(
            job.status,
            JobStatus::Succeeded,
            "job {id} must complete despite the pill: {job:?}"
        );
        assert!(
            ended
                .iter()
                .any(|l| l.split(' ').nth(1) == Some(&id.to_string())),
            "job {id} succeeded without a logged run"
        );
    }
    let lost_others: usize = others
        .iter()
        .map(|&id| {
            queue
                .attempts(id)
                .expect("reading a history")
                .iter()
                .filter(|a| a.outcome.as_str() == "lost")
                .count()
        })
        .sum();
    println!(
        "poison pill: dead after {crashes} aborted worker runs with {error:?}; \
         {PILL_OTHER_JOBS} other jobs succeeded ({lost_others} of their attempts died with a \
         worker)"
    );
}
