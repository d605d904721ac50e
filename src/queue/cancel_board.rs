//! Cancelled jobs a worker's executor threads must not start: a job can be cancelled while
//! it waits in its queue's channel (claimed ahead, the prefetch), and the thread that takes
//! it then skips it instead of running its handler. A cancel through this process's `Queue`
//! posts them before it returns (so a thread freed right after never starts the job), and
//! the dispatcher posts those it learns of from elsewhere; a thread looks only when
//! something is posted, so a job's start costs one atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a posted job is kept for a thread to take. A job still waiting in the channel
/// after that is posted again by the dispatcher's next look at the jobs it holds.
const KEPT: Duration = Duration::from_secs(10);

/// The board: cancelled job ids with what their handler would be told.
#[derive(Debug, Default)]
pub(crate) struct CancelBoard {
    posted: AtomicUsize,
    jobs: Mutex<HashMap<i64, (String, Instant)>>,
}

impl CancelBoard {
    /// Posts job `id`, cancelled ("cancelled by WHO: WHY").
    pub(crate) fn post(&self, id: i64, text: &str, now: Instant) {
        let mut jobs = self.lock();
        jobs.insert(id, (text.to_string(), now));
        self.posted.store(jobs.len(), Ordering::Release);
    }

    /// Takes job `id` off the board: `Some(text)` when it was cancelled.
    pub(crate) fn take(&self, id: i64) -> Option<String> {
        if self.posted.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut jobs = self.lock();
        let taken = jobs.remove(&id).map(|(text, _)| text);
        self.posted.store(jobs.len(), Ordering::Release);
        taken
    }

    /// Forgets jobs posted more than [`KEPT`] before `now` (held by another worker of the
    /// process, or given back).
    pub(crate) fn expire(&self, now: Instant) {
        if self.posted.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut jobs = self.lock();
        jobs.retain(|_, (_, at)| now.saturating_duration_since(*at) < KEPT);
        self.posted.store(jobs.len(), Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, (String, Instant)>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_posted_job_is_taken_once_and_an_old_post_expires() {
        let board = CancelBoard::default();
        let now = Instant::now();
        assert_eq!(board.take(1), None, "nothing posted");
        board.post(1, "cancelled by ops", now);
        board.post(2, "cancelled by ops", now);
        assert_eq!(board.take(1).as_deref(), Some("cancelled by ops"));
        assert_eq!(board.take(1), None, "taken once");
        board.expire(now + KEPT);
        assert_eq!(board.take(2), None, "expired");
        assert_eq!(board.posted.load(Ordering::Acquire), 0);
    }
}
