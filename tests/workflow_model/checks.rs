//! What is compared with the model after every step, and what must hold at the end.

use super::*;

/// A job as compared with the model.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: JobStatus,
    by_dependency: bool,
    waiting_for: i64,
    attempts: i64,
    max_attempts: i64,
    requeued_as: Option<i64>,
    /// The time it is due at (once released, for a held job); only while it waits.
    due_at: Option<i64>,
}

fn expected(job: &MJob) -> Seen {
    Seen {
        status: job.status,
        by_dependency: job.by_dependency,
        waiting_for: job.waiting_for(),
        attempts: i64::from(job.attempts),
        max_attempts: i64::from(job.max_attempts),
        requeued_as: job.requeued_as,
        due_at: matches!(job.status, JobStatus::Queued | JobStatus::Failed).then_some(job.run_at),
    }
}

/// Jobs whose row breaks the rule of held jobs: `waiting_for` below 0, or `run_at` at the
/// far-future mark, or `held_run_at` set, other than exactly while queued with waits left.
fn bad_holds() -> String {
    format!(
        "FROM jobs WHERE waiting_for < 0
            OR (run_at = {HELD_RUN_AT}) <> (status = 'queued' AND waiting_for > 0)
            OR (held_run_at IS NOT NULL) <> (status = 'queued' AND waiting_for > 0)"
    )
}

/// Compares every job and batch with the model, and checks the table's own rules.
pub(super) fn check(model: &Model, real: &Real, at: &str) {
    let queue = &real.env.queue;
    assert_eq!(
        real.env.count_jobs(),
        model.jobs.len() as i64,
        "{at}: jobs in the table vs the model"
    );
    for (&id, job) in &model.jobs {
        let record = queue
            .job(id)
            .expect("reading a job")
            .unwrap_or_else(|| panic!("{at}: job {id} was lost"));
        let seen = Seen {
            status: record.status,
            by_dependency: record.status == JobStatus::Cancelled
                && record.cancelled_by.as_deref() == Some("dependency"),
            waiting_for: record.waiting_for,
            attempts: record.attempts,
            max_attempts: record.max_attempts,
            requeued_as: record.requeued_as,
            due_at: matches!(record.status, JobStatus::Queued | JobStatus::Failed)
                .then_some(record.run_at),
        };
        assert_eq!(
            seen,
            expected(job),
            "{at}: job {id} ({:?}, cancel reason {:?}): the table vs the model {job:?}",
            job.role,
            record.cancel_reason
        );
    }
    for group in &model.groups {
        let info = queue
            .workflow(group.id)
            .expect("reading a workflow")
            .unwrap_or_else(|| panic!("{at}: workflow {} is gone", group.id));
        assert_eq!(info.open, group.open, "{at}: workflow {} open", group.id);
        let ids: Vec<i64> = info.steps.iter().map(|s| s.id).collect();
        assert_eq!(ids, group.jobs, "{at}: the jobs of workflow {}", group.id);
    }
    let bad = real
        .env
        .sql_i64(&format!("SELECT count(*) {}", bad_holds()));
    if bad > 0 {
        let id = real.env.sql_i64(&format!("SELECT min(id) {}", bad_holds()));
        panic!(
            "{at}: {bad} rows break the rule of held jobs, job {id} first: {:?}",
            queue.job(id)
        );
    }
}

/// At the end: every job has ended; each job's handler succeeded once if it ended
/// succeeded and never otherwise; each callback was enqueued once (again only by a person's
/// requeue), and ended as its batch's members say.
pub(super) fn check_the_end(model: &Model, real: &Real, seed: u64) {
    let at = format!("seed {seed}, at the end");
    for (id, job) in &model.jobs {
        assert!(ended(job.status), "{at}: job {id} never ended: {job:?}");
    }
    let calls = lock(&real.shared.calls).clone();
    for (&id, job) in &model.jobs {
        let successes = calls
            .iter()
            .filter(|c| c.id == id && c.outcome == Outcome::Succeed)
            .count();
        assert_eq!(
            successes,
            usize::from(job.status == JobStatus::Succeeded),
            "{at}: job {id} ({:?}, {:?}) returned success {successes} times",
            job.role,
            job.status
        );
    }
    for (g, group) in model.groups.iter().enumerate() {
        if !group.batch {
            continue;
        }
        let info = real
            .env
            .queue
            .workflow(group.id)
            .expect("reading a batch")
            .expect("the batch");
        let all_succeeded = group
            .members
            .iter()
            .all(|&m| model.job(model.latest(m)).status == JobStatus::Succeeded);
        for (name, success) in [("on_success", true), ("on_complete", false)] {
            let callbacks: Vec<i64> = group
                .jobs
                .iter()
                .copied()
                .filter(|&id| model.job(id).role == Role::Callback { group: g, success })
                .collect();
            let rows = info
                .steps
                .iter()
                .filter(|s| s.step.as_deref() == Some(name))
                .count();
            assert_eq!(
                rows,
                callbacks.len(),
                "{at}: batch {}: {name} enqueued once, again only by a requeue",
                group.id
            );
            let Some(&first) = callbacks.first() else {
                continue;
            };
            let last = model.job(model.latest(first));
            if success && last.status == JobStatus::Succeeded {
                assert!(
                    all_succeeded,
                    "{at}: batch {}: on_success ran though a member did not succeed",
                    group.id
                );
            }
            if last.by_dependency {
                assert!(
                    success && !all_succeeded,
                    "{at}: batch {}: {name} cancelled by a member though {}",
                    group.id,
                    if success {
                        "every member succeeded"
                    } else {
                        "it waits for any outcome"
                    }
                );
            }
        }
    }
}
