//! The claimed-row rules on SQLite: the SQL and the code agree with the CHECK rules.
use rusqlite::params;

use super::{db, t_jobs, write, T0};
use crate::storage::jobs::{ClaimRequest, ClaimStore};
use crate::storage::sqlite::jobs::row_rules::{read_claimed, CLAIMED_COLUMNS, RULE_BROKEN_SQL};

/// The claim recovers from a rule-breaking row only if [`RULE_BROKEN_SQL`] names every
/// row the schema's CHECK rules refuse to move to `running`, and no other: checked over
/// every combination of odd values in the checked columns. The claim's own reading names the
/// same column, and for a value a PostgreSQL column can hold too (an integer, empty text) it
/// says the same words: a row is refused alike whichever connection claims it.
#[test]
fn rule_broken_sql_agrees_with_the_check_rules() {
    let db = db();
    let odd: &[(&str, &[&str])] = &[
        ("queue", &["'default'", "''", "x'71'", "7"]),
        ("job_type", &["'t'", "''", "x'74'"]),
        ("payload", &["'{}'", "x'7b7d'", "42"]),
        ("priority", &["0", "'high'", "1.5", "-3"]),
        ("attempts", &["0", "-1", "'x'"]),
        ("max_attempts", &["6", "0", "'five'", "2.5"]),
        (
            "run_at",
            &["1767225600000", "1767225600", "'2020-01-01'", "1.5e15", "0"],
        ),
        ("created_at", &["1767225600000", "'yesterday'", "5"]),
        ("timeout_ms", &["NULL", "0", "'10s'", "2.5", "100"]),
        ("idempotency_key", &["NULL", "'k'", "x'6b'"]),
        ("group_key", &["NULL", "'g'", "x'67'"]),
        (
            "expires_at",
            &[
                "NULL",
                "1767225600001",
                "1767225600",
                "'tomorrow'",
                "2.5",
                "1.5e15",
            ],
        ),
    ];
    write(&db, |tx| {
        tx.conn
            .execute_batch("PRAGMA ignore_check_constraints = ON")?;
        let columns: Vec<&str> = odd.iter().map(|(c, _)| *c).collect();
        // Each column's odd values against the others' first (valid) value, and a few
        // rows breaking two rules at once.
        let mut rows: Vec<Vec<&str>> = Vec::new();
        // The one odd value of each row (`None` for a row breaking two rules).
        let mut odd_values: Vec<Option<&str>> = Vec::new();
        for (i, (_, values)) in odd.iter().enumerate() {
            for v in *values {
                let mut row: Vec<&str> = odd.iter().map(|(_, vs)| vs[0]).collect();
                row[i] = v;
                rows.push(row);
                odd_values.push(Some(v));
            }
        }
        let mut both: Vec<&str> = odd.iter().map(|(_, vs)| vs[0]).collect();
        both[2] = "x'7b7d'";
        both[6] = "'2020-01-01'";
        rows.push(both);
        odd_values.push(None);
        for row in &rows {
            tx.conn.execute(
                &format!(
                    "INSERT INTO jobs ({}, updated_at) VALUES ({}, 1767225600000)",
                    columns.join(", "),
                    row.join(", ")
                ),
                [],
            )?;
        }
        tx.conn
            .execute_batch("PRAGMA ignore_check_constraints = OFF")?;
        let ids: Vec<(i64, Option<String>)> = tx
            .conn
            .prepare(&format!(
                "SELECT id, {RULE_BROKEN_SQL} FROM jobs ORDER BY id"
            ))?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        assert_eq!(ids.len(), rows.len());
        // The claim's own reading (on a connection with the rules off) finds the same
        // rows, naming the column the SQL names first.
        let claimed_sql = format!(
            "SELECT {} FROM jobs j ORDER BY j.id",
            CLAIMED_COLUMNS.replace("LEASE", "0")
        );
        let defects: Vec<Option<String>> = tx
            .conn
            .prepare(&claimed_sql)?
            .query_map([], |r| read_claimed(r, 1 << 16).map(|c| c.defect))?
            .collect::<rusqlite::Result<_>>()?;
        for (((row, (_, broken)), defect), value) in
            rows.iter().zip(&ids).zip(&defects).zip(&odd_values)
        {
            match (broken, defect) {
                (None, None) => {}
                (Some(why), Some(defect)) => {
                    let column = why
                        .split_whitespace()
                        .nth(1)
                        .expect("the SQL names a column");
                    assert!(defect.contains(column), "{row:?}: {why} / {defect}");
                    if value.is_some_and(|v| v.parse::<i64>().is_ok() || v == "''") {
                        assert_eq!(defect, why, "{row:?}");
                    }
                }
                _ => panic!("row {row:?}: RULE_BROKEN_SQL says {broken:?}, the claim {defect:?}"),
            }
        }
        for ((id, broken), row) in ids.into_iter().zip(&rows) {
            let moved = tx
                .conn
                .execute("UPDATE jobs SET status = 'running' WHERE id = ?1", [id]);
            match (&moved, &broken) {
                (Ok(_), None) => {}
                (Err(e), Some(why)) => assert!(
                    e.to_string().contains("CHECK constraint failed"),
                    "{row:?}: {e} ({why})"
                ),
                _ => panic!(
                    "row {row:?}: the CHECK rules say {moved:?} but RULE_BROKEN_SQL says {broken:?}"
                ),
            }
        }
        Ok(())
    })
    .expect("the comparison runs");
}

/// What a claim makes of a row's timeout and payload size at the edges: a timeout of
/// 1 ms and a payload exactly at the limit run; a timeout of 0 (possible only with the
/// checks switched off) and one byte over the limit make the job defective.
#[test]
fn claim_defects_at_the_edges_of_timeout_and_payload_size() {
    let db = db();
    write(&db, |tx| {
        tx.conn
            .execute_batch("PRAGMA ignore_check_constraints = ON")?;
        let insert = |timeout: i64, payload: &str| -> rusqlite::Result<i64> {
            tx.conn.execute(
                "INSERT INTO jobs (job_type, payload, timeout_ms, run_at, created_at)
                 VALUES ('t', ?1, ?2, ?3, ?3)",
                params![payload, timeout, T0],
            )?;
            Ok(tx.conn.last_insert_rowid())
        };
        let limit = "{\"s\": \"xxxxxxxxxx\"}";
        let one_ms = insert(1, "{}")?;
        let zero_ms = insert(0, "{}")?;
        let at_limit = insert(1_000, limit)?;
        let over = insert(1_000, &format!("{limit} "))?;
        let types = ["t".to_string()];
        let req = ClaimRequest {
            limit: 10,
            above_priority: None,
            max_payload_bytes: limit.len(),
            ..t_jobs(&types, "A")
        };
        let claimed = tx.claim(&req, T0)?;
        let defect = |id: i64| {
            claimed
                .rows
                .iter()
                .find(|r| r.id == id)
                .map(|r| r.defect.clone())
                .expect("claimed")
        };
        assert_eq!(defect(one_ms), None);
        assert_eq!(defect(at_limit), None);
        assert!(defect(zero_ms).is_some_and(|d| d.contains("column timeout_ms")));
        assert!(defect(over).is_some_and(|d| d.contains("over this worker's limit")));
        Ok(())
    })
    .expect("the edge scenario runs");
}
