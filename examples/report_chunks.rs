//! A CSV activity report built in chunks: a demo table of 20 000 activity rows is
//! split into key ranges of 2 000, each chunk is a job, a finishing job writes the CSV once
//! every chunk is done, and the progress a UI would poll is printed while it runs. One
//! chunk fails on its first attempt and is retried: the CSV is still complete.
//!
//! `cargo run --example report_chunks [OUTPUT_DIR]` leaves `OUTPUT_DIR/activity.csv`
//! (default: a `litejobs-report-example` folder in the system's temp dir).

use std::path::PathBuf;
use std::time::Duration;

use litejobs::builtin::report::{
    self, Chunk, ChunkOutput, Finish, ReportKind, ReportResult, ReportState, REPORT_QUEUE,
};
use litejobs::{Event, JobContext, JobError, Queue, RetryPolicy, Worker};
use serde_json::{json, Value};

const ROWS: i64 = 20_000;
const PER_CHUNK: i64 = 2_000;
const ACTIONS: [&str; 5] = [
    "login",
    "view page",
    "upload, large",
    "said \"hi\"",
    "logout",
];

/// The activity report: rows of the `activity` table by id range, as a CSV file.
struct ActivityReport {
    db: PathBuf,
    out: PathBuf,
}

impl ReportKind for ActivityReport {
    fn plan(&self, params: &Value) -> Result<Vec<Value>, JobError> {
        let max = params["max_id"]
            .as_i64()
            .ok_or_else(|| JobError::permanent("params.max_id is missing"))?;
        Ok((1..=max)
            .step_by(PER_CHUNK as usize)
            .map(|from| json!({"from": from, "to": (from + PER_CHUNK - 1).min(max)}))
            .collect())
    }

    fn run_chunk(&self, ctx: &JobContext, chunk: &Chunk) -> Result<ChunkOutput, JobError> {
        if chunk.index == 3 && ctx.attempt() == 1 {
            return Err(JobError::retry("replica lagging (a demo failure; retried)"));
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
        Ok(ChunkOutput::rows(rows))
    }

    fn finish(&self, _ctx: &JobContext, finish: &Finish<'_>) -> Result<ReportResult, JobError> {
        let rows = finish.write_csv(&self.out, &["id", "user_id", "action", "at"])?;
        Ok(ReportResult::file(&self.out).row_count(rows))
    }

    fn chunk_timeout(&self) -> Duration {
        Duration::from_secs(60)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("litejobs-report-example"));
    let out = out_dir.join("activity.csv");
    let scratch = tempfile::tempdir()?;
    let db = scratch.path().join("app.db");
    let queue = Queue::open(&db)?;

    // The application's own table, in the same file.
    let mut conn = rusqlite::Connection::open(&db)?;
    conn.execute_batch(
        "CREATE TABLE activity (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL,
                                action TEXT NOT NULL, at INTEGER NOT NULL)",
    )?;
    let tx = conn.transaction()?;
    for id in 1..=ROWS {
        tx.execute(
            "INSERT INTO activity (id, user_id, action, at) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![
                id,
                id % 97,
                ACTIONS[(id % 5) as usize],
                1_700_000_000_000 + id * 1000
            ],
        )?;
    }
    tx.commit()?;
    println!("demo table: {ROWS} activity rows");

    let events = queue.subscribe();
    let worker = Worker::builder(&queue)
        .report(
            "activity",
            ActivityReport {
                db: db.clone(),
                out: out.clone(),
            },
        )
        .queue(REPORT_QUEUE, 2)
        .concurrency(0)
        .retry_policy(
            report::chunk_job_type("activity"),
            RetryPolicy::schedule(vec![Duration::from_millis(200)]),
        )
        .start()?;

    let run_id = queue.request_report("activity", json!({"max_id": ROWS}))?;
    println!("requested report run {run_id}");
    let mut shown = (-1, -1);
    loop {
        let event = events.recv_timeout(Duration::from_secs(60))?;
        if let Event::Finished {
            job_type,
            error: Some(error),
            ..
        } = &event
        {
            println!("  {job_type} attempt failed: {error}");
        }
        let run = queue.report_run(run_id)?.ok_or("the run vanished")?;
        if (run.chunks_done, run.chunks_total) != shown && run.chunks_total > 0 {
            shown = (run.chunks_done, run.chunks_total);
            println!(
                "progress: {}/{} chunks, {} rows ({}, {:.0}%)",
                run.chunks_done,
                run.chunks_total,
                run.rows_done,
                run.state,
                run.fraction_done() * 100.0
            );
        }
        match run.state {
            ReportState::Processing => continue,
            ReportState::Ready => {
                let path = run.result_path.ok_or("no result path")?;
                println!(
                    "report ready: {} ({} rows)",
                    path.display(),
                    run.result_rows.unwrap_or_default()
                );
                break;
            }
            ReportState::Failed => {
                return Err(format!("report failed: {}", run.error.unwrap_or_default()).into())
            }
        }
    }
    worker.shutdown(Duration::from_secs(10))?;
    Ok(())
}
