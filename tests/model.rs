//! Model-based test of the job life cycle: proptest drives
//! random sequences of operations through the real library (real SQLite file, the
//! `ManualClock`, `testing::drain` for the claim, executor and completer code) and through a
//! small in-memory model, and compares the two after every step.
//!
//! Operations: enqueue (alone or in a batch; idempotency keys, group keys, delays,
//! priorities, timeouts, max attempts), drain, clock advances, a worker that claims a job and
//! dies (a raw `UPDATE` that claims it the way a worker would; the process is gone), reap,
//! cancel, retry now, requeue, discard, prune, pause and resume. Each job carries a script of
//! what its handler does on each call: succeed, retryable error, `retry_after`, permanent
//! error, snooze, cancel, panic, heartbeat, or hang past its lease (the handler moves the
//! clock beyond its own lease and runs the reaper, as a stuck attempt's lease would expire
//! while another worker reaps it: its late result must be discarded).
//!
//! After every step, besides the comparison with the model, invariants are checked on the
//! table itself through a raw connection: no job lost; every status change (recorded by
//! triggers this test adds to the file) follows the state machine documented on
//! `JobStatus`; attempts never exceed max attempts; a running job has exactly one lease
//! holder, never handed to another while running; idempotency keys unique among live and
//! succeeded jobs; at most one running job per group key. Inside each handler call the test
//! also checks that it holds the job's lease and that no other job of its group runs.
//!
//! On the PostgreSQL pass of the test matrix (`LITEJOBS_TEST_BACKEND=postgres`) the real
//! side is a queue in a fresh schema on `LITEJOBS_TEST_PG`, with PL/pgSQL twins of the
//! triggers and raw diesel connections; the model then expects what differs there (see
//! [`keeps_newest_job`]).
//!
//! `PROPTEST_CASES` raises the number of cases (default 24, a few seconds in debug builds).
//! Failures shrink to a minimal sequence and are kept in `proptest-regressions/model.txt`,
//! which is replayed first on every run.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use litejobs::maintenance::PruneOptions;
use litejobs::{
    testing, Discarded, ErrorKind, JobContext, JobError, JobStatus, ManualClock, NewJob, Queue,
    RetryPolicy, Worker, WorkerBuilder,
};
use proptest::prelude::*;
use proptest::test_runner::{
    FileFailurePersistence, RngAlgorithm, TestCaseError, TestRng, TestRunner,
};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::json;
use tempfile::TempDir;

use crate::support::{raw_conn, START_MS};

const JOB_TYPE: &str = "model";
const QUEUE: &str = "default";
/// The type's attempt timeout (jobs may set their own).
const TYPE_TIMEOUT_MS: i64 = 10_000;
/// The worker's lease grace.
const GRACE_MS: i64 = 1_000;
/// The retry schedule: 2 s after the first failed attempt, 7 s after every later one.
const RETRY_MS: [i64; 2] = [2_000, 7_000];
/// How long keys of succeeded jobs are remembered: short, so clock advances cross it.
const WINDOW_MS: i64 = 60_000;
/// `drain` claims this many jobs per round.
const DRAIN_BATCH: usize = 64;
/// The worker id of a worker that claimed a job and died (written by the test's raw claim).
const CRASHED: &str = "crashed-worker";
const LIVE_AND_SUCCEEDED: [JobStatus; 4] = [
    JobStatus::Queued,
    JobStatus::Running,
    JobStatus::Failed,
    JobStatus::Succeeded,
];

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Cases the model can tell apart; [`the_generator_reaches_every_case_the_model_knows`]
/// proves that generated sequences reach each of them, so a generator that drifted would
/// not quietly test less.
const COVERAGE: [&str; 26] = [
    "enqueue returns the live holder of its key",
    "enqueue returns the remembered holder of a pruned job's key",
    "a claim skips a job whose group is busy",
    "a paused queue keeps due jobs waiting",
    "success",
    "retry scheduled",
    "dead after an attempt",
    "snooze",
    "handler cancel",
    "panic",
    "heartbeat under a live lease",
    "heartbeat after the lease was lost",
    "a hung attempt's lease expires and it is reaped",
    "one reap takes several jobs",
    "a late result is discarded by the fence",
    "a worker dies holding a job",
    "reaped and due again",
    "reaped with attempts spent: dead",
    "operator cancel",
    "operator cancel of a running job",
    "retry_now of a dead job",
    "a dead job's key is taken: retry_now and requeue refused",
    "requeue of a dead job",
    "discard of a dead job",
    "discard of the newest job cancels it instead",
    "prune deletes jobs and forgets keys",
];

/// Coverage cases only the SQLite backend can reach (see [`keeps_newest_job`]).
const SQLITE_ONLY_COVERAGE: [&str; 1] = ["discard of the newest job cancels it instead"];

/// True when the backend never deletes the newest job, so that its id is never handed out
/// again: SQLite (`INTEGER PRIMARY KEY` reuses the largest id once its row is gone), where
/// discarding it cancels it instead and prune skips it. On PostgreSQL ids come from a
/// sequence and are never reused: `discard_dead` always deletes and prune takes any
/// finished job.
fn keeps_newest_job() -> bool {
    !crate::support::on_postgres()
}

thread_local! {
    static COVERED: std::cell::RefCell<HashMap<&'static str, usize>> =
        std::cell::RefCell::new(HashMap::new());
}

fn cover(case: &'static str) {
    debug_assert!(COVERAGE.contains(&case), "unknown coverage case {case:?}");
    COVERED.with(|c| *c.borrow_mut().entry(case).or_default() += 1);
}

// The operations and their strategies, the model, the real side, and the checks.
mod checks;
mod ops;
mod raw;
mod real;
mod state;

use checks::*;
use ops::*;
use raw::*;
use real::*;
use state::*;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model.txt",
        ))),
        ..ProptestConfig::default()
    }
}

/// One generated sequence: every step on both sides, compared and checked; then time moves
/// on until every job has finished, which it must.
fn run_case(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut model = Model::new();
    let mut real = Real::new();
    for op in ops {
        step(&mut model, &mut real, op);
        check(&model, &mut real);
    }
    // Whatever happened, every job can still be finished: resume, reap and drain with time
    // moving on, and each job reaches a final status.
    for op in [Op::Resume]
        .into_iter()
        .chain((0..8).flat_map(|_| [Op::Advance(60_000), Op::Reap, Op::Drain]))
    {
        step(&mut model, &mut real, &op);
    }
    check(&model, &mut real);
    for (id, job) in &model.jobs {
        prop_assert!(
            job.status.is_final(),
            "job {} did not finish: {:?}",
            id,
            job
        );
    }
    Ok(())
}

fn sequences() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..60)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_operations_agree_with_the_model_and_keep_the_invariants(ops in sequences()) {
        run_case(&ops)?;
    }
}

#[test]
fn the_generator_reaches_every_case_the_model_knows() {
    COVERED.with(|c| c.borrow_mut().clear());
    // A fixed seed: the same sequences on every run.
    let mut runner = TestRunner::new_with_rng(
        ProptestConfig {
            cases: 64,
            failure_persistence: None,
            ..ProptestConfig::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[42; 32]),
    );
    if let Err(e) = runner.run(&sequences(), |ops| run_case(&ops)) {
        panic!("a fixed-seed sequence failed: {e}");
    }
    let covered = COVERED.with(|c| c.borrow().clone());
    let mut counts: Vec<_> = covered.iter().collect();
    counts.sort_by_key(|(_, n)| **n);
    println!("model coverage of 64 fixed-seed sequences: {counts:?}");
    let missing: Vec<&str> = COVERAGE
        .iter()
        .copied()
        .filter(|case| keeps_newest_job() || !SQLITE_ONLY_COVERAGE.contains(case))
        .filter(|case| !covered.contains_key(case))
        .collect();
    assert!(
        missing.is_empty(),
        "64 generated sequences never reached {missing:?}; reached: {covered:#?}"
    );
}
