//! `litejobs work --exec/--serve/--timeout/--retry`: command handlers for job types of
//! programs in any language, registered beside the built-in ones.
//!
//! Everything is checked by [`prepare`] (programs found and executable, flags naming a
//! commanded type) before the database is opened: a typo in `--db` with a missing program
//! creates no file.

use std::path::{Path, PathBuf};

use litejobs::{RetryPolicy, WorkerBuilder};

use super::work_startup::retries_text;
use super::{CliError, Ctx};
use crate::work_args::{Concurrency, WorkArgs};

/// The command handlers of a `work` invocation, checked and built, not yet registered.
pub struct Prepared {
    handlers: Vec<(String, Handler)>,
    /// What to log once the worker starts.
    said: Vec<String>,
}

enum Handler {
    #[cfg(unix)]
    Exec(litejobs::exec::Command),
    #[cfg(unix)]
    Serve(litejobs::exec::Serve),
}

impl Prepared {
    /// The job types the commands serve.
    pub fn served(&self) -> Vec<String> {
        self.handlers.iter().map(|(t, _)| t.clone()).collect()
    }
}

/// Checks every `--exec`, `--serve`, `--concurrency TYPE=N` and `--retry` and builds the
/// handlers, without opening the database. `queues` are the worker's queues and their
/// threads ([`WorkArgs::queue_threads`]).
pub fn prepare(
    args: &WorkArgs,
    ctx: &Ctx,
    queues: &[(String, usize)],
) -> Result<Prepared, CliError> {
    let commanded = |job_type: &str| {
        args.exec
            .iter()
            .chain(&args.serve)
            .any(|c| c.job_type == job_type)
    };
    for spec in &args.concurrency_specs {
        if let Concurrency::Type(job_type, n) = spec {
            if !commanded(job_type) {
                return Err(CliError::new(format!(
                    "--concurrency {job_type}={n}: no --exec or --serve handles {job_type:?}"
                )));
            }
            if *n == 0 {
                return Err(CliError::new(format!(
                    "--concurrency {job_type}=0: give at least 1 process"
                )));
            }
        }
    }
    for retry in &args.retries {
        if !commanded(&retry.job_type) {
            return Err(CliError::new(format!(
                "--retry {}={}: no --exec or --serve handles {:?} (the built-in kinds take \
                 LITEJOBS_WEBHOOK_RETRY_SCHEDULE and LITEJOBS_EMAIL_RETRY_SCHEDULE)",
                retry.job_type, retry.schedule, retry.job_type
            )));
        }
    }
    let env = command_env(ctx)?;
    let mut prepared = Prepared {
        handlers: Vec::new(),
        said: Vec::new(),
    };
    // A type's jobs run on the threads of whichever queue they are in: at most as many at
    // once as the largest queue has.
    let threads = queues
        .iter()
        .map(|(_, threads)| *threads)
        .max()
        .unwrap_or(0);
    for (flag, spec) in args
        .exec
        .iter()
        .map(|s| ("--exec", s))
        .chain(args.serve.iter().map(|s| ("--serve", s)))
    {
        let shown = format!("{flag} {}={}", spec.job_type, spec.command);
        if prepared.handlers.iter().any(|(t, _)| *t == spec.job_type) {
            return Err(CliError::new(format!(
                "{shown}: job type {:?} has a command already",
                spec.job_type
            )));
        }
        let retries = retries_text(&retry_policy(args, &spec.job_type));
        let invalid = |e: litejobs::Error| CliError::new(format!("{shown}: {e}"));
        #[cfg(unix)]
        {
            if flag == "--exec" {
                let mut command = litejobs::exec::Command::parse(&spec.command).map_err(invalid)?;
                check_program(&shown, &command.program())?;
                for (name, value) in &env {
                    command = command.env(name, value);
                }
                let command = command
                    .kill_grace(args.kill_grace)
                    .concurrency(args.type_concurrency(&spec.job_type).unwrap_or(0));
                prepared.said.push(format!(
                    "{}: runs {} per job, {retries}",
                    spec.job_type,
                    command.shown()
                ));
                prepared
                    .handlers
                    .push((spec.job_type.clone(), Handler::Exec(command)));
            } else {
                let mut serve = litejobs::exec::Serve::parse(&spec.command).map_err(invalid)?;
                check_program(&shown, &serve.program())?;
                for (name, value) in &env {
                    serve = serve.env(name, value);
                }
                let processes = args.type_concurrency(&spec.job_type).unwrap_or(threads);
                let serve = serve.kill_grace(args.kill_grace).processes(processes);
                prepared.said.push(format!(
                    "{}: served by {} ({processes} processes), {retries}",
                    spec.job_type,
                    serve.shown()
                ));
                if processes > threads {
                    prepared.said.push(format!(
                        "warning: {shown}: {processes} processes but {threads} handler \
                         threads, so at most {threads} run at once (raise --concurrency N)"
                    ));
                }
                prepared
                    .handlers
                    .push((spec.job_type.clone(), Handler::Serve(serve)));
            }
        }
        #[cfg(not(unix))]
        {
            let _ = (invalid, &env, threads, retries);
            return Err(CliError::new(format!(
                "{shown}: command handlers need a Unix system"
            )));
        }
    }
    Ok(prepared)
}

/// The retry policy of a commanded type: its `--retry`, or the worker's default.
fn retry_policy(args: &WorkArgs, job_type: &str) -> RetryPolicy {
    args.retries
        .iter()
        .rev()
        .find(|r| r.job_type == job_type)
        .map(|r| r.policy.clone())
        .unwrap_or_default()
}

/// Registers the prepared handlers with their `--retry` schedules and applies `--timeout`,
/// then logs what each command does.
pub fn register(mut builder: WorkerBuilder, args: &WorkArgs, prepared: Prepared) -> WorkerBuilder {
    for timeout in &args.timeouts {
        builder = match &timeout.job_type {
            Some(job_type) => builder.timeout(job_type, timeout.timeout),
            None => builder.default_timeout(timeout.timeout),
        };
    }
    for (job_type, handler) in prepared.handlers {
        builder = builder.retry_policy(&job_type, retry_policy(args, &job_type));
        builder = match handler {
            #[cfg(unix)]
            Handler::Exec(command) => builder.handler(&job_type, command),
            #[cfg(unix)]
            Handler::Serve(serve) => builder.handler(&job_type, serve),
        };
    }
    for line in prepared.said {
        match line.strip_prefix("warning: ") {
            Some(warning) => log::warn!("{warning}"),
            None => log::info!("{line}"),
        }
    }
    builder
}

/// What commands get to open the queue themselves: the database as an absolute path (they
/// may change directory) or the URL, and the PostgreSQL schema when one was given.
fn command_env(ctx: &Ctx) -> Result<Vec<(String, String)>, CliError> {
    let db = ctx.db_path()?;
    let shown = if ctx.is_server() || db.is_absolute() {
        db.to_string_lossy().into_owned()
    } else {
        std::env::current_dir()
            .map(|dir| dir.join(db))
            .unwrap_or_else(|_| db.to_path_buf())
            .to_string_lossy()
            .into_owned()
    };
    let mut env = vec![("LITEJOBS_DB".to_string(), shown)];
    if let Some(schema) = &ctx.pg_schema {
        env.push(("LITEJOBS_PG_SCHEMA".to_string(), schema.clone()));
    }
    Ok(env)
}

/// Refuses at start a program that cannot run, rather than failing every job.
fn check_program(shown: &str, program: &str) -> Result<(), CliError> {
    let found = if program.contains('/') {
        Some(PathBuf::from(program))
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(program))
                .find(|candidate| is_executable(candidate))
        })
    };
    match found {
        Some(path) if is_executable(&path) => Ok(()),
        Some(path) if path.exists() => Err(CliError::new(format!(
            "{shown}: {} is not an executable file (chmod +x?)",
            path.display()
        ))),
        _ => Err(CliError::new(format!(
            "{shown}: program {program:?} not found{}",
            if program.contains('/') {
                ""
            } else {
                " in PATH"
            }
        ))),
    }
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}
