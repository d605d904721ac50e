//! The dead letter: list, requeue (one, bulk, all or nothing), discard.

use super::*;

#[test]
fn dead_list_shows_jobs_awaiting_a_person_and_hides_requeued_ones_unless_all() {
    let fx = Fx::new();
    let (refused, rejected) = fx.dead_webhooks();
    fx.queue
        .requeue_dead(rejected, "ops", "fixed")
        .expect("requeue");

    let human = fx
        .run(&["dead", "list", "--type", "deliver_webhook"])
        .ok()
        .stdout;
    let rows: Vec<&str> = human
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with('('))
        .collect();
    assert_eq!(rows.len(), 3, "{human}");
    assert!(
        rows.iter().all(|r| r.contains("connection refused")),
        "{human}"
    );
    assert!(human.contains("--all shows them"), "{human}");

    let all = fx.run(&["dead", "list", "--all", "--json"]).json();
    let jobs = all["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 4);
    assert_eq!(jobs[0]["id"], json!(rejected));
    assert_eq!(jobs[0]["requeued_by"], json!("ops"));
    let searched = fx
        .run(&["dead", "list", "--search", "refused", "--json"])
        .json();
    let ids: Vec<i64> = searched["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["id"].as_i64())
        .collect();
    assert_eq!(ids, refused.iter().rev().copied().collect::<Vec<_>>());
}

#[test]
fn dead_requeue_one_or_in_bulk_makes_new_jobs_and_marks_the_dead_ones() {
    let fx = Fx::new();
    let (refused, rejected) = fx.dead_webhooks();

    let dry = fx
        .run(&[
            "dead",
            "requeue",
            "--type",
            "deliver_webhook",
            "--search",
            "connection refused",
            "--dry-run",
        ])
        .ok()
        .stdout;
    assert!(
        dry.starts_with("dry run: 3 dead job(s) would be requeued"),
        "{dry}"
    );
    assert_eq!(
        fx.queue
            .list(&litejobs::JobFilter::new())
            .expect("list")
            .len(),
        4,
        "dry run"
    );

    let out = fx
        .run(&[
            "dead",
            "requeue",
            "--type",
            "deliver_webhook",
            "--search",
            "connection refused",
            "--by",
            "you@example.com",
            "--reason",
            "endpoint fixed",
            "--json",
        ])
        .json();
    let pairs = out["requeued"].as_array().expect("requeued");
    assert_eq!(pairs.len(), 3);
    for (pair, dead_id) in pairs.iter().zip(&refused) {
        assert_eq!(keys(pair), ["dead_id", "new_id"].map(String::from).into());
        assert_eq!(pair["dead_id"], json!(dead_id));
        let new_id = pair["new_id"].as_i64().expect("new id");
        assert!(new_id > rejected);
        let dead = fx.job(*dead_id);
        assert_eq!(dead.status, JobStatus::Dead, "the dead one stays");
        assert_eq!(dead.requeued_by.as_deref(), Some("you@example.com"));
        assert_eq!(dead.requeue_reason.as_deref(), Some("endpoint fixed"));
        assert_eq!(dead.requeued_as, Some(new_id));
        assert!(dead.requeued_at.is_some());
        let fresh = fx.job(new_id);
        assert_eq!(fresh.status, JobStatus::Queued);
        assert_eq!(fresh.payload, dead.payload);
        assert_eq!(fresh.attempts, 0);
    }
    assert_eq!(
        fx.job(rejected).requeued_as,
        None,
        "not matched, not requeued"
    );

    // Nothing left to match: a clear message, exit 0.
    let again = fx
        .run(&[
            "dead",
            "requeue",
            "--type",
            "deliver_webhook",
            "--search",
            "refused",
            "--by",
            "a",
            "--reason",
            "b",
        ])
        .ok()
        .stdout;
    assert_eq!(again, "no dead jobs match; nothing was requeued\n");

    // One by id; twice is refused.
    let one = fx
        .run(&[
            "dead",
            "requeue",
            &rejected.to_string(),
            "--by",
            "ops",
            "--reason",
            "retry once",
        ])
        .ok()
        .stdout;
    assert!(
        one.starts_with(&format!("dead job {rejected} requeued as job ")),
        "{one}"
    );
    fx.run(&[
        "dead",
        "requeue",
        &rejected.to_string(),
        "--by",
        "ops",
        "--reason",
        "again",
    ])
    .refused("already requeued");
    // A job that is not dead is refused.
    let queued = fx.job(refused[0]).requeued_as.expect("requeued");
    fx.run(&[
        "dead",
        "requeue",
        &queued.to_string(),
        "--by",
        "ops",
        "--reason",
        "x",
    ])
    .refused("not dead");
}

#[test]
fn bulk_requeue_is_all_or_nothing() {
    let fx = Fx::new();
    fx.ago(5 * MINUTE);
    let ids: Vec<i64> = (0..3)
        .map(|n| {
            fx.enqueue(
                NewJob::new("deliver_webhook", json!({"n": n}))
                    .idempotency_key(format!("webhook:{n}")),
            )
        })
        .collect();
    fx.fail_due("deliver_webhook", "default", "connection refused", true);
    // A dead job releases its key; a live job now holds the key of the middle one.
    let holder = fx.enqueue(NewJob::new("other", json!({})).idempotency_key("webhook:1"));
    let jobs_before = fx.sql_i64("SELECT COUNT(*) FROM jobs");

    fx.run(&[
        "dead",
        "requeue",
        "--type",
        "deliver_webhook",
        "--by",
        "ops",
        "--reason",
        "fixed",
    ])
    .refused(&format!("job {} cannot be requeued", ids[1]));
    assert!(fx
        .run(&[
            "dead",
            "requeue",
            "--type",
            "deliver_webhook",
            "--by",
            "ops",
            "--reason",
            "fixed"
        ])
        .stderr
        .contains("nothing was requeued"));
    assert_eq!(
        fx.sql_i64("SELECT COUNT(*) FROM jobs"),
        jobs_before,
        "no new job"
    );
    for id in &ids {
        let job = fx.job(*id);
        assert_eq!(job.requeued_as, None, "job {id} was not marked");
        assert_eq!(job.requeued_by, None);
    }
    // Once the holder is gone, the same command requeues all three.
    fx.queue.cancel(holder).expect("cancel the holder");
    let out = fx
        .run(&[
            "dead",
            "requeue",
            "--type",
            "deliver_webhook",
            "--by",
            "ops",
            "--reason",
            "fixed",
            "--json",
        ])
        .json();
    assert_eq!(out["requeued"].as_array().map(Vec::len), Some(3));
}

#[test]
fn dead_discard_deletes_the_job_and_its_history_and_refuses_live_jobs() {
    let fx = Fx::new();
    let (refused, _) = fx.dead_webhooks();
    let live = fx.enqueue(NewJob::new("send_email", json!({})));
    let id = refused[0];
    let history = |id: i64| -> i64 {
        fx.sql_i64(&format!(
            "SELECT COUNT(*) FROM job_attempts WHERE job_id = {id}"
        ))
    };
    assert_eq!(history(id), 1);
    let out = fx
        .run(&["dead", "discard", &id.to_string(), "--json"])
        .json();
    assert_eq!(out, json!({"discarded": id, "kept_cancelled": false}));
    assert!(fx.queue.job(id).expect("read").is_none());
    assert_eq!(history(id), 0, "its attempts went with it");
    fx.run(&["dead", "discard", &live.to_string()])
        .refused("not dead");
    assert_eq!(fx.job(live).status, JobStatus::Queued);

    // The newest job keeps ids from being reused: discarding it cancels it instead, and
    // the output says so. On PostgreSQL ids come from a sequence, never reused: the newest
    // job is deleted like any other.
    let newest = fx.enqueue(NewJob::new("send_email", json!({})));
    fx.sql_exec(&format!(
        "UPDATE jobs SET status = 'dead' WHERE id = {newest}"
    ));
    if crate::support::on_postgres() {
        let out = fx
            .run(&["dead", "discard", &newest.to_string(), "--json"])
            .json();
        assert_eq!(out, json!({"discarded": newest, "kept_cancelled": false}));
        assert!(fx.queue.job(newest).expect("read").is_none());
    } else {
        let out = fx
            .run(&["dead", "discard", &newest.to_string()])
            .ok()
            .stdout;
        assert!(out.contains("now cancelled instead of deleted"), "{out}");
        assert_eq!(fx.job(newest).status, JobStatus::Cancelled);
    }
    assert!(fx
        .queue
        .dead_jobs(&Default::default())
        .expect("dead")
        .iter()
        .all(|j| j.id != newest));
    let next = fx.enqueue(NewJob::new("send_email", json!({})));
    assert_eq!(next, newest + 1, "its id is not handed out again");
}

/// `dead requeue ARGS` with `--dry-run`, then for real; asserts both are refused alike (exit
/// 2, the same reason), the dry run changes nothing, and returns the real run's reason.
fn refused_alike(fx: &Fx, target: &[&str]) -> String {
    let jobs_before = fx.sql_i64("SELECT COUNT(*) FROM jobs");
    let mut args = vec!["dead", "requeue"];
    args.extend_from_slice(target);
    let mut dry_args = args.clone();
    dry_args.push("--dry-run");
    let dry = fx
        .run(&dry_args)
        .refused("dry run: the requeue would be refused: ");
    assert_eq!(
        fx.sql_i64("SELECT COUNT(*) FROM jobs"),
        jobs_before,
        "the dry run added nothing"
    );
    assert_eq!(
        fx.sql_i64("SELECT COUNT(*) FROM jobs WHERE requeued_as IS NOT NULL"),
        0,
        "the dry run marked nothing"
    );
    args.extend(["--by", "ops", "--reason", "fixed"]);
    let real = fx.run(&args).refused("");
    let reason = real.stderr.trim().trim_start_matches("litejobs: ");
    assert_eq!(
        dry.stderr
            .trim()
            .trim_start_matches("litejobs: dry run: the requeue would be refused: "),
        reason,
        "the dry run finds what the real run refuses"
    );
    reason.to_string()
}

#[test]
fn a_dry_run_refuses_what_the_requeue_would_refuse_with_the_same_exit_code() {
    let fx = Fx::new();
    let ids: Vec<i64> = (0..5)
        .map(|n| {
            let job = NewJob::new("t", json!({ "n": n }));
            fx.enqueue(if n == 2 {
                job.idempotency_key("order-2")
            } else {
                job
            })
        })
        .collect();
    fx.fail_due("t", "default", "HTTP 500", true);
    // The dead job's key is now held by a live job: its requeue would be refused.
    let holder =
        fx.enqueue(NewJob::new("t", json!({"n": 2, "again": true})).idempotency_key("order-2"));
    let reason = refused_alike(&fx, &["--type", "t"]);
    assert!(
        reason.contains(&format!("job {}", ids[2])) && reason.contains("idempotency key"),
        "{reason}"
    );
    let reason = refused_alike(&fx, &[&ids[2].to_string()]);
    assert!(reason.contains("idempotency key"), "{reason}");

    // A payload another program broke: the dry run refuses it too.
    fx.queue
        .cancel(holder)
        .expect("cancelling the key's holder");
    let broken = ids[4];
    let update = format!("UPDATE jobs SET payload = 'not json {{' WHERE id = {broken}");
    if crate::support::on_postgres() {
        fx.sql_exec(&update);
    } else {
        fx.sql_exec(&format!(
            "PRAGMA ignore_check_constraints = ON; {update}; \
             PRAGMA ignore_check_constraints = OFF;"
        ));
    }
    let reason = refused_alike(&fx, &["--type", "t"]);
    assert!(
        reason.contains(&format!("job {broken}")) && reason.contains("payload"),
        "{reason}"
    );
    // Once the row is gone, the dry run and the real run agree on the other four.
    fx.sql_exec(&format!("DELETE FROM jobs WHERE id = {broken}"));
    let dry = fx
        .run(&["dead", "requeue", "--type", "t", "--dry-run", "--json"])
        .json();
    let dry_ids: Vec<i64> = dry["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["id"].as_i64())
        .collect();
    let real = fx
        .run(&[
            "dead", "requeue", "--type", "t", "--by", "ops", "--reason", "fixed", "--json",
        ])
        .json();
    let mut real_ids: Vec<i64> = real["requeued"]
        .as_array()
        .expect("requeued")
        .iter()
        .filter_map(|p| p["dead_id"].as_i64())
        .collect();
    real_ids.reverse();
    assert_eq!(dry_ids, real_ids, "newest first in the listing");
    assert_eq!(dry_ids.len(), 4);
}

#[test]
fn requeue_help_shows_by_and_reason_as_required() {
    let fx = Fx::new();
    let help = fx.run(&["dead", "requeue", "--help"]).ok().stdout;
    let usage: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Usage:"))
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(
        usage[0].ends_with("<ID|--type <TYPE>> --by <WHO> --reason <WHY>"),
        "{help}"
    );
    assert!(usage.iter().any(|l| l.ends_with("--dry-run")), "{help}");
}

/// `--search` narrows a requeue by type; given with one job's id it would be silently
/// ignored, so it is refused.
#[test]
fn requeue_of_one_job_with_a_search_text_is_refused() {
    let fx = Fx::new();
    let (refused, _) = fx.dead_webhooks();
    let id = refused[0].to_string();
    for args in [
        vec![
            "dead",
            "requeue",
            &id,
            "--search",
            "nothing like it",
            "--by",
            "a",
            "--reason",
            "b",
        ],
        vec![
            "dead",
            "requeue",
            &id,
            "--search",
            "nothing like it",
            "--dry-run",
        ],
    ] {
        let out = fx.run(&args);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains("--search"), "{out:?}");
    }
    assert_eq!(fx.job(refused[0]).requeued_as, None, "nothing was requeued");
}

/// A command's errors that differ in the log lines before the reason are one group: `stats`
/// shows it by the line that matters, `dead list` shows that line per job, and the group's
/// key from `stats --json` narrows `dead list --group` and a bulk requeue to exactly it.
#[test]
fn errors_group_by_the_line_that_matters_and_a_group_is_requeued_by_its_key() {
    let fx = Fx::new();
    let ids: Vec<i64> = (1..=3)
        .map(|n| fx.enqueue(NewJob::new("sync", json!({ "order": n }))))
        .collect();
    let builder =
        Worker::builder(&fx.queue).handler("sync", |ctx: &JobContext| -> Result<(), JobError> {
            Err(JobError::permanent(format!(
                "exit 1: INFO syncing order {}\nTraceback (most recent call last):\n  \
                 File \"sync.py\", line 3\nConnectionError: [Errno 111] Connection refused",
                ctx.id()
            )))
        });
    testing::drain(&builder).expect("drain");
    let other = fx.enqueue(NewJob::new("sync", json!({ "order": 9 })));
    fx.fail_due("sync", "default", "HTTP 422 Unprocessable", true);

    let headline = "exit 1: ConnectionError: [Errno 111] Connection refused";
    let stats = fx.run(&["stats"]).ok().stdout;
    let line = stats
        .lines()
        .find(|l| l.ends_with(headline))
        .unwrap_or_else(|| panic!("{stats}"));
    assert!(line.trim_start().starts_with("3 "), "{line}");
    let listed = fx.run(&["dead", "list"]).ok().stdout;
    assert!(!listed.contains("INFO syncing"), "{listed}");

    let json = fx.run(&["stats", "--json"]).json();
    let group = json["top_errors"]
        .as_array()
        .expect("top_errors")
        .iter()
        .find(|g| g["headline"] == json!(headline))
        .and_then(|g| g["group"].as_str())
        .expect("the group's key")
        .to_string();
    let in_group = fx
        .run(&["dead", "list", "--group", &group, "--json"])
        .json();
    assert_eq!(in_group["jobs"].as_array().expect("jobs").len(), 3);
    let out = fx
        .run(&[
            "dead",
            "requeue",
            "--type",
            "sync",
            "--group",
            &group,
            "--by",
            "ops",
            "--reason",
            "database back",
            "--json",
        ])
        .json();
    let dead_ids: Vec<i64> = out["requeued"]
        .as_array()
        .expect("requeued")
        .iter()
        .filter_map(|p| p["dead_id"].as_i64())
        .collect();
    assert_eq!(dead_ids, ids);
    assert_eq!(fx.job(other).requeued_as, None, "the other group stays");
}

/// A bulk requeue of many jobs lists its first 20 pairs and says how many more; `--json`
/// has them all.
#[test]
fn a_big_bulk_requeue_lists_its_first_pairs_and_counts_the_rest() {
    let fx = Fx::new();
    for n in 0..25 {
        fx.enqueue(NewJob::new("sync", json!({ "n": n })));
    }
    fx.fail_due("sync", "default", "boom", true);
    let out = fx
        .run(&[
            "dead", "requeue", "--type", "sync", "--by", "ops", "--reason", "fixed",
        ])
        .ok()
        .stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 22, "{out}");
    assert_eq!(lines[20], "... and 5 more (--json lists every one)");
    assert_eq!(lines[21], "requeued 25 job(s) by ops: fixed");
}

/// `show` says when a running job's lease has ended: its worker died or hung.
#[test]
fn show_says_a_lease_past_its_end_is_expired() {
    let fx = Fx::new();
    let id = fx.enqueue(NewJob::new("sync", json!({})));
    let past = SystemClock.now_ms() - 60_000;
    fx.sql_exec(&format!(
        "UPDATE jobs SET status = 'running', attempts = 1, locked_by = 'vm:1:dead',
                locked_until = {past}, started_at = {past} WHERE id = {id}"
    ));
    let show = fx.run(&["show", &id.to_string()]).ok().stdout;
    let lease = show
        .lines()
        .find(|l| l.starts_with("lease"))
        .unwrap_or_else(|| panic!("{show}"));
    assert!(
        lease.contains("held by vm:1:dead") && lease.contains("; expired: its worker died or hung"),
        "{lease}"
    );
}
