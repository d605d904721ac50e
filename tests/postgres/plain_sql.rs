//! Plain SQL from other languages, run as their users run it: `psql -X` (no settings, no
//! search path of ours) with the statements copied from `schema.pg.sql`'s header, on a schema
//! made by the migrations, by hand from `schema.pg.sql`, and migrated from version 1.

use std::process::Command;

use diesel::connection::SimpleConnection;
use litejobs::{testing, Clock, JobContext, JobStatus, ManualClock, Queue, SystemClock, Worker};

use crate::support::pg::{server, PgSchema};

/// The statements `schema.pg.sql`'s header shows (indented comment lines, joined up to each
/// `;`), with `litejobs.` pointed at the test's schema.
pub(super) fn header_statements(schema: &str) -> Vec<String> {
    let header = include_str!("../../schema.pg.sql")
        .lines()
        .take_while(|l| l.starts_with("--"));
    let mut statements = Vec::new();
    let mut current = String::new();
    for line in header {
        let Some(code) = line.strip_prefix("--     ") else {
            continue;
        };
        // A comment after the code (`…;   -- then this file`) is not part of it.
        let code = code.split_once("   --").map_or(code, |(code, _)| code);
        current.push_str(code.trim());
        current.push(' ');
        if code.trim_end().ends_with(';') {
            statements.push(std::mem::take(&mut current));
        }
    }
    statements
        .into_iter()
        .map(|s| s.trim_end().replace("litejobs.", &format!("\"{schema}\".")))
        .collect()
}

/// The header's two lone job inserts (not those of its transaction with waits).
fn documented_statements(schema: &str) -> Vec<String> {
    let mut in_transaction = false;
    let inserts: Vec<String> = header_statements(schema)
        .into_iter()
        .filter(|s| {
            match s.as_str() {
                "BEGIN;" => in_transaction = true,
                "COMMIT;" => in_transaction = false,
                _ => {}
            }
            !in_transaction && s.starts_with(&format!("INSERT INTO \"{schema}\".jobs"))
        })
        .collect();
    assert_eq!(inserts.len(), 2, "the header's two inserts: {inserts:?}");
    inserts
}

/// `psql -X` on the test server: no psqlrc, no PGOPTIONS, stops at the first error.
/// `None` (skip) when psql is not installed, except under CI.
pub(super) fn psql(url: &str, args: &[&str]) -> Option<Result<String, String>> {
    let mut cmd = Command::new("psql");
    cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url])
        .args(args)
        .env_remove("PGOPTIONS")
        .env_remove("PGDATABASE");
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) => {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "CI=true but psql cannot run: {e}"
            );
            eprintln!("skipped: psql cannot run ({e})");
            return None;
        }
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Some(if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(text(&out.stderr))
    })
}

/// Runs `sql` in a fresh `psql -X` session and panics with psql's error if it fails.
pub(super) fn run_psql(url: &str, sql: &str) -> Option<String> {
    psql(url, &["-c", sql]).map(|r| r.unwrap_or_else(|e| panic!("psql -X -c {sql:?}: {e}")))
}

/// Everything a program in another language does by plain SQL in fresh sessions, checked
/// through the queue: the header's inserts (the keyed one twice), an update, and a delete of
/// a finished job, whose count in `stats` goes with it.
fn plain_sql_works(url: &str, schema: &str) -> Option<()> {
    let [plain, keyed] = <[String; 2]>::try_from(documented_statements(schema)).ok()?;
    run_psql(url, &plain)?;
    run_psql(url, &keyed)?;
    run_psql(url, &keyed)?;
    run_psql(
        url,
        &format!("UPDATE \"{schema}\".jobs SET priority = 5 WHERE job_type = 'send_email'"),
    )?;

    let queue = Queue::builder()
        .pg_schema(schema)
        .open(url)
        .expect("the queue opens the schema");
    let builder = Worker::builder(&queue)
        .handler("deliver_webhook", |_: &JobContext| Ok(()))
        .handler("send_email", |ctx: &JobContext| {
            assert_eq!(ctx.payload()["to"], "a@example.com");
            Ok(())
        });
    let report = testing::drain(&builder).expect("drain");
    assert_eq!(
        report.succeeded, 2,
        "one job per insert, the keyed one once: {report:?}"
    );
    assert_eq!(queue.stats().expect("stats").count(JobStatus::Succeeded), 2);

    run_psql(
        url,
        &format!("DELETE FROM \"{schema}\".jobs WHERE job_type = 'deliver_webhook'"),
    )?;
    assert_eq!(
        queue.stats().expect("stats").count(JobStatus::Succeeded),
        1,
        "the delete's count change was kept by the trigger"
    );
    Some(())
}

#[test]
fn the_documented_plain_sql_runs_in_a_session_with_no_settings() {
    let Some(url) = server() else { return };
    let schema = PgSchema::new(&url);
    Queue::builder()
        .pg_schema(&schema.name)
        .open(&url)
        .expect("migrating a new schema");
    plain_sql_works(&url, &schema.name);
}

#[test]
fn a_schema_made_by_hand_from_schema_pg_sql_takes_plain_sql() {
    let Some(url) = server() else { return };
    let schema = PgSchema::new(&url);
    // The header's way, in one psql session: create the schema, put it on the path, run
    // the file.
    let setup = format!(
        "CREATE SCHEMA \"{0}\"; SET search_path TO \"{0}\";",
        schema.name
    );
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/schema.pg.sql");
    let Some(made) = psql(&url, &["-c", &setup, "-f", file]) else {
        return;
    };
    made.unwrap_or_else(|e| panic!("schema.pg.sql by hand: {e}"));
    plain_sql_works(&url, &schema.name);
}

#[test]
fn a_version_1_schema_is_migrated_so_that_plain_sql_works() {
    let Some(url) = server() else { return };
    let schema = PgSchema::new(&url);
    let mut conn = schema.raw();
    conn.batch_execute(&format!("CREATE SCHEMA \"{}\"", schema.name))
        .expect("creating the schema");
    conn.batch_execute(include_str!(
        "../../src/storage/postgres/migrations/0001_init.sql"
    ))
    .expect("the first migration, as an older litejobs left it");
    Queue::builder()
        .pg_schema(&schema.name)
        .open(&url)
        .expect("migrating from version 1");
    let version = run_psql(
        &url,
        &format!(
            "SELECT 'version=' || version FROM \"{}\".schema_version",
            schema.name
        ),
    );
    if let Some(version) = version {
        assert!(
            version.contains(&format!("version={}", litejobs::PG_SCHEMA_VERSION)),
            "{version}"
        );
        plain_sql_works(&url, &schema.name);
    }
}

/// The guide's insert with a deadline (docs/schema.md, "Deadlines: `expires_at`"), in a
/// fresh `psql -X` session: the job gets a deadline 15 minutes out by the server's clock,
/// and past it never runs and ends cancelled by `deadline`.
#[test]
fn a_deadline_inserted_by_psql_expires_the_job() {
    let Some(url) = server() else { return };
    let schema = PgSchema::new(&url);
    let before = SystemClock.now_ms();
    let clock = ManualClock::new(before);
    let queue = Queue::builder()
        .clock(clock.clone())
        .pg_schema(&schema.name)
        .open(&url)
        .expect("the queue creates the schema");
    let [insert] = <[String; 1]>::try_from(crate::foreign_expiry::guide_statements(
        "tests/postgres/plain_sql.rs runs this",
    ))
    .expect("one insert");
    let insert = insert.replace("litejobs.", &format!("\"{}\".", schema.name));
    if run_psql(&url, &insert).is_none() {
        return;
    }
    let after = SystemClock.now_ms();
    let job = &queue.list(&litejobs::JobFilter::new()).expect("list")[0];
    let deadline = job.expires_at.expect("a deadline");
    // The server's clock, which may stand a little apart from ours.
    assert!(
        (before + 14 * 60_000..=after + 16 * 60_000).contains(&deadline),
        "about 15 minutes from the insert: {deadline}, inserted between {before} and {after}"
    );
    clock.set(deadline + 60_000);
    let builder = Worker::builder(&queue).handler(
        "password_reset_email",
        |_: &JobContext| -> Result<(), litejobs::JobError> {
            panic!("an expired job must not run")
        },
    );
    let report = testing::drain(&builder).expect("drain");
    assert_eq!((report.expired, report.attempts()), (1, 0), "{report:?}");
    let stored = queue.job(job.id).expect("job").expect("kept");
    assert_eq!(
        (stored.status, stored.cancelled_by.as_deref()),
        (JobStatus::Cancelled, Some("deadline"))
    );
    let found = run_psql(
        &url,
        &format!(
            "SELECT count(*) FROM \"{}\".jobs WHERE status = 'cancelled' AND cancelled_by = 'deadline'",
            schema.name
        ),
    );
    assert!(
        found.is_some_and(|out| out.contains(" 1\n")),
        "the guide's query finds it"
    );
}

/// The periodic guide's insert of a schedule, by `psql -X` in the litejobs schema: a
/// scheduler that runs stored schedules enqueues its first slot, the next quarter hour.
#[test]
fn a_schedule_inserted_by_psql_is_run_by_the_workers() {
    let Some(url) = server() else { return };
    let schema = PgSchema::new(&url);
    let clock = ManualClock::new(SystemClock.now_ms());
    let queue = Queue::builder()
        .clock(clock.clone())
        .pg_schema(&schema.name)
        .open(&url)
        .expect("the queue creates the schema");
    let insert = crate::schedules::guide_insert().replace(
        "INSERT INTO periodic_schedules",
        &format!("INSERT INTO \"{}\".periodic_schedules", schema.name),
    );
    if run_psql(&url, &insert).is_none() {
        return;
    }
    clock.set(SystemClock.now_ms() + 16 * 60_000);
    let scheduler = litejobs::maintenance::Scheduler::new(&queue, Vec::new())
        .expect("scheduler")
        .with_stored_schedules();
    let enqueued = scheduler.tick().expect("tick").enqueued;
    assert_eq!(enqueued.len(), 1, "{enqueued:?}");
    let job = queue
        .job(enqueued[0].job_id)
        .expect("job")
        .expect("enqueued");
    assert_eq!(
        (job.job_type.as_str(), job.payload.clone()),
        ("crm_sync", serde_json::json!({"full": false}))
    );
}
