//! `litejobs work --exec/--serve`: command handlers run by the binary, with real
//! scripts: jobs done end to end, shutdown mid-job that stops the command's process group,
//! a command that finishes within the grace, refusals at start, the Python --serve example.

use super::work::{initialized_db, WorkChild};
use super::*;
use crate::support::write_script;

pub(super) fn enqueue(db: &Path, job_type: &str, payload: &str) -> i64 {
    let out = run(db, &["enqueue", job_type, payload]).ok();
    out.stdout.trim().parse().expect("enqueue prints the id")
}

pub(super) fn job(db: &Path, id: i64) -> Value {
    run(db, &["show", &id.to_string(), "--json"]).json()["job"].clone()
}

/// Polls `show` until job `id` has `status` (bounded: fails after 30 s).
pub(super) fn wait_status(db: &Path, id: i64, status: &str) -> Value {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let job = job(db, id);
        if job["status"] == status {
            return job;
        }
        assert!(
            Instant::now() < end,
            "job {id} never became {status}: {job}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (bounded) until `path` holds a pid, and returns it.
pub(super) fn wait_pid(path: &Path) -> i32 {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < end,
            "the command never wrote {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(super) fn runs(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && stat.split_whitespace().nth(2) != Some("Z")
}

pub(super) fn sigterm(work: &WorkChild) {
    let pid = work.child.id().to_string();
    let sent = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(sent.success());
}

#[test]
fn work_exec_runs_a_script_per_job_with_the_database_in_its_environment() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let greet = write_script(
        dir.path(),
        "greet.sh",
        "#!/bin/sh\nname=$(cat | sed 's/.*\"name\": *\"\\([^\"]*\\)\".*/\\1/')\n[ -n \"$LITEJOBS_DB\" ] || exit 65\nprintf '{\"greeting\": \"hello %s\"}\\n' \"$name\"\n",
    );
    let ids: Vec<i64> = ["ada", "bob", "cy"]
        .iter()
        .map(|n| enqueue(&db, "greet", &format!("{{\"name\": \"{n}\"}}")))
        .collect();
    let exec = format!("greet={}", greet.display());
    let work = WorkChild::running(&db, &["--exec", &exec]);
    for (id, name) in ids.iter().zip(["ada", "bob", "cy"]) {
        let done = wait_status(&db, *id, "succeeded");
        assert_eq!(
            done["result"],
            json!({ "greeting": format!("hello {name}") })
        );
    }
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
}

#[test]
fn shutdown_mid_job_stops_the_command_s_process_group_and_releases_its_job() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let pidfile = dir.path().join("pid");
    // Ignores SIGTERM: only the SIGKILL after --kill-grace stops it.
    let stubborn = write_script(
        dir.path(),
        "stubborn.sh",
        &format!(
            "#!/bin/sh\ntrap '' TERM\necho $$ > {}\nwhile :; do sleep 0.1; done\n",
            pidfile.display()
        ),
    );
    let id = enqueue(&db, "slow", "{}");
    let exec = format!("slow={}", stubborn.display());
    let args = ["--exec", &exec, "--grace", "500ms", "--kill-grace", "300ms"];
    let work = WorkChild::running(&db, &args);
    let pid = wait_pid(&pidfile);
    assert!(runs(pid));
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
    assert!(!runs(pid), "the command outlived `work`: {lines:?}");
    let released = job(&db, id);
    assert_eq!(released["status"], "queued", "{released}");
    assert_eq!(
        released["attempts"], 0,
        "a released job keeps its attempt: {released}"
    );
    // What happened is said as it was: released at the end of the grace, not late for a
    // deadline it never had.
    assert!(
        lines.iter().any(|l| l.contains(&format!(
            "job {id} (slow) attempt 1 still running after the shutdown grace; released"
        ))),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("after its deadline")),
        "{lines:?}"
    );
}

#[test]
fn a_command_that_ends_within_the_grace_finishes_its_job() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let pidfile = dir.path().join("pid");
    let gofile = dir.path().join("go");
    // Runs until the test says go (after `work` got SIGTERM), then succeeds.
    let patient = write_script(
        dir.path(),
        "patient.sh",
        &format!(
            "#!/bin/sh\necho $$ > {}\nwhile [ ! -e {} ]; do sleep 0.05; done\necho '{{\"finished\": true}}'\n",
            pidfile.display(),
            gofile.display()
        ),
    );
    let id = enqueue(&db, "slow", "{}");
    let exec = format!("slow={}", patient.display());
    let mut work = WorkChild::running(&db, &["--exec", &exec, "--grace", "30s"]);
    wait_pid(&pidfile);
    sigterm(&work);
    assert!(work.wait_for_line("shutting down"), "{:?}", work.seen);
    std::fs::write(&gofile, "").expect("go");
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
    let done = job(&db, id);
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["result"], json!({"finished": true}));
}

#[test]
fn work_refuses_a_command_that_cannot_run_before_claiming_anything() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let id = enqueue(&db, "t", "{}");
    let missing = dir.path().join("missing.sh");
    let run_work = |args: &[&str]| {
        Run::from(
            litejobs(&db)
                .arg("work")
                .args(args)
                .output()
                .expect("running litejobs work"),
        )
    };
    run_work(&["--exec", &format!("t={}", missing.display())]).refused("not found");
    run_work(&["--exec", "t=no-such-program-anywhere --flag"]).refused("not found in PATH");
    let not_executable = dir.path().join("plain.txt");
    std::fs::write(&not_executable, "echo").expect("write");
    run_work(&["--exec", &format!("t={}", not_executable.display())])
        .refused("not an executable file");
    run_work(&["--exec", "t=/bin/true", "--serve", "t=/bin/cat"]).refused("has a command already");
    let bad = run_work(&["--exec", "no-equals-sign"]);
    assert_eq!(bad.code, Some(2), "{bad:?}");
    assert!(bad.stderr.contains("TYPE=COMMAND"), "{bad:?}");
    assert_eq!(job(&db, id)["status"], "queued", "nothing was claimed");
}

#[test]
fn work_help_documents_the_exit_codes_and_the_serve_protocol() {
    let help = Run::from(
        Command::new(BIN)
            .args(["work", "--help"])
            .output()
            .expect("running litejobs work --help"),
    )
    .ok()
    .stdout;
    for needle in [
        "--exec <TYPE=COMMAND>",
        "--serve <TYPE=COMMAND>",
        "--timeout <[TYPE=]DURATION>",
        "--kill-grace",
        "65           dead at once",
        "75           retry after",
        "99           snooze",
        "98           cancelled",
        "LITEJOBS_JOB_ID",
        "LITEJOBS_DEADLINE_MS",
        "\"outcome\":\"ok|retry|permanent|snooze|cancel\"",
    ] {
        assert!(
            help.contains(needle),
            "work --help lacks {needle:?}:\n{help}"
        );
    }
}

#[test]
fn work_serve_runs_the_python_example() {
    if !crate::support::have_tool("python3") {
        return;
    }
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/serve_worker.py");
    let counted = enqueue(&db, "count_words", r#"{"text": "one two three"}"#);
    let refused = enqueue(&db, "count_words", r#"{"no_text": 1}"#);
    let serve = format!("count_words=python3 {}", example.display());
    let work = WorkChild::running(&db, &["--serve", &serve, "--concurrency", "count_words=2"]);
    let done = wait_status(&db, counted, "succeeded");
    assert_eq!(done["result"], json!({"words": 3}));
    let dead = wait_status(&db, refused, "dead");
    assert_eq!(dead["last_error"], "payload needs a string 'text'");
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("exit status: 0")),
        "the example exits by itself when its stdin closes: {lines:?}"
    );
}

/// The example skips a cancel line that crossed its answer (as the protocol asks) instead of
/// failing on it, and goes on with the next job.
#[test]
fn the_python_example_skips_a_cancel_line_for_a_job_it_answered() {
    if !crate::support::have_tool("python3") {
        return;
    }
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/serve_worker.py");
    let mut child = std::process::Command::new("python3")
        .arg(&example)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let input = concat!(
        "{\"cancel\": 7}\n",
        "{\"id\": 8, \"type\": \"count_words\", \"queue\": \"default\", \"attempt\": 1, ",
        "\"max_attempts\": 6, \"deadline_ms\": 1, \"payload\": {\"text\": \"a b\"}}\n"
    );
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), input.as_bytes())
        .expect("write");
    let out = child
        .wait_with_output()
        .expect("the example ends at end of input");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "");
    let answers: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("an answer is JSON"))
        .collect();
    assert_eq!(
        answers,
        vec![json!({"id": 8, "outcome": "ok", "result": {"words": 2}})]
    );
}

#[test]
fn work_exec_runs_the_shell_example() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/exec_handler.sh");
    let photo = dir.path().join("photo.jpg");
    std::fs::write(&photo, "12345").expect("write");
    let there = enqueue(
        &db,
        "resize",
        &format!("{{\"path\": \"{}\"}}", photo.display()),
    );
    let missing = dir.path().join("later.jpg");
    let later = enqueue(
        &db,
        "resize",
        &format!("{{\"path\": \"{}\"}}", missing.display()),
    );
    let broken = enqueue(&db, "resize", r#"{"width": 640}"#);
    let exec = format!("resize={}", example.display());
    let work = WorkChild::running(&db, &["--exec", &exec]);
    let done = wait_status(&db, there, "succeeded");
    assert_eq!(
        done["result"],
        json!({"path": photo.display().to_string(), "bytes": 5})
    );
    let waiting = wait_status(&db, later, "failed");
    let error = waiting["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.starts_with("exit 75: job ") && error.contains("is not there yet"),
        "{error}"
    );
    let delay =
        waiting["run_at"].as_i64().unwrap_or(0) - waiting["updated_at"].as_i64().unwrap_or(0);
    assert!(
        (29_000..=31_000).contains(&delay),
        "retried after the printed 30 s: {delay} ms"
    );
    let dead = wait_status(&db, broken, "dead");
    assert!(
        dead["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("has no \"path\""),
        "{dead}"
    );
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
}

#[test]
fn a_second_signal_exits_at_once_and_takes_the_commands_with_it() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let pidfile = dir.path().join("pid");
    let stubborn = write_script(
        dir.path(),
        "stubborn.sh",
        &format!(
            "#!/bin/sh\ntrap '' TERM\necho $$ > {}\nwhile :; do sleep 0.1; done\n",
            pidfile.display()
        ),
    );
    enqueue(&db, "slow", "{}");
    let exec = format!("slow={}", stubborn.display());
    let mut work = WorkChild::running(&db, &["--exec", &exec, "--grace", "60s"]);
    let pid = wait_pid(&pidfile);
    sigterm(&work);
    assert!(work.wait_for_line("shutting down"), "{:?}", work.seen);
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(130), "{lines:?}");
    let end = Instant::now() + Duration::from_secs(10);
    while runs(pid) {
        assert!(
            Instant::now() < end,
            "the command outlived `work`: {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn idle_serve_processes_are_stopped_even_when_a_command_outlives_the_grace() {
    if !crate::support::have_tool("python3") {
        return;
    }
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let lazy_pid = dir.path().join("lazy");
    let slow_pid = dir.path().join("slow");
    // Answers jobs but does not exit when its stdin closes: only signals stop it.
    let lazy = write_script(
        dir.path(),
        "lazy.py",
        &format!(
            "#!/usr/bin/env python3\nimport json, os, sys, time\nopen({:?}, 'w').write(str(os.getpid()))\nfor line in sys.stdin:\n    job = json.loads(line)\n    print(json.dumps({{'id': job['id'], 'outcome': 'ok'}}), flush=True)\nwhile True: time.sleep(1)\n",
            lazy_pid.display().to_string()
        ),
    );
    let slow = write_script(
        dir.path(),
        "slow.sh",
        &format!(
            "#!/bin/sh\necho $$ > {}\nwhile :; do sleep 0.1; done\n",
            slow_pid.display()
        ),
    );
    let answered = enqueue(&db, "lz", "{}");
    let serve = format!("lz={}", lazy.display());
    let exec = format!("slow={}", slow.display());
    let args = [
        "--serve",
        &serve,
        "--exec",
        &exec,
        "--grace",
        "300ms",
        "--kill-grace",
        "300ms",
    ];
    let work = WorkChild::running(&db, &args);
    wait_status(&db, answered, "succeeded");
    enqueue(&db, "slow", "{}");
    let lazy = wait_pid(&lazy_pid);
    let slow = wait_pid(&slow_pid);
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
    assert!(!runs(slow), "the --exec command outlived `work`: {lines:?}");
    assert!(
        !runs(lazy),
        "the idle --serve process outlived `work`: {lines:?}"
    );
}

/// Kills the processes whose pids a file holds when the test ends, passed or not.
struct KillPidsOnDrop(PathBuf);

impl Drop for KillPidsOnDrop {
    fn drop(&mut self) {
        let pids = std::fs::read_to_string(&self.0).unwrap_or_default();
        for pid in pids.split_whitespace() {
            let _ = Command::new("kill")
                .args(["-KILL", pid])
                .stderr(Stdio::null())
                .status();
        }
    }
}

#[test]
fn a_serve_process_that_never_reads_its_job_is_gone_when_work_exits() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let pidfile = dir.path().join("stuck.pid");
    let _cleanup = KillPidsOnDrop(pidfile.clone());
    let stuck = write_script(
        dir.path(),
        "stuck.sh",
        &format!(
            "#!/bin/sh\necho $$ > {}\nexec sleep 1000\n",
            pidfile.display()
        ),
    );
    // The job line is longer than a pipe holds: writing it blocks until the process reads.
    let payload = format!("{{\"pad\": \"{}\"}}", "x".repeat(65_500));
    enqueue(&db, "stuck", &payload);
    let serve = format!("stuck={}", stuck.display());
    let args = [
        "--serve",
        &serve,
        "--timeout",
        "stuck=60s",
        "--grace",
        "300ms",
        "--kill-grace",
        "300ms",
    ];
    let work = WorkChild::running(&db, &args);
    let pid = wait_pid(&pidfile);
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
    assert!(!runs(pid), "the --serve process outlived `work`: {lines:?}");
}

#[test]
fn at_shutdown_a_shell_wrapper_s_child_gets_the_kill_grace_to_clean_up() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let log = dir.path().join("cleanup.log");
    let child = dir.path().join("child.pid");
    let _cleanup = KillPidsOnDrop(child.clone());
    // The wrapper dies at once on SIGTERM; its child takes 2 s to clean up, well within the
    // 30 s kill grace.
    let wrapper = write_script(
        dir.path(),
        "wrapper.sh",
        &format!(
            "#!/bin/sh\nsh -c 'trap \"echo cleaning >> {l}; sleep 2; echo cleaned >> {l}; exit 0\" TERM; echo $$ > {c}; while :; do sleep 0.1; done' &\nwait\n",
            l = log.display(),
            c = child.display()
        ),
    );
    enqueue(&db, "wrapped", "{}");
    let exec = format!("wrapped={}", wrapper.display());
    let args = ["--exec", &exec, "--grace", "300ms", "--kill-grace", "30s"];
    let work = WorkChild::running(&db, &args);
    wait_pid(&child);
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap_or_default(),
        "cleaning\ncleaned\n",
        "the clean-up was cut short: {lines:?}"
    );
}

#[test]
fn serve_logs_stay_bounded_and_on_one_line() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    // Each job: 30 stray lines on stdout, a progress line with a carriage return on stderr.
    let chatty = write_script(
        dir.path(),
        "chatty.sh",
        r#"#!/bin/sh
while IFS= read -r line; do
  id=${line#'{"id":'}; id=${id%%,*}
  i=0; while [ $i -lt 30 ]; do echo "debug line $i"; i=$((i + 1)); done
  printf '50%%\r80%%\n' >&2
  printf '{"id": %s, "outcome": "ok"}\n' "$id"
done
"#,
    );
    let ids: Vec<i64> = (0..3).map(|_| enqueue(&db, "chatty", "{}")).collect();
    let serve = format!("chatty={}", chatty.display());
    let work = WorkChild::running(&db, &["--serve", &serve, "--concurrency", "chatty=1"]);
    for id in ids {
        wait_status(&db, id, "succeeded");
    }
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
    let stray = lines.iter().filter(|l| l.contains("not JSON")).count();
    assert!(
        (1..10).contains(&stray),
        "90 stray lines, logged {stray} times: {lines:?}"
    );
    assert!(lines.iter().all(|l| !l.contains('\r')), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("50%\\r80%")),
        "the progress line, escaped: {lines:?}"
    );
}

#[test]
fn retry_schedules_of_command_types_are_set_printed_and_checked() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let fail = write_script(
        dir.path(),
        "fail.sh",
        "#!/bin/sh\necho 'no luck' >&2\nexit 3\n",
    );
    let exec = format!("t={}", fail.display());
    let first = enqueue(&db, "t", "{}");
    let mut work = WorkChild::start_with(&db, &["--exec", &exec, "--retry", "t=30s,2m"], &[]);
    assert!(
        work.wait_for_line(
            "t: runs {} per job, retries 30s,2m,2m,2m,2m,2m,... (6 attempts unless a job sets \
             max_attempts)"
                .replace("{}", &fail.display().to_string())
                .as_str()
        ),
        "{:?}",
        work.seen
    );
    let failed = wait_status(&db, first, "failed");
    let delay = failed["run_at"].as_i64().unwrap_or(0) - failed["updated_at"].as_i64().unwrap_or(0);
    assert!(
        (27_000..=33_000).contains(&delay),
        "retried after 30 s ±10 %: {delay} ms"
    );
    // The exit code is the attempt's status code.
    assert_eq!(failed["last_status_code"], 3, "{failed}");
    sigterm(&work);
    assert_eq!(work.exit_code().0, Some(0));

    // The same from the environment; a flag replaces it.
    let second = enqueue(&db, "t", "{}");
    let mut work = WorkChild::start_with(&db, &["--exec", &exec], &[("LITEJOBS_RETRY", "t=10m")]);
    assert!(work.wait_for_line("retries 10m,10m"), "{:?}", work.seen);
    let failed = wait_status(&db, second, "failed");
    let delay = failed["run_at"].as_i64().unwrap_or(0) - failed["updated_at"].as_i64().unwrap_or(0);
    assert!((540_000..=660_000).contains(&delay), "{delay} ms");
    sigterm(&work);
    assert_eq!(work.exit_code().0, Some(0));

    // Without --retry, the default schedule is printed.
    let mut work = WorkChild::start_with(&db, &["--exec", &exec], &[]);
    assert!(
        work.wait_for_line("retries 5s,10s,20s,40s,1m20s,2m40s,..."),
        "{:?}",
        work.seen
    );
    sigterm(&work);
    assert_eq!(work.exit_code().0, Some(0));

    let refused = |args: &[&str]| {
        Run::from(
            litejobs(&db)
                .arg("work")
                .args(args)
                .output()
                .expect("running litejobs work"),
        )
    };
    refused(&["--exec", &exec, "--retry", "other=30s"]).refused("no --exec or --serve handles");
    let bad = refused(&["--exec", &exec, "--retry", "t=30"]);
    assert_eq!(bad.code, Some(2), "{bad:?}");
    assert!(bad.stderr.contains("t=30"), "{bad:?}");
}

#[test]
fn work_checks_its_commands_before_it_creates_a_database() {
    let dir = temp_dir();
    let typo = dir.path().join("typo.db");
    let missing = dir.path().join("missing.sh");
    let refused = Run::from(
        litejobs(&typo)
            .args(["work", "--serve", &format!("t={}", missing.display())])
            .output()
            .expect("running litejobs work"),
    );
    refused.refused("not found");
    assert!(!typo.exists(), "a refused start created {}", typo.display());

    // A new file is created with one line, not one per migration step.
    let fresh = dir.path().join("fresh.db");
    let mut work = WorkChild::start_with(&fresh, &["--exec", "t=/bin/true"], &[]);
    assert!(work.wait_for_line("running on"), "{:?}", work.seen);
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
    let created: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("created database"))
        .collect();
    assert_eq!(created.len(), 1, "{lines:?}");
    assert!(created[0].contains("fresh.db"), "{lines:?}");
    assert!(lines.iter().all(|l| !l.contains("migrated")), "{lines:?}");
}

/// `work` says what happened to each attempt of a command, once: a success, a failure to
/// be retried and a dead job each get a line with the job's id, type and attempt, and a
/// failure the line of its error that matters (a traceback's exception line after the
/// command's exit code), as lists and error groups show it.
#[test]
fn work_logs_each_outcome_of_a_command_with_its_job_attempt_and_error() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let ok = write_script(dir.path(), "ok.sh", "#!/bin/sh\ncat >/dev/null\n");
    let flaky = write_script(
        dir.path(),
        "flaky.sh",
        "#!/bin/sh\ncat >/dev/null\necho 'connecting to crm' >&2\necho 'ConnectionError: refused' >&2\nexit 1\n",
    );
    let broken = write_script(
        dir.path(),
        "broken.sh",
        "#!/bin/sh\ncat >/dev/null\necho 'Traceback (most recent call last):' >&2\necho '  File \"x.py\", line 3' >&2\necho 'ValueError: no such size' >&2\nexit 65\n",
    );
    let done = enqueue(&db, "thumb", "{}");
    let retried = enqueue(&db, "crm", "{}");
    let dead = enqueue(&db, "resize", "{}");
    let mut work = WorkChild::start_with(
        &db,
        &[
            "--exec",
            &format!("thumb={}", ok.display()),
            "--exec",
            &format!("crm={}", flaky.display()),
            "--exec",
            &format!("resize={}", broken.display()),
        ],
        &[("RUST_LOG", "info")],
    );
    for needle in [
        format!("job {done} (thumb) attempt 1 succeeded"),
        format!(
            "job {retried} (crm) attempt 1 failed, to be retried: exit 1: ConnectionError: refused"
        ),
        format!("job {dead} (resize) attempt 1 failed, dead: exit 65: ValueError: no such size"),
    ] {
        // The three run at once: their lines come in any order.
        let seen = work.seen.iter().any(|l| l.contains(&needle));
        assert!(
            seen || work.wait_for_line(&needle),
            "{needle:?} in {:?}",
            work.seen
        );
    }
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
    let dead_lines = lines
        .iter()
        .filter(|l| l.contains(&format!("job {dead} ")))
        .count();
    assert_eq!(dead_lines, 1, "said once: {lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("ERROR") && l.contains(&format!("job {dead} "))),
        "a dead job is logged as an error: {lines:?}"
    );
    // The text lines say the job's fields in words only (the JSON lines carry them apart).
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with(&format!("job {done} (thumb) attempt 1 succeeded"))),
        "{lines:?}"
    );
}

/// `--log-format json` (here by its variable): every line `work` writes on stderr is one
/// JSON object with time, level, target and message, and a line about a job has its id,
/// type, queue and attempt as fields of their own.
#[test]
fn work_writes_json_log_lines_with_the_job_s_fields() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let broken = write_script(
        dir.path(),
        "broken.sh",
        "#!/bin/sh\ncat >/dev/null\necho 'ValueError: \"huge\" size' >&2\nexit 65\n",
    );
    let dead: i64 = run(&db, &["enqueue", "resize", "{}", "--queue", "images"])
        .ok()
        .stdout
        .trim()
        .parse()
        .expect("the job's id");
    let mut work = WorkChild::start_with(
        &db,
        &[
            "--queue",
            "images",
            "--exec",
            &format!("resize={}", broken.display()),
        ],
        &[("LITEJOBS_LOG_FORMAT", "json"), ("RUST_LOG", "info")],
    );
    assert!(
        work.wait_for_line("\"job_id\""),
        "a line about the job: {:?}",
        work.seen
    );
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
    let records: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect();
    for record in &records {
        for field in ["time", "level", "target", "message"] {
            assert!(record[field].is_string(), "{field} in {record}");
        }
    }
    let about_job: Vec<&Value> = records
        .iter()
        .filter(|r| r["job_id"] == json!(dead))
        .collect();
    assert_eq!(about_job.len(), 1, "{records:?}");
    let line = about_job[0];
    assert_eq!(line["job_type"], "resize");
    assert_eq!(line["queue"], "images");
    assert_eq!(line["attempt"], 1);
    assert_eq!(line["level"], "ERROR");
    let message = line["message"].as_str().unwrap_or_default();
    assert!(message.contains("ValueError: \"huge\" size"), "{message}");
    assert!(
        records.iter().any(|r| r["message"]
            .as_str()
            .is_some_and(|m| m.contains("stopped cleanly"))),
        "{records:?}"
    );
}

/// Under journald (`JOURNAL_STREAM` set, as systemd does for a service's output) each JSON
/// line starts with its syslog level, which journald keeps as the entry's priority.
#[test]
fn under_journald_each_json_line_starts_with_its_syslog_level() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let broken = write_script(
        dir.path(),
        "broken.sh",
        "#!/bin/sh\ncat >/dev/null\nexit 65\n",
    );
    let dead = enqueue(&db, "resize", "{}");
    let mut work = WorkChild::start_with(
        &db,
        &["--exec", &format!("resize={}", broken.display())],
        &[
            ("LITEJOBS_LOG_FORMAT", "json"),
            ("RUST_LOG", "info"),
            ("JOURNAL_STREAM", "8:12345"),
        ],
    );
    assert!(work.wait_for_line("\"job_id\""), "{:?}", work.seen);
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
    for line in &lines {
        let (level, json) = line.split_once('>').unwrap_or_else(|| panic!("{line:?}"));
        let record: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        let expected = match record["level"].as_str() {
            Some("ERROR") => "<3",
            Some("WARN") => "<4",
            Some("INFO") => "<6",
            _ => "<7",
        };
        assert_eq!(level, expected, "{line:?}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<3>") && l.contains(&format!("\"job_id\":{dead}"))),
        "{lines:?}"
    );
}

/// A command's stderr is its attempt's log: `show ID` prints it (secrets masked) under the
/// attempts, and its JSON has it under `logs`.
#[test]
fn a_command_s_stderr_is_kept_as_its_attempt_s_log() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let chatty = write_script(
        dir.path(),
        "chatty.sh",
        "#!/bin/sh\ncat >/dev/null\necho 'connecting with PASSWORD=hunter2' >&2\necho \"order $LITEJOBS_JOB_ID synced\" >&2\n",
    );
    let id = enqueue(&db, "chatty", "{}");
    let exec = format!("chatty={}", chatty.display());
    let work = WorkChild::running(&db, &["--exec", &exec]);
    wait_status(&db, id, "succeeded");
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");

    let show = run(&db, &["show", &id.to_string()]).ok().stdout;
    let log = show
        .split("log of attempt 1:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no log in: {show}"));
    assert_eq!(
        log,
        format!("  connecting with PASSWORD=[masked]\n  order {id} synced\n")
    );
    let json = run(&db, &["show", &id.to_string(), "--json"]).json();
    assert_eq!(json["logs"][0]["attempt"], json!(1));
    assert_eq!(
        json["logs"][0]["text"],
        json!(format!(
            "connecting with PASSWORD=[masked]\norder {id} synced\n"
        ))
    );
}

/// `--concurrency 0` leaves the default queue to other workers, not the queues named: a
/// `--queue urgent` without `=N` is worked with the default threads, and the worker says
/// where the jobs it serves are left. A queue named twice is refused before anything runs.
#[test]
fn concurrency_0_leaves_the_default_queue_and_works_the_queues_named() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let ok = write_script(dir.path(), "ok.sh", "#!/bin/sh\ncat >/dev/null\n");
    let exec = format!("t={}", ok.display());
    run(
        &db,
        &[
            "work", "--exec", &exec, "--queue", "urgent=1", "--queue", "urgent=3",
        ],
    )
    .refused("--queue urgent: given twice");
    let urgent: i64 = run(&db, &["enqueue", "t", "{}", "--queue", "urgent"])
        .ok()
        .stdout
        .trim()
        .parse()
        .expect("enqueue prints the id");
    let left = enqueue(&db, "t", "{}");
    let mut work = WorkChild::running(
        &db,
        &["--exec", &exec, "--concurrency", "0", "--queue", "urgent"],
    );
    wait_status(&db, urgent, "succeeded");
    assert!(
        work.wait_for_line(
            "1 job of type t waits in queue default, which this worker leaves to other \
             workers (--concurrency 0)"
        ),
        "{:?}",
        work.seen
    );
    assert_eq!(
        job(&db, left)["status"],
        "queued",
        "the default queue is left"
    );
    sigterm(&work);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(0), "{lines:?}");
}
