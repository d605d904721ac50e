mod enqueue; // enqueue, batch, transactional enqueue, validation, idempotency, busy, events
mod examples; // runs the examples and checks what they print
mod read_side; // list filters and pagination, stats, Queue trait bounds
mod schema; // schema.sql contract, refusals, migration, WAL, R27 defaults
mod support; // shared fixtures: temp database, ManualClock queue, raw connections
