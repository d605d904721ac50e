//! Dead jobs waiting for a person: list, requeue as new jobs (one, or by type, error text
//! and error group), discard.

use crate::error::Result;
use crate::job::Discarded;
use crate::job::JobRecord;
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

    /// The ids of every dead job (not yet requeued) the filter's type, queue, search text,
    /// error group and page narrow to (its limit is ignored), oldest first, locked for the
    /// caller's transaction where another writer could requeue them meanwhile: what a bulk
    /// requeue takes.
    fn dead_ids_matching(&self, filter: &JobFilter) -> Result<Vec<i64>>;
}
