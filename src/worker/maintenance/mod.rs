//! Periodic, idempotent services that many processes may run at once: retention
//! ([`Pruner`], [`Queue::prune`](crate::Queue::prune)), periodic jobs ([`Scheduler`],
//! [`Periodic`]), the reaper that every worker runs
//! ([`Queue::reap_expired_leases`](crate::Queue::reap_expired_leases)), and the sweep of stray
//! rows (live rows another program wrote that no claim can take) that every worker runs when
//! it is first quiet, then hourly; the expiry sweep
//! ([`Queue::cancel_expired`](crate::Queue::cancel_expired)) that every worker runs on the
//! reaper's schedule; and each worker's row in the workers registry
//! ([`Queue::workers`](crate::Queue::workers)), written on the same schedule.

pub(crate) mod chores;
pub(crate) mod every;
pub(crate) mod expiry;
pub(crate) mod periodic;
pub(crate) mod presence;
pub(crate) mod pruner;
pub(crate) mod reaper;
pub(crate) mod scheduler;
pub(crate) mod stored;
pub(crate) mod strays;
pub(crate) mod waits;

pub use periodic::Periodic;
pub use pruner::{CheckpointMode, CheckpointReport, PruneOptions, PruneReport, Pruner};
pub use scheduler::{EnqueuedSlot, Scheduler, TickReport};
pub use stored::{ScheduleState, StoredJob};
