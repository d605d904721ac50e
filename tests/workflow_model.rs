//! Model-based test of jobs that wait for other jobs: seeded random sequences of operations
//! run through the real library (a real SQLite file, or a PostgreSQL schema on the
//! `LITEJOBS_TEST_BACKEND=postgres` pass; the `ManualClock`; `testing::drain`, so the
//! worker's own claim, executor and completer) and through a small in-memory model, compared
//! after every step.
//!
//! Operations: workflows with random DAGs (fan-in, fan-out, waits on any outcome, waits on
//! jobs of earlier workflows by id, delays), batches opened, filled and closed at random
//! moments or submitted whole (callbacks `on_success` and `on_complete`), drains, clock
//! advances, a worker that claims a job and dies, the reaper, and a person's actions: cancel
//! a job, cancel a workflow or batch, requeue a dead job, retry one now. Each job carries a
//! script of what its handler does attempt by attempt: succeed, fail for a retry, fail for
//! good, cancel itself, or lose its lease (it stays in the handler while its lease runs out
//! and the reaper takes the job: its late result must be discarded).
//!
//! Checked after every step: every job's status, who cancelled it (a dependency or not),
//! `waiting_for`, attempts, due time and requeue against the model; the jobs table holds the
//! model's jobs and nothing else; in the table itself, `waiting_for` is never negative and a
//! job is held (`run_at` 99999999999999, its own in `held_run_at`) exactly while it is
//! queued with waits left. Checked inside every handler call, from what the test built (not
//! from the library's bookkeeping): every job it waits for has succeeded (its latest requeue,
//! if it was requeued) or, for a wait on any outcome, ended; a batch callback starts only
//! once its batch is closed and every member has ended (`on_success`: succeeded), and
//! `JobContext::batch` shows the members and counts it sees in the table. Each drain's
//! handler calls are exactly the model's (no start before its waits are settled, none
//! released twice, none forgotten). At the end, with batches closed and time moving on,
//! every job has ended, and each callback ran exactly once when no attempt of it was lost.
//!
//! Seeded and reproducible: a fixed set of seeds runs in CI (64 on SQLite, the first 16 of
//! them on PostgreSQL); `LITEJOBS_FLOW_SEED=N` replays one, `LITEJOBS_FLOW_SEEDS=N` runs N more
//! random ones. A failing seed is printed.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use litejobs::{
    testing, Batch, ErrorKind, JobContext, JobError, JobStatus, NewJob, RetryPolicy, Step, Worker,
    WorkerBuilder, Workflow,
};
use serde_json::json;

use crate::support::child::Prng;
use crate::support::{setup, TestEnv};

/// The one job type every job of the test has.
const JOB_TYPE: &str = "flow";
/// A held job's `run_at`.
const HELD_RUN_AT: i64 = 99_999_999_999_999;
/// The retry schedule: every retry 2 s after the failed attempt.
const RETRY_MS: i64 = 2_000;
/// The worker's attempt timeout and lease grace (a drain's lease lasts their sum).
const TIMEOUT_MS: i64 = 10_000;
const GRACE_MS: i64 = 1_000;
/// The lease a crashed worker took.
const CRASH_LEASE_MS: i64 = 10_000;
/// Who cancels in the test's person actions.
const PERSON: &str = "ops";
/// Seeds run on every `cargo test`; on the PostgreSQL pass the first of them (each check
/// reads every job over the network there). Which cases the generator reaches does not
/// depend on the backend: the SQLite pass checks it.
const FIXED_SEEDS: u64 = 64;
const FIXED_SEEDS_ON_POSTGRES: u64 = 16;
/// Operations per seed.
const OPS: u64 = 70;

/// Replays this seed alone.
const SEED_VAR: &str = "LITEJOBS_FLOW_SEED";
/// Runs this many more random seeds after the fixed ones.
const SEEDS_VAR: &str = "LITEJOBS_FLOW_SEEDS";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Cases the model tells apart; the test proves that the fixed seeds reach each, so a generator that drifted would not quietly test less.
const COVERAGE: [&str; 24] = [
    "a step released by its last dependency",
    "a step released with a delay still to run",
    "a dependency dead: its dependants cancelled transitively",
    "a wait on any outcome done by a dead or cancelled job",
    "a wait on any outcome waits again for a job brought back",
    "a wait on a job that had already ended",
    "a wait on a job that had already failed: cancelled at once",
    "a dead job requeued: its cancelled dependants wait again",
    "a dead job retried now: its cancelled dependants wait again",
    "a dependant revived while another dependency still failed it",
    "a held job's retry_now refused",
    "a held job cancelled by a person",
    "a workflow cancelled",
    "an open batch cancelled",
    "a batch callback released by the closing",
    "a batch callback released by its last member",
    "on_success cancelled by a dead member",
    "on_success brought back by a requeued member",
    "a member added after on_success was cancelled",
    "on_success brought back waits for the members added meanwhile",
    "a closed batch refuses a member",
    "a worker died holding a job that has dependants",
    "a job reaped dead: its dependants settled",
    "a lost lease's late result discarded",
];

thread_local! {
    static COVERED: std::cell::RefCell<HashMap<&'static str, usize>> =
        std::cell::RefCell::new(HashMap::new());
}

fn cover(case: &'static str) {
    debug_assert!(COVERAGE.contains(&case), "unknown coverage case {case:?}");
    COVERED.with(|c| *c.borrow_mut().entry(case).or_default() += 1);
}

mod checks;
mod ops;
mod real;
mod state;

use checks::*;
use ops::*;
use real::*;
use state::*;

/// Prints the seed when the case panics, so it can be replayed.
struct SeedGuard(u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "workflow model: seed {} failed (replay with {SEED_VAR}={} cargo test --test \
                 integration workflow_model::)",
                self.0, self.0
            );
        }
    }
}

/// One seed: its operations on both sides, compared and checked after each; then batches
/// closed and time moved on until every job has ended, which it must.
fn run_seed(seed: u64) {
    let _guard = SeedGuard(seed);
    let mut rng = Prng::new(seed);
    let ops: Vec<Op> = (0..OPS).map(|_| op(&mut rng)).collect();
    let mut model = Model::new();
    let mut real = Real::new();
    for (i, op) in ops.iter().enumerate() {
        // Shown with a failure (the harness keeps a passing test's output to itself).
        println!("seed {seed}, op {i}: {op:?}");
        step(&mut model, &mut real, op);
        check(&model, &real, &format!("seed {seed}, after op {i} {op:?}"));
    }
    let open: Vec<usize> = (0..model.groups.len())
        .filter(|&g| model.groups[g].open)
        .collect();
    for g in open {
        close_batch(&mut model, &mut real, g);
    }
    for _ in 0..8 {
        for op in [Op::Advance(60_000), Op::Reap, Op::Drain] {
            step(&mut model, &mut real, &op);
        }
    }
    check(&model, &real, &format!("seed {seed}, at the end"));
    check_the_end(&model, &real, seed);
}

/// The seed to replay, if one is given.
fn replay_seed() -> Option<u64> {
    let text = std::env::var(SEED_VAR).ok()?;
    Some(
        text.parse()
            .unwrap_or_else(|e| panic!("{SEED_VAR}={text:?} is not a number: {e}")),
    )
}

/// The fixed seeds (or the one to replay), then as many random ones as asked for. The
/// fixed seeds must reach every case of [`COVERAGE`].
#[test]
fn random_workflows_and_batches_agree_with_the_model_and_keep_their_promises() {
    if let Some(seed) = replay_seed() {
        run_seed(seed);
        return;
    }
    if crate::support::on_postgres() {
        for seed in 1..=FIXED_SEEDS_ON_POSTGRES {
            run_seed(seed);
        }
        run_more_seeds();
        return;
    }
    COVERED.with(|c| c.borrow_mut().clear());
    for seed in 1..=FIXED_SEEDS {
        run_seed(seed);
    }
    let covered = COVERED.with(|c| c.borrow().clone());
    let mut counts: Vec<_> = covered.iter().collect();
    counts.sort_by_key(|(_, n)| **n);
    println!("workflow model coverage of {FIXED_SEEDS} fixed seeds: {counts:?}");
    let missing: Vec<&str> = COVERAGE
        .iter()
        .copied()
        .filter(|case| !covered.contains_key(case))
        .collect();
    assert!(
        missing.is_empty(),
        "the fixed seeds never reached {missing:?}; reached: {covered:#?}"
    );
    run_more_seeds();
}

/// As many random seeds as `LITEJOBS_FLOW_SEEDS` asks for.
fn run_more_seeds() {
    let more: u64 = std::env::var(SEEDS_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if more > 0 {
        let mut rng = Prng::new(Prng::seed_for("workflow model"));
        for _ in 0..more {
            run_seed(rng.next_u64());
        }
    }
}
