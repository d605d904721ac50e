//! How far a long operation has got: retention ([`Queue::prune_with_progress`]), key
//! rotation ([`Queue::rotate_keys_with_progress`]), a bulk requeue
//! ([`Queue::requeue_dead_where_with_progress`]) and, with the `postgres` feature, a copy
//! into PostgreSQL (`copy_sqlite_to_postgres_with_progress`) call a function of yours with
//! a [`Progress`] after each chunk, say to draw a progress bar (`litejobs` draws one on a
//! terminal). Each has a plain form without it.
//!
//! [`Queue::prune_with_progress`]: crate::Queue::prune_with_progress
//! [`Queue::rotate_keys_with_progress`]: crate::Queue::rotate_keys_with_progress
//! [`Queue::requeue_dead_where_with_progress`]: crate::Queue::requeue_dead_where_with_progress

/// Units done so far (jobs deleted, rows looked at, jobs requeued, rows copied: each
/// operation says which), and the total when it is known beforehand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// Units done so far.
    pub done: u64,
    /// How many there are in all, when known beforehand.
    pub total: Option<u64>,
}

impl Progress {
    /// `done` of `total`.
    pub(crate) fn of(done: u64, total: Option<u64>) -> Progress {
        Progress { done, total }
    }
}

/// A function that ignores progress, for the plain forms.
pub(crate) fn ignore(_: Progress) {}
