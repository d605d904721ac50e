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
//! claim 20–40 ms of the kernel freeing cached pages). This thread cuts a file longer than
//! [`LOG_KEPT_BYTES`] instead, once writes have stopped for [`QUIET`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use rusqlite::{Connection, OpenFlags};

/// How long the thread gathers commits before one checkpoint: under a steady load at most
/// one checkpoint per this much time, each copying the pages of many commits once.
const GATHER: Duration = Duration::from_millis(250);

/// A log this long (frames of one page, 16 MiB with 4 KiB pages) is copied out with this
/// process's writers held back, so that it starts over.
const CATCH_UP_FRAMES: i64 = 4096;

/// A log file longer than this is emptied once this process has written nothing for
/// [`QUIET`].
const LOG_KEPT_BYTES: u64 = 64 << 20;

/// How long writes must have stopped before a long log file is emptied.
const QUIET: Duration = Duration::from_secs(1);

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
        let (wrote, writes) = bounded(1);
        let due = Arc::new(AtomicBool::new(false));
        let thread_due = Arc::clone(&due);
        let thread = std::thread::Builder::new()
            .name("litejobs-checkpoint".into())
            .spawn(move || run(&path, flags, &writes, &thread_due, &write_gate))?;
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

fn run(
    path: &std::path::Path,
    flags: OpenFlags,
    writes: &Receiver<()>,
    due: &AtomicBool,
    write_gate: &Mutex<()>,
) {
    let log_file = log_path(path);
    let mut conn: Option<Connection> = None;
    loop {
        let long_log = conn.is_some() && file_len(&log_file) > LOG_KEPT_BYTES;
        let wrote = if long_log {
            writes.recv_timeout(QUIET)
        } else {
            writes.recv().map_err(|_| RecvTimeoutError::Disconnected)
        };
        match wrote {
            Ok(()) => {}
            Err(RecvTimeoutError::Timeout) => {
                if let Some(conn) = &conn {
                    empty_log(conn, write_gate);
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
        // Nothing is sent while a checkpoint is due, so this waits out the gathering time,
        // or ends early when the database is closed.
        let open = !matches!(
            writes.recv_deadline(Instant::now() + GATHER),
            Err(RecvTimeoutError::Disconnected)
        );
        // Commits from here on need a checkpoint after this one.
        due.store(false, Ordering::Release);
        if conn.is_none() {
            match Connection::open_with_flags(path, flags) {
                // Never waits: a checkpoint that finds the log busy leaves it for the next.
                Ok(opened) => match opened.busy_timeout(Duration::ZERO) {
                    Ok(()) => conn = Some(opened),
                    Err(e) => log::warn!("litejobs: the checkpoint thread cannot set up: {e}"),
                },
                Err(e) => {
                    log::warn!("litejobs: the checkpoint thread cannot open the database: {e}")
                }
            }
        }
        if let Some(conn) = &conn {
            if checkpoint(conn).is_some_and(|frames| frames > CATCH_UP_FRAMES) {
                let _gate = write_gate
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                checkpoint(conn);
            }
        }
        if !open {
            return;
        }
    }
}

/// The database's log file (`-wal`).
fn log_path(path: &std::path::Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

fn file_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map_or(0, |meta| meta.len())
}

/// A `TRUNCATE` checkpoint with this process's writers held back: copies the whole log and
/// empties its file. Another process's reader or writer makes it give up at once (busy);
/// the next quiet moment tries again.
fn empty_log(conn: &Connection, write_gate: &Mutex<()>) {
    let _gate = write_gate
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
        row.get::<_, i64>(0)
    }) {
        Ok(busy) => log::trace!("litejobs: emptying the WAL file: busy {busy}"),
        Err(e) => log::warn!("litejobs: emptying the WAL file failed: {e}"),
    }
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
        Err(e) => {
            log::warn!("litejobs: WAL checkpoint failed: {e}");
            None
        }
    }
}
