//! check's exit codes and metrics as valid Prometheus text.

use super::*;

#[test]
fn check_exits_1_with_one_line_per_crossed_threshold_and_0_otherwise() {
    let fx = Fx::new();
    assert_eq!(
        fx.run(&["check", "--max-dead", "0", "--max-oldest-age", "1m"])
            .ok()
            .stdout,
        "ok\n"
    );

    fx.dead_webhooks(); // four dead, four failed attempts, ten minutes ago
    fx.enqueue(NewJob::new("send_email", json!({}))); // due ten minutes ago
    fx.enqueue(NewJob::new("ok", json!({})));
    fx.succeed_due("ok", "default");
    let all = [
        "check",
        "--max-dead",
        "3",
        "--max-dead-last-hour",
        "3",
        "--max-oldest-age",
        "5m",
        "--max-failed-rate",
        "50%",
    ];
    let crossed = fx.run(&all);
    assert_eq!(crossed.code, Some(1), "{crossed:#?}");
    assert_eq!(crossed.stderr, "");
    let lines: Vec<&str> = crossed.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{crossed:#?}");
    assert!(
        lines[0].starts_with("dead jobs: 4 wait for a person, above the limit of 3"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("dead jobs growing: 4 died in the last hour"),
        "{lines:?}"
    );
    assert!(
        lines[2].starts_with("oldest due job has waited 10m"),
        "{lines:?}"
    );
    assert!(
        lines[3].starts_with("failure rate 80% (4 of 5 attempts in the last 1h), above 50%"),
        "{lines:?}"
    );

    let json_run = Run::from(
        litejobs(&fx.path)
            .args(all)
            .arg("--json")
            .output()
            .expect("run"),
    );
    assert_eq!(json_run.code, Some(1));
    let report: Value = serde_json::from_str(&json_run.stdout).expect("JSON");
    assert_eq!(report["ok"], json!(false));
    let checks: Vec<&str> = report["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| {
            assert_has_fields(f, &["check", "limit", "value", "message"]);
            f["check"].as_str().expect("a name")
        })
        .collect();
    assert_eq!(
        checks,
        [
            "max_dead",
            "max_dead_last_hour",
            "max_oldest_age",
            "max_failed_rate"
        ]
    );
    assert_has_fields(
        &report["health"],
        &["due_now", "dead", "oldest_due_age_ms", "failure_rate"],
    );

    // Each threshold alone, just above and at the measured value.
    let one = |args: &[&str]| fx.run(args).code;
    assert_eq!(one(&["check", "--max-dead", "4"]), Some(0));
    assert_eq!(one(&["check", "--max-dead-last-hour", "4"]), Some(0));
    assert_eq!(one(&["check", "--max-oldest-age", "1h"]), Some(0));
    assert_eq!(one(&["check", "--max-failed-rate", "0.8"]), Some(0));
    assert_eq!(
        one(&["check", "--max-failed-rate", "0.5", "--min-attempts", "6"]),
        Some(0)
    );
    assert_eq!(
        one(&["check", "--max-failed-rate", "0.5", "--window", "5m"]),
        Some(0),
        "outside the window"
    );
    // Requeued dead jobs no longer wait for a person.
    fx.queue
        .requeue_dead_matching("deliver_webhook", None, "ops", "fixed")
        .expect("requeue");
    assert_eq!(one(&["check", "--max-dead", "0"]), Some(0));
}

/// A sample line of the text format: metric name, labels (unescaped), value.
fn parse_sample(line: &str) -> (String, BTreeMap<String, String>, f64) {
    let name_end = line
        .find(['{', ' '])
        .unwrap_or_else(|| panic!("no value in {line:?}"));
    let name = line[..name_end].to_string();
    let mut labels = BTreeMap::new();
    let mut chars = line[name_end..].chars().peekable();
    if chars.peek() == Some(&'{') {
        chars.next();
        loop {
            let label: String = chars.by_ref().take_while(|c| *c != '=').collect();
            assert!(
                !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "label name {label:?} in {line:?}"
            );
            assert_eq!(chars.next(), Some('"'), "quoted value: {line:?}");
            let mut value = String::new();
            loop {
                match chars.next() {
                    Some('\\') => match chars.next() {
                        Some('\\') => value.push('\\'),
                        Some('"') => value.push('"'),
                        Some('n') => value.push('\n'),
                        other => panic!("bad escape {other:?} in {line:?}"),
                    },
                    Some('"') => break,
                    Some('\n') | None => panic!("unterminated value in {line:?}"),
                    Some(c) => value.push(c),
                }
            }
            labels.insert(label, value);
            match chars.next() {
                Some(',') => continue,
                Some('}') => break,
                other => panic!("expected ',' or '}}', got {other:?} in {line:?}"),
            }
        }
    }
    let rest: String = chars.collect();
    let value = rest
        .strip_prefix(' ')
        .unwrap_or_else(|| panic!("one space before the value: {line:?}"))
        .parse::<f64>()
        .unwrap_or_else(|e| panic!("value of {line:?}: {e}"));
    (name, labels, value)
}

#[test]
fn metrics_are_valid_prometheus_text_with_escaped_labels() {
    let fx = Fx::new();
    let weird = "we\"ird\\type\nsecond line";
    fx.ago(2 * MINUTE);
    fx.enqueue(NewJob::new(weird, json!({})).queue("q\"uoted"));
    fx.dead_webhooks();
    fx.queue.pause_queue("webhooks").expect("pause");

    let text = fx.run(&["metrics"]).ok().stdout;
    let mut helped = BTreeSet::new();
    let mut typed = BTreeSet::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(help) = line.strip_prefix("# HELP ") {
            let name = help.split(' ').next().expect("a name");
            assert!(
                helped.insert(name.to_string()),
                "one HELP per metric: {line}"
            );
        } else if let Some(ty) = line.strip_prefix("# TYPE ") {
            let (name, kind) = ty.split_once(' ').expect("name and type");
            assert!(helped.contains(name), "HELP before TYPE: {line}");
            assert!(["gauge", "counter"].contains(&kind), "{line}");
            assert!(
                typed.insert(name.to_string()),
                "one TYPE per metric: {line}"
            );
        } else {
            assert!(!line.starts_with('#'), "unknown comment {line:?}");
            let (name, labels, value) = parse_sample(line);
            assert!(typed.contains(&name), "sample before its TYPE line: {line}");
            assert!(!name.ends_with("_total"), "gauges carry no _total: {line}");
            samples.push((name, labels, value));
        }
    }
    let find = |name: &str, want: &[(&str, &str)]| -> f64 {
        samples
            .iter()
            .find(|(n, l, _)| {
                n == name
                    && want
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| *v)
            .unwrap_or_else(|| panic!("no {name} {want:?} in:\n{text}"))
    };
    assert_eq!(
        find(
            "litejobs_jobs",
            &[
                ("queue", "q\"uoted"),
                ("job_type", weird),
                ("status", "queued")
            ]
        ),
        1.0
    );
    assert_eq!(
        find(
            "litejobs_jobs",
            &[
                ("queue", "q\"uoted"),
                ("job_type", weird),
                ("status", "dead")
            ]
        ),
        0.0
    );
    assert_eq!(
        find(
            "litejobs_jobs",
            &[("job_type", "deliver_webhook"), ("status", "dead")]
        ),
        4.0
    );
    let age = find("litejobs_oldest_due_age_seconds", &[("queue", "q\"uoted")]);
    assert!((120.0..180.0).contains(&age), "{age}");
    assert_eq!(
        find("litejobs_oldest_due_age_seconds", &[("queue", "webhooks")]),
        0.0
    );
    assert_eq!(find("litejobs_dead_jobs", &[]), 4.0);
    assert_eq!(find("litejobs_dead_last_hour", &[]), 4.0);
    assert_eq!(
        find(
            "litejobs_attempts",
            &[("job_type", "deliver_webhook"), ("outcome", "failed")]
        ),
        4.0
    );
    assert_eq!(find("litejobs_queue_paused", &[("queue", "webhooks")]), 1.0);
    assert_eq!(find("litejobs_queue_paused", &[("queue", "q\"uoted")]), 0.0);

    let snapshot = fx.run(&["metrics", "--json"]).json();
    assert_has_fields(
        &snapshot,
        &["stats", "health", "oldest_due_age_ms", "attempts"],
    );
}
