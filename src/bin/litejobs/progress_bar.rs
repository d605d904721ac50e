//! A progress bar on stderr for the commands that take a while (`prune`, `keys rotate`,
//! `dead requeue --type`, `copy-to`), fed by the library's [`Progress`] calls. Drawn only
//! when stderr is a terminal and the output is not `--json`: piped or scripted, the command
//! prints exactly what it did without one.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use litejobs::progress::Progress;

/// A bar (or nothing) for one command.
pub struct Bar(Option<ProgressBar>);

impl Bar {
    /// A bar saying `what` (e.g. "pruning"), counting `unit` (e.g. "jobs"); none when `json`
    /// or when stderr is not a terminal.
    pub fn new(json: bool, what: &str, unit: &str) -> Bar {
        if json || !std::io::stderr().is_terminal() {
            return Bar(None);
        }
        let bar = ProgressBar::new_spinner();
        bar.set_message(format!("{what} ({unit})"));
        // Drawn at once, so even a quick command shows what it does before it clears.
        bar.tick();
        bar.enable_steady_tick(Duration::from_millis(120));
        Bar(Some(bar))
    }

    /// Moves the bar to `p`: a bar with a length once the total is known, a counting
    /// spinner before.
    pub fn update(&mut self, p: Progress) {
        let Some(bar) = &self.0 else { return };
        if let Some(total) = p.total {
            if bar.length() != Some(total) {
                bar.set_length(total);
                if let Ok(style) =
                    ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} eta {eta}")
                {
                    bar.set_style(style.progress_chars("=> "));
                }
            }
        } else if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}: {pos}") {
            bar.set_style(style);
        }
        bar.set_position(p.done);
    }

    /// Clears the bar, so the command's own lines follow on a clean terminal.
    pub fn finish(self) {
        if let Some(bar) = self.0 {
            bar.finish_and_clear();
        }
    }
}
