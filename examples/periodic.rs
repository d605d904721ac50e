//! The nightly activity report: a cron schedule (`0 2 * * *`, UTC) enqueues a report
//! request once per night, even with several workers; after downtime, only the most recent
//! missed night runs. A `ManualClock` moves through the nights here, and
//! `Scheduler::tick` plays the part of the worker's scheduler thread; in production the same
//! `Periodic` goes to `Worker::builder(&queue).periodic(nightly)` and the worker ticks at
//! each slot by itself.
//!
//! `cargo run --example periodic [OUTPUT_DIR]` leaves one CSV per reported day (default: a
//! `litejobs-periodic-example` folder in the system's temp dir).

use std::path::PathBuf;

use litejobs::builtin::report::{
    self, Chunk, ChunkOutput, Finish, ReportKind, ReportResult, ReportState,
};
use litejobs::maintenance::{Periodic, Scheduler};
use litejobs::{testing, JobContext, JobError, ManualClock, Queue, Worker};
use serde_json::{json, Value};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
/// 2024-03-01T00:00:00Z.
const MARCH_1: i64 = 1_709_251_200_000;

fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|| ms.to_string())
}

fn day(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// Yesterday's activity (the UTC day before the night the report runs), in 6-hour chunks.
struct DailyActivity {
    db: PathBuf,
    out_dir: PathBuf,
}

impl ReportKind for DailyActivity {
    fn plan(&self, params: &Value) -> Result<Vec<Value>, JobError> {
        let night = params["night_ms"]
            .as_i64()
            .ok_or_else(|| JobError::permanent("params.night_ms is missing"))?;
        let day_start = night.div_euclid(DAY) * DAY - DAY;
        Ok((0..4)
            .map(
                |i| json!({"from": day_start + i * 6 * HOUR, "to": day_start + (i + 1) * 6 * HOUR}),
            )
            .collect())
    }

    fn run_chunk(&self, _ctx: &JobContext, chunk: &Chunk) -> Result<ChunkOutput, JobError> {
        let conn = rusqlite::Connection::open(&self.db)?;
        let mut stmt = conn.prepare(
            "SELECT at, user_id, action FROM activity WHERE at >= ?1 AND at < ?2 ORDER BY at",
        )?;
        let rows = stmt
            .query_map(
                [chunk.spec["from"].as_i64(), chunk.spec["to"].as_i64()],
                |r| {
                    Ok(json!([
                        utc(r.get(0)?),
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?
                    ]))
                },
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(ChunkOutput::rows(rows))
    }

    fn finish(&self, _ctx: &JobContext, finish: &Finish<'_>) -> Result<ReportResult, JobError> {
        let night = finish.run().params["night_ms"].as_i64().unwrap_or_default();
        let path = self
            .out_dir
            .join(format!("activity-{}.csv", day(night - DAY)));
        let rows = finish.write_csv(&path, &["at", "user_id", "action"])?;
        Ok(ReportResult::file(path).row_count(rows))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("litejobs-periodic-example"));
    let scratch = tempfile::tempdir()?;
    let db = scratch.path().join("app.db");
    let clock = ManualClock::new(MARCH_1);
    let queue = Queue::builder().clock(clock.clone()).open(&db)?;

    // A week of demo activity, one row every 10 minutes.
    let mut conn = rusqlite::Connection::open(&db)?;
    conn.execute_batch("CREATE TABLE activity (at INTEGER NOT NULL, user_id INTEGER NOT NULL, action TEXT NOT NULL)")?;
    let tx = conn.transaction()?;
    let mut at = MARCH_1 - 2 * DAY;
    while at < MARCH_1 + 6 * DAY {
        tx.execute(
            "INSERT INTO activity (at, user_id, action) VALUES (?1, ?2, ?3)",
            rusqlite::params![
                at,
                (at / 600_000) % 13,
                if at % 3 == 0 { "login" } else { "view" }
            ],
        )?;
        at += 600_000;
    }
    tx.commit()?;

    let nightly = Periodic::cron(
        "0 2 * * *",
        report::request_job("daily_activity", json!({})),
    )?
    .named("nightly_activity_report")
    .slot_field("params.night_ms");
    let worker = Worker::builder(&queue)
        .report(
            "daily_activity",
            DailyActivity {
                db: db.clone(),
                out_dir,
            },
        )
        .periodic(nightly.clone());
    let scheduler = Scheduler::new(&queue, vec![nightly])?;

    let first = scheduler.tick()?;
    println!(
        "{}: schedule {:?} registered; next slot {}",
        utc(clock.now()),
        "0 2 * * *",
        utc(first.next_slot_at.unwrap_or_default())
    );
    let tick_at = |ms: i64, note: &str| -> Result<(), Box<dyn std::error::Error>> {
        clock.set(ms);
        let report = scheduler.tick()?;
        if report.enqueued.is_empty() {
            println!("{}: {note}nothing due", utc(ms));
            return Ok(());
        }
        for slot in &report.enqueued {
            let skipped = if slot.skipped_earlier {
                " (earlier missed nights skipped)"
            } else {
                ""
            };
            println!(
                "{}: {note}enqueued the slot of {}{skipped}",
                utc(ms),
                utc(slot.slot_ms)
            );
        }
        testing::drain(&worker)?;
        for run in queue.report_runs(Some("daily_activity"), 1)? {
            if run.state != ReportState::Ready {
                return Err(format!("run {} is {}: {:?}", run.id, run.state, run.error).into());
            }
            println!(
                "  report run {}: {} rows -> {}",
                run.id,
                run.result_rows.unwrap_or_default(),
                run.result_path
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            );
        }
        Ok(())
    };
    tick_at(MARCH_1 + 2 * HOUR + 30_000, "")?;
    tick_at(MARCH_1 + 2 * HOUR + 60_000, "again: ")?;
    tick_at(MARCH_1 + DAY + 2 * HOUR, "")?;
    // Down from March 2 until March 5, 09:00: the nights of March 3, 4 and 5 were missed.
    tick_at(MARCH_1 + 4 * DAY + 9 * HOUR, "back after downtime: ")?;
    let runs = queue.report_runs(Some("daily_activity"), 100)?;
    println!("report runs: {}", runs.len());
    Ok(())
}
