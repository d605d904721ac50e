//! "No panic on any input", property-driven: the parsers and checks that see text from
//! outside (JSON payloads and job options at enqueue, webhook signature verification,
//! `Retry-After` values, the command line) are fed generated and hand-picked hostile input.
//! Each target also has an oracle, so "no panic" is not the only thing that can fail: an
//! accepted payload must read back and run as the same JSON, a refused one must leave nothing
//! behind, a signed request must verify and a tampered one must not.
//!
//! `PROPTEST_CASES` raises the number of cases (default 256; `scripts/fuzz.sh` runs them for
//! a set time with many more). Shrunk failures are kept in `proptest-regressions/fuzz.txt`
//! and replayed first on every run; `tests/fuzz_corpus.txt` holds hand-picked inputs that CI
//! runs every time.

use std::time::Duration;

use litejobs::{ErrorKind, JobStatus, NewJob, Queue};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::Value;

// Webhook signatures, Retry-After and status codes (tests/fuzz/webhook.rs).
#[cfg(feature = "webhook")]
mod webhook;

/// The payload limit of the fuzzing queue: small, so the limit itself is fuzzed too.
const PAYLOAD_LIMIT: usize = 2048;
/// Hand-picked inputs run by CI on every run: `<target> <JSON string>` per line.
const CORPUS: &str = include_str!("fuzz_corpus.txt");
/// The corpus targets of tests/fuzz/webhook.rs (feature `webhook`).
const WEBHOOK_TARGETS: [&str; 4] = ["retry-after", "timestamp", "signature", "secret"];

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/fuzz.txt",
        ))),
        ..ProptestConfig::default()
    }
}

fn queue() -> Queue {
    Queue::builder()
        .max_payload_bytes(PAYLOAD_LIMIT)
        .open_in_memory()
        .expect("an in-memory queue")
}

fn jobs_count(queue: &Queue) -> i64 {
    queue
        .stats()
        .expect("stats")
        .counts
        .iter()
        .map(|c| c.count)
        .sum()
}

// ---------------------------------------------------------------------------------------
// Payloads and job options at enqueue
// ---------------------------------------------------------------------------------------

/// Enqueues `text` as a payload and checks the outcome against serde_json itself: accepted
/// exactly when the text is JSON a handler can read (`serde_json::Value`) and within the
/// limit; an accepted payload reads back as the same value; a refused one is `InvalidJob`
/// with a one-line message and inserts nothing.
fn check_payload(queue: &Queue, text: &str) {
    let parsed = serde_json::from_str::<Value>(text);
    let fits = text.len() <= PAYLOAD_LIMIT;
    let before = jobs_count(queue);
    match queue.enqueue(NewJob::from_json_text("fuzz", text)) {
        Ok(id) => {
            let value = parsed.unwrap_or_else(|e| {
                panic!(
                    "enqueue accepted a payload a handler cannot read ({e}): {:?}",
                    preview(text)
                )
            });
            assert!(fits, "enqueue accepted {} bytes over the limit", text.len());
            let job = queue.job(id).expect("reading the job").expect("job exists");
            assert_eq!(job.payload, value, "the payload reads back as it was given");
            assert_eq!(job.status, JobStatus::Queued);
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidJob, "{e:?}");
            let message = e.to_string();
            assert!(!message.contains('\n'), "one-line message: {message:?}");
            assert!(
                parsed.is_err() || !fits,
                "enqueue refused a valid payload of {} bytes: {message}",
                text.len()
            );
            if !fits && parsed.is_ok() {
                assert!(
                    message.contains(&PAYLOAD_LIMIT.to_string()),
                    "the message names the limit: {message}"
                );
            }
            assert_eq!(jobs_count(queue), before, "a refused enqueue wrote nothing");
        }
    }
}

fn preview(text: &str) -> String {
    text.chars().take(120).collect()
}

/// Arbitrary JSON values, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(".{0,10}", inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Text that is JSON-like or hostile: arbitrary strings, JSON with a mutated byte, deep
/// nesting, numbers too big for any type, long strings near the limit.
fn payload_text() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => any::<String>(),
        2 => json_value().prop_map(|v| v.to_string()),
        2 => (json_value(), any::<prop::sample::Index>(), any::<u8>()).prop_map(|(v, at, b)| {
            let mut bytes = v.to_string().into_bytes();
            let i = at.index(bytes.len());
            bytes[i] = b;
            String::from_utf8_lossy(&bytes).into_owned()
        }),
        1 => (1usize..3000, prop::sample::select(vec!["[", "{\"a\":", "[{\"b\":["])).prop_map(
            |(depth, open)| {
                let close: String = open
                    .chars()
                    .rev()
                    .filter_map(|c| match c {
                        '[' => Some(']'),
                        '{' => Some('}'),
                        _ => None,
                    })
                    .collect();
                format!("{}1{}", open.repeat(depth), close.repeat(depth))
            }
        ),
        1 => ("-?[0-9]{1,400}(\\.[0-9]{0,50})?([eE][-+]?[0-9]{1,12})?")
            .prop_map(|n| format!("{{\"n\":{n}}}")),
        1 => (0usize..(PAYLOAD_LIMIT + 64)).prop_map(|n| format!("\"{}\"", "x".repeat(n))),
    ]
}

/// Option strings from anywhere: empty, whitespace, NUL bytes, long, non-ASCII.
fn option_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => ".{0,24}",
        1 => Just(String::new()),
        1 => "[ \t\n]{1,3}",
        1 => "[a-z\u{0}]{1,8}",
        1 => ".{200,600}",
    ]
}

#[derive(Debug, Clone)]
struct Options {
    job_type: String,
    queue: String,
    key: Option<String>,
    group: Option<String>,
    priority: i64,
    max_attempts: u32,
    delay_ms: u64,
    timeout_ms: u64,
}

fn options() -> impl Strategy<Value = Options> {
    (
        option_text(),
        option_text(),
        prop::option::of(option_text()),
        prop::option::of(option_text()),
        any::<i64>(),
        any::<u32>(),
        prop_oneof![0u64..10_000, any::<u64>()],
        prop_oneof![0u64..10_000, any::<u64>()],
    )
        .prop_map(
            |(job_type, queue, key, group, priority, max_attempts, delay_ms, timeout_ms)| Options {
                job_type,
                queue,
                key,
                group,
                priority,
                max_attempts,
                delay_ms,
                timeout_ms,
            },
        )
}

fn job_of(o: &Options) -> NewJob {
    let mut job = NewJob::new(o.job_type.clone(), serde_json::json!({"o": 1}))
        .queue(o.queue.clone())
        .priority(o.priority)
        .max_attempts(o.max_attempts)
        .delay(Duration::from_millis(o.delay_ms))
        .timeout(Duration::from_millis(o.timeout_ms));
    if let Some(key) = &o.key {
        job = job.idempotency_key(key.clone());
    }
    if let Some(group) = &o.group {
        job = job.group_key(group.clone());
    }
    job
}

/// Any options: refused with `InvalidJob` (nothing written) or stored exactly as given.
fn check_options(queue: &Queue, o: &Options) {
    let before = jobs_count(queue);
    match queue.enqueue(job_of(o)) {
        Ok(id) => {
            let job = queue.job(id).expect("reading the job").expect("job exists");
            if jobs_count(queue) == before {
                // A held idempotency key returned an earlier job: it carries that key.
                assert!(o.key.is_some(), "nothing inserted, yet no key: {o:?}");
                assert_eq!(job.idempotency_key, o.key, "the key holder has the key");
                return;
            }
            assert_eq!(job.job_type, o.job_type);
            assert_eq!(job.queue, o.queue);
            assert_eq!(job.idempotency_key, o.key);
            assert_eq!(job.group_key, o.group);
            assert_eq!(job.priority, o.priority);
            assert_eq!(job.max_attempts, i64::from(o.max_attempts));
            assert!(job.max_attempts >= 1);
            assert!(job.run_at >= job.created_at, "{job:?}");
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidJob, "{e:?}");
            assert!(!e.to_string().contains('\n'), "one line: {e}");
            assert_eq!(jobs_count(queue), before, "a refused enqueue wrote nothing");
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_payload_text_is_stored_exactly_or_refused_cleanly(texts in prop::collection::vec(payload_text(), 1..6)) {
        let queue = queue();
        for text in &texts {
            check_payload(&queue, text);
        }
    }

    #[test]
    fn a_batch_with_one_bad_payload_is_refused_whole(
        good in prop::collection::vec(json_value(), 0..5),
        bad in "[^\\[{\"0-9tfn -]{1,20}",
        at in any::<prop::sample::Index>(),
    ) {
        let queue = queue();
        let mut jobs: Vec<NewJob> = good
            .iter()
            .map(|v| NewJob::from_json_text("fuzz", v.to_string()))
            .collect();
        let at = at.index(jobs.len() + 1);
        jobs.insert(at, NewJob::from_json_text("fuzz", bad));
        let err = queue.enqueue_batch(jobs).expect_err("a batch with invalid JSON");
        prop_assert_eq!(err.kind(), ErrorKind::InvalidJob);
        let message = err.to_string();
        prop_assert!(message.contains(&format!("job {at} of the batch")), "{}", message);
        prop_assert_eq!(jobs_count(&queue), 0, "nothing of the batch was written");
    }

    #[test]
    fn any_job_options_are_stored_exactly_or_refused_cleanly(all in prop::collection::vec(options(), 1..6)) {
        let queue = queue();
        for o in &all {
            check_options(&queue, o);
        }
    }
}

/// A payload built in code (a `serde_json::Value`) nested deeper than a handler's parser
/// goes: refused at enqueue, or stored so that it reads back.
#[test]
fn a_deeply_nested_value_payload_is_refused_or_reads_back() {
    let queue = Queue::open_in_memory().expect("an in-memory queue");
    for depth in [100, 127, 128, 200] {
        let mut value = Value::from(1);
        for _ in 0..depth {
            value = Value::Array(vec![value]);
        }
        match queue.enqueue(NewJob::new("fuzz", value.clone())) {
            Ok(id) => {
                let job = queue.job(id).expect("reading the job").expect("job exists");
                assert_eq!(
                    job.payload, value,
                    "a payload {depth} deep was accepted but does not read back as JSON"
                );
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidJob, "{e:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The corpus
// ---------------------------------------------------------------------------------------

/// Every hand-picked input of `tests/fuzz_corpus.txt` through its target's checks.
#[test]
fn the_corpus_runs_clean() {
    let queue = queue();
    let mut ran = 0;
    for (n, line) in CORPUS.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (target, input) = line
            .split_once(' ')
            .unwrap_or_else(|| panic!("corpus line {}: no input: {line:?}", n + 1));
        let input: String = serde_json::from_str(input)
            .unwrap_or_else(|e| panic!("corpus line {}: input is not a JSON string: {e}", n + 1));
        match target {
            "payload" => check_payload(&queue, &input),
            #[cfg(feature = "webhook")]
            target if WEBHOOK_TARGETS.contains(&target) => {
                let now = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
                webhook::check_corpus_input(target, &input, now);
            }
            // Without the `webhook` feature there is nothing to check these against.
            #[cfg(not(feature = "webhook"))]
            target if WEBHOOK_TARGETS.contains(&target) => continue,
            other => panic!("corpus line {}: unknown target {other:?}", n + 1),
        }
        ran += 1;
    }
    assert!(ran >= 20, "the corpus has {ran} entries");
}

// ---------------------------------------------------------------------------------------
// The command line
// ---------------------------------------------------------------------------------------

#[cfg(feature = "cli")]
mod cli {
    use std::path::Path;
    use std::process::{Command, Stdio};

    use litejobs::{NewJob, Queue};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    const COMMANDS: [&[&str]; 15] = [
        &["init"],
        &["enqueue"],
        &["stats"],
        &["list"],
        &["show"],
        &["dead", "list"],
        &["dead", "requeue"],
        &["dead", "discard"],
        &["cancel"],
        &["retry"],
        &["pause"],
        &["resume"],
        &["prune"],
        &["check"],
        &["metrics"],
    ];

    const FLAGS: [&str; 29] = [
        "--queue",
        "--priority",
        "--delay",
        "--max-attempts",
        "--timeout",
        "--idempotency-key",
        "--group-key",
        "--window",
        "--errors",
        "--status",
        "--type",
        "--search",
        "--limit",
        "--before",
        "--by",
        "--reason",
        "--dry-run",
        "--older-than",
        "--keys-older-than",
        "--chunk-size",
        "--checkpoint",
        "--max-dead",
        "--max-dead-last-hour",
        "--max-oldest-age",
        "--max-failed-rate",
        "--min-attempts",
        "--json",
        "--secret-field",
        "--all",
    ];

    /// Duration-like text: right, nearly right, and wrong.
    fn duration() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => "([0-9]{1,4}(ms|s|m|h|d|w)){1,3}",
            2 => "[0-9]{0,25}[a-zµ.,]{0,3}[0-9]{0,3}",
            1 => "-[0-9]{1,3}[smh]",
            1 => "[0-9]{15,45}(d|w|ms)",
            1 => any::<String>(),
        ]
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => duration(),
            2 => any::<i64>().prop_map(|n| n.to_string()),
            1 => "[0-9]{18,30}",
            2 => super::payload_text(),
            1 => "(queued|running|succeeded|failed|dead|cancelled|done|)",
            1 => "(none|passive|truncate|all)",
            1 => "[0-9]{1,3}(\\.[0-9]{1,3})?%?",
            2 => "[^\u{0}]{0,20}",
        ]
    }

    fn token() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => prop::sample::select(FLAGS.to_vec()).prop_map(str::to_string),
            4 => value(),
            1 => "--[a-z-]{1,12}",
            1 => Just("--".to_string()),
        ]
        // No program can be given a NUL byte in an argument.
        .prop_map(|t| t.replace('\0', ""))
    }

    fn args() -> impl Strategy<Value = (usize, Vec<String>, bool)> {
        (
            0..COMMANDS.len(),
            prop::collection::vec(token(), 0..7),
            prop::bool::weighted(0.9),
        )
    }

    fn seed_db(path: &Path) {
        let queue = Queue::open(path).expect("creating the fuzz database");
        for i in 0..5 {
            queue
                .enqueue(NewJob::new("fuzz", serde_json::json!({ "i": i })))
                .expect("a job");
        }
    }

    /// Generated command lines through the real binary: exit 0, 1 (only for `check`) or 2,
    /// never a panic. Bounded: 200 runs (`PROPTEST_CASES` above 4000 runs a twentieth of it).
    #[test]
    fn the_binary_never_panics_on_generated_arguments() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("fuzz.db");
        seed_db(&db);
        // A process per case: 200 by default; a twentieth of a raised PROPTEST_CASES.
        let cases = (super::cases() / 20).max(200);
        let mut runner = TestRunner::new_with_rng(
            Config {
                cases,
                failure_persistence: None,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &rand_seed()),
        );
        let result = runner.run(&args(), |(command, rest, with_db)| {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_litejobs"));
            cmd.env_remove("LITEJOBS_DB")
                .env_remove("RUST_LOG")
                .env("RUST_BACKTRACE", "0")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            if with_db {
                cmd.arg("--db").arg(&db);
            }
            cmd.args(COMMANDS[command]).args(&rest);
            let out = cmd.output().expect("running litejobs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            let code = out.status.code();
            let allowed = match code {
                Some(0) | Some(2) => true,
                Some(1) => COMMANDS[command] == ["check"],
                _ => false,
            };
            prop_assert!(
                allowed && !stderr.contains("panicked"),
                "litejobs {:?} {:?} exited {:?}; stderr: {}",
                COMMANDS[command],
                rest,
                out.status,
                stderr
            );
            if code == Some(2) && stderr.starts_with("litejobs: ") {
                prop_assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {}", stderr);
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
    }

    /// A fresh seed per run (printed, so a failure can be replayed with
    /// `LITEJOBS_FUZZ_CLI_SEED`).
    fn rand_seed() -> [u8; 32] {
        let seed: u64 = std::env::var("LITEJOBS_FUZZ_CLI_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        println!("cli fuzz: seed {seed} (replay with LITEJOBS_FUZZ_CLI_SEED={seed})");
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        bytes
    }
}
