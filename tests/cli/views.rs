//! stats, list and show; secrets masked in every view.

use super::*;

#[test]
fn stats_answers_how_many_wait_how_many_fail_and_how_old_the_oldest_due_job_is() {
    let fx = Fx::new();
    let (_refused, _rejected) = fx.dead_webhooks();
    // Two emails due ten minutes ago that nobody picked up, one scheduled for later.
    fx.enqueue(NewJob::new("send_email", json!({"user_id": 1})));
    fx.enqueue(NewJob::new("send_email", json!({"user_id": 2})));
    fx.enqueue(
        NewJob::new("send_email", json!({"user_id": 3})).delay(Duration::from_secs(3 * 3600)),
    );
    // One report that fails and waits for its retry; one that succeeded.
    fx.enqueue(NewJob::new("report", json!({})).queue("reports"));
    fx.fail_due("report", "reports", "disk quota exceeded", false);
    fx.enqueue(NewJob::new("report_ok", json!({})).queue("reports"));
    fx.succeed_due("report_ok", "reports");

    let human = fx.run(&["stats"]).ok().stdout;
    assert!(
        human.contains("waiting   2 due now, 2 scheduled, 0 running; oldest due job waiting 10m"),
        "{human}"
    );
    assert!(
        human.contains(
            "failing   1 retrying, 4 dead (4 died in the last hour); 5 of 6 attempts failed"
        ),
        "{human}"
    );
    assert!(human.contains("webhooks  deliver_webhook"), "{human}");
    let error_lines: Vec<&str> = human
        .lines()
        .skip_while(|l| !l.starts_with("most common errors"))
        .skip(2)
        .collect();
    assert_eq!(error_lines.len(), 3, "{human}");
    assert!(
        error_lines[0].contains("connection refused"),
        "most frequent first: {human}"
    );
    assert!(error_lines[0].trim_start().starts_with("3  "), "{human}");

    let stats = fx.run(&["stats", "--json", "--errors", "2"]).json();
    assert_has_fields(
        &stats,
        &[
            "at_ms",
            "due_now",
            "scheduled",
            "running",
            "oldest_due_age_ms",
            "dead",
            "dead_last_hour",
            "window_ms",
            "failed_attempts",
            "succeeded",
            "failure_rate",
            "paused_queues",
            "counts",
            "top_errors",
        ],
    );
    assert_eq!(stats["due_now"], json!(2));
    assert_eq!(
        stats["scheduled"],
        json!(2),
        "the delayed email and the report retry"
    );
    assert_eq!(stats["dead"], json!(4));
    assert_eq!(stats["failed_attempts"], json!(5));
    assert_eq!(stats["succeeded"], json!(1));
    let age = stats["oldest_due_age_ms"].as_i64().expect("an age");
    assert!((10 * MINUTE..11 * MINUTE).contains(&age), "{age}");
    let errors = stats["top_errors"].as_array().expect("an array");
    assert_eq!(errors.len(), 2, "--errors limits the groups");
    assert_has_fields(
        &errors[0],
        &[
            "error",
            "count",
            "failed",
            "dead",
            "job_types",
            "first_seen_at",
            "last_seen_at",
        ],
    );
    assert_eq!(errors[0]["count"], json!(3));
    assert_eq!(errors[0]["dead"], json!(3));
    assert_eq!(errors[0]["job_types"], json!(["deliver_webhook"]));
    assert_has_fields(
        &stats["counts"][0],
        &["queue", "job_type", "status", "count"],
    );
}

#[test]
fn list_filters_by_status_type_queue_and_error_text_with_a_limit() {
    let fx = Fx::new();
    let (refused, rejected) = fx.dead_webhooks();
    let email = fx.enqueue(NewJob::new("send_email", json!({"user_id": 1})));

    let ids = |args: &[&str]| -> Vec<i64> {
        let mut all = vec!["list", "--json"];
        all.extend_from_slice(args);
        fx.run(&all).json()["jobs"]
            .as_array()
            .expect("jobs array")
            .iter()
            .map(|j| j["id"].as_i64().expect("id"))
            .collect()
    };
    let mut newest_first = refused.clone();
    newest_first.reverse();
    assert_eq!(ids(&["--search", "CONNECTION REFUSED"]), newest_first);
    assert_eq!(
        ids(&["--status", "dead", "--search", "422"]),
        vec![rejected]
    );
    assert_eq!(ids(&["--status", "queued"]), vec![email]);
    assert_eq!(ids(&["--type", "send_email"]), vec![email]);
    assert_eq!(
        ids(&["--queue", "webhooks", "--limit", "2"]),
        vec![rejected, refused[2]]
    );
    assert_eq!(
        ids(&["--queue", "webhooks", "--before", &refused[2].to_string()]),
        vec![refused[1], refused[0]]
    );

    let all = fx.run(&["list", "--json"]).json();
    for job in all["jobs"].as_array().expect("jobs") {
        assert_has_fields(job, JOB_FIELDS);
    }

    let human = fx
        .run(&["list", "--status", "dead", "--limit", "2"])
        .ok()
        .stdout;
    assert!(human.starts_with("ID  QUEUE"), "{human}");
    assert!(human.contains("dead    1/6"), "{human}");
    assert!(
        human.contains(&format!("next page: --before {}", refused[2])),
        "{human}"
    );
    assert_eq!(
        fx.run(&["list", "--type", "nothing"]).ok().stdout,
        "no jobs match\n"
    );
}

#[test]
fn show_prints_the_job_and_its_whole_attempt_history() {
    let fx = Fx::new();
    fx.ago(30 * MINUTE);
    let id = fx.enqueue(
        NewJob::new(
            "deliver_webhook",
            json!({"url": "https://crm.example", "token": "s3cr3t"}),
        )
        .max_attempts(3)
        .idempotency_key("evt:1"),
    );
    fx.fail_due(
        "deliver_webhook",
        "default",
        "HTTP 503 Service Unavailable",
        false,
    );
    fx.clock.advance(Duration::from_secs(3600));
    fx.fail_due("deliver_webhook", "default", "timeout after 10s", false);
    fx.clock.advance(Duration::from_secs(7200));
    fx.succeed_due("deliver_webhook", "default");

    let human = fx.run(&["show", &id.to_string()]).ok().stdout;
    assert!(
        human.contains("status           succeeded (attempt 3 of 3)"),
        "{human}"
    );
    assert!(human.contains("idempotency key  evt:1"), "{human}");
    assert!(human.contains("\"token\": \"[masked]\""), "{human}");
    assert!(!human.contains("s3cr3t"), "{human}");
    let attempts: Vec<&str> = human
        .lines()
        .skip_while(|l| *l != "attempts:")
        .skip(2)
        .collect();
    assert_eq!(attempts.len(), 3, "{human}");
    assert!(
        attempts[0].contains("failed") && attempts[0].contains("HTTP 503"),
        "{human}"
    );
    assert!(attempts[1].contains("timeout after 10s"), "{human}");
    assert!(attempts[2].contains("succeeded"), "{human}");

    let json = fx.run(&["show", &id.to_string(), "--json"]).json();
    assert_eq!(
        keys(&json),
        ["attempts", "job", "logs"].map(String::from).into()
    );
    assert_has_fields(&json["job"], JOB_FIELDS);
    assert_eq!(json["job"]["payload"]["token"], json!("[masked]"));
    let history = json["attempts"].as_array().expect("attempts");
    assert_eq!(history.len(), 3);
    for a in history {
        assert_has_fields(
            a,
            &[
                "job_id",
                "attempt",
                "worker",
                "started_at",
                "finished_at",
                "outcome",
                "error",
                "status_code",
                "duration_ms",
            ],
        );
    }
    assert_eq!(history[1]["error"], json!("timeout after 10s"));
}

#[test]
fn secrets_are_masked_in_show_list_and_dead_list_with_extra_names_from_flag_or_env() {
    let fx = Fx::new();
    let (refused, _) = fx.dead_webhooks();
    let id = refused[0];
    fx.queue
        .cancel(fx.enqueue(NewJob::new(
            "t",
            json!({"custom_pin": "pin-4321", "Authorization": "Bearer zz"}),
        )))
        .expect("cancel");
    let views: Vec<Vec<String>> = vec![
        vec!["show".into(), id.to_string()],
        vec!["show".into(), id.to_string(), "--json".into()],
        vec!["list".into(), "--json".into()],
        vec!["dead".into(), "list".into()],
        vec!["dead".into(), "list".into(), "--json".into()],
        vec![
            "dead".into(),
            "requeue".into(),
            "--type".into(),
            "deliver_webhook".into(),
            "--dry-run".into(),
        ],
    ];
    for view in &views {
        let args: Vec<&str> = view.iter().map(String::as_str).collect();
        let out = fx.run(&args).ok().stdout;
        for secret in ["hunter2", "k-123", "Bearer zz"] {
            assert!(!out.contains(secret), "{view:?} shows {secret:?}:\n{out}");
        }
        assert!(out.contains("[masked]"), "{view:?}:\n{out}");
    }
    // custom_pin is not a default secret; --secret-field and LITEJOBS_SECRET_FIELDS add it. (A
    // value no id or time can hold by chance.)
    assert!(fx.run(&["list", "--json"]).ok().stdout.contains("pin-4321"));
    let flagged = fx
        .run(&["list", "--json", "--secret-field", "custom_pin"])
        .ok()
        .stdout;
    assert!(!flagged.contains("pin-4321"), "{flagged}");
    let from_env = Run::from(
        litejobs(&fx.path)
            .args(["list", "--json"])
            .env("LITEJOBS_SECRET_FIELDS", "other, custom_pin")
            .output()
            .expect("running the binary"),
    )
    .ok()
    .stdout;
    assert!(!from_env.contains("pin-4321"), "{from_env}");
    // The stored payload itself is untouched.
    assert_eq!(fx.job(id).payload["password"], json!("hunter2"));
}

#[test]
fn a_reader_that_stops_early_ends_the_listing_quietly() {
    let fx = Fx::new();
    let jobs = (0..2_000)
        .map(|n| NewJob::new("bulk", json!({"n": n, "text": "x".repeat(100)})))
        .collect();
    fx.queue.enqueue_batch(jobs).expect("enqueue_batch");
    for args in [
        &["list", "--json", "--limit", "2000"][..],
        &["list", "--limit", "2000"],
    ] {
        let mut child = litejobs(&fx.path)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        // Far more than a pipe holds is written; read a little, then hang up like `| head`.
        let mut stdout = child.stdout.take().expect("piped stdout");
        let mut first = [0u8; 64];
        std::io::Read::read_exact(&mut stdout, &mut first).expect("some output");
        drop(stdout);
        let out = Run::from(child.wait_with_output().expect("wait"));
        assert_eq!(out.code, Some(0), "{args:?}: {out:#?}");
        assert_eq!(out.stderr, "", "{args:?}: {out:#?}");
    }
}

/// A webhook body written as JSON text (the documented form for other
/// languages), and secret names the old suffix rule missed, are masked in every view.
#[test]
fn json_text_bodies_and_secret_words_are_masked_in_every_view() {
    let fx = Fx::new();
    let body = json!({"user": "ada", "password": "hunter2", "smtp": {"SMTPPassword": "p4ss"}});
    let id = fx.enqueue(NewJob::new(
        "deliver_webhook",
        json!({
            "endpoint_id": 1, "event_id": "evt_1", "body": body.to_string(),
            "aws_secret_access_key": "AKIAsecret", "smtp.password": "dotted",
            "passwd": "pw-1", "credentials": {"user": "u", "pin": "9999"},
            "token_count": 812, "author": "ada"
        }),
    ));
    for view in [
        &["show", &id.to_string()][..],
        &["show", &id.to_string(), "--json"],
        &["list", "--json"],
        &["list"],
    ] {
        let out = fx.run(view).ok().stdout;
        for secret in ["hunter2", "p4ss", "AKIAsecret", "dotted", "pw-1", "9999"] {
            assert!(!out.contains(secret), "{view:?} shows {secret:?}:\n{out}");
        }
    }
    let shown = fx.run(&["show", &id.to_string(), "--json"]).json();
    let payload = &shown["job"]["payload"];
    assert_eq!(
        payload["body"],
        json!(r#"{"password":"[masked]","smtp":{"SMTPPassword":"[masked]"},"user":"ada"}"#)
    );
    assert_eq!(payload["credentials"], json!("[masked]"));
    assert_eq!(
        (payload["token_count"].clone(), payload["author"].clone()),
        (json!(812), json!("ada"))
    );
    // The stored payload itself is untouched.
    assert_eq!(fx.job(id).payload["body"], json!(body.to_string()));
}

#[test]
fn huge_errors_are_cut_in_show_list_dead_list_and_stats() {
    let fx = Fx::new();
    let (refused, _) = fx.dead_webhooks();
    // Errors as rows written before errors were capped could hold.
    let huge = crate::support::huge_error_bytes();
    let text = crate::support::sql_huge_text(huge - 4);
    fx.sql_exec(&format!(
        "UPDATE jobs SET last_error = {text} WHERE last_error IS NOT NULL"
    ));
    fx.sql_exec(&format!(
        "UPDATE job_attempts SET error = {text} WHERE error IS NOT NULL"
    ));
    let id = refused[0].to_string();
    for args in [
        vec!["show", &id],
        vec!["list"],
        vec!["list", "--status", "dead"],
        vec!["dead", "list"],
        vec!["dead", "list", "--all"],
        vec!["stats"],
    ] {
        let out = fx.run(&args).ok().stdout;
        assert!(
            out.len() < 64 * 1024,
            "{args:?} printed {} bytes",
            out.len()
        );
        assert!(!out.contains("TAIL"), "{args:?} printed a whole error");
    }
    // Read cut as litejobs stores errors, saying how long they were: the job's and each
    // attempt's.
    let show = fx.run(&["show", &id]).ok().stdout;
    let note = format!("[... cut: {huge} bytes in all]");
    assert!(
        show.matches(&note).count() >= 2,
        "show says what was left out, for the job and its attempt: {show}"
    );
}

#[test]
fn stats_labels_requeued_dead_jobs_so_the_summary_and_the_table_agree() {
    let fx = Fx::new();
    let (refused, _rejected) = fx.dead_webhooks();
    fx.queue
        .requeue_dead(refused[0], "ops", "endpoint fixed")
        .expect("requeue");
    let human = fx.run(&["stats"]).ok().stdout;
    assert!(
        human.contains(
            "3 dead not requeued and 1 requeued (4 in the DEAD column; 4 died in the last hour)"
        ),
        "{human}"
    );
    // The table's DEAD column: the requeued dead job stays dead.
    let header = human
        .lines()
        .find(|l| l.starts_with("QUEUE"))
        .unwrap_or_else(|| panic!("a counts table: {human}"));
    let row = human
        .lines()
        .find(|l| l.starts_with("webhooks"))
        .unwrap_or_else(|| panic!("a webhooks row: {human}"));
    let dead_column = header
        .split_whitespace()
        .position(|h| h == "DEAD")
        .expect("a DEAD column");
    assert_eq!(
        row.split_whitespace().nth(dead_column),
        Some("4"),
        "{human}"
    );
    let stats = fx.run(&["stats", "--json"]).json();
    assert_eq!(stats["dead"], json!(3), "dead jobs waiting for a person");
}
