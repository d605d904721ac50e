//! `Queue::enqueue_in_pg`: a job enqueued inside the caller's own diesel transaction commits
//! with the caller's change or not at all, and leaves the caller's search path as it was.

use diesel::connection::SimpleConnection;
use diesel::sql_types::Text;
use diesel::{sql_query, Connection, QueryableByName, RunQueryDsl};
use litejobs::{ErrorKind, JobStatus, NewJob};
use serde_json::json;

use crate::support::pg::setup;

#[derive(QueryableByName)]
struct Path {
    #[diesel(sql_type = Text)]
    search_path: String,
}

fn app_connection(schema: &crate::support::pg::PgSchema) -> diesel::PgConnection {
    // The app's own table lives in a schema of the app's (here: the test schema's twin).
    let mut conn = diesel::PgConnection::establish(&schema.url).expect("connecting");
    conn.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS \"{0}_app\"; SET search_path TO \"{0}_app\";
         CREATE TABLE IF NOT EXISTS users (id bigserial PRIMARY KEY, email text NOT NULL);",
        schema.name
    ))
    .expect("the app's table");
    conn
}

fn drop_app(schema: &crate::support::pg::PgSchema) {
    schema.exec(&format!(
        "DROP SCHEMA IF EXISTS \"{}_app\" CASCADE",
        schema.name
    ));
}

#[test]
fn the_job_commits_with_the_callers_change_or_not_at_all() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut conn = app_connection(&schema);
    let before: Vec<Path> = sql_query("SELECT current_setting('search_path') AS search_path")
        .load(&mut conn)
        .expect("search path");
    let id = conn
        .transaction(|c| {
            sql_query("INSERT INTO users (email) VALUES ('ada@example.com')").execute(c)?;
            let id = queue
                .enqueue_in_pg(c, NewJob::new("send_email", json!({"user": "ada"})))
                .map_err(|e| diesel::result::Error::QueryBuilderError(e.into()))?;
            // The caller's own unqualified names still resolve inside the transaction.
            sql_query("INSERT INTO users (email) VALUES ('bob@example.com')").execute(c)?;
            Ok::<_, diesel::result::Error>(id)
        })
        .expect("the caller's transaction commits");
    assert_eq!(
        queue.job(id).expect("job").map(|j| j.status),
        Some(JobStatus::Queued)
    );
    let after: Vec<Path> = sql_query("SELECT current_setting('search_path') AS search_path")
        .load(&mut conn)
        .expect("search path");
    assert_eq!(before[0].search_path, after[0].search_path);

    // Rolled back: neither the user nor the job.
    let jobs_before = schema.count("SELECT count(*) AS n FROM jobs");
    let result = conn.transaction(|c| {
        sql_query("INSERT INTO users (email) VALUES ('eve@example.com')").execute(c)?;
        queue
            .enqueue_in_pg(c, NewJob::new("send_email", json!({"user": "eve"})))
            .map_err(|e| diesel::result::Error::QueryBuilderError(e.into()))?;
        Err::<(), _>(diesel::result::Error::RollbackTransaction)
    });
    assert!(result.is_err());
    assert_eq!(schema.count("SELECT count(*) AS n FROM jobs"), jobs_before);
    assert_eq!(
        schema.count(&format!(
            "SELECT count(*) AS n FROM \"{}_app\".users WHERE email = 'eve@example.com'",
            schema.name
        )),
        0
    );

    // An invalid job is refused before anything reaches the server: the transaction goes on.
    conn.transaction(|c| {
        let err = queue
            .enqueue_in_pg(c, NewJob::new("", json!({})))
            .expect_err("an empty job type is refused");
        assert_eq!(err.kind(), ErrorKind::InvalidJob, "{err}");
        sql_query("INSERT INTO users (email) VALUES ('kim@example.com')").execute(c)?;
        Ok::<_, diesel::result::Error>(())
    })
    .expect("the transaction is still usable");
    drop_app(&schema);
}

#[test]
fn a_sqlite_queue_refuses_a_postgres_connection() {
    let Some((schema, _queue, _clock)) = setup() else {
        return;
    };
    let env = crate::support::setup();
    let mut conn = schema.raw();
    if crate::support::on_postgres() {
        return;
    }
    let err = env
        .queue
        .enqueue_in_pg(&mut conn, NewJob::new("t", json!({})))
        .expect_err("a file queue has no schema on the server");
    assert_eq!(err.kind(), ErrorKind::InvalidState, "{err}");
}

#[test]
fn a_job_enqueued_in_the_callers_transaction_keeps_its_deadline() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut conn = app_connection(&schema);
    let id = conn
        .transaction(|c| {
            queue
                .enqueue_in_pg(
                    c,
                    NewJob::new("reset_email", json!({}))
                        .expire_after(std::time::Duration::from_secs(900)),
                )
                .map_err(|e| diesel::result::Error::QueryBuilderError(e.into()))
        })
        .expect("the caller's transaction commits");
    assert_eq!(
        queue.job(id).expect("job").and_then(|j| j.expires_at),
        Some(crate::support::START_MS + 900_000)
    );
    drop_app(&schema);
}
