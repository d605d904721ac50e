//! What is compared with the model, and what must hold in the table whatever happened.

use super::*;

/// A stored job as the checks read it.
#[derive(Debug, PartialEq)]
pub(super) struct Row {
    pub(super) status: String,
    pub(super) attempts: i64,
    pub(super) max_attempts: i64,
    pub(super) priority: i64,
    pub(super) run_at: i64,
    pub(super) locked_until: Option<i64>,
    pub(super) requeued_as: Option<i64>,
}

/// Compares every job with the model, then checks the invariants on the table itself.
pub(super) fn check(model: &Model, real: &mut Real) {
    let conn = &mut real.check;
    let total: i64 = conn.count("SELECT COUNT(*) FROM jobs");
    assert_eq!(
        total,
        model.jobs.len() as i64,
        "jobs in the table vs the model"
    );
    for &id in &model.gone {
        let there: Option<i64> = conn.job_id(id);
        assert_eq!(
            there, None,
            "job {id} was pruned or discarded but is still there"
        );
    }
    for (&id, job) in &model.jobs {
        let (row, locked_by, updated_at) = conn
            .job(id)
            .unwrap_or_else(|| panic!("job {id} was lost: the model has it, the table does not"));
        let expected = Row {
            status: job.status.as_str().to_string(),
            attempts: job.attempts,
            max_attempts: job.max_attempts,
            priority: job.priority,
            run_at: job.run_at,
            locked_until: job.locked_until,
            requeued_as: job.requeued_as,
        };
        assert_eq!(row, expected, "job {id}: the table vs the model {job:?}");
        if matches!(job.status, JobStatus::Succeeded | JobStatus::Cancelled) {
            // What prune compares with its cutoff.
            assert_eq!(updated_at, job.finished, "job {id}: when it finished");
        }
        let holder = locked_by.as_deref().map(|w| {
            if w == CRASHED {
                Holder::Crashed
            } else {
                assert!(w.starts_with("drain:"), "job {id} locked by {w:?}");
                Holder::Drain
            }
        });
        assert_eq!(holder, job.holder, "job {id}: lease holder");
        let history: Vec<(i64, String)> = real
            .queue
            .attempts(id)
            .expect("reading the history")
            .into_iter()
            .map(|a| (a.attempt, a.outcome.to_string()))
            .collect();
        assert_eq!(history, job.history, "job {id}: attempt history");
    }
    invariants(&mut real.check);
    check_changes(real);
}

/// What must hold in the table whatever the operations were.
pub(super) fn invariants(conn: &mut Raw) {
    let mut count = |sql: &str| -> i64 { conn.count(sql) };
    assert_eq!(
        count("SELECT COUNT(*) FROM jobs WHERE attempts > max_attempts OR attempts < 0"),
        0,
        "attempts never exceed max_attempts"
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM (SELECT idempotency_key FROM jobs
              WHERE idempotency_key IS NOT NULL
                AND status IN ('queued', 'running', 'failed', 'succeeded')
              GROUP BY idempotency_key HAVING COUNT(*) > 1) AS dup"
        ),
        0,
        "idempotency keys are unique among live and succeeded jobs"
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM (SELECT group_key FROM jobs
              WHERE group_key IS NOT NULL AND status = 'running'
              GROUP BY group_key HAVING COUNT(*) > 1) AS dup"
        ),
        0,
        "at most one running job per group key"
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM jobs WHERE (status = 'running') !=
                 (locked_by IS NOT NULL AND locked_until IS NOT NULL)
              OR (status != 'running' AND (locked_by IS NOT NULL OR locked_until IS NOT NULL))"
        ),
        0,
        "a running job has exactly one lease (holder and expiry); no other job has one"
    );
}

/// The transitions of `JobStatus` (its diagram), plus the operator's documented ones:
/// `Queue::cancel` of a waiting or running job, and `Queue::retry_now` of a dead one. `keeps_newest`:
/// the backend keeps its newest job rather than delete it (SQLite; see
/// [`keeps_newest_job`]).
pub(super) fn transition_allowed(from: &str, to: &str, keeps_newest: bool) -> bool {
    matches!(
        (from, to),
        ("queued", "running")
            | ("queued", "cancelled")
            | ("running", "succeeded")
            | ("running", "failed")
            | ("running", "dead")
            | ("running", "queued")
            | ("running", "cancelled")
            | ("failed", "running")
            | ("failed", "cancelled")
            | ("dead", "failed")
    ) || (
        // Discard of the newest job, which is kept (ids are never reused).
        keeps_newest && (from, to) == ("dead", "cancelled")
    )
}

pub(super) type Change = (
    i64,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<i64>,
);

/// Every status, holder and attempts change since the last step, one by one.
pub(super) fn check_changes(real: &mut Real) {
    let changes: Vec<Change> = real.check.changes_since(real.changes_seen);
    for change in &changes {
        let (seq, id, old, new, old_by, new_by, old_attempts, new_attempts) = change;
        real.changes_seen = *seq;
        match (old.as_deref(), new.as_deref()) {
            (None, Some(new)) => {
                assert_eq!(
                    (new, new_by.as_deref(), *new_attempts),
                    ("queued", None, Some(0)),
                    "job {id} was inserted other than queued, unleased, unattempted: {change:?}"
                );
            }
            (Some(old), None) => assert!(
                matches!(old, "succeeded" | "cancelled" | "dead"),
                "job {id} was deleted while {old}: only finished jobs may be pruned and dead \
                 ones discarded: {change:?}"
            ),
            (Some(old), Some(new)) => {
                assert!(
                    transition_allowed(old, new, keeps_newest_job()),
                    "job {id}: {old} -> {new} is not a transition of the state machine (a \
                     lease handed over while running, or attempts changed in place): {change:?}"
                );
                let expected_attempts = match (old, new) {
                    (_, "running") => old_attempts.map(|a| a + 1),
                    ("running", "queued") => old_attempts.map(|a| a - 1),
                    _ => *old_attempts,
                };
                assert_eq!(
                    *new_attempts, expected_attempts,
                    "job {id}: attempts across {old} -> {new}: {change:?}"
                );
                assert_eq!(
                    new_by.is_some(),
                    new == "running",
                    "job {id}: a lease holder exactly while running: {change:?}"
                );
                if old == "running" {
                    assert!(
                        old_by.is_some(),
                        "job {id} ran without a holder: {change:?}"
                    );
                }
            }
            (None, None) => unreachable!("a change has a side"),
        }
    }
}
