//! How an idle dispatcher learns that another connection (another process, a program
//! inserting rows by plain SQL) committed: it asks the storage's [`ChangeSignal`], and the
//! question is cheap but waking up to ask is not. Where the database is a file on Linux, a
//! thread blocks on an inotify watch of the file's directory and a write to the database,
//! its `-wal` or `-journal` wakes the dispatcher to ask at once and a few times more in the
//! next 32 ms (a commit becomes visible a moment after its log is written, and a change the
//! signal reports may be this process's own commit rather than the reported one). Elsewhere
//! the dispatcher asks on a timer, every `change_check_interval`.
//!
//! The watch is taken off when the worker has stayed busy for a while (every slot and the
//! prefetch taken, or a claim that came back full): then the kernel's work on each of the
//! worker's own writes would be spent for nothing. It is off, too, for a second after this
//! process enqueues: each of its writes would wake the watch thread from inside the
//! enqueue's own system call, on the way to the handler; timed checks stand in meanwhile.
//! When the watch is put back the signal is asked at once, so a commit in between is not
//! missed.
//!
//! A signal that hears of commits itself (PostgreSQL's notifications, read by a thread of
//! the signal's own) sends news instead: the dispatcher sleeps until news comes and then asks
//! once; a notification comes after its commit, so no look follows.

use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::storage::{ChangeSignal, CommitFiles};

/// After a reported write, the signal is asked this long after it (µs): at once, then every
/// 50–250 µs for the first millisecond, where a commit whose log write came before its fsync
/// (another program's SQLite at its default synchronous = FULL) becomes visible: its fsync
/// takes a few hundred microseconds. Looks at 0, 250 and 750 µs picked such a job up 0.30 ms
/// after its commit returned (p50); these, 0.16 ms. Then at growing gaps.
const FOLLOW_UPS_US: [u64; 16] = [
    0, 50, 100, 150, 200, 300, 400, 500, 650, 800, 1_000, 1_750, 3_750, 7_750, 15_750, 31_750,
];

/// The first follow-up of the growing gaps: once a look has seen a change, the looks of the
/// first millisecond are skipped (each is a wake-up; the change seen is most likely the
/// reported write).
const FIRST_SPARSE_FOLLOW_UP: usize = 11;

/// How long a busy worker keeps the watch before taking it off: a worker that is busy for
/// one job at a time (an enqueue, a pickup, idle again) keeps it, one draining a backlog
/// stops paying for it.
const BUSY_BEFORE_UNWATCH: Duration = Duration::from_millis(50);

/// How long after this process's own enqueue the watch stays off. Each of its writes would
/// wake the watch thread inside the writer's own system call, on the way to the handler;
/// while this process enqueues, its wake-ups tell the worker of its own jobs, and timed
/// checks cover other processes' commits.
const LOCAL_QUIET: Duration = Duration::from_secs(1);

/// Timed checks after another connection's commit was seen: every millisecond for
/// [`HOT_SPAN`], because jobs tend to come in runs. A worker that has seen none for that
/// long goes back to its `change_check_interval`, so an idle worker costs what it did.
const HOT_INTERVAL: Duration = Duration::from_millis(1);

/// How long checks stay at [`HOT_INTERVAL`] after the last commit seen.
const HOT_SPAN: Duration = Duration::from_secs(1);

/// The dispatcher's view of commits made elsewhere.
pub(crate) struct ChangeWatch {
    signal: Box<dyn ChangeSignal>,
    files: Option<FileWatch>,
    /// The signal's news of commits, where it hears of them itself.
    news: Option<Receiver<()>>,
    /// Timed checks, where there is no file watch.
    interval: Duration,
    /// Whether the dispatcher wants to hear of commits (some queue idle with room).
    watching: bool,
    /// Since when the dispatcher has not been watching.
    busy_since: Option<Instant>,
    /// This process's latest enqueue (an in-process wake).
    local_write: Option<Instant>,
    next_check: Option<Instant>,
    /// The reported write the follow-up checks count from, and how many were made.
    hinted_at: Instant,
    follow_up: usize,
    /// When a timed check last saw another connection's commit.
    last_change: Option<Instant>,
}

impl ChangeWatch {
    /// Asks `signal`; wakes on writes to `files` where a watch can be set up, else every
    /// `interval`.
    pub(crate) fn new(
        signal: Box<dyn ChangeSignal>,
        files: Option<CommitFiles>,
        interval: Duration,
    ) -> ChangeWatch {
        let files = files.and_then(|files| match FileWatch::start(files) {
            Ok(watch) => Some(watch),
            Err(e) => {
                log::info!(
                    "litejobs: no file watch on the database ({e}); checking for other \
                     processes' commits every {interval:?}"
                );
                None
            }
        });
        let now = Instant::now();
        let news = signal.news();
        ChangeWatch {
            signal,
            files,
            news,
            interval,
            watching: false,
            busy_since: Some(now),
            local_write: None,
            next_check: None,
            hinted_at: now,
            follow_up: FOLLOW_UPS_US.len(),
            last_change: None,
        }
    }

    /// Reports of writes to the database's files, or the signal's news; never ready
    /// without either.
    pub(crate) fn hints(&self) -> Receiver<()> {
        match (&self.files, &self.news) {
            (Some(files), _) => files.hints.clone(),
            (None, Some(news)) => news.clone(),
            (None, None) => crossbeam_channel::never(),
        }
    }

    /// Whether the signal is told of commits (its news), rather than seeing that something
    /// was written.
    pub(crate) fn told(&self) -> bool {
        self.news.is_some()
    }

    /// Whether writes are reported now: the file watch is on, or the signal sends news
    /// (else the watch looks on a timer while watching).
    fn hears_of_writes(&self) -> bool {
        self.files.as_ref().is_some_and(FileWatch::is_active) || self.news.is_some()
    }

    /// This process enqueued (an in-process wake): the file watch goes off for a while.
    pub(crate) fn local_write(&mut self, now: Instant) {
        self.local_write = Some(now);
        if let Some(files) = &mut self.files {
            files.unwatch();
        }
    }

    /// Called on every pass of the dispatcher with whether it wants to hear of commits.
    pub(crate) fn set_watching(&mut self, watching: bool, now: Instant) {
        if watching {
            self.busy_since = None;
            let was_on = self.hears_of_writes();
            let quiet = self
                .local_write
                .is_none_or(|at| now.duration_since(at) >= LOCAL_QUIET);
            if let Some(files) = self.files.as_mut().filter(|_| quiet) {
                if let Err(e) = files.watch() {
                    log::warn!(
                        "litejobs: cannot watch the database's files ({e}); checking for other \
                         processes' commits every {:?}",
                        self.interval
                    );
                    self.files = None;
                }
            }
            if !self.watching || (!was_on && self.hears_of_writes()) {
                // Commits made while nothing looked for them: look now.
                self.next_check = Some(now);
                self.follow_up = FOLLOW_UPS_US.len();
            } else if !self.hears_of_writes() && self.next_check.is_none() {
                self.next_check = Some(now);
            }
        } else {
            let since = *self.busy_since.get_or_insert(now);
            if let Some(files) = &mut self.files {
                if now.duration_since(since) >= BUSY_BEFORE_UNWATCH {
                    files.unwatch();
                }
            }
        }
        self.watching = watching;
    }

    /// The file watch's thread, or the signal's, ended (its channel closed): from now on,
    /// look on a timer.
    pub(crate) fn hints_ended(&mut self, now: Instant) {
        self.files = None;
        self.news = None;
        self.next_check = Some(now);
    }

    /// A write to the database's files was reported: look now, and a few times more. News
    /// from the signal: look now.
    pub(crate) fn hinted(&mut self, now: Instant) {
        self.hinted_at = now;
        self.follow_up = if self.news.is_some() {
            FOLLOW_UPS_US.len()
        } else {
            0
        };
        self.next_check = Some(now);
    }

    /// When the next look is due, while watching (also when the file watch, off since this
    /// process's last enqueue, may go back on, whatever the timed checks' interval).
    pub(crate) fn next_check(&self) -> Option<Instant> {
        if !self.watching {
            return None;
        }
        let back_on = match (&self.files, self.local_write) {
            (Some(files), Some(at)) if !files.is_active() => Some(at + LOCAL_QUIET),
            _ => None,
        };
        self.next_check.into_iter().chain(back_on).min()
    }

    /// Looks when a look is due: true when another connection committed since the last
    /// look (or the signal failed: a needless look for jobs costs less than a missed one).
    pub(crate) fn look_if_due(&mut self, now: Instant) -> bool {
        match self.next_check() {
            Some(at) if at <= now => {}
            _ => return false,
        }
        let changed = self.signal.changed().unwrap_or_else(|e| {
            log::debug!("litejobs: change check failed ({e}); looking for due jobs anyway");
            true
        });
        if changed {
            self.last_change = Some(now);
        }
        self.next_check = if self.news.is_some() {
            // The next news says when to look again.
            None
        } else if !self.hears_of_writes() {
            let hot = self
                .last_change
                .is_some_and(|at| now.duration_since(at) < HOT_SPAN);
            let interval = if hot {
                self.interval.min(HOT_INTERVAL)
            } else {
                self.interval
            };
            Some(now + interval)
        } else {
            // Even after a change is seen the schedule goes on: the change may have been
            // this process's own commit, and the write that was reported may become
            // visible a moment later.
            self.follow_up = if changed {
                self.follow_up.max(FIRST_SPARSE_FOLLOW_UP - 1) + 1
            } else {
                self.follow_up + 1
            };
            FOLLOW_UPS_US
                .get(self.follow_up)
                .map(|&us| self.hinted_at + Duration::from_micros(us))
        };
        changed
    }
}

mod file_watch;

pub(crate) use file_watch::FileWatch;

#[cfg(test)]
mod tests;
