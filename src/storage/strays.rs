//! Stray rows: live rows that neither the claim nor the reaper can ever take, because a
//! program wrote a value no rule of litejobs' own writes produces (with the file's CHECK
//! rules switched off): a status that is not one of the six words, a waiting job whose
//! `run_at` is not a number (text sorts after every number, so it is never due), a running
//! job whose `locked_until` is not a number (its lease never expires). Left alone, such a
//! job would wait forever while views call it something it is not; a worker's sweep makes
//! it dead with an error naming the job and the column, as the claim does for the rows it
//! can see. [`StrayStore`] is the interface.

use crate::error::Result;
use crate::storage::jobs::Refused;

/// Finding and ending stray rows.
pub(crate) trait StrayStore {
    /// Up to `limit` ids of stray rows, oldest first. Reads every row of the jobs table
    /// where the database lets such rows in: meant for a snapshot outside any write
    /// transaction, now and then (a worker's start, then hourly).
    fn find_strays(&self, limit: usize) -> Result<Vec<i64>>;

    /// Makes those of `ids` that are still stray dead, with an error naming the job, the
    /// column and what it held, and `dead without running`.
    fn refuse_strays(&self, ids: &[i64], now: i64) -> Result<Vec<Refused>>;
}
