//! The reaper's write: running jobs whose worker died or hung, found by their expired lease.

use crate::error::Result;

/// Reaping, in the caller's transaction.
pub(crate) trait ReapStore {
    /// Reaps running jobs whose lease expired before `now`, or that have none (a row another
    /// program inserted as `running`): each gets a `lost` attempt, then is due at once, or
    /// dead when its attempts are spent (a job that kills its worker every time must not
    /// crash-loop). Never touches a live lease. Returns the count.
    fn reap_expired(&self, now: i64) -> Result<usize>;
}
