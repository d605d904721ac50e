//! `litejobs work`'s flags, as clap definitions: threads, queues, command handlers and
//! their timeouts, retry schedules and concurrency. Values are checked here, so a bad value
//! is refused before any database is opened.

use std::time::Duration;

use clap::Args;

use litejobs::builtin::{email, webhook};
use litejobs::defaults::DEFAULT_MAX_ATTEMPTS;
use litejobs::RetryPolicy;

use crate::duration::{self, schedule_text};

/// `work`.
#[derive(Debug, Args)]
#[command(after_long_help = env_help())]
pub struct WorkArgs {
    /// As N: handler threads for the default queue (and for each --queue given without =N,
    /// which gets 4 when N is 0; default 4), so per queue, not in all. As TYPE=N (repeatable): at most N processes of an --exec TYPE at once,
    /// or the N processes an --serve TYPE keeps (default: the threads of the largest queue).
    #[arg(long = "concurrency", value_parser = parse_concurrency, value_name = "N|TYPE=N")]
    pub concurrency_specs: Vec<Concurrency>,
    /// Run jobs of TYPE with COMMAND, a process per job (repeatable): the payload as JSON
    /// on stdin, the outcome from the exit code (see the table above). COMMAND is split
    /// like a shell's words; a line with pipes, `$` or redirections runs under `sh -c`.
    #[arg(long = "exec", value_parser = parse_type_command, value_name = "TYPE=COMMAND")]
    pub exec: Vec<TypeCommand>,
    /// Run jobs of TYPE on long-lived COMMAND processes speaking JSON lines (repeatable;
    /// protocol above and in docs/serve-protocol.md).
    #[arg(long = "serve", value_parser = parse_type_command, value_name = "TYPE=COMMAND")]
    pub serve: Vec<TypeCommand>,
    /// The attempt time limit of TYPE (repeatable), e.g. `--timeout resize=2m`; as a plain
    /// DURATION, of every type without its own (default 60s; a job's own timeout wins).
    #[arg(long = "timeout", value_parser = parse_type_timeout, value_name = "[TYPE=]DURATION")]
    pub timeouts: Vec<TypeTimeout>,
    /// The retry schedule of an --exec or --serve TYPE (repeatable), e.g. `--retry
    /// resize=30s,2m,10m`: the delays after failed attempts, ±10 % jitter, the last one
    /// repeating. Default: 5s doubling per attempt (±20 %), at most 1h. Given here, it replaces
    /// LITEJOBS_RETRY (`TYPE=30s,2m;TYPE2=1m`).
    #[arg(
        long = "retry",
        env = "LITEJOBS_RETRY",
        value_delimiter = ';',
        value_parser = parse_type_retry,
        value_name = "TYPE=DELAYS"
    )]
    pub retries: Vec<TypeRetry>,
    /// Time between SIGTERM and SIGKILL for a command's process group that must stop (past
    /// its timeout, its job cancelled, or at shutdown past --grace); for an --serve process,
    /// also how long it has to end a cancelled job before it is stopped.
    #[arg(long, value_parser = duration::parse, default_value = "5s", value_name = "DURATION")]
    pub kill_grace: Duration,
    /// Also work this queue, with N threads (repeatable): `--queue webhooks=2`. A queue of its
    /// own keeps threads for urgent jobs (`--queue urgent=1`); within a queue, a higher
    /// `enqueue --priority` goes ahead of the jobs already claimed.
    #[arg(long = "queue", value_parser = parse_queue_spec, value_name = "Q[=N]")]
    pub queues: Vec<QueueSpec>,
    /// How long running handlers may finish after SIGINT/SIGTERM before their jobs are
    /// released for another worker.
    #[arg(long, value_parser = duration::parse, default_value = "30s", value_name = "DURATION")]
    pub grace: Duration,
    /// Keep no per-attempt logs (a command's stderr, what handlers log while they run);
    /// `litejobs show ID` then has none to show.
    #[arg(long)]
    pub no_job_logs: bool,
}

impl WorkArgs {
    /// Handler threads of the default queue: the last plain `--concurrency N`.
    pub fn concurrency(&self) -> usize {
        self.concurrency_specs
            .iter()
            .rev()
            .find_map(|c| match c {
                Concurrency::Threads(n) => Some(*n),
                Concurrency::Type(..) => None,
            })
            .unwrap_or(litejobs::defaults::DEFAULT_CONCURRENCY)
    }

    /// Every queue this worker is given and its threads, the default queue first: a
    /// `--queue Q` takes its own `=N`, else `--concurrency N`, else (`--concurrency 0`
    /// leaves the default queue to other workers, not the queues named) the default. A
    /// queue given twice is refused, so no count wins silently.
    pub fn queue_threads(&self) -> Result<Vec<(String, usize)>, String> {
        let plain = self.concurrency();
        let inherited = if plain > 0 {
            plain
        } else {
            litejobs::defaults::DEFAULT_CONCURRENCY
        };
        let default = litejobs::defaults::DEFAULT_QUEUE;
        let mut queues = vec![(default.to_string(), plain)];
        for (i, spec) in self.queues.iter().enumerate() {
            if self.queues[..i].iter().any(|q| q.name == spec.name) {
                return Err(format!(
                    "--queue {}: given twice; give each queue once",
                    spec.name
                ));
            }
            let threads = spec.threads.unwrap_or(inherited);
            match queues.iter_mut().find(|(name, _)| *name == spec.name) {
                Some(given) => given.1 = threads,
                None => queues.push((spec.name.clone(), threads)),
            }
        }
        Ok(queues)
    }

    /// The processes of `job_type` given with `--concurrency TYPE=N`, if any.
    pub fn type_concurrency(&self, job_type: &str) -> Option<usize> {
        self.concurrency_specs.iter().rev().find_map(|c| match c {
            Concurrency::Type(t, n) if t == job_type => Some(*n),
            _ => None,
        })
    }
}

/// `--concurrency N` or `--concurrency TYPE=N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Concurrency {
    /// Threads of the default queue.
    Threads(usize),
    /// Processes of one command-handled type.
    Type(String, usize),
}

fn parse_concurrency(text: &str) -> Result<Concurrency, String> {
    let number = |n: &str| {
        n.trim()
            .parse::<usize>()
            .map_err(|_| format!("{text:?}: expected N or TYPE=N with N a whole number"))
    };
    match text.split_once('=') {
        None => Ok(Concurrency::Threads(number(text)?)),
        Some((job_type, n)) if !job_type.trim().is_empty() => {
            Ok(Concurrency::Type(job_type.trim().to_string(), number(n)?))
        }
        Some(_) => Err(format!("{text:?}: the TYPE before '=' is empty")),
    }
}

/// `--exec TYPE=COMMAND`, `--serve TYPE=COMMAND`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeCommand {
    /// The job type.
    pub job_type: String,
    /// The command line.
    pub command: String,
}

fn parse_type_command(text: &str) -> Result<TypeCommand, String> {
    match text.split_once('=') {
        Some((job_type, command)) if !job_type.trim().is_empty() && !command.trim().is_empty() => {
            Ok(TypeCommand {
                job_type: job_type.trim().to_string(),
                command: command.trim().to_string(),
            })
        }
        _ => Err(format!(
            "{text:?}: expected TYPE=COMMAND, e.g. resize=./resize.sh"
        )),
    }
}

/// `--timeout [TYPE=]DURATION`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeTimeout {
    /// The job type, or `None` for every type without its own.
    pub job_type: Option<String>,
    /// The attempt time limit.
    pub timeout: Duration,
}

fn parse_type_timeout(text: &str) -> Result<TypeTimeout, String> {
    let (job_type, value) = match text.split_once('=') {
        Some((t, v)) if !t.trim().is_empty() => (Some(t.trim().to_string()), v),
        Some(_) => return Err(format!("{text:?}: the TYPE before '=' is empty")),
        None => (None, text),
    };
    let timeout = duration::parse(value)?;
    if timeout.is_zero() {
        return Err(format!("{text:?}: a timeout must be longer than 0"));
    }
    Ok(TypeTimeout { job_type, timeout })
}

/// `--retry TYPE=DELAYS`.
#[derive(Debug, Clone)]
pub struct TypeRetry {
    /// The job type.
    pub job_type: String,
    /// The schedule as written, for messages.
    pub schedule: String,
    /// The policy it makes.
    pub policy: litejobs::RetryPolicy,
}

fn parse_type_retry(text: &str) -> Result<TypeRetry, String> {
    match text.split_once('=') {
        Some((job_type, schedule)) if !job_type.trim().is_empty() => {
            let policy = litejobs::builtin::parse_retry_schedule(schedule)
                .map_err(|why| format!("{text:?}: {why}; expected TYPE=30s,2m,10m"))?;
            Ok(TypeRetry {
                job_type: job_type.trim().to_string(),
                schedule: schedule.trim().to_string(),
                policy,
            })
        }
        _ => Err(format!(
            "{text:?}: expected TYPE=DELAYS, e.g. resize=30s,2m,10m"
        )),
    }
}

/// `--queue NAME[=THREADS]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    /// Queue name.
    pub name: String,
    /// Threads, when given.
    pub threads: Option<usize>,
}

fn parse_queue_spec(text: &str) -> Result<QueueSpec, String> {
    let (name, threads) = match text.split_once('=') {
        Some((name, n)) => {
            let n = n.trim().parse::<usize>().map_err(|_| {
                format!("invalid queue {text:?}: threads after '=' must be a whole number")
            })?;
            (name, Some(n))
        }
        None => (text, None),
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("invalid queue {text:?}: the name is empty"));
    }
    Ok(QueueSpec {
        name: name.to_string(),
        threads,
    })
}

/// The environment variables `litejobs work` reads, one line each, with their defaults
/// taken from the library: `work --help` shows it after the options.
pub fn env_help() -> String {
    let webhook_retries = schedule_text(&webhook::default_retry_policy(), 6);
    let email_retries = schedule_text(&email::default_retry_policy(), 6);
    let rows: Vec<(&str, String)> = vec![
        ("LITEJOBS_DB", "the database file or PostgreSQL URL (as --db)".into()),
        (
            "LITEJOBS_PG_SCHEMA",
            "the PostgreSQL schema (as --pg-schema; default litejobs)".into(),
        ),
        (
            "LITEJOBS_SECRET_FIELDS",
            "more payload field names to mask, comma-separated (as --secret-field)".into(),
        ),
        (
            "LITEJOBS_ENCRYPTION_KEYS",
            "encryption keys, NAME:BASE64 comma-separated, the encrypting one first".into(),
        ),
        (
            "LITEJOBS_ENCRYPTION_KEYS_FILE",
            "a file of encryption keys, one NAME:BASE64 per line (as --keys-file)".into(),
        ),
        (
            "RUST_LOG",
            "log filter on stderr (default info for work), e.g. RUST_LOG=debug".into(),
        ),
        (
            "LITEJOBS_LOG_FORMAT",
            "text or json: log lines as text or one JSON object each (as --log-format)".into(),
        ),
        (
            "LITEJOBS_WEBHOOK_ENABLED",
            "0 turns webhook delivery (deliver_webhook) off (default 1)".into(),
        ),
        (
            "LITEJOBS_WEBHOOK_ALLOW_PRIVATE",
            "1 allows loopback and private targets (default 0)".into(),
        ),
        (
            "LITEJOBS_WEBHOOK_TIMEOUT",
            format!(
                "request time limit in seconds (default {})",
                webhook::DEFAULT_WEBHOOK_TIMEOUT.as_secs()
            ),
        ),
        (
            "LITEJOBS_WEBHOOK_USER_AGENT",
            "User-Agent header (default litejobs/VERSION)".into(),
        ),
        (
            "LITEJOBS_WEBHOOK_MAX_RETRY_AFTER",
            format!(
                "longest Retry-After honoured, seconds (default {})",
                webhook::DEFAULT_MAX_RETRY_AFTER.as_secs()
            ),
        ),
        (
            "LITEJOBS_WEBHOOK_BREAKER_FAILURES",
            format!(
                "failures in a row that open an endpoint's breaker (default {})",
                litejobs::limits::DEFAULT_BREAKER_FAILURES
            ),
        ),
        (
            "LITEJOBS_WEBHOOK_BREAKER_COOL_DOWN",
            format!(
                "seconds an open breaker waits before one probe (default {})",
                litejobs::limits::DEFAULT_BREAKER_COOL_DOWN.as_secs()
            ),
        ),
        (
            "LITEJOBS_WEBHOOK_RETRY_SCHEDULE",
            format!("delays between attempts, last repeats (default {webhook_retries})"),
        ),
        (
            "LITEJOBS_SMTP_URL",
            "turns email (send_email) on: smtp://user:pass@host:port?tls=starttls|tls|none&timeout=10s"
                .into(),
        ),
        (
            "LITEJOBS_MAIL_DIR",
            "or: write emails as .eml files to this folder (development)".into(),
        ),
        (
            "LITEJOBS_MAIL_LOG",
            "or: 1 only logs emails (development)".into(),
        ),
        (
            "LITEJOBS_MAIL_FROM",
            "sender of email jobs without \"from\" (unset: such jobs go dead)".into(),
        ),
        (
            "LITEJOBS_EMAIL_RETRY_SCHEDULE",
            format!("delays between attempts, last repeats (default {email_retries})"),
        ),
        (
            "LITEJOBS_RETRY",
            format!(
                "as --retry TYPE=30s,2m, ;-separated (default {})",
                schedule_text(&RetryPolicy::default(), 6)
            ),
        ),
    ];
    let width = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    let mut text = format!(
        "Environment (a bad value stops work with one line naming the variable).\n\
         Retry schedules are written like 30s,2m,10m,1h,4h (±10 % jitter, the last delay\n\
         repeats); a job has {DEFAULT_MAX_ATTEMPTS} attempts unless it sets max_attempts.\n"
    );
    for (name, what) in rows {
        text.push_str(&format!("  {name:width$}  {what}\n"));
    }
    text.push_str(
        "\nAt start, work logs each built-in kind (on or off, mailer, retry delays) and warns\n\
         of job types that wait in the database with nothing here to serve them.",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_specs_take_optional_threads() {
        let spec = |name: &str, threads| QueueSpec {
            name: name.to_string(),
            threads,
        };
        assert_eq!(parse_queue_spec("webhooks"), Ok(spec("webhooks", None)));
        assert_eq!(
            parse_queue_spec("webhooks=2"),
            Ok(spec("webhooks", Some(2)))
        );
        assert!(parse_queue_spec("=2").is_err());
        assert!(parse_queue_spec("webhooks=two").is_err());
    }

    #[test]
    fn a_queue_without_threads_takes_the_plain_concurrency_or_the_default() {
        let args = |argv: &[&str]| {
            #[derive(clap::Parser)]
            struct Cli {
                #[command(flatten)]
                work: WorkArgs,
            }
            let argv = std::iter::once("work").chain(argv.iter().copied());
            <Cli as clap::Parser>::try_parse_from(argv)
                .expect("valid flags")
                .work
        };
        let threads = |argv: &[&str]| args(argv).queue_threads();
        let owned = |q: &[(&str, usize)]| -> Result<Vec<(String, usize)>, String> {
            Ok(q.iter().map(|(n, t)| (n.to_string(), *t)).collect())
        };
        assert_eq!(
            threads(&["--concurrency", "2", "--queue", "urgent"]),
            owned(&[("default", 2), ("urgent", 2)])
        );
        // Leaving the default queue to others does not leave the queues named.
        assert_eq!(
            threads(&[
                "--concurrency",
                "0",
                "--queue",
                "urgent",
                "--queue",
                "reports=2"
            ]),
            owned(&[("default", 0), ("urgent", 4), ("reports", 2)])
        );
        assert_eq!(
            threads(&["--queue", "default=1", "--queue", "mail=0"]),
            owned(&[("default", 1), ("mail", 0)])
        );
        let twice = threads(&["--queue", "urgent=1", "--queue", "urgent=3"]).unwrap_err();
        assert!(twice.contains("--queue urgent: given twice"), "{twice}");
    }

    #[test]
    fn retry_schedules_name_a_type_and_its_delays() {
        let retry = parse_type_retry("resize=30s,2m,10m").expect("valid");
        assert_eq!(retry.job_type, "resize");
        assert_eq!(retry.policy.delay(2, 0.5), Duration::from_secs(120));
        assert_eq!(retry.policy.delay(9, 0.5), Duration::from_secs(600));
        for bad in ["resize", "=30s", "resize=", "resize=30", "resize=0s"] {
            assert!(parse_type_retry(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_help_lists_the_variables_with_library_defaults() {
        let help = env_help();
        assert!(help.contains("LITEJOBS_WEBHOOK_RETRY_SCHEDULE"), "{help}");
        assert!(help.contains("(default 5s,5m,30m,2h,5h,10h)"), "{help}");
        assert!(help.contains("(default 1m,5m,30m,2h,5h,10h)"), "{help}");
        assert!(
            help.contains("default 5s,10s,20s,40s,1m20s,2m40s)"),
            "{help}"
        );
        assert!(help.lines().all(|l| l.chars().count() <= 140), "{help}");
    }
}
