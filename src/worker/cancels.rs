//! How a worker learns that a job it holds was cancelled, and stops it. A cancel through
//! this process's `Queue` arrives as a notice at once (the dispatcher waits on it with its
//! other wake-ups); a cancel from another process or host is found by a look at the jobs the
//! worker holds, every [`LOOK_INTERVAL`] while it holds any: one read of a few rows by id,
//! and none at all while the worker is idle.
//!
//! A running attempt is told through its slot (its handler's `should_stop` turns true, a
//! command's process group is stopped); a job still waiting in the worker's channel is
//! posted on the [`CancelBoard`], so the thread that takes it skips it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::error::ErrorKind;
use crate::queue::cancel_board::CancelBoard;
use crate::queue::cancels::CancelNotice;
use crate::storage::admin::cancelled_text;
use crate::worker::queue_runtime::QueueRuntime;
use crate::Queue;

/// How often a worker that holds jobs looks whether another process cancelled one: well
/// under the second within which such a cancel is to reach the handler.
pub(crate) const LOOK_INTERVAL: Duration = Duration::from_millis(250);

/// The dispatcher's side of cancels.
pub(crate) struct CancelWatch {
    notices: Receiver<Vec<CancelNotice>>,
    board: Arc<CancelBoard>,
    /// The next look at the held jobs; `None` while the worker holds none.
    next_look: Option<Instant>,
}

impl CancelWatch {
    /// Hears `notices` from this process's queue; posts waiting jobs on `board`.
    pub(crate) fn new(notices: Receiver<Vec<CancelNotice>>, board: Arc<CancelBoard>) -> Self {
        CancelWatch {
            notices,
            board,
            next_look: None,
        }
    }

    /// The notices of this process's cancels, for the dispatcher's wait.
    pub(crate) fn notices(&self) -> &Receiver<Vec<CancelNotice>> {
        &self.notices
    }

    /// When the next look at the database is due, if the worker holds jobs.
    pub(crate) fn next_look(&self) -> Option<Instant> {
        self.next_look
    }

    /// Acts on notices received (while the dispatcher waited).
    pub(crate) fn received(&mut self, notices: Vec<CancelNotice>, queues: &[QueueRuntime]) {
        let now = Instant::now();
        for notice in notices {
            self.stop(notice.id, &notice.text, queues, now);
        }
    }

    /// Acts on the notices that came meanwhile and, when due, looks at the held jobs in the
    /// database. Schedules the next look while jobs are held.
    pub(crate) fn step(&mut self, queue: &Queue, queues: &[QueueRuntime]) {
        let now = Instant::now();
        while let Ok(notices) = self.notices.try_recv() {
            self.received(notices, queues);
        }
        // Cheap on every round: which jobs are held is only worked out when a look is due.
        if queues.iter().all(|q| q.outstanding == 0) {
            self.next_look = None;
            return;
        }
        let due = *self.next_look.get_or_insert(now + LOOK_INTERVAL);
        if now < due {
            return;
        }
        self.next_look = Some(now + LOOK_INTERVAL);
        self.board.expire(now);
        let held = held_jobs(queues);
        if held.is_empty() {
            return;
        }
        match queue.db().read_statement(|tx| tx.cancelled_among(&held)) {
            Ok(notes) => {
                for note in notes {
                    let text = cancelled_text(note.by.as_deref(), note.reason.as_deref());
                    self.stop(note.id, &text, queues, now);
                }
            }
            // Logged once per outage where the connection failed; the next look retries.
            Err(e) if e.kind() == ErrorKind::Unavailable => {}
            Err(e) => log::warn!("litejobs: looking for cancelled jobs failed: {e}"),
        }
    }

    /// Stops job `id` if this worker holds it: tells its running attempt, or posts it so
    /// that the thread taking it from the channel skips it.
    fn stop(&self, id: i64, text: &str, queues: &[QueueRuntime], now: Instant) {
        // Posted first, then the slots looked at: an executor starts its slot before it
        // reads the board, so one of the two sides sees the other.
        self.board.post(id, text, now);
        for q in queues {
            for slot in &q.slots {
                if let Some((job_type, attempt)) = slot.cancel(id, text) {
                    self.board.take(id);
                    log::info!(
                        "litejobs: job {id} ({job_type}) was {text} while attempt {attempt} \
                         ran; its handler is told to stop and its outcome will be discarded"
                    );
                    return;
                }
            }
        }
    }
}

/// The jobs this worker holds and has not yet stopped: running attempts not yet told, and
/// claimed jobs waiting in the channels.
fn held_jobs(queues: &[QueueRuntime]) -> Vec<i64> {
    let mut held = Vec::new();
    for q in queues {
        held.extend(q.slots.iter().filter_map(|slot| slot.running_job()));
        held.extend(q.prefetched.ids());
    }
    held.sort_unstable();
    held.dedup();
    held
}
