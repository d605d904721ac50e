//! Jobs as the runtime writes them, one concern per file: [`insert`] (with idempotency
//! keys), [`claim`] under a lease, the [`row_rules`] a claimed row must meet, the writes
//! fenced by the lease ([`complete`]: heartbeat, success, failure, snooze or release,
//! cancel, the attempt history), [`reap`]ing expired leases, ending jobs by their
//! deadline ([`expire`]), and the waits between jobs ([`deps`]).
//!
//! Each concern is a trait of its own, implemented by each backend in a file of the same
//! name (`sqlite/jobs/claim.rs`, `postgres/jobs/claim.rs`, …), where its SQL is: a backend's
//! file holds its whole side of one concern, and no method forwards to another. What both
//! backends share (the claim order, the claimed-row rules, the batch size from which a batch
//! skips the schema's rules) is written once here. [`JobStore`] is all of them together.

pub(crate) mod claim;
pub(crate) mod complete;
pub(crate) mod deps;
pub(crate) mod expire;
pub(crate) mod insert;
pub(crate) mod reap;
pub(crate) mod row_rules;

pub(crate) use claim::{ClaimRequest, ClaimStore, Claimed, ClaimedRow, Refused, Waiting};
pub(crate) use complete::{AfterFailure, AttemptRow, CompleteStore, Lease, Success};
pub(crate) use deps::{DependencyStore, Edge, Settled};
pub(crate) use expire::{ExpireStore, Expired, ExpiredAttempt, HeldRows};
pub(crate) use insert::{batch_error, InsertStore, Inserted};
pub(crate) use reap::ReapStore;

/// The writes of a job's life, each in the caller's transaction: every concern's store.
///
/// Every write for a running job takes the [`Lease`] it was claimed under and changes
/// nothing (returning false) unless the job is still `running` under that worker and that
/// attempt: a late result of an attempt that timed out, was reaped or was released can
/// never overwrite a newer one.
pub(crate) trait JobStore:
    InsertStore + ClaimStore + CompleteStore + ReapStore + ExpireStore + DependencyStore
{
}

impl<
        T: InsertStore
            + ClaimStore
            + CompleteStore
            + ReapStore
            + ExpireStore
            + DependencyStore
            + ?Sized,
    > JobStore for T
{
}
