//! Command handlers (`litejobs::exec`) with real child processes: a shell script and a
//! Python script per exit code, the job's environment, a timeout that stops a whole process
//! tree (a child that ignores SIGTERM included), and `Serve` workers that answer, crash
//! mid-job, stop answering or break the protocol, without a job lost or run twice.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use litejobs::exec::{Command, Serve};
use litejobs::{testing, JobRecord, JobStatus, NewJob, Worker};
use serde_json::{json, Value};

use crate::support::scripted::wait_finished;
use crate::support::{have_tool, setup, write_script, TestEnv, START_MS};

mod hostile; // processes that do not read, hold their output, answer twice or too much

/// Each case's payload names what the script does.
const SHELL_HANDLER: &str = r#"#!/bin/sh
payload=$(cat)
case "$payload" in
  *'"ok_json"'*) echo '{"done": true}'; exit 0 ;;
  *'"ok_text"'*) echo 'plain words'; exit 0 ;;
  *'"dead"'*) echo 'bad data' >&2; exit 65 ;;
  *'"retry_in"'*) echo 120; exit 75 ;;
  *'"retry"'*) echo 'try later' >&2; exit 75 ;;
  *'"cancel"'*) echo 'not wanted' >&2; exit 98 ;;
  *'"snooze"'*) echo 5m; exit 99 ;;
  *'"other"'*) echo 'boom' >&2; exit 3 ;;
  *'"signal"'*) kill -9 $$ ;;
  *'"env"'*)
    printf '{"id": "%s", "type": "%s", "queue": "%s", "attempt": "%s", "max": "%s", "deadline": "%s", "key": "%s", "group": "%s", "db": "%s"}\n' \
      "$LITEJOBS_JOB_ID" "$LITEJOBS_JOB_TYPE" "$LITEJOBS_QUEUE" "$LITEJOBS_ATTEMPT" \
      "$LITEJOBS_MAX_ATTEMPTS" "$LITEJOBS_DEADLINE_MS" "$LITEJOBS_IDEMPOTENCY_KEY" \
      "$LITEJOBS_GROUP_KEY" "$LITEJOBS_DB"
    exit 0 ;;
esac
echo "unknown case: $payload" >&2
exit 1
"#;

const PYTHON_HANDLER: &str = r#"#!/usr/bin/env python3
import json, os, signal, sys
case = json.load(sys.stdin)["case"]
if case == "ok_json": print(json.dumps({"done": True})); sys.exit(0)
if case == "ok_text": print("plain words"); sys.exit(0)
if case == "dead": print("bad data", file=sys.stderr); sys.exit(65)
if case == "retry_in": print("120"); sys.exit(75)
if case == "retry": print("try later", file=sys.stderr); sys.exit(75)
if case == "cancel": print("not wanted", file=sys.stderr); sys.exit(98)
if case == "snooze": print("5m"); sys.exit(99)
if case == "other": print("boom", file=sys.stderr); sys.exit(3)
if case == "signal": os.kill(os.getpid(), signal.SIGKILL)
sys.exit(1)
"#;

fn job(env: &TestEnv, id: i64) -> JobRecord {
    env.queue.job(id).expect("job").expect("the job exists")
}

/// Enqueues one job per case, drains once and checks what each exit made of its job.
fn check_exit_codes(env: &TestEnv, handler: Command) {
    let cases = [
        "ok_json", "ok_text", "dead", "retry_in", "retry", "cancel", "snooze", "other", "signal",
    ];
    let ids: HashMap<&str, i64> = cases
        .iter()
        .map(|case| {
            let new = NewJob::new("t", json!({ "case": case })).max_attempts(3);
            (*case, env.queue.enqueue(new).expect("enqueue"))
        })
        .collect();
    let builder = Worker::builder(&env.queue).handler("t", handler);
    let report = testing::drain(&builder).expect("drain");
    assert_eq!(report.attempts(), cases.len(), "{report:?}");

    let ok = job(env, ids["ok_json"]);
    assert_eq!(ok.status, JobStatus::Succeeded);
    assert_eq!(ok.result, Some(json!({"done": true})));
    let text = job(env, ids["ok_text"]);
    assert_eq!(text.status, JobStatus::Succeeded);
    assert_eq!(text.result, None, "stdout that is not JSON is not a result");

    let dead = job(env, ids["dead"]);
    assert_eq!((dead.status, dead.attempts), (JobStatus::Dead, 1));
    assert_eq!(dead.last_error.as_deref(), Some("exit 65: bad data"));

    let retry_in = job(env, ids["retry_in"]);
    assert_eq!(retry_in.status, JobStatus::Failed);
    assert_eq!(
        retry_in.run_at,
        START_MS + 120_000,
        "the delay printed on stdout"
    );
    let retry = job(env, ids["retry"]);
    assert_eq!(retry.status, JobStatus::Failed);
    assert_eq!(retry.last_error.as_deref(), Some("exit 75: try later"));
    assert!(retry.run_at > START_MS, "the retry policy's delay");

    let cancelled = job(env, ids["cancel"]);
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    assert_eq!(cancelled.last_error.as_deref(), Some("exit 98: not wanted"));

    let snoozed = job(env, ids["snooze"]);
    assert_eq!((snoozed.status, snoozed.attempts), (JobStatus::Queued, 0));
    assert_eq!(snoozed.run_at, START_MS + 300_000);

    let other = job(env, ids["other"]);
    assert_eq!((other.status, other.attempts), (JobStatus::Failed, 1));
    assert_eq!(other.last_error.as_deref(), Some("exit 3: boom"));
    // A failed attempt's exit code is its status code (the CODE column).
    assert_eq!(other.last_status_code, Some(3));
    assert_eq!(dead.last_status_code, Some(65));
    let history = env.queue.attempts(ids["other"]).expect("attempts");
    assert_eq!(history[0].status_code, Some(3));

    let signalled = job(env, ids["signal"]);
    assert_eq!(signalled.status, JobStatus::Failed);
    let error = signalled.last_error.unwrap_or_default();
    assert!(error.contains("killed by signal SIGKILL"), "{error}");
}

#[test]
fn a_shell_script_s_exit_codes_give_the_documented_outcomes() {
    let env = setup();
    let path = write_script(env.dir.path(), "handler.sh", SHELL_HANDLER);
    check_exit_codes(&env, Command::new(path.to_string_lossy()));
}

#[test]
fn a_python_script_s_exit_codes_give_the_documented_outcomes() {
    if !have_tool("python3") {
        return;
    }
    let env = setup();
    let path = write_script(env.dir.path(), "handler.py", PYTHON_HANDLER);
    check_exit_codes(&env, Command::new(path.to_string_lossy()));
}

#[test]
fn a_command_gets_the_job_in_its_environment_and_stderr_s_end_as_the_error() {
    let env = setup();
    let path = write_script(env.dir.path(), "handler.sh", SHELL_HANDLER);
    let id = env
        .queue
        .enqueue(
            NewJob::new("t", json!({"case": "env"}))
                .queue("q2")
                .max_attempts(7)
                .timeout(Duration::from_secs(30))
                .idempotency_key("k-1")
                .group_key("g-1"),
        )
        .expect("enqueue");
    let builder = Worker::builder(&env.queue).queue("q2", 1).handler(
        "t",
        Command::new(path.to_string_lossy()).env("LITEJOBS_DB", "the-db"),
    );
    testing::drain(&builder).expect("drain");
    let result = job(&env, id).result.expect("a result");
    assert_eq!(
        result,
        json!({
            "id": id.to_string(), "type": "t", "queue": "q2", "attempt": "1", "max": "7",
            "deadline": (START_MS + 30_000).to_string(), "key": "k-1", "group": "g-1",
            "db": "the-db"
        })
    );

    // Only the end of a long stderr is kept, where the reason is.
    let noisy = write_script(
        env.dir.path(),
        "noisy.sh",
        "#!/bin/sh\ncat >/dev/null\nhead -c 20000 /dev/zero | tr '\\0' x >&2\necho ' the reason' >&2\nexit 1\n",
    );
    let id = env
        .queue
        .enqueue(NewJob::new("noisy", json!({})))
        .expect("enqueue");
    let builder =
        Worker::builder(&env.queue).handler("noisy", Command::new(noisy.to_string_lossy()));
    testing::drain(&builder).expect("drain");
    let error = job(&env, id).last_error.expect("an error");
    assert!(
        error.ends_with("x the reason"),
        "{}",
        &error[error.len() - 40..]
    );
    assert!(error.len() < 4200, "kept {} bytes", error.len());
}

#[test]
fn a_missing_program_fails_the_attempt_with_a_clear_error() {
    let env = setup();
    let id = env
        .queue
        .enqueue(NewJob::new("t", json!({})))
        .expect("enqueue");
    let builder = Worker::builder(&env.queue).handler(
        "t",
        Command::new(env.dir.path().join("no-such-program").to_string_lossy()),
    );
    testing::drain(&builder).expect("drain");
    let failed = job(&env, id);
    assert_eq!(failed.status, JobStatus::Failed);
    let error = failed.last_error.unwrap_or_default();
    assert!(
        error.starts_with("cannot start ") && error.contains("no-such-program"),
        "{error}"
    );
}

/// True once no process has this pid (bounded: the test fails after 20 s).
fn wait_gone(pid: i32) {
    let end = Instant::now() + Duration::from_secs(20);
    while Path::new(&format!("/proc/{pid}")).exists() {
        // A zombie is gone for our purpose: it no longer runs.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if state.split_whitespace().nth(2) == Some("Z") {
            return;
        }
        assert!(Instant::now() < end, "process {pid} still runs");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[test]
fn past_its_timeout_a_command_s_whole_process_tree_is_stopped() {
    let env = setup();
    let pids = env.dir.path().join("pids");
    // The command starts a child that ignores SIGTERM (only SIGKILL stops it), then hangs.
    let path = write_script(
        env.dir.path(),
        "hang.sh",
        &format!(
            "#!/bin/sh\ncat >/dev/null\nsh -c 'trap \"\" TERM; echo $$ >> {p}; while :; do sleep 1; done' &\necho $$ >> {p}\nwhile :; do sleep 1; done\n",
            p = pids.display()
        ),
    );
    let events = env.queue.subscribe();
    let id = env
        .queue
        .enqueue(NewJob::new("hang", json!({})).timeout(Duration::from_secs(1)))
        .expect("enqueue");
    let worker = Worker::builder(&env.queue)
        .handler(
            "hang",
            Command::new(path.to_string_lossy()).kill_grace(Duration::from_millis(300)),
        )
        .start()
        .expect("start");
    let finished = wait_finished(&events, id);
    assert_eq!(finished.status, JobStatus::Failed);
    let error = job(&env, id).last_error.unwrap_or_default();
    assert!(error.contains("timed out"), "{error}");
    let started = read_pids(&pids);
    assert_eq!(
        started.len(),
        2,
        "both processes wrote their pid: {started:?}"
    );
    for pid in started {
        wait_gone(pid);
    }
    assert!(litejobs::exec::wait_for_commands(Duration::from_secs(10)));
    worker.shutdown(Duration::from_secs(5)).expect("shutdown");
}

/// A Serve worker whose payload says what to do: answer, crash, hang or break the
/// protocol. Every job it sees is appended to a log, so a test can count runs.
const SERVE_WORKER: &str = r#"#!/usr/bin/env python3
import json, os, sys, time
log = open(sys.argv[1], "a")
for line in sys.stdin:
    job = json.loads(line)
    log.write(f"{job['id']} {job['attempt']} {os.getpid()}\n"); log.flush()
    do = job["payload"].get("do", "ok")
    if job["attempt"] > 1: do = "ok"          # the retry succeeds
    if do == "crash": os._exit(3)
    if do == "hang": time.sleep(3600)
    if do == "wrong_id": job["id"] += 1000
    print("a stray print", flush=True)        # not an answer: logged and skipped
    answer = {"id": job["id"], "outcome": "ok", "result": {"pid": os.getpid()}}
    if do == "permanent": answer = {"id": job["id"], "outcome": "permanent", "error": "no"}
    print(json.dumps(answer), flush=True)
"#;

#[test]
fn serve_workers_answer_crash_hang_and_break_the_protocol_without_losing_or_repeating_a_job() {
    if !have_tool("python3") {
        return;
    }
    let env = setup();
    let worker_py = write_script(env.dir.path(), "worker.py", SERVE_WORKER);
    let log = env.dir.path().join("runs.log");
    let events = env.queue.subscribe();
    let plan = [
        "ok",
        "crash",
        "ok",
        "hang",
        "ok",
        "wrong_id",
        "permanent",
        "ok",
    ];
    let ids: Vec<i64> = plan
        .iter()
        .map(|what| {
            let new = NewJob::new("py", json!({ "do": what })).max_attempts(3);
            let new = if *what == "hang" {
                new.timeout(Duration::from_secs(1))
            } else {
                new
            };
            env.queue.enqueue(new).expect("enqueue")
        })
        .collect();
    let serve = Serve::new("python3")
        .args([
            worker_py.to_string_lossy().into_owned(),
            log.to_string_lossy().into_owned(),
        ])
        .processes(2)
        .kill_grace(Duration::from_millis(300));
    let worker = Worker::builder(&env.queue)
        .handler("py", serve)
        .concurrency(2)
        .retry_policy("py", litejobs::RetryPolicy::schedule(vec![Duration::ZERO]))
        .start()
        .expect("start");
    // Every job ends: the broken ones fail once, then succeed on their retry.
    let mut open: HashMap<i64, JobStatus> = plan
        .iter()
        .zip(&ids)
        .map(|(what, &id)| {
            let want = if *what == "permanent" {
                JobStatus::Dead
            } else {
                JobStatus::Succeeded
            };
            (id, want)
        })
        .collect();
    let end = Instant::now() + Duration::from_secs(60);
    while !open.is_empty() {
        let left = end.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(litejobs::Event::Finished { id, status, .. }) => {
                if open.get(&id) == Some(&status) {
                    open.remove(&id);
                } else {
                    assert_eq!(status, JobStatus::Failed, "job {id}");
                }
            }
            Ok(_) => {}
            Err(e) => panic!("jobs {open:?} did not finish: {e}"),
        }
    }
    worker.shutdown(Duration::from_secs(10)).expect("shutdown");

    for (what, &id) in plan.iter().zip(&ids) {
        let record = job(&env, id);
        let broken = matches!(*what, "crash" | "hang" | "wrong_id");
        assert_eq!(
            record.attempts,
            if broken { 2 } else { 1 },
            "job {id} ({what})"
        );
        if broken {
            let history = env.queue.attempts(id).expect("attempts");
            let error = history[0].error.clone().unwrap_or_default();
            let expected = match *what {
                "crash" => "exited mid-job",
                "hang" => "timed out",
                _ => "answer for another job",
            };
            assert!(error.contains(expected), "job {id} ({what}): {error}");
        }
    }
    // Each attempt ran once, in one process: no job was given to two processes.
    let runs = std::fs::read_to_string(&log).expect("the run log");
    let mut seen = HashMap::new();
    for line in runs.lines() {
        let mut words = line.split_whitespace();
        let key = (
            words.next().map(String::from),
            words.next().map(String::from),
        );
        *seen.entry(key).or_insert(0) += 1;
    }
    assert!(
        seen.values().all(|&n| n == 1),
        "an attempt ran twice: {runs}"
    );
    let expected_runs: i64 = ids.iter().map(|&id| job(&env, id).attempts).sum();
    assert_eq!(seen.len() as i64, expected_runs, "{runs}");
    // The processes are gone after shutdown (stdin closed, or stopped).
    let pids: Vec<i32> = runs
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
        .collect();
    for pid in pids {
        wait_gone(pid);
    }
}

#[test]
fn a_serve_result_and_the_job_fields_reach_the_process() {
    if !have_tool("python3") {
        return;
    }
    let env = setup();
    let echo = write_script(
        env.dir.path(),
        "echo.py",
        "#!/usr/bin/env python3\nimport json, sys\nfor line in sys.stdin:\n    job = json.loads(line)\n    print(json.dumps({\"id\": job[\"id\"], \"outcome\": \"ok\", \"result\": job}), flush=True)\n",
    );
    let id = env
        .queue
        .enqueue(NewJob::new("echo", json!({"n": 1})).max_attempts(4))
        .expect("enqueue");
    let builder = Worker::builder(&env.queue).handler("echo", Serve::new(echo.to_string_lossy()));
    testing::drain(&builder).expect("drain");
    let result: Value = job(&env, id).result.expect("a result");
    assert_eq!(
        result,
        json!({"id": id, "type": "echo", "queue": "default", "attempt": 1, "max_attempts": 4,
               "deadline_ms": START_MS + 60_000, "payload": {"n": 1}})
    );
}

/// Waits (bounded) until every job in `ids` finished with `status`; fails on any other end.
/// A snoozed job is made due again by moving `clock` past the snooze.
fn wait_all_status(
    events: &crossbeam_channel::Receiver<litejobs::Event>,
    ids: &[i64],
    status: JobStatus,
    clock: &litejobs::ManualClock,
) {
    let mut open: Vec<i64> = ids.to_vec();
    let end = Instant::now() + Duration::from_secs(60);
    while !open.is_empty() {
        match events.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(litejobs::Event::Finished {
                id, status: got, ..
            }) if open.contains(&id) => {
                if got == status {
                    open.retain(|&o| o != id);
                } else {
                    assert!(
                        matches!(got, JobStatus::Queued),
                        "job {id} ended {got:?}, expected {status:?} (or a snooze)"
                    );
                    clock.advance(litejobs::exec::NO_SLOT_SNOOZE * 2);
                }
            }
            Ok(_) => {}
            Err(e) => panic!("jobs {open:?} did not finish: {e}"),
        }
    }
}

#[test]
fn jobs_waiting_for_a_concurrency_slot_go_back_to_the_queue_without_spending_their_attempt() {
    let env = setup();
    let go = env.dir.path().join("go");
    let started = env.dir.path().join("started");
    // Each run notes that it started, then holds its slot until the test says go.
    let path = write_script(
        env.dir.path(),
        "hold.sh",
        &format!(
            "#!/bin/sh\ncat >/dev/null\necho $LITEJOBS_JOB_ID >> {}\nwhile [ ! -e {} ]; do sleep 0.02; done\n",
            started.display(),
            go.display()
        ),
    );
    let events = env.queue.subscribe();
    let ids: Vec<i64> = (0..3)
        .map(|_| {
            let new = NewJob::new("hold", json!({}))
                .max_attempts(1)
                .timeout(Duration::from_secs(30));
            env.queue.enqueue(new).expect("enqueue")
        })
        .collect();
    let worker = Worker::builder(&env.queue)
        .handler("hold", Command::new(path.to_string_lossy()).concurrency(1))
        .concurrency(3)
        .start()
        .expect("start");
    // One runs; the others find no slot and go back to the queue (not dead, attempt kept).
    let snoozed = loop {
        match events.recv_timeout(Duration::from_secs(30)) {
            Ok(litejobs::Event::Finished { id, status, .. }) => {
                assert_eq!(
                    status,
                    JobStatus::Queued,
                    "job {id} went {status:?} while waiting"
                );
                break id;
            }
            Ok(_) => {}
            Err(e) => panic!("no job went back to the queue: {e}"),
        }
    };
    assert_eq!(job(&env, snoozed).attempts, 0, "waiting spent no attempt");
    assert_eq!(read_pids(&started).len(), 1, "one command at a time");
    std::fs::write(&go, "").expect("go");
    env.clock.advance(litejobs::exec::NO_SLOT_SNOOZE * 2);
    wait_all_status(&events, &ids, JobStatus::Succeeded, &env.clock);
    worker.shutdown(Duration::from_secs(5)).expect("shutdown");
    for id in ids {
        assert_eq!(job(&env, id).attempts, 1, "job {id}");
    }
}

#[test]
fn a_serve_process_that_ends_while_idle_costs_no_job_an_attempt() {
    if !have_tool("python3") {
        return;
    }
    let env = setup();
    // Answers one job, then exits: the next job must go to a new process, not fail.
    let pids = env.dir.path().join("pids");
    let once = write_script(
        env.dir.path(),
        "once.py",
        &format!(
            "#!/usr/bin/env python3\nimport json, os, sys\nopen({:?}, 'a').write(f'{{os.getpid()}}\\n')\njob = json.loads(sys.stdin.readline())\nprint(json.dumps({{\"id\": job[\"id\"], \"outcome\": \"ok\"}}), flush=True)\n",
            pids.display().to_string()
        ),
    );
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .handler("once", Serve::new(once.to_string_lossy()))
        .concurrency(1)
        .start()
        .expect("start");
    for round in 1..=3 {
        let id = env
            .queue
            .enqueue(NewJob::new("once", json!({})).max_attempts(1))
            .expect("enqueue");
        wait_all_status(&events, &[id], JobStatus::Succeeded, &env.clock);
        // The process ends while idle; the next job finds it gone and starts another.
        let started = read_pids(&pids);
        assert_eq!(started.len(), round, "one process per job: {started:?}");
        wait_gone(started[round - 1]);
    }
    worker.shutdown(Duration::from_secs(5)).expect("shutdown");
}

/// `exec::wait_for_commands` (what `litejobs work` calls before it exits) returns only once
/// the idle serve processes are gone, also when the last holder of their pool drops it on
/// another thread meanwhile and the pool stops them there: a process that ignores the end
/// of its input is stopped, never left running after the program.
#[test]
fn waiting_for_commands_outlasts_idle_serve_processes_stopped_on_another_thread() {
    if !have_tool("python3") {
        return;
    }
    let env = setup();
    let pid_file = env.dir.path().join("lazy.pid");
    let closed = env.dir.path().join("closed");
    let lazy = write_script(
        env.dir.path(),
        "lazy.py",
        &format!(
            "#!/usr/bin/env python3\nimport json, os, sys, time\nopen({:?}, 'w').write(str(os.getpid()))\nfor line in sys.stdin:\n    job = json.loads(line)\n    print(json.dumps({{'id': job['id'], 'outcome': 'ok'}}), flush=True)\nopen({:?}, 'w').write('input ended')\nwhile True: time.sleep(1)\n",
            pid_file.display().to_string(),
            closed.display().to_string()
        ),
    );
    let builder = Worker::builder(&env.queue).handler(
        "lz",
        Serve::new(lazy.to_string_lossy()).kill_grace(Duration::from_millis(300)),
    );
    let id = env
        .queue
        .enqueue(NewJob::new("lz", json!({})))
        .expect("enqueue");
    testing::drain(&builder).expect("drain");
    assert_eq!(job(&env, id).status, JobStatus::Succeeded);
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("the process wrote its pid")
        .trim()
        .parse()
        .expect("a pid");
    // The builder holds the last handle on the pool: dropped on another thread, the pool
    // closes its idle process's input there and waits for it to exit before signalling it.
    let dropper = std::thread::spawn(move || drop(builder));
    let end = Instant::now() + Duration::from_secs(20);
    while !closed.exists() {
        assert!(
            Instant::now() < end,
            "the idle process never saw its input end"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(litejobs::exec::wait_for_commands(Duration::from_secs(10)));
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        state.is_empty() || state.split_whitespace().nth(2) == Some("Z"),
        "the idle serve process still runs after wait_for_commands: {state}"
    );
    dropper.join().expect("the dropping thread");
}
