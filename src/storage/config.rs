//! How a [`Db`](super::Db) is opened: the settings both backends read, each taking the ones
//! that apply to it.

use std::time::Duration;

/// How hard SQLite flushes to disk at commit (`PRAGMA synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// `NORMAL`: in WAL mode a commit is durable against a process crash; a power loss may
    /// lose the last commits, never corrupt the file. The default.
    #[default]
    Normal,
    /// `FULL`: every commit is flushed; durable against power loss, slower.
    Full,
}

/// Connection settings shared by every pooled connection.
#[derive(Debug, Clone)]
pub(crate) struct DbConfig {
    /// SQLite's flush at commit; a server ignores it (its own settings decide).
    pub(crate) synchronous: Synchronous,
    /// How long a write waits for another writer (SQLite's busy timeout, PostgreSQL's
    /// `lock_timeout`) before it fails as busy.
    pub(crate) busy_timeout: Duration,
    pub(crate) pool_size: u32,
    /// Whether opening may create the database (the file, or the schema on a server) or add
    /// the schema to a database without it.
    pub(crate) create: bool,
    /// The PostgreSQL schema litejobs' tables live in (`None`: `litejobs`); SQLite ignores it.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) pg_schema: Option<String>,
    /// What PostgreSQL connections call themselves (`None`: `litejobs`); SQLite ignores it.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) application_name: Option<String>,
}
