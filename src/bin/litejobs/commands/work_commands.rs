//! `litejobs work --exec/--serve/--timeout`: command handlers for job types of programs in
//! any language (R29), registered beside the built-in ones.

use std::path::{Path, PathBuf};

use litejobs::WorkerBuilder;

use super::{CliError, Ctx};
use crate::args::{Concurrency, WorkArgs};

/// Registers every `--exec` and `--serve` handler and applies `--timeout`; returns the
/// builder and the job types the commands serve.
pub fn register(
    mut builder: WorkerBuilder,
    args: &WorkArgs,
    ctx: &Ctx,
) -> Result<(WorkerBuilder, Vec<String>), CliError> {
    for timeout in &args.timeouts {
        builder = match &timeout.job_type {
            Some(job_type) => builder.timeout(job_type, timeout.timeout),
            None => builder.default_timeout(timeout.timeout),
        };
    }
    for spec in &args.concurrency_specs {
        if let Concurrency::Type(job_type, n) = spec {
            let commanded = args
                .exec
                .iter()
                .chain(&args.serve)
                .any(|c| &c.job_type == job_type);
            if !commanded {
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
    let env = command_env(ctx)?;
    let mut served: Vec<String> = Vec::new();
    // Logged once every command is known to be usable: a refusal is the only line.
    let mut said: Vec<String> = Vec::new();
    let threads = args.concurrency();
    for (flag, spec) in args
        .exec
        .iter()
        .map(|s| ("--exec", s))
        .chain(args.serve.iter().map(|s| ("--serve", s)))
    {
        let shown = format!("{flag} {}={}", spec.job_type, spec.command);
        if served.contains(&spec.job_type) {
            return Err(CliError::new(format!(
                "{shown}: job type {:?} has a command already",
                spec.job_type
            )));
        }
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
                said.push(format!(
                    "{}: runs {} per job",
                    spec.job_type,
                    command.shown()
                ));
                builder = builder.handler(&spec.job_type, command);
            } else {
                let mut serve = litejobs::exec::Serve::parse(&spec.command).map_err(invalid)?;
                check_program(&shown, &serve.program())?;
                for (name, value) in &env {
                    serve = serve.env(name, value);
                }
                let processes = args.type_concurrency(&spec.job_type).unwrap_or(threads);
                let serve = serve.kill_grace(args.kill_grace).processes(processes);
                said.push(format!(
                    "{}: served by {} ({processes} processes)",
                    spec.job_type,
                    serve.shown()
                ));
                if processes > threads {
                    said.push(format!(
                        "warning: {shown}: {processes} processes but {threads} handler \
                         threads, so at most {threads} run at once (raise --concurrency N)"
                    ));
                }
                builder = builder.handler(&spec.job_type, serve);
            }
        }
        #[cfg(not(unix))]
        {
            let _ = (invalid, &env, threads);
            return Err(CliError::new(format!(
                "{shown}: command handlers need a Unix system"
            )));
        }
        served.push(spec.job_type.clone());
    }
    for line in said {
        match line.strip_prefix("warning: ") {
            Some(warning) => log::warn!("{warning}"),
            None => log::info!("{line}"),
        }
    }
    Ok((builder, served))
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
