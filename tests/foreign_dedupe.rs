//! Dedupe for rows from other languages: the plain-SQL insert of docs/schema.md ("Dedupe
//! needs `idempotency_key`"), run as written through a raw SQLite connection, adds a keyed job
//! once, agrees with litejobs' own enqueue both ways, keeps the key of a succeeded job after
//! it is pruned, and frees the key of a dead one. The index being partial, a conflict target
//! without its `WHERE` is refused, as the guide says.

use std::time::Duration;

use litejobs::maintenance::PruneOptions;
use litejobs::{
    testing, Clock, JobContext, JobError, JobStatus, ManualClock, NewJob, Queue, SystemClock,
    Worker,
};
use rusqlite::{named_params, Connection};
use serde_json::json;

use crate::support::{raw_conn, sqlite_only, temp_dir};

const GUIDE: &str = include_str!("../docs/schema.md");

/// The guide's insert: the ```sql block holding the line that names this file.
fn guide_insert() -> String {
    let marker = "tests/foreign_dedupe.rs runs this";
    let at = GUIDE
        .find(marker)
        .unwrap_or_else(|| panic!("docs/schema.md has no SQL block marked {marker:?}"));
    let start = GUIDE[..at]
        .rfind("```sql\n")
        .expect("the marker sits in a ```sql block")
        + "```sql\n".len();
    let end = start + GUIDE[start..].find("```").expect("the block ends");
    GUIDE[start..end].to_string()
}

/// Runs the guide's insert; how many rows it added.
fn insert(conn: &Connection, payload: &str, key: &str) -> usize {
    conn.execute(
        &guide_insert(),
        named_params! { ":payload": payload, ":key": key },
    )
    .unwrap_or_else(|e| panic!("the guide's insert failed: {e}"))
}

/// The live or succeeded job holding `key`, as the guide's lookup finds it.
fn holder(conn: &Connection, key: &str) -> Option<i64> {
    conn.query_row(
        "SELECT id FROM jobs WHERE idempotency_key = ?1
           AND status IN ('queued', 'running', 'failed', 'succeeded')",
        [key],
        |row| row.get(0),
    )
    .ok()
}

/// A database litejobs created, on a clock standing at the wall clock's now (the SQL reads
/// the wall clock) that the test moves on.
fn fresh() -> (tempfile::TempDir, Queue, ManualClock, Connection) {
    let dir = temp_dir();
    let path = dir.path().join("app.db");
    let clock = ManualClock::new(SystemClock.now_ms());
    let queue = Queue::builder()
        .clock(clock.clone())
        .open(&path)
        .expect("creating the database");
    let conn = raw_conn(&path);
    (dir, queue, clock, conn)
}

#[test]
fn the_documented_insert_adds_a_keyed_job_once_and_agrees_with_enqueue() {
    if sqlite_only() {
        return;
    }
    let (_dir, queue, _clock, conn) = fresh();
    let payload = json!({"to": "ada@example.com", "subject": "Welcome", "text": "Hi"}).to_string();
    let key = "email:42:welcome:signup";
    assert_eq!(insert(&conn, &payload, key), 1);
    assert_eq!(
        insert(&conn, &payload, key),
        0,
        "the second insert adds nothing"
    );
    let id = holder(&conn, key).expect("the first job holds the key");
    let count: i64 = conn
        .query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
        .expect("count");
    assert_eq!(count, 1);

    // litejobs' enqueue finds the row's key held...
    let again = queue
        .enqueue(NewJob::new("send_email", json!({})).idempotency_key(key))
        .expect("enqueue");
    assert_eq!(again, id);
    // ...and the guide's insert finds a key litejobs enqueued.
    queue
        .enqueue(NewJob::new("send_email", json!({})).idempotency_key("email:7:w:e"))
        .expect("enqueue");
    assert_eq!(insert(&conn, &payload, "email:7:w:e"), 0);
    // A plain insert without ON CONFLICT fails as the guide says.
    let err = conn
        .execute(
            "INSERT INTO jobs (job_type, payload, idempotency_key) VALUES ('send_email', '{}', ?1)",
            [key],
        )
        .expect_err("a held key refuses a plain insert");
    assert!(
        err.to_string()
            .contains("UNIQUE constraint failed: jobs.idempotency_key"),
        "{err}"
    );
}

#[test]
fn a_succeeded_key_stays_taken_after_pruning_and_a_dead_one_is_free_again() {
    if sqlite_only() {
        return;
    }
    let (_dir, queue, clock, conn) = fresh();
    assert_eq!(insert(&conn, r#"{"ok": true}"#, "k-ok"), 1);
    assert_eq!(insert(&conn, r#"{"ok": false}"#, "k-bad"), 1);
    let worker =
        Worker::builder(&queue).handler("send_email", |ctx: &JobContext| -> Result<(), JobError> {
            match ctx.payload()["ok"].as_bool() {
                Some(true) => Ok(()),
                _ => Err(JobError::permanent("refused")),
            }
        });
    // The rows are due from the wall clock's now, a moment past the queue's clock.
    clock.advance(Duration::from_secs(60));
    let report = testing::drain(&worker).expect("drain");
    assert_eq!((report.succeeded, report.dead), (1, 1));

    // The succeeded job holds its key; the dead one freed its key.
    assert_eq!(insert(&conn, "{}", "k-ok"), 0);
    assert_eq!(insert(&conn, r#"{"ok": true}"#, "k-bad"), 1);
    let ok_id = holder(&conn, "k-ok").expect("the succeeded job");

    // Pruned, the succeeded job is gone, and its remembered key still dedupes.
    clock.advance(Duration::from_secs(1));
    let pruned = queue
        .prune(&PruneOptions::new(Duration::ZERO))
        .expect("prune");
    assert!(pruned.jobs_deleted >= 1, "{pruned:?}");
    assert!(
        queue.job(ok_id).expect("read").is_none(),
        "the job was pruned"
    );
    assert_eq!(holder(&conn, "k-ok"), None);
    assert_eq!(insert(&conn, "{}", "k-ok"), 0, "the remembered key holds");
    let retried = queue.job(holder(&conn, "k-bad").expect("the new job"));
    assert_eq!(
        retried.expect("read").map(|j| j.status),
        Some(JobStatus::Queued)
    );
}

#[test]
fn a_conflict_target_must_repeat_the_partial_index_where() {
    if sqlite_only() {
        return;
    }
    let (_dir, _queue, _clock, conn) = fresh();
    let insert_with = |target: &str| {
        conn.execute(
            &format!(
                "INSERT INTO jobs (job_type, payload, idempotency_key) VALUES ('t', '{{}}', 'k') \
                 ON CONFLICT {target} DO NOTHING"
            ),
            [],
        )
    };
    let bare = insert_with("(idempotency_key)").expect_err("refused without the WHERE");
    assert!(
        bare.to_string()
            .contains("ON CONFLICT clause does not match any PRIMARY KEY or UNIQUE constraint"),
        "{bare}"
    );
    let full = "(idempotency_key) WHERE idempotency_key IS NOT NULL \
                AND status IN ('queued', 'running', 'failed', 'succeeded')";
    assert_eq!(insert_with(full).expect("the guide's target"), 1);
    assert_eq!(insert_with(full).expect("the guide's target"), 0);
    // The guide quotes the target as the schema's index has it.
    let guide_target = "ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL AND \
                         status IN ('queued', 'running', 'failed', 'succeeded') DO NOTHING";
    assert!(
        GUIDE
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains(guide_target),
        "docs/schema.md lost its conflict target"
    );
}
