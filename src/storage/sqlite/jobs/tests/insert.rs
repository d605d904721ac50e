//! Inserts: batch ids in order, and validated jobs that meet every rule on the unchecked path.
use super::{db, write, T0};
use crate::job::NewJob;
use crate::storage::jobs::insert::VALIDATED_FROM_ROWS;
use crate::storage::jobs::InsertStore;
use crate::storage::sqlite::jobs::row_rules::RULE_BROKEN_SQL;

/// Jobs of a batch get the ids after the newest row, in the batch's order, around
/// jobs with keys and after rows another program inserted with ids of its own; where
/// SQLite would pick ids at random (the newest id is the last 64-bit integer) the batch
/// is refused and nothing is inserted.
#[test]
fn batch_ids_follow_the_newest_row_in_order_or_the_batch_is_refused() {
    let conn = db();
    conn.execute(
        "INSERT INTO jobs (id, job_type, payload) VALUES (1000, 'other', '{}')",
        [],
    )
    .expect("a row with an id of its own");
    let jobs: Vec<NewJob> = (0..70)
        .map(|n| {
            let job = NewJob::new("t", serde_json::json!({ "n": n }));
            if n == 40 {
                job.idempotency_key("forty")
            } else {
                job
            }
        })
        .collect();
    let payloads: Vec<String> = (0..70).map(|n| format!("{{\"n\":{n}}}")).collect();
    let ids: Vec<i64> = write(&conn, |tx| tx.insert_jobs(&jobs, &payloads, T0))
        .expect("insert")
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(ids, (1001..1071).collect::<Vec<_>>());
    let stored: Vec<String> = conn
        .prepare("SELECT payload FROM jobs WHERE id > 1000 ORDER BY id")
        .and_then(|mut st| {
            st.query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()
        })
        .expect("read back");
    assert_eq!(stored, payloads, "each id holds its own job");

    conn.execute(
        "INSERT INTO jobs (id, job_type, payload) VALUES (9223372036854775806, 'other', '{}')",
        [],
    )
    .expect("a row just below the last id");
    let err = write(&conn, |tx| tx.insert_jobs(&jobs[..3], &payloads[..3], T0))
        .expect_err("three more ids do not fit in order");
    assert!(err.to_string().contains("not one consecutive run"), "{err}");
    let count: i64 = conn
        .query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
        .expect("count");
    assert_eq!(count, 72, "the refused batch left nothing behind");
}

/// A big batch goes in with the CHECK rules off: every job that passed litejobs'
/// validation must still satisfy every rule (none is named by [`RULE_BROKEN_SQL`]), may
/// move to `running` with the rules on, and the rules are on again afterwards.
#[test]
fn validated_jobs_satisfy_every_rule_on_the_unchecked_path() {
    use std::time::{Duration, UNIX_EPOCH};
    let db = db();
    let now = 1_767_225_600_000;
    let edge: Vec<NewJob> = vec![
        NewJob::new("t", serde_json::json!(null)),
        NewJob::new(" t ", serde_json::json!([1, "x"])).queue("q é"),
        NewJob::new("t", serde_json::json!({})).priority(i64::MIN),
        NewJob::new("t", serde_json::json!({})).priority(i64::MAX),
        NewJob::new("t", serde_json::json!({})).max_attempts(1),
        NewJob::new("t", serde_json::json!({})).max_attempts(u32::MAX),
        NewJob::new("t", serde_json::json!({})).timeout(Duration::from_millis(1)),
        NewJob::new("t", serde_json::json!({})).timeout(Duration::MAX),
        NewJob::new("t", serde_json::json!({})).delay(Duration::from_millis(
            (crate::job::MAX_RUN_AT_MS - now) as u64,
        )),
        NewJob::new("t", serde_json::json!({})).run_at(UNIX_EPOCH),
        NewJob::new("t", serde_json::json!({}))
            .run_at(UNIX_EPOCH + Duration::from_millis(crate::job::MAX_RUN_AT_MS as u64)),
        NewJob::new("t", serde_json::json!({})).group_key("g"),
        NewJob::from_json_text("t", " { \"a\" : 1 } "),
        // What validation must refuse: were it to let one in, its row would break a rule.
        NewJob::new("t", serde_json::json!({})).max_attempts(0),
        NewJob::new("t", serde_json::json!({})).timeout(Duration::ZERO),
        NewJob::new("t", serde_json::json!({})).queue(""),
        NewJob::new("", serde_json::json!({})),
        NewJob::from_json_text("t", "not json"),
    ];
    let valid: Vec<(NewJob, String)> = edge
        .into_iter()
        .filter_map(|job| {
            let payload = crate::job::validate(&job, 1 << 16).ok()?;
            Some((job, payload))
        })
        .collect();
    assert_eq!(valid.len(), 13, "the cases meant to be valid are");
    let (jobs, payloads): (Vec<NewJob>, Vec<String>) = (0..VALIDATED_FROM_ROWS * 2)
        .map(|i| valid[i % valid.len()].clone())
        .unzip();
    write(&db, |tx| {
        assert_eq!(tx.insert_jobs(&jobs, &payloads, now)?.len(), jobs.len());
        let broken: Vec<(i64, String)> = tx
            .conn
            .prepare(&format!(
                "SELECT id, {RULE_BROKEN_SQL} FROM jobs WHERE {RULE_BROKEN_SQL} IS NOT NULL"
            ))?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        assert_eq!(broken, Vec::new(), "validated rows that break a rule");
        let ignored: i64 = tx
            .conn
            .query_row("PRAGMA ignore_check_constraints", [], |r| r.get(0))?;
        assert_eq!(ignored, 0, "the rules are on again");
        let moved = tx.conn.execute("UPDATE jobs SET status = 'running'", [])?;
        assert_eq!(moved, jobs.len(), "the rules let every row run");
        Ok(())
    })
    .expect("the batch scenario runs");
}
