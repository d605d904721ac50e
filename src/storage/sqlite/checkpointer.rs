//! WAL checkpoints off the writers' path.
//!
//! By default SQLite checkpoints in the committing thread whenever the write-ahead log passes
//! 1 000 pages, so every hundredth enqueue or claim paid a checkpoint's copy and fsync:
//! measured, in-process pickup p99 was 1.5–2.3 ms with it and 0.3 ms without. litejobs'
//! connections turn that off (`wal_autocheckpoint = 0`) and this thread checkpoints instead,
//! on a connection of its own, shortly after writes. `PASSIVE` checkpoints never wait for or
//! block a reader or a writer; the last connection to close checkpoints as usual.
//!
//! The log only starts over from its beginning when a writer finds it wholly copied, which a
//! checkpoint racing a steady stream of commits never achieves: the log would grow without
//! end. So once it passes [`CATCH_UP_FRAMES`], the thread checkpoints again holding the
//! process's write gate, and the next commit starts the log over.
//!
//! Starting over keeps the log file's length: the writers' connections leave
//! `journal_size_limit` unset, because the commit that cut a long file back paid for it (20 000
//! one-job commits in a quarter of a second leave 150 MB of log; cutting it took the next
//! claim 20–40 ms of the kernel freeing cached pages). This thread empties a file longer than
//! [`LOG_KEPT_BYTES`] instead: once writes have stopped for [`QUIET`], or, where they never
//! stop that long, after [`LONG_LOG_PATIENCE`], holding the writers back for that moment.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use rusqlite::{Connection, OpenFlags};

use super::errors::is_busy;

/// How long the thread gathers commits before one checkpoint: under a steady load at most
/// one checkpoint per this much time, each copying the pages of many commits once.
const GATHER: Duration = Duration::from_millis(250);

/// A log this long (frames of one page, 16 MiB with 4 KiB pages) is copied out with this
/// process's writers held back, so that it starts over.
const CATCH_UP_FRAMES: i64 = 4096;

/// A log file longer than this is emptied (see the module's text).
const LOG_KEPT_BYTES: u64 = 64 << 20;

/// How long writes must have stopped before a long log file is emptied.
const QUIET: Duration = Duration::from_secs(1);

/// How long the thread's connection waits for a lock (to read the schema, say), as
/// rusqlite's default; never for emptying the log.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a log file may stay long while writes never stop for [`QUIET`].
const LONG_LOG_PATIENCE: Duration = Duration::from_secs(30);

/// When the thread acts; constants but in tests.
#[derive(Debug, Clone, Copy)]
struct Timing {
    gather: Duration,
    quiet: Duration,
    patience: Duration,
    log_kept_bytes: u64,
}

const TIMING: Timing = Timing {
    gather: GATHER,
    quiet: QUIET,
    patience: LONG_LOG_PATIENCE,
    log_kept_bytes: LOG_KEPT_BYTES,
};

/// The checkpoint thread of one database file; stops (after a last checkpoint) when dropped.
#[derive(Debug)]
pub(super) struct Checkpointer {
    wrote: Option<Sender<()>>,
    /// A checkpoint is already coming: later commits need not wake the thread (a wake-up
    /// at every commit would be a system call and a context switch for nothing).
    due: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread; it opens its connection to `path` at the first write.
    pub(super) fn start(
        path: PathBuf,
        flags: OpenFlags,
        write_gate: Arc<Mutex<()>>,
    ) -> std::io::Result<Checkpointer> {
        Checkpointer::start_with(path, flags, write_gate, TIMING)
    }

    fn start_with(
        path: PathBuf,
        flags: OpenFlags,
        write_gate: Arc<Mutex<()>>,
        timing: Timing,
    ) -> std::io::Result<Checkpointer> {
        let (wrote, writes) = bounded(1);
        let due = Arc::new(AtomicBool::new(false));
        let thread_due = Arc::clone(&due);
        let thread = std::thread::Builder::new()
            .name("litejobs-checkpoint".into())
            .spawn(move || {
                let mut thread = Thread {
                    log: log_path(&path),
                    path: &path,
                    flags,
                    write_gate: &write_gate,
                    timing,
                    conn: None,
                    long_since: None,
                };
                thread.run(&writes, &thread_due);
            })?;
        Ok(Checkpointer {
            wrote: Some(wrote),
            due,
            thread: Some(thread),
        })
    }

    /// After a commit: a checkpoint is due soon. Never blocks.
    pub(super) fn wrote(&self) {
        if self.due.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(wrote) = &self.wrote {
            let _ = wrote.try_send(());
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        // Closing the channel ends the thread after at most one checkpoint.
        self.wrote = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread's state.
struct Thread<'a> {
    path: &'a Path,
    /// Its log file.
    log: PathBuf,
    flags: OpenFlags,
    write_gate: &'a Mutex<()>,
    timing: Timing,
    /// Opened at the first write.
    conn: Option<Connection>,
    /// Since when the log file has been longer than it should be.
    long_since: Option<Instant>,
}

impl Thread<'_> {
    fn run(&mut self, writes: &Receiver<()>, due: &AtomicBool) {
        loop {
            let wrote = if self.long_since.is_some() {
                writes.recv_timeout(self.timing.quiet)
            } else {
                writes.recv().map_err(|_| RecvTimeoutError::Disconnected)
            };
            match wrote {
                Ok(()) => {}
                Err(RecvTimeoutError::Timeout) => {
                    self.empty_log();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
            // Nothing is sent while a checkpoint is due, so this waits out the gathering
            // time, or ends early when the database is closed.
            let open = !matches!(
                writes.recv_deadline(Instant::now() + self.timing.gather),
                Err(RecvTimeoutError::Disconnected)
            );
            // Commits from here on need a checkpoint after this one.
            due.store(false, Ordering::Release);
            self.checkpoint_gathered();
            if !open {
                return;
            }
        }
    }

    fn checkpoint_gathered(&mut self) {
        if self.conn.is_none() {
            self.conn = open(self.path, self.flags);
        }
        let Some(conn) = &self.conn else { return };
        if checkpoint(conn).is_some_and(|frames| frames > CATCH_UP_FRAMES) {
            let _gate = hold(self.write_gate);
            checkpoint(conn);
        }
        let now = Instant::now();
        match self.long_since {
            Some(since) if now.duration_since(since) >= self.timing.patience => self.empty_log(),
            _ => self.note_length(now),
        }
    }

    /// A `TRUNCATE` checkpoint with this process's writers held back: copies the whole log
    /// and empties its file. Another process's reader or writer makes it give up at once
    /// (busy); the file stays long and the thread tries again later.
    fn empty_log(&mut self) {
        if let Some(conn) = &self.conn {
            let _gate = hold(self.write_gate);
            // Never waits: waiting for another process's reader would hold every writer.
            let emptied = conn.busy_timeout(Duration::ZERO).and_then(|()| {
                conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                    row.get::<_, i64>(0)
                })
            });
            match emptied {
                Ok(busy) => log::trace!("litejobs: emptying the WAL file: busy {busy}"),
                Err(e) if is_busy(&e) => log::debug!("litejobs: emptying the WAL file: {e}"),
                Err(e) => log::warn!("litejobs: emptying the WAL file failed: {e}"),
            }
            if let Err(e) = conn.busy_timeout(BUSY_TIMEOUT) {
                log::warn!("litejobs: the checkpoint thread cannot set its busy timeout: {e}");
            }
        }
        self.long_since = None;
        self.note_length(Instant::now());
    }

    fn note_length(&mut self, now: Instant) {
        if file_len(&self.log) <= self.timing.log_kept_bytes {
            self.long_since = None;
        } else if self.long_since.is_none() {
            self.long_since = Some(now);
        }
    }
}

fn open(path: &Path, flags: OpenFlags) -> Option<Connection> {
    let opened = Connection::open_with_flags(path, flags)
        .and_then(|conn| conn.busy_timeout(BUSY_TIMEOUT).map(|()| conn));
    match opened {
        Ok(conn) => Some(conn),
        Err(e) => {
            log::warn!("litejobs: the checkpoint thread cannot open the database: {e}");
            None
        }
    }
}

fn hold(write_gate: &Mutex<()>) -> std::sync::MutexGuard<'_, ()> {
    write_gate
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One `PASSIVE` checkpoint: copies what it can of the log into the database without
/// waiting for anyone. Returns the log's length in frames. A failure is only logged; the
/// next write brings another try.
fn checkpoint(conn: &Connection) -> Option<i64> {
    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
    });
    match done {
        Ok((frames, copied)) => {
            log::trace!("litejobs: checkpoint copied {copied} of {frames} WAL frames");
            Some(frames)
        }
        // Another connection setting the database up, say: the next write brings another try.
        Err(e) if is_busy(&e) => {
            log::debug!("litejobs: WAL checkpoint put off: {e}");
            None
        }
        Err(e) => {
            log::warn!("litejobs: WAL checkpoint failed: {e}");
            None
        }
    }
}

/// The write-ahead log file of the database at `path` (`-wal` after its name).
pub(super) fn log_path(path: &Path) -> PathBuf {
    let mut log = path.as_os_str().to_owned();
    log.push("-wal");
    PathBuf::from(log)
}

/// A file's length; 0 for none.
fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |meta| meta.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEPT: u64 = 256 << 10;

    /// A WAL file with autocheckpoints off, as litejobs' writers have it.
    fn writer(path: &Path) -> Connection {
        let conn = Connection::open(path).expect("open");
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
            .expect("wal");
        conn.query_row("PRAGMA wal_autocheckpoint = 0", [], |_| Ok(()))
            .expect("no autocheckpoint");
        conn.execute_batch("CREATE TABLE t (b BLOB)")
            .expect("table");
        conn
    }

    fn write(conn: &Connection, gate: &Mutex<()>, bytes: usize, checkpointer: &Checkpointer) {
        {
            let _gate = hold(gate);
            conn.execute("INSERT INTO t (b) VALUES (zeroblob(?1))", [bytes as i64])
                .expect("insert");
        }
        checkpointer.wrote();
    }

    fn wal_len(path: &Path) -> u64 {
        file_len(&log_path(path))
    }

    fn start(
        path: &Path,
        gate: &Arc<Mutex<()>>,
        quiet: Duration,
        patience: Duration,
    ) -> Checkpointer {
        let timing = Timing {
            gather: Duration::from_millis(10),
            quiet,
            patience,
            log_kept_bytes: KEPT,
        };
        Checkpointer::start_with(
            path.to_path_buf(),
            OpenFlags::default(),
            Arc::clone(gate),
            timing,
        )
        .expect("thread")
    }

    /// A database whose log holds a 1 MiB write, and a checkpoint thread with these timings
    /// (fields drop in order: the thread before the directory).
    struct LongLog {
        checkpointer: Checkpointer,
        conn: Connection,
        gate: Arc<Mutex<()>>,
        path: PathBuf,
        _dir: tempfile::TempDir,
    }

    fn long_log(quiet: Duration, patience: Duration) -> LongLog {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("q.db");
        let conn = writer(&path);
        let gate = Arc::new(Mutex::new(()));
        let checkpointer = start(&path, &gate, quiet, patience);
        write(&conn, &gate, 1 << 20, &checkpointer);
        assert!(wal_len(&path) > KEPT, "the log holds the write");
        LongLog {
            checkpointer,
            conn,
            gate,
            path,
            _dir: dir,
        }
    }

    #[test]
    fn a_long_log_file_is_emptied_once_writes_stop() {
        let LongLog { conn, path, .. } =
            &long_log(Duration::from_millis(50), Duration::from_secs(3600));
        let deadline = Instant::now() + Duration::from_secs(20);
        while wal_len(path) > 0 {
            assert!(Instant::now() < deadline, "the log file was not emptied");
            std::thread::sleep(Duration::from_millis(10));
        }
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .expect("count");
        assert_eq!(rows, 1, "the row was copied into the database");
    }

    #[test]
    fn a_long_log_file_is_emptied_after_a_while_when_writes_never_stop() {
        // Never quiet for an hour: only the patience can empty the file.
        let LongLog {
            checkpointer,
            conn,
            gate,
            path,
            ..
        } = &long_log(Duration::from_secs(3600), Duration::from_millis(100));
        let deadline = Instant::now() + Duration::from_secs(20);
        while wal_len(path) > KEPT {
            assert!(
                Instant::now() < deadline,
                "the log file stayed {} bytes long under steady writes",
                wal_len(path)
            );
            write(conn, gate, 100, checkpointer);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
