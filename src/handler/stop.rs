//! [`StopSignal`]: how the runtime tells a running attempt to stop, and why when a person
//! cancelled its job. One allocation per attempt, shared by the handler's context, the
//! worker's slot and a command's watchdog.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Set once the attempt should stop; with the cancel's text when it was cancelled.
#[derive(Debug, Default)]
pub(crate) struct StopSignal {
    stop: AtomicBool,
    cancelled: OnceLock<String>,
}

impl StopSignal {
    /// True once the attempt should stop.
    pub(crate) fn is_set(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The attempt should stop (timed out, a shutdown past its grace).
    pub(crate) fn set(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// The job was cancelled ("cancelled by WHO: WHY"); the attempt should stop. False
    /// when it was told so already.
    pub(crate) fn cancel(&self, text: &str) -> bool {
        if self.cancelled.set(text.to_string()).is_err() {
            return false;
        }
        // After the text: whoever sees the flag finds the reason.
        self.set();
        true
    }

    /// The cancel's text, once the job was cancelled.
    pub(crate) fn cancelled(&self) -> Option<&str> {
        self.cancelled.get().map(String::as_str)
    }
}
