//! litejobs on PostgreSQL (feature `postgres`), against the server named by
//! `LITEJOBS_TEST_PG`; each test in a schema of its own (tests/support/pg.rs).

// AdminStore and DeadLetterStore: cancel, retry now, pause, requeue and discard dead jobs
mod admin_dead_letter;
// `litejobs copy-to`: a SQLite file moved into PostgreSQL
#[cfg(feature = "cli")]
mod copy;
// jobs that wait for others: the job_deps and jobs triggers, by plain SQL and the worker
mod deps;
// several hosts, simulated: four worker processes on one schema, SIGKILL at random, restarts
mod hosts;
// Queue::enqueue_in_pg: the caller's own transaction
mod enqueue_in;
// the CLI and the dashboard while the server is down; two-host URLs; connection names
#[cfg(feature = "cli")]
mod down;
// a worker when its server restarts, stops, kills its backends or runs out of slots
mod outages;
// JobStore: insert, idempotency keys, claim with SKIP LOCKED, group keys, fenced writes, reaper
mod jobs;
// LimitStore and PeriodicStore: rate limits, breakers, periodic slots
mod limits_periodic;
// plain SQL from a `psql -X` session: the documented inserts, updates and deletes, on every way to make the schema
mod plain_sql;
// ReadStore and RetentionStore: job, attempts, lists, counts, health, errors, pruning
mod reads;
// ReportStore and WebhookStore: report runs and chunks, webhook endpoints
mod reports_webhooks;
// schema.pg.sql against the migrations, refusals, URLs
mod schema;
