//! ReportStore and WebhookStore on PostgreSQL: webhook endpoints managed from two queues on
//! one schema; report runs, chunks and rows read back as a UI sees them (a run whose chunk
//! job went dead reads as failed), deleted with everything they own; and reports run by
//! workers, with the finishing job running once when the last two chunks complete at the
//! same moment in two "processes". Time is a `ManualClock`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, Sender};
use diesel::sql_types::BigInt;
use diesel::{sql_query, PgConnection, QueryableByName, RunQueryDsl};
use litejobs::builtin::report::{
    Chunk, ChunkOutput, Finish, ReportKind, ReportResult, ReportRun, ReportState, REPORT_QUEUE,
};
use litejobs::testing::drain;
use litejobs::{JobContext, JobError, Queue, Worker};
use serde_json::{json, Value};

use crate::support::pg::setup;
use crate::support::scripted::{recv, wait_bound, Rendezvous, WAIT};
use crate::support::START_MS;

#[derive(QueryableByName, Debug)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName, Debug)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

fn count(conn: &mut PgConnection, sql: &str) -> i64 {
    sql_query(sql)
        .get_result::<Count>(conn)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .n
}

fn insert_id(conn: &mut PgConnection, sql: &str) -> i64 {
    sql_query(sql)
        .get_result::<Id>(conn)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .id
}

fn exec(conn: &mut PgConnection, sql: &str) {
    sql_query(sql)
        .execute(conn)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn run(queue: &Queue, id: i64) -> ReportRun {
    queue
        .report_run(id)
        .expect("reading the run")
        .expect("the run exists")
}

#[cfg(feature = "webhook")]
#[test]
fn pg_webhook_endpoints_are_added_changed_rotated_and_removed_across_queues() {
    use litejobs::builtin::webhook::{Endpoints, NewEndpoint};
    use litejobs::limits::RateLimit;
    use litejobs::ErrorKind;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const NEW_SECRET: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let here = Endpoints::new(&queue);
    let there = Endpoints::new(&schema.queue(&clock));
    let crm = here
        .add(
            NewEndpoint::new("https://crm.example.com/hooks", SECRET)
                .rate_limit(RateLimit::per_second(5))
                .description("CRM production"),
        )
        .expect("add");
    let off = there
        .add(NewEndpoint::new("http://old.example.com/in", SECRET).disabled())
        .expect("add");
    assert!(off > crm);

    let e = there.get(crm).expect("get").expect("exists");
    assert_eq!(e.url, "https://crm.example.com/hooks");
    assert_eq!(e.secret(), SECRET);
    assert_eq!(e.previous_secret(), None);
    assert!(e.enabled);
    assert_eq!((e.rate_limit, e.rate_period_ms), (Some(5), 1000));
    assert_eq!(e.description, "CRM production");
    assert_eq!((e.created_at, e.updated_at), (START_MS, START_MS));
    let listed: Vec<(i64, bool)> = here
        .list()
        .expect("list")
        .into_iter()
        .map(|e| (e.id, e.enabled))
        .collect();
    assert_eq!(listed, vec![(crm, true), (off, false)]);

    clock.advance(Duration::from_secs(1));
    here.set_url(crm, "https://crm.example.com/v2/hooks")
        .expect("set_url");
    here.set_rate_limit(crm, None).expect("set_rate_limit");
    here.set_description(crm, "CRM (v2)")
        .expect("set_description");
    there.disable(crm, "410 Gone on evt_1").expect("disable");
    let e = here.get(crm).expect("get").expect("exists");
    assert_eq!(e.url, "https://crm.example.com/v2/hooks");
    assert_eq!(e.rate_limit, None);
    assert_eq!(e.description, "CRM (v2)");
    assert!(!e.enabled);
    assert_eq!(e.disabled_reason.as_deref(), Some("410 Gone on evt_1"));
    assert_eq!(e.updated_at, START_MS + 1_000);
    here.enable(crm).expect("enable");
    let e = there.get(crm).expect("get").expect("exists");
    assert!(e.enabled && e.disabled_reason.is_none());

    // What another program reads: enabled is 0 or 1.
    let mut raw = schema.raw();
    assert_eq!(
        count(
            &mut raw,
            &format!(
                "SELECT COUNT(*) AS n FROM webhook_endpoints
                 WHERE (id = {crm} AND enabled = 1) OR (id = {off} AND enabled = 0)"
            )
        ),
        2
    );

    clock.advance(Duration::from_secs(1));
    there
        .rotate_secret(crm, NEW_SECRET, Duration::from_secs(3600))
        .expect("rotate");
    let e = here.get(crm).expect("get").expect("exists");
    assert_eq!(e.secret(), NEW_SECRET);
    assert_eq!(e.previous_secret(), Some(SECRET));
    assert_eq!(
        e.previous_secret_expires_at,
        Some(START_MS + 2_000 + 3_600_000)
    );

    // Removed: gone for both queues; changing or removing it again is NotFound.
    here.remove(off).expect("remove");
    assert_eq!(there.get(off).expect("get"), None);
    for err in [
        there.remove(off).expect_err("removed twice"),
        there
            .set_url(off, "https://x.example.com/")
            .expect_err("gone"),
        there.enable(off).expect_err("gone"),
        there
            .rotate_secret(off, NEW_SECRET, Duration::from_secs(1))
            .expect_err("gone"),
    ] {
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    }
    // Ids come from a sequence: the removed newest id is not handed out again.
    let next = here
        .add(NewEndpoint::new("https://n.example.com/", SECRET))
        .expect("add");
    assert!(next > off, "{next} after {off}");
    assert_eq!(here.list().expect("list").len(), 2);
}

/// Runs, chunks, rows and jobs written by plain SQL (as another program, or an earlier
/// version, would leave them), read through the queue.
#[test]
fn pg_report_runs_read_progress_rows_and_lost_jobs_and_delete_with_their_rows() {
    let Some((schema, queue, _clock)) = setup() else {
        return;
    };
    let mut raw = schema.raw();
    let dead = insert_id(
        &mut raw,
        &format!(
            "INSERT INTO jobs (job_type, payload, status, last_error, created_at, run_at,
                               updated_at, finished_at, queue)
             VALUES ('report.numbers.chunk', '{{}}', 'dead', 'source table is gone',
                     {START_MS}, {START_MS}, {START_MS}, {START_MS}, 'reports') RETURNING id"
        ),
    );
    let queued = insert_id(
        &mut raw,
        &format!(
            "INSERT INTO jobs (job_type, payload, created_at, run_at, updated_at, queue)
             VALUES ('report.numbers.chunk', '{{}}', {START_MS}, {START_MS}, {START_MS},
                     'reports') RETURNING id"
        ),
    );
    let new_run = |raw: &mut PgConnection, kind: &str, state: &str, created: i64| {
        insert_id(
            raw,
            &format!(
                "INSERT INTO report_runs (kind, params, state, chunks_total, chunks_done,
                                          rows_done, error, planned_at, created_at, updated_at)
                 VALUES ('{kind}', '{{\"n\": 3}}', '{state}', 2, 1, 3,
                         CASE WHEN '{state}' = 'failed' THEN 'its own error' END,
                         {created}, {created}, {created})
                 RETURNING id"
            ),
        )
    };
    let lost = new_run(&mut raw, "numbers", "processing", START_MS);
    let waiting = new_run(&mut raw, "numbers", "processing", START_MS + 1);
    let failed = new_run(&mut raw, "other", "failed", START_MS + 2);
    let tie = new_run(&mut raw, "other", "processing", START_MS + 2);
    exec(
        &mut raw,
        &format!(
            "INSERT INTO report_chunks (run_id, chunk, spec, state, job_id) VALUES
                 ({lost}, 0, '{{}}', 'done', NULL), ({lost}, 1, '{{}}', 'pending', {dead}),
                 ({waiting}, 0, '{{}}', 'done', {dead}), ({waiting}, 1, '{{}}', 'pending', {queued}),
                 ({failed}, 0, '{{}}', 'pending', {dead})"
        ),
    );
    // Rows out of order, in chunks 0, 2 and 10 (numeric order, not text), one not JSON.
    exec(
        &mut raw,
        &format!(
            "INSERT INTO report_rows (run_id, chunk, seq, data) VALUES
                 ({waiting}, 10, 0, '[5]'), ({waiting}, 0, 1, '[1]'), ({waiting}, 2, 0, 'plain'),
                 ({waiting}, 0, 0, '[0]'), ({waiting}, 2, 1, '[3]'), ({waiting}, 0, 2, '[2]'),
                 ({lost}, 0, 0, '[\"other run\"]')"
        ),
    );

    // A pending chunk's job is dead: the run cannot finish, and reads as failed with why.
    let r = run(&queue, lost);
    assert_eq!(r.state, ReportState::Failed);
    assert_eq!(
        r.error.as_deref(),
        Some(format!("job {dead} (report.numbers.chunk) is dead: source table is gone").as_str())
    );
    assert_eq!(r.params, json!({"n": 3}));
    assert_eq!((r.chunks_total, r.chunks_done, r.rows_done), (2, 1, 3));
    // A done chunk's dead job (an earlier attempt's leftovers) does not matter, nor does a
    // failed run's own error get replaced.
    let r = run(&queue, waiting);
    assert_eq!((r.state, r.error), (ReportState::Processing, None));
    let r = run(&queue, failed);
    assert_eq!(
        (r.state, r.error.as_deref()),
        (ReportState::Failed, Some("its own error"))
    );
    assert_eq!(queue.report_run(tie + 1000).expect("read"), None);

    // Newest first (ties by id), of one kind or of all, at most `limit`.
    let ids = |runs: Vec<ReportRun>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        ids(queue.report_runs(None, 10).expect("list")),
        vec![tie, failed, waiting, lost]
    );
    assert_eq!(
        ids(queue.report_runs(None, 2).expect("list")),
        vec![tie, failed]
    );
    let numbers = queue.report_runs(Some("numbers"), 10).expect("list");
    assert_eq!(
        numbers.iter().map(|r| (r.id, r.state)).collect::<Vec<_>>(),
        vec![
            (waiting, ReportState::Processing),
            (lost, ReportState::Failed)
        ]
    );
    assert!(queue
        .report_runs(Some("unknown"), 10)
        .expect("list")
        .is_empty());

    // Rows in (chunk, seq) order, paged; a row that is not JSON comes back as a string.
    let all = queue.report_rows(waiting, 0, 100).expect("rows");
    assert_eq!(
        all,
        vec![
            json!([0]),
            json!([1]),
            json!([2]),
            json!("plain"),
            json!([3]),
            json!([5])
        ]
    );
    assert_eq!(
        queue.report_rows(waiting, 2, 3).expect("rows"),
        all[2..5].to_vec()
    );
    assert!(queue.report_rows(waiting, 6, 10).expect("rows").is_empty());
    assert_eq!(
        queue.report_rows(waiting, 0, usize::MAX).expect("rows"),
        all
    );

    // Deleting a run takes its chunks and rows, and nothing of the others.
    assert!(queue.delete_report_run(waiting).expect("delete"));
    assert!(!queue.delete_report_run(waiting).expect("delete again"));
    assert_eq!(queue.report_run(waiting).expect("read"), None);
    assert_eq!(
        count(
            &mut raw,
            &format!(
                "SELECT (SELECT COUNT(*) FROM report_chunks WHERE run_id = {waiting})
                      + (SELECT COUNT(*) FROM report_rows WHERE run_id = {waiting}) AS n"
            )
        ),
        0
    );
    assert_eq!(
        count(
            &mut raw,
            "SELECT (SELECT COUNT(*) FROM report_chunks) + (SELECT COUNT(*) FROM report_rows)
                    + (SELECT COUNT(*) FROM jobs) AS n"
        ),
        3 + 1 + 2,
        "the other runs' chunks and rows, and the jobs, are still there"
    );
}

/// The numbers 0..n in chunks of `size`: each row is `[i, i*i]`.
#[derive(Clone)]
struct Numbers {
    size: u64,
    meet: Option<Arc<Mutex<Rendezvous>>>,
    fail_first_attempt_of: Option<u32>,
    finishes: Arc<AtomicUsize>,
    finished: Sender<i64>,
}

impl Numbers {
    fn new(size: u64) -> (Numbers, Receiver<i64>) {
        let (finished, done) = unbounded();
        let kind = Numbers {
            size,
            meet: None,
            fail_first_attempt_of: None,
            finishes: Arc::new(AtomicUsize::new(0)),
            finished,
        };
        (kind, done)
    }
}

fn row(i: u64) -> Value {
    json!([i, i * i])
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
        if self.fail_first_attempt_of == Some(chunk.index) && ctx.attempt() == 1 {
            return Err(JobError::retry(format!("chunk {} not yet", chunk.index)));
        }
        if let Some(meet) = &self.meet {
            // Both chunks of a run are in their handlers at once, then both write.
            let meeting = meet.lock().unwrap_or_else(|p| p.into_inner()).clone();
            assert!(meeting.arrive(WAIT), "the two chunks did not run together");
        }
        let from = chunk.spec["from"].as_u64().unwrap_or(0);
        let to = chunk.spec["to"].as_u64().unwrap_or(0);
        Ok(ChunkOutput::rows((from..to).map(row).collect()))
    }

    fn finish(&self, _ctx: &JobContext, finish: &Finish<'_>) -> Result<ReportResult, JobError> {
        self.finishes.fetch_add(1, Ordering::SeqCst);
        let _ = self.finished.send(finish.run().id);
        Ok(ReportResult::table())
    }
}

/// A report requested, planned, run in chunks by a worker (one chunk retried) and finished,
/// read back at each step.
#[test]
fn pg_a_report_fans_out_into_chunks_and_is_polled_to_ready() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let (mut kind, _done) = Numbers::new(10);
    kind.fail_first_attempt_of = Some(1);
    let finishes = Arc::clone(&kind.finishes);
    let builder = Worker::builder(&queue).report("numbers", kind);
    let id = queue
        .request_report("numbers", json!({"n": 25}))
        .expect("request");
    let requested = run(&queue, id);
    assert_eq!(requested.state, ReportState::Processing);
    assert_eq!(requested.planned_at, None);
    assert!(requested.request_job_id.is_some());

    let first = drain(&builder).expect("drain");
    assert_eq!((first.succeeded, first.failed), (1 + 2, 1), "{first:?}");
    let half = run(&queue, id);
    assert_eq!(
        (half.chunks_total, half.chunks_done, half.rows_done),
        (3, 2, 15)
    );
    // The finishing step is planned with the chunks, held until the last of them is done.
    let finish = queue
        .job(half.finish_job_id.expect("planned with the chunks"))
        .expect("read")
        .expect("the finishing job");
    assert_eq!(
        (finish.status, finish.waiting_for),
        (litejobs::JobStatus::Queued, 1),
        "held for chunk 1"
    );
    assert_eq!(queue.report_rows(id, 0, 100).expect("rows").len(), 15);

    clock.advance(Duration::from_secs(3600));
    let second = drain(&builder).expect("drain");
    assert_eq!(second.succeeded, 1 + 1, "{second:?}");
    let ready = run(&queue, id);
    assert_eq!(ready.state, ReportState::Ready);
    assert_eq!(
        (ready.chunks_done, ready.rows_done, ready.result_rows),
        (3, 25, Some(25))
    );
    assert!(ready.finish_job_id.is_some());
    assert_eq!(ready.finished_at, Some(START_MS + 3_600_000));
    assert_eq!(finishes.load(Ordering::SeqCst), 1);
    assert_eq!(
        queue.report_rows(id, 0, 1000).expect("rows"),
        (0..25).map(row).collect::<Vec<_>>()
    );
    let mut raw = schema.raw();
    assert_eq!(
        count(
            &mut raw,
            &format!("SELECT COUNT(*) AS n FROM report_chunks WHERE run_id = {id} AND state = 'done' AND job_id IS NOT NULL")
        ),
        3
    );
}

/// Two workers on two queues (two processes), one thread each;
/// the two chunks of each run meet in their handlers, so their completions race. The
/// finishing step, which waits for both chunks' jobs, is released once.
#[test]
fn pg_the_finisher_runs_once_when_the_last_chunks_complete_together_in_two_processes() {
    let Some((schema, queue, clock)) = setup() else {
        return;
    };
    let other = schema.queue(&clock);
    let rounds = 3;
    let meet = Arc::new(Mutex::new(Rendezvous::new(2)));
    let (mut kind, done) = Numbers::new(5);
    kind.meet = Some(Arc::clone(&meet));
    let finishes = Arc::clone(&kind.finishes);
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
    let a = worker(&queue, "a");
    let b = worker(&other, "b");
    let mut runs = Vec::new();
    for _ in 0..rounds {
        *meet.lock().unwrap_or_else(|p| p.into_inner()) = Rendezvous::new(2);
        let id = queue
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
    let mut raw = schema.raw();
    for id in runs {
        let r = run(&queue, id);
        assert_eq!(
            (r.state, r.chunks_done, r.rows_done),
            (ReportState::Ready, 2, 10)
        );
        assert_eq!(
            count(
                &mut raw,
                &format!(
                    "SELECT COUNT(*) AS n FROM jobs WHERE job_type = 'report.pair.finish'
                       AND (payload::jsonb ->> 'run_id')::bigint = {id}"
                )
            ),
            1,
            "one finishing job for run {id}"
        );
    }
}
