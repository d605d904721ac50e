//! Non-blocking pipes to a child process. A process that does not read its input, or that
//! leaves a background process holding its output, must not hold a handler's thread past
//! the job's deadline: every wait on a pipe is a `poll` with a timeout, after which the
//! caller looks at the watchdog and at the process.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// The longest a wait on pipes lasts before the caller looks again at the process and its
/// watch. Output and the end of a process wake the wait at once; this only bounds how late
/// a process that exited while something else holds its pipes is noticed.
pub(crate) const POLL_TICK: Duration = Duration::from_millis(100);

/// Read in chunks of this size.
const CHUNK: usize = 64 * 1024;

/// Makes our end of a pipe non-blocking (the child's end is another open file, unchanged).
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
    Ok(())
}

/// Which way a pipe is waited on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// Data to read, or the other end closed.
    Read,
    /// Room to write, or the other end closed.
    Write,
}

/// Waits up to `timeout` until one of `fds` is ready; says which are (an error or a closed
/// other end counts as ready: the next read or write says so). An interrupted wait is a
/// wait with nothing ready.
pub(crate) fn wait_ready(fds: &[(BorrowedFd<'_>, Dir)], timeout: Duration) -> Vec<bool> {
    let mut polled: Vec<PollFd<'_>> = fds
        .iter()
        .map(|(fd, dir)| {
            let events = match dir {
                Dir::Read => PollFlags::POLLIN,
                Dir::Write => PollFlags::POLLOUT,
            };
            PollFd::new(*fd, events)
        })
        .collect();
    let millis = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    match poll(&mut polled, PollTimeout::from(millis)) {
        Ok(n) if n > 0 => polled
            .iter()
            .map(|p| p.revents().is_some_and(|r| !r.is_empty()))
            .collect(),
        _ => vec![false; fds.len()],
    }
}

/// [`wait_ready`] for one pipe, without allocating: the wait of every `Serve` answer.
pub(crate) fn wait_one(fd: BorrowedFd<'_>, dir: Dir, timeout: Duration) -> bool {
    let events = match dir {
        Dir::Read => PollFlags::POLLIN,
        Dir::Write => PollFlags::POLLOUT,
    };
    let mut polled = [PollFd::new(fd, events)];
    let millis = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    matches!(poll(&mut polled, PollTimeout::from(millis)), Ok(n) if n > 0)
}

/// What one non-blocking read or write did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Io {
    /// Moved this many bytes (more may be possible).
    Moved(usize),
    /// Nothing now: the pipe is empty (read) or full (write).
    Pending,
    /// The other end is closed, or the pipe failed.
    Closed,
}

/// One non-blocking read of at most `buf.len()` bytes.
pub(crate) fn read_some(stream: &mut impl Read, buf: &mut [u8]) -> Io {
    loop {
        return match stream.read(buf) {
            Ok(0) => Io::Closed,
            Ok(n) => Io::Moved(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Io::Pending,
            Err(_) => Io::Closed,
        };
    }
}

/// One non-blocking write of (part of) `bytes`.
pub(crate) fn write_some(stream: &mut impl Write, bytes: &[u8]) -> Io {
    loop {
        return match stream.write(bytes) {
            Ok(0) => Io::Closed,
            Ok(n) => Io::Moved(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Io::Pending,
            Err(_) => Io::Closed,
        };
    }
}

/// What [`LineReader::next_line`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A line, without its end (`\n`, `\r\n`).
    Text(Vec<u8>),
    /// A line longer than the reader's limit: the stream cannot be trusted any more.
    TooLong,
    /// No whole line yet.
    Pending,
    /// The stream ended (what it held without a final `\n` came as a last line).
    Closed,
}

/// Splits a non-blocking stream into lines, holding at most `limit` bytes of a line in
/// memory: a longer line is reported, never read whole.
#[derive(Debug)]
pub(crate) struct LineReader<R> {
    stream: R,
    buf: Vec<u8>,
    /// How far `buf` is known to hold no `\n`.
    scanned: usize,
    limit: usize,
    closed: bool,
}

impl<R: Read + AsFd> LineReader<R> {
    /// A reader of `stream` (already non-blocking) for lines of at most `limit` bytes.
    pub(crate) fn new(stream: R, limit: usize) -> LineReader<R> {
        LineReader {
            stream,
            buf: Vec::new(),
            scanned: 0,
            limit,
            closed: false,
        }
    }

    /// The stream, to wait on.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    /// The next whole line, from what is buffered or, when `read` (the caller knows the
    /// stream is readable, or wants to look), what can be read without blocking. Not
    /// reading a stream that is most likely empty saves a system call per answer.
    pub(crate) fn next_line(&mut self, read: bool) -> Line {
        let mut read = read;
        loop {
            if let Some(at) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
                let end = self.scanned + at;
                let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.scanned = 0;
                return Line::Text(line);
            }
            self.scanned = self.buf.len();
            if self.buf.len() > self.limit {
                return Line::TooLong;
            }
            if self.closed {
                if self.buf.is_empty() {
                    return Line::Closed;
                }
                self.scanned = 0;
                return Line::Text(std::mem::take(&mut self.buf));
            }
            if !read {
                return Line::Pending;
            }
            let start = self.buf.len();
            // At most one byte past the limit is ever needed to know a line is too long.
            let room = CHUNK.min(self.limit + 1 - start);
            self.buf.resize(start + room, 0);
            let got = read_some(&mut self.stream, &mut self.buf[start..]);
            let kept = match got {
                Io::Moved(n) => n,
                Io::Pending | Io::Closed => 0,
            };
            self.buf.truncate(start + kept);
            match got {
                // A short read emptied the pipe: the next one would find nothing.
                Io::Moved(n) => read = n == room,
                Io::Pending => return Line::Pending,
                Io::Closed => self.closed = true,
            }
        }
    }
}

/// `text` on one line for a log: control characters (a carriage return that would overwrite
/// the line on a terminal, escape sequences, newlines) written as escapes.
pub(crate) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn pair() -> (UnixStream, UnixStream) {
        let (a, b) = UnixStream::pair().expect("socket pair");
        set_nonblocking(b.as_fd()).expect("non-blocking");
        (a, b)
    }

    #[test]
    fn lines_come_whole_and_a_long_one_is_refused_without_being_read_whole() {
        let (mut writer, reader) = pair();
        let mut lines = LineReader::new(reader, 16);
        assert_eq!(lines.next_line(true), Line::Pending);
        writer.write_all(b"one\r\ntw").expect("write");
        assert_eq!(
            lines.next_line(false),
            Line::Pending,
            "not read when not asked"
        );
        assert_eq!(lines.next_line(true), Line::Text(b"one".to_vec()));
        assert_eq!(lines.next_line(true), Line::Pending);
        writer.write_all(b"o\nthree").expect("write");
        assert_eq!(lines.next_line(true), Line::Text(b"two".to_vec()));
        drop(writer);
        assert_eq!(lines.next_line(true), Line::Text(b"three".to_vec()));
        assert_eq!(lines.next_line(true), Line::Closed);

        let (mut writer, reader) = pair();
        let mut lines = LineReader::new(reader, 16);
        writer.write_all(&[b'x'; 4096]).expect("write");
        assert_eq!(lines.next_line(true), Line::TooLong);
        assert!(lines.buf.len() <= 17, "read {} bytes", lines.buf.len());
    }

    #[test]
    fn control_characters_are_escaped_for_logs() {
        assert_eq!(printable("50%\r80%\x1b[2K"), "50%\\r80%\\u{1b}[2K");
        assert_eq!(printable("plain é"), "plain é");
    }
}
