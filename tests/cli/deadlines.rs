//! Deadlines on the command line: `enqueue --expire-after` and `--expires-at` (and the
//! refusal of a deadline already past), then what `show`, `list`, `stats`, `metrics` and
//! `check` say of an expired job: its deadline and reason, counted as expired, never as a
//! failure.

use super::*;

#[test]
fn enqueue_takes_a_deadline_and_the_views_tell_of_an_expired_job() {
    let fx = Fx::new();
    let id: i64 = fx
        .run(&[
            "enqueue",
            "password_reset_email",
            r#"{"user_id": 42}"#,
            "--expire-after",
            "15m",
        ])
        .ok()
        .stdout
        .trim()
        .parse()
        .expect("an id");
    let job = fx.job(id);
    assert_eq!(
        job.expires_at.map(|at| at - job.run_at),
        Some(15 * MINUTE),
        "15 minutes after it is due"
    );
    let at: i64 = fx
        .run(&[
            "enqueue",
            "t",
            "{}",
            "--delay",
            "1h",
            "--expires-at",
            "2999-01-01T01:00:00+01:00",
        ])
        .ok()
        .stdout
        .trim()
        .parse()
        .expect("an id");
    assert_eq!(fx.job(at).expires_at, Some(32_472_144_000_000));
    fx.run(&["enqueue", "t", "{}", "--expires-at", "2000-01-01T00:00:00Z"])
        .refused("expires_at 2000-01-01T00:00:00Z is not after the enqueue time");
    fx.run(&["enqueue", "t", "{}", "--expires-at", "soon"])
        .refused("write RFC 3339, e.g. 2026-12-05T03:15:00Z");
    assert_eq!(
        fx.sql_i64("SELECT count(*) FROM jobs"),
        2,
        "refusals add nothing"
    );

    // One more, enqueued 20 minutes ago with a 15-minute window: expired by now.
    fx.ago(20 * MINUTE);
    let late = fx.enqueue(
        NewJob::new("password_reset_email", json!({})).expire_after(Duration::from_secs(15 * 60)),
    );
    fx.ago(0);
    assert_eq!(fx.queue.cancel_expired().expect("sweep"), 1);
    let deadline = fx.job(late).expires_at.expect("a deadline");
    // RFC 3339, with milliseconds when it has some.
    let pattern = if deadline % 1000 == 0 {
        "%Y-%m-%dT%H:%M:%SZ"
    } else {
        "%Y-%m-%dT%H:%M:%S%.3fZ"
    };
    let reason = format!(
        "expired: not started by its deadline {}",
        chrono::DateTime::from_timestamp_millis(deadline)
            .expect("a time")
            .format(pattern)
    );

    let show = fx.run(&["show", &late.to_string()]).ok().stdout;
    assert!(
        show.contains("status     cancelled (attempt 0 of 6)"),
        "{show}"
    );
    assert!(show.lines().any(|l| l.starts_with("expires    ")), "{show}");
    assert!(
        show.contains(&format!("cancelled  by deadline: {reason}")),
        "{show}"
    );
    assert!(show.contains("no attempt has run"), "{show}");
    let list = fx.run(&["list"]).ok().stdout;
    let line = |id: i64| {
        list.lines()
            .find(|l| l.trim_start().starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("job {id} listed: {list}"))
            .to_string()
    };
    assert!(line(late).contains(&reason), "{list}");
    assert!(line(id).contains("expires in 14m"), "{list}");
    let stats = fx.run(&["stats"]).ok().stdout;
    assert!(
        stats.contains(
            "expired   1 in the last hour, not started by their deadline (cancelled, not \
             failures)"
        ),
        "{stats}"
    );
    let json = fx.run(&["stats", "--json"]).json();
    assert_eq!(json["expired_last_hour"], json!(1));
    let metrics = fx.run(&["metrics"]).ok().stdout;
    assert!(
        metrics.contains(
            "litejobs_expired_last_hour{queue=\"default\",job_type=\"password_reset_email\"} 1\n"
        ),
        "{metrics}"
    );
    // Not a failure: no dead job, no failed attempt.
    let check = [
        "check",
        "--max-dead",
        "0",
        "--max-dead-last-hour",
        "0",
        "--max-failed-rate",
        "0%",
        "--min-attempts",
        "0",
    ];
    assert_eq!(fx.run(&check).ok().stdout, "ok\n");
}

/// `work`'s start-up lines name the job types that wait with nothing to serve them; a job
/// already past its deadline does not wait (it will never start), so it is not named, even
/// before any sweep has cancelled it.
#[test]
fn work_does_not_name_an_expired_job_as_waiting() {
    let fx = Fx::new();
    fx.ago(20 * MINUTE);
    let expired = fx.enqueue(
        NewJob::new("password_reset_email", json!({})).expire_after(Duration::from_secs(15 * 60)),
    );
    fx.ago(0);
    fx.enqueue(NewJob::new("thumbnail", json!({})));
    assert_eq!(fx.job(expired).status, JobStatus::Queued, "not swept yet");

    let mut work = super::work::WorkChild::running(&fx.path, &["--exec", "other=true"]);
    assert!(work.wait_for_line("thumbnail waits"), "{:?}", work.seen);
    assert!(
        !work
            .seen
            .iter()
            .any(|l| l.contains("password_reset_email waits")),
        "{:?}",
        work.seen
    );
}
