//! Periodic, idempotent services that many processes may run at once.

pub(crate) mod reaper;
