//! Retention: deletes succeeded and cancelled jobs past the retention window (with
//! their attempt history), forgets expired idempotency keys, and checkpoints the WAL so the
//! file does not grow without bound. Dead jobs stay until a person acts; queued, running and
//! failed jobs are never touched.
//!
//! Work is cut into chunks, one short write transaction each, so pruning a million rows never
//! holds the write lock for long: workers of every process keep claiming in between.
//! [`Queue::prune`](crate::Queue::prune) runs a whole pass; a [`Pruner`] runs passes on a
//! schedule, one chunk per [`Pruner::step`], for a worker's loop or a thread of your own.

use crate::progress::Progress;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::Result;
use crate::system::clock::duration_to_ms;
use crate::Queue;

/// Rows deleted per transaction unless [`PruneOptions::chunk_size`] says otherwise.
pub const DEFAULT_PRUNE_CHUNK: usize = 1000;
/// How long succeeded and cancelled jobs are kept unless configured otherwise: 7 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often a [`Pruner`] starts a pass unless configured otherwise: hourly.
pub const DEFAULT_PRUNE_INTERVAL: Duration = Duration::from_secs(3600);

/// How a prune pass ends: which `PRAGMA wal_checkpoint` it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CheckpointMode {
    /// No checkpoint.
    Skip,
    /// `PASSIVE`: copies what it can without waiting for readers or writers; it never
    /// blocks, which suits a worker's scheduled pruning. The default.
    #[default]
    Passive,
    /// `TRUNCATE`: waits (up to the busy timeout) for readers, copies everything and
    /// empties the WAL file. What a person running `litejobs prune` wants.
    Truncate,
}

impl CheckpointMode {
    fn pragma_word(self) -> Option<&'static str> {
        match self {
            CheckpointMode::Skip => None,
            CheckpointMode::Passive => Some("PASSIVE"),
            CheckpointMode::Truncate => Some("TRUNCATE"),
        }
    }
}

/// What a prune pass deletes. Made by [`PruneOptions::new`].
///
/// ```
/// use litejobs::maintenance::{CheckpointMode, PruneOptions};
/// use std::time::Duration;
/// let day = Duration::from_secs(24 * 3600);
/// let options = PruneOptions::new(7 * day)       // succeeded and cancelled jobs
///     .keys_older_than(30 * day)                 // remembered idempotency keys
///     .checkpoint(CheckpointMode::Truncate);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct PruneOptions {
    older_than: Duration,
    keys_older_than: Option<Duration>,
    chunk_size: usize,
    checkpoint: CheckpointMode,
}

impl Default for PruneOptions {
    fn default() -> Self {
        PruneOptions::new(DEFAULT_RETENTION)
    }
}

impl PruneOptions {
    /// Deletes succeeded and cancelled jobs that finished more than `older_than` ago.
    pub fn new(older_than: Duration) -> PruneOptions {
        PruneOptions {
            older_than,
            keys_older_than: None,
            chunk_size: DEFAULT_PRUNE_CHUNK,
            checkpoint: CheckpointMode::default(),
        }
    }

    /// Also forgets remembered idempotency keys of jobs that succeeded more than `window`
    /// ago, even if their own window (the queue's
    /// [`idempotency_window`](crate::QueueBuilder::idempotency_window) when they succeeded)
    /// has not ended. Expired keys are always forgotten. Defaults to none.
    pub fn keys_older_than(mut self, window: Duration) -> PruneOptions {
        self.keys_older_than = Some(window);
        self
    }

    /// Rows deleted per transaction (at least 1). Defaults to [`DEFAULT_PRUNE_CHUNK`].
    pub fn chunk_size(mut self, rows: usize) -> PruneOptions {
        self.chunk_size = rows.max(1);
        self
    }

    /// The checkpoint that ends the pass. Defaults to [`CheckpointMode::Passive`].
    pub fn checkpoint(mut self, mode: CheckpointMode) -> PruneOptions {
        self.checkpoint = mode;
        self
    }
}

/// What a `PRAGMA wal_checkpoint` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CheckpointReport {
    /// True when it could not finish because another connection was busy (it copied what it
    /// could; the next checkpoint continues).
    pub busy: bool,
    /// Frames in the WAL when it ran (-1 when the database is not in WAL mode).
    pub wal_frames: i64,
    /// Frames copied into the database file (-1 when not in WAL mode).
    pub checkpointed_frames: i64,
}

/// What a prune pass deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PruneReport {
    /// Jobs that finished before this time (ms) were eligible.
    pub cutoff_ms: i64,
    /// Succeeded and cancelled jobs deleted.
    pub jobs_deleted: u64,
    /// Their attempt-history rows deleted.
    pub attempts_deleted: u64,
    /// Remembered idempotency keys forgotten.
    pub keys_deleted: u64,
    /// Write transactions used (one per chunk).
    pub transactions: u64,
    /// The closing checkpoint, unless skipped.
    pub checkpoint: Option<CheckpointReport>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Jobs,
    Keys,
    Checkpoint,
    Done,
}

/// One pass in progress: its cutoffs are fixed when it starts.
#[derive(Debug)]
struct Pass {
    now: i64,
    keys_before: Option<i64>,
    phase: Phase,
    report: PruneReport,
}

impl Pass {
    fn new(queue: &Queue, options: &PruneOptions) -> Pass {
        let now = queue.now_ms();
        Pass {
            now,
            keys_before: options
                .keys_older_than
                .map(|w| now.saturating_sub(duration_to_ms(w))),
            phase: Phase::Jobs,
            report: PruneReport {
                cutoff_ms: now.saturating_sub(duration_to_ms(options.older_than)),
                ..PruneReport::default()
            },
        }
    }

    /// Does one chunk (one transaction) or the checkpoint. True when the pass is done.
    fn step(&mut self, queue: &Queue, options: &PruneOptions) -> Result<bool> {
        let chunk = options.chunk_size;
        match self.phase {
            Phase::Jobs => {
                let cutoff = self.report.cutoff_ms;
                let (jobs, attempts, full) = queue.db().write(|tx| {
                    let ids = tx.prunable_jobs(cutoff, chunk)?;
                    let (jobs, attempts) = tx.delete_finished(&ids)?;
                    Ok((jobs, attempts, ids.len() == chunk))
                })?;
                self.report.transactions += 1;
                self.report.jobs_deleted += jobs;
                self.report.attempts_deleted += attempts;
                if !full {
                    self.phase = Phase::Keys;
                }
            }
            Phase::Keys => {
                let (now, before) = (self.now, self.keys_before);
                let keys = queue.db().write(|tx| tx.delete_keys(now, before, chunk))?;
                self.report.transactions += 1;
                self.report.keys_deleted += keys;
                if keys < chunk as u64 {
                    self.phase = Phase::Checkpoint;
                }
            }
            Phase::Checkpoint => {
                self.report.checkpoint = queue.checkpoint(options.checkpoint)?;
                self.phase = Phase::Done;
            }
            Phase::Done => {}
        }
        Ok(self.phase == Phase::Done)
    }
}

impl Queue {
    /// Retention: deletes succeeded and cancelled jobs (and their attempts) that
    /// finished before `options.older_than` ago, forgets expired idempotency keys, then
    /// checkpoints the WAL. Never touches queued, running, failed or dead jobs. Deletes in
    /// chunks, one short write transaction each, so workers keep going meanwhile.
    pub fn prune(&self, options: &PruneOptions) -> Result<PruneReport> {
        self.prune_with_progress(options, &mut crate::progress::ignore)
    }

    /// [`Queue::prune`], calling `on_progress` after each chunk with the jobs deleted so
    /// far (the total is not known beforehand).
    ///
    /// # Errors
    /// As [`Queue::prune`].
    pub fn prune_with_progress(
        &self,
        options: &PruneOptions,
        on_progress: &mut dyn FnMut(Progress),
    ) -> Result<PruneReport> {
        let mut pass = Pass::new(self, options);
        // Every chunk but the last deletes `chunk_size` rows that can never match again, so
        // the loop ends; a checkpoint error ends it through `?`.
        while !pass.step(self, options)? {
            on_progress(Progress::of(pass.report.jobs_deleted, None));
        }
        let report = pass.report;
        log::info!(
            "litejobs: pruned {} jobs, {} attempts, {} idempotency keys",
            report.jobs_deleted,
            report.attempts_deleted,
            report.keys_deleted
        );
        Ok(report)
    }

    /// Copies the write-ahead log into the database file (`PRAGMA wal_checkpoint`); with
    /// [`CheckpointMode::Truncate`] the WAL file is emptied too. `None` for
    /// [`CheckpointMode::Skip`].
    pub fn checkpoint(&self, mode: CheckpointMode) -> Result<Option<CheckpointReport>> {
        let Some(word) = mode.pragma_word() else {
            return Ok(None);
        };
        let (busy, wal_frames, checkpointed_frames) =
            self.db().read(|conn| conn.wal_checkpoint(word))?;
        Ok(Some(CheckpointReport {
            busy,
            wal_frames,
            checkpointed_frames,
        }))
    }
}

/// Retention on a schedule: starts a prune pass every interval and runs it one chunk per
/// [`step`](Pruner::step), so the loop that drives it (a worker's dispatcher, or a thread of
/// your own) is never held for more than one short transaction.
///
/// ```
/// use litejobs::Queue;
/// use litejobs::maintenance::{PruneOptions, Pruner};
/// use std::time::{Duration, Instant};
/// # fn main() -> litejobs::Result<()> {
/// let queue = Queue::open_in_memory()?;
/// let mut pruner = Pruner::new(PruneOptions::default(), Duration::from_secs(3600));
/// // In your loop: step while a pass is due or in progress.
/// while pruner.due(Instant::now()) {
///     if let Some(report) = pruner.step(&queue, Instant::now())? {
///         println!("pruned {} jobs", report.jobs_deleted);
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Pruner {
    options: PruneOptions,
    interval: Duration,
    next: Instant,
    pass: Option<Pass>,
}

impl Pruner {
    /// A pruner whose first pass is due at once, then one every `interval` (counted from the
    /// end of the previous pass).
    pub fn new(options: PruneOptions, interval: Duration) -> Pruner {
        Pruner {
            options,
            interval,
            next: Instant::now(),
            pass: None,
        }
    }

    /// The retention settings.
    pub fn options(&self) -> &PruneOptions {
        &self.options
    }

    /// True when a pass is in progress or the next one is due: call [`Pruner::step`].
    pub fn due(&self, now: Instant) -> bool {
        self.pass.is_some() || now >= self.next
    }

    /// When [`Pruner::step`] should next be called: now while a pass is in progress.
    pub fn next(&self) -> Instant {
        if self.pass.is_some() {
            Instant::now()
        } else {
            self.next
        }
    }

    /// Does one chunk of the current pass (starting one if due). Returns the pass's report
    /// when this step finished it, `None` otherwise (also when nothing was due).
    ///
    /// # Errors
    /// A failed chunk (e.g. [`Busy`](crate::ErrorKind::Busy)) changed nothing; the pass stays
    /// in progress and the next step tries it again.
    pub fn step(&mut self, queue: &Queue, now: Instant) -> Result<Option<PruneReport>> {
        if self.pass.is_none() {
            if now < self.next {
                return Ok(None);
            }
            self.pass = Some(Pass::new(queue, &self.options));
        }
        let Some(pass) = self.pass.as_mut() else {
            return Ok(None);
        };
        if !pass.step(queue, &self.options)? {
            return Ok(None);
        }
        let report = std::mem::take(&mut pass.report);
        self.pass = None;
        self.next = Instant::now() + self.interval;
        log::info!(
            "litejobs: scheduled prune deleted {} jobs, {} attempts, {} idempotency keys",
            report.jobs_deleted,
            report.attempts_deleted,
            report.keys_deleted
        );
        Ok(Some(report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;
    use crate::NewJob;

    const DAY_MS: i64 = 24 * 3600 * 1000;

    /// A queue at day 10 with `n` jobs that succeeded on day 1 and one dead job of day 1.
    fn queue_with_old_jobs(n: usize) -> Queue {
        let clock = ManualClock::new(DAY_MS);
        let queue = Queue::builder()
            .clock(clock.clone())
            .open_in_memory()
            .expect("in-memory queue");
        let jobs = (0..n)
            .map(|i| NewJob::new("ok", serde_json::json!({ "i": i })))
            .chain([NewJob::new("doomed", serde_json::json!({}))])
            .collect();
        queue.enqueue_batch(jobs).expect("enqueue");
        let builder = crate::Worker::builder(&queue)
            .handler("ok", |_: &crate::JobContext| Ok(()))
            .handler("doomed", |_: &crate::JobContext| {
                Err(crate::JobError::permanent("gone"))
            });
        crate::testing::drain(&builder).expect("drain");
        clock.set(10 * DAY_MS);
        queue
    }

    fn jobs_left(queue: &Queue) -> i64 {
        queue
            .stats()
            .expect("stats")
            .counts
            .iter()
            .map(|c| c.count)
            .sum()
    }

    #[test]
    fn each_step_is_one_chunk_and_the_next_pass_waits_for_the_interval() {
        let queue = queue_with_old_jobs(25);
        let options = PruneOptions::new(Duration::from_secs(7 * 24 * 3600))
            .chunk_size(10)
            .checkpoint(CheckpointMode::Skip);
        let mut pruner = Pruner::new(options, Duration::from_secs(3600));
        let t0 = Instant::now();
        assert!(pruner.due(t0), "the first pass is due at once");

        let mut left = Vec::new();
        let report = loop {
            assert!(
                left.len() < 10,
                "a pass of 25 rows in chunks of 10 takes 5 steps"
            );
            let step = pruner.step(&queue, t0).expect("step");
            left.push(jobs_left(&queue));
            if let Some(report) = step {
                break report;
            }
            assert!(pruner.due(t0), "a pass in progress stays due");
        };
        // Three job chunks (10, 10, 5), the keys, the (skipped) checkpoint.
        assert_eq!(left, vec![16, 6, 1, 1, 1]);
        assert_eq!(report.jobs_deleted, 25);
        assert_eq!(report.transactions, 4);
        assert_eq!(report.checkpoint, None);
        assert_eq!(report.cutoff_ms, 3 * DAY_MS);

        assert!(!pruner.due(t0), "the next pass waits for the interval");
        assert_eq!(pruner.step(&queue, t0).expect("step"), None);
        assert!(pruner.due(t0 + Duration::from_secs(2 * 3600)));
        assert_eq!(jobs_left(&queue), 1, "the dead job stays");
    }

    #[test]
    fn a_whole_pass_reports_the_checkpoint() {
        let queue = queue_with_old_jobs(3);
        let report = queue
            .prune(
                &PruneOptions::new(Duration::from_secs(3600)).checkpoint(CheckpointMode::Passive),
            )
            .expect("prune");
        assert_eq!(report.jobs_deleted, 3);
        let checkpoint = report.checkpoint.expect("a checkpoint ran");
        assert!(!checkpoint.busy);
        assert_eq!(
            checkpoint.wal_frames, -1,
            "an in-memory database has no WAL"
        );
    }
}
