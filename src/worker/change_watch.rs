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

    /// Whether the file watch is on now, or the signal sends news (else the watch looks on
    /// a timer while watching).
    fn file_watch_on(&self) -> bool {
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
            let was_on = self.file_watch_on();
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
            if !self.watching || (!was_on && self.file_watch_on()) {
                // Commits made while nothing looked for them: look now.
                self.next_check = Some(now);
                self.follow_up = FOLLOW_UPS_US.len();
            } else if !self.file_watch_on() && self.next_check.is_none() {
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
    pub(crate) fn file_watch_ended(&mut self, now: Instant) {
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
        } else if !self.file_watch_on() {
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

pub(crate) use file_watch::FileWatch;

#[cfg(target_os = "linux")]
mod file_watch {
    use std::ffi::OsString;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use crossbeam_channel::{Receiver, Sender};
    use inotify::{Inotify, WatchDescriptor, WatchMask, Watches};

    use crate::storage::CommitFiles;

    /// An inotify watch of the database's directory and the thread that reads it.
    pub(crate) struct FileWatch {
        pub(super) hints: Receiver<()>,
        watches: Watches,
        dir: PathBuf,
        active: Option<WatchDescriptor>,
        stop: Arc<AtomicBool>,
    }

    impl FileWatch {
        pub(crate) fn start(files: CommitFiles) -> std::io::Result<FileWatch> {
            let inotify = Inotify::init()?;
            let mut watches = inotify.watches();
            // Fails now, rather than on the first watch, where the directory cannot be watched.
            let probe = watches.add(&files.dir, WatchMask::MODIFY)?;
            watches.remove(probe)?;
            let (tx, hints) = crossbeam_channel::bounded(1);
            let stop = Arc::new(AtomicBool::new(false));
            let thread_stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("litejobs-watch".to_string())
                .spawn(move || read_loop(inotify, &files.names, &tx, &thread_stop))?;
            Ok(FileWatch {
                hints,
                watches,
                dir: files.dir,
                active: None,
                stop,
            })
        }

        pub(crate) fn watch(&mut self) -> std::io::Result<()> {
            if self.active.is_none() {
                self.active = Some(self.watches.add(&self.dir, WatchMask::MODIFY)?);
            }
            Ok(())
        }

        pub(crate) fn is_active(&self) -> bool {
            self.active.is_some()
        }

        pub(crate) fn unwatch(&mut self) {
            if let Some(wd) = self.active.take() {
                // Fails only when the directory is gone, which removed the watch already.
                let _ = self.watches.remove(wd);
            }
        }
    }

    impl Drop for FileWatch {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            // Removing a watch queues an event, which wakes the thread to see `stop`.
            if self.active.is_none() {
                let _ = self.watch();
            }
            self.unwatch();
        }
    }

    fn read_loop(mut inotify: Inotify, names: &[OsString], hints: &Sender<()>, stop: &AtomicBool) {
        let mut buffer = [0u8; 4096];
        loop {
            let events = match inotify.read_events_blocking(&mut buffer) {
                Ok(events) => events,
                // The channel closes with this thread: the dispatcher goes back to timed
                // checks.
                Err(e) => {
                    log::warn!("litejobs: the database's file watch stopped ({e})");
                    return;
                }
            };
            let written = events
                .filter_map(|event| event.name)
                .any(|name| names.iter().any(|n| n == name));
            if stop.load(Ordering::SeqCst) {
                return;
            }
            if written
                && hints.try_send(()) == Err(crossbeam_channel::TrySendError::Disconnected(()))
            {
                return;
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod file_watch {
    use crossbeam_channel::Receiver;

    use crate::storage::CommitFiles;

    /// No file watch here: the dispatcher checks on a timer.
    pub(crate) struct FileWatch {
        pub(super) hints: Receiver<()>,
    }

    impl FileWatch {
        pub(crate) fn start(_files: CommitFiles) -> std::io::Result<FileWatch> {
            Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "file watches are used on Linux only",
            ))
        }

        pub(crate) fn watch(&mut self) -> std::io::Result<()> {
            Ok(())
        }

        pub(crate) fn is_active(&self) -> bool {
            false
        }

        pub(crate) fn unwatch(&mut self) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A signal that answers "changed" when told to, and counts the questions.
    struct FakeSignal {
        asked: Arc<AtomicUsize>,
        changes: Arc<AtomicUsize>,
    }

    impl ChangeSignal for FakeSignal {
        fn changed(&mut self) -> crate::error::Result<bool> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            Ok(self.changes.swap(0, Ordering::SeqCst) > 0)
        }
    }

    fn fake() -> (Box<dyn ChangeSignal>, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let asked = Arc::new(AtomicUsize::new(0));
        let changes = Arc::new(AtomicUsize::new(0));
        let signal = FakeSignal {
            asked: Arc::clone(&asked),
            changes: Arc::clone(&changes),
        };
        (Box::new(signal), asked, changes)
    }

    /// What a watched temp dir's test holds beside the watch: the dir (kept while the test
    /// runs) and the fake signal's counters.
    struct Around {
        dir: tempfile::TempDir,
        asked: Arc<AtomicUsize>,
        changes: Arc<AtomicUsize>,
    }

    /// A file-watching change watch on an empty temp dir (no write is reported but the
    /// ones made there or given by hand through `hinted`), looking every `interval` when the
    /// file watch is off.
    fn watched(interval: Duration) -> (ChangeWatch, Around) {
        let (signal, asked, changes) = fake();
        let dir = tempfile::tempdir().expect("temp dir");
        let files = CommitFiles {
            dir: dir.path().to_path_buf(),
            names: vec!["jobs.db-wal".into()],
        };
        let watch = ChangeWatch::new(signal, Some(files), interval);
        assert!(watch.files.is_some(), "inotify works here");
        (
            watch,
            Around {
                dir,
                asked,
                changes,
            },
        )
    }

    #[test]
    fn timed_checks_look_every_interval_while_watching_and_never_while_busy() {
        let (signal, asked, changes) = fake();
        let interval = Duration::from_millis(4);
        let mut watch = ChangeWatch::new(signal, None, interval);
        let t0 = Instant::now();
        watch.set_watching(false, t0);
        assert_eq!(watch.next_check(), None, "a busy worker does not look");
        assert!(!watch.look_if_due(t0 + Duration::from_secs(1)));
        watch.set_watching(true, t0);
        assert_eq!(watch.next_check(), Some(t0), "back to idle: look at once");
        assert!(!watch.look_if_due(t0));
        assert_eq!(watch.next_check(), Some(t0 + interval));
        assert!(!watch.look_if_due(t0 + interval / 2), "not due yet");
        changes.store(1, Ordering::SeqCst);
        assert!(watch.look_if_due(t0 + interval));
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        // A commit was seen: jobs come in runs, so the next looks are a millisecond apart...
        let t1 = t0 + interval;
        assert_eq!(watch.next_check(), Some(t1 + HOT_INTERVAL));
        assert!(!watch.look_if_due(t1 + HOT_INTERVAL), "nothing new");
        assert_eq!(watch.next_check(), Some(t1 + 2 * HOT_INTERVAL));
        // ...until none has been seen for HOT_SPAN: back to the interval.
        let quiet = t1 + HOT_SPAN;
        assert!(!watch.look_if_due(quiet));
        assert_eq!(watch.next_check(), Some(quiet + interval));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_reported_write_is_looked_at_at_once_then_often_then_at_growing_gaps() {
        let (mut watch, around) = watched(Duration::from_millis(4));
        let t0 = Instant::now();
        watch.set_watching(true, t0);
        assert!(!watch.look_if_due(t0), "the look on becoming idle");
        assert_eq!(
            watch.next_check(),
            None,
            "then nothing until a write is reported"
        );

        let t1 = t0 + Duration::from_secs(1);
        watch.hinted(t1);
        let mut looks = Vec::new();
        while let Some(at) = watch.next_check().filter(|_| looks.len() < 20) {
            assert!(!watch.look_if_due(at - Duration::from_micros(1)), "early");
            assert!(!watch.look_if_due(at));
            looks.push((at - t1).as_micros());
        }
        assert_eq!(
            looks,
            vec![
                0, 50, 100, 150, 200, 300, 400, 500, 650, 800, 1_000, 1_750, 3_750, 7_750, 15_750,
                31_750
            ]
        );

        // A change seen early (maybe this process's own commit) does not end the schedule:
        // the reported write may become visible later. The looks of the first millisecond
        // are skipped once one has seen a change.
        let t2 = t1 + Duration::from_secs(1);
        watch.hinted(t2);
        assert!(!watch.look_if_due(t2));
        assert_eq!(watch.next_check(), Some(t2 + Duration::from_micros(50)));
        around.changes.store(1, Ordering::SeqCst);
        assert!(watch.look_if_due(t2 + Duration::from_micros(50)));
        assert_eq!(watch.next_check(), Some(t2 + Duration::from_micros(1_750)));
        around.changes.store(1, Ordering::SeqCst);
        assert!(watch.look_if_due(t2 + Duration::from_micros(1_750)));
        assert_eq!(watch.next_check(), Some(t2 + Duration::from_micros(3_750)));
        assert_eq!(around.asked.load(Ordering::SeqCst), 1 + 16 + 3);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_write_reported_while_busy_is_looked_at_when_idle_again() {
        let (mut watch, around) = watched(Duration::from_millis(4));
        let t0 = Instant::now();
        watch.set_watching(false, t0);
        watch.hinted(t0);
        assert_eq!(watch.next_check(), None, "busy: no look");
        around.changes.store(1, Ordering::SeqCst);
        watch.set_watching(true, t0 + Duration::from_millis(3));
        assert!(watch.look_if_due(t0 + Duration::from_millis(3)));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn writes_to_the_database_files_are_reported_and_other_files_are_not() {
        let (mut watch, around) = watched(Duration::from_millis(4));
        let hints = watch.hints();
        watch.set_watching(true, Instant::now());
        std::fs::write(around.dir.path().join("notes.txt"), "x").expect("write");
        let wait = Duration::from_secs(10);
        assert!(
            hints.recv_timeout(Duration::from_millis(50)).is_err(),
            "another file's write is not reported"
        );
        std::fs::write(around.dir.path().join("jobs.db-wal"), "x").expect("write");
        assert!(
            hints.recv_timeout(wait).is_ok(),
            "the log's write is reported"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_worker_busy_for_a_while_takes_the_watch_off_and_puts_it_back_when_idle() {
        let (mut watch, _around) = watched(Duration::from_millis(4));
        let t0 = Instant::now();
        watch.set_watching(true, t0);
        assert!(watch.file_watch_on());
        watch.set_watching(false, t0 + Duration::from_millis(1));
        watch.set_watching(false, t0 + Duration::from_millis(40));
        assert!(watch.file_watch_on(), "busy for a moment: kept");
        watch.set_watching(false, t0 + Duration::from_millis(51));
        assert!(!watch.file_watch_on(), "busy for 50 ms: taken off");
        watch.set_watching(true, t0 + Duration::from_millis(60));
        assert!(watch.file_watch_on(), "idle again: back on");
        assert_eq!(watch.next_check(), Some(t0 + Duration::from_millis(60)));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn dropping_the_watch_ends_its_thread_whether_watching_or_not() {
        for watching in [true, false] {
            let (mut watch, _around) = watched(Duration::from_millis(4));
            watch.set_watching(watching, Instant::now());
            let hints = watch.hints();
            drop(watch);
            // The thread holds the only sender: the channel closes when it ends.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match hints.recv_timeout(left) {
                    Ok(()) => continue,
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                        panic!("the watch thread outlived its watch (watching: {watching})")
                    }
                }
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn after_an_in_process_enqueue_timed_looks_stand_in_for_the_watch_for_a_second() {
        let (mut watch, _around) = watched(Duration::from_millis(4));
        let t0 = Instant::now();
        watch.set_watching(true, t0);
        assert!(!watch.look_if_due(t0));
        assert!(watch.file_watch_on() && watch.next_check().is_none());

        let ms = |n: u64| t0 + Duration::from_millis(n);
        watch.local_write(ms(10));
        watch.set_watching(false, ms(10));
        watch.set_watching(true, ms(11));
        assert!(!watch.file_watch_on(), "this process writes: no watch");
        assert_eq!(watch.next_check(), Some(ms(11)), "idle again: look now");
        assert!(!watch.look_if_due(ms(11)));
        assert_eq!(watch.next_check(), Some(ms(15)), "then every interval");
        watch.set_watching(true, ms(15));
        assert!(!watch.look_if_due(ms(15)));
        assert_eq!(watch.next_check(), Some(ms(19)));

        watch.set_watching(true, ms(1_010));
        assert!(
            watch.file_watch_on(),
            "a second without an enqueue: the watch is back"
        );
        assert_eq!(watch.next_check(), Some(ms(1_010)), "with a look");
        assert!(!watch.look_if_due(ms(1_010)));
        assert_eq!(watch.next_check(), None, "then only reported writes");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_watch_goes_back_on_a_second_after_an_enqueue_however_rare_the_timed_checks() {
        let (mut watch, _around) = watched(Duration::from_secs(3600));
        let t0 = Instant::now();
        watch.local_write(t0);
        watch.set_watching(true, t0);
        assert!(!watch.look_if_due(t0));
        assert_eq!(
            watch.next_check(),
            Some(t0 + LOCAL_QUIET),
            "woken when the watch may go back on, not an hour later"
        );
        let t1 = t0 + LOCAL_QUIET;
        assert!(!watch.look_if_due(t1));
        watch.set_watching(true, t1);
        assert!(watch.file_watch_on());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn when_the_file_watch_ends_the_watch_looks_on_a_timer() {
        let (mut watch, around) = watched(Duration::from_millis(4));
        let t0 = Instant::now();
        watch.set_watching(true, t0);
        assert!(!watch.look_if_due(t0));
        assert_eq!(watch.next_check(), None, "waiting for a reported write");
        watch.file_watch_ended(t0);
        assert!(
            matches!(
                watch.hints().recv_timeout(Duration::from_millis(1)),
                Err(crossbeam_channel::RecvTimeoutError::Timeout)
            ),
            "no channel left to wake on"
        );
        assert!(!watch.look_if_due(t0));
        assert_eq!(watch.next_check(), Some(t0 + Duration::from_millis(4)));
        assert_eq!(around.asked.load(Ordering::SeqCst), 2);
    }

    /// A signal that is told of commits: the fake's counters, and news sent by hand.
    struct Told {
        inner: FakeSignal,
        news: crossbeam_channel::Receiver<()>,
    }

    impl ChangeSignal for Told {
        fn changed(&mut self) -> crate::error::Result<bool> {
            self.inner.changed()
        }

        fn news(&self) -> Option<Receiver<()>> {
            Some(self.news.clone())
        }
    }

    #[test]
    fn a_signal_with_news_is_asked_once_per_news_and_never_on_a_timer() {
        let asked = Arc::new(AtomicUsize::new(0));
        let changes = Arc::new(AtomicUsize::new(0));
        let (send, news) = crossbeam_channel::bounded(1);
        let signal = Told {
            inner: FakeSignal {
                asked: Arc::clone(&asked),
                changes: Arc::clone(&changes),
            },
            news,
        };
        let mut watch = ChangeWatch::new(Box::new(signal), None, Duration::from_millis(4));
        assert!(watch.told());
        let t0 = Instant::now();
        watch.set_watching(true, t0);
        assert_eq!(watch.next_check(), Some(t0), "idle: look once at once");
        assert!(!watch.look_if_due(t0));
        assert_eq!(watch.next_check(), None, "then only when news comes");
        assert!(!watch.look_if_due(t0 + HOT_SPAN * 10));
        send.send(()).expect("the watch holds the news");
        watch
            .hints()
            .try_recv()
            .expect("the news wakes the dispatcher");
        changes.store(1, Ordering::SeqCst);
        let t1 = t0 + Duration::from_millis(7);
        watch.hinted(t1);
        assert_eq!(watch.next_check(), Some(t1));
        assert!(watch.look_if_due(t1));
        // A notification comes after its commit: no look follows, hot or not.
        assert_eq!(watch.next_check(), None);
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        // The news's thread gone, the watch falls back to timed looks.
        drop(send);
        assert!(watch.hints().try_recv().is_err());
        watch.file_watch_ended(t1);
        assert!(!watch.told());
        assert!(!watch.look_if_due(t1));
        assert_eq!(
            watch.next_check(),
            Some(t1 + HOT_INTERVAL),
            "a change was seen just now"
        );
    }

    #[test]
    fn a_failing_signal_counts_as_a_change() {
        struct Broken;
        impl ChangeSignal for Broken {
            fn changed(&mut self) -> crate::error::Result<bool> {
                Err(crate::Error::new(crate::ErrorKind::Busy, "locked"))
            }
        }
        let mut watch = ChangeWatch::new(Box::new(Broken), None, Duration::from_millis(4));
        let t0 = Instant::now();
        watch.set_watching(true, t0);
        assert!(watch.look_if_due(t0));
    }
}
