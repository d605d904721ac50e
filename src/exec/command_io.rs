//! One `--exec` command from start to end on the handler's own thread: the payload written
//! to its stdin, stdout and stderr read, its exit noticed, all through non-blocking pipes,
//! so neither a command that never reads nor a background process holding its output can
//! keep the slot, a thread or a pipe once the command itself has ended.
//!
//! After the command's own process exits, its output is read until the pipes close. When
//! something still holds them:
//! - processes left in the command's process group get SIGTERM after [`LEFTOVER_WAIT`],
//!   then SIGKILL after the kill grace; when the watchdog is already stopping the group
//!   (timeout, shutdown) they get the rest of its kill grace, not less;
//! - once nothing is left in the group (a `setsid` daemon holds the pipes, say), the output
//!   is read for [`LEFTOVER_WAIT`] more, then no longer waited for.

use std::io;
use std::os::fd::AsFd;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::pipes::{self, read_some, set_nonblocking, wait_ready, write_some, Dir, Io};
use super::process::{group_is_empty, signal_group, Watch};

/// After a command's own process exits, how long its output may stay open before the
/// processes of its group still holding it are stopped (SIGTERM, then SIGKILL after the kill
/// grace), and how long it is read once no process of the group is left.
pub(crate) const LEFTOVER_WAIT: Duration = Duration::from_millis(500);

/// A stream's kept bytes.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    pub(crate) bytes: Vec<u8>,
    /// More came than was kept.
    pub(crate) truncated: bool,
    /// Bytes left out before the kept ones (a tail).
    pub(crate) dropped: u64,
}

impl Collected {
    /// The bytes as text, a broken UTF-8 sequence at a cut replaced.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// Keeps the first `keep` bytes seen (stdout: the result).
    fn head(&mut self, data: &[u8], keep: usize) {
        let room = keep.saturating_sub(self.bytes.len());
        self.bytes.extend_from_slice(&data[..room.min(data.len())]);
        self.truncated |= data.len() > room;
    }

    /// Keeps the last `keep` bytes seen (stderr: the reason is at its end).
    fn tail(&mut self, data: &[u8], keep: usize) {
        self.bytes.extend_from_slice(data);
        if self.bytes.len() > keep {
            let cut = self.bytes.len() - keep;
            self.bytes.drain(..cut);
            self.truncated = true;
            self.dropped += cut as u64;
        }
    }
}

/// How a command ended.
#[derive(Debug)]
pub(crate) struct Ran {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Collected,
    pub(crate) stderr: Collected,
    /// Why the watchdog stopped it, when it did so before the command exited.
    pub(crate) stopped: Option<&'static str>,
}

/// What is kept of each stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) stdout_head: usize,
    pub(crate) stderr_tail: usize,
    pub(crate) kill_grace: Duration,
}

/// Runs `child` (started with piped stdin, stdout and stderr, in a process group of its
/// own, under `watch`) to its end: writes `payload` to its stdin, keeps the output within
/// `limits`, and reaps it. On an error the whole group is killed and reaped.
pub(crate) fn run_to_end(
    child: &mut Child,
    payload: &[u8],
    watch: &Watch,
    limits: Limits,
) -> io::Result<Ran> {
    let pgid = child.id();
    let result = drive(child, payload, watch, limits);
    if result.is_err() {
        signal_group(pgid, Signal::SIGKILL);
        let _ = child.wait();
    }
    result
}

/// What is known of the command's end while its pipes are still read.
struct Ending {
    status: Option<ExitStatus>,
    stopped: Option<&'static str>,
    /// When a process of the group left holding the output was sent SIGTERM (by us).
    termed_at: Option<Instant>,
    killed: bool,
    /// When no process of the group was seen left.
    empty_since: Option<Instant>,
    exited_at: Option<Instant>,
}

fn drive(child: &mut Child, payload: &[u8], watch: &Watch, limits: Limits) -> io::Result<Ran> {
    let pgid = child.id();
    let mut stdin: Option<ChildStdin> = child.stdin.take();
    let mut stdout: Option<ChildStdout> = child.stdout.take();
    let mut stderr: Option<ChildStderr> = child.stderr.take();
    if let Some(s) = &stdin {
        set_nonblocking(s.as_fd())?;
    }
    if let Some(s) = &stdout {
        set_nonblocking(s.as_fd())?;
    }
    if let Some(s) = &stderr {
        set_nonblocking(s.as_fd())?;
    }
    let mut written = 0;
    let mut out = Collected::default();
    let mut err = Collected::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut ending = Ending {
        status: None,
        stopped: None,
        termed_at: None,
        killed: false,
        empty_since: None,
        exited_at: None,
    };
    let mut last_look = Instant::now();
    loop {
        if written >= payload.len() {
            // All written (or nothing to write): closing stdin is the end of the input.
            stdin = None;
        }
        if stdin.is_none() && stdout.is_none() && stderr.is_none() {
            break;
        }
        let mut fds = Vec::with_capacity(3);
        if let Some(s) = &stdin {
            fds.push((s.as_fd(), Dir::Write));
        }
        if let Some(s) = &stdout {
            fds.push((s.as_fd(), Dir::Read));
        }
        if let Some(s) = &stderr {
            fds.push((s.as_fd(), Dir::Read));
        }
        let ready = wait_ready(&fds, pipes::POLL_TICK);
        drop(fds);
        let mut ready = ready.into_iter();
        if let Some(s) = &mut stdin {
            if ready.next() == Some(true) {
                match write_some(s, &payload[written..]) {
                    Io::Moved(n) => written += n,
                    Io::Pending => {}
                    // A command that exits without reading its input is fine.
                    Io::Closed => stdin = None,
                }
            }
        }
        if stdout.is_some() && ready.next() == Some(true) {
            drain(&mut stdout, &mut buf, |d| out.head(d, limits.stdout_head));
        }
        if stderr.is_some() && ready.next() == Some(true) {
            drain(&mut stderr, &mut buf, |d| err.tail(d, limits.stderr_tail));
        }
        let now = Instant::now();
        if ending.status.is_none() && now.duration_since(last_look) >= pipes::POLL_TICK {
            last_look = now;
            if let Some(status) = child.try_wait()? {
                ending.status = Some(status);
                ending.exited_at = Some(now);
                // The command's own answer is its exit; what the watchdog does after it
                // (a deadline passing while leftovers are stopped) does not change it.
                ending.stopped = watch.stopped();
            }
        }
        if ending.exited_at.is_some() && give_up(&mut ending, pgid, watch, limits, now) {
            break;
        }
    }
    // Our ends closed: a daemon still holding the pipes writes to a closed pipe from now on.
    drop((stdin, stdout, stderr));
    let status = match ending.status {
        Some(status) => status,
        None => {
            // The pipes closed; the watchdog still stops a command that lingers without them.
            let status = child.wait()?;
            ending.stopped = watch.stopped();
            status
        }
    };
    Ok(Ran {
        status,
        stdout: out,
        stderr: err,
        stopped: ending.stopped,
    })
}

/// Reads what a stream holds now into `keep`; a stream that closed becomes `None`.
fn drain<R: io::Read>(stream: &mut Option<R>, buf: &mut [u8], mut keep: impl FnMut(&[u8])) {
    let Some(s) = stream else {
        return;
    };
    loop {
        match read_some(s, buf) {
            Io::Moved(n) => keep(&buf[..n]),
            Io::Pending => return,
            Io::Closed => {
                *stream = None;
                return;
            }
        }
    }
}

/// After the command exited with its pipes still open: stops what its group left behind
/// (see the module's rules) and says when to stop reading.
fn give_up(ending: &mut Ending, pgid: u32, watch: &Watch, limits: Limits, now: Instant) -> bool {
    let Some(exited_at) = ending.exited_at else {
        return false;
    };
    if group_is_empty(pgid) {
        let since = *ending.empty_since.get_or_insert(now);
        return now >= since + LEFTOVER_WAIT;
    }
    if watch.stopped().is_some() {
        // The watchdog sends SIGKILL at the end of its kill grace: the group's processes get
        // all of it to clean up.
        return false;
    }
    match ending.termed_at {
        None if now >= exited_at + LEFTOVER_WAIT => {
            log::warn!(
                "litejobs: a command exited but left processes holding its output open; \
                 stopping its process group {pgid} (SIGTERM, SIGKILL after {} ms)",
                limits.kill_grace.as_millis()
            );
            signal_group(pgid, Signal::SIGTERM);
            ending.termed_at = Some(now);
        }
        Some(at) if !ending.killed && now >= at + limits.kill_grace => {
            signal_group(pgid, Signal::SIGKILL);
            ending.killed = true;
        }
        _ => {}
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_keep_their_head_or_their_tail() {
        let mut out = Collected::default();
        out.head(b"abc", 4);
        out.head(b"def", 4);
        assert_eq!((out.bytes.as_slice(), out.truncated), (&b"abcd"[..], true));
        let mut err = Collected::default();
        err.tail(b"abc", 4);
        assert!(!err.truncated);
        err.tail(b"def", 4);
        assert_eq!((err.bytes.as_slice(), err.truncated), (&b"cdef"[..], true));
    }
}
