//! [`StrayStore`] on PostgreSQL: nothing to find. Its columns are typed and its CHECK rules
//! hold for every writer (no connection can switch them off), so no row can hold a status
//! outside the six words or a time that is not a number.

use super::PgTx;
use crate::error::Result;
use crate::storage::jobs::Refused;
use crate::storage::strays::StrayStore;

impl StrayStore for PgTx<'_> {
    fn find_strays(&self, _limit: usize) -> Result<Vec<i64>> {
        Ok(Vec::new())
    }

    fn refuse_strays(&self, _ids: &[i64], _now: i64) -> Result<Vec<Refused>> {
        Ok(Vec::new())
    }
}
