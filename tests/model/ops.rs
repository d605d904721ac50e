//! The operations a generated sequence is made of, and their strategies.

use super::*;

/// What one handler call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Behaviour {
    Succeed,
    Retry,
    /// `JobError::retry_after` this many seconds.
    RetryAfter(u8),
    Permanent,
    /// `JobError::snooze` this many seconds.
    Snooze(u8),
    Cancel,
    Panic,
    /// `ctx.heartbeat()`, then succeed if it held.
    Heartbeat,
    /// Moves the clock past this attempt's lease and runs the reaper, then returns `Ok`.
    Hang,
}

#[derive(Debug, Clone)]
pub(super) struct JobSpec {
    pub(super) key: Option<u8>,
    pub(super) group: Option<u8>,
    pub(super) priority: i64,
    pub(super) delay_s: Option<u8>,
    pub(super) max_attempts: u32,
    pub(super) timeout_s: Option<u8>,
    pub(super) script: Vec<Behaviour>,
}

#[derive(Debug, Clone)]
pub(super) enum Op {
    Enqueue(JobSpec),
    /// Enqueues with the idempotency key of an earlier job (a dead one when there is one):
    /// the same logical job again.
    EnqueueAgain(u16, JobSpec),
    EnqueueBatch(Vec<JobSpec>),
    Drain,
    Advance(u32),
    /// A worker claims the first claimable job and dies.
    Crash,
    Reap,
    Cancel(u16),
    RetryNow(u16),
    Requeue(u16),
    Discard(u16),
    /// Prune jobs finished more than this many seconds ago.
    Prune(u8),
    Pause,
    Resume,
}

pub(super) fn behaviour() -> impl Strategy<Value = Behaviour> {
    prop_oneof![
        6 => Just(Behaviour::Succeed),
        4 => Just(Behaviour::Retry),
        1 => (1u8..=5).prop_map(Behaviour::RetryAfter),
        2 => Just(Behaviour::Permanent),
        2 => (1u8..=5).prop_map(Behaviour::Snooze),
        1 => Just(Behaviour::Cancel),
        1 => Just(Behaviour::Panic),
        3 => Just(Behaviour::Heartbeat),
        3 => Just(Behaviour::Hang),
    ]
}

pub(super) fn job_spec() -> impl Strategy<Value = JobSpec> {
    (
        prop::option::weighted(0.5, 0u8..3),
        prop::option::weighted(0.4, 0u8..2),
        0i64..=1,
        prop::option::weighted(0.3, 0u8..=3),
        1u32..=3,
        prop::option::weighted(0.3, 1u8..=5),
        prop::collection::vec(behaviour(), 0..4),
    )
        .prop_map(
            |(key, group, priority, delay_s, max_attempts, timeout_s, script)| JobSpec {
                key,
                group,
                priority,
                delay_s,
                max_attempts,
                timeout_s,
                script,
            },
        )
}

pub(super) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => job_spec().prop_map(Op::Enqueue),
        2 => (any::<u16>(), job_spec()).prop_map(|(i, spec)| Op::EnqueueAgain(i, spec)),
        2 => prop::collection::vec(job_spec(), 1..4).prop_map(Op::EnqueueBatch),
        6 => Just(Op::Drain),
        3 => (100u32..5_000).prop_map(Op::Advance),
        2 => (5_000u32..70_000).prop_map(Op::Advance),
        2 => Just(Op::Crash),
        2 => Just(Op::Reap),
        2 => any::<u16>().prop_map(Op::Cancel),
        2 => any::<u16>().prop_map(Op::RetryNow),
        2 => any::<u16>().prop_map(Op::Requeue),
        1 => any::<u16>().prop_map(Op::Discard),
        2 => (0u8..=90).prop_map(Op::Prune),
        1 => Just(Op::Pause),
        1 => Just(Op::Resume),
    ]
}

pub(super) fn key_name(k: u8) -> String {
    format!("key-{k}")
}

pub(super) fn group_name(g: u8) -> String {
    format!("group-{g}")
}

pub(super) fn new_job(spec: &JobSpec) -> NewJob {
    let mut job = NewJob::new(JOB_TYPE, json!({}))
        .priority(spec.priority)
        .max_attempts(spec.max_attempts);
    if let Some(k) = spec.key {
        job = job.idempotency_key(key_name(k));
    }
    if let Some(g) = spec.group {
        job = job.group_key(group_name(g));
    }
    if let Some(s) = spec.delay_s {
        job = job.delay(Duration::from_secs(u64::from(s)));
    }
    if let Some(s) = spec.timeout_s {
        job = job.timeout(Duration::from_secs(u64::from(s)));
    }
    job
}
