//! Telling a service manager (systemd with `Type=notify`) how `work` and `web` are doing:
//! ready once they serve, stopping at shutdown, and, for `work`, a watchdog fed only while
//! the worker's dispatcher goes round its loop, so a hung dispatcher gets restarted
//! (`WatchdogSec=`). Without `NOTIFY_SOCKET` (not started by systemd) nothing is sent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sd_notify::NotifyState;

/// Set by [`stopping`]: a worker shutting down stops its loop, and the watchdog is then fed
/// regardless until the process exits (the stop has its own timeout).
static STOPPING: AtomicBool = AtomicBool::new(false);

/// `READY=1` with a status line for `systemctl status`.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// `STOPPING=1`: shutting down, within the grace.
pub fn stopping() {
    STOPPING.store(true, Ordering::SeqCst);
    send(&[NotifyState::Stopping, NotifyState::Status("shutting down")]);
}

/// Feeds the watchdog when systemd asked for one: every half of its interval, as long as
/// `turns` (the dispatcher's count of trips round its loop, at least one every poll
/// interval) has moved since the last look. A loop that stands still is not vouched for,
/// and systemd restarts the service once the interval passes.
pub fn feed_watchdog(turns: impl Fn() -> u64 + Send + 'static) {
    let mut usec = 0;
    if !sd_notify::watchdog_enabled(false, &mut usec) {
        return;
    }
    let every = Duration::from_micros(usec / 2).max(Duration::from_millis(10));
    let spawned = std::thread::Builder::new()
        .name("litejobs-watchdog".into())
        .spawn(move || {
            let mut last = turns();
            loop {
                std::thread::sleep(every);
                let now = turns();
                if now != last || STOPPING.load(Ordering::SeqCst) {
                    send(&[NotifyState::Watchdog]);
                } else {
                    log::warn!(
                        "litejobs: the worker's dispatcher has not gone round its loop for \
                         {every:?}; systemd's watchdog is not fed"
                    );
                }
                last = now;
            }
        });
    if let Err(e) = spawned {
        log::warn!("litejobs: systemd's watchdog will not be fed: {e}");
    }
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(false, states) {
        log::warn!("litejobs: cannot tell systemd ({e})");
    }
}
