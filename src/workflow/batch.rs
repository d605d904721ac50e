//! Batches: a set of jobs with callback jobs that run once every job of the set has ended.

use crate::job::NewJob;

/// A batch to open with [`Queue::open_batch`](crate::Queue::open_batch) (then
/// [`add_to_batch`](crate::Queue::add_to_batch) and
/// [`close_batch`](crate::Queue::close_batch)) or to submit whole with
/// [`Queue::submit_batch`](crate::Queue::submit_batch).
///
/// Its callbacks are ordinary jobs, inserted when the batch opens and held until it is
/// closed and every job in it has ended, so each is enqueued exactly once however many
/// workers and crashes there are (and then runs like any job: at least once). The
/// `on_success` callback runs when every job succeeded; it is cancelled when one ends dead
/// or cancelled (and comes back if that one is requeued and then succeeds). The
/// `on_complete` callback runs whatever the outcomes. A callback's handler reads the counts
/// and the members' ids with [`JobContext::batch`](crate::JobContext::batch).
///
/// ```
/// use litejobs::{Batch, NewJob, Queue};
/// use serde_json::json;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let queue = Queue::open_in_memory()?;
/// let batch = Batch::new("invoices 2026-12")
///     .on_complete(NewJob::new("tell_finance", json!({"run": "2026-12"})));
/// let invoices = (1..=3)
///     .map(|n| NewJob::new("send_invoice", json!({"invoice": n})))
///     .collect();
/// let ids = queue.submit_batch(batch, invoices)?;
/// assert_eq!(ids.members.len(), 3);
/// let callback = queue.job(ids.on_complete.expect("asked for"))?.expect("the job");
/// assert_eq!(callback.waiting_for, 3); // one per invoice not yet ended
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Batch {
    pub(crate) name: String,
    pub(crate) on_success: Option<NewJob>,
    pub(crate) on_complete: Option<NewJob>,
}

impl Batch {
    /// A batch without callbacks yet; `name` is for people.
    pub fn new(name: impl Into<String>) -> Batch {
        Batch {
            name: name.into(),
            on_success: None,
            on_complete: None,
        }
    }

    /// The job to run once every job of the batch has succeeded.
    pub fn on_success(mut self, job: NewJob) -> Batch {
        self.on_success = Some(job);
        self
    }

    /// The job to run once every job of the batch has ended, however.
    pub fn on_complete(mut self, job: NewJob) -> Batch {
        self.on_complete = Some(job);
        self
    }
}

/// The ids of a batch and its callbacks (and of the jobs added with it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchIds {
    /// The batch (a [`Queue::workflow`](crate::Queue::workflow) id).
    pub batch_id: i64,
    /// The `on_success` callback's job.
    pub on_success: Option<i64>,
    /// The `on_complete` callback's job.
    pub on_complete: Option<i64>,
    /// The jobs added with it ([`Queue::submit_batch`](crate::Queue::submit_batch)), in
    /// order.
    pub members: Vec<i64>,
}

/// What a batch callback reads of its batch ([`JobContext::batch`](crate::JobContext::batch)):
/// how its jobs ended, and their ids.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchSummary {
    /// The batch.
    pub batch_id: i64,
    /// Its name.
    pub name: String,
    /// Jobs that succeeded.
    pub succeeded: usize,
    /// Jobs that ended dead (a dead job that was requeued counts as its new job).
    pub dead: usize,
    /// Jobs that were cancelled.
    pub cancelled: usize,
    /// Every job of the batch (not its callbacks), in id order; a dead job that was
    /// requeued is replaced by its new job.
    pub members: Vec<i64>,
}
