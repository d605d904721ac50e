//! Dead jobs waiting for a person: list, requeue as new jobs (one, or by type, error text
//! and error group), discard.

use crate::error::Result;
use crate::job::Discarded;
use crate::job::JobRecord;
use crate::progress::Progress;
use crate::storage::reads::JobFilter;

/// The dead letter.
pub(crate) trait DeadLetterStore {
    /// Creates a new job from dead job `id` (same type, payload and options, due now) and marks
    /// the dead one with who requeued it, when, why and the new id. Returns the new id.
    fn requeue_dead(&self, id: i64, by: &str, reason: &str, now: i64) -> Result<i64>;

    /// Deletes a dead job and its attempt history; the newest job of the table (which keeps
    /// ids from being reused) becomes `cancelled` instead.
    fn discard_dead(&self, id: i64, now: i64) -> Result<Discarded>;

    /// Dead jobs awaiting a person (not requeued), newest first, up to the filter's limit.
    fn dead_awaiting(&self, filter: &JobFilter) -> Result<Vec<JobRecord>>;

    /// Requeues every dead job (not yet requeued) the filter's type, queue, search text and
    /// error group narrow to (its page and limit are ignored), oldest first, inside the
    /// caller's transaction: one refusal fails them all. `on_progress` hears after each job
    /// how many of how many are requeued.
    fn requeue_dead_matching(
        &self,
        filter: &JobFilter,
        by: &str,
        reason: &str,
        now: i64,
        on_progress: &mut dyn FnMut(Progress),
    ) -> Result<Vec<(i64, i64)>>;
}
