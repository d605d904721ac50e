//! Periodic, idempotent services that many processes may run at once.

pub(crate) mod pruner;
pub(crate) mod reaper;
pub(crate) mod scheduler;
