//! Deadlines on SQLite: the sweep reads the index of waiting jobs with a deadline, ends
//! only those past it, and keeps the counts; a running job's expiry is fenced by its lease.
use std::time::Duration;

use super::{attempt_rows, claim_one, db, write, T0};
use crate::job::NewJob;
use crate::storage::jobs::{ExpireStore, ExpiredAttempt, HeldRows, InsertStore, Lease};

fn job_with_window(secs: u64) -> NewJob {
    NewJob::new("t", serde_json::json!({})).expire_after(Duration::from_secs(secs))
}

#[test]
fn the_sweep_reads_the_expiring_index_and_ends_only_jobs_past_their_deadline() {
    let conn = db();
    let plan: String = conn
        .prepare(
            "EXPLAIN QUERY PLAN SELECT id, queue, job_type, attempts, expires_at FROM jobs
             WHERE expires_at IS NOT NULL AND status IN ('queued', 'failed') AND expires_at <= 1
             ORDER BY expires_at LIMIT 10",
        )
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(3))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .expect("a plan")
        .join("; ");
    assert!(plan.contains("jobs_expiring_idx"), "{plan}");
    write(&conn, |tx| {
        let soon = tx.insert_job(&job_with_window(1), "{}", T0)?.id;
        let later = tx.insert_job(&job_with_window(10), "{}", T0)?.id;
        let never = tx
            .insert_job(&NewJob::new("t", serde_json::json!({})), "{}", T0)?
            .id;
        assert!(
            tx.cancel_expired(T0 + 999, 10, HeldRows::Skip)?.is_empty(),
            "not yet"
        );
        let expired = tx.cancel_expired(T0 + 1_000, 10, HeldRows::Skip)?;
        assert_eq!(
            expired.iter().map(|e| e.id).collect::<Vec<_>>(),
            vec![soon],
            "a deadline that is now has passed"
        );
        assert_eq!(
            expired[0].reason,
            "expired: not started by its deadline 2023-11-14T22:13:21Z"
        );
        let row = |id: i64| -> (String, Option<String>, Option<i64>) {
            tx.conn
                .query_row(
                    "SELECT status, cancelled_by, finished_at FROM jobs WHERE id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .expect("the job")
        };
        assert_eq!(
            row(soon),
            (
                "cancelled".into(),
                Some("deadline".into()),
                Some(T0 + 1_000)
            )
        );
        assert_eq!(row(later).0, "queued");
        assert_eq!(row(never).0, "queued");
        let cancelled: i64 = tx.conn.query_row(
            "SELECT COALESCE(SUM(n), 0) FROM job_counts WHERE status = 'cancelled'",
            [],
            |r| r.get(0),
        )?;
        assert_eq!(cancelled, 1, "counted as cancelled");
        assert!(
            tx.cancel_expired(T0 + 1_000, 10, HeldRows::Skip)?
                .is_empty(),
            "once"
        );
        Ok(())
    })
    .expect("the sweep scenario runs");
}

#[test]
fn a_running_jobs_expiry_is_fenced_by_its_lease() {
    let conn = db();
    write(&conn, |tx| {
        let id = tx.insert_job(&job_with_window(60), "{}", T0)?.id;
        let claimed = claim_one(tx, "A", T0);
        assert_eq!(claimed.expires_at, Some(T0 + 60_000), "the claim reads it");
        let ended = |worker: &'static str, attempt: i64| ExpiredAttempt {
            lease: Lease {
                job_id: id,
                attempt,
                worker_id: worker,
            },
            reason: "expired: test",
            error: Some("boom"),
            status_code: Some(503),
        };
        assert!(!tx.expire_running(&ended("B", 1), T0)?, "another worker's");
        assert!(!tx.expire_running(&ended("A", 2), T0)?, "another attempt's");
        assert!(tx.expire_running(&ended("A", 1), T0 + 5)?);
        let row: (String, String, String, String, i64) = tx.conn.query_row(
            "SELECT status, cancelled_by, cancel_reason, last_error, last_status_code
             FROM jobs WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )?;
        assert_eq!(
            row,
            (
                "cancelled".into(),
                "deadline".into(),
                "expired: test".into(),
                "boom".into(),
                503
            )
        );
        assert_eq!(attempt_rows(tx, id), 0, "the completer writes the attempt");
        assert!(!tx.expire_running(&ended("A", 1), T0 + 6)?, "once");
        Ok(())
    })
    .expect("the fenced expiry runs");
}
