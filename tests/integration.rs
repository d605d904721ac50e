mod crash; // SIGKILL at random moments: nothing lost, no run under a live lease twice
mod enqueue; // enqueue, batch, transactional enqueue, validation, idempotency, busy, events
mod examples; // runs the examples and checks what they print
mod multiprocess; // two worker processes on one file; another process hammering the lock
mod ordering; // worker runtime: priority, group keys (R13), queue isolation (R14), wake-up and polling
mod outcomes; // worker runtime: attempt outcomes (R5), panics, invalid rows, unknown types
mod read_side; // list filters and pagination, stats, Queue trait bounds
mod retry; // worker runtime: retry policies (R6), default backoff, per-type schedules, jitter
mod schema; // schema.sql contract, refusals, migration, WAL, R27 defaults
mod shutdown; // worker runtime: graceful shutdown (R10), reaper (R9), busy database (R11)
mod support; // shared fixtures: temp database, ManualClock queue, raw connections
mod timeouts; // worker runtime: timeouts (R7), deadlines, heartbeats and leases
mod dead_letter; // worker runtime: dead jobs and requeue (R8)
mod drain; // worker runtime: testing::drain (R26), ctx.once and remembered keys (R12)
