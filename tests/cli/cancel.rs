//! `litejobs cancel`: by type and text, with a dry run, all or nothing; and, from a third
//! process, cancels of commands running in two `litejobs work` processes: each command's
//! process group stopped, the slots free for the next jobs.

use super::exec::{enqueue, job, runs, sigterm, wait_status};
use super::work::{initialized_db, WorkChild};
use super::*;
use crate::support::write_script;

/// Mail jobs of one campaign waiting, failing and running, and others that must stay.
struct Campaign {
    matching: Vec<i64>,
    running: i64,
    others: Vec<i64>,
}

fn campaign(fx: &Fx) -> Campaign {
    let by_payload = fx.enqueue(NewJob::new("mail", json!({"campaign": "spring-7"})));
    let by_error = fx.enqueue(NewJob::new("mail", json!({"campaign": "x"})));
    fx.fail_due("mail", "default", "template SPRING-7 missing", false);
    let running = fx.enqueue(NewJob::new("mail", json!({"campaign": "spring-7", "n": 3})));
    let other = fx.enqueue(NewJob::new("mail", json!({"campaign": "autumn"})));
    let sms = fx.enqueue(NewJob::new("sms", json!({"campaign": "spring-7"})));
    fx.sql_exec(&format!(
        "UPDATE jobs SET status = 'running', attempts = 1, locked_by = 'w', locked_until = {},
                started_at = {}
         WHERE id = {running}",
        SystemClock.now_ms() + DAY,
        SystemClock.now_ms()
    ));
    Campaign {
        matching: vec![by_payload, by_error, running],
        running,
        others: vec![other, sms],
    }
}

fn ids(value: &Value) -> Vec<i64> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("a list: {value}"))
        .iter()
        .map(|v| v.as_i64().or_else(|| v["id"].as_i64()).expect("an id"))
        .collect()
}

#[test]
fn cancel_by_type_and_text_lists_a_dry_run_then_cancels_all_of_them() {
    let fx = Fx::new();
    let c = campaign(&fx);
    let dry = fx
        .run(&[
            "cancel",
            "--type",
            "mail",
            "--search",
            "Spring-7",
            "--dry-run",
        ])
        .ok()
        .stdout;
    assert!(
        dry.starts_with("dry run: 3 job(s) would be cancelled\n"),
        "{dry}"
    );
    assert!(dry.contains("running") && dry.contains("failed"), "{dry}");
    let dry = fx
        .run(&[
            "cancel",
            "--type",
            "mail",
            "--search",
            "Spring-7",
            "--dry-run",
            "--json",
        ])
        .json();
    assert_eq!(dry["dry_run"], json!(true));
    assert_eq!(ids(&dry["jobs"]), c.matching);
    for &id in &c.matching {
        assert_ne!(
            fx.job(id).status,
            JobStatus::Cancelled,
            "a dry run changes nothing"
        );
    }

    let out = fx
        .run(&[
            "cancel",
            "--type",
            "mail",
            "--search",
            "spring-7",
            "--by",
            "ops",
            "--reason",
            "wrong list",
            "--json",
        ])
        .json();
    assert_eq!(out, json!({"cancelled": c.matching}));
    for &id in &c.matching {
        let job = fx.job(id);
        assert_eq!(job.status, JobStatus::Cancelled);
        assert_eq!(
            (job.cancelled_by.as_deref(), job.cancel_reason.as_deref()),
            (Some("ops"), Some("wrong list"))
        );
    }
    let history = fx.queue.attempts(c.running).expect("attempts");
    assert_eq!(history.len(), 1);
    assert_eq!(
        history[0].error.as_deref(),
        Some("cancelled by ops: wrong list")
    );
    for &id in &c.others {
        assert_ne!(fx.job(id).status, JobStatus::Cancelled);
    }
    assert_eq!(
        fx.run(&["cancel", "--type", "mail", "--search", "spring-7"])
            .ok()
            .stdout,
        "no queued, failed or running mail jobs match; nothing was cancelled\n"
    );
    let sms = c.others[1];
    assert_eq!(
        fx.run(&["cancel", "--type", "sms", "--by", "ops"])
            .ok()
            .stdout,
        format!("job {sms} cancelled\ncancelled 1 job(s) by ops\n")
    );
}

#[test]
fn a_bulk_cancel_the_database_refuses_in_part_cancels_nothing() {
    let fx = Fx::new();
    let c = campaign(&fx);
    fx.sql_exec(&format!(
        "CREATE UNIQUE INDEX one_row_per_attempt ON job_attempts (job_id, attempt);
         INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome)
         VALUES ({}, 1, 'w', 0, 0, 'lost');",
        c.running
    ));
    let needle = format!(
        "bulk cancel refused at job {}, nothing was cancelled",
        c.running
    );
    fx.run(&[
        "cancel",
        "--type",
        "mail",
        "--search",
        "spring-7",
        "--dry-run",
    ])
    .refused(&format!("dry run: the cancel would be refused: {needle}"));
    fx.run(&["cancel", "--type", "mail", "--search", "spring-7"])
        .refused(&needle);
    for &id in &c.matching {
        assert_ne!(fx.job(id).status, JobStatus::Cancelled, "job {id}");
    }
}

#[test]
fn cancel_refuses_unclear_targets() {
    let fx = Fx::new();
    let id = fx.enqueue(NewJob::new("mail", json!({}))).to_string();
    for args in [
        vec!["cancel"],
        vec!["cancel", &id, "--type", "mail"],
        vec!["cancel", &id, "--search", "x"],
        vec!["cancel", &id, "--dry-run"],
    ] {
        let out = fx.run(&args);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert_eq!(out.stdout, "", "{args:?}");
    }
    fx.run(&["cancel", "999999"]).refused("999999");
    assert_eq!(fx.job(id.parse().expect("id")).status, JobStatus::Queued);
}

/// Waits (bounded) until `path` holds `n` pids, one per line.
fn wait_pids(path: &Path, n: usize) -> Vec<i32> {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let pids: Vec<i32> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.len() >= n {
            return pids;
        }
        assert!(Instant::now() < end, "only {pids:?} in {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_gone(pid: i32) {
    let end = Instant::now() + Duration::from_secs(30);
    while runs(pid) {
        assert!(Instant::now() < end, "process {pid} still runs");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A command that hangs with a child ignoring SIGTERM (pids in `pids-JOB`), or succeeds at
/// once when its payload says `quick`.
const HANGS: &str = r#"#!/bin/sh
payload=$(cat)
case "$payload" in *quick*) echo '{"quick": true}'; exit 0 ;; esac
f=DIR/pids-$LITEJOBS_JOB_ID
sh -c "trap '' TERM; echo \$\$ >> $f; while :; do sleep 1; done" &
echo $$ >> $f
while :; do sleep 1; done
"#;

#[test]
fn a_cancel_from_a_third_process_stops_commands_running_in_two_worker_processes() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let script = write_script(
        dir.path(),
        "hang.sh",
        &HANGS.replace("DIR", &dir.path().display().to_string()),
    );
    let a = enqueue(&db, "hang_a", "{}");
    let b = enqueue(&db, "hang_b", "{}");
    let worker = |job_type: &str| {
        let exec = format!("{job_type}={}", script.display());
        let args = [
            "--exec",
            &exec,
            "--concurrency",
            "1",
            "--kill-grace",
            "300ms",
        ];
        WorkChild::running(&db, &args)
    };
    let mut work_a = worker("hang_a");
    let mut work_b = worker("hang_b");
    let pids_a = wait_pids(&dir.path().join(format!("pids-{a}")), 2);
    let pids_b = wait_pids(&dir.path().join(format!("pids-{b}")), 2);

    let out = run(
        &db,
        &[
            "cancel",
            &a.to_string(),
            "--by",
            "ops",
            "--reason",
            "runaway",
        ],
    )
    .ok()
    .stdout;
    assert!(out.contains("it was running"), "{out}");
    assert!(
        work_a.wait_for_line(&format!("job {a} (hang_a) was cancelled by ops: runaway")),
        "{:?}",
        work_a.seen
    );
    for pid in &pids_a {
        wait_gone(*pid);
    }
    assert!(pids_b.iter().all(|&pid| runs(pid)), "the other job runs on");

    let out = run(
        &db,
        &[
            "cancel", "--type", "hang_b", "--by", "ops", "--reason", "all", "--json",
        ],
    )
    .json();
    assert_eq!(out, json!({"cancelled": [b]}));
    assert!(
        work_b.wait_for_line(&format!("job {b} (hang_b) was cancelled by ops: all")),
        "{:?}",
        work_b.seen
    );
    for pid in &pids_b {
        wait_gone(*pid);
    }

    // Each worker's only slot is free again.
    let next_a = enqueue(&db, "hang_a", r#"{"quick": true}"#);
    let next_b = enqueue(&db, "hang_b", r#"{"quick": true}"#);
    assert_eq!(
        wait_status(&db, next_a, "succeeded")["result"],
        json!({"quick": true})
    );
    assert_eq!(
        wait_status(&db, next_b, "succeeded")["result"],
        json!({"quick": true})
    );
    for (work, id) in [(work_a, a), (work_b, b)] {
        sigterm(&work);
        let (code, lines) = work.exit_code();
        assert_eq!(code, Some(0), "{lines:?}");
        let shown = run(&db, &["show", &id.to_string(), "--json"]).json();
        assert_eq!(shown["job"]["status"], "cancelled", "{shown}");
        assert_eq!(shown["job"]["cancelled_by"], "ops", "{shown}");
        // Every field is there, those of a plain job too: a script may index it.
        for field in ["encryption_key", "expires_at"] {
            assert_eq!(shown["job"].get(field), Some(&json!(null)), "{shown}");
        }
        let attempts = shown["attempts"].as_array().expect("attempts");
        assert_eq!(attempts.len(), 1, "{shown}");
        assert_eq!(attempts[0]["outcome"], "cancelled", "{shown}");
    }
    assert_eq!(job(&db, a)["cancel_reason"], "runaway");
}

#[test]
fn show_prints_who_cancelled_a_job_and_why_once() {
    let fx = Fx::new();
    let id = fx.enqueue(NewJob::new("mail", json!({}))).to_string();
    fx.run(&["cancel", &id, "--by", "ana", "--reason", "wrong list"])
        .ok();
    let shown = fx.run(&["show", &id]).ok().stdout;
    let lines: Vec<&str> = shown
        .lines()
        .filter(|l| l.starts_with("cancelled"))
        .collect();
    assert_eq!(lines.len(), 1, "{shown}");
    assert!(lines[0].ends_with("by ana: wrong list"), "{shown}");
}
