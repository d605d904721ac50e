//! The writes fenced by a lease: stale leases change nothing, successes count where the row is.
use std::collections::BTreeMap;

use rusqlite::params;

use super::{attempt_rows, claim_one, db, snapshot, succeed_one, t_jobs, write, T0};
use crate::error::Result;
use crate::job::NewJob;
use crate::storage::jobs::{
    AfterFailure, ClaimRequest, ClaimStore, ClaimedRow, CompleteStore, InsertStore, Lease,
    ReapStore, Success,
};
use crate::storage::reports::ReportStore;
use crate::storage::sqlite::jobs::complete::CountedAs;
use crate::storage::sqlite::SqliteTx;

/// A success counts under the queue and type its row holds when it finishes: those it
/// was claimed with (the statement without `RETURNING`), or, where another program
/// changed them while it ran, the stored ones (the statement that reads them back).
#[test]
fn successes_count_under_the_queue_and_type_the_row_holds() {
    let db = db();
    write(&db, |tx| {
        for _ in 0..3 {
            tx.conn.execute(
                "INSERT INTO jobs (job_type, payload, run_at, created_at)
                 VALUES ('t', '{}', ?1, ?1)",
                [T0],
            )?;
        }
        let types = ["t".to_string()];
        let req = ClaimRequest {
            limit: 3,
            above_priority: None,
            ..t_jobs(&types, "A")
        };
        let rows = tx.claim(&req, T0)?.rows;
        let count = |stx: &SqliteTx<'_>, rows: &[ClaimedRow]| -> Result<Vec<bool>> {
            let successes: Vec<Success<'_>> = rows
                .iter()
                .map(|r| Success {
                    lease: Lease {
                        job_id: r.id,
                        attempt: r.attempt,
                        worker_id: "A",
                    },
                    result: None,
                    progress: None,
                    queue: &r.queue,
                    job_type: &r.job_type,
                })
                .collect();
            stx.succeed(&successes, T0 + 1)
        };
        let key = |q: &str, t: &str| (q.to_string(), t.to_string());
        let stx = tx;
        assert_eq!(count(stx, &rows[..1])?, [true]);
        assert_eq!(
            *stx.succeeded.borrow(),
            BTreeMap::from([(key("default", "t"), 1)])
        );
        tx.conn.execute(
            "UPDATE jobs SET queue = 'moved' WHERE id = ?1",
            [rows[1].id],
        )?;
        assert_eq!(count(stx, &rows[1..])?, [true, true]);
        assert_eq!(
            *stx.succeeded.borrow(),
            BTreeMap::from([(key("default", "t"), 2), (key("moved", "t"), 1)])
        );
        // A success whose lease is gone counts nowhere.
        assert_eq!(count(stx, &rows[..1])?, [false]);
        assert_eq!(stx.succeeded.borrow().values().sum::<i64>(), 3);
        Ok(())
    })
    .expect("the counting scenario runs");
}

/// Successes written together (45 jobs: statements of 32, 8, 4 and 1) each take their
/// own result and keep their progress when none is given; a stale lease among them
/// changes nothing and is reported as not applied, in its place.
#[test]
fn successes_written_together_are_each_fenced_by_their_own_lease() {
    let db = db();
    write(&db, |tx| {
        let jobs: Vec<NewJob> = (0..45)
            .map(|i| NewJob::new("t", serde_json::json!({ "i": i })))
            .collect();
        let payloads: Vec<String> = (0..45).map(|i| format!("{{\"i\":{i}}}")).collect();
        tx.insert_jobs(&jobs, &payloads, T0)?;
        let rows: Vec<ClaimedRow> = (0..45).map(|_| claim_one(tx, "A", T0)).collect();
        tx.conn.execute(
            "UPDATE jobs SET progress = '\"half\"' WHERE id = ?1",
            [rows[3].id],
        )?;
        let before = |i: usize| snapshot(tx, rows[i].id);
        let stale = [
            (7, "B", rows[7].attempt),
            (20, "A", rows[20].attempt + 1),
            (44, "A", 0),
        ];
        let kept: Vec<_> = stale.iter().map(|&(i, _, _)| before(i)).collect();
        let results: Vec<String> = (0..45).map(|i| format!("{{\"r\":{i}}}")).collect();
        let successes: Vec<Success<'_>> = rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let (worker, attempt) = stale
                    .iter()
                    .find(|s| s.0 == i)
                    .map_or(("A", row.attempt), |&(_, w, a)| (w, a));
                Success {
                    lease: Lease {
                        job_id: row.id,
                        attempt,
                        worker_id: worker,
                    },
                    result: (i % 2 == 0).then_some(results[i].as_str()),
                    progress: (i == 5).then_some("\"done\""),
                    queue: "default",
                    job_type: "t",
                }
            })
            .collect();
        let written = tx.write_successes(&successes, T0 + 10)?;
        for (i, row) in rows.iter().enumerate() {
            let is_stale = stale.iter().any(|s| s.0 == i);
            assert_eq!(written[i].is_some(), !is_stale, "job {i}");
            let (status, result, progress): (String, Option<String>, Option<String>) =
                tx.conn.query_row(
                    "SELECT status, result, progress FROM jobs WHERE id = ?1",
                    [row.id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )?;
            if is_stale {
                assert_eq!(status, "running", "job {i}");
                continue;
            }
            assert_eq!(written[i], Some(CountedAs::Claimed));
            assert_eq!(status, "succeeded");
            assert_eq!(result, (i % 2 == 0).then(|| results[i].clone()), "job {i}");
            let expected = match i {
                3 => Some("\"half\"".to_string()),
                5 => Some("\"done\"".to_string()),
                _ => None,
            };
            assert_eq!(progress, expected, "job {i}");
        }
        for (&(i, _, _), kept) in stale.iter().zip(kept) {
            assert_eq!(before(i), kept, "stale job {i} unchanged");
        }
        Ok(())
    })
    .expect("the batch scenario runs");
}

/// Each fenced write, by name, applied with `lease`; true when it changed the job.
type Write = fn(&SqliteTx<'_>, Lease<'_>, i64) -> Result<bool>;

const WRITES: &[(&str, Write)] = &[
    ("heartbeat", |c, l, now| {
        c.extend_lease(l, now + 60_000, Some("{}"), now)
    }),
    ("complete", |c, l, now| succeed_one(c, l, Some("{}"), now)),
    ("retry", |c, l, now| {
        c.fail(l, AfterFailure::RetryAt(now + 5_000), "boom", None, now)
    }),
    ("dead", |c, l, now| {
        c.fail(l, AfterFailure::Dead, "boom", Some(500), now)
    }),
    ("snooze", |c, l, now| c.put_back(l, Some(now + 60_000), now)),
    ("release", |c, l, now| c.put_back(l, None, now)),
    ("cancel", |c, l, now| c.cancel_running(l, "stop", now)),
];

/// A job running under worker A's attempt 2 (its attempt 1 was reaped), and the leases
/// that must not write to it: another worker's with the same attempt, A's reaped
/// attempt 1, and one for another job.
#[test]
fn a_stale_lease_changes_nothing_and_the_live_one_writes() {
    for (name, write_fenced) in WRITES {
        let conn = db();
        write(&conn, |tx| {
            let job = NewJob::new("t", serde_json::json!({}));
            let id = tx.insert_job(&job, "{}", T0)?.id;
            let first = claim_one(tx, "A", T0);
            assert_eq!((first.id, first.attempt), (id, 1));
            // Attempt 1's lease (1 000 ms + 500 ms grace) runs out; the reaper makes the
            // job due again and A claims it anew.
            assert_eq!(
                tx.reap_expired(T0 + 1_499)?,
                0,
                "[{name}] a live lease is kept"
            );
            assert_eq!(
                tx.reap_expired(T0 + 1_501)?,
                1,
                "[{name}] an expired one is reaped"
            );
            let second = claim_one(tx, "A", T0 + 1_501);
            assert_eq!((second.id, second.attempt), (id, 2));
            let now = T0 + 2_000;
            let before = snapshot(tx, id);
            let history = attempt_rows(tx, id);
            for stale in [
                Lease {
                    job_id: id,
                    attempt: 2,
                    worker_id: "B",
                },
                Lease {
                    job_id: id,
                    attempt: 1,
                    worker_id: "A",
                },
                Lease {
                    job_id: id + 1,
                    attempt: 2,
                    worker_id: "A",
                },
            ] {
                assert!(
                    !write_fenced(tx, stale, now)?,
                    "[{name}] {stale:?} must not write"
                );
                assert_eq!(
                    snapshot(tx, id),
                    before,
                    "[{name}] {stale:?} changed the job"
                );
            }
            assert_eq!(attempt_rows(tx, id), history);
            let live = Lease {
                job_id: id,
                attempt: 2,
                worker_id: "A",
            };
            assert!(
                write_fenced(tx, live, now)?,
                "[{name}] the live lease writes"
            );
            assert_ne!(
                snapshot(tx, id),
                before,
                "[{name}] the live write changed the job"
            );
            if *name != "heartbeat" {
                // The job is no longer running: the same lease cannot write twice.
                let after = snapshot(tx, id);
                for (again, w) in WRITES {
                    assert!(!w(tx, live, now)?, "[{name}] then {again} wrote again");
                }
                assert_eq!(
                    snapshot(tx, id),
                    after,
                    "[{name}] a second write changed it"
                );
            }
            Ok(())
        })
        .expect("the fence scenario runs");
    }
}

/// Another program may move a running job out of `running` by plain SQL without
/// clearing its lease columns (an admin's `UPDATE jobs SET status = 'cancelled'`): the
/// worker still holding that lease must not write over the outsider's decision.
#[test]
fn a_job_moved_out_of_running_by_plain_sql_is_not_written_by_its_old_lease() {
    for (name, write_fenced) in WRITES {
        for outside in ["cancelled", "succeeded", "queued", "dead"] {
            let conn = db();
            write(&conn, |tx| {
                let id = tx.insert_job(&NewJob::new("t", serde_json::json!({})), "{}", T0)?.id;
                let claimed = claim_one(tx, "A", T0);
                tx.conn.execute(
                    "UPDATE jobs SET status = ?1, finished_at = CASE WHEN ?1 = 'queued'                          THEN NULL ELSE ?2 END WHERE id = ?3",
                    params![outside, T0 + 10, id],
                )?;
                let before = snapshot(tx, id);
                let history = attempt_rows(tx, id);
                let lease = Lease {
                    job_id: id,
                    attempt: claimed.attempt,
                    worker_id: "A",
                };
                assert!(
                    !write_fenced(tx, lease, T0 + 20)?,
                    "[{name}] wrote a job an outsider made {outside}"
                );
                assert_eq!(snapshot(tx, id), before, "[{name}] changed the {outside} job");
                assert_eq!(attempt_rows(tx, id), history);
                Ok(())
            })
            .expect("the scenario runs");
        }
    }
}

/// A report's own writes (its chunk rows) are fenced by the same lease as the job's outcome:
/// after the attempt was released and claimed again by another worker, under the same
/// attempt number (a release does not spend the attempt), the first worker's lease no
/// longer holds.
#[test]
fn the_reports_fence_is_the_jobs_lease() {
    let conn = db();
    write(&conn, |tx| {
        let id = tx
            .insert_job(&NewJob::new("t", serde_json::json!({})), "{}", T0)?
            .id;
        let first = claim_one(tx, "A", T0);
        let a = Lease {
            job_id: id,
            attempt: first.attempt,
            worker_id: "A",
        };
        assert!(tx.chunk_fence_holds(a)?, "A's live lease holds");
        assert!(tx.put_back(a, None, T0)?, "released");
        let again = claim_one(tx, "B", T0);
        assert_eq!(again.attempt, first.attempt, "the attempt was not spent");
        assert!(!tx.chunk_fence_holds(a)?, "A's lease is gone");
        let b = Lease {
            worker_id: "B",
            ..a
        };
        assert!(tx.chunk_fence_holds(b)?, "B's holds");
        Ok(())
    })
    .expect("the fence scenario runs");
}
