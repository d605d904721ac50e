//! The job stores of [`crate::storage::jobs`] on PostgreSQL, one concern per file, each a
//! trait implemented on [`PgTx`](super::PgTx) where its SQL is: [`insert`] (with idempotency
//! keys), [`claim`], the claimed-row rules' reading of a claimed row ([`row_rules`]), the
//! lease-fenced writes ([`complete`]), the reaper ([`reap`]), deadlines ([`expire`]) and
//! the waits between jobs ([`deps`], mostly the schema's triggers).
//!
//! Unlike SQLite, many processes write at once (READ COMMITTED), so each read-then-write is
//! one statement or guarded by a unique index: an idempotency key by
//! `INSERT … ON CONFLICT` on `jobs_idempotency_key_idx`; a claim locks its rows
//! `FOR UPDATE SKIP LOCKED` and takes at most one job per group key, with
//! `jobs_group_key_running_idx` as the last word; every fenced write is one `UPDATE` whose
//! `WHERE` is the lease; the reaper locks the expired rows and writes their `lost` attempts
//! in the same statement. The finished-job and attempt counts are kept by the schema's
//! triggers, never here.

mod claim;
mod complete;
mod deps;
mod expire;
mod insert;
mod reap;
mod row_rules;

/// The largest `bigint`, for sums that must not overflow (a lease of a huge timeout).
const BIGINT_MAX: &str = "9223372036854775807";
