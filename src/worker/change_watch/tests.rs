//! The change watch's schedule of looks, with a fake signal, and its file watch on a temp dir.

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
    assert!(watch.hears_of_writes());
    watch.set_watching(false, t0 + Duration::from_millis(1));
    watch.set_watching(false, t0 + Duration::from_millis(40));
    assert!(watch.hears_of_writes(), "busy for a moment: kept");
    watch.set_watching(false, t0 + Duration::from_millis(51));
    assert!(!watch.hears_of_writes(), "busy for 50 ms: taken off");
    watch.set_watching(true, t0 + Duration::from_millis(60));
    assert!(watch.hears_of_writes(), "idle again: back on");
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
    assert!(watch.hears_of_writes() && watch.next_check().is_none());

    let ms = |n: u64| t0 + Duration::from_millis(n);
    watch.local_write(ms(10));
    watch.set_watching(false, ms(10));
    watch.set_watching(true, ms(11));
    assert!(!watch.hears_of_writes(), "this process writes: no watch");
    assert_eq!(watch.next_check(), Some(ms(11)), "idle again: look now");
    assert!(!watch.look_if_due(ms(11)));
    assert_eq!(watch.next_check(), Some(ms(15)), "then every interval");
    watch.set_watching(true, ms(15));
    assert!(!watch.look_if_due(ms(15)));
    assert_eq!(watch.next_check(), Some(ms(19)));

    watch.set_watching(true, ms(1_010));
    assert!(
        watch.hears_of_writes(),
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
    assert!(watch.hears_of_writes());
}

#[cfg(target_os = "linux")]
#[test]
fn when_the_file_watch_ends_the_watch_looks_on_a_timer() {
    let (mut watch, around) = watched(Duration::from_millis(4));
    let t0 = Instant::now();
    watch.set_watching(true, t0);
    assert!(!watch.look_if_due(t0));
    assert_eq!(watch.next_check(), None, "waiting for a reported write");
    watch.hints_ended(t0);
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
    watch.hints_ended(t1);
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
