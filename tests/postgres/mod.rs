//! litejobs on PostgreSQL (feature `postgres`), against the server named by
//! `LITEJOBS_TEST_PG`; each test in a schema of its own (tests/support/pg.rs).

mod schema;
