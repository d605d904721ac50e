//! The operations a seed's sequence is made of, and how a seed draws them.

use super::*;

/// What one handler call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Succeed,
    /// `JobError::retry`: due again after the schedule's delay, or dead with attempts spent.
    Retry,
    /// `JobError::permanent`: dead.
    Permanent,
    /// `JobError::cancel`: the handler cancels its job.
    Cancel,
    /// The lease runs out while the handler is still in it: the reaper takes the job, then
    /// the handler returns `Ok`, too late.
    LoseLease,
}

/// A job to create: its attempts, a delay, and what its handler does attempt by attempt.
#[derive(Debug, Clone)]
pub(super) struct JobSpec {
    pub(super) max_attempts: u32,
    pub(super) delay_s: Option<u8>,
    pub(super) script: Vec<Outcome>,
}

/// A step of a generated workflow: it may wait for steps before it (so the graph has no
/// cycle), each on success or on any outcome, and for one job of the table by id.
#[derive(Debug, Clone)]
pub(super) struct StepSpec {
    pub(super) job: JobSpec,
    /// (index of an earlier step, any outcome).
    pub(super) after: Vec<(usize, bool)>,
    /// (a pick among the table's jobs, any outcome).
    pub(super) after_job: Option<(u64, bool)>,
}

#[derive(Debug, Clone)]
pub(super) struct FlowSpec {
    pub(super) steps: Vec<StepSpec>,
    /// The order the steps are declared in (a step may wait for one declared later).
    pub(super) order: Vec<usize>,
}

/// The picks (`u64`) choose among what the model has at that moment.
#[derive(Debug, Clone)]
pub(super) enum Op {
    Flow(FlowSpec),
    OpenBatch {
        on_success: Option<JobSpec>,
        on_complete: Option<JobSpec>,
    },
    AddToBatch(u64, Vec<JobSpec>),
    CloseBatch(u64),
    SubmitBatch {
        on_success: Option<JobSpec>,
        on_complete: Option<JobSpec>,
        members: Vec<JobSpec>,
    },
    Drain,
    Advance(u32),
    /// A worker claims a due job and dies.
    Crash(u64),
    Reap,
    Cancel(u64),
    CancelWorkflow(u64),
    /// Requeues a dead job; the new job runs this script.
    Requeue(u64, Vec<Outcome>),
    RetryNow(u64),
}

fn chance(rng: &mut Prng, percent: u64) -> bool {
    rng.range(0, 99) < percent
}

fn outcome(rng: &mut Prng) -> Outcome {
    match rng.range(0, 11) {
        0..=4 => Outcome::Succeed,
        5..=7 => Outcome::Retry,
        8..=9 => Outcome::Permanent,
        10 => Outcome::Cancel,
        _ => Outcome::LoseLease,
    }
}

pub(super) fn script(rng: &mut Prng) -> Vec<Outcome> {
    let n = rng.range(0, 3);
    (0..n).map(|_| outcome(rng)).collect()
}

fn job_spec(rng: &mut Prng) -> JobSpec {
    JobSpec {
        max_attempts: rng.range(1, 3) as u32,
        delay_s: chance(rng, 15).then(|| rng.range(1, 5) as u8),
        script: script(rng),
    }
}

fn flow_spec(rng: &mut Prng) -> FlowSpec {
    let n = rng.range(1, 6) as usize;
    let steps = (0..n)
        .map(|i| {
            let job = job_spec(rng);
            let waited: Vec<usize> = (0..i).filter(|_| chance(rng, 40)).collect();
            StepSpec {
                job,
                after: waited.into_iter().map(|j| (j, chance(rng, 25))).collect(),
                after_job: chance(rng, 15).then(|| (rng.next_u64(), chance(rng, 25))),
            }
        })
        .collect();
    // A seeded shuffle of the declaration order.
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.range(0, i as u64) as usize);
    }
    FlowSpec { steps, order }
}

fn callback(rng: &mut Prng) -> Option<JobSpec> {
    chance(rng, 70).then(|| job_spec(rng))
}

pub(super) fn op(rng: &mut Prng) -> Op {
    match rng.range(0, 99) {
        0..=13 => Op::Flow(flow_spec(rng)),
        14..=19 => Op::OpenBatch {
            on_success: callback(rng),
            on_complete: callback(rng),
        },
        20..=29 => {
            let n = rng.range(1, 3);
            Op::AddToBatch(rng.next_u64(), (0..n).map(|_| job_spec(rng)).collect())
        }
        30..=34 => Op::CloseBatch(rng.next_u64()),
        35..=37 => {
            let n = rng.range(0, 3);
            Op::SubmitBatch {
                on_success: callback(rng),
                on_complete: callback(rng),
                members: (0..n).map(|_| job_spec(rng)).collect(),
            }
        }
        38..=55 => Op::Drain,
        56..=62 => Op::Advance(rng.range(500, 5_000) as u32),
        63..=65 => Op::Advance(rng.range(5_000, 20_000) as u32),
        66..=70 => Op::Crash(rng.next_u64()),
        71..=74 => Op::Reap,
        75..=80 => Op::Cancel(rng.next_u64()),
        81..=83 => Op::CancelWorkflow(rng.next_u64()),
        84..=91 => Op::Requeue(rng.next_u64(), script(rng)),
        _ => Op::RetryNow(rng.next_u64()),
    }
}

/// The job the real side creates for a spec; `n` makes each payload distinct.
pub(super) fn new_job(spec: &JobSpec, n: usize) -> NewJob {
    let mut job = NewJob::new(JOB_TYPE, json!({ "n": n })).max_attempts(spec.max_attempts);
    if let Some(s) = spec.delay_s {
        job = job.delay(Duration::from_secs(u64::from(s)));
    }
    job
}

pub(super) fn step_name(i: usize) -> String {
    format!("s{i}")
}
