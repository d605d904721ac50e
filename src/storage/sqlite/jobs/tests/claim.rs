//! The claim: rows breaking a rule, the write transaction it needs, group keys in order.
use super::{claim_one, db, succeed_one, t_jobs, write, T0};
use crate::job::NewJob;
use crate::storage::jobs::{ClaimRequest, ClaimStore, Claimed, InsertStore, Lease};
use crate::storage::sqlite::SqliteTx;

/// A row that breaks a rule (written with the rules off) never fails a claim, with the
/// rules on or off: with them on (a connection serving outside values) it is made dead
/// and the good job is claimed; with them off (the worker's connection) it is claimed
/// defective, naming the column, and goes dead without running.
#[test]
fn a_rule_breaker_never_fails_a_claim_with_the_rules_on_or_off() {
    for rules_off in [false, true] {
        let db = db();
        let types = ["t".to_string()];
        let req = ClaimRequest {
            limit: 10,
            above_priority: None,
            ..t_jobs(&types, "A")
        };
        let claimed = write(&db, |tx| {
            tx.conn.execute_batch(
                "PRAGMA ignore_check_constraints = ON;
                 INSERT INTO jobs (job_type, payload, run_at, created_at)
                     VALUES ('t', '{}', 1700000000000, 1700000000000);
                 INSERT INTO jobs (job_type, payload, priority, run_at, created_at)
                     VALUES ('t', '{}', 'high', 1700000000000, 1700000000000);",
            )?;
            if !rules_off {
                tx.conn
                    .execute_batch("PRAGMA ignore_check_constraints = OFF")?;
            }
            tx.claim(&req, T0)
        })
        .expect("the claim succeeds");
        let mut defects: Vec<(i64, Option<String>)> = claimed
            .rows
            .iter()
            .map(|r| (r.id, r.defect.clone()))
            .collect();
        // TEXT sorts above every number: the claim's order put the bad row first.
        defects.sort();
        if rules_off {
            assert!(claimed.refused.is_empty());
            assert_eq!(defects.len(), 2, "{defects:?}");
            assert_eq!(defects[0], (1, None));
            let defect = defects[1].1.clone().unwrap_or_default();
            assert!(
                defects[1].0 == 2 && defect.contains("column priority holds TEXT 'high'"),
                "{defects:?}"
            );
        } else {
            assert_eq!(defects, vec![(1, None)]);
            let refused: Vec<(i64, &str)> = claimed
                .refused
                .iter()
                .map(|r| (r.id, r.error.as_str()))
                .collect();
            assert!(
                refused.len() == 1
                    && refused[0].0 == 2
                    && refused[0].1.contains("column priority holds TEXT 'high'"),
                "{refused:?}"
            );
        }
    }
}

/// A claim outside a write transaction is refused: only the transaction's lock makes
/// its SELECT and its UPDATE choose the same rows.
#[test]
fn a_claim_outside_a_write_transaction_is_refused_and_claims_nothing() {
    let db = db();
    db.execute(
        "INSERT INTO jobs (job_type, payload) VALUES ('t', '{}')",
        [],
    )
    .expect("a due job");
    let types = ["t".to_string()];
    let req = t_jobs(&types, "w");
    // A "now" far enough ahead that the job (run_at defaults to the wall clock) is due.
    let later = 4_000_000_000_000;
    let err = SqliteTx::new(&db)
        .claim(&req, later)
        .expect_err("no transaction");
    assert!(
        err.to_string().contains("inside a write transaction"),
        "{err}"
    );
    let running: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM jobs WHERE status = 'running'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(running, 0);
    let tx = db.unchecked_transaction().expect("tx");
    assert_eq!(
        claim_one(&SqliteTx::new(&tx), "w", later).attempt,
        1,
        "inside one, the same claim works"
    );
}

/// At most one running job per group key, and within a key the first due job in
/// (priority, run time, id) order goes first, whatever other keys do.
#[test]
fn the_claim_keeps_one_running_job_per_group_key_in_order() {
    let conn = db();
    write(&conn, |tx| {
        let job = |key: &str, priority: i64| {
            NewJob::new("t", serde_json::json!({}))
                .group_key(key)
                .priority(priority)
        };
        let k1 = tx.insert_job(&job("k", 0), "{}", T0)?.id;
        let k2 = tx.insert_job(&job("k", 5), "{}", T0)?.id;
        let other = tx.insert_job(&job("other", 0), "{}", T0)?.id;
        let free = tx
            .insert_job(&NewJob::new("t", serde_json::json!({})), "{}", T0)?
            .id;
        let types = ["t".to_string()];
        let req = ClaimRequest {
            limit: 10,
            above_priority: None,
            ..t_jobs(&types, "A")
        };
        let ids = |c: Claimed| c.rows.iter().map(|r| r.id).collect::<Vec<_>>();
        // k2 outranks k1 within key k; one job per key; keyless jobs all go.
        assert_eq!(ids(tx.claim(&req, T0)?), vec![k2, other, free]);
        assert!(
            ids(tx.claim(&req, T0)?).is_empty(),
            "k1 waits while k2 runs"
        );
        let lease = Lease {
            job_id: k2,
            attempt: 1,
            worker_id: "A",
        };
        assert!(succeed_one(tx, lease, None, T0)?);
        assert_eq!(ids(tx.claim(&req, T0)?), vec![k1], "then k1 runs");
        Ok(())
    })
    .expect("the group-key scenario runs");
}

/// The claim and an idle worker's look for due jobs search the due index by queue and
/// `waiting_for = 0`: jobs held for other jobs are never read, however many there are.
#[test]
fn the_claim_reads_only_jobs_that_wait_for_nothing() {
    let conn = db();
    let plan = |sql: &str, args: usize| -> String {
        let params: Vec<rusqlite::types::Value> = (0..args)
            .map(|_| rusqlite::types::Value::Integer(1))
            .collect();
        conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .and_then(|mut s| {
                s.query_map(rusqlite::params_from_iter(params), |r| {
                    r.get::<_, String>(3)
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .expect("a plan")
            .join("; ")
    };
    let claim = crate::storage::sqlite::jobs::claim::claim_sql(1, false);
    let shown = plan(&claim.select, 8);
    assert!(
        shown.contains("jobs_due_idx (queue=? AND waiting_for=?)"),
        "{shown}"
    );
    // A look for jobs that go ahead of the waiting ones reads only the range above them.
    let above = crate::storage::sqlite::jobs::claim::claim_sql(1, true);
    let shown = plan(&above.select, 9);
    assert!(
        shown.contains("jobs_due_idx (queue=? AND waiting_for=? AND priority>?)"),
        "{shown}"
    );
}
