//! What `litejobs work` says when it starts, so a new user sees at once why jobs would not
//! move: each built-in kind on or off and how (mailer, timeout, retry delays), a missing
//! default sender, and the job types waiting in the database that nothing in this process
//! serves. Also the environment variables `work --help` lists.
//!
//! The lines are built by pure functions ([`builtin_lines`], [`unserved_lines`]) from the
//! options and the counts, so they are tested without a worker or a log.

use std::collections::{BTreeMap, BTreeSet};

use litejobs::builtin::email::{self, EmailOptions, MailerConfig, SmtpTls};
use litejobs::builtin::webhook::{self, WebhookOptions};
use litejobs::builtin::BuiltinOptions;
use litejobs::defaults::DEFAULT_MAX_ATTEMPTS;
use litejobs::maintenance::ScheduleState;
use litejobs::{JobStatus, Queue, RetryPolicy, StatusCount};

use super::CliError;
use crate::duration::{compact, schedule_text};
use crate::output::one_line;

/// At most this many unserved job types get a line each; the rest are summed in one.
const MAX_UNSERVED_SHOWN: usize = 20;

/// One line of the report and the level it is logged at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// `Warn` for what keeps jobs from running as the user expects, `Info` otherwise.
    pub level: log::Level,
    /// The text, without the `litejobs work:` prefix.
    pub text: String,
}

impl Line {
    fn info(text: impl Into<String>) -> Line {
        Line {
            level: log::Level::Info,
            text: text.into(),
        }
    }

    fn warn(text: impl Into<String>) -> Line {
        Line {
            level: log::Level::Warn,
            text: text.into(),
        }
    }
}

/// Logs the report: one line per built-in kind, then a warning per job type that waits
/// (queued or failed rows) in the database and is in neither the built-in kinds `options`
/// enables nor `served` (the job types of the command handlers registered), then the jobs
/// waiting in queues it does not work and the `schedules` kept in the database whose jobs it
/// would not run. Called once the worker has started.
///
/// The waiting jobs are counted with [`Queue::stats`], the read behind `litejobs stats`: a
/// few hundred rows of kept counts and the small due index, on SQLite and PostgreSQL, at a
/// million jobs as at ten.
///
/// # Errors
/// When the counts cannot be read (the built-in lines are logged before). The worker is not
/// affected: log the error and go on serving.
pub fn report(
    queue: &Queue,
    options: &BuiltinOptions,
    served: &[String],
    queues: &[(String, usize)],
    schedules: &[ScheduleState],
) -> Result<(), CliError> {
    // A built-in type taken over by a command is the command's: its line would be false.
    let builtins = builtin_lines(options)
        .into_iter()
        .filter(|line| {
            !served
                .iter()
                .any(|t| line.text.starts_with(&format!("{t}: ")))
        })
        .collect();
    log_lines(builtins);
    // Jobs past their deadline never start: cancelled first, they are not named as waiting.
    // The worker's own sweep runs at the same time; this one waits for a job that sweep is
    // cancelling, so none is still counted as waiting below.
    queue.cancel_expired()?;
    let stats = queue.stats()?;
    let mut serving: BTreeSet<&str> = served_builtins(options).into_iter().collect();
    serving.extend(served.iter().map(String::as_str));
    log_lines(unserved_lines(&waiting_by_type(&stats.counts), &serving));
    let paused = queue.paused_queues()?;
    let counts: Vec<(&str, &str, JobStatus, i64)> = stats
        .counts
        .iter()
        .map(|c| (c.queue.as_str(), c.job_type.as_str(), c.status, c.count))
        .collect();
    log_lines(queue_lines(&counts, &serving, queues, &paused));
    let stored: Vec<(&str, &str, &str)> = schedules
        .iter()
        .filter_map(|s| {
            let job = s.job.as_ref()?;
            Some((s.name.as_str(), job.job_type.as_str(), job.queue.as_str()))
        })
        .collect();
    log_lines(schedule_lines(&stored, &serving, queues));
    Ok(())
}

/// Lines about jobs this worker could run but will not: of a type it serves, in a queue it
/// does not work (a warning), in a queue it was given no threads for (said, as asked for),
/// or in a queue that is paused (a warning). `counts` are `(queue, job type, status,
/// jobs)`, as in [`litejobs::Stats::counts`]; `queues` the worker's queues and their threads.
pub fn queue_lines(
    counts: &[(&str, &str, JobStatus, i64)],
    serving: &BTreeSet<&str>,
    queues: &[(String, usize)],
    paused: &[String],
) -> Vec<Line> {
    let mut elsewhere: BTreeMap<(&str, &str), (i64, bool)> = BTreeMap::new();
    let mut held: BTreeMap<&str, i64> = BTreeMap::new();
    for &(queue, job_type, status, n) in counts {
        let waiting = matches!(status, JobStatus::Queued | JobStatus::Failed) && n > 0;
        if !waiting || !serving.contains(job_type) {
            continue;
        }
        match queues.iter().find(|(name, _)| name == queue) {
            Some((_, 0)) => elsewhere.entry((queue, job_type)).or_insert((0, true)).0 += n,
            None => elsewhere.entry((queue, job_type)).or_insert((0, false)).0 += n,
            Some(_) if paused.iter().any(|q| q == queue) => *held.entry(queue).or_insert(0) += n,
            Some(_) => {}
        }
    }
    let mut lines: Vec<Line> = elsewhere
        .into_iter()
        .take(MAX_UNSERVED_SHOWN)
        .map(|((queue, job_type), (n, left))| {
            let (jobs, wait) = if n == 1 {
                ("job", "waits")
            } else {
                ("jobs", "wait")
            };
            let waiting = format!(
                "{n} {jobs} of type {} {wait} in queue {}",
                one_line(job_type),
                one_line(queue)
            );
            if !left {
                return Line::warn(format!(
                    "{waiting}, which this worker does not work; add --queue {}",
                    one_line(queue)
                ));
            }
            let given = if queue == litejobs::defaults::DEFAULT_QUEUE {
                "--concurrency 0".to_string()
            } else {
                format!("--queue {}=0", one_line(queue))
            };
            Line::info(format!(
                "{waiting}, which this worker leaves to other workers ({given})"
            ))
        })
        .collect();
    lines.extend(held.into_iter().map(|(queue, n)| {
        Line::warn(format!(
            "queue {} is paused with {n} {} this worker serves; `litejobs resume {}` starts them",
            one_line(queue),
            if n == 1 { "job" } else { "jobs" },
            one_line(queue)
        ))
    }));
    lines
}

/// Warnings about schedules kept in the database whose jobs this worker would enqueue but
/// not run: of a type it does not serve, or in a queue it does not work. Said at the start,
/// before their first jobs wait. `schedules` are `(name, job type, queue)`.
pub fn schedule_lines(
    schedules: &[(&str, &str, &str)],
    serving: &BTreeSet<&str>,
    queues: &[(String, usize)],
) -> Vec<Line> {
    schedules
        .iter()
        .filter_map(|&(name, job_type, queue)| {
            let (name, shown_type, shown_queue) =
                (one_line(name), one_line(job_type), one_line(queue));
            if !serving.contains(job_type) {
                return Some(Line::warn(format!(
                    "schedule {name} enqueues {shown_type}, which this worker does not run; \
                     add --exec {shown_type}=COMMAND (or --serve), or run it elsewhere"
                )));
            }
            let worked = queues.iter().any(|(q, threads)| q == queue && *threads > 0);
            (!worked).then(|| {
                Line::warn(format!(
                    "schedule {name} enqueues {shown_type} in queue {shown_queue}, which this \
                     worker does not work; add --queue {shown_queue}"
                ))
            })
        })
        .collect()
}

fn log_lines(lines: Vec<Line>) {
    for line in lines {
        log::log!(line.level, "litejobs work: {}", line.text);
    }
}

/// The job types of the built-in kinds `options` enables.
pub fn served_builtins(options: &BuiltinOptions) -> Vec<&'static str> {
    let mut types = Vec::new();
    if options.webhook_options().is_enabled() {
        types.push(webhook::JOB_TYPE);
    }
    if options.email_options().is_some() {
        types.push(email::JOB_TYPE);
    }
    types
}

/// One line per built-in kind: on or off, and how.
pub fn builtin_lines(options: &BuiltinOptions) -> Vec<Line> {
    vec![
        webhook_line(options.webhook_options()),
        email_line(options.email_options()),
    ]
}

fn webhook_line(options: &WebhookOptions) -> Line {
    if !options.is_enabled() {
        return Line::info(format!(
            "{}: off (LITEJOBS_WEBHOOK_ENABLED=0)",
            webhook::JOB_TYPE
        ));
    }
    let private = if options.allows_private_targets() {
        "; private and loopback targets allowed (LITEJOBS_WEBHOOK_ALLOW_PRIVATE)"
    } else {
        ""
    };
    Line::info(format!(
        "{}: on (timeout {}, {}){private}",
        webhook::JOB_TYPE,
        compact(options.request_timeout()),
        retries_text(options.retries())
    ))
}

fn email_line(options: Option<&EmailOptions>) -> Line {
    let Some(options) = options else {
        return Line::info(format!(
            "{}: off — set LITEJOBS_SMTP_URL (or LITEJOBS_MAIL_DIR / LITEJOBS_MAIL_LOG)",
            email::JOB_TYPE
        ));
    };
    let via = match &options.mailer {
        // Host, port and TLS only: the URL's user and password are never shown.
        MailerConfig::Smtp(smtp) => format!(
            "via smtp://{}:{}?tls={} (timeout {})",
            smtp.host(),
            smtp.port_or_default(),
            tls_name(smtp.tls_mode()),
            compact(smtp.timeout_value())
        ),
        MailerConfig::Dir(dir) => format!(
            "writing .eml files to {} (LITEJOBS_MAIL_DIR: nothing is sent)",
            one_line(&dir.display().to_string())
        ),
        MailerConfig::Log => "logging emails only (LITEJOBS_MAIL_LOG: nothing is sent)".into(),
        _ => "with a mailer this report does not know".into(),
    };
    let line = format!(
        "{}: on {via}, {}",
        email::JOB_TYPE,
        retries_text(&options.retry_policy)
    );
    match &options.default_from {
        Some(from) => Line::info(format!("{line}; default sender {}", one_line(from))),
        None => Line::warn(format!(
            "{line}; warning: LITEJOBS_MAIL_FROM unset — jobs without \"from\" will go dead"
        )),
    }
}

fn tls_name(tls: SmtpTls) -> &'static str {
    match tls {
        SmtpTls::None => "none",
        SmtpTls::StartTls => "starttls",
        SmtpTls::Tls => "tls",
        _ => "other",
    }
}

/// `retries 5s,5m,30m,2h,5h,10h,... (6 attempts unless a job sets max_attempts)`: the
/// delays after the first six failed attempts, without jitter.
pub fn retries_text(policy: &RetryPolicy) -> String {
    format!(
        "retries {},... ({DEFAULT_MAX_ATTEMPTS} attempts unless a job sets max_attempts)",
        schedule_text(policy, 6)
    )
}

/// Waiting (queued or failed) jobs per job type, across queues.
pub fn waiting_by_type(counts: &[StatusCount]) -> BTreeMap<String, i64> {
    let mut waiting = BTreeMap::new();
    for c in counts {
        if matches!(c.status, JobStatus::Queued | JobStatus::Failed) && c.count > 0 {
            *waiting.entry(c.job_type.clone()).or_insert(0) += c.count;
        }
    }
    waiting
}

/// A warning per job type in `waiting` that is not in `serving`, most jobs first; past
/// [`MAX_UNSERVED_SHOWN`] types, one line sums the rest.
pub fn unserved_lines(waiting: &BTreeMap<String, i64>, serving: &BTreeSet<&str>) -> Vec<Line> {
    let mut unserved: Vec<(&str, i64)> = waiting
        .iter()
        .filter(|(job_type, n)| **n > 0 && !serving.contains(job_type.as_str()))
        .map(|(job_type, n)| (job_type.as_str(), *n))
        .collect();
    unserved.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut lines: Vec<Line> = unserved
        .iter()
        .take(MAX_UNSERVED_SHOWN)
        .map(|(job_type, n)| Line::warn(unserved_text(job_type, *n)))
        .collect();
    if unserved.len() > MAX_UNSERVED_SHOWN {
        let rest = &unserved[MAX_UNSERVED_SHOWN..];
        let jobs: i64 = rest.iter().map(|(_, n)| n).sum();
        lines.push(Line::warn(format!(
            "and {jobs} jobs of {} more types wait with nothing here to serve them (see `litejobs stats`)",
            rest.len()
        )));
    }
    lines
}

fn unserved_text(job_type: &str, n: i64) -> String {
    let (jobs, them) = if n == 1 {
        (format!("1 job of type {} waits", one_line(job_type)), "it")
    } else {
        (
            format!("{n} jobs of type {} wait", one_line(job_type)),
            "them",
        )
    };
    let hint = if job_type == email::JOB_TYPE {
        "set LITEJOBS_SMTP_URL (or LITEJOBS_MAIL_DIR / LITEJOBS_MAIL_LOG)".to_string()
    } else if job_type == webhook::JOB_TYPE {
        "webhook delivery is off: unset LITEJOBS_WEBHOOK_ENABLED".to_string()
    } else {
        format!(
            "pass --exec {}=COMMAND or run a worker that does",
            one_line(job_type)
        )
    };
    format!("{jobs} and nothing here serves {them}; {hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &'static [(&'static str, &'static str)]) -> BuiltinOptions {
        BuiltinOptions::from_lookup(&|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
        .expect("valid options")
    }

    fn texts(lines: &[Line]) -> Vec<(log::Level, &str)> {
        lines.iter().map(|l| (l.level, l.text.as_str())).collect()
    }

    #[test]
    fn defaults_show_webhooks_on_with_their_schedule_and_email_off() {
        let options = lookup(&[]);
        let lines = builtin_lines(&options);
        assert_eq!(
            texts(&lines),
            vec![
                (
                    log::Level::Info,
                    "deliver_webhook: on (timeout 10s, retries 5s,5m,30m,2h,5h,10h,... \
                     (6 attempts unless a job sets max_attempts))"
                ),
                (
                    log::Level::Info,
                    "send_email: off — set LITEJOBS_SMTP_URL (or LITEJOBS_MAIL_DIR / \
                     LITEJOBS_MAIL_LOG)"
                ),
            ]
        );
        assert_eq!(served_builtins(&options), vec!["deliver_webhook"]);
    }

    #[test]
    fn smtp_without_a_sender_warns_and_never_shows_the_password() {
        let options = lookup(&[
            (
                "LITEJOBS_SMTP_URL",
                "smtp://mailer:s3cret@mail.example.com:2525?tls=starttls",
            ),
            ("LITEJOBS_EMAIL_RETRY_SCHEDULE", "30s,2m"),
            ("LITEJOBS_WEBHOOK_ENABLED", "0"),
        ]);
        let lines = builtin_lines(&options);
        assert_eq!(
            lines[0],
            Line::info("deliver_webhook: off (LITEJOBS_WEBHOOK_ENABLED=0)")
        );
        assert_eq!(lines[1].level, log::Level::Warn);
        assert_eq!(
            lines[1].text,
            "send_email: on via smtp://mail.example.com:2525?tls=starttls (timeout 10s), \
             retries 30s,2m,2m,2m,2m,2m,... (6 attempts unless a job sets max_attempts); \
             warning: LITEJOBS_MAIL_FROM unset — jobs without \"from\" will go dead"
        );
        assert!(lines
            .iter()
            .all(|l| !l.text.contains("s3cret") && !l.text.contains("mailer:")));
        assert_eq!(served_builtins(&options), vec!["send_email"]);
    }

    #[test]
    fn a_sender_and_the_dev_mailers_are_info() {
        let options = lookup(&[
            ("LITEJOBS_MAIL_DIR", "/tmp/outbox"),
            ("LITEJOBS_MAIL_FROM", "app@example.com"),
            ("LITEJOBS_WEBHOOK_ALLOW_PRIVATE", "1"),
        ]);
        let lines = builtin_lines(&options);
        assert!(
            lines.iter().all(|l| l.level == log::Level::Info),
            "{lines:?}"
        );
        assert!(lines[0]
            .text
            .ends_with("; private and loopback targets allowed (LITEJOBS_WEBHOOK_ALLOW_PRIVATE)"));
        assert!(
            lines[1]
                .text
                .starts_with("send_email: on writing .eml files to /tmp/outbox")
                && lines[1].text.ends_with("; default sender app@example.com"),
            "{}",
            lines[1].text
        );
        let log = builtin_lines(&lookup(&[("LITEJOBS_MAIL_LOG", "1")]));
        assert!(
            log[1].text.contains("logging emails only"),
            "{}",
            log[1].text
        );
    }

    #[test]
    fn waiting_types_nothing_serves_get_a_warning_each_with_the_right_hint() {
        let waiting: BTreeMap<String, i64> = [
            ("resize", 42),
            ("send_email", 3),
            ("deliver_webhook", 5),
            ("thumbnail", 1),
            ("served_one", 9),
        ]
        .into_iter()
        .map(|(t, n)| (t.to_string(), n))
        .collect();
        let serving: BTreeSet<&str> = ["deliver_webhook", "served_one"].into_iter().collect();
        let lines = unserved_lines(&waiting, &serving);
        assert!(lines.iter().all(|l| l.level == log::Level::Warn));
        assert_eq!(
            lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(),
            vec![
                "42 jobs of type resize wait and nothing here serves them; pass --exec \
                 resize=COMMAND or run a worker that does",
                "3 jobs of type send_email wait and nothing here serves them; set \
                 LITEJOBS_SMTP_URL (or LITEJOBS_MAIL_DIR / LITEJOBS_MAIL_LOG)",
                "1 job of type thumbnail waits and nothing here serves it; pass --exec \
                 thumbnail=COMMAND or run a worker that does",
            ]
        );
        let all: BTreeSet<&str> = waiting.keys().map(String::as_str).collect();
        assert!(unserved_lines(&waiting, &all).is_empty());
    }

    #[test]
    fn many_unserved_types_are_summed_past_the_limit() {
        let waiting: BTreeMap<String, i64> = (0..MAX_UNSERVED_SHOWN + 3)
            .map(|i| (format!("type{i:02}"), 10))
            .collect();
        let lines = unserved_lines(&waiting, &BTreeSet::new());
        assert_eq!(lines.len(), MAX_UNSERVED_SHOWN + 1);
        assert_eq!(
            lines[MAX_UNSERVED_SHOWN].text,
            "and 30 jobs of 3 more types wait with nothing here to serve them (see `litejobs stats`)"
        );
    }

    #[test]
    fn a_job_type_with_control_characters_stays_on_one_line() {
        let waiting: BTreeMap<String, i64> = [("evil\ntype".to_string(), 2)].into();
        let lines = unserved_lines(&waiting, &BTreeSet::new());
        assert!(!lines[0].text.contains('\n'), "{}", lines[0].text);
    }

    #[test]
    fn schedules_whose_jobs_this_worker_would_not_run_are_named() {
        let serving: BTreeSet<&str> = ["resize"].into_iter().collect();
        let queues = vec![("default".to_string(), 4), ("mail".to_string(), 0)];
        let lines = schedule_lines(
            &[
                ("nightly", "resize", "default"),
                ("quick", "ping", "pings"),
                ("thumbs", "resize", "images"),
                ("letters", "resize", "mail"),
            ],
            &serving,
            &queues,
        );
        let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(
            texts,
            vec![
                "schedule quick enqueues ping, which this worker does not run; add --exec ping=COMMAND (or --serve), or run it elsewhere",
                "schedule thumbs enqueues resize in queue images, which this worker does not work; add --queue images",
                "schedule letters enqueues resize in queue mail, which this worker does not work; add --queue mail",
            ]
        );
    }

    #[test]
    fn jobs_in_queues_not_worked_or_paused_are_named() {
        let counts = vec![
            ("images", "resize", JobStatus::Queued, 3),
            ("default", "resize", JobStatus::Queued, 2),
            ("hold", "resize", JobStatus::Failed, 1),
            ("images", "other", JobStatus::Queued, 9),
            ("images", "resize", JobStatus::Succeeded, 7),
        ];
        let serving: BTreeSet<&str> = ["resize"].into_iter().collect();
        let queues = vec![
            ("default".to_string(), 4),
            ("hold".to_string(), 1),
            ("mail".to_string(), 0),
        ];
        let mut counts = counts;
        counts.push(("mail", "resize", JobStatus::Queued, 4));
        let lines = queue_lines(&counts, &serving, &queues, &["hold".to_string()]);
        let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(
            texts,
            vec![
                "3 jobs of type resize wait in queue images, which this worker does not work; add --queue images",
                "4 jobs of type resize wait in queue mail, which this worker leaves to other workers (--queue mail=0)",
                "queue hold is paused with 1 job this worker serves; `litejobs resume hold` starts them",
            ]
        );
        assert_eq!(lines[1].level, log::Level::Info, "asked for: not a warning");
        let idle_default = [("default".to_string(), 0)];
        let lines = queue_lines(
            &[("default", "resize", JobStatus::Queued, 1)],
            &serving,
            &idle_default,
            &[],
        );
        assert_eq!(
            lines[0].text,
            "1 job of type resize waits in queue default, which this worker leaves to other workers (--concurrency 0)"
        );
    }
}
