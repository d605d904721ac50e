//! Prometheus text exposition (format 0.0.4) of a queue's figures, shared by
//! `litejobs metrics` and the dashboard.
//!
//! | metric | type | labels | what |
//! | --- | --- | --- | --- |
//! | `litejobs_jobs` | gauge | `queue`, `job_type`, `status` | jobs in the database (every status of a known queue and type, zeros included) |
//! | `litejobs_oldest_due_age_seconds` | gauge | `queue` | how long the oldest due job has waited past its run time; 0 when none is due |
//! | `litejobs_waiting_dependants` | gauge | `queue` | queued jobs held until jobs they wait for end (workflow steps, batch callbacks); never due, never overdue |
//! | `litejobs_dead_jobs` | gauge | | dead jobs waiting for a person (not requeued or discarded) |
//! | `litejobs_dead_last_hour` | gauge | | jobs that became dead in the last hour |
//! | `litejobs_expired_last_hour` | gauge | `queue`, `job_type` | jobs cancelled in the last hour because they were not started by their deadline |
//! | `litejobs_attempts` | gauge | `job_type`, `outcome` | attempts recorded, by outcome (`succeeded`, `failed`, `timed_out`, `lost`, `released`, `cancelled`) |
//! | `litejobs_queue_paused` | gauge | `queue` | 1 for a paused queue, 0 otherwise |
//!
//! `litejobs_attempts` is a gauge, not a `_total` counter: it is counted from the rows in
//! the file, and pruning removes rows, which a counter must never show. Expired jobs are
//! counted over the last hour for the same reason, as dead ones are.
//!
//! ```
//! use litejobs::{metrics, NewJob, Queue};
//! use serde_json::json;
//! # fn main() -> litejobs::Result<()> {
//! let queue = Queue::open_in_memory()?;
//! queue.enqueue(NewJob::new("send_email", json!({})))?;
//! let text = metrics::prometheus_text(&queue)?;
//! assert!(text.contains(
//!     r#"litejobs_jobs{queue="default",job_type="send_email",status="queued"} 1"#));
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::error::Result;
use crate::job::JobStatus;
use crate::Queue;

pub use super::reads::{AttemptCount, MetricsSnapshot};
pub use crate::storage::reads::ExpiredCount;

/// The queue's metrics as Prometheus text.
pub fn prometheus_text(queue: &Queue) -> Result<String> {
    Ok(render(&queue.metrics_snapshot()?))
}

/// Prometheus text for a snapshot: each metric family with its `# HELP` and `# TYPE` line
/// before its samples, label values escaped.
pub fn render(snapshot: &MetricsSnapshot) -> String {
    let mut out = String::new();

    family(
        &mut out,
        "litejobs_jobs",
        "Jobs in the database by queue, job type and status.",
    );
    let pairs: BTreeSet<(&str, &str)> = snapshot
        .stats
        .counts
        .iter()
        .map(|c| (c.queue.as_str(), c.job_type.as_str()))
        .collect();
    let counts: BTreeMap<(&str, &str, JobStatus), i64> = snapshot
        .stats
        .counts
        .iter()
        .map(|c| ((c.queue.as_str(), c.job_type.as_str(), c.status), c.count))
        .collect();
    for (queue, job_type) in &pairs {
        for status in JobStatus::ALL {
            let n = counts
                .get(&(*queue, *job_type, status))
                .copied()
                .unwrap_or(0);
            sample(
                &mut out,
                "litejobs_jobs",
                &[
                    ("queue", queue),
                    ("job_type", job_type),
                    ("status", status.as_str()),
                ],
                &n.to_string(),
            );
        }
    }

    let mut queues: BTreeSet<&str> = pairs.iter().map(|(q, _)| *q).collect();
    queues.extend(snapshot.health.paused_queues.iter().map(String::as_str));
    let oldest: BTreeMap<&str, i64> = snapshot
        .oldest_due_age_ms
        .iter()
        .map(|(q, age)| (q.as_str(), *age))
        .collect();
    queues.extend(oldest.keys().copied());
    let held: BTreeMap<&str, i64> = snapshot
        .waiting_dependants
        .iter()
        .map(|(q, n)| (q.as_str(), *n))
        .collect();
    queues.extend(held.keys().copied());
    family(
        &mut out,
        "litejobs_oldest_due_age_seconds",
        "How long the oldest due job of the queue has waited past its run time; 0 when none is due.",
    );
    for queue in &queues {
        let age_ms = oldest.get(queue).copied().unwrap_or(0);
        sample(
            &mut out,
            "litejobs_oldest_due_age_seconds",
            &[("queue", queue)],
            &seconds(age_ms),
        );
    }

    family(
        &mut out,
        "litejobs_waiting_dependants",
        "Queued jobs of the queue held until jobs they wait for end (workflow steps, batch callbacks); never due, never overdue.",
    );
    for queue in &queues {
        sample(
            &mut out,
            "litejobs_waiting_dependants",
            &[("queue", queue)],
            &held.get(queue).copied().unwrap_or(0).to_string(),
        );
    }

    family(
        &mut out,
        "litejobs_dead_jobs",
        "Dead jobs waiting for a person (not requeued or discarded).",
    );
    sample(
        &mut out,
        "litejobs_dead_jobs",
        &[],
        &snapshot.health.dead.to_string(),
    );

    family(
        &mut out,
        "litejobs_dead_last_hour",
        "Jobs that became dead in the last hour.",
    );
    sample(
        &mut out,
        "litejobs_dead_last_hour",
        &[],
        &snapshot.health.dead_last_hour.to_string(),
    );

    family(
        &mut out,
        "litejobs_expired_last_hour",
        "Jobs cancelled in the last hour because they were not started by their deadline, by queue and job type.",
    );
    for e in &snapshot.expired {
        sample(
            &mut out,
            "litejobs_expired_last_hour",
            &[("queue", &e.queue), ("job_type", &e.job_type)],
            &e.count.to_string(),
        );
    }

    family(
        &mut out,
        "litejobs_attempts",
        "Attempts recorded in the database by job type and outcome (pruning lowers it).",
    );
    for a in &snapshot.attempts {
        sample(
            &mut out,
            "litejobs_attempts",
            &[("job_type", &a.job_type), ("outcome", &a.outcome)],
            &a.count.to_string(),
        );
    }

    family(
        &mut out,
        "litejobs_queue_paused",
        "1 when the queue is paused in every process, 0 otherwise.",
    );
    for queue in &queues {
        let paused = snapshot.health.paused_queues.iter().any(|p| p == queue);
        sample(
            &mut out,
            "litejobs_queue_paused",
            &[("queue", queue)],
            if paused { "1" } else { "0" },
        );
    }
    out
}

fn family(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} gauge");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: &str) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (label, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{label}=\"{}\"", escape_label_value(v));
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(value);
    out.push('\n');
}

/// Milliseconds as seconds, without a trailing `.0` for whole seconds.
fn seconds(ms: i64) -> String {
    if ms % 1000 == 0 {
        (ms / 1000).to_string()
    } else {
        format!("{}", ms as f64 / 1000.0)
    }
}

/// A label value as the text format wants it: `\`, `"` and line feed escaped. Other control
/// characters (a queue or job type written by another program can hold anything) become
/// U+FFFD: the format has no escape for them, and they must not reach a terminal or a log.
pub fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// HELP text as the text format wants it: `\` and line feed escaped.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::reads::Health;
    use crate::storage::reads::{Stats, StatusCount};

    #[test]
    fn label_values_escape_backslash_quote_and_newline() {
        assert_eq!(escape_label_value("plain"), "plain");
        assert_eq!(escape_label_value(r#"a"b"#), r#"a\"b"#);
        assert_eq!(escape_label_value(r"a\b"), r"a\\b");
        assert_eq!(escape_label_value("a\nb"), r"a\nb");
        assert_eq!(escape_label_value("\\\"\n"), r#"\\\"\n"#);
        assert_eq!(escape_label_value("ünïcode ok"), "ünïcode ok");
    }

    #[test]
    fn help_escapes_backslash_and_newline_only() {
        assert_eq!(escape_help("a\\b\n\"c\""), "a\\\\b\\n\"c\"");
    }

    #[test]
    fn seconds_keep_millisecond_precision() {
        assert_eq!(seconds(0), "0");
        assert_eq!(seconds(5000), "5");
        assert_eq!(seconds(1500), "1.5");
        assert_eq!(seconds(61_001), "61.001");
    }

    fn snapshot() -> MetricsSnapshot {
        MetricsSnapshot {
            stats: Stats {
                counts: vec![StatusCount {
                    queue: "q\"1".into(),
                    job_type: "t\\x\ny".into(),
                    status: JobStatus::Dead,
                    count: 2,
                }],
                oldest_due_age_ms: None,
                dead_last_hour: 1,
                expired_last_hour: 3,
            },
            health: Health {
                at_ms: 0,
                due_now: 0,
                scheduled: 0,
                waiting_dependants: 4,
                running: 0,
                oldest_due_age_ms: None,
                dead: 2,
                dead_last_hour: 1,
                expired_last_hour: 3,
                window_ms: 3_600_000,
                failed_attempts: 0,
                succeeded: 0,
                failure_rate: None,
                paused_queues: vec!["paused".into()],
            },
            oldest_due_age_ms: vec![],
            waiting_dependants: vec![("held\"q".into(), 4)],
            attempts: vec![AttemptCount {
                job_type: "t\\x\ny".into(),
                outcome: "failed".into(),
                count: 4,
            }],
            expired: vec![ExpiredCount {
                queue: "mail".into(),
                job_type: "reset\"email".into(),
                count: 3,
            }],
        }
    }

    #[test]
    fn render_escapes_labels_and_fills_every_status() {
        let text = render(&snapshot());
        assert!(text.contains(
            "litejobs_jobs{queue=\"q\\\"1\",job_type=\"t\\\\x\\ny\",status=\"dead\"} 2\n"
        ));
        assert!(text.contains(
            "litejobs_jobs{queue=\"q\\\"1\",job_type=\"t\\\\x\\ny\",status=\"queued\"} 0\n"
        ));
        assert!(text.contains("litejobs_attempts{job_type=\"t\\\\x\\ny\",outcome=\"failed\"} 4\n"));
        assert!(text.contains("litejobs_queue_paused{queue=\"paused\"} 1\n"));
        assert!(text.contains(
            "litejobs_expired_last_hour{queue=\"mail\",job_type=\"reset\\\"email\"} 3\n"
        ));
        assert!(text.contains("litejobs_queue_paused{queue=\"q\\\"1\"} 0\n"));
        assert!(text.contains("litejobs_dead_jobs 2\n"));
        assert!(text.contains("litejobs_waiting_dependants{queue=\"held\\\"q\"} 4\n"));
        assert!(text.contains("litejobs_waiting_dependants{queue=\"paused\"} 0\n"));
        // Every line is a comment or a sample on one line: no raw newline leaked.
        for line in text.lines() {
            assert!(
                line.starts_with("# ") || line.starts_with("litejobs_"),
                "{line:?}"
            );
        }
    }
}
