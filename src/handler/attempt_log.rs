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
    /// Adds `text` as one or more lines (a missing final newline is added), dropping the
    /// oldest bytes past the bound at a character boundary.
    pub(crate) fn push(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.text.push_str(text);
        if !text.ends_with('\n') {
            self.text.push('\n');
        }
        if self.text.len() > ATTEMPT_LOG_BYTES {
            let mut cut = self.text.len() - ATTEMPT_LOG_BYTES;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.text.drain(..cut);
            self.cut += cut as u64;
        }
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

/// Sends `log` records emitted on this thread to `log` until dropped.
pub(crate) struct CaptureGuard(());

/// Starts capturing this thread's `log` records into `log`.
pub(crate) fn capture(log: &Arc<Mutex<AttemptLog>>) -> CaptureGuard {
    CURRENT.with(|c| *c.borrow_mut() = Some(Arc::clone(log)));
    CaptureGuard(())
}

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
    }
}

/// Adds `line` to the log of the attempt running on this thread; false when none runs.
pub(crate) fn push_current(line: &str) -> bool {
    CURRENT.with(|c| match &*c.borrow() {
        Some(log) => {
            if let Ok(mut log) = log.lock() {
                log.push(line);
            }
            true
        }
        None => false,
    })
}

/// Whether an attempt's log is being captured on this thread.
pub(crate) fn capturing() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
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
        assert!(log.text.len() <= ATTEMPT_LOG_BYTES);
        assert!(log.text.ends_with(&format!("{line}\n")));
        assert_eq!(log.cut as usize + log.text.len(), 13 + 40 * 2001);
    }
}
