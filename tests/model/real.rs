//! The real side: a queue on a file (or in a PostgreSQL schema), the scripted handler, and
//! one step on both sides.

use super::*;

/// What the real handler shares with the test.
pub(super) struct Shared {
    pub(super) scripts: Mutex<HashMap<i64, VecDeque<Behaviour>>>,
    pub(super) seen: Mutex<Vec<Seen>>,
    pub(super) raw: Mutex<Raw>,
    pub(super) clock: ManualClock,
    pub(super) queue: Queue,
}

impl Shared {
    pub(super) fn run(&self, ctx: &JobContext) -> Result<(), JobError> {
        let id = ctx.id();
        let attempt = i64::from(ctx.attempt());
        let behaviour = lock(&self.scripts)
            .get_mut(&id)
            .and_then(VecDeque::pop_front)
            .unwrap_or(Behaviour::Succeed);
        let (held, group_others_running) = {
            let mut raw = lock(&self.raw);
            let (status, locked_by, attempts, group) = raw.own_row(id);
            let held = status == "running"
                && locked_by.is_some_and(|w| w.starts_with("drain:"))
                && attempts == attempt;
            let others = raw.group_others_running(group, id);
            (held, others)
        };
        let mut call = Seen {
            id,
            attempt,
            held,
            group_others_running,
            heartbeat: None,
            reaped: None,
        };
        let result = match behaviour {
            Behaviour::Succeed => Ok(()),
            Behaviour::Retry => Err(JobError::retry("scripted retryable error")),
            Behaviour::RetryAfter(s) => Err(JobError::retry_after(
                Duration::from_secs(u64::from(s)),
                "scripted retry_after",
            )),
            Behaviour::Permanent => Err(JobError::permanent("scripted permanent error")),
            Behaviour::Snooze(s) => Err(JobError::snooze(Duration::from_secs(u64::from(s)))),
            Behaviour::Cancel => Err(JobError::cancel("scripted cancel")),
            Behaviour::Panic => {
                lock(&self.seen).push(call);
                panic!("scripted panic in job {id}")
            }
            Behaviour::Heartbeat => {
                let beat = ctx.heartbeat();
                call.heartbeat = Some(beat.is_ok());
                beat.map_err(|e| JobError::retry(format!("heartbeat failed: {e}")))
            }
            Behaviour::Hang => {
                self.clock
                    .advance(ctx.timeout() + Duration::from_millis(GRACE_MS as u64 + 1));
                call.reaped = Some(
                    self.queue
                        .reap_expired_leases()
                        .expect("handler: reaping while hung"),
                );
                Ok(())
            }
        };
        lock(&self.seen).push(call);
        result
    }
}

/// A queue on a fresh file (or, on the PostgreSQL pass, in a fresh schema) with the test's
/// triggers, a worker builder for `drain`, and a raw connection for checks.
pub(super) struct Real {
    pub(super) _dir: Option<TempDir>,
    pub(super) queue: Queue,
    pub(super) clock: ManualClock,
    pub(super) builder: WorkerBuilder,
    pub(super) shared: Arc<Shared>,
    pub(super) check: Raw,
    /// The last `model_changes` row checked.
    pub(super) changes_seen: i64,
    /// On the PostgreSQL pass: the test's schema, dropped with it (last, after the queue).
    #[cfg(feature = "postgres")]
    pub(super) _pg: Option<crate::support::pg::PgSchema>,
}

/// Records every change of a job's status, lease holder or attempt count, and every insert
/// and delete, so each step's transitions can be checked one by one.
pub(super) const CHANGE_TRIGGERS: &str = "
CREATE TABLE model_changes (
    seq INTEGER PRIMARY KEY, job_id INTEGER NOT NULL,
    old_status TEXT, new_status TEXT, old_locked_by TEXT, new_locked_by TEXT,
    old_attempts INTEGER, new_attempts INTEGER);
CREATE TRIGGER model_jobs_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO model_changes (job_id, new_status, new_locked_by, new_attempts)
    VALUES (NEW.id, NEW.status, NEW.locked_by, NEW.attempts);
END;
CREATE TRIGGER model_jobs_update AFTER UPDATE ON jobs
WHEN OLD.status IS NOT NEW.status OR OLD.locked_by IS NOT NEW.locked_by
     OR OLD.attempts IS NOT NEW.attempts BEGIN
    INSERT INTO model_changes (job_id, old_status, new_status, old_locked_by, new_locked_by,
                               old_attempts, new_attempts)
    VALUES (NEW.id, OLD.status, NEW.status, OLD.locked_by, NEW.locked_by, OLD.attempts,
            NEW.attempts);
END;
CREATE TRIGGER model_jobs_delete AFTER DELETE ON jobs BEGIN
    INSERT INTO model_changes (job_id, old_status, old_locked_by, old_attempts)
    VALUES (OLD.id, OLD.status, OLD.locked_by, OLD.attempts);
END;
";

impl Real {
    pub(super) fn new() -> Real {
        if crate::support::on_postgres() {
            #[cfg(feature = "postgres")]
            return Real::on_postgres();
            #[cfg(not(feature = "postgres"))]
            panic!("LITEJOBS_TEST_BACKEND=postgres needs --features postgres");
        }
        let dir = tempfile::tempdir().expect("creating a temp dir");
        let path = dir.path().join("jobs.db");
        let clock = ManualClock::new(START_MS);
        let queue = Queue::builder()
            .clock(clock.clone())
            .idempotency_window(Duration::from_millis(WINDOW_MS as u64))
            .pool_size(2)
            .open(&path)
            .expect("opening the queue");
        let check = raw_conn(&path);
        check
            .execute_batch(CHANGE_TRIGGERS)
            .expect("adding the test's triggers");
        Real::with(
            queue,
            clock,
            Raw::Sqlite(check),
            Raw::Sqlite(raw_conn(&path)),
            Some(dir),
            #[cfg(feature = "postgres")]
            None,
        )
    }

    /// The PostgreSQL pass: the same queue in a fresh schema on `LITEJOBS_TEST_PG`, the
    /// triggers' PL/pgSQL twins, raw diesel connections.
    #[cfg(feature = "postgres")]
    fn on_postgres() -> Real {
        use diesel::connection::SimpleConnection;
        let url = std::env::var("LITEJOBS_TEST_PG")
            .ok()
            .filter(|u| !u.is_empty())
            .expect("LITEJOBS_TEST_BACKEND=postgres needs LITEJOBS_TEST_PG=postgres://…");
        let schema = crate::support::pg::PgSchema::new(&url);
        let clock = ManualClock::new(START_MS);
        let queue = Queue::builder()
            .clock(clock.clone())
            .idempotency_window(Duration::from_millis(WINDOW_MS as u64))
            .pool_size(2)
            .pg_schema(&schema.name)
            .open(&schema.url)
            .expect("opening the queue");
        let mut check = schema.raw();
        check
            .batch_execute(&pg_change_triggers(&schema.name))
            .expect("adding the test's triggers");
        let raw = schema.raw();
        Real::with(
            queue,
            clock,
            Raw::Pg(check),
            Raw::Pg(raw),
            None,
            Some(schema),
        )
    }

    fn with(
        queue: Queue,
        clock: ManualClock,
        check: Raw,
        raw: Raw,
        dir: Option<TempDir>,
        #[cfg(feature = "postgres")] pg: Option<crate::support::pg::PgSchema>,
    ) -> Real {
        let shared = Arc::new(Shared {
            scripts: Mutex::new(HashMap::new()),
            seen: Mutex::new(Vec::new()),
            raw: Mutex::new(raw),
            clock: clock.clone(),
            queue: queue.clone(),
        });
        let handler = Arc::clone(&shared);
        let builder = Worker::builder(&queue)
            .handler(JOB_TYPE, move |ctx: &JobContext| handler.run(ctx))
            .default_timeout(Duration::from_millis(TYPE_TIMEOUT_MS as u64))
            .lease_grace(Duration::from_millis(GRACE_MS as u64))
            .default_retry_policy(RetryPolicy::schedule(
                RETRY_MS
                    .iter()
                    .map(|&ms| Duration::from_millis(ms as u64))
                    .collect(),
            ));
        Real {
            _dir: dir,
            queue,
            clock,
            builder,
            shared,
            check,
            changes_seen: 0,
            #[cfg(feature = "postgres")]
            _pg: pg,
        }
    }

    pub(super) fn script(&self, id: i64, script: &[Behaviour]) {
        lock(&self.shared.scripts).insert(id, script.iter().copied().collect());
    }
}

pub(super) fn kind<T>(result: litejobs::Result<T>) -> Result<T, ErrorKind> {
    result.map_err(|e| e.kind())
}

pub(super) fn enqueue_one(model: &mut Model, real: &mut Real, spec: &JobSpec) {
    let expected = model.enqueue_prediction(spec);
    let id = real
        .queue
        .enqueue(new_job(spec))
        .expect("a valid job is enqueued");
    match expected {
        Enqueued::Existing(holder) => assert_eq!(
            id, holder,
            "an idempotency key held by job {holder} returns that job"
        ),
        Enqueued::New => {
            model.insert(id, spec);
            real.script(id, &spec.script);
        }
    }
}

/// Runs one operation on both sides and compares what each returned.
pub(super) fn step(model: &mut Model, real: &mut Real, op: &Op) {
    match op {
        Op::Enqueue(spec) => enqueue_one(model, real, spec),
        Op::EnqueueAgain(i, spec) => {
            let key = model
                .pick(*i, &[JobStatus::Dead])
                .and_then(|id| model.jobs.get(&id))
                .and_then(|j| j.key.as_deref())
                .and_then(|k| k.strip_prefix("key-"))
                .and_then(|n| n.parse().ok());
            if let Some(key) = key {
                enqueue_one(
                    model,
                    real,
                    &JobSpec {
                        key: Some(key),
                        ..spec.clone()
                    },
                );
            }
        }
        Op::EnqueueBatch(specs) => {
            let ids = real
                .queue
                .enqueue_batch(specs.iter().map(new_job).collect())
                .expect("a valid batch is enqueued");
            assert_eq!(ids.len(), specs.len());
            for (spec, &id) in specs.iter().zip(&ids) {
                match model.enqueue_prediction(spec) {
                    Enqueued::Existing(holder) => {
                        assert_eq!(
                            id, holder,
                            "a batch member with a held key returns its holder"
                        )
                    }
                    Enqueued::New => {
                        model.insert(id, spec);
                        real.script(id, &spec.script);
                    }
                }
            }
        }
        Op::Drain => {
            let (expected_seen, expected) = model.drain();
            lock(&real.shared.seen).clear();
            let report = testing::drain(&real.builder).expect("drain");
            let seen = std::mem::take(&mut *lock(&real.shared.seen));
            assert_eq!(seen, expected_seen, "the handler calls of a drain");
            let got = Counts {
                succeeded: report.succeeded,
                failed: report.failed,
                dead: report.dead,
                snoozed: report.snoozed,
                cancelled: report.cancelled,
            };
            assert_eq!(got, expected, "the drain report");
            for call in &seen {
                assert!(
                    !call.held || call.group_others_running == 0,
                    "job {} ran while another job of its group was running: {call:?}",
                    call.id
                );
            }
            assert_eq!(real.clock.now(), model.now, "the clock after a drain");
        }
        Op::Advance(ms) => {
            real.clock.advance(Duration::from_millis(u64::from(*ms)));
            model.now += i64::from(*ms);
        }
        Op::Crash => {
            if let Some(&id) = model.claimable(1).first() {
                let attempt = model.claim(id, Holder::Crashed);
                let until = model.jobs[&id].locked_until;
                let n = real.check.crash_claim(id, attempt - 1, until, model.now);
                assert_eq!(n, 1, "the crashed worker's claim of job {id}");
            }
        }
        Op::Reap => {
            let expected = model.reap();
            let reaped = real.queue.reap_expired_leases().expect("reaping");
            assert_eq!(reaped, expected, "jobs reaped");
        }
        Op::Cancel(i) => {
            let cancellable = [JobStatus::Queued, JobStatus::Failed, JobStatus::Running];
            if let Some(id) = model.pick(*i, &cancellable) {
                let expected = model.cancel(id);
                assert_eq!(kind(real.queue.cancel(id)), expected, "cancel of job {id}");
            }
        }
        Op::RetryNow(i) => {
            if let Some(id) = model.pick(*i, &[JobStatus::Dead]) {
                let expected = model.retry_now(id);
                assert_eq!(
                    kind(real.queue.retry_now(id)),
                    expected,
                    "retry_now of job {id}"
                );
            }
        }
        Op::Requeue(i) => {
            if let Some(id) = model.pick(*i, &[JobStatus::Dead]) {
                let expected = model.requeue_check(id);
                let got = kind(real.queue.requeue_dead(id, "model", "proptest"));
                match (expected, got) {
                    (Ok(()), Ok(new_id)) => model.requeued(id, new_id),
                    (expected, got) => assert_eq!(got.map(|_| ()), expected, "requeue of job {id}"),
                }
            }
        }
        Op::Discard(i) => {
            if let Some(id) = model.pick(*i, &[JobStatus::Dead]) {
                let expected = model.discard(id);
                assert_eq!(
                    kind(real.queue.discard_dead(id)),
                    expected,
                    "discard of job {id}"
                );
            }
        }
        Op::Prune(secs) => {
            let older = i64::from(*secs) * 1000;
            let expected = model.prune(older);
            let report = real
                .queue
                .prune(&PruneOptions::new(Duration::from_millis(older as u64)))
                .expect("prune");
            assert_eq!(
                (
                    report.jobs_deleted,
                    report.attempts_deleted,
                    report.keys_deleted
                ),
                expected,
                "prune (jobs, attempt rows, keys) deleted"
            );
        }
        Op::Pause => {
            real.queue.pause_queue(QUEUE).expect("pause");
            model.paused = true;
        }
        Op::Resume => {
            real.queue.resume_queue(QUEUE).expect("resume");
            model.paused = false;
        }
    }
}
