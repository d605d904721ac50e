//! Unit tests of [`DependencyStore`] on PostgreSQL (the parts the triggers leave to code:
//! what an insert of waits settled, the read-back after jobs end, reviving dependants after a
//! requeue, a batch's holds, stragglers) and of the cascade the triggers run.

use super::{Pg, NOW};
use crate::error::ErrorKind;
use crate::storage::jobs::deps::{DependencyStore, Settled, HELD_RUN_AT};
use crate::storage::postgres::sql::{query, TextRow};

fn edge(job_id: i64, depends_on: i64) -> (i64, i64, bool) {
    (job_id, depends_on, false)
}

#[test]
fn adding_waits_holds_or_settles_and_reports_the_cancelled() {
    let Some(mut pg) = Pg::new() else { return };
    let (a, b, c, dead) = (pg.job(), pg.job(), pg.job(), pg.job());
    pg.end(dead, "dead", NOW);
    let settled = pg.add(&[edge(b, a), edge(b, a)], NOW + 1).expect("add");
    assert_eq!(settled, Settled::default());
    assert_eq!(
        (pg.waiting_for(b), pg.run_at(b)),
        (1, HELD_RUN_AT),
        "held once"
    );
    // c waits for b; then b for a dead job: b is cancelled, and c through it.
    pg.add(&[edge(c, b)], NOW + 1).expect("add");
    let settled = pg.add(&[edge(b, dead)], NOW + 2).expect("add");
    assert_eq!(settled.cancelled, vec![b, c]);
    assert!(settled.released.is_empty());
    assert_eq!(
        (pg.status(b), pg.status(c)),
        ("cancelled".into(), "cancelled".into())
    );
    assert_eq!(
        pg.int(&format!("SELECT finished_at AS v FROM jobs WHERE id = {c}")),
        NOW + 2,
        "at litejobs' time, not the server's"
    );
    assert_eq!(pg.run_at(c), NOW, "its own run_at back");
    // The setting carrying the time is gone after the insert.
    let left = pg
        .write(|tx| {
            tx.row::<TextRow>(query(
                "SELECT COALESCE(current_setting('litejobs.now_ms', true), '') AS v",
            ))
        })
        .expect("setting")
        .map(|r| r.v);
    assert_eq!(left.as_deref(), Some(""));
}

#[test]
fn waits_that_cannot_hold_are_refused_with_the_sqlite_kinds() {
    let Some(mut pg) = Pg::new() else { return };
    let (a, b, c) = (pg.job(), pg.job(), pg.job());
    pg.end(c, "succeeded", NOW);
    let kind =
        |pg: &mut Pg, edges: &[(i64, i64, bool)]| pg.add(edges, NOW).expect_err("refused").kind();
    assert_eq!(kind(&mut pg, &[edge(a, a)]), ErrorKind::InvalidJob);
    assert_eq!(kind(&mut pg, &[edge(a, 999_999)]), ErrorKind::NotFound);
    assert_eq!(kind(&mut pg, &[edge(999_999, a)]), ErrorKind::NotFound);
    assert_eq!(kind(&mut pg, &[edge(c, a)]), ErrorKind::InvalidState);
    pg.add(&[edge(b, a)], NOW).expect("b waits for a");
    let err = pg.add(&[edge(a, b)], NOW).expect_err("a circle");
    assert_eq!(err.kind(), ErrorKind::InvalidState, "{err}");
    assert!(err.to_string().contains("circle"), "{err}");
    assert_eq!(pg.waiting_for(a), 0, "the refused insert left nothing");
}

#[test]
fn what_ending_jobs_settled_is_read_back() {
    let Some(mut pg) = Pg::new() else { return };
    let (a, b, x, y, z) = (pg.job(), pg.job(), pg.job(), pg.job(), pg.job());
    pg.add(&[edge(b, a), edge(y, x), edge(z, y)], NOW)
        .expect("add");
    // z was cancelled before, by another wait of its own that failed.
    let other = pg.job();
    pg.end(other, "dead", NOW + 5);
    pg.add(&[edge(z, other)], NOW + 5).expect("add");
    assert_eq!(pg.status(z), "cancelled");
    pg.end(a, "succeeded", NOW + 10);
    pg.end(x, "dead", NOW + 10);
    let settled = pg
        .write(|tx| tx.settle_dependants(&[a, x, i64::MAX], NOW + 10))
        .expect("settle");
    assert_eq!(settled.released, vec![b]);
    assert_eq!(settled.cancelled, vec![y], "z had been cancelled before");
    assert_eq!(pg.run_at(b), NOW, "released at its own time");
    assert_eq!(
        pg.write(|tx| tx.settle_dependants(&[], NOW)).expect("none"),
        Settled::default()
    );
}

#[test]
fn a_requeued_dependency_brings_its_cancelled_dependants_back() {
    let Some(mut pg) = Pg::new() else { return };
    let (a, b, c, d) = (pg.job(), pg.job(), pg.job(), pg.job());
    pg.add(&[edge(b, a), edge(c, b), edge(d, a), edge(d, c)], NOW)
        .expect("add");
    pg.end(a, "dead", NOW + 1);
    for id in [b, c, d] {
        assert_eq!(pg.status(id), "cancelled", "job {id}");
    }
    let cancelled =
        || "SELECT COALESCE(SUM(n), 0)::bigint AS v FROM job_counts WHERE status = 'cancelled'";
    assert_eq!(pg.int(cancelled()), 3);
    // The requeue's new job stands in for a.
    let a2 = pg.job();
    let revived = pg
        .write(|tx| tx.revive_dependants(a, a2, NOW + 2))
        .expect("revive");
    assert_eq!(revived, vec![b, c, d]);
    assert_eq!(pg.int(cancelled()), 0, "the counts follow");
    for (id, waits) in [(b, 1), (c, 1), (d, 2)] {
        assert_eq!(pg.status(id), "queued", "job {id}");
        assert_eq!(
            (pg.waiting_for(id), pg.run_at(id)),
            (waits, HELD_RUN_AT),
            "job {id}"
        );
    }
    assert_eq!(
        pg.int(&format!(
            "SELECT COUNT(*) AS v FROM job_deps WHERE depends_on = {a2} AND state = 'pending'"
        )),
        2
    );
    // Now the chain runs through: a2, then b, then c, then d.
    pg.end(a2, "succeeded", NOW + 3);
    assert_eq!((pg.run_at(b), pg.waiting_for(d)), (NOW, 1));
    pg.end(b, "succeeded", NOW + 4);
    pg.end(c, "succeeded", NOW + 5);
    assert_eq!((pg.waiting_for(d), pg.run_at(d)), (0, NOW));
}

#[test]
fn a_batch_holds_its_callbacks_until_it_is_closed() {
    let Some(mut pg) = Pg::new() else { return };
    let (member, callback) = (pg.job(), pg.job());
    pg.write(|tx| tx.hold(&[callback], 1, NOW)).expect("hold");
    pg.add(&[edge(callback, member)], NOW).expect("add");
    assert_eq!(pg.waiting_for(callback), 2);
    pg.end(member, "succeeded", NOW + 1);
    assert_eq!(
        (pg.waiting_for(callback), pg.run_at(callback)),
        (1, HELD_RUN_AT)
    );
    let settled = pg
        .write(|tx| tx.unhold(&[callback], NOW + 2))
        .expect("unhold");
    assert_eq!(settled.released, vec![callback]);
    assert_eq!((pg.waiting_for(callback), pg.run_at(callback)), (0, NOW));
    let again = pg
        .write(|tx| tx.unhold(&[callback], NOW + 3))
        .expect("unhold");
    assert_eq!(again, Settled::default(), "released once");
}

#[test]
fn stragglers_left_by_a_status_changed_without_triggers_are_settled() {
    let Some(mut pg) = Pg::new() else { return };
    let (a, b, x, y) = (pg.job(), pg.job(), pg.job(), pg.job());
    pg.add(&[edge(b, a), edge(y, x)], NOW).expect("add");
    // As a restore or a replica would write them (needs a superuser, as the test server's is).
    pg.exec(&format!(
        "SET session_replication_role = replica;
         UPDATE jobs SET status = 'succeeded' WHERE id = {a};
         UPDATE jobs SET status = 'dead' WHERE id = {x};
         SET session_replication_role = DEFAULT;"
    ));
    assert_eq!(pg.run_at(b), HELD_RUN_AT, "the triggers did not run");
    let settled = pg
        .write(|tx| tx.settle_stragglers(10, NOW + 7))
        .expect("stragglers");
    assert_eq!((settled.released, settled.cancelled), (vec![b], vec![y]));
    assert_eq!(pg.run_at(b), NOW);
    assert_eq!(
        pg.int(&format!("SELECT finished_at AS v FROM jobs WHERE id = {y}")),
        NOW + 7
    );
    assert_eq!(
        pg.write(|tx| tx.settle_stragglers(10, NOW + 8))
            .expect("none"),
        Settled::default()
    );
}

/// The cascade runs in a loop, not by each cancelled job's own trigger: nested triggers
/// passed the server's stack depth limit (2 MB by default) between 200 and 500 steps.
#[test]
fn a_long_chain_is_cancelled_to_its_end() {
    let Some(mut pg) = Pg::new() else { return };
    const STEPS: i64 = 1000;
    pg.exec(&format!(
        "INSERT INTO jobs (job_type, payload, run_at, created_at, updated_at)
         SELECT 't', '{{}}', {NOW}, {NOW}, {NOW} FROM generate_series(1, {STEPS})"
    ));
    let first = pg.int("SELECT min(id) AS v FROM jobs");
    let last = first + STEPS - 1;
    pg.exec(&format!(
        "INSERT INTO job_deps (job_id, depends_on)
         SELECT id + 1, id FROM jobs WHERE id < {last} ORDER BY id"
    ));
    pg.end(first, "dead", NOW + 1);
    assert_eq!(
        pg.int("SELECT COUNT(*) AS v FROM jobs WHERE status = 'cancelled' AND finished_at = 1700000000001"),
        STEPS - 1
    );
    assert_eq!(
        pg.write(|tx| {
            tx.row::<TextRow>(query("SELECT cancel_reason AS v FROM jobs WHERE id = $1").int(last))
        })
        .expect("reason")
        .map(|r| r.v),
        Some(format!("dependency job {} ended cancelled", last - 1))
    );
    let settled = pg
        .write(|tx| tx.settle_dependants(&[first], NOW + 1))
        .expect("read back");
    assert_eq!(settled.cancelled.len(), (STEPS - 1) as usize);
}
