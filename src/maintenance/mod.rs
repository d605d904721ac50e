//! Periodic, idempotent services that many processes may run at once: retention
//! ([`Pruner`], [`Queue::prune`](crate::Queue::prune)), periodic jobs ([`Scheduler`],
//! [`Periodic`]), and the reaper that every worker runs
//! ([`Queue::reap_expired_leases`](crate::Queue::reap_expired_leases)).

pub(crate) mod pruner;
pub(crate) mod reaper;
pub(crate) mod scheduler;

pub use pruner::{CheckpointMode, CheckpointReport, PruneOptions, PruneReport, Pruner};
pub use scheduler::{EnqueuedSlot, Periodic, ScheduleState, Scheduler, TickReport};
