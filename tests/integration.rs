//! One integration-test binary (ripgrep's layout): each module is a part of litejobs, tested
//! against real database files, loopback servers and child processes.
//!
//! A module that needs a Cargo feature is compiled only with it (`#[cfg(feature = ...)]`
//! below), so `cargo test --no-default-features` tests the core alone.

// the web dashboard in headless Chromium: sign in, overview, dead job, requeue through the form, a workflow's graph, screenshots
#[cfg(feature = "web")]
mod browser;
// cancel: running jobs stopped in-process and from elsewhere, late outcomes fenced, jobs waiting in a worker skipped, bulk by type and text, --exec and --serve
mod cancel;
// the litejobs binary against real files: every command, exit codes, JSON fields, masking, prune, pause, work
#[cfg(feature = "cli")]
mod cli;
// SIGKILL at random moments: nothing lost, no run under a live lease twice
mod crash;
// worker runtime: dead jobs and requeue
mod dead_letter;
// deadlines: jobs not started by their expires_at end cancelled; retries, snoozes and reaped attempts after it; the API's checks
mod deadlines;
// worker runtime: testing::drain, ctx.once and remembered keys
mod drain;
// email against a loopback SMTP server: headers, 451 retried, 550 dead, bad addresses, no double send, dev mailer
#[cfg(feature = "email")]
mod email;
// the README and the guides in docs/: every relative link and anchor resolves, on GitHub and in rustdoc
mod docs;
// retention: a worker's scheduled prune deletes old finished jobs only
mod retention;
// encrypted payloads at rest: envelopes, keys, marked types, views, bad envelopes, rotation, bytes at rest
#[cfg(feature = "encryption")]
mod encryption;
// enqueue, batch, transactional enqueue, validation, idempotency, busy, events
mod enqueue;
// errors that group: one failure is one group however each job's text differs; lists and bulk requeues by group
mod error_groups;
// runs the examples and checks what they print
mod examples;
// command handlers with real child processes: exit codes, environment, timeouts that stop a process tree, Serve workers that crash or hang
#[cfg(all(unix, feature = "exec"))]
mod exec;
// injected faults: a storm of long write locks, a full disk, a poison pill that aborts its worker
mod faults;
// rows from outside: CHECK rules at the door, bad rows dead at the claim, safe readers, migration 4, read-only opens
mod foreign_rows;
// deadlines for rows from other languages: the guide's plain-SQL insert with expires_at, from Python's sqlite3
mod foreign_expiry;
// waits for rows from other languages: the guide's plain-SQL job_deps, workflow and batch inserts, from Python's sqlite3 and in SQLite 3.31
mod foreign_deps;
// dedupe for rows from other languages: the README's plain-SQL insert once per key, remembered keys, the partial index's conflict target
mod foreign_dedupe;
// "no panic on any input" (proptest): payloads and job options, webhook signatures, Retry-After, the CLI
mod fuzz;
// rate limits and circuit breakers by key, shared through the database
mod limits;
// the source's layout: no import cycle between modules (the crate's top-level ones, and each directory's files)
mod layout;
// model-based test (proptest): random operation sequences against an in-memory model, state-machine invariants
mod model;
// two worker processes on one file; another process hammering the lock
mod multiprocess;
// PostgreSQL (feature `postgres`, a server from LITEJOBS_TEST_PG): schema and migrations, each store, several hosts
#[cfg(feature = "postgres")]
mod postgres;
// worker runtime: priority, group keys, queue isolation, wake-up and polling
mod ordering;
// worker runtime: attempt outcomes, panics, invalid rows, unknown types
mod outcomes;
// periodic jobs: cron and interval slots, once per slot with two schedulers, one run after downtime
mod periodic;
// what a job said while it ran, kept with each attempt: handler lines, captured log records, bounded, deleted with the job
mod job_logs;
// progress of retention, bulk requeues and key rotation, for the command line's bars
mod progress;
// list filters and pagination, stats, Queue trait bounds
mod read_side;
// reports in chunks: fan-out, progress, finisher once (race), dead chunk, CSV with retries, time limit
mod report;
// worker runtime: retry policies, default backoff, per-type schedules, jitter
mod retry;
// periodic jobs kept in the database: run once per slot by the schedulers that run them, replaced, removed, from plain SQL, picked up by a running worker
mod schedules;
// schema.sql contract, refusals, migration, WAL, the documented defaults
mod schema;
// a fixed envelope by plain SQL, read by any build: decrypted with the key, refused or dead without it
mod sealed_rows;
// worker runtime: graceful shutdown, reaper, busy database
mod shutdown;
// soak (ignored; scripts/soak.sh): a million jobs, worker processes killed with SIGKILL at random
mod soak;
// shared fixtures: temp database, ManualClock queue, raw connections
mod support;
// worker runtime: timeouts, deadlines, heartbeats and leases
mod timeouts;
// typed jobs: Job defaults at enqueue, register::<T>() and the closure form, per-type options, payloads that no longer fit
mod typed;
// what a waiting worker costs: wake-ups and write rounds bounded while nothing is due
mod wakeups;
// the web dashboard over HTTP: every route, filters, actions, CSRF, tokens, escaping, read-only, `litejobs web`
#[cfg(feature = "web")]
mod web;
// webhook delivery against a loopback HTTP server: signatures, retries, breaker, SSRF guard, sidecar
#[cfg(feature = "webhook")]
mod webhook;
// the workers registry: a worker's row, its running jobs, its stop; rows of dead workers read as gone, then go
mod workers;
// jobs that wait for other jobs: workflows, batches, cascades, requeues, steps added at run time
mod workflows;
// SIGKILL while thousands of chunks release a fan-in step: it runs exactly once, after all of them
mod workflow_crash;
// model-based test of waits (seeded): random DAGs, batches, outcomes, crashes and a person's actions against an in-memory model
mod workflow_model;
