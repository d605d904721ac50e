//! One file per command. Each is `run(&Ctx, &Args, &mut dyn Write) -> Result<Exit, CliError>`:
//! it writes its result to the writer it is given (stdout in the binary, a `Vec<u8>` in
//! tests) and returns how the process should exit; all logic a library user would also want
//! lives in the `litejobs` crate.

pub mod cancel;
pub mod check;
#[cfg(feature = "postgres")]
pub mod copy_to;
pub mod dead;
pub mod enqueue;
pub mod init;
pub mod keys;
pub mod list;
pub mod metrics;
pub mod pause;
pub mod prune;
pub mod retry;
pub mod schedule;
pub mod show;
pub mod stats;
pub mod systemd;
pub mod top;
#[cfg(feature = "web")]
pub mod web;
#[cfg(feature = "webhook")]
pub mod webhook;
pub mod work;
pub mod work_commands;
pub mod work_outcomes;
pub mod work_startup;
pub mod workers;
pub mod workflow;
pub mod workflow_show;

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use litejobs::encryption::Keyring;
use litejobs::redact::Redactor;
use litejobs::{JobRecord, Queue};

use crate::args::{Cli, Command, WorkflowCommand};

/// How the process exits when a command did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0.
    Ok,
    /// 1: a `check` threshold was crossed.
    CheckFailed,
}

/// A command's failure: one line for stderr, exit status 2.
#[derive(Debug)]
pub struct CliError {
    message: String,
    /// The library error's kind, when it came from one: `web` and `top` fall back to
    /// read-only by it.
    kind: Option<litejobs::ErrorKind>,
    /// Set for output errors, so `litejobs list | head` can end quietly on a closed pipe.
    io_kind: Option<io::ErrorKind>,
}

impl CliError {
    /// A failure with this message.
    pub fn new(message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            kind: None,
            io_kind: None,
        }
    }

    /// True when the database could not be written because it is read-only.
    pub fn is_read_only(&self) -> bool {
        self.kind == Some(litejobs::ErrorKind::ReadOnly)
    }

    /// True when the database has no litejobs schema yet.
    pub fn is_uninitialized(&self) -> bool {
        self.kind == Some(litejobs::ErrorKind::Uninitialized)
    }

    /// The same failure with its message rewritten (say, advice meant for Rust code put
    /// in the command line's terms).
    pub fn map_message(mut self, f: impl FnOnce(&str) -> String) -> CliError {
        self.message = f(&self.message);
        self
    }

    /// True when stdout was closed by the reader (e.g. `| head`).
    pub fn is_broken_pipe(&self) -> bool {
        self.io_kind == Some(io::ErrorKind::BrokenPipe)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::output::one_line(&self.message))
    }
}

impl From<litejobs::Error> for CliError {
    fn from(e: litejobs::Error) -> CliError {
        CliError {
            kind: Some(e.kind()),
            ..CliError::new(e.to_string())
        }
    }
}

impl From<io::Error> for CliError {
    fn from(e: io::Error) -> CliError {
        CliError {
            message: e.to_string(),
            kind: None,
            io_kind: Some(e.kind()),
        }
    }
}

/// What every command gets: the database path, the output mode, the redactor.
#[derive(Debug)]
pub struct Ctx {
    /// `--db` or `LITEJOBS_DB`.
    pub db: Option<PathBuf>,
    /// `--pg-schema` or `LITEJOBS_PG_SCHEMA`.
    pub pg_schema: Option<String>,
    /// `--json`.
    pub json: bool,
    /// Masks secret payload fields in every view.
    pub redactor: Redactor,
    /// What the command's PostgreSQL connections call themselves in `pg_stat_activity`.
    app_name: &'static str,
    /// `--keys-file` or `LITEJOBS_ENCRYPTION_KEYS_FILE`; `LITEJOBS_ENCRYPTION_KEYS` is read
    /// from the environment when the queue is opened.
    keys_file: Option<PathBuf>,
}

impl Ctx {
    /// From the parsed command line and the environment.
    pub fn new(cli: &Cli) -> Ctx {
        Ctx {
            db: cli.db.clone(),
            pg_schema: cli.pg_schema.clone(),
            json: cli.json,
            redactor: Redactor::from_env().with_fields(&cli.secret_fields),
            app_name: match &cli.command {
                Command::Work(_) => "litejobs work",
                #[cfg(feature = "web")]
                Command::Web(_) => "litejobs web",
                _ => "litejobs cli",
            },
            keys_file: cli.keys_file.clone(),
        }
    }

    /// The database path, or an error saying how to give one.
    pub fn db_path(&self) -> Result<&Path, CliError> {
        self.db
            .as_deref()
            .filter(|p| !p.as_os_str().is_empty())
            .ok_or_else(|| CliError::new("no database: pass --db FILE or set LITEJOBS_DB"))
    }

    /// True when `--db` is a PostgreSQL URL rather than a file.
    pub fn is_server(&self) -> bool {
        self.db.as_deref().is_some_and(litejobs::is_server_url)
    }

    /// The database as people may see it: a URL's password replaced by `***`.
    pub fn shown_db(&self) -> Result<String, CliError> {
        let path = self.db_path()?;
        if !self.is_server() {
            return Ok(path.display().to_string());
        }
        // Not parsed as a WHATWG URL: libpq's URLs may name several hosts
        // (`postgres://u@h1:5432,h2:5433/db`), which such a parser refuses.
        Ok(litejobs::redact::mask_url_password(&path.to_string_lossy()))
    }

    /// The encryption keys of `--keys-file`, `LITEJOBS_ENCRYPTION_KEYS_FILE` or
    /// `LITEJOBS_ENCRYPTION_KEYS` (none when none is set).
    pub fn keyring(&self) -> Result<Keyring, CliError> {
        let file = self
            .keys_file
            .as_deref()
            .filter(|p| !p.as_os_str().is_empty());
        Ok(Keyring::from_sources(file)?)
    }

    /// How every command opens its queue: the keys, the PostgreSQL schema and name.
    pub fn builder(&self) -> Result<litejobs::QueueBuilder, CliError> {
        let builder = Queue::builder()
            .application_name(self.app_name)
            .encryption_keys(self.keyring()?);
        Ok(match &self.pg_schema {
            Some(schema) => builder.pg_schema(schema),
            None => builder,
        })
    }

    /// The database path, refusing a directory.
    fn file_path(&self) -> Result<&Path, CliError> {
        let path = self.db_path()?;
        if !self.is_server() && path.is_dir() {
            return Err(CliError::new(format!(
                "database path {} is a directory, not a file",
                path.display()
            )));
        }
        Ok(path)
    }

    /// Opens an existing litejobs database for reading only (reading never writes). A
    /// missing file or one without the litejobs schema is refused and left byte-for-byte
    /// unchanged; a read-only file, mount or backup works; a file an older litejobs still
    /// writes to is read without being migrated.
    pub fn open_read_only(&self) -> Result<Queue, CliError> {
        Ok(self.builder()?.open_read_only(self.file_path()?)?)
    }

    /// Opens an existing litejobs database to act on its jobs (cancel, retry, requeue, ...):
    /// never creates a file or adds the schema to another program's database (a typo in the
    /// path would otherwise show an empty queue); an older schema is migrated.
    pub fn open_existing(&self) -> Result<Queue, CliError> {
        Ok(self.builder()?.create(false).open(self.file_path()?)?)
    }

    /// Opens the database, creating (or migrating) it.
    pub fn open_or_create(&self) -> Result<Queue, CliError> {
        Ok(self.builder()?.open(self.file_path()?)?)
    }

    /// A job as people and scripts may see it: secrets masked.
    pub fn masked(&self, job: &JobRecord) -> JobRecord {
        self.redactor.mask_job(job)
    }
}

/// Runs the parsed command.
pub fn run(cli: &Cli, out: &mut dyn Write) -> Result<Exit, CliError> {
    let ctx = Ctx::new(cli);
    match &cli.command {
        Command::Init => init::run(&ctx, out),
        Command::Enqueue(args) => enqueue::run(&ctx, args, out),
        Command::Stats(args) => stats::run(&ctx, args, out),
        Command::List(args) => list::run(&ctx, args, out),
        Command::Show(args) => show::run(&ctx, args, out),
        Command::Dead(cmd) => dead::run(&ctx, cmd, out),
        Command::Cancel(args) => cancel::run(&ctx, args, out),
        Command::Retry(args) => retry::run(&ctx, args, out),
        Command::Workflow(WorkflowCommand::List(args)) => workflow::list(&ctx, args, out),
        Command::Workflow(WorkflowCommand::Show(args)) => workflow_show::run(&ctx, args.id, out),
        Command::Workflow(WorkflowCommand::Cancel(args)) => workflow::cancel(&ctx, args, out),
        Command::Schedule(cmd) => schedule::run(&ctx, cmd, out),
        Command::Pause(args) => pause::pause(&ctx, args, out),
        Command::Resume(args) => pause::resume(&ctx, args, out),
        Command::Prune(args) => prune::run(&ctx, args, out),
        Command::Check(args) => check::run(&ctx, args, out),
        Command::Metrics => metrics::run(&ctx, out),
        Command::Workers(args) => workers::run(&ctx, args, out),
        Command::Top(args) => top::run(&ctx, args, out),
        Command::Work(args) => work::run(&ctx, args, out),
        #[cfg(feature = "web")]
        Command::Web(args) => web::run(&ctx, args, out),
        Command::Keys(cmd) => keys::run(&ctx, cmd, out),
        #[cfg(feature = "webhook")]
        Command::Webhook(cmd) => webhook::run(&ctx, cmd, out),
        #[cfg(feature = "postgres")]
        Command::CopyTo(args) => copy_to::run(&ctx, args, out),
    }
}
