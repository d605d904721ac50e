//! Cancelling jobs that command handlers run, with real child processes: an `--exec`
//! command's whole process group is stopped (a grandchild that ignores SIGTERM too, by the
//! SIGKILL after the kill grace) and its slot runs the next job; a `--serve` process is
//! told with a `{"cancel": ID}` line, keeps its slot when it ends the job, and is stopped
//! and replaced when it does not within the kill grace.

use std::path::Path;

use litejobs::exec::{Command, Serve};

use super::*;
use crate::support::scripted::wait_status;
use crate::support::{have_tool, write_script};

/// The pids written to `path`, one per line.
fn read_pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Waits (bounded) until `path` holds `n` pids.
fn wait_pids(path: &Path, n: usize) -> Vec<i32> {
    let end = Instant::now() + WAIT;
    loop {
        let pids = read_pids(path);
        if pids.len() >= n {
            return pids;
        }
        assert!(Instant::now() < end, "only {pids:?} in {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// True while a process with this pid runs (a zombie does not).
fn runs(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && stat.split_whitespace().nth(2) != Some("Z")
}

/// Waits (bounded) until the process is gone.
fn wait_gone(pid: i32) {
    let end = Instant::now() + WAIT;
    while runs(pid) {
        assert!(Instant::now() < end, "process {pid} still runs");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn cancelling_an_exec_job_stops_its_process_group_and_the_slot_runs_the_next_job() {
    let env = setup();
    let pids = env.dir.path().join("pids");
    // `hang` starts a child that ignores SIGTERM (only the SIGKILL stops it), then hangs;
    // `quick` succeeds at once.
    let script = write_script(
        env.dir.path(),
        "handler.sh",
        &format!(
            "#!/bin/sh\npayload=$(cat)\ncase \"$payload\" in *quick*) echo '{{\"quick\": true}}'; exit 0 ;; esac\n\
             sh -c 'trap \"\" TERM; echo $$ >> {p}; while :; do sleep 1; done' &\n\
             echo $$ >> {p}\nwhile :; do sleep 1; done\n",
            p = pids.display()
        ),
    );
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .concurrency(1)
        .handler(
            "cmd",
            Command::new(script.to_string_lossy())
                .kill_grace(Duration::from_millis(300))
                .concurrency(1),
        )
        .start()
        .expect("start");
    let id = env
        .queue
        .enqueue(NewJob::new("cmd", json!({"hang": true})))
        .expect("enqueue");
    let started = wait_pids(&pids, 2);
    env.queue
        .cancel_as(id, "ops", "runaway")
        .expect("cancel the running command");
    for pid in started {
        wait_gone(pid);
    }
    let next = env
        .queue
        .enqueue(NewJob::new("cmd", json!({"quick": true})))
        .expect("enqueue");
    let done = wait_status(&events, next, JobStatus::Succeeded);
    assert_eq!(done.id, next);
    assert_eq!(job(&env, next).result, Some(json!({"quick": true})));
    worker.shutdown(Duration::from_secs(10)).expect("shutdown");
    assert_cancelled_while_running(&env, id, "ops", "runaway");
}

/// A `--serve` program that knows cancel lines: a job whose payload says `hang` is left
/// unanswered (as if worked on in the background) until a cancel line for it comes, which
/// it answers with `cancel`. Every line it reads is logged with its pid.
const HONOURS_CANCELS: &str = r#"#!/usr/bin/env python3
import json, os, sys
log = open(sys.argv[1], "a")
current = None
for line in sys.stdin:
    msg = json.loads(line)
    if "cancel" in msg:
        log.write(f"cancel {msg['cancel']}\n"); log.flush()
        if msg["cancel"] == current:
            print(json.dumps({"id": current, "outcome": "cancel", "error": "stopped"}), flush=True)
            current = None
        continue
    log.write(f"job {msg['id']} {os.getpid()}\n"); log.flush()
    if msg["payload"].get("hang"):
        current = msg["id"]
        continue
    print(json.dumps({"id": msg["id"], "outcome": "ok", "result": {"pid": os.getpid()}}), flush=True)
"#;

/// A `--serve` program written before cancel lines: it works on a `hang` job for an hour,
/// never reading its input meanwhile.
const IGNORES_CANCELS: &str = r#"#!/usr/bin/env python3
import json, os, sys, time
log = open(sys.argv[1], "a")
for line in sys.stdin:
    job = json.loads(line)
    log.write(f"job {job['id']} {os.getpid()}\n"); log.flush()
    if job["payload"].get("hang"): time.sleep(3600)
    print(json.dumps({"id": job["id"], "outcome": "ok", "result": {"pid": os.getpid()}}), flush=True)
"#;

/// Runs a hanging job on a one-process `Serve` of `program`, cancels it, then runs a quick
/// job; returns the pid of the process that had the cancelled job and of the one that ran
/// the quick job, and the log.
fn serve_cancel_then_next(
    env: &TestEnv,
    program: &str,
    kill_grace: Duration,
) -> (i32, i32, String) {
    let script = write_script(env.dir.path(), "serve.py", program);
    let log = env.dir.path().join("serve.log");
    let events = env.queue.subscribe();
    let serve = Serve::new("python3")
        .args([
            script.to_string_lossy().into_owned(),
            log.to_string_lossy().into_owned(),
        ])
        .processes(1)
        .kill_grace(kill_grace);
    let worker = Worker::builder(&env.queue)
        .concurrency(1)
        .handler("py", serve)
        .start()
        .expect("start");
    let id = env
        .queue
        .enqueue(NewJob::new("py", json!({"hang": true})))
        .expect("enqueue");
    let first = wait_started_line(&log, id);
    env.queue
        .cancel_as(id, "ops", "not wanted")
        .expect("cancel the running job");
    let next = env
        .queue
        .enqueue(NewJob::new("py", json!({})))
        .expect("enqueue");
    wait_status(&events, next, JobStatus::Succeeded);
    let second = job(env, next).result.expect("a result")["pid"]
        .as_i64()
        .expect("a pid") as i32;
    worker.shutdown(Duration::from_secs(10)).expect("shutdown");
    assert_cancelled_while_running(env, id, "ops", "not wanted");
    let text = std::fs::read_to_string(&log).expect("the log");
    (first, second, text)
}

/// Waits (bounded) until the serve log says the process got job `id`; returns its pid.
fn wait_started_line(log: &Path, id: i64) -> i32 {
    let end = Instant::now() + WAIT;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let pid = text.lines().find_map(|l| {
            let rest = l.strip_prefix(&format!("job {id} "))?;
            rest.trim().parse().ok()
        });
        if let Some(pid) = pid {
            return pid;
        }
        assert!(
            Instant::now() < end,
            "job {id} never reached the process: {text:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_serve_process_gets_a_cancel_line_and_keeps_its_slot_when_it_ends_the_job() {
    if !have_tool("python3") {
        return;
    }
    let env = setup();
    // A kill grace far beyond the run: only the process's own answer ends the job in time.
    let (first, second, log) = serve_cancel_then_next(&env, HONOURS_CANCELS, WAIT);
    let cancelled = log
        .lines()
        .find(|l| l.starts_with("job "))
        .and_then(|l| l.split_whitespace().nth(1))
        .expect("the first job's line")
        .to_string();
    assert!(
        log.lines().any(|l| l == format!("cancel {cancelled}")),
        "the process read the cancel line: {log}"
    );
    assert_eq!(first, second, "the same process ran the next job: {log}");
}

#[test]
fn a_serve_process_that_ignores_the_cancel_line_is_replaced_within_the_kill_grace() {
    if !have_tool("python3") {
        return;
    }
    let env = setup();
    let (first, second, log) =
        serve_cancel_then_next(&env, IGNORES_CANCELS, Duration::from_millis(300));
    assert_ne!(first, second, "a new process ran the next job: {log}");
    wait_gone(first);
}
