//! What a job said while it ran, kept with each attempt (its newest 32 KiB): lines its
//! handler gives [`JobContext::log_line`](crate::JobContext::log_line), `log` records
//! emitted on the handler's thread while a [`CaptureLogger`] is the program's logger, and a
//! command's stderr (`litejobs work --exec`; for `--serve`, its last 1.5 KiB during the
//! job). [`Queue::attempt_logs`] reads them; `litejobs show ID` and the dashboard's job page
//! show them with secret fields masked. They are deleted with their job.
//!
//! An attempt whose outcome the handler did not give keeps no log: one that timed out or
//! was given up at shutdown, cancelled while it ran, or whose worker died (the reaper
//! writes those). Neither does one snoozed or released, which does not count as an
//! attempt (the next run has its number).
//!
//! A program installs the capture around the logger it already uses:
//!
//! ```
//! use litejobs::job_log::CaptureLogger;
//! # struct MyLogger;
//! # impl log::Log for MyLogger {
//! #     fn enabled(&self, _: &log::Metadata) -> bool { true }
//! #     fn log(&self, _: &log::Record) {}
//! #     fn flush(&self) {}
//! # }
//! let logger = MyLogger; // env_logger's, say
//! let _ = log::set_boxed_logger(Box::new(CaptureLogger::new(logger)));
//! log::set_max_level(log::LevelFilter::Info);
//! ```

use log::{Log, Metadata, Record};

use crate::error::Result;
use crate::handler::attempt_log;
pub use crate::handler::attempt_log::ATTEMPT_LOG_BYTES;
pub use crate::job::AttemptLogRecord;
use crate::Queue;

/// A [`log::Log`] that also keeps each record emitted on a handler's thread during an
/// attempt in that attempt's log (`LEVEL target: message`), and passes every record on to
/// `inner` as before. It keeps what `inner` would write: records `inner` filters out (or
/// the global level filter drops) are not kept either.
#[derive(Debug)]
pub struct CaptureLogger<L> {
    inner: L,
}

impl<L: Log> CaptureLogger<L> {
    /// Wraps `inner`.
    pub fn new(inner: L) -> CaptureLogger<L> {
        CaptureLogger { inner }
    }
}

impl<L: Log> Log for CaptureLogger<L> {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.inner.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if !self.inner.enabled(record.metadata()) {
            return;
        }
        if attempt_log::capturing() {
            attempt_log::push_current(&format!(
                "{} {}: {}",
                record.level(),
                record.target(),
                record.args()
            ));
        }
        self.inner.log(record);
    }

    fn flush(&self) {
        self.inner.flush();
    }
}

impl Queue {
    /// What each attempt of job `id` said while it ran, first attempt first (none for a job
    /// whose attempts said nothing, or an unknown id). As stored: mask secret fields with
    /// [`Redactor::mask_logs`](crate::redact::Redactor::mask_logs) before showing them to
    /// people who may not see them.
    ///
    /// # Errors
    /// A database error.
    pub fn attempt_logs(&self, id: i64) -> Result<Vec<AttemptLogRecord>> {
        self.db().read(|tx| tx.attempt_logs(id))
    }
}
