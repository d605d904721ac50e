//! The reaper: running jobs whose lease expired (their worker crashed or hung, in any
//! process) become due again, or dead when their attempts are spent. It runs at worker
//! start-up and then every interval; its SQL only touches expired leases, so several
//! processes may reap at once.

use std::time::Duration;

/// How often a worker reaps unless configured otherwise.
pub const DEFAULT_REAP_INTERVAL: Duration = Duration::from_secs(15);

impl crate::Queue {
    /// Makes running jobs whose lease expired due again (or dead when their attempts are
    /// spent), as workers do at start-up and periodically. Returns how many were reaped.
    pub fn reap_expired_leases(&self) -> crate::Result<usize> {
        let now = self.now_ms();
        let reaped = self.db().write(|tx| reap(tx, now))?;
        if reaped > 0 {
            self.notify();
        }
        Ok(reaped)
    }
}

/// Reaps the expired leases in `tx`. A job reaped with its attempts spent is dead: the jobs
/// waiting for it are settled in this same transaction, as when any other end is written.
pub(crate) fn reap(tx: &dyn crate::storage::Tx, now: i64) -> crate::Result<usize> {
    let reaped = tx.reap_expired(now)?;
    if reaped > 0 {
        tx.settle_stragglers(usize::MAX, now)?;
    }
    Ok(reaped)
}
