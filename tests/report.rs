//! Reports in chunks: fan-out into chunk jobs, progress a UI can poll, a finishing job
//! that runs exactly once (also when the last chunks finish together in two workers), a
//! dead chunk failing the run, a CSV that is complete and correct when chunks fail and retry,
//! and the per-chunk hard time limit.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, Sender};
use litejobs::builtin::report::{
    self, Chunk, ChunkOutput, Finish, ReportKind, ReportResult, ReportRun, ReportState,
    REPORT_QUEUE,
};
use litejobs::testing::{self, DrainReport};
use litejobs::workflow::{WaitState, WorkflowInfo};
use litejobs::{
    Event, JobContext, JobError, JobStatus, NewJob, Queue, Step, Worker, WorkerBuilder, Workflow,
};
use serde_json::{json, Value};

use crate::read_side::{lit, sql_rows};
use crate::support::scripted::{
    recv, signal_on_thread_exit, wait_bound, wait_event, Latch, Rendezvous, WAIT,
};
use crate::support::{on_postgres, setup, TestEnv};

/// Called before a chunk produces its rows: fail, block, meet... as a test scripts it.
type Hook = Arc<dyn Fn(&JobContext, &Chunk) -> Result<(), JobError> + Send + Sync>;

/// The numbers 0..n in chunks of `size`: each row is `[i, i*i, "row i"]`.
#[derive(Clone)]
struct Numbers {
    size: u64,
    hook: Hook,
    finishes: Arc<AtomicUsize>,
    finished: Sender<i64>,
    csv_dir: Option<PathBuf>,
    timeout: Duration,
    max_attempts: u32,
}

impl Numbers {
    fn new(size: u64) -> (Numbers, Receiver<i64>) {
        let (finished, done) = unbounded();
        let kind = Numbers {
            size,
            hook: Arc::new(|_, _| Ok(())),
            finishes: Arc::new(AtomicUsize::new(0)),
            finished,
            csv_dir: None,
            timeout: Duration::from_secs(60),
            max_attempts: 6,
        };
        (kind, done)
    }

    fn hook(
        mut self,
        hook: impl Fn(&JobContext, &Chunk) -> Result<(), JobError> + Send + Sync + 'static,
    ) -> Numbers {
        self.hook = Arc::new(hook);
        self
    }
}

fn row(i: u64) -> Value {
    json!([i, i * i, format!("row {i}")])
}

impl ReportKind for Numbers {
    fn plan(&self, params: &Value) -> Result<Vec<Value>, JobError> {
        let n = params["n"]
            .as_u64()
            .ok_or_else(|| JobError::permanent("params.n is missing"))?;
        Ok((0..n)
            .step_by(self.size as usize)
            .map(|from| json!({"from": from, "to": (from + self.size).min(n)}))
            .collect())
    }

    fn run_chunk(&self, ctx: &JobContext, chunk: &Chunk) -> Result<ChunkOutput, JobError> {
        (self.hook)(ctx, chunk)?;
        let from = chunk.spec["from"].as_u64().unwrap_or(0);
        let to = chunk.spec["to"].as_u64().unwrap_or(0);
        Ok(ChunkOutput::rows((from..to).map(row).collect()))
    }

    fn finish(&self, _ctx: &JobContext, finish: &Finish<'_>) -> Result<ReportResult, JobError> {
        self.finishes.fetch_add(1, Ordering::SeqCst);
        let run_id = finish.run().id;
        let result = match &self.csv_dir {
            Some(dir) => {
                let path = dir.join(format!("numbers-{run_id}.csv"));
                let rows = finish.write_csv(&path, &["n", "square", "label"])?;
                ReportResult::file(path).row_count(rows)
            }
            None => ReportResult::table(),
        };
        let _ = self.finished.send(run_id);
        Ok(result)
    }

    fn chunk_timeout(&self) -> Duration {
        self.timeout
    }

    fn chunk_max_attempts(&self) -> u32 {
        self.max_attempts
    }
}

fn drain(builder: &WorkerBuilder) -> DrainReport {
    testing::drain(builder).expect("drain")
}

fn run(queue: &Queue, id: i64) -> ReportRun {
    queue
        .report_run(id)
        .expect("reading the run")
        .expect("the run exists")
}

fn jobs_of_type(env: &TestEnv, job_type: &str) -> Vec<(i64, String)> {
    sql_rows(
        env,
        &format!(
            "SELECT id, status FROM jobs WHERE job_type = {} ORDER BY id",
            lit(job_type)
        ),
    )
}

#[test]
fn a_request_fans_out_into_chunks_and_progress_is_polled_to_ready() {
    let env = setup();
    // Chunks 1 and 3 fail once, so the first drain leaves the run half done.
    let (kind, _done) = Numbers::new(10);
    let kind = kind.hook(|ctx, chunk| {
        if (chunk.index == 1 || chunk.index == 3) && ctx.attempt() == 1 {
            return Err(JobError::retry(format!("chunk {} not yet", chunk.index)));
        }
        Ok(())
    });
    let finishes = Arc::clone(&kind.finishes);
    let builder = Worker::builder(&env.queue).report("numbers", kind);
    let id = env
        .queue
        .request_report("numbers", json!({"n": 45}))
        .expect("request");

    let requested = run(&env.queue, id);
    assert_eq!(requested.state, ReportState::Processing);
    assert_eq!(
        (
            requested.chunks_total,
            requested.chunks_done,
            requested.rows_done
        ),
        (0, 0, 0)
    );
    assert_eq!(requested.planned_at, None);
    assert_eq!(requested.kind, "numbers");
    assert_eq!(requested.params, json!({"n": 45}));
    assert_eq!(requested.fraction_done(), 0.0);

    let first = drain(&builder);
    assert_eq!((first.succeeded, first.failed), (1 + 3, 2), "{first:?}");
    let half = run(&env.queue, id);
    assert_eq!(half.state, ReportState::Processing);
    assert!(half.planned_at.is_some());
    // Chunks 0, 2 and 4 (rows 0..10, 20..30, 40..45) are done.
    assert_eq!(
        (half.chunks_total, half.chunks_done, half.rows_done),
        (5, 3, 25)
    );
    assert_eq!(half.fraction_done(), 0.6);
    // The finishing step is planned with the chunks, held until the last of them is done.
    let finish = env
        .queue
        .job(half.finish_job_id.expect("planned with the chunks"))
        .expect("read")
        .expect("the finishing job");
    assert_eq!(
        (finish.status, finish.waiting_for),
        (JobStatus::Queued, 2),
        "held for chunks 1 and 3"
    );
    assert_eq!(finishes.load(Ordering::SeqCst), 0);
    assert_eq!(env.queue.report_rows(id, 0, 100).expect("rows").len(), 25);

    env.clock.advance(Duration::from_secs(3600));
    let second = drain(&builder);
    assert_eq!(second.succeeded, 2 + 1, "{second:?}");
    let ready = run(&env.queue, id);
    assert_eq!(ready.state, ReportState::Ready);
    assert_eq!(
        (ready.chunks_done, ready.rows_done, ready.result_rows),
        (5, 45, Some(45))
    );
    assert_eq!(ready.result_path, None, "rows kept in the table");
    assert!(ready.finished_at.is_some());
    assert_eq!(ready.fraction_done(), 1.0);
    assert_eq!(finishes.load(Ordering::SeqCst), 1);

    // The stored rows, in order, all of them once.
    let rows = env.queue.report_rows(id, 0, 1000).expect("rows");
    assert_eq!(rows, (0..45).map(row).collect::<Vec<_>>());
    assert_eq!(
        env.queue.report_rows(id, 40, 3).expect("page"),
        (40..43).map(row).collect::<Vec<_>>()
    );
    // Every job of the run is in the reports queue, and there is one finishing job.
    let finish_jobs = jobs_of_type(&env, &report::finish_job_type("numbers"));
    assert_eq!(
        finish_jobs,
        vec![(
            ready.finish_job_id.expect("finish job"),
            "succeeded".to_string()
        )]
    );
    let chunk_job = env
        .queue
        .job(jobs_of_type(&env, &report::chunk_job_type("numbers"))[0].0)
        .expect("job")
        .expect("some");
    assert_eq!(chunk_job.queue, REPORT_QUEUE);
    assert_eq!(
        chunk_job.idempotency_key.as_deref(),
        Some(&*format!("report:{id}:chunk:0"))
    );

    let listed = env.queue.report_runs(Some("numbers"), 10).expect("list");
    assert_eq!(listed.iter().map(|r| r.id).collect::<Vec<_>>(), vec![id]);
    assert!(env
        .queue
        .report_runs(Some("other"), 10)
        .expect("list")
        .is_empty());
    assert!(env.queue.delete_report_run(id).expect("delete"));
    assert!(env.queue.report_run(id).expect("read").is_none());
    assert!(env.queue.report_rows(id, 0, 10).expect("rows").is_empty());
}

#[test]
fn the_finisher_runs_once_when_the_last_chunks_finish_together_in_two_workers() {
    let env = setup();
    let other = env.open_another();
    let rounds = 3;
    let meet = Arc::new(Mutex::new(Rendezvous::new(2)));
    let (kind, done) = Numbers::new(5);
    let hook_meet = Arc::clone(&meet);
    let kind = kind.hook(move |_, _| {
        // Both chunks of a run are in their handlers at once, then both write: the two
        // completions race for the write lock.
        let meeting = hook_meet.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert!(
            meeting.arrive(WAIT),
            "the two chunks did not run at the same time"
        );
        Ok(())
    });
    let finishes = Arc::clone(&kind.finishes);
    // Two workers on two Queue handles (each its own pool and write gate, like two
    // processes); one thread each and no prefetch, so each takes one chunk.
    let worker = |queue: &Queue, name: &str| {
        Worker::builder(queue)
            .report("pair", kind.clone())
            .queue(REPORT_QUEUE, 1)
            .concurrency(0)
            .prefetch(0)
            .poll_interval(Duration::from_millis(20))
            .worker_id(name)
            .start()
            .expect("start")
    };
    let a = worker(&env.queue, "a");
    let b = worker(&other, "b");
    let mut runs = Vec::new();
    for _ in 0..rounds {
        *meet.lock().unwrap_or_else(|p| p.into_inner()) = Rendezvous::new(2);
        let id = env
            .queue
            .request_report("pair", json!({"n": 10}))
            .expect("request");
        assert_eq!(recv(&done, "the run to finish"), id);
        runs.push(id);
    }
    a.shutdown(wait_bound()).expect("shutdown a");
    b.shutdown(wait_bound()).expect("shutdown b");

    assert_eq!(
        finishes.load(Ordering::SeqCst),
        rounds,
        "finish ran once per run"
    );
    assert!(done.try_recv().is_err(), "no late second finish");
    for id in runs {
        let r = run(&env.queue, id);
        assert_eq!(
            (r.state, r.chunks_done, r.rows_done),
            (ReportState::Ready, 2, 10)
        );
        let run_id = if on_postgres() {
            "(payload::json ->> 'run_id')::bigint"
        } else {
            "json_extract(payload, '$.run_id')"
        };
        let finish_jobs = env.sql_i64(&format!(
            "SELECT COUNT(*) FROM jobs WHERE job_type = 'report.pair.finish'
               AND {run_id} = {id}"
        ));
        assert_eq!(finish_jobs, 1, "one finishing job for run {id}");
        let workers: HashSet<String> = sql_rows::<(Option<String>,)>(
            &env,
            &format!(
                "SELECT j.locked_by FROM report_chunks c JOIN jobs j ON j.id = c.job_id
                 WHERE c.run_id = {id}"
            ),
        )
        .into_iter()
        .filter_map(|(w,)| w)
        .collect();
        assert!(
            workers.is_empty(),
            "finished jobs hold no lease: {workers:?}"
        );
    }
}

#[test]
fn the_finisher_runs_once_when_two_threads_of_one_worker_finish_the_last_chunks() {
    let env = setup();
    let meet = Rendezvous::new(2);
    let (kind, done) = Numbers::new(3);
    let kind = kind.hook(move |_, chunk| {
        if chunk.index >= 1 {
            assert!(
                meet.arrive(WAIT),
                "chunks 1 and 2 did not run at the same time"
            );
        }
        Ok(())
    });
    let finishes = Arc::clone(&kind.finishes);
    let worker = Worker::builder(&env.queue)
        .report("trio", kind)
        .queue(REPORT_QUEUE, 2)
        .concurrency(0)
        .start()
        .expect("start");
    let id = env
        .queue
        .request_report("trio", json!({"n": 9}))
        .expect("request");
    assert_eq!(recv(&done, "the run to finish"), id);
    worker.shutdown(wait_bound()).expect("shutdown");
    assert_eq!(finishes.load(Ordering::SeqCst), 1);
    assert_eq!(jobs_of_type(&env, "report.trio.finish").len(), 1);
    let r = run(&env.queue, id);
    assert_eq!(
        (r.state, r.chunks_done, r.rows_done),
        (ReportState::Ready, 3, 9)
    );
    assert_eq!(
        env.queue.report_rows(id, 0, 100).expect("rows"),
        (0..9).map(row).collect::<Vec<_>>()
    );
}

#[test]
fn a_dead_chunk_fails_the_run_and_the_remaining_chunks_cancel() {
    let env = setup();
    let (kind, _done) = Numbers::new(10);
    let kind = kind.hook(|_, chunk| {
        if chunk.index == 1 {
            return Err(JobError::permanent("source table is gone"));
        }
        Ok(())
    });
    let finishes = Arc::clone(&kind.finishes);
    let builder = Worker::builder(&env.queue).report("broken", kind);
    let id = env
        .queue
        .request_report("broken", json!({"n": 30}))
        .expect("request");
    let report = drain(&builder);
    assert_eq!(
        (report.succeeded, report.dead, report.cancelled),
        (2, 1, 1),
        "{report:?}"
    );

    let r = run(&env.queue, id);
    assert_eq!(r.state, ReportState::Failed);
    let error = r.error.unwrap_or_default();
    assert_eq!(error, "chunk 1 of 3 failed: source table is gone");
    assert!(r.finished_at.is_some());
    assert_eq!(finishes.load(Ordering::SeqCst), 0);
    // The finishing step never ran: the dead chunk cancelled it.
    let finish = env
        .queue
        .job(r.finish_job_id.expect("planned"))
        .expect("read")
        .expect("the finishing job");
    assert_eq!(finish.status, JobStatus::Cancelled);
    assert_eq!(finish.attempts, 0);
    assert_eq!(finish.cancelled_by.as_deref(), Some("dependency"));
    let chunks = jobs_of_type(&env, "report.broken.chunk");
    let statuses: Vec<&str> = chunks.iter().map(|(_, s)| s.as_str()).collect();
    assert_eq!(statuses, vec!["succeeded", "dead", "cancelled"]);
}

#[test]
fn a_chunk_that_spends_its_attempts_fails_the_run() {
    let env = setup();
    let (mut kind, _done) = Numbers::new(10);
    kind.max_attempts = 2;
    let kind = kind.hook(|_, chunk| {
        if chunk.index == 0 {
            return Err(JobError::retry("database locked"));
        }
        Ok(())
    });
    let builder = Worker::builder(&env.queue).report("flaky", kind);
    let id = env
        .queue
        .request_report("flaky", json!({"n": 20}))
        .expect("request");
    drain(&builder);
    assert_eq!(
        run(&env.queue, id).state,
        ReportState::Processing,
        "one attempt left"
    );
    env.clock.advance(Duration::from_secs(3600));
    drain(&builder);
    let r = run(&env.queue, id);
    assert_eq!(r.state, ReportState::Failed);
    assert_eq!(
        r.error.as_deref(),
        Some("chunk 0 of 2 failed: database locked")
    );
    assert_eq!((r.chunks_done, r.rows_done), (1, 10));
}

#[test]
fn a_chunk_timed_out_on_its_last_attempt_reads_as_a_failed_run() {
    let env = setup();
    let release = Latch::new();
    let _open = release.open_on_drop();
    let (mut kind, _done) = Numbers::new(10);
    kind.max_attempts = 1;
    kind.timeout = Duration::from_millis(1000);
    let gate = release.clone();
    let kind = kind.hook(move |_, _| {
        gate.wait(WAIT);
        Ok(())
    });
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .report("stuck", kind)
        .concurrency(0)
        .start()
        .expect("start");
    let id = env
        .queue
        .request_report("stuck", json!({"n": 5}))
        .expect("request");
    let chunk_job = wait_event(&events, "the chunk to go dead", |e| match e {
        Event::Finished {
            id,
            job_type,
            status: JobStatus::Dead,
            ..
        } if job_type == "report.stuck.chunk" => Some(*id),
        _ => None,
    });
    // Its handler never saw the timeout; the run reads as failed with the job's error.
    let r = run(&env.queue, id);
    assert_eq!(r.state, ReportState::Failed);
    let error = r.error.unwrap_or_default();
    assert!(
        error.contains(&format!("job {chunk_job} (report.stuck.chunk) is dead"))
            && error.contains("timed out"),
        "{error}"
    );
    release.open();
    worker.shutdown(wait_bound()).expect("shutdown");
    assert_eq!(
        run(&env.queue, id).chunks_done,
        0,
        "the late attempt wrote nothing"
    );
}

#[test]
fn a_chunk_past_its_time_limit_is_retried_and_its_late_rows_are_discarded() {
    let env = setup();
    let release = Latch::new();
    let _open = release.open_on_drop();
    let (started_tx, started) = unbounded();
    let (exit_tx, exited) = unbounded();
    let (mut kind, done) = Numbers::new(4);
    kind.timeout = Duration::from_millis(1000);
    let gate = release.clone();
    let kind = kind.hook(move |ctx, chunk| {
        if chunk.index == 0 && ctx.attempt() == 1 {
            signal_on_thread_exit(exit_tx.clone());
            let _ = started_tx.send(());
            gate.wait(WAIT);
            // Then it returns its rows, late: they must not be kept.
        }
        Ok(())
    });
    let events = env.queue.subscribe();
    let worker = Worker::builder(&env.queue)
        .report("slow", kind)
        .concurrency(0)
        .start()
        .expect("start");
    let id = env
        .queue
        .request_report("slow", json!({"n": 8}))
        .expect("request");
    recv(&started, "chunk 0 to start");
    // Chunk 0 times out; chunk 1 (on the other thread) succeeds.
    let mut timed_out = None;
    let mut other_done = false;
    while timed_out.is_none() || !other_done {
        let (id, status, error) = wait_event(
            &events,
            "chunk 0 to time out and chunk 1 to succeed",
            |e| match e {
                Event::Finished {
                    id,
                    job_type,
                    status,
                    error,
                    ..
                } if job_type == "report.slow.chunk" => {
                    Some((*id, *status, error.clone().unwrap_or_default()))
                }
                _ => None,
            },
        );
        match status {
            JobStatus::Failed if error.contains("timed out") => timed_out = Some((id, error)),
            JobStatus::Succeeded => other_done = true,
            _ => {}
        }
    }
    let (chunk_job, error) = timed_out.expect("chunk 0 timed out");
    assert!(error.contains("timed out after 1000 ms"), "{error}");
    release.open();
    recv(&exited, "the timed-out handler thread to end");
    let r = run(&env.queue, id);
    assert_eq!(
        (r.chunks_done, r.rows_done),
        (1, 4),
        "only chunk 1 is done; the late rows were discarded"
    );

    env.clock.advance(Duration::from_secs(3600));
    env.queue.notify();
    assert_eq!(recv(&done, "the run to finish"), id);
    worker.shutdown(wait_bound()).expect("shutdown");
    let r = run(&env.queue, id);
    assert_eq!((r.state, r.rows_done), (ReportState::Ready, 8));
    assert_eq!(
        env.queue.report_rows(id, 0, 100).expect("rows"),
        (0..8).map(row).collect::<Vec<_>>()
    );
    let outcomes: Vec<String> = env
        .queue
        .attempts(chunk_job)
        .expect("history")
        .into_iter()
        .map(|a| a.outcome.to_string())
        .collect();
    assert_eq!(
        outcomes,
        vec!["timed_out".to_string(), "succeeded".to_string()]
    );
}

/// The demo table of the activity report, in the test's own database file.
fn create_activity(path: &Path, rows: i64) {
    let mut conn = crate::support::raw_conn(path);
    conn.execute_batch(
        "CREATE TABLE activity (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL,
                                action TEXT NOT NULL, at INTEGER NOT NULL)",
    )
    .expect("create activity");
    let tx = conn.transaction().expect("tx");
    for i in 1..=rows {
        let action = match i % 4 {
            0 => "login",
            1 => "upload, large",
            2 => "said \"hi\"",
            _ => "logout",
        };
        tx.execute(
            "INSERT INTO activity (id, user_id, action, at) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![i, i % 37, action, 1_700_000_000_000i64 + i * 1000],
        )
        .expect("insert");
    }
    tx.commit().expect("commit");
}

/// Activity rows by id range, read from the demo table, written to a CSV at the end.
struct Activity {
    db: PathBuf,
    out: PathBuf,
    per_chunk: i64,
    calls: Arc<Mutex<Vec<(u32, u32)>>>,
}

impl ReportKind for Activity {
    fn plan(&self, params: &Value) -> Result<Vec<Value>, JobError> {
        let max = params["max_id"].as_i64().unwrap_or(0);
        Ok((1..=max)
            .step_by(self.per_chunk as usize)
            .map(|from| json!({"from": from, "to": (from + self.per_chunk - 1).min(max)}))
            .collect())
    }

    fn run_chunk(&self, ctx: &JobContext, chunk: &Chunk) -> Result<ChunkOutput, JobError> {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((chunk.index, ctx.attempt()));
        // Scripted failures on first attempts: a retryable error, a panic, and an error
        // after the rows were read.
        if ctx.attempt() == 1 {
            match chunk.index {
                1 => return Err(JobError::retry("replica lagging")),
                4 => panic!("chunk 4 crashed"),
                _ => {}
            }
        }
        let conn = rusqlite::Connection::open(&self.db)?;
        let mut stmt = conn.prepare(
            "SELECT id, user_id, action, at FROM activity WHERE id BETWEEN ?1 AND ?2 ORDER BY id",
        )?;
        let rows = stmt
            .query_map(
                [chunk.spec["from"].as_i64(), chunk.spec["to"].as_i64()],
                |r| {
                    Ok(json!([
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?
                    ]))
                },
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        if ctx.attempt() == 1 && chunk.index == 7 {
            return Err(JobError::retry(format!(
                "lost the connection after {} rows",
                rows.len()
            )));
        }
        Ok(ChunkOutput::rows(rows))
    }

    fn finish(&self, _ctx: &JobContext, finish: &Finish<'_>) -> Result<ReportResult, JobError> {
        let rows = finish.write_csv(&self.out, &["id", "user_id", "action", "at"])?;
        Ok(ReportResult::file(&self.out).row_count(rows))
    }
}

/// A field as RFC 4180 wants it.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[test]
fn the_csv_is_complete_and_correct_when_chunks_fail_and_retry() {
    let env = setup();
    let total = 1_000;
    // The report's source table: in the test's own database file, or on the PostgreSQL
    // pass in an application's SQLite file in the test's temp dir.
    let source = if on_postgres() {
        env.dir.path().join("app.db")
    } else {
        env.path.clone()
    };
    create_activity(&source, total);
    let out = env.dir.path().join("exports").join("activity.csv");
    let calls = Arc::new(Mutex::new(Vec::new()));
    let builder = Worker::builder(&env.queue).report(
        "activity",
        Activity {
            db: source.clone(),
            out: out.clone(),
            per_chunk: 100,
            calls: Arc::clone(&calls),
        },
    );
    let id = env
        .queue
        .request_report("activity", json!({"max_id": total}))
        .expect("request");
    let first = drain(&builder);
    assert_eq!(first.failed, 3, "chunks 1, 4 and 7 failed once: {first:?}");
    assert!(!out.exists(), "no CSV before every chunk is done");
    assert_eq!(run(&env.queue, id).chunks_done, 7);
    env.clock.advance(Duration::from_secs(3600));
    drain(&builder);

    let r = run(&env.queue, id);
    assert_eq!(r.state, ReportState::Ready);
    assert_eq!(r.result_path.as_deref(), Some(out.as_path()));
    assert_eq!(r.result_rows, Some(total));
    let text = std::fs::read_to_string(&out).expect("the CSV exists");
    let mut expected = String::from("id,user_id,action,at\r\n");
    let conn = crate::support::raw_conn(&source);
    let mut stmt = conn
        .prepare("SELECT id, user_id, action, at FROM activity ORDER BY id")
        .expect("prepare");
    let mut source = stmt.query([]).expect("query");
    while let Some(r) = source.next().expect("row") {
        let (id, user, action, at): (i64, i64, String, i64) = (
            r.get(0).expect("id"),
            r.get(1).expect("user"),
            r.get(2).expect("action"),
            r.get(3).expect("at"),
        );
        expected.push_str(&format!("{id},{user},{},{at}\r\n", csv_field(&action)));
    }
    assert_eq!(text.lines().count(), total as usize + 1);
    assert!(
        text == expected,
        "the CSV differs from the table (first 300 chars: {:?})",
        &text[..300.min(text.len())]
    );
    assert!(text.contains("\"upload, large\"") && text.contains("\"said \"\"hi\"\"\""));
    let calls = calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for chunk in [1, 4, 7] {
        assert!(
            calls.contains(&(chunk, 2)),
            "chunk {chunk} was retried: {calls:?}"
        );
    }
    assert!(!out.with_file_name("activity.csv.partial").exists());
}

#[test]
fn an_empty_plan_goes_straight_to_ready_and_a_bad_request_fails_the_run() {
    let env = setup();
    let (kind, _done) = Numbers::new(10);
    let finishes = Arc::clone(&kind.finishes);
    let builder = Worker::builder(&env.queue).report("numbers", kind);
    let empty = env
        .queue
        .request_report("numbers", json!({"n": 0}))
        .expect("request");
    let bad = env
        .queue
        .request_report("numbers", json!({"m": 1}))
        .expect("request");
    drain(&builder);
    let r = run(&env.queue, empty);
    assert_eq!(
        (r.state, r.chunks_total, r.result_rows),
        (ReportState::Ready, 0, Some(0))
    );
    assert_eq!(finishes.load(Ordering::SeqCst), 1);
    let r = run(&env.queue, bad);
    assert_eq!(r.state, ReportState::Failed);
    assert_eq!(
        r.error.as_deref(),
        Some("planning the report failed: params.n is missing")
    );
    let err = env
        .queue
        .request_report(" ", json!({}))
        .err()
        .map(|e| e.to_string());
    assert_eq!(err.as_deref(), Some("report kind must not be empty"));
}

/// A request written by hand without its `params` wrapper goes dead saying so, instead of
/// planning with no parameters and ending an empty report as ready.
#[test]
fn a_request_without_its_params_wrapper_goes_dead_and_makes_no_run() {
    let env = setup();
    let (kind, _done) = Numbers::new(10);
    let builder = Worker::builder(&env.queue).report("numbers", kind);
    let job_id = env
        .queue
        .enqueue(
            NewJob::new(report::request_job_type("numbers"), json!({"n": 12})).queue("reports"),
        )
        .expect("enqueue");
    drain(&builder);
    let job = env.queue.job(job_id).expect("job").expect("some");
    assert_eq!(job.status, JobStatus::Dead);
    let error = job.last_error.unwrap_or_default();
    assert!(error.contains("has field(s) n"), "{error}");
    assert!(
        env.queue
            .report_runs(Some("numbers"), 10)
            .expect("list")
            .is_empty(),
        "no run was made"
    );
}

#[test]
fn a_request_job_from_a_schedule_creates_its_own_run() {
    let env = setup();
    let (mut kind, _done) = Numbers::new(10);
    kind.csv_dir = Some(env.dir.path().join("out"));
    let builder = Worker::builder(&env.queue).report("numbers", kind);
    // What a periodic schedule (or another program) enqueues: no run id, just params.
    let job_id = env
        .queue
        .enqueue(report::request_job("numbers", json!({"n": 12})))
        .expect("enqueue");
    drain(&builder);
    let runs = env.queue.report_runs(Some("numbers"), 10).expect("list");
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!(
        (r.state, r.rows_done, r.request_job_id),
        (ReportState::Ready, 12, Some(job_id))
    );
    let path = r.result_path.clone().expect("a CSV");
    let text = std::fs::read_to_string(&path).expect("read the CSV");
    assert_eq!(text.lines().next(), Some("n,square,label"));
    assert_eq!(text.lines().nth(12), Some("11,121,row 11"));
    let result = env
        .queue
        .job(job_id)
        .expect("job")
        .expect("some")
        .result
        .expect("result");
    assert_eq!(result["run_id"], json!(r.id));
    // The request job joined a workflow of the run's own when it planned.
    let flow = env
        .queue
        .workflow(r.workflow_id.expect("the run's workflow"))
        .expect("read")
        .expect("the workflow");
    let request = flow.steps.iter().find(|s| s.id == job_id).expect("a step");
    assert_eq!(request.step.as_deref(), Some("request"));
    assert_eq!(flow.steps.len(), 1 + 2 + 1, "request, 2 chunks, finish");
    assert!(flow.is_finished());
}

fn step_names(flow: &WorkflowInfo) -> Vec<String> {
    flow.steps
        .iter()
        .map(|s| s.step.clone().unwrap_or_default())
        .collect()
}

#[test]
fn a_run_is_a_workflow_whose_finishing_step_waits_for_every_chunk() {
    let env = setup();
    let (kind, _done) = Numbers::new(10);
    let builder = Worker::builder(&env.queue).report("numbers", kind);
    let id = env
        .queue
        .request_report("numbers", json!({"n": 25}))
        .expect("request");
    let workflow_id = run(&env.queue, id)
        .workflow_id
        .expect("a workflow from the start");
    let requested = env
        .queue
        .workflow(workflow_id)
        .expect("read")
        .expect("the workflow");
    assert_eq!(requested.name, format!("report numbers run {id}"));
    assert_eq!(step_names(&requested), ["request"]);

    drain(&builder);
    let r = run(&env.queue, id);
    assert_eq!(
        (r.state, r.workflow_id),
        (ReportState::Ready, Some(workflow_id))
    );
    let flow = env
        .queue
        .workflow(workflow_id)
        .expect("read")
        .expect("the workflow");
    assert_eq!(
        step_names(&flow),
        ["request", "chunk 0", "chunk 1", "chunk 2", "finish"]
    );
    assert!(flow.is_finished());
    assert_eq!(flow.counts().get(&JobStatus::Succeeded), Some(&5));
    let chunk_ids: Vec<i64> = flow.steps[1..4].iter().map(|s| s.id).collect();
    let finish = &flow.steps[4];
    assert_eq!(Some(finish.id), r.finish_job_id);
    let waits: Vec<(i64, WaitState)> = finish
        .waits_for
        .iter()
        .map(|w| (w.job_id, w.state))
        .collect();
    assert_eq!(
        waits,
        chunk_ids
            .iter()
            .map(|&c| (c, WaitState::Done))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_report_step_holds_the_steps_after_it_until_the_report_is_ready() {
    let env = setup();
    let (kind, _done) = Numbers::new(10);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_in = Arc::clone(&seen);
    let queue = env.queue.clone();
    let builder = Worker::builder(&env.queue).report("numbers", kind).handler(
        "email_link",
        move |ctx: &JobContext| -> Result<(), JobError> {
            let finished = ctx
                .dependency_result("report: finish")
                .map_err(|e| JobError::permanent(e.to_string()))?
                .expect("the finishing step's result");
            let run_id = finished["run_id"].as_i64().expect("run_id");
            let state = queue.report_run(run_id).expect("read").expect("run").state;
            seen_in
                .lock()
                .expect("lock")
                .push((finished["rows"].clone(), state));
            Ok(())
        },
    );
    let flow = Workflow::new("monthly numbers")
        .step(Step::new(
            "report",
            report::request_job("numbers", json!({"n": 25})),
        ))
        .step(Step::new("email", NewJob::new("email_link", json!({}))).after("report"))
        .step(Step::new("archive", NewJob::new("email_link", json!({}))).after("report"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    // A step after the report, cancelled before it plans, waits for nothing more.
    let archive = ids.step("archive").expect("archive");
    env.queue
        .cancel_as(archive, "ops", "no archive this month")
        .expect("cancel");
    drain(&builder);

    assert_eq!(
        *seen.lock().expect("lock"),
        [(json!(25), ReportState::Ready)]
    );
    let flow = env
        .queue
        .workflow(ids.workflow_id)
        .expect("read")
        .expect("the workflow");
    assert_eq!(
        step_names(&flow),
        [
            "report",
            "email",
            "archive",
            "report: chunk 0",
            "report: chunk 1",
            "report: chunk 2",
            "report: finish"
        ]
    );
    let runs = env.queue.report_runs(Some("numbers"), 10).expect("runs");
    assert_eq!(runs[0].workflow_id, Some(ids.workflow_id));
    let archive = flow
        .steps
        .iter()
        .find(|s| s.id == archive)
        .expect("archive");
    assert_eq!(archive.status, JobStatus::Cancelled);
}

#[test]
fn a_dead_chunk_cancels_the_steps_waiting_for_the_report() {
    let env = setup();
    let (kind, _done) = Numbers::new(10);
    let kind = kind.hook(|_, chunk| {
        if chunk.index == 0 {
            return Err(JobError::permanent("source table is gone"));
        }
        Ok(())
    });
    let builder = Worker::builder(&env.queue).report("numbers", kind).handler(
        "email_link",
        |_: &JobContext| -> Result<(), JobError> {
            panic!("the email of a failed report must not run")
        },
    );
    let flow = Workflow::new("monthly numbers")
        .step(Step::new(
            "report",
            report::request_job("numbers", json!({"n": 25})),
        ))
        .step(Step::new("email", NewJob::new("email_link", json!({}))).after("report"));
    let ids = env.queue.enqueue_workflow(flow).expect("enqueue");
    drain(&builder);
    let runs = env.queue.report_runs(Some("numbers"), 10).expect("runs");
    assert_eq!(runs[0].state, ReportState::Failed);
    let email = env
        .queue
        .job(ids.step("email").expect("email"))
        .expect("read")
        .expect("the job");
    assert_eq!(
        (email.status, email.cancelled_by.as_deref(), email.attempts),
        (JobStatus::Cancelled, Some("dependency"), 0)
    );
}

#[test]
fn the_report_chunks_example_leaves_a_complete_csv_and_shows_progress() {
    let dir = crate::support::temp_dir();
    let out = crate::support::run_example("report_chunks", &[dir.path().as_os_str()]);
    let csv_path = dir.path().join("activity.csv");
    assert!(
        out.contains(&format!(
            "report ready: {} (20000 rows)",
            csv_path.display()
        )),
        "{out}"
    );
    assert!(out.contains("progress: 10/10 chunks, 20000 rows"), "{out}");
    assert!(out.contains("attempt failed: replica lagging"), "{out}");
    // Progress never goes back.
    let mut last = 0;
    for line in out.lines().filter(|l| l.starts_with("progress: ")) {
        let done: i64 = line["progress: ".len()..]
            .split('/')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("chunks done");
        assert!(done >= last, "progress went back: {out}");
        last = done;
    }
    // The CSV holds every demo row once, in order, as the example generates them.
    let actions = [
        "login",
        "view page",
        "upload, large",
        "said \"hi\"",
        "logout",
    ];
    let mut expected = String::from("id,user_id,action,at\r\n");
    for id in 1..=20_000i64 {
        let action = csv_field(actions[(id % 5) as usize]);
        expected.push_str(&format!(
            "{id},{},{action},{}\r\n",
            id % 97,
            1_700_000_000_000 + id * 1000
        ));
    }
    let text = std::fs::read_to_string(&csv_path).expect("the example left its CSV");
    assert_eq!(text.lines().count(), 20_001);
    assert!(text == expected, "the example's CSV is not the demo table");
}
