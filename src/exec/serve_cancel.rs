//! A `--serve` job that must stop. A job cancelled while its process works on it is passed
//! on as a line, `{"cancel": ID}`, and the process has the kill grace to end that job (by
//! answering it: any outcome, which is discarded) before its process group is stopped and a
//! new process takes the slot. Any other stop (a shutdown past its grace) stops the group
//! at once, as a timeout does.

use std::process::ChildStdin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::pipes::{write_some, Io};
use crate::handler::stop::StopSignal;
use crate::handler::JobContext;

/// The stop of one job handed to a serve process.
pub(crate) struct JobStop {
    /// What the watchdog watches: set, the process group is stopped.
    hard: Arc<StopSignal>,
    kill_grace: Duration,
    /// When the cancel line was queued for the process.
    told_at: Option<Instant>,
    /// What is left to write of the cancel line (the pipe may be full for a moment).
    unsent: Vec<u8>,
}

impl JobStop {
    pub(crate) fn new(kill_grace: Duration) -> JobStop {
        JobStop {
            hard: Arc::default(),
            kill_grace,
            told_at: None,
            unsent: Vec::new(),
        }
    }

    /// The flag for the watchdog.
    pub(crate) fn flag(&self) -> Arc<StopSignal> {
        Arc::clone(&self.hard)
    }

    /// True once the process was told that its job is cancelled.
    pub(crate) fn told(&self) -> bool {
        self.told_at.is_some()
    }

    /// Looks whether the job must stop, and acts: a cancel is written to the process
    /// (`stdin`), and once the kill grace has passed since, the group is stopped; any other
    /// stop stops the group now.
    pub(crate) fn check(&mut self, ctx: &JobContext, stdin: Option<&mut ChildStdin>) {
        if self.hard.is_set() || !ctx.should_stop() {
            return;
        }
        if ctx.cancelled().is_none() {
            self.hard.set();
            return;
        }
        let now = Instant::now();
        let told_at = *self.told_at.get_or_insert_with(|| {
            self.unsent = format!("{{\"cancel\": {}}}\n", ctx.id()).into_bytes();
            now
        });
        if now >= told_at + self.kill_grace {
            self.hard.set();
            return;
        }
        let Some(stdin) = stdin else {
            return;
        };
        while !self.unsent.is_empty() {
            match write_some(stdin, &self.unsent) {
                Io::Moved(n) => {
                    self.unsent.drain(..n);
                }
                // Full for now: the rest goes at the next look. Closed: the process ended,
                // which its reader notices.
                Io::Pending | Io::Closed => break,
            }
        }
    }
}
