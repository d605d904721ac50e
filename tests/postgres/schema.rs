//! The PostgreSQL schema: created by the migrations on first open, equal to `schema.pg.sql`,
//! a newer or foreign schema refused and left untouched, and the URL forms.

use diesel::connection::SimpleConnection;
use diesel::sql_types::{BigInt, Text};
use diesel::{sql_query, QueryableByName, RunQueryDsl};
use litejobs::{ErrorKind, ManualClock, Queue};

use crate::support::pg::{server, PgSchema};
use crate::support::START_MS;

#[derive(QueryableByName, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Line {
    #[diesel(sql_type = Text)]
    line: String,
}

/// What the catalog says of a schema: columns with types, defaults and nullability,
/// constraints, indexes, triggers and functions (with their settings), each as one sorted
/// line.
fn catalog(schema: &PgSchema) -> Vec<String> {
    let mut conn = schema.raw();
    let q = format!(
        "SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' \
                || is_nullable || ' ' || coalesce(column_default, '-') || ' ' || is_identity AS line
           FROM information_schema.columns WHERE table_schema = '{s}'
         UNION ALL
         SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' \
                || pg_get_constraintdef(oid)
           FROM pg_constraint WHERE connamespace = '{s}'::regnamespace
         UNION ALL
         SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = '{s}'
         UNION ALL
         SELECT 'trigger ' || pg_get_triggerdef(t.oid)
           FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
          WHERE c.relnamespace = '{s}'::regnamespace AND NOT t.tgisinternal
         UNION ALL
         SELECT 'function ' || p.proname || ' ' || md5(p.prosrc) || ' ' \
                || coalesce(array_to_string(p.proconfig, ' '), '-')
           FROM pg_proc p WHERE p.pronamespace = '{s}'::regnamespace",
        s = schema.name
    );
    let mut lines: Vec<Line> = sql_query(q).load(&mut conn).expect("reading the catalog");
    lines.sort();
    lines
        .into_iter()
        .map(|l| l.line.replace(&schema.name, "SCHEMA"))
        .collect()
}

#[test]
fn schema_pg_sql_equals_what_the_migrations_build() {
    let Some(url) = server() else { return };
    let migrated = PgSchema::new(&url);
    let _queue = migrated.queue(&ManualClock::new(START_MS));
    let by_hand = PgSchema::new(&url);
    let mut conn = by_hand.raw();
    conn.batch_execute(&format!(
        "CREATE SCHEMA \"{0}\"; SET search_path TO \"{0}\";",
        by_hand.name
    ))
    .expect("creating the schema");
    conn.batch_execute(include_str!("../../schema.pg.sql"))
        .expect("schema.pg.sql applies to an empty schema");
    let (a, b) = (catalog(&migrated), catalog(&by_hand));
    assert!(a.len() > 100, "the catalog query found the schema: {a:?}");
    let only_migrated: Vec<_> = a.iter().filter(|l| !b.contains(l)).collect();
    let only_by_hand: Vec<_> = b.iter().filter(|l| !a.contains(l)).collect();
    assert!(
        only_migrated.is_empty() && only_by_hand.is_empty(),
        "schema.pg.sql differs from the migrations:\nonly migrated: {only_migrated:#?}\nonly schema.pg.sql: {only_by_hand:#?}"
    );
    // A queue opens the schema made from schema.pg.sql as current.
    Queue::builder()
        .pg_schema(&by_hand.name)
        .open(&url)
        .expect("a schema made from schema.pg.sql opens");
}

#[derive(QueryableByName)]
struct Version {
    #[diesel(sql_type = BigInt)]
    version: i64,
}

#[test]
fn a_newer_schema_is_refused_and_left_unchanged() {
    let Some(url) = server() else { return };
    let schema = PgSchema::new(&url);
    drop(schema.queue(&ManualClock::new(START_MS)));
    let mut conn = schema.raw();
    conn.batch_execute("UPDATE schema_version SET version = 999")
        .expect("bumping the version");
    let err = Queue::builder()
        .pg_schema(&schema.name)
        .open(&url)
        .expect_err("a newer schema is refused");
    assert_eq!(err.kind(), ErrorKind::NewerSchema, "{err}");
    assert!(err.to_string().contains("999"), "{err}");
    let v: Vec<Version> = sql_query("SELECT version FROM schema_version")
        .load(&mut conn)
        .expect("reading the version");
    assert_eq!(v.iter().map(|v| v.version).collect::<Vec<_>>(), vec![999]);
}

#[test]
fn another_programs_jobs_table_is_refused() {
    let Some(url) = server() else { return };
    let schema = PgSchema::new(&url);
    let mut conn = PgSchema::raw(&schema);
    conn.batch_execute(&format!(
        "CREATE SCHEMA \"{0}\"; CREATE TABLE \"{0}\".jobs (id int, name text);",
        schema.name
    ))
    .expect("another program's table");
    let err = Queue::builder()
        .pg_schema(&schema.name)
        .open(&url)
        .expect_err("a foreign jobs table is refused");
    assert_eq!(err.kind(), ErrorKind::ForeignDatabase, "{err}");
    let tables: Vec<Line> = sql_query(format!(
        "SELECT table_name AS line FROM information_schema.tables WHERE table_schema = '{}'",
        schema.name
    ))
    .load(&mut conn)
    .expect("listing tables");
    assert_eq!(
        tables,
        vec![Line {
            line: "jobs".into()
        }],
        "nothing was added"
    );
}

#[test]
fn bad_schema_names_and_unreachable_servers_get_clear_errors() {
    let err = Queue::builder()
        .pg_schema("x; DROP TABLE jobs")
        .open("postgres://nobody@127.0.0.1:1/none")
        .expect_err("refused before connecting");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let err = Queue::open("postgresql://nobody:hunter2@127.0.0.1:1/none")
        .expect_err("no server on port 1");
    assert!(err.to_string().contains("cannot connect"), "{err}");
    assert!(
        !err.to_string().contains("hunter2"),
        "the password stays out: {err}"
    );
}

#[test]
fn read_only_open_of_a_missing_schema_creates_nothing() {
    let Some(url) = server() else { return };
    let schema = PgSchema::new(&url);
    let err = Queue::builder()
        .pg_schema(&schema.name)
        .open_read_only(&url)
        .expect_err("nothing to read");
    assert_eq!(err.kind(), ErrorKind::Uninitialized, "{err}");
    let err = Queue::builder()
        .pg_schema(&schema.name)
        .create(false)
        .open(&url)
        .expect_err("create(false) does not create");
    assert_eq!(err.kind(), ErrorKind::Uninitialized, "{err}");
}
