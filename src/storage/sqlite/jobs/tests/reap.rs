//! The reaper: only expired leases, attempts spent, counts kept, errors grouped.
use super::{attempt_rows, claim_one, db, write, T0};
use crate::job::NewJob;
use crate::storage::jobs::{InsertStore, ReapStore};

#[test]
fn the_reaper_takes_only_expired_leases_and_spends_the_attempt() {
    let conn = db();
    write(&conn, |tx| {
        let a = tx
            .insert_job(&NewJob::new("t", serde_json::json!({})), "{}", T0)?
            .id;
        let b = tx
            .insert_job(
                &NewJob::new("t", serde_json::json!({})).max_attempts(1),
                "{}",
                T0,
            )?
            .id;
        claim_one(tx, "A", T0);
        claim_one(tx, "A", T0 + 100);
        // a's lease ends at T0 + 1 500, b's at T0 + 1 600.
        assert_eq!(
            tx.reap_expired(T0 + 1_500)?,
            0,
            "a lease ending now is still live"
        );
        assert_eq!(tx.reap_expired(T0 + 1_550)?, 1);
        let status = |id: i64| -> String {
            tx.conn
                .query_row("SELECT status FROM jobs WHERE id = ?1", [id], |r| r.get(0))
                .expect("status")
        };
        assert_eq!((status(a), status(b)), ("failed".into(), "running".into()));
        // The kept counts move with the rows: b's live lease (attempts spent) is not
        // counted lost, nor dead.
        let counts = || -> (i64, i64) {
            let lost = tx
                .conn
                .query_row(
                    "SELECT COALESCE(SUM(n), 0) FROM attempt_counts WHERE outcome = 'lost'",
                    [],
                    |r| r.get(0),
                )
                .expect("lost attempts counted");
            let dead = tx
                .conn
                .query_row(
                    "SELECT COALESCE(SUM(n), 0) FROM job_counts WHERE status = 'dead'",
                    [],
                    |r| r.get(0),
                )
                .expect("dead jobs counted");
            (lost, dead)
        };
        assert_eq!(counts(), (1, 0), "a's lost attempt, nobody dead");
        assert_eq!(tx.reap_expired(T0 + 1_601)?, 1);
        assert_eq!(status(b), "dead", "its one attempt was spent");
        assert_eq!(counts(), (2, 1), "b's lost attempt, and b dead");
        assert_eq!(
            (attempt_rows(tx, a), attempt_rows(tx, b)),
            (1, 1),
            "a lost attempt each"
        );
        // The jobs' errors are made in SQL, and so are their groups: each must be what the
        // fingerprint of the error is, as for an error made in Rust.
        let grouped: Vec<(String, String)> = tx
            .conn
            .prepare("SELECT last_error, error_group FROM jobs WHERE id IN (?1, ?2)")?
            .query_map([a, b], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        assert_eq!(grouped.len(), 2);
        for (error, group) in &grouped {
            assert_eq!(&crate::fingerprint::fingerprint(error), group, "{error}");
        }
        Ok(())
    })
    .expect("the reaper scenario runs");
}
