//! Command handlers against processes that do not play along: a `Serve` process that never
//! reads its input or leaves a `setsid` child holding its stdout, a `Command` that leaves a
//! daemon behind or whose shell wrapper dies while its child cleans up, answers given twice,
//! without an id or too long, errors too long, and equal failures that must group.

use super::*;

/// The part of a shell serve worker that answers every job `ok` (the id read with the
/// shell's own expansions: the line starts `{"id":N,`).
const ANSWER_LOOP: &str = r#"while IFS= read -r line; do
  id=${line#'{"id":'}; id=${id%%,*}
  printf '{"id": %s, "outcome": "ok"}\n' "$id"
done
"#;

/// Kills a process started in a session of its own (which no process-group signal reaches)
/// when the test ends, passed or not.
struct KillPidOnDrop(std::path::PathBuf);

impl Drop for KillPidOnDrop {
    fn drop(&mut self) {
        for pid in read_pids(&self.0) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// Waits (bounded) until `pid` is reaped: not even a zombie is left.
fn wait_reaped(pid: i32) {
    let end = Instant::now() + Duration::from_secs(20);
    while Path::new(&format!("/proc/{pid}")).exists() {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            Instant::now() < end,
            "process {pid} was never reaped: {state}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn runs(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && stat.split_whitespace().nth(2) != Some("Z")
}

/// Waits (bounded) until every job in `ids` succeeded; failed attempts are retried, and a
/// job that went back to the queue for want of a free process is made due again.
fn wait_succeeded(
    events: &crossbeam_channel::Receiver<litejobs::Event>,
    ids: &[i64],
    clock: &litejobs::ManualClock,
) {
    let mut open = ids.to_vec();
    let end = Instant::now() + Duration::from_secs(60);
    while !open.is_empty() {
        match events.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(litejobs::Event::Finished { id, status, .. }) if open.contains(&id) => {
                match status {
                    JobStatus::Succeeded => open.retain(|&o| o != id),
                    JobStatus::Queued => clock.advance(litejobs::exec::NO_SLOT_SNOOZE * 2),
                    JobStatus::Failed => {}
                    other => panic!("job {id} ended {other:?}"),
                }
            }
            Ok(_) => {}
            Err(e) => panic!("jobs {open:?} never succeeded: {e}"),
        }
    }
}

/// A payload whose job line is longer than a pipe holds (64 KiB), near the payload limit.
fn pipe_filling_payload() -> Value {
    json!({ "pad": "x".repeat(65_500) })
}

#[test]
fn a_serve_process_that_never_reads_its_job_is_stopped_at_the_deadline_and_replaced() {
    let env = setup();
    let dir = env.dir.path();
    let first = dir.join("first.pid");
    // The first process never reads its stdin (busy, asleep); the next ones answer.
    let script = write_script(
        dir,
        "stuck.sh",
        &format!(
            "#!/bin/sh\nif [ ! -e {p} ]; then echo $$ > {p}; exec sleep 1000; fi\n{ANSWER_LOOP}",
            p = first.display()
        ),
    );
    let events = env.queue.subscribe();
    let big = env
        .queue
        .enqueue(
            NewJob::new("stuck", pipe_filling_payload())
                .max_attempts(2)
                .timeout(Duration::from_secs(2)),
        )
        .expect("enqueue");
    let small = env
        .queue
        .enqueue(NewJob::new("stuck", json!({})).max_attempts(1))
        .expect("enqueue");
    let worker = Worker::builder(&env.queue)
        .handler(
            "stuck",
            Serve::new(script.to_string_lossy()).kill_grace(Duration::from_millis(300)),
        )
        .concurrency(1)
        .retry_policy(
            "stuck",
            litejobs::RetryPolicy::schedule(vec![Duration::ZERO]),
        )
        .start()
        .expect("start");
    wait_succeeded(&events, &[big, small], &env.clock);
    worker.shutdown(Duration::from_secs(10)).expect("shutdown");
    let history = env.queue.attempts(big).expect("attempts");
    let error = history[0].error.clone().unwrap_or_default();
    assert!(error.contains("timed out"), "{error}");
    assert_eq!(job(&env, big).attempts, 2);
    // The process that never read was stopped and reaped.
    wait_reaped(read_pids(&first)[0]);
}

#[test]
fn a_serve_process_whose_setsid_child_holds_its_stdout_is_reaped_and_replaced() {
    if !have_tool("setsid") {
        return;
    }
    let env = setup();
    let dir = env.dir.path();
    let first = dir.join("first.pid");
    let daemon = dir.join("daemon.pid");
    let _daemon = KillPidOnDrop(daemon.clone());
    // The first process starts a daemon (a session of its own, our pipes inherited), takes
    // its job and never answers.
    let script = write_script(
        dir,
        "daemon.sh",
        &format!(
            "#!/bin/sh\nif [ ! -e {p} ]; then\n  setsid sleep 1000 & echo $! > {d}\n  echo $$ > {p}\n  read -r line\n  exec sleep 1000\nfi\n{ANSWER_LOOP}",
            p = first.display(),
            d = daemon.display()
        ),
    );
    let events = env.queue.subscribe();
    let id = env
        .queue
        .enqueue(
            NewJob::new("d", json!({}))
                .max_attempts(2)
                .timeout(Duration::from_secs(1)),
        )
        .expect("enqueue");
    let worker = Worker::builder(&env.queue)
        .handler(
            "d",
            Serve::new(script.to_string_lossy()).kill_grace(Duration::from_millis(300)),
        )
        .concurrency(1)
        .retry_policy("d", litejobs::RetryPolicy::schedule(vec![Duration::ZERO]))
        .start()
        .expect("start");
    wait_succeeded(&events, &[id], &env.clock);
    worker.shutdown(Duration::from_secs(10)).expect("shutdown");
    // Not left a zombie: its stdout, still open in the daemon, did not keep it from being
    // waited for.
    wait_reaped(read_pids(&first)[0]);
    let daemons = read_pids(&daemon);
    assert!(runs(daemons[0]), "the daemon is out of reach of the group");
}

#[test]
fn an_exec_command_that_leaves_a_setsid_daemon_is_done_once_it_exits() {
    if !have_tool("setsid") {
        return;
    }
    let env = setup();
    let dir = env.dir.path();
    let daemon = dir.join("daemon.pid");
    let _daemon = KillPidOnDrop(daemon.clone());
    let script = write_script(
        dir,
        "leaves.sh",
        &format!(
            "#!/bin/sh\ncat >/dev/null\nsetsid sleep 1000 & echo $! > {}\necho '{{\"done\": true}}'\n",
            daemon.display()
        ),
    );
    let id = env
        .queue
        .enqueue(NewJob::new("leaves", json!({})))
        .expect("enqueue");
    let builder =
        Worker::builder(&env.queue).handler("leaves", Command::new(script.to_string_lossy()));
    testing::drain(&builder).expect("drain");
    // What it printed before exiting is its result, though the daemon still holds stdout.
    let done = job(&env, id);
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(done.result, Some(json!({"done": true})));
    assert!(runs(read_pids(&daemon)[0]), "the daemon runs on");
}

#[test]
fn a_shell_wrapper_s_child_gets_the_kill_grace_to_clean_up_after_the_wrapper_died() {
    let env = setup();
    let dir = env.dir.path();
    let log = dir.join("cleanup.log");
    let child = dir.join("child.pid");
    // The wrapper (sh) dies at once on SIGTERM; its child catches SIGTERM and takes 2 s to
    // clean up, well within the 30 s kill grace.
    let script = write_script(
        dir,
        "wrapper.sh",
        &format!(
            "#!/bin/sh\ncat >/dev/null\nsh -c 'trap \"echo cleaning >> {l}; sleep 2; echo cleaned >> {l}; exit 0\" TERM; echo $$ > {c}; while :; do sleep 0.1; done' &\nwait\n",
            l = log.display(),
            c = child.display()
        ),
    );
    let events = env.queue.subscribe();
    let id = env
        .queue
        .enqueue(
            NewJob::new("wrapped", json!({}))
                .max_attempts(1)
                .timeout(Duration::from_secs(1)),
        )
        .expect("enqueue");
    let worker = Worker::builder(&env.queue)
        .handler(
            "wrapped",
            Command::new(script.to_string_lossy()).kill_grace(Duration::from_secs(30)),
        )
        .start()
        .expect("start");
    let finished = wait_finished(&events, id);
    assert_eq!(finished.status, JobStatus::Dead);
    let pid = read_pids(&child)[0];
    wait_gone(pid);
    let cleanup = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        cleanup, "cleaning\ncleaned\n",
        "the child was killed before the end of its clean-up"
    );
    worker.shutdown(Duration::from_secs(10)).expect("shutdown");
}

#[test]
fn a_second_answer_is_dropped_and_the_next_job_runs_as_usual() {
    let env = setup();
    let script = write_script(
        env.dir.path(),
        "twice.sh",
        &format!(
            "#!/bin/sh\n{}",
            ANSWER_LOOP.replace(
                "\ndone",
                "\n  printf '{\"id\": %s, \"outcome\": \"ok\"}\\n' \"$id\"\ndone"
            )
        ),
    );
    let ids: Vec<i64> = (0..3)
        .map(|_| {
            let new = NewJob::new("twice", json!({})).max_attempts(1);
            env.queue.enqueue(new).expect("enqueue")
        })
        .collect();
    let builder =
        Worker::builder(&env.queue).handler("twice", Serve::new(script.to_string_lossy()));
    testing::drain(&builder).expect("drain");
    for id in ids {
        let done = job(&env, id);
        assert_eq!(done.status, JobStatus::Succeeded, "job {id}: {done:?}");
        assert_eq!(done.attempts, 1, "job {id}");
    }
}

#[test]
fn an_answer_without_an_id_says_so() {
    let env = setup();
    let script = write_script(
        env.dir.path(),
        "noid.sh",
        "#!/bin/sh\nwhile read -r line; do echo '{\"outcome\": \"ok\"}'; done\n",
    );
    let id = env
        .queue
        .enqueue(NewJob::new("noid", json!({})).max_attempts(1))
        .expect("enqueue");
    let builder = Worker::builder(&env.queue).handler("noid", Serve::new(script.to_string_lossy()));
    testing::drain(&builder).expect("drain");
    let error = job(&env, id).last_error.unwrap_or_default();
    assert!(error.starts_with("answer has no id: "), "{error}");
}

#[test]
fn equal_serve_failures_keep_equal_errors_and_group_in_stats() {
    let env = setup();
    let script = write_script(
        env.dir.path(),
        "crash.sh",
        "#!/bin/sh\nread -r line\necho 'cannot parse the input' >&2\nexit 3\n",
    );
    let ids: Vec<i64> = (0..3)
        .map(|_| {
            let new = NewJob::new("crash", json!({})).max_attempts(1);
            env.queue.enqueue(new).expect("enqueue")
        })
        .collect();
    let builder =
        Worker::builder(&env.queue).handler("crash", Serve::new(script.to_string_lossy()));
    testing::drain(&builder).expect("drain");
    let errors: Vec<String> = ids
        .iter()
        .map(|&id| job(&env, id).last_error.unwrap_or_default())
        .collect();
    assert_eq!(
        errors[0],
        "the process exited mid-job; process exit status: 3; a new process takes the next \
         job; stderr: cannot parse the input"
    );
    let groups = env.queue.error_groups(5).expect("error groups");
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0].count, 3);
}

#[test]
fn answers_and_errors_are_kept_within_their_limits() {
    let env = setup();
    // The payload says what to answer: a line over the limit, a result over 1 MiB, an
    // error of 20 000 bytes.
    let script = write_script(
        env.dir.path(),
        "big.sh",
        r#"#!/bin/sh
while IFS= read -r line; do
  id=${line#'{"id":'}; id=${id%%,*}
  case "$line" in
    *'"what":"line"'*) printf '{"id": %s, "outcome": "ok", "result": "' "$id"; head -c 2200000 /dev/zero | tr '\0' x; printf '"}\n' ;;
    *'"what":"result"'*) printf '{"id": %s, "outcome": "ok", "result": "' "$id"; head -c 1200000 /dev/zero | tr '\0' x; printf '"}\n' ;;
    *'"what":"error"'*) printf '{"id": %s, "outcome": "permanent", "error": "' "$id"; head -c 20000 /dev/zero | tr '\0' e; printf '"}\n' ;;
  esac
done
"#,
    );
    let enqueue = |what: &str| {
        let new = NewJob::new("big", json!({ "what": what })).max_attempts(1);
        env.queue.enqueue(new).expect("enqueue")
    };
    let (line, result, error) = (enqueue("line"), enqueue("result"), enqueue("error"));
    let builder = Worker::builder(&env.queue).handler("big", Serve::new(script.to_string_lossy()));
    testing::drain(&builder).expect("drain");

    let too_long = job(&env, line);
    assert_eq!(too_long.status, JobStatus::Dead);
    let why = too_long.last_error.unwrap_or_default();
    assert!(
        why.starts_with(&format!(
            "answer line over {} bytes",
            litejobs::exec::MAX_ANSWER_BYTES
        )),
        "{why}"
    );
    // A result larger than --exec keeps (1 MiB) is dropped, as there; the job succeeded.
    let dropped = job(&env, result);
    assert_eq!(dropped.status, JobStatus::Succeeded);
    assert_eq!(dropped.result, None);

    let cut = job(&env, error);
    assert_eq!(cut.status, JobStatus::Dead);
    let kept = cut.last_error.unwrap_or_default();
    assert!(
        kept.len() <= litejobs::defaults::MAX_ERROR_BYTES,
        "{} bytes kept",
        kept.len()
    );
    assert!(
        kept.starts_with("eeee") && kept.ends_with(" [... cut: 20000 bytes in all]"),
        "{}",
        &kept[kept.len() - 40..]
    );
    let history = env.queue.attempts(error).expect("attempts");
    assert_eq!(history[0].error.as_deref(), Some(kept.as_str()));
}
