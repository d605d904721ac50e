//! New jobs into the `jobs` table, one or a batch, and the idempotency keys that make an
//! insert happen once per key (held by a live or succeeded job, or remembered after it).

use crate::error::{Error, Result};
use crate::job::NewJob;

/// The outcome of an insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inserted {
    pub(crate) id: i64,
    /// False when an idempotency key matched an existing job and nothing was inserted.
    pub(crate) created: bool,
    /// The job went in held, its `waiting_for` counting each job it asked to wait for
    /// ([`NewJob::after`](crate::NewJob::after)) as pending, so that adding those waits
    /// writes the row again only for a wait that has already ended.
    pub(crate) held: bool,
}

impl Inserted {
    /// A job the insert created, `held` or not.
    pub(crate) fn created(id: i64, held: bool) -> Inserted {
        Inserted {
            id,
            created: true,
            held,
        }
    }

    /// The job holding the idempotency key: nothing was inserted.
    pub(crate) fn found(id: i64) -> Inserted {
        Inserted {
            id,
            created: false,
            held: false,
        }
    }
}

/// From this many jobs without keys, a batch is inserted with the schema's CHECK rules
/// off where the backend allows (SQLite): they guard rows from other programs, and a job
/// litejobs inserts has passed the same rules in code already ([`crate::job::validate`],
/// [`crate::job::RunAt::resolve`]; a test holds every validated row to the rules). Measured,
/// the rules cost 15 % of a batch.
pub(crate) const VALIDATED_FROM_ROWS: usize = 128;

/// True when `jobs` is a batch big enough to skip the schema's rules
/// ([`VALIDATED_FROM_ROWS`] jobs without an idempotency key or more).
pub(crate) fn skips_the_rules(jobs: &[NewJob]) -> bool {
    let keyless = jobs
        .iter()
        .filter(|job| job.idempotency_key.is_none())
        .count();
    keyless >= VALIDATED_FROM_ROWS
}

/// A batch statement's error, naming the jobs it held (`first` is the index in the batch of
/// `chunk[0]`): the database does not say which of its rows broke a rule.
pub(crate) fn batch_error(e: Error, chunk: &[NewJob], first: usize) -> Error {
    let mut types: Vec<&str> = chunk.iter().map(|job| job.job_type.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    e.prefixed(&format!(
        "jobs {first} to {} of the batch (types {})",
        first + chunk.len().max(1) - 1,
        types.join(", ")
    ))
}

/// Inserts and idempotency keys, each in the caller's transaction.
pub(crate) trait InsertStore {
    /// Inserts one validated job (`payload` is its JSON text). A held or remembered
    /// idempotency key returns the holder's id instead, inserting nothing.
    fn insert_job(&self, job: &NewJob, payload: &str, now: i64) -> Result<Inserted>;

    /// [`InsertStore::insert_job`], then the waits the new job asks for by id
    /// ([`NewJob::after`]). Run without a transaction around it
    /// ([`Db::write_statements`](crate::storage::Db::write_statements)), a job without an
    /// idempotency key goes in by one statement where the backend can (PostgreSQL: its
    /// triggers hold it or settle its waits); a job with a key needs a transaction.
    fn insert_job_and_waits(&self, job: &NewJob, payload: &str, now: i64) -> Result<Inserted>;

    /// Inserts many validated jobs (`payloads[i]` is `jobs[i]`'s JSON text), in order.
    /// On SQLite, a batch that [`skips_the_rules`] goes in with the schema's CHECK rules off.
    fn insert_jobs(&self, jobs: &[NewJob], payloads: &[String], now: i64) -> Result<Vec<Inserted>>;

    /// Remembers a succeeded job's idempotency key for the window, so that the key keeps
    /// refusing a second job after the first is pruned.
    fn remember_key(&self, key: &str, job_id: i64, now: i64, window_ms: i64) -> Result<()>;

    /// True when `key` is remembered as completed (not expired).
    fn key_remembered(&self, key: &str, now: i64) -> Result<bool>;
}
