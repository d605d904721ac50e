//! `litejobs web`: serve the dashboard until SIGINT or SIGTERM. All of it lives in
//! the library (`litejobs::web`), so an application can serve the same dashboard itself.

use std::io::Write;
use std::sync::mpsc::{self, Receiver};

use litejobs::web::{Dashboard, DashboardOptions};

use super::{CliError, Ctx, Exit};
use crate::args::WebArgs;

/// Starts the dashboard, prints its address, and serves until a signal.
pub fn run(ctx: &Ctx, args: &WebArgs, out: &mut dyn Write) -> Result<Exit, CliError> {
    let mut options = DashboardOptions::new()
        .addr(&args.addr)
        .redactor(ctx.redactor.clone());
    if let Some(token) = token(args)? {
        options = options.token(token);
    }
    // A bad token is refused before the database is opened.
    options.validate()?;
    // A file this process cannot write (permissions, a read-only mount, a backup) is still
    // worth looking at: serve it read-only.
    let queue = match ctx.open_existing() {
        Err(e) if e.is_read_only() => ctx.open_read_only()?,
        opened => opened?,
    };
    let read_only = args.read_only || queue.is_read_only();
    let options = options.read_only(read_only);
    // Installed before start so that a signal during start-up is not lost.
    let signals = install_signal_handler()?;
    let dashboard = Dashboard::start(&queue, options)?;
    writeln!(
        out,
        "litejobs web: serving {} on {}{}; stop with SIGINT or SIGTERM",
        dashboard.url(),
        ctx.shown_db()?,
        if read_only { " (read-only)" } else { "" }
    )?;
    // Scripts (and tests) read the address as soon as it is there (the dashboard logs it
    // too, once).
    out.flush()?;
    super::systemd::ready(&format!("serving {}", dashboard.url()));
    // An Err means every sender is gone, which cannot happen while the handler is
    // installed; stopping is the safe answer either way.
    let _ = signals.recv();
    super::systemd::stopping();
    dashboard.stop();
    log::info!("litejobs web: stopped");
    writeln!(out, "litejobs web: stopped")?;
    Ok(Exit::Ok)
}

/// The token from `--token`, `LITEJOBS_WEB_TOKEN` (clap reads both into `args.token`) or
/// `--token-file`; one way only, so that a forgotten variable never silently wins.
fn token(args: &WebArgs) -> Result<Option<String>, CliError> {
    let Some(path) = &args.token_file else {
        return Ok(args.token.clone());
    };
    if args.token.is_some() {
        return Err(CliError::new(
            "give the token one way: --token, LITEJOBS_WEB_TOKEN or --token-file, not two",
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        CliError::new(format!(
            "cannot read the token file {}: {e}",
            path.display()
        ))
    })?;
    Ok(Some(text.trim_end().to_string()))
}

/// SIGINT, SIGTERM (and SIGHUP) send on the returned channel.
fn install_signal_handler() -> Result<Receiver<()>, CliError> {
    let (tx, rx) = mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .map_err(|e| CliError::new(format!("cannot install the signal handler: {e}")))?;
    Ok(rx)
}
