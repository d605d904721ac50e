//! The command line, as clap definitions. Values are checked here (durations, statuses,
//! rates, queue specs), so a bad value is refused before any database is opened.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use litejobs::JobStatus;

use crate::duration;
pub use crate::work_args::WorkArgs;

mod cancel;
mod dead;
mod keys;
mod schedule;
mod workflow;

pub use cancel::{who, CancelArgs};
pub use dead::{DeadCommand, DeadListArgs, RequeueArgs};
pub use keys::{KeysCommand, KeysNewArgs};
pub use schedule::{ScheduleAddArgs, ScheduleCommand, ScheduleNameArgs};
pub use workflow::{WorkflowCancelArgs, WorkflowCommand, WorkflowListArgs};

/// `--log-format` or `LITEJOBS_LOG_FORMAT`, in any case.
fn parse_log_format(value: &str) -> Result<LogFormat, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err("give text or json (--log-format, or LITEJOBS_LOG_FORMAT)".to_string()),
    }
}

/// How log lines are written ([`Cli::log_format`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One line of text per record, for a person.
    Text,
    /// One JSON object per line, for journald, Loki and the like.
    Json,
}

/// litejobs: background jobs in one SQLite file. Inspect, act on and run the jobs of a
/// database.
#[derive(Debug, Parser)]
#[command(name = "litejobs", version, propagate_version = true)]
#[command(
    after_help = "Exit status: 0 ok, 1 a failed `check` (or a `keys rotate` that left \
                        columns to do), 2 bad usage or an unusable database (with one line \
                        on stderr)."
)]
pub struct Cli {
    /// The database: a SQLite file, or a PostgreSQL URL (postgres://user@host/db) when built
    /// with the `postgres` feature.
    #[arg(long, env = "LITEJOBS_DB", global = true, value_name = "FILE|URL")]
    pub db: Option<PathBuf>,

    /// On PostgreSQL: the schema litejobs' tables live in (default: litejobs).
    #[arg(long, env = "LITEJOBS_PG_SCHEMA", global = true, value_name = "NAME")]
    pub pg_schema: Option<String>,

    /// Print JSON (stable field names, times in ms since the Unix epoch) instead of tables.
    #[arg(long, global = true)]
    pub json: bool,

    /// How log lines are written on stderr (what `work` and `web` say as they run): text,
    /// or json, one object per line with time, level, target and message, and job_id,
    /// job_type, queue and attempt in a line about a job.
    #[arg(
        long,
        env = "LITEJOBS_LOG_FORMAT",
        global = true,
        value_name = "text|json",
        value_parser = parse_log_format,
        default_value = "text"
    )]
    pub log_format: LogFormat,

    /// Another payload field name to mask in every view (repeatable), matched by words like
    /// the defaults (`ssn` masks `SSN` and `customer.ssn`). Adds to the defaults (password,
    /// secret, token, auth, credentials, api key, ...) and to LITEJOBS_SECRET_FIELDS.
    #[arg(long = "secret-field", value_name = "NAME", global = true)]
    pub secret_fields: Vec<String>,

    /// The encryption keys, one NAME:BASE64 per line, the encrypting key first (or set
    /// LITEJOBS_ENCRYPTION_KEYS=k2:BASE64,k1:BASE64). Views decrypt with them, enqueue and
    /// work encrypt with the first. `litejobs keys new` makes one.
    #[arg(
        long,
        env = "LITEJOBS_ENCRYPTION_KEYS_FILE",
        global = true,
        value_name = "FILE"
    )]
    pub keys_file: Option<PathBuf>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the database, or migrate an older one.
    Init,
    /// Add a job; prints its id.
    Enqueue(EnqueueArgs),
    /// Counts by queue, type and status; what waits, what fails, the oldest due age, the
    /// most common errors.
    Stats(StatsArgs),
    /// List jobs, newest first.
    List(ListArgs),
    /// One job with its whole attempt history.
    Show(IdArgs),
    /// Dead-letter handling: list, requeue, discard.
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Cancel a queued, failed or running job (a running one is stopped: its handler is
    /// told, a command's process group gets SIGTERM, then SIGKILL after --kill-grace), or
    /// all of a type (and text).
    Cancel(CancelArgs),
    /// Make a waiting job due now; a dead job gets one more attempt.
    Retry(IdArgs),
    /// Workflows and batches (jobs that wait for other jobs): list, show, cancel.
    #[command(subcommand)]
    Workflow(WorkflowCommand),
    /// Periodic jobs kept in the database, run by every `litejobs work`: add, list, remove.
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Stop claiming from a queue in every process (jobs wait, no attempt is spent).
    Pause(PauseArgs),
    /// Resume a paused queue.
    Resume(QueueArgs),
    /// Delete succeeded and cancelled jobs past retention; checkpoint the WAL.
    Prune(PruneArgs),
    /// Exit 1, with one line per crossed threshold, when something needs a person.
    Check(CheckArgs),
    /// Prometheus text exposition.
    Metrics,
    /// Who is working: the live workers of this database in any process or host, with
    /// their queues, job types, latest sign of life and running jobs.
    Workers(WorkersArgs),
    /// A live view in the terminal: queues and their counts, work done and failed per
    /// minute, the oldest due age, running, retrying and dead jobs, the most common errors;
    /// keys pause and resume a queue, retry or cancel a job, requeue dead jobs. `?` lists
    /// the keys, `q` leaves.
    Top(TopArgs),
    /// Run the built-in job handlers, and commands for your own job types, until SIGINT
    /// or SIGTERM.
    ///
    /// It also enqueues the periodic jobs kept in the database (`litejobs schedule add`),
    /// once per slot between every `work` on it.
    ///
    /// --exec TYPE=COMMAND runs a process per job: the payload as JSON on stdin; in its
    /// environment LITEJOBS_JOB_ID, LITEJOBS_JOB_TYPE, LITEJOBS_QUEUE, LITEJOBS_ATTEMPT,
    /// LITEJOBS_MAX_ATTEMPTS, LITEJOBS_DEADLINE_MS (ms since the Unix epoch),
    /// LITEJOBS_IDEMPOTENCY_KEY and LITEJOBS_GROUP_KEY (when set) and LITEJOBS_DB. Its exit
    /// code is the outcome:
    ///
    ///   0            succeeded; stdout, when it is JSON, is the job's result
    ///   65           dead at once (EX_DATAERR: retrying cannot help)
    ///   75           retry after the delay printed on stdout (30, 30s, 5m, 2h), or by
    ///                the retry policy when none is printed (EX_TEMPFAIL)
    ///   98           cancelled: the job is no longer wanted
    ///   99           snooze for the delay on stdout (60s if none); the attempt does not
    ///                count
    ///   other/signal retry by the retry policy (dead after the last attempt)
    ///
    /// The last 1.5 KiB of stderr is the attempt's error, a failed exit code its status code
    /// (CODE in show). Past its timeout the command's whole process group gets SIGTERM, then
    /// SIGKILL after --kill-grace. Commands inherit work's environment and directory.
    ///
    /// --serve TYPE=COMMAND keeps long-lived processes that read one job per line on stdin,
    /// {"id","type","queue","attempt","max_attempts","deadline_ms","payload"}, and answer
    /// one line on stdout, {"id","outcome":"ok|retry|permanent|snooze|cancel","result",
    /// "error","delay"}; logs go to stderr. An answer line may be up to 2 MiB; a result is
    /// kept up to 1 MiB, an error up to 2 KiB. A job cancelled while a process works on it
    /// comes as a line {"cancel": ID}: end that job and answer it (outcome cancel keeps the
    /// process); one not answered within --kill-grace gets its process stopped and replaced.
    /// A cancelled --exec command's process group gets SIGTERM, then SIGKILL after
    /// --kill-grace. See docs/serve-protocol.md.
    #[command(verbatim_doc_comment)]
    Work(WorkArgs),
    /// Serve the web dashboard until SIGINT or SIGTERM.
    #[cfg(feature = "web")]
    Web(WebArgs),
    /// Encrypted payloads: make a key, mark job types encrypted, rotate to a new key.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Webhook endpoints: add, list, show, enable, disable, rotate the secret, remove.
    /// Secrets are printed once, when made, and never shown again.
    #[cfg(feature = "webhook")]
    #[command(subcommand)]
    Webhook(WebhookCommand),
    /// Copy the live and dead jobs (with their history), webhook endpoints, periodic
    /// schedules, paused queues and remembered idempotency keys of the SQLite file (--db)
    /// into an empty PostgreSQL schema (--pg-schema, default litejobs), ids kept. Stop the
    /// workers on the file first; running jobs arrive queued.
    #[cfg(feature = "postgres")]
    CopyTo(CopyToArgs),
}

/// `copy-to`.
#[cfg(feature = "postgres")]
#[derive(Debug, Args)]
pub struct CopyToArgs {
    /// The PostgreSQL server: postgres://user[:password]@host[:port]/database.
    #[arg(value_name = "URL")]
    pub url: String,
}

/// `enqueue`.
#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// The job type, e.g. deliver_webhook.
    #[arg(value_name = "TYPE")]
    pub job_type: String,
    /// The payload as JSON; `-` or absent reads it from stdin.
    #[arg(value_name = "PAYLOAD")]
    pub payload: Option<String>,
    /// The queue.
    #[arg(long, default_value = litejobs::defaults::DEFAULT_QUEUE)]
    pub queue: String,
    /// Higher runs first within the queue.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i64,
    /// Run after this long, e.g. 30s, 5m, 1h30m.
    #[arg(long, value_parser = duration::parse, value_name = "DURATION")]
    pub delay: Option<Duration>,
    /// Attempts before the job is dead.
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// Per-attempt time limit, e.g. 10s.
    #[arg(long, value_parser = duration::parse, value_name = "DURATION")]
    pub timeout: Option<Duration>,
    /// Deduplication key: while a live or succeeded job holds it, the holder's id is printed
    /// and nothing is added.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// At most one job per group key runs at a time.
    #[arg(long, value_name = "KEY")]
    pub group_key: Option<String>,
    /// Deadline: a job not started within this long of being due (after --delay, if any)
    /// never starts and ends cancelled as expired, e.g. 15m.
    #[arg(long, value_parser = duration::parse, value_name = "DURATION", conflicts_with = "expires_at")]
    pub expire_after: Option<Duration>,
    /// Deadline as a time, RFC 3339 (e.g. 2026-12-05T03:15:00Z): a job not started by then
    /// never starts and ends cancelled as expired.
    #[arg(long, value_parser = crate::duration::parse_rfc3339, value_name = "TIME")]
    pub expires_at: Option<std::time::SystemTime>,
    /// Store the payload encrypted with the first key (and the job's result and progress
    /// when a worker writes them). Types marked with `keys encrypt-type` are encrypted
    /// without it.
    #[arg(long)]
    pub encrypt: bool,
    /// Wait for job ID to succeed first (held until then; cancelled if it ends dead or
    /// cancelled). May be given more than once.
    #[arg(long, value_name = "ID")]
    pub after: Vec<i64>,
    /// Wait for job ID to end, however it ends (clean-up that runs anyway). May be given
    /// more than once.
    #[arg(long, value_name = "ID")]
    pub after_any: Vec<i64>,
}

/// `stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The window of the failure figures.
    #[arg(long, value_parser = duration::parse, default_value = "1h", value_name = "DURATION")]
    pub window: Duration,
    /// How many of the most common errors to show.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub errors: usize,
}

/// The filters `list` and `dead list` share.
#[derive(Debug, Args)]
pub struct FilterArgs {
    /// Only jobs of this type.
    #[arg(long = "type", value_name = "TYPE")]
    pub job_type: Option<String>,
    /// Only jobs in this queue.
    #[arg(long, value_name = "QUEUE")]
    pub queue: Option<String>,
    /// Only jobs whose last error contains this text (ASCII case-insensitive).
    #[arg(long, value_name = "TEXT")]
    pub search: Option<String>,
    /// Only jobs in this error group: the `group` of an error in `stats --json`.
    #[arg(long, value_name = "KEY")]
    pub group: Option<String>,
    /// At most this many jobs.
    #[arg(long, default_value_t = litejobs::defaults::DEFAULT_LIST_LIMIT, value_name = "N")]
    pub limit: usize,
}

impl FilterArgs {
    /// The library filter these flags describe.
    pub fn to_filter(&self) -> litejobs::JobFilter {
        let mut filter = litejobs::JobFilter::new().limit(self.limit);
        if let Some(job_type) = &self.job_type {
            filter = filter.job_type(job_type);
        }
        if let Some(name) = &self.queue {
            filter = filter.queue(name);
        }
        if let Some(text) = &self.search {
            filter = filter.search(text);
        }
        if let Some(key) = &self.group {
            filter = filter.error_group(key);
        }
        filter
    }
}

/// `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only jobs in this status (queued, running, succeeded, failed, dead, cancelled).
    #[arg(long, value_parser = parse_status, value_name = "STATUS")]
    pub status: Option<JobStatus>,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Only jobs with a smaller id (the next page after the last id shown).
    #[arg(long, value_name = "ID")]
    pub before: Option<i64>,
}

/// `workers`.
#[derive(Debug, Args)]
pub struct WorkersArgs {
    /// Also the workers that stopped or died in the last day.
    #[arg(long)]
    pub all: bool,
}

/// `top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// How often the figures are read again (at least 100ms).
    #[arg(long, value_parser = parse_interval, default_value = "1s", value_name = "DURATION")]
    pub interval: Duration,
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = duration::parse(text)?;
    if interval < Duration::from_millis(100) {
        return Err(format!("--interval must be at least 100ms, got {text}"));
    }
    Ok(interval)
}

/// A job id.
#[derive(Debug, Args)]
pub struct IdArgs {
    /// The job id.
    pub id: i64,
}

/// A queue name.
#[derive(Debug, Args)]
pub struct QueueArgs {
    /// The queue name.
    pub queue: String,
}

/// `pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub queue: QueueArgs,
    /// Pause a queue no job has used yet, so its first jobs wait (without it a name that is
    /// not known is refused: a typo would pause nothing and say nothing).
    #[arg(long)]
    pub create: bool,
}

/// How `prune` ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckpointArg {
    /// No checkpoint.
    None,
    /// Copy what can be copied without waiting.
    Passive,
    /// Wait for readers, copy everything, empty the WAL file.
    Truncate,
}

/// `prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Delete succeeded and cancelled jobs that finished longer ago than this, e.g. 7d.
    #[arg(long, value_parser = duration::parse, value_name = "DURATION")]
    pub older_than: Duration,
    /// Also forget remembered idempotency keys older than this (expired ones always go).
    #[arg(long, value_parser = duration::parse, value_name = "DURATION")]
    pub keys_older_than: Option<Duration>,
    /// Rows deleted per transaction.
    #[arg(long, default_value_t = litejobs::defaults::DEFAULT_PRUNE_CHUNK, value_name = "N")]
    pub chunk_size: usize,
    /// The WAL checkpoint that ends the prune.
    #[arg(long, value_enum, default_value_t = CheckpointArg::Truncate)]
    pub checkpoint: CheckpointArg,
}

/// `check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Fail when more dead jobs than this wait for a person.
    #[arg(long, value_name = "N")]
    pub max_dead: Option<i64>,
    /// Fail when more jobs than this became dead in the last hour (dead jobs growing).
    #[arg(long, value_name = "N")]
    pub max_dead_last_hour: Option<i64>,
    /// Fail when the oldest due job has waited longer than this (nobody picks jobs up).
    #[arg(long, value_parser = duration::parse, value_name = "DURATION")]
    pub max_oldest_age: Option<Duration>,
    /// Fail when more than this share of the attempts in the window failed: 0.2 or 20%.
    #[arg(long, value_parser = parse_rate, value_name = "RATE")]
    pub max_failed_rate: Option<f64>,
    /// The window of --max-failed-rate.
    #[arg(long, value_parser = duration::parse, default_value = "1h", value_name = "DURATION")]
    pub window: Duration,
    /// --max-failed-rate only judges a window with at least this many attempts.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub min_attempts: i64,
}

/// `web`.
#[cfg(feature = "web")]
#[derive(Debug, Args)]
pub struct WebArgs {
    /// Address to listen on; an address that is not loopback needs a token (--token-file).
    /// Port 0 picks a free port (the address is printed).
    #[arg(long, default_value = litejobs::web::DEFAULT_ADDR, value_name = "HOST:PORT")]
    pub addr: String,
    /// Require this token (16 characters at least): `Authorization: Bearer TOKEN`, or the
    /// sign-in form in a browser. A token given with --token is visible to every user of
    /// the machine in `ps`: prefer LITEJOBS_WEB_TOKEN or --token-file.
    #[arg(
        long,
        env = "LITEJOBS_WEB_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// Read the token from this file (whitespace at its end, such as the final newline, is
    /// not part of it). Keeps it out of `ps`, like LITEJOBS_WEB_TOKEN.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<std::path::PathBuf>,
    /// Show everything, change nothing: hide every action and refuse every POST.
    #[arg(long)]
    pub read_only: bool,
}

/// `webhook ...`.
#[cfg(feature = "webhook")]
#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Register an endpoint; prints its id and its signing secret (shown this once only).
    Add(WebhookAddArgs),
    /// Every endpoint: enabled or not, circuit breaker, rate limit, latest failure. Never
    /// a secret.
    List,
    /// One endpoint with its breaker and its recent failed deliveries. Never its secret.
    Show(EndpointIdArgs),
    /// Enable an endpoint (clears the disabled reason).
    Enable(EndpointIdArgs),
    /// Disable an endpoint: its deliveries go dead at once, with the reason in their error.
    Disable(WebhookDisableArgs),
    /// Give an endpoint a new signing secret (printed once); the old one keeps signing
    /// deliveries, beside the new one, for --overlap.
    Rotate(WebhookRotateArgs),
    /// Remove an endpoint; deliveries still waiting for it go dead when they run.
    Remove(EndpointIdArgs),
}

/// A webhook endpoint id.
#[cfg(feature = "webhook")]
#[derive(Debug, Args)]
pub struct EndpointIdArgs {
    /// The endpoint id (`litejobs webhook list` shows them).
    pub id: i64,
}

/// `webhook add`.
#[cfg(feature = "webhook")]
#[derive(Debug, Args)]
pub struct WebhookAddArgs {
    /// Where deliveries are POSTed: an http or https URL.
    #[arg(value_name = "URL")]
    pub url: String,
    /// Free text for people, e.g. "CRM production".
    #[arg(long, default_value = "", value_name = "TEXT")]
    pub description: String,
    /// At most N requests per period to this endpoint, shared by every worker process:
    /// 10/s, 600/m, 5/2s. Default: no limit.
    #[arg(long, value_parser = parse_rate_limit, value_name = "N/PERIOD")]
    pub rate: Option<litejobs::limits::RateLimit>,
    /// The signing secret (`whsec_` + base64 of 24 to 64 bytes). Default: a new random
    /// one, printed once. A secret given here is visible to every user of the machine in
    /// `ps`, and is not printed back.
    #[arg(long, value_name = "SECRET")]
    pub secret: Option<String>,
    /// Register it disabled (deliveries go dead until `webhook enable`).
    #[arg(long)]
    pub disabled: bool,
}

/// `webhook disable`.
#[cfg(feature = "webhook")]
#[derive(Debug, Args)]
pub struct WebhookDisableArgs {
    #[command(flatten)]
    pub endpoint: EndpointIdArgs,
    /// Why (kept on the endpoint, and in the error of each delivery that goes dead).
    #[arg(
        long,
        default_value = "disabled with `litejobs webhook disable`",
        value_name = "WHY"
    )]
    pub reason: String,
}

/// `webhook rotate`.
#[cfg(feature = "webhook")]
#[derive(Debug, Args)]
pub struct WebhookRotateArgs {
    #[command(flatten)]
    pub endpoint: EndpointIdArgs,
    /// How long the old secret keeps signing deliveries beside the new one, so receivers
    /// can switch without rejecting any.
    #[arg(long, value_parser = duration::parse, default_value = "24h", value_name = "DURATION")]
    pub overlap: Duration,
}

fn parse_status(text: &str) -> Result<JobStatus, String> {
    text.parse::<JobStatus>().map_err(|e| e.to_string())
}

fn parse_rate(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let rate = match t.strip_suffix('%') {
        Some(percent) => percent.trim().parse::<f64>().map(|p| p / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("invalid rate {text:?}: write a share such as 0.2 or 20%"))?;
    if !(0.0..=1.0).contains(&rate) {
        return Err(format!(
            "invalid rate {text:?}: must be between 0 and 1 (0% and 100%)"
        ));
    }
    Ok(rate)
}

/// `N/PERIOD`: `10/s`, `600/m`, `5/2s`, `1000/1h` (a bare unit means one of it).
#[cfg(feature = "webhook")]
fn parse_rate_limit(text: &str) -> Result<litejobs::limits::RateLimit, String> {
    let usage = "write requests per period, e.g. 10/s, 600/m or 5/2s";
    let (count, period) = text
        .trim()
        .split_once('/')
        .ok_or_else(|| format!("invalid rate {text:?}: {usage}"))?;
    let count = count
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            format!("invalid rate {text:?}: {count:?} is not a whole number above 0 ({usage})")
        })?;
    let period = period.trim();
    let period = if period.starts_with(|c: char| c.is_ascii_digit()) {
        duration::parse(period)
    } else {
        duration::parse(&format!("1{period}"))
    }
    .map_err(|e| format!("invalid rate {text:?}: the period: {e}"))?;
    if period < Duration::from_millis(1) {
        return Err(format!(
            "invalid rate {text:?}: the period must be at least 1ms"
        ));
    }
    Ok(litejobs::limits::RateLimit::new(count, period))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn rates_take_shares_or_percents() {
        assert_eq!(parse_rate("0.2"), Ok(0.2));
        assert_eq!(parse_rate("20%"), Ok(0.2));
        assert_eq!(parse_rate("0"), Ok(0.0));
        assert!(parse_rate("1.5").is_err());
        assert!(parse_rate("-1%").is_err());
        assert!(parse_rate("lots").is_err());
    }

    #[cfg(feature = "webhook")]
    #[test]
    fn rate_limits_take_a_count_per_period() {
        use litejobs::limits::RateLimit;
        assert_eq!(parse_rate_limit("10/s"), Ok(RateLimit::per_second(10)));
        assert_eq!(
            parse_rate_limit(" 600 / m "),
            Ok(RateLimit::per_minute(600))
        );
        assert_eq!(
            parse_rate_limit("5/2s"),
            Ok(RateLimit::new(5, Duration::from_secs(2)))
        );
        assert_eq!(
            parse_rate_limit("1000/1h30m"),
            Ok(RateLimit::new(1000, Duration::from_secs(5400)))
        );
        for bad in [
            "10",
            "0/s",
            "-1/s",
            "ten/s",
            "10/",
            "10/0s",
            "10/fortnight",
            "1.5/s",
        ] {
            assert!(parse_rate_limit(bad).is_err(), "{bad}");
        }
    }
}
