//! What a job said while it ran, kept with its attempt: lines a handler gives
//! [`JobContext::log_line`](crate::JobContext::log_line), `log` records emitted on its
//! thread while a [`CaptureLogger`](crate::job_log::CaptureLogger) is installed, and a
//! command's stderr. Bounded: the newest [`ATTEMPT_LOG_BYTES`] are kept, with a count of the
//! bytes left out before them.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};

/// The most of an attempt's log kept: its newest 32 KiB.
pub const ATTEMPT_LOG_BYTES: usize = 32 * 1024;

/// One attempt's log as it grows.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct AttemptLog {
    /// The newest lines, each ending in a newline.
    pub(crate) text: String,
    /// Bytes left out before `text`.
    pub(crate) cut: u64,
}

impl AttemptLog {
    /// Adds `text` as one or more lines (a missing final newline is added; a NUL, which
    /// PostgreSQL's text cannot hold, reads `\0`). Past twice the bound the oldest lines go
    /// ([`AttemptLog::bounded`] keeps the bound itself when the attempt ends), so a chatty
    /// handler does not copy the whole buffer at each line.
    pub(crate) fn push(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if text.contains('\0') {
            self.text.push_str(&text.replace('\0', "\\0"));
        } else {
            self.text.push_str(text);
        }
        if !text.ends_with('\n') {
            self.text.push('\n');
        }
        if self.text.len() > 2 * ATTEMPT_LOG_BYTES {
            self.trim();
        }
    }

    /// Counts `bytes` more left out before the kept text (a command's stderr cut before
    /// it reached the log).
    pub(crate) fn left_out(&mut self, bytes: u64) {
        self.cut += bytes;
    }

    /// Itself within [`ATTEMPT_LOG_BYTES`]: its newest whole lines.
    pub(crate) fn bounded(mut self) -> AttemptLog {
        self.trim();
        self
    }

    /// Drops the oldest bytes past the bound, up to the start of a line, so that a line is
    /// never kept cut at its start (a `TOKEN=…` cut to `OKEN=…` would escape masking).
    fn trim(&mut self) {
        if self.text.len() <= ATTEMPT_LOG_BYTES {
            return;
        }
        let mut over = self.text.len() - ATTEMPT_LOG_BYTES;
        while !self.text.is_char_boundary(over) {
            over += 1;
        }
        let cut = match self.text[over..].find('\n') {
            Some(at) if over + at + 1 < self.text.len() => over + at + 1,
            // One line longer than the bound: its end, from a character boundary.
            _ => over,
        };
        self.text.drain(..cut);
        self.cut += cut as u64;
    }

    /// Whether nothing was said.
    pub(crate) fn is_empty(&self) -> bool {
        self.text.is_empty() && self.cut == 0
    }
}

thread_local! {
    /// The log of the attempt running on this thread, while one runs.
    static CURRENT: RefCell<Option<Arc<Mutex<AttemptLog>>>> = const { RefCell::new(None) };
}

/// Sends `log` records emitted on this thread to `log` until dropped, then to what they
/// went to before (a `drain` inside a handler nests).
pub(crate) struct CaptureGuard(Option<Arc<Mutex<AttemptLog>>>);

/// Starts capturing this thread's `log` records into `log`.
pub(crate) fn capture(log: &Arc<Mutex<AttemptLog>>) -> CaptureGuard {
    let before = CURRENT
        .try_with(|c| c.borrow_mut().replace(Arc::clone(log)))
        .ok()
        .flatten();
    CaptureGuard(before)
}

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        let before = self.0.take();
        let _ = CURRENT.try_with(|c| *c.borrow_mut() = before);
    }
}

/// Adds `line` to the log of the attempt running on this thread; false when none runs.
/// (`try_with`: a record logged while this thread's locals are torn down is not an
/// attempt's, and must not abort the process.)
pub(crate) fn push_current(line: &str) -> bool {
    CURRENT
        .try_with(|c| match &*c.borrow() {
            Some(log) => {
                if let Ok(mut log) = log.lock() {
                    log.push(line);
                }
                true
            }
            None => false,
        })
        .unwrap_or(false)
}

/// Whether an attempt's log is being captured on this thread.
pub(crate) fn capturing() -> bool {
    CURRENT.try_with(|c| c.borrow().is_some()).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_bytes_are_kept_and_the_rest_counted() {
        let mut log = AttemptLog::default();
        log.push("first");
        log.push("second\n");
        assert_eq!(log.text, "first\nsecond\n");
        let line = "é".repeat(1000);
        for _ in 0..40 {
            log.push(&line);
        }
        let log = log.bounded();
        assert!(log.text.len() <= ATTEMPT_LOG_BYTES);
        assert!(log.text.starts_with(&line), "whole lines only");
        assert!(log.text.ends_with(&format!("{line}\n")));
        assert_eq!(log.cut as usize + log.text.len(), 13 + 40 * 2001);
    }

    #[test]
    fn a_nul_is_shown_not_stored() {
        let mut log = AttemptLog::default();
        log.push("a\0b");
        assert_eq!(log.text, "a\\0b\n");
    }
}
