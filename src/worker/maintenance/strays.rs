//! The stray sweep: live rows that neither the claim nor the reaper can ever take (see
//! `storage/strays.rs`) are made dead with an error naming the job and the column. Every
//! worker sweeps at its first quiet moment and then hourly (see `chores.rs`); finding them
//! reads the whole jobs table, in a snapshot that holds no lock, and only the rows found are
//! written.

use std::time::Duration;

use crate::error::Result;
use crate::storage::jobs::Refused;

/// How often a worker sweeps after its start.
pub(crate) const STRAY_SWEEP_INTERVAL: Duration = Duration::from_secs(3600);

/// The most stray rows one sweep ends; the next sweep takes the rest.
const STRAYS_PER_SWEEP: usize = 1000;

impl crate::Queue {
    /// Makes stray rows dead; the rows it ended.
    pub(crate) fn refuse_strays(&self) -> Result<Vec<Refused>> {
        let ids = self.db().read(|tx| tx.find_strays(STRAYS_PER_SWEEP))?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now_ms();
        let refused = self.db().write(|tx| tx.refuse_strays(&ids, now))?;
        for r in &refused {
            log::warn!("litejobs: {}", r.error);
            self.events().refused(r);
        }
        Ok(refused)
    }
}
