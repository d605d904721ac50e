//! The `litejobs` command: parse, run, and map the outcome to an exit status with at most one
//! line on stderr. Exit status: 0 ok, 1 a failed `check`, 2 bad usage or an unusable
//! database.

mod args;
mod commands;
mod duration;
mod log_json;
mod output;
mod progress_bar;
mod work_args;

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use clap::error::ErrorKind as ClapErrorKind;
use clap::Parser;

use args::{Cli, Command};
use commands::Exit;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    init_logging(&cli);
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let result = commands::run(&cli, &mut out).and_then(|exit| {
        out.flush()?;
        Ok(exit)
    });
    match result {
        Ok(Exit::Ok) => ExitCode::SUCCESS,
        Ok(Exit::CheckFailed) => ExitCode::from(1),
        // `litejobs list | head`: the reader has what it wanted.
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            // Whatever was written before the failure still goes out, then the one line.
            let _ = out.flush();
            eprintln!("litejobs: {e}");
            ExitCode::from(2)
        }
    }
}

/// clap's own errors: help and version go to stdout with 0; a bad value (duration, status,
/// rate) is one line; other usage errors keep clap's text with the usage hint. All exit 2.
fn usage_error(e: &clap::Error) -> ExitCode {
    match e.kind() {
        ClapErrorKind::ValueValidation | ClapErrorKind::InvalidValue => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            eprintln!("litejobs: {}", first.trim_start_matches("error: "));
            ExitCode::from(2)
        }
        _ => {
            let _ = e.print();
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
        }
    }
}

/// env_logger on stderr, `RUST_LOG` wins; the services (`work`, `web`) log at info by
/// default, the one-shot commands only warnings, `top` nothing (its screen says what went
/// wrong). Wrapped in litejobs' capture, which keeps
/// what a job's handler logs with its attempt.
fn init_logging(cli: &Cli) {
    // A log line on stderr would land in the middle of `top`'s screen.
    if matches!(cli.command, Command::Top(_)) {
        return;
    }
    let service = match cli.command {
        Command::Work(_) => true,
        #[cfg(feature = "web")]
        Command::Web(_) => true,
        _ => false,
    };
    let default = if service { "info" } else { "warn" };
    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default));
    if cli.log_format == args::LogFormat::Json {
        logger.format(log_json::write_record);
    } else {
        // A line about a job says its id, type and attempt in words already: the fields
        // are for the JSON lines.
        logger.format_key_values(|_, _| Ok(()));
    }
    // Records a handler emits while it runs are also kept with its attempt (`show ID`).
    let logger = logger.build();
    let level = logger.filter();
    if log::set_boxed_logger(Box::new(litejobs::job_log::CaptureLogger::new(logger))).is_ok() {
        log::set_max_level(level);
    }
}
